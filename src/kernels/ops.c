/*
 * ops.c - the graph's ops that are not convolutions and not fused into a band: per-channel
 * statistics (instance norm, LADE), the external-attention block's matmuls, softmax and
 * normalisation. Maps are (N, C) with N = H * W positions. Both backends use these; the
 * fast one runs matmuls on oneDNN's sgemm.
 */
#include "kernels.h"

#include <dnnl.h>
#include <math.h>
#include <string.h>

/* Positions per block whose sums are taken in float lanes before they go to double. */
#define MOMENT_BLOCK 256

/*
 * Shifted sums per channel (relative to the first position's value, so a large mean does
 * not cancel the variance away), blocks of positions in float, totals in double; each
 * thread keeps its own totals in `acc` (4 * C doubles per thread: sum, sum of squares).
 */
static void moments(double *mean, double *var, const float *x, size_t N, int C, int threads) {
    double s1[AG_NORM_MAX_CHANNELS], s2[AG_NORM_MAX_CHANNELS];
    const float *shift = x;
    memset(s1, 0, sizeof(double) * (size_t)C);
    memset(s2, 0, sizeof(double) * (size_t)C);
#pragma omp parallel num_threads(threads)
    {
        double t1[AG_NORM_MAX_CHANNELS], t2[AG_NORM_MAX_CHANNELS];
        float b1[AG_NORM_MAX_CHANNELS], b2[AG_NORM_MAX_CHANNELS];
        memset(t1, 0, sizeof(double) * (size_t)C);
        memset(t2, 0, sizeof(double) * (size_t)C);
#pragma omp for schedule(static)
        for (size_t start = 0; start < N; start += MOMENT_BLOCK) {
            size_t end = start + MOMENT_BLOCK < N ? start + MOMENT_BLOCK : N;
            memset(b1, 0, sizeof(float) * (size_t)C);
            memset(b2, 0, sizeof(float) * (size_t)C);
            for (size_t p = start; p < end; p++)
                for (int c = 0; c < C; c++) {
                    float d = x[p * C + c] - shift[c];
                    b1[c] += d;
                    b2[c] += d * d;
                }
            for (int c = 0; c < C; c++)
                t1[c] += (double)b1[c], t2[c] += (double)b2[c];
        }
#pragma omp critical
        for (int c = 0; c < C; c++)
            s1[c] += t1[c], s2[c] += t2[c];
    }
    for (int c = 0; c < C; c++) {
        double m = s1[c] / (double)N;
        mean[c] = (double)shift[c] + m;
        double v = s2[c] / (double)N - m * m;
        var[c] = v > 0.0 ? v : 0.0;
    }
}

void ag_channel_moments(double *mean, double *var, const float *x, size_t N, int C, int threads) {
    moments(mean, var, x, N, C, threads);
}

void ag_lade_moments(double *mean_y, double *var_y, const float *x, const float *w, size_t N, int C,
                     float *scratch, size_t block, int threads) {
    /* y's moments are accumulated block by block: its first position is the shift. */
    double s1[AG_NORM_MAX_CHANNELS] = {0}, s2[AG_NORM_MAX_CHANNELS] = {0};
    float shift[AG_NORM_MAX_CHANNELS];
    for (size_t start = 0; start < N; start += block) {
        size_t n = start + block < N ? block : N - start;
        ag_matmul(scratch, x + start * C, w, 1, n, C, C, 1, threads);
        if (start == 0)
            memcpy(shift, scratch, sizeof(float) * (size_t)C);
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int c = 0; c < C; c++) {
            float b1 = 0.0f, b2 = 0.0f;
            double d1 = 0.0, d2 = 0.0;
            for (size_t p = 0; p < n; p++) {
                float d = scratch[p * C + c] - shift[c];
                b1 += d, b2 += d * d;
                if ((p + 1) % MOMENT_BLOCK == 0)
                    d1 += (double)b1, d2 += (double)b2, b1 = b2 = 0.0f;
            }
            s1[c] += d1 + (double)b1, s2[c] += d2 + (double)b2;
        }
    }
    for (int c = 0; c < C; c++) {
        double m = s1[c] / (double)N;
        mean_y[c] = (double)shift[c] + m;
        double v = s2[c] / (double)N - m * m;
        var_y[c] = v > 0.0 ? v : 0.0;
    }
}

void ag_matmul(float *out, const float *x, const float *w, int transpose, size_t N, int C, int M,
               int fast, int threads) {
    if (fast) {
        /* Row-major: out (N, M) = x (N, C) . w (C, M), or w (M, C) transposed. */
        dnnl_sgemm('N', transpose ? 'T' : 'N', (dnnl_dim_t)N, M, C, 1.0f, x, C, w,
                   transpose ? C : M, 0.0f, out, M);
        return;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t p = 0; p < N; p++)
        for (int m = 0; m < M; m++) {
            double acc = 0.0;
            for (int c = 0; c < C; c++)
                acc += (double)x[p * C + c] *
                       (double)(transpose ? w[(size_t)m * C + c] : w[(size_t)c * M + m]);
            out[p * M + m] = (float)acc;
        }
}

void ag_softmax(float *x, size_t N, int C, int spatial, int threads) {
    if (!spatial) {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (size_t p = 0; p < N; p++) {
            float *row = x + p * C, top = row[0];
            for (int c = 1; c < C; c++)
                top = row[c] > top ? row[c] : top;
            double sum = 0.0;
            for (int c = 0; c < C; c++)
                sum += (double)(row[c] = expf(row[c] - top));
            for (int c = 0; c < C; c++)
                row[c] = (float)((double)row[c] / sum);
        }
        return;
    }
    /* Over positions, per channel: each thread takes a range of channels. */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int c = 0; c < C; c++) {
        float top = x[c];
        for (size_t p = 1; p < N; p++)
            top = x[p * C + c] > top ? x[p * C + c] : top;
        double sum = 0.0;
        for (size_t p = 0; p < N; p++)
            sum += (double)(x[p * C + c] = expf(x[p * C + c] - top));
        float inv = (float)(1.0 / sum);
        for (size_t p = 0; p < N; p++)
            x[p * C + c] *= inv;
    }
}

void ag_sum_normalize(float *x, size_t N, int C, float eps, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t p = 0; p < N; p++) {
        double sum = 0.0;
        for (int c = 0; c < C; c++)
            sum += (double)x[p * C + c];
        float inv = (float)(1.0 / ((double)eps + sum));
        for (int c = 0; c < C; c++)
            x[p * C + c] *= inv;
    }
}
