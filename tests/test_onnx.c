/*
 * test_onnx.c - the ONNX reader (onnx_pb.c) and importer (onnx_import.c): AnimeGANv3's
 * tiny Cute file as its author exported it, the small graphs tools/make_onnx_fixtures.py
 * writes (tests/fixtures/onnx/), and hand-broken files: truncated at every byte, wrong
 * types, absurd dims, cycles, unknown ops, external data. Every test checks that the
 * library's allocation count returns to where it started.
 */
#include "../src/model/onnx_internal.h"
#include "test.h"

#define FIXTURES AG_SOURCE_DIR "/tests/fixtures/onnx/"

/* A test whose body must give back every byte it allocated through ag_malloc. */
#define LEAK_CHECKED(name)                                                                         \
    static int name##_body(void);                                                                  \
    static int name(void) {                                                                        \
        size_t base_ = ag_allocated_bytes();                                                       \
        int rc_ = name##_body();                                                                   \
        if (rc_ == 0 && ag_allocated_bytes() != base_) {                                           \
            fprintf(stderr, "  %s leaked %zu bytes\n", #name, ag_allocated_bytes() - base_);       \
            return 1;                                                                              \
        }                                                                                          \
        return rc_;                                                                                \
    }                                                                                              \
    static int name##_body(void)

static int read_fixture(const char *name, uint8_t **data, size_t *size) {
    char path[512];
    snprintf(path, sizeof path, FIXTURES "%s", name);
    ag_error err = {0};
    int rc = ag_read_file(path, (size_t)1 << 30, data, size, &err);
    if (rc != 0)
        fprintf(stderr, "  %s\n", err.message);
    return rc;
}

/* ---- the protobuf reader ------------------------------------------------------------ */

static int count_op(const ag_onnx_model *m, const char *op) {
    int n = 0;
    for (int i = 0; i < m->node_count; i++)
        n += ag_pb_span_eq(m->nodes[i].op_type, op);
    return n;
}

static const ag_onnx_tensor *find_tensor(const ag_onnx_model *m, const char *name) {
    for (int i = 0; i < m->tensor_count; i++)
        if (ag_pb_span_eq(m->tensors[i].name, name))
            return &m->tensors[i];
    return NULL;
}

LEAK_CHECKED(test_pb_cute) {
    uint8_t *data = NULL;
    size_t size = 0;
    CHECK(read_fixture("AnimeGANv3_tiny_Cute.onnx", &data, &size) == 0);
    ag_onnx_model m;
    ag_error err = {0};
    CHECK_OK(ag_onnx_pb_parse(data, size, "cute.onnx", &m, &err), &err);
    CHECK(m.ir_version == 8 && m.opset == 15);
    CHECK(ag_pb_span_eq(m.producer, "tf2onnx"));
    CHECK_MSG(m.node_count == 174 && m.initializer_count == 65, "%d nodes, %d initializers",
              m.node_count, m.initializer_count);
    CHECK(count_op(&m, "Conv") == 28 && count_op(&m, "Pad") == 28 && count_op(&m, "Resize") == 4);
    CHECK(count_op(&m, "GlobalAveragePool") == 4 && count_op(&m, "Tanh") == 1);
    CHECK(m.input_count == 1 && ag_pb_span_eq(m.inputs[0].name, "AnimeGANv3_input:0"));
    CHECK(m.inputs[0].elem_type == AG_ONNX_FLOAT && m.inputs[0].ndim == 4);
    CHECK(m.inputs[0].dims[0] == 1 && m.inputs[0].dims[1] == -1 && m.inputs[0].dims[3] == 3);
    CHECK(m.output_count == 1 && ag_pb_span_eq(m.outputs[0].name, "generator/main/out_layer:0"));
    /* The first node and its attribute. */
    const ag_onnx_node *pad = &m.nodes[0];
    CHECK(ag_pb_span_eq(pad->op_type, "Pad") &&
          ag_pb_span_eq(pad->name, "generator/base/MirrorPad"));
    CHECK(pad->input_count == 2 && ag_pb_span_eq(m.names[pad->input_first], "AnimeGANv3_input:0"));
    CHECK(pad->attr_count == 1 && ag_pb_span_eq(m.attrs[pad->attr_first].name, "mode"));
    CHECK(ag_pb_span_eq(m.attrs[pad->attr_first].s, "reflect"));
    /* Tensors: an int64 shape constant and a conv weight pointing into the file. */
    const ag_onnx_tensor *pads = find_tensor(&m, "pad_const__6");
    CHECK(pads && pads->data_type == AG_ONNX_INT64 && pads->count == 8);
    int64_t v[8];
    CHECK_OK(ag_onnx_tensor_ints(pads, v, 8, "cute.onnx", &err), &err);
    CHECK(v[0] == 0 && v[1] == 3 && v[2] == 3 && v[3] == 0 && v[5] == 3);
    const ag_onnx_tensor *w = find_tensor(&m, "generator/base/Conv/Conv2D_weights_fused_bn");
    CHECK(w && w->data_type == AG_ONNX_FLOAT && w->ndim == 4 && w->dims[0] == 16 &&
          w->dims[1] == 3 && w->dims[2] == 7 && w->count == 16 * 3 * 49);
    CHECK(w->has_raw && w->raw.ptr > data && w->raw.ptr + w->raw.len <= data + size);
    const ag_onnx_tensor *eps = find_tensor(&m, "const_fold_opt__709");
    float e = 0;
    CHECK(eps && eps->count == 1);
    CHECK_OK(ag_onnx_tensor_floats(eps, &e, "cute.onnx", &err), &err);
    CHECK(fabsf(e - 1e-5f) < 1e-9f);
    ag_onnx_model_fini(&m);
    ag_free(data);
    return 0;
}

/* float_data (packed) reads like raw_data. */
LEAK_CHECKED(test_pb_float_data) {
    uint8_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CHECK(read_fixture("mini_v3.onnx", &a, &na) == 0);
    CHECK(read_fixture("mini_v3_float_data.onnx", &b, &nb) == 0);
    ag_onnx_model ma, mb;
    ag_error err = {0};
    CHECK_OK(ag_onnx_pb_parse(a, na, "a.onnx", &ma, &err), &err);
    CHECK_OK(ag_onnx_pb_parse(b, nb, "b.onnx", &mb, &err), &err);
    const ag_onnx_tensor *ta = find_tensor(&ma, "enc0.w"), *tb = find_tensor(&mb, "enc0.w");
    CHECK(ta && tb && ta->has_raw && !tb->has_raw && tb->typed_field == 4 && tb->typed.ptr);
    CHECK(ta->count == 108 && tb->count == 108);
    float fa[108], fb[108];
    CHECK_OK(ag_onnx_tensor_floats(ta, fa, "a.onnx", &err), &err);
    CHECK_OK(ag_onnx_tensor_floats(tb, fb, "b.onnx", &err), &err);
    CHECK(memcmp(fa, fb, sizeof fa) == 0);
    ag_onnx_model_fini(&ma);
    ag_onnx_model_fini(&mb);
    ag_free(a);
    ag_free(b);
    return 0;
}

static int expect_pb_refusal(const uint8_t *data, size_t size, int code, const char *needle) {
    ag_onnx_model m;
    ag_error err = {0};
    int rc = ag_onnx_pb_parse(data, size, "probe.onnx", &m, &err);
    CHECK_MSG(rc == code, "returned %d (%s), wanted %d", rc, err.message, code);
    CHECK_MSG(strncmp(err.message, "probe.onnx: ", 12) == 0, "message '%s'", err.message);
    CHECK_MSG(strstr(err.message, needle), "message '%s' lacks '%s'", err.message, needle);
    CHECK(m.nodes == NULL && m.tensors == NULL && m.node_count == 0);
    return 0;
}

static int expect_pb_file_refusal(const char *name, int code, const char *needle) {
    uint8_t *data = NULL;
    size_t size = 0;
    CHECK(read_fixture(name, &data, &size) == 0);
    int rc = expect_pb_refusal(data, size, code, needle);
    ag_free(data);
    CHECK_MSG(rc == 0, "in %s", name);
    return 0;
}

LEAK_CHECKED(test_pb_refused_files) {
    CHECK(expect_pb_file_refusal("bad_external.onnx", AG_E_UNSUPPORTED,
                                 "tensor 'enc1.w' keeps its data in an external file") == 0);
    CHECK(expect_pb_file_refusal("bad_absurd_dims.onnx", AG_E_FORMAT,
                                 "tensor 'enc1.w': dimension 0 is 1099511627776") == 0);
    CHECK(expect_pb_file_refusal("bad_nine_dims.onnx", AG_E_UNSUPPORTED,
                                 "tensor 'enc1.w' has more than 8 dimensions") == 0);
    CHECK(expect_pb_file_refusal("bad_double.onnx", AG_E_UNSUPPORTED,
                                 "tensor 'enc1.w' has data type 11 (DOUBLE)") == 0);
    CHECK(expect_pb_file_refusal("bad_short_raw.onnx", AG_E_FORMAT,
                                 "tensor 'enc1.w': its dims need 576 bytes of raw_data, it has "
                                 "572") == 0);
    return 0;
}

/* Hand-made wire bytes: each breaks one rule of the format. */
LEAK_CHECKED(test_pb_wire_errors) {
    /* ir_version as an 11-byte varint. */
    static const uint8_t overflow[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                                       0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    CHECK(expect_pb_refusal(overflow, sizeof overflow, AG_E_FORMAT, "longer than 64 bits") == 0);
    /* A 10-byte varint whose last byte carries bits past 64. */
    static const uint8_t overflow10[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff,
                                         0xff, 0xff, 0xff, 0xff, 0x02};
    CHECK(expect_pb_refusal(overflow10, sizeof overflow10, AG_E_FORMAT, "longer than 64 bits") ==
          0);
    /* graph (field 7) claiming 1000 bytes with 2 left. */
    static const uint8_t longer[] = {0x08, 0x08, 0x3a, 0xe8, 0x07, 0x0a, 0x00};
    CHECK(expect_pb_refusal(longer, sizeof longer, AG_E_FORMAT,
                            "field 7 of the ModelProto claims 1000 bytes, 2 are left") == 0);
    /* A length of 2^63. */
    static const uint8_t huge[] = {0x3a, 0x80, 0x80, 0x80, 0x80, 0x80,
                                   0x80, 0x80, 0x80, 0x80, 0x01};
    CHECK(expect_pb_refusal(huge, sizeof huge, AG_E_FORMAT, "claims") == 0);
    /* A group (wire type 3), field number 0, graph given as a varint. */
    static const uint8_t group[] = {0x0b};
    CHECK(expect_pb_refusal(group, sizeof group, AG_E_FORMAT, "wire type 3") == 0);
    static const uint8_t zero[] = {0x00, 0x01};
    CHECK(expect_pb_refusal(zero, sizeof zero, AG_E_FORMAT, "field number 0") == 0);
    static const uint8_t varint_graph[] = {0x08, 0x08, 0x38, 0x01};
    CHECK(expect_pb_refusal(varint_graph, sizeof varint_graph, AG_E_FORMAT,
                            "field 7 of the ModelProto has wire type 0, expected 2") == 0);
    /* A JPEG, an empty file, a model without a graph. */
    static const uint8_t jpeg[] = {0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10};
    CHECK(expect_pb_refusal(jpeg, sizeof jpeg, AG_E_FORMAT, "probe.onnx") == 0);
    CHECK(expect_pb_refusal(jpeg, 0, AG_E_FORMAT, "empty file") == 0);
    static const uint8_t no_graph[] = {0x08, 0x08};
    CHECK(expect_pb_refusal(no_graph, sizeof no_graph, AG_E_FORMAT, "no graph") == 0);
    return 0;
}

/* Every prefix of a small model is refused with a message naming the file, not a crash. */
LEAK_CHECKED(test_pb_truncated_everywhere) {
    uint8_t *data = NULL;
    size_t size = 0;
    CHECK(read_fixture("mini_v3.onnx", &data, &size) == 0);
    int refused = 0;
    for (size_t n = 0; n < size; n++) {
        /* A copy of exactly n bytes, so ASan sees any read past the prefix. */
        uint8_t *prefix = ag_malloc(n ? n : 1);
        CHECK(prefix);
        memcpy(prefix, data, n);
        ag_onnx_model m;
        ag_error err = {0};
        int rc = ag_onnx_pb_parse(prefix, n, "cut.onnx", &m, &err);
        ag_free(prefix);
        if (rc == 0) {
            ag_onnx_model_fini(&m);
            continue; /* a cut between two complete fields of the ModelProto */
        }
        CHECK_MSG(strncmp(err.message, "cut.onnx: ", 10) == 0, "at %zu: '%s'", n, err.message);
        refused++;
    }
    printf("  %d of %zu prefixes refused\n", refused, size);
    CHECK(refused > (int)size / 2);
    ag_free(data);
    return 0;
}

TEST_MAIN(TEST(test_pb_cute), TEST(test_pb_float_data), TEST(test_pb_refused_files),
          TEST(test_pb_wire_errors), TEST(test_pb_truncated_everywhere))
