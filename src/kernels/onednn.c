/*
 * onednn.c - oneDNN (v2.6 C API) convolutions: primitive creation, weight reorders, runs.
 * With onednn_int8.c, the only files that include dnnl.h. Runs on the caller's OpenMP
 * team (Debian's oneDNN is built with the OpenMP runtime), sized by omp_set_num_threads in
 * the engine. A conv with at most AG_NARROW_OC output channels does not go to oneDNN: its
 * kernels pad them to 16 lanes and reached 17 GFLOP/s on v3's 7x7 32->3 output (a tenth of
 * a core's peak), so it runs on ag_fused_conv_narrow behind the same functions.
 */
#include "onednn.h"

#include "kernels.h"
#include "onednn_internal.h"

#include "../util/util_internal.h"

#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* oneDNN caches compiled primitives per shape, 1024 by default: a server seeing many image
 * sizes would keep them all. Engines hold their own primitives for the planned size, so the
 * cache only saves recompiling when sizes alternate: a few sizes' worth is enough. The
 * environment variable still wins for tuning. */
#define AG_DNNL_PRIMITIVE_CACHE 64

static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

static void cap_primitive_cache(void) {
    if (!getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") && !getenv("DNNL_PRIMITIVE_CACHE_CAPACITY"))
        dnnl_set_primitive_cache_capacity(AG_DNNL_PRIMITIVE_CACHE);
}

struct ag_dnnl {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
};

struct ag_dnnl_conv {
    ag_dnnl *dnnl;
    ag_conv_shape shape;
    dnnl_primitive_t primitive;
    dnnl_memory_desc_t weight_md;                      /* the layout the primitive chose */
    dnnl_memory_desc_t src_md_blocked, dst_md_blocked; /* Winograd's (below) */
    dnnl_memory_t src, dst, weight, bias, scratch;
    /* Winograd: src, dst are the blocked copies in the scratchpad (after its own
     * scratchpad), user_src, user_dst the caller's NHWC buffers, reordered in and out */
    int wino;
    dnnl_primitive_t to_blocked, from_blocked;
    dnnl_memory_t user_src, user_dst;
    size_t wino_scratch, src_blocked_bytes;
    int narrow; /* runs on ag_fused_conv_narrow with the buffers below, no primitive */
    const float *narrow_src, *narrow_weight, *narrow_bias;
    float *narrow_dst;
};

static int is_narrow(const ag_conv_shape *s) {
    return s->OC <= AG_NARROW_OC && s->stride == 1 && s->groups == 1 && s->K > 1 && !s->bf16_src &&
           !s->bf16_dst && !(s->zero_pad[0] | s->zero_pad[1] | s->zero_pad[2] | s->zero_pad[3]);
}

static int dnnl_fail(ag_error *err, const char *what, dnnl_status_t st) {
    return ag_error_set(err, AG_E_INTERNAL, "oneDNN: %s failed (status %d)", what, (int)st);
}

int ag_dnnl_create(ag_dnnl **out, ag_error *err) {
    *out = NULL;
    pthread_once(&cache_once, cap_primitive_cache);
    ag_dnnl *d = ag_calloc(1, sizeof *d);
    if (!d)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    dnnl_status_t st = dnnl_engine_create(&d->engine, dnnl_cpu, 0);
    if (st == dnnl_success)
        st = dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags);
    if (st != dnnl_success) {
        ag_dnnl_destroy(d);
        return dnnl_fail(err, "engine creation", st);
    }
    *out = d;
    return AG_OK;
}

void ag_dnnl_destroy(ag_dnnl *d) {
    if (!d)
        return;
    if (d->stream)
        dnnl_stream_destroy(d->stream);
    if (d->engine)
        dnnl_engine_destroy(d->engine);
    ag_free(d);
}

static dnnl_status_t init_mds(const ag_conv_shape *s, dnnl_memory_desc_t *src,
                              dnnl_memory_desc_t *weight, dnnl_memory_desc_t *bias,
                              dnnl_memory_desc_t *dst) {
    int HO = (s->HP + s->zero_pad[0] + s->zero_pad[1] - s->K) / s->stride + 1;
    int WO = (s->WP + s->zero_pad[2] + s->zero_pad[3] - s->K) / s->stride + 1;
    dnnl_dims_t src_dims = {1, s->IC, s->HP, s->WP}, dst_dims = {1, s->OC, HO, WO};
    dnnl_dims_t bias_dims = {s->OC};
    dnnl_data_type_t src_dt = s->bf16_src ? dnnl_bf16 : dnnl_f32;
    dnnl_data_type_t dst_dt = s->bf16_dst ? dnnl_bf16 : dnnl_f32;
    dnnl_status_t st = dnnl_memory_desc_init_by_tag(src, 4, src_dims, src_dt, dnnl_nhwc);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_tag(dst, 4, dst_dims, dst_dt, dnnl_nhwc);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_tag(bias, 1, bias_dims, dnnl_f32, dnnl_x);
    if (st != dnnl_success)
        return st;
    if (s->groups == 1) {
        dnnl_dims_t w = {s->OC, s->IC, s->K, s->K};
        return dnnl_memory_desc_init_by_tag(weight, 4, w, src_dt, dnnl_format_tag_any);
    }
    dnnl_dims_t w = {s->groups, s->OC / s->groups, s->IC / s->groups, s->K, s->K};
    return dnnl_memory_desc_init_by_tag(weight, 5, w, src_dt, dnnl_format_tag_any);
}

dnnl_status_t ag_dnnl_primitive_create(const void *desc, dnnl_engine_t engine, ag_dnnl_attr_fn more,
                                       const void *more_arg, const ag_dnnl_arg_memory *args,
                                       int arg_count, dnnl_primitive_t *primitive,
                                       dnnl_primitive_desc_t *pd, size_t *scratch_bytes) {
    *pd = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_status_t st = dnnl_primitive_attr_create(&attr);
    if (st == dnnl_success)
        st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (st == dnnl_success && more)
        st = more(attr, more_arg);
    if (st == dnnl_success)
        st = dnnl_primitive_desc_create(pd, desc, attr, engine, NULL);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (st == dnnl_success)
        st = dnnl_primitive_create(primitive, *pd);
    for (int i = 0; i < arg_count && st == dnnl_success; i++)
        st = dnnl_memory_create(args[i].mem,
                                dnnl_primitive_desc_query_md(*pd, args[i].what, args[i].index),
                                engine, DNNL_MEMORY_NONE);
    if (st == dnnl_success && scratch_bytes)
        *scratch_bytes = dnnl_memory_desc_get_size(
            dnnl_primitive_desc_query_md(*pd, dnnl_query_scratchpad_md, 0));
    return st;
}

static void release(ag_dnnl_conv *c);

static size_t align64(size_t bytes) {
    return (bytes + 63) & ~(size_t)63;
}

static int wino_fits(const ag_conv_shape *s) {
    int WO = s->WP + s->zero_pad[2] + s->zero_pad[3] - 2;
    return s->winograd && !s->bf16_src && !s->bf16_dst && s->groups == 1 && s->K == 3 &&
           s->stride == 1 && s->IC % 16 == 0 && s->OC % 16 == 0 && WO >= AG_WINO_MIN_SIDE;
}

/* Winograd: the channel-blocked copies of src and dst, the NHWC memories of the caller's
 * buffers and the reorders between them. */
static dnnl_status_t create_wino_reorders(ag_dnnl_conv *c, const dnnl_memory_desc_t *src,
                                          const dnnl_memory_desc_t *dst) {
    dnnl_engine_t e = c->dnnl->engine;
    const dnnl_memory_desc_t *bsrc = &c->src_md_blocked, *bdst = &c->dst_md_blocked;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_memory_create(&c->user_src, src, e, DNNL_MEMORY_NONE);
    if (st == dnnl_success)
        st = dnnl_memory_create(&c->user_dst, dst, e, DNNL_MEMORY_NONE);
    if (st == dnnl_success)
        st = dnnl_reorder_primitive_desc_create(&pd, src, e, bsrc, e, NULL);
    if (st == dnnl_success)
        st = dnnl_primitive_create(&c->to_blocked, pd);
    if (pd)
        dnnl_primitive_desc_destroy(pd), pd = NULL;
    if (st == dnnl_success)
        st = dnnl_reorder_primitive_desc_create(&pd, bdst, e, dst, e, NULL);
    if (st == dnnl_success)
        st = dnnl_primitive_create(&c->from_blocked, pd);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    c->src_blocked_bytes = align64(dnnl_memory_desc_get_size(bsrc));
    return st;
}

/* The conv's primitive and its memories (the bias's only when it has one); `wino`: on the
 * Winograd kernel, between channel-blocked copies of src and dst. */
static dnnl_status_t create_primitive(ag_dnnl_conv *c, int wino, dnnl_primitive_desc_t *pd,
                                      size_t *scratch_bytes) {
    const ag_conv_shape *s = &c->shape;
    dnnl_memory_desc_t src, weight, bias, dst;
    dnnl_status_t st = init_mds(s, &src, &weight, &bias, &dst);
    dnnl_convolution_desc_t desc;
    dnnl_dims_t strides = {s->stride, s->stride};
    dnnl_dims_t pad_l = {s->zero_pad[0], s->zero_pad[2]}, pad_r = {s->zero_pad[1], s->zero_pad[3]};
    if (st == dnnl_success && wino)
        st = dnnl_memory_desc_init_by_tag(&c->src_md_blocked, 4, src.dims, dnnl_f32, dnnl_nChw16c);
    if (st == dnnl_success && wino)
        st = dnnl_memory_desc_init_by_tag(&c->dst_md_blocked, 4, dst.dims, dnnl_f32, dnnl_nChw16c);
    if (st == dnnl_success)
        st = dnnl_convolution_forward_desc_init(
            &desc, dnnl_forward_inference,
            wino ? dnnl_convolution_winograd : dnnl_convolution_direct,
            wino ? &c->src_md_blocked : &src, &weight, s->has_bias ? &bias : NULL,
            wino ? &c->dst_md_blocked : &dst, strides, pad_l, pad_r);
    const ag_dnnl_arg_memory args[] = {{dnnl_query_src_md, 0, &c->src},
                                       {dnnl_query_dst_md, 0, &c->dst},
                                       {dnnl_query_weights_md, 0, &c->weight},
                                       {dnnl_query_scratchpad_md, 0, &c->scratch},
                                       {dnnl_query_weights_md, 1, &c->bias}};
    if (st == dnnl_success)
        st = ag_dnnl_primitive_create(&desc, c->dnnl->engine, NULL, NULL, args, s->has_bias ? 5 : 4,
                                      &c->primitive, pd, scratch_bytes);
    if (st == dnnl_success)
        c->weight_md = *dnnl_primitive_desc_query_md(*pd, dnnl_query_weights_md, 0);
    if (st == dnnl_success && wino) {
        st = create_wino_reorders(c, &src, &dst);
        c->wino = 1;
        c->wino_scratch = align64(*scratch_bytes);
        *scratch_bytes = c->wino_scratch + c->src_blocked_bytes +
                         align64(dnnl_memory_desc_get_size(&c->dst_md_blocked));
    }
    return st;
}

int ag_dnnl_conv_create(ag_dnnl *dnnl, const ag_conv_shape *shape, ag_dnnl_conv **out,
                        size_t *scratch_bytes, size_t *weight_bytes, ag_error *err) {
    *out = NULL;
    ag_dnnl_conv *c = ag_calloc(1, sizeof *c);
    if (!c)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    c->dnnl = dnnl;
    c->shape = *shape;
    if (is_narrow(shape)) { /* weights (OC, K, K, IC): each kernel row's runs contiguous */
        c->narrow = 1;
        *scratch_bytes = 0;
        *weight_bytes =
            sizeof(float) * (size_t)shape->OC * shape->K * ag_narrow_run(shape->K, shape->IC);
        *out = c;
        return AG_OK;
    }
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st =
        wino_fits(shape) ? create_primitive(c, 1, &pd, scratch_bytes) : dnnl_unimplemented;
    if (st == dnnl_unimplemented) { /* no Winograd kernel here, or not asked: direct */
        if (pd)
            dnnl_primitive_desc_destroy(pd), pd = NULL;
        release(c);
        st = create_primitive(c, 0, &pd, scratch_bytes);
    }
    if (st == dnnl_success)
        *weight_bytes = dnnl_memory_desc_get_size(&c->weight_md);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) {
        ag_dnnl_conv_destroy(c);
        return dnnl_fail(err, "convolution creation", st);
    }
    *out = c;
    return AG_OK;
}

/* Its primitives and memories destroyed, the shape kept. */
static void release(ag_dnnl_conv *c) {
    dnnl_memory_t mems[7] = {c->src,     c->dst,      c->weight,  c->bias,
                             c->scratch, c->user_src, c->user_dst};
    for (int i = 0; i < 7; i++)
        if (mems[i])
            dnnl_memory_destroy(mems[i]);
    dnnl_primitive_t prims[3] = {c->primitive, c->to_blocked, c->from_blocked};
    for (int i = 0; i < 3; i++)
        if (prims[i])
            dnnl_primitive_destroy(prims[i]);
    c->src = c->dst = c->weight = c->bias = c->scratch = c->user_src = c->user_dst = NULL;
    c->primitive = c->to_blocked = c->from_blocked = NULL;
    c->wino = 0;
}

void ag_dnnl_conv_destroy(ag_dnnl_conv *c) {
    if (!c)
        return;
    release(c);
    ag_free(c);
}

int ag_dnnl_conv_same_weights(const ag_dnnl_conv *conv, const ag_dnnl_conv *other) {
    if (!conv || !other || conv->narrow != other->narrow)
        return 0;
    if (conv->narrow)
        return conv->shape.OC == other->shape.OC && conv->shape.IC == other->shape.IC &&
               conv->shape.K == other->shape.K;
    return dnnl_memory_desc_equal(&conv->weight_md, &other->weight_md);
}

const void *ag_dnnl_conv_wino_layout(const ag_dnnl_conv *conv, size_t *bytes) {
    *bytes = sizeof conv->weight_md;
    return conv->wino ? &conv->weight_md : NULL;
}

/* Reorder `from` (user_md) into `to` (to_md) on d's stream, waiting for it. */
static dnnl_status_t reorder(ag_dnnl *d, const dnnl_memory_desc_t *user_md, const void *from,
                             const dnnl_memory_desc_t *to_md, void *to) {
    dnnl_memory_t user = NULL, dst = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t r = NULL;
    dnnl_status_t st = dnnl_memory_create(&user, user_md, d->engine, (void *)from);
    if (st == dnnl_success)
        st = dnnl_memory_create(&dst, to_md, d->engine, to);
    if (st == dnnl_success)
        st = dnnl_reorder_primitive_desc_create(&pd, user_md, d->engine, to_md, d->engine, NULL);
    if (st == dnnl_success)
        st = dnnl_primitive_create(&r, pd);
    if (st == dnnl_success) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, dst}};
        st = dnnl_primitive_execute(r, d->stream, 2, args);
    }
    if (st == dnnl_success)
        st = dnnl_stream_wait(d->stream);
    if (r)
        dnnl_primitive_destroy(r);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (dst)
        dnnl_memory_destroy(dst);
    if (user)
        dnnl_memory_destroy(user);
    return st;
}

int ag_dnnl_conv_prepare_weights(ag_dnnl_conv *c, const float *weight, void *prepared,
                                 ag_error *err) {
    const ag_conv_shape *s = &c->shape;
    if (c->narrow) {
        ag_narrow_pack(prepared, weight, s->OC, s->IC, s->K);
        return AG_OK;
    }
    dnnl_memory_desc_t user_md;
    dnnl_status_t st;
    if (s->groups == 1) {
        dnnl_dims_t w = {s->OC, s->IC, s->K, s->K};
        st = dnnl_memory_desc_init_by_tag(&user_md, 4, w, dnnl_f32, dnnl_oihw);
    } else {
        dnnl_dims_t w = {s->groups, s->OC / s->groups, s->IC / s->groups, s->K, s->K};
        st = dnnl_memory_desc_init_by_tag(&user_md, 5, w, dnnl_f32, dnnl_goihw);
    }
    if (st == dnnl_success)
        st = reorder(c->dnnl, &user_md, weight, &c->weight_md, prepared);
    return st == dnnl_success ? AG_OK : dnnl_fail(err, "weight reorder", st);
}

void ag_dnnl_conv_bind(ag_dnnl_conv *c, const void *src, void *dst, const float *bias,
                       void *prepared_weights, void *scratch) {
    if (c->narrow) {
        c->narrow_src = src, c->narrow_dst = dst;
        c->narrow_weight = prepared_weights, c->narrow_bias = bias;
        return;
    }
    if (c->wino) { /* the scratchpad: oneDNN's, then the blocked src, then the blocked dst */
        uint8_t *blocked = (uint8_t *)scratch + c->wino_scratch;
        dnnl_memory_set_data_handle(c->user_src, (void *)src);
        dnnl_memory_set_data_handle(c->user_dst, dst);
        src = blocked, dst = blocked + c->src_blocked_bytes;
    }
    dnnl_memory_set_data_handle(c->src, (void *)src);
    dnnl_memory_set_data_handle(c->dst, dst);
    dnnl_memory_set_data_handle(c->weight, prepared_weights);
    dnnl_memory_set_data_handle(c->scratch, scratch);
    if (c->bias)
        dnnl_memory_set_data_handle(c->bias, (void *)bias);
}

int ag_dnnl_conv_run(ag_dnnl_conv *c, ag_error *err) {
    if (c->narrow) {
        const ag_conv_shape *s = &c->shape;
        ag_fused_conv_narrow(c->narrow_dst, c->narrow_src, c->narrow_weight,
                             s->has_bias ? c->narrow_bias : NULL, s->HP, s->WP, s->IC, s->OC, s->K,
                             omp_get_max_threads());
        return AG_OK;
    }
    dnnl_exec_arg_t args[5] = {
        {DNNL_ARG_SRC, c->src},   {DNNL_ARG_WEIGHTS, c->weight},
        {DNNL_ARG_DST, c->dst},   {DNNL_ARG_SCRATCHPAD, c->scratch},
        {DNNL_ARG_BIAS, c->bias},
    };
    dnnl_status_t st = dnnl_success;
    if (c->wino) {
        dnnl_exec_arg_t in[2] = {{DNNL_ARG_FROM, c->user_src}, {DNNL_ARG_TO, c->src}};
        st = dnnl_primitive_execute(c->to_blocked, c->dnnl->stream, 2, in);
    }
    if (st == dnnl_success)
        st = dnnl_primitive_execute(c->primitive, c->dnnl->stream, c->bias ? 5 : 4, args);
    if (st == dnnl_success && c->wino) {
        dnnl_exec_arg_t out[2] = {{DNNL_ARG_FROM, c->dst}, {DNNL_ARG_TO, c->user_dst}};
        st = dnnl_primitive_execute(c->from_blocked, c->dnnl->stream, 2, out);
    }
    if (st == dnnl_success)
        st = dnnl_stream_wait(c->dnnl->stream);
    return st == dnnl_success ? AG_OK : dnnl_fail(err, "convolution", st);
}

/* ---- Winograd: the fp32 modulated 3x3 convs ------------------------------------------- */

/* Output rows per band: maps up to two bands high run whole (measured: a 32-row band of
 * GPEN's 32 px layer ran 1.6x faster than two of 16), the rest 16 at a time (at 64 px and up
 * 16 rows ran as fast as 32 or 64 with a smaller scratchpad). */
#define WINO_BAND_ROWS 16

struct ag_wino_conv {
    ag_dnnl *dnnl;
    int H, W, IC, OC, rows; /* the map (padding 1 keeps its size), output rows per band */
    dnnl_primitive_t primitive;
    dnnl_memory_desc_t weight_md;
    dnnl_memory_t src, dst, weight, scratch;
    float *in_band, *out_band; /* bound: (IC / 16, rows + 2, W, 16), (OC / 16, rows, W, 16) */
};

static dnnl_status_t wino_primitive(ag_wino_conv *c, dnnl_primitive_desc_t *pd,
                                    size_t *scratch_bytes) {
    dnnl_memory_desc_t src, weight, dst;
    dnnl_dims_t sd = {1, c->IC, c->rows + 2, c->W}, dd = {1, c->OC, c->rows, c->W};
    dnnl_dims_t wd = {c->OC, c->IC, 3, 3}, strides = {1, 1}, pad_l = {0, 1}, pad_r = {0, 1};
    dnnl_status_t st = dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, dnnl_nChw16c);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, dnnl_nChw16c);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_tag(&weight, 4, wd, dnnl_f32, dnnl_format_tag_any);
    dnnl_convolution_desc_t desc;
    if (st == dnnl_success) /* the band holds its rows' zero padding; oneDNN adds the columns' */
        st = dnnl_convolution_forward_desc_init(&desc, dnnl_forward_inference,
                                                dnnl_convolution_winograd, &src, &weight, NULL,
                                                &dst, strides, pad_l, pad_r);
    const ag_dnnl_arg_memory args[] = {{dnnl_query_src_md, 0, &c->src},
                                       {dnnl_query_dst_md, 0, &c->dst},
                                       {dnnl_query_weights_md, 0, &c->weight},
                                       {dnnl_query_scratchpad_md, 0, &c->scratch}};
    if (st == dnnl_success)
        st = ag_dnnl_primitive_create(&desc, c->dnnl->engine, NULL, NULL, args, 4, &c->primitive,
                                      pd, scratch_bytes);
    return st;
}

int ag_wino_conv_create(ag_dnnl *dnnl, int H, int W, int IC, int OC, ag_wino_conv **out,
                        size_t *scratch_bytes, size_t *band_bytes, size_t *weight_bytes,
                        ag_error *err) {
    *out = NULL;
    *scratch_bytes = *band_bytes = *weight_bytes = 0;
    if (IC % 16 || OC % 16 || H < AG_WINO_MIN_SIDE || W < AG_WINO_MIN_SIDE)
        return AG_OK;
    ag_wino_conv *c = ag_calloc(1, sizeof *c);
    if (!c)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    c->dnnl = dnnl;
    c->H = H, c->W = W, c->IC = IC, c->OC = OC;
    c->rows = H <= 2 * WINO_BAND_ROWS ? H : WINO_BAND_ROWS;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = wino_primitive(c, &pd, scratch_bytes);
    if (st == dnnl_unimplemented) { /* no Winograd kernel for this CPU: the sgemm path */
        if (pd)
            dnnl_primitive_desc_destroy(pd);
        ag_free(c);
        return AG_OK;
    }
    if (st == dnnl_success) {
        c->weight_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        *weight_bytes = dnnl_memory_desc_get_size(&c->weight_md);
        *band_bytes = sizeof(float) * ((size_t)(c->rows + 2) * W * IC + (size_t)c->rows * W * OC);
    }
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) {
        ag_wino_conv_destroy(c);
        return dnnl_fail(err, "Winograd convolution creation", st);
    }
    *out = c;
    return AG_OK;
}

void ag_wino_conv_destroy(ag_wino_conv *c) {
    if (!c)
        return;
    dnnl_memory_t mems[4] = {c->src, c->dst, c->weight, c->scratch};
    for (int i = 0; i < 4; i++)
        if (mems[i])
            dnnl_memory_destroy(mems[i]);
    if (c->primitive)
        dnnl_primitive_destroy(c->primitive);
    ag_free(c);
}

int ag_wino_conv_same_weights(const ag_wino_conv *c, const ag_wino_conv *other) {
    return c && other && dnnl_memory_desc_equal(&c->weight_md, &other->weight_md);
}

const void *ag_wino_conv_layout(const ag_wino_conv *c, size_t *bytes) {
    *bytes = sizeof c->weight_md;
    return &c->weight_md;
}

int ag_wino_layout_same(const void *a, const void *b) {
    return dnnl_memory_desc_equal(a, b);
}

int ag_wino_conv_prepare_weights(ag_wino_conv *c, const float *packed, void *prepared,
                                 ag_error *err) {
    /* oneDNN reorders into its Winograd layout only from plain tags: the packed (IC, 9, OC)
     * goes through hwio (9, IC, OC), a copy of OC-long runs. */
    size_t run = (size_t)c->OC, count = (size_t)9 * c->IC * run;
    float *hwio = ag_malloc(sizeof(float) * count);
    if (!hwio)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for a weight reorder");
    for (int ic = 0; ic < c->IC; ic++)
        for (int t = 0; t < 9; t++)
            memcpy(hwio + ((size_t)t * c->IC + ic) * run, packed + ((size_t)ic * 9 + t) * run,
                   sizeof(float) * run);
    dnnl_memory_desc_t user_md;
    dnnl_dims_t dims = {c->OC, c->IC, 3, 3};
    dnnl_status_t st = dnnl_memory_desc_init_by_tag(&user_md, 4, dims, dnnl_f32, dnnl_hwio);
    if (st == dnnl_success)
        st = reorder(c->dnnl, &user_md, hwio, &c->weight_md, prepared);
    ag_free(hwio);
    return st == dnnl_success ? AG_OK : dnnl_fail(err, "Winograd weight reorder", st);
}

void ag_wino_conv_bind(ag_wino_conv *c, void *prepared_weights, void *band, void *scratch) {
    c->in_band = band;
    c->out_band = c->in_band + (size_t)(c->rows + 2) * c->W * c->IC;
    dnnl_memory_set_data_handle(c->src, c->in_band);
    dnnl_memory_set_data_handle(c->dst, c->out_band);
    dnnl_memory_set_data_handle(c->weight, prepared_weights);
    dnnl_memory_set_data_handle(c->scratch, scratch);
}

void ag_wino_conv_run(const ag_wino_conv *c, float *out, const float *src, const float *style,
                      const float *scale, const float *shift, int threads) {
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, c->src},
                               {DNNL_ARG_WEIGHTS, c->weight},
                               {DNNL_ARG_DST, c->dst},
                               {DNNL_ARG_SCRATCHPAD, c->scratch}};
    for (int y0 = 0; y0 < c->H; y0 += c->rows) {
        int first = y0 + c->rows <= c->H ? y0 : c->H - c->rows; /* the last band moved up */
        ag_fused_modulate_blocked(c->in_band, src, c->H, c->W, c->IC, style, first - 1, c->rows + 2,
                                  threads);
        dnnl_status_t st = dnnl_primitive_execute(c->primitive, c->dnnl->stream, 4, args);
        if (st == dnnl_success)
            st = dnnl_stream_wait(c->dnnl->stream);
        AG_ASSERT(st == dnnl_success); /* shapes fixed at create: nothing left to fail */
        ag_fused_unblock_scale_shift(out + (size_t)first * c->W * c->OC, c->out_band, c->rows, c->W,
                                     c->OC, scale, shift, threads);
    }
}

void *ag_dnnl_engine_handle(const ag_dnnl *dnnl) {
    return dnnl->engine;
}
void *ag_dnnl_stream_handle(const ag_dnnl *dnnl) {
    return dnnl->stream;
}

/* oneDNN's effective ISA (its detection lowered by ONEDNN_MAX_CPU_ISA): its name into
 * `name` and the AG_CPU_* flags it implies. */
static unsigned effective_isa(char *name, size_t name_bytes) {
    /* dnnl_cpu_isa_t values are bit sets: each level contains the bits of those below. */
    static const struct {
        unsigned bits;
        const char *name;
        unsigned flags;
    } levels[] = {
        {dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx",
         AG_CPU_AMX_TILE | AG_CPU_AMX_INT8 | AG_CPU_AMX_BF16 | AG_CPU_AVX512_BF16 |
             AG_CPU_AVX512_VNNI},
        {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16",
         AG_CPU_AVX512_BF16 | AG_CPU_AVX512_VNNI},
        {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni", AG_CPU_AVX512_VNNI},
        {dnnl_cpu_isa_avx512_core, "avx512_core", 0},
        {dnnl_cpu_isa_avx2_vnni, "avx2_vnni", AG_CPU_AVX_VNNI},
        {dnnl_cpu_isa_avx2, "avx2", 0},
        {dnnl_cpu_isa_avx, "avx", 0},
        {dnnl_cpu_isa_sse41, "sse41", 0},
    };
    const unsigned avx2 = AG_CPU_AVX2 | AG_CPU_FMA;
    const unsigned avx512 = avx2 | AG_CPU_AVX512F | AG_CPU_AVX512BW | AG_CPU_AVX512VL |
                            AG_CPU_AVX512DQ | AG_CPU_AVX512CD;
    unsigned isa = (unsigned)dnnl_get_effective_cpu_isa();
    for (size_t i = 0; i < sizeof levels / sizeof levels[0]; i++) {
        if ((isa & levels[i].bits) != levels[i].bits)
            continue;
        snprintf(name, name_bytes, "%s", levels[i].name);
        unsigned flags = levels[i].flags;
        if ((levels[i].bits & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core)
            flags |= avx512;
        else if ((levels[i].bits & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2)
            flags |= avx2;
        return flags;
    }
    snprintf(name, name_bytes, "%s", "any");
    return 0;
}

static ag_cpu_info cpu;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void detect_cpu(void) {
    ag_cpu_detect(&cpu);
    cpu.onednn_flags = cpu.flags & effective_isa(cpu.onednn_isa, sizeof cpu.onednn_isa);
}

/* Here rather than in src/util/cpu.c: util sits below the kernels and does not call them. */
const ag_cpu_info *ag_cpu_get_info(void) {
    pthread_once(&cpu_once, detect_cpu);
    return &cpu;
}
