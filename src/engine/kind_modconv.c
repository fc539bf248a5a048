/*
 * kind_modconv.c - the modulated conv kinds (StyleGAN graphs: GPEN, GFPGAN): the op table's
 * modulated conv (ops_style.c) with one of three fast kernels made per plan for its shape:
 * bf16 products (bf16 engines), u8 x s8 (int8 engines, 3x3 only) or fp32 Winograd (fp32
 * engines, 3x3 from 32 px). Where none fits, the step is the generic one (sgemm).
 */
#include "kind.h"

#include "../util/util_internal.h"

#include <stdlib.h>
#include <string.h>

static int is_modconv(const ag_engine *e, int gi) {
    return ag_engine_head(e, gi)->op == AG_OP_MODCONV;
}

/* A 3x3 modulated conv with a one-pixel border, not upsampling: Winograd's and int8's. */
static int is_3x3(const ag_node *n) {
    return n->up != 2 && n->k == 3 && n->pad[0] == 1 && n->pad[1] == 1 && n->pad[2] == 1 &&
           n->pad[3] == 1;
}

/* AG_WINOGRAD=0 keeps every modulated conv on sgemm (A/B measurements and tests). */
static int wino_off(void) {
    const char *v = getenv("AG_WINOGRAD");
    return v && strcmp(v, "0") == 0;
}

static int bf16_applies(const ag_engine *e, int gi) {
    return is_modconv(e, gi) && ag_mode_modconv_bf16(e);
}

static int int8_applies(const ag_engine *e, int gi) {
    return is_modconv(e, gi) && ag_mode_modconv_int8(e) && is_3x3(ag_engine_head(e, gi));
}

static int wino_applies(const ag_engine *e, int gi) {
    return is_modconv(e, gi) && !ag_mode_modconv_bf16(e) && !ag_mode_modconv_int8(e) &&
           !wino_off() && is_3x3(ag_engine_head(e, gi));
}

/* The step: the op's kernel on whole maps, with this kernel as its fast path. */
static int run_bf16(ag_engine *e, int gi, const ag_io *io, ag_error *err) {
    (void)io, (void)err;
    ag_node_fast fast = {.bf16 = e->exec[gi].kernel};
    ag_engine_run_node(e, gi, &fast);
    return AG_OK;
}

static int run_int8(ag_engine *e, int gi, const ag_io *io, ag_error *err) {
    (void)io, (void)err;
    ag_node_fast fast = {.int8 = e->exec[gi].kernel};
    ag_engine_run_node(e, gi, &fast);
    return AG_OK;
}

static int run_wino(ag_engine *e, int gi, const ag_io *io, ag_error *err) {
    (void)io, (void)err;
    ag_node_fast fast = {.wino = e->exec[gi].kernel};
    ag_engine_run_node(e, gi, &fast);
    return AG_OK;
}

/* ---- bf16 products: over the model's shared bf16 weights ------------------------------- */

static int bf16_create(ag_engine *e, int gi, void **kernel, ag_kind_sizes *sizes, ag_error *err) {
    const ag_node *n = ag_engine_head(e, gi);
    ag_shape in = e->shapes[n->src[0]];
    int up = n->up == 2;
    int HP = up ? in.h : in.h + n->pad[0] + n->pad[1];
    int WP = up ? in.w : in.w + n->pad[2] + n->pad[3];
    ag_gemm_bf16 *mm = NULL;
    int rc =
        ag_gemm_bf16_create(e->dnnl, up, HP, WP, in.c, n->out_c, n->k, &mm, &sizes->scratch, err);
    *kernel = mm;
    return rc;
}

static void bf16_bind(ag_engine *e, int gi) {
    int head = e->groups[gi].head;
    ag_gemm_bf16_bind(e->exec[gi].kernel, e->model->bf16_of[head], e->model->demod_sq_of[head],
                      ag_engine_buffer(e, e->scratch_id));
}

static void bf16_destroy(void *kernel) {
    ag_gemm_bf16_destroy(kernel);
}

/* ---- u8 x s8: its band in the conv band buffer, its weights the engine's own (a quarter
 * of the fp32 ones) ----------------------------------------------------------------------- */

static int int8_create(ag_engine *e, int gi, void **kernel, ag_kind_sizes *sizes, ag_error *err) {
    const ag_node *n = ag_engine_head(e, gi);
    ag_shape in = e->shapes[n->src[0]];
    ag_int8_modconv *mm8 = NULL;
    int rc = ag_int8_modconv_create(e->dnnl, in.h, in.w, in.c, n->out_c, n->weight, &mm8,
                                    &sizes->scratch, &sizes->band, &sizes->weights, err);
    *kernel = mm8;
    return rc;
}

static int int8_same_weights(const void *kernel, const void *old) {
    return ag_int8_modconv_same_weights(kernel, old);
}

static int int8_prepare(ag_engine *e, int gi, void *prepared, ag_error *err) {
    return ag_int8_modconv_prepare_weights(e->exec[gi].kernel, prepared, err);
}

static void int8_bind(ag_engine *e, int gi) {
    ag_int8_modconv_bind(e->exec[gi].kernel, ag_kind_weights(e, gi),
                         ag_engine_buffer(e, e->band_id), ag_engine_buffer(e, e->scratch_id));
}

static void int8_destroy(void *kernel) {
    ag_int8_modconv_destroy(kernel);
}

/* ---- fp32 Winograd ----------------------------------------------------------------------- */

typedef struct wino_fill {
    ag_wino_conv *conv;
    const float *packed;
} wino_fill;

static int fill_wino(void *ctx, void *dst, ag_error *err) {
    wino_fill *f = ctx;
    return ag_wino_conv_prepare_weights(f->conv, f->packed, dst, err);
}

/* Its band goes in the conv band buffer, which no other step uses meanwhile. Its weights
 * (4x the model's at 128 px and up) are the model's, shared by its engines, unless another
 * engine of the model holds them in another layout (another size): then its own, counted
 * in sizes->weights. Measuring counts them as shared. */
static int wino_create(ag_engine *e, int gi, void **kernel, ag_kind_sizes *sizes, ag_error *err) {
    const ag_node *n = ag_engine_head(e, gi);
    ag_shape in = e->shapes[n->src[0]];
    ag_group_exec *x = &e->exec[gi];
    ag_wino_conv *wino = NULL;
    int rc = ag_wino_conv_create(e->dnnl, in.h, in.w, in.c, n->out_c, &wino, &sizes->scratch,
                                 &sizes->band, &sizes->weights, err);
    *kernel = wino;
    if (rc || !wino)
        return rc;
    if (!e->measure_only) {
        wino_fill fill = {wino, n->weight};
        ag_layout_request r = {NULL, 0, ag_wino_layout_same, sizes->weights, fill_wino, &fill};
        r.layout = ag_wino_conv_layout(wino, &r.layout_bytes);
        rc = ag_model_shared_weights(e->model, e->groups[gi].head, &r, &x->shared_weights, err);
    }
    if (rc == AG_OK && (x->shared_weights || e->measure_only))
        sizes->weights = 0;
    return rc;
}

static int wino_same_weights(const void *kernel, const void *old) {
    return ag_wino_conv_same_weights(kernel, old);
}

static int wino_prepare(ag_engine *e, int gi, void *prepared, ag_error *err) {
    return ag_wino_conv_prepare_weights(e->exec[gi].kernel, ag_engine_head(e, gi)->weight, prepared,
                                        err);
}

static void wino_bind(ag_engine *e, int gi) {
    ag_wino_conv_bind(e->exec[gi].kernel, ag_kind_weights(e, gi), ag_engine_buffer(e, e->band_id),
                      ag_engine_buffer(e, e->scratch_id));
}

static void wino_destroy(void *kernel) {
    ag_wino_conv_destroy(kernel);
}

const ag_kind ag_kind_modconv_bf16 = {
    .name = "modconv_bf16",
    .applies = bf16_applies,
    .create = bf16_create,
    .bind = bf16_bind,
    .run = run_bf16,
    .destroy = bf16_destroy,
};

const ag_kind ag_kind_modconv_int8 = {
    .name = "modconv_int8",
    .applies = int8_applies,
    .create = int8_create,
    .same_weights = int8_same_weights,
    .prepare = int8_prepare,
    .bind = int8_bind,
    .run = run_int8,
    .destroy = int8_destroy,
};

const ag_kind ag_kind_modconv_wino = {
    .name = "modconv_wino",
    .applies = wino_applies,
    .create = wino_create,
    .same_weights = wino_same_weights,
    .prepare = wino_prepare,
    .bind = wino_bind,
    .run = run_wino,
    .destroy = wino_destroy,
};
