/*
 * test_engine.c - the engine's run control (ag_engine_set_cancel): a run asked to stop
 * returns AG_E_CANCELLED after exactly the steps it was let run, and the engine's next run
 * gives the same bytes as an uncancelled one; on both backends and in every precision this
 * CPU runs (hayao on a 64x64 image), every byte given back.
 */
#include "test.h"

#include "../src/engine_internal.h"
#include "animegan.h"

#define SIDE 64

typedef struct counter {
    int calls;
    int stop_after; /* cancel from this call on; 0: never */
} counter;

static int count_calls(void *user) {
    counter *c = user;
    c->calls++;
    return c->stop_after > 0 && c->calls >= c->stop_after;
}

static void fill_input(float *in) {
    unsigned s = 12345;
    for (int i = 0; i < SIDE * SIDE * 3; i++) {
        s = s * 1103515245u + 12345u;
        in[i] = (float)(s >> 8 & 0xffff) / 32768.0f - 1.0f;
    }
}

/* Cancel at call k, then run again without cancelling: same output as the first run. */
static int cancel_then_rerun(ag_backend backend, ag_precision precision) {
    char path[512];
    ag_error err;
    ag_model *model = NULL;
    ag_engine *engine = NULL;
    snprintf(path, sizeof path, "%s/models/hayao.safetensors", AG_SOURCE_DIR);
    CHECK_OK(ag_model_load(path, &model, &err), &err);
    ag_engine_options o = {.backend = backend, .precision = precision, .threads = 2};
    CHECK_OK(ag_engine_create(model, &o, &engine, &err), &err);
    static float in[SIDE * SIDE * 3], first[SIDE * SIDE * 3], again[SIDE * SIDE * 3];
    fill_input(in);
    counter all = {0, 0};
    ag_engine_set_cancel(engine, count_calls, &all);
    CHECK_OK(ag_engine_run_f32(engine, in, SIDE, SIDE, first, &err), &err);
    int steps = backend == AG_BACKEND_REFERENCE ? model->graph.count - 1 : engine->group_count;
    CHECK_MSG(all.calls >= steps, "asked %d times for %d steps", all.calls, steps);
    for (int k = 1; k <= all.calls; k += all.calls / 3 > 0 ? all.calls / 3 : 1) {
        counter stop = {0, k};
        ag_engine_set_cancel(engine, count_calls, &stop);
        int rc = ag_engine_run_f32(engine, in, SIDE, SIDE, again, &err);
        CHECK_MSG(rc == AG_E_CANCELLED, "k %d: rc %d", k, rc);
        CHECK_MSG(stop.calls == k, "k %d: asked %d times", k, stop.calls);
        CHECK(strcmp(err.message, "cancelled") == 0);
    }
    ag_engine_set_cancel(engine, NULL, NULL);
    CHECK_OK(ag_engine_run_f32(engine, in, SIDE, SIDE, again, &err), &err);
    CHECK(memcmp(first, again, sizeof first) == 0);
    ag_engine_destroy(engine);
    ag_model_destroy(model);
    return 0;
}

LEAK_CHECKED(test_cancel_fp32) {
    return cancel_then_rerun(AG_BACKEND_ONEDNN, AG_PRECISION_FP32);
}

LEAK_CHECKED(test_cancel_int8) {
    return cancel_then_rerun(AG_BACKEND_ONEDNN, AG_PRECISION_INT8);
}

LEAK_CHECKED(test_cancel_reference) {
    return cancel_then_rerun(AG_BACKEND_REFERENCE, AG_PRECISION_FP32);
}

/* bf16 only where this CPU runs it at all. */
LEAK_CHECKED(test_cancel_bf16) {
    ag_precision_choice choice;
    if (ag_precision_resolve(AG_PRECISION_BF16, AG_BACKEND_ONEDNN, NULL, &choice) != 0) {
        printf("  (bf16 not run here: %s)\n", choice.note);
        return 0;
    }
    return cancel_then_rerun(AG_BACKEND_ONEDNN, AG_PRECISION_BF16);
}

TEST_MAIN(TEST(test_cancel_fp32), TEST(test_cancel_int8), TEST(test_cancel_bf16),
          TEST(test_cancel_reference))
