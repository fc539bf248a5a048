/*
 * fuse_visible.c - where the target's face is visible: what covers it (hair, bangs, a hand,
 * a microphone) is kept from the target, never painted over. A model of the target's own
 * skin (robust median and spread in CIE Lab over discs on the cheeks, forehead and nose)
 * marks the pixels of the fused oval that are not skin; an opening drops specks and a
 * flood fill keeps only what reaches in from the oval's edge (an occluder comes from
 * outside the face: nostrils, pores and shadows inside it stay face); the eyes, brows and
 * lips are always face. A guided filter (He et al. 2010) with the target's lightness as
 * guide then makes that mask follow the occluder's own edges at sub-pixel precision.
 */
#include "fuse_internal.h"

#include "../util/util_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Discs the skin is sampled on: cheeks (205, 425, 50, 280), forehead (151), nose (195). */
static const int skin_sites[] = {205, 425, 50, 280, 151, 195};
#define SITES (int)(sizeof skin_sites / sizeof skin_sites[0])

/* FaceMesh's outer lips and each eye's region (the brow's upper edge, then the lower lid),
 * in order round each: always face (the colour model cannot tell brows, lids and lashes
 * from hair). */
static const int outer_lips[20] = {61,  185, 40,  39,  37,  0,  267, 269, 270, 409,
                                   291, 375, 321, 405, 314, 17, 84,  181, 91,  146};
static const int eye_region_right[14] = {70,  63,  105, 66,  107, 133, 155,
                                         154, 153, 145, 144, 163, 7,   33};
static const int eye_region_left[14] = {300, 293, 334, 296, 336, 362, 382,
                                        381, 380, 374, 373, 390, 249, 263};

static int cmp_float(const void *pa, const void *pb) {
    float a = *(const float *)pa, b = *(const float *)pb;
    return (a > b) - (a < b);
}

/* The median of v[0..n) (reordered), and in *spread the scaled median absolute deviation
 * (a standard deviation for normal data). */
static float median_spread(float *v, size_t n, float *spread) {
    qsort(v, n, sizeof *v, cmp_float);
    float m = v[n / 2];
    for (size_t i = 0; i < n; i++)
        v[i] = fabsf(v[i] - m);
    qsort(v, n, sizeof *v, cmp_float);
    *spread = 1.4826f * v[n / 2];
    return m;
}

/* In place: p (h, w) <- its (2r+1)^2 box mean (the box clipped at the edges). scratch:
 * max(w, h) floats. */
static void box_mean(float *p, int w, int h, int r, float *scratch) {
    for (int y = 0; y < h; y++) {
        float *row = p + (size_t)y * w;
        memcpy(scratch, row, sizeof(float) * (size_t)w);
        double s = 0;
        int lo = 0, hi = -1;
        for (int x = 0; x < w; x++) {
            while (hi < x + r && hi < w - 1)
                s += (double)scratch[++hi];
            while (lo < x - r)
                s -= (double)scratch[lo++];
            row[x] = (float)(s / (hi - lo + 1));
        }
    }
    for (int x = 0; x < w; x++) {
        for (int y = 0; y < h; y++)
            scratch[y] = p[(size_t)y * w + x];
        double s = 0;
        int lo = 0, hi = -1;
        for (int y = 0; y < h; y++) {
            while (hi < y + r && hi < h - 1)
                s += (double)scratch[++hi];
            while (lo < y - r)
                s -= (double)scratch[lo++];
            p[(size_t)y * w + x] = (float)(s / (hi - lo + 1));
        }
    }
}

typedef struct skin_model {
    float mean[3], sd[3];
} skin_model;

/* The samples of channel k of lab on the discs (radius r) inside the face, into out
 * (at most n); their count. */
static size_t sample_sites(const float *lab, const uint8_t *face, int w, int h,
                           const ag_fuse_point *lm, double r, int k, float *out) {
    size_t n = (size_t)w * h, count = 0;
    for (int s = 0; s < SITES; s++) {
        ag_fuse_point c = lm[skin_sites[s]];
        int y0 = (int)fmax(0, c.y - r), y1 = (int)fmin(h - 1, c.y + r);
        int x0 = (int)fmax(0, c.x - r), x1 = (int)fmin(w - 1, c.x + r);
        for (int y = y0; y <= y1; y++)
            for (int x = x0; x <= x1 && count < n; x++) {
                size_t i = (size_t)y * w + x;
                if (face[i] && hypot(x + 0.5 - c.x, y + 0.5 - c.y) <= r)
                    out[count++] = lab[i * 3 + k];
            }
    }
    return count;
}

/* The skin's median and spread of lightness, hue and chroma (lab holds L, hue, chroma)
 * over the sample discs (radius r) inside the face. samples: n floats. Returns 0 when too
 * few pixels. */
static int fit_skin(const float *lch, const uint8_t *face, int w, int h, const ag_fuse_point *lm,
                    double r, float *samples, skin_model *m) {
    const float floor_sd[3] = {5.0f, 4.0f, 2.5f};
    for (int k = 0; k < 3; k++) {
        size_t count = sample_sites(lch, face, w, h, lm, r, k, samples);
        if (count < 16)
            return 0;
        m->mean[k] = median_spread(samples, count, &m->sd[k]);
        m->sd[k] = fmaxf(m->sd[k], floor_sd[k]);
    }
    return 1;
}

/* Whether an (L, hue, chroma) pixel is not the skin: its hue away from the skin's by over
 * three spreads (at least 12 degrees: another person's hand, a microphone), or its chroma
 * under 40% of the skin's (hair, grey or dark; fabric). Lightness is left out: shading and
 * highlights move it across the whole face. */
static int not_skin(const skin_model *m, const float *p) {
    return fabsf(p[1] - m->mean[1]) > fmaxf(10.0f, 2.5f * m->sd[1]) || p[2] < 0.55f * m->mean[2];
}

/* occ (u8, 0/1): keep only the pixels connected (4-way, through occ) to one in the band
 * of width r inside the face's edge (an occluder reaches in from outside the face). plane:
 * n floats, then scratch as box_mean's; the stack (n ints) is the plane once it is read. */
static void keep_from_edge(uint8_t *occ, const uint8_t *face, int w, int h, int r, float *plane,
                           float *scratch) {
    size_t n = (size_t)w * h, top = 0;
    for (size_t i = 0; i < n; i++)
        plane[i] = face[i];
    box_mean(plane, w, h, r, scratch);
    for (size_t i = 0; i < n; i++)
        if (occ[i] == 1 && plane[i] < 0.999f)
            occ[i] = 2;
    int *stack = (int *)plane;
    for (size_t i = 0; i < n; i++)
        if (occ[i] == 2)
            stack[top++] = (int)i;
    while (top > 0) {
        int i = stack[--top], x = i % w, y = i / w;
        const int nb[4] = {x > 0 ? i - 1 : -1, x < w - 1 ? i + 1 : -1, y > 0 ? i - w : -1,
                           y < h - 1 ? i + w : -1};
        for (int k = 0; k < 4; k++)
            if (nb[k] >= 0 && occ[nb[k]] == 1)
                occ[nb[k]] = 2, stack[top++] = nb[k];
    }
    for (size_t i = 0; i < n; i++)
        occ[i] = occ[i] == 2;
}

static float class_distance(const skin_model *m, const float *p) {
    float d = 0;
    for (int k = 0; k < 3; k++)
        d += (p[k] - m->mean[k]) * (p[k] - m->mean[k]) / (m->sd[k] * m->sd[k]);
    return d;
}

/* Whether a pixel joins the occluder: nearer its colour than the skin's, and over two
 * spreads from the skin's (shaded skin next to a strand stays face). */
static int grows_into(const skin_model *occ, const skin_model *skin, const float *p) {
    float ds = class_distance(skin, p);
    return ds > 4.0f && class_distance(occ, p) < ds;
}

/* occ (0/1 seeds) grows through the face pixels whose colour is nearer the seeds' (their
 * mean and spread) than the skin's: a strand's shaded parts, a hand's palm. stack: n ints. */
static void grow_occluders(uint8_t *occ, const float *lch, const uint8_t *face, int w, int h,
                           const skin_model *skin, int *stack) {
    size_t n = (size_t)w * h, count = 0, top = 0;
    double s[3] = {0, 0, 0}, s2[3] = {0, 0, 0};
    for (size_t i = 0; i < n; i++)
        if (occ[i]) {
            for (int k = 0; k < 3; k++)
                s[k] += (double)lch[i * 3 + k], s2[k] += (double)(lch[i * 3 + k] * lch[i * 3 + k]);
            count++, stack[top++] = (int)i;
        }
    if (count < 16)
        return;
    skin_model o;
    const float floor_sd[3] = {5.0f, 4.0f, 2.5f};
    for (int k = 0; k < 3; k++) {
        double mean = s[k] / count, var = s2[k] / count - mean * mean;
        o.mean[k] = (float)mean, o.sd[k] = fmaxf(floor_sd[k], (float)sqrt(fmax(0, var)));
    }
    while (top > 0) {
        int i = stack[--top], x = i % w, y = i / w;
        const int nb[4] = {x > 0 ? i - 1 : -1, x < w - 1 ? i + 1 : -1, y > 0 ? i - w : -1,
                           y < h - 1 ? i + w : -1};
        for (int k = 0; k < 4; k++) {
            int j = nb[k];
            if (j >= 0 && !occ[j] && face[j] && grows_into(&o, skin, lch + (size_t)j * 3))
                occ[j] = 1, stack[top++] = j;
        }
    }
}

/* An opening of the 0/1 mask m by a (2r+1) box: erode (the whole box set), then dilate. */
static void open_mask(uint8_t *m, float *plane, int w, int h, int r, float *scratch) {
    size_t n = (size_t)w * h;
    for (size_t i = 0; i < n; i++)
        plane[i] = m[i];
    box_mean(plane, w, h, r, scratch);
    for (size_t i = 0; i < n; i++)
        plane[i] = plane[i] > 0.999f;
    box_mean(plane, w, h, r, scratch);
    for (size_t i = 0; i < n; i++)
        m[i] = (uint8_t)(m[i] && plane[i] > 0.001f);
}

/* vis <- the guided filter of vis (0..255) with guide g (0..1), radius r; planes: 4 n. */
static void guided_filter(uint8_t *vis, const float *g, int w, int h, int r, float *planes,
                          float *scratch) {
    size_t n = (size_t)w * h;
    float *mi = planes, *mp = planes + n, *mip = planes + 2 * n, *mii = planes + 3 * n;
    for (size_t i = 0; i < n; i++) {
        float p = vis[i] / 255.0f;
        mi[i] = g[i], mp[i] = p, mip[i] = g[i] * p, mii[i] = g[i] * g[i];
    }
    for (int k = 0; k < 4; k++)
        box_mean(planes + k * n, w, h, r, scratch);
    const float eps = 1e-3f; /* edges under about 3 L units are smoothed over */
    for (size_t i = 0; i < n; i++) {
        float a = (mip[i] - mi[i] * mp[i]) / (mii[i] - mi[i] * mi[i] + eps);
        mip[i] = a, mii[i] = mp[i] - a * mi[i];
    }
    box_mean(mip, w, h, r, scratch);
    box_mean(mii, w, h, r, scratch);
    for (size_t i = 0; i < n; i++) {
        float q = mip[i] * g[i] + mii[i];
        vis[i] = (uint8_t)(q <= 0 ? 0 : q >= 1 ? 255 : q * 255 + 0.5f);
    }
}

size_t ag_fuse_visible_floats(int w, int h) {
    return (size_t)5 * w * h + (size_t)(w > h ? w : h);
}

int ag_fuse_visible(uint8_t *vis, const float *rgb, const uint8_t *face, int w, int h,
                    const ag_fuse_point *lm, float *buf) {
    size_t n = (size_t)w * h;
    /* guide, then lab (3 n) and spare (n): the guided filter's 4 planes once lab is done */
    float *guide = buf, *lab = buf + n, *spare = buf + 4 * n, *scratch = buf + 5 * n;
    memcpy(lab, rgb, sizeof(float) * 3 * n);
    ag_fuse_rgb_to_lab(lab, n);
    for (size_t i = 0; i < n; i++) {
        float *p = lab + i * 3, c = hypotf(p[1], p[2]);
        guide[i] = p[0] / 100.0f;
        p[1] = atan2f(p[2], p[1]) * (180.0f / 3.14159265f), p[2] = c;
    }
    double iod = hypot(lm[33].x - lm[263].x, lm[33].y - lm[263].y);
    skin_model m;
    size_t occluders = 0;
    if (fit_skin(lab, face, w, h, lm, fmax(2.0, 0.12 * iod), spare, &m)) {
        for (size_t i = 0; i < n; i++)
            vis[i] = (uint8_t)(face[i] && not_skin(&m, lab + i * 3));
        ag_fuse_point p[20];
        const int *keep[3] = {outer_lips, eye_region_right, eye_region_left};
        const int sizes[3] = {20, 14, 14};
        for (int s = 0; s < 3; s++) {
            for (int k = 0; k < sizes[s]; k++)
                p[k] = lm[keep[s][k]];
            ag_fuse_fill_polygon(vis, w, h, p, sizes[s], 0);
        }
        open_mask(vis, spare, w, h, (int)fmax(1.0, 0.02 * iod), scratch);
        keep_from_edge(vis, face, w, h, (int)fmax(2.0, 0.15 * iod), spare, scratch);
        grow_occluders(vis, lab, face, w, h, &m, (int *)spare);
        for (int s = 0; s < 3; s++) {
            for (int k = 0; k < sizes[s]; k++)
                p[k] = lm[keep[s][k]];
            ag_fuse_fill_polygon(vis, w, h, p, sizes[s], 0);
        }
        for (size_t i = 0; i < n; i++)
            occluders += vis[i];
    }
    if (occluders == 0) {
        memset(vis, 255, n);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        vis[i] = vis[i] ? 0 : 255;
    guided_filter(vis, guide, w, h, (int)fmax(2.0, 0.04 * iod), lab, scratch);
    return 1;
}
