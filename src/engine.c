/*
 * engine.c - plans and runs a model's graph: image in -> tensor -> graph -> tensor -> image.
 *
 * At create, the graph is lowered once into groups (engine_internal.h): each conv with the
 * per-channel chain that follows it (norm, LeakyReLU, residual add), which its readers apply
 * on the fly. Planning happens once per image size (ag_engine_prepare): every node's shape,
 * the oneDNN primitives and their prepared weights, and one arena holding every activation
 * at offsets from ag_arena_plan. Running then only binds pointers and calls kernels: nothing
 * in the step loop allocates.
 *
 * Two backends share the graph and its shapes:
 *   onednn     convs on oneDNN, each reading its padded input rows band by band, built on
 *              the fly from the group it reads (norm, residual, activation, padding, resize,
 *              or the concatenation of several groups' maps);
 *              the other ops on whole maps (kernels/ops.c).
 *   reference  every node on its own with the plain kernels (graph/interpret.c): the oracle.
 */
#include "engine_internal.h"
#include "graph/ops.h"
#include "util/util_internal.h"

#include <limits.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- lowering: groups, made once per model --------------------------------------------- */

/* The op table's fusion class of node n's op. */
static ag_fusion fusion_of(const ag_node *n) {
    return ag_op_desc_of(n->op)->fusion;
}

static int is_norm(const ag_node *n) {
    return fusion_of(n) == AG_FUSE_NORM;
}

/* Whether node n reads the data of its input j (a resize's `like` gives only a size). */
static int reads_src(const ag_node *n, int j) {
    return n->src[j] >= 0 && !(ag_op_desc_of(n->op)->size_only & (1u << j));
}

typedef struct lowering {
    const ag_graph *g;
    int consumers[AG_GRAPH_MAX_NODES];
    int group_of[AG_GRAPH_MAX_NODES]; /* group whose chain holds the node; -1: none */
    int virtual_resize[AG_GRAPH_MAX_NODES];
    int virtual_concat[AG_GRAPH_MAX_NODES];
} lowering;

static void count_consumers(lowering *lw) {
    const ag_graph *g = lw->g;
    memset(lw->consumers, 0, sizeof lw->consumers);
    /* A resize's second input gives only its size: no reader of its data. */
    for (int i = 0; i < g->count; i++)
        for (int j = 0; j < AG_NODE_MAX_SRC; j++)
            if (reads_src(&g->nodes[i], j))
                lw->consumers[g->nodes[i].src[j]]++;
    for (int o = 0; o < g->output_count; o++)
        lw->consumers[g->outputs[o]]++;
}

/* The group whose value (chain tail) is node x, -1 if x is no group's value. */
static int group_valued(const ag_engine *e, const lowering *lw, int x) {
    int gi = x >= 0 ? lw->group_of[x] : -1;
    return gi >= 0 && e->groups[gi].tail == x ? gi : -1;
}

/* Whether node n can join the chain of group gi as its next element. */
static int can_extend(const ag_engine *e, const lowering *lw, int gi, const ag_node *n, int other) {
    const ag_group *gr = &e->groups[gi];
    const ag_node *head = &lw->g->nodes[gr->head];
    if (fusion_of(head) != AG_FUSE_CONV || lw->consumers[gr->tail] != 1)
        return 0;
    int pre_free = gr->pre_slope == 1.0f && gr->prelu < 0;
    if (is_norm(n))
        return gr->norm < 0 && pre_free && gr->residual < 0;
    if (fusion_of(n) == AG_FUSE_PRELU) /* per-channel slopes: before the residual add only */
        return gr->residual < 0 && pre_free;
    if (fusion_of(n) == AG_FUSE_ACT)
        return gr->residual < 0 ? pre_free : gr->post_slope == 1.0f;
    /* The residual must exist when the chain is applied: a group before this one. */
    if (fusion_of(n) == AG_FUSE_ADD)
        return gr->residual < 0 && other > 0 && group_valued(e, lw, other) >= 0 &&
               group_valued(e, lw, other) < gi;
    return 0;
}

static void extend(ag_engine *e, lowering *lw, int gi, int node, int other) {
    ag_group *gr = &e->groups[gi];
    const ag_node *n = &lw->g->nodes[node];
    float slope = n->op == AG_OP_RELU ? 0.0f : n->alpha;
    if (is_norm(n)) {
        gr->norm = node;
    } else if (fusion_of(n) == AG_FUSE_PRELU) {
        gr->prelu = node;
        gr->pre_slope = n->gamma[0];
        for (int c = 1; c < lw->g->nodes[gr->head].out_c; c++)
            gr->pre_slope = fminf(gr->pre_slope, n->gamma[c]);
    } else if (fusion_of(n) == AG_FUSE_ADD) {
        gr->residual = group_valued(e, lw, other);
    } else if (gr->residual < 0) {
        gr->pre_slope = slope;
    } else {
        gr->post_slope = slope;
    }
    gr->tail = node;
    lw->group_of[node] = gi;
}

static int new_group(ag_engine *e, lowering *lw, int node) {
    ag_group *gr = &e->groups[e->group_count];
    memset(gr, 0, sizeof *gr);
    gr->head = gr->tail = node;
    gr->norm = gr->residual = gr->src = gr->resize = gr->prelu = gr->act = -1;
    gr->pre_slope = gr->post_slope = 1.0f;
    lw->group_of[node] = e->group_count;
    return e->group_count++;
}

/* Whether node n (a bias_lrelu) is applied by group gi's noise injection as it writes: the
 * injection's only reader (GPEN's and GFPGAN's StyledConvs), so its map is never read raw. */
static int absorbable_act(const ag_engine *e, const lowering *lw, int gi, const ag_node *n) {
    const ag_group *gr = &e->groups[gi];
    return n->op == AG_OP_BIAS_LRELU && lw->g->nodes[gr->head].op == AG_OP_NOISE &&
           gr->tail == gr->head && lw->consumers[gr->tail] == 1;
}

/* Whether node i (a resize read by exactly one conv, as that conv's input) is absorbed
 * into the conv's bands. */
static int absorbable_resize(const ag_engine *e, const lowering *lw, int i) {
    const ag_graph *g = lw->g;
    const ag_node *n = &g->nodes[i];
    if (fusion_of(n) != AG_FUSE_RESIZE || lw->consumers[i] != 1 ||
        group_valued(e, lw, n->src[0]) < 0)
        return 0;
    for (int j = i + 1; j < g->count; j++)
        for (int k = 0; k < AG_NODE_MAX_SRC; k++)
            if (g->nodes[j].src[k] == i)
                return fusion_of(&g->nodes[j]) == AG_FUSE_CONV && g->nodes[j].src[0] == i;
    return 0;
}

/* The only reader of node i, -1 if it has several or none. */
static int only_reader(const lowering *lw, int i) {
    if (lw->consumers[i] != 1)
        return -1;
    for (int j = i + 1; j < lw->g->count; j++)
        for (int k = 0; k < AG_NODE_MAX_SRC; k++)
            if (lw->g->nodes[j].src[k] == i)
                return j;
    return -1;
}

/* Whether node i is a concat its parts can be gathered from (structurally: the image is no
 * part), adding its parts to *parts, nested concats read only by it flattened. */
static int gatherable_concat(const ag_engine *e, const lowering *lw, int i, int *parts) {
    const ag_node *n = &lw->g->nodes[i];
    if (n->op != AG_OP_CONCAT || e->int8 || e->bf16 || e->gemm_bf16)
        return 0;
    for (int j = 0; j < AG_NODE_MAX_SRC && n->src[j] >= 0; j++) {
        int s = n->src[j];
        if (s == 0)
            return 0;
        if (!(only_reader(lw, s) == i && gatherable_concat(e, lw, s, parts)))
            ++*parts;
    }
    return 1;
}

/*
 * Whether node i (a concat read only by a conv, as its input, or by such a concat) is
 * gathered into the conv's bands from its parts' maps instead of being a map of its own: in
 * fp32 engines only (u8 and bf16 bands read one map each). Its readers are later nodes, so
 * this is decided on the graph alone, before the groups exist.
 */
static int absorbable_concat(const ag_engine *e, const lowering *lw, int i) {
    int parts = 0, reader = only_reader(lw, i);
    if (reader < 0 || !gatherable_concat(e, lw, i, &parts))
        return 0;
    const ag_node *r = &lw->g->nodes[reader];
    if (r->op == AG_OP_CONCAT)
        return absorbable_concat(e, lw, reader);
    return parts <= AG_BAND_MAX_PARTS && fusion_of(r) == AG_FUSE_CONV && r->src[0] == i;
}

/* Append the groups whose values make up concat node i, in channel order, nested concats
 * flattened; returns the new count, -1 past AG_BAND_MAX_PARTS or for a part that is no
 * group's value (lower_graph refuses the model then: a lowering bug, not a model's). */
static int concat_parts(const ag_engine *e, const lowering *lw, int i, int *parts, int count) {
    const ag_node *n = &lw->g->nodes[i];
    for (int j = 0; j < AG_NODE_MAX_SRC && n->src[j] >= 0 && count >= 0; j++) {
        int gi = group_valued(e, lw, n->src[j]);
        if (lw->virtual_concat[n->src[j]])
            count = concat_parts(e, lw, n->src[j], parts, count);
        else if (count < AG_BAND_MAX_PARTS && gi >= 0)
            parts[count++] = gi;
        else
            count = -1;
    }
    return count;
}

/* The source of each conv group, and which values must be materialised. */
static void resolve_sources(ag_engine *e, lowering *lw) {
    const ag_graph *g = lw->g;
    for (int gi = 0; gi < e->group_count; gi++) {
        ag_group *gr = &e->groups[gi];
        const ag_node *head = &g->nodes[gr->head];
        if (fusion_of(head) != AG_FUSE_CONV)
            continue;
        int x = head->src[0];
        int padded = head->pad[0] || head->pad[1] || head->pad[2] || head->pad[3];
        if (x == 0) {
            gr->kind = AG_BAND_IMAGE;
        } else if (lw->virtual_concat[x]) {
            gr->kind = AG_BAND_CONCAT;
            gr->part_count = concat_parts(e, lw, x, gr->parts, 0);
        } else if (lw->virtual_resize[x]) {
            gr->kind = AG_BAND_RESIZE;
            gr->resize = x;
            gr->src = group_valued(e, lw, g->nodes[x].src[0]);
        } else {
            gr->kind = AG_BAND_RAW;
            gr->src = group_valued(e, lw, x);
        }
        gr->banded = gr->kind != AG_BAND_RAW || padded || head->k > 1 || head->stride > 1;
        /* int8: every conv but the depthwise ones and the 3-channel output (slower in int8),
         * each reading a quantised band. */
        if (e->int8 && head->groups == 1 && head->out_c != 3)
            gr->int8 = gr->banded = 1;
        if (e->int8) /* its source may be a u8 map (decide_q8), which only bands read */
            gr->banded = 1;
        /* StyleGAN graphs in bf16: every plain conv's products bf16 too, on a bf16 band of
         * its fp32 source (the band is where the conversion costs no extra pass) */
        if (e->gemm_bf16 && head->groups == 1)
            gr->bf16_band = gr->banded = 1;
    }
    /* A value is applied on the fly only by a single banded conv reading it directly. */
    for (int gi = 0; gi < e->group_count; gi++) {
        ag_group *gr = &e->groups[gi];
        int direct_banded = 0;
        for (int h = gi + 1; h < e->group_count; h++)
            direct_banded +=
                e->groups[h].src == gi && e->groups[h].kind == AG_BAND_RAW && e->groups[h].banded;
        gr->materialize = !(lw->consumers[gr->tail] == 1 && direct_banded == 1);
    }
    /* A zero-padded conv whose source is materialised anyway (read by several) has nothing
     * to apply on the way: oneDNN reads that map in place and adds the zeros itself, and no
     * band copies it (an RDN's 3x3 convs after each residual: 3 ms each at 512 px). fp32
     * engines (the other bands convert), and not the narrow convs (our kernel pads nothing). */
    for (int gi = 0; gi < e->group_count && !e->int8 && !e->bf16 && !e->gemm_bf16; gi++) {
        ag_group *gr = &e->groups[gi];
        const ag_node *head = &g->nodes[gr->head];
        if (fusion_of(head) == AG_FUSE_CONV && gr->kind == AG_BAND_RAW && gr->banded &&
            head->pad_mode == AG_PAD_ZERO && head->out_c > AG_NARROW_OC && gr->src >= 0 &&
            e->groups[gr->src].materialize)
            gr->direct = 1, gr->banded = 0;
    }
}

/* Last step reading each group's buffer (steps are group indices; group_count = output). */
static void plan_liveness(ag_engine *e, const lowering *lw) {
    const ag_graph *g = lw->g;
    int n = e->group_count;
    for (int gi = 0; gi < n; gi++)
        e->groups[gi].last_use = gi;
    /* Direct reads: a conv's source, a generic op's inputs. */
    for (int h = 0; h < n; h++) {
        const ag_group *gr = &e->groups[h];
        const ag_node *head = &g->nodes[gr->head];
        if (gr->src >= 0)
            e->groups[gr->src].last_use = h;
        for (int j = 0; j < gr->part_count; j++)
            e->groups[gr->parts[j]].last_use = h;
        if (fusion_of(head) != AG_FUSE_CONV)
            for (int j = 0; j < AG_NODE_MAX_SRC; j++) {
                int src = head->src[j] > 0 ? group_valued(e, lw, head->src[j]) : -1;
                if (src >= 0)
                    e->groups[src].last_use = h;
            }
    }
    for (int o = 0; o < g->output_count; o++)
        e->groups[e->output_groups[o]].last_use = n;
    /* A residual is read where its adder is applied: at the adder's step when materialised,
     * else by the adder's reader. Walk backwards so chains of residuals settle. */
    for (int h = n - 1; h >= 0; h--) {
        const ag_group *gr = &e->groups[h];
        if (gr->residual < 0)
            continue;
        int read = gr->materialize ? h : gr->last_use;
        if (read > e->groups[gr->residual].last_use)
            e->groups[gr->residual].last_use = read;
    }
}

/* Per-channel affine arrays of every group (and int8's value ranges): their size depends on
 * the channels only, so they are allocated once with the lowering, not per image size. */
static int alloc_affines(ag_engine *e, ag_error *err) {
    const ag_graph *g = &e->model->graph;
    size_t total = 0, per_c = e->int8 ? 4 : 2;
    for (int gi = 0; gi < e->group_count; gi++)
        total += per_c * (size_t)g->nodes[e->groups[gi].head].out_c;
    float *cursor = e->affine_block = ag_malloc(sizeof(float) * (total ? total : 1));
    if (!cursor)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    for (int gi = 0; gi < e->group_count; gi++) {
        int c = g->nodes[e->groups[gi].head].out_c;
        ag_group_exec *x = &e->exec[gi];
        x->affine.scale = cursor, x->affine.shift = cursor + c;
        if (e->int8)
            x->lo = cursor + 2 * (size_t)c, x->hi = cursor + 3 * (size_t)c;
        cursor += per_c * (size_t)c;
    }
    return AG_OK;
}

/*
 * int8: the conv outputs stored as u8 maps (a byte per value, each row with its own scale
 * and offset: a quarter of the fp32 map). Not the fp32 groups (the output, the norms whose
 * statistics ops.c takes), nor a group a generic op reads; an adder and its residual are
 * read together by one band row, so both or neither.
 */
static void decide_q8(ag_engine *e, const lowering *lw) {
    const ag_graph *g = lw->g;
    int n = e->group_count;
    for (int gi = 0; gi < n; gi++) /* slopes >= 0: its range is known (range_end) */
        e->groups[gi].q8 = e->int8 && g->nodes[e->groups[gi].head].op == AG_OP_CONV &&
                           !e->groups[gi].f32 && e->groups[gi].pre_slope >= 0.0f &&
                           e->groups[gi].post_slope >= 0.0f;
    for (int h = 0; h < n; h++) {
        const ag_node *head = &g->nodes[e->groups[h].head];
        for (int j = 0; j < AG_NODE_MAX_SRC && fusion_of(head) != AG_FUSE_CONV; j++) {
            int src = head->src[j] > 0 ? group_valued(e, lw, head->src[j]) : -1;
            if (src >= 0)
                e->groups[src].q8 = 0;
        }
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int h = 0; h < n; h++) {
            int r = e->groups[h].residual;
            if (r >= 0 && e->groups[h].q8 != e->groups[r].q8) {
                e->groups[h].q8 = e->groups[r].q8 = 0;
                changed = 1;
            }
        }
    }
}

static int lower_graph(ag_engine *e, ag_error *err) {
    const ag_graph *g = &e->model->graph;
    lowering *lw = ag_calloc(1, sizeof *lw);
    e->groups = ag_calloc((size_t)g->count, sizeof *e->groups);
    if (!lw || !e->groups) {
        ag_free(lw);
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    }
    lw->g = g;
    count_consumers(lw);
    for (int i = 0; i < g->count; i++)
        lw->group_of[i] = -1;
    int out = g->outputs[0];
    for (int i = 1; i < g->count; i++) {
        const ag_node *n = &g->nodes[i];
        int a = n->src[0], b = n->src[1];
        int ga = group_valued(e, lw, a), gb = b > 0 ? group_valued(e, lw, b) : -1;
        if (i == out && fusion_of(n) == AG_FUSE_TANH && ga >= 0 && lw->consumers[i] == 1) {
            e->output_tanh = 1; /* applied by the output pass */
            lw->group_of[i] = ga;
        } else if (ga >= 0 && can_extend(e, lw, ga, n, b)) {
            extend(e, lw, ga, i, b);
        } else if (ga >= 0 && absorbable_act(e, lw, ga, n)) {
            e->groups[ga].act = e->groups[ga].tail = i;
            lw->group_of[i] = ga;
        } else if (fusion_of(n) == AG_FUSE_ADD && gb >= 0 && can_extend(e, lw, gb, n, a)) {
            extend(e, lw, gb, i, a);
        } else if (absorbable_resize(e, lw, i)) {
            lw->virtual_resize[i] = 1;
        } else if (absorbable_concat(e, lw, i)) {
            lw->virtual_concat[i] = 1;
        } else {
            new_group(e, lw, i);
        }
    }
    for (int o = 0; o < g->output_count; o++)
        e->output_groups[o] = group_valued(e, lw, g->outputs[o]);
    if (e->output_tanh)
        e->output_groups[0] = group_valued(e, lw, g->nodes[out].src[0]);
    e->output_group = e->output_groups[0];
    int missing = 0;
    for (int o = 0; o < g->output_count; o++)
        missing |= e->output_groups[o] < 0;
    if (missing || e->output_group < 0) {
        ag_free(lw);
        return ag_error_set(err, AG_E_INTERNAL, "a graph output is no group's value");
    }
    resolve_sources(e, lw);
    plan_liveness(e, lw);
    /* Generic ops and the output read and write fp32. */
    for (int gi = 0; gi < e->group_count; gi++) {
        ag_group *gr = &e->groups[gi];
        if (g->nodes[gr->head].op != AG_OP_CONV)
            gr->f32 = 1;
        for (int o = 0; o < g->output_count; o++)
            gr->f32 |= gi == e->output_groups[o];
        if (gr->norm >= 0 && g->nodes[gr->norm].op != AG_OP_LAYER_NORM &&
            g->nodes[gr->norm].op != AG_OP_AFFINE)
            gr->f32 = 1;
    }
    decide_q8(e, lw);
    int rc = AG_OK;
    for (int gi = 0; gi < e->group_count && rc == AG_OK; gi++) {
        const ag_group *gr = &e->groups[gi];
        if (gr->kind != AG_BAND_IMAGE && g->nodes[gr->head].op == AG_OP_CONV && gr->src < 0 &&
            gr->part_count <= 0)
            rc = ag_error_set(err, AG_E_INTERNAL, "conv \"%s\" reads no group",
                              g->nodes[gr->head].name);
        for (int j = 0; j < AG_NODE_MAX_SRC && g->nodes[gr->head].op != AG_OP_CONV; j++)
            if (g->nodes[gr->head].src[j] == 0 && reads_src(&g->nodes[gr->head], j))
                rc =
                    ag_error_set(err, AG_E_UNSUPPORTED, "node \"%s\" (%s) reads the image directly",
                                 g->nodes[gr->head].name, ag_op_name(g->nodes[gr->head].op));
        if (e->bf16 && gr->f32 && g->nodes[gr->head].op != AG_OP_CONV)
            rc = ag_error_set(err, AG_E_UNSUPPORTED,
                              "bf16 needs a graph of convolutions and LayerNorms; node \"%s\" "
                              "(%s) runs in fp32 only (use --precision fp32)",
                              g->nodes[gr->norm >= 0 ? gr->norm : gr->head].name,
                              ag_op_name(g->nodes[gr->norm >= 0 ? gr->norm : gr->head].op));
    }
    ag_free(lw);
    return rc == AG_OK ? alloc_affines(e, err) : rc;
}

/* ---- geometry and sizes ---------------------------------------------------------------- */

static const ag_node *head_of(const ag_engine *e, int gi) {
    return &e->model->graph.nodes[e->groups[gi].head];
}

static ag_pad node_pad(const ag_node *n) {
    ag_pad p = {n->pad[0], n->pad[1], n->pad[2], n->pad[3]};
    return p;
}

/* Bytes of one activation element of group gi. */
static size_t elem_bytes(const ag_engine *e, int gi) {
    if (e->groups[gi].q8)
        return 1;
    return e->bf16 && !e->groups[gi].f32 ? 2 : sizeof(float);
}

static size_t y_bytes(const ag_engine *e, int gi) {
    ag_shape s = e->exec[gi].out;
    return (size_t)s.h * s.w * s.c * elem_bytes(e, gi);
}

static void plan_geometry(ag_engine *e) {
    const ag_graph *g = &e->model->graph;
    for (int gi = 0; gi < e->group_count; gi++) {
        const ag_group *gr = &e->groups[gi];
        const ag_node *head = &g->nodes[gr->head];
        ag_group_exec *x = &e->exec[gi];
        x->out = e->shapes[gr->head];
        x->in = e->shapes[head->src[0] >= 0 ? head->src[0] : gr->head]; /* const: none */
        x->run_cut = 0; /* cut_runs starts afresh for each size */
        x->hp = x->in.h + head->pad[0] + head->pad[1];
        x->wp = x->in.w + head->pad[2] + head->pad[3];
    }
}

int ag_engine_plan_add(ag_engine *e, size_t bytes, int first, int last) {
    AG_ASSERT(e->buffer_count < e->buffer_capacity);
    ag_arena_buffer b = {bytes, first, last, 0};
    e->buffers[e->buffer_count] = b;
    return e->buffer_count++;
}

/* The first output row of group gi's band b (the last band is moved up; see create_conv). */
static int band_first_row(const ag_group_exec *x, int b) {
    int first = b * x->band_rows;
    return first + x->band_rows > x->out.h ? x->out.h - x->band_rows : first;
}

/* The band processed i-th of `bands` in the order given: bottom-up, last to first. */
static int band_in_order(int bands, int i, int bottom_up) {
    return bottom_up ? bands - 1 - i : i;
}

/* The band group x processes i-th, in its planned order. */
static int band_at(const ag_group_exec *x, int i) {
    return band_in_order(x->bands, i, x->bottom_up);
}

/*
 * The rows of group gi's source that band b reads, [*lo, *hi]: its padded input rows, the
 * padding reflected or zero inside the map, and through an absorbed resize the bilinear
 * taps' rows, widened by one row on each side whatever the coordinate mode.
 */
static void band_source_rows(const ag_engine *e, int gi, int b, int *lo, int *hi) {
    const ag_node *head = head_of(e, gi);
    const ag_group_exec *x = &e->exec[gi];
    int first = band_first_row(x, b);
    int u0 = first * head->stride - head->pad[0];
    int u1 = u0 + (x->band_rows - 1) * head->stride + head->k - 1;
    u0 = u0 < 0 ? 0 : u0; /* a reflected row lies inside the band's own rows */
    u1 = u1 > x->in.h - 1 ? x->in.h - 1 : u1;
    if (e->groups[gi].kind == AG_BAND_RESIZE) {
        long hs = e->exec[e->groups[gi].src].out.h, h = x->in.h;
        u0 = (int)((long)u0 * hs / h) - 1;
        u1 = (int)(((long)u1 + 1) * hs / h) + 1;
        u0 = u0 < 0 ? 0 : u0;
        u1 = u1 > (int)hs - 1 ? (int)hs - 1 : u1;
    }
    *lo = u0, *hi = u1;
}

/*
 * Where group gi's output may start relative to its source's (delta, in bytes) for it to
 * overwrite the source as it goes, in the band order given: no band may read a source row
 * that a band before it has written over. A band's source rows are copied into the band
 * buffer before its conv writes, so a band may overwrite its own. Top-down, the output
 * trails the source by the smallest such lag (a conv that reads faster than it writes:
 * same size or a stride 2); bottom-up, it leads it (an upsampling conv, which writes faster
 * than it reads: its top rows read source rows nobody needs any more by then).
 */
static long long in_place_delta(const ag_engine *e, int gi, int bottom_up) {
    const ag_group_exec *x = &e->exec[gi];
    long long ib = (long long)(y_bytes(e, gi - 1) / (size_t)e->exec[gi - 1].out.h);
    long long ob = (long long)(y_bytes(e, gi) / (size_t)x->out.h);
    long long delta = bottom_up ? LLONG_MIN : LLONG_MAX;
    long long written_lo = LLONG_MAX, written_hi = LLONG_MIN; /* rows * ob, before delta */
    for (int i = 0; i < x->bands; i++) {
        int b = band_in_order(x->bands, i, bottom_up), lo, hi;
        band_source_rows(e, gi, b, &lo, &hi);
        if (i > 0 && !bottom_up && lo * ib - written_hi < delta) /* delta + written <= read */
            delta = lo * ib - written_hi;
        if (i > 0 && bottom_up && (hi + 1) * ib - written_lo > delta) /* written >= read end */
            delta = (hi + 1) * ib - written_lo;
        int first = band_first_row(x, b);
        written_lo = first * ob < written_lo ? first * ob : written_lo;
        written_hi =
            (first + x->band_rows) * ob > written_hi ? (first + x->band_rows) * ob : written_hi;
    }
    if (x->bands == 1)
        delta = 0;
    return bottom_up ? delta : (delta > 0 ? 0 : delta);
}

/* Bytes spanned by a source of `in` bytes at 0 and an output of `out` bytes at delta. */
static long long span_bytes(long long in, long long out, long long delta) {
    long long lo = delta < 0 ? delta : 0, hi = delta + out > in ? delta + out : in;
    return hi - lo;
}

/*
 * Whether group gi can overwrite its source (the group just before, read for the last time
 * here, band by band from its raw or resized map) and in which band order: the one whose
 * span is smaller, if smaller than two separate buffers. Sets *delta.
 */
static int in_place(ag_engine *e, int gi, long long *delta) {
    const ag_group *gr = &e->groups[gi];
    ag_group_exec *x = &e->exec[gi];
    x->bottom_up = 0;
    if (gi == 0 || gr->src != gi - 1 || !gr->banded || e->groups[gi - 1].last_use != gi ||
        (gr->kind != AG_BAND_RAW && gr->kind != AG_BAND_RESIZE))
        return 0;
    long long in = (long long)y_bytes(e, gi - 1), out = (long long)y_bytes(e, gi);
    long long down = in_place_delta(e, gi, 0), up = in_place_delta(e, gi, 1);
    long long span_down = span_bytes(in, out, down), span_up = span_bytes(in, out, up);
    if ((span_down < span_up ? span_down : span_up) >= in + out)
        return 0;
    x->bottom_up = span_up < span_down;
    *delta = x->bottom_up ? up : down;
    return 1;
}

/* Group outputs: a run of convs each overwriting the one before shares one buffer. */
static void plan_outputs(ag_engine *e) {
    int n = e->group_count;
    for (int first = 0, last; first < n; first = last + 1) {
        long long lo = 0, hi = (long long)y_bytes(e, first), delta;
        int live_until = e->groups[first].last_use;
        ag_group_exec *x = e->exec;
        x[first].bottom_up = x[first].run_joined = 0;
        x[first].run_at = 0;
        for (last = first; last + 1 < n && !x[last + 1].run_cut && in_place(e, last + 1, &delta);
             last++) {
            long long at = x[last + 1].run_at = x[last].run_at + delta;
            long long end = at + (long long)y_bytes(e, last + 1);
            x[last + 1].run_joined = 1;
            lo = at < lo ? at : lo;
            hi = end > hi ? end : hi;
            live_until = e->groups[last + 1].last_use > live_until ? e->groups[last + 1].last_use
                                                                   : live_until;
        }
        int id = ag_engine_plan_add(e, (size_t)(hi - lo), first, live_until);
        for (int i = first; i <= last; i++) {
            x[i].buffer = id;
            x[i].offset = (size_t)(x[i].run_at - lo);
        }
    }
}

/* Bytes of one element of group gi's band: fp32, bf16, or u8 for an int8 conv. */
static size_t band_elem_bytes(const ag_engine *e, int gi) {
    return e->groups[gi].int8 ? 1 : e->bf16 || e->groups[gi].bf16_band ? 2 : sizeof(float);
}

/* Rows per band for group gi: the band buffer stays near AG_BAND_BYTES. */
static int band_rows_for(const ag_engine *e, int gi) {
    const ag_node *head = head_of(e, gi);
    const ag_group_exec *x = &e->exec[gi];
    size_t act = band_elem_bytes(e, gi);
    size_t in_row = (size_t)x->wp * x->in.c * act * (size_t)head->stride;
    /* The target is for fp32: bf16 bands keep the rows (the synchronisations) and halve
     * the bytes. int8 keeps its memory small: every band buffer (u8 in, fp32 in, a q8 conv's
     * fp32 out) holds a quarter of it, the rows of a u8 band at the fp32 target. */
    size_t target = e->int8 ? e->band_bytes_target / 4 : e->band_bytes_target * act / 4;
    int rows = (int)(target / (in_row ? in_row : 1));
    size_t out_row = sizeof(float) * (size_t)x->out.w * x->out.c;
    if (e->groups[gi].q8 && (int)(target / out_row) < rows)
        rows = (int)(target / out_row);
    rows = rows < 4 ? 4 : rows;
    if (rows >= x->out.h)
        return x->out.h;
    /* Spread the rows evenly over the bands so the last one, moved up to end at the last
     * row, recomputes fewer rows than there are bands (not most of a band). */
    int bands = (x->out.h + rows - 1) / rows;
    return (x->out.h + bands - 1) / bands;
}

static size_t band_input_bytes(const ag_engine *e, int gi, int rows) {
    const ag_node *head = head_of(e, gi);
    return (size_t)((rows - 1) * head->stride + head->k) * e->exec[gi].wp * e->exec[gi].in.c *
           band_elem_bytes(e, gi);
}

/* ---- oneDNN primitives and weights ----------------------------------------------------- */

static void destroy_convs(ag_engine *e) {
    for (int gi = 0; e->exec && gi < e->group_count; gi++) {
        ag_dnnl_conv_destroy(e->exec[gi].conv);
        e->exec[gi].conv = NULL;
        ag_dnnl_int8_conv_destroy(e->exec[gi].conv8);
        e->exec[gi].conv8 = NULL;
        ag_gemm_bf16_destroy(e->exec[gi].mm);
        e->exec[gi].mm = NULL;
        ag_wino_conv_destroy(e->exec[gi].wino);
        e->exec[gi].wino = NULL;
        ag_int8_modconv_destroy(e->exec[gi].mm8);
        e->exec[gi].mm8 = NULL;
    }
}

/* A modulated conv's bf16 products at the planned size (gemm_bf16 engines). */
static int create_gemm_bf16(ag_engine *e, int gi, size_t *scratch_max, ag_error *err) {
    const ag_node *n = head_of(e, gi);
    ag_shape in = e->shapes[n->src[0]];
    int up = n->up == 2;
    int HP = up ? in.h : in.h + n->pad[0] + n->pad[1];
    int WP = up ? in.w : in.w + n->pad[2] + n->pad[3];
    size_t scratch = 0;
    int rc = ag_gemm_bf16_create(e->dnnl, up, HP, WP, in.c, n->out_c, n->k, &e->exec[gi].mm,
                                 &scratch, err);
    *scratch_max = scratch > *scratch_max ? scratch : *scratch_max;
    return rc;
}

/* AG_WINOGRAD=0 keeps every modulated conv on sgemm (A/B measurements and tests). */
static int wino_off(void) {
    const char *v = getenv("AG_WINOGRAD");
    return v && strcmp(v, "0") == 0;
}

typedef struct wino_fill {
    ag_wino_conv *conv;
    const float *packed;
} wino_fill;

static int fill_wino(void *ctx, void *dst, ag_error *err) {
    wino_fill *f = ctx;
    return ag_wino_conv_prepare_weights(f->conv, f->packed, dst, err);
}

/* A modulated 3x3 conv's Winograd conv at the planned size, where one fits (fp32 engines):
 * its band goes in the conv band buffer, which no other step uses meanwhile. Its weights
 * (4x the model's at 128 px and up) are the model's, shared by its engines, unless another
 * engine of the model holds them in another layout (another size): then its own, counted
 * in *weight_bytes. Measuring counts them as shared. */
static int create_wino(ag_engine *e, int gi, size_t *scratch_max, size_t *band_max,
                       size_t *weight_bytes, ag_error *err) {
    const ag_node *n = head_of(e, gi);
    ag_shape in = e->shapes[n->src[0]];
    ag_group_exec *x = &e->exec[gi];
    x->wino_weights = NULL;
    if (n->up == 2 || n->k != 3 || n->pad[0] != 1 || n->pad[1] != 1 || n->pad[2] != 1 ||
        n->pad[3] != 1)
        return AG_OK;
    size_t scratch = 0, band = 0;
    int rc = ag_wino_conv_create(e->dnnl, in.h, in.w, in.c, n->out_c, &x->wino, &scratch, &band,
                                 weight_bytes, err);
    *scratch_max = scratch > *scratch_max ? scratch : *scratch_max;
    *band_max = band > *band_max ? band : *band_max;
    if (rc || !x->wino)
        return rc;
    if (!e->measure_only) {
        wino_fill fill = {x->wino, n->weight};
        ag_layout_request r = {NULL, 0, ag_wino_layout_same, *weight_bytes, fill_wino, &fill};
        r.layout = ag_wino_conv_layout(x->wino, &r.layout_bytes);
        rc = ag_model_shared_weights(e->model, e->groups[gi].head, &r, &x->wino_weights, err);
    }
    if (rc == AG_OK && (x->wino_weights || e->measure_only))
        *weight_bytes = 0;
    return rc;
}

/* A 3x3 modulated conv's u8 x s8 conv at the planned size (gemm_int8 engines): its band
 * in the conv band buffer, its weights the engine's own (a quarter of the fp32 ones). */
static int create_int8_modconv(ag_engine *e, int gi, size_t *scratch_max, size_t *band_max,
                               size_t *weight_bytes, ag_error *err) {
    const ag_node *n = head_of(e, gi);
    ag_shape in = e->shapes[n->src[0]];
    if (n->up == 2 || n->k != 3 || n->pad[0] != 1 || n->pad[1] != 1 || n->pad[2] != 1 ||
        n->pad[3] != 1)
        return AG_OK;
    size_t scratch = 0, band = 0;
    int rc = ag_int8_modconv_create(e->dnnl, in.h, in.w, in.c, n->out_c, n->weight,
                                    &e->exec[gi].mm8, &scratch, &band, weight_bytes, err);
    *scratch_max = scratch > *scratch_max ? scratch : *scratch_max;
    *band_max = band > *band_max ? band : *band_max;
    return rc;
}

/*
 * Group gi's primitive, for one band of output rows (all rows when not banded). Every band
 * has the same height, so one primitive and one weight layout serve the conv: the last band
 * is moved up to end at the last row and recomputes a few rows the band before it already
 * wrote, identically.
 */
static int create_conv(ag_engine *e, int gi, size_t *scratch_max, size_t *band_max,
                       size_t *weight_bytes, ag_error *err) {
    const ag_node *head = head_of(e, gi);
    const ag_group *gr = &e->groups[gi];
    ag_group_exec *x = &e->exec[gi];
    x->band_rows = gr->banded ? band_rows_for(e, gi) : x->out.h;
    x->bands = (x->out.h + x->band_rows - 1) / x->band_rows;
    ag_conv_shape s = {(x->band_rows - 1) * head->stride + head->k,
                       x->wp,
                       x->in.c,
                       x->out.c,
                       head->k,
                       head->stride,
                       head->groups,
                       head->bias != NULL,
                       e->bf16 || gr->bf16_band,
                       elem_bytes(e, gi) == 2,
                       {0, 0, 0, 0}};
    if (gr->direct) { /* the source map unpadded, oneDNN's zeros round it */
        s.HP = x->in.h, s.WP = x->in.w;
        for (int i = 0; i < 4; i++)
            s.zero_pad[i] = head->pad[i];
    }
    size_t scratch = 0;
    int rc;
    if (gr->int8) {
        ag_int8_conv_shape s8 = {s.HP, s.WP, s.IC, s.OC, s.K, s.stride, s.groups, s.has_bias, 0};
        rc = ag_dnnl_int8_conv_create(e->dnnl, &s8, x->w_scale, 1.0f, &x->conv8, &scratch,
                                      weight_bytes, err);
    } else {
        rc = ag_dnnl_conv_create(e->dnnl, &s, &x->conv, &scratch, weight_bytes, err);
    }
    *scratch_max = scratch > *scratch_max ? scratch : *scratch_max;
    if (rc == AG_OK && gr->banded) {
        size_t band = band_input_bytes(e, gi, x->band_rows);
        size_t *max = gr->int8 ? &e->band_u8_bytes : band_max;
        *max = band > *max ? band : *max;
    }
    return rc;
}

/* Prepared weights are kept when every conv keeps its layout (the usual case when only the
 * image size changes); otherwise reordered again into one allocation. Keeping them matters
 * for a server: each reorder is a oneDNN primitive, made, cached and freed per plan, whose
 * heap churn made the int8 engine's RSS wander with the sizes it had seen. */
static size_t prepared_size(size_t bytes) {
    return (bytes + AG_ARENA_ALIGN - 1) & ~(size_t)(AG_ARENA_ALIGN - 1);
}

static int prepare_weights(ag_engine *e, ag_dnnl_conv **old, ag_dnnl_int8_conv **old8,
                           ag_wino_conv **oldw, ag_int8_modconv **oldm, const size_t *bytes,
                           ag_error *err) {
    int same = e->weights != NULL;
    size_t total = 0;
    for (int gi = 0; gi < e->group_count; gi++) {
        e->exec[gi].weight_offset = total;
        total += prepared_size(bytes[gi]);
        if (e->exec[gi].conv)
            same = same && ag_dnnl_conv_same_weights(e->exec[gi].conv, old[gi]);
        if (e->exec[gi].conv8)
            same = same && ag_dnnl_int8_conv_same_weights(e->exec[gi].conv8, old8[gi]);
        if (e->exec[gi].wino && !e->exec[gi].wino_weights)
            same = same && ag_wino_conv_same_weights(e->exec[gi].wino, oldw[gi]);
        if (e->exec[gi].mm8)
            same = same && ag_int8_modconv_same_weights(e->exec[gi].mm8, oldm[gi]);
    }
    if (same)
        return AG_OK;
    ag_free(e->weights_block);
    e->weights = NULL;
    e->weights_block = ag_malloc(total + AG_ARENA_ALIGN);
    if (!e->weights_block)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for %zu bytes of weights", total);
    ag_advise_huge_pages(e->weights_block, total + AG_ARENA_ALIGN);
    uint8_t *aligned = (uint8_t *)(((uintptr_t)e->weights_block + AG_ARENA_ALIGN - 1) &
                                   ~(uintptr_t)(AG_ARENA_ALIGN - 1));
    for (int gi = 0; gi < e->group_count; gi++) {
        if (e->exec[gi].conv8) {
            int rc = ag_dnnl_int8_conv_prepare_weights(e->exec[gi].conv8, e->exec[gi].w_s8,
                                                       aligned + e->exec[gi].weight_offset, err);
            if (rc)
                return rc;
            continue;
        }
        if (e->exec[gi].mm8) {
            int rc = ag_int8_modconv_prepare_weights(e->exec[gi].mm8,
                                                     aligned + e->exec[gi].weight_offset, err);
            if (rc)
                return rc;
            continue;
        }
        if (e->exec[gi].wino && !e->exec[gi].wino_weights) {
            int rc = ag_wino_conv_prepare_weights(e->exec[gi].wino, head_of(e, gi)->weight,
                                                  aligned + e->exec[gi].weight_offset, err);
            if (rc)
                return rc;
            continue;
        }
        if (!e->exec[gi].conv)
            continue;
        int rc = ag_dnnl_conv_prepare_weights(e->exec[gi].conv, head_of(e, gi)->weight,
                                              aligned + e->exec[gi].weight_offset, err);
        if (rc)
            return rc;
    }
    e->weights = aligned;
    return AG_OK;
}

static int create_convs(ag_engine *e, size_t *scratch_max, size_t *band_max, ag_error *err) {
    int n = e->group_count;
    ag_dnnl_conv **old = ag_calloc((size_t)n, sizeof *old);
    ag_dnnl_int8_conv **old8 = ag_calloc((size_t)n, sizeof *old8);
    ag_wino_conv **oldw = ag_calloc((size_t)n, sizeof *oldw);
    ag_int8_modconv **oldm = ag_calloc((size_t)n, sizeof *oldm);
    size_t *weight_bytes = ag_calloc((size_t)n, sizeof *weight_bytes);
    int rc = old && old8 && oldw && oldm && weight_bytes
                 ? AG_OK
                 : ag_error_set(err, AG_E_NOMEM, "out of memory");
    *scratch_max = *band_max = 0;
    e->band_u8_bytes = 0;
    for (int gi = 0; gi < n && rc == AG_OK; gi++) {
        old[gi] = e->exec[gi].conv;
        old8[gi] = e->exec[gi].conv8;
        oldw[gi] = e->exec[gi].wino;
        oldm[gi] = e->exec[gi].mm8;
        e->exec[gi].conv = NULL;
        e->exec[gi].conv8 = NULL;
        e->exec[gi].wino = NULL;
        e->exec[gi].mm8 = NULL;
        if (head_of(e, gi)->op == AG_OP_CONV)
            rc = create_conv(e, gi, scratch_max, band_max, &weight_bytes[gi], err);
        else if (e->gemm_bf16 && head_of(e, gi)->op == AG_OP_MODCONV)
            rc = create_gemm_bf16(e, gi, scratch_max, err);
        else if (e->gemm_int8 && head_of(e, gi)->op == AG_OP_MODCONV)
            rc = create_int8_modconv(e, gi, scratch_max, band_max, &weight_bytes[gi], err);
        else if (head_of(e, gi)->op == AG_OP_MODCONV && !wino_off())
            rc = create_wino(e, gi, scratch_max, band_max, &weight_bytes[gi], err);
    }
    e->prepared_bytes = 0;
    for (int gi = 0; rc == AG_OK && gi < n; gi++)
        e->prepared_bytes += prepared_size(weight_bytes[gi]);
    if (rc == AG_OK && !e->measure_only)
        rc = prepare_weights(e, old, old8, oldw, oldm, weight_bytes, err);
    /* Whatever happened, exactly one set of primitives survives. */
    for (int gi = 0; old && old8 && oldw && oldm && gi < n; gi++) {
        ag_dnnl_conv_destroy(old[gi]);
        ag_dnnl_int8_conv_destroy(old8[gi]);
        ag_wino_conv_destroy(oldw[gi]);
        ag_int8_modconv_destroy(oldm[gi]);
    }
    if (rc)
        destroy_convs(e);
    ag_free(old);
    ag_free(old8);
    ag_free(oldw);
    ag_free(oldm);
    ag_free(weight_bytes);
    return rc;
}

/* ---- the oneDNN plan ------------------------------------------------------------------- */

/* int8: the row pairs of the q8 maps, and the fp32 rows a q8 conv band or materialising
 * writes before they are quantised. */
static void plan_q8(ag_engine *e) {
    size_t tmp = 0;
    for (int gi = 0; gi < e->group_count; gi++) {
        ag_group_exec *x = &e->exec[gi];
        x->row_q_id = -1;
        if (!e->groups[gi].q8)
            continue;
        size_t row = sizeof(float) * (size_t)x->out.w * x->out.c;
        size_t band = row * (size_t)x->band_rows, rows = row * (size_t)e->threads;
        size_t pairs = sizeof(float) * 2 * (size_t)x->out.c * (size_t)x->out.h;
        x->row_q_id = ag_engine_plan_add(e, pairs, gi, e->groups[gi].last_use);
        tmp = band > tmp ? band : tmp;
        tmp = e->groups[gi].materialize && rows > tmp ? rows : tmp;
    }
    e->q8_tmp_id = tmp ? ag_engine_plan_add(e, tmp, 0, e->group_count) : -1;
}

/* int8: a min and a max per channel per thread for the statistics pass (ag_stats_rows). */
static size_t range_slots_bytes(const ag_engine *e) {
    int C = 1;
    for (int gi = 0; gi < e->group_count; gi++)
        C = e->exec[gi].out.c > C ? e->exec[gi].out.c : C;
    return sizeof(float) * 2 * (size_t)C * (size_t)e->threads;
}

/* The group outputs, the band, oneDNN's scratchpad, the statistics, resize taps, and the
 * scratch of LADE statistics and generic ops (only for graphs that have them). */
static void plan_onednn(ag_engine *e, size_t band, size_t scratch) {
    const ag_graph *g = &e->model->graph;
    int n = e->group_count;
    size_t taps = 0, generic = 0, lade = 0;
    int max_rows = 1;
    for (int gi = 0; gi < n; gi++) {
        const ag_group *gr = &e->groups[gi];
        const ag_group_exec *x = &e->exec[gi];
        if (gr->resize >= 0)
            taps += (size_t)x->in.h + x->in.w;
        if (head_of(e, gi)->op != AG_OP_CONV) {
            size_t s = ag_node_scratch_floats(head_of(e, gi), e->shapes, gr->head);
            generic = s > generic ? s : generic;
        }
        if (gr->norm >= 0 && g->nodes[gr->norm].op == AG_OP_LADE) {
            size_t s = 4096 * (size_t)x->out.c;
            lade = s > lade ? s : lade;
        }
        max_rows = x->out.h > max_rows ? x->out.h : max_rows;
    }
    e->partials_id = ag_engine_plan_add(e, 2 * (size_t)max_rows * sizeof(double), 0, n);
    e->pad_id = ag_engine_plan_add(e, sizeof(ag_resize_tap) * (taps ? taps : 1), 0, n);
    plan_outputs(e);
    e->band_id = ag_engine_plan_add(e, band, 0, n);
    e->scratch_id = ag_engine_plan_add(e, scratch, 0, n);
    e->band_u8_id = e->band_u8_bytes ? ag_engine_plan_add(e, e->band_u8_bytes, 0, n) : -1;
    e->range_id = e->int8 ? ag_engine_plan_add(e, range_slots_bytes(e), 0, n) : -1;
    plan_q8(e);
    e->lade_id =
        lade || generic
            ? ag_engine_plan_add(e, sizeof(float) * (lade > generic ? lade : generic), 0, n)
            : -1;
}

/* Bytes times steps live, over every buffer: what a plan holds, not only at its peak. */
static double plan_area(const ag_engine *e) {
    double area = 0;
    for (int i = 0; i < e->buffer_count; i++)
        area +=
            (double)e->buffers[i].bytes * (e->buffers[i].last_step - e->buffers[i].first_step + 1);
    return area;
}

/*
 * A run of in-place groups holds its largest member's bytes from its first step to its
 * last: a run that shrinks (an encoder) or grows (an upsampling conv) may do better cut in
 * two. Toggle a cut at each member in turn and keep the toggle when the arena shrinks, or
 * stays and the plan holds less (which opens the way to cuts that need another first); a
 * few passes, as plans are cheap. Leaves the plan made with the cuts kept.
 */
static void cut_runs(ag_engine *e, size_t band, size_t scratch) {
    size_t best = ag_arena_plan(e->buffers, e->buffer_count);
    double best_area = plan_area(e);
    for (int pass = 0, changed = 1; pass < 4 && changed; pass++) {
        changed = 0;
        for (int gi = 1; gi < e->group_count; gi++) {
            ag_group_exec *x = &e->exec[gi];
            if (!x->run_joined && !x->run_cut)
                continue;
            x->run_cut = !x->run_cut;
            e->buffer_count = 0;
            plan_onednn(e, band, scratch);
            size_t bytes = ag_arena_plan(e->buffers, e->buffer_count);
            double area = plan_area(e);
            if (bytes < best || (bytes == best && area < best_area))
                best = bytes, best_area = area, changed = 1;
            else
                x->run_cut = !x->run_cut;
        }
    }
    e->buffer_count = 0;
    plan_onednn(e, band, scratch);
}

/* Each run starts from the chains' constant affines (materialising resets them). */
static void init_affines(ag_engine *e) {
    const ag_graph *g = &e->model->graph;
    for (int gi = 0; gi < e->group_count; gi++) {
        const ag_group *gr = &e->groups[gi];
        ag_group_exec *x = &e->exec[gi];
        const ag_node *norm = gr->norm >= 0 ? &g->nodes[gr->norm] : NULL;
        int constant = norm && norm->op == AG_OP_AFFINE;
        x->y_scale = 1.0f;
        x->range_ok = 0;
        x->affine.slope = gr->prelu >= 0 ? g->nodes[gr->prelu].gamma : NULL;
        for (int c = 0; c < x->out.c; c++) {
            x->affine.scale[c] = constant && norm->gamma ? norm->gamma[c] : 1.0f;
            x->affine.shift[c] = constant && norm->beta ? norm->beta[c] : 0.0f;
        }
    }
}

/* Resize taps, cut from their buffer once the arena exists. */
static void bind_onednn(ag_engine *e) {
    const ag_graph *g = &e->model->graph;
    ag_resize_tap *taps = ag_engine_buffer(e, e->pad_id);
    for (int gi = 0; gi < e->group_count; gi++) {
        ag_group_exec *x = &e->exec[gi];
        const ag_group *gr = &e->groups[gi];
        if (gr->resize < 0)
            continue;
        const ag_node *r = &g->nodes[gr->resize];
        ag_resize_mode mode = e->resize != AG_RESIZE_DEFAULT ? e->resize : r->mode;
        ag_shape src = e->exec[gr->src].out;
        x->row_taps = taps;
        ag_resize_taps(taps, src.h, x->in.h, mode);
        taps += x->in.h;
        x->col_taps = taps;
        ag_resize_taps(taps, src.w, x->in.w, mode);
        taps += x->in.w;
    }
    e->partials = ag_engine_buffer(e, e->partials_id);
    for (int gi = 0; gi < e->group_count; gi++) {
        e->exec[gi].row_q = e->groups[gi].q8 ? ag_engine_buffer(e, e->exec[gi].row_q_id) : NULL;
        if (e->exec[gi].mm)
            ag_gemm_bf16_bind(e->exec[gi].mm, e->model->bf16_of[e->groups[gi].head],
                              e->model->demod_sq_of[e->groups[gi].head],
                              ag_engine_buffer(e, e->scratch_id));
        if (e->exec[gi].mm8)
            ag_int8_modconv_bind(e->exec[gi].mm8, e->weights + e->exec[gi].weight_offset,
                                 ag_engine_buffer(e, e->band_id),
                                 ag_engine_buffer(e, e->scratch_id));
        if (e->exec[gi].wino)
            ag_wino_conv_bind(e->exec[gi].wino,
                              e->exec[gi].wino_weights ? (void *)e->exec[gi].wino_weights
                                                       : e->weights + e->exec[gi].weight_offset,
                              ag_engine_buffer(e, e->band_id), ag_engine_buffer(e, e->scratch_id));
    }
}

/* ---- prepare --------------------------------------------------------------------------- */

static int check_size(const ag_engine *e, int width, int height, ag_error *err) {
    int min = e->model->info.min_side > AG_MIN_SIDE ? e->model->info.min_side : AG_MIN_SIDE;
    if (width < min || height < min)
        return ag_error_set(err, AG_E_ARG,
                            "image is %dx%d; both sides must be at least %d pixels for model %s",
                            width, height, min, e->model->info.name);
    if ((size_t)width * height > AG_MAX_PIXELS)
        return ag_error_set(err, AG_E_LIMIT, "image is %dx%d; more than %d pixels", width, height,
                            AG_MAX_PIXELS);
    return AG_OK;
}

static int allocate_arena(ag_engine *e, size_t bytes, ag_error *err) {
    ag_free(e->arena_block);
    e->arena = e->arena_block = NULL;
    e->arena_bytes = 0;
    e->arena_block = ag_malloc(bytes + AG_ARENA_ALIGN);
    if (!e->arena_block)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for a %zu MB activation arena",
                            bytes >> 20);
    e->arena = (uint8_t *)(((uintptr_t)e->arena_block + AG_ARENA_ALIGN - 1) &
                           ~(uintptr_t)(AG_ARENA_ALIGN - 1));
    e->arena_bytes = bytes;
    ag_advise_huge_pages(e->arena, bytes);
    return AG_OK;
}

int ag_engine_prepare(ag_engine *e, int width, int height, ag_error *err) {
    if (e->planned_w == width && e->planned_h == height)
        return AG_OK;
    const ag_graph *g = &e->model->graph;
    int rc = check_size(e, width, height, err);
    if (rc == AG_OK)
        rc = ag_graph_shapes(g, width, height, e->shapes, err);
    if (rc)
        return rc;

    e->planned_w = e->planned_h = 0;
    e->buffer_count = 0;
    omp_set_num_threads(e->threads);
    if (e->options.backend == AG_BACKEND_ONEDNN) {
        size_t band = 0, scratch = 0;
        plan_geometry(e);
        rc = create_convs(e, &scratch, &band, err);
        if (rc)
            return rc;
        plan_onednn(e, band, scratch);
        cut_runs(e, band, scratch);
    } else {
        rc = ag_interpret_plan(e, err);
        if (rc)
            return rc;
    }
    size_t arena_bytes = ag_arena_plan(e->buffers, e->buffer_count);
    if (getenv("AG_PLAN_DEBUG"))
        for (int i = 0; i < e->buffer_count; i++)
            if (e->buffers[i].bytes > (1u << 20))
                fprintf(stderr, "plan: buffer %d %zu MB steps %d-%d at %zu MB\n", i,
                        e->buffers[i].bytes >> 20, e->buffers[i].first_step,
                        e->buffers[i].last_step, e->buffers[i].offset >> 20);
    if (e->measure_only) {
        e->arena_bytes = arena_bytes;
        return AG_OK;
    }
    rc = allocate_arena(e, arena_bytes, err);
    if (rc)
        return rc;
    if (e->options.backend == AG_BACKEND_ONEDNN)
        bind_onednn(e);
    e->planned_w = width, e->planned_h = height;
    return AG_OK;
}

/* ---- run: oneDNN ----------------------------------------------------------------------- */

/* The raw output of group gi's head. */
static void *y_map(ag_engine *e, int gi) {
    return e->arena + e->buffers[e->exec[gi].buffer].offset + e->exec[gi].offset;
}

/* Where conv group gi's band rows come from. */
static ag_band_source band_source(ag_engine *e, int gi, const ag_io *io) {
    const ag_group *gr = &e->groups[gi];
    const ag_group_exec *x = &e->exec[gi];
    ag_band_source s = {.bf16 = e->bf16,
                        .band_bf16 = gr->bf16_band,
                        .H = x->in.h,
                        .W = x->in.w,
                        .C = x->in.c,
                        .pad = node_pad(head_of(e, gi)),
                        .zero_pad = head_of(e, gi)->pad_mode == AG_PAD_ZERO,
                        .pre_slope = 1.0f,
                        .post_slope = 1.0f};
    s.kind = gr->kind;
    if (gr->kind == AG_BAND_IMAGE) {
        s.u8 = io->in_u8, s.f32 = io->in_f32, s.bands = io->bands;
    } else if (gr->kind == AG_BAND_CONCAT) {
        s.part_count = gr->part_count;
        for (int j = 0; j < gr->part_count; j++) {
            s.parts[j] = y_map(e, gr->parts[j]);
            s.part_c[j] = e->exec[gr->parts[j]].out.c;
        }
    } else if (gr->kind == AG_BAND_RESIZE) {
        s.a = y_map(e, gr->src);
        s.a_q = e->exec[gr->src].row_q;
        s.HI = e->exec[gr->src].out.h, s.WI = e->exec[gr->src].out.w;
        s.row_taps = x->row_taps, s.col_taps = x->col_taps;
    } else {
        const ag_group *src = &e->groups[gr->src];
        s.x = y_map(e, gr->src);
        s.x_q = e->exec[gr->src].row_q;
        s.affine = e->exec[gr->src].affine;
        if (!src->materialize) { /* its chain, applied here; else the affine is identity */
            s.residual = src->residual >= 0 ? y_map(e, src->residual) : NULL;
            s.residual_q = src->residual >= 0 ? e->exec[src->residual].row_q : NULL;
            s.pre_slope = src->pre_slope, s.post_slope = src->post_slope;
        }
    }
    return s;
}

/* The affine form of group gi's norm from statistics of its output (fp32 maps). */
static void channel_norm_affine(ag_engine *e, int gi) {
    const ag_group *gr = &e->groups[gi];
    const ag_node *norm = &e->model->graph.nodes[gr->norm];
    ag_group_exec *x = &e->exec[gi];
    int C = x->out.c;
    size_t N = (size_t)x->out.h * x->out.w;
    const float *y = y_map(e, gi);
    double mean[AG_MAP_MAX_CHANNELS], var[AG_MAP_MAX_CHANNELS];
    double mean_y[AG_MAP_MAX_CHANNELS], var_y[AG_MAP_MAX_CHANNELS];
    ag_channel_moments(mean, var, y, N, C, e->threads);
    if (norm->op == AG_OP_LADE)
        ag_lade_moments(mean_y, var_y, y, norm->weight, N, C, ag_engine_buffer(e, e->lade_id), 4096,
                        e->threads);
    double ys = x->y_scale; /* int8: the map is y / y_scale; the moments of y, in real units */
    for (int c = 0; c < C && ys != 1.0; c++) {
        mean[c] *= ys, var[c] *= ys * ys;
        if (norm->op == AG_OP_LADE)
            mean_y[c] *= ys, var_y[c] *= ys * ys;
    }
    for (int c = 0; c < C; c++) {
        double scale = 1.0 / sqrt(var[c] + (double)norm->eps), shift = 0.0;
        if (norm->op == AG_OP_LADE)
            scale *= sqrt(var_y[c] + (double)norm->eps), shift = mean_y[c];
        if (norm->gamma)
            scale *= (double)norm->gamma[c], shift *= (double)norm->gamma[c];
        if (norm->beta)
            shift += (double)norm->beta[c];
        x->affine.scale[c] = ys != 1.0 ? (float)(scale * ys) : (float)scale;
        x->affine.shift[c] = (float)(shift - mean[c] * scale);
    }
}

/* int8: the range slots a LayerNorm group's statistics pass or a q8 group's quantisation
 * fills (NULL: neither), reset. */
static float *range_begin(ag_engine *e, int gi, int layer_norm) {
    if (!e->int8 || !(layer_norm || e->groups[gi].q8))
        return NULL;
    int C = e->exec[gi].out.c;
    float *slots = ag_engine_buffer(e, e->range_id);
    for (int t = 0; t < e->threads; t++)
        for (int c = 0; c < C; c++)
            slots[2 * C * t + c] = INFINITY, slots[2 * C * t + C + c] = -INFINITY;
    return slots;
}

/* The slots' per-channel min/max over the threads into lo, hi (C each). */
static void range_combine(const ag_engine *e, int C, const float *slots, float *lo, float *hi) {
    for (int c = 0; c < C; c++) {
        lo[c] = INFINITY, hi[c] = -INFINITY;
        for (int t = 0; t < e->threads; t++) {
            lo[c] = fminf(lo[c], slots[2 * C * t + c]);
            hi[c] = fmaxf(hi[c], slots[2 * C * t + C + c]);
        }
    }
}

static float range_lrelu(float v, float slope) {
    return v < 0.0f ? v * slope : v;
}

/*
 * int8: group gi's value range per channel from its map's (the slots) once the affine is
 * known: the chain is monotonic per channel (slopes >= 0), so its ends map to the value's,
 * computed as the bands compute values; a residual adds its own bound. Exact without a
 * residual; the readers' ranges then need no pass over the map (source_range).
 */
static void range_end(ag_engine *e, int gi, const float *slots) {
    const ag_group *gr = &e->groups[gi];
    ag_group_exec *x = &e->exec[gi];
    const ag_group_exec *r = gr->residual >= 0 ? &e->exec[gr->residual] : NULL;
    int C = x->out.c;
    x->range_ok = slots && gr->pre_slope >= 0.0f && gr->post_slope >= 0.0f && (!r || r->range_ok);
    if (x->range_ok)
        range_combine(e, C, slots, x->lo, x->hi);
    for (int c = 0; c < C && x->range_ok; c++) {
        float lo = x->lo[c], hi = x->hi[c];
        float a = lo * x->affine.scale[c] + x->affine.shift[c];
        float b = hi * x->affine.scale[c] + x->affine.shift[c];
        float slope = x->affine.slope ? x->affine.slope[c] : gr->pre_slope;
        lo = range_lrelu(fminf(a, b), slope), hi = range_lrelu(fmaxf(a, b), slope);
        if (r)
            lo += r->lo[c], hi += r->hi[c];
        x->lo[c] = range_lrelu(lo, gr->post_slope), x->hi[c] = range_lrelu(hi, gr->post_slope);
    }
}

/* Apply group gi's chain to its output in place, for readers that need the value whole. */
static void materialize(ag_engine *e, int gi) {
    const ag_group *gr = &e->groups[gi];
    ag_group_exec *x = &e->exec[gi];
    if (gr->norm < 0 && gr->residual < 0 && gr->pre_slope == 1.0f && gr->prelu < 0 &&
        gr->post_slope == 1.0f && x->y_scale == 1.0f)
        return;
    void *y = y_map(e, gi);
    ag_pad none = {0, 0, 0, 0};
    if (gr->q8) { /* requantised row by row; the value's range exactly, on the way */
        float *slots = range_begin(e, gi, 1);
        ag_fused_materialize_u8(y, x->row_q, gr->residual >= 0 ? y_map(e, gr->residual) : NULL,
                                gr->residual >= 0 ? e->exec[gr->residual].row_q : NULL, x->affine,
                                gr->pre_slope, gr->post_slope, x->out.h, x->out.w, x->out.c,
                                ag_engine_buffer(e, e->q8_tmp_id), slots, e->threads);
        range_combine(e, x->out.c, slots, x->lo, x->hi);
        x->range_ok = 1;
    } else {
        ag_fused_norm_act_pad(y, y, gr->residual >= 0 ? y_map(e, gr->residual) : NULL,
                              elem_bytes(e, gi) == 2, x->affine, gr->pre_slope, gr->post_slope,
                              x->out.h, x->out.w, x->out.c, none, e->threads);
    }
    /* Readers now see a plain map. */
    for (int c = 0; c < x->out.c; c++)
        x->affine.scale[c] = 1.0f, x->affine.shift[c] = 0.0f;
    x->affine.slope = NULL;
}

/* int8: the range of conv gi's band values: its source's value range when known (padding and
 * a resize add no values beyond it), else a pass over the source. */
static void source_range(ag_engine *e, int gi, const ag_band_source *src, float *lo, float *hi) {
    int s = e->groups[gi].src;
    if (s < 0 || !e->exec[s].range_ok) {
        AG_ASSERT(s < 0 || !e->groups[s].q8); /* the pass reads fp32 maps only */
        ag_fused_range(src, lo, hi, e->threads);
        return;
    }
    *lo = INFINITY, *hi = -INFINITY;
    for (int c = 0; c < e->exec[s].out.c; c++)
        *lo = fminf(*lo, e->exec[s].lo[c]), *hi = fmaxf(*hi, e->exec[s].hi[c]);
}

/* A q8 conv's band of output rows [first, first + band_rows), in tmp (fp32): quantised into
 * the map row by row, with the statistics of rows >= new_first (the ones this band added). */
static void q8_store_band(ag_engine *e, int gi, const float *tmp, int first, int new_first,
                          int layer_norm, float *range) {
    ag_group_exec *x = &e->exec[gi];
    size_t out_row = (size_t)x->out.w * x->out.c;
    ag_stats_rows t = {
        layer_norm ? e->partials : NULL, NULL, 0, new_first, 0, out_row, range, x->out.c};
    ag_fused_quantize_rows(y_map(e, gi), x->row_q, tmp, first, x->band_rows, x->out.w, x->out.c, &t,
                           e->threads);
}

static int run_conv(ag_engine *e, int gi, const ag_io *io, void *scratch, ag_error *err) {
    const ag_node *head = head_of(e, gi);
    const ag_group *gr = &e->groups[gi];
    ag_group_exec *x = &e->exec[gi];
    int layer_norm = gr->norm >= 0 && e->model->graph.nodes[gr->norm].op == AG_OP_LAYER_NORM;
    size_t out_row = (size_t)x->out.w * x->out.c;
    uint8_t *y = y_map(e, gi);
    void *band = ag_engine_buffer(e, e->band_id);
    float *tmp = gr->q8 ? ag_engine_buffer(e, e->q8_tmp_id) : NULL;
    size_t y_elem = elem_bytes(e, gi);
    ag_band_source src = band_source(e, gi, io);
    ag_stats_rows pending = {
        e->partials, y, y_elem == 2, 0, 0, out_row, range_begin(e, gi, layer_norm), x->out.c};
    for (int i = 0; i < x->bands; i++) {
        int b = band_at(x, i), first = band_first_row(x, b), rows = x->band_rows;
        const void *in = gr->src >= 0 ? y_map(e, gr->src) : NULL;
        if (gr->banded) {
            ag_fused_band_stats(band, &src, first * head->stride,
                                (rows - 1) * head->stride + head->k, &pending, e->threads);
            pending.rows = 0;
            in = band;
        }
        ag_dnnl_conv_bind(x->conv, in, gr->q8 ? (void *)tmp : y + first * out_row * y_elem,
                          head->bias, e->weights + x->weight_offset, scratch);
        int rc = ag_dnnl_conv_run(x->conv, err);
        if (rc)
            return rc;
        if (gr->q8) {
            q8_store_band(e, gi, tmp, first, b * x->band_rows, layer_norm, pending.range);
        } else if (layer_norm) { /* the rows this band added: stats with the next band's input */
            pending.first = b * x->band_rows;
            pending.rows = first + rows - pending.first;
        }
    }
    if (pending.rows)
        ag_fused_band_stats(NULL, NULL, 0, 0, &pending, e->threads);
    if (layer_norm) {
        const ag_node *norm = &e->model->graph.nodes[gr->norm];
        ag_norm_affine_from_stats(x->affine, e->partials, x->out.h, out_row, norm->gamma,
                                  norm->beta, x->out.c, norm->eps);
    } else if (gr->norm >= 0 && e->model->graph.nodes[gr->norm].op != AG_OP_AFFINE) {
        channel_norm_affine(e, gi);
    }
    range_end(e, gi, pending.range);
    return AG_OK;
}

/* ---- run: int8 convs -------------------------------------------------------------------- */

/*
 * run_conv for an int8 group: the band is built as there but written as u8, quantised in
 * the same pass with this image's (scale, zero) of the source's range, and convolved into
 * dst = y / x_scale (f32).
 * y_scale = x_scale goes into the affine its readers apply: a LayerNorm's is scale-invariant
 * (its eps taken as eps / x_scale^2), the other norms' moments are rescaled, a plain chain
 * multiplies by it; materialising applies it, so whole-map readers see real units.
 */
static int run_conv_int8(ag_engine *e, int gi, const ag_io *io, void *scratch, ag_error *err) {
    const ag_node *head = head_of(e, gi);
    const ag_group *gr = &e->groups[gi];
    ag_group_exec *x = &e->exec[gi];
    const ag_graph *g = &e->model->graph;
    int layer_norm = gr->norm >= 0 && g->nodes[gr->norm].op == AG_OP_LAYER_NORM;
    size_t out_row = (size_t)x->out.w * x->out.c;
    uint8_t *y = y_map(e, gi);
    float *tmp = gr->q8 ? ag_engine_buffer(e, e->q8_tmp_id) : NULL;
    uint8_t *band_u8 = ag_engine_buffer(e, e->band_u8_id);
    ag_band_source src = band_source(e, gi, io);
    float lo, hi;
    source_range(e, gi, &src, &lo, &hi);
    ag_int8_quant q = ag_int8_quant_from_range(lo, hi);
    int in_rows = (x->band_rows - 1) * head->stride + head->k;
    ag_stats_rows pending = {e->partials, y, 0, 0, 0, out_row, range_begin(e, gi, layer_norm),
                             x->out.c};
    for (int i = 0; i < x->bands; i++) {
        int b = band_at(x, i), first = band_first_row(x, b), rows = x->band_rows;
        ag_fused_band_stats_u8(band_u8, q.x_scale, q.x_zero, &src, first * head->stride, in_rows,
                               &pending, e->threads);
        pending.rows = 0;
        ag_dnnl_int8_conv_bind(x->conv8, band_u8,
                               gr->q8 ? (void *)tmp : y + first * out_row * elem_bytes(e, gi),
                               e->weights + x->weight_offset, scratch);
        int rc = ag_dnnl_int8_conv_run(x->conv8, &q, head->bias, err);
        if (rc)
            return rc;
        if (gr->q8) {
            q8_store_band(e, gi, tmp, first, b * x->band_rows, layer_norm, pending.range);
        } else if (layer_norm) {
            pending.first = b * x->band_rows;
            pending.rows = first + rows - pending.first;
        }
    }
    if (pending.rows)
        ag_fused_band_stats(NULL, NULL, 0, 0, &pending, e->threads);
    x->y_scale = q.x_scale;
    if (layer_norm) {
        const ag_node *norm = &g->nodes[gr->norm];
        double xs = (double)q.x_scale;
        float eps = (float)((double)norm->eps / (xs * xs));
        ag_norm_affine_from_stats(x->affine, e->partials, x->out.h, out_row, norm->gamma,
                                  norm->beta, x->out.c, eps);
    } else if (gr->norm >= 0 && g->nodes[gr->norm].op != AG_OP_AFFINE) {
        channel_norm_affine(e, gi);
    } else { /* none, or a constant affine (set by init_affines) */
        for (int c = 0; c < x->out.c; c++)
            x->affine.scale[c] *= q.x_scale;
    }
    range_end(e, gi, pending.range);
    return AG_OK;
}

/* Quantise every int8 group's weights once, per output channel, into one allocation. */
static int quantize_weights(ag_engine *e, ag_error *err) {
    size_t total = 0;
    for (int gi = 0; gi < e->group_count; gi++) {
        const ag_node *h = head_of(e, gi);
        if (!e->groups[gi].int8)
            continue;
        size_t n = (size_t)h->out_c * (h->in_c / h->groups) * h->k * h->k;
        total += ((n + 63) & ~(size_t)63) + sizeof(float) * (size_t)h->out_c;
    }
    if (!total)
        return AG_OK;
    uint8_t *p = e->int8_block = ag_malloc(total);
    if (!p)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for int8 weights");
    int qmax = ag_int8_weight_max();
    for (int gi = 0; gi < e->group_count; gi++) {
        const ag_node *h = head_of(e, gi);
        ag_group_exec *x = &e->exec[gi];
        if (!e->groups[gi].int8)
            continue;
        size_t per_oc = (size_t)(h->in_c / h->groups) * h->k * h->k;
        size_t n = (size_t)h->out_c * per_oc;
        x->w_scale = (float *)p;
        x->w_s8 = (int8_t *)(p + sizeof(float) * (size_t)h->out_c);
        p += sizeof(float) * (size_t)h->out_c + ((n + 63) & ~(size_t)63);
        ag_int8_quantize_weights(x->w_s8, x->w_scale, h->weight, h->out_c, per_oc, qmax);
    }
    return AG_OK;
}

/* A node the bands do not absorb, on whole fp32 maps of materialised groups. */
static void run_generic(ag_engine *e, int gi) {
    const ag_graph *g = &e->model->graph;
    const ag_node *head = head_of(e, gi);
    const float *in[AG_NODE_MAX_SRC] = {NULL};
    for (int j = 0; j < AG_NODE_MAX_SRC; j++) /* a resize's src[1]: its size only */
        if (reads_src(head, j) && head->src[j] > 0) {
            int src = -1;
            for (int h = gi - 1; h >= 0 && src < 0; h--)
                if (e->groups[h].tail == head->src[j])
                    src = h;
            AG_ASSERT(src >= 0);
            in[j] = y_map(e, src);
        }
    int act = e->groups[gi].act;
    ag_node_fast fast = {e->exec[gi].mm, e->exec[gi].wino, e->exec[gi].mm8,
                         act >= 0 ? &g->nodes[act] : NULL};
    ag_node_run(head, e->shapes, e->groups[gi].head, in, y_map(e, gi),
                e->lade_id >= 0 ? ag_engine_buffer(e, e->lade_id) : NULL, &fast, e->resize,
                e->threads);
}

/* Every step; the outputs are then the output groups' (materialised, fp32) maps. */
static int run_steps(ag_engine *e, const ag_io *io, ag_error *err) {
    void *scratch = ag_engine_buffer(e, e->scratch_id);
    init_affines(e);
    e->profile_runs += e->profile_ms != NULL;
    for (int gi = 0; gi < e->group_count; gi++) {
        double start = e->profile_ms ? omp_get_wtime() : 0.0;
        if (head_of(e, gi)->op == AG_OP_CONV) {
            int rc = e->groups[gi].int8 ? run_conv_int8(e, gi, io, scratch, err)
                                        : run_conv(e, gi, io, scratch, err);
            if (rc)
                return rc;
        } else {
            run_generic(e, gi);
        }
        if (e->groups[gi].materialize)
            materialize(e, gi);
        if (e->profile_ms) {
            double ms = (omp_get_wtime() - start) * 1000.0;
            e->profile_ms[head_of(e, gi)->op] += ms;
            e->profile_steps[head_of(e, gi)->op]++;
            if (e->profile_group_ms && e->profile_runs > 1) /* the first run touches memory */
                e->profile_group_ms[gi] += ms;
        }
    }
    return AG_OK;
}

/* AG_PROFILE=2's lines: each step's time per run after the first and its head's rate
 * (tuning only). */
static void print_group_profile(const ag_engine *e) {
    int runs = e->profile_runs > 1 ? e->profile_runs - 1 : 1;
    for (int gi = 0; gi < e->group_count; gi++) {
        const ag_node *n = head_of(e, gi);
        const ag_op_desc *d = ag_op_desc_of(n->op);
        ag_shape in[AG_NODE_MAX_SRC] = {{0, 0, 0}}, out = e->shapes[e->groups[gi].head];
        for (int j = 0; j < AG_NODE_MAX_SRC && n->src[j] >= 0; j++)
            in[j] = e->shapes[n->src[j]];
        double flop = d->flops ? d->flops(n, in, out) : 0.0;
        double ms = e->profile_group_ms[gi] / runs;
        fprintf(stderr,
                "step %4d %-10s k%d s%d %4dx%-4d %4d -> %4dx%-4d %4d %8.2f ms %6.1f GFLOP/s\n", gi,
                d->name, n->k, n->stride, in[0].w, in[0].h, in[0].c, out.w, out.h, out.c, ms,
                ms > 0 ? flop / ms / 1e6 : 0.0);
    }
}

/* AG_PROFILE's table: each op's share of the steps' time. */
static void print_profile(const ag_engine *e) {
    double total = 0.0;
    for (int op = 0; op < AG_OP_COUNT; op++)
        total += e->profile_ms[op];
    for (int op = 0; op < AG_OP_COUNT; op++)
        if (e->profile_steps[op])
            fprintf(stderr, "profile: %-14s %6d steps %10.1f ms %5.1f%%\n", ag_op_name(op),
                    e->profile_steps[op], e->profile_ms[op],
                    total > 0 ? 100.0 * e->profile_ms[op] / total : 0.0);
}

static int run_onednn(ag_engine *e, const ag_io *io, ag_error *err) {
    int rc = run_steps(e, io, err);
    if (rc)
        return rc;
    const ag_group_exec *x = &e->exec[e->output_group];
    ag_fused_output(io->out_f32, io->out_u8, io->bands, y_map(e, e->output_group), e->output_tanh,
                    x->out.h, x->out.w, e->threads);
    return AG_OK;
}

/* ---- public API ------------------------------------------------------------------------ */

int ag_engine_run_io(ag_engine *e, const ag_io *io, int width, int height, ag_error *err) {
    int rc = ag_engine_prepare(e, width, height, err);
    if (rc)
        return rc;
    ag_shape out = e->shapes[e->model->graph.outputs[0]];
    if (out.h != height || out.w != width || out.c != 3)
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "%s gives a %dx%dx%d output for a %dx%d image, not an image of its "
                            "size",
                            e->model->info.name, out.w, out.h, out.c, width, height);
    omp_set_num_threads(e->threads);
    if (e->options.backend == AG_BACKEND_REFERENCE) {
        ag_interpret_run(e, io);
        return AG_OK;
    }
    return run_onednn(e, io, err);
}

int ag_engine_run_raw(ag_engine *e, const float *in, int width, int height, float *const *outs,
                      ag_error *err) {
    int rc = ag_engine_prepare(e, width, height, err);
    if (rc)
        return rc;
    omp_set_num_threads(e->threads);
    ag_io io = {.in_f32 = in, .bands = 3};
    const ag_graph *g = &e->model->graph;
    if (e->options.backend == AG_BACKEND_REFERENCE)
        ag_interpret_steps(e, &io);
    else if ((rc = run_steps(e, &io, err)) != AG_OK)
        return rc;
    for (int o = 0; o < g->output_count; o++) {
        ag_shape s = e->shapes[g->outputs[o]];
        size_t n = (size_t)s.h * s.w * s.c;
        const float *src = e->options.backend == AG_BACKEND_REFERENCE
                               ? ag_engine_buffer(e, e->node_buffer[g->outputs[o]])
                               : y_map(e, e->output_groups[o]);
        for (size_t i = 0; i < n; i++)
            outs[o][i] = o == 0 && e->output_tanh && e->options.backend != AG_BACKEND_REFERENCE
                             ? tanhf(src[i])
                             : src[i];
    }
    return AG_OK;
}

int ag_engine_output_shape(const ag_engine *e, int index, int *h, int *w, int *c) {
    const ag_graph *g = &e->model->graph;
    if (index < 0 || index >= g->output_count || !e->planned_w)
        return -1;
    ag_shape s = e->shapes[g->outputs[index]];
    *h = s.h, *w = s.w, *c = s.c;
    return g->output_count;
}

int ag_engine_run_f32(ag_engine *e, const float *in, int width, int height, float *out,
                      ag_error *err) {
    ag_io io = {.in_f32 = in, .out_f32 = out, .bands = 3};
    return ag_engine_run_io(e, &io, width, height, err);
}

static int engine_alloc(ag_engine *e, ag_error *err) {
    int n = e->model->graph.count;
    e->buffer_capacity = 3 * n + 16; /* int8: the row pairs of each q8 map too */
    e->shapes = ag_calloc((size_t)n, sizeof *e->shapes);
    e->exec = ag_calloc((size_t)n, sizeof *e->exec);
    e->node_buffer = ag_calloc((size_t)n, sizeof *e->node_buffer);
    e->buffers = ag_calloc((size_t)e->buffer_capacity, sizeof *e->buffers);
    if (!e->shapes || !e->exec || !e->node_buffer || !e->buffers)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    return AG_OK;
}

/* A StyleGAN graph: its bf16 is the modulated convs' products (e->gemm_bf16). */
static int has_modconv(const ag_graph *g) {
    for (int i = 0; i < g->count; i++)
        if (g->nodes[i].op == AG_OP_MODCONV)
            return 1;
    return 0;
}

int ag_engine_create(const ag_model *model, const ag_engine_options *options, ag_engine **out,
                     ag_error *err) {
    *out = NULL;
    ag_engine_options defaults = {0}, resolved;
    const ag_engine_options *o = options ? options : &defaults;
    if (o->precision == AG_PRECISION_AUTO) { /* front ends resolve it first; this is a net */
        ag_precision_choice choice;
        if (ag_precision_resolve(o->precision, o->backend, NULL, &choice) != 0)
            return ag_error_set(err, AG_E_UNSUPPORTED, "%s", choice.note);
        resolved = *o;
        resolved.precision = choice.precision;
        o = &resolved;
    } else if (o->backend == AG_BACKEND_ONEDNN) { /* an explicit one this CPU cannot run */
        ag_precision_choice choice;
        if (ag_precision_resolve(o->precision, o->backend, NULL, &choice) == AG_E_UNSUPPORTED)
            return ag_error_set(err, AG_E_UNSUPPORTED, "%s", choice.note);
    }
    if (o->precision == AG_PRECISION_INT8 && o->backend == AG_BACKEND_REFERENCE)
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "the reference backend runs fp32 only; int8 needs --backend onednn");
    if (o->precision == AG_PRECISION_BF16 && o->backend == AG_BACKEND_REFERENCE)
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "the reference backend runs fp32 only; bf16 needs --backend onednn");
    if (o->backend != AG_BACKEND_ONEDNN && o->backend != AG_BACKEND_REFERENCE)
        return ag_error_set(err, AG_E_ARG, "unknown backend %d", (int)o->backend);
    if (model->fp32_dropped &&
        (o->precision != AG_PRECISION_BF16 || o->backend != AG_BACKEND_ONEDNN))
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "model %s keeps its weights in bf16 only (it was prepared so): "
                            "it runs with --precision bf16 on the onednn backend",
                            model->info.name);
    ag_engine *e = ag_calloc(1, sizeof *e);
    if (!e)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    e->model = model;
    e->options = *o;
    e->threads = o->threads > 0 ? o->threads : ag_cpu_count();
    e->band_bytes_target = AG_BAND_BYTES;
    const char *band_env = getenv("AG_BAND_BYTES"); /* for tuning runs only */
    if (band_env && atol(band_env) > 0)
        e->band_bytes_target = (size_t)atol(band_env);
    e->resize = o->resize;
    e->gemm_bf16 = o->precision == AG_PRECISION_BF16 && has_modconv(&model->graph);
    e->bf16 = o->precision == AG_PRECISION_BF16 && !e->gemm_bf16;
    e->gemm_int8 = o->precision == AG_PRECISION_INT8 && has_modconv(&model->graph);
    e->int8 = o->precision == AG_PRECISION_INT8 && !e->gemm_int8;
    e->band_u8_id = e->range_id = e->q8_tmp_id = -1;
    const char *profile = getenv("AG_PROFILE"); /* for tuning runs only */
    if (profile && atoi(profile) > 0) {
        e->profile_ms = ag_calloc(AG_OP_COUNT, sizeof *e->profile_ms);
        e->profile_steps = ag_calloc(AG_OP_COUNT, sizeof *e->profile_steps);
        if (atoi(profile) > 1)
            e->profile_group_ms = ag_calloc(AG_GRAPH_MAX_NODES, sizeof *e->profile_group_ms);
    }
    int rc = engine_alloc(e, err);
    if (rc == AG_OK && o->backend == AG_BACKEND_ONEDNN)
        rc = lower_graph(e, err);
    if (rc == AG_OK && e->int8)
        rc = quantize_weights(e, err);
    if (rc == AG_OK && o->backend == AG_BACKEND_ONEDNN)
        rc = ag_dnnl_create(&e->dnnl, err);
    if (rc == AG_OK && e->gemm_bf16)
        rc = ag_model_bf16_weights(model, err);
    if (rc) {
        ag_engine_destroy(e);
        return rc;
    }
    *out = e;
    return AG_OK;
}

void ag_engine_destroy(ag_engine *e) {
    if (!e)
        return;
    if (e->profile_group_ms && e->profile_runs > 1)
        print_group_profile(e);
    if (e->profile_ms && e->profile_steps)
        print_profile(e);
    ag_free(e->profile_group_ms);
    ag_free(e->profile_ms);
    ag_free(e->profile_steps);
    destroy_convs(e);
    ag_dnnl_destroy(e->dnnl);
    ag_free(e->weights_block);
    ag_free(e->int8_block);
    ag_free(e->arena_block);
    ag_free(e->groups);
    ag_free(e->affine_block);
    ag_free(e->shapes);
    ag_free(e->exec);
    ag_free(e->node_buffer);
    ag_free(e->buffers);
    ag_free(e);
}

void ag_engine_release(ag_engine *e) {
    if (!e)
        return;
    destroy_convs(e);
    ag_free(e->weights_block);
    e->weights_block = NULL;
    e->weights = NULL;
    ag_free(e->arena_block);
    e->arena = e->arena_block = NULL;
    e->arena_bytes = 0;
    e->planned_w = e->planned_h = 0;
}

size_t ag_engine_arena_bytes(const ag_engine *e) {
    return e->arena_bytes;
}

/* What an engine would plan for width x height: its arena and its prepared weights. */
static void measure(const ag_model *model, const ag_engine_options *options, int width, int height,
                    size_t *arena, size_t *prepared) {
    ag_engine *e;
    ag_error err;
    *arena = *prepared = 0;
    if (ag_engine_create(model, options, &e, &err) != AG_OK)
        return;
    e->measure_only = 1; /* plan, but allocate neither the arena nor prepared weights */
    if (ag_engine_prepare(e, width, height, &err) == AG_OK)
        *arena = e->arena_bytes, *prepared = e->prepared_bytes;
    ag_engine_destroy(e);
}

size_t ag_engine_arena_bytes_for(const ag_model *model, const ag_engine_options *options, int width,
                                 int height) {
    size_t arena, prepared;
    measure(model, options, width, height, &arena, &prepared);
    return arena;
}

size_t ag_engine_prepared_bytes_for(const ag_model *model, const ag_engine_options *options,
                                    int width, int height) {
    size_t arena, prepared;
    measure(model, options, width, height, &arena, &prepared);
    return prepared;
}

double ag_model_flop(const ag_model *model, int width, int height) {
    return ag_graph_flop(&model->graph, width, height);
}
