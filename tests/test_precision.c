/*
 * test_precision.c - reduced precision against our fp32 on the test photos: the 8-bit
 * output of --precision bf16 must reach PSNR >= 40 dB against the fp32 output (the speed
 * issue's bound). Photos are downscaled to a long side of 256 to keep the test short.
 */
#include "test.h"

#include "animegan.h"

#include <math.h>

#define BF16_MIN_PSNR_DB 40.0

static const char *photos[] = {"astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg"};

static double psnr(const ag_image *a, const ag_image *b) {
    size_t n = (size_t)a->width * a->height * a->bands;
    double se = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a->pixels[i] - (double)b->pixels[i];
        se += d * d;
    }
    double mse = se / (double)n;
    return mse == 0.0 ? (double)INFINITY : 10.0 * log10(255.0 * 255.0 / mse);
}

static int stylize_with(const ag_model *model, ag_precision precision, const ag_image *in,
                        ag_image *out) {
    ag_error err;
    ag_engine_options opt = {.precision = precision, .threads = 2};
    ag_engine *engine;
    CHECK_OK(ag_engine_create(model, &opt, &engine, &err), &err);
    int rc = ag_stylize(engine, in, 0, out, &err);
    ag_engine_destroy(engine);
    CHECK_OK(rc, &err);
    return 0;
}

/* Where oneDNN has no bf16 convolution (below AVX-512), the engine must refuse bf16 with
 * the resolver's reason, not fail in oneDNN's primitive creation. */
static int bf16_refused_clearly(ag_model *model, const char *note) {
    ag_error err = {0};
    ag_engine_options opt = {.precision = AG_PRECISION_BF16, .threads = 1};
    ag_engine *engine = NULL;
    int rc = ag_engine_create(model, &opt, &engine, &err);
    ag_engine_destroy(engine);
    printf("  bf16 cannot run on this CPU (%s): engine says \"%s\"\n", note, err.message);
    CHECK(rc == AG_E_UNSUPPORTED && strstr(err.message, "AVX-512"));
    return 0;
}

static int test_bf16_psnr(void) {
    ag_error err;
    ag_model *model;
    CHECK_OK(ag_model_load(AG_SOURCE_DIR "/models/hayao.safetensors", &model, &err), &err);
    ag_precision_choice choice;
    if (ag_precision_resolve(AG_PRECISION_BF16, AG_BACKEND_ONEDNN, NULL, &choice) != AG_OK) {
        int rc = bf16_refused_clearly(model, choice.note);
        ag_model_destroy(model);
        return rc;
    }
    int failed = 0;
    for (size_t i = 0; i < sizeof photos / sizeof photos[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/tests/data/%s", AG_SOURCE_DIR, photos[i]);
        ag_decode_options dec = {.max_side = 256};
        ag_image in = {0}, fp32 = {0}, bf16 = {0};
        CHECK_OK(ag_image_decode_file(path, &dec, &in, &err), &err);
        failed |= stylize_with(model, AG_PRECISION_FP32, &in, &fp32);
        failed |= stylize_with(model, AG_PRECISION_BF16, &in, &bf16);
        double db = failed ? 0.0 : psnr(&fp32, &bf16);
        printf("  %-14s %dx%d  bf16 vs fp32: PSNR %.1f dB (bound %.0f)\n", photos[i], in.width,
               in.height, db, BF16_MIN_PSNR_DB);
        failed |= db < BF16_MIN_PSNR_DB;
        ag_image_fini(&in), ag_image_fini(&fp32), ag_image_fini(&bf16);
    }
    ag_model_destroy(model);
    CHECK(!failed);
    return 0;
}

/* int8 runs on the oneDNN backend (tests/test_int8_engine.c); the reference refuses it. */
static int test_int8_refused_clearly(void) {
    ag_error err = {0};
    ag_model *model;
    CHECK_OK(ag_model_load(AG_SOURCE_DIR "/models/hayao.safetensors", &model, &err), &err);
    ag_engine_options opt = {.precision = AG_PRECISION_INT8, .backend = AG_BACKEND_REFERENCE};
    ag_engine *engine = NULL;
    int rc = ag_engine_create(model, &opt, &engine, &err);
    ag_model_destroy(model);
    CHECK(rc == AG_E_UNSUPPORTED && engine == NULL && strstr(err.message, "int8"));
    return 0;
}

static int test_no_leak(void) {
    CHECK_MSG(ag_allocated_bytes() == 0, "%zu bytes still allocated", ag_allocated_bytes());
    return 0;
}

int main(int argc, char **argv) {
    ag_error err;
    if (ag_image_startup(argv[0], &err) != 0) {
        printf("%s\n0 passed, 1 failed\n", err.message);
        return 1;
    }
    static const test_case tests[] = {TEST(test_bf16_psnr), TEST(test_int8_refused_clearly),
                                      TEST(test_no_leak)};
    int rc = test_run_all(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
    ag_image_shutdown();
    return rc;
}
