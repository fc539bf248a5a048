/*
 * fused.c - the passes between the oneDNN convolutions. Each reads a feature map once and
 * writes the next convolution's reflection-padded input directly (norm-apply + residual +
 * LeakyReLU + padding, or bilinear resize + padding), so no layer makes a separate pass
 * for padding, activation or the residual add. Parallel over rows with OpenMP, the same
 * thread team oneDNN uses.
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

/* ---- borders --------------------------------------------------------------------------- */

/* Reflect the left and right border of padded row `row` (padded coordinates). */
static void reflect_row_sides(float *buf, int row, int W, int C, ag_pad pad) {
    int WP = W + pad.left + pad.right;
    float *r = buf + (size_t)row * WP * C;
    size_t px = (size_t)C * sizeof(float);
    for (int i = 1; i <= pad.left; i++)
        memcpy(r + (size_t)(pad.left - i) * C, r + (size_t)(pad.left + i) * C, px);
    for (int i = 1; i <= pad.right; i++)
        memcpy(r + (size_t)(pad.left + W - 1 + i) * C, r + (size_t)(pad.left + W - 1 - i) * C,
               px);
}

/* Reflect whole padded rows above and below the interior. */
static void reflect_top_bottom(float *buf, int H, int W, int C, ag_pad pad) {
    size_t row_floats = (size_t)(W + pad.left + pad.right) * C;
    for (int i = 1; i <= pad.top; i++)
        memcpy(buf + (size_t)(pad.top - i) * row_floats, buf + (size_t)(pad.top + i) * row_floats,
               row_floats * sizeof(float));
    for (int i = 1; i <= pad.bottom; i++)
        memcpy(buf + (size_t)(pad.top + H - 1 + i) * row_floats,
               buf + (size_t)(pad.top + H - 1 - i) * row_floats, row_floats * sizeof(float));
}

void ag_fused_reflect_border(float *buf, int H, int W, int C, ag_pad pad) {
    for (int y = 0; y < H; y++)
        reflect_row_sides(buf, pad.top + y, W, C, pad);
    reflect_top_bottom(buf, H, W, C, pad);
}

/* Interior pixel (y, x) of a padded buffer. */
static inline float *padded_px(float *buf, int y, int x, int W, int C, ag_pad pad) {
    return buf + ((size_t)(y + pad.top) * (W + pad.left + pad.right) + x + pad.left) * C;
}

/* ---- norm ------------------------------------------------------------------------------ */

void ag_fused_norm_stats(ag_norm_affine affine, double *partials, const float *x,
                         const float *gamma, const float *beta, int H, int W, int C, float eps,
                         int threads) {
    size_t row_n = (size_t)W * C;
    double *row_mean = partials, *row_m2 = partials + H;
    /* Per row: mean, then the sum of squared deviations while the row is still in cache. */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int y = 0; y < H; y++) {
        const float *r = x + (size_t)y * row_n;
        double sum = 0.0, m2 = 0.0;
        for (size_t i = 0; i < row_n; i++)
            sum += (double)r[i];
        double mean = sum / (double)row_n;
        for (size_t i = 0; i < row_n; i++) {
            double d = (double)r[i] - mean;
            m2 += d * d;
        }
        row_mean[y] = mean;
        row_m2[y] = m2;
    }
    /* Chan's combination of equal-sized groups. */
    double mean = 0.0, m2 = 0.0;
    for (int y = 0; y < H; y++)
        mean += row_mean[y];
    mean /= H;
    for (int y = 0; y < H; y++) {
        double d = row_mean[y] - mean;
        m2 += row_m2[y] + d * d * (double)row_n;
    }
    double rstd = 1.0 / sqrt(m2 / ((double)row_n * H) + (double)eps);
    for (int c = 0; c < C; c++) {
        affine.scale[c] = (float)(rstd * (double)gamma[c]);
        affine.shift[c] = (float)((double)beta[c] - mean * rstd * (double)gamma[c]);
    }
}

void ag_fused_norm_act_pad(float *out, const float *x, const float *residual,
                           ag_norm_affine affine, int lrelu, int H, int W, int C, ag_pad pad,
                           int threads) {
    const float *scale = affine.scale, *shift = affine.shift;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int y = 0; y < H; y++) {
        const float *x_row = x + (size_t)y * W * C;
        const float *res_row = residual ? residual + (size_t)y * W * C : NULL;
        float *out_row = padded_px(out, y, 0, W, C, pad);
        for (int px = 0; px < W; px++) {
            const float *xp = x_row + (size_t)px * C;
            float *op = out_row + (size_t)px * C;
            for (int c = 0; c < C; c++) {
                float z = xp[c] * scale[c] + shift[c];
                if (res_row)
                    z += res_row[(size_t)px * C + c];
                op[c] = lrelu && z < 0.0f ? z * AG_LRELU_SLOPE : z;
            }
        }
        reflect_row_sides(out, pad.top + y, W, C, pad);
    }
    reflect_top_bottom(out, H, W, C, pad);
}

/* ---- resize ---------------------------------------------------------------------------- */

void ag_fused_resize_pad(float *out, const float *in, const ag_resize_tap *row_taps,
                         const ag_resize_tap *col_taps, int HI, int WI, int HO, int WO, int C,
                         ag_pad pad, int threads) {
    (void)HI;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int oy = 0; oy < HO; oy++) {
        ag_resize_tap ty = row_taps[oy];
        const float *r0 = in + (size_t)ty.i0 * WI * C, *r1 = in + (size_t)ty.i1 * WI * C;
        float *out_row = padded_px(out, oy, 0, WO, C, pad);
        for (int ox = 0; ox < WO; ox++) {
            ag_resize_tap tx = col_taps[ox];
            const float *a = r0 + (size_t)tx.i0 * C, *b = r0 + (size_t)tx.i1 * C;
            const float *d = r1 + (size_t)tx.i0 * C, *e = r1 + (size_t)tx.i1 * C;
            float *op = out_row + (size_t)ox * C;
            for (int c = 0; c < C; c++) {
                float top = a[c] + (b[c] - a[c]) * tx.frac;
                float bottom = d[c] + (e[c] - d[c]) * tx.frac;
                op[c] = top + (bottom - top) * ty.frac;
            }
        }
        reflect_row_sides(out, pad.top + oy, WO, C, pad);
    }
    reflect_top_bottom(out, HO, WO, C, pad);
}

/* ---- image in and out ------------------------------------------------------------------ */

void ag_fused_input_pad(float *out, const uint8_t *in_u8, const float *in_f32, int bands, int H,
                        int W, ag_pad pad, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int y = 0; y < H; y++) {
        float *out_row = padded_px(out, y, 0, W, 3, pad);
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++) {
                size_t i = (size_t)y * W + x;
                out_row[x * 3 + c] = in_u8 ? (float)in_u8[i * bands + c] / 127.5f - 1.0f
                                           : in_f32[i * 3 + c];
            }
        reflect_row_sides(out, pad.top + y, W, 3, pad);
    }
    reflect_top_bottom(out, H, W, 3, pad);
}

uint8_t ag_output_to_u8(float y) {
    float v = rintf((y + 1.0f) * 127.5f);
    return (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
}

void ag_fused_output(float *out_f32, uint8_t *out_u8, int bands, const float *y, int H, int W,
                     int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int row = 0; row < H; row++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++) {
                size_t i = (size_t)row * W + x;
                float t = tanhf(y[i * 3 + c]);
                if (out_f32)
                    out_f32[i * 3 + c] = t;
                if (out_u8)
                    out_u8[i * bands + c] = ag_output_to_u8(t);
            }
}
