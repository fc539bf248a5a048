/*
 * test_fuse.c - face fusion (src/face/fuse*.c), each stage against a known answer, then the
 * whole on the suite's photos (astronaut.png as the target, tools/make_fuse_images.py's
 * reshaped, recoloured copy as the source), faces found by the bundled detector:
 *   - Procrustes recovers a known similarity (error printed, 1e-9);
 *   - the Delaunay triangulation tiles the hull: every pixel centre inside it in exactly one
 *     triangle, none outside; no point inside any triangle's circumcircle;
 *   - a piecewise-affine warp of an image onto its own points is the identity (1e-4);
 *   - the Poisson solver reproduces a discrete-harmonic function from its boundary values;
 *   - Lab round trip (0.05 grey levels) and the colour transfer's mean and spread;
 *   - ratio 0 returns the target bit for bit; pixels outside the ring never change, and on
 *     the photos none beyond two feathers of the hull of the target's and fused landmarks;
 *   - FaceMesh on the output at ratio 1 finds an inner face nearer the source's shape than
 *     the target's, at 0.5 in between; no seam at the blend's edge (and the measure does
 *     see a 4-level one); the eyes and the mouth's inside taken whole from one face (never
 *     cross-dissolved); bad inputs.
 */
#include "test.h"

#include "../src/face/fuse_internal.h"

#include <stdint.h>
#include <time.h>

#define DATA AG_SOURCE_DIR "/tests/data/"
#define MODELS AG_SOURCE_DIR "/models/"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* [0, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

/* ---- stages ----------------------------------------------------------------------------- */

static int test_procrustes(void) {
    ag_fuse_point from[100], to[100];
    double s = 1.37, th = 0.61, tx = -40.5, ty = 212.25;
    for (int i = 0; i < 100; i++) {
        from[i] = (ag_fuse_point){urand() * 300, urand() * 200};
        to[i] = (ag_fuse_point){s * (cos(th) * from[i].x - sin(th) * from[i].y) + tx,
                                s * (sin(th) * from[i].x + cos(th) * from[i].y) + ty};
    }
    ag_affine m = ag_fuse_similarity(from, to, 100);
    double e = fabs(m.a - s * cos(th)) + fabs(m.b + s * sin(th)) + fabs(m.d - s * sin(th)) +
               fabs(m.e - s * cos(th)) + fabs(m.c - tx) + fabs(m.f - ty);
    printf("  procrustes: parameter error %.2e (tolerance 1e-9)\n", e);
    CHECK(e < 1e-9);
    /* with noise the fit is still the least-squares one: the residual beats a perturbed map */
    for (int i = 0; i < 100; i++)
        to[i].x += urand() - 0.5, to[i].y += urand() - 0.5;
    m = ag_fuse_similarity(from, to, 100);
    double best = 0, worse = 0;
    ag_affine p = m;
    p.a *= 1.001, p.e *= 1.001;
    for (int i = 0; i < 100; i++) {
        ag_fuse_point q = ag_fuse_apply(&m, from[i]), r = ag_fuse_apply(&p, from[i]);
        best += pow(q.x - to[i].x, 2) + pow(q.y - to[i].y, 2);
        worse += pow(r.x - to[i].x, 2) + pow(r.y - to[i].y, 2);
    }
    CHECK(best < worse);
    return 0;
}

/* Points like the fusion's: a cloud, a closed "mouth" (near-duplicate pairs), a ring. */
static int make_points(ag_fuse_point *p) {
    int n = 0;
    for (int i = 0; i < 300; i++) {
        double r = 80 * sqrt(urand()), t = 2 * M_PI * urand();
        p[n++] = (ag_fuse_point){150 + r * cos(t), 120 + r * sin(t)};
    }
    for (int i = 0; i < 20; i++) {
        p[n++] = (ag_fuse_point){130 + 2.0 * i, 160};
        p[n++] = (ag_fuse_point){130 + 2.0 * i, 160.0004}; /* skipped: within 1e-3 */
    }
    for (int k = 0; k < AG_FUSE_RING; k++) {
        double t = 2 * M_PI * k / AG_FUSE_RING;
        p[n++] = (ag_fuse_point){150 + 100 * cos(t), 120 + 95 * sin(t)};
    }
    return n;
}

static int test_triangulation(void) {
    ag_fuse_point p[AG_FUSE_POINTS];
    int tri[AG_FUSE_MAX_TRIANGLES][3], nt = 0, n = make_points(p);
    ag_fuse_triangulate(p, n, tri, &nt);
    CHECK(nt > 0);
    /* Delaunay: no vertex strictly inside a circumcircle (relative tolerance). */
    for (int t = 0; t < nt; t++) {
        ag_fuse_point a = p[tri[t][0]], b = p[tri[t][1]], c = p[tri[t][2]];
        CHECK((b.x - a.x) * (c.y - a.y) - (b.y - a.y) * (c.x - a.x) >= 0);
        double bx = b.x - a.x, by = b.y - a.y, cx = c.x - a.x, cy = c.y - a.y;
        double d = 2 * (bx * cy - by * cx);
        if (fabs(d) < 1e-9)
            continue;
        double ux = (cy * (bx * bx + by * by) - by * (cx * cx + cy * cy)) / d;
        double uy = (bx * (cx * cx + cy * cy) - cx * (bx * bx + by * by)) / d;
        double r2 = ux * ux + uy * uy;
        for (int i = 0; i < n; i++) {
            if (i > 300 && i < 340 && (i - 300) % 2)
                continue; /* the skipped near-duplicates: vertices of nothing */
            double dx = p[i].x - a.x - ux, dy = p[i].y - a.y - uy;
            CHECK_MSG(dx * dx + dy * dy >= r2 * (1 - 1e-6), "point %d inside triangle %d", i, t);
        }
    }
    /* Coverage: each pixel centre of 300x240 in exactly one triangle inside the ring's hull
     * (the ring is convex), none outside. */
    int W = 300, H = 240;
    int16_t *map = ag_malloc(sizeof *map * (size_t)W * H);
    uint8_t *count = ag_calloc((size_t)W * H, 1);
    CHECK(map && count);
    for (int t = 0; t < nt; t++) {
        ag_fuse_raster(map, W, H, p, (const int(*)[3])tri + t, 1);
        for (size_t i = 0; i < (size_t)W * H; i++)
            count[i] += map[i] >= 0;
    }
    const ag_fuse_point *ring = p + n - AG_FUSE_RING;
    int bad = 0, inside = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            double cx = x + 0.5, cy = y + 0.5, margin = 1e300;
            for (int k = 0; k < AG_FUSE_RING; k++) {
                ag_fuse_point a = ring[k], b = ring[(k + 1) % AG_FUSE_RING];
                double e = ((b.x - a.x) * (cy - a.y) - (b.y - a.y) * (cx - a.x)) /
                           hypot(b.x - a.x, b.y - a.y);
                margin = fmin(margin, e);
            }
            if (fabs(margin) < 1e-6)
                continue; /* on the hull's edge: either answer */
            int want = margin > 0 ? 1 : 0;
            inside += want;
            bad += count[(size_t)y * W + x] != want;
        }
    printf("  triangulation: %d points, %d triangles, %d pixel centres inside, %d wrong\n", n, nt,
           inside, bad);
    ag_free(count);
    ag_free(map);
    CHECK(bad == 0 && inside > 20000);
    return 0;
}

static int test_warp_identity(void) {
    ag_fuse_point p[AG_FUSE_POINTS];
    int tri[AG_FUSE_MAX_TRIANGLES][3], nt = 0, n = make_points(p);
    ag_fuse_triangulate(p, n, tri, &nt);
    int W = 300, H = 240;
    ag_image im = {W, H, 3, ag_malloc((size_t)W * H * 3)};
    int16_t *map = ag_malloc(sizeof *map * (size_t)W * H);
    float *out = ag_calloc((size_t)W * H * 3, sizeof(float));
    ag_affine *m = ag_malloc(sizeof *m * (size_t)nt);
    CHECK(im.pixels && map && out && m);
    for (size_t i = 0; i < (size_t)W * H * 3; i++)
        im.pixels[i] = (uint8_t)(urand() * 256);
    for (int t = 0; t < nt; t++) {
        ag_fuse_point abc[3] = {p[tri[t][0]], p[tri[t][1]], p[tri[t][2]]};
        m[t] = ag_fuse_triangle_map(abc, abc);
    }
    ag_fuse_raster(map, W, H, p, (const int(*)[3])tri, nt);
    ag_fuse_sample(out, map, W, H, m, &im);
    double worst = 0;
    size_t covered = 0;
    for (size_t i = 0; i < (size_t)W * H; i++) {
        if (map[i] < 0)
            continue;
        covered++;
        for (int c = 0; c < 3; c++)
            worst = fmax(worst, fabs((double)out[i * 3 + c] - im.pixels[i * 3 + c]));
    }
    printf("  warp onto its own points: %zu pixels, max error %.2e (tolerance 1e-4)\n", covered,
           worst);
    ag_free(m);
    ag_free(out);
    ag_free(map);
    ag_image_fini(&im);
    CHECK(covered > 20000 && worst < 1e-4);
    return 0;
}

/* u = x^2 - y^2 + 3xy/2 + 2x: harmonic, and so is its 5-point discretisation (exactly). */
static float harmonic(double x, double y, int c) {
    double u = ((x * x - y * y) + 1.5 * x * y + 2 * x) / 100.0;
    return (float)(c == 0 ? u : c == 1 ? -u : 0.5 * u + 10);
}

static int test_poisson(void) {
    int W = 257, H = 201; /* odd sizes: the coarse levels drop a row and a column */
    float *d = ag_malloc(sizeof *d * (size_t)W * H * 3);
    uint8_t *free_px = ag_malloc((size_t)W * H);
    CHECK(d && free_px);
    size_t free_n = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            size_t o = (size_t)y * W + x;
            double dx = (x - 128) / 110.0, dy = (y - 100) / 90.0;
            /* an irregular region: an ellipse with a bite out of it */
            int in = dx * dx + dy * dy < 1 && !(dx > 0.3 && fabs(dy) < 0.2);
            free_px[o] = (uint8_t)in;
            free_n += (size_t)in;
            for (int c = 0; c < 3; c++)
                d[o * 3 + c] = in ? 0.0f : harmonic(x - 128, y - 100, c);
        }
    ag_error err;
    int cycles = 0;
    float residual = 0;
    clock_t t0 = clock();
    CHECK_OK(ag_fuse_laplace(d, free_px, W, H, 1e-4f, 60, &cycles, &residual, &err), &err);
    double ms = (double)(clock() - t0) * 1e3 / CLOCKS_PER_SEC;
    double worst = 0, range = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++) {
                double want = harmonic(x - 128, y - 100, c);
                range = fmax(range, fabs(want));
                if (free_px[(size_t)y * W + x])
                    worst = fmax(worst, fabs((double)d[((size_t)y * W + x) * 3 + c] - want));
            }
    printf("  poisson: %zu free pixels, %d V-cycles, residual %.1e, max error %.2e of a range "
           "%.0f (tolerance 1e-2), %.1f ms\n",
           free_n, cycles, (double)residual, worst, range, ms);
    CHECK(worst < 1e-2 && cycles < 60);
    /* the fusion's own tolerance (0.1) in a few cycles, error still under a grey level */
    for (size_t o = 0; o < (size_t)W * H; o++)
        if (free_px[o])
            d[o * 3] = d[o * 3 + 1] = d[o * 3 + 2] = 0;
    CHECK_OK(ag_fuse_laplace(d, free_px, W, H, 0.1f, 40, &cycles, &residual, &err), &err);
    worst = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            if (free_px[(size_t)y * W + x])
                worst = fmax(worst, fabs((double)d[((size_t)y * W + x) * 3] -
                                         (double)harmonic(x - 128, y - 100, 0)));
    printf("  poisson at tolerance 0.1: %d V-cycles, max error %.3f\n", cycles, worst);
    CHECK(worst < 1.0 && cycles <= 10);
    ag_free(free_px);
    ag_free(d);
    return 0;
}

static int test_color(void) {
    enum { N = 5000 };
    float *px = ag_malloc(sizeof *px * N * 3), *orig = ag_malloc(sizeof *orig * N * 3);
    uint8_t *mask = ag_malloc(N);
    CHECK(px && orig && mask);
    for (int i = 0; i < N * 3; i++)
        px[i] = orig[i] = (float)(urand() * 255);
    ag_fuse_rgb_to_lab(px, N);
    ag_fuse_lab_to_rgb(px, N);
    double worst = 0;
    for (int i = 0; i < N * 3; i++)
        worst = fmax(worst, fabs((double)px[i] - (double)orig[i]));
    printf("  Lab round trip: max error %.4f grey levels (tolerance 0.05)\n", worst);
    CHECK(worst < 0.05);
    /* a "face" of skin-like Lab values moved to another's statistics */
    for (int i = 0; i < N; i++) {
        px[i * 3] = (float)(55 + 10 * (urand() - 0.5));
        px[i * 3 + 1] = (float)(18 + 6 * (urand() - 0.5));
        px[i * 3 + 2] = (float)(25 + 8 * (urand() - 0.5));
        mask[i] = 1;
    }
    double sm[3], ssd[3], tm[3] = {68, 10, 14}, tsd[3] = {4, 1.5, 2.5}, m2[3], sd2[3];
    ag_fuse_stats(px, mask, N, sm, ssd);
    ag_fuse_transfer(px, NULL, N, sm, ssd, tm, tsd);
    ag_fuse_stats(px, mask, N, m2, sd2);
    double e = 0;
    for (int c = 0; c < 3; c++)
        e = fmax(e, fmax(fabs(m2[c] - tm[c]), fabs(sd2[c] - tsd[c])));
    printf("  colour transfer: mean and spread within %.1e of the target's (tolerance 1e-3)\n", e);
    CHECK(e < 1e-3);
    ag_free(mask);
    ag_free(orig);
    ag_free(px);
    return 0;
}

/* ---- the whole, on synthetic landmarks ------------------------------------------------- */

/* A face of landmarks in a disc at (cx, cy): the oval on its rim, the rest inside. */
static void synthetic_face(ag_face *f, double cx, double cy, double r) {
    memset(f, 0, sizeof *f);
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        double q = 0.8 * r * sqrt(urand()), t = 2 * M_PI * urand();
        f->landmarks[i][0] = (float)(cx + q * cos(t)),
        f->landmarks[i][1] = (float)(cy + q * sin(t));
    }
    for (int k = 0; k < AG_FACE_OVAL_COUNT; k++) {
        double t = 2 * M_PI * k / AG_FACE_OVAL_COUNT;
        f->landmarks[ag_face_oval[k]][0] = (float)(cx + r * cos(t));
        f->landmarks[ag_face_oval[k]][1] = (float)(cy + r * sin(t));
    }
    f->has_landmarks = 1, f->score = f->presence = 1;
    f->box[0] = (float)(cx - r), f->box[1] = (float)(cy - r);
    f->box[2] = (float)(cx + r), f->box[3] = (float)(cy + r);
}

static int test_synthetic(void) {
    ag_image s = {200, 180, 3, ag_malloc(200 * 180 * 3)};
    ag_image t = {320, 240, 4, ag_malloc(320 * 240 * 4)};
    ag_face *sf = ag_malloc(sizeof *sf), *tf = ag_malloc(sizeof *tf);
    CHECK(s.pixels && t.pixels && sf && tf);
    for (int i = 0; i < 200 * 180 * 3; i++)
        s.pixels[i] = (uint8_t)(urand() * 256);
    for (int i = 0; i < 320 * 240 * 4; i++)
        t.pixels[i] = (uint8_t)(urand() * 256);
    synthetic_face(sf, 100, 90, 60);
    synthetic_face(tf, 160, 120, 70);
    ag_fuse_options o;
    ag_fuse_options_init(&o);
    ag_image out;
    ag_error err;
    ag_fuse_timing tm;
    /* ratio 0: the target, bit for bit */
    o.shape_ratio = o.texture_ratio = 0;
    CHECK_OK(ag_face_fuse(&s, sf, &t, tf, &o, &out, &tm, &err), &err);
    CHECK(out.width == 320 && out.height == 240 && out.bands == 4);
    CHECK(!memcmp(out.pixels, t.pixels, 320 * 240 * 4));
    ag_image_fini(&out);
    /* every mode at ratio 1: nothing changes outside the ring (radius 70 + 2 feathers of
     * 6% of sqrt(area)), alpha never */
    for (int mode = 0; mode < 3; mode++) {
        ag_fuse_options_init(&o);
        o.shape_ratio = o.texture_ratio = 1, o.mode = (ag_fuse_mode)mode, o.smooth = 0.5f;
        o.brightness = 0.2f, o.contrast = -0.1f, o.saturation = 0.3f;
        CHECK_OK(ag_face_fuse(&s, sf, &t, tf, &o, &out, &tm, &err), &err);
        double ring = 70 + 2 * 0.06 * sqrt(M_PI) * 70 + 2;
        size_t changed = 0, outside = 0, alpha = 0;
        for (int y = 0; y < 240; y++)
            for (int x = 0; x < 320; x++) {
                size_t i = ((size_t)y * 320 + x) * 4;
                int diff = memcmp(out.pixels + i, t.pixels + i, 3) != 0;
                changed += (size_t)diff;
                outside += (size_t)(diff && hypot(x + 0.5 - 160, y + 0.5 - 120) > ring);
                alpha += out.pixels[i + 3] != t.pixels[i + 3];
            }
        printf("  synthetic, mode %d: %zu pixels changed, %zu outside the ring, %.1f ms\n", mode,
               changed, outside, tm.total_ms);
        CHECK(changed > 5000 && outside == 0 && alpha == 0);
        ag_image_fini(&out);
    }
    /* bad inputs */
    ag_fuse_options_init(&o);
    o.shape_ratio = 1.5f;
    CHECK(ag_face_fuse(&s, sf, &t, tf, &o, &out, NULL, &err) == AG_E_ARG && !out.pixels);
    CHECK(strstr(err.message, "shape_ratio"));
    ag_fuse_options_init(&o);
    o.size = 10;
    CHECK(ag_face_fuse(&s, sf, &t, tf, &o, &out, NULL, &err) == AG_E_ARG);
    synthetic_face(sf, 100, 90, 20); /* a 40 px box */
    CHECK(ag_face_fuse(&s, sf, &t, tf, NULL, &out, NULL, &err) == AG_E_ARG);
    CHECK_MSG(strstr(err.message, "source face is too small"), "%s", err.message);
    synthetic_face(sf, 100, 90, 60);
    tf->has_landmarks = 0;
    CHECK(ag_face_fuse(&s, sf, &t, tf, NULL, &out, NULL, &err) == AG_E_ARG);
    CHECK(strstr(err.message, "target face has no landmarks"));
    ag_free(tf);
    ag_free(sf);
    ag_image_fini(&t);
    ag_image_fini(&s);
    return 0;
}

/* ---- the whole, on photos, with the detector ---------------------------------------------- */

#include "one_face.h"

/* The inner face: eyes, brows, nose, lips (FaceMesh indices of those contours). */
static const int inner[] = {33, 133, 160, 158, 144, 153, 362, 263, 385, 387, 373, 380,
                            70, 105, 107, 300, 334, 336, 1,   4,   5,   195, 98,  327,
                            61, 291, 0,   17,  13,  14,  78,  308, 40,  270, 91,  321};
#define INNER (int)(sizeof inner / sizeof inner[0])

/* RMS distance of a's inner face to b's after the similarity that fits a onto b, in units
 * of b's inter-ocular distance. */
static double shape_distance(const ag_face *a, const ag_face *b) {
    ag_fuse_point p[INNER], q[INNER];
    for (int i = 0; i < INNER; i++) {
        p[i] = (ag_fuse_point){a->landmarks[inner[i]][0], a->landmarks[inner[i]][1]};
        q[i] = (ag_fuse_point){b->landmarks[inner[i]][0], b->landmarks[inner[i]][1]};
    }
    ag_affine m = ag_fuse_similarity(p, q, INNER);
    double sum = 0;
    for (int i = 0; i < INNER; i++) {
        ag_fuse_point r = ag_fuse_apply(&m, p[i]);
        sum += pow(r.x - q[i].x, 2) + pow(r.y - q[i].y, 2);
    }
    double iod = hypot(q[0].x - q[6].x, q[0].y - q[6].y);
    return sqrt(sum / INNER) / iod;
}

static double grad(const ag_image *im, int x, int y) {
    double g = 0;
    for (int c = 0; c < 3; c++) {
        const uint8_t *p = im->pixels + ((size_t)y * im->width + x) * im->bands + c;
        double gx = (double)p[im->bands] - p[-im->bands];
        double gy = (double)p[(size_t)im->width * im->bands] - p[-(ptrdiff_t)im->width * im->bands];
        g += sqrt(gx * gx + gy * gy) / 3;
    }
    return g;
}

/* The mean gradient of im over the pixels whose centre is within `width` of the closed
 * polyline oval; *count of them. */
static double band_gradient(const ag_image *im, const ag_fuse_point *oval, double width,
                            int *count) {
    double g = 0;
    int n = 0;
    for (int y = 2; y < im->height - 2; y++)
        for (int x = 2; x < im->width - 2; x++) {
            double best = 1e300;
            for (int k = 0; k < AG_FACE_OVAL_COUNT; k++) {
                ag_fuse_point a = oval[k], b = oval[(k + 1) % AG_FACE_OVAL_COUNT];
                double vx = b.x - a.x, vy = b.y - a.y, wx = x + 0.5 - a.x, wy = y + 0.5 - a.y;
                double u = fmax(0, fmin(1, (vx * wx + vy * wy) / (vx * vx + vy * vy)));
                best = fmin(best, hypot(wx - u * vx, wy - u * vy));
            }
            if (best <= width)
                g += grad(im, x, y), n++;
        }
    *count = n;
    return n ? g / n : 0;
}

/* The seam: the mean gradient of `out` on the band where the blend's alpha rises (the
 * fused oval's edge: the output's own oval, +-1 px), against the target's own on the same
 * pixels and inside its skin (cheeks: the oval's interior away from eyes, brows, mouth,
 * approximated by a disc round each cheek landmark); the bound is the larger, +2%. The
 * jaw and hairline are edges of the photo, so the target's gradient there is the fair
 * comparison. A control, the output with its inside 4 grey levels lighter (a faint
 * seam), must fail the same bound. */
static int check_seam(const ag_image *t, const ag_face *tf, const ag_image *own,
                      const ag_image *out, const ag_face *of) {
    ag_fuse_point oval[AG_FACE_OVAL_COUNT];
    for (int k = 0; k < AG_FACE_OVAL_COUNT; k++)
        oval[k] =
            (ag_fuse_point){of->landmarks[ag_face_oval[k]][0], of->landmarks[ag_face_oval[k]][1]};
    int n = 0, ns = 0;
    double g_out = band_gradient(out, oval, 1, &n), g_t = band_gradient(t, oval, 1, &n);
    double g_own = band_gradient(own, oval, 1, &n);
    /* cheeks: 205 and 425, a disc of a fifth of the eye distance */
    double g_skin = 0, r = 0.2 * hypot(tf->landmarks[33][0] - tf->landmarks[263][0],
                                       tf->landmarks[33][1] - tf->landmarks[263][1]);
    for (int y = 2; y < t->height - 2; y++)
        for (int x = 2; x < t->width - 2; x++)
            for (int c = 0; c < 2; c++) {
                const float *l = tf->landmarks[c ? 425 : 205];
                if (hypot(x + 0.5 - (double)l[0], y + 0.5 - (double)l[1]) < r)
                    g_skin += grad(t, x, y), ns++;
            }
    g_skin /= ns > 0 ? ns : 1;
    ag_image seamed = *out;
    size_t bytes = (size_t)out->width * out->height * out->bands;
    seamed.pixels = ag_malloc(bytes);
    CHECK(seamed.pixels);
    memcpy(seamed.pixels, out->pixels, bytes);
    for (int y = 0; y < out->height; y++)
        for (int x = 0; x < out->width; x++) {
            int in = 0; /* even-odd: the pixel centre inside the output's oval */
            for (int k = 0; k < AG_FACE_OVAL_COUNT; k++) {
                ag_fuse_point a = oval[k], b = oval[(k + 1) % AG_FACE_OVAL_COUNT];
                if ((a.y <= y + 0.5) != (b.y <= y + 0.5) &&
                    x + 0.5 < a.x + (y + 0.5 - a.y) / (b.y - a.y) * (b.x - a.x))
                    in = !in;
            }
            uint8_t *p = seamed.pixels + ((size_t)y * out->width + x) * out->bands;
            for (int c = 0; in && c < 3; c++)
                p[c] = (uint8_t)(p[c] > 251 ? 255 : p[c] + 4);
        }
    double g_seam = band_gradient(&seamed, oval, 1, &n);
    ag_image_fini(&seamed);
    double bound = fmax(fmax(g_t, g_own), g_skin) * 1.02;
    printf("  seam: mean gradient on the blend's edge %.2f (the target there %.2f, warped onto "
           "the fused geometry %.2f, its skin %.2f; bound %.2f; with a 4-level seam %.2f)\n",
           g_out, g_t, g_own, g_skin, bound, g_seam);
    CHECK(n > 100 && ns > 50);
    CHECK(g_out <= bound);
    CHECK_MSG(g_seam > bound, "a 4-level seam passes the seam check");
    return 0;
}

static int test_photos(void) {
    ag_error err;
    ag_image s = {0}, t = {0}, out = {0};
    ag_decode_options d = {0};
    CHECK_OK(ag_image_decode_file(DATA "generated/fuse/source.jpg", &d, &s, &err), &err);
    CHECK_OK(ag_image_decode_file(DATA "astronaut.png", &d, &t, &err), &err);
    ag_face *f = ag_malloc(sizeof *f * 3);
    CHECK(f);
    ag_face *sf = &f[0], *tf = &f[1], *of = &f[2];
    CHECK(detect(&s, sf) == 0 && detect(&t, tf) == 0);
    double base = shape_distance(sf, tf);
    printf("  source to target shape distance %.4f (inter-ocular units)\n", base);
    CHECK(base > 0.02); /* the source really is another shape */
    ag_fuse_options o;
    ag_fuse_timing tm;
    double to_src[3], to_tgt[3];
    const float ratios[3] = {0, 0.5f, 1};
    for (int k = 0; k < 3; k++) {
        ag_fuse_options_init(&o);
        o.shape_ratio = o.texture_ratio = ratios[k];
        CHECK_OK(ag_face_fuse(&s, sf, &t, tf, &o, &out, &tm, &err), &err);
        if (k == 0)
            CHECK(!memcmp(out.pixels, t.pixels, (size_t)t.width * t.height * t.bands));
        CHECK(detect(&out, of) == 0);
        to_src[k] = shape_distance(of, sf), to_tgt[k] = shape_distance(of, tf);
        printf("  ratio %.1f: output's inner face to the source %.4f, to the target %.4f; "
               "%.1f ms\n",
               (double)ratios[k], to_src[k], to_tgt[k], tm.total_ms);
        if (k == 2) { /* the target's own edges there: it warped alone (texture ratio 0) */
            ag_image own = {0};
            o.texture_ratio = 0;
            CHECK_OK(ag_face_fuse(&s, sf, &t, tf, &o, &own, NULL, &err), &err);
            CHECK(check_seam(&t, tf, &own, &out, of) == 0);
            ag_image_fini(&own);
        }
        ag_image_fini(&out);
    }
    CHECK(to_src[2] < to_tgt[2]);                          /* ratio 1: nearer the source */
    CHECK(to_src[1] < to_src[0] && to_tgt[1] < to_tgt[2]); /* 0.5: in between */
    CHECK(to_src[1] > to_src[2] && to_tgt[1] > to_tgt[0]);
    ag_free(f);
    ag_image_fini(&t);
    ag_image_fini(&s);
    return 0;
}

static double cross3(ag_fuse_point o, ag_fuse_point a, ag_fuse_point b) {
    return (a.x - o.x) * (b.y - o.y) - (a.y - o.y) * (b.x - o.x);
}

/* How far (x, y) lies outside the convex polygon h[0..n) (counter-clockwise, y up); 0 in it. */
static double outside_hull(const ag_fuse_point *h, int n, double x, double y) {
    int in = 1;
    double best = 1e300;
    for (int i = 0; i < n; i++) {
        ag_fuse_point a = h[i], b = h[(i + 1) % n];
        in &= cross3(a, b, (ag_fuse_point){x, y}) >= 0;
        double vx = b.x - a.x, vy = b.y - a.y, wx = x - a.x, wy = y - a.y;
        double u = fmax(0, fmin(1, (vx * wx + vy * wy) / (vx * vx + vy * vy)));
        best = fmin(best, hypot(wx - u * vx, wy - u * vy));
    }
    return in ? 0 : best;
}

/* On the photos, every mode with adjustments, ratios 0.5 and 1: no pixel changes outside
 * the face region, the convex hull of the target's and the fused landmarks (the target's,
 * plus shape_ratio times the similarity-aligned source's offsets from them) plus two
 * feathers (a feather: 6% of the square root of the target oval's area, at least 4 px). */
static int test_photo_region(void) {
    ag_error err;
    ag_image s = {0}, t = {0}, out = {0};
    ag_decode_options d = {0};
    CHECK_OK(ag_image_decode_file(DATA "generated/fuse/source.jpg", &d, &s, &err), &err);
    CHECK_OK(ag_image_decode_file(DATA "astronaut.png", &d, &t, &err), &err);
    ag_face *f = ag_malloc(sizeof *f * 2);
    ag_fuse_point *ls = ag_malloc(sizeof *ls * AG_FACE_LANDMARKS * 6), *lt = ls + AG_FACE_LANDMARKS;
    ag_fuse_point *both = lt + AG_FACE_LANDMARKS, *hull = both + 2 * AG_FACE_LANDMARKS;
    CHECK(f && ls);
    CHECK(detect(&s, &f[0]) == 0 && detect(&t, &f[1]) == 0);
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        ls[i] = (ag_fuse_point){f[0].landmarks[i][0], f[0].landmarks[i][1]};
        lt[i] = (ag_fuse_point){f[1].landmarks[i][0], f[1].landmarks[i][1]};
    }
    double area = 0;
    for (int k = 0; k < AG_FACE_OVAL_COUNT; k++) {
        ag_fuse_point a = lt[ag_face_oval[k]], b = lt[ag_face_oval[(k + 1) % AG_FACE_OVAL_COUNT]];
        area += a.x * b.y - b.x * a.y;
    }
    double feather = fmax(4, 0.06 * sqrt(fabs(area) / 2));
    ag_affine m = ag_fuse_similarity(ls, lt, AG_FACE_LANDMARKS);
    const float ratios[2] = {0.5f, 1};
    for (int mode = 0; mode < 3; mode++)
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
                ag_fuse_point q = ag_fuse_apply(&m, ls[i]);
                both[i] = lt[i];
                both[AG_FACE_LANDMARKS + i] =
                    (ag_fuse_point){lt[i].x + (double)ratios[k] * (q.x - lt[i].x),
                                    lt[i].y + (double)ratios[k] * (q.y - lt[i].y)};
            }
            int nh = ag_fuse_hull(both, 2 * AG_FACE_LANDMARKS, hull);
            for (int i = 0; i < 2 * AG_FACE_LANDMARKS; i++) /* the hull holds every point */
                CHECK(outside_hull(hull, nh, both[i].x, both[i].y) < 1e-9);
            ag_fuse_options o;
            ag_fuse_options_init(&o);
            o.shape_ratio = o.texture_ratio = ratios[k], o.mode = (ag_fuse_mode)mode;
            o.smooth = 0.5f, o.brightness = 0.3f, o.contrast = 0.2f, o.saturation = -0.3f;
            CHECK_OK(ag_face_fuse(&s, &f[0], &t, &f[1], &o, &out, NULL, &err), &err);
            size_t changed = 0, beyond = 0, past_hull = 0;
            double farthest = 0;
            for (int y = 0; y < t.height; y++)
                for (int x = 0; x < t.width; x++) {
                    size_t i = ((size_t)y * t.width + x) * t.bands;
                    if (!memcmp(out.pixels + i, t.pixels + i, 3))
                        continue;
                    double away = outside_hull(hull, nh, x + 0.5, y + 0.5);
                    changed++;
                    past_hull += away > 0;
                    beyond += away > 2 * feather + 1e-6;
                    farthest = fmax(farthest, away);
                }
            printf("  mode %d, ratio %.1f: %zu pixels changed, %zu outside the hull, the farthest "
                   "%.2f px (%.2f feathers of %.2f px), %zu beyond two\n",
                   mode, (double)ratios[k], changed, past_hull, farthest, farthest / feather,
                   feather, beyond);
            CHECK(changed > 5000 && beyond == 0);
            ag_image_fini(&out);
        }
    ag_free(ls);
    ag_free(f);
    ag_image_fini(&t);
    ag_image_fini(&s);
    return 0;
}

/* Whether (x, y) is inside the polygon p[0..n) (even-odd); *edge its distance to the
 * nearest edge. */
static int in_polygon(const ag_fuse_point *p, int n, double x, double y, double *edge) {
    int in = 0;
    *edge = 1e300;
    for (int k = 0; k < n; k++) {
        ag_fuse_point a = p[k], b = p[(k + 1) % n];
        if ((a.y <= y) != (b.y <= y) && x < a.x + (y - a.y) / (b.y - a.y) * (b.x - a.x))
            in = !in;
        double vx = b.x - a.x, vy = b.y - a.y, wx = x - a.x, wy = y - a.y;
        double len2 = vx * vx + vy * vy;
        double u = len2 > 0 ? fmax(0, fmin(1, (vx * wx + vy * wy) / len2)) : 0;
        *edge = fmin(*edge, hypot(wx - u * vx, wy - u * vy));
    }
    return in;
}

/* The eyes and the mouth's inside are taken whole from the face the fused geometry is
 * nearer, never cross-dissolved (no doubled teeth or irises): in `blend` mode (no Poisson
 * correction), at shape ratio 1 the features are the same at texture ratios 0.5 and 1
 * while the skin is not; at shape ratio 0.3, the same at texture ratios 0.5 and 0 (the
 * target's). */
static int test_features_whole(void) {
    ag_error err;
    ag_image s = {0}, t = {0}, out[2] = {{0}, {0}};
    ag_decode_options d = {0};
    CHECK_OK(ag_image_decode_file(DATA "generated/fuse/source.jpg", &d, &s, &err), &err);
    CHECK_OK(ag_image_decode_file(DATA "astronaut.png", &d, &t, &err), &err);
    ag_face *f = ag_malloc(sizeof *f * 2);
    ag_fuse_point *ls = ag_malloc(sizeof *ls * AG_FACE_LANDMARKS * 3), *lt = ls + AG_FACE_LANDMARKS;
    ag_fuse_point *fused = lt + AG_FACE_LANDMARKS;
    CHECK(f && ls);
    CHECK(detect(&s, &f[0]) == 0 && detect(&t, &f[1]) == 0);
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        ls[i] = (ag_fuse_point){f[0].landmarks[i][0], f[0].landmarks[i][1]};
        lt[i] = (ag_fuse_point){f[1].landmarks[i][0], f[1].landmarks[i][1]};
    }
    ag_affine m = ag_fuse_similarity(ls, lt, AG_FACE_LANDMARKS);
    const float shapes[2] = {1, 0.3f}, textures[2][2] = {{0.5f, 1}, {0.5f, 0}};
    for (int c = 0; c < 2; c++) {
        for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
            ag_fuse_point q = ag_fuse_apply(&m, ls[i]);
            fused[i] = (ag_fuse_point){lt[i].x + (double)shapes[c] * (q.x - lt[i].x),
                                       lt[i].y + (double)shapes[c] * (q.y - lt[i].y)};
        }
        ag_fuse_point poly[4][AG_FACE_OVAL_COUNT];
        const int *sets[4] = {ag_fuse_inner_lips, ag_fuse_eye_right, ag_fuse_eye_left,
                              ag_face_oval};
        const int sizes[4] = {20, 16, 16, AG_FACE_OVAL_COUNT};
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < sizes[k]; i++)
                poly[k][i] = fused[sets[k][i]];
        for (int k = 0; k < 2; k++) {
            ag_fuse_options o;
            ag_fuse_options_init(&o);
            o.shape_ratio = shapes[c], o.texture_ratio = textures[c][k], o.mode = AG_FUSE_BLEND;
            CHECK_OK(ag_face_fuse(&s, &f[0], &t, &f[1], &o, &out[k], NULL, &err), &err);
        }
        double feat = 0, skin = 0;
        size_t nf = 0, ns = 0;
        for (int y = 0; y < t.height; y++)
            for (int x = 0; x < t.width; x++) {
                double px = x + 0.5, py = y + 0.5, diff = 0;
                int in_feature = 0, near_feature = 0; /* inside by 1.5 px; within 3 px */
                double e;
                for (int k = 0; k < 3; k++) {
                    int in = in_polygon(poly[k], sizes[k], px, py, &e);
                    in_feature |= in && e >= 1.5;
                    near_feature |= in || e < 3;
                }
                int in_face = in_polygon(poly[3], sizes[3], px, py, &e) && e >= 6;
                size_t i = ((size_t)y * t.width + x) * t.bands;
                for (int b = 0; b < 3; b++)
                    diff += fabs((double)out[0].pixels[i + b] - out[1].pixels[i + b]) / 3;
                if (in_feature)
                    feat += diff, nf++;
                else if (!near_feature && in_face)
                    skin += diff, ns++;
            }
        feat /= nf ? (double)nf : 1, skin /= ns ? (double)ns : 1;
        printf("  shape %.1f, texture %.1f vs %.1f: features (%zu px) differ by %.3f, skin "
               "(%zu px) by %.3f grey levels\n",
               (double)shapes[c], (double)textures[c][0], (double)textures[c][1], nf, feat, ns,
               skin);
        CHECK(nf > 40 && ns > 2000);
        CHECK(feat < 0.1 && skin > 2);
        ag_image_fini(&out[0]);
        ag_image_fini(&out[1]);
    }
    ag_free(ls);
    ag_free(f);
    ag_image_fini(&t);
    ag_image_fini(&s);
    return 0;
}

/* PSNR of a against b over the pixels where either differs from t (the fused region). */
static double region_psnr(const ag_image *a, const ag_image *b, const ag_image *t) {
    double sq = 0;
    size_t n = 0;
    for (size_t i = 0; i < (size_t)t->width * t->height * t->bands; i++)
        if (a->pixels[i] != t->pixels[i] || b->pixels[i] != t->pixels[i]) {
            double d = (double)a->pixels[i] - b->pixels[i];
            sq += d * d, n++;
        }
    return n == 0 ? 0 : sq == 0 ? 99 : 10 * log10(255.0 * 255.0 * (double)n / sq);
}

/* A source face 4x the target's is shrunk first (no aliasing): the fusion then matches the
 * one from the source at its own size; a source near the target's size is used as it is. */
static int test_source_prefilter(void) {
    ag_error err;
    ag_image s = {0}, t = {0}, s4 = {0}, a = {0}, b = {0};
    ag_decode_options d = {0};
    CHECK_OK(ag_image_decode_file(DATA "generated/fuse/source.jpg", &d, &s, &err), &err);
    CHECK_OK(ag_image_decode_file(DATA "astronaut.png", &d, &t, &err), &err);
    ag_face *f = ag_malloc(sizeof *f * 3);
    CHECK(f);
    CHECK(detect(&s, &f[0]) == 0 && detect(&t, &f[1]) == 0);
    ag_fuse_options o;
    ag_fuse_options_init(&o);
    o.shape_ratio = o.texture_ratio = 0; /* ratio 0 at another size: the image resized */
    o.size = 4 * (s.width > s.height ? s.width : s.height);
    CHECK_OK(ag_face_fuse(&s, &f[0], &s, &f[0], &o, &s4, NULL, &err), &err);
    f[2] = f[0];
    for (int i = 0; i < AG_FACE_LANDMARKS; i++)
        f[2].landmarks[i][0] *= (float)s4.width / (float)s.width,
            f[2].landmarks[i][1] *= (float)s4.height / (float)s.height;
    ag_fuse_options_init(&o);
    ag_fuse_timing ta, tb;
    CHECK_OK(ag_face_fuse(&s, &f[0], &t, &f[1], &o, &a, &ta, &err), &err);
    CHECK_OK(ag_face_fuse(&s4, &f[2], &t, &f[1], &o, &b, &tb, &err), &err);
    double db = region_psnr(&a, &b, &t);
    printf("  source 4x: shrunk by %.3f first; its fusion against the 1x source's: %.1f dB over "
           "the face\n",
           (double)tb.source_shrink, db);
    CHECK(ta.source_shrink == 1.0f && tb.source_shrink < 0.5f);
    CHECK(db >= 30);
    ag_free(f);
    ag_image_fini(&a);
    ag_image_fini(&b);
    ag_image_fini(&s4);
    ag_image_fini(&t);
    ag_image_fini(&s);
    return 0;
}

/* The speed figure of the issue: a 1024 px target, landmarks known, one thread (this is
 * CPU time of the calling thread; the machine's other load does not count). */
static int test_speed(void) {
    ag_error err;
    ag_image s = {0}, t = {0}, big = {0}, out = {0};
    ag_decode_options d = {0};
    CHECK_OK(ag_image_decode_file(DATA "generated/fuse/source.jpg", &d, &s, &err), &err);
    CHECK_OK(ag_image_decode_file(DATA "astronaut.png", &d, &t, &err), &err);
    ag_face *f = ag_malloc(sizeof *f * 2);
    CHECK(f);
    CHECK(detect(&s, &f[0]) == 0);
    ag_fuse_options o;
    ag_fuse_options_init(&o);
    o.shape_ratio = o.texture_ratio = 0, o.size = 1024;
    CHECK_OK(ag_face_fuse(&s, &f[0], &t, &f[0], &o, &big, NULL, &err), &err);
    CHECK(detect(&big, &f[1]) == 0);
    ag_fuse_options_init(&o);
    double best = 1e300;
    ag_fuse_timing tm = {0};
    for (int i = 0; i < 5; i++) {
        struct timespec a, b;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
        CHECK_OK(ag_face_fuse(&s, &f[0], &big, &f[1], &o, &out, &tm, &err), &err);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        ag_image_fini(&out);
        best = fmin(best, (b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6);
    }
    printf("  1024x1024 target: best of 5 %.1f ms CPU (geometry %.1f, warp %.1f, colour %.1f, "
           "blend %.1f ms wall of the last; %d px window, %d px face, %d V-cycles)\n",
           best, tm.geometry_ms, tm.warp_ms, tm.color_ms, tm.blend_ms, tm.region_px, tm.face_px,
           tm.cycles);
#ifndef __SANITIZE_ADDRESS__ /* the bound is for the optimised build */
    CHECK(best < 100);
#endif
    ag_free(f);
    ag_image_fini(&big);
    ag_image_fini(&t);
    ag_image_fini(&s);
    return 0;
}

int main(int argc, char **argv) {
    ag_error err = {0};
    if (ag_image_startup(argv[0], &err) != 0) {
        fprintf(stderr, "ag_image_startup: %s\n", err.message);
        return 1;
    }
    static const test_case tests[] = {
        TEST(test_procrustes),
        TEST(test_triangulation),
        TEST(test_warp_identity),
        TEST(test_poisson),
        TEST(test_color),
        TEST(test_synthetic),
        TEST(test_photos),
        TEST(test_photo_region),
        TEST(test_features_whole),
        TEST(test_speed),
        TEST(test_source_prefilter),
    };
    int rc = test_run_all(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
    one_face_close();
    ag_image_shutdown();
    return rc;
}
