/*
 * kind_wino.c - a modulated conv's fp32 Winograd kind (fp32 engines, 3x3 from 32 px): the op
 * table's modulated conv (ops_style.c) with its product on oneDNN's Winograd conv
 * (onednn.c's ag_wino_conv), over weights the model's engines share.
 */
#include "kind.h"

#include <stdlib.h>
#include <string.h>

/* AG_WINOGRAD=0 keeps every modulated conv on sgemm (A/B measurements and tests). */
static int wino_off(void) {
    const char *v = getenv("AG_WINOGRAD");
    return v && strcmp(v, "0") == 0;
}

static int wino_applies(const ag_engine *e, int gi) {
    return ag_kind_modconv_3x3(e, gi) && !ag_mode_modconv_bf16(e) && !ag_mode_modconv_int8(e) &&
           !wino_off();
}

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

AG_KIND_SAME_WEIGHTS(ag_wino_conv)

static int wino_prepare(ag_engine *e, int gi, void *prepared, ag_error *err) {
    return ag_wino_conv_prepare_weights(e->exec[gi].kernel, ag_engine_head(e, gi)->weight, prepared,
                                        err);
}

static void wino_bind(ag_engine *e, int gi) {
    ag_wino_conv_bind(e->exec[gi].kernel, ag_kind_weights(e, gi), ag_engine_buffer(e, e->band_id),
                      ag_engine_buffer(e, e->scratch_id));
}

static void wino_node(const void *kernel, const ag_node *n, const ag_op_io *io) {
    const float *d = ag_modconv_demod(n, io, NULL);
    ag_wino_conv_run(kernel, io->out, io->src[0], io->src[1], d, n->bias, io->threads);
}

AG_KIND_DESTROY(ag_wino_conv)

const ag_kind ag_kind_modconv_wino = {
    .name = "modconv_wino",
    .applies = wino_applies,
    .create = wino_create,
    .same_weights = kind_same_ag_wino_conv,
    .prepare = wino_prepare,
    .bind = wino_bind,
    .run = ag_kind_run_node,
    .node = wino_node,
    .destroy = kind_destroy_ag_wino_conv,
};
