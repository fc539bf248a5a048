/*
 * ops_upscale.c - the ops the upscalers add to the table (ops.h): add_scaled, RRDBNet's
 * residual-in-residual "out * 0.2 + x" (the dense blocks' own 0.2 is their conv5's
 * weight_scale); sigmoid_gate, SPAN's attention, RealPLKSR's element-wise attention and
 * SiLU; mish, group_norm and channel_norm (RealPLKSR). No fused lowering: both backends run these
 * kernels on whole maps, parallel over pixels.
 */
#include "ops.h"

#include "../kernels/kernels.h"

#include <math.h>
#include <string.h>

/* src[0] * alpha + src[1]; shapes as add's (ag_check_add, ag_shape_add). At alpha 0 src[0]
 * is not read (an engine skips the steps that would have made it: CodeFormer at w = 0). */
void ag_run_add_scaled(const ag_node *n, const ag_op_io *io) {
    const float *restrict a = io->src[0], *restrict b = io->src[1];
    float *restrict out = io->out;
    size_t count = ag_shape_floats(io->in[0]);
    if (n->alpha == 0.0f) {
        if (out != b)
            memcpy(out, b, count * sizeof *out);
        return;
    }
    for (size_t i = 0; i < count; i++)
        out[i] = a[i] * n->alpha + b[i];
}

/* src[0] * (sigmoid(src[1]) - alpha); shapes as add's. */
void ag_run_sigmoid_gate(const ag_node *n, const ag_op_io *io) {
    const float *x = io->src[0], *g = io->src[1];
    float *out = io->out, shift = n->alpha;
    long count = (long)ag_shape_floats(io->in[0]);
#pragma omp parallel for num_threads(io->threads) schedule(static)
    for (long i = 0; i < count; i++)
        out[i] = x[i] * (1.0f / (1.0f + expf(-g[i])) - shift);
}

/* x * tanh(softplus(x)), softplus linear above 20 as PyTorch's. With e = exp(x),
 * tanh(log(1 + e)) = q / (q + 2) where q = e (e + 2): one exp instead of three calls. */
void ag_run_mish(const ag_node *n, const ag_op_io *io) {
    (void)n;
    const float *x = io->src[0];
    float *out = io->out;
    long count = (long)ag_shape_floats(io->in[0]);
#pragma omp parallel for num_threads(io->threads) schedule(static)
    for (long i = 0; i < count; i++) {
        float v = x[i], e = expf(v < 20.0f ? v : 20.0f), q = e * (e + 2.0f);
        out[i] = v >= 20.0f ? v : v * q / (q + 2.0f);
    }
}

int ag_check_group_norm(const ag_node *n, const int *src_c, char *why) {
    int c = src_c[0];
    if (c > AG_MAP_MAX_CHANNELS || n->groups < 1 || c % n->groups)
        return ag_op_fail(why, "%d channels in %d groups (at most %d channels)", c, n->groups,
                          AG_MAP_MAX_CHANNELS);
    if (!n->gamma || !n->beta || !(n->eps >= 0.0f) || n->eps >= 1.0f)
        return ag_op_fail(why, "needs gamma, beta and an eps in [0, 1)");
    return 0;
}

int ag_check_norm_affine(const ag_node *n, const int *src_c, char *why) {
    (void)src_c;
    if (!n->gamma || !n->beta || !(n->eps >= 0.0f) || n->eps >= 1.0f)
        return ag_op_fail(why, "needs gamma, beta and an eps in [0, 1)");
    return 0;
}

/* GroupNorm: each group of C / groups channels normalised over (H, W, its channels), from
 * the channels' double moments, then the per-channel gamma and beta. Fast: one vectorised
 * pass (the conv chain's row kernel), with the SiLU an engine fused into it (io->act: a
 * sigmoid_gate of the norm by itself, CodeFormer's ResBlocks) applied as it writes. */
void ag_run_group_norm(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0];
    size_t pixels = (size_t)in.h * in.w;
    int C = in.c, per = C / n->groups;
    double mean[AG_MAP_MAX_CHANNELS], var[AG_MAP_MAX_CHANNELS];
    float scale[AG_MAP_MAX_CHANNELS], shift[AG_MAP_MAX_CHANNELS];
    ag_channel_moments(mean, var, io->src[0], pixels, C, io->threads);
    for (int g = 0; g < n->groups; g++) {
        double m = 0, sq = 0;
        for (int c = g * per; c < (g + 1) * per; c++)
            m += mean[c], sq += var[c] + mean[c] * mean[c];
        m /= per;
        double inv = 1.0 / sqrt(sq / per - m * m + (double)n->eps);
        for (int c = g * per; c < (g + 1) * per; c++) {
            scale[c] = (float)(inv * (double)n->gamma[c]);
            shift[c] = (float)((double)n->beta[c] - m * inv * (double)n->gamma[c]);
        }
    }
    const float *x = io->src[0];
    float *out = io->out;
    if (io->fast) {
        ag_gate gate = io->act && io->act->op == AG_OP_SIGMOID_GATE ? AG_GATE_SILU : AG_GATE_NONE;
        ag_norm_affine affine = {scale, shift, NULL, gate};
        ag_fused_norm_act_pad(out, x, NULL, 0, affine, 1.0f, 1.0f, in.h, in.w, C, (ag_pad){0},
                              io->threads);
        return;
    }
#pragma omp parallel for num_threads(io->threads) schedule(static)
    for (long p = 0; p < (long)pixels; p++)
        for (int c = 0; c < C; c++)
            out[(size_t)p * C + c] = x[(size_t)p * C + c] * scale[c] + shift[c];
}

/* LayerNorm over the channels of each pixel (RealPLKSR's, ConvNeXt's channels-first one):
 * (x - mean) / sqrt(var + eps) * gamma + beta, mean and variance over C in double. */
void ag_run_channel_norm(const ag_node *n, const ag_op_io *io) {
    const float *x = io->src[0];
    float *out = io->out;
    int C = io->in[0].c;
    long pixels = (long)io->in[0].h * io->in[0].w;
#pragma omp parallel for num_threads(io->threads) schedule(static)
    for (long p = 0; p < pixels; p++) {
        const float *x_p = x + (size_t)p * C;
        float *out_p = out + (size_t)p * C;
        double sum = 0, sq = 0;
        for (int c = 0; c < C; c++)
            sum += (double)x_p[c];
        double mean = sum / C;
        for (int c = 0; c < C; c++)
            sq += ((double)x_p[c] - mean) * ((double)x_p[c] - mean);
        double inv = 1.0 / sqrt(sq / C + (double)n->eps);
        for (int c = 0; c < C; c++)
            out_p[c] =
                (float)(((double)x_p[c] - mean) * inv * (double)n->gamma[c] + (double)n->beta[c]);
    }
}

/* ---- DySample (RealPLKSR's learnt upsampler) ---------------------------------------------- */

/* dysample(x, offset, scope), x (H, W, C) in `groups` groups of channels, offset and scope
 * (H, W, 2 groups up²), channel d groups up² + g up² + i up + j (d 0: along x, 1: along y).
 * The output pixel (y up + i, x up + j) of group g is its channels bilinearly sampled at
 * (x, y) + offset sigmoid(scope) / 2 + init, in input pixels, init the sub-pixel centre
 * ((j, i) - (up - 1) / 2) / up; past the border the edge pixel (grid_sample's bilinear,
 * padding "border", align_corners False, from which the pixel units follow exactly). */
int ag_check_dysample(const ag_node *n, const int *src_c, char *why) {
    int offsets = 2 * n->groups * n->up * n->up;
    if (src_c[0] % n->groups || src_c[1] != offsets || src_c[2] != offsets)
        return ag_op_fail(why, "%d channels in %d groups with 2 x %d offsets need (C, %d, %d)",
                          src_c[0], n->groups, offsets / 2, offsets, offsets);
    return 0;
}

int ag_shape_dysample(const ag_node *n, const ag_shape *in, ag_shape *out, char *why) {
    for (int j = 1; j < 3; j++)
        if (in[j].h != in[0].h || in[j].w != in[0].w)
            return ag_op_fail(why, "offsets %dx%d for a %dx%d map", in[j].w, in[j].h, in[0].w,
                              in[0].h);
    return ag_shape_nearest(n, in, out, why);
}

/* The bilinear sample of `count` channels of x (NHWC, w x h, stride C) at (px, py). */
static void sample_border(const float *x, int w, int h, int C, int count, float px, float py,
                          float *out) {
    px = px < 0.0f ? 0.0f : px > (float)(w - 1) ? (float)(w - 1) : px;
    py = py < 0.0f ? 0.0f : py > (float)(h - 1) ? (float)(h - 1) : py;
    int x0 = (int)floorf(px), y0 = (int)floorf(py);
    int x1 = x0 + (x0 < w - 1), y1 = y0 + (y0 < h - 1);
    float fx = px - (float)x0, fy = py - (float)y0;
    const float *a = x + ((size_t)y0 * w + x0) * C, *b = x + ((size_t)y0 * w + x1) * C;
    const float *c = x + ((size_t)y1 * w + x0) * C, *d = x + ((size_t)y1 * w + x1) * C;
    float wa = (1 - fx) * (1 - fy), wb = fx * (1 - fy), wc = (1 - fx) * fy, wd = fx * fy;
    for (int k = 0; k < count; k++)
        out[k] = a[k] * wa + b[k] * wb + c[k] * wc + d[k] * wd;
}

void ag_run_dysample(const ag_node *n, const ag_op_io *io) {
    const float *x = io->src[0], *offset = io->src[1], *scope = io->src[2];
    int h = io->in[0].h, w = io->in[0].w, C = io->in[0].c, s = n->up, G = n->groups;
    int per = C / G, half = G * s * s, ow = w * s;
#pragma omp parallel for num_threads(io->threads) schedule(static)
    for (int y = 0; y < h; y++)
        for (int xx = 0; xx < w; xx++) {
            const float *o = offset + ((size_t)y * w + xx) * 2 * half;
            const float *g = scope + ((size_t)y * w + xx) * 2 * half;
            for (int grp = 0; grp < G; grp++)
                for (int i = 0; i < s; i++)
                    for (int j = 0; j < s; j++) {
                        int k = grp * s * s + i * s + j;
                        float dx = o[k] / (1.0f + expf(-g[k])) * 0.5f +
                                   ((float)j - (float)(s - 1) * 0.5f) / (float)s;
                        float dy = o[half + k] / (1.0f + expf(-g[half + k])) * 0.5f +
                                   ((float)i - (float)(s - 1) * 0.5f) / (float)s;
                        float *dst = io->out + ((size_t)(y * s + i) * ow + xx * s + j) * C;
                        sample_border(x + grp * per, w, h, C, per, (float)xx + dx, (float)y + dy,
                                      dst + grp * per);
                    }
        }
}
