/*
 * ops.c - the graph's ops that are not convolutions and not fused into a band: per-channel
 * statistics (instance norm, LADE), the external-attention block's matmuls, softmax and
 * normalisation. Maps are (N, C) with N = H * W positions. Both backends use these; the
 * fast one runs matmuls on oneDNN's sgemm.
 */
#include "kernels.h"

#include <dnnl.h>
#include <math.h>
#include <omp.h>
#include <string.h>

/* Positions per block whose sums are taken in float lanes before they go to double
 * (ag_fused_channel_sums, compiled per ISA). */
#define MOMENT_BLOCK 256

/*
 * Shifted sums per channel (relative to the first position's value, so a large mean does
 * not cancel the variance away), blocks of positions in float, totals in double; each
 * thread keeps its own totals (sum, sum of squares) and adds them in at the end.
 */
static void moments(double *mean, double *var, const float *x, size_t N, int C, int threads) {
    double s1[AG_MAP_MAX_CHANNELS], s2[AG_MAP_MAX_CHANNELS];
    const float *shift = x;
    memset(s1, 0, sizeof(double) * (size_t)C);
    memset(s2, 0, sizeof(double) * (size_t)C);
#pragma omp parallel num_threads(threads)
    {
        double t1[AG_MAP_MAX_CHANNELS] = {0}, t2[AG_MAP_MAX_CHANNELS] = {0};
#pragma omp for schedule(static)
        for (size_t start = 0; start < N; start += MOMENT_BLOCK) {
            size_t n = start + MOMENT_BLOCK < N ? MOMENT_BLOCK : N - start;
            ag_fused_channel_sums(t1, t2, x + start * C, n, C, shift);
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
    /* One parallel region: each thread takes every threads-th run of `rows` positions, makes
     * y = W1 x for it in its share of the scratch (sgemm, one thread inside the region) and
     * sums y's moments relative to y at the first position. Many small regions (one per
     * block) cost a thread synchronisation each, and on a shared machine each waits for a
     * descheduled thread's time slice: 13 LADEs made v3 several times slower. */
    double s1[AG_MAP_MAX_CHANNELS] = {0}, s2[AG_MAP_MAX_CHANNELS] = {0};
    float shift[AG_MAP_MAX_CHANNELS];
    for (int c = 0; c < C; c++) {
        double acc = 0.0;
        for (int k = 0; k < C; k++)
            acc += (double)x[k] * (double)w[(size_t)c * C + k];
        shift[c] = (float)acc;
    }
    size_t rows = block / (size_t)(threads > 0 ? threads : 1);
    rows = rows ? rows : 1;
#pragma omp parallel num_threads(threads)
    {
        size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
        float *mine = scratch + t * rows * (size_t)C;
        double t1[AG_MAP_MAX_CHANNELS] = {0}, t2[AG_MAP_MAX_CHANNELS] = {0};
        for (size_t start = t * rows; start < N; start += nt * rows) {
            size_t n = start + rows < N ? rows : N - start;
            ag_matmul(mine, x + start * C, w, 1, n, C, C, 1, 1);
            ag_fused_channel_sums(t1, t2, mine, n, C, shift);
        }
#pragma omp critical
        for (int c = 0; c < C; c++)
            s1[c] += t1[c], s2[c] += t2[c];
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

void ag_attention_fast(float *out, const float *q, const float *k, const float *v, size_t T, int C,
                       int heads, float *scores, int threads) {
    int d = C / heads;
    float scale = 1.0f / sqrtf((float)d);
    dnnl_dim_t t = (dnnl_dim_t)T;
    for (int h = 0; h < heads; h++) { /* row-major; each head's columns strided by C */
        dnnl_sgemm('N', 'T', t, t, d, scale, q + h * d, C, k + h * d, C, 0.0f, scores, t);
        ag_softmax(scores, T, (int)T, 0, threads);
        dnnl_sgemm('N', 'N', t, d, t, 1.0f, scores, t, v + h * d, C, 0.0f, out + h * d, C);
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
