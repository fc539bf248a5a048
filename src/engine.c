/*
 * engine.c - plans and runs the generator: image in -> tensor -> 25 layers -> tensor ->
 * image out.
 *
 * Planning happens once per image size (ag_engine_prepare): the feature-map geometry of
 * every layer, the oneDNN primitives, their prepared weights, and one arena holding every
 * activation at offsets from ag_arena_plan. Running then only binds pointers and calls
 * kernels: nothing in the layer loop allocates.
 *
 * Two backends share the geometry:
 *   onednn     conv on oneDNN, then one fused pass that normalises, adds the residual,
 *              activates and writes the next conv's padded input (or resizes into it).
 *   reference  the plain ops of kernels/reference.c, one at a time: the oracle.
 */
#include "engine_internal.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ---- geometry -------------------------------------------------------------------------- */

static ag_pad layer_pad(const ag_layer *l) {
    ag_pad p = {l->pad_top, l->pad_bottom, l->pad_left, l->pad_right};
    return p;
}

/* Sizes of every layer's input (after any resize) and output for a width x height image. */
static void plan_geometry(ag_engine *e, int width, int height) {
    const ag_model *m = e->model;
    int h = height, w = width, half_h = 0, half_w = 0;
    for (int i = 0; i < m->layer_count; i++) {
        const ag_layer *l = &m->layers[i];
        ag_layer_geom *g = &e->geom[i];
        g->in_h = h, g->in_w = w;
        if (l->resize_before == AG_RESIZE_TO_HALF)
            g->in_h = half_h, g->in_w = half_w;
        else if (l->resize_before == AG_RESIZE_TO_INPUT)
            g->in_h = height, g->in_w = width;
        g->hp = g->in_h + l->pad_top + l->pad_bottom;
        g->wp = g->in_w + l->pad_left + l->pad_right;
        g->out_h = (g->hp - l->k) / l->stride + 1;
        g->out_w = (g->wp - l->k) / l->stride + 1;
        h = g->out_h, w = g->out_w;
        if (l->is_block_a_end)
            half_h = h, half_w = w;
    }
}

static size_t floats(size_t n) {
    return n * sizeof(float);
}

/* Bytes of one activation element: bf16 halves every map and band. */
static size_t act_bytes(const ag_engine *e) {
    return e->bf16 ? 2 : sizeof(float);
}

/* Conv outputs are activations, except the last: tanh reads it in fp32. */
static size_t y_elem_bytes(const ag_engine *e, int i) {
    return i + 1 == e->model->layer_count ? sizeof(float) : act_bytes(e);
}

/* ---- the arena plan -------------------------------------------------------------------- */

enum { MAX_BUFFERS = 4 * AG_MAX_LAYERS + 8 };

typedef struct plan_builder {
    ag_arena_buffer buffers[MAX_BUFFERS];
    int count;
} plan_builder;

static int plan_add(plan_builder *pb, size_t bytes, int first, int last) {
    AG_ASSERT(pb->count < MAX_BUFFERS);
    ag_arena_buffer b = {bytes, first, last, 0};
    pb->buffers[pb->count] = b;
    return pb->count++;
}

/* Buffers both backends need for the whole pass: norm scratch and resize taps. */
static void plan_common(ag_engine *e, plan_builder *pb, int steps, int *ids) {
    int max_rows = 0, max_c = 0;
    for (int i = 0; i < e->model->layer_count; i++) {
        if (e->geom[i].out_h > max_rows)
            max_rows = e->geom[i].out_h;
        if (e->model->layers[i].out_c > max_c)
            max_c = e->model->layers[i].out_c;
    }
    int taps = 0;
    for (int i = 0; i < e->model->layer_count; i++)
        if (e->model->layers[i].resize_before)
            taps += e->geom[i].in_h + e->geom[i].in_w;
    ids[0] = plan_add(pb, 2 * (size_t)max_rows * sizeof(double), 0, steps);
    ids[1] = plan_add(pb, floats(2 * (size_t)max_c), 0, steps);
    ids[2] = plan_add(pb, (size_t)taps * sizeof(ag_resize_tap), 0, steps);
}

static void bind_common(ag_engine *e, const plan_builder *pb, const int *ids) {
    uint8_t *a = e->arena;
    e->partials = (double *)(a + pb->buffers[ids[0]].offset);
    e->affine.scale = (float *)(a + pb->buffers[ids[1]].offset);
    size_t max_c = pb->buffers[ids[1]].bytes / (2 * sizeof(float));
    e->affine.shift = e->affine.scale + max_c;
    ag_resize_tap *taps = (ag_resize_tap *)(a + pb->buffers[ids[2]].offset);
    for (int i = 0; i < e->model->layer_count; i++) {
        if (!e->model->layers[i].resize_before)
            continue;
        const ag_layer_geom *g = &e->geom[i], *prev = &e->geom[i - 1];
        e->row_taps[i] = taps;
        ag_resize_taps(taps, prev->out_h, g->in_h, e->resize);
        taps += g->in_h;
        e->col_taps[i] = taps;
        ag_resize_taps(taps, prev->out_w, g->in_w, e->resize);
        taps += g->in_w;
    }
}

static size_t y_bytes(const ag_engine *e, int i) {
    const ag_layer_geom *g = &e->geom[i];
    return (size_t)g->out_h * g->out_w * e->model->layers[i].out_c * y_elem_bytes(e, i);
}

/* The last step that reads Y[i]: the next layer; as a residual block's input, the step
 * that consumes the block's add, three layers later. */
static int y_last_use(const ag_engine *e, int i) {
    int n = e->model->layer_count;
    int last = i + 1 < n && e->model->layers[i + 1].residual == AG_RESIDUAL_SAVE ? i + 4 : i + 1;
    return last < n ? last : n - 1;
}

/*
 * Whether Y[i] can overwrite Y[i-1] as it goes: a banded stride-1 layer whose output rows
 * are as long as its input rows, reading Y[i-1] for the last time. A band's input rows are
 * copied into the band buffer before its conv writes, so Y[i] may start `lag` bytes before
 * Y[i-1]: one band plus the top padding, which also covers the last band's overlap.
 */
static size_t in_place_lag(const ag_engine *e, int i) {
    const ag_layer *l = &e->model->layers[i];
    const ag_layer_exec *x = &e->exec[i];
    if (i == 0 || !x->banded || l->resize_before || l->stride != 1 || y_last_use(e, i - 1) != i ||
        y_bytes(e, i) != y_bytes(e, i - 1) || e->geom[i].out_h != e->geom[i - 1].out_h)
        return 0;
    size_t row = y_bytes(e, i) / (size_t)e->geom[i].out_h;
    return (size_t)(x->band_rows + l->pad_top) * row;
}

/*
 * oneDNN backend. Step i runs layer i: from its source (the image, or Y[i-1], the previous
 * conv's raw output) it builds padded input rows band by band in one small band buffer,
 * convolves each band into Y[i] and takes the rows' statistics. A map that a resize, a 1x1
 * conv or a later residual add needs whole is normalised in place first. So the live set
 * at any step is about two conv outputs plus one band, never a padded copy of a map, and
 * where a layer keeps its shape (the 64-channel full-size pair above all) only one.
 */
static void plan_onednn(ag_engine *e, plan_builder *pb, size_t band_bytes) {
    int n = e->model->layer_count;
    for (int first = 0, last; first < n; first = last + 1) {
        /* A run of layers each overwriting the one before shares one buffer. */
        size_t slack = 0, bytes = y_bytes(e, first);
        int live_until = y_last_use(e, first);
        for (last = first; last + 1 < n && in_place_lag(e, last + 1); last++) {
            slack += in_place_lag(e, last + 1);
            bytes = y_bytes(e, last + 1) > bytes ? y_bytes(e, last + 1) : bytes;
            live_until =
                y_last_use(e, last + 1) > live_until ? y_last_use(e, last + 1) : live_until;
        }
        int id = plan_add(pb, slack + bytes, first, live_until);
        for (int i = first; i <= last; i++) {
            e->y_ids[i] = id;
            e->y_offsets[i] = slack;
            if (i < last)
                slack -= in_place_lag(e, i + 1);
        }
    }
    e->band_id = plan_add(pb, band_bytes, 0, n);
}

/* How layer i reads its input; see ag_layer_exec. */
static void plan_sources(ag_engine *e) {
    const ag_model *m = e->model;
    for (int i = 0; i < m->layer_count; i++) {
        const ag_layer *l = &m->layers[i];
        ag_layer_exec *x = &e->exec[i];
        int unpadded = !l->pad_top && !l->pad_bottom && !l->pad_left && !l->pad_right;
        x->materialize_prev = i > 0 && (unpadded || l->resize_before);
        x->banded = i == 0 || !unpadded || l->resize_before;
    }
}

/* Rows per band for layer i: the band buffer stays near AG_BAND_BYTES. */
static int band_rows_for(const ag_engine *e, int i) {
    const ag_layer *l = &e->model->layers[i];
    const ag_layer_geom *g = &e->geom[i];
    size_t in_row = (size_t)g->wp * l->in_c * act_bytes(e) * (size_t)l->stride;
    /* The target is for fp32: bf16 bands keep the rows (the synchronisations) and halve
     * the bytes. */
    size_t target = e->band_bytes_target * act_bytes(e) / sizeof(float);
    int rows = (int)(target / (in_row ? in_row : 1));
    rows = rows < 4 ? 4 : rows;
    if (rows >= g->out_h)
        return g->out_h;
    /* Spread the rows evenly over the bands so the last one, moved up to end at the last
     * row, recomputes fewer rows than there are bands (not most of a band). */
    int bands = (g->out_h + rows - 1) / rows;
    return (g->out_h + bands - 1) / bands;
}

static size_t band_input_bytes(const ag_engine *e, int i, int rows) {
    const ag_layer *l = &e->model->layers[i];
    return (size_t)((rows - 1) * l->stride + l->k) * e->geom[i].wp * l->in_c * act_bytes(e);
}

/* ---- oneDNN primitives and weights ----------------------------------------------------- */

static void destroy_convs(ag_engine *e) {
    for (int i = 0; i < AG_MAX_LAYERS; i++) {
        ag_dnnl_conv_destroy(e->exec[i].conv);
        e->exec[i].conv = NULL;
    }
}

/*
 * Layer i's primitive, for one band of output rows (all rows when not banded). Every band
 * has the same height, so one primitive and one weight layout serve the layer: the last
 * band is moved up to end at the last row and recomputes a few rows the band before it
 * already wrote, identically.
 */
static int create_layer_conv(ag_engine *e, int i, size_t *scratch_max, size_t *band_max,
                             size_t *weight_bytes, ag_error *err) {
    const ag_layer *l = &e->model->layers[i];
    ag_layer_exec *x = &e->exec[i];
    int out_h = e->geom[i].out_h;
    x->band_rows = x->banded ? band_rows_for(e, i) : out_h;
    x->bands = (out_h + x->band_rows - 1) / x->band_rows;
    ag_conv_shape s = {(x->band_rows - 1) * l->stride + l->k,
                       e->geom[i].wp,
                       l->in_c,
                       l->out_c,
                       l->k,
                       l->stride,
                       l->groups,
                       l->bias != NULL,
                       e->bf16,
                       y_elem_bytes(e, i) == 2};
    size_t scratch = 0;
    int rc = ag_dnnl_conv_create(e->dnnl, &s, &x->conv, &scratch, weight_bytes, err);
    *scratch_max = scratch > *scratch_max ? scratch : *scratch_max;
    if (rc == AG_OK && x->banded) {
        size_t band = band_input_bytes(e, i, x->band_rows);
        *band_max = band > *band_max ? band : *band_max;
    }
    return rc;
}

/* Prepared weights are kept when every layer keeps its layout (the usual case when only
 * the image size changes); otherwise reordered again into one allocation. */
static int prepare_weights(ag_engine *e, const ag_dnnl_conv **old, const size_t *bytes,
                           ag_error *err) {
    const ag_model *m = e->model;
    int same = e->weights != NULL;
    size_t total = 0;
    for (int i = 0; i < m->layer_count; i++) {
        e->weight_offsets[i] = total;
        total += (bytes[i] + AG_ARENA_ALIGN - 1) & ~(size_t)(AG_ARENA_ALIGN - 1);
        same = same && ag_dnnl_conv_same_weights(e->exec[i].conv, old[i]);
    }
    if (same)
        return AG_OK;
    ag_free(e->weights_block);
    e->weights = NULL;
    e->weights_block = ag_malloc(total + AG_ARENA_ALIGN);
    if (!e->weights_block)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for %zu bytes of weights", total);
    uint8_t *aligned = (uint8_t *)(((uintptr_t)e->weights_block + AG_ARENA_ALIGN - 1) &
                                   ~(uintptr_t)(AG_ARENA_ALIGN - 1));
    for (int i = 0; i < m->layer_count; i++) {
        int rc = ag_dnnl_conv_prepare_weights(e->exec[i].conv, m->layers[i].weight,
                                              aligned + e->weight_offsets[i], err);
        if (rc)
            return rc;
    }
    e->weights = aligned;
    return AG_OK;
}

static int create_convs(ag_engine *e, size_t *scratch_max, size_t *band_max, ag_error *err) {
    const ag_model *m = e->model;
    ag_layer_exec old[AG_MAX_LAYERS];
    const ag_dnnl_conv *old_convs[AG_MAX_LAYERS];
    size_t weight_bytes[AG_MAX_LAYERS];
    memcpy(old, e->exec, sizeof old);
    *scratch_max = *band_max = 0;
    int rc = AG_OK;
    for (int i = 0; i < m->layer_count && rc == AG_OK; i++) {
        e->exec[i].conv = NULL;
        rc = create_layer_conv(e, i, scratch_max, band_max, &weight_bytes[i], err);
    }
    if (rc == AG_OK && !e->measure_only) {
        for (int i = 0; i < m->layer_count; i++)
            old_convs[i] = old[i].conv;
        rc = prepare_weights(e, old_convs, weight_bytes, err);
    }
    /* Whatever happened, exactly one set of primitives survives. */
    ag_layer_exec fresh[AG_MAX_LAYERS];
    memcpy(fresh, e->exec, sizeof fresh);
    memcpy(e->exec, old, sizeof old);
    destroy_convs(e);
    memcpy(e->exec, fresh, sizeof fresh);
    if (rc)
        destroy_convs(e);
    return rc;
}

/* Reference backend: two activation buffers that swap, the padded input and the residual. */
static void plan_reference(ag_engine *e, plan_builder *pb, int *ids) {
    size_t act = 0, padded = 0;
    for (int i = 0; i < e->model->layer_count; i++) {
        const ag_layer *l = &e->model->layers[i];
        const ag_layer_geom *g = &e->geom[i];
        size_t in = (size_t)g->in_h * g->in_w * l->in_c,
               out = (size_t)g->out_h * g->out_w * l->out_c;
        act = in > act ? in : act;
        act = out > act ? out : act;
        size_t p = (size_t)g->hp * g->wp * l->in_c;
        padded = p > padded ? p : padded;
    }
    int steps = e->model->layer_count;
    for (int i = 0; i < 4; i++)
        ids[i] = plan_add(pb, floats(i == 2 ? padded : act), 0, steps);
}

/* ---- prepare --------------------------------------------------------------------------- */

static int check_size(int width, int height, ag_error *err) {
    if (width < AG_MIN_SIDE || height < AG_MIN_SIDE)
        return ag_error_set(err, AG_E_ARG, "image is %dx%d; both sides must be at least %d pixels",
                            width, height, AG_MIN_SIDE);
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
    return AG_OK;
}

int ag_engine_prepare(ag_engine *e, int width, int height, ag_error *err) {
    if (e->planned_w == width && e->planned_h == height)
        return AG_OK;
    int rc = check_size(width, height, err);
    if (rc)
        return rc;
    e->planned_w = e->planned_h = 0;
    omp_set_num_threads(e->threads);
    plan_geometry(e, width, height);
    plan_builder pb = {.count = 0};
    int common[3], steps = e->model->layer_count;
    size_t scratch = 0;
    plan_common(e, &pb, steps, common);
    if (e->options.backend == AG_BACKEND_ONEDNN) {
        size_t band = 0;
        plan_sources(e);
        rc = create_convs(e, &scratch, &band, err);
        if (rc)
            return rc;
        plan_onednn(e, &pb, band);
        e->scratch_id = plan_add(&pb, scratch, 0, steps);
    } else {
        plan_reference(e, &pb, e->ref_ids);
    }
    size_t arena_bytes = ag_arena_plan(pb.buffers, pb.count);
    if (e->measure_only) {
        e->arena_bytes = arena_bytes;
        return AG_OK;
    }
    rc = allocate_arena(e, arena_bytes, err);
    if (rc)
        return rc;
    memcpy(e->buffers, pb.buffers, sizeof pb.buffers);
    bind_common(e, &pb, common);
    e->planned_w = width, e->planned_h = height;
    return AG_OK;
}

/* ---- run: oneDNN ----------------------------------------------------------------------- */

static void *buffer(ag_engine *e, int id) {
    return e->arena + e->buffers[id].offset;
}

/* Y[i], the raw output of layer i's conv. */
static void *y_map(ag_engine *e, int i) {
    return e->arena + e->buffers[e->y_ids[i]].offset + e->y_offsets[i];
}

/* The residual a layer's output gets: the input of its block, Y three layers back. */
static const void *residual_of(ag_engine *e, int i) {
    return e->model->layers[i].residual == AG_RESIDUAL_ADD ? y_map(e, i - 3) : NULL;
}

/* Where layer i's band rows come from (layer i > 0 reads Y[i-1] with its norm). */
static ag_band_source band_source(ag_engine *e, int i, const ag_io *io) {
    const ag_layer *l = &e->model->layers[i];
    const ag_layer_geom *g = &e->geom[i];
    ag_band_source s = {
        .bf16 = e->bf16, .H = g->in_h, .W = g->in_w, .C = l->in_c, .pad = layer_pad(l)};
    if (i == 0) {
        s.kind = AG_BAND_IMAGE;
        s.u8 = io->in_u8, s.f32 = io->in_f32, s.bands = io->bands;
    } else if (l->resize_before) {
        s.kind = AG_BAND_RESIZE;
        s.a = y_map(e, i - 1);
        s.HI = e->geom[i - 1].out_h, s.WI = e->geom[i - 1].out_w;
        s.row_taps = e->row_taps[i], s.col_taps = e->col_taps[i];
    } else {
        s.kind = AG_BAND_RAW;
        s.x = y_map(e, i - 1);
        s.residual = residual_of(e, i - 1);
        s.affine = e->affine;
        s.lrelu = e->model->layers[i - 1].act == AG_ACT_LRELU;
    }
    return s;
}

/* Normalise Y[i-1] in place (norm, residual, activation) for a reader that needs it whole. */
static void materialize_prev(ag_engine *e, int i) {
    const ag_layer *prev = &e->model->layers[i - 1];
    const ag_layer_geom *g = &e->geom[i - 1];
    void *y = y_map(e, i - 1);
    ag_pad none = {0, 0, 0, 0};
    ag_fused_norm_act_pad(y, y, residual_of(e, i - 1), e->bf16, e->affine,
                          prev->act == AG_ACT_LRELU, g->out_h, g->out_w, prev->out_c, none,
                          e->threads);
}

static int run_layer(ag_engine *e, int i, const ag_io *io, void *scratch, ag_error *err) {
    const ag_layer *l = &e->model->layers[i];
    const ag_layer_geom *g = &e->geom[i];
    ag_layer_exec *x = &e->exec[i];
    size_t out_row = (size_t)g->out_w * l->out_c;
    uint8_t *y = y_map(e, i);
    void *band = buffer(e, e->band_id);
    size_t y_elem = y_elem_bytes(e, i);
    ag_band_source src = band_source(e, i, io);
    ag_stats_rows pending = {e->partials, y, y_elem == 2, 0, 0, out_row};
    for (int b = 0; b < x->bands; b++) {
        int first = b * x->band_rows, rows = x->band_rows;
        if (first + rows > g->out_h) /* the last band, moved up; see create_layer_conv */
            first = g->out_h - rows;
        const void *in = y_map(e, i > 0 ? i - 1 : 0);
        if (x->banded) {
            ag_fused_band_stats(band, &src, first * l->stride, (rows - 1) * l->stride + l->k,
                                &pending, e->threads);
            pending.rows = 0;
            in = band;
        }
        ag_dnnl_conv_bind(x->conv, in, y + first * out_row * y_elem, l->bias,
                          e->weights + e->weight_offsets[i], scratch);
        int rc = ag_dnnl_conv_run(x->conv, err);
        if (rc)
            return rc;
        /* The rows this band added; their statistics go with the next band's input. */
        if (l->gamma) {
            pending.first = b * x->band_rows;
            pending.rows = first + rows - pending.first;
        }
    }
    if (pending.rows)
        ag_fused_band_stats(NULL, NULL, 0, 0, &pending, e->threads);
    if (l->gamma)
        ag_norm_affine_from_stats(e->affine, e->partials, g->out_h, out_row, l->gamma, l->beta,
                                  l->out_c, e->model->info.norm_eps);
    return AG_OK;
}

static int run_onednn(ag_engine *e, const ag_io *io, ag_error *err) {
    const ag_model *m = e->model;
    void *scratch = e->arena + e->buffers[e->scratch_id].offset;
    for (int i = 0; i < m->layer_count; i++) {
        if (e->exec[i].materialize_prev)
            materialize_prev(e, i);
        int rc = run_layer(e, i, io, scratch, err);
        if (rc)
            return rc;
    }
    const ag_layer_geom *g = &e->geom[m->layer_count - 1];
    ag_fused_output(io->out_f32, io->out_u8, io->bands, y_map(e, m->layer_count - 1), g->out_h,
                    g->out_w, e->threads);
    return AG_OK;
}

/* ---- run: reference -------------------------------------------------------------------- */

static void run_reference(ag_engine *e, const ag_io *io) {
    const ag_model *m = e->model;
    float *x = buffer(e, e->ref_ids[0]), *y = buffer(e, e->ref_ids[1]);
    float *padded = buffer(e, e->ref_ids[2]), *residual = buffer(e, e->ref_ids[3]);
    int h = e->planned_h, w = e->planned_w;
    for (size_t i = 0; i < (size_t)h * w; i++)
        for (int c = 0; c < 3; c++)
            x[i * 3 + c] = io->in_u8 ? (float)io->in_u8[i * io->bands + c] / 127.5f - 1.0f
                                     : io->in_f32[i * 3 + c];
    for (int i = 0; i < m->layer_count; i++) {
        const ag_layer *l = &m->layers[i];
        const ag_layer_geom *g = &e->geom[i];
        float *t;
        if (l->resize_before) {
            ag_ref_resize_bilinear(y, x, h, w, g->in_h, g->in_w, l->in_c, e->resize);
            t = x, x = y, y = t;
        }
        size_t in_n = (size_t)g->in_h * g->in_w * l->in_c;
        size_t out_n = (size_t)g->out_h * g->out_w * l->out_c;
        if (l->residual == AG_RESIDUAL_SAVE)
            memcpy(residual, x, floats(in_n));
        ag_ref_reflect_pad(padded, x, g->in_h, g->in_w, l->in_c, layer_pad(l));
        ag_ref_conv2d(y, padded, l->weight, l->bias, g->hp, g->wp, l->in_c, l->out_c, l->k,
                      l->stride, l->groups);
        if (l->gamma)
            ag_ref_layer_norm(y, l->gamma, l->beta, g->out_h, g->out_w, l->out_c, m->info.norm_eps);
        if (l->residual == AG_RESIDUAL_ADD)
            ag_ref_add(y, residual, out_n);
        if (l->act == AG_ACT_LRELU)
            ag_ref_leaky_relu(y, out_n, AG_LRELU_SLOPE);
        t = x, x = y, y = t;
        h = g->out_h, w = g->out_w;
    }
    /* x holds the last conv's output before tanh; the output pass applies it. */
    ag_fused_output(io->out_f32, io->out_u8, io->bands, x, h, w, 1);
}

/* ---- public API ------------------------------------------------------------------------ */

int ag_engine_run_io(ag_engine *e, const ag_io *io, int width, int height, ag_error *err) {
    int rc = ag_engine_prepare(e, width, height, err);
    if (rc)
        return rc;
    omp_set_num_threads(e->threads);
    if (e->options.backend == AG_BACKEND_REFERENCE) {
        run_reference(e, io);
        return AG_OK;
    }
    return run_onednn(e, io, err);
}

int ag_engine_run_f32(ag_engine *e, const float *in, int width, int height, float *out,
                      ag_error *err) {
    ag_io io = {.in_f32 = in, .out_f32 = out, .bands = 3};
    return ag_engine_run_io(e, &io, width, height, err);
}

int ag_engine_create(const ag_model *model, const ag_engine_options *options, ag_engine **out,
                     ag_error *err) {
    *out = NULL;
    ag_engine_options defaults = {0};
    const ag_engine_options *o = options ? options : &defaults;
    if (o->precision == AG_PRECISION_INT8)
        return ag_error_set(err, AG_E_UNSUPPORTED, "precision int8 is not available");
    if (o->precision == AG_PRECISION_BF16 && o->backend == AG_BACKEND_REFERENCE)
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "the reference backend runs fp32 only; bf16 needs --backend onednn");
    if (o->backend != AG_BACKEND_ONEDNN && o->backend != AG_BACKEND_REFERENCE)
        return ag_error_set(err, AG_E_ARG, "unknown backend %d", (int)o->backend);
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
    e->resize = o->resize != AG_RESIZE_DEFAULT ? o->resize : model->info.resize;
    e->bf16 = o->precision == AG_PRECISION_BF16;
    if (o->backend == AG_BACKEND_ONEDNN) {
        int rc = ag_dnnl_create(&e->dnnl, err);
        if (rc) {
            ag_engine_destroy(e);
            return rc;
        }
    }
    *out = e;
    return AG_OK;
}

void ag_engine_destroy(ag_engine *e) {
    if (!e)
        return;
    destroy_convs(e);
    ag_dnnl_destroy(e->dnnl);
    ag_free(e->weights_block);
    ag_free(e->arena_block);
    ag_free(e);
}

size_t ag_engine_arena_bytes(const ag_engine *e) {
    return e->arena_bytes;
}

size_t ag_engine_arena_bytes_for(const ag_model *model, const ag_engine_options *options, int width,
                                 int height) {
    ag_engine *e;
    ag_error err;
    size_t bytes = 0;
    if (ag_engine_create(model, options, &e, &err) != AG_OK)
        return 0;
    e->measure_only = 1; /* plan, but allocate neither the arena nor prepared weights */
    if (ag_engine_prepare(e, width, height, &err) == AG_OK)
        bytes = e->arena_bytes;
    ag_engine_destroy(e);
    return bytes;
}

double ag_model_flop(const ag_model *model, int width, int height) {
    ag_engine e = {.model = model};
    plan_geometry(&e, width, height);
    double flop = 0.0;
    for (int i = 0; i < model->layer_count; i++) {
        const ag_layer *l = &model->layers[i];
        flop += 2.0 * e.geom[i].out_h * e.geom[i].out_w * l->out_c * (l->in_c / l->groups) * l->k *
                l->k;
    }
    return flop;
}
