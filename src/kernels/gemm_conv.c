/*
 * gemm_conv.c - convolutions as a few large sgemm calls over whole NHWC maps, for the
 * StyleGAN family's modulated convs (ops_style.c). Their weights are big (GPEN-512: 284 MB)
 * and shared by every worker: a oneDNN conv primitive would keep a reordered copy per
 * engine, sgemm reads the model's one packed copy, (IC, K*K, OC), in place.
 *
 * A K x K conv is K*K matrix products accumulated into the output: tap (ky, kx) multiplies
 * the input shifted by (ky, kx), an (M, IC) matrix, by that tap's (IC, OC) slice of the
 * weight. Over the padded width WP the shifted rows of R output rows are one matrix with a
 * constant stride, so a band of rows is one product per tap (the K - 1 columns past each
 * row's end are computed and dropped). A stride-2 transposed conv is one product of the
 * input by all the taps at once, (M, IC) x (IC, K*K*OC), scattered into the output.
 * sgemm runs on the engine's OpenMP threads; the bands keep its output near 1 MB, in cache.
 */
#include "kernels.h"

#include <dnnl.h>
#include <string.h>

#define BAND_FLOATS (256 * 1024) /* the product's output per band: 1 MB */

/* Output rows per band of a stride-1 conv, at least one. */
static int conv_band_rows(int HO, int WP, int OC) {
    int rows = BAND_FLOATS / (WP * OC);
    return rows < 1 ? 1 : rows > HO ? HO : rows;
}

size_t ag_gemm_conv_band_floats(int HO, int WP, int OC) {
    return (size_t)conv_band_rows(HO, WP, OC) * WP * OC;
}

void ag_gemm_conv(float *out, const float *x, int HP, int WP, int IC, const float *w, int OC, int K,
                  const float *scale, const float *shift, float *band, int threads) {
    int HO = HP - K + 1, WO = WP - K + 1, KK = K * K;
    int rows = conv_band_rows(HO, WP, OC);
    for (int y0 = 0; y0 < HO; y0 += rows) {
        int R = y0 + rows <= HO ? rows : HO - y0;
        /* Rows m = r * WP + x of the band; the last row stops at WO so no tap reads past
         * the padded map. */
        dnnl_dim_t M = (dnnl_dim_t)(R - 1) * WP + WO;
        for (int t = 0; t < KK; t++) {
            int ky = t / K, kx = t % K;
            const float *a = x + ((size_t)(y0 + ky) * WP + kx) * IC;
            dnnl_sgemm('N', 'N', M, OC, IC, 1.0f, a, IC, w + (size_t)t * OC, (dnnl_dim_t)KK * OC,
                       t ? 1.0f : 0.0f, band, OC);
        }
        ag_fused_scale_shift(out + (size_t)y0 * WO * OC, band, (size_t)WP * OC, R, WO, OC, scale,
                             shift, threads);
    }
}

/* Input rows per band of a transposed conv, at least one. */
static int conv_t_band_rows(int H, int W, int KK, int OC) {
    int rows = BAND_FLOATS / (W * KK * OC);
    return rows < 1 ? 1 : rows > H ? H : rows;
}

size_t ag_gemm_conv_t_band_floats(int H, int W, int K, int OC) {
    return (size_t)conv_t_band_rows(H, W, K * K, OC) * W * K * K * OC;
}

void ag_gemm_conv_t(float *out, const float *x, int H, int W, int IC, const float *w, int OC, int K,
                    int stride, const float *scale, const float *shift, float *band, int threads) {
    int HO = (H - 1) * stride + K, WO = (W - 1) * stride + K, KK = K * K;
    int rows = conv_t_band_rows(H, W, KK, OC);
    memset(out, 0, sizeof(float) * (size_t)HO * WO * OC);
    for (int a0 = 0; a0 < H; a0 += rows) {
        int R = a0 + rows <= H ? rows : H - a0;
        dnnl_sgemm('N', 'N', (dnnl_dim_t)R * W, (dnnl_dim_t)KK * OC, IC, 1.0f,
                   x + (size_t)a0 * W * IC, IC, w, (dnnl_dim_t)KK * OC, 0.0f, band,
                   (dnnl_dim_t)KK * OC);
        /* Input pixel (a, b), tap (ky, kx) adds to output (a * stride + ky, b * stride + kx). */
        ag_fused_scatter_taps(out, band, R, a0, W, WO, K, stride, OC, threads);
    }
    ag_fused_scale_shift(out, out, (size_t)WO * OC, HO, WO, OC, scale, shift, threads);
}
