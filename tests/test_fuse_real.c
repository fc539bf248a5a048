/*
 * test_fuse_real.c - face fusion on real pairs (issue 31 items 2 and 3), measured by the
 * project's own checks at ratios 0.5 and 1 on the public-domain faces of tests/data/faces
 * (obama.jpg into biden.jpg and back, into the occluded targets, and a source with dark
 * eye make-up laid on its lids):
 *   - seam: the mean gradient in a band round the fused face outline (where the blend's
 *     alpha rises) no larger than the target's own round its outline (or its cheeks);
 *   - blocks: sharp axis-aligned step edges (a one-pixel step over 3 grey levels, twice its
 *     neighbours', in a straight run of 6 pixels) in that band no more than the target's
 *     own there;
 *   - eyes: the eye region's brightness over the cheeks' within 15% of the source's (at
 *     ratio r, of the source's^r x the target's^(1-r): the texture mix), so no hollow
 *     sockets whatever the colour transfer does to the skin;
 *   - the blend's alpha follows the outline at sub-pixel precision: a smooth function of
 *     the distance to the polygon (no staircase of the raster it was drawn on).
 */
#include "disc_face.h"
#include "test.h"

#include "../src/face/fuse_internal.h"
#include "../src/util/util_internal.h"

#include <stdint.h>

#define DATA AG_SOURCE_DIR "/tests/data/"

#include "one_face.h"

/* ---- geometry of the measures -------------------------------------------------------------- */

static ag_fuse_point lm(const ag_fuse_point *p, int i) {
    return p[i];
}

/* The fused landmarks at shape ratio r (as fuse.c makes them): the target's plus r times
 * the similarity-aligned source's offsets from them. */
static void fused_points(const ag_face *sf, const ag_face *tf, double r, ag_fuse_point *out) {
    ag_fuse_point ls[AG_FACE_LANDMARKS], lt[AG_FACE_LANDMARKS];
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        ls[i] = (ag_fuse_point){sf->landmarks[i][0], sf->landmarks[i][1]};
        lt[i] = (ag_fuse_point){tf->landmarks[i][0], tf->landmarks[i][1]};
    }
    ag_affine a = ag_fuse_similarity(ls, lt, AG_FACE_LANDMARKS);
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        ag_fuse_point s = ag_fuse_apply(&a, ls[i]);
        out[i] = (ag_fuse_point){lt[i].x + r * (s.x - lt[i].x), lt[i].y + r * (s.y - lt[i].y)};
    }
}

static void face_points(const ag_face *f, ag_fuse_point *out) {
    for (int i = 0; i < AG_FACE_LANDMARKS; i++)
        out[i] = (ag_fuse_point){f->landmarks[i][0], f->landmarks[i][1]};
}

/* Signed distance from (x, y) to the closed polygon p[0..n): positive inside. */
static double signed_distance(const ag_fuse_point *p, int n, double x, double y) {
    double best = 1e300;
    int in = 0;
    for (int k = 0; k < n; k++) {
        ag_fuse_point a = p[k], b = p[(k + 1) % n];
        double vx = b.x - a.x, vy = b.y - a.y, wx = x - a.x, wy = y - a.y;
        double u = fmax(0, fmin(1, (vx * wx + vy * wy) / (vx * vx + vy * vy)));
        best = fmin(best, hypot(wx - u * vx, wy - u * vy));
        if ((a.y <= y) != (b.y <= y) && x < a.x + (y - a.y) / (b.y - a.y) * (b.x - a.x))
            in = !in;
    }
    return in ? best : -best;
}

static void oval_of(const ag_fuse_point *pts, ag_fuse_point *oval) {
    for (int k = 0; k < AG_FACE_OVAL_COUNT; k++)
        oval[k] = pts[ag_face_oval[k]];
}

static double polygon_area(const ag_fuse_point *p, int n) {
    double a = 0;
    for (int i = 0; i < n; i++)
        a += p[i].x * p[(i + 1) % n].y - p[(i + 1) % n].x * p[i].y;
    return fabs(a) / 2;
}

/* fuse.c's feather: 6% of the square root of the target oval's area, at least 4 px. */
static double feather_of(const ag_fuse_point *target_pts) {
    ag_fuse_point oval[AG_FACE_OVAL_COUNT];
    oval_of(target_pts, oval);
    return fmax(4.0, 0.06 * sqrt(polygon_area(oval, AG_FACE_OVAL_COUNT)));
}

static double luma(const ag_image *im, int x, int y) {
    const uint8_t *p = im->pixels + ((size_t)y * im->width + x) * im->bands;
    return 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2];
}

static double grad(const ag_image *im, int x, int y) {
    double gx = luma(im, x + 1, y) - luma(im, x - 1, y);
    double gy = luma(im, x, y + 1) - luma(im, x, y - 1);
    return sqrt(gx * gx + gy * gy);
}

/* The band round an outline: pixels whose centre's signed distance to it is in [lo, hi]. */
typedef struct band {
    const ag_fuse_point *oval;
    double lo, hi;
} band;

static int in_band(const band *b, int x, int y) {
    double d = signed_distance(b->oval, AG_FACE_OVAL_COUNT, x + 0.5, y + 0.5);
    return d >= b->lo && d <= b->hi;
}

/* Whether im has a sharp step between (x, y) and the next pixel along (dx, dy): over 3 grey
 * levels and twice the steps on either side of it. */
static int sharp_step(const ag_image *im, int x, int y, int dx, int dy) {
    double s = fabs(luma(im, x + dx, y + dy) - luma(im, x, y));
    double before = fabs(luma(im, x, y) - luma(im, x - dx, y - dy));
    double after = fabs(luma(im, x + 2 * dx, y + 2 * dy) - luma(im, x + dx, y + dy));
    return s > 3 && s > 2 * before && s > 2 * after;
}

#define BLOCK_RUN 6

/* Mean gradient and count of block-edge pixels (sharp steps in a straight run of
 * BLOCK_RUN rows or columns) of im over the band; *pixels the band's size. */
static void band_measures(const ag_image *im, const band *b, double *energy, int *blocks,
                          int *pixels) {
    int w = im->width, h = im->height, n = 0, nb = 0;
    double g = 0;
    uint8_t *mask = calloc((size_t)w * h, 1), *vx = calloc((size_t)w * h, 1),
            *hy = calloc((size_t)w * h, 1);
    for (int y = 3; y < h - 3; y++)
        for (int x = 3; x < w - 3; x++)
            if (in_band(b, x, y)) {
                mask[(size_t)y * w + x] = 1;
                g += grad(im, x, y), n++;
                vx[(size_t)y * w + x] = (uint8_t)sharp_step(im, x, y, 1, 0);
                hy[(size_t)y * w + x] = (uint8_t)sharp_step(im, x, y, 0, 1);
            }
    for (int y = 3; y < h - 3 - BLOCK_RUN; y++)
        for (int x = 3; x < w - 3 - BLOCK_RUN; x++) {
            int col = 1, row = 1;
            for (int k = 0; k < BLOCK_RUN; k++) {
                col &= vx[(size_t)(y + k) * w + x];
                row &= hy[(size_t)y * w + x + k];
            }
            nb += col + row;
        }
    free(mask), free(vx), free(hy);
    *energy = n ? g / n : 0, *blocks = nb, *pixels = n;
}

/* The mean luma over the cheeks' discs (205, 425; a fifth of the eye distance). */
static double cheeks(const ag_image *im, const ag_fuse_point *p) {
    double r = 0.2 * hypot(p[33].x - p[263].x, p[33].y - p[263].y), s = 0;
    int n = 0;
    for (int c = 0; c < 2; c++) {
        ag_fuse_point q = lm(p, c ? 425 : 205);
        for (int y = (int)(q.y - r); y <= (int)(q.y + r); y++)
            for (int x = (int)(q.x - r); x <= (int)(q.x + r); x++)
                if (x >= 0 && y >= 0 && x < im->width && y < im->height &&
                    hypot(x + 0.5 - q.x, y + 0.5 - q.y) < r)
                    s += luma(im, x, y), n++;
    }
    return n ? s / n : 0;
}

/* The mean luma over both eye regions: each eye opening grown 1.6x about its centre (the
 * eye, its lids and the socket round it). */
static double eyes(const ag_image *im, const ag_fuse_point *p) {
    double s = 0;
    int n = 0;
    const int *sets[2] = {ag_fuse_eye_right, ag_fuse_eye_left};
    for (int e = 0; e < 2; e++) {
        ag_fuse_point q[16], c = {0, 0};
        for (int k = 0; k < 16; k++)
            q[k] = p[sets[e][k]], c.x += q[k].x / 16, c.y += q[k].y / 16;
        double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
        for (int k = 0; k < 16; k++) {
            q[k] = (ag_fuse_point){c.x + 1.6 * (q[k].x - c.x), c.y + 1.6 * (q[k].y - c.y)};
            x0 = fmin(x0, q[k].x), x1 = fmax(x1, q[k].x), y0 = fmin(y0, q[k].y),
            y1 = fmax(y1, q[k].y);
        }
        for (int y = (int)y0; y <= (int)y1; y++)
            for (int x = (int)x0; x <= (int)x1; x++)
                if (x >= 0 && y >= 0 && x < im->width && y < im->height &&
                    signed_distance(q, 16, x + 0.5, y + 0.5) > 0)
                    s += luma(im, x, y), n++;
    }
    return n ? s / n : 0;
}

/* ---- the pairs ------------------------------------------------------------------------------ */

typedef struct pair {
    const char *source, *target;
    int makeup; /* dark eye make-up laid on the source's lids first */
} pair;

static const pair pairs[] = {
    {"faces/obama.jpg", "faces/biden.jpg", 0},      {"faces/biden.jpg", "faces/obama.jpg", 0},
    {"faces/biden.jpg", "faces/obama_hair.png", 0}, {"faces/obama.jpg", "faces/biden_hand.png", 0},
    {"faces/biden.jpg", "faces/obama.jpg", 1},
};
#define PAIRS (int)(sizeof pairs / sizeof pairs[0])

/* Eye make-up: the lids and sockets (the eye opening grown 2x, less the opening itself)
 * darkened to 45%, softly (a cosine falloff over the outer half). */
static void lay_makeup(ag_image *im, const ag_face *f) {
    ag_fuse_point p[AG_FACE_LANDMARKS];
    face_points(f, p);
    const int *sets[2] = {ag_fuse_eye_right, ag_fuse_eye_left};
    for (int e = 0; e < 2; e++) {
        ag_fuse_point q[16], c = {0, 0};
        for (int k = 0; k < 16; k++)
            q[k] = p[sets[e][k]], c.x += q[k].x / 16, c.y += q[k].y / 16;
        double rx = 0, ry = 0;
        for (int k = 0; k < 16; k++)
            rx = fmax(rx, fabs(q[k].x - c.x)), ry = fmax(ry, fabs(q[k].y - c.y));
        rx *= 1.5, ry *= 3.0;
        for (int y = (int)(c.y - ry); y <= (int)(c.y + ry); y++)
            for (int x = (int)(c.x - rx); x <= (int)(c.x + rx); x++) {
                if (x < 0 || y < 0 || x >= im->width || y >= im->height)
                    continue;
                double u = hypot((x + 0.5 - c.x) / rx, (y + 0.5 - c.y) / ry);
                if (u >= 1 || signed_distance(q, 16, x + 0.5, y + 0.5) > 0)
                    continue;
                double k = u < 0.5 ? 1 : 0.5 + 0.5 * cos(M_PI * (u - 0.5) / 0.5);
                uint8_t *px = im->pixels + ((size_t)y * im->width + x) * im->bands;
                for (int ch = 0; ch < 3; ch++)
                    px[ch] = (uint8_t)(px[ch] * (1 - 0.55 * k) + 0.5);
            }
    }
}

/* a <- b - a + 128 (RGB, clipped): what the fusion changed against the warped target. */
static void difference(ag_image *a, const ag_image *b) {
    size_t n = (size_t)a->width * a->height;
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < 3; c++) {
            uint8_t *p = a->pixels + i * a->bands + c;
            int v = b->pixels[i * b->bands + c] - *p + 128;
            *p = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
}

typedef struct loaded {
    ag_image s, t;
    ag_face sf, tf;
} loaded;

static int load_pair(const pair *p, loaded *l) {
    ag_error err;
    ag_decode_options d = {0};
    char path[512];
    snprintf(path, sizeof path, DATA "%s", p->source);
    CHECK_OK(ag_image_decode_file(path, &d, &l->s, &err), &err);
    snprintf(path, sizeof path, DATA "%s", p->target);
    CHECK_OK(ag_image_decode_file(path, &d, &l->t, &err), &err);
    CHECK(detect(&l->s, &l->sf) == 0 && detect(&l->t, &l->tf) == 0);
    if (p->makeup)
        lay_makeup(&l->s, &l->sf);
    return 0;
}

static void free_pair(loaded *l) {
    ag_image_fini(&l->s);
    ag_image_fini(&l->t);
}

static int fuse_at(loaded *l, float shape, float texture, ag_image *out) {
    ag_error err;
    ag_fuse_options o;
    ag_fuse_options_init(&o);
    o.shape_ratio = shape, o.texture_ratio = texture;
    CHECK_OK(ag_face_fuse(&l->s, &l->sf, &l->t, &l->tf, &o, out, NULL, &err), &err);
    return 0;
}

/* Seam and blocks on every pair at ratios 0.5 and 1, in a band round the fused outline (the
 * alpha's rise, a half feather inside it, and a pixel either side), against the target's
 * own there: the target warped onto the same geometry (the fusion at texture ratio 0), so
 * its jaw, ears and hairline lie where the output's do. */
static int test_seams_and_blocks(void) {
    int failures = 0;
    for (int i = 0; i < PAIRS; i++) {
        if (pairs[i].makeup)
            continue;
        loaded *l = calloc(1, sizeof *l);
        CHECK(l && load_pair(&pairs[i], l) == 0);
        ag_fuse_point *tp = malloc(sizeof(ag_fuse_point) * AG_FACE_LANDMARKS * 2), *fp;
        CHECK(tp);
        fp = tp + AG_FACE_LANDMARKS;
        face_points(&l->tf, tp);
        double ramp = 0.5 * feather_of(tp);
        for (int r = 0; r < 2; r++) {
            float ratio = r ? 1.0f : 0.5f;
            ag_image out = {0}, own = {0};
            CHECK(fuse_at(l, ratio, ratio, &out) == 0 && fuse_at(l, ratio, 0, &own) == 0);
            ag_fuse_point oval[AG_FACE_OVAL_COUNT];
            fused_points(&l->sf, &l->tf, ratio, fp);
            oval_of(fp, oval);
            band b = {oval, -1, ramp + 1};
            double eo, et, ed;
            int bo, bt, bd, no, nt, nd;
            band_measures(&out, &b, &eo, &bo, &no);
            band_measures(&own, &b, &et, &bt, &nt);
            band outer = {oval, -1, 0.5 * ramp};
            difference(&own, &out); /* own <- the fusion's change, out - own + 128 */
            band_measures(&own, &outer, &ed, &bd, &nd);
            int seam_ok = eo <= 1.02 * et, blocks_ok = bd == 0;
            printf("  %s into %s, ratio %.1f: band %d px; edge energy %.2f (target's own %.2f); "
                   "block edges %d (target's own %d), in the change's outer band %d%s%s\n",
                   pairs[i].source, pairs[i].target, (double)ratio, no, eo, et, bo, bt, bd,
                   seam_ok ? "" : " SEAM", blocks_ok ? "" : " BLOCKS");
            failures += !seam_ok + !blocks_ok;
            ag_image_fini(&out);
            ag_image_fini(&own);
        }
        free(tp);
        free_pair(l);
        free(l);
    }
    CHECK(failures == 0);
    return 0;
}

/* Eyes: the eye regions' brightness over the cheeks', the output's (at the fused landmarks)
 * against the source's, within 15%. */
static int test_eye_brightness(void) {
    int failures = 0;
    for (int i = 0; i < PAIRS; i++) {
        loaded *l = calloc(1, sizeof *l);
        CHECK(l && load_pair(&pairs[i], l) == 0);
        ag_fuse_point *sp = malloc(sizeof(ag_fuse_point) * AG_FACE_LANDMARKS * 2), *fp;
        CHECK(sp);
        fp = sp + AG_FACE_LANDMARKS;
        face_points(&l->sf, sp);
        double src = eyes(&l->s, sp) / cheeks(&l->s, sp);
        face_points(&l->tf, fp);
        double tgt = eyes(&l->t, fp) / cheeks(&l->t, fp);
        for (int r = 0; r < 2; r++) {
            float ratio = r ? 1.0f : 0.5f;
            ag_image out = {0};
            CHECK(fuse_at(l, ratio, ratio, &out) == 0);
            fused_points(&l->sf, &l->tf, ratio, fp);
            double o = eyes(&out, fp) / cheeks(&out, fp);
            double want = pow(src, ratio) * pow(tgt, 1 - ratio), q = o / want;
            int ok = q > 1 / 1.15 && q < 1.15;
            printf("  %s%s into %s, ratio %.1f: eyes over cheeks %.3f (source %.3f, target %.3f: "
                   "x%.3f of their mix)%s\n",
                   pairs[i].source, pairs[i].makeup ? " with make-up" : "", pairs[i].target,
                   (double)ratio, o, src, tgt, q, ok ? "" : " HOLLOW/BRIGHT");
            failures += !ok;
            ag_image_fini(&out);
        }
        free(sp);
        free_pair(l);
        free(l);
    }
    CHECK(failures == 0);
    return 0;
}

/*
 * The blend's edge on a real photo, through the public call: the target fused with itself
 * (the same face: an identity warp and colour transfer) in `blend` mode with brightness 1
 * (L* + 25 inside). The output less the target over that change at full strength is the
 * alpha, pixel by pixel. Along a smooth, sub-pixel outline it is a function of the distance
 * to the outline alone; the RMS of its spread about the median at each distance (bins of
 * 0.1 px) measures the staircase of a raster (pixels at one distance from the outline but
 * at different places in the pixel grid get different alphas).
 */
static int test_alpha_subpixel(void) {
    const char *targets[] = {"faces/biden.jpg", "faces/obama.jpg"};
    for (int i = 0; i < 2; i++) {
        ag_error err;
        ag_decode_options dopt = {0};
        ag_image t = {0}, out = {0};
        char path[512];
        snprintf(path, sizeof path, DATA "%s", targets[i]);
        CHECK_OK(ag_image_decode_file(path, &dopt, &t, &err), &err);
        ag_face *f = calloc(1, sizeof *f);
        ag_fuse_point *p = malloc(sizeof(ag_fuse_point) * AG_FACE_LANDMARKS);
        CHECK(f && p && detect(&t, f) == 0);
        ag_fuse_options o;
        ag_fuse_options_init(&o);
        o.shape_ratio = o.texture_ratio = 1, o.mode = AG_FUSE_BLEND, o.brightness = 1;
        o.keep_occluders = 0; /* the outline alone: no hair over it */
        CHECK_OK(ag_face_fuse(&t, f, &t, f, &o, &out, NULL, &err), &err);
        face_points(f, p);
        ag_fuse_point oval[AG_FACE_OVAL_COUNT];
        oval_of(p, oval);
        double ramp = feather_of(p); /* blend's: a feather */
        enum { BINS = 256 };
        int cap = 20000, count = 0, *bin = malloc(sizeof(int) * cap);
        float *al = malloc(sizeof(float) * cap);
        CHECK(bin && al);
        for (int y = 0; y < t.height && count < cap; y++)
            for (int x = 0; x < t.width && count < cap; x++) {
                double d = signed_distance(oval, AG_FACE_OVAL_COUNT, x + 0.5, y + 0.5);
                if (d < 0.05 || d > ramp - 0.5 || (int)(d / 0.1) >= BINS)
                    continue;
                const uint8_t *tp = t.pixels + ((size_t)y * t.width + x) * t.bands;
                const uint8_t *op = out.pixels + ((size_t)y * t.width + x) * t.bands;
                float lab[3] = {tp[0], tp[1], tp[2]};
                ag_fuse_rgb_to_lab(lab, 1);
                lab[0] += 25;
                ag_fuse_lab_to_rgb(lab, 1);
                double full = 0.299 * ((double)lab[0] - tp[0]) + 0.587 * ((double)lab[1] - tp[1]) +
                              0.114 * ((double)lab[2] - tp[2]);
                if (full < 20) /* too near white to read an alpha from */
                    continue;
                double got =
                    0.299 * (op[0] - tp[0]) + 0.587 * (op[1] - tp[1]) + 0.114 * (op[2] - tp[2]);
                bin[count] = (int)(d / 0.1), al[count++] = (float)(got / full);
            }
        /* the median per bin, then the RMS about it */
        double sum = 0;
        int used = 0;
        float *v = malloc(sizeof(float) * cap);
        CHECK(v);
        for (int b = 0; b < BINS; b++) {
            int m = 0;
            for (int k = 0; k < count; k++)
                if (bin[k] == b)
                    v[m++] = al[k];
            if (m < 5)
                continue;
            for (int a = 1; a < m; a++) /* insertion sort: bins are small */
                for (int c = a; c > 0 && v[c] < v[c - 1]; c--) {
                    float tmp = v[c];
                    v[c] = v[c - 1], v[c - 1] = tmp;
                }
            float med = v[m / 2];
            for (int k = 0; k < m; k++)
                sum += (double)((v[k] - med) * (v[k] - med)), used++;
        }
        double rms = used ? sqrt(sum / used) : 1;
        printf("  %s: alpha's spread about a function of the distance to the outline: RMS %.4f "
               "over %d px (ramp %.1f px)\n",
               targets[i], rms, used, ramp);
        CHECK(used > 1000);
        CHECK(rms < 0.008);
        free(v), free(bin), free(al), free(p), free(f);
        ag_image_fini(&out);
        ag_image_fini(&t);
    }
    return 0;
}

/*
 * The window bound (#35 item 8): a 1024^2 target resized (size=1023) whose face's window
 * (~560^2) is over max_window_pixels 256^2, the source's face 2.2x the target's (shrunk
 * first, and again for the small fusion), allocates at most ag_face_fuse_bytes with that
 * bound, which is under a third of the unbounded term, and more than the bounded term less
 * its small fusion's work (so a term leaving that out fails). Runs first: the allocator's
 * peak must be this test's.
 */
static int test_window_bound_memory(void) {
    const int side = 1024;
    size_t px = (size_t)side * side, cap = (size_t)256 * 256;
    size_t before = ag_allocated_bytes(), peak_before = ag_allocated_peak_bytes();
    ag_image src = {side, side, 4, ag_malloc(px * 4)}, tgt = {side, side, 4, ag_malloc(px * 4)};
    ag_face *f = ag_malloc(sizeof *f * 2);
    CHECK(src.pixels && tgt.pixels && f);
    for (size_t i = 0; i < px * 4; i++)
        src.pixels[i] = (uint8_t)(i * 7 % 251), tgt.pixels[i] = (uint8_t)(i * 13 % 241);
    disc_face(&f[0], 512, 512, 480); /* 2.2x the target's: shrunk first */
    disc_face(&f[1], 512, 512, 215);
    ag_fuse_options o;
    ag_fuse_options_init(&o);
    o.shape_ratio = o.texture_ratio = 1, o.max_window_pixels = (long)cap, o.size = side - 1;
    ag_image out = {0};
    ag_fuse_timing tm;
    ag_error err;
    CHECK_OK(ag_face_fuse(&src, &f[0], &tgt, &f[1], &o, &out, &tm, &err), &err);
    size_t peak = ag_allocated_peak_bytes();
    CHECK(peak > peak_before);
    size_t inputs = 2 * px * 4 + 2 * sizeof(ag_face), used = peak - before - inputs;
    size_t bound = ag_face_fuse_bytes(px, px, side, cap);
    size_t whole = ag_face_fuse_bytes(px, px, side, px);
    size_t small_work = cap * 48;
    printf("  1024^2, window bound 256^2: small window %d px, source shrunk %.2f; peak %zu bytes, "
           "term %zu (unbounded %zu; less the small work %zu)\n",
           tm.region_px, (double)tm.source_shrink, used, bound, whole, bound - small_work);
    CHECK(tm.region_px <= (int)cap);
    CHECK(used <= bound && used > bound - small_work);
    CHECK(bound * 3 < whole);
    ag_image_fini(&out);
    ag_free(src.pixels), ag_free(tgt.pixels), ag_free(f);
    return 0;
}

/* On real photos: obama.jpg into biden.jpg with its window bounded to a quarter of itself
 * against unbounded: close over the face (PSNR), and no pixel changes that the unbounded
 * fusion's ring does not change (1 px of enlargement allowed). */
static int test_window_bound_photo(void) {
    loaded *l = calloc(1, sizeof *l);
    CHECK(l && load_pair(&pairs[0], l) == 0);
    ag_error err;
    ag_fuse_options o;
    ag_fuse_options_init(&o);
    ag_image whole = {0}, bounded = {0};
    ag_fuse_timing tw, tb;
    CHECK_OK(ag_face_fuse(&l->s, &l->sf, &l->t, &l->tf, &o, &whole, &tw, &err), &err);
    o.max_window_pixels = tw.region_px / 4;
    CHECK_OK(ag_face_fuse(&l->s, &l->sf, &l->t, &l->tf, &o, &bounded, &tb, &err), &err);
    int w = l->t.width, h = l->t.height, bands = l->t.bands;
    double se = 0;
    size_t n = 0, stray = 0;
    for (int y = 1; y < h - 1; y++)
        for (int x = 1; x < w - 1; x++) {
            size_t i = ((size_t)y * w + x) * bands;
            int changed_near = 0;
            for (int dy = -1; dy <= 1; dy++)
                for (int dx = -1; dx <= 1; dx++) {
                    size_t j = ((size_t)(y + dy) * w + x + dx) * bands;
                    changed_near |= memcmp(whole.pixels + j, l->t.pixels + j, 3) != 0;
                }
            if (!changed_near) {
                stray += memcmp(bounded.pixels + i, l->t.pixels + i, 3) != 0;
                continue;
            }
            for (int c = 0; c < 3; c++) {
                double d = (double)whole.pixels[i + c] - bounded.pixels[i + c];
                se += d * d;
            }
            n += 3;
        }
    double psnr = 10 * log10(255.0 * 255.0 / (se / (double)n));
    printf("  obama into biden, window bounded to %ld px (of %d): %d px fused; against the "
           "unbounded fusion %.1f dB over its region; %zu pixels changed outside it\n",
           o.max_window_pixels, tw.region_px, tb.region_px, psnr, stray);
    CHECK(tb.region_px <= o.max_window_pixels);
    CHECK(psnr > 30 && stray == 0);
    ag_image_fini(&whole);
    ag_image_fini(&bounded);
    free_pair(l);
    free(l);
    return 0;
}

int main(int argc, char **argv) {
    ag_error err = {0};
    if (ag_image_startup(argv[0], &err) != 0) {
        fprintf(stderr, "ag_image_startup: %s\n", err.message);
        return 1;
    }
    static const test_case tests[] = {
        TEST(test_window_bound_memory), TEST(test_alpha_subpixel),     TEST(test_seams_and_blocks),
        TEST(test_eye_brightness),      TEST(test_window_bound_photo),
    };
    int rc = test_run_all(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
    one_face_close();
    ag_image_shutdown();
    return rc;
}
