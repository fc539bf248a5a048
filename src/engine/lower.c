/*
 * lower.c - the lowering, once per model: the graph's nodes into groups (state.h), each a
 * producing node and the per-channel chain its readers apply on the fly; where each conv
 * reads its band from, which values are materialised, liveness, and the int8 decisions
 * (which convs run u8 x s8, which maps are stored u8).
 */
#include "state.h"

#include "../util/util_internal.h"

#include <math.h>
#include <string.h>

/* The op table's fusion class of node n's op. */
static ag_fusion fusion_of(const ag_node *n) {
    return ag_op_desc_of(n->op)->fusion;
}

static int is_norm(const ag_node *n) {
    return fusion_of(n) == AG_FUSE_NORM;
}

/* Whether node n reads the data of its input j (a resize's `like` gives only a size). */
int ag_node_reads_src(const ag_node *n, int j) {
    return n->src[j] >= 0 && !(ag_op_desc_of(n->op)->size_only & (1u << j));
}

typedef struct lowering {
    const ag_graph *g;
    int consumers[AG_GRAPH_MAX_NODES];
    int group_of[AG_GRAPH_MAX_NODES]; /* group whose chain holds the node; -1: none */
    int virtual_resize[AG_GRAPH_MAX_NODES];
    int virtual_concat[AG_GRAPH_MAX_NODES];
    int absorbed[AG_GRAPH_MAX_NODES]; /* joined to a group's chain ahead of its turn */
    int splice[AG_GRAPH_MAX_NODES];   /* a partial conv's concat: 1 + the group it joins */
} lowering;

/* Each group's alpha_only: its value is read, directly or through other such values, only
 * as the scaled term (src[0]) of run-time alpha add_scaled nodes. Nodes come after their
 * sources, so one backward pass sees every reader of a node before the node. */
static void mark_alpha_only(ag_engine *e, const lowering *lw) {
    const ag_graph *g = lw->g;
    unsigned char *needed = ag_calloc((size_t)g->count, 1), *only = ag_calloc((size_t)g->count, 1);
    for (int o = 0; needed && only && o < g->output_count; o++)
        needed[g->outputs[o]] = 1;
    for (int i = g->count - 1; needed && only && i >= 1; i--) {
        const ag_node *n = &g->nodes[i];
        only[i] = lw->consumers[i] > 0 && !needed[i];
        for (int j = 0; j < AG_NODE_MAX_SRC; j++)
            if (ag_node_reads_src(n, j) && !only[i] &&
                !(n->op == AG_OP_ADD_SCALED && n->runtime_alpha && j == 0))
                needed[n->src[j]] = 1;
    }
    for (int gi = 0; needed && only && gi < e->group_count; gi++)
        e->groups[gi].alpha_only = only[e->groups[gi].tail];
    ag_free(needed);
    ag_free(only);
}

static void count_consumers(lowering *lw) {
    const ag_graph *g = lw->g;
    memset(lw->consumers, 0, sizeof lw->consumers);
    /* A resize's second input gives only its size: no reader of its data. */
    for (int i = 0; i < g->count; i++)
        for (int j = 0; j < AG_NODE_MAX_SRC; j++)
            if (ag_node_reads_src(&g->nodes[i], j))
                lw->consumers[g->nodes[i].src[j]]++;
    for (int o = 0; o < g->output_count; o++)
        lw->consumers[g->outputs[o]]++;
}

/* The group whose value (chain tail) is node x, -1 if x is no group's value; a spliced
 * group's head is its value until its partial conv has run. */
static int group_valued(const ag_engine *e, const lowering *lw, int x) {
    int gi = x >= 0 ? lw->group_of[x] : -1;
    return gi >= 0 &&
                   (e->groups[gi].tail == x || (e->groups[gi].spliced && e->groups[gi].head == x))
               ? gi
               : -1;
}

/* The chain gate node n is: Mish, or SiLU (a sigmoid_gate of a map by itself, shift 0). */
static ag_gate gate_of(const ag_node *n) {
    if (n->op == AG_OP_MISH)
        return AG_GATE_MISH;
    return n->op == AG_OP_SIGMOID_GATE && n->src[0] == n->src[1] && n->alpha == 0.0f ? AG_GATE_SILU
                                                                                     : AG_GATE_NONE;
}

/* Whether node n can join the chain of group gi as its next element. */
static int can_extend(const ag_engine *e, const lowering *lw, int gi, const ag_node *n, int other) {
    const ag_group *gr = &e->groups[gi];
    const ag_node *head = &lw->g->nodes[gr->head];
    int readers = lw->consumers[gr->tail] - (gate_of(n) == AG_GATE_SILU); /* x read twice */
    if (fusion_of(head) != AG_FUSE_CONV || readers != 1)
        return 0;
    int pre_free = gr->pre_slope == 1.0f && gr->prelu < 0 && !gr->gate;
    if (is_norm(n))
        return gr->norm < 0 && pre_free && gr->residual < 0;
    if (fusion_of(n) == AG_FUSE_PRELU) /* per-channel slopes: before the residual add only */
        return gr->residual < 0 && pre_free;
    if (fusion_of(n) == AG_FUSE_ACT)
        return gr->residual < 0 ? pre_free : gr->post_slope == 1.0f;
    /* fp32 maps only (int8's ranges know LeakyReLUs): fp32, and a StyleGAN graph's bf16
     * (CodeFormer's default: the reader applies it as it converts the band to bf16) */
    if (fusion_of(n) == AG_FUSE_GATE)
        return gate_of(n) && (e->mode == AG_MODE_FP32 || ag_mode_modconv_bf16(e)) &&
               gr->residual < 0 && pre_free;
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
    } else if (fusion_of(n) == AG_FUSE_GATE) {
        gr->gate = gate_of(n);
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

/* The only reader of node i, -1 if it has several or none. */
static int only_reader(const lowering *lw, int i);

/*
 * Whether node i starts an attention the chain of a conv group applies in its residual
 * add's place (fp32 engines, as the activation gates): RealPLKSR's r sigmoid(z) =
 * sigmoid_gate(r, z, 0) at i, or SPAN's (z + r)(sigmoid(z) - 1/2) = sigmoid_gate(add(z, r),
 * z, 0.5), i the add. z is the conv group *gi's value, r the earlier group's value *other,
 * *last the node whose value the chain then gives. Returns the gate, AG_GATE_NONE if none.
 */
static ag_gate attention_at(const ag_engine *e, const lowering *lw, int i, int *gi, int *other,
                            int *last) {
    const ag_graph *g = lw->g;
    const ag_node *n = &g->nodes[i];
    ag_gate gate = AG_GATE_NONE;
    int z = -1;
    *other = *last = -1;
    if (e->mode != AG_MODE_FP32)
        return AG_GATE_NONE;
    if (n->op == AG_OP_SIGMOID_GATE && n->alpha == 0.0f && n->src[0] != n->src[1] &&
        lw->consumers[n->src[1]] == 1) {
        gate = AG_GATE_SCALE_RESIDUAL, z = n->src[1], *other = n->src[0], *last = i;
    } else if (n->op == AG_OP_ADD && (*last = only_reader(lw, i)) >= 0) {
        const ag_node *att = &g->nodes[*last];
        for (int j = 0; j < 2 && z < 0; j++)
            if (att->op == AG_OP_SIGMOID_GATE && att->alpha == 0.5f && att->src[0] == i &&
                att->src[1] == n->src[j] && lw->consumers[n->src[j]] == 2)
                gate = AG_GATE_SPAN_ATTENTION, z = n->src[j], *other = n->src[1 - j];
    }
    *gi = z > 0 ? group_valued(e, lw, z) : -1;
    if (*gi < 0 || *other <= 0)
        return AG_GATE_NONE;
    const ag_group *gr = &e->groups[*gi];
    int r = group_valued(e, lw, *other);
    int pre_free = gr->pre_slope == 1.0f && gr->prelu < 0 && !gr->gate;
    if (fusion_of(&g->nodes[gr->head]) != AG_FUSE_CONV || !pre_free || gr->residual >= 0 || r < 0 ||
        r >= *gi)
        return AG_GATE_NONE;
    return gate;
}

static void extend_attention(ag_engine *e, lowering *lw, int gi, ag_gate gate, int i, int other,
                             int last) {
    ag_group *gr = &e->groups[gi];
    gr->residual = group_valued(e, lw, other);
    gr->gate = gate;
    gr->tail = last;
    lw->group_of[i] = lw->group_of[last] = gi;
    lw->absorbed[last] = last != i;
}

/*
 * Whether node i is the tail slice of RealPLKSR's partial conv, concat(conv(slice(y, 0, p)),
 * slice(y, p, C)) (fp32 engines): y a conv group's bare value (no chain) read only by the two
 * slices, the conv read only by the concat. Then the concat is y's map itself once the conv
 * has written its output over y's first p channels: no tail copy, no concat pass (marked
 * in lw->splice; the concat node joins y's group when it is reached).
 */
static int splice_at(const ag_engine *e, lowering *lw, int i) {
    const ag_graph *g = lw->g;
    const ag_node *tail = &g->nodes[i];
    int y = tail->src[0], cat = only_reader(lw, i);
    int gy = y > 0 ? group_valued(e, lw, y) : -1;
    if (e->mode != AG_MODE_FP32 || tail->op != AG_OP_SLICE || cat < 0 || gy < 0 ||
        e->groups[gy].head != y || fusion_of(&g->nodes[y]) != AG_FUSE_CONV ||
        lw->consumers[y] != 2 || !(tail->c1 == 0 || tail->c1 == g->nodes[y].out_c))
        return 0;
    const ag_node *c = &g->nodes[cat];
    int conv = c->src[0];
    if (c->op != AG_OP_CONCAT || c->src[1] != i || c->src[2] >= 0 || conv <= i ||
        only_reader(lw, conv) != cat || g->nodes[conv].op != AG_OP_CONV)
        return 0;
    const ag_node *head = &g->nodes[g->nodes[conv].src[0]];
    if (head->op != AG_OP_SLICE || head->src[0] != y || head->c0 != 0 || head->c1 != tail->c0 ||
        tail->c0 <= 0 || g->nodes[conv].out_c != tail->c0)
        return 0;
    lw->splice[cat] = 1 + gy;
    return 1;
}

/* The concat node i joins the group y it was spliced into; its conv writes into y's map. */
static void splice(ag_engine *e, lowering *lw, int i) {
    int gy = lw->splice[i] - 1, gc = group_valued(e, lw, lw->g->nodes[i].src[0]);
    AG_ASSERT(gc > gy && e->groups[gc].tail == e->groups[gc].head);
    e->groups[gc].into = gy;
    e->groups[gy].spliced = 1;
    e->groups[gy].tail = i;
    lw->group_of[i] = gy;
}

static int new_group(ag_engine *e, lowering *lw, int node) {
    ag_group *gr = &e->groups[e->group_count];
    memset(gr, 0, sizeof *gr);
    gr->head = gr->tail = node;
    gr->norm = gr->residual = gr->src = gr->resize = gr->prelu = gr->act = gr->into = -1;
    gr->pre_slope = gr->post_slope = 1.0f;
    lw->group_of[node] = e->group_count;
    return e->group_count++;
}

/* Whether node n (an activation) is applied by group gi's head as it writes, its map never
 * read raw: a bias_lrelu by the noise injection it alone reads (GPEN's and GFPGAN's
 * StyledConvs), a SiLU by its GroupNorm, SPAN's attention by its add (int8 engines). */
static int absorbable_act(const ag_engine *e, const lowering *lw, int gi, const ag_node *n) {
    const ag_group *gr = &e->groups[gi];
    ag_op head = lw->g->nodes[gr->head].op;
    if (gr->tail != gr->head)
        return 0;
    if (n->op == AG_OP_BIAS_LRELU)
        return head == AG_OP_NOISE && lw->consumers[gr->tail] == 1;
    /* a GroupNorm's only reader its SiLU (CodeFormer's ResBlocks): applied as it writes */
    if (head == AG_OP_GROUP_NORM)
        return gate_of(n) == AG_GATE_SILU && lw->consumers[gr->tail] == 2;
    /* int8 engines: an add's only reader SPAN's attention on it, (z + r)(sigmoid(z) - 1/2),
     * z one of its terms: one pass (kind_gate.c; fp32 chains apply it, attention_at) */
    const ag_node *add = &lw->g->nodes[gr->head];
    return head == AG_OP_ADD && ag_mode_int8_maps(e) && lw->consumers[gr->tail] == 1 &&
           n->op == AG_OP_SIGMOID_GATE && n->alpha == 0.5f && n->src[0] == gr->head &&
           (n->src[1] == add->src[0] || n->src[1] == add->src[1]);
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
    /* int8: the parts stay fp32 maps (decide_q8), quantised into the u8 band as gathered */
    if (n->op != AG_OP_CONCAT || !(ag_mode_fp32_bands(e) || ag_mode_int8_maps(e)))
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
 * group's value (ag_engine_lower refuses the model then: a lowering bug, not a model's). */
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

/* A small 3x3 conv Winograd will run, not narrowing: it reads a band even where its source
 * is materialised, as Winograd's blocked copies of an in-cache band beat oneDNN's direct
 * conv on the whole map (at two threads: SPAN's 48 -> 48 1.2x, RealPLKSR's attention 64 ->
 * 64 1.3x). Narrowing ones (RRDBNet's 64 -> 32) were 10% slower so; wider ones 1.06-1.1x
 * faster (GFPGAN's, RealPLKSR's 64 -> 128) for Winograd's weights, 4x the direct ones (+59
 * MB GFPGAN, +44 MB RealPLKSR), so they stay direct, for the small hosts. */
static int winograd_on_band(const ag_engine *e, const ag_node *head) {
    return ag_mode_conv_winograd(e, head) && head->k == 3 && head->stride == 1 &&
           head->groups == 1 && head->in_c % 16 == 0 && head->out_c >= head->in_c &&
           head->in_c * head->out_c <= 64 * 64;
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
        if (ag_mode_conv_int8(e, head))
            gr->int8 = gr->banded = 1;
        if (ag_mode_int8_maps(
                e)) /* its source may be a u8 map (decide_q8), which only bands read */
            gr->banded = 1;
        /* StyleGAN graphs in bf16: every plain conv's products bf16 too, on a bf16 band of
         * its fp32 source (the band is where the conversion costs no extra pass) */
        if (ag_mode_conv_bf16_band(e, head))
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
    for (int gi = 0; gi < e->group_count && ag_mode_fp32_bands(e); gi++) {
        ag_group *gr = &e->groups[gi];
        const ag_node *head = &g->nodes[gr->head];
        if (fusion_of(head) == AG_FUSE_CONV && gr->kind == AG_BAND_RAW && gr->banded &&
            head->pad_mode == AG_PAD_ZERO && head->out_c > AG_NARROW_OC && gr->src >= 0 &&
            e->groups[gr->src].materialize && !winograd_on_band(e, head))
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
    size_t total = 0, per_c = ag_mode_int8_maps(e) ? 4 : 2;
    for (int gi = 0; gi < e->group_count; gi++)
        total += per_c * (size_t)g->nodes[e->groups[gi].head].out_c;
    float *cursor = e->affine_block = ag_malloc(sizeof(float) * (total ? total : 1));
    if (!cursor)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    for (int gi = 0; gi < e->group_count; gi++) {
        int c = g->nodes[e->groups[gi].head].out_c;
        ag_group_exec *x = &e->exec[gi];
        x->affine.scale = cursor, x->affine.shift = cursor + c;
        if (ag_mode_int8_maps(e))
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
        e->groups[gi].q8 = ag_mode_int8_maps(e) && g->nodes[e->groups[gi].head].op == AG_OP_CONV &&
                           !e->groups[gi].f32 && !e->groups[gi].gate &&
                           e->groups[gi].pre_slope >= 0.0f && e->groups[gi].post_slope >= 0.0f;
    for (int h = 0; h < n; h++) {
        const ag_node *head = &g->nodes[e->groups[h].head];
        for (int j = 0; j < AG_NODE_MAX_SRC && fusion_of(head) != AG_FUSE_CONV; j++) {
            int src = head->src[j] > 0 ? group_valued(e, lw, head->src[j]) : -1;
            if (src >= 0)
                e->groups[src].q8 = 0;
        }
        for (int j = 0; j < e->groups[h].part_count; j++) /* a concat band reads fp32 parts */
            e->groups[e->groups[h].parts[j]].q8 = 0;
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

int ag_engine_lower(ag_engine *e, ag_error *err) {
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
        if (lw->absorbed[i])
            continue;
        if (lw->splice[i]) {
            splice(e, lw, i);
            continue;
        }
        if (splice_at(e, lw, i)) { /* the tail slice: no step of its own */
            lw->absorbed[i] = 1;
            continue;
        }
        int att_group = -1, att_other = -1, att_last = -1;
        ag_gate att = attention_at(e, lw, i, &att_group, &att_other, &att_last);
        if (att) {
            extend_attention(e, lw, att_group, att, i, att_other, att_last);
        } else if (i == out && fusion_of(n) == AG_FUSE_TANH && ga >= 0 && lw->consumers[i] == 1) {
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
    mark_alpha_only(e, lw);
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
            if (g->nodes[gr->head].src[j] == 0 && ag_node_reads_src(&g->nodes[gr->head], j))
                rc =
                    ag_error_set(err, AG_E_UNSUPPORTED, "node \"%s\" (%s) reads the image directly",
                                 g->nodes[gr->head].name, ag_op_name(g->nodes[gr->head].op));
        if (ag_mode_bf16_maps(e) && gr->f32 && g->nodes[gr->head].op != AG_OP_CONV)
            rc = ag_error_set(err, AG_E_UNSUPPORTED,
                              "bf16 needs a graph of convolutions and LayerNorms; node \"%s\" "
                              "(%s) runs in fp32 only (use --precision fp32)",
                              g->nodes[gr->norm >= 0 ? gr->norm : gr->head].name,
                              ag_op_name(g->nodes[gr->norm >= 0 ? gr->norm : gr->head].op));
    }
    ag_free(lw);
    return rc == AG_OK ? alloc_affines(e, err) : rc;
}
