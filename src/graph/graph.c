/*
 * graph.c - building, checking and sizing a graph (graph.h, docs/graph.md).
 */
#include "graph.h"

#include "../kernels/kernels.h"
#include "../util/util_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const op_names[AG_OP_COUNT] = {
    [AG_OP_INPUT] = "input",
    [AG_OP_CONV] = "conv",
    [AG_OP_LAYER_NORM] = "layer_norm",
    [AG_OP_INSTANCE_NORM] = "instance_norm",
    [AG_OP_LADE] = "lade",
    [AG_OP_AFFINE] = "affine",
    [AG_OP_LRELU] = "lrelu",
    [AG_OP_PRELU] = "prelu",
    [AG_OP_RELU] = "relu",
    [AG_OP_RELU6] = "relu6",
    [AG_OP_TANH] = "tanh",
    [AG_OP_SIGMOID] = "sigmoid",
    [AG_OP_ADD] = "add",
    [AG_OP_RESIZE] = "resize",
    [AG_OP_RESIZE2X] = "resize2x",
    [AG_OP_MATMUL] = "matmul",
    [AG_OP_SOFTMAX] = "softmax",
    [AG_OP_SUM_NORMALIZE] = "sum_normalize",
    [AG_OP_MAX_POOL] = "max_pool",
    [AG_OP_PAD_CHANNELS] = "pad_channels",
};

const char *ag_op_name(ag_op op) {
    return op >= 0 && op < AG_OP_COUNT ? op_names[op] : "?";
}

int ag_op_parse(const char *name) {
    for (int i = 0; i < AG_OP_COUNT; i++)
        if (name && !strcmp(name, op_names[i]))
            return i;
    return -1;
}

ag_node ag_node_make(ag_op op, const char *name, int in0, int in1) {
    ag_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    snprintf(n.name, sizeof n.name, "%s", name ? name : "");
    n.in[0] = in0, n.in[1] = in1;
    n.k = 1, n.stride = 1, n.groups = 1;
    n.eps = 1e-5f;
    n.alpha = 0.2f;
    n.mode = AG_RESIZE_ASYMMETRIC;
    for (int i = 0; i < AG_NODE_TENSORS; i++)
        n.tensor[i] = -1;
    return n;
}

void ag_graph_init(ag_graph *g) {
    memset(g, 0, sizeof *g);
    g->nodes[0] = ag_node_make(AG_OP_INPUT, "input", -1, -1);
    g->nodes[0].out_c = 3;
    g->count = 1;
}

int ag_graph_add(ag_graph *g, const ag_node *node, ag_error *err) {
    if (g->count >= AG_GRAPH_MAX_NODES) {
        ag_error_set(err, AG_E_LIMIT, "graph has more than %d nodes", AG_GRAPH_MAX_NODES);
        return -1;
    }
    g->nodes[g->count] = *node;
    return g->count++;
}

int ag_graph_add_output(ag_graph *g, int node, ag_error *err) {
    if (g->output_count >= AG_GRAPH_MAX_OUTPUTS || node <= 0 || node >= g->count)
        return ag_error_set(err, AG_E_FORMAT, "graph output %d is invalid or one too many", node);
    g->outputs[g->output_count++] = node;
    return AG_OK;
}

int ag_graph_find(const ag_graph *g, const char *name) {
    for (int i = g->count - 1; i >= 0; i--)
        if (!strcmp(g->nodes[i].name, name))
            return i;
    return -1;
}

/* ---- checks ---------------------------------------------------------------------------- */

static int arity(ag_op op) {
    return op == AG_OP_INPUT ? 0 : op == AG_OP_ADD || op == AG_OP_RESIZE ? 2 : 1;
}

/* Channels of node i's output, from its inputs and weights (valid once inputs are). */
static int node_channels(const ag_graph *g, int i) {
    const ag_node *n = &g->nodes[i];
    switch (n->op) {
    case AG_OP_INPUT:
    case AG_OP_CONV:
    case AG_OP_MATMUL:
    case AG_OP_PAD_CHANNELS: return n->out_c;
    default: return g->nodes[n->in[0]].out_c;
    }
}

#define NODE_FAIL(...) return node_error(err, label, n, __VA_ARGS__)

static int node_error(ag_error *err, const char *label, const ag_node *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int node_error(ag_error *err, const char *label, const ag_node *n, const char *fmt, ...) {
    char why[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return ag_error_set(err, AG_E_FORMAT, "%s: node \"%s\" (%s): %s", label, n->name,
                        ag_op_name(n->op), why);
}

static int check_node(const ag_graph *g, int i, const char *label, ag_error *err) {
    const ag_node *n = &g->nodes[i];
    for (int j = 0; j < 2; j++) {
        int want = j < arity(n->op);
        if (want && (n->in[j] < 0 || n->in[j] >= i))
            NODE_FAIL("input %d is not an earlier node", j);
        if (!want && n->in[j] != -1)
            NODE_FAIL("has an unexpected input %d", j);
    }
    int c = i > 0 ? g->nodes[n->in[0]].out_c : 3;
    switch (n->op) {
    case AG_OP_INPUT:
        if (i != 0)
            NODE_FAIL("only node 0 is the input");
        break;
    case AG_OP_CONV:
        if (!n->weight || n->k < 1 || n->k > 11 || n->stride < 1 || n->stride > 4 ||
            n->groups < 1 || n->in_c != c || c % n->groups || n->out_c % n->groups ||
            n->out_c < 1 || n->out_c > 4096)
            NODE_FAIL("%d -> %d channels, kernel %d, stride %d, groups %d do not fit its input of "
                      "%d channels",
                      n->in_c, n->out_c, n->k, n->stride, n->groups, c);
        for (int p = 0; p < 4; p++)
            if (n->pad[p] < 0 || n->pad[p] >= n->k + (n->k == 1))
                NODE_FAIL("padding %d for a kernel of %d", n->pad[p], n->k);
        break;
    case AG_OP_LAYER_NORM:
    case AG_OP_INSTANCE_NORM:
        if (c > AG_NORM_MAX_CHANNELS)
            NODE_FAIL("%d channels; at most %d", c, AG_NORM_MAX_CHANNELS);
        if ((n->op == AG_OP_LAYER_NORM && (!n->gamma || !n->beta)) || !(n->eps >= 0.0f) ||
            n->eps >= 1.0f)
            NODE_FAIL("needs gamma, beta and an eps in [0, 1)");
        break;
    case AG_OP_LADE:
        if (c > AG_NORM_MAX_CHANNELS)
            NODE_FAIL("%d channels; at most %d", c, AG_NORM_MAX_CHANNELS);
        if (!n->weight || n->in_c != c || n->out_c != c || !(n->eps >= 0.0f) || n->eps >= 1.0f)
            NODE_FAIL("needs a (%d, %d) weight and an eps in [0, 1)", c, c);
        break;
    case AG_OP_AFFINE:
        if (!n->gamma && !n->beta)
            NODE_FAIL("needs a scale or a shift");
        break;
    case AG_OP_PRELU:
        if (!n->gamma)
            NODE_FAIL("needs a slope");
        break;
    case AG_OP_LRELU:
        if (!(n->alpha >= 0.0f) || n->alpha > 1.0f)
            NODE_FAIL("alpha %g is not in [0, 1]", (double)n->alpha);
        break;
    case AG_OP_ADD:
        if (g->nodes[n->in[1]].out_c != c)
            NODE_FAIL("adds %d channels to %d", g->nodes[n->in[1]].out_c, c);
        break;
    case AG_OP_MATMUL:
        if (!n->weight || n->in_c != c || n->out_c < 1 || n->out_c > 4096)
            NODE_FAIL("a (%d, %d) matrix does not fit %d channels", n->in_c, n->out_c, c);
        break;
    case AG_OP_MAX_POOL:
        if (n->k < 1 || n->k > 11 || n->stride < 1 || n->stride > 4)
            NODE_FAIL("kernel %d, stride %d", n->k, n->stride);
        break;
    case AG_OP_PAD_CHANNELS:
        if (n->out_c < c || n->out_c > 4096)
            NODE_FAIL("pads %d channels to %d", c, n->out_c);
        break;
    default: break;
    }
    return AG_OK;
}

int ag_graph_check(const ag_graph *g, const char *label, ag_error *err) {
    if (g->count < 2 || g->count > AG_GRAPH_MAX_NODES || g->output_count < 1)
        return ag_error_set(err, AG_E_FORMAT, "%s: the graph has no nodes or no output", label);
    for (int i = 0; i < g->count; i++) {
        if (g->nodes[i].op < 0 || g->nodes[i].op >= AG_OP_COUNT)
            return ag_error_set(err, AG_E_FORMAT, "%s: node %d has an unknown op", label, i);
        int rc = check_node(g, i, label, err);
        if (rc)
            return rc;
        /* out_c is what the rest of the checks (and the engine) read for every node. */
        ((ag_node *)&g->nodes[i])->out_c = node_channels(g, i);
    }
    return AG_OK;
}

/* ---- shapes ---------------------------------------------------------------------------- */

static int shrink(int size, int pad, int k, int stride) {
    return size + pad < k ? 0 : (size + pad - k) / stride + 1;
}

int ag_graph_shapes(const ag_graph *g, int width, int height, ag_shape *s, ag_error *err) {
    for (int i = 0; i < g->count; i++) {
        const ag_node *n = &g->nodes[i];
        ag_shape in = i > 0 ? s[n->in[0]] : (ag_shape){height, width, 3};
        ag_shape out = {in.h, in.w, n->out_c};
        switch (n->op) {
        case AG_OP_CONV:
        case AG_OP_MAX_POOL:
            out.h = shrink(in.h, n->pad[0] + n->pad[1], n->k, n->stride);
            out.w = shrink(in.w, n->pad[2] + n->pad[3], n->k, n->stride);
            /* Reflection cannot mirror more than the map minus one pixel (a 1-pixel map
             * repeats its pixel). */
            if (n->op == AG_OP_CONV && n->pad_mode == AG_PAD_REFLECT &&
                ((in.h > 1 && (n->pad[0] >= in.h || n->pad[1] >= in.h)) ||
                 (in.w > 1 && (n->pad[2] >= in.w || n->pad[3] >= in.w))))
                out.h = 0;
            break;
        case AG_OP_RESIZE: out.h = s[n->in[1]].h, out.w = s[n->in[1]].w; break;
        case AG_OP_RESIZE2X: out.h = 2 * in.h, out.w = 2 * in.w; break;
        case AG_OP_ADD:
            if (s[n->in[1]].h != in.h || s[n->in[1]].w != in.w)
                return ag_error_set(err, AG_E_ARG,
                                    "node \"%s\" adds a %dx%d map to a %dx%d one at this image "
                                    "size",
                                    n->name, s[n->in[1]].w, s[n->in[1]].h, in.w, in.h);
            break;
        default: break;
        }
        if (out.h < 1 || out.w < 1)
            return ag_error_set(err, AG_E_ARG,
                                "node \"%s\" gets a %dx%d map: the image is too small", n->name,
                                in.w, in.h);
        s[i] = out;
    }
    return AG_OK;
}

double ag_graph_flop(const ag_graph *g, int width, int height) {
    ag_shape *s = ag_malloc(sizeof(ag_shape) * (size_t)g->count);
    ag_error err;
    if (!s || ag_graph_shapes(g, width, height, s, &err)) {
        ag_free(s);
        return 0.0;
    }
    double flop = 0.0;
    for (int i = 0; i < g->count; i++) {
        const ag_node *n = &g->nodes[i];
        double px = (double)s[i].h * s[i].w;
        if (n->op == AG_OP_CONV)
            flop += 2.0 * px * n->out_c * (n->in_c / n->groups) * n->k * n->k;
        else if (n->op == AG_OP_MATMUL)
            flop += 2.0 * px * n->in_c * n->out_c;
        else if (n->op == AG_OP_LADE)
            flop += 2.0 * px * n->in_c * n->in_c;
    }
    ag_free(s);
    return flop;
}
