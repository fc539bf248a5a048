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

__attribute__((unused)) static double now_ms(void) {
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

int main(int argc, char **argv) {
    ag_error err = {0};
    if (ag_image_startup(argv[0], &err) != 0) {
        fprintf(stderr, "ag_image_startup: %s\n", err.message);
        return 1;
    }
    static const test_case tests[] = {
        TEST(test_golden_detector),
        TEST(test_golden_mesh),
        TEST(test_astronaut),
        TEST(test_no_face),
    };
    int rc = test_run_all(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
    ag_face_detector_destroy(detector());
    ag_model_destroy(det_model);
    ag_model_destroy(mesh_model);
    ag_image_shutdown();
    return rc;
}
