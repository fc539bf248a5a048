/*
 * upscaler_internal.h - what the builders of users' upscaler checkpoints share
 * (realesrgan.c: RRDBNet and SRVGGNetCompact, span.c, plksr.c): derived tensors added to the
 * parsed set before the model is built, and conv nodes naming tensors of the set.
 */
#ifndef AG_UPSCALER_INTERNAL_H
#define AG_UPSCALER_INTERNAL_H

#include "model_internal.h"

/* The derived (3 s², 3, 1, 1) conv copying input channel c to c s² + k (k < s²): SRVGG's
 * nearest-upsampled input and RealPLKSR's repeat_interleave, before the pixel shuffle. */
#define AG_UPSCALER_BASE_WEIGHT "base.weight"

typedef struct ag_upscaler_builder {
    const ag_tensor_set *set;
    const char *path;
    ag_graph *g;
    ag_error *err;
} ag_upscaler_builder;

/* Whether t is a conv weight (OC, IC, k, k). */
int ag_is_conv(const ag_tensor_ref *t, int k);

/* Add an fp32 tensor `name` of `shape` (ndim dims) over `data` (ag_malloc'ed; the set owns it from
 * here, on failure too). */
int ag_upscaler_add_tensor(ag_tensor_set *set, const char *name, int ndim, const int64_t *shape,
                           float *data, const char *path, ag_error *err);

/* A zero-padded conv node `name` reading node x with the set's tensors `weight` (k x k) and
 * `bias` (NULL: none), stride, pad; returns the node or -1 (b->err set). */
int ag_upscaler_conv(ag_upscaler_builder *b, const char *name, int x, const char *weight,
                     const char *bias, int k, int stride, int pad, float weight_scale);
/* The k x k conv "<prefix>.weight" + "<prefix>.bias", stride 1, pads k / 2. */
int ag_upscaler_conv_k(ag_upscaler_builder *b, const char *prefix, int x, int k);

/* The first `count` values of t as doubles (F32, F16, BF16 or F64; else AG_E_UNSUPPORTED
 * naming it). */
int ag_tensor_values(const ag_tensor_ref *t, double *out, size_t count, const char *path,
                     ag_error *err);

/* SPAN (span.c) and RealPLKSR (plksr.c): detected from their keys; `prepare` adds the
 * derived weights, `graph` builds; arch gets scale, feat, blocks and detail. */
int ag_span_detect(const ag_tensor_set *set);
int ag_span_infer(const ag_tensor_set *set, const char *path, ag_realesrgan_arch *a, ag_error *err);
int ag_span_prepare(ag_tensor_set *set, const ag_realesrgan_arch *a, const char *path,
                    ag_error *err);
int ag_span_graph(ag_upscaler_builder *b, const ag_realesrgan_arch *a);
int ag_plksr_detect(const ag_tensor_set *set);
int ag_plksr_infer(const ag_tensor_set *set, const char *path, ag_realesrgan_arch *a,
                   ag_error *err);
int ag_plksr_graph(ag_upscaler_builder *b, const ag_realesrgan_arch *a);

#endif
