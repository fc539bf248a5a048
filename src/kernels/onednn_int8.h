/*
 * onednn_int8.h - int8 convolutions on oneDNN (VNNI where the CPU has it): u8 source with a
 * zero point, s8 weights with one scale per output channel, s32 accumulation, then one
 * output scale per channel, into f32, or into u8 with its own scale and zero point.
 * The convolutions of --precision int8 (engine.c: run_conv_int8, per-image ranges, f32 dst).
 *
 * Quantisation (per tensor for activations, per output channel for weights):
 *   x = x_scale * (x_u8 - x_zero)        w[oc] = w_scale[oc] * w_s8[oc]
 *   y = x_scale * w_scale[oc] * sum(w_s8 * (x_u8 - x_zero)) + bias[oc]   (the real output)
 *   dst = y * multiplier / x_scale                                        (f32 dst)
 *   dst = clamp(round(y * multiplier / x_scale) + y_zero, 0, 255)         (u8 dst)
 * oneDNN 2.6's fast int8 kernels (brgconv / jit, VNNI) take output scales only when the
 * primitive is made (run-time scales fall back to the reference), so the per-channel
 * w_scale and a constant `multiplier` are fixed at creation, while x_zero, y_zero and the
 * bias (which carries x_scale) are run-time arguments. Two ways to use it:
 *   per-image ranges, f32 dst: multiplier 1; dst is y / x_scale, and the pass that reads
 *     it multiplies by x_scale (a LayerNorm after the conv does not even need that: it is
 *     scale-invariant, with eps scaled by 1 / x_scale^2);
 *   calibrated (static) ranges: multiplier = x_scale / y_scale for a u8 dst, x_scale for an
 *     f32 dst: dst is then in its own units.
 * Shapes, buffers and ownership are as in onednn.h: src (HP, WP, IC) NHWC already padded,
 * dst (HO, WO, OC) NHWC, prepared weights and scratchpad in memory the caller owns.
 */
#ifndef AG_ONEDNN_INT8_H
#define AG_ONEDNN_INT8_H

#include "onednn.h"

#include <stdint.h>

typedef struct ag_int8_conv_shape {
    int HP, WP, IC, OC, K, stride, groups;
    int has_bias;
    int u8_dst; /* destination u8 (y_scale, y_zero); else f32 */
} ag_int8_conv_shape;

/* The numbers of one run. */
typedef struct ag_int8_quant {
    float x_scale;
    int32_t x_zero; /* 0..255 */
    float y_scale;  /* u8 dst only */
    int32_t y_zero; /* u8 dst only, 0..255 */
} ag_int8_quant;

typedef struct ag_dnnl_int8_conv ag_dnnl_int8_conv;

/*
 * The largest weight magnitude to quantise to: 127 where oneDNN has VNNI (AVX512-VNNI,
 * AVX-VNNI, AMX), 63 elsewhere, because without VNNI oneDNN multiplies u8 x s8 pairs with
 * vpmaddubsw, whose s16 sum saturates beyond 2 x 255 x 63: one bit of weight precision
 * lost, about 40 dB per layer instead of 45 (tests/test_int8.c); with 8-bit weights the
 * saturation there gave 24 dB.
 */
int ag_int8_weight_max(void);

/*
 * Symmetric per-output-channel s8 of weight (OC, per_oc) fp32: w_scale[oc] = max |w[oc]| /
 * qmax (1 for an all-zero channel), w_s8 = round(w / w_scale) in [-qmax, qmax].
 */
void ag_int8_quantize_weights(int8_t *w_s8, float *w_scale, const float *weight, int OC,
                              size_t per_oc, int qmax);

/* Create the primitive with output scales w_scale[oc] * multiplier (w_scale: OC values, of
 * ag_int8_quantize_weights); reports the scratchpad and prepared-weight sizes it needs. */
int ag_dnnl_int8_conv_create(ag_dnnl *dnnl, const ag_int8_conv_shape *shape, const float *w_scale,
                             float multiplier, ag_dnnl_int8_conv **out, size_t *scratch_bytes,
                             size_t *weight_bytes, ag_error *err);
void ag_dnnl_int8_conv_destroy(ag_dnnl_int8_conv *conv);

/* Whether `conv` wants its weights in the same layout as `other` (so they can be kept). */
int ag_dnnl_int8_conv_same_weights(const ag_dnnl_int8_conv *conv, const ag_dnnl_int8_conv *other);

/* The oneDNN implementation chosen ("brg:avx512_core_vnni", "jit_int8:avx2", ...). */
const char *ag_dnnl_int8_conv_impl(const ag_dnnl_int8_conv *conv);

/* Reorder w_s8 (OC, IC/groups, K, K) once into `prepared` (weight_bytes, 64-byte aligned),
 * the layout the primitive chose, zero-point compensation included. */
int ag_dnnl_int8_conv_prepare_weights(ag_dnnl_int8_conv *conv, const int8_t *w_s8, void *prepared,
                                      ag_error *err);

/* Bind src u8 (HP, WP, IC), dst (HO, WO, OC) f32 or u8, prepared weights and scratchpad. */
void ag_dnnl_int8_conv_bind(ag_dnnl_int8_conv *conv, const uint8_t *src, void *dst,
                            void *prepared_weights, void *scratch);

/* Run with this image's x_scale, x_zero (and y_zero for a u8 dst); bias (OC, real units)
 * or NULL. Allocates nothing. */
int ag_dnnl_int8_conv_run(ag_dnnl_int8_conv *conv, const ag_int8_quant *q, const float *bias,
                          ag_error *err);

/*
 * An int8 StyleGAN engine's modulated 3x3 conv (stride 1, zero padding 1) over maps of
 * (H, W, IC) (int8_modconv.c): the packed weight (IC, 9, OC) quantised per output channel at
 * create; reports its scratchpad, band buffer and prepared weights, all the caller's.
 * run: out (H, W, OC) = conv(src * style) * scale + shift, band by band, each band's input
 * quantised with its own range.
 */
typedef struct ag_int8_modconv ag_int8_modconv;
int ag_int8_modconv_create(ag_dnnl *dnnl, int H, int W, int IC, int OC, const float *packed,
                           ag_int8_modconv **out, size_t *scratch_bytes, size_t *band_bytes,
                           size_t *weight_bytes, ag_error *err);
void ag_int8_modconv_destroy(ag_int8_modconv *c);
int ag_int8_modconv_same_weights(const ag_int8_modconv *c, const ag_int8_modconv *other);
int ag_int8_modconv_prepare_weights(ag_int8_modconv *c, void *prepared, ag_error *err);
void ag_int8_modconv_bind(ag_int8_modconv *c, void *prepared, void *band, void *scratch);
void ag_int8_modconv_run(const ag_int8_modconv *c, float *out, const float *src, const float *style,
                         const float *scale, const float *shift, int threads);

/* Quantise n fp32 values to u8 with (scale, zero): round to nearest, clamped to 0..255. */
void ag_quantize_u8(uint8_t *out, const float *in, size_t n, float scale, int32_t zero);

/* The (scale, zero) that maps [lo, hi] (widened to include 0) onto 0..255. */
ag_int8_quant ag_int8_quant_from_range(float lo, float hi);

#endif
