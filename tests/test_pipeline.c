/*
 * test_pipeline.c - the one pipeline every front end runs (src/pipeline/pipeline.c): its
 * result is byte for byte the steps called one after the other; a run with no step moves or
 * copies; a failure names its step and leaves nothing; progress and cancel reach the steps;
 * a caller's stylisation replaces ag_stylize. Small images (48 x 40), bundled models.
 */
#include "test.h"

#include "../src/util/util_internal.h"

#include <string.h>

#define MODELS AG_SOURCE_DIR "/models/"

typedef struct models {
    ag_model *style_model, *up_model;
    ag_engine *style, *up;
} models;

static int models_open(models *m) {
    ag_error err = {0};
    ag_engine_options o = {.precision = AG_PRECISION_FP32, .threads = 2};
    memset(m, 0, sizeof *m);
    CHECK_OK(ag_model_load(MODELS "hayao.safetensors", &m->style_model, &err), &err);
    CHECK_OK(ag_model_load(MODELS "esrgan-slim-x2.safetensors", &m->up_model, &err), &err);
    CHECK_OK(ag_engine_create(m->style_model, &o, &m->style, &err), &err);
    CHECK_OK(ag_engine_create(m->up_model, &o, &m->up, &err), &err);
    return 0;
}

static void models_close(models *m) {
    ag_engine_destroy(m->up);
    ag_engine_destroy(m->style);
    ag_model_destroy(m->up_model);
    ag_model_destroy(m->style_model);
}

/* A smooth gradient with some texture, (40, 48, 3). */
static int make_image(ag_image *im) {
    *im = (ag_image){48, 40, 3, ag_malloc(48 * 40 * 3)};
    CHECK(im->pixels);
    for (int y = 0; y < im->height; y++)
        for (int x = 0; x < im->width; x++)
            for (int c = 0; c < 3; c++)
                im->pixels[(y * im->width + x) * 3 + c] =
                    (uint8_t)(x * 5 + y * 3 * c + ((x * y) % 7) * 9);
    return 0;
}

static int same_image(const ag_image *a, const ag_image *b) {
    return a->width == b->width && a->height == b->height && a->bands == b->bands &&
           !memcmp(a->pixels, b->pixels, (size_t)a->width * a->height * a->bands);
}

/* stylize then upscale, through the pipeline and by hand: the same bytes. */
LEAK_CHECKED(test_steps_in_order) {
    models m;
    if (models_open(&m))
        return 1;
    ag_error err = {0};
    ag_image in, copy, styled, expect, out;
    CHECK(make_image(&in) == 0 && make_image(&copy) == 0);
    ag_upscale_options uo;
    ag_upscale_options_init(&uo);
    CHECK_OK(ag_stylize(m.style, &copy, 1, &styled, &err), &err);
    CHECK_OK(ag_upscale(m.up, &styled, &uo, &expect, &err), &err);
    ag_pipeline p;
    ag_pipeline_init(&p);
    p.style = m.style, p.side_by_side = 1, p.upscaler = m.up;
    ag_pipeline_result res;
    CHECK_OK(ag_pipeline_run(&p, &in, &out, &res, &err), &err);
    CHECK(res.failed == AG_STEP_COUNT && in.pixels == NULL); /* taken */
    CHECK(out.width == 2 * 2 * 48 && out.height == 2 * 40);
    CHECK_MSG(same_image(&out, &expect), "the pipeline's result differs from its steps'");
    ag_image_fini(&out);
    /* the borrowing variant leaves its input */
    CHECK_OK(ag_pipeline_apply(&p, &copy, &out, NULL, &err), &err);
    CHECK(copy.pixels && same_image(&out, &expect));
    ag_image_fini(&out);
    ag_image_fini(&copy);
    ag_image_fini(&styled);
    ag_image_fini(&expect);
    models_close(&m);
    return 0;
}

/* No step: run moves the image to out, apply copies it. */
LEAK_CHECKED(test_no_step) {
    ag_error err = {0};
    ag_pipeline p;
    ag_pipeline_init(&p);
    ag_image in, ref, out;
    CHECK(make_image(&in) == 0 && make_image(&ref) == 0);
    CHECK_OK(ag_pipeline_apply(&p, &in, &out, NULL, &err), &err);
    CHECK(out.pixels != in.pixels && same_image(&out, &ref));
    ag_image_fini(&out);
    uint8_t *pixels = in.pixels;
    CHECK_OK(ag_pipeline_run(&p, &in, &out, NULL, &err), &err);
    CHECK(out.pixels == pixels && in.pixels == NULL && same_image(&out, &ref));
    ag_image_fini(&out);
    ag_image_fini(&ref);
    CHECK(!strcmp(ag_pipeline_step_name(AG_STEP_RESTORE), "restore") &&
          !strcmp(ag_pipeline_step_name(AG_STEP_UPSCALE), "upscale"));
    return 0;
}

/* A generator given as the upscaler: the run fails at the upscale step, nothing is left. */
LEAK_CHECKED(test_failure_names_step) {
    models m;
    if (models_open(&m))
        return 1;
    ag_error err = {0};
    ag_pipeline p;
    ag_pipeline_init(&p);
    p.style = m.style, p.upscaler = m.style;
    ag_image in, out;
    ag_pipeline_result res;
    CHECK(make_image(&in) == 0);
    int rc = ag_pipeline_run(&p, &in, &out, &res, &err);
    CHECK_MSG(rc == AG_E_ARG && res.failed == AG_STEP_UPSCALE, "rc %d, step %d", rc, res.failed);
    CHECK(out.pixels == NULL && in.pixels == NULL && strstr(err.message, "not an upscaler"));
    models_close(&m);
    return 0;
}

typedef struct progress_log {
    int started[AG_STEP_COUNT + 1], count;
    int calls, cancel_at;
} progress_log;

static void log_step(void *user, ag_pipeline_step step) {
    progress_log *l = user;
    l->started[l->count++] = step;
}

static int log_progress(void *user, int done, int total) {
    progress_log *l = user;
    (void)done, (void)total;
    return ++l->calls == l->cancel_at;
}

/* The pipeline's progress gets every tile, each step start is told, and a non-zero answer
 * cancels the step. */
LEAK_CHECKED(test_progress_and_cancel) {
    models m;
    if (models_open(&m))
        return 1;
    ag_error err = {0};
    ag_pipeline p;
    ag_pipeline_init(&p);
    p.style = m.style, p.upscaler = m.up;
    p.upscale.tile_px = 16; /* 48 x 40: 3 x 3 tiles */
    progress_log log = {0};
    p.progress = log_progress, p.progress_user = &log, p.step_started = log_step;
    ag_image in, out;
    CHECK(make_image(&in) == 0);
    CHECK_OK(ag_pipeline_run(&p, &in, &out, NULL, &err), &err);
    ag_image_fini(&out);
    CHECK_MSG(log.count == 2 && log.started[0] == AG_STEP_STYLIZE &&
                  log.started[1] == AG_STEP_UPSCALE,
              "%d steps started", log.count);
    CHECK_MSG(log.calls >= 9, "%d progress calls for 9 tiles", log.calls);
    progress_log cancel = {.cancel_at = 2};
    p.progress_user = &cancel;
    ag_pipeline_result res;
    CHECK(make_image(&in) == 0);
    int rc = ag_pipeline_run(&p, &in, &out, &res, &err);
    CHECK_MSG(rc == AG_E_CANCELLED && res.failed == AG_STEP_UPSCALE && out.pixels == NULL,
              "rc %d at step %d", rc, res.failed);
    models_close(&m);
    return 0;
}

/* ag_stylize_fn: a grey image of the input's size. */
static int grey(void *user, const ag_image *in, ag_image *out, ag_error *err) {
    (void)err;
    ++*(int *)user;
    size_t bytes = (size_t)in->width * in->height * in->bands;
    *out = (ag_image){in->width, in->height, in->bands, ag_malloc(bytes)};
    if (!out->pixels)
        return AG_E_NOMEM;
    memset(out->pixels, 128, bytes);
    return AG_OK;
}

LEAK_CHECKED(test_caller_stylize) {
    ag_error err = {0};
    ag_pipeline p;
    ag_pipeline_init(&p);
    int calls = 0;
    p.stylize = grey, p.stylize_user = &calls;
    ag_image in, out;
    CHECK(make_image(&in) == 0);
    CHECK_OK(ag_pipeline_run(&p, &in, &out, NULL, &err), &err);
    CHECK(calls == 1 && out.width == 48 && out.pixels[0] == 128 && out.pixels[48 * 40 * 3 - 1]);
    ag_image_fini(&out);
    return 0;
}

TEST_MAIN(TEST(test_steps_in_order), TEST(test_no_step), TEST(test_failure_names_step),
          TEST(test_progress_and_cancel), TEST(test_caller_stylize))
