/*
 * ops_style.c - the StyleGAN2 family's ops (GPEN, GFPGAN): constant input, linear layers
 * over vectors, pixel norm, FusedLeakyReLU, modulated and transposed convolutions,
 * upfirdn2d, concatenation, channel slices, SFT and noise injection (ops.h, docs/graph.md);
 * the convolutions' kernels are in ops_modconv.c.
 *
 * Vectors (the style path) are graph values of shape (1, 1, C): a map of one pixel.
 * Semantics follow rosinality/stylegan2-pytorch's non-fused paths, which GPEN and GFPGAN
 * build on; the reference kernels are plain loops, checked against PyTorch
 * (tools/make_op_fixtures.py, tests/test_ops.c).
 */
#include "ops.h"

#include "../kernels/kernels.h"

#include <math.h>
#include <string.h>

#define VECTOR_MAX 65536 /* channels of a vector: GFPGAN's latents are 16 x 512 */

static int range_end(const ag_node *n, int c) {
    return n->c1 ? n->c1 : c;
}

/* ---- binding --------------------------------------------------------------------------- */

/* The bias slot, when present, is (oc); nothing in the per-channel slots. */
static int bind_bias(const ag_dims *t, int oc, char *why) {
    int64_t want[1] = {oc};
    if (t[AG_T_BIAS].ndim && !ag_dims_is(&t[AG_T_BIAS], 1, VECTOR_MAX, want))
        return ag_op_fail(why, "a bias is not (%d)", oc);
    if (t[AG_T_GAMMA].ndim || t[AG_T_BETA].ndim || t[AG_T_AUX].ndim)
        return ag_op_fail(why, "takes no per-channel or auxiliary tensor");
    return 0;
}

/* A (1, C, H, W) or (C, H, W) constant map. */
int ag_bind_const(ag_node *n, const int *src_c, const ag_dims *t, char *why) {
    const ag_dims *w = &t[AG_T_WEIGHT];
    (void)src_c;
    int lead = w->ndim == 4 ? 1 : 0;
    if ((w->ndim != 3 && w->ndim != 4) || (lead && w->d[0] != 1) || w->d[lead] < 1 ||
        w->d[lead] > 4096 || w->d[lead + 1] < 1 || w->d[lead + 1] > 4096 || w->d[lead + 2] < 1 ||
        w->d[lead + 2] > 4096)
        return ag_op_fail(why, "needs a (1, C, H, W) weight");
    n->out_c = (int)w->d[lead];
    n->aux_h = (int)w->d[lead + 1], n->aux_w = (int)w->d[lead + 2];
    return bind_bias(t, 1, why);
}

int ag_bind_linear(ag_node *n, const int *src_c, const ag_dims *t, char *why) {
    int64_t any2[2] = {-1, -1};
    (void)src_c;
    if (!ag_dims_is(&t[AG_T_WEIGHT], 2, 1 << 24, any2) || t[AG_T_WEIGHT].d[0] > VECTOR_MAX)
        return ag_op_fail(why, "needs an (M, K) weight, M at most %d", VECTOR_MAX);
    n->out_c = (int)t[AG_T_WEIGHT].d[0];
    n->in_c = (int)t[AG_T_WEIGHT].d[1];
    return bind_bias(t, n->out_c, why);
}

int ag_bind_bias_lrelu(ag_node *n, const int *src_c, const ag_dims *t, char *why) {
    (void)n;
    if (t[AG_T_WEIGHT].ndim)
        return ag_op_fail(why, "takes no weight");
    return bind_bias(t, src_c[0], why);
}

/* A square (OC, IC, K, K) weight (conv_t: (IC, OC, K, K)). */
static int bind_square(ag_node *n, const ag_dims *t, int in_first, int c, char *why) {
    const ag_dims *w = &t[AG_T_WEIGHT];
    int64_t any4[4] = {-1, -1, -1, -1};
    if (!ag_dims_is(w, 4, 4096, any4) || w->d[2] != w->d[3])
        return ag_op_fail(why, "needs a square (%s, K, K) weight", in_first ? "IC, OC" : "OC, IC");
    n->in_c = (int)w->d[in_first ? 0 : 1];
    n->out_c = (int)w->d[in_first ? 1 : 0];
    n->k = (int)w->d[2];
    if (n->in_c != c)
        return ag_op_fail(why, "has a weight of %d input channels for %d", n->in_c, c);
    return bind_bias(t, n->out_c, why);
}

int ag_bind_modconv(ag_node *n, const int *src_c, const ag_dims *t, char *why) {
    return bind_square(n, t, 0, src_c[0], why);
}

int ag_bind_conv_t(ag_node *n, const int *src_c, const ag_dims *t, char *why) {
    return bind_square(n, t, 1, src_c[0], why);
}

/* weight: the strength (1); noise: the constant map (1, 1, H, W), (1, H, W) or (H, W). */
int ag_bind_noise(ag_node *n, const int *src_c, const ag_dims *t, char *why) {
    (void)src_c;
    const ag_dims *w = &t[AG_T_WEIGHT], *a = &t[AG_T_AUX];
    int64_t count = 1;
    for (int i = 0; i < w->ndim; i++)
        count *= w->d[i];
    if (!w->ndim || count != 1)
        return ag_op_fail(why, "needs a weight of one value");
    if (a->ndim > 4)
        return ag_op_fail(why, "its noise is not one (H, W) map");
    if (a->ndim) {
        for (int i = 0; i + 2 < a->ndim; i++)
            if (a->d[i] != 1)
                return ag_op_fail(why, "its noise is not one (H, W) map");
        if (a->ndim < 2 || a->d[a->ndim - 2] < 1 || a->d[a->ndim - 2] > 8192 ||
            a->d[a->ndim - 1] < 1 || a->d[a->ndim - 1] > 8192)
            return ag_op_fail(why, "its noise is not an (H, W) map of at most 8192 a side");
        n->aux_h = (int)a->d[a->ndim - 2], n->aux_w = (int)a->d[a->ndim - 1];
    }
    if (t[AG_T_BIAS].ndim || t[AG_T_GAMMA].ndim || t[AG_T_BETA].ndim)
        return ag_op_fail(why, "takes no bias or per-channel tensor");
    return 0;
}

/* ---- checks ---------------------------------------------------------------------------- */

int ag_check_const(const ag_node *n, const int *src_c, char *why) {
    (void)src_c;
    return !n->weight ? ag_op_fail(why, "needs its map") : 0;
}

int ag_check_linear(const ag_node *n, const int *src_c, char *why) {
    (void)src_c;
    return !n->weight || n->out_c < 1 ? ag_op_fail(why, "needs a weight") : 0;
}

int ag_check_modconv(const ag_node *n, const int *src_c, char *why) {
    if (!n->weight || n->in_c != src_c[0] || n->k < 1 || n->k > 11 || n->out_c < 1 ||
        n->out_c > 4096)
        return ag_op_fail(why, "a %d -> %d kernel %d weight does not fit %d channels", n->in_c,
                          n->out_c, n->k, src_c[0]);
    if (src_c[1] != n->in_c)
        return ag_op_fail(why, "its style has %d values for %d input channels", src_c[1], n->in_c);
    for (int p = 0; p < 4; p++)
        if (n->pad[p] >= n->k + (n->k == 1))
            return ag_op_fail(why, "padding %d for a kernel of %d", n->pad[p], n->k);
    return 0;
}

int ag_check_conv_t(const ag_node *n, const int *src_c, char *why) {
    if (!n->weight || n->in_c != src_c[0] || n->k < 1 || n->k > 11 || n->out_c < 1 ||
        n->out_c > 4096)
        return ag_op_fail(why, "a %d -> %d kernel %d weight does not fit %d channels", n->in_c,
                          n->out_c, n->k, src_c[0]);
    for (int p = 0; p < 4; p++)
        if (n->pad[p] >= n->k)
            return ag_op_fail(why, "crops %d of a kernel of %d", n->pad[p], n->k);
    return 0;
}

int ag_check_upfirdn(const ag_node *n, const int *src_c, char *why) {
    (void)src_c;
    int taps = n->fir_taps ? n->fir_taps : 4;
    double sum = 0;
    for (int i = 0; i < n->fir_taps; i++)
        sum += (double)n->fir[i];
    if (n->fir_taps && !(fabs(sum) > 1e-12))
        return ag_op_fail(why, "its FIR sums to 0");
    for (int p = 0; p < 4; p++)
        if (n->pad[p] > taps * n->up)
            return ag_op_fail(why, "pads %d for %d taps", n->pad[p], taps);
    return 0;
}

int ag_check_concat(const ag_node *n, const int *src_c, char *why) {
    long sum = 0;
    for (int j = 0; j < AG_NODE_MAX_SRC && n->src[j] >= 0; j++)
        sum += src_c[j];
    return sum > VECTOR_MAX ? ag_op_fail(why, "%ld channels; at most %d", sum, VECTOR_MAX) : 0;
}

int ag_check_slice(const ag_node *n, const int *src_c, char *why) {
    int end = range_end(n, src_c[0]);
    if (n->c0 >= end || end > src_c[0])
        return ag_op_fail(why, "channels [%d, %d) of %d", n->c0, end, src_c[0]);
    return 0;
}

int ag_check_sft(const ag_node *n, const int *src_c, char *why) {
    int end = range_end(n, src_c[0]);
    if (n->c0 >= end || end > src_c[0] || src_c[1] != end - n->c0 || src_c[2] != end - n->c0)
        return ag_op_fail(why, "scales channels [%d, %d) of %d by %d and shifts by %d", n->c0, end,
                          src_c[0], src_c[1], src_c[2]);
    return 0;
}

int ag_check_noise(const ag_node *n, const int *src_c, char *why) {
    int map = n->src[1] >= 0;
    if (!n->weight || map == (n->aux != NULL))
        return ag_op_fail(why, "needs a weight and one noise: an input or a constant map");
    if (map && !n->concat && src_c[1] != 1 && src_c[1] != src_c[0])
        return ag_op_fail(why, "adds a noise of %d channels to %d", src_c[1], src_c[0]);
    return 0;
}

/* ---- channels and shapes --------------------------------------------------------------- */

int ag_channels_concat(const ag_node *n, const int *src_c) {
    int sum = 0;
    for (int j = 0; j < AG_NODE_MAX_SRC && n->src[j] >= 0; j++)
        sum += src_c[j];
    return sum;
}

int ag_channels_slice(const ag_node *n, const int *src_c) {
    return range_end(n, src_c[0]) - n->c0;
}

int ag_channels_noise(const ag_node *n, const int *src_c) {
    return src_c[0] + (n->concat ? (n->src[1] >= 0 ? src_c[1] : 1) : 0);
}

int ag_shape_const(const ag_node *n, const ag_shape *in, ag_shape *out, char *why) {
    (void)in, (void)why;
    out->h = n->aux_h, out->w = n->aux_w;
    return 0;
}

int ag_shape_linear(const ag_node *n, const ag_shape *in, ag_shape *out, char *why) {
    if ((long long)in[0].h * in[0].w * in[0].c != n->in_c)
        return ag_op_fail(why, "takes %d features, not a %dx%dx%d map", n->in_c, in[0].w, in[0].h,
                          in[0].c);
    out->h = out->w = 1;
    return 0;
}

/* (size - 1) * stride + k - crop, checked against the side bound. */
static int grow(int size, int stride, int k, int crop, int *out) {
    long long v = (long long)(size - 1) * stride + k - crop;
    *out = v > AG_MAP_MAX_SIDE ? -1 : (int)v;
    return *out;
}

int ag_shape_modconv(const ag_node *n, const ag_shape *in, ag_shape *out, char *why) {
    if (n->up == 2) {
        if (grow(in[0].h, 2, n->k, 0, &out->h) < 0 || grow(in[0].w, 2, n->k, 0, &out->w) < 0)
            return ag_op_fail(why, "upsamples a %dx%d map past %d a side", in[0].w, in[0].h,
                              AG_MAP_MAX_SIDE);
    } else {
        out->h = in[0].h + n->pad[0] + n->pad[1] - n->k + 1;
        out->w = in[0].w + n->pad[2] + n->pad[3] - n->k + 1;
    }
    if (in[1].h != 1 || in[1].w != 1)
        return ag_op_fail(why, "its style is a %dx%d map, not a vector", in[1].w, in[1].h);
    return 0;
}

int ag_shape_conv_t(const ag_node *n, const ag_shape *in, ag_shape *out, char *why) {
    if (grow(in[0].h, n->stride, n->k, n->pad[0] + n->pad[1], &out->h) < 0 ||
        grow(in[0].w, n->stride, n->k, n->pad[2] + n->pad[3], &out->w) < 0)
        return ag_op_fail(why, "grows a %dx%d map past %d a side", in[0].w, in[0].h,
                          AG_MAP_MAX_SIDE);
    return 0;
}

static int fir_taps(const ag_node *n) {
    return n->fir_taps ? n->fir_taps : 4;
}

int ag_shape_upfirdn(const ag_node *n, const ag_shape *in, ag_shape *out, char *why) {
    long long h = (long long)in[0].h * n->up + n->pad[0] + n->pad[1] - fir_taps(n);
    long long w = (long long)in[0].w * n->up + n->pad[2] + n->pad[3] - fir_taps(n);
    if (h / n->down >= AG_MAP_MAX_SIDE || w / n->down >= AG_MAP_MAX_SIDE)
        return ag_op_fail(why, "upsamples a %dx%d map past %d a side", in[0].w, in[0].h,
                          AG_MAP_MAX_SIDE);
    out->h = h < 0 ? 0 : (int)(h / n->down + 1);
    out->w = w < 0 ? 0 : (int)(w / n->down + 1);
    return 0;
}

/* concat, sft: every input of the first one's size. */
int ag_shape_same_size(const ag_node *n, const ag_shape *in, ag_shape *out, char *why) {
    (void)out;
    for (int j = 1; j < AG_NODE_MAX_SRC && n->src[j] >= 0; j++)
        if (in[j].h != in[0].h || in[j].w != in[0].w)
            return ag_op_fail(why, "input %d is %dx%d, input 0 %dx%d at this image size", j,
                              in[j].w, in[j].h, in[0].w, in[0].h);
    return 0;
}

int ag_shape_noise(const ag_node *n, const ag_shape *in, ag_shape *out, char *why) {
    (void)out;
    int h = n->src[1] >= 0 ? in[1].h : n->aux_h, w = n->src[1] >= 0 ? in[1].w : n->aux_w;
    if (h != in[0].h || w != in[0].w)
        return ag_op_fail(why, "a %dx%d noise for a %dx%d map: the model takes another size", w, h,
                          in[0].w, in[0].h);
    return 0;
}

/* ---- flops and scratch ----------------------------------------------------------------- */

double ag_flops_linear(const ag_node *n, const ag_shape *in, ag_shape out) {
    (void)in, (void)out;
    return 2.0 * n->in_c * n->out_c;
}

double ag_flops_modconv(const ag_node *n, const ag_shape *in, ag_shape out) {
    double px = n->up == 2 ? (double)in[0].h * in[0].w : (double)out.h * out.w;
    return 2.0 * px * n->in_c * n->out_c * n->k * n->k;
}

double ag_flops_conv_t(const ag_node *n, const ag_shape *in, ag_shape out) {
    (void)out;
    return 2.0 * in[0].h * in[0].w * n->in_c * n->out_c * n->k * n->k;
}

double ag_flops_upfirdn(const ag_node *n, const ag_shape *in, ag_shape out) {
    (void)in;
    int k = fir_taps(n);
    return 2.0 * out.h * out.w * out.c * k * k;
}

/* The fast path's input in PyTorch's flattening order, when it is a map. */
size_t ag_scratch_linear(const ag_node *n, const ag_shape *in, ag_shape out) {
    (void)n, (void)out;
    return in[0].h * in[0].w > 1 ? ag_shape_floats(in[0]) : 0;
}

size_t ag_scratch_upfirdn(const ag_node *n, const ag_shape *in, ag_shape out) {
    (void)in, (void)out;
    return (size_t)fir_taps(n) * fir_taps(n);
}

/* ---- reference kernels ----------------------------------------------------------------- */

void ag_run_const(const ag_node *n, const ag_op_io *io) {
    int C = io->o.c, HW = io->o.h * io->o.w;
    for (int p = 0; p < HW; p++)
        for (int c = 0; c < C; c++)
            io->out[(size_t)p * C + c] = n->weight[(size_t)c * HW + p];
}

void ag_run_linear(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0];
    int HW = in.h * in.w;
    if (io->fast) { /* a matrix-vector product on sgemm (GFPGAN's final linear: 134 MB) */
        const float *x = io->src[0];
        if (HW > 1) { /* feature c * HW + p, as PyTorch flattens NCHW */
            for (int p = 0; p < HW; p++)
                for (int c = 0; c < in.c; c++)
                    io->scratch[(size_t)c * HW + p] = x[(size_t)p * in.c + c];
            x = io->scratch;
        }
        ag_matmul(io->out, x, n->weight, 1, 1, in.c * HW, n->out_c, 1, io->threads);
        for (int m = 0; n->bias && m < n->out_c; m++)
            io->out[m] += n->bias[m];
        return;
    }
    for (int m = 0; m < n->out_c; m++) {
        const float *w = n->weight + (size_t)m * n->in_c;
        double acc = 0.0;
        for (int c = 0; c < in.c; c++) /* feature c * HW + p: PyTorch's NCHW flattening */
            for (int p = 0; p < HW; p++)
                acc += (double)w[(size_t)c * HW + p] * (double)io->src[0][(size_t)p * in.c + c];
        io->out[m] = (float)acc + (n->bias ? n->bias[m] : 0.0f);
    }
}

void ag_run_pixel_norm(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0];
    for (size_t p = 0; p < (size_t)in.h * in.w; p++) {
        const float *x = io->src[0] + p * in.c;
        double sq = 0.0;
        for (int c = 0; c < in.c; c++)
            sq += (double)x[c] * (double)x[c];
        double r = 1.0 / sqrt(sq / in.c + (double)n->eps);
        for (int c = 0; c < in.c; c++)
            io->out[p * in.c + c] = (float)((double)x[c] * r);
    }
}

void ag_run_bias_lrelu(const ag_node *n, const ag_op_io *io) {
    int C = io->in[0].c;
    if (io->fast) {
        ag_fused_bias_lrelu(io->out, io->src[0], n->bias, (size_t)io->in[0].h * io->in[0].w, C,
                            n->alpha, n->gain, io->threads);
        return;
    }
    for (size_t i = 0; i < ag_shape_floats(io->in[0]); i++) {
        float v = io->src[0][i] + (n->bias ? n->bias[i % (size_t)C] : 0.0f);
        io->out[i] = (v < 0.0f ? v * n->alpha : v) * n->gain;
    }
}

/* The 2-D kernel outer(f, f) / sum(f)² * gain, flipped (upfirdn2d convolves). */
static void fir_kernel(const ag_node *n, float *k2) {
    static const float blur[4] = {1, 3, 3, 1};
    int K = fir_taps(n);
    const float *f = n->fir_taps ? n->fir : blur;
    double sum = 0.0;
    for (int i = 0; i < K; i++)
        sum += (double)f[i];
    for (int y = 0; y < K; y++)
        for (int x = 0; x < K; x++)
            k2[(K - 1 - y) * K + (K - 1 - x)] =
                (float)((double)f[y] * (double)f[x] / (sum * sum) * (double)n->gain);
}

void ag_run_upfirdn(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0], o = io->o;
    int K = fir_taps(n), up = n->up, down = n->down, C = in.c;
    float *k2 = io->scratch;
    fir_kernel(n, k2);
    if (io->fast) {
        ag_fused_upfirdn(io->out, io->src[0], in.h, in.w, C, o.h, o.w, k2, K, up, down, n->pad,
                         io->threads);
        return;
    }
    for (int y = 0; y < o.h; y++)
        for (int x = 0; x < o.w; x++) {
            float *dst = io->out + ((size_t)y * o.w + x) * C;
            for (int c = 0; c < C; c++)
                dst[c] = 0.0f;
            for (int ky = 0; ky < K; ky++) {
                /* row u of the upsampled, padded map: input row u / up if on the grid */
                int u = y * down + ky - n->pad[0];
                if (u < 0 || u % up || u / up >= in.h)
                    continue;
                for (int kx = 0; kx < K; kx++) {
                    int v = x * down + kx - n->pad[2];
                    if (v < 0 || v % up || v / up >= in.w)
                        continue;
                    const float *src = io->src[0] + ((size_t)(u / up) * in.w + v / up) * C;
                    float wgt = k2[ky * K + kx];
                    for (int c = 0; c < C; c++)
                        dst[c] += wgt * src[c];
                }
            }
        }
}

/* Memory-bound: each thread copies every input's channels for its own rows, so the output
 * is written once, in order, on both cores' bandwidth (the oneDNN backend gathers a concat
 * read only by a conv into its bands instead: engine.c, absorbable_concat). */
void ag_run_concat(const ag_node *n, const ag_op_io *io) {
    int W = io->o.w, srcs = 0;
    while (srcs < AG_NODE_MAX_SRC && n->src[srcs] >= 0)
        srcs++;
#pragma omp parallel for num_threads(io->threads) schedule(static)
    for (int y = 0; y < io->o.h; y++) {
        int at = 0;
        for (int j = 0; j < srcs; j++) {
            int c = io->in[j].c;
            const float *src = io->src[j] + (size_t)y * W * c;
            float *dst = io->out + (size_t)y * W * io->o.c + at;
            for (int x = 0; x < W; x++)
                memcpy(dst + (size_t)x * io->o.c, src + (size_t)x * c, sizeof(float) * (size_t)c);
            at += c;
        }
    }
}

void ag_run_slice(const ag_node *n, const ag_op_io *io) {
    size_t N = (size_t)io->o.h * io->o.w;
    for (size_t p = 0; p < N; p++)
        memcpy(io->out + p * io->o.c, io->src[0] + p * io->in[0].c + n->c0,
               sizeof(float) * (size_t)io->o.c);
}

void ag_run_sft(const ag_node *n, const ag_op_io *io) {
    int C = io->in[0].c, c0 = n->c0, R = range_end(n, C) - c0;
    size_t N = (size_t)io->o.h * io->o.w;
#pragma omp parallel for num_threads(io->threads) schedule(static)
    for (size_t p = 0; p < N; p++) {
        float *v = io->out + p * C;
        memcpy(v, io->src[0] + p * C, sizeof(float) * (size_t)C);
        for (int c = 0; c < R; c++)
            v[c0 + c] = v[c0 + c] * io->src[1][p * R + c] + io->src[2][p * R + c];
    }
}

void ag_run_noise(const ag_node *n, const ag_op_io *io) {
    int C = io->in[0].c, CN = n->src[1] >= 0 ? io->in[1].c : 1;
    const float *noise = n->src[1] >= 0 ? io->src[1] : n->aux;
    float w = n->weight[0];
    size_t N = (size_t)io->o.h * io->o.w;
    if (io->fast) {
        const ag_node *a = io->act;
        ag_bias_act act = {a ? a->bias : NULL, a ? a->alpha : 0.0f, a ? a->gain : 1.0f};
        ag_fused_noise(io->out, io->src[0], C, noise, CN, w, n->concat, N, a ? &act : NULL,
                       io->threads);
        return;
    }
#pragma omp parallel for num_threads(io->threads) schedule(static)
    for (size_t p = 0; p < N; p++) {
        const float *x = io->src[0] + p * C, *z = noise + p * CN;
        float *dst = io->out + p * io->o.c;
        if (n->concat) {
            memcpy(dst, x, sizeof(float) * (size_t)C);
            for (int c = 0; c < CN; c++)
                dst[C + c] = w * z[c];
        } else {
            for (int c = 0; c < C; c++)
                dst[c] = x[c] + w * z[CN == 1 ? 0 : c];
        }
    }
}
