/*
 * test_ops.c - the StyleGAN-family and resampling ops against PyTorch: each fixture of
 * tests/fixtures/ops (tools/make_op_fixtures.py) is a graph file whose seeded weights,
 * input and PyTorch output it carries; loaded as a model (JSON reader, op table, binder
 * with the equalised-lr scales, checker), run on both backends, compared to the output.
 * Tolerance: 2e-5 absolute on values of order 1 (fp32 loops against ATen's kernels); the
 * error reached is printed.
 */
#include "test.h"

#include "../src/engine/kind.h"
#include "../src/engine_internal.h"
#include "../src/graph/ops.h"
#include "../src/model/model_internal.h"

#define OPS_TOLERANCE 2e-5f

static const char *cases[] = {"style",    "upsample", "down",       "combine",
                              "resample", "winograd", "transformer"};

/* fixture.input / fixture.output of the file: their data as fp32 (little-endian files). */
static const float *fixture_tensor(const ag_tensor_set *set, const char *name, int ndim,
                                   const int64_t **shape) {
    const ag_tensor_ref *ref = ag_tensor_set_find(set, name);
    if (!ref || ref->dtype != AG_DTYPE_F32 || ref->ndim != ndim)
        return NULL;
    *shape = ref->shape;
    return (const float *)ref->data;
}

/* The Winograd weights are the model's, made once: a second engine shares them (and gives
 * the same output); an engine's own prepared weights exclude them. */
static int check_shared_wino(const ag_model *model, ag_engine *e, const ag_engine_options *opt,
                             const float *in, int w, int h, const float *out, size_t n) {
    size_t shared = ag_model_shared_bytes(model);
    CHECK(ag_engine_prepared_bytes_for(model, opt, w, h) == e->prepared_bytes);
    ag_engine *e2;
    ag_error err;
    CHECK_OK(ag_engine_create(model, opt, &e2, &err), &err);
    float *out2 = ag_malloc(n * sizeof(float));
    float *outs[1] = {out2};
    CHECK_OK(ag_engine_run_raw(e2, in, w, h, outs, &err), &err);
    int same = 1, shared_ptrs = 0;
    for (int gi = 0; gi < e->group_count; gi++) {
        same &= e2->exec[gi].shared_weights == e->exec[gi].shared_weights;
        shared_ptrs += e->exec[gi].shared_weights != NULL;
    }
    CHECK(memcmp(out, out2, n * sizeof(float)) == 0);
    ag_free(out2);
    ag_engine_destroy(e2);
    CHECK_MSG(same && shared_ptrs == 1 && shared >= 32 * 48 * 9 * 4 &&
                  ag_model_shared_bytes(model) == shared,
              "shared %d, %d shared convs, %zu then %zu bytes", same, shared_ptrs, shared,
              ag_model_shared_bytes(model));
    return 0;
}

static int run_case(const char *name, ag_backend backend, float *worst) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/fixtures/ops/%s.safetensors", AG_SOURCE_DIR, name);
    ag_error err;
    uint8_t *bytes;
    size_t size;
    ag_tensor_set set = {0};
    ag_model *model;
    CHECK_OK(ag_read_file(path, 1 << 20, &bytes, &size, &err), &err);
    CHECK_OK(ag_safetensors_parse(bytes, size, path, &set, &err), &err);
    ag_graph *g = ag_malloc(sizeof *g);
    const char *json = ag_tensor_set_meta_get(&set, "graph");
    CHECK(g && json);
    CHECK_OK(ag_graph_from_json(json, &set, path, g, &err), &err);
    CHECK_OK(ag_model_build(&set, g, path, "safetensors", &model, &err), &err);
    ag_free(g);
    const int64_t *is = NULL, *os = NULL;
    const float *in = fixture_tensor(&set, "fixture.input", 3, &is);
    const float *want = fixture_tensor(&set, "fixture.output", 3, &os);
    CHECK(in && want && is[2] == 3);
    ag_engine_options opt = {.backend = backend, .threads = 2, .precision = AG_PRECISION_FP32};
    ag_engine *e;
    CHECK_OK(ag_engine_create(model, &opt, &e, &err), &err);
    size_t n = (size_t)(os[0] * os[1] * os[2]);
    float *out = ag_malloc(n * sizeof(float));
    float *outs[1] = {out};
    CHECK_OK(ag_engine_run_raw(e, in, (int)is[1], (int)is[0], outs, &err), &err);
    if (strcmp(name, "winograd") == 0 && backend == AG_BACKEND_ONEDNN) {
        /* oneDNN has the Winograd kernel wherever its ISA reaches AVX-512 */
        int wino = 0, expected = (ag_cpu_get_info()->onednn_flags & AG_CPU_AVX512F) != 0;
        for (int gi = 0; gi < e->group_count; gi++)
            wino += strcmp(e->exec[gi].kind->name, "modconv_wino") == 0;
        CHECK_MSG(wino == expected, "%d Winograd convs, %d expected (oneDNN ISA %s)", wino,
                  expected, ag_cpu_get_info()->onednn_isa);
        CHECK(!expected ||
              check_shared_wino(model, e, &opt, in, (int)is[1], (int)is[0], out, n) == 0);
    }
    int h, w, c;
    CHECK(ag_engine_output_shape(e, 0, &h, &w, &c) >= 1);
    CHECK_MSG(h == os[0] && w == os[1] && c == os[2], "%s: output %dx%dx%d, PyTorch %lldx%lldx%lld",
              name, h, w, c, (long long)os[0], (long long)os[1], (long long)os[2]);
    float err_max = 0.0f;
    for (size_t i = 0; i < n; i++)
        err_max = fmaxf(err_max, fabsf(out[i] - want[i]));
    printf("  %-9s %-9s %dx%d -> %dx%dx%d: max abs error vs PyTorch %.2e (bound %.0e)\n", name,
           backend == AG_BACKEND_REFERENCE ? "reference" : "onednn", (int)is[1], (int)is[0], w, h,
           c, (double)err_max, (double)OPS_TOLERANCE);
    *worst = fmaxf(*worst, err_max);
    ag_free(out);
    ag_engine_destroy(e);
    ag_model_destroy(model);
    ag_tensor_set_fini(&set);
    ag_free(bytes);
    return 0;
}

static int test_ops_against_pytorch(void) {
    float worst = 0.0f;
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        failed |= run_case(cases[i], AG_BACKEND_REFERENCE, &worst);
        failed |= run_case(cases[i], AG_BACKEND_ONEDNN, &worst);
    }
    CHECK(!failed);
    CHECK_MSG(worst <= OPS_TOLERANCE, "max error %.3g over %.0e", (double)worst,
              (double)OPS_TOLERANCE);
    return 0;
}

/* Graphs the checker must refuse, each with its reason. */
static int refused(const char *json, const char *why) {
    ag_graph *g = ag_malloc(sizeof *g);
    ag_tensor_set set = {0};
    ag_error err;
    int rc = ag_graph_from_json(json, &set, "bad.graph", g, &err);
    if (rc == AG_OK)
        rc = ag_graph_check(g, "bad.graph", &err);
    ag_free(g);
    ag_tensor_set_fini(&set);
    CHECK_MSG(rc != AG_OK, "accepted: %s", why);
    CHECK_MSG(strstr(err.message, why) != NULL, "'%s' does not say '%s'", err.message, why);
    return 0;
}

static int test_ops_refused(void) {
    int failed = 0;
    failed |= refused("{\"outputs\": [\"c\"], \"nodes\": [{\"op\": \"concat\", \"name\": \"c\","
                      " \"in\": [\"input\"]}]}",
                      "'in' is not a list of 2 to 8");
    failed |= refused("{\"outputs\": [\"r\"], \"nodes\": [{\"op\": \"resample\", \"name\": \"r\","
                      " \"in\": [\"input\"], \"up\": 9}]}",
                      "'up' is not an integer in [1, 4]");
    failed |= refused("{\"outputs\": [\"r\"], \"nodes\": [{\"op\": \"resample\", \"name\": \"r\","
                      " \"in\": [\"input\"], \"up\": 2, \"down\": 2}]}",
                      "one of them must be 1");
    failed |= refused("{\"outputs\": [\"p\"], \"nodes\": [{\"op\": \"pixel_shuffle\", \"name\":"
                      " \"p\", \"in\": [\"input\"], \"up\": 2}]}",
                      "not a multiple of 4");
    failed |= refused("{\"outputs\": [\"s\"], \"nodes\": [{\"op\": \"slice\", \"name\": \"s\","
                      " \"in\": [\"input\"], \"c0\": 2, \"c1\": 5}]}",
                      "channels [2, 5) of 3");
    failed |= refused("{\"outputs\": [\"f\"], \"nodes\": [{\"op\": \"upfirdn\", \"name\": \"f\","
                      " \"in\": [\"input\"], \"fir\": [1, -1]}]}",
                      "sums to 0");
    CHECK(!failed);
    return 0;
}

/* Shapes past the side bound are refused by name, not wrapped around (issue 17, 9). */
static int test_shape_overflow(void) {
    ag_graph *g = ag_malloc(sizeof *g);
    ag_tensor_set set = {0};
    ag_error err;
    const char *json = "{\"outputs\": [\"u4\"], \"nodes\": ["
                       "{\"op\": \"resize2x\", \"name\": \"u1\", \"in\": [\"input\"]},"
                       "{\"op\": \"nearest\", \"name\": \"u2\", \"in\": [\"u1\"], \"up\": 8},"
                       "{\"op\": \"nearest\", \"name\": \"u3\", \"in\": [\"u2\"], \"up\": 8},"
                       "{\"op\": \"resize2x\", \"name\": \"u4\", \"in\": [\"u3\"]}]}";
    CHECK_OK(ag_graph_from_json(json, &set, "big.graph", g, &err), &err);
    CHECK_OK(ag_graph_check(g, "big.graph", &err), &err);
    ag_shape shapes[8];
    int rc = ag_graph_shapes(g, 5000, 4000, shapes, &err);
    CHECK(rc == AG_E_ARG && strstr(err.message, "\"u4\"") && strstr(err.message, "a side"));
    printf("  %s\n", err.message);
    CHECK_OK(ag_graph_shapes(g, 40, 30, shapes, &err), &err);
    CHECK(shapes[4].w == 40 * 256 && shapes[4].h == 30 * 256);
    ag_free(g);
    ag_tensor_set_fini(&set);
    return 0;
}

static int test_no_leak(void) {
    CHECK_MSG(ag_allocated_bytes() == 0, "%zu bytes still allocated", ag_allocated_bytes());
    return 0;
}

TEST_MAIN(TEST(test_ops_against_pytorch), TEST(test_ops_refused), TEST(test_shape_overflow),
          TEST(test_no_leak))
