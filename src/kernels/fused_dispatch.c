/*
 * fused_dispatch.c - the one dispatch point of the fused passes: the ag_fused_* functions
 * kernels.h declares, each a call through the table of the variant this CPU runs best (or
 * the lower one ANIMEGAN_ISA asks for), chosen once per process. The variants are fused.c
 * compiled per ISA (fused_isa.h); calls are per band or per map, never per row, so the
 * indirection costs nothing measurable.
 */
#include "fused_isa.h"

#include <pthread.h>
#include <stddef.h>
#include <string.h>

static const ag_fused_ops *active;
static pthread_once_t active_once = PTHREAD_ONCE_INIT;

const ag_fused_ops *ag_fused_ops_for(ag_isa isa) {
    if (isa > ag_cpu_get_info()->best_isa)
        return NULL;
    switch (isa) {
    case AG_ISA_GENERIC: return &ag_fused_ops_generic;
#ifdef AG_FUSED_X86
    case AG_ISA_AVX2: return &ag_fused_ops_avx2;
    case AG_ISA_AVX512: return &ag_fused_ops_avx512;
#endif
    default: return NULL;
    }
}

static void choose(void) {
    active = ag_fused_ops_for(ag_cpu_get_info()->isa);
    if (!active)
        active = &ag_fused_ops_generic;
}

const ag_fused_ops *ag_fused_ops_active(void) {
    pthread_once(&active_once, choose);
    return active;
}

void ag_fused_row_stats(double *partials, const void *y, int bf16, int first, int rows,
                        size_t row_n, int threads) {
    ag_fused_ops_active()->row_stats(partials, y, bf16, first, rows, row_n, threads);
}

void ag_norm_affine_from_stats(ag_norm_affine affine, const double *partials, int H, size_t row_n,
                               const float *gamma, const float *beta, int C, float eps) {
    ag_fused_ops_active()->norm_affine_from_stats(affine, partials, H, row_n, gamma, beta, C, eps);
}

void ag_fused_norm_stats(ag_norm_affine affine, double *partials, const float *x,
                         const float *gamma, const float *beta, int H, int W, int C, float eps,
                         int threads) {
    ag_fused_ops_active()->norm_stats(affine, partials, x, gamma, beta, H, W, C, eps, threads);
}

void ag_fused_band(void *out, const ag_band_source *src, int first, int rows, int threads) {
    ag_fused_ops_active()->band(out, src, first, rows, threads);
}

void ag_fused_band_stats(void *out, const ag_band_source *src, int first, int rows,
                         const ag_stats_rows *stats, int threads) {
    ag_fused_ops_active()->band_stats(out, src, first, rows, stats, threads);
}

void ag_fused_norm_act_pad(void *out, const void *x, const void *residual, int bf16,
                           ag_norm_affine affine, float pre_slope, float post_slope, int H, int W,
                           int C, ag_pad pad, int threads) {
    ag_fused_ops_active()->norm_act_pad(out, x, residual, bf16, affine, pre_slope, post_slope, H, W,
                                        C, pad, threads);
}

void ag_fused_output(float *out_f32, uint8_t *out_u8, int bands, const float *y, int apply_tanh,
                     int H, int W, int threads) {
    ag_fused_ops_active()->output(out_f32, out_u8, bands, y, apply_tanh, H, W, threads);
}

void ag_fused_range(const ag_band_source *src, float *lo, float *hi, int threads) {
    ag_fused_ops_active()->range(src, lo, hi, threads);
}

void ag_fused_band_stats_u8(uint8_t *out, float scale, int32_t zero, const ag_band_source *src,
                            int first, int rows, const ag_stats_rows *stats, int threads) {
    ag_fused_ops_active()->band_stats_u8(out, scale, zero, src, first, rows, stats, threads);
}

void ag_fused_quantize_rows(uint8_t *out, float *row_q, const float *tmp, int first, int rows,
                            int W, int C, const ag_stats_rows *stats, int threads) {
    ag_fused_ops_active()->quantize_rows(out, row_q, tmp, first, rows, W, C, stats, threads);
}

void ag_fused_materialize_u8(uint8_t *x, float *x_q, const uint8_t *residual,
                             const float *residual_q, ag_norm_affine affine, float pre, float post,
                             int H, int W, int C, float *scratch, float *range, int threads) {
    ag_fused_ops_active()->materialize_u8(x, x_q, residual, residual_q, affine, pre, post, H, W, C,
                                          scratch, range, threads);
}

void ag_fused_channel_sums(double *t1, double *t2, const float *x, size_t n, int C,
                           const float *shift) {
    ag_fused_ops_active()->channel_sums(t1, t2, x, n, C, shift);
}

void ag_fused_conv_narrow(float *dst, const float *src, const float *w, const float *bias, int HP,
                          int WP, int IC, int OC, int K, int threads) {
    ag_fused_ops_active()->conv_narrow(dst, src, w, bias, HP, WP, IC, OC, K, threads);
}

/* Scalar: the same in every variant, so no table lookup per value. */
uint8_t ag_output_to_u8(float y) {
    return ag_output_to_u8_generic(y);
}

void ag_fused_scale_shift(float *out, const float *src, size_t src_stride, int rows, int cols,
                          int C, const float *scale, const float *shift, int threads) {
    ag_fused_ops_active()->scale_shift(out, src, src_stride, rows, cols, C, scale, shift, threads);
}

void ag_fused_modulate(void *out, int bf16, const float *x, int H, int W, int C, const float *s,
                       const int *pad, int y0, int rows, int threads) {
    ag_fused_ops_active()->modulate(out, bf16, x, H, W, C, s, pad, y0, rows, threads);
}

void ag_fused_modulate_blocked(float *out, const float *x, int H, int W, int C, const float *s,
                               int y0, int rows, int threads) {
    ag_fused_ops_active()->modulate_blocked(out, x, H, W, C, s, y0, rows, threads);
}

void ag_fused_unblock_scale_shift(float *out, const float *band, int rows, int W, int C,
                                  const float *scale, const float *shift, int threads) {
    ag_fused_ops_active()->unblock_scale_shift(out, band, rows, W, C, scale, shift, threads);
}

void ag_fused_scatter_taps(float *out, const float *band, int rows, int first, int W, int WO, int K,
                           int stride, int OC, int threads) {
    ag_fused_ops_active()->scatter_taps(out, band, rows, first, W, WO, K, stride, OC, threads);
}

void ag_fused_bias_lrelu(float *out, const float *x, const float *bias, size_t N, int C,
                         float alpha, float gain, int threads) {
    ag_fused_ops_active()->bias_lrelu(out, x, bias, N, C, alpha, gain, threads);
}

void ag_fused_noise(float *out, const float *x, int C, const float *z, int CN, float w, int concat,
                    size_t N, const ag_bias_act *act, int threads) {
    ag_fused_ops_active()->noise(out, x, C, z, CN, w, concat, N, act, threads);
}

void ag_fused_modconv_narrow(float *out, const float *x, size_t N, int C, const float *s,
                             const float *wt, int OC, const float *scale, const float *shift,
                             int threads) {
    ag_fused_ops_active()->modconv_narrow(out, x, N, C, s, wt, OC, scale, shift, threads);
}

void ag_fused_modulate_range(const float *x, int H, int W, int C, const float *s, int y0, int rows,
                             float *lo, float *hi, int threads) {
    ag_fused_ops_active()->modulate_range(x, H, W, C, s, y0, rows, lo, hi, threads);
}

void ag_fused_modulate_u8(uint8_t *out, const float *x, int H, int W, int C, const float *s,
                          const int *pad, int y0, int rows, float scale, int zero, int threads) {
    ag_fused_ops_active()->modulate_u8(out, x, H, W, C, s, pad, y0, rows, scale, zero, threads);
}

void ag_fused_upfirdn(float *out, const float *in, int H, int W, int C, int HO, int WO,
                      const float *k2, int K, int up, int down, const int *pad, int threads) {
    ag_fused_ops_active()->upfirdn(out, in, H, W, C, HO, WO, k2, K, up, down, pad, threads);
}

void ag_fused_gate_map(float *out, const float *x, const float *r, const float *g, float shift,
                       size_t count, int threads) {
    ag_fused_ops_active()->gate_map(out, x, r, g, shift, count, threads);
}

void ag_narrow_pack(float *packed, const float *weight, int OC, int IC, int K) {
    int L = K * IC, run = ag_narrow_run(K, IC), whole = L - L % 16;
    memset(packed, 0, sizeof(float) * (size_t)OC * K * run);
    for (int o = 0; o < OC; o++)
        for (int ky = 0; ky < K; ky++) {
            float *r = packed + ((size_t)o * K + ky) * run;
            for (int kx = 0; kx < K; kx++)
                for (int i = 0; i < IC; i++) {
                    float v = weight[(((size_t)o * IC + i) * K + ky) * K + kx];
                    int j = kx * IC + i;
                    if (run == L || j < whole)
                        r[j] = v;
                    else /* the tail vector: lane l reads run element L - 16 + l */
                        r[whole + j - (L - 16)] = v;
                }
        }
}
