/*
 * test_fuse_quality.c - face fusion of real photos that are not a clean frontal pair (issue 31
 * items 4 and 5), measured on the public-domain faces of tests/data/faces:
 *   - lighting: obama.jpg lit from the image's left fused into biden.jpg lit from its right
 *     (each a smooth left-right gain on the real photo): the fused face's cheeks take the
 *     target's brightness ratio (left cheek over right), not the source's;
 *   - a small source (obama_small.png, Obama's face cut from a group photo, ~0.4 of the
 *     target's face): the fine detail in the fused face (mean |Laplacian| of the luma over the
 *     inner face) at least 60% of the target's own there with the bundled upscaler (enhance
 *     upscale), and under it with enhance none (the control);
 *   - a turned source (obama_turned.jpg, turned ~20 degrees): on the side it turns away
 *     (foreshortened), the fused cheek's gradient anisotropy (horizontal over vertical
 *     energy: a texture stretched sideways loses its horizontal gradients) at least 70% of
 *     the target's own there.
 * Each prints the figures before (the option off: main's fusion) and now.
 */
#include "test.h"

#include "../src/face/fuse_internal.h"
#include "../src/util/util_internal.h"

#include <stdint.h>

#define DATA AG_SOURCE_DIR "/tests/data/"
#define MODELS AG_SOURCE_DIR "/models/"

#include "one_face.h"

static int load(const char *name, ag_image *im) {
    ag_error err;
    ag_decode_options d = {0};
    char path[512];
    snprintf(path, sizeof path, DATA "%s", name);
    CHECK_OK(ag_image_decode_file(path, &d, im, &err), &err);
    return 0;
}

/* ---- measures ------------------------------------------------------------------------------ */

static double luma(const ag_image *im, int x, int y) {
    x = x < 0 ? 0 : x >= im->width ? im->width - 1 : x;
    y = y < 0 ? 0 : y >= im->height ? im->height - 1 : y;
    const uint8_t *p = im->pixels + ((size_t)y * im->width + x) * im->bands;
    return 0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2];
}

/* The fused landmarks at shape ratio r (as fuse.c makes them). */
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

static double eye_distance(const ag_fuse_point *p) {
    return hypot(p[33].x - p[263].x, p[33].y - p[263].y);
}

/* A measure summed over the disc of radius r round q: sum[0..k) of f's k outputs, count. */
typedef void (*pixel_fn)(const ag_image *im, int x, int y, double *acc);

static int disc(const ag_image *im, ag_fuse_point q, double r, pixel_fn f, double *acc) {
    int n = 0;
    for (int y = (int)(q.y - r); y <= (int)(q.y + r); y++)
        for (int x = (int)(q.x - r); x <= (int)(q.x + r); x++)
            if (x >= 1 && y >= 1 && x < im->width - 1 && y < im->height - 1 &&
                hypot(x + 0.5 - q.x, y + 0.5 - q.y) < r)
                f(im, x, y, acc), n++;
    return n;
}

static void add_luma(const ag_image *im, int x, int y, double *acc) {
    acc[0] += luma(im, x, y);
}

/* |Laplacian| of the luma: the fine detail. */
static void add_detail(const ag_image *im, int x, int y, double *acc) {
    acc[0] += fabs(4 * luma(im, x, y) - luma(im, x - 1, y) - luma(im, x + 1, y) -
                   luma(im, x, y - 1) - luma(im, x, y + 1));
}

/* Horizontal and vertical gradient energy. */
static void add_gradients(const ag_image *im, int x, int y, double *acc) {
    double gx = luma(im, x + 1, y) - luma(im, x - 1, y),
           gy = luma(im, x, y + 1) - luma(im, x, y - 1);
    acc[0] += gx * gx, acc[1] += gy * gy;
}

/* The cheek discs: landmark 205 (the image's left cheek on a frontal face) and 425. */
static const int cheek[2] = {205, 425};

/* Mean luma of the left cheek over the right's. */
static double side_ratio(const ag_image *im, const ag_fuse_point *p) {
    double r = 0.25 * eye_distance(p), s[2] = {0, 0};
    int n[2];
    for (int c = 0; c < 2; c++)
        n[c] = disc(im, p[cheek[c]], r, add_luma, &s[c]);
    return (s[0] / n[0]) / (s[1] / n[1]);
}

/* Mean |Laplacian| over the inner face: discs on both cheeks, the nose's bridge (6), the
 * forehead (151) and the chin (199), each a fifth of the eye distance. */
static double inner_detail(const ag_image *im, const ag_fuse_point *p) {
    static const int at[] = {205, 425, 6, 151, 199, 50, 280};
    double s = 0;
    int n = 0;
    for (size_t k = 0; k < sizeof at / sizeof at[0]; k++)
        n += disc(im, p[at[k]], 0.2 * eye_distance(p), add_detail, &s);
    return s / n;
}

/* Horizontal over vertical gradient energy on the cheek disc of side `side` (0 left). */
static double anisotropy(const ag_image *im, const ag_fuse_point *p, int side) {
    double acc[2] = {0, 0};
    disc(im, p[cheek[side]], 0.3 * eye_distance(p), add_gradients, acc);
    return acc[0] / acc[1];
}

/* ---- fusing -------------------------------------------------------------------------------- */

typedef struct pair {
    ag_image s, t;
    ag_face sf, tf;
} pair;

static int fuse(const pair *p, float ratio, float texture, const ag_fuse_options *base,
                ag_image *out) {
    ag_error err;
    ag_fuse_options o = *base;
    o.shape_ratio = ratio, o.texture_ratio = texture;
    CHECK_OK(ag_face_fuse(&p->s, &p->sf, &p->t, &p->tf, &o, out, NULL, &err), &err);
    return 0;
}

static void free_pair(pair *p) {
    ag_image_fini(&p->s);
    ag_image_fini(&p->t);
    free(p);
}

/* im's RGB times exp(k tanh((x - cx) / w)): a light from the left (k > 0) or the right. */
static void light_side(ag_image *im, double cx, double w, double k) {
    for (int y = 0; y < im->height; y++)
        for (int x = 0; x < im->width; x++) {
            double g = exp(k * tanh((cx - (x + 0.5)) / w));
            uint8_t *px = im->pixels + ((size_t)y * im->width + x) * im->bands;
            for (int c = 0; c < 3; c++) {
                double v = px[c] * g;
                px[c] = (uint8_t)(v > 255 ? 255 : v + 0.5);
            }
        }
}

static double face_centre_x(const ag_face *f, double *width) {
    *width = (double)f->landmarks[454][0] - (double)f->landmarks[234][0];
    return 0.5 * ((double)f->landmarks[454][0] + (double)f->landmarks[234][0]);
}

/*
 * Lighting: the source lit from the left (its left cheek ~1.6x its right), the target from
 * the right. The fused face's left/right cheek ratio is the target's (within a factor of
 * 1.15), not the source's; with relight off (main's fusion) it keeps much of the source's.
 */
static int test_lighting(void) {
    pair *p = calloc(1, sizeof *p);
    CHECK(p && load("faces/obama.jpg", &p->s) == 0 && load("faces/biden.jpg", &p->t) == 0);
    CHECK(detect(&p->s, &p->sf) == 0 && detect(&p->t, &p->tf) == 0);
    double w, cx = face_centre_x(&p->sf, &w);
    light_side(&p->s, cx, 0.15 * w, 0.2);
    cx = face_centre_x(&p->tf, &w);
    light_side(&p->t, cx, 0.15 * w, -0.2);
    CHECK(detect(&p->s, &p->sf) == 0 && detect(&p->t, &p->tf) == 0);
    ag_fuse_point *sp = malloc(sizeof(ag_fuse_point) * AG_FACE_LANDMARKS * 2), *fp;
    CHECK(sp);
    fp = sp + AG_FACE_LANDMARKS;
    fused_points(&p->sf, &p->tf, 1, sp); /* the source's on the target: shape ratio 1 */
    for (int i = 0; i < AG_FACE_LANDMARKS; i++)
        sp[i] = (ag_fuse_point){p->sf.landmarks[i][0], p->sf.landmarks[i][1]};
    double rs = side_ratio(&p->s, sp);
    fused_points(&p->sf, &p->tf, 0, fp);
    double rt = side_ratio(&p->t, fp);
    int failures = 0;
    for (int r = 0; r < 2; r++) {
        float ratio = r ? 1.0f : 0.5f;
        double got[2];
        for (int on = 0; on < 2; on++) {
            ag_fuse_options o;
            ag_fuse_options_init(&o);
            o.relight = on;
            ag_image out = {0};
            CHECK(fuse(p, ratio, ratio, &o, &out) == 0);
            fused_points(&p->sf, &p->tf, ratio, fp);
            got[on] = side_ratio(&out, fp);
            ag_image_fini(&out);
        }
        double q = got[1] / rt;
        int ok = q > 1 / 1.15 && q < 1.15;
        printf("  ratio %.1f: left/right cheeks %.3f (source %.3f, target %.3f: x%.3f of the "
               "target's); relight off (main) %.3f (x%.3f)%s\n",
               (double)ratio, got[1], rs, rt, q, got[0], got[0] / rt, ok ? "" : " SOURCE'S LIGHT");
        failures += !ok;
    }
    free(sp);
    free_pair(p);
    CHECK(failures == 0);
    return 0;
}

/*
 * A small source: Obama's face cut from a group photo (about 0.4 of the target's face). The
 * fused face's detail over the target's own there (the target warped onto the same geometry:
 * the fusion at texture ratio 0), at ratios 0.7 and 1: at least 0.6 with the bundled
 * upscaler, under it with enhance none.
 */
static int test_small_source_detail(void) {
    pair *p = calloc(1, sizeof *p);
    CHECK(p && load("faces/obama_small.png", &p->s) == 0 && load("faces/biden.jpg", &p->t) == 0);
    CHECK(detect(&p->s, &p->sf) == 0 && detect(&p->t, &p->tf) == 0);
    ag_error err;
    ag_model *up = NULL;
    ag_engine *engine = NULL;
    double factor;
    CHECK(ag_face_fuse_wants_enhance(&p->sf, &p->tf, NULL, &factor));
    CHECK_OK(ag_upscaler_load(MODELS "esrgan-slim-x4.safetensors", 0, &up, &err), &err);
    ag_engine_options eo = {.threads = 2};
    CHECK_OK(ag_engine_create(up, &eo, &engine, &err), &err);
    ag_fuse_point *fp = malloc(sizeof(ag_fuse_point) * AG_FACE_LANDMARKS);
    CHECK(fp);
    int failures = 0;
    for (int r = 0; r < 2; r++) {
        float ratio = r ? 1.0f : 0.7f;
        double detail[2], own;
        ag_fuse_options o;
        ag_fuse_options_init(&o);
        o.upscaler = engine;
        ag_fuse_timing tm;
        ag_image out = {0};
        CHECK(fuse(p, ratio, 0, &o, &out) == 0);
        fused_points(&p->sf, &p->tf, ratio, fp);
        own = inner_detail(&out, fp);
        ag_image_fini(&out);
        for (int on = 0; on < 2; on++) {
            o.enhance = on ? AG_FUSE_ENHANCE_UPSCALE : AG_FUSE_ENHANCE_NONE;
            o.shape_ratio = o.texture_ratio = ratio;
            CHECK_OK(ag_face_fuse(&p->s, &p->sf, &p->t, &p->tf, &o, &out, &tm, &err), &err);
            CHECK(tm.enhanced == (on ? AG_FUSE_ENHANCE_UPSCALE : 0));
            detail[on] = inner_detail(&out, fp) / own;
            ag_image_fini(&out);
        }
        int ok = detail[1] >= 0.6 && detail[0] < 0.6;
        printf("  ratio %.1f (the source's face x%.2f of the target's): detail x%.3f of the "
               "target's (upscaled, %.0f ms); enhance none (main) x%.3f%s\n",
               (double)ratio, 1 / factor, detail[1], tm.enhance_ms, detail[0],
               ok ? "" : " BLURRED");
        failures += !ok;
    }
    free(fp);
    ag_engine_destroy(engine);
    ag_model_destroy(up);
    free_pair(p);
    CHECK(failures == 0);
    return 0;
}

/*
 * The restore path on the small source with the suite's seeded GPEN-64 (random weights: its
 * output is no face, so this checks the plumbing and the geometry): the new source is the
 * restorer's 64 x 64 crop, the face's quad mapped onto the crop's corners and its eyes level
 * about the crop's centre line (FFHQ's alignment); the public call fuses the source as it is
 * (a restorer's crop whose face is smaller than the source's own does not sharpen it), and
 * refuses enhance restore without a restorer.
 */
static int test_restore_path(void) {
    pair *p = calloc(1, sizeof *p);
    CHECK(p && load("faces/obama_small.png", &p->s) == 0 && load("faces/biden.jpg", &p->t) == 0);
    CHECK(detect(&p->s, &p->sf) == 0 && detect(&p->t, &p->tf) == 0);
    ag_error err;
    ag_model *model = NULL;
    ag_engine *engine = NULL;
    CHECK_OK(
        ag_restore_model_load(AG_SOURCE_DIR "/tests/fixtures/restore/gpen64_zip.pt", &model, &err),
        &err);
    ag_engine_options eo = {.threads = 1};
    CHECK_OK(ag_engine_create(model, &eo, &engine, &err), &err);
    ag_fuse_options o;
    ag_fuse_options_init(&o);
    o.restorer = engine;
    CHECK(ag_fuse_enhance_kind(&o) == AG_FUSE_ENHANCE_RESTORE);
    ag_image sharp = {0};
    ag_face *face = malloc(sizeof *face);
    CHECK(face);
    CHECK_OK(ag_fuse_enhance_source(&p->s, &p->sf, &o, AG_FUSE_ENHANCE_RESTORE, 1 << 20, &sharp,
                                    face, &err),
             &err);
    const float corner[4][2] = {{0, 0}, {0, 64}, {64, 64}, {64, 0}}; /* TL, BL, BR, TR */
    double worst = 0;
    for (int k = 0; k < 4; k++)
        worst = fmax(worst, hypot((double)(face->quad[k][0] - corner[k][0]),
                                  (double)(face->quad[k][1] - corner[k][1])));
    double ex = 0, ey[2] = {0, 0};
    const int *eyes[2] = {ag_fuse_eye_right, ag_fuse_eye_left};
    for (int e = 0; e < 2; e++)
        for (int k = 0; k < 16; k++)
            ex += (double)face->landmarks[eyes[e][k]][0] / 32,
                ey[e] += (double)face->landmarks[eyes[e][k]][1] / 16;
    printf("  restored crop %dx%d: quad off its corners by %.2g px; eyes' midpoint x %.1f, their "
           "heights %.1f and %.1f\n",
           sharp.width, sharp.height, worst, ex, ey[0], ey[1]);
    CHECK(sharp.width == 64 && sharp.height == 64 && worst < 1e-3);
    CHECK(fabs(ex - 32) < 2 && fabs(ey[0] - ey[1]) < 2);
    ag_image_fini(&sharp);
    free(face);
    ag_fuse_timing tm;
    ag_image out = {0};
    o.enhance = AG_FUSE_ENHANCE_RESTORE;
    CHECK_OK(ag_face_fuse(&p->s, &p->sf, &p->t, &p->tf, &o, &out, &tm, &err), &err);
    /* GPEN-64's crop holds a face of 27 px, smaller than the source's own: not used */
    CHECK(tm.enhanced == 0 && out.width == p->t.width);
    ag_image_fini(&out);
    o.restorer = NULL; /* restore asked for, no restorer: refused */
    CHECK(ag_face_fuse(&p->s, &p->sf, &p->t, &p->tf, &o, &out, &tm, &err) == AG_E_ARG);
    printf("  without a restorer: %s\n", err.message);
    ag_engine_destroy(engine);
    ag_model_destroy(model);
    free_pair(p);
    return 0;
}

/*
 * A turned source (Obama turned ~20 degrees): on the side it turns away from, the fused
 * cheek's anisotropy (horizontal over vertical gradient energy) against the target's own
 * there (texture ratio 0), at ratios 0.5 and 0.7: at least 0.7 (a sideways stretch lowers it).
 */
static int test_turned_source(void) {
    pair *p = calloc(1, sizeof *p);
    CHECK(p && load("faces/obama_turned.jpg", &p->s) == 0 && load("faces/biden.jpg", &p->t) == 0);
    CHECK(detect(&p->s, &p->sf) == 0 && detect(&p->t, &p->tf) == 0);
    /* the side turned away: the nose tip (1) nearer that side's oval edge (234 left, 454) */
    const float(*l)[2] = (const float(*)[2])p->sf.landmarks;
    int far = fabsf(l[1][0] - l[234][0]) < fabsf(l[454][0] - l[1][0]) ? 0 : 1;
    printf("  the source turns its %s cheek away (nose to edges %.0f and %.0f px)\n",
           far ? "right" : "left", (double)fabsf(l[1][0] - l[234][0]),
           (double)fabsf(l[454][0] - l[1][0]));
    ag_fuse_point *fp = malloc(sizeof(ag_fuse_point) * AG_FACE_LANDMARKS);
    CHECK(fp);
    int failures = 0;
    for (int r = 0; r < 2; r++) {
        float ratio = r ? 0.7f : 0.5f;
        ag_fuse_options o;
        ag_fuse_options_init(&o);
        ag_image out = {0};
        CHECK(fuse(p, ratio, 0, &o, &out) == 0);
        fused_points(&p->sf, &p->tf, ratio, fp);
        double own = anisotropy(&out, fp, far), got[2];
        ag_image_fini(&out);
        for (int on = 0; on < 2; on++) {
            o.pose = on;
            CHECK(fuse(p, ratio, ratio, &o, &out) == 0);
            got[on] = anisotropy(&out, fp, far) / own;
            ag_image_fini(&out);
        }
        int ok = got[1] >= 0.7;
        printf("  ratio %.1f: the far cheek's anisotropy x%.3f of the target's (%.3f); pose off "
               "(main) x%.3f%s\n",
               (double)ratio, got[1], own, got[0], ok ? "" : " STRETCHED");
        failures += !ok;
    }
    free(fp);
    free_pair(p);
    CHECK(failures == 0);
    return 0;
}

int main(int argc, char **argv) {
    ag_error err = {0};
    if (ag_image_startup(argv[0], &err) != 0) {
        fprintf(stderr, "ag_image_startup: %s\n", err.message);
        return 1;
    }
    static const test_case tests[] = {
        TEST(test_lighting),
        TEST(test_small_source_detail),
        TEST(test_restore_path),
        TEST(test_turned_source),
    };
    int rc = test_run_all(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
    one_face_close();
    ag_image_shutdown();
    return rc;
}
