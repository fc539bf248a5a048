/*
 * graph.c - building, checking and sizing a graph (graph.h, docs/graph.md).
 */
#include "graph.h"

#include "ops.h"

#include "../kernels/kernels.h"
#include "../util/util_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

ag_node ag_node_make(ag_op op, const char *name, int in0, int in1) {
    ag_node n;
    memset(&n, 0, sizeof n);
    n.op = op;
    snprintf(n.name, sizeof n.name, "%s", name ? name : "");
    for (int j = 0; j < AG_NODE_MAX_SRC; j++)
        n.src[j] = -1;
    n.src[0] = in0, n.src[1] = in0 >= 0 ? in1 : -1;
    n.k = 1, n.stride = 1, n.groups = 1, n.up = 1, n.down = 1;
    n.eps = 1e-5f;
    n.alpha = 0.2f;
    n.gain = 1.0f;
    n.weight_scale = n.bias_scale = 1.0f;
    n.mode = AG_RESIZE_ASYMMETRIC;
    for (int i = 0; i < AG_NODE_TENSORS; i++)
        n.tensor[i] = -1;
    if (op >= 0 && op < AG_OP_COUNT)
        ag_op_defaults(&n);
    return n;
}

int ag_node_src_count(const ag_node *n) {
    int count = 0;
    while (count < AG_NODE_MAX_SRC && n->src[count] >= 0)
        count++;
    return count;
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

/* Channels of each of node i's inputs (valid once they are checked). */
static void src_channels(const ag_graph *g, const ag_node *n, int *c) {
    for (int j = 0; j < AG_NODE_MAX_SRC; j++)
        c[j] = n->src[j] >= 0 ? g->nodes[n->src[j]].out_c : 0;
}

int ag_node_channels(const ag_graph *g, const ag_node *n) {
    int c[AG_NODE_MAX_SRC];
    src_channels(g, n, c);
    const ag_op_desc *d = ag_op_desc_of(n->op);
    return d->channels ? d->channels(n, c) : c[0];
}

#define NODE_FAIL(...) return node_error(err, label, n, __VA_ARGS__)

static int node_error(ag_error *err, const char *label, const ag_node *n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int node_error(ag_error *err, const char *label, const ag_node *n, const char *fmt, ...) {
    char why[AG_OP_WHY];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return ag_error_set(err, AG_E_FORMAT, "%s: node \"%s\" (%s): %s", label, n->name,
                        ag_op_name(n->op), why);
}

/* Inputs: the op's count, each an earlier node, none after the first unused slot. */
static int check_inputs(const ag_graph *g, int i, const char *label, ag_error *err) {
    const ag_node *n = &g->nodes[i];
    const ag_op_desc *d = ag_op_desc_of(n->op);
    int count = ag_node_src_count(n);
    if (count < d->min_src || count > d->max_src)
        NODE_FAIL("has %d inputs; it takes %d to %d", count, d->min_src, d->max_src);
    for (int j = 0; j < AG_NODE_MAX_SRC; j++) {
        if (j < count && n->src[j] >= i)
            NODE_FAIL("input %d is not an earlier node", j);
        if (j >= count && n->src[j] != -1)
            NODE_FAIL("has an unexpected input %d", j);
    }
    return AG_OK;
}

/* Every attribute in the op's range (the JSON reader holds files to the same). */
static int check_attrs(const ag_node *n, const char *label, ag_error *err) {
    const ag_op_desc *d = ag_op_desc_of(n->op);
    for (int a = 0; a < d->attr_count; a++) {
        const ag_attr *at = &d->attrs[a];
        const char *field = (const char *)n + at->offset;
        int count = at->kind == AG_ATTR_PAD ? 4
                    : at->kind == AG_ATTR_FLOATS
                        ? *(const int *)((const char *)n + at->count_offset)
                        : 1;
        if (at->kind == AG_ATTR_FLOATS && (count < 0 || count > AG_FIR_MAX_TAPS))
            NODE_FAIL("'%s' has %d values; at most %d", at->key, count, AG_FIR_MAX_TAPS);
        for (int v = 0; v < count; v++) {
            double x = at->kind == AG_ATTR_FLOAT || at->kind == AG_ATTR_FLOATS
                           ? (double)((const float *)field)[v]
                           : (double)((const int *)field)[v];
            if (!ag_attr_fits(at, x))
                NODE_FAIL("'%s' %g is not in [%g, %g]", at->key, x, at->lo, at->hi);
        }
    }
    return AG_OK;
}

/* Every map that is read fits the kernels' per-channel arrays (AG_MAP_MAX_CHANNELS): a wider
 * node is either a linear's vector, (1, 1, M), that slices alone read, each within the bound
 * (GFPGAN's latents: 9216 for 1024 px), or an output nothing reads (FaceMesh's 1404
 * landmark values). Nodes come in order, so every source's out_c is known. */
static int check_channels(const ag_graph *g, int i, const char *label, ag_error *err) {
    const ag_node *n = &g->nodes[i];
    for (int j = 0; j < AG_NODE_MAX_SRC && n->src[j] >= 0; j++) {
        const ag_node *s = &g->nodes[n->src[j]];
        if (s->out_c > AG_MAP_MAX_CHANNELS && !(s->op == AG_OP_LINEAR && n->op == AG_OP_SLICE))
            NODE_FAIL("reads the %d-channel output of \"%s\"; at most %d channels", s->out_c,
                      s->name, AG_MAP_MAX_CHANNELS);
    }
    int output = 0;
    for (int o = 0; o < g->output_count; o++)
        output |= g->outputs[o] == i;
    if (n->out_c > AG_MAP_MAX_CHANNELS && n->op != AG_OP_LINEAR && !output)
        NODE_FAIL("makes %d channels; at most %d", n->out_c, AG_MAP_MAX_CHANNELS);
    return AG_OK;
}

static int check_node(const ag_graph *g, int i, const char *label, ag_error *err) {
    const ag_node *n = &g->nodes[i];
    if ((i == 0) != (n->op == AG_OP_INPUT))
        NODE_FAIL("only node 0 is the input");
    int rc = check_inputs(g, i, label, err);
    if (rc == AG_OK)
        rc = check_attrs(n, label, err);
    const ag_op_desc *d = ag_op_desc_of(n->op);
    if (rc == AG_OK && d->check) {
        int c[AG_NODE_MAX_SRC];
        char why[AG_OP_WHY];
        src_channels(g, n, c);
        if (d->check(n, c, why))
            NODE_FAIL("%s", why);
    }
    return rc;
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
        ((ag_node *)&g->nodes[i])->out_c = ag_node_channels(g, &g->nodes[i]);
        if ((rc = check_channels(g, i, label, err)))
            return rc;
    }
    return AG_OK;
}

/* ---- shapes ---------------------------------------------------------------------------- */

int ag_graph_shapes(const ag_graph *g, int width, int height, ag_shape *s, ag_error *err) {
    if (width < 1 || height < 1 || width > AG_MAP_MAX_SIDE || height > AG_MAP_MAX_SIDE)
        return ag_error_set(err, AG_E_ARG, "a %dx%d image is outside 1..%d pixels a side", width,
                            height, AG_MAP_MAX_SIDE);
    for (int i = 0; i < g->count; i++) {
        const ag_node *n = &g->nodes[i];
        const ag_op_desc *d = ag_op_desc_of(n->op);
        ag_shape in[AG_NODE_MAX_SRC] = {{0, 0, 0}};
        for (int j = 0; j < AG_NODE_MAX_SRC && n->src[j] >= 0; j++)
            in[j] = s[n->src[j]];
        if (i == 0)
            in[0] = (ag_shape){height, width, 3};
        ag_shape out = {in[0].h, in[0].w, n->out_c};
        char why[AG_OP_WHY];
        if (d->shape && d->shape(n, in, &out, why))
            return ag_error_set(err, AG_E_ARG, "node \"%s\" (%s) %s", n->name, d->name, why);
        if (out.h < 1 || out.w < 1)
            return ag_error_set(err, AG_E_ARG,
                                "node \"%s\" gets a %dx%d map: the image is too small", n->name,
                                in[0].w, in[0].h);
        if (out.h > AG_MAP_MAX_SIDE || out.w > AG_MAP_MAX_SIDE)
            return ag_error_set(err, AG_E_ARG,
                                "node \"%s\" (%s) would make a %dx%d map, over %d pixels a side",
                                n->name, d->name, out.w, out.h, AG_MAP_MAX_SIDE);
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
        const ag_op_desc *d = ag_op_desc_of(n->op);
        ag_shape in[AG_NODE_MAX_SRC] = {{0, 0, 0}};
        for (int j = 0; j < AG_NODE_MAX_SRC && n->src[j] >= 0; j++)
            in[j] = s[n->src[j]];
        if (d->flops)
            flop += d->flops(n, in, s[i]);
    }
    ag_free(s);
    return flop;
}
