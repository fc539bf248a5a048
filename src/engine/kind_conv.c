/*
 * kind_conv.c - the conv kinds: a plain conv on oneDNN reading its padded input rows band by
 * band (fp32, or bf16 bands and weights), and the same conv u8 x s8 (int8 engines) on a
 * band quantised with its source's range as it is built.
 */
#include "kind.h"

#include "../util/util_internal.h"

#include <math.h>

static int is_conv(const ag_engine *e, int gi) {
    return ag_engine_head(e, gi)->op == AG_OP_CONV;
}

static int conv_applies(const ag_engine *e, int gi) {
    return is_conv(e, gi) && !e->groups[gi].int8;
}

static int conv_int8_applies(const ag_engine *e, int gi) {
    return is_conv(e, gi) && e->groups[gi].int8;
}

/*
 * Group gi's conv shape for one band of output rows (all rows when not banded). Every band
 * has the same height, so one primitive and one weight layout serve the conv: the last band
 * is moved up to end at the last row and recomputes a few rows the band before it already
 * wrote, identically.
 */
static ag_conv_shape conv_shape(ag_engine *e, int gi) {
    const ag_node *head = ag_engine_head(e, gi);
    const ag_group *gr = &e->groups[gi];
    ag_group_exec *x = &e->exec[gi];
    x->band_rows = gr->banded ? ag_engine_band_rows_for(e, gi) : x->out.h;
    x->bands = (x->out.h + x->band_rows - 1) / x->band_rows;
    ag_conv_shape s = {(x->band_rows - 1) * head->stride + head->k,
                       x->wp,
                       x->in.c,
                       x->out.c,
                       head->k,
                       head->stride,
                       head->groups,
                       head->bias != NULL,
                       ag_mode_bf16_maps(e) || gr->bf16_band,
                       ag_engine_elem_bytes(e, gi) == 2,
                       {0, 0, 0, 0},
                       ag_mode_conv_winograd(e, head) && !gr->bf16_band && !gr->direct};
    if (gr->direct) { /* the source map unpadded, oneDNN's zeros round it */
        s.HP = x->in.h, s.WP = x->in.w;
        for (int i = 0; i < 4; i++)
            s.zero_pad[i] = head->pad[i];
    }
    return s;
}

static size_t band_bytes(const ag_engine *e, int gi) {
    return e->groups[gi].banded ? ag_engine_band_input_bytes(e, gi, e->exec[gi].band_rows) : 0;
}

typedef struct conv_fill {
    ag_dnnl_conv *conv;
    const float *weight;
} conv_fill;

static int fill_conv(void *ctx, void *dst, ag_error *err) {
    conv_fill *f = ctx;
    return ag_dnnl_conv_prepare_weights(f->conv, f->weight, dst, err);
}

/* A Winograd conv's weights are the model's, shared by its engines (as kind_wino.c's),
 * unless another engine of the model holds them in another layout. */
static int share_wino_weights(ag_engine *e, int gi, ag_dnnl_conv *conv, ag_kind_sizes *sizes,
                              ag_error *err) {
    ag_layout_request r = {NULL, 0, ag_wino_layout_same, sizes->weights, fill_conv, NULL};
    conv_fill fill = {conv, ag_engine_head(e, gi)->weight};
    r.layout = ag_dnnl_conv_wino_layout(conv, &r.layout_bytes);
    r.ctx = &fill;
    int rc = AG_OK;
    if (!r.layout)
        return AG_OK;
    if (!e->measure_only)
        rc = ag_model_shared_weights(e->model, e->groups[gi].head, &r, &e->exec[gi].shared_weights,
                                     err);
    if (rc == AG_OK && (e->exec[gi].shared_weights || e->measure_only))
        sizes->weights = 0;
    return rc;
}

static int conv_create(ag_engine *e, int gi, void **kernel, ag_kind_sizes *sizes, ag_error *err) {
    ag_conv_shape s = conv_shape(e, gi);
    ag_dnnl_conv *conv = NULL;
    int rc = ag_dnnl_conv_create(e->dnnl, &s, &conv, &sizes->scratch, &sizes->weights, err);
    *kernel = conv;
    sizes->band = rc == AG_OK ? band_bytes(e, gi) : 0;
    return rc == AG_OK ? share_wino_weights(e, gi, conv, sizes, err) : rc;
}

static int conv_int8_create(ag_engine *e, int gi, void **kernel, ag_kind_sizes *sizes,
                            ag_error *err) {
    ag_conv_shape s = conv_shape(e, gi);
    ag_int8_conv_shape s8 = {s.HP, s.WP, s.IC, s.OC, s.K, s.stride, s.groups, s.has_bias, 0};
    ag_dnnl_int8_conv *conv = NULL;
    int rc = ag_dnnl_int8_conv_create(e->dnnl, &s8, e->exec[gi].w_scale, 1.0f, &conv,
                                      &sizes->scratch, &sizes->weights, err);
    *kernel = conv;
    sizes->band_u8 = rc == AG_OK ? band_bytes(e, gi) : 0;
    return rc;
}

AG_KIND_SAME_WEIGHTS(ag_dnnl_conv)
AG_KIND_SAME_WEIGHTS(ag_dnnl_int8_conv)

static int conv_prepare(ag_engine *e, int gi, void *prepared, ag_error *err) {
    return ag_dnnl_conv_prepare_weights(e->exec[gi].kernel, ag_engine_head(e, gi)->weight, prepared,
                                        err);
}

static int conv_int8_prepare(ag_engine *e, int gi, void *prepared, ag_error *err) {
    return ag_dnnl_int8_conv_prepare_weights(e->exec[gi].kernel, e->exec[gi].w_s8, prepared, err);
}

AG_KIND_DESTROY(ag_dnnl_conv)
AG_KIND_DESTROY(ag_dnnl_int8_conv)

/* ---- run ------------------------------------------------------------------------------- */

/* int8: the value range of group gi's fp32 map (materialised, as a concat band's parts are)
 * from a pass over it, kept as its range for the run's later readers. */
static void map_range(ag_engine *e, int gi) {
    ag_group_exec *x = &e->exec[gi];
    ag_band_source s = {.kind = AG_BAND_RAW, .H = x->out.h, .W = x->out.w, .C = x->out.c};
    float lo, hi;
    AG_ASSERT(!e->groups[gi].q8);
    s.x = ag_engine_y_map(e, gi);
    ag_fused_range(&s, &lo, &hi, e->threads);
    for (int c = 0; c < x->out.c; c++)
        x->lo[c] = lo, x->hi[c] = hi;
    x->range_ok = 1;
}

/* int8: the range of conv gi's band values: its source's value range when known (padding and
 * a resize add no values beyond it), else a pass over the source; a concat's, its parts'. */
static void source_range(ag_engine *e, int gi, const ag_band_source *src, float *lo, float *hi) {
    int s = e->groups[gi].src;
    if (e->groups[gi].kind == AG_BAND_CONCAT) {
        *lo = INFINITY, *hi = -INFINITY;
        for (int j = 0; j < e->groups[gi].part_count; j++) {
            const ag_group_exec *p = &e->exec[e->groups[gi].parts[j]];
            if (!p->range_ok)
                map_range(e, e->groups[gi].parts[j]);
            for (int c = 0; c < p->out.c; c++)
                *lo = fminf(*lo, p->lo[c]), *hi = fmaxf(*hi, p->hi[c]);
        }
        return;
    }
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
    ag_fused_quantize_rows(ag_engine_y_map(e, gi), x->row_q, tmp, first, x->band_rows, x->out.w,
                           x->out.c, &t, e->threads);
}

/* A conv step under way: what its bands share. */
typedef struct conv_step {
    const ag_node *head;
    ag_band_source src;
    int in_rows;           /* input rows of a band */
    int layer_norm;        /* the chain's norm is a LayerNorm: statistics as the bands go */
    ag_int8_quant q;       /* u8 x s8: this image's quantisation of the bands */
    ag_stats_rows pending; /* rows written whose statistics ride with the next band */
} conv_step;

static conv_step step_begin(ag_engine *e, int gi, const ag_io *io) {
    const ag_group *gr = &e->groups[gi];
    ag_group_exec *x = &e->exec[gi];
    conv_step s = {.head = ag_engine_head(e, gi), .src = ag_engine_band_source(e, gi, io)};
    s.in_rows = (x->band_rows - 1) * s.head->stride + s.head->k;
    s.layer_norm = gr->norm >= 0 && e->model->graph.nodes[gr->norm].op == AG_OP_LAYER_NORM;
    s.q.x_scale = 1.0f;
    if (gr->int8) {
        float lo, hi;
        source_range(e, gi, &s.src, &lo, &hi);
        s.q = ag_int8_quant_from_range(lo, hi);
    }
    ag_stats_rows pending = {e->partials,
                             ag_engine_y_map(e, gi),
                             ag_engine_elem_bytes(e, gi) == 2,
                             0,
                             0,
                             (size_t)x->out.w * x->out.c,
                             ag_engine_range_begin(e, gi, s.layer_norm),
                             x->out.c};
    s.pending = pending;
    return s;
}

/* One band's output rows from `first` into dst: its input band built (with the statistics
 * pending) and convolved. */
typedef int (*band_fn)(ag_engine *e, int gi, conv_step *s, int first, void *dst, ag_error *err);

/* fp32 / bf16: the band built when banded, else oneDNN reads the source map whole. */
static int conv_band(ag_engine *e, int gi, conv_step *s, int first, void *dst, ag_error *err) {
    const ag_group *gr = &e->groups[gi];
    const ag_group_exec *x = &e->exec[gi];
    const void *in = gr->src >= 0 ? ag_engine_y_map(e, gr->src) : NULL;
    if (gr->banded) {
        void *band = ag_engine_buffer(e, e->band_id);
        ag_fused_band_stats(band, &s->src, first * s->head->stride, s->in_rows, &s->pending,
                            e->threads);
        s->pending.rows = 0;
        in = band;
    }
    ag_dnnl_conv_bind(x->kernel, in, dst, s->head->bias, ag_kind_weights(e, gi),
                      ag_engine_buffer(e, e->scratch_id));
    return ag_dnnl_conv_run(x->kernel, err);
}

/* u8 x s8: the band written as u8, quantised with s->q in the same pass; dst = y / x_scale. */
static int conv_int8_band(ag_engine *e, int gi, conv_step *s, int first, void *dst, ag_error *err) {
    const ag_group_exec *x = &e->exec[gi];
    uint8_t *band_u8 = ag_engine_buffer(e, e->band_u8_id);
    ag_fused_band_stats_u8(band_u8, s->q.x_scale, s->q.x_zero, &s->src, first * s->head->stride,
                           s->in_rows, &s->pending, e->threads);
    s->pending.rows = 0;
    ag_dnnl_int8_conv_bind(x->kernel, band_u8, dst, ag_kind_weights(e, gi),
                           ag_engine_buffer(e, e->scratch_id));
    return ag_dnnl_int8_conv_run(x->kernel, &s->q, s->head->bias, err);
}

/* Every band in its planned order (cancel asked between bands); a q8 map's rows quantised
 * as each band ends, a LayerNorm's statistics taken along. */
static int run_bands(ag_engine *e, int gi, conv_step *s, band_fn band, ag_error *err) {
    const ag_group *gr = &e->groups[gi];
    ag_group_exec *x = &e->exec[gi];
    size_t out_row = (size_t)x->out.w * x->out.c;
    uint8_t *y = ag_engine_y_map(e, gi);
    float *tmp = gr->q8 ? ag_engine_buffer(e, e->q8_tmp_id) : NULL;
    for (int i = 0; i < x->bands; i++) {
        int b = ag_band_at(x, i), first = ag_band_first_row(x, b);
        int rc = i > 0 ? ag_engine_cancelled(e, err) : AG_OK;
        if (rc == AG_OK)
            rc =
                band(e, gi, s, first,
                     gr->q8 ? (void *)tmp : y + first * out_row * ag_engine_elem_bytes(e, gi), err);
        if (rc)
            return rc;
        if (gr->q8) {
            q8_store_band(e, gi, tmp, first, b * x->band_rows, s->layer_norm, s->pending.range);
        } else if (s->layer_norm) { /* the rows this band added: stats with the next band's */
            s->pending.first = b * x->band_rows;
            s->pending.rows = first + x->band_rows - s->pending.first;
        }
    }
    if (s->pending.rows)
        ag_fused_band_stats(NULL, NULL, 0, 0, &s->pending, e->threads);
    return AG_OK;
}

/*
 * After the bands: the conv wrote y / x_scale (1 unless int8), and y_scale = x_scale goes
 * into the affine its readers apply: a LayerNorm's is scale-invariant (its eps taken as
 * eps / x_scale^2), the other norms' moments are rescaled, a plain chain multiplies by it;
 * materialising applies it, so whole-map readers see real units.
 */
static void step_end(ag_engine *e, int gi, const conv_step *s) {
    const ag_group *gr = &e->groups[gi];
    const ag_graph *g = &e->model->graph;
    ag_group_exec *x = &e->exec[gi];
    x->y_scale = s->q.x_scale;
    if (s->layer_norm) {
        const ag_node *norm = &g->nodes[gr->norm];
        double xs = (double)s->q.x_scale;
        float eps = (float)((double)norm->eps / (xs * xs));
        ag_norm_affine_from_stats(x->affine, e->partials, x->out.h, (size_t)x->out.w * x->out.c,
                                  norm->gamma, norm->beta, x->out.c, eps);
    } else if (gr->norm >= 0 && g->nodes[gr->norm].op != AG_OP_AFFINE) {
        ag_engine_norm_affine(e, gi);
    } else if (gr->int8) { /* none, or a constant affine (set by init_affines) */
        for (int c = 0; c < x->out.c; c++)
            x->affine.scale[c] *= s->q.x_scale;
    }
    ag_engine_range_end(e, gi, s->pending.range);
}

/* A conv step, fp32 / bf16 or u8 x s8 by its group. */
static int run_conv(ag_engine *e, int gi, const ag_io *io, ag_error *err) {
    conv_step s = step_begin(e, gi, io);
    int rc = run_bands(e, gi, &s, e->groups[gi].int8 ? conv_int8_band : conv_band, err);
    if (rc == AG_OK)
        step_end(e, gi, &s);
    return rc;
}

/* Quantise every int8 group's weights once, per output channel, into one allocation. */
int ag_engine_quantize_weights(ag_engine *e, ag_error *err) {
    size_t total = 0;
    for (int gi = 0; gi < e->group_count; gi++) {
        const ag_node *h = ag_engine_head(e, gi);
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
        const ag_node *h = ag_engine_head(e, gi);
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

const ag_kind ag_kind_conv = {
    .name = "conv",
    .applies = conv_applies,
    .create = conv_create,
    .same_weights = kind_same_ag_dnnl_conv,
    .prepare = conv_prepare,
    .run = run_conv,
    .destroy = kind_destroy_ag_dnnl_conv,
};

const ag_kind ag_kind_conv_int8 = {
    .name = "conv_int8",
    .applies = conv_int8_applies,
    .create = conv_int8_create,
    .same_weights = kind_same_ag_dnnl_int8_conv,
    .prepare = conv_int8_prepare,
    .run = run_conv,
    .destroy = kind_destroy_ag_dnnl_int8_conv,
};
