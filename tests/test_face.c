/*
 * test_face.c - the face pipeline (src/face/): the two converted networks' raw outputs
 * against tools/face_reference.py's TFLite interpreter (tests/fixtures/face/, .agff files), both
 * backends; detection, landmarks and the FFHQ crop of astronaut.png against the same
 * reference; geometry with known answers on synthetic images (tests/data/generated/faces/,
 * made by tools/make_face_images.py); no face on coffee.png; paste-back leaving every pixel
 * outside the masks exactly as the plain conversion; bad inputs; the time per face.
 */
#include "test.h"

#include "../src/engine_internal.h"
#include "../src/face/face_internal.h"

#include <stdint.h>
#include <time.h>

#define MODELS AG_SOURCE_DIR "/models/"
#define FIXTURES AG_SOURCE_DIR "/tests/fixtures/face/"
#define DATA AG_SOURCE_DIR "/tests/data/"

static ag_model *det_model, *mesh_model;

static int load_models(void) {
    ag_error err;
    if (!det_model)
        CHECK_OK(ag_model_load(MODELS "face-detect.safetensors", &det_model, &err), &err);
    if (!mesh_model)
        CHECK_OK(ag_model_load(MODELS "face-mesh.safetensors", &mesh_model, &err), &err);
    return 0;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- golden raw outputs ---------------------------------------------------------------- */

typedef struct agff {
    uint8_t *bytes;
    size_t size;
    int kind, side;
    const uint8_t *input;
    int outputs;
    const float *out[4];
    uint32_t count[4];
} agff;

static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int read_agff(const char *path, agff *f) {
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    CHECK_MSG(fp, "%s: cannot open", path);
    fseek(fp, 0, SEEK_END);
    f->size = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f->bytes = malloc(f->size);
    size_t got = fread(f->bytes, 1, f->size, fp);
    fclose(fp);
    CHECK(got == f->size && f->size > 20 && !memcmp(f->bytes, "AGFF", 4) &&
          rd32(f->bytes + 4) == 1);
    f->kind = (int)rd32(f->bytes + 8), f->side = (int)rd32(f->bytes + 12);
    size_t off = 16;
    f->input = f->bytes + off;
    off += (size_t)f->side * f->side * 3;
    f->outputs = (int)rd32(f->bytes + off);
    off += 4;
    CHECK(f->outputs >= 1 && f->outputs <= 4);
    for (int i = 0; i < f->outputs; i++) {
        f->count[i] = rd32(f->bytes + off);
        off += 4;
        CHECK(off + 4 * (size_t)f->count[i] <= f->size);
        f->out[i] = (const float *)(f->bytes + off);
        off += 4 * (size_t)f->count[i];
    }
    return 0;
}

/* The network of `f` on both backends against the fixture: max |a - b| over all outputs. */
static int golden(const char *name, ag_model *model, double tol) {
    agff f;
    char path[512];
    snprintf(path, sizeof path, FIXTURES "%s", name);
    if (read_agff(path, &f))
        return 1;
    size_t n = (size_t)f.side * f.side;
    float *in = malloc(sizeof(float) * n * 3);
    for (size_t i = 0; i < n * 3; i++)
        in[i] = f.kind == 0 ? f.input[i] / 127.5f - 1.0f : f.input[i] / 255.0f;
    for (int backend = 1; backend >= 0; backend--) {
        ag_engine_options o = {.backend = backend ? AG_BACKEND_REFERENCE : AG_BACKEND_ONEDNN,
                               .threads = 2};
        ag_engine *e;
        ag_error err;
        CHECK_OK(ag_engine_create(model, &o, &e, &err), &err);
        float *outs[4];
        for (int i = 0; i < f.outputs; i++)
            outs[i] = malloc(sizeof(float) * f.count[i]);
        CHECK_OK(ag_engine_run_raw(e, in, f.side, f.side, outs, &err), &err);
        double worst = 0, scale = 0, excess = 0;
        for (int i = 0; i < f.outputs; i++) {
            int h, w, c;
            CHECK(ag_engine_output_shape(e, i, &h, &w, &c) == f.outputs);
            CHECK((uint32_t)(h * w * c) == f.count[i]);
            for (uint32_t j = 0; j < f.count[i]; j++) {
                double d = fabs((double)outs[i][j] - (double)f.out[i][j]);
                double r = fabs((double)f.out[i][j]);
                worst = d > worst ? d : worst;
                scale = r > scale ? r : scale;
                excess = d - (tol + 1e-5 * r) > excess ? d - (tol + 1e-5 * r) : excess;
            }
            free(outs[i]);
        }
        printf("  %s (%s): max abs error %.2e (outputs up to %.1f; tolerance %.0e)\n", name,
               backend ? "reference" : "onednn", worst, scale, tol);
        ag_engine_destroy(e);
        CHECK_MSG(excess == 0, "%s: beyond |a - b| <= %g + 1e-5 |ref|", name, tol);
    }
    free(in);
    free(f.bytes);
    return 0;
}

static int test_golden_detector(void) {
    if (load_models())
        return 1;
    return golden("detect_astronaut.agff", det_model, 1e-3) ||
           golden("detect_chelsea.agff", det_model, 1e-3);
}

static int test_golden_mesh(void) {
    if (load_models())
        return 1;
    return golden("mesh_astronaut.agff", mesh_model, 1e-3);
}

/* ---- the astronaut: detection, the quad, the crop -------------------------------------- */

static int load_image(const char *path, ag_image *im) {
    ag_error err;
    ag_decode_options o = {0};
    CHECK_OK(ag_image_decode_file(path, &o, im, &err), &err);
    return 0;
}

static ag_face_detector *detector(void) {
    static ag_face_detector *d;
    ag_error err;
    if (!d && !load_models()) {
        ag_engine_options o = {.threads = 2};
        if (ag_face_detector_create(det_model, mesh_model, &o, &d, &err))
            fprintf(stderr, "  detector: %s\n", err.message);
    }
    return d;
}

static int test_astronaut(void) {
    ag_face_detector *d = detector();
    CHECK(d);
    ag_image im;
    if (load_image(DATA "astronaut.png", &im))
        return 1;
    ag_face faces[4];
    int n, found;
    ag_error err;
    CHECK_OK(ag_faces_detect(d, &im, NULL, faces, 4, &n, &found, &err), &err);
    CHECK_MSG(n == 1 && found == 1, "%d faces", n);
    CHECK(faces[0].has_landmarks && faces[0].score > 0.9f);
    /* The reference's quad (tools/face_reference.py, the same recipe in numpy). */
    FILE *fp = fopen(FIXTURES "portrait_astronaut.txt", "r");
    CHECK(fp);
    char line[256];
    CHECK(fgets(line, sizeof line, fp));
    float q[8];
    CHECK(fscanf(fp, "%f %f %f %f %f %f %f %f", &q[0], &q[1], &q[2], &q[3], &q[4], &q[5], &q[6],
                 &q[7]) == 8);
    fclose(fp);
    double worst = 0;
    for (int k = 0; k < 8; k++) {
        double dq = fabs((double)faces[0].quad[k / 2][k % 2] - (double)q[k]);
        worst = dq > worst ? dq : worst;
    }
    printf("  quad vs reference: max %.3f px\n", worst);
    CHECK(worst < 0.5);
    /* The crop of the reference's own quad, against its crop: the resampler alone. */
    ag_face ref = faces[0];
    memcpy(ref.quad, q, sizeof ref.quad);
    ag_image crop, want;
    CHECK_OK(ag_face_align(&im, &ref, 512, &crop, &err), &err);
    if (load_image(FIXTURES "portrait_astronaut.png", &want))
        return 1;
    CHECK(want.width == 512 && want.height == 512 && want.bands == crop.bands);
    int diff = 0;
    for (size_t i = 0; i < (size_t)512 * 512 * 3; i++) {
        int dv = abs((int)crop.pixels[i] - (int)want.pixels[i]);
        diff = dv > diff ? dv : diff;
    }
    printf("  512 crop vs reference: max %d levels\n", diff);
    CHECK(diff <= 2);
    /* And the crop of our own quad. */
    ag_image own;
    CHECK_OK(ag_face_align(&im, &faces[0], 512, &own, &err), &err);
    diff = 0;
    for (size_t i = 0; i < (size_t)512 * 512 * 3; i++) {
        int dv = abs((int)own.pixels[i] - (int)want.pixels[i]);
        diff = dv > diff ? dv : diff;
    }
    printf("  512 crop of our quad vs reference: max %d levels\n", diff);
    ag_image_fini(&own);
    ag_image_fini(&crop);
    ag_image_fini(&want);
    ag_image_fini(&im);
    return 0;
}

static int test_no_face(void) {
    ag_face_detector *d = detector();
    CHECK(d);
    const char *photos[] = {DATA "coffee.png", DATA "chelsea.png"};
    for (int i = 0; i < 2; i++) {
        ag_image im;
        if (load_image(photos[i], &im))
            return 1;
        ag_face faces[4];
        int n, found;
        ag_error err;
        CHECK_OK(ag_faces_detect(d, &im, NULL, faces, 4, &n, &found, &err), &err);
        CHECK_MSG(n == 0 && found == 0, "%s: %d faces", photos[i], n);
        ag_image_fini(&im);
    }
    return 0;
}

/* ---- geometry with known answers --------------------------------------------------------- */

#define GEN DATA "generated/faces/"

static double quad_angle(const float q[4][2]) {
    return atan2((double)q[3][1] - (double)q[0][1], (double)q[3][0] - (double)q[0][0]);
}

static double quad_side(const float q[4][2]) {
    return hypot((double)q[3][0] - (double)q[0][0], (double)q[3][1] - (double)q[0][1]);
}

static void quad_centre(const float q[4][2], double c[2]) {
    c[0] = c[1] = 0;
    for (int k = 0; k < 4; k++)
        c[0] += (double)q[k][0] / 4, c[1] += (double)q[k][1] / 4;
}

/* The astronaut's own quad, mapped through each copy's known transform, against what is
 * found in the synthetic images: one face per copy, angle within 3 degrees, side within 5%,
 * centre within 5% of the side. */
static int test_geometry(void) {
    ag_face_detector *d = detector();
    CHECK(d);
    ag_image base;
    if (load_image(DATA "astronaut.png", &base))
        return 1;
    ag_face faces[AG_FACE_MAX];
    int n;
    ag_error err;
    CHECK_OK(ag_faces_detect(d, &base, NULL, faces, 4, &n, NULL, &err), &err);
    CHECK(n == 1);
    float bq[4][2];
    memcpy(bq, faces[0].quad, sizeof bq);
    double bx[2] = {(double)bq[3][0] - (double)bq[0][0], (double)bq[3][1] - (double)bq[0][1]};
    double bc[2];
    quad_centre((const float(*)[2])bq, bc);
    ag_image_fini(&base);

    FILE *fp = fopen(GEN "answers.txt", "r");
    CHECK_MSG(fp, "%s: run tools/make_face_images.py", GEN "answers.txt");
    char line[512], current[128] = "";
    double maps[16][6];
    int copies = 0, files = 0, total = 0;
    double worst_angle = 0, worst_side = 0, worst_centre = 0;
    for (int done = 0; !done;) {
        char name[128] = "";
        double m[6];
        int got = 0;
        if (!fgets(line, sizeof line, fp))
            done = 1;
        else if (line[0] == '#')
            continue;
        else
            got = sscanf(line, "%127s %lf %lf %lf %lf %lf %lf", name, &m[0], &m[1], &m[2], &m[3],
                         &m[4], &m[5]) == 7;
        if ((done || strcmp(name, current)) && copies) {
            /* Check the file collected so far. */
            char path[512];
            snprintf(path, sizeof path, GEN "%s", current);
            ag_image im;
            if (load_image(path, &im))
                return 1;
            CHECK_OK(ag_faces_detect(d, &im, NULL, faces, AG_FACE_MAX, &n, NULL, &err), &err);
            CHECK_MSG(n == copies, "%s: %d faces for %d copies", current, n, copies);
            for (int c = 0; c < copies; c++) {
                const double *a = maps[c];
                double ec[2] = {a[0] * bc[0] + a[1] * bc[1] + a[2],
                                a[3] * bc[0] + a[4] * bc[1] + a[5]};
                double mirror = a[0] * a[4] - a[1] * a[3] < 0 ? -1.0 : 1.0;
                double ex[2] = {mirror * (a[0] * bx[0] + a[1] * bx[1]),
                                mirror * (a[3] * bx[0] + a[4] * bx[1])};
                double eside = hypot(ex[0], ex[1]), eangle = atan2(ex[1], ex[0]);
                int best = -1;
                double best_d = 1e30;
                for (int i = 0; i < n; i++) {
                    double fc[2];
                    quad_centre((const float(*)[2])faces[i].quad, fc);
                    double dd = hypot(fc[0] - ec[0], fc[1] - ec[1]);
                    if (dd < best_d)
                        best_d = dd, best = i;
                }
                double dangle = fabs(quad_angle((const float(*)[2])faces[best].quad) - eangle);
                dangle = fmin(dangle, 2 * M_PI - dangle) * 180 / M_PI;
                double dside = fabs(quad_side((const float(*)[2])faces[best].quad) / eside - 1);
                printf("  %s copy %d: angle %+.1f (expected %+.1f), side %.1f (%.1f), centre off "
                       "%.1f px\n",
                       current, c, quad_angle((const float(*)[2])faces[best].quad) * 180 / M_PI,
                       eangle * 180 / M_PI, quad_side((const float(*)[2])faces[best].quad), eside,
                       best_d);
                CHECK_MSG(dangle <= 3.0 && dside <= 0.05 && best_d <= 0.05 * eside,
                          "%s copy %d: angle off %.2f deg, side off %.1f%%, centre off %.1f px",
                          current, c, dangle, 100 * dside, best_d);
                worst_angle = fmax(worst_angle, dangle);
                worst_side = fmax(worst_side, dside);
                worst_centre = fmax(worst_centre, best_d / eside);
                faces[best].quad[0][0] = 1e30f; /* matched: no second copy takes it */
                total++;
            }
            ag_image_fini(&im);
            files++;
            copies = 0;
        }
        if (got) {
            snprintf(current, sizeof current, "%s", name);
            CHECK(copies < 16);
            memcpy(maps[copies++], m, sizeof m);
        }
    }
    fclose(fp);
    printf("  %d copies in %d images: worst angle error %.2f deg, side %.2f%%, centre %.2f%% of "
           "the side\n",
           total, files, worst_angle, 100 * worst_side, 100 * worst_centre);
    CHECK(total >= 10);
    return 0;
}

/* ---- paste-back ------------------------------------------------------------------------- */

/* Every pixel outside the faces' masks is exactly the plain conversion's; inside, the faces
 * changed. The mask lies within the face oval's bounding box plus the feather (2 x size/32
 * crop pixels). */
static int test_paste_exact(void) {
    ag_face_detector *d = detector();
    CHECK(d);
    ag_error err;
    ag_image im;
    ag_decode_options o = {.max_side = 450};
    CHECK_OK(ag_image_decode_file(GEN "mirrored.jpg", &o, &im, &err), &err);
    ag_face faces[4];
    int n;
    CHECK_OK(ag_faces_detect(d, &im, NULL, faces, 4, &n, NULL, &err), &err);
    CHECK(n == 2 && faces[0].has_landmarks && faces[1].has_landmarks);
    ag_model *model;
    CHECK_OK(ag_model_load(MODELS "hayao.safetensors", &model, &err), &err);
    ag_engine_options eo = {.threads = 2};
    ag_engine *e;
    CHECK_OK(ag_engine_create(model, &eo, &e, &err), &err);
    ag_image plain, pasted;
    const int size = 128;
    CHECK_OK(ag_stylize(e, &im, 0, &plain, &err), &err);
    CHECK_OK(ag_stylize_paste_faces(e, NULL, &im, faces, n, size, &pasted, &err), &err);
    CHECK(pasted.width == plain.width && pasted.height == plain.height);
    double box[4][4];
    for (int f = 0; f < n; f++) {
        double x0 = 1e30, y0 = 1e30, x1 = -1e30, y1 = -1e30;
        for (int i = 0; i < AG_FACE_OVAL_COUNT; i++) {
            const float *p = faces[f].landmarks[ag_face_oval[i]];
            x0 = fmin(x0, p[0]), x1 = fmax(x1, p[0]), y0 = fmin(y0, p[1]), y1 = fmax(y1, p[1]);
        }
        double margin =
            (2.0 * (size / 32) + 3) * quad_side((const float(*)[2])faces[f].quad) / size;
        box[f][0] = x0 - margin, box[f][1] = y0 - margin;
        box[f][2] = x1 + margin, box[f][3] = y1 + margin;
    }
    long outside = 0, changed_inside = 0, inside = 0;
    for (int y = 0; y < im.height; y++)
        for (int x = 0; x < im.width; x++) {
            int in_mask = 0;
            for (int f = 0; f < n; f++)
                in_mask |= x + 0.5 >= box[f][0] && x + 0.5 <= box[f][2] && y + 0.5 >= box[f][1] &&
                           y + 0.5 <= box[f][3];
            size_t i = ((size_t)y * im.width + x) * im.bands;
            int same = !memcmp(plain.pixels + i, pasted.pixels + i, (size_t)im.bands);
            if (!in_mask) {
                CHECK_MSG(same, "pixel (%d, %d) outside every mask changed", x, y);
                outside++;
            } else {
                inside++;
                changed_inside += !same;
            }
        }
    printf("  %dx%d, %d faces at %d: %ld pixels outside the masks all equal; %ld of %ld inside "
           "changed\n",
           im.width, im.height, n, size, outside, changed_inside, inside);
    CHECK(changed_inside > inside / 4);
    ag_image_fini(&plain);
    ag_image_fini(&pasted);
    ag_engine_destroy(e);
    ag_model_destroy(model);
    ag_image_fini(&im);
    return 0;
}

/* ---- bad input -------------------------------------------------------------------------- */

static int detect_synthetic(int w, int h, int bands, uint8_t fill, int *n) {
    ag_image im = {w, h, bands, malloc((size_t)w * h * bands)};
    memset(im.pixels, fill, (size_t)w * h * bands);
    ag_face faces[4];
    ag_error err;
    CHECK_OK(ag_faces_detect(detector(), &im, NULL, faces, 4, n, NULL, &err), &err);
    free(im.pixels);
    return 0;
}

static int test_bad_input(void) {
    ag_face_detector *d = detector();
    CHECK(d);
    int n;
    size_t before = ag_allocated_bytes();
    CHECK(detect_synthetic(8, 8, 3, 128, &n) == 0 && n == 0);
    CHECK(detect_synthetic(10000, 8, 3, 90, &n) == 0 && n == 0);
    CHECK(detect_synthetic(8, 10000, 4, 200, &n) == 0 && n == 0);
    CHECK(detect_synthetic(1, 1, 3, 0, &n) == 0 && n == 0);
    CHECK(ag_allocated_bytes() == before);
    ag_error err;
    ag_face faces[AG_FACE_MAX];
    int found;
    /* A face cut by the border: whatever is found, its crop works. */
    ag_image im;
    if (load_image(GEN "cut.jpg", &im))
        return 1;
    CHECK_OK(ag_faces_detect(d, &im, NULL, faces, AG_FACE_MAX, &n, &found, &err), &err);
    for (int i = 0; i < n; i++) {
        ag_image crop;
        CHECK_OK(ag_face_align(&im, &faces[i], 64, &crop, &err), &err);
        ag_image_fini(&crop);
    }
    printf("  cut.jpg: %d faces\n", n);
    ag_image_fini(&im);
    /* 50 faces: the default cap of 8 keeps the largest, and says how many there were. */
    if (load_image(GEN "many.jpg", &im))
        return 1;
    CHECK_OK(ag_faces_detect(d, &im, NULL, faces, AG_FACE_MAX, &n, &found, &err), &err);
    printf("  many.jpg (50 copies): %d found, %d kept\n", found, n);
    CHECK(n == 8 && found >= 30);
    for (int i = 1; i < n; i++)
        CHECK((faces[i].box[2] - faces[i].box[0]) * (faces[i].box[3] - faces[i].box[1]) <=
              (faces[i - 1].box[2] - faces[i - 1].box[0]) *
                  (faces[i - 1].box[3] - faces[i - 1].box[1]));
    ag_image_fini(&im);
    /* A grey image (decoded to RGB) still has its face. */
    if (load_image(GEN "grey.png", &im))
        return 1;
    CHECK_OK(ag_faces_detect(d, &im, NULL, faces, AG_FACE_MAX, &n, &found, &err), &err);
    CHECK(n == 1);
    ag_image_fini(&im);
    /* Bad arguments. */
    CHECK(ag_faces_detect(d, NULL, NULL, faces, 4, &n, NULL, &err) == AG_E_ARG);
    ag_face zero;
    memset(&zero, 0, sizeof zero);
    ag_image tiny = {8, 8, 3, calloc(1, 192)}, crop;
    CHECK(ag_face_align(&tiny, &zero, 512, &crop, &err) == AG_E_ARG); /* a degenerate quad */
    free(tiny.pixels);
    return 0;
}

/* Detection + landmarks of one face at 2 threads (the detector is created with 2). */
static int test_speed(void) {
    ag_face_detector *d = detector();
    CHECK(d);
    ag_image im;
    if (load_image(DATA "astronaut.png", &im))
        return 1;
    ag_face faces[4];
    int n;
    ag_error err;
    double best = 1e30, total = 0;
    const int runs = 20;
    for (int i = 0; i < runs + 2; i++) {
        double t0 = now_ms();
        CHECK_OK(ag_faces_detect(d, &im, NULL, faces, 4, &n, NULL, &err), &err);
        double t = now_ms() - t0;
        if (i >= 2)
            total += t, best = t < best ? t : best;
        CHECK(n == 1);
    }
    ag_face_options one = {.single_pass = 1};
    double best1 = 1e30;
    for (int i = 0; i < runs; i++) {
        double t0 = now_ms();
        CHECK_OK(ag_faces_detect(d, &im, &one, faces, 4, &n, NULL, &err), &err);
        double t = now_ms() - t0;
        best1 = t < best1 ? t : best1;
        CHECK(n == 1);
    }
    printf("  astronaut.png (512x512, 1 face), 2 threads: %.1f ms median-ish mean, %.1f ms best "
           "(whole image + tiles); %.1f ms best single pass (detector + mesh)\n",
           total / runs, best, best1);
    ag_image_fini(&im);
    return 0;
}

int main(int argc, char **argv) {
    ag_error err = {0};
    if (ag_image_startup(argv[0], &err) != 0) {
        fprintf(stderr, "ag_image_startup: %s\n", err.message);
        return 1;
    }
    static const test_case tests[] = {
        TEST(test_golden_detector), TEST(test_golden_mesh), TEST(test_astronaut),
        TEST(test_no_face),         TEST(test_geometry),    TEST(test_paste_exact),
        TEST(test_bad_input),       TEST(test_speed),
    };
    int rc = test_run_all(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
    ag_face_detector_destroy(detector());
    ag_model_destroy(det_model);
    ag_model_destroy(mesh_model);
    ag_image_shutdown();
    return rc;
}
