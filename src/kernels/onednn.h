/*
 * onednn.h - the convolutions on oneDNN (onednn.c, onednn_int8.c, and the modulated convs'
 * products in gemm_conv.c): the engine sees only these functions.
 *
 * A conv is created for one layer at one feature-map size: its source is the layer's
 * padded input (HP, WP, IC) NHWC and oneDNN pads nothing, or (zero_pad) the unpadded map,
 * read in place, and oneDNN adds the zeros. Its scratchpad and
 * its prepared weights live in memory the caller plans and owns; the source and destination
 * are bound to arena offsets before each run, so running allocates nothing.
 */
#ifndef AG_ONEDNN_H
#define AG_ONEDNN_H

#include "animegan.h"

typedef struct ag_dnnl ag_dnnl;
typedef struct ag_dnnl_conv ag_dnnl_conv;

typedef struct ag_conv_shape {
    int HP, WP, IC, OC, K, stride, groups;
    int has_bias;
    int bf16_src;    /* source and weights bf16 (fp32 accumulation); else fp32 */
    int bf16_dst;    /* destination bf16; else fp32 */
    int zero_pad[4]; /* top, bottom, left, right: zeros oneDNN adds round (HP, WP); else 0 */
    /* fp32 3x3 stride 1, channels multiples of 16, output AG_WINO_MIN_SIDE wide and up: on
     * oneDNN's Winograd F(4x4, 3x3) kernel where it has one, the band reordered into its
     * channel-blocked layout and back around it (both in the scratchpad); else direct */
    int winograd;
} ag_conv_shape;

int ag_dnnl_create(ag_dnnl **out, ag_error *err);
void ag_dnnl_destroy(ag_dnnl *dnnl);

/* Create the primitive; reports the scratchpad and prepared-weight sizes it needs. */
int ag_dnnl_conv_create(ag_dnnl *dnnl, const ag_conv_shape *shape, ag_dnnl_conv **out,
                        size_t *scratch_bytes, size_t *weight_bytes, ag_error *err);
void ag_dnnl_conv_destroy(ag_dnnl_conv *conv);

/* Whether `conv` wants its weights in the same layout as `other` (so they can be kept). */
int ag_dnnl_conv_same_weights(const ag_dnnl_conv *conv, const ag_dnnl_conv *other);
/* Its weights' layout (a oneDNN memory descriptor, *bytes long) when it runs on Winograd
 * (weights 4x the direct conv's, worth sharing between a model's engines), else NULL. */
const void *ag_dnnl_conv_wino_layout(const ag_dnnl_conv *conv, size_t *bytes);

/* Reorder weight (OC, IC/groups, K, K) into `prepared` (weight_bytes, 64-byte aligned). */
int ag_dnnl_conv_prepare_weights(ag_dnnl_conv *conv, const float *weight, void *prepared,
                                 ag_error *err);

/* Bind the buffers of one run: src (HP, WP, IC), dst (HO, WO, OC), bias (OC, fp32) or NULL. */
void ag_dnnl_conv_bind(ag_dnnl_conv *conv, const void *src, void *dst, const float *bias,
                       void *prepared_weights, void *scratch);

int ag_dnnl_conv_run(ag_dnnl_conv *conv, ag_error *err);

/*
 * The bf16 products of one modulated conv at one size (gemm_conv.c): a stride-1 valid conv
 * of (HP, WP, IC) by K x K into OC channels, or (`transposed`) the stride-2 transposed conv
 * of (HP, WP, IC) = (H, W, IC). Reports the scratchpad it needs; bind gives it the packed
 * bf16 weight (IC, K*K, OC), its demodulation sums (Σ over taps of weight², (IC, OC)) and
 * that scratchpad before it runs.
 */
typedef struct ag_gemm_bf16 ag_gemm_bf16;
int ag_gemm_bf16_create(ag_dnnl *dnnl, int transposed, int HP, int WP, int IC, int OC, int K,
                        ag_gemm_bf16 **out, size_t *scratch_bytes, ag_error *err);
void ag_gemm_bf16_bind(ag_gemm_bf16 *g, const uint16_t *weight, const float *demod_sq,
                       void *scratchpad);
void ag_gemm_bf16_destroy(ag_gemm_bf16 *g);

/*
 * A modulated 3x3 conv (stride 1, zero padding 1) in fp32 on oneDNN's Winograd F(4x4, 3x3)
 * kernel, for maps of (H, W, IC) with H and W at least AG_WINO_MIN_SIDE, IC and OC multiples
 * of 16. Created per size; *out stays NULL (and AG_OK) where oneDNN has no such kernel
 * (CPUs without AVX-512) or the shape does not fit, and the caller keeps the sgemm path.
 * Reports its scratchpad, its band buffer and its prepared weights, all the caller's.
 * run: out (H, W, OC) = conv(src * style) * scale + shift, band by band.
 */
#define AG_WINO_MIN_SIDE 32 /* measured: 2.4x the direct conv at 32 px, no faster at 16 px */
typedef struct ag_wino_conv ag_wino_conv;
int ag_wino_conv_create(ag_dnnl *dnnl, int H, int W, int IC, int OC, ag_wino_conv **out,
                        size_t *scratch_bytes, size_t *band_bytes, size_t *weight_bytes,
                        ag_error *err);
void ag_wino_conv_destroy(ag_wino_conv *c);
int ag_wino_conv_same_weights(const ag_wino_conv *c, const ag_wino_conv *other);
/* Its weights' layout (a oneDNN memory descriptor, *bytes long), for weights shared by the
 * model's engines, and the comparison of two such layouts. */
const void *ag_wino_conv_layout(const ag_wino_conv *c, size_t *bytes);
int ag_wino_layout_same(const void *a, const void *b);
/* Reorder the model's packed weight (IC, 9, OC) into `prepared` (weight_bytes, aligned). */
int ag_wino_conv_prepare_weights(ag_wino_conv *c, const float *packed, void *prepared,
                                 ag_error *err);
void ag_wino_conv_bind(ag_wino_conv *c, void *prepared_weights, void *band, void *scratch);
void ag_wino_conv_run(const ag_wino_conv *c, float *out, const float *src, const float *style,
                      const float *scale, const float *shift, int threads);

/* The engine and stream (dnnl_engine_t, dnnl_stream_t) for the other oneDNN file,
 * onednn_int8.c, so its primitives run on the same ones. */
void *ag_dnnl_engine_handle(const ag_dnnl *dnnl);
void *ag_dnnl_stream_handle(const ag_dnnl *dnnl);

#endif
