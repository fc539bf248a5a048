/*
 * restore_graph.c - the pieces gpen.c and gfpgan.c build their graphs from: tensor look-up
 * by name, node appends that latch the first failure, zero-padded convs and StyleGAN2's
 * modulated conv (a linear layer turning the style vector into per-channel scales, then the
 * modconv op, which never materialises a modulated weight).
 */
#include "restore_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int ag_rg_tensor(const ag_rgraph *b, const char *fmt, ...) {
    char name[AG_TENSOR_NAME_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const ag_tensor_ref *t = ag_tensor_set_find(b->set, name);
    AG_ASSERT(t); /* ag_layout_check found every tensor of the layout */
    return (int)(t - b->set->tensors);
}

int ag_rg_add(ag_rgraph *b, const ag_node *n) {
    if (b->failed) /* an earlier node, maybe one of n's inputs, is not in the graph */
        return -1;
    int index = ag_graph_add(b->g, n, b->err);
    b->failed = index < 0;
    return index;
}

ag_node ag_rg_node(ag_op op, const char *prefix, const char *suffix, int in0, int in1) {
    char name[AG_GRAPH_NAME_BYTES];
    snprintf(name, sizeof name, "%.50s.%s", prefix, suffix);
    return ag_node_make(op, name, in0, in1);
}

int ag_rg_conv(ag_rgraph *b, const char *p, int x, int k, int stride, int pad, bool bias,
               float weight_scale) {
    ag_node n = ag_rg_node(AG_OP_CONV, p, "conv", x, -1);
    n.tensor[AG_T_WEIGHT] = ag_rg_tensor(b, "%s.weight", p);
    if (bias)
        n.tensor[AG_T_BIAS] = ag_rg_tensor(b, "%s.bias", p);
    n.k = k;
    n.stride = stride;
    n.pad[0] = n.pad[1] = n.pad[2] = n.pad[3] = pad < 0 ? k / 2 : pad;
    n.pad_mode = AG_PAD_ZERO;
    n.weight_scale = weight_scale;
    return ag_rg_add(b, &n);
}

int ag_rg_unary(ag_rgraph *b, ag_op op, const char *prefix, const char *suffix, int x) {
    ag_node n = ag_rg_node(op, prefix, suffix, x, -1);
    return ag_rg_add(b, &n);
}

int ag_rg_modconv(ag_rgraph *b, const char *p, int x, int w, float mod_scale, float conv_scale,
                  bool demod, bool up, int bias_tensor) {
    ag_node s = ag_rg_node(AG_OP_LINEAR, p, "modulation", w, -1);
    s.tensor[AG_T_WEIGHT] = ag_rg_tensor(b, "%s.modulation.weight", p);
    s.tensor[AG_T_BIAS] = ag_rg_tensor(b, "%s.modulation.bias", p);
    s.weight_scale = mod_scale;
    int style = ag_rg_add(b, &s);
    ag_node n = ag_rg_node(AG_OP_MODCONV, p, "modconv", x, style);
    n.tensor[AG_T_WEIGHT] = ag_rg_tensor(b, "%s.weight", p);
    n.tensor[AG_T_BIAS] = bias_tensor;
    const ag_tensor_ref *wt = &b->set->tensors[n.tensor[AG_T_WEIGHT]];
    int k = (int)wt->shape[2];
    n.k = k;
    n.up = up ? 2 : 1;
    n.demod = demod;
    n.eps = 1e-8f;
    int pad = up ? 0 : k / 2;
    n.pad[0] = n.pad[1] = n.pad[2] = n.pad[3] = pad;
    n.weight_scale = conv_scale;
    return ag_rg_add(b, &n);
}

void ag_restore_squeeze_biases(ag_tensor_set *set) {
    for (int i = 0; i < set->count; i++) {
        ag_tensor_ref *t = &set->tensors[i];
        size_t len = strlen(t->name);
        if (len >= 5 && strcmp(t->name + len - 5, ".bias") == 0 && t->ndim == 4 &&
            t->shape[0] == 1 && t->shape[2] == 1 && t->shape[3] == 1) {
            t->shape[0] = t->shape[1];
            t->stride[0] = t->stride[1];
            t->ndim = 1;
        }
    }
}
