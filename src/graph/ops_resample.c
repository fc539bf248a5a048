/*
 * ops_resample.c - resampling by integer factors: bilinear by up / down (PyTorch's
 * F.interpolate(scale_factor, mode="bilinear", align_corners=False)), nearest upsampling,
 * pixel shuffle and unshuffle (ops.h, docs/graph.md).
 */
#include "ops.h"

#include <string.h>

int ag_check_resample(const ag_node *n, const int *src_c, char *why) {
    (void)src_c;
    if (n->up != 1 && n->down != 1)
        return ag_op_fail(why, "resamples by %d / %d: one of them must be 1", n->up, n->down);
    return 0;
}

int ag_check_pixel_shuffle(const ag_node *n, const int *src_c, char *why) {
    if (src_c[0] % (n->up * n->up))
        return ag_op_fail(why, "%d channels are not a multiple of %d", src_c[0], n->up * n->up);
    return 0;
}

int ag_channels_pixel_shuffle(const ag_node *n, const int *src_c) {
    return src_c[0] / (n->up * n->up);
}

int ag_channels_pixel_unshuffle(const ag_node *n, const int *src_c) {
    return src_c[0] * n->down * n->down;
}

static int scaled(int size, int up, int down, int *out) {
    long long v = (long long)size * up / down;
    *out = v > AG_MAP_MAX_SIDE ? -1 : (int)v;
    return *out;
}

int ag_shape_resample(const ag_node *n, const ag_shape *in, ag_shape *out, char *why) {
    if (scaled(in[0].h, n->up, n->down, &out->h) < 0 ||
        scaled(in[0].w, n->up, n->down, &out->w) < 0)
        return ag_op_fail(why, "resamples a %dx%d map past %d a side", in[0].w, in[0].h,
                          AG_MAP_MAX_SIDE);
    return 0;
}

int ag_shape_nearest(const ag_node *n, const ag_shape *in, ag_shape *out, char *why) {
    if (scaled(in[0].h, n->up, 1, &out->h) < 0 || scaled(in[0].w, n->up, 1, &out->w) < 0)
        return ag_op_fail(why, "upsamples a %dx%d map past %d a side", in[0].w, in[0].h,
                          AG_MAP_MAX_SIDE);
    return 0;
}

int ag_shape_pixel_shuffle(const ag_node *n, const ag_shape *in, ag_shape *out, char *why) {
    return ag_shape_nearest(n, in, out, why);
}

int ag_shape_pixel_unshuffle(const ag_node *n, const ag_shape *in, ag_shape *out, char *why) {
    if (in[0].h % n->down || in[0].w % n->down)
        return ag_op_fail(why, "a %dx%d map is not a multiple of %d", in[0].w, in[0].h, n->down);
    out->h = in[0].h / n->down, out->w = in[0].w / n->down;
    return 0;
}

/* PyTorch's source index for align_corners False with a given scale: (dst + 0.5) * scale
 * - 0.5, clamped at 0, in float as ATen computes it; i1 stays inside the map. */
static void tap(int dst, float scale, int in_size, int *i0, int *i1, float *frac) {
    float src = ((float)dst + 0.5f) * scale - 0.5f;
    src = src < 0.0f ? 0.0f : src;
    *i0 = (int)src;
    *i0 = *i0 > in_size - 1 ? in_size - 1 : *i0;
    *i1 = *i0 + (*i0 < in_size - 1);
    *frac = src - (float)*i0;
}

void ag_run_resample(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0], o = io->o;
    float scale = (float)n->down / (float)n->up;
    int C = in.c;
    /* Rows are independent: the same bytes on any number of threads. */
#pragma omp parallel for num_threads(io->threads) schedule(static)
    for (int y = 0; y < o.h; y++) {
        int y0, y1, x0, x1;
        float fy, fx;
        tap(y, scale, in.h, &y0, &y1, &fy);
        for (int x = 0; x < o.w; x++) {
            tap(x, scale, in.w, &x0, &x1, &fx);
            const float *a = io->src[0] + ((size_t)y0 * in.w + x0) * C;
            const float *b = io->src[0] + ((size_t)y0 * in.w + x1) * C;
            const float *c = io->src[0] + ((size_t)y1 * in.w + x0) * C;
            const float *d = io->src[0] + ((size_t)y1 * in.w + x1) * C;
            float *dst = io->out + ((size_t)y * o.w + x) * C;
            for (int k = 0; k < C; k++)
                dst[k] = (1.0f - fy) * ((1.0f - fx) * a[k] + fx * b[k]) +
                         fy * ((1.0f - fx) * c[k] + fx * d[k]);
        }
    }
}

void ag_run_nearest(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0], o = io->o;
    for (int y = 0; y < o.h; y++)
        for (int x = 0; x < o.w; x++)
            memcpy(io->out + ((size_t)y * o.w + x) * o.c,
                   io->src[0] + ((size_t)(y / n->up) * in.w + x / n->up) * in.c,
                   sizeof(float) * (size_t)in.c);
}

/* out (H r, W r, C) from in (H, W, C r²): PyTorch's channel c r² + i r + j is the pixel
 * (i, j) of channel c's r x r block. A copy, row by row: the same bytes on any number of
 * threads (a 1024 px x4 output was 3% of SPAN's fp32 run on one thread). */
void ag_run_pixel_shuffle(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0], o = io->o;
    int r = n->up;
#pragma omp parallel for num_threads(io->threads) schedule(static)
    for (int y = 0; y < o.h; y++) {
        const float *row = io->src[0] + (size_t)(y / r) * in.w * in.c + (size_t)(y % r) * r;
        float *dst = io->out + (size_t)y * o.w * o.c;
        for (int x = 0; x < o.w; x++, dst += o.c) {
            const float *px = row + (size_t)(x / r) * in.c + x % r;
            for (int c = 0; c < o.c; c++)
                dst[c] = px[(size_t)c * r * r];
        }
    }
}

void ag_run_pixel_unshuffle(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0], o = io->o;
    int r = n->down;
    for (int y = 0; y < in.h; y++)
        for (int x = 0; x < in.w; x++)
            for (int c = 0; c < in.c; c++)
                io->out[((size_t)(y / r) * o.w + x / r) * o.c + c * r * r + (y % r) * r + x % r] =
                    io->src[0][((size_t)y * in.w + x) * in.c + c];
}
