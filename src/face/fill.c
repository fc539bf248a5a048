/*
 * fill.c - what an FFHQ crop shows where its quad leaves the photo, as NVlabs'
 * recreate_aligned_images does it (align.c calls it before the warp): in the pixels of the
 * image shrunk by the warp's own factor f, with q the quad's side there,
 *   border = max(rint(0.1 q), 3); crop = the quad's bounding box + border, within the image;
 *   pad = how far the quad's box + border leaves the crop on each side; when the largest
 *   pad > border - 4 (the quad within 4 px of an edge): every pad = max(pad, rint(0.3 q)),
 *   the crop reflected into the pads (np.pad 'reflect': -1 -> 1), and with
 *   mask = max(1 - min(x / pad_l, (w-1-x) / pad_r), 1 - min(y / pad_t, (h-1-y) / pad_b))
 *   (<= 0 inside the crop, 1 at the outer edge):
 *     img += (blur(img) - img) * clip(3 mask + 1, 0, 1)   (sigma = 0.02 q)
 *     img += (median(img) - img) * clip(mask, 0, 1)        (per band, over the whole image)
 *   rounded half to even. So a mirrored border fades, blurred, into the photo's median
 *   colour instead of showing a sharp mirror image. One difference: the Gaussian is three
 *   box blurs per axis (widths from sigma as in Kovesi's "fast almost-Gaussian filtering",
 *   scipy's 'reflect' border: d c b a | a b c d), O(1) per pixel whatever the face's size,
 *   where a 1000 px face would need 240-tap kernels; the median is read from a histogram in
 *   1/256 steps. tools/face_reference.py does the same in numpy.
 * Memory: the padded crop (u8, about (2.2 q)^2 pixels) and two float planes of it.
 */
#include "face_internal.h"

#include "../util/util_internal.h"

#include <math.h>
#include <string.h>

#define MEDIAN_STEPS 256 /* histogram bins per level */

/* scipy.ndimage 'reflect' (edge repeated); np.pad 'reflect' is ag_face_reflect. */
static int symmetric(int i, int n) {
    int p = 2 * n;
    i %= p;
    i += i < 0 ? p : 0;
    return i >= n ? p - 1 - i : i;
}

/* The three box radii of the almost-Gaussian of `sigma`. */
static void box_radii(double sigma, int radius[3]) {
    double ideal = sqrt(12.0 * sigma * sigma / 3.0 + 1.0);
    int wl = (int)floor(ideal);
    wl -= wl % 2 == 0;
    int wu = wl + 2;
    double m = (12.0 * sigma * sigma - 3.0 * wl * wl - 12.0 * wl - 9.0) / (-4.0 * wl - 4.0);
    int ml = (int)lround(m);
    for (int i = 0; i < 3; i++)
        radius[i] = ((i < ml ? wl : wu) - 1) / 2;
}

/* One box pass of radius r along a row of n values into out. */
static void box_row(float *out, const float *v, int n, int r) {
    double sum = 0.0, inv = 1.0 / (2 * r + 1);
    for (int i = -r; i <= r; i++)
        sum += (double)v[symmetric(i, n)];
    for (int i = 0; i < n; i++) {
        out[i] = (float)(sum * inv);
        int add = i + r + 1, sub = i - r;
        add = add < n ? add : symmetric(add, n);
        sub = sub >= 0 ? sub : symmetric(sub, n);
        sum += (double)v[add] - (double)v[sub];
    }
}

/* One box pass of radius r down the columns of src (h, w) into dst: a running sum per
 * column, a row at a time. sums: w doubles. */
static void box_columns(float *dst, const float *src, int w, int h, int r, double *sums) {
    memset(sums, 0, sizeof *sums * (size_t)w);
    for (int i = -r; i <= r; i++) {
        const float *row_x = src + (size_t)symmetric(i, h) * w;
        for (int x = 0; x < w; x++)
            sums[x] += (double)row_x[x];
    }
    double inv = 1.0 / (2 * r + 1);
    for (int y = 0; y < h; y++) {
        float *out_x = dst + (size_t)y * w;
        const float *add = src + (size_t)symmetric(y + r + 1, h) * w;
        const float *sub = src + (size_t)symmetric(y - r, h) * w;
        for (int x = 0; x < w; x++) {
            out_x[x] = (float)(sums[x] * inv);
            sums[x] += (double)add[x] - (double)sub[x];
        }
    }
}

static double clip01(double v) {
    return v < 0.0 ? 0.0 : v > 1.0 ? 1.0 : v;
}

/* The median of plane (n values in [0, 255]) to 1/MEDIAN_STEPS, as np.median: the mean of
 * the two middle values when n is even. */
static double plane_median(const float *plane, size_t n, uint32_t *hist) {
    const int bins = 255 * MEDIAN_STEPS + 1;
    memset(hist, 0, sizeof *hist * (size_t)bins);
    for (size_t i = 0; i < n; i++) {
        float v = plane[i] < 0.0f ? 0.0f : plane[i] > 255.0f ? 255.0f : plane[i];
        hist[(int)lrintf(v * MEDIAN_STEPS)]++;
    }
    size_t lo_rank = (n - 1) / 2, hi_rank = n / 2, seen = 0;
    double lo = -1.0, hi = -1.0;
    for (int b = 0; b < bins && hi < 0.0; b++) {
        seen += hist[b];
        if (lo < 0.0 && seen > lo_rank)
            lo = (double)b / MEDIAN_STEPS;
        if (seen > hi_rank)
            hi = (double)b / MEDIAN_STEPS;
    }
    return (lo + hi) / 2.0;
}

/* Scratch of blend_band: two planes, a row, the column sums, the histogram, the mask's
 * two axes. */
typedef struct fill_scratch {
    float *plane, *other, *row; /* (h, w), (h, w), (max(w, h)) */
    double *sums;               /* (w) */
    uint32_t *hist;             /* (255 * MEDIAN_STEPS + 1) */
    double *mask_x, *mask_y;    /* (w), (h): 1 - min(x / pad_l, (w-1-x) / pad_r), ... */
} fill_scratch;

/* The blur and median blends of one band of the padded image (h, w, bands) in place; the
 * mask of pixel (x, y) is max(mask_x[x], mask_y[y]). */
static void blend_band(uint8_t *img, int w, int h, int bands, int band, double sigma,
                       fill_scratch *t) {
    size_t n = (size_t)w * h;
    for (size_t i = 0; i < n; i++)
        t->plane[i] = img[i * bands + band];
    int radius[3];
    box_radii(sigma, radius);
    for (int k = 0; k < 3; k++)
        for (int y = 0; y < h; y++) {
            float *row_x = t->plane + (size_t)y * w;
            box_row(t->row, row_x, w, radius[k]);
            memcpy(row_x, t->row, sizeof *row_x * (size_t)w);
        }
    for (int k = 0; k < 3; k++) {
        box_columns(t->other, t->plane, w, h, radius[k], t->sums);
        float *swap = t->plane;
        t->plane = t->other, t->other = swap;
    }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            size_t i = (size_t)y * w + x;
            double v = img[i * bands + band], m = fmax(t->mask_x[x], t->mask_y[y]);
            t->plane[i] = (float)(v + ((double)t->plane[i] - v) * clip01(m * 3.0 + 1.0));
        }
    double median = plane_median(t->plane, n, t->hist);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            size_t i = (size_t)y * w + x;
            double p = (double)t->plane[i], m = fmax(t->mask_x[x], t->mask_y[y]);
            double v = p + (median - p) * clip01(m);
            img[i * bands + band] = (uint8_t)(v <= 0.0 ? 0 : v >= 255.0 ? 255 : rint(v));
        }
}

int ag_face_fill(const ag_image *image, int f, int size, const float (*quad)[2], ag_image *out,
                 int origin[2], ag_error *err) {
    memset(out, 0, sizeof *out);
    int sw = (image->width + f - 1) / f, sh = (image->height + f - 1) / f;
    double q =
        hypot((double)quad[3][0] - (double)quad[0][0], (double)quad[3][1] - (double)quad[0][1]) / f;
    double lo[2] = {1e300, 1e300}, hi[2] = {-1e300, -1e300};
    for (int k = 0; k < 4; k++)
        for (int a = 0; a < 2; a++)
            lo[a] = fmin(lo[a], (double)quad[k][a] / f),
            hi[a] = fmax(hi[a], (double)quad[k][a] / f);
    /* A square quad has q < 2 size here (f is floor(q / size)); any other shape (only the API
     * can pass one) gets no padding: the warp reflects (or blacks out). */
    if (!(q < 2.0 * size + 2 && lo[0] > -1e6 && lo[1] > -1e6 && hi[0] < 1e6 && hi[1] < 1e6))
        return AG_OK;
    int border = (int)fmax(rint(q * 0.1), 3.0);
    int bx0 = (int)floor(lo[0]), by0 = (int)floor(lo[1]), bx1 = (int)ceil(hi[0]),
        by1 = (int)ceil(hi[1]);
    int cx0 = bx0 - border > 0 ? bx0 - border : 0, cy0 = by0 - border > 0 ? by0 - border : 0;
    int cx1 = bx1 + border < sw ? bx1 + border : sw, cy1 = by1 + border < sh ? by1 + border : sh;
    if (cx1 <= cx0 || cy1 <= cy0)
        return AG_OK; /* the quad misses the image: nothing to reflect */
    int cw = cx1 - cx0, ch = cy1 - cy0;
    int pad[4] = {-(bx0 - cx0) + border, -(by0 - cy0) + border, (bx1 - cx0) - cw + border,
                  (by1 - cy0) - ch + border};
    int most = 0;
    for (int k = 0; k < 4; k++)
        pad[k] = pad[k] > 0 ? pad[k] : 0, most = pad[k] > most ? pad[k] : most;
    if (most <= border - 4)
        return AG_OK; /* the quad stays inside: no padding */
    int least = (int)rint(q * 0.3);
    least = least > 1 ? least : 1; /* the mask divides by every pad */
    for (int k = 0; k < 4; k++)
        pad[k] = pad[k] > least ? pad[k] : least;
    int w = cw + pad[0] + pad[2], h = ch + pad[1] + pad[3], bands = image->bands;
    /* A square quad pads to at most 2.21 q a side (the server's budget counts 2.3 q). */
    if (w > 2.3 * q + 8 || h > 2.3 * q + 8)
        return AG_OK;
    /* The crop at 1/f: an integer-aligned map, whose cubic weights are exactly 1 and 0. */
    size_t n = (size_t)w * h, bins = 255 * MEDIAN_STEPS + 1, line = (size_t)(w > h ? w : h);
    ag_image crop = {cw, ch, bands, NULL};
    uint8_t *scratch =
        ag_malloc(sizeof(double) * (2 * (size_t)w + h) + sizeof(float) * (2 * n + line) +
                  sizeof(uint32_t) * bins + (size_t)cw * ch * bands);
    uint8_t *img = ag_malloc(n * bands);
    if (!scratch || !img) {
        ag_free(scratch);
        ag_free(img);
        return ag_error_set(err, AG_E_NOMEM, "face align: out of memory");
    }
    fill_scratch t;
    t.sums = (double *)scratch, t.mask_x = t.sums + w, t.mask_y = t.mask_x + w;
    t.plane = (float *)(t.mask_y + h), t.other = t.plane + n, t.row = t.other + n;
    t.hist = (uint32_t *)(t.row + line);
    crop.pixels = (uint8_t *)(t.hist + bins);
    for (int x = 0; x < w; x++)
        t.mask_x[x] = 1.0 - fmin((double)x / pad[0], (double)(w - 1 - x) / pad[2]);
    for (int y = 0; y < h; y++)
        t.mask_y[y] = 1.0 - fmin((double)y / pad[1], (double)(h - 1 - y) / pad[3]);
    ag_affine m = {f, 0, (double)cx0 * f, 0, f, (double)cy0 * f};
    int rc =
        ag_face_warp(image, &m, cw, ch, AG_WARP_REFLECT, AG_WARP_CUBIC, crop.pixels, NULL, err);
    if (rc == AG_OK) {
        for (int y = 0; y < h; y++) {
            const uint8_t *row_x =
                crop.pixels + (size_t)ag_reflect_index(y - pad[1], ch) * cw * bands;
            for (int x = 0; x < w; x++)
                memcpy(img + ((size_t)y * w + x) * bands,
                       row_x + (size_t)ag_reflect_index(x - pad[0], cw) * bands, (size_t)bands);
        }
        for (int b = 0; b < bands; b++)
            blend_band(img, w, h, bands, b, q * 0.02, &t);
        *out = (ag_image){w, h, bands, img};
        origin[0] = cx0 - pad[0], origin[1] = cy0 - pad[1];
        img = NULL;
    }
    ag_free(img);
    ag_free(scratch);
    return rc;
}
