/*
 * test_engine.c - the engine's run control (ag_engine_set_cancel): a run asked to stop
 * returns AG_E_CANCELLED after exactly the steps it was let run, and the engine's next run
 * gives the same bytes as an uncancelled one; on both backends and in every precision this
 * CPU runs (hayao on a 64x64 image), every byte given back. And its shape (issue 29): every
 * kernel kind has a complete row; src/graph/ names no kind.
 */
#include "test.h"

#include "../src/engine/kind.h"
#include "../src/engine_internal.h"
#include "animegan.h"

#include <dirent.h>

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

/* Every kernel kind has a complete row in kinds.c's table: a name of its own, applies and
 * run; a destroy wherever it creates a kernel, same_weights wherever it prepares weights, a
 * node kernel only on the whole-map step; the generic kind last (first match wins). */
static int test_every_kind_has_a_row(void) {
    int count;
    const ag_kind *const *kinds = ag_kinds_all(&count);
    CHECK(count >= 2 && strcmp(kinds[count - 1]->name, "generic") == 0);
    for (int i = 0; i < count; i++) {
        const ag_kind *k = kinds[i];
        CHECK_MSG(k->name && k->applies && k->run, "kind %d has no name, applies or run", i);
        CHECK_MSG(!k->create == !k->destroy, "kind %s: create without destroy", k->name);
        CHECK_MSG(!k->prepare || k->same_weights, "kind %s: prepare without same_weights", k->name);
        CHECK_MSG(!k->node || k->run == ag_kind_run_node, "kind %s: a node kernel off the step",
                  k->name);
        for (int j = 0; j < i; j++)
            CHECK_MSG(strcmp(kinds[j]->name, k->name) != 0, "kind %s twice", k->name);
    }
    return 0;
}

/* Whether file `path` holds `text` (-1: unreadable). */
static int file_has(const char *path, const char *text) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    static char buf[1 << 17];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, text) != NULL;
}

/* src/graph/ includes nothing of the engine and names no kernel kind or kernel of one: a
 * kind's kernel takes an op's place through ag_node_fast.run, so adding a kind never changes
 * the graph. */
static int test_graph_knows_no_kind(void) {
    static const char *const banned[] = {"../engine", "ag_kind", "ag_wino", "ag_int8_modconv",
                                         "ag_dnnl"};
    DIR *dir = opendir(AG_SOURCE_DIR "/src/graph");
    CHECK(dir);
    int files = 0, rc = 0;
    for (struct dirent *d; (d = readdir(dir)) != NULL;) {
        size_t len = strlen(d->d_name);
        if (len < 3 || d->d_name[len - 2] != '.' || !strchr("ch", d->d_name[len - 1]))
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/src/graph/%s", AG_SOURCE_DIR, d->d_name);
        files++;
        for (size_t i = 0; i < sizeof banned / sizeof banned[0]; i++)
            if (file_has(path, banned[i]) != 0)
                rc = fprintf(stderr, "  src/graph/%s: %s\n", d->d_name, banned[i]);
    }
    closedir(dir);
    CHECK(files >= 5 && rc == 0);
    return 0;
}

TEST_MAIN(TEST(test_every_kind_has_a_row), TEST(test_graph_knows_no_kind), TEST(test_cancel_fp32),
          TEST(test_cancel_int8), TEST(test_cancel_bf16), TEST(test_cancel_reference))
