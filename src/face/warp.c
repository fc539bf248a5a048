/*
 * warp.c - the one resampler of the face pipeline: the detector's letterbox, the mesh's
 * rotated crop, the FFHQ crop (align.c). An affine map, a box shrink by an integer factor
 * when the map shrinks 2x or more (antialiasing: each output then averages every source
 * pixel it covers), and a Keys cubic widened by the factor left (1 to 2), so the filter's
 * footprint always spans the source area an output pixel covers. tools/face_reference.py
 * implements the same steps in numpy; test_face.c compares the two.
 */
#include "face_internal.h"

#include "../util/util_internal.h"

#include <math.h>
#include <string.h>

#define MAX_TAPS 9 /* 2 * ceil(2 r) + 1 with r < 2 */

ag_affine ag_affine_invert(const ag_affine *m) {
    double det = m->a * m->e - m->b * m->d;
    double ia = m->e / det, ib = -m->b / det, id = -m->d / det, ie = m->a / det;
    return (ag_affine){ia, ib, -(ia * m->c + ib * m->f), id, ie, -(id * m->c + ie * m->f)};
}

/* out (ceil(H/f), ceil(W/f), bands) <- the mean of each f x f block (edge blocks over the
 * pixels they have), rounded half up. */
static void box_shrink(uint8_t *out, const ag_image *src, int f, int ow, int oh) {
    int bands = src->bands;
    for (int oy = 0; oy < oh; oy++)
        for (int ox = 0; ox < ow; ox++) {
            uint64_t sum[4] = {0, 0, 0, 0}, n = 0; /* a block may be the whole image */
            int y1 = (oy + 1) * f < src->height ? (oy + 1) * f : src->height;
            int x1 = (ox + 1) * f < src->width ? (ox + 1) * f : src->width;
            for (int y = oy * f; y < y1; y++) {
                const uint8_t *row_x = src->pixels + ((size_t)y * src->width) * bands;
                for (int x = ox * f; x < x1; x++, n++)
                    for (int b = 0; b < bands; b++)
                        sum[b] += row_x[(size_t)x * bands + b];
            }
            uint8_t *o = out + ((size_t)oy * ow + ox) * bands;
            for (int b = 0; b < bands; b++)
                o[b] = (uint8_t)((2 * sum[b] + n) / (2 * n));
        }
}

static float cubic(float t) {
    const float a = -0.5f;
    t = fabsf(t);
    if (t < 1.0f)
        return ((a + 2.0f) * t - (a + 3.0f)) * t * t + 1.0f;
    if (t < 2.0f)
        return ((a * t - 5.0f * a) * t + 8.0f * a) * t - 4.0f * a;
    return 0.0f;
}

static int reflect(int i, int n) {
    if (n == 1)
        return 0;
    int p = 2 * (n - 1);
    i %= p;
    i += i < 0 ? p : 0;
    return i >= n ? p - i : i;
}

static int clamp_index(int i, int n) {
    return i < 0 ? 0 : i >= n ? n - 1 : i;
}

/* The taps of one axis at index-unit coordinate u: first index, weights, their sum. */
static float axis_taps(double u, double r, int n, int size, ag_warp_border border, int *index,
                       float *w) {
    int first = (int)floor(u) - n / 2 + 1;
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        w[i] = cubic((float)((u - (first + i)) / r));
        sum += w[i];
        index[i] =
            border == AG_WARP_REFLECT ? reflect(first + i, size) : clamp_index(first + i, size);
    }
    return sum;
}

int ag_face_warp(const ag_image *src, const ag_affine *m, int ow, int oh, ag_warp_border border,
                 uint8_t *out_u8, float *out_f32, ag_error *err) {
    if (!src || !src->pixels || src->width < 1 || src->height < 1 || src->bands < 1 ||
        src->bands > 4 || ow < 1 || oh < 1)
        return ag_error_set(err, AG_E_ARG, "face warp: bad image or size");
    double s = sqrt(fabs(m->a * m->e - m->b * m->d));
    if (!(s < 65536.0)) /* also NaN: no image is that much larger than a crop */
        return ag_error_set(err, AG_E_ARG, "face warp: the map is degenerate");
    int f = s >= 2.0 ? (int)floor(s) : 1;
    ag_affine a = *m;
    const uint8_t *pixels = src->pixels;
    int sw = src->width, sh = src->height, bands = src->bands;
    uint8_t *shrunk = NULL;
    if (f > 1) {
        sw = (src->width + f - 1) / f, sh = (src->height + f - 1) / f;
        shrunk = ag_malloc((size_t)sw * sh * bands);
        if (!shrunk)
            return ag_error_set(err, AG_E_NOMEM, "face warp: out of memory");
        box_shrink(shrunk, src, f, sw, sh);
        pixels = shrunk;
        a = (ag_affine){m->a / f, m->b / f, m->c / f, m->d / f, m->e / f, m->f / f};
    }
    double r = s / f > 1.0 ? s / f : 1.0;
    int n = 2 * (int)ceil(2.0 * r) + 1;
    if (n > MAX_TAPS)
        n = MAX_TAPS;
    double edge_w = (double)src->width / f, edge_h = (double)src->height / f;
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++) {
            double X = x + 0.5, Y = y + 0.5;
            double u = a.a * X + a.b * Y + a.c - 0.5, v = a.d * X + a.e * Y + a.f - 0.5;
            float acc[4] = {0, 0, 0, 0};
            size_t o = ((size_t)y * ow + x) * bands;
            /* Far outside (or not a number, from a degenerate map): black, before any
             * coordinate becomes an int. */
            int wild = !(fabs(u) < 1e8 && fabs(v) < 1e8);
            if (wild || (border == AG_WARP_LETTERBOX && !(u + 0.5 >= 0.0 && u + 0.5 < edge_w &&
                                                          v + 0.5 >= 0.0 && v + 0.5 < edge_h))) {
                for (int b = 0; b < bands; b++)
                    if (out_u8)
                        out_u8[o + b] = 0;
                    else
                        out_f32[o + b] = 0.0f;
                continue;
            }
            int ix[MAX_TAPS], iy[MAX_TAPS];
            float wx[MAX_TAPS], wy[MAX_TAPS];
            float norm =
                axis_taps(u, r, n, sw, border, ix, wx) * axis_taps(v, r, n, sh, border, iy, wy);
            for (int j = 0; j < n; j++) {
                if (wy[j] == 0.0f)
                    continue;
                const uint8_t *row_x = pixels + (size_t)iy[j] * sw * bands;
                float rowacc[4] = {0, 0, 0, 0};
                for (int i = 0; i < n; i++) {
                    const uint8_t *p = row_x + (size_t)ix[i] * bands;
                    for (int b = 0; b < bands; b++)
                        rowacc[b] += wx[i] * p[b];
                }
                for (int b = 0; b < bands; b++)
                    acc[b] += wy[j] * rowacc[b];
            }
            for (int b = 0; b < bands; b++) {
                float val = acc[b] / norm;
                if (out_u8)
                    out_u8[o + b] = (uint8_t)(val <= 0.0f ? 0 : val >= 255.0f ? 255 : val + 0.5f);
                else
                    out_f32[o + b] = val;
            }
        }
    ag_free(shrunk);
    return AG_OK;
}
