/*
 * ops_basic.c - the convolutional generators' ops (AnimeGANv2/v3, the face networks):
 * binding, checks, shapes, flops and reference kernels (the op table, ops.h).
 *
 * The reference kernels are plain and obvious: the oracle the oneDNN backend's fusion is
 * tested against, and the runner of any op the engine does not fuse.
 */
#include "ops.h"

#include "../kernels/kernels.h"
#include "../util/util_internal.h"

#include <math.h>
#include <string.h>

/* ---- binding: fields the weights give -------------------------------------------------- */

int ag_bind_conv(ag_node *n, const int *src_c, const ag_dims *t, char *why) {
    const ag_dims *w = &t[AG_T_WEIGHT];
    int64_t any4[4] = {-1, -1, -1, -1};
    int c = src_c[0];
    if (!ag_dims_is(w, 4, 4096, any4) || w->d[2] != w->d[3])
        return ag_op_fail(why, "needs a square (OC, IC, K, K) weight");
    n->out_c = (int)w->d[0];
    n->k = (int)w->d[2];
    n->in_c = c;
    if (n->groups == 0)
        n->groups = c;
    if (n->groups < 1 || c % n->groups || w->d[1] != c / n->groups)
        return ag_op_fail(why, "has a weight of %lld input channels for %d inputs in %d groups",
                          (long long)w->d[1], c, n->groups);
    int64_t oc[1] = {n->out_c};
    if (t[AG_T_BIAS].ndim && !ag_dims_is(&t[AG_T_BIAS], 1, 4096, oc))
        return ag_op_fail(why, "a bias is not (%d)", n->out_c);
    return 0;
}

int ag_bind_lade(ag_node *n, const int *src_c, const ag_dims *t, char *why) {
    int64_t cc[2] = {src_c[0], src_c[0]};
    n->in_c = src_c[0];
    if (t[AG_T_WEIGHT].ndim && !ag_dims_is(&t[AG_T_WEIGHT], 2, 4096, cc))
        return ag_op_fail(why, "its weight is not (%d, %d)", src_c[0], src_c[0]);
    return 0;
}

int ag_bind_matmul(ag_node *n, const int *src_c, const ag_dims *t, char *why) {
    int64_t any2[2] = {-1, -1};
    (void)src_c;
    if (!ag_dims_is(&t[AG_T_WEIGHT], 2, 4096, any2))
        return ag_op_fail(why, "needs a 2-D weight");
    int a = (int)t[AG_T_WEIGHT].d[0], b = (int)t[AG_T_WEIGHT].d[1];
    n->in_c = n->transpose ? b : a;
    n->out_c = n->transpose ? a : b;
    return 0;
}

/* ---- checks ---------------------------------------------------------------------------- */

/* RealPLKSR's partial large kernels are 17x17 (up to 31 in its configs); an x1 RRDBNet's
 * pixel-unshuffle-by-4 first conv becomes a 12x12 stride-4 one (src/model/realesrgan.c). */
#define AG_CONV_MAX_K 31

int ag_check_conv(const ag_node *n, const int *src_c, char *why) {
    int c = src_c[0];
    if (!n->weight || n->k < 1 || n->k > AG_CONV_MAX_K || n->stride < 1 || n->stride > 4 ||
        n->groups < 1 || n->in_c != c || c % n->groups || n->out_c % n->groups || n->out_c < 1 ||
        n->out_c > 4096)
        return ag_op_fail(why,
                          "%d -> %d channels, kernel %d, stride %d, groups %d do not fit its "
                          "input of %d channels",
                          n->in_c, n->out_c, n->k, n->stride, n->groups, c);
    for (int p = 0; p < 4; p++)
        if (n->pad[p] < 0 || n->pad[p] >= n->k + (n->k == 1))
            return ag_op_fail(why, "padding %d for a kernel of %d", n->pad[p], n->k);
    return 0;
}

int ag_check_norm(const ag_node *n, const int *src_c, char *why) {
    if (src_c[0] > AG_MAP_MAX_CHANNELS)
        return ag_op_fail(why, "%d channels; at most %d", src_c[0], AG_MAP_MAX_CHANNELS);
    if ((n->op == AG_OP_LAYER_NORM && (!n->gamma || !n->beta)) || !(n->eps >= 0.0f) ||
        n->eps >= 1.0f)
        return ag_op_fail(why, "needs gamma, beta and an eps in [0, 1)");
    return 0;
}

int ag_check_lade(const ag_node *n, const int *src_c, char *why) {
    int c = src_c[0];
    if (c > AG_MAP_MAX_CHANNELS)
        return ag_op_fail(why, "%d channels; at most %d", c, AG_MAP_MAX_CHANNELS);
    if (!n->weight || n->in_c != c || !(n->eps >= 0.0f) || n->eps >= 1.0f)
        return ag_op_fail(why, "needs a (%d, %d) weight and an eps in [0, 1)", c, c);
    return 0;
}

int ag_check_affine(const ag_node *n, const int *src_c, char *why) {
    (void)src_c;
    return !n->gamma && !n->beta ? ag_op_fail(why, "needs a scale or a shift") : 0;
}

int ag_check_prelu(const ag_node *n, const int *src_c, char *why) {
    (void)src_c;
    return !n->gamma ? ag_op_fail(why, "needs a slope") : 0;
}

int ag_check_add(const ag_node *n, const int *src_c, char *why) {
    (void)n;
    return src_c[1] != src_c[0] ? ag_op_fail(why, "adds %d channels to %d", src_c[1], src_c[0]) : 0;
}

int ag_check_matmul(const ag_node *n, const int *src_c, char *why) {
    if (!n->weight || n->in_c != src_c[0] || n->out_c < 1 || n->out_c > 4096)
        return ag_op_fail(why, "a (%d, %d) matrix does not fit %d channels", n->in_c, n->out_c,
                          src_c[0]);
    return 0;
}

int ag_check_pad_channels(const ag_node *n, const int *src_c, char *why) {
    if (n->out_c < src_c[0] || n->out_c > 4096)
        return ag_op_fail(why, "pads %d channels to %d", src_c[0], n->out_c);
    return 0;
}

/* ---- channels and shapes --------------------------------------------------------------- */

int ag_channels_bound(const ag_node *n, const int *src_c) {
    (void)src_c;
    return n->out_c;
}

int ag_channels_input(const ag_node *n, const int *src_c) {
    (void)n, (void)src_c;
    return 3;
}

static int shrink(int size, int pad, int k, int stride) {
    return size + pad < k ? 0 : (size + pad - k) / stride + 1;
}

/* conv, max_pool: a K window at a stride over the padded map. */
int ag_shape_window(const ag_node *n, const ag_shape *in, ag_shape *out, char *why) {
    (void)why;
    out->h = shrink(in[0].h, n->pad[0] + n->pad[1], n->k, n->stride);
    out->w = shrink(in[0].w, n->pad[2] + n->pad[3], n->k, n->stride);
    /* Reflection cannot mirror more than the map minus one pixel (a 1-pixel map repeats
     * its pixel). */
    if (n->op == AG_OP_CONV && n->pad_mode == AG_PAD_REFLECT &&
        ((in[0].h > 1 && (n->pad[0] >= in[0].h || n->pad[1] >= in[0].h)) ||
         (in[0].w > 1 && (n->pad[2] >= in[0].w || n->pad[3] >= in[0].w))))
        out->h = 0;
    return 0;
}

int ag_shape_resize(const ag_node *n, const ag_shape *in, ag_shape *out, char *why) {
    (void)n, (void)why;
    out->h = in[1].h, out->w = in[1].w;
    return 0;
}

int ag_shape_resize2x(const ag_node *n, const ag_shape *in, ag_shape *out, char *why) {
    (void)n;
    if (in[0].h > AG_MAP_MAX_SIDE / 2 || in[0].w > AG_MAP_MAX_SIDE / 2)
        return ag_op_fail(why, "doubles a %dx%d map past %d pixels a side", in[0].w, in[0].h,
                          AG_MAP_MAX_SIDE);
    out->h = 2 * in[0].h, out->w = 2 * in[0].w;
    return 0;
}

int ag_shape_add(const ag_node *n, const ag_shape *in, ag_shape *out, char *why) {
    (void)n, (void)out;
    if (in[1].h != in[0].h || in[1].w != in[0].w)
        return ag_op_fail(why, "adds a %dx%d map to a %dx%d one at this image size", in[1].w,
                          in[1].h, in[0].w, in[0].h);
    return 0;
}

/* ---- flops and scratch ----------------------------------------------------------------- */

double ag_flops_conv(const ag_node *n, const ag_shape *in, ag_shape out) {
    (void)in;
    return 2.0 * out.h * out.w * n->out_c * (n->in_c / n->groups) * n->k * n->k;
}

double ag_flops_matmul(const ag_node *n, const ag_shape *in, ag_shape out) {
    (void)in;
    return 2.0 * out.h * out.w * n->in_c * n->out_c;
}

double ag_flops_lade(const ag_node *n, const ag_shape *in, ag_shape out) {
    (void)in;
    return 2.0 * out.h * out.w * n->in_c * n->in_c;
}

size_t ag_scratch_padded(const ag_node *n, const ag_shape *in, ag_shape out) {
    (void)out;
    return (size_t)(in[0].h + n->pad[0] + n->pad[1]) * (in[0].w + n->pad[2] + n->pad[3]) * in[0].c;
}

size_t ag_scratch_input_map(const ag_node *n, const ag_shape *in, ag_shape out) {
    (void)n, (void)out;
    return ag_shape_floats(in[0]);
}

/* ---- reference kernels ----------------------------------------------------------------- */

/* out (HP, WP, C) <- in (H, W, C) padded by reflection or zeros (max pool: -inf). */
static void pad_map(float *out, const float *in, ag_shape s, const int *pad, ag_pad_mode mode,
                    float fill) {
    if (mode == AG_PAD_REFLECT) {
        ag_pad p = {pad[0], pad[1], pad[2], pad[3]};
        ag_ref_reflect_pad(out, in, s.h, s.w, s.c, p);
        return;
    }
    int HP = s.h + pad[0] + pad[1], WP = s.w + pad[2] + pad[3];
    for (int y = 0; y < HP; y++)
        for (int x = 0; x < WP; x++) {
            float *o = out + ((size_t)y * WP + x) * s.c;
            int sy = y - pad[0], sx = x - pad[2];
            if (sy < 0 || sy >= s.h || sx < 0 || sx >= s.w)
                for (int c = 0; c < s.c; c++)
                    o[c] = fill;
            else
                memcpy(o, in + ((size_t)sy * s.w + sx) * s.c, sizeof(float) * (size_t)s.c);
        }
}

void ag_run_conv(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0];
    pad_map(io->scratch, io->src[0], in, n->pad, n->pad_mode, 0.0f);
    ag_ref_conv2d(io->out, io->scratch, n->weight, n->bias, in.h + n->pad[0] + n->pad[1],
                  in.w + n->pad[2] + n->pad[3], in.c, io->o.c, n->k, n->stride, n->groups);
}

void ag_run_max_pool(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0], o = io->o;
    const float *padded = io->scratch;
    pad_map(io->scratch, io->src[0], in, n->pad, AG_PAD_ZERO, -INFINITY);
    int WP = in.w + n->pad[2] + n->pad[3];
    for (int y = 0; y < o.h; y++)
        for (int x = 0; x < o.w; x++)
            for (int c = 0; c < o.c; c++) {
                float m = -INFINITY;
                for (int ky = 0; ky < n->k; ky++)
                    for (int kx = 0; kx < n->k; kx++) {
                        float v =
                            padded[((size_t)(y * n->stride + ky) * WP + x * n->stride + kx) * in.c +
                                   c];
                        m = v > m ? v : m;
                    }
                io->out[((size_t)y * o.w + x) * o.c + c] = m;
            }
}

void ag_run_layer_norm(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0];
    memcpy(io->out, io->src[0], sizeof(float) * ag_shape_floats(in));
    ag_ref_layer_norm(io->out, n->gamma, n->beta, in.h, in.w, in.c, n->eps);
}

/* Instance norm (and LADE's rescaling): per channel, from double moments. */
static void normalize_channels(float *out, const float *in, size_t N, int C, const double *mean,
                               const double *var, float eps, const double *mean_y,
                               const double *var_y, const float *gamma, const float *beta) {
    for (int c = 0; c < C; c++) {
        double scale = 1.0 / sqrt(var[c] + (double)eps), shift = 0.0;
        if (mean_y)
            scale *= sqrt(var_y[c] + (double)eps), shift = mean_y[c];
        if (gamma)
            scale *= (double)gamma[c], shift *= (double)gamma[c];
        if (beta)
            shift += (double)beta[c];
        for (size_t p = 0; p < N; p++)
            out[p * C + c] = (float)(((double)in[p * C + c] - mean[c]) * scale + shift);
    }
}

void ag_run_instance_norm(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0];
    size_t N = (size_t)in.h * in.w;
    double mean[AG_MAP_MAX_CHANNELS], var[AG_MAP_MAX_CHANNELS];
    ag_channel_moments(mean, var, io->src[0], N, in.c, 1);
    normalize_channels(io->out, io->src[0], N, in.c, mean, var, n->eps, NULL, NULL, n->gamma,
                       n->beta);
}

void ag_run_lade(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0];
    size_t N = (size_t)in.h * in.w;
    double mean[AG_MAP_MAX_CHANNELS], var[AG_MAP_MAX_CHANNELS];
    double mean_y[AG_MAP_MAX_CHANNELS], var_y[AG_MAP_MAX_CHANNELS];
    /* y = W1 x in full (the definition), then both sets of moments. */
    ag_matmul(io->scratch, io->src[0], n->weight, 1, N, in.c, in.c, 0, io->threads);
    ag_channel_moments(mean, var, io->src[0], N, in.c, 1);
    ag_channel_moments(mean_y, var_y, io->scratch, N, in.c, 1);
    normalize_channels(io->out, io->src[0], N, in.c, mean, var, n->eps, mean_y, var_y, NULL, NULL);
}

/* Per-channel x * scale + shift (NULL: 1 and 0). */
void ag_run_affine(const ag_node *n, const ag_op_io *io) {
    size_t N = (size_t)io->in[0].h * io->in[0].w;
    int C = io->in[0].c;
    const float *in = io->src[0];
    for (size_t p = 0; p < N; p++)
        for (int c = 0; c < C; c++)
            io->out[p * C + c] =
                in[p * C + c] * (n->gamma ? n->gamma[c] : 1.0f) + (n->beta ? n->beta[c] : 0.0f);
}

void ag_run_prelu(const ag_node *n, const ag_op_io *io) {
    const float *in = io->src[0];
    for (size_t i = 0; i < ag_shape_floats(io->in[0]); i++)
        io->out[i] = in[i] < 0.0f ? in[i] * n->gamma[i % (size_t)io->in[0].c] : in[i];
}

void ag_run_activation(const ag_node *n, const ag_op_io *io) {
    const float *in = io->src[0];
    for (size_t i = 0; i < ag_shape_floats(io->in[0]); i++) {
        float v = in[i];
        switch (n->op) {
        case AG_OP_LRELU: v = v < 0.0f ? v * n->alpha : v; break;
        case AG_OP_RELU: v = v < 0.0f ? 0.0f : v; break;
        case AG_OP_RELU6: v = v < 0.0f ? 0.0f : v > 6.0f ? 6.0f : v; break;
        case AG_OP_TANH: v = tanhf(v); break;
        case AG_OP_SIGMOID: v = 1.0f / (1.0f + expf(-v)); break;
        case AG_OP_GELU: v = 0.5f * v * (1.0f + erff(v * (float)M_SQRT1_2)); break;
        default: break;
        }
        io->out[i] = v;
    }
}

void ag_run_add(const ag_node *n, const ag_op_io *io) {
    (void)n;
    for (size_t i = 0; i < ag_shape_floats(io->in[0]); i++)
        io->out[i] = io->src[0][i] + io->src[1][i];
}

void ag_run_resize(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0];
    ag_ref_resize_bilinear(io->out, io->src[0], in.h, in.w, io->o.h, io->o.w, in.c,
                           io->resize != AG_RESIZE_DEFAULT ? io->resize : n->mode);
}

void ag_run_matmul(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0];
    ag_matmul(io->out, io->src[0], n->weight, n->transpose, (size_t)in.h * in.w, in.c, io->o.c,
              io->fast, io->threads);
}

void ag_run_softmax(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0];
    memcpy(io->out, io->src[0], sizeof(float) * ag_shape_floats(in));
    ag_softmax(io->out, (size_t)in.h * in.w, in.c, n->axis == AG_AXIS_SPATIAL, io->threads);
}

void ag_run_sum_normalize(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0];
    memcpy(io->out, io->src[0], sizeof(float) * ag_shape_floats(in));
    ag_sum_normalize(io->out, (size_t)in.h * in.w, in.c, n->eps, io->threads);
}

void ag_run_pad_channels(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0], o = io->o;
    (void)n;
    for (size_t p = 0; p < (size_t)in.h * in.w; p++) {
        memcpy(io->out + p * o.c, io->src[0] + p * in.c, sizeof(float) * (size_t)in.c);
        memset(io->out + p * o.c + in.c, 0, sizeof(float) * (size_t)(o.c - in.c));
    }
}
