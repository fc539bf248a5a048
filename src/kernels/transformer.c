/*
 * transformer.c - reference kernels of CodeFormer's ops (transformer.h). Single-threaded
 * plain C: the maps they see are CodeFormer's (attention and the transformer at 16 x 16,
 * group norm over every VQGAN map; the convs around them dominate the time).
 */
#include "transformer.h"

#include <float.h>
#include <math.h>

static double gain(const float *gamma, int c) {
    return gamma ? (double)gamma[c] : 1.0;
}

static double offset(const float *beta, int c) {
    return beta ? (double)beta[c] : 0.0;
}

void ag_ref_group_norm(float *out, const float *x, const float *gamma, const float *beta, size_t T,
                       int C, int groups, float eps) {
    int per = C / groups;
    for (int g = 0; g < groups; g++) {
        double sum = 0.0, sq = 0.0;
        for (size_t p = 0; p < T; p++)
            for (int c = g * per; c < (g + 1) * per; c++) {
                double v = x[p * C + c];
                sum += v, sq += v * v;
            }
        double n = (double)T * per, mean = sum / n, var = fmax(sq / n - mean * mean, 0.0);
        double inv = 1.0 / sqrt(var + (double)eps);
        for (size_t p = 0; p < T; p++)
            for (int c = g * per; c < (g + 1) * per; c++) {
                double y = ((double)x[p * C + c] - mean) * inv;
                out[p * C + c] = (float)(y * gain(gamma, c) + offset(beta, c));
            }
    }
}

void ag_ref_token_norm(float *out, const float *x, const float *gamma, const float *beta, size_t T,
                       int C, float eps) {
    for (size_t p = 0; p < T; p++) {
        const float *x_c = x + p * C;
        double sum = 0.0, sq = 0.0;
        for (int c = 0; c < C; c++)
            sum += (double)x_c[c];
        double mean = sum / C;
        for (int c = 0; c < C; c++)
            sq += ((double)x_c[c] - mean) * ((double)x_c[c] - mean);
        double inv = 1.0 / sqrt(sq / C + (double)eps);
        for (int c = 0; c < C; c++)
            out[p * C + c] =
                (float)(((double)x_c[c] - mean) * inv * gain(gamma, c) + offset(beta, c));
    }
}

/* One query row of one head: scores <- softmax over the T keys, out_c <- scores · v. */
static void attend_row(float *out_c, const float *q_c, const float *k, const float *v, size_t T,
                       int C, int d, float scale, float *scores) {
    float top = -FLT_MAX;
    for (size_t j = 0; j < T; j++) {
        float s = 0.0f;
        for (int c = 0; c < d; c++)
            s += q_c[c] * k[j * C + c];
        scores[j] = s * scale;
        top = scores[j] > top ? scores[j] : top;
    }
    double total = 0.0;
    for (size_t j = 0; j < T; j++)
        total += (double)(scores[j] = expf(scores[j] - top));
    for (int c = 0; c < d; c++)
        out_c[c] = 0.0f;
    for (size_t j = 0; j < T; j++) {
        float w = (float)((double)scores[j] / total);
        for (int c = 0; c < d; c++)
            out_c[c] += w * v[j * C + c];
    }
}

void ag_ref_attention(float *out, const float *q, const float *k, const float *v, size_t T, int C,
                      int heads, float *scores) {
    int d = C / heads;
    float scale = 1.0f / sqrtf((float)d);
    for (int h = 0; h < heads; h++)
        for (size_t i = 0; i < T; i++)
            attend_row(out + i * C + h * d, q + i * C + h * d, k + h * d, v + h * d, T, C, d, scale,
                       scores);
}

void ag_ref_codebook(float *out, const float *logits, const float *codebook, size_t T, int N,
                     int D) {
    for (size_t p = 0; p < T; p++) {
        const float *l = logits + p * N;
        int best = 0;
        for (int i = 1; i < N; i++)
            best = l[i] > l[best] ? i : best;
        for (int c = 0; c < D; c++)
            out[p * D + c] = codebook[(size_t)best * D + c];
    }
}

/* Mean and std (unbiased variance + eps) of channel c over T pixels. */
static void moments(const float *x, size_t T, int C, int c, float eps, double *mean, double *std) {
    double sum = 0.0, sq = 0.0;
    for (size_t p = 0; p < T; p++)
        sum += (double)x[p * C + c];
    *mean = sum / (double)T;
    for (size_t p = 0; p < T; p++)
        sq += ((double)x[p * C + c] - *mean) * ((double)x[p * C + c] - *mean);
    *std = sqrt(sq / (double)(T > 1 ? T - 1 : 1) + (double)eps);
}

void ag_ref_adain(float *out, const float *x, size_t Tx, const float *s, size_t Ts, int C,
                  float eps) {
    for (int c = 0; c < C; c++) {
        double mx, sx, ms, ss;
        moments(x, Tx, C, c, eps, &mx, &sx);
        moments(s, Ts, C, c, eps, &ms, &ss);
        double scale = ss / sx;
        for (size_t p = 0; p < Tx; p++)
            out[p * C + c] = (float)(((double)x[p * C + c] - mx) * scale + ms);
    }
}
