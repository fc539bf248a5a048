/*
 * warp.c - the one resampler of the face pipeline: the detector's letterbox and tiles, the
 * mesh's rotated crop, the FFHQ crop (align.c), the paste-back (paste.c). An affine map, a
 * box shrink by an integer factor when the map shrinks 2x or more (antialiasing: each output
 * then averages every source pixel it covers), and a Keys cubic (or, for the mesh's crop, a
 * tent: bilinear) widened by the factor left (1 to 2), so the filter's footprint always spans
 * the source area an output pixel covers.
 * tools/face_reference.py implements the same steps in numpy; test_face.c compares the two.
 *
 * Only the window of the source the output reads is shrunk or read (a face's ROI in a large
 * photo costs its own area, not the photo's), and an axis-aligned map (the letterbox, the
 * tiles) is resampled separably: a vertical pass into one float row, then a horizontal one.
 * Both give what the general per-pixel filter would (the cubic is a product of two 1-D
 * weights), up to float rounding.
 */
#include "face_internal.h"

#include "../util/util_internal.h"

#include <math.h>
#include <string.h>

#define MAX_TAPS 8 /* 2 * ceil(2 r) with r < 2 */

ag_affine ag_affine_invert(const ag_affine *m) {
    double det = m->a * m->e - m->b * m->d;
    double ia = m->e / det, ib = -m->b / det, id = -m->d / det, ie = m->a / det;
    return (ag_affine){ia, ib, -(ia * m->c + ib * m->f), id, ie, -(id * m->c + ie * m->f)};
}

/* The pixels of (shrunk) indices [x0, x0 + w) x [y0, y0 + h) of the resampled source. */
typedef struct window {
    const uint8_t *pixels; /* (h, w, bands), rows `stride` bytes apart */
    size_t stride;
    int x0, y0, w, h;
} window;

/* out (bh, bw, bands) <- blocks [bx0, bx0 + bw) x [by0, by0 + bh) of the f x f block means
 * of src (edge blocks over the pixels they have), rounded half up. Per block row, the f
 * source rows are summed into `cols` (one uint32 per source byte of the window: f <= 65535
 * rows of 255 fit), then each block's f columns into a uint64 (f x f x 255 may not fit 32
 * bits). cols: bw * f * bands. */
static void box_shrink(uint8_t *out, const ag_image *src, int f, int bx0, int by0, int bw, int bh,
                       uint32_t *cols) {
    int bands = src->bands;
    int x_first = bx0 * f, x_end = (bx0 + bw) * f < src->width ? (bx0 + bw) * f : src->width;
    size_t row_len = (size_t)(x_end - x_first) * bands;
    for (int oy = 0; oy < bh; oy++) {
        int y0 = (by0 + oy) * f, y1 = y0 + f < src->height ? y0 + f : src->height;
        memset(cols, 0, sizeof *cols * row_len);
        for (int y = y0; y < y1; y++) {
            const uint8_t *row_x = src->pixels + ((size_t)y * src->width + x_first) * bands;
#pragma omp simd /* -O2 leaves it scalar: char may alias cols */
            for (size_t c = 0; c < row_len; c++)
                cols[c] += row_x[c];
        }
        for (int ox = 0; ox < bw; ox++) {
            int x0 = (bx0 + ox) * f, x1 = x0 + f < src->width ? x0 + f : src->width;
            uint64_t sum[4] = {0, 0, 0, 0};
            for (const uint32_t *p = cols + (size_t)(x0 - x_first) * bands,
                                *end = cols + (size_t)(x1 - x_first) * bands;
                 p < end; p += bands)
                for (int b = 0; b < bands; b++)
                    sum[b] += p[b];
            uint64_t n = (uint64_t)(x1 - x0) * (uint64_t)(y1 - y0);
            uint8_t *o = out + ((size_t)oy * bw + ox) * bands;
            for (int b = 0; b < bands; b++)
                o[b] = (uint8_t)((2 * sum[b] + n) / (2 * n));
        }
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

static float tent(float t) {
    t = fabsf(t);
    return t < 1.0f ? 1.0f - t : 0.0f;
}

static int clamp_index(int i, int n) {
    return i < 0 ? 0 : i >= n ? n - 1 : i;
}

/* The taps of one axis at index-unit coordinate u: indices relative to `origin`, weights,
 * their sum. The n = 2 ceil(support r) taps from floor(u) - n/2 + 1 cover every
 * |u - k| < support r (one more on the right would always weigh 0). */
static inline float axis_taps(double u, double inv_r, int n, int linear, int size, int origin,
                              ag_warp_border border, int *index, float *w) {
    int first = (int)floor(u) - n / 2 + 1;
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        float t = (float)((u - (first + i)) * inv_r);
        w[i] = linear ? tent(t) : cubic(t);
        sum += w[i];
        int k = first + i;
        if (k < 0 || k >= size)
            k = border == AG_WARP_REFLECT ? ag_reflect_index(k, size) : clamp_index(k, size);
        index[i] = k - origin;
    }
    return sum;
}

/* The index range [*first, *last] of one axis that taps at coordinates [lo, hi] read, after
 * the border maps them into [0, size). */
static void axis_range(double lo, double hi, int n, int size, ag_warp_border border, int *first,
                       int *last) {
    *first = 0, *last = size - 1;
    if (!(lo > -1e8 && lo < 1e8 && hi > -1e8 && hi < 1e8))
        return; /* wild or non-finite coordinates: the whole axis */
    long a = (long)floor(lo) - n / 2, b = (long)floor(hi) + n / 2 + 1, top = size - 1;
    if (border == AG_WARP_LETTERBOX || size == 1) {
        *first = (int)(a < 0 ? 0 : a > top ? top : a);
        *last = (int)(b < 0 ? 0 : b > top ? top : b);
    } else if (a >= -top && b <= 2 * top) { /* within one reflection of each edge */
        long f = a < 0 ? 0 : a, l = b > top ? top : b;
        if (a < 0)
            l = l > -a ? l : -a;
        if (b > top)
            f = f < 2 * top - b ? f : 2 * top - b;
        *first = (int)(f > top ? top : f), *last = (int)(l < 0 ? 0 : l);
    }
}

static void store(uint8_t *out_u8, float *out_f32, size_t o, const float *acc, float norm,
                  int bands) {
    for (int b = 0; b < bands; b++) {
        float val = acc[b] / norm;
        if (out_u8)
            out_u8[o + b] = (uint8_t)(val <= 0.0f ? 0 : val >= 255.0f ? 255 : val + 0.5f);
        else
            out_f32[o + b] = val;
    }
}

static void store_black(uint8_t *out_u8, float *out_f32, size_t o, size_t count) {
    if (out_u8)
        memset(out_u8 + o, 0, count);
    else
        memset(out_f32 + o, 0, count * sizeof *out_f32);
}

/* What both paths share: the map in window units, the filter, the letterbox edge. */
typedef struct warp_plan {
    ag_affine a; /* output pixel centre -> shrunk source coordinates (pixel centres +0.5) */
    double r;    /* the kernel's widening */
    double inv_r;
    int n;      /* taps per axis */
    int linear; /* the kernel: 1 tent (support 1), 0 Keys cubic (support 2) */
    int sw, sh; /* the shrunk image's size */
    double edge_w, edge_h;
    ag_warp_border border;
} warp_plan;

/* A pixel with no source: far outside (or not a number, from a degenerate map), before any
 * coordinate becomes an int; or outside the image with the letterbox border. */
static int black(const warp_plan *p, double u, double v) {
    if (!(fabs(u) < 1e8 && fabs(v) < 1e8))
        return 1;
    return p->border == AG_WARP_LETTERBOX &&
           !(u + 0.5 >= 0.0 && u + 0.5 < p->edge_w && v + 0.5 >= 0.0 && v + 0.5 < p->edge_h);
}

/* Per output pixel: its n x n taps. Inlined with a constant `bands` (3, 4): the band loops
 * unroll and the sums stay in registers. */
__attribute__((always_inline)) static inline void
warp_general_bands(const warp_plan *p, const window *win, int bands, int ow, int oh,
                   uint8_t *out_u8, float *out_f32) {
    int n = p->n;
    for (int y = 0; y < oh; y++)
        for (int x = 0; x < ow; x++) {
            double X = x + 0.5, Y = y + 0.5;
            double u = p->a.a * X + p->a.b * Y + p->a.c - 0.5;
            double v = p->a.d * X + p->a.e * Y + p->a.f - 0.5;
            size_t o = ((size_t)y * ow + x) * bands;
            if (black(p, u, v)) {
                store_black(out_u8, out_f32, o, (size_t)bands);
                continue;
            }
            int ix[MAX_TAPS], iy[MAX_TAPS];
            float wx[MAX_TAPS], wy[MAX_TAPS], acc[4] = {0, 0, 0, 0};
            float norm = axis_taps(u, p->inv_r, n, p->linear, p->sw, win->x0, p->border, ix, wx) *
                         axis_taps(v, p->inv_r, n, p->linear, p->sh, win->y0, p->border, iy, wy);
            for (int j = 0; j < n; j++) {
                if (wy[j] == 0.0f)
                    continue;
                const uint8_t *row_x = win->pixels + (size_t)iy[j] * win->stride;
                float rowacc[4] = {0, 0, 0, 0};
                for (int i = 0; i < n; i++) {
                    const uint8_t *px = row_x + (size_t)ix[i] * bands;
                    for (int b = 0; b < bands; b++)
                        rowacc[b] += wx[i] * px[b];
                }
                for (int b = 0; b < bands; b++)
                    acc[b] += wy[j] * rowacc[b];
            }
            store(out_u8, out_f32, o, acc, norm, bands);
        }
}

static void warp_general(const warp_plan *p, const window *win, int bands, int ow, int oh,
                         uint8_t *out_u8, float *out_f32) {
    if (bands == 3)
        warp_general_bands(p, win, 3, ow, oh, out_u8, out_f32);
    else if (bands == 4)
        warp_general_bands(p, win, 4, ow, oh, out_u8, out_f32);
    else
        warp_general_bands(p, win, bands, ow, oh, out_u8, out_f32);
}

/* One axis of an axis-aligned map for every output index: taps, weights, sums, and whether
 * the pixel has a source (0: black). */
static void separable_axis(const warp_plan *p, double scale, double offset, int count, int size,
                           double edge, int origin, int *index, float *w, float *sum,
                           uint8_t *live) {
    for (int i = 0; i < count; i++) {
        double u = scale * (i + 0.5) + offset - 0.5;
        int ok = fabs(u) < 1e8;
        if (ok && p->border == AG_WARP_LETTERBOX)
            ok = u + 0.5 >= 0.0 && u + 0.5 < edge;
        live[i] = (uint8_t)ok;
        sum[i] = ok ? axis_taps(u, p->inv_r, p->n, p->linear, size, origin, p->border,
                                index + (size_t)i * p->n, w + (size_t)i * p->n)
                    : 1.0f;
    }
}

/* The axis-aligned map: per output row, the n source rows into `row` (win->w * bands floats),
 * then the n taps of each output pixel along it. scratch: see warp_scratch_bytes. */
static void warp_separable(const warp_plan *p, const window *win, int bands, int ow, int oh,
                           void *scratch, uint8_t *out_u8, float *out_f32) {
    int n = p->n;
    float *row = scratch;                                                /* (win->w, bands) */
    float *wx = row + (size_t)win->w * bands, *wy = wx + (size_t)ow * n; /* (ow, n), (oh, n) */
    float *sx = wy + (size_t)oh * n, *sy = sx + ow;                      /* (ow), (oh) */
    int *ix = (int *)(sy + oh), *iy = ix + (size_t)ow * n;               /* (ow, n), (oh, n) */
    uint8_t *live_x = (uint8_t *)(iy + (size_t)oh * n), *live_y = live_x + ow;
    separable_axis(p, p->a.a, p->a.c, ow, p->sw, p->edge_w, win->x0, ix, wx, sx, live_x);
    separable_axis(p, p->a.e, p->a.f, oh, p->sh, p->edge_h, win->y0, iy, wy, sy, live_y);
    size_t row_len = (size_t)win->w * bands;
    for (int y = 0; y < oh; y++) {
        size_t o_row = (size_t)y * ow * bands;
        if (!live_y[y]) {
            store_black(out_u8, out_f32, o_row, (size_t)ow * bands);
            continue;
        }
        memset(row, 0, row_len * sizeof *row);
        for (int j = 0; j < n; j++) {
            float w = wy[(size_t)y * n + j];
            const uint8_t *src_x = win->pixels + (size_t)iy[(size_t)y * n + j] * win->stride;
            if (w == 0.0f)
                continue;
#pragma omp simd
            for (size_t c = 0; c < row_len; c++)
                row[c] += w * src_x[c];
        }
        for (int x = 0; x < ow; x++) {
            size_t o = o_row + (size_t)x * bands;
            if (!live_x[x]) {
                store_black(out_u8, out_f32, o, (size_t)bands);
                continue;
            }
            float acc[4] = {0, 0, 0, 0};
            const int *tap = ix + (size_t)x * n;
            const float *w = wx + (size_t)x * n;
            for (int i = 0; i < n; i++)
                for (int b = 0; b < bands; b++)
                    acc[b] += w[i] * row[(size_t)tap[i] * bands + b];
            store(out_u8, out_f32, o, acc, sx[x] * sy[y], bands);
        }
    }
}

static size_t warp_scratch_bytes(int win_w, int bands, int ow, int oh, int n) {
    size_t taps = (size_t)(ow + oh) * n;
    return ((size_t)win_w * bands + taps + ow + oh) * sizeof(float) + taps * sizeof(int) +
           (size_t)ow + oh;
}

size_t ag_face_warp_bytes(size_t pixels, size_t side, size_t ow, size_t oh) {
    /* ag_face_warp's one allocation at most, for a source of w x h <= pixels, w, h <= side:
     * the box-shrunk window (f >= 2: ceil(w / 2) ceil(h / 2) <= (pixels + 2 side + 1) / 4
     * pixels of at most 4 bands), its row sums (win.w f <= w + f - 1, f < 65536) and the
     * separable scratch (win.w <= w, MAX_TAPS taps) */
    size_t shrunk = pixels + 2 * side + 4;
    size_t sums = sizeof(uint32_t) * (side + 65536) * 4;
    return shrunk + sums + warp_scratch_bytes((int)side, 4, (int)ow, (int)oh, MAX_TAPS);
}

int ag_face_warp(const ag_image *src, const ag_affine *m, int ow, int oh, ag_warp_border border,
                 ag_warp_filter filter, uint8_t *out_u8, float *out_f32, ag_error *err) {
    if (!src || !src->pixels || src->width < 1 || src->height < 1 || src->bands < 1 ||
        src->bands > 4 || ow < 1 || oh < 1)
        return ag_error_set(err, AG_E_ARG, "face warp: bad image or size");
    double s = sqrt(fabs(m->a * m->e - m->b * m->d));
    if (!(s < 65536.0)) /* also NaN: no image is that much larger than a crop */
        return ag_error_set(err, AG_E_ARG, "face warp: the map is degenerate");
    int f = s >= 2.0 ? (int)floor(s) : 1, bands = src->bands;
    warp_plan p = {.a = {m->a / f, m->b / f, m->c / f, m->d / f, m->e / f, m->f / f},
                   .r = s / f > 1.0 ? s / f : 1.0,
                   .sw = (src->width + f - 1) / f,
                   .sh = (src->height + f - 1) / f,
                   .edge_w = (double)src->width / f,
                   .edge_h = (double)src->height / f,
                   .border = border,
                   .linear = filter == AG_WARP_LINEAR};
    p.inv_r = 1.0 / p.r;
    p.n = 2 * (int)ceil((p.linear ? 1.0 : 2.0) * p.r);
    p.n = p.n > MAX_TAPS ? MAX_TAPS : p.n;
    /* The window: the taps of the output's four corners (an affine map's extremes). */
    double ulo = 1e300, uhi = -1e300, vlo = 1e300, vhi = -1e300;
    for (int k = 0; k < 4; k++) {
        double X = k & 1 ? ow - 0.5 : 0.5, Y = k & 2 ? oh - 0.5 : 0.5;
        double u = p.a.a * X + p.a.b * Y + p.a.c - 0.5, v = p.a.d * X + p.a.e * Y + p.a.f - 0.5;
        ulo = fmin(ulo, u), uhi = fmax(uhi, u), vlo = fmin(vlo, v), vhi = fmax(vhi, v);
    }
    int x0, x1, y0, y1;
    axis_range(ulo, uhi, p.n, p.sw, border, &x0, &x1);
    axis_range(vlo, vhi, p.n, p.sh, border, &y0, &y1);
    window win = {src->pixels + ((size_t)y0 * src->width + x0) * bands,
                  (size_t)src->width * bands,
                  x0,
                  y0,
                  x1 - x0 + 1,
                  y1 - y0 + 1};
    int separable = m->b == 0.0 && m->d == 0.0;
    size_t shrunk_bytes = f > 1 ? (size_t)win.w * win.h * bands : 0;
    size_t sums_bytes = f > 1 ? sizeof(uint32_t) * (size_t)win.w * f * bands : 0;
    size_t scratch_bytes = separable ? warp_scratch_bytes(win.w, bands, ow, oh, p.n) : 0;
    uint8_t *buf = NULL;
    if (shrunk_bytes + scratch_bytes) {
        /* the sums and the scratch first: their alignment is the allocation's */
        buf = ag_malloc(sums_bytes + scratch_bytes + shrunk_bytes);
        if (!buf)
            return ag_error_set(err, AG_E_NOMEM, "face warp: out of memory");
    }
    if (f > 1) {
        uint8_t *shrunk = buf + sums_bytes + scratch_bytes;
        box_shrink(shrunk, src, f, x0, y0, win.w, win.h, (uint32_t *)buf);
        win.pixels = shrunk, win.stride = (size_t)win.w * bands;
    }
    if (separable)
        warp_separable(&p, &win, bands, ow, oh, buf + sums_bytes, out_u8, out_f32);
    else
        warp_general(&p, &win, bands, ow, oh, out_u8, out_f32);
    ag_free(buf);
    return AG_OK;
}
