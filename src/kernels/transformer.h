/*
 * transformer.h - reference kernels of CodeFormer's ops (transformer.c): group norm, token
 * layer norm, GELU, multi-head attention over the pixels as tokens, the codebook lookup of
 * the top logit, adaptive instance norm. Plain C on NHWC fp32 maps; T = H·W tokens, C
 * channels, N codes, D code width. Statistics in double.
 */
#ifndef AG_KERNELS_TRANSFORMER_H
#define AG_KERNELS_TRANSFORMER_H

#include <stddef.h>

/* PyTorch's GroupNorm: per group of C / groups channels over all T pixels, population
 * variance; then per-channel gamma, beta. */
void ag_ref_group_norm(float *out, const float *x, const float *gamma, const float *beta, size_t T,
                       int C, int groups, float eps);
/* nn.LayerNorm over the C channels of each pixel. */
void ag_ref_token_norm(float *out, const float *x, const float *gamma, const float *beta, size_t T,
                       int C, float eps);
/* out = softmax(q kᵀ / sqrt(C / heads)) v per head (channels [h C/heads, (h+1) C/heads));
 * scores: T floats. */
void ag_ref_attention(float *out, const float *q, const float *k, const float *v, size_t T, int C,
                      int heads, float *scores);
/* out (T, D) = codebook row of the largest of each pixel's N logits (the first on ties). */
void ag_ref_codebook(float *out, const float *logits, const float *codebook, size_t T, int N,
                     int D);
/* (x - mean x) / std x · std s + mean s per channel, std = sqrt(unbiased var + eps) (CodeFormer's
 * calc_mean_std); x has Tx pixels, s Ts. */
void ag_ref_adain(float *out, const float *x, size_t Tx, const float *s, size_t Ts, int C,
                  float eps);

#endif
