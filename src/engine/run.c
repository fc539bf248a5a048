/*
 * run.c - running a plan: each group's step by its kind (kind.h), the band sources the conv
 * kinds build their input rows from, the norms' affines from statistics, int8's value
 * ranges, and materialising a chain for readers that need the value whole. Nothing here
 * allocates.
 */
#include "kind.h"

#include "../util/util_internal.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

static ag_pad node_pad(const ag_node *n) {
    ag_pad p = {n->pad[0], n->pad[1], n->pad[2], n->pad[3]};
    return p;
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
        x->affine.gate = gr->gate;
        for (int c = 0; c < x->out.c; c++) {
            x->affine.scale[c] = constant && norm->gamma ? norm->gamma[c] : 1.0f;
            x->affine.shift[c] = constant && norm->beta ? norm->beta[c] : 0.0f;
        }
    }
}

/* Where conv group gi's band rows come from. */
ag_band_source ag_engine_band_source(ag_engine *e, int gi, const ag_io *io) {
    const ag_group *gr = &e->groups[gi];
    const ag_group_exec *x = &e->exec[gi];
    ag_band_source s = {.bf16 = ag_mode_bf16_maps(e),
                        .band_bf16 = gr->bf16_band,
                        .H = x->in.h,
                        .W = x->in.w,
                        .C = x->in.c,
                        .pad = node_pad(ag_engine_head(e, gi)),
                        .zero_pad = ag_engine_head(e, gi)->pad_mode == AG_PAD_ZERO,
                        .pre_slope = 1.0f,
                        .post_slope = 1.0f};
    s.kind = gr->kind;
    if (gr->kind == AG_BAND_IMAGE) {
        s.u8 = io->in_u8, s.f32 = io->in_f32, s.bands = io->bands;
    } else if (gr->kind == AG_BAND_CONCAT) {
        s.part_count = gr->part_count;
        for (int j = 0; j < gr->part_count; j++) {
            s.parts[j] = ag_engine_y_map(e, gr->parts[j]);
            s.part_c[j] = e->exec[gr->parts[j]].out.c;
        }
    } else if (gr->kind == AG_BAND_RESIZE) {
        s.a = ag_engine_y_map(e, gr->src);
        s.a_q = e->exec[gr->src].row_q;
        s.HI = e->exec[gr->src].out.h, s.WI = e->exec[gr->src].out.w;
        s.row_taps = x->row_taps, s.col_taps = x->col_taps;
    } else {
        const ag_group *src = &e->groups[gr->src];
        s.x = ag_engine_y_map(e, gr->src);
        s.x_q = e->exec[gr->src].row_q;
        s.affine = e->exec[gr->src].affine;
        if (!src->materialize) { /* its chain, applied here; else the affine is identity */
            s.residual = src->residual >= 0 ? ag_engine_y_map(e, src->residual) : NULL;
            s.residual_q = src->residual >= 0 ? e->exec[src->residual].row_q : NULL;
            s.pre_slope = src->pre_slope, s.post_slope = src->post_slope;
        }
    }
    return s;
}

/* The affine form of group gi's norm from statistics of its output (fp32 maps). */
/* GroupNorm: each channel's moments replaced by its group's (equal pixel counts). */
static void pool_groups(double *mean, double *var, int C, int groups) {
    int per = C / groups;
    for (int g = 0; g < groups; g++) {
        double m = 0.0, sq = 0.0;
        for (int c = g * per; c < (g + 1) * per; c++)
            m += mean[c], sq += var[c] + mean[c] * mean[c];
        m /= per;
        double v = sq / per - m * m;
        for (int c = g * per; c < (g + 1) * per; c++)
            mean[c] = m, var[c] = v;
    }
}

void ag_engine_norm_affine(ag_engine *e, int gi) {
    const ag_group *gr = &e->groups[gi];
    const ag_node *norm = &e->model->graph.nodes[gr->norm];
    ag_group_exec *x = &e->exec[gi];
    int C = x->out.c;
    size_t N = (size_t)x->out.h * x->out.w;
    const float *y = ag_engine_y_map(e, gi);
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
    if (norm->op == AG_OP_GROUP_NORM)
        pool_groups(mean, var, C, norm->groups);
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
float *ag_engine_range_begin(ag_engine *e, int gi, int layer_norm) {
    if (!ag_mode_int8_maps(e) || !(layer_norm || e->groups[gi].q8))
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
void ag_engine_range_end(ag_engine *e, int gi, const float *slots) {
    const ag_group *gr = &e->groups[gi];
    ag_group_exec *x = &e->exec[gi];
    const ag_group_exec *r = gr->residual >= 0 ? &e->exec[gr->residual] : NULL;
    int C = x->out.c;
    x->range_ok = slots && !gr->gate && gr->pre_slope >= 0.0f && gr->post_slope >= 0.0f &&
                  (!r || r->range_ok);
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
    if (gr->norm < 0 && gr->residual < 0 && gr->pre_slope == 1.0f && gr->prelu < 0 && !gr->gate &&
        gr->post_slope == 1.0f && x->y_scale == 1.0f)
        return;
    void *y = ag_engine_y_map(e, gi);
    ag_pad none = {0, 0, 0, 0};
    if (gr->q8) { /* requantised row by row; the value's range exactly, on the way */
        float *slots = ag_engine_range_begin(e, gi, 1);
        ag_fused_materialize_u8(y, x->row_q,
                                gr->residual >= 0 ? ag_engine_y_map(e, gr->residual) : NULL,
                                gr->residual >= 0 ? e->exec[gr->residual].row_q : NULL, x->affine,
                                gr->pre_slope, gr->post_slope, x->out.h, x->out.w, x->out.c,
                                ag_engine_buffer(e, e->q8_tmp_id), slots, e->threads);
        range_combine(e, x->out.c, slots, x->lo, x->hi);
        x->range_ok = 1;
    } else {
        ag_fused_norm_act_pad(y, y, gr->residual >= 0 ? ag_engine_y_map(e, gr->residual) : NULL,
                              ag_engine_elem_bytes(e, gi) == 2, x->affine, gr->pre_slope,
                              gr->post_slope, x->out.h, x->out.w, x->out.c, none, e->threads);
    }
    /* Readers now see a plain map. */
    for (int c = 0; c < x->out.c; c++)
        x->affine.scale[c] = 1.0f, x->affine.shift[c] = 0.0f;
    x->affine.slope = NULL;
    x->affine.gate = AG_GATE_NONE;
}

/* A partial conv's output (group gi, C channels) over the first C channels of the map it
 * was spliced into (fp32): that map is then the concat. 64 bytes a pixel for RealPLKSR. */
static void splice_into(ag_engine *e, int gi) {
    const ag_group_exec *x = &e->exec[gi], *to = &e->exec[e->groups[gi].into];
    const float *src = ag_engine_y_map(e, gi);
    float *dst = ag_engine_y_map(e, e->groups[gi].into);
    int C = x->out.c, CT = to->out.c;
    long pixels = (long)x->out.h * x->out.w;
    AG_ASSERT(to->out.h == x->out.h && to->out.w == x->out.w && C < CT);
#pragma omp parallel for num_threads(e->threads) schedule(static)
    for (long p = 0; p < pixels; p++)
        memcpy(dst + p * CT, src + p * C, sizeof(float) * (size_t)C);
}

/* Group gi's node on whole fp32 maps of materialised groups, with `fast`'s kernels and the
 * bias_lrelu fused into it (the generic and modulated conv kinds' step). */
void ag_engine_run_node(ag_engine *e, int gi, const ag_node_fast *fast) {
    const ag_graph *g = &e->model->graph;
    const ag_node *head = ag_engine_head(e, gi);
    const float *in[AG_NODE_MAX_SRC] = {NULL};
    for (int j = 0; j < AG_NODE_MAX_SRC; j++) /* a resize's src[1]: its size only */
        if (ag_node_reads_src(head, j) && head->src[j] > 0) {
            int src = -1;
            for (int h = gi - 1; h >= 0 && src < 0; h--)
                if (e->groups[h].tail == head->src[j] ||
                    (e->groups[h].spliced && e->groups[h].head == head->src[j]))
                    src = h;
            AG_ASSERT(src >= 0);
            in[j] = ag_engine_y_map(e, src);
        }
    int act = e->groups[gi].act;
    ag_node_fast with_act = *fast;
    with_act.act = act >= 0 ? &g->nodes[act] : NULL;
    ag_node now;
    ag_node_run(ag_engine_node_now(e, head, &now), e->shapes, e->groups[gi].head, in,
                ag_engine_y_map(e, gi), e->lade_id >= 0 ? ag_engine_buffer(e, e->lade_id) : NULL,
                &with_act, e->resize, e->threads);
}

void ag_engine_set_runtime_alpha(ag_engine *e, float alpha) {
    e->has_runtime_alpha = 1;
    e->runtime_alpha = alpha;
}

const ag_node *ag_engine_node_now(const ag_engine *e, const ag_node *n, ag_node *tmp) {
    if (!n->runtime_alpha || !e->has_runtime_alpha)
        return n;
    *tmp = *n;
    tmp->alpha = e->runtime_alpha;
    return tmp;
}

int ag_engine_cancelled(const ag_engine *e, ag_error *err) {
    if (e->cancelled && e->cancelled(e->cancel_user))
        return ag_error_set(err, AG_E_CANCELLED, "cancelled");
    return AG_OK;
}

/* Every step, each by its kind; the outputs are then the output groups' (materialised,
 * fp32) maps. A cancelled run stops before a step (or a band): the next run starts afresh. */
int ag_engine_run_steps(ag_engine *e, const ag_io *io, ag_error *err) {
    init_affines(e);
    e->profile_runs += e->profile_ms != NULL;
    int alpha_zero = e->has_runtime_alpha && e->runtime_alpha == 0.0f;
    e->steps_skipped = 0;
    for (int gi = 0; gi < e->group_count; gi++) {
        double start = e->profile_ms ? omp_get_wtime() : 0.0;
        int rc = ag_engine_cancelled(e, err), skip = alpha_zero && e->groups[gi].alpha_only;
        e->steps_skipped += skip;
        if (rc == AG_OK && !skip)
            rc = e->exec[gi].kind->run(e, gi, io, err);
        if (rc)
            return rc;
        if (e->groups[gi].materialize && !skip)
            materialize(e, gi);
        if (e->groups[gi].into >= 0)
            splice_into(e, gi);
        if (e->progress)
            e->progress(e->progress_user, gi + 1, e->group_count);
        if (e->profile_ms) {
            double ms = (omp_get_wtime() - start) * 1000.0;
            e->profile_ms[ag_engine_head(e, gi)->op] += ms;
            e->profile_steps[ag_engine_head(e, gi)->op]++;
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
        const ag_node *n = ag_engine_head(e, gi);
        const ag_op_desc *d = ag_op_desc_of(n->op);
        ag_shape in[AG_NODE_MAX_SRC] = {{0, 0, 0}}, out = e->shapes[e->groups[gi].head];
        for (int j = 0; j < AG_NODE_MAX_SRC && n->src[j] >= 0; j++)
            in[j] = e->shapes[n->src[j]];
        double flop = d->flops ? d->flops(n, in, out) : 0.0;
        double ms = e->profile_group_ms[gi] / runs;
        const ag_kind *kind = e->exec[gi].kind;
        fprintf(stderr,
                "step %4d %-10s k%d s%d %4dx%-4d %4d -> %4dx%-4d %4d %8.2f ms %6.1f GFLOP/s %s\n",
                gi, d->name, n->k, n->stride, in[0].w, in[0].h, in[0].c, out.w, out.h, out.c, ms,
                ms > 0 ? flop / ms / 1e6 : 0.0, kind ? kind->name : "");
    }
}

/* AG_PROFILE's table: each op's share of the steps' time. */
static void print_op_profile(const ag_engine *e) {
    double total = 0.0;
    for (int op = 0; op < AG_OP_COUNT; op++)
        total += e->profile_ms[op];
    for (int op = 0; op < AG_OP_COUNT; op++)
        if (e->profile_steps[op])
            fprintf(stderr, "profile: %-14s %6d steps %10.1f ms %5.1f%%\n", ag_op_name(op),
                    e->profile_steps[op], e->profile_ms[op],
                    total > 0 ? 100.0 * e->profile_ms[op] / total : 0.0);
}

/* AG_PROFILE's output, at destroy (tuning runs only). */
void ag_engine_print_profile(const ag_engine *e) {
    if (e->profile_group_ms && e->profile_runs > 1)
        print_group_profile(e);
    if (e->profile_ms && e->profile_steps)
        print_op_profile(e);
}
