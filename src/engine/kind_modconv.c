/*
 * kind_modconv.c - the modulated conv kinds (StyleGAN graphs: GPEN, GFPGAN) of the reduced
 * precisions: the op table's modulated conv (ops_style.c) with its product on a kernel made
 * per plan for its shape, bf16 products (bf16 engines) or u8 x s8 (int8 engines, 3x3 only);
 * fp32 engines' is kind_wino.c. Where none fits, the step is the generic one (sgemm).
 */
#include "kind.h"

#include "../util/util_internal.h"

static int bf16_applies(const ag_engine *e, int gi) {
    return ag_engine_head(e, gi)->op == AG_OP_MODCONV && ag_mode_modconv_bf16(e);
}

static int int8_applies(const ag_engine *e, int gi) {
    return ag_kind_modconv_3x3(e, gi) && ag_mode_modconv_int8(e);
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

/* The modulated conv's product as bf16 products over the model's bf16 weights; its
 * demodulation from their squared sums. */
static void bf16_node(const void *kernel, const ag_node *n, const ag_op_io *io) {
    const float *d = ag_modconv_demod(n, io, ag_gemm_bf16_demod_sq(kernel));
    ag_modconv_gemm(n, io, d, kernel);
}

AG_KIND_DESTROY(ag_gemm_bf16)

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

AG_KIND_SAME_WEIGHTS(ag_int8_modconv)

static int int8_prepare(ag_engine *e, int gi, void *prepared, ag_error *err) {
    return ag_int8_modconv_prepare_weights(e->exec[gi].kernel, prepared, err);
}

static void int8_bind(ag_engine *e, int gi) {
    ag_int8_modconv_bind(e->exec[gi].kernel, ag_kind_weights(e, gi),
                         ag_engine_buffer(e, e->band_id), ag_engine_buffer(e, e->scratch_id));
}

static void int8_node(const void *kernel, const ag_node *n, const ag_op_io *io) {
    const float *d = ag_modconv_demod(n, io, NULL);
    ag_int8_modconv_run(kernel, io->out, io->src[0], io->src[1], d, n->bias, io->threads);
}

AG_KIND_DESTROY(ag_int8_modconv)

const ag_kind ag_kind_modconv_bf16 = {
    .name = "modconv_bf16",
    .applies = bf16_applies,
    .create = bf16_create,
    .bind = bf16_bind,
    .run = ag_kind_run_node,
    .node = bf16_node,
    .destroy = kind_destroy_ag_gemm_bf16,
};

const ag_kind ag_kind_modconv_int8 = {
    .name = "modconv_int8",
    .applies = int8_applies,
    .create = int8_create,
    .same_weights = kind_same_ag_int8_modconv,
    .prepare = int8_prepare,
    .bind = int8_bind,
    .run = ag_kind_run_node,
    .node = int8_node,
    .destroy = kind_destroy_ag_int8_modconv,
};
