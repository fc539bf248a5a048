/*
 * onednn_int8.c - int8 convolutions on oneDNN 2.6 (C API): u8 x s8 -> s32 with a run-time
 * source zero point and per-channel output scales fixed at creation (onednn_int8.h has the math).
 * Runs on the ag_dnnl engine and stream of onednn.c. oneDNN 2.6 adds the bias before the
 * output scale (dst = scale * (acc + bias)), so the bias is passed divided by
 * x_scale * w_scale[oc], rewritten per run; the output scales are fixed at creation (see
 * onednn_int8.h for why).
 */
#include "onednn_int8.h"

#include "onednn_internal.h"

#include "../util/util_internal.h"

#include <dnnl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

struct ag_dnnl_int8_conv {
    ag_dnnl *dnnl;
    ag_int8_conv_shape shape;
    dnnl_primitive_t primitive;
    dnnl_memory_desc_t weight_md; /* the layout the primitive chose, compensation included */
    dnnl_memory_t src, dst, weight, bias, scratch;
    dnnl_memory_t x_zero, y_zero; /* run-time attribute arguments */
    float *w_scale, *bias_values; /* (OC) each; the bias rewritten per run */
    int32_t x_zero_value, y_zero_value;
    char impl[64];
};

static int dnnl_fail(ag_error *err, const char *what, dnnl_status_t st) {
    return ag_error_set(err, AG_E_INTERNAL, "oneDNN int8: %s failed (status %d)", what, (int)st);
}

static dnnl_engine_t engine_of(const ag_dnnl_int8_conv *c) {
    return (dnnl_engine_t)ag_dnnl_engine_handle(c->dnnl);
}

static dnnl_status_t weight_dims(const ag_int8_conv_shape *s, dnnl_dims_t w, int *ndims) {
    if (s->groups == 1) {
        *ndims = 4;
        w[0] = s->OC, w[1] = s->IC, w[2] = s->K, w[3] = s->K;
    } else {
        *ndims = 5;
        w[0] = s->groups, w[1] = s->OC / s->groups, w[2] = s->IC / s->groups, w[3] = s->K,
        w[4] = s->K;
    }
    return dnnl_success;
}

static dnnl_status_t init_desc(const ag_int8_conv_shape *s, dnnl_convolution_desc_t *desc) {
    int HO = (s->HP - s->K) / s->stride + 1, WO = (s->WP - s->K) / s->stride + 1, nd;
    dnnl_dims_t src_dims = {1, s->IC, s->HP, s->WP}, dst_dims = {1, s->OC, HO, WO};
    dnnl_dims_t bias_dims = {s->OC}, w, strides = {s->stride, s->stride}, zero = {0, 0};
    dnnl_memory_desc_t src, weight, bias, dst;
    weight_dims(s, w, &nd);
    dnnl_status_t st = dnnl_memory_desc_init_by_tag(&src, 4, src_dims, dnnl_u8, dnnl_nhwc);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_tag(&dst, 4, dst_dims, s->u8_dst ? dnnl_u8 : dnnl_f32,
                                          dnnl_nhwc);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_tag(&bias, 1, bias_dims, dnnl_f32, dnnl_x);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_tag(&weight, nd, w, dnnl_s8, dnnl_format_tag_any);
    if (st == dnnl_success)
        st = dnnl_convolution_forward_desc_init(
            desc, dnnl_forward_inference, dnnl_convolution_direct, &src, &weight,
            s->has_bias ? &bias : NULL, &dst, strides, zero, zero);
    return st;
}

typedef struct int8_attr {
    const ag_int8_conv_shape *shape;
    const float *scales; /* (OC) */
} int8_attr;

/* Output scales per OC fixed here (run-time ones have no VNNI kernel in oneDNN 2.6); zero
 * points at run time, so the primitive outlives an image. */
static dnnl_status_t set_int8_attr(dnnl_primitive_attr_t attr, const void *arg) {
    const int8_attr *a = arg;
    const int32_t runtime_s32 = DNNL_RUNTIME_S32_VAL;
    dnnl_status_t st = dnnl_primitive_attr_set_output_scales(attr, a->shape->OC, 1 << 1, a->scales);
    if (st == dnnl_success)
        st = dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_SRC, 1, 0, &runtime_s32);
    if (st == dnnl_success && a->shape->u8_dst)
        st = dnnl_primitive_attr_set_zero_points(attr, DNNL_ARG_DST, 1, 0, &runtime_s32);
    return st;
}

/* The primitive and the memories of its arguments (the bias is created from our own array
 * in create_memories). */
static dnnl_status_t create_primitive(ag_dnnl_int8_conv *c, const float *scales,
                                      dnnl_primitive_desc_t *pd, size_t *scratch_bytes) {
    dnnl_convolution_desc_t desc;
    const int8_attr attr = {&c->shape, scales};
    const ag_dnnl_arg_memory args[] = {{dnnl_query_src_md, 0, &c->src},
                                       {dnnl_query_dst_md, 0, &c->dst},
                                       {dnnl_query_weights_md, 0, &c->weight},
                                       {dnnl_query_scratchpad_md, 0, &c->scratch}};
    dnnl_status_t st = init_desc(&c->shape, &desc);
    if (st == dnnl_success)
        st = ag_dnnl_primitive_create(&desc, engine_of(c), set_int8_attr, &attr, args, 4,
                                      &c->primitive, pd, scratch_bytes);
    if (st == dnnl_success)
        c->weight_md = *dnnl_primitive_desc_query_md(*pd, dnnl_query_weights_md, 0);
    const char *impl = NULL;
    if (st == dnnl_success &&
        dnnl_primitive_desc_query(*pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success)
        snprintf(c->impl, sizeof c->impl, "%s", impl ? impl : "?");
    return st;
}

/* The bias and the run-time arguments, pointing at this object's own arrays. */
static dnnl_status_t create_memories(ag_dnnl_int8_conv *c) {
    dnnl_engine_t e = engine_of(c);
    dnnl_memory_desc_t oc_f32, one_s32;
    dnnl_dims_t oc = {c->shape.OC}, one = {1};
    dnnl_status_t st = dnnl_memory_desc_init_by_tag(&oc_f32, 1, oc, dnnl_f32, dnnl_x);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_tag(&one_s32, 1, one, dnnl_s32, dnnl_x);
    if (st == dnnl_success && c->shape.has_bias)
        st = dnnl_memory_create(&c->bias, &oc_f32, e, c->bias_values);
    if (st == dnnl_success)
        st = dnnl_memory_create(&c->x_zero, &one_s32, e, &c->x_zero_value);
    if (st == dnnl_success && c->shape.u8_dst)
        st = dnnl_memory_create(&c->y_zero, &one_s32, e, &c->y_zero_value);
    return st;
}

int ag_dnnl_int8_conv_create(ag_dnnl *dnnl, const ag_int8_conv_shape *shape, const float *w_scale,
                             float multiplier, ag_dnnl_int8_conv **out, size_t *scratch_bytes,
                             size_t *weight_bytes, ag_error *err) {
    *out = NULL;
    const ag_int8_conv_shape *s = shape;
    if (s->groups < 1 || s->IC % s->groups || s->OC % s->groups || s->K < 1 || s->stride < 1 ||
        s->HP < s->K || s->WP < s->K)
        return ag_error_set(err, AG_E_ARG, "int8 conv: bad shape");
    ag_dnnl_int8_conv *c = ag_calloc(1, sizeof *c);
    if (!c)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    c->dnnl = dnnl;
    c->shape = *shape;
    c->w_scale = ag_calloc((size_t)s->OC, sizeof(float));
    c->bias_values = ag_calloc((size_t)s->OC, sizeof(float));
    float *scales = ag_calloc((size_t)s->OC, sizeof(float));
    if (!c->w_scale || !c->bias_values || !scales) {
        ag_free(scales);
        ag_dnnl_int8_conv_destroy(c);
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    }
    for (int oc = 0; oc < s->OC; oc++) {
        c->w_scale[oc] = w_scale[oc];
        scales[oc] = w_scale[oc] * multiplier;
    }
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = create_primitive(c, scales, &pd, scratch_bytes);
    ag_free(scales); /* oneDNN keeps its own copy */
    if (st == dnnl_success)
        st = create_memories(c);
    if (st == dnnl_success)
        *weight_bytes = dnnl_memory_desc_get_size(&c->weight_md);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success) {
        ag_dnnl_int8_conv_destroy(c);
        return dnnl_fail(err, "convolution creation", st);
    }
    *out = c;
    return AG_OK;
}

void ag_dnnl_int8_conv_destroy(ag_dnnl_int8_conv *c) {
    if (!c)
        return;
    dnnl_memory_t mems[7] = {c->src, c->dst, c->weight, c->bias, c->scratch, c->x_zero, c->y_zero};
    for (int i = 0; i < 7; i++)
        if (mems[i])
            dnnl_memory_destroy(mems[i]);
    if (c->primitive)
        dnnl_primitive_destroy(c->primitive);
    ag_free(c->w_scale);
    ag_free(c->bias_values);
    ag_free(c);
}

int ag_dnnl_int8_conv_same_weights(const ag_dnnl_int8_conv *conv, const ag_dnnl_int8_conv *other) {
    return conv && other && dnnl_memory_desc_equal(&conv->weight_md, &other->weight_md);
}

const char *ag_dnnl_int8_conv_impl(const ag_dnnl_int8_conv *c) {
    return c->impl;
}

int ag_int8_weight_max(void) {
    const ag_cpu_info *cpu = ag_cpu_get_info();
    unsigned vnni = AG_CPU_AVX512_VNNI | AG_CPU_AVX_VNNI | AG_CPU_AMX_INT8;
    return (cpu->flags & cpu->onednn_flags & vnni) ? 127 : 63;
}

void ag_int8_quantize_weights(int8_t *q, float *w_scale, const float *w, int OC, size_t per_oc,
                              int qmax) {
    float top = (float)qmax;
    for (int oc = 0; oc < OC; oc++) {
        const float *row = w + (size_t)oc * per_oc;
        float amax = 0.0f;
        for (size_t i = 0; i < per_oc; i++)
            amax = fmaxf(amax, fabsf(row[i]));
        float scale = amax > 0.0f ? amax / top : 1.0f;
        w_scale[oc] = scale;
        for (size_t i = 0; i < per_oc; i++) {
            float v = rintf(row[i] / scale);
            q[(size_t)oc * per_oc + i] = (int8_t)(v > top ? top : v < -top ? -top : v);
        }
    }
}

int ag_dnnl_int8_conv_prepare_weights(ag_dnnl_int8_conv *c, const int8_t *w_s8, void *prepared,
                                      ag_error *err) {
    const ag_int8_conv_shape *s = &c->shape;
    dnnl_dims_t w;
    int nd;
    weight_dims(s, w, &nd);
    dnnl_memory_desc_t user_md;
    dnnl_status_t st =
        dnnl_memory_desc_init_by_tag(&user_md, nd, w, dnnl_s8, nd == 4 ? dnnl_oihw : dnnl_goihw);
    dnnl_memory_t user = NULL, dst = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t reorder = NULL;
    dnnl_engine_t e = engine_of(c);
    dnnl_stream_t stream = (dnnl_stream_t)ag_dnnl_stream_handle(c->dnnl);
    if (st == dnnl_success)
        st = dnnl_memory_create(&user, &user_md, e, (void *)w_s8);
    if (st == dnnl_success)
        st = dnnl_memory_create(&dst, &c->weight_md, e, prepared);
    /* Into the primitive's layout, which carries the zero-point compensation. */
    if (st == dnnl_success)
        st = dnnl_reorder_primitive_desc_create(&pd, &user_md, e, &c->weight_md, e, NULL);
    if (st == dnnl_success)
        st = dnnl_primitive_create(&reorder, pd);
    if (st == dnnl_success) {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, dst}};
        st = dnnl_primitive_execute(reorder, stream, 2, args);
    }
    if (st == dnnl_success)
        st = dnnl_stream_wait(stream);
    if (reorder)
        dnnl_primitive_destroy(reorder);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (dst)
        dnnl_memory_destroy(dst);
    if (user)
        dnnl_memory_destroy(user);
    return st == dnnl_success ? AG_OK : dnnl_fail(err, "weight reorder", st);
}

void ag_dnnl_int8_conv_bind(ag_dnnl_int8_conv *c, const uint8_t *src, void *dst,
                            void *prepared_weights, void *scratch) {
    dnnl_memory_set_data_handle(c->src, (void *)src);
    dnnl_memory_set_data_handle(c->dst, dst);
    dnnl_memory_set_data_handle(c->weight, prepared_weights);
    dnnl_memory_set_data_handle(c->scratch, scratch);
}

int ag_dnnl_int8_conv_run(ag_dnnl_int8_conv *c, const ag_int8_quant *q, const float *bias,
                          ag_error *err) {
    const ag_int8_conv_shape *s = &c->shape;
    for (int oc = 0; oc < s->OC && bias; oc++) /* in s32 steps: x_scale * w_scale each */
        c->bias_values[oc] = bias[oc] / (q->x_scale * c->w_scale[oc]);
    c->x_zero_value = q->x_zero;
    c->y_zero_value = q->y_zero;
    dnnl_exec_arg_t args[8] = {
        {DNNL_ARG_SRC, c->src},
        {DNNL_ARG_WEIGHTS, c->weight},
        {DNNL_ARG_DST, c->dst},
        {DNNL_ARG_SCRATCHPAD, c->scratch},
        {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, c->x_zero},
    };
    int n = 5;
    if (c->y_zero)
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, c->y_zero};
    if (c->bias)
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, c->bias};
    dnnl_stream_t stream = (dnnl_stream_t)ag_dnnl_stream_handle(c->dnnl);
    dnnl_status_t st = dnnl_primitive_execute(c->primitive, stream, n, args);
    if (st == dnnl_success)
        st = dnnl_stream_wait(stream);
    return st == dnnl_success ? AG_OK : dnnl_fail(err, "convolution", st);
}

void ag_quantize_u8(uint8_t *out, const float *in, size_t n, float scale, int32_t zero) {
    float inv = 1.0f / scale, z = (float)zero;
    for (size_t i = 0; i < n; i++) {
        float v = rintf(in[i] * inv) + z;
        out[i] = (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
    }
}

ag_int8_quant ag_int8_quant_from_range(float lo, float hi) {
    lo = fminf(lo, 0.0f), hi = fmaxf(hi, 0.0f);
    ag_int8_quant q = {.x_scale = hi > lo ? (hi - lo) / 255.0f : 1.0f};
    float z = rintf(-lo / q.x_scale);
    q.x_zero = (int32_t)(z < 0.0f ? 0.0f : z > 255.0f ? 255.0f : z);
    q.y_scale = q.x_scale, q.y_zero = q.x_zero;
    return q;
}
