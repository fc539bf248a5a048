/*
 * kernels.h - the generator's operations on NHWC fp32 feature maps (batch 1).
 *
 * Dimensions: H, W = rows and columns of a feature map, C = channels, OC = output channels,
 * K = kernel side, HP, WP = rows and columns after padding. A (H, W, C) tensor stores
 * element (y, x, c) at [(y * W + x) * C + c].
 *
 * Two families:
 *   ag_ref_*    the reference: one plain loop nest per op, obvious rather than fast; the
 *               oracle the fused passes and the oneDNN backend are tested against.
 *   ag_fused_*  the production passes around the oneDNN convolutions: each reads its input
 *               once and writes the next convolution's padded input directly.
 */
#ifndef AG_KERNELS_H
#define AG_KERNELS_H

#include "animegan.h"

#include <stdint.h>

#define AG_LRELU_SLOPE 0.2f

/* Reflection padding amounts (PyTorch ReflectionPad2d order is left, right, top, bottom). */
typedef struct ag_pad {
    int top, bottom, left, right;
} ag_pad;

/* Source/destination coordinates of a bilinear resize along one axis. */
typedef struct ag_resize_tap {
    int i0, i1; /* source indices */
    float frac; /* weight of i1 */
} ag_resize_tap;

/* ---- reference ops --------------------------------------------------------------------- */

/* out (H+top+bottom, W+left+right, C) <- in (H, W, C) with reflected borders. */
void ag_ref_reflect_pad(float *out, const float *in, int H, int W, int C, ag_pad pad);

/* out (HO, WO, OC) <- valid convolution of in (HP, WP, IC) with weight (OC, IC/groups, K, K)
 * and optional bias (OC); HO = (HP - K) / stride + 1. */
void ag_ref_conv2d(float *out, const float *in, const float *weight, const float *bias, int HP,
                   int WP, int IC, int OC, int K, int stride, int groups);

/* x (H, W, C) <- GroupNorm(1): normalised over all of H, W, C, then gamma/beta per channel. */
void ag_ref_layer_norm(float *x, const float *gamma, const float *beta, int H, int W, int C,
                       float eps);

void ag_ref_leaky_relu(float *x, size_t n, float slope);
void ag_ref_tanh(float *x, size_t n);
void ag_ref_add(float *x, const float *y, size_t n);

/* out (HO, WO, C) <- bilinear resize of in (HI, WI, C). */
void ag_ref_resize_bilinear(float *out, const float *in, int HI, int WI, int HO, int WO, int C,
                            ag_resize_mode mode);

/* The taps of one axis: `taps` has `out_size` entries. */
void ag_resize_taps(ag_resize_tap *taps, int in_size, int out_size, ag_resize_mode mode);

/* A nearest upsample's taps as bilinear ones: source o * in / out, twice, weight 0. */
void ag_nearest_taps(ag_resize_tap *taps, int in_size, int out_size);

/* ---- graph ops outside the convolutions (kernels/ops.c) --------------------------------- */

/* Channels of any feature map: the kernels keep per-channel values (ranges, sums, a row's
 * dequantisation) in arrays of this size on the stack. ag_graph_check refuses a model with a
 * wider map at load; nothing else may be relied on (a file chooses its channel counts). */
#define AG_MAP_MAX_CHANNELS 1024

/* Per-channel mean and population variance of x (N, C) in double. */
void ag_channel_moments(double *mean, double *var, const float *x, size_t N, int C, int threads);

/* LADE's statistics: y = x (N, C) times w (C, C)ᵀ per pixel, computed `block` pixels at a time
 * into `scratch` (block x C floats); var and mean of y per channel. */
void ag_lade_moments(double *mean_y, double *var_y, const float *x, const float *w, size_t N, int C,
                     float *scratch, size_t block, int threads);

/* out (N, M) <- x (N, C) times w: (C, M), or (M, C) used transposed. Over oneDNN's sgemm when
 * `fast`, else plain loops. */
void ag_matmul(float *out, const float *x, const float *w, int transpose, size_t N, int C, int M,
               int fast, int threads);

/*
 * Modulated convolutions as matrix products (gemm_conv.c) with a packed weight (IC, K*K,
 * OC): out = conv(src * style) * scale + shift per output channel (either NULL: 1, 0).
 * ag_gemm_conv: a stride-1 conv of src (H, W, IC), zero-padded by pad [t, b, l, r], into
 * (H + t + b - K + 1, W + l + r - K + 1, OC). ag_gemm_conv_t: a transposed conv of src
 * (H, W, IC) into ((H - 1) * stride + K, (W - 1) * stride + K, OC), nothing cropped. Band by
 * band, the input rows a band reads are scaled into `rows` (*_rows_floats floats) and their
 * products written into `band` (*_band_floats floats): nothing the size of a map. fp32 on
 * sgemm with w when `bf16` is NULL; else bf16 products (the weight bound to `bf16` replaces
 * w), made by ag_gemm_bf16_create (onednn.h) for these very shapes.
 */
typedef struct ag_gemm_bf16 ag_gemm_bf16;
/* The demodulation sums bound to `g` (Σ over taps of weight², (IC, OC)). */
const float *ag_gemm_bf16_demod_sq(const ag_gemm_bf16 *g);
/* The packed bf16 weight (IC, K*K, OC) bound to `g`. */
const uint16_t *ag_gemm_bf16_weight(const ag_gemm_bf16 *g);
size_t ag_gemm_conv_rows_floats(int HO, int WP, int IC, int K, int OC);
size_t ag_gemm_conv_band_floats(int HO, int WP, int OC);
void ag_gemm_conv(float *out, const float *src, const float *style, int H, int W, int IC,
                  const int *pad, const float *w, int OC, int K, const float *scale,
                  const float *shift, void *rows, float *band, const ag_gemm_bf16 *bf16,
                  int threads);
size_t ag_gemm_conv_t_rows_floats(int H, int W, int IC, int K, int OC);
size_t ag_gemm_conv_t_band_floats(int H, int W, int K, int OC);
void ag_gemm_conv_t(float *out, const float *src, const float *style, int H, int W, int IC,
                    const float *w, int OC, int K, int stride, const float *scale,
                    const float *shift, void *rows, float *band, const ag_gemm_bf16 *bf16,
                    int threads);

/*
 * The StyleGAN family's memory-bound passes (fused_style.inc), on NHWC maps.
 * ag_fused_scale_shift: out (rows, cols, C) = src * scale + shift per channel (either NULL),
 * source rows src_stride floats apart. ag_fused_scatter_taps: a transposed conv's band of
 * sgemm products (rows x W input pixels, K*K*OC each) added into out (., WO, OC) from input
 * row `first`. ag_fused_bias_lrelu: out = lrelu(x + bias) * gain. ag_fused_upfirdn:
 * upfirdn2d of in (H, W, C) by the flipped K x K kernel k2 into (HO, WO, C), pad [t, b, l, r].
 */
void ag_fused_scale_shift(float *out, const float *src, size_t src_stride, int rows, int cols,
                          int C, const float *scale, const float *shift, int threads);
void ag_fused_scatter_taps(float *out, const float *band, int rows, int first, int W, int WO, int K,
                           int stride, int OC, int threads);
void ag_fused_bias_lrelu(float *out, const float *x, const float *bias, size_t N, int C,
                         float alpha, float gain, int threads);

/* out (N, OC) = ((x (N, C) times the style s per channel) . wt (OC, C)) * scale + shift per
 * output channel (either NULL), OC <= AG_MODCONV_NARROW_OC: a 1x1 modulated conv into a few
 * channels (StyleGAN's ToRGB), whose products on sgemm had N = 3 (16 GFLOP/s) and whose
 * input is read once here. */
#define AG_MODCONV_NARROW_OC 4
void ag_fused_modconv_narrow(float *out, const float *x, size_t N, int C, const float *s,
                             const float *wt, int OC, const float *scale, const float *shift,
                             int threads);

/* A fused bias + leaky ReLU x gain (bias NULL: none), applied by the op before it. */
typedef struct ag_bias_act {
    const float *bias;
    float alpha, gain;
} ag_bias_act;

/* Noise injection into out (N, C + CN when concat, else C): x (N, C) then w * z (N, CN)
 * concatenated, or x + w * z (z one channel, broadcast, or C); then act when not NULL. */
void ag_fused_noise(float *out, const float *x, int C, const float *z, int CN, float w, int concat,
                    size_t N, const ag_bias_act *act, int threads);
void ag_fused_upfirdn(float *out, const float *in, int H, int W, int C, int HO, int WO,
                      const float *k2, int K, int up, int down, const int *pad, int threads);

/* Rows [y0, y0 + rows) of a modulated conv's input, x (H, W, C) times s per channel and
 * zero-padded by pad [t, b, l, r], into out (rows, WP, C): fp32, or bf16 (round to nearest
 * even) when `bf16`. */
void ag_fused_modulate(void *out, int bf16, const float *x, int H, int W, int C, const float *s,
                       const int *pad, int y0, int rows, int threads);
/* An int8 modulated conv's band (int8_modconv.c): the range [lo, hi] (0 included) of x * s
 * over rows [y0, y0 + rows) of x (H, W, C), and those rows (padded by pad [t, b, l, r], in
 * the padded map's rows from y0) quantised to u8 = x * s / scale + zero, rounded half up,
 * clamped; padding is `zero`. */
void ag_fused_modulate_range(const float *x, int H, int W, int C, const float *s, int y0, int rows,
                             float *lo, float *hi, int threads);
void ag_fused_modulate_u8(uint8_t *out, const float *x, int H, int W, int C, const float *s,
                          const int *pad, int y0, int rows, float scale, int zero, int threads);

/* A Winograd band's passes (onednn.c's ag_wino_conv), C % 16 == 0: rows [y0, y0 + rows)
 * of x (H, W, C) times the style, rows outside the map zero, into (C / 16, rows, W, 16);
 * and back from that layout into (rows, W, C) times scale plus shift (either NULL). */
void ag_fused_modulate_blocked(float *out, const float *x, int H, int W, int C, const float *s,
                               int y0, int rows, int threads);
void ag_fused_unblock_scale_shift(float *out, const float *band, int rows, int W, int C,
                                  const float *scale, const float *shift, int threads);

/* In place over x (N, C): softmax per channel over the N positions, or per position over C. */
void ag_softmax(float *x, size_t N, int C, int spatial, int threads);
/* ag_ref_attention (transformer.h) on oneDNN's sgemm: per head, the T x T scores of q kᵀ in
 * `scores` (T * T floats), their rows' softmax, then their product with v. */
void ag_attention_fast(float *out, const float *q, const float *k, const float *v, size_t T, int C,
                       int heads, float *scores, int threads);

/* In place: x / (eps + sum over channels) per position. */
void ag_sum_normalize(float *x, size_t N, int C, float eps, int threads);

/* ---- fused passes ---------------------------------------------------------------------- */

/* Per-channel affine form of a norm: z = y * scale[c] + shift[c]; then, where `slope` is
 * set, a PReLU of those per-channel slopes in place of the chain's scalar pre slope. */
/* An activation a chain applies after its affine, in the LeakyReLU's place (fp32 engines):
 * the upscalers' SiLU (x sigmoid(x), SPAN) and Mish (x tanh(softplus(x)), RealPLKSR); or,
 * in the residual add's place, an attention combining the value z with the residual r. */
typedef enum ag_gate {
    AG_GATE_NONE = 0,
    AG_GATE_SILU,
    AG_GATE_MISH,
    AG_GATE_SPAN_ATTENTION, /* (z + r) (sigmoid(z) - 1/2): SPAN's block end */
    AG_GATE_SCALE_RESIDUAL, /* r sigmoid(z): RealPLKSR's element-wise attention */
} ag_gate;

/* Whether gate g takes the residual's place (else it is an activation). */
#define AG_GATE_ON_RESIDUAL(g) ((g) >= AG_GATE_SPAN_ATTENTION)

typedef struct ag_norm_affine {
    float *scale;       /* (C) */
    float *shift;       /* (C) */
    const float *slope; /* (C) or NULL */
    ag_gate gate;       /* after scale and shift, instead of a slope */
} ag_norm_affine;

/* The upscalers' gates as whole-map passes (int8 engines: their chains know only
 * LeakyReLUs), (count) values each: out = Mish(x) when g is NULL, else (x + r) (sigmoid(g) -
 * shift), r NULL for none (SiLU: g = x, shift 0; SPAN's attention: r its residual, g = x,
 * shift 1/2); the chain gates' 16-lane formulas, within 1e-6 relative of the double ones.
 * out may be x or r. */
void ag_fused_gate_map(float *out, const float *x, const float *r, const float *g, float shift,
                       size_t count, int threads);

/*
 * Statistics of rows [first, first + rows) of y (H, W, C) (fp32, or bf16 when `bf16`), one
 * row = row_n = W * C values:
 * partials[2 * r] = the row's mean, partials[2 * r + 1] = its sum of squared deviations,
 * both in double and taken while the rows are still in cache after the conv wrote them.
 */
void ag_fused_row_stats(double *partials, const void *y, int bf16, int first, int rows,
                        size_t row_n, int threads);

/* Combine H rows of partials (Chan's formula) and fold gamma/beta into `affine`. */
void ag_norm_affine_from_stats(ag_norm_affine affine, const double *partials, int H, size_t row_n,
                               const float *gamma, const float *beta, int C, float eps);

/* Both of the above over a whole map (H, W, C); `partials` holds 2 * H doubles. */
void ag_fused_norm_stats(ag_norm_affine affine, double *partials, const float *x,
                         const float *gamma, const float *beta, int H, int W, int C, float eps,
                         int threads);

/*
 * out (H+pad, W+pad, C) <- post(pre(x * scale + shift) [+ residual]) for x (H, W, C), pre
 * and post LeakyReLUs of those slopes (1: none), with the borders reflected; all fp32, or
 * all bf16 when `bf16`. `residual` is (H, W, C) or NULL. With no padding, `out` may be `x`
 * (the engine materialises a map in place this way).
 */
void ag_fused_norm_act_pad(void *out, const void *x, const void *residual, int bf16,
                           ag_norm_affine affine, float pre_slope, float post_slope, int H, int W,
                           int C, ag_pad pad, int threads);

/* Where the rows of a banded convolution's padded input come from. */
typedef enum ag_band_kind {
    AG_BAND_IMAGE,  /* the input image, scaled to [-1, 1] */
    AG_BAND_RAW,    /* the previous conv's raw output: norm, residual, activation on the fly */
    AG_BAND_RESIZE, /* bilinear resize of the previous layer's activated output */
    AG_BAND_CONCAT, /* the channel concatenation of materialised maps (fp32 engines) */
} ag_band_kind;

/* Maps one concatenation band may gather (a dense network's nested concats, flattened). */
#define AG_BAND_MAX_PARTS 16

typedef struct ag_band_source {
    ag_band_kind kind;
    int bf16;      /* activations (x, residual, a) and the band are bf16, else fp32 */
    int band_bf16; /* fp32 activations (bf16 == 0) into a bf16 band: a StyleGAN graph's convs */
    int H, W, C;   /* the interior of the padded map the band is cut from */
    ag_pad pad;
    int zero_pad; /* the border is zeros; else reflected */
    /* AG_BAND_IMAGE: u8 (H, W, bands) or f32 (H, W, 3) */
    const uint8_t *u8;
    const float *f32;
    int bands;
    /* AG_BAND_RAW: x (H, W, C), residual (H, W, C) or NULL */
    const void *x;
    const void *residual;
    ag_norm_affine affine;
    float pre_slope, post_slope; /* LeakyReLU before and after the residual add; 1: none */
    /* AG_BAND_RESIZE: a (HI, WI, C) and the taps of each axis (H and W entries) */
    const void *a;
    int HI, WI;
    const ag_resize_tap *row_taps, *col_taps;
    /* AG_BAND_CONCAT: parts (H, W, part_c[j]), their channels adding up to C */
    const void *parts[AG_BAND_MAX_PARTS];
    int part_c[AG_BAND_MAX_PARTS];
    int part_count;
    /* int8's u8 maps: x, residual or a stored as u8 (fp32 bands only, not bf16), each row r
     * with C scales then C offsets at [2Cr]: value = u8 * scale[c] + lo[c]; NULL: fp32 */
    const float *x_q, *residual_q, *a_q;
} ag_band_source;

/*
 * out (rows, W + pad.left + pad.right, C) <- padded rows [first, first + rows) of the
 * source's reflection-padded map: each row computed once, straight into the conv's input.
 */
void ag_fused_band(void *out, const ag_band_source *src, int first, int rows, int threads);

/*
 * Rows of a conv output whose statistics are still to be taken (see ag_fused_row_stats).
 * int8 (fp32 rows only): when `range` is not NULL, the per-channel minimum and maximum of
 * the rows ride along too, folded into the calling OpenMP thread's slot, range + 2 * C *
 * thread: C minima then C maxima (the caller resets the slots and combines them).
 */
typedef struct ag_stats_rows {
    double *partials;
    const void *y;
    int bf16, first, rows;
    size_t row_n;
    float *range;
    int C;
} ag_stats_rows;

/*
 * The statistics of `stats` (rows == 0: none) and, when `out` is not NULL, the band of
 * ag_fused_band, in one parallel region: the previous band's statistics ride along with the
 * next band's input, so a band costs one synchronisation of the threads besides oneDNN's.
 * On a shared machine each synchronisation waits for the slowest thread's time slice.
 */
void ag_fused_band_stats(void *out, const ag_band_source *src, int first, int rows,
                         const ag_stats_rows *stats, int threads);

/*
 * int8 (fp32 sources only): [lo, hi] holds every value a band of `src` can hold (padding
 * repeats values or adds zeros, a resize only mixes them): the range of the source's value,
 * its chain applied; [-1, 1] for a u8 image.
 */
void ag_fused_range(const ag_band_source *src, float *lo, float *hi, int threads);

/* ag_fused_band_stats with a u8 band (fp32 sources only): each value is quantised in
 * registers as the row is built, round(v / scale) + zero clamped to 0..255, a byte per
 * value in the layout of the fp32 band; no fp32 band is written. */
void ag_fused_band_stats_u8(uint8_t *out, float scale, int32_t zero, const ag_band_source *src,
                            int first, int rows, const ag_stats_rows *stats, int threads);

/*
 * int8's u8 maps (a conv output stored a byte per value, each row r with a scale and an
 * offset per channel from the channel's range in the row: row_q[2Cr + c] = scale,
 * row_q[2Cr + C + c] = lo): rows [first, first + rows) of the map out (H, W, C) from tmp
 * (rows, W, C) fp32, the conv's band output. With `stats`, rows r >= stats->first also get their
 * statistics (partials, when not NULL) and range slots (ag_stats_rows) from the fp32 values.
 */
void ag_fused_quantize_rows(uint8_t *out, float *row_q, const float *tmp, int first, int rows,
                            int W, int C, const ag_stats_rows *stats, int threads);

/*
 * A u8 map x (H, W, C) with its row pairs x_q (as above), in place: each row's value post(pre(x *
 * scale
 * + shift) [+ residual]) (residual a u8 map with pairs residual_q, or NULL) stored again with
 * its own pair. scratch: W * C floats per thread; range: slots as in ag_stats_rows (NULL:
 * none), the value's per-channel min/max.
 */
void ag_fused_materialize_u8(uint8_t *x, float *x_q, const uint8_t *residual,
                             const float *residual_q, ag_norm_affine affine, float pre, float post,
                             int H, int W, int C, float *scratch, float *range, int threads);

/*
 * Per-channel sums of (x[p][c] - shift[c]) and of its square over positions [0, n) of x (n, C),
 * added to t1[c] and t2[c]: the moments of instance norms and LADE. Float lanes inside: keep n
 * to a few hundred positions a call.
 */
void ag_fused_channel_sums(double *t1, double *t2, const float *x, size_t n, int C,
                           const float *shift);

/* Output channels up to which a stride-1 convolution runs on ag_fused_conv_narrow. */
#define AG_NARROW_OC 4

/*
 * A stride-1, ungrouped fp32 convolution with OC <= AG_NARROW_OC output channels (the v3
 * generators' 7x7 32->3 output): src (HP, WP, IC) NHWC, padded; dst (HP-K+1, WP-K+1, OC);
 * w packed by ag_narrow_pack; bias (OC) or NULL. oneDNN's kernels pad OC to 16 lanes and
 * reach a tenth of the peak on it; in NHWC the K pixels under a kernel row are K*IC
 * contiguous floats, so each output is OC dot products of K such runs.
 */
void ag_fused_conv_narrow(float *dst, const float *src, const float *w, const float *bias, int HP,
                          int WP, int IC, int OC, int K, int threads);

/* Floats per (output channel, kernel row) of ag_fused_conv_narrow's packed weights: the run
 * of K * IC, and when that is no whole number of vectors but at least one, one more vector
 * for the tail, which reads the run's last 16 floats with zeros under the ones the vectors
 * before it covered (no scalar loop: 12 -> 3 channels ran at a twentieth of the peak). */
static inline int ag_narrow_run(int K, int IC) {
    int L = K * IC;
    return L % 16 && L > 16 ? L - L % 16 + 16 : L;
}

/* Pack weight (OC, IC, K, K) into ag_fused_conv_narrow's layout: (OC, K) runs of
 * ag_narrow_run(K, IC) floats, OC * K * ag_narrow_run(K, IC) in all. */
void ag_narrow_pack(float *packed, const float *weight, int OC, int IC, int K);

/* [tanh of] y (H, W, 3) to f32 out (H, W, 3) and/or u8 out (H, W, bands) (alpha untouched). */
void ag_fused_output(float *out_f32, uint8_t *out_u8, int bands, const float *y, int apply_tanh,
                     int H, int W, int threads);

/* The 8-bit value of a [-1, 1] output: (y + 1) * 127.5, clipped, rounded to nearest. */
uint8_t ag_output_to_u8(float y);

#endif
