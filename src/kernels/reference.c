/*
 * reference.c - the generator's ops as plain loops: the algorithmic reference
 * (`--backend reference`) that every optimised path is tested against. Clarity over speed.
 */
#include "../util/util_internal.h"
#include "kernels.h"

#include <math.h>
#include <string.h>

void ag_ref_reflect_pad(float *out, const float *in, int H, int W, int C, ag_pad pad) {
    int HP = H + pad.top + pad.bottom, WP = W + pad.left + pad.right;
    for (int y = 0; y < HP; y++)
        for (int x = 0; x < WP; x++) {
            int sy = ag_reflect_index(y - pad.top, H), sx = ag_reflect_index(x - pad.left, W);
            memcpy(out + ((size_t)y * WP + x) * C, in + ((size_t)sy * W + sx) * C,
                   (size_t)C * sizeof(float));
        }
}

void ag_ref_conv2d(float *out, const float *in, const float *weight, const float *bias, int HP,
                   int WP, int IC, int OC, int K, int stride, int groups) {
    int HO = (HP - K) / stride + 1, WO = (WP - K) / stride + 1;
    int ic_per_group = IC / groups, oc_per_group = OC / groups;
    for (int oy = 0; oy < HO; oy++)
        for (int ox = 0; ox < WO; ox++)
            for (int oc = 0; oc < OC; oc++) {
                int g = oc / oc_per_group;
                float sum = bias ? bias[oc] : 0.0f;
                for (int ky = 0; ky < K; ky++)
                    for (int kx = 0; kx < K; kx++) {
                        const float *in_px =
                            in + ((size_t)(oy * stride + ky) * WP + ox * stride + kx) * IC;
                        for (int i = 0; i < ic_per_group; i++)
                            sum += in_px[g * ic_per_group + i] *
                                   weight[(((size_t)oc * ic_per_group + i) * K + ky) * K + kx];
                    }
                out[((size_t)oy * WO + ox) * OC + oc] = sum;
            }
}

void ag_ref_layer_norm(float *x, const float *gamma, const float *beta, int H, int W, int C,
                       float eps) {
    size_t n = (size_t)H * W * C;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += (double)x[i];
    double mean = sum / (double)n, sq = 0.0;
    for (size_t i = 0; i < n; i++)
        sq += ((double)x[i] - mean) * ((double)x[i] - mean);
    double rstd = 1.0 / sqrt(sq / (double)n + (double)eps);
    for (size_t i = 0; i < n; i++) {
        int c = (int)(i % (size_t)C);
        x[i] = (float)(((double)x[i] - mean) * rstd) * gamma[c] + beta[c];
    }
}

void ag_ref_leaky_relu(float *x, size_t n, float slope) {
    for (size_t i = 0; i < n; i++)
        x[i] = x[i] > 0.0f ? x[i] : x[i] * slope;
}

void ag_ref_tanh(float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] = tanhf(x[i]);
}

void ag_ref_add(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}

/* PyTorch's arithmetic: the scale first, then scale * coordinate, in float. */
static ag_resize_tap resize_tap(int o, int in_size, int out_size, ag_resize_mode mode) {
    float src;
    if (mode == AG_RESIZE_ALIGN_CORNERS) {
        float scale = out_size > 1 ? (float)(in_size - 1) / (float)(out_size - 1) : 0.0f;
        src = scale * (float)o;
    } else if (mode == AG_RESIZE_HALF_PIXEL) {
        src = ((float)in_size / (float)out_size) * ((float)o + 0.5f) - 0.5f;
    } else {
        src = ((float)in_size / (float)out_size) * (float)o;
    }
    if (src < 0.0f)
        src = 0.0f;
    int i0 = (int)src;
    if (i0 > in_size - 1)
        i0 = in_size - 1;
    ag_resize_tap tap = {i0, i0 + 1 < in_size ? i0 + 1 : in_size - 1, src - (float)i0};
    return tap;
}

void ag_resize_taps(ag_resize_tap *taps, int in_size, int out_size, ag_resize_mode mode) {
    for (int o = 0; o < out_size; o++)
        taps[o] = resize_tap(o, in_size, out_size, mode);
}

void ag_nearest_taps(ag_resize_tap *taps, int in_size, int out_size) {
    for (int o = 0; o < out_size; o++) {
        int i = (int)((long long)o * in_size / out_size);
        taps[o] = (ag_resize_tap){i, i, 0.0f};
    }
}

void ag_ref_resize_bilinear(float *out, const float *in, int HI, int WI, int HO, int WO, int C,
                            ag_resize_mode mode) {
    for (int oy = 0; oy < HO; oy++)
        for (int ox = 0; ox < WO; ox++) {
            ag_resize_tap ty = resize_tap(oy, HI, HO, mode), tx = resize_tap(ox, WI, WO, mode);
            for (int c = 0; c < C; c++) {
                float a = in[((size_t)ty.i0 * WI + tx.i0) * C + c];
                float b = in[((size_t)ty.i0 * WI + tx.i1) * C + c];
                float d = in[((size_t)ty.i1 * WI + tx.i0) * C + c];
                float e = in[((size_t)ty.i1 * WI + tx.i1) * C + c];
                float top = a + (b - a) * tx.frac, bottom = d + (e - d) * tx.frac;
                out[((size_t)oy * WO + ox) * C + c] = top + (bottom - top) * ty.frac;
            }
        }
}
