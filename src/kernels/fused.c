/*
 * fused.c - the passes between the oneDNN convolutions. A convolution's padded input is
 * never a whole tensor: ag_fused_band computes a band of its rows on the fly from where
 * they come from (the image, the previous conv's raw output plus its norm, residual and
 * activation, or a bilinear resize), reflection padding included. Statistics are taken per
 * row right after the conv wrote them. Parallel over rows with OpenMP, the team oneDNN
 * uses.
 */
#include "kernels.h"

#include <math.h>
#include <string.h>

/* The hot loops are compiled for AVX-512, AVX2 and baseline x86-64 and picked at load
 * time (GCC function multi-versioning), so one binary runs everywhere at full width. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(AG_NO_CLONES)
#define AG_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define AG_HOT
#endif

/* PyTorch ReflectionPad2d: index -1 maps to 1, n maps to n - 2. */
static inline int reflect(int i, int n) {
    if (i < 0)
        return -i;
    if (i >= n)
        return 2 * (n - 1) - i;
    return i;
}

/* Reflect the left and right border of one padded row whose interior is written. */
static void reflect_row_sides(float *row, int W, int C, ag_pad pad) {
    size_t px = (size_t)C * sizeof(float);
    for (int i = 1; i <= pad.left; i++)
        memcpy(row + (size_t)(pad.left - i) * C, row + (size_t)(pad.left + i) * C, px);
    for (int i = 1; i <= pad.right; i++)
        memcpy(row + (size_t)(pad.left + W - 1 + i) * C, row + (size_t)(pad.left + W - 1 - i) * C,
               px);
}

/* ---- statistics ------------------------------------------------------------------------ */

/* Sixteen float lanes (one AVX-512 register) summed over blocks short enough that float
 * loses nothing that matters, each block flushed into double. Values are taken relative
 * to the row's first element, so a large mean does not cancel the variance away. */
#define STATS_LANES 16
#define STATS_BLOCK 1024

AG_HOT static void row_moments(const float *row, size_t n, double *mean, double *m2) {
    float shift = row[0];
    double s1 = 0.0, s2 = 0.0;
    size_t i = 0;
    while (i + STATS_LANES <= n) {
        float a1[STATS_LANES] = {0}, a2[STATS_LANES] = {0};
        size_t end = i + STATS_BLOCK < n ? i + STATS_BLOCK : n - (n - i) % STATS_LANES;
        for (; i < end; i += STATS_LANES)
            for (int l = 0; l < STATS_LANES; l++) {
                float d = row[i + l] - shift;
                a1[l] += d;
                a2[l] += d * d;
            }
        for (int l = 0; l < STATS_LANES; l++)
            s1 += (double)a1[l], s2 += (double)a2[l];
    }
    for (; i < n; i++) {
        double d = (double)row[i] - (double)shift;
        s1 += d, s2 += d * d;
    }
    *mean = (double)shift + s1 / (double)n;
    *m2 = s2 - s1 * s1 / (double)n;
    if (*m2 < 0.0)
        *m2 = 0.0;
}

void ag_fused_row_stats(double *partials, const float *y, int first, int rows, size_t row_n,
                        int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int r = first; r < first + rows; r++)
        row_moments(y + (size_t)r * row_n, row_n, &partials[2 * r], &partials[2 * r + 1]);
}

void ag_norm_affine_from_stats(ag_norm_affine affine, const double *partials, int H, size_t row_n,
                               const float *gamma, const float *beta, int C, float eps) {
    double mean = 0.0, m2 = 0.0;
    for (int r = 0; r < H; r++)
        mean += partials[2 * r];
    mean /= H;
    for (int r = 0; r < H; r++) {
        double d = partials[2 * r] - mean;
        m2 += partials[2 * r + 1] + d * d * (double)row_n;
    }
    double rstd = 1.0 / sqrt(m2 / ((double)row_n * H) + (double)eps);
    for (int c = 0; c < C; c++) {
        affine.scale[c] = (float)(rstd * (double)gamma[c]);
        affine.shift[c] = (float)((double)beta[c] - mean * rstd * (double)gamma[c]);
    }
}

void ag_fused_norm_stats(ag_norm_affine affine, double *partials, const float *x,
                         const float *gamma, const float *beta, int H, int W, int C, float eps,
                         int threads) {
    size_t row_n = (size_t)W * C;
    ag_fused_row_stats(partials, x, 0, H, row_n, threads);
    ag_norm_affine_from_stats(affine, partials, H, row_n, gamma, beta, C, eps);
}

/* ---- row producers --------------------------------------------------------------------- */

/* out[0..W*C) <- act(x * scale + shift [+ residual]) of one row. The four variants are
 * separate loops so each vectorises over channels without a branch inside. */
AG_HOT static void norm_act_row(float *out, const float *x, const float *res,
                                ag_norm_affine affine, int lrelu, int W, int C) {
    const float *scale = affine.scale, *shift = affine.shift;
    for (int px = 0; px < W; px++) {
        const float *xp = x + (size_t)px * C;
        float *op = out + (size_t)px * C;
        if (res) {
            const float *rp = res + (size_t)px * C;
            for (int c = 0; c < C; c++)
                op[c] = xp[c] * scale[c] + shift[c] + rp[c];
        } else {
            for (int c = 0; c < C; c++)
                op[c] = xp[c] * scale[c] + shift[c];
        }
        if (lrelu)
            for (int c = 0; c < C; c++)
                op[c] = op[c] < 0.0f ? op[c] * AG_LRELU_SLOPE : op[c];
    }
}

/* out[0..W*C) <- row `y` of the bilinear resize of a (HI, WI, C). */
AG_HOT static void resize_row(float *out, const ag_band_source *s, int y) {
    int C = s->C;
    ag_resize_tap ty = s->row_taps[y];
    const float *r0 = s->a + (size_t)ty.i0 * s->WI * C, *r1 = s->a + (size_t)ty.i1 * s->WI * C;
    for (int ox = 0; ox < s->W; ox++) {
        ag_resize_tap tx = s->col_taps[ox];
        const float *a = r0 + (size_t)tx.i0 * C, *b = r0 + (size_t)tx.i1 * C;
        const float *d = r1 + (size_t)tx.i0 * C, *e = r1 + (size_t)tx.i1 * C;
        float *op = out + (size_t)ox * C;
        for (int c = 0; c < C; c++) {
            float top = a[c] + (b[c] - a[c]) * tx.frac;
            float bottom = d[c] + (e[c] - d[c]) * tx.frac;
            op[c] = top + (bottom - top) * ty.frac;
        }
    }
}

/* out[0..W*3) <- row `y` of the image in [-1, 1]. */
static void image_row(float *out, const ag_band_source *s, int y) {
    size_t base = (size_t)y * s->W;
    if (s->u8) {
        for (int x = 0; x < s->W; x++)
            for (int c = 0; c < 3; c++)
                out[x * 3 + c] = (float)s->u8[(base + x) * s->bands + c] / 127.5f - 1.0f;
    } else {
        memcpy(out, s->f32 + base * 3, (size_t)s->W * 3 * sizeof(float));
    }
}

void ag_fused_band(float *out, const ag_band_source *s, int first, int rows, int threads) {
    int C = s->C;
    size_t row_floats = (size_t)(s->W + s->pad.left + s->pad.right) * C, row_n = (size_t)s->W * C;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < rows; i++) {
        int y = reflect(first + i - s->pad.top, s->H);
        float *row = out + (size_t)i * row_floats;
        float *interior = row + (size_t)s->pad.left * C;
        if (s->kind == AG_BAND_IMAGE)
            image_row(interior, s, y);
        else if (s->kind == AG_BAND_RESIZE)
            resize_row(interior, s, y);
        else
            norm_act_row(interior, s->x + y * row_n, s->residual ? s->residual + y * row_n : NULL,
                         s->affine, s->lrelu, s->W, C);
        reflect_row_sides(row, s->W, C, s->pad);
    }
}

void ag_fused_norm_act_pad(float *out, const float *x, const float *residual,
                           ag_norm_affine affine, int lrelu, int H, int W, int C, ag_pad pad,
                           int threads) {
    ag_band_source s = {.kind = AG_BAND_RAW, .H = H, .W = W, .C = C, .pad = pad, .x = x,
                        .residual = residual, .affine = affine, .lrelu = lrelu};
    ag_fused_band(out, &s, 0, H + pad.top + pad.bottom, threads);
}

/* ---- output ---------------------------------------------------------------------------- */

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
