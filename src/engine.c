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

static size_t floats(size_t n) { return n * sizeof(float); }

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

/*
 * oneDNN backend. Step i runs layer i: it reads P[i] (its padded input) and writes Y[i]
 * (its conv output), then writes P[i+1] (or A[i], the activated map a resize reads). A
 * residual block keeps its input P[s] alive until the add two layers later.
 */
static void plan_onednn(ag_engine *e, plan_builder *pb, int *p_ids, int *y_ids, int *a_ids) {
    const ag_model *m = e->model;
    int n = m->layer_count;
    for (int i = 0; i < n; i++) {
        const ag_layer *l = &m->layers[i];
        const ag_layer_geom *g = &e->geom[i];
        int last_read = l->residual == AG_RESIDUAL_SAVE ? i + 2 : i;
        p_ids[i] = plan_add(pb, floats((size_t)g->hp * g->wp * l->in_c), i > 0 ? i - 1 : 0,
                            last_read);
        y_ids[i] = plan_add(pb, floats((size_t)g->out_h * g->out_w * l->out_c), i, i);
        a_ids[i] = -1;
        if (i + 1 < n && m->layers[i + 1].resize_before)
            a_ids[i] = plan_add(pb, floats((size_t)g->out_h * g->out_w * l->out_c), i, i);
    }
}

/* Reference backend: two activation buffers that swap, the padded input and the residual. */
static void plan_reference(ag_engine *e, plan_builder *pb, int *ids) {
    size_t act = 0, padded = 0;
    for (int i = 0; i < e->model->layer_count; i++) {
        const ag_layer *l = &e->model->layers[i];
        const ag_layer_geom *g = &e->geom[i];
        size_t in = (size_t)g->in_h * g->in_w * l->in_c, out = (size_t)g->out_h * g->out_w * l->out_c;
        act = in > act ? in : act;
        act = out > act ? out : act;
        size_t p = (size_t)g->hp * g->wp * l->in_c;
        padded = p > padded ? p : padded;
    }
    int steps = e->model->layer_count;
    for (int i = 0; i < 4; i++)
        ids[i] = plan_add(pb, floats(i == 2 ? padded : act), 0, steps);
}

/* ---- oneDNN primitives and weights ----------------------------------------------------- */

static void destroy_convs(ag_engine *e) {
    for (int i = 0; i < AG_MAX_LAYERS; i++) {
        ag_dnnl_conv_destroy(e->convs[i]);
        e->convs[i] = NULL;
    }
}

/* Create every layer's primitive for the planned geometry; keep the prepared weights when
 * every layout is unchanged (the usual case when only the image size changes). */
static int create_convs(ag_engine *e, size_t *scratch_max, ag_error *err) {
    const ag_model *m = e->model;
    ag_dnnl_conv *fresh[AG_MAX_LAYERS] = {0};
    size_t weight_bytes[AG_MAX_LAYERS], total = 0;
    int same = e->weights != NULL, rc = AG_OK;
    *scratch_max = 0;
    for (int i = 0; i < m->layer_count && rc == AG_OK; i++) {
        const ag_layer *l = &m->layers[i];
        ag_conv_shape s = {e->geom[i].hp, e->geom[i].wp, l->in_c,   l->out_c,
                           l->k,          l->stride,     l->groups, l->bias != NULL};
        size_t scratch;
        rc = ag_dnnl_conv_create(e->dnnl, &s, &fresh[i], &scratch, &weight_bytes[i], err);
        if (rc == AG_OK) {
            *scratch_max = scratch > *scratch_max ? scratch : *scratch_max;
            e->weight_offsets[i] = total;
            total += (weight_bytes[i] + AG_ARENA_ALIGN - 1) & ~(size_t)(AG_ARENA_ALIGN - 1);
            same = same && ag_dnnl_conv_same_weights(fresh[i], e->convs[i]);
        }
    }
    if (rc) {
        for (int i = 0; i < m->layer_count; i++)
            ag_dnnl_conv_destroy(fresh[i]);
        return rc;
    }
    destroy_convs(e);
    memcpy(e->convs, fresh, sizeof fresh);
    if (same)
        return AG_OK;
    ag_free(e->weights_block);
    e->weights_block = ag_malloc(total + AG_ARENA_ALIGN);
    e->weights = NULL;
    if (!e->weights_block)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for %zu bytes of weights", total);
    uint8_t *aligned = (uint8_t *)(((uintptr_t)e->weights_block + AG_ARENA_ALIGN - 1) &
                                   ~(uintptr_t)(AG_ARENA_ALIGN - 1));
    for (int i = 0; i < m->layer_count && rc == AG_OK; i++)
        rc = ag_dnnl_conv_prepare_weights(e->convs[i], m->layers[i].weight,
                                          aligned + e->weight_offsets[i], err);
    if (rc == AG_OK)
        e->weights = aligned;
    return rc;
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
        rc = create_convs(e, &scratch, err);
        if (rc)
            return rc;
        plan_onednn(e, &pb, e->p_ids, e->y_ids, e->a_ids);
        e->scratch_id = plan_add(&pb, scratch, 0, steps);
    } else {
        plan_reference(e, &pb, e->ref_ids);
    }
    rc = allocate_arena(e, ag_arena_plan(pb.buffers, pb.count), err);
    if (rc)
        return rc;
    memcpy(e->buffers, pb.buffers, sizeof pb.buffers);
    bind_common(e, &pb, common);
    e->planned_w = width, e->planned_h = height;
    return AG_OK;
}

/* ---- run: oneDNN ----------------------------------------------------------------------- */

static float *buffer(ag_engine *e, int id) { return (float *)(e->arena + e->buffers[id].offset); }

/* After layer i's conv: norm, residual, activation, and the next layer's padded input. */
static void finish_layer(ag_engine *e, int i, const ag_io *io) {
    const ag_model *m = e->model;
    const ag_layer *l = &m->layers[i];
    const ag_layer_geom *g = &e->geom[i];
    float *y = buffer(e, e->y_ids[i]);
    if (i + 1 == m->layer_count) {
        ag_fused_output(io->out_f32, io->out_u8, io->bands, y, g->out_h, g->out_w, e->threads);
        return;
    }
    const ag_layer *next = &m->layers[i + 1];
    const ag_layer_geom *ng = &e->geom[i + 1];
    ag_fused_norm_stats(e->affine, e->partials, y, l->gamma, l->beta, g->out_h, g->out_w,
                        l->out_c, m->info.norm_eps, e->threads);
    const float *residual = l->residual == AG_RESIDUAL_ADD ? buffer(e, e->p_ids[i - 2]) : NULL;
    int lrelu = l->act == AG_ACT_LRELU;
    if (!next->resize_before) {
        ag_fused_norm_act_pad(buffer(e, e->p_ids[i + 1]), y, residual, e->affine, lrelu,
                              g->out_h, g->out_w, l->out_c, layer_pad(next), e->threads);
        return;
    }
    ag_pad none = {0, 0, 0, 0};
    float *a = buffer(e, e->a_ids[i]);
    ag_fused_norm_act_pad(a, y, residual, e->affine, lrelu, g->out_h, g->out_w, l->out_c, none,
                          e->threads);
    ag_fused_resize_pad(buffer(e, e->p_ids[i + 1]), a, e->row_taps[i + 1], e->col_taps[i + 1],
                        g->out_h, g->out_w, ng->in_h, ng->in_w, l->out_c, layer_pad(next),
                        e->threads);
}

static int run_onednn(ag_engine *e, const ag_io *io, ag_error *err) {
    const ag_model *m = e->model;
    void *scratch = e->arena + e->buffers[e->scratch_id].offset;
    ag_fused_input_pad(buffer(e, e->p_ids[0]), io->in_u8, io->in_f32, io->bands, e->planned_h,
                       e->planned_w, layer_pad(&m->layers[0]), e->threads);
    for (int i = 0; i < m->layer_count; i++) {
        ag_dnnl_conv_bind(e->convs[i], buffer(e, e->p_ids[i]), buffer(e, e->y_ids[i]),
                          m->layers[i].bias, e->weights + e->weight_offsets[i], scratch);
        int rc = ag_dnnl_conv_run(e->convs[i], err);
        if (rc)
            return rc;
        finish_layer(e, i, io);
    }
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
            ag_ref_layer_norm(y, l->gamma, l->beta, g->out_h, g->out_w, l->out_c,
                              m->info.norm_eps);
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
    if (o->precision != AG_PRECISION_FP32)
        return ag_error_set(err, AG_E_UNSUPPORTED, "precision %s is not available",
                            o->precision == AG_PRECISION_BF16 ? "bf16" : "int8");
    if (o->backend != AG_BACKEND_ONEDNN && o->backend != AG_BACKEND_REFERENCE)
        return ag_error_set(err, AG_E_ARG, "unknown backend %d", (int)o->backend);
    ag_engine *e = ag_calloc(1, sizeof *e);
    if (!e)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    e->model = model;
    e->options = *o;
    e->threads = o->threads > 0 ? o->threads : ag_cpu_count();
    e->resize = o->resize != AG_RESIZE_DEFAULT ? o->resize : model->info.resize;
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

size_t ag_engine_arena_bytes(const ag_engine *e) { return e->arena_bytes; }

size_t ag_engine_arena_bytes_for(const ag_model *model, const ag_engine_options *options,
                                 int width, int height) {
    ag_engine *e;
    ag_error err;
    size_t bytes = 0;
    if (ag_engine_create(model, options, &e, &err) == AG_OK &&
        ag_engine_prepare(e, width, height, &err) == AG_OK)
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
        flop += 2.0 * e.geom[i].out_h * e.geom[i].out_w * l->out_c * (l->in_c / l->groups) *
                l->k * l->k;
    }
    return flop;
}
