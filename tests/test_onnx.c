/*
 * test_onnx.c - the ONNX reader (onnx_pb.c) and importer (onnx_import.c): AnimeGANv3's
 * tiny Cute file as its author exported it, the small graphs tools/make_onnx_fixtures.py
 * writes (tests/fixtures/onnx/), and hand-broken files: truncated at every byte, wrong
 * types, absurd dims, cycles, unknown ops, external data. Every test checks that the
 * library's allocation count returns to where it started.
 */
#include "../src/graph/graph.h"
#include "../src/model/onnx_internal.h"
#include "test.h"

#include <dirent.h>

#define FIXTURES AG_SOURCE_DIR "/tests/fixtures/onnx/"

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

/* ---- the importer ------------------------------------------------------------------- */

static ag_graph graph; /* 100 kB: not on the stack */

/* Imports a fixture; the caller finishes `set` and frees `*data`. */
static int import_fixture(const char *name, uint8_t **data, ag_tensor_set *set) {
    size_t size = 0;
    ag_error err = {0};
    CHECK(read_fixture(name, data, &size) == 0);
    memset(set, 0, sizeof *set);
    CHECK_OK(ag_onnx_parse(*data, size, name, set, &graph, &err), &err);
    return 0;
}

static int count_graph_op(ag_op op) {
    int n = 0;
    for (int i = 0; i < graph.count; i++)
        n += graph.nodes[i].op == op;
    return n;
}

/* The ops of the graph in order, as "conv lrelu ...". */
static void graph_ops(char *out, size_t bytes) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 1; i < graph.count && used + 20 < bytes; i++)
        used += (size_t)snprintf(out + used, bytes - used, "%s%s", i > 1 ? " " : "",
                                 ag_op_name(graph.nodes[i].op));
}

/* The graph is well formed: inputs precede use, tensors index the set, names unique. */
static int check_graph_form(const ag_tensor_set *set) {
    CHECK(graph.count >= 2 && graph.nodes[0].op == AG_OP_INPUT && graph.output_count == 1);
    for (int i = 1; i < graph.count; i++) {
        const ag_node *n = &graph.nodes[i];
        CHECK_MSG(n->src[0] >= 0 && n->src[0] < i && n->src[1] < i, "node %d", i);
        CHECK(!n->weight && !n->bias && !n->gamma && !n->beta);
        for (int t = 0; t < AG_NODE_TENSORS; t++)
            CHECK(n->tensor[t] >= -1 && n->tensor[t] < set->count);
        for (int j = 0; j < i; j++)
            CHECK_MSG(strcmp(n->name, graph.nodes[j].name), "name '%s' twice", n->name);
    }
    return 0;
}

static const ag_tensor_ref *node_tensor(const ag_tensor_set *set, int node, int which) {
    int t = graph.nodes[node].tensor[which];
    return t >= 0 ? &set->tensors[t] : NULL;
}

/* The tiny Cute generator: 27 convs (the 28th, LADE's 1x1, only feeds statistics), one
 * LADE, four upsamples each sized like the skip it is added to. */
LEAK_CHECKED(test_import_cute) {
    uint8_t *data = NULL;
    ag_tensor_set set;
    CHECK(import_fixture("AnimeGANv3_tiny_Cute.onnx", &data, &set) == 0);
    CHECK(check_graph_form(&set) == 0);
    CHECK_MSG(graph.count == 66, "%d nodes", graph.count);
    CHECK(count_graph_op(AG_OP_CONV) == 27 && count_graph_op(AG_OP_LRELU) == 26);
    CHECK(count_graph_op(AG_OP_ADD) == 6 && count_graph_op(AG_OP_RESIZE) == 4);
    CHECK(count_graph_op(AG_OP_LADE) == 1 && count_graph_op(AG_OP_TANH) == 1);
    CHECK(count_graph_op(AG_OP_RESIZE2X) == 0 && count_graph_op(AG_OP_AFFINE) == 0);
    /* The first conv: NHWC pad (3 each side, reflect) folded across the transpose. */
    const ag_node *c0 = &graph.nodes[1];
    CHECK(c0->op == AG_OP_CONV && c0->src[0] == 0 && c0->pad_mode == AG_PAD_REFLECT);
    CHECK(c0->pad[0] == 3 && c0->pad[1] == 3 && c0->pad[2] == 3 && c0->pad[3] == 3);
    CHECK(!strcmp(c0->name, "generator/base/Conv/Conv2D"));
    const ag_tensor_ref *w = node_tensor(&set, 1, AG_T_WEIGHT);
    CHECK(w && w->dtype == AG_DTYPE_F32 && w->ndim == 4 && w->shape[0] == 16 && w->shape[2] == 7);
    CHECK((const uint8_t *)w->data > data); /* into the file */
    CHECK(node_tensor(&set, 1, AG_T_BIAS) != NULL);
    /* Stride-2 convs pad top and left only. */
    const ag_node *c1 = &graph.nodes[3];
    CHECK(c1->op == AG_OP_CONV && c1->stride == 2);
    CHECK(c1->pad[0] == 1 && c1->pad[1] == 0 && c1->pad[2] == 1 && c1->pad[3] == 0);
    /* Each resize targets the map its block's output is added to. */
    int resizes = 0;
    for (int i = 1; i < graph.count; i++) {
        const ag_node *r = &graph.nodes[i];
        if (r->op != AG_OP_RESIZE)
            continue;
        CHECK(r->mode == AG_RESIZE_ASYMMETRIC);
        const ag_node *add = &graph.nodes[i + 3]; /* conv, lrelu, add */
        CHECK_MSG(add->op == AG_OP_ADD && add->src[1] == r->src[1], "resize %d", i);
        resizes++;
    }
    CHECK(resizes == 4);
    /* LADE: the bias-free 3x3 conv's output, weights of the 1x1 conv, eps 1e-5; then the
     * output conv and tanh. */
    int lade = graph.count - 4;
    CHECK(graph.nodes[lade].op == AG_OP_LADE && graph.nodes[lade - 1].op == AG_OP_CONV);
    CHECK(graph.nodes[lade].src[0] == lade - 1 && fabsf(graph.nodes[lade].eps - 1e-5f) < 1e-10f);
    const ag_tensor_ref *lw = node_tensor(&set, lade, AG_T_WEIGHT);
    CHECK(lw && lw->ndim == 4 && lw->shape[0] == 16 && lw->shape[1] == 16 && lw->shape[2] == 1);
    CHECK(strstr(lw->name, "generator/main/Conv_11/weights"));
    CHECK(node_tensor(&set, lade - 1, AG_T_BIAS) == NULL);
    CHECK(graph.outputs[0] == graph.count - 1 && graph.nodes[graph.count - 1].op == AG_OP_TANH);
    CHECK(!strcmp(ag_tensor_set_meta_get(&set, "format"), "onnx"));
    CHECK(!strcmp(ag_tensor_set_meta_get(&set, "side_multiple"), "16"));
    CHECK(!strcmp(ag_tensor_set_meta_get(&set, "resize"), "asymmetric"));
    ag_tensor_set_fini(&set);
    ag_free(data);
    return 0;
}

/* The same network with other weights (another style of the same generator) gives the same
 * graph: the architecture comes from the graph, not from names or values. Weights are
 * perturbed in place with a seeded generator. */
LEAK_CHECKED(test_import_cute_perturbed) {
    uint8_t *data = NULL;
    size_t size = 0;
    ag_error err = {0};
    CHECK(read_fixture("AnimeGANv3_tiny_Cute.onnx", &data, &size) == 0);
    ag_onnx_model m;
    CHECK_OK(ag_onnx_pb_parse(data, size, "cute.onnx", &m, &err), &err);
    char reference[2048], ops[2048];
    ag_tensor_set set = {0};
    CHECK_OK(ag_onnx_parse(data, size, "cute.onnx", &set, &graph, &err), &err);
    graph_ops(reference, sizeof reference);
    ag_tensor_set_fini(&set);
    uint32_t seed = 12345;
    for (int variant = 0; variant < 3; variant++) {
        for (int i = 0; i < m.tensor_count; i++) {
            const ag_onnx_tensor *t = &m.tensors[i];
            if (t->data_type != AG_ONNX_FLOAT || !t->has_raw || t->count < 16)
                continue; /* weights, not eps or shape constants */
            uint8_t *p = (uint8_t *)t->raw.ptr;
            for (int64_t j = 0; j < t->count; j++) {
                float v;
                memcpy(&v, p + 4 * j, 4);
                seed = seed * 1664525u + 1013904223u;
                v *= 0.5f + (float)(seed >> 8) / (float)(1u << 24);
                memcpy(p + 4 * j, &v, 4);
            }
        }
        CHECK_OK(ag_onnx_parse(data, size, "variant.onnx", &set, &graph, &err), &err);
        graph_ops(ops, sizeof ops);
        CHECK_MSG(!strcmp(ops, reference), "variant %d: %s", variant, ops);
        ag_tensor_set_fini(&set);
    }
    ag_onnx_model_fini(&m);
    ag_free(data);
    return 0;
}

LEAK_CHECKED(test_import_mini) {
    uint8_t *data = NULL;
    ag_tensor_set set;
    char ops[512];
    const char *want = "conv lrelu conv lrelu conv add lrelu resize conv lrelu add conv lade lrelu "
                       "conv tanh";
    const char *files[] = {"mini_v3.onnx", "mini_v3_float_data.onnx", "mini_v3_fp16.onnx"};
    for (int f = 0; f < 3; f++) {
        CHECK(import_fixture(files[f], &data, &set) == 0);
        CHECK(check_graph_form(&set) == 0);
        graph_ops(ops, sizeof ops);
        CHECK_MSG(!strcmp(ops, want), "%s: %s", files[f], ops);
        CHECK(graph.nodes[8].src[1] == 2); /* resized like enc/conv0's activation */
        CHECK(graph.nodes[3].stride == 2 && graph.nodes[5].k == 1);
        CHECK(!strcmp(ag_tensor_set_meta_get(&set, "side_multiple"), "2"));
        /* fp16 weights read through a Cast stay fp16, pointing into the file */
        const ag_tensor_ref *w = node_tensor(&set, 1, AG_T_WEIGHT);
        CHECK(w->dtype == (f == 2 ? AG_DTYPE_F16 : AG_DTYPE_F32));
        ag_tensor_set_fini(&set);
        ag_free(data);
    }
    return 0;
}

/* External attention: matmul, spatial softmax, sum normalisation, matmul by the transpose,
 * then BatchNorm as Mul + Add becomes one affine. */
LEAK_CHECKED(test_import_external_attention) {
    const char *want = "conv lrelu conv matmul softmax sum_normalize matmul conv affine add lrelu "
                       "conv tanh";
    const char *files[] = {"ea_block.onnx", "ea_block_transpose.onnx"};
    for (int f = 0; f < 2; f++) {
        uint8_t *data = NULL;
        ag_tensor_set set;
        char ops[512];
        CHECK(import_fixture(files[f], &data, &set) == 0);
        CHECK(check_graph_form(&set) == 0);
        graph_ops(ops, sizeof ops);
        CHECK_MSG(!strcmp(ops, want), "%s: %s", files[f], ops);
        const ag_node *mm0 = &graph.nodes[4], *sm = &graph.nodes[5], *sn = &graph.nodes[6];
        const ag_node *mm1 = &graph.nodes[7], *aff = &graph.nodes[9], *add = &graph.nodes[10];
        CHECK(!mm0->transpose && mm0->out_c == 8 && sm->axis == AG_AXIS_SPATIAL);
        CHECK(fabsf(sn->eps - 1e-9f) < 1e-15f);
        CHECK(mm1->out_c == 4 && mm1->transpose == (f == 1));
        if (f == 1) /* the same matrix, read transposed */
            CHECK(mm1->tensor[AG_T_WEIGHT] == mm0->tensor[AG_T_WEIGHT]);
        CHECK(add->src[1] == 2 && add->src[0] == 9); /* the block's input, after the affine */
        const ag_tensor_ref *scale = node_tensor(&set, 9, AG_T_GAMMA);
        const ag_tensor_ref *shift = node_tensor(&set, 9, AG_T_BETA);
        CHECK(aff->op == AG_OP_AFFINE && scale && shift && scale->shape[0] == 4);
        float s[4], b[4];
        memcpy(s, scale->data, sizeof s);
        memcpy(b, shift->data, sizeof b);
        for (int i = 0; i < 4; i++)
            CHECK(s[i] >= 0.5f && s[i] <= 1.5f && b[i] >= -0.5f && b[i] <= 0.5f);
        ag_tensor_set_fini(&set);
        ag_free(data);
    }
    return 0;
}

/* torch.onnx's vocabulary: NCHW in and out, a conv's own zero pads, InstanceNormalization
 * with its scale and bias, PRelu, BatchNormalization as an affine, Clip(0, 6), a Resize by
 * scales and one sized by a Shape -> Slice -> Concat chain from the skip. */
LEAK_CHECKED(test_import_torch_style) {
    uint8_t *data = NULL;
    ag_tensor_set set;
    char ops[512];
    CHECK(import_fixture("torch_style.onnx", &data, &set) == 0);
    CHECK(check_graph_form(&set) == 0);
    graph_ops(ops, sizeof ops);
    CHECK_MSG(!strcmp(ops, "conv instance_norm relu conv prelu resize add relu6 conv affine "
                           "sigmoid resize add conv tanh"),
              "%s", ops);
    const ag_node *c0 = &graph.nodes[1], *norm = &graph.nodes[2];
    CHECK(c0->pad_mode == AG_PAD_ZERO && c0->pad[0] == 1 && c0->pad[3] == 1);
    CHECK(norm->tensor[AG_T_GAMMA] >= 0 && norm->tensor[AG_T_BETA] >= 0);
    const ag_node *r0 = &graph.nodes[6], *r1 = &graph.nodes[12];
    CHECK(r0->src[1] == 3 && r0->mode == AG_RESIZE_HALF_PIXEL);    /* 2x, retargeted */
    CHECK(r1->src[1] == 8 && r1->mode == AG_RESIZE_ALIGN_CORNERS); /* sized from the file */
    CHECK(node_tensor(&set, 5, AG_T_GAMMA) && node_tensor(&set, 5, AG_T_GAMMA)->shape[0] == 4);
    CHECK(!strcmp(ag_tensor_set_meta_get(&set, "resize"), "half-pixel"));
    CHECK(!strcmp(ag_tensor_set_meta_get(&set, "side_multiple"), "2"));
    ag_tensor_set_fini(&set);
    ag_free(data);
    return 0;
}

/* Instance norm decomposed (moments, then gamma and beta; or times a Reciprocal): one node,
 * the affine around it as its gamma and beta. */
LEAK_CHECKED(test_import_instance_norm_pattern) {
    const char *files[] = {"inorm.onnx", "inorm_reciprocal.onnx"};
    for (int f = 0; f < 2; f++) {
        uint8_t *data = NULL;
        ag_tensor_set set;
        char ops[256];
        CHECK(import_fixture(files[f], &data, &set) == 0);
        graph_ops(ops, sizeof ops);
        CHECK_MSG(!strcmp(ops, "conv instance_norm lrelu conv tanh"), "%s: %s", files[f], ops);
        const ag_node *n = &graph.nodes[2];
        CHECK(fabsf(n->eps - 1e-3f) < 1e-9f && graph.nodes[3].alpha == 0.1f);
        CHECK((n->tensor[AG_T_GAMMA] >= 0) == (f == 0) && (n->tensor[AG_T_BETA] >= 0) == (f == 0));
        ag_tensor_set_fini(&set);
        ag_free(data);
    }
    return 0;
}

static int expect_import_refusal(const char *name, int code, const char *needle) {
    uint8_t *data = NULL;
    size_t size = 0;
    CHECK(read_fixture(name, &data, &size) == 0);
    ag_tensor_set set = {0};
    ag_error err = {0};
    int rc = ag_onnx_parse(data, size, name, &set, &graph, &err);
    ag_free(data);
    CHECK_MSG(rc == code && err.code == code, "%s: returned %d (%s), wanted %d", name, rc,
              err.message, code);
    CHECK_MSG(strncmp(err.message, name, strlen(name)) == 0 && err.message[strlen(name)] == ':',
              "message '%s'", err.message);
    CHECK_MSG(strstr(err.message, needle), "%s: message '%s' lacks '%s'", name, err.message,
              needle);
    CHECK_MSG(!strchr(err.message, '\n'), "message '%s' is not one line", err.message);
    CHECK(set.count == 0 && set.blob_count == 0 && set.meta_count == 0 && graph.count == 1);
    printf("  %s\n", err.message);
    return 0;
}

LEAK_CHECKED(test_import_refusals) {
    static const struct {
        const char *name;
        int code;
        const char *needle;
    } cases[] = {
        {"bad_unknown_op.onnx", AG_E_UNSUPPORTED, "node \"odd\" (op GridSample) is not supported"},
        {"bad_cyclic.onnx", AG_E_FORMAT,
         "node \"a\" (op Add) reads 'b', which no earlier node produces (the graph has a cycle"},
        {"bad_external.onnx", AG_E_UNSUPPORTED, "keeps its data in an external file"},
        {"bad_absurd_dims.onnx", AG_E_FORMAT, "dimension 0 is 1099511627776"},
        {"bad_nine_dims.onnx", AG_E_UNSUPPORTED, "more than 8 dimensions"},
        {"bad_huge_tensor.onnx", AG_E_FORMAT,
         "tensor 'enc1.w' declares more elements than the file has bytes"},
        {"bad_double.onnx", AG_E_UNSUPPORTED, "DOUBLE"},
        {"bad_short_raw.onnx", AG_E_FORMAT, "raw_data"},
        {"bad_int_weight.onnx", AG_E_UNSUPPORTED,
         "(op Conv) is not supported: weight 'enc1.w' is not a 4-D float tensor"},
        {"bad_alpha_type.onnx", AG_E_UNSUPPORTED,
         "node \"odd\" (op LeakyRelu) is not supported: attribute 'alpha' is not a FLOAT"},
        {"bad_cubic.onnx", AG_E_UNSUPPORTED, "(op Resize) is not supported: resize mode 'cubic'"},
        {"bad_lade_bias.onnx", AG_E_UNSUPPORTED,
         "(op Add) is not supported: LADE statistics taken from something other than a "
         "bias-free 1x1 conv"},
        {"bad_fixed_size.onnx", AG_E_UNSUPPORTED,
         "(op Resize) is not supported: sizes that are not computed from a map's size"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(expect_import_refusal(cases[i].name, cases[i].code, cases[i].needle) == 0);
    return 0;
}

/* Every prefix of the small graphs: imported or refused naming the file, never a crash, a
 * leak, or a half-filled set. */
LEAK_CHECKED(test_import_truncated_everywhere) {
    const char *files[] = {"mini_v3.onnx", "ea_block.onnx"};
    for (int f = 0; f < 2; f++) {
        uint8_t *data = NULL;
        size_t size = 0;
        CHECK(read_fixture(files[f], &data, &size) == 0);
        int refused = 0;
        for (size_t n = 0; n < size; n++) {
            uint8_t *prefix = ag_malloc(n ? n : 1);
            CHECK(prefix);
            memcpy(prefix, data, n);
            ag_tensor_set set = {0};
            ag_error err = {0};
            int rc = ag_onnx_parse(prefix, n, "cut.onnx", &set, &graph, &err);
            ag_free(prefix);
            if (rc == AG_OK) {
                CHECK(check_graph_form(&set) == 0);
                ag_tensor_set_fini(&set);
                continue;
            }
            CHECK_MSG(strncmp(err.message, "cut.onnx: ", 10) == 0, "at %zu: '%s'", n, err.message);
            CHECK(set.count == 0 && set.blob_count == 0);
            refused++;
        }
        printf("  %s: %d of %zu prefixes refused\n", files[f], refused, size);
        CHECK(refused >= (int)size - 2);
        ag_free(data);
    }
    return 0;
}

/* Every single-byte corruption of the small model: imported or refused, never a crash. */
LEAK_CHECKED(test_import_flipped_bytes) {
    uint8_t *data = NULL;
    size_t size = 0;
    CHECK(read_fixture("mini_v3.onnx", &data, &size) == 0);
    int refused = 0;
    uint32_t seed = 7;
    for (size_t i = 0; i < size; i++) {
        uint8_t keep = data[i];
        seed = seed * 1664525u + 1013904223u;
        data[i] ^= (uint8_t)(1u << (seed >> 29));
        ag_tensor_set set = {0};
        ag_error err = {0};
        int rc = ag_onnx_parse(data, size, "flip.onnx", &set, &graph, &err);
        data[i] = keep;
        if (rc != AG_OK) {
            CHECK_MSG(strncmp(err.message, "flip.onnx: ", 11) == 0, "at %zu: '%s'", i, err.message);
            refused++;
        }
        ag_tensor_set_fini(&set);
    }
    printf("  %d of %zu one-bit corruptions refused\n", refused, size);
    ag_free(data);
    return 0;
}

/* Runs `model` on a seeded (h, w, 3) image with a backend; out must hold h * w * 3. */
static int run_model(const ag_model *model, ag_backend backend, int w, int h, float *out) {
    ag_engine_options options = {.backend = backend, .threads = 2};
    ag_engine *engine = NULL;
    ag_error err = {0};
    size_t n = (size_t)w * h * 3;
    float *in = ag_malloc(n * sizeof *in);
    CHECK(in);
    uint32_t seed = 99;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        in[i] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
    }
    CHECK_OK(ag_engine_create(model, &options, &engine, &err), &err);
    int rc = ag_engine_run_f32(engine, in, w, h, out, &err);
    ag_engine_destroy(engine);
    ag_free(in);
    CHECK_OK(rc, &err);
    return 0;
}

/* The imported graphs bind and check as models, and run at sizes the exported networks do
 * not take (odd, not multiples of 16): both backends agree and the output is a tanh's. */
LEAK_CHECKED(test_import_runs) {
    static const struct {
        const char *name;
        int w, h;
    } cases[] = {{"AnimeGANv3_tiny_Cute.onnx", 45, 35},
                 {"AnimeGANv3_tiny_Cute.onnx", 64, 48},
                 {"mini_v3.onnx", 13, 9},
                 {"ea_block.onnx", 11, 9},
                 {"ea_block_transpose.onnx", 11, 9},
                 {"torch_style.onnx", 13, 11}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint8_t *data = NULL;
        ag_tensor_set set;
        ag_error err = {0};
        ag_model *model = NULL;
        CHECK(import_fixture(cases[c].name, &data, &set) == 0);
        int rc = ag_model_build(&set, &graph, cases[c].name, "onnx", &model, &err);
        ag_tensor_set_fini(&set);
        ag_free(data);
        CHECK_OK(rc, &err);
        int w = cases[c].w, h = cases[c].h;
        size_t n = (size_t)w * h * 3;
        float *ref = ag_malloc(2 * n * sizeof *ref), *fast = ref + n;
        CHECK(ref);
        rc = run_model(model, AG_BACKEND_REFERENCE, w, h, ref) ||
             run_model(model, AG_BACKEND_ONEDNN, w, h, fast);
        double max_err = 0.0;
        int finite = 1;
        for (size_t i = 0; i < n && !rc; i++) {
            finite &= ref[i] >= -1.0f && ref[i] <= 1.0f;
            double d = fabs((double)ref[i] - (double)fast[i]);
            max_err = d > max_err ? d : max_err;
        }
        ag_free(ref);
        ag_model_destroy(model);
        CHECK_MSG(!rc, "%s", cases[c].name);
        printf("  %s %dx%d: oneDNN vs reference max error %.2e (tolerance 1e-4)\n", cases[c].name,
               w, h, max_err);
        CHECK_MSG(finite && max_err <= 1e-4, "%s: out of [-1, 1] or error %g", cases[c].name,
                  max_err);
    }
    return 0;
}

static float *read_floats(const char *name, size_t count) {
    uint8_t *data = NULL;
    size_t size = 0;
    if (read_fixture(name, &data, &size) != 0)
        return NULL;
    if (size != count * sizeof(float)) {
        fprintf(stderr, "  %s: %zu bytes, want %zu\n", name, size, count * sizeof(float));
        ag_free(data);
        return NULL;
    }
    return (float *)data; /* ag_read_file's buffer is malloc-aligned */
}

/* The imported graphs equal ONNX Runtime running the same files (tools/make_onnx_golden.js
 * wrote its outputs): |ours - ort| <= 1e-4 + 1e-4 |ort| per element and NMSE <= 1e-7, on
 * both backends. */
LEAK_CHECKED(test_import_matches_ort) {
    static const struct {
        const char *name;
        int w, h;
    } cases[] = {{"AnimeGANv3_tiny_Cute", 64, 48}, {"mini_v3", 16, 12},
                 {"mini_v3_fp16", 16, 12},         {"ea_block", 11, 9},
                 {"torch_style", 16, 12},          {"inorm", 13, 10},
                 {"inorm_reciprocal", 13, 10}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char file[128], in_name[160], out_name[160];
        int w = cases[c].w, h = cases[c].h;
        size_t n = (size_t)w * h * 3;
        snprintf(file, sizeof file, "%s.onnx", cases[c].name);
        snprintf(in_name, sizeof in_name, "golden_%s_%dx%d.in.f32", cases[c].name, w, h);
        snprintf(out_name, sizeof out_name, "golden_%s_%dx%d.out.f32", cases[c].name, w, h);
        uint8_t *data = NULL;
        ag_tensor_set set;
        ag_error err = {0};
        ag_model *model = NULL;
        CHECK(import_fixture(file, &data, &set) == 0);
        int rc = ag_model_build(&set, &graph, file, "onnx", &model, &err);
        ag_tensor_set_fini(&set);
        ag_free(data);
        CHECK_OK(rc, &err);
        float *in = read_floats(in_name, n), *ort = read_floats(out_name, n);
        float *ours = ag_malloc(n * sizeof *ours);
        rc = !in || !ort || !ours;
        for (int b = 0; b < 2 && !rc; b++) {
            ag_backend backend = b ? AG_BACKEND_REFERENCE : AG_BACKEND_ONEDNN;
            ag_engine_options options = {.backend = backend, .threads = 2};
            ag_engine *engine = NULL;
            rc = ag_engine_create(model, &options, &engine, &err);
            if (rc == AG_OK)
                rc = ag_engine_run_f32(engine, in, w, h, ours, &err);
            ag_engine_destroy(engine);
            if (rc != AG_OK) {
                fprintf(stderr, "  %s: %s\n", file, err.message);
                break;
            }
            double max_err = 0.0, worst = 0.0, se = 0.0, ref2 = 0.0;
            for (size_t i = 0; i < n; i++) {
                double d = fabs((double)ours[i] - (double)ort[i]);
                double over = d - (1e-4 + 1e-4 * fabs((double)ort[i]));
                max_err = d > max_err ? d : max_err;
                worst = over > worst ? over : worst;
                se += d * d;
                ref2 += (double)ort[i] * (double)ort[i];
            }
            double nmse = se / (ref2 > 0 ? ref2 : 1);
            printf("  %s %dx%d %s: max abs error vs ONNX Runtime %.2e, NMSE %.1e (tolerance "
                   "1e-4 + 1e-4 |ref|, NMSE 1e-7)\n",
                   file, w, h, b ? "reference" : "onednn", max_err, nmse);
            rc = worst > 0.0 || nmse > 1e-7;
        }
        ag_free(in);
        ag_free(ort);
        ag_free(ours);
        ag_model_destroy(model);
        CHECK_MSG(!rc, "%s", file);
    }
    return 0;
}

/* The ONNX Runtime references of tests/fixtures/v3 (tools/make_v3_fixtures.py): every
 * .agfx whose model is an .onnx file, through the importer directly, on both backends,
 * within the golden tests' 1e-3. The full-v3 and perturbed Cute models live in build/v3/
 * (sh tools/make_v3_test_models.sh); those not built are skipped with a note. */
LEAK_CHECKED(test_import_v3_fixtures) {
    const char *dir_path = AG_SOURCE_DIR "/tests/fixtures/v3";
    DIR *dir = opendir(dir_path);
    if (!dir) {
        printf("  note: %s not there; skipped\n", dir_path);
        return 0;
    }
    struct dirent *entry;
    int checked = 0, skipped = 0, failed = 0;
    while ((entry = readdir(dir)) && !failed) {
        size_t len = strlen(entry->d_name);
        if (len < 5 || strcmp(entry->d_name + len - 5, ".agfx"))
            continue;
        char path[512], model_path[600];
        snprintf(path, sizeof path, "%s/%s", dir_path, entry->d_name);
        uint8_t *fx = NULL, *data = NULL;
        size_t fx_size = 0, size = 0;
        ag_error err = {0};
        if (ag_read_file(path, 64u << 20, &fx, &fx_size, &err) != AG_OK || fx_size < 100 ||
            memcmp(fx, "AGFX", 4)) {
            ag_free(fx);
            CHECK_MSG(0, "%s: unreadable", path);
        }
        char model[65] = {0};
        memcpy(model, fx + 16, 64);
        size_t mlen = strlen(model);
        int w = (int)(fx[8] | fx[9] << 8), h = (int)(fx[12] | fx[13] << 8);
        size_t n = (size_t)w * h * 3;
        if (mlen < 5 || strcmp(model + mlen - 5, ".onnx") || fx_size != 100 + 6 * n) {
            ag_free(fx);
            continue;
        }
        snprintf(model_path, sizeof model_path, "%s/%s", AG_SOURCE_DIR, model);
        FILE *probe = fopen(model_path, "rb");
        if (!probe) {
            printf("  note: %s not built (sh tools/make_v3_test_models.sh); %s skipped\n", model,
                   entry->d_name);
            skipped++;
            ag_free(fx);
            continue;
        }
        fclose(probe);
        ag_tensor_set set = {0};
        ag_model *built = NULL;
        int rc = ag_read_file(model_path, (size_t)1 << 30, &data, &size, &err);
        if (rc == AG_OK)
            rc = ag_onnx_parse(data, size, model, &set, &graph, &err);
        if (rc == AG_OK)
            rc = ag_model_build(&set, &graph, model, "onnx", &built, &err);
        ag_tensor_set_fini(&set);
        ag_free(data);
        float *in = ag_malloc(2 * n * sizeof *in), *out = in ? in + n : NULL;
        for (size_t i = 0; in && i < n; i++)
            in[i] = (float)fx[100 + i] / 127.5f - 1.0f;
        for (int b = 0; b < 2 && rc == AG_OK && in; b++) {
            ag_engine_options options = {.backend = b ? AG_BACKEND_REFERENCE : AG_BACKEND_ONEDNN,
                                         .threads = 2};
            ag_engine *engine = NULL;
            rc = ag_engine_create(built, &options, &engine, &err);
            if (rc == AG_OK)
                rc = ag_engine_run_f32(engine, in, w, h, out, &err);
            ag_engine_destroy(engine);
            double max_err = 0.0;
            for (size_t i = 0; rc == AG_OK && i < n; i++) {
                float ref;
                memcpy(&ref, fx + 100 + n + 4 * i, 4);
                double d = fabs((double)out[i] - (double)ref);
                max_err = d > max_err || d != d ? d : max_err;
            }
            if (rc == AG_OK)
                printf("  %-26s %-9s max abs error vs ONNX Runtime %.2e (tolerance 1e-3)\n",
                       entry->d_name, b ? "reference" : "onednn", max_err);
            failed |= rc == AG_OK && !(max_err <= 1e-3);
        }
        if (rc != AG_OK)
            fprintf(stderr, "  %s: %s\n", entry->d_name, err.message);
        failed |= rc != AG_OK || !in;
        ag_free(in);
        ag_model_destroy(built);
        ag_free(fx);
        checked++;
    }
    closedir(dir);
    printf("  %d ONNX fixtures checked, %d skipped\n", checked, skipped);
    CHECK(!failed);
    return 0;
}

/* At sizes the exported networks cannot run (odd, not multiples of 8 or 16) there is no ONNX
 * Runtime reference; there the imported file must equal the bundled model converted from
 * the same weights (models/NAME-v3.safetensors, tools/v3_convert.py), whose graph is written
 * by hand: the importer's reading of each upsample (to the skip's size) is the same. */
LEAK_CHECKED(test_import_equals_bundled) {
    static const struct {
        const char *onnx, *bundled;
        int w, h;
    } cases[] = {
        {"tests/fixtures/onnx/AnimeGANv3_tiny_Cute.onnx", "models/cute-v3.safetensors", 37, 33},
        {"tests/fixtures/onnx/AnimeGANv3_tiny_Cute.onnx", "models/cute-v3.safetensors", 50, 41},
        {"build/v3/AnimeGANv3_Shinkai_37.onnx", "models/shinkai-v3.safetensors", 37, 29}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char onnx[512], bundled[512];
        snprintf(onnx, sizeof onnx, "%s/%s", AG_SOURCE_DIR, cases[c].onnx);
        snprintf(bundled, sizeof bundled, "%s/%s", AG_SOURCE_DIR, cases[c].bundled);
        FILE *p1 = fopen(onnx, "rb"), *p2 = fopen(bundled, "rb");
        if (p1)
            fclose(p1);
        if (p2)
            fclose(p2);
        if (!p1 || !p2) {
            printf("  note: %s or %s not there; skipped\n", cases[c].onnx, cases[c].bundled);
            continue;
        }
        uint8_t *data = NULL;
        size_t size = 0;
        ag_error err = {0};
        ag_tensor_set set = {0};
        ag_model *imported = NULL, *reference = NULL;
        CHECK_OK(ag_read_file(onnx, (size_t)1 << 30, &data, &size, &err), &err);
        int rc = ag_onnx_parse(data, size, cases[c].onnx, &set, &graph, &err);
        if (rc == AG_OK)
            rc = ag_model_build(&set, &graph, cases[c].onnx, "onnx", &imported, &err);
        ag_tensor_set_fini(&set);
        ag_free(data);
        if (rc == AG_OK)
            rc = ag_model_load(bundled, &reference, &err);
        int w = cases[c].w, h = cases[c].h;
        size_t n = (size_t)w * h * 3;
        float *a = ag_malloc(2 * n * sizeof *a), *b = a ? a + n : NULL;
        if (rc == AG_OK && a)
            rc = run_model(imported, AG_BACKEND_ONEDNN, w, h, a) ||
                 run_model(reference, AG_BACKEND_ONEDNN, w, h, b);
        double max_err = 0.0;
        for (size_t i = 0; rc == AG_OK && a && i < n; i++) {
            double d = fabs((double)a[i] - (double)b[i]);
            max_err = d > max_err || d != d ? d : max_err;
        }
        /* The graph alone tells what the converter's metadata says. */
        int same_info = 1;
        if (rc == AG_OK) {
            const ag_model_info *x = ag_model_get_info(imported), *y = ag_model_get_info(reference);
            same_info = !strcmp(x->architecture, y->architecture) &&
                        x->side_multiple == y->side_multiple && x->min_side == y->min_side &&
                        x->resize == y->resize;
            if (!same_info)
                fprintf(stderr, "  %s: %s/%d/%d vs %s/%d/%d\n", cases[c].onnx, x->architecture,
                        x->side_multiple, x->min_side, y->architecture, y->side_multiple,
                        y->min_side);
        }
        ag_free(a);
        ag_model_destroy(imported);
        ag_model_destroy(reference);
        CHECK_MSG(rc == AG_OK, "%s: %s", cases[c].onnx, err.message);
        printf("  %s at %dx%d vs %s: max abs difference %.2e (tolerance 1e-4)\n", cases[c].onnx, w,
               h, cases[c].bundled, max_err);
        CHECK(max_err <= 1e-4 && same_info);
    }
    return 0;
}

/* The public API: ag_model_load takes an .onnx path, describes it from the graph, runs it
 * equal to ONNX Runtime, and refuses a bad file with one line naming it. */
LEAK_CHECKED(test_model_load_onnx) {
    ag_model *model = NULL;
    ag_error err = {0};
    const char *path = FIXTURES "AnimeGANv3_tiny_Cute.onnx";
    CHECK_OK(ag_model_load(path, &model, &err), &err);
    const ag_model_info *info = ag_model_get_info(model);
    CHECK(!strcmp(info->format, "onnx") && !strcmp(info->architecture, "animeganv3-tiny"));
    CHECK(info->side_multiple == 16 && info->min_side == 16);
    CHECK(info->resize == AG_RESIZE_ASYMMETRIC && info->param_count > 500000);
    int w = 64, h = 48;
    size_t n = (size_t)w * h * 3;
    float *in = read_floats("golden_AnimeGANv3_tiny_Cute_64x48.in.f32", n);
    float *ort = read_floats("golden_AnimeGANv3_tiny_Cute_64x48.out.f32", n);
    float *out = ag_malloc(n * sizeof *out);
    ag_engine_options options = {.threads = 2};
    ag_engine *engine = NULL;
    int rc = in && ort && out ? ag_engine_create(model, &options, &engine, &err) : AG_E_NOMEM;
    if (rc == AG_OK)
        rc = ag_engine_run_f32(engine, in, w, h, out, &err);
    double max_err = 0.0;
    for (size_t i = 0; rc == AG_OK && i < n; i++) {
        double d = fabs((double)out[i] - (double)ort[i]);
        max_err = d > max_err || d != d ? d : max_err;
    }
    ag_engine_destroy(engine);
    ag_free(in);
    ag_free(ort);
    ag_free(out);
    ag_model_destroy(model);
    CHECK_OK(rc, &err);
    printf("  ag_model_load(AnimeGANv3_tiny_Cute.onnx): max abs error vs ONNX Runtime %.2e\n",
           max_err);
    CHECK(max_err <= 1e-4);
    /* Refusals through the same door: the path, the node, the op, on one line. */
    static const struct {
        const char *name;
        int code;
        const char *needle;
    } bad[] = {{"bad_unknown_op.onnx", AG_E_UNSUPPORTED,
                "bad_unknown_op.onnx: node \"odd\" (op GridSample) is not supported"},
               {"bad_cyclic.onnx", AG_E_FORMAT, "which no earlier node produces"},
               {"bad_external.onnx", AG_E_UNSUPPORTED, "external file"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char bad_path[512];
        snprintf(bad_path, sizeof bad_path, FIXTURES "%s", bad[i].name);
        model = NULL;
        rc = ag_model_load(bad_path, &model, &err);
        CHECK_MSG(rc == bad[i].code && !model, "%s: %d (%s)", bad[i].name, rc, err.message);
        CHECK_MSG(strstr(err.message, bad[i].needle) && !strchr(err.message, '\n'), "'%s'",
                  err.message);
    }
    return 0;
}

/* Every input the fuzzer once crashed on (tests/fixtures/onnx/fuzz_*): imported or refused
 * naming the file, without a crash or a leak. */
LEAK_CHECKED(test_fuzz_regressions) {
    DIR *dir = opendir(FIXTURES);
    CHECK(dir);
    struct dirent *entry;
    int seen = 0, bad = 0;
    while ((entry = readdir(dir))) {
        if (strncmp(entry->d_name, "fuzz_", 5) != 0)
            continue;
        uint8_t *data = NULL;
        size_t size = 0;
        if (read_fixture(entry->d_name, &data, &size) != 0) {
            bad++;
            continue;
        }
        ag_tensor_set set = {0};
        ag_error err = {0};
        int rc = ag_onnx_parse(data, size, entry->d_name, &set, &graph, &err);
        if (rc != AG_OK && strncmp(err.message, entry->d_name, strlen(entry->d_name)) != 0) {
            fprintf(stderr, "  %s: message '%s'\n", entry->d_name, err.message);
            bad++;
        }
        ag_tensor_set_fini(&set);
        ag_free(data);
        seen++;
    }
    closedir(dir);
    printf("  %d fuzz regression inputs\n", seen);
    CHECK(bad == 0);
    return 0;
}

/* Issue 17, finding 6: names whose rename candidate was their own looped forever; the
 * import now ends with every name unique (the test would hang before the fix). */
LEAK_CHECKED(test_colliding_names_terminate) {
    uint8_t *data;
    ag_tensor_set set;
    CHECK(import_fixture("colliding_names.onnx", &data, &set) == 0);
    for (int i = 0; i < graph.count; i++)
        for (int j = 0; j < i; j++)
            CHECK_MSG(strcmp(graph.nodes[i].name, graph.nodes[j].name), "nodes %d and %d: %s", j, i,
                      graph.nodes[i].name);
    printf("  %d nodes, node 3 \"%s\"\n", graph.count, graph.nodes[3].name);
    ag_tensor_set_fini(&set);
    ag_free(data);
    return 0;
}

TEST_MAIN(TEST(test_pb_cute), TEST(test_colliding_names_terminate), TEST(test_pb_float_data),
          TEST(test_pb_refused_files), TEST(test_pb_wire_errors),
          TEST(test_pb_truncated_everywhere), TEST(test_import_cute),
          TEST(test_import_cute_perturbed), TEST(test_import_mini),
          TEST(test_import_external_attention), TEST(test_import_torch_style),
          TEST(test_import_instance_norm_pattern), TEST(test_import_refusals),
          TEST(test_import_truncated_everywhere), TEST(test_import_flipped_bytes),
          TEST(test_import_runs), TEST(test_import_matches_ort), TEST(test_import_v3_fixtures),
          TEST(test_import_equals_bundled), TEST(test_model_load_onnx), TEST(test_fuzz_regressions))
