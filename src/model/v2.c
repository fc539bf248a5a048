/*
 * v2.c - the AnimeGANv2 generator as a graph, from the names of bryandlee/animegan2-pytorch's
 * state_dict (which equals the original TensorFlow network; see models/README.md).
 *
 * Files of this architecture (hayao.safetensors, PyTorch .pt checkpoints) carry weights
 * only, so the structure is this table: 25 convolutions, each [resize] -> reflect pad ->
 * conv -> [LayerNorm] -> [+ block input] -> [LeakyReLU], then tanh.
 */
#include "model_internal.h"

#include <stdio.h>
#include <string.h>

typedef enum v2_resize { V2_NO_RESIZE = 0, V2_TO_HALF, V2_TO_INPUT } v2_resize;
typedef enum v2_residual { V2_NO_RESIDUAL = 0, V2_SAVE, V2_ADD } v2_residual;

/* One convolution of the generator and what surrounds it. */
typedef struct layer_spec {
    const char *conv; /* state_dict prefix of the conv */
    const char *norm; /* prefix of the norm after it, NULL for none */
    int k, stride, pad, has_bias, depthwise, lrelu;
    v2_resize resize_before;
    v2_residual residual;
    int is_block_a_end; /* its output size is the one block D resizes to */
} layer_spec;

#define CNL(conv, norm, k, stride, pad)                                                            \
    { conv, norm, k, stride, pad, 0, 0, 1, 0, 0, 0 }
#define IRB(p, res_save, res_add)                                                                  \
    {p ".layers.0.1", p ".layers.0.2", 1, 1, 0, 0, 0, 1, 0, res_save, 0},                          \
        {p ".layers.1.1", p ".layers.1.2", 3, 1, 1, 1, 1, 1, 0, 0, 0}, {                           \
        p ".layers.2", p ".layers.3", 1, 1, 0, 0, 0, 0, 0, res_add, 0                              \
    }

/* pad -1 means the stride-2 layers' (0,1,0,1): reflect only the bottom row and right column. */
static const layer_spec generator_spec[] = {
    CNL("block_a.0.1", "block_a.0.2", 7, 1, 3),
    CNL("block_a.1.1", "block_a.1.2", 3, 2, -1),
    {"block_a.2.1", "block_a.2.2", 3, 1, 1, 0, 0, 1, 0, 0, 1},
    CNL("block_b.0.1", "block_b.0.2", 3, 2, -1),
    CNL("block_b.1.1", "block_b.1.2", 3, 1, 1),
    CNL("block_c.0.1", "block_c.0.2", 3, 1, 1),
    IRB("block_c.1", 0, 0),
    IRB("block_c.2", V2_SAVE, V2_ADD),
    IRB("block_c.3", V2_SAVE, V2_ADD),
    IRB("block_c.4", V2_SAVE, V2_ADD),
    CNL("block_c.5.1", "block_c.5.2", 3, 1, 1),
    {"block_d.0.1", "block_d.0.2", 3, 1, 1, 0, 0, 1, V2_TO_HALF, 0, 0},
    CNL("block_d.1.1", "block_d.1.2", 3, 1, 1),
    {"block_e.0.1", "block_e.0.2", 3, 1, 1, 0, 0, 1, V2_TO_INPUT, 0, 0},
    CNL("block_e.1.1", "block_e.1.2", 3, 1, 1),
    CNL("block_e.2.1", "block_e.2.2", 7, 1, 3),
    {"out_layer.0", NULL, 1, 1, 0, 0, 0, 0, 0, 0, 0},
};
#define GENERATOR_LAYERS ((int)(sizeof generator_spec / sizeof generator_spec[0]))

/* Index in `set` of "<prefix>.<suffix>", or -1 with `err` naming it. */
static int tensor_index(const ag_tensor_set *set, const char *prefix, const char *suffix,
                        const char *path, ag_error *err) {
    char name[AG_TENSOR_NAME_BYTES];
    snprintf(name, sizeof name, "%s.%s", prefix, suffix);
    const ag_tensor_ref *ref = ag_tensor_set_find(set, name);
    if (!ref) {
        ag_error_set(err, AG_E_FORMAT, "%s: tensor '%s' is missing (not an AnimeGANv2 generator?)",
                     path, name);
        return -1;
    }
    return (int)(ref - set->tensors);
}

/* Append a node; -1 on failure (err set). */
static int add(ag_graph *g, ag_node n, ag_error *err) {
    return ag_graph_add(g, &n, err);
}

/* The conv of `spec` reading node `x`, and its norm, residual add and activation; returns
 * the last node, or -1. */
static int add_layer(ag_graph *g, const ag_tensor_set *set, const layer_spec *spec, int x,
                     int block_input, float eps, const char *path, ag_error *err) {
    ag_node conv = ag_node_make(AG_OP_CONV, spec->conv, x, -1);
    conv.tensor[AG_T_WEIGHT] = tensor_index(set, spec->conv, "weight", path, err);
    if (conv.tensor[AG_T_WEIGHT] < 0)
        return -1;
    if (spec->has_bias &&
        (conv.tensor[AG_T_BIAS] = tensor_index(set, spec->conv, "bias", path, err)) < 0)
        return -1;
    conv.k = spec->k;
    conv.stride = spec->stride;
    conv.groups = spec->depthwise ? 0 : 1; /* 0: one group per input channel */
    int p = spec->pad < 0 ? 0 : spec->pad;
    conv.pad[0] = conv.pad[2] = p;
    conv.pad[1] = conv.pad[3] = spec->pad < 0 ? 1 : p;
    conv.pad_mode = AG_PAD_REFLECT;
    int node = add(g, conv, err);
    if (node >= 0 && spec->norm) {
        char name[AG_GRAPH_NAME_BYTES];
        snprintf(name, sizeof name, "%s", spec->norm);
        ag_node norm = ag_node_make(AG_OP_LAYER_NORM, name, node, -1);
        norm.eps = eps;
        if ((norm.tensor[AG_T_GAMMA] = tensor_index(set, spec->norm, "weight", path, err)) < 0 ||
            (norm.tensor[AG_T_BETA] = tensor_index(set, spec->norm, "bias", path, err)) < 0)
            return -1;
        node = add(g, norm, err);
    }
    if (node >= 0 && spec->residual == V2_ADD) {
        char name[AG_GRAPH_NAME_BYTES];
        snprintf(name, sizeof name, "%.40s.add", spec->conv);
        node = add(g, ag_node_make(AG_OP_ADD, name, node, block_input), err);
    }
    if (node >= 0 && spec->lrelu) {
        char name[AG_GRAPH_NAME_BYTES];
        snprintf(name, sizeof name, "%.40s.act", spec->conv);
        node = add(g, ag_node_make(AG_OP_LRELU, name, node, -1), err);
    }
    return node;
}

int ag_v2_graph(const ag_tensor_set *set, const char *path, float eps, ag_resize_mode mode,
                ag_graph *g, ag_error *err) {
    ag_graph_init(g);
    int x = 0, half = -1, block_input = -1;
    for (int i = 0; i < GENERATOR_LAYERS; i++) {
        const layer_spec *spec = &generator_spec[i];
        if (spec->resize_before) {
            char name[AG_GRAPH_NAME_BYTES];
            snprintf(name, sizeof name, "%.40s.resize", spec->conv);
            ag_node r =
                ag_node_make(AG_OP_RESIZE, name, x, spec->resize_before == V2_TO_HALF ? half : 0);
            r.mode = mode;
            if ((x = add(g, r, err)) < 0)
                return err->code;
        }
        if (spec->residual == V2_SAVE)
            block_input = x;
        if ((x = add_layer(g, set, spec, x, block_input, eps, path, err)) < 0)
            return err->code;
        if (spec->is_block_a_end)
            half = x;
    }
    int out = add(g, ag_node_make(AG_OP_TANH, "out", x, -1), err);
    if (out < 0)
        return err->code;
    return ag_graph_add_output(g, out, err);
}
