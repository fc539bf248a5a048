/*
 * test_graph.c - graphs from JSON (docs/graph.md) with seeded random weights: the oneDNN
 * backend's lowering (chains fused into bands, materialised values, resizes to a skip's
 * size, LADE, the attention ops, channel counts that are not multiples of 16) against the
 * reference interpreter of the same graph, node by node; and graphs that must be refused.
 */
#include "test.h"

#include "../src/engine_internal.h"
#include "../src/graph/ops.h"

#include <stdint.h>

#define MAX_TENSORS 64

/* Tensors of one test graph: name, shape, seeded values. */
typedef struct tensors {
    ag_tensor_set set;
    float *data[MAX_TENSORS];
    int count;
    uint32_t seed;
} tensors;

static float next_random(tensors *t) {
    t->seed = t->seed * 1664525u + 1013904223u;
    return (float)(t->seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* A tensor of `shape` with values uniform in [center - spread, center + spread]. */
static void add_tensor(tensors *t, const char *name, int ndim, const int64_t *shape, float center,
                       float spread) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= (size_t)shape[i];
    float *v = ag_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        v[i] = center + spread * next_random(t);
    ag_tensor_ref ref = {.dtype = AG_DTYPE_F32, .ndim = ndim, .data = v, .nbytes = n * 4};
    snprintf(ref.name, sizeof ref.name, "%s", name);
    memcpy(ref.shape, shape, sizeof(int64_t) * (size_t)ndim);
    ag_error err;
    ag_tensor_set_add(&t->set, &ref, &err);
    t->data[t->count++] = v;
}

static void conv_weight(tensors *t, const char *name, int oc, int ic, int k) {
    int64_t shape[4] = {oc, ic, k, k};
    add_tensor(t, name, 4, shape, 0.0f, 1.5f / sqrtf((float)(ic * k * k)));
}

static void vector(tensors *t, const char *name, int c, float center, float spread) {
    int64_t shape[1] = {c};
    add_tensor(t, name, 1, shape, center, spread);
}

static void tensors_fini(tensors *t) {
    ag_tensor_set_fini(&t->set);
    for (int i = 0; i < t->count; i++)
        ag_free(t->data[i]);
}

/*
 * A small network with every construct of AnimeGANv3 full and tiny, plus the odd cases:
 * 20 and 4 channels, a zero-padded conv, pre- and post-residual activations, an instance
 * norm and a constant affine, resizes to a skip's size (asymmetric and half-pixel).
 */
static const char *mixed_graph =
    "{\"outputs\": [\"out\"], \"nodes\": ["
    "{\"op\": \"conv\", \"name\": \"e0\", \"in\": [\"input\"], \"weight\": \"e0.w\","
    " \"pad\": [3, 3, 3, 3]},"
    "{\"op\": \"lade\", \"name\": \"e0.n\", \"in\": [\"e0\"], \"weight\": \"e0.lade\"},"
    "{\"op\": \"lrelu\", \"name\": \"e0.a\", \"in\": [\"e0.n\"], \"alpha\": 0.2},"
    "{\"op\": \"conv\", \"name\": \"e1\", \"in\": [\"e0.a\"], \"weight\": \"e1.w\", \"stride\": 2,"
    " \"pad\": [1, 0, 1, 0]},"
    "{\"op\": \"layer_norm\", \"name\": \"e1.n\", \"in\": [\"e1\"], \"gamma\": \"e1.g\","
    " \"beta\": \"e1.b\"},"
    "{\"op\": \"lrelu\", \"name\": \"e1.a\", \"in\": [\"e1.n\"]},"
    "{\"op\": \"conv\", \"name\": \"q\", \"in\": [\"e1.a\"], \"weight\": \"q.w\"},"
    "{\"op\": \"matmul\", \"name\": \"m1\", \"in\": [\"q\"], \"weight\": \"M\"},"
    "{\"op\": \"softmax\", \"name\": \"sm\", \"in\": [\"m1\"], \"axis\": \"spatial\"},"
    "{\"op\": \"sum_normalize\", \"name\": \"sn\", \"in\": [\"sm\"], \"eps\": 1e-9},"
    "{\"op\": \"matmul\", \"name\": \"m2\", \"in\": [\"sn\"], \"weight\": \"M\", \"transpose\": 1},"
    "{\"op\": \"conv\", \"name\": \"p\", \"in\": [\"m2\"], \"weight\": \"p.w\"},"
    "{\"op\": \"affine\", \"name\": \"bn\", \"in\": [\"p\"], \"scale\": \"bn.s\", \"shift\": "
    "\"bn.t\"},"
    "{\"op\": \"add\", \"name\": \"att\", \"in\": [\"bn\", \"e1.a\"]},"
    "{\"op\": \"lrelu\", \"name\": \"att.a\", \"in\": [\"att\"]},"
    "{\"op\": \"resize\", \"name\": \"up\", \"in\": [\"att.a\", \"e0.a\"], \"mode\": "
    "\"asymmetric\"},"
    "{\"op\": \"conv\", \"name\": \"d0\", \"in\": [\"up\"], \"weight\": \"d0.w\", \"bias\": "
    "\"d0.b\","
    " \"pad\": [1, 1, 1, 1]},"
    "{\"op\": \"lrelu\", \"name\": \"d0.a\", \"in\": [\"d0\"]},"
    "{\"op\": \"add\", \"name\": \"skip\", \"in\": [\"e0.a\", \"d0.a\"]},"
    "{\"op\": \"conv\", \"name\": \"d1\", \"in\": [\"skip\"], \"weight\": \"d1.w\","
    " \"pad\": [1, 1, 1, 1]},"
    "{\"op\": \"instance_norm\", \"name\": \"d1.n\", \"in\": [\"d1\"], \"gamma\": \"d1.g\","
    " \"beta\": \"d1.b\"},"
    "{\"op\": \"lrelu\", \"name\": \"d1.a\", \"in\": [\"d1.n\"]},"
    "{\"op\": \"conv\", \"name\": \"small\", \"in\": [\"d1.a\"], \"weight\": \"s.w\","
    " \"stride\": 2, \"pad\": [1, 1, 1, 1]},"
    "{\"op\": \"resize\", \"name\": \"up2\", \"in\": [\"small\", \"d1.a\"], \"mode\": "
    "\"half-pixel\"},"
    "{\"op\": \"conv\", \"name\": \"o\", \"in\": [\"up2\"], \"weight\": \"o.w\","
    " \"pad\": [1, 1, 1, 1], \"pad_mode\": \"zero\"},"
    "{\"op\": \"tanh\", \"name\": \"out\", \"in\": [\"o\"]}]}";

static void mixed_tensors(tensors *t) {
    t->seed = 20261201u;
    conv_weight(t, "e0.w", 20, 3, 7);
    int64_t lade[4] = {20, 20, 1, 1};
    add_tensor(t, "e0.lade", 4, lade, 0.0f, 0.4f);
    conv_weight(t, "e1.w", 16, 20, 3);
    vector(t, "e1.g", 16, 1.0f, 0.3f);
    vector(t, "e1.b", 16, 0.0f, 0.3f);
    conv_weight(t, "q.w", 16, 16, 1);
    int64_t m[2] = {16, 16};
    add_tensor(t, "M", 2, m, 0.0f, 0.5f);
    conv_weight(t, "p.w", 16, 16, 1);
    vector(t, "bn.s", 16, 1.0f, 0.2f);
    vector(t, "bn.t", 16, 0.0f, 0.1f);
    conv_weight(t, "d0.w", 20, 16, 3);
    vector(t, "d0.b", 20, 0.0f, 0.2f);
    conv_weight(t, "d1.w", 4, 20, 3);
    vector(t, "d1.g", 4, 1.0f, 0.2f);
    vector(t, "d1.b", 4, 0.0f, 0.2f);
    conv_weight(t, "s.w", 4, 4, 3);
    conv_weight(t, "o.w", 3, 4, 3);
}

static int build(const char *json, tensors *t, ag_model **model, ag_error *err) {
    ag_graph *g = ag_malloc(sizeof *g);
    int rc = g ? ag_graph_from_json(json, &t->set, "test.graph", g, err) : AG_E_NOMEM;
    if (rc == AG_OK)
        rc = ag_model_build(&t->set, g, "test.graph", "safetensors", model, err);
    ag_free(g);
    return rc;
}

/* On a failure: each group's buffer against the reference's node of the same value. Only
 * meaningful with AG_DEBUG_NO_SHARE=1 (no two buffers share bytes, so none is overwritten). */
static void debug_compare(ag_engine *ref, ag_engine *fast) {
    for (int gi = 0; gi < fast->group_count; gi++) {
        const ag_group *g = &fast->groups[gi];
        ag_group_exec *x = &fast->exec[gi];
        const float *y = (const float *)(fast->arena + fast->buffers[x->buffer].offset + x->offset);
        int node = g->materialize ? g->tail : g->head;
        const float *r = ag_engine_buffer(ref, ref->node_buffer[node]);
        size_t n = (size_t)x->out.h * x->out.w * x->out.c;
        float w = 0;
        for (size_t i = 0; i < n; i++)
            w = fmaxf(w, fabsf(y[i] - r[i]));
        printf("   group %d head %s tail %s mat %d src %d kind %d banded %d res %d pre %.1f post "
               "%.1f: %g\n",
               gi, fast->model->graph.nodes[g->head].name, fast->model->graph.nodes[g->tail].name,
               g->materialize, g->src, g->kind, g->banded, g->residual, (double)g->pre_slope,
               (double)g->post_slope, (double)w);
    }
}

static float max_diff(const float *a, const float *b, size_t n) {
    float worst = 0.0f;
    for (size_t i = 0; i < n; i++)
        worst = fmaxf(worst, fabsf(a[i] - b[i]));
    return worst;
}

static int run_both(ag_model *model, int w, int h, int min_fused, float *worst) {
    size_t n = (size_t)w * h * 3;
    float *in = ag_malloc(n * 4), *a = ag_malloc(n * 4), *b = ag_malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        in[i] = (float)((i * 7919) % 255) / 127.5f - 1.0f;
    ag_engine_options ref_opt = {.backend = AG_BACKEND_REFERENCE, .threads = 1};
    ag_engine_options opt = {.backend = AG_BACKEND_ONEDNN, .threads = 2};
    ag_engine *reference, *fast;
    ag_error err;
    CHECK_OK(ag_engine_create(model, &ref_opt, &reference, &err), &err);
    CHECK_OK(ag_engine_create(model, &opt, &fast, &err), &err);
    fast->band_bytes_target = 4 << 10; /* many bands even on small maps */
    CHECK_OK(ag_engine_run_f32(reference, in, w, h, a, &err), &err);
    CHECK_OK(ag_engine_run_f32(fast, in, w, h, b, &err), &err);
    CHECK_OK(ag_engine_run_f32(fast, in, w, h, b, &err), &err); /* a second run: same plan */
    *worst = max_diff(a, b, n);
    if (*worst > 1e-4f)
        debug_compare(reference, fast);
    int materialized = 0, fused = 0;
    for (int i = 0; i < fast->group_count; i++)
        materialized += fast->groups[i].materialize, fused += !fast->groups[i].materialize;
    printf("  %dx%d: %d groups (%d applied on the fly), max abs error vs reference %.2e\n", w, h,
           fast->group_count, fused, (double)*worst);
    ag_engine_destroy(reference);
    ag_engine_destroy(fast);
    ag_free(in), ag_free(a), ag_free(b);
    CHECK(fused >= min_fused);
    return 0;
}

static int test_mixed_graph_equals_reference(void) {
    tensors t = {0};
    mixed_tensors(&t);
    ag_model *model;
    ag_error err;
    CHECK_OK(build(mixed_graph, &t, &model, &err), &err);
    int sizes[][2] = {{8, 8}, {13, 9}, {37, 29}, {64, 48}};
    for (int i = 0; i < 4; i++) {
        float worst;
        CHECK(run_both(model, sizes[i][0], sizes[i][1], 2, &worst) == 0);
        CHECK_MSG(worst <= 1e-4f, "%dx%d: %g", sizes[i][0], sizes[i][1], (double)worst);
    }
    printf("  %.3f MFLOP at 64x48\n", ag_model_flop(model, 64, 48) / 1e6);
    ag_model_destroy(model);
    tensors_fini(&t);
    return 0;
}

/* bf16 is refused for graphs with fp32-only ops, with the node named (on a CPU where
 * oneDNN has no bf16 at all, for that reason first). */
static int test_bf16_refused_for_generic_ops(void) {
    tensors t = {0};
    mixed_tensors(&t);
    ag_model *model;
    ag_engine *e = NULL;
    ag_error err;
    CHECK_OK(build(mixed_graph, &t, &model, &err), &err);
    ag_engine_options opt = {.backend = AG_BACKEND_ONEDNN, .precision = AG_PRECISION_BF16};
    int rc = ag_engine_create(model, &opt, &e, &err);
    ag_engine_destroy(e);
    ag_model_destroy(model);
    tensors_fini(&t);
    ag_precision_choice choice;
    int runs = ag_precision_resolve(AG_PRECISION_BF16, AG_BACKEND_ONEDNN, NULL, &choice) == AG_OK;
    printf("  %s\n", err.message);
    CHECK(rc == AG_E_UNSUPPORTED);
    CHECK(strstr(err.message, runs ? "fp32" : "AVX-512"));
    return 0;
}

/* Replace the first occurrence of `from` in the mixed graph by `to`, build, expect refusal. */
static int refused(const char *from, const char *to, const char *needle) {
    char json[8192];
    const char *at = strstr(mixed_graph, from);
    CHECK(at);
    snprintf(json, sizeof json, "%.*s%s%s", (int)(at - mixed_graph), mixed_graph, to,
             at + strlen(from));
    tensors t = {0};
    mixed_tensors(&t);
    ag_model *model = NULL;
    ag_error err;
    int rc = build(json, &t, &model, &err);
    tensors_fini(&t);
    ag_model_destroy(model);
    CHECK_MSG(rc == AG_E_FORMAT || rc == AG_E_LIMIT, "%s -> %s gave %d", from, to, rc);
    printf("  %s\n", err.message);
    CHECK_MSG(strstr(err.message, needle), "'%s' not in '%s'", needle, err.message);
    return 0;
}

static int test_bad_graphs_refused(void) {
    CHECK(refused("\"op\": \"matmul\"", "\"op\": \"grid_sample\"", "not supported") == 0);
    CHECK(refused("\"weight\": \"q.w\"", "\"weight\": \"nope\"", "'nope' is not in the file") == 0);
    CHECK(refused("\"weight\": \"q.w\"", "\"weight\": \"e1.w\"", "input channels") == 0);
    CHECK(refused("\"in\": [\"e0.a\"], \"weight\": \"e1.w\"",
                  "\"in\": [\"skip\"], \"weight\": \"e1.w\"",
                  "not the name of an earlier node") == 0);
    CHECK(refused("\"stride\": 2", "\"stride\": 9", "stride") == 0);
    CHECK(refused("\"pad\": [3, 3, 3, 3]", "\"pad\": [3, 3, 3]", "pad") == 0);
    CHECK(refused("\"name\": \"q\"", "\"name\": \"e0\"", "not unique") == 0);
    CHECK(refused("{\"outputs\": [\"out\"]", "{\"outputs\": [\"ghost\"]", "output") == 0);
    CHECK(refused("\"alpha\": 0.2", "\"alpha\": \"x\"", "'alpha' is not a number") == 0);
    CHECK(refused("{\"op\": \"add\", \"name\": \"att\", \"in\": [\"bn\", \"e1.a\"]}",
                  "{\"op\": \"add\", \"name\": \"att\", \"in\": [\"bn\", \"e0.a\"]}", "adds") == 0);
    return 0;
}

/* An add of maps whose sizes differ at some image size is refused at prepare, by name. */
static int test_shape_mismatch_named(void) {
    const char *json =
        "{\"outputs\": [\"out\"], \"nodes\": ["
        "{\"op\": \"conv\", \"name\": \"a\", \"in\": [\"input\"], \"weight\": \"w\","
        " \"stride\": 2},"
        "{\"op\": \"conv\", \"name\": \"b\", \"in\": [\"input\"], \"weight\": \"w\"},"
        "{\"op\": \"add\", \"name\": \"s\", \"in\": [\"a\", \"b\"]},"
        "{\"op\": \"tanh\", \"name\": \"out\", \"in\": [\"s\"]}]}";
    tensors t = {0};
    t.seed = 7;
    conv_weight(&t, "w", 3, 3, 1);
    ag_model *model = NULL;
    ag_error err;
    /* A style's shapes are derived at load (model.c, check_style_shape): refused there. */
    int rc = build(json, &t, &model, &err);
    ag_model_destroy(model);
    tensors_fini(&t);
    CHECK(rc == AG_E_FORMAT);
    printf("  %s\n", err.message);
    CHECK(strstr(err.message, "\"s\"") && strstr(err.message, "not a style"));
    return 0;
}

/* Several raw outputs (the face networks' form): each equals the reference's. */
static int test_raw_outputs(void) {
    char json[8192];
    snprintf(json, sizeof json, "{\"outputs\": [\"out\", \"e1.a\", \"sm\"]%s",
             strchr(mixed_graph, ','));
    tensors t = {0};
    mixed_tensors(&t);
    ag_model *model;
    ag_error err;
    CHECK_OK(build(json, &t, &model, &err), &err);
    ag_engine_options ref_opt = {.backend = AG_BACKEND_REFERENCE, .threads = 1};
    ag_engine_options opt = {.backend = AG_BACKEND_ONEDNN, .threads = 2};
    ag_engine *engines[2];
    CHECK_OK(ag_engine_create(model, &ref_opt, &engines[0], &err), &err);
    CHECK_OK(ag_engine_create(model, &opt, &engines[1], &err), &err);
    int w = 21, h = 17;
    float in[21 * 17 * 3], *outs[2][3];
    for (int i = 0; i < w * h * 3; i++)
        in[i] = (float)((i * 31) % 200) / 100.0f - 1.0f;
    size_t sizes[3];
    for (int b = 0; b < 2; b++) {
        CHECK_OK(ag_engine_prepare(engines[b], w, h, &err), &err);
        for (int o = 0; o < 3; o++) {
            int oh, ow, oc;
            CHECK(ag_engine_output_shape(engines[b], o, &oh, &ow, &oc) == 3);
            sizes[o] = (size_t)oh * ow * oc;
            outs[b][o] = ag_malloc(sizes[o] * sizeof(float));
        }
        CHECK_OK(ag_engine_run_raw(engines[b], in, w, h, outs[b], &err), &err);
    }
    float worst = 0.0f;
    for (int o = 0; o < 3; o++)
        worst = fmaxf(worst, max_diff(outs[0][o], outs[1][o], sizes[o]));
    printf("  3 outputs (%zu, %zu, %zu values), max abs error vs reference %.2e\n", sizes[0],
           sizes[1], sizes[2], (double)worst);
    for (int b = 0; b < 2; b++) {
        for (int o = 0; o < 3; o++)
            ag_free(outs[b][o]);
        ag_engine_destroy(engines[b]);
    }
    ag_model_destroy(model);
    tensors_fini(&t);
    CHECK(worst <= 1e-4f);
    return 0;
}

/* A shortcut computed after the branch it is added to (TFLite's order: conv branch first,
 * then max-pool shortcut), and a resize sized by a node inside a fused chain: both found
 * by the face networks. */
static int test_late_residual_and_chain_sized_resize(void) {
    const char *json =
        "{\"outputs\": [\"out\"], \"nodes\": ["
        "{\"op\": \"conv\", \"name\": \"e0\", \"in\": [\"input\"], \"weight\": \"w0\","
        " \"pad\": [1, 1, 1, 1], \"pad_mode\": \"zero\"},"
        "{\"op\": \"relu\", \"name\": \"e0.a\", \"in\": [\"e0\"]},"
        "{\"op\": \"conv\", \"name\": \"a\", \"in\": [\"e0.a\"], \"weight\": \"w1\","
        " \"pad\": [1, 1, 1, 1], \"pad_mode\": \"zero\"},"
        "{\"op\": \"max_pool\", \"name\": \"b\", \"in\": [\"e0.a\"], \"k\": 3,"
        " \"pad\": [1, 1, 1, 1]},"
        "{\"op\": \"add\", \"name\": \"s\", \"in\": [\"a\", \"b\"]},"
        "{\"op\": \"relu\", \"name\": \"s.a\", \"in\": [\"s\"]},"
        "{\"op\": \"conv\", \"name\": \"o\", \"in\": [\"s.a\"], \"weight\": \"w2\","
        " \"stride\": 2},"
        "{\"op\": \"resize\", \"name\": \"up\", \"in\": [\"o\", \"a\"]},"
        "{\"op\": \"tanh\", \"name\": \"out\", \"in\": [\"up\"]}]}";
    tensors t = {0};
    t.seed = 99;
    conv_weight(&t, "w0", 8, 3, 3);
    conv_weight(&t, "w1", 8, 8, 3);
    conv_weight(&t, "w2", 3, 8, 1);
    ag_model *model;
    ag_error err;
    CHECK_OK(build(json, &t, &model, &err), &err);
    float worst;
    CHECK(run_both(model, 23, 17, 0, &worst) == 0);
    ag_model_destroy(model);
    tensors_fini(&t);
    CHECK_MSG(worst <= 1e-4f, "%g", (double)worst);
    return 0;
}

/* Dense blocks (an RDN's): concats read by a conv are gathered into its bands, a nested one
 * flattened, under reflected and zero padding; a concat with two readers stays a map. */
static int test_concat_bands(void) {
    const char *json =
        "{\"outputs\": [\"out\"], \"nodes\": ["
        "{\"op\": \"conv\", \"name\": \"e0\", \"in\": [\"input\"], \"weight\": \"w0\","
        " \"pad\": [1, 1, 1, 1]},"
        "{\"op\": \"relu\", \"name\": \"e0.a\", \"in\": [\"e0\"]},"
        "{\"op\": \"conv\", \"name\": \"a\", \"in\": [\"e0.a\"], \"weight\": \"w1\","
        " \"pad\": [1, 1, 1, 1]},"
        "{\"op\": \"lrelu\", \"name\": \"a.a\", \"in\": [\"a\"], \"alpha\": 0.2},"
        "{\"op\": \"concat\", \"name\": \"c1\", \"in\": [\"e0.a\", \"a.a\"]},"
        "{\"op\": \"conv\", \"name\": \"b\", \"in\": [\"c1\"], \"weight\": \"w2\","
        " \"pad\": [1, 1, 1, 1]},"
        "{\"op\": \"relu\", \"name\": \"b.a\", \"in\": [\"b\"]},"
        "{\"op\": \"concat\", \"name\": \"inner\", \"in\": [\"e0.a\", \"a.a\"]},"
        "{\"op\": \"concat\", \"name\": \"outer\", \"in\": [\"inner\", \"b.a\", \"e0.a\"]},"
        "{\"op\": \"conv\", \"name\": \"f\", \"in\": [\"outer\"], \"weight\": \"w3\"},"
        "{\"op\": \"add\", \"name\": \"r\", \"in\": [\"f\", \"e0.a\"]},"
        "{\"op\": \"concat\", \"name\": \"two\", \"in\": [\"r\", \"b.a\"]},"
        "{\"op\": \"conv\", \"name\": \"g\", \"in\": [\"two\"], \"weight\": \"w4\","
        " \"pad\": [1, 1, 1, 1], \"pad_mode\": \"zero\"},"
        "{\"op\": \"conv\", \"name\": \"h\", \"in\": [\"two\"], \"weight\": \"w5\"},"
        "{\"op\": \"add\", \"name\": \"gh\", \"in\": [\"g\", \"h\"]},"
        "{\"op\": \"tanh\", \"name\": \"out\", \"in\": [\"gh\"]}]}";
    tensors t = {0};
    t.seed = 4242;
    conv_weight(&t, "w0", 8, 3, 3);
    conv_weight(&t, "w1", 12, 8, 3);
    conv_weight(&t, "w2", 8, 20, 3);
    conv_weight(&t, "w3", 8, 36, 1);
    conv_weight(&t, "w4", 3, 16, 3);
    conv_weight(&t, "w5", 3, 16, 1);
    ag_model *model;
    ag_error err;
    CHECK_OK(build(json, &t, &model, &err), &err);
    ag_engine_options opt = {.backend = AG_BACKEND_ONEDNN, .precision = AG_PRECISION_FP32};
    ag_engine *e;
    CHECK_OK(ag_engine_create(model, &opt, &e, &err), &err);
    int gathered = 0, parts = 0;
    for (int gi = 0; gi < e->group_count; gi++)
        if (e->groups[gi].kind == AG_BAND_CONCAT)
            gathered++, parts += e->groups[gi].part_count;
    ag_engine_destroy(e);
    printf("  %d convs gather their concat (%d parts), the two-reader concat kept\n", gathered,
           parts);
    CHECK_MSG(gathered == 2 && parts == 2 + 4, "%d gathered, %d parts", gathered, parts);
    int sizes[][2] = {{9, 8}, {23, 17}};
    for (int i = 0; i < 2; i++) {
        float worst;
        CHECK(run_both(model, sizes[i][0], sizes[i][1], 0, &worst) == 0);
        CHECK_MSG(worst <= 1e-4f, "%dx%d: %g", sizes[i][0], sizes[i][1], (double)worst);
    }
    ag_model_destroy(model);
    tensors_fini(&t);
    return 0;
}

/* An engine asked for `auto` resolves it itself (as the front ends do before it). */
static int test_auto_precision_resolved(void) {
    tensors t = {0};
    mixed_tensors(&t);
    ag_model *model;
    ag_engine *e;
    ag_error err;
    CHECK_OK(build(mixed_graph, &t, &model, &err), &err);
    ag_engine_options opt = {.backend = AG_BACKEND_ONEDNN, .precision = AG_PRECISION_AUTO};
    CHECK_OK(ag_engine_create(model, &opt, &e, &err), &err);
    CHECK(e->options.precision != AG_PRECISION_AUTO);
    float in[16 * 16 * 3], out[16 * 16 * 3];
    for (int i = 0; i < 16 * 16 * 3; i++)
        in[i] = (float)(i % 7) / 3.5f - 1.0f;
    CHECK_OK(ag_engine_run_f32(e, in, 16, 16, out, &err), &err);
    ag_engine_destroy(e);
    ag_model_destroy(model);
    tensors_fini(&t);
    return 0;
}

/* A network whose only output is a wide map nothing reads (FaceMesh's landmarks): runs in
 * every precision this CPU has, equal to the reference within each precision's bar. */
static int test_wide_output_runs(void) {
    const char *json =
        "{\"outputs\": [\"wide\"], \"nodes\": ["
        "{\"op\": \"conv\", \"name\": \"a\", \"in\": [\"input\"], \"weight\": \"a.w\","
        " \"pad\": [1, 1, 1, 1], \"pad_mode\": \"zero\"},"
        "{\"op\": \"lrelu\", \"name\": \"act\", \"in\": [\"a\"], \"alpha\": 0.2},"
        "{\"op\": \"conv\", \"name\": \"wide\", \"in\": [\"act\"], \"weight\": \"b.w\"}]}";
    tensors t = {.seed = 5};
    conv_weight(&t, "a.w", 32, 3, 3);
    conv_weight(&t, "b.w", 1404, 32, 1);
    ag_error err;
    ag_tensor_set_meta(&t.set, "kind", "detector", &err);
    ag_model *model = NULL;
    CHECK_OK(build(json, &t, &model, &err), &err);
    const ag_precision modes[] = {AG_PRECISION_FP32, AG_PRECISION_BF16, AG_PRECISION_INT8};
    const float bars[] = {1e-4f, 0.05f, 0.1f};
    enum { W = 10, H = 8, N = W * H * 1404 };
    float in[W * H * 3], *ref = ag_malloc(N * sizeof(float)), *out = ag_malloc(N * sizeof(float));
    for (int i = 0; i < W * H * 3; i++)
        in[i] = (float)((i * 37) % 255) / 127.5f - 1.0f;
    for (int m = -1; m < 3; m++) {
        ag_precision_choice choice = {.precision = AG_PRECISION_FP32};
        if (m >= 0 && ag_precision_resolve(modes[m], AG_BACKEND_ONEDNN, NULL, &choice) != AG_OK)
            continue;
        ag_engine_options opt = {.backend = m < 0 ? AG_BACKEND_REFERENCE : AG_BACKEND_ONEDNN,
                                 .threads = 2,
                                 .precision = choice.precision};
        ag_engine *e;
        CHECK_OK(ag_engine_create(model, &opt, &e, &err), &err);
        CHECK_OK(ag_engine_prepare(e, W, H, &err), &err);
        float *outs[1] = {m < 0 ? ref : out};
        CHECK_OK(ag_engine_run_raw(e, in, W, H, outs, &err), &err);
        ag_engine_destroy(e);
        if (m < 0)
            continue;
        float worst = max_diff(ref, out, N);
        printf("  a 1404-channel output, precision %d: max abs error vs reference %.2e\n",
               (int)choice.precision, (double)worst);
        CHECK(worst <= bars[m]);
    }
    ag_free(ref), ag_free(out);
    ag_model_destroy(model);
    tensors_fini(&t);
    return 0;
}

/* A wide map: conv 3 -> C (1x1), lrelu, conv C -> 3 (3x3), tanh. */
static int build_wide(int c, tensors *t, ag_model **model, ag_error *err) {
    const char *json =
        "{\"outputs\": [\"out\"], \"nodes\": ["
        "{\"op\": \"conv\", \"name\": \"wide\", \"in\": [\"input\"], \"weight\": \"a.w\"},"
        "{\"op\": \"lrelu\", \"name\": \"act\", \"in\": [\"wide\"], \"alpha\": 0.2},"
        "{\"op\": \"conv\", \"name\": \"narrow\", \"in\": [\"act\"], \"weight\": \"b.w\","
        " \"pad\": [1, 1, 1, 1], \"pad_mode\": \"reflect\"},"
        "{\"op\": \"tanh\", \"name\": \"out\", \"in\": [\"narrow\"]}]}";
    t->seed = 11;
    conv_weight(t, "a.w", c, 3, 1);
    conv_weight(t, "b.w", 3, c, 3);
    return build(json, t, model, err);
}

/* #35: every per-channel array in the kernels is AG_MAP_MAX_CHANNELS long and on the stack
 * (an int8 row's ranges among them): a file's wider map is refused at load, naming the node,
 * and a map of exactly the bound runs in every precision this CPU has, equal to the
 * reference within each precision's bar. Without the check, 1040 channels wrote past the
 * int8 quantiser's arrays (a crash, or a stack write the file's biases chose). */
static int test_wide_maps_refused_at_load(void) {
    tensors t = {0};
    ag_model *model = NULL;
    ag_error err;
    int rc = build_wide(AG_MAP_MAX_CHANNELS + 16, &t, &model, &err);
    tensors_fini(&t);
    ag_model_destroy(model);
    printf("  %s\n", rc ? err.message : "loaded");
    CHECK(rc == AG_E_FORMAT);
    CHECK(strstr(err.message, "\"wide\"") && strstr(err.message, "1040 channels; at most 1024"));

    tensors w = {0};
    CHECK_OK(build_wide(AG_MAP_MAX_CHANNELS, &w, &model, &err), &err);
    const ag_precision modes[] = {AG_PRECISION_FP32, AG_PRECISION_BF16, AG_PRECISION_INT8};
    const float bars[] = {1e-4f, 0.05f, 0.05f};
    float in[24 * 20 * 3], ref[24 * 20 * 3], out[24 * 20 * 3];
    for (int i = 0; i < 24 * 20 * 3; i++)
        in[i] = (float)((i * 37) % 255) / 127.5f - 1.0f;
    ag_engine_options ref_opt = {.backend = AG_BACKEND_REFERENCE, .threads = 1};
    ag_engine *e;
    CHECK_OK(ag_engine_create(model, &ref_opt, &e, &err), &err);
    CHECK_OK(ag_engine_run_f32(e, in, 24, 20, ref, &err), &err);
    ag_engine_destroy(e);
    for (int m = 0; m < 3; m++) {
        ag_precision_choice choice;
        if (ag_precision_resolve(modes[m], AG_BACKEND_ONEDNN, NULL, &choice) != AG_OK)
            continue;
        ag_engine_options opt = {
            .backend = AG_BACKEND_ONEDNN, .threads = 2, .precision = choice.precision};
        CHECK_OK(ag_engine_create(model, &opt, &e, &err), &err);
        CHECK_OK(ag_engine_run_f32(e, in, 24, 20, out, &err), &err);
        ag_engine_destroy(e);
        float worst = max_diff(ref, out, sizeof out / sizeof out[0]);
        printf("  %d channels, precision %d: max abs error vs reference %.2e\n",
               AG_MAP_MAX_CHANNELS, (int)choice.precision, (double)worst);
        CHECK(worst <= bars[m]);
    }
    ag_model_destroy(model);
    tensors_fini(&w);
    return 0;
}

/* A linear's vector may be wider than a map where slices alone read it (GFPGAN's latents);
 * any other reader of it is refused, by name. */
static int test_wide_vectors_only_sliced(void) {
    const char *fmt = "{\"outputs\": [\"out\", \"lat\"], \"nodes\": ["
                      "{\"op\": \"linear\", \"name\": \"lat\", \"in\": [\"input\"],"
                      " \"weight\": \"l.w\", \"bias\": \"l.b\"},"
                      "{\"op\": \"%s\", \"name\": \"out\", \"in\": [\"lat\"]%s}]}";
    const struct {
        const char *op, *attrs;
        int ok;
    } readers[] = {{"slice", ", \"c0\": 1533, \"c1\": 1536", 1}, {"tanh", "", 0}};
    for (int r = 0; r < 2; r++) {
        char json[1024];
        snprintf(json, sizeof json, fmt, readers[r].op, readers[r].attrs);
        tensors t = {0};
        int64_t shape[2] = {2048, 4 * 4 * 3};
        add_tensor(&t, "l.w", 2, shape, 0.0f, 0.1f);
        vector(&t, "l.b", 2048, 0.0f, 0.1f);
        ag_model *model = NULL;
        ag_error err;
        ag_tensor_set_meta(&t.set, "kind", "restorer", &err); /* raw outputs, not a style */
        int rc = build(json, &t, &model, &err);
        ag_model_destroy(model);
        tensors_fini(&t);
        printf("  linear (2048) -> %s: %s\n", readers[r].op, rc ? err.message : "accepted");
        CHECK_MSG(readers[r].ok ? rc == AG_OK : rc == AG_E_FORMAT, "%s gave %d", readers[r].op, rc);
        CHECK(readers[r].ok || strstr(err.message, "reads the 2048-channel output of \"lat\""));
    }
    return 0;
}

static int test_no_leak(void) {
    CHECK_MSG(ag_allocated_bytes() == 0, "%zu bytes still allocated", ag_allocated_bytes());
    return 0;
}

/* Every op has its row in the op table (a new enum value without one would be all zeros):
 * a name that parses back to it, a kernel (the input excepted), sane input counts and
 * attribute and tensor lists that agree with their counts. */
static int test_every_op_has_a_row(void) {
    for (int op = 0; op < AG_OP_COUNT; op++) {
        const ag_op_desc *d = ag_op_desc_of((ag_op)op);
        CHECK_MSG(d->name && d->name[0], "op %d has no row in src/graph/op_table.c", op);
        CHECK_MSG(ag_op_parse(d->name) == op, "op %d: name %s is taken twice", op, d->name);
        CHECK_MSG(d->run || op == AG_OP_INPUT, "op %s has no kernel", d->name);
        CHECK_MSG(d->min_src <= d->max_src && d->max_src <= AG_NODE_MAX_SRC,
                  "op %s takes %d..%d inputs", d->name, d->min_src, d->max_src);
        CHECK_MSG(!d->attr_count == !d->attrs && !d->tensor_count == !d->tensors,
                  "op %s: a list and its count disagree", d->name);
        for (int i = 0; i < d->attr_count; i++)
            CHECK_MSG(d->attrs[i].key && d->attrs[i].lo <= d->attrs[i].hi, "op %s: attribute %d",
                      d->name, i);
    }
    return 0;
}

TEST_MAIN(TEST(test_every_op_has_a_row), TEST(test_mixed_graph_equals_reference),
          TEST(test_bf16_refused_for_generic_ops), TEST(test_bad_graphs_refused),
          TEST(test_shape_mismatch_named), TEST(test_raw_outputs),
          TEST(test_auto_precision_resolved), TEST(test_late_residual_and_chain_sized_resize),
          TEST(test_concat_bands), TEST(test_wide_maps_refused_at_load),
          TEST(test_wide_vectors_only_sliced), TEST(test_wide_output_runs), TEST(test_no_leak))
