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

/* The k-th smallest of v[0..n) (reordered): Hoare's selection, linear on average. */
static float select_kth(float *v, size_t n, size_t k) {
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        float pivot = v[lo + (hi - lo) / 2];
        size_t i = lo, j = hi;
        for (;;) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i >= j)
                break;
            float t = v[i];
            v[i++] = v[j], v[j--] = t;
        }
        /* v[lo..j] <= pivot <= v[j+1..hi] */
        if (k <= j)
            hi = j;
        else
            lo = j + 1;
    }
    return v[k];
}

/* The median of v[0..n) (reordered), and in *spread the scaled median absolute deviation
 * (a standard deviation for normal data). */
static float median_spread(float *v, size_t n, float *spread) {
    float m = select_kth(v, n, n / 2);
    for (size_t i = 0; i < n; i++)
        v[i] = fabsf(v[i] - m);
    *spread = 1.4826f * select_kth(v, n, n / 2);
    return m;
}

/* In place: p (h, w) <- its (2r+1)^2 box mean (the box clipped at the edges). scratch:
 * box_scratch(w, h) floats. Rows by prefix sums (the differences then vectorise); columns
 * by running sums of whole rows, so every pass reads the plane in order (a column at a
 * time missed the cache on every pixel); the r + 1 rows a column sum still needs are kept
 * in a ring as they are overwritten. Sums in float: exact for the 0/1 masks (integers),
 * within 1e-5 for the guided filter's planes. */
static void box_mean(float *p, int w, int h, int r, float *scratch) {
    r = r < h - 1 ? r : h - 1;
    int rw = r < w - 1 ? r : w - 1;
    float *sum = scratch, *ring = scratch + 2 * (size_t)w, *prefix = ring;
    for (int y = 0; y < h; y++) {
        float *row = p + (size_t)y * w, acc = 0;
        prefix[0] = 0;
        for (int x = 0; x < w; x++)
            prefix[x + 1] = acc += row[x];
        for (int x = 0; x < w; x++) {
            int lo = x - rw > 0 ? x - rw : 0, hi = x + rw < w - 1 ? x + rw : w - 1;
            row[x] = (prefix[hi + 1] - prefix[lo]) / (float)(hi - lo + 1);
        }
    }
    memset(sum, 0, sizeof(float) * (size_t)w);
    int lo = 0, hi = -1;
    for (int y = 0; y < h; y++) {
        while (hi < y + r && hi < h - 1) {
            const float *add = p + (size_t)(++hi) * w;
            for (int x = 0; x < w; x++)
                sum[x] += add[x];
        }
        while (lo < y - r) {
            const float *gone = ring + (size_t)(lo++ % (r + 1)) * w;
            for (int x = 0; x < w; x++)
                sum[x] -= gone[x];
        }
        float *row = p + (size_t)y * w;
        memcpy(ring + (size_t)(y % (r + 1)) * w, row, sizeof(float) * (size_t)w);
        float inv = 1.0f / (float)(hi - lo + 1);
        for (int x = 0; x < w; x++)
            row[x] = sum[x] * inv;
    }
}

/* box_mean's scratch: the column sums (2 w: room for the row pass's w + 1 prefix sums
 * after them in the ring) and a ring of up to h rows. */
static size_t box_scratch(int w, int h) {
    return (size_t)w * (h + 2) + 1;
}

typedef struct skin_model {
    float mean[3], sd[3];
    float hue_limit, chroma_floor; /* not_skin's thresholds, from the above */
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
                double dx = x + 0.5 - c.x, dy = y + 0.5 - c.y;
                if (face[i] && dx * dx + dy * dy <= r * r)
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
    m->hue_limit = fmaxf(10.0f, 2.5f * m->sd[1]), m->chroma_floor = 0.55f * m->mean[2];
    return 1;
}

/* Whether an (L, hue, chroma) pixel is not the skin: its hue away from the skin's by over
 * three spreads (at least 12 degrees: another person's hand, a microphone), or its chroma
 * under 40% of the skin's (hair, grey or dark; fabric). Lightness is left out: shading and
 * highlights move it across the whole face. */
static int not_skin(const skin_model *m, const float *p) {
    return fabsf(p[1] - m->mean[1]) > m->hue_limit || p[2] < m->chroma_floor;
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

/* vis (0 occluder, 255 face) <- its guided filter with guide g (0..1), radius r; planes:
 * 4 n. Only the occluders' box and 2 r + 1 round it: beyond, every window the output
 * depends on is all face (a = 0, b = 1: 255 again), so the rest is left as it is and the
 * box means' clipping at the smaller rectangle changes nothing. */
static void guided_filter(uint8_t *vis, const float *g, int w, int h, int r, float *planes,
                          float *scratch) {
    int x0 = w, y0 = h, x1 = -1, y1 = -1;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            if (vis[(size_t)y * w + x] != 255)
                x0 = x < x0 ? x : x0, x1 = x > x1 ? x : x1, y0 = y < y0 ? y : y0,
                y1 = y > y1 ? y : y1;
    if (x1 < 0)
        return;
    int m = 2 * r + 1;
    x0 = x0 - m > 0 ? x0 - m : 0, y0 = y0 - m > 0 ? y0 - m : 0;
    x1 = x1 + m < w - 1 ? x1 + m : w - 1, y1 = y1 + m < h - 1 ? y1 + m : h - 1;
    int rw = x1 - x0 + 1, rh = y1 - y0 + 1;
    size_t n = (size_t)rw * rh;
    float *mi = planes, *mp = planes + n, *mip = planes + 2 * n, *mii = planes + 3 * n;
    for (int y = 0; y < rh; y++)
        for (int x = 0; x < rw; x++) {
            size_t i = (size_t)y * rw + x, j = (size_t)(y + y0) * w + x + x0;
            float p = vis[j] / 255.0f;
            mi[i] = g[j], mp[i] = p, mip[i] = g[j] * p, mii[i] = g[j] * g[j];
        }
    for (int k = 0; k < 4; k++)
        box_mean(planes + k * n, rw, rh, r, scratch);
    const float eps = 1e-3f; /* edges under about 3 grey levels in 100 are smoothed over */
    for (size_t i = 0; i < n; i++) {
        float a = (mip[i] - mi[i] * mp[i]) / (mii[i] - mi[i] * mi[i] + eps);
        mip[i] = a, mii[i] = mp[i] - a * mi[i];
    }
    box_mean(mip, rw, rh, r, scratch);
    box_mean(mii, rw, rh, r, scratch);
    for (int y = 0; y < rh; y++)
        for (int x = 0; x < rw; x++) {
            size_t i = (size_t)y * rw + x, j = (size_t)(y + y0) * w + x + x0;
            float q = mip[i] * g[j] + mii[i];
            vis[j] = (uint8_t)(q <= 0 ? 0 : q >= 1 ? 255 : q * 255 + 0.5f);
        }
}

#define EDGE_BAND 0.15 /* an occluder reaches in from this far inside the face's edge (x iod) */

/* A rough atan2 in degrees (under 0.3 degrees off): the hue test's thresholds are 10
 * degrees and more, and libm's atan2f was a tenth of the stage. */
static float hue_degrees(float y, float x) {
    float ax = fabsf(x), ay = fabsf(y), big = ax > ay ? ax : ay, small = ax > ay ? ay : ax;
    if (big == 0)
        return 0;
    float t = small / big, t2 = t * t;
    float a =
        t *
        (0.99997726f +
         t2 * (-0.33262347f +
               t2 * (0.19354346f + t2 * (-0.11643287f + t2 * (0.05265332f - t2 * 0.01172120f)))));
    if (ay > ax)
        a = 1.57079637f - a;
    if (x < 0)
        a = 3.14159274f - a;
    return (y < 0 ? -a : a) * (180.0f / 3.14159265f);
}

/* The sub-rectangle of the window the work needs: the face's box and `margin` round it. */
typedef struct rect {
    int x0, y0, w, h;
} rect;

static rect face_rect(const uint8_t *face, int w, int h, int margin) {
    int x0 = w, y0 = h, x1 = -1, y1 = -1;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            if (face[(size_t)y * w + x])
                x0 = x < x0 ? x : x0, x1 = x > x1 ? x : x1, y0 = y < y0 ? y : y0,
                y1 = y > y1 ? y : y1;
    if (x1 < 0)
        return (rect){0, 0, 0, 0};
    x0 = x0 - margin > 0 ? x0 - margin : 0, y0 = y0 - margin > 0 ? y0 - margin : 0;
    x1 = x1 + margin < w - 1 ? x1 + margin : w - 1, y1 = y1 + margin < h - 1 ? y1 + margin : h - 1;
    return (rect){x0, y0, x1 - x0 + 1, y1 - y0 + 1};
}

/* The floats of the sub-rectangle's planes: guide, lab (3), spare, box_mean's scratch, and
 * its face mask's bytes; each start 8-byte aligned. */
static size_t sub_floats(size_t n, int w, int h) {
    return 5 * n + box_scratch(w, h) + n / 4 + 8;
}

size_t ag_fuse_visible_floats(int w, int h) {
    return sub_floats((size_t)w * h, w, h);
}

/* vis (r's w x h, u8) <- the occluders in the sub-rectangle (1) or 0; its skin model fit. */
static size_t mark_occluders(uint8_t *vis, const float *lch, const uint8_t *face, int w, int h,
                             const ag_fuse_point *lm, float *spare, float *scratch) {
    size_t n = (size_t)w * h, occluders = 0;
    double iod = hypot(lm[33].x - lm[263].x, lm[33].y - lm[263].y);
    skin_model m;
    if (!fit_skin(lch, face, w, h, lm, fmax(2.0, 0.12 * iod), spare, &m))
        return 0;
    for (size_t i = 0; i < n; i++)
        vis[i] = (uint8_t)(face[i] && not_skin(&m, lch + i * 3));
    ag_fuse_point p[20];
    const int *keep[3] = {outer_lips, eye_region_right, eye_region_left};
    const int sizes[3] = {20, 14, 14};
    for (int s = 0; s < 3; s++) {
        for (int k = 0; k < sizes[s]; k++)
            p[k] = lm[keep[s][k]];
        ag_fuse_fill_polygon(vis, w, h, p, sizes[s], 0);
    }
    open_mask(vis, spare, w, h, (int)fmax(1.0, 0.02 * iod), scratch);
    keep_from_edge(vis, face, w, h, (int)fmax(2.0, EDGE_BAND * iod), spare, scratch);
    grow_occluders(vis, lch, face, w, h, &m, (int *)spare);
    for (int s = 0; s < 3; s++) {
        for (int k = 0; k < sizes[s]; k++)
            p[k] = lm[keep[s][k]];
        ag_fuse_fill_polygon(vis, w, h, p, sizes[s], 0);
    }
    for (size_t i = 0; i < n; i++)
        occluders += vis[i];
    return occluders;
}

int ag_fuse_visible(uint8_t *vis, const float *rgb, const uint8_t *face, int w, int h,
                    const ag_fuse_point *lm, float *buf) {
    double iod = hypot(lm[33].x - lm[263].x, lm[33].y - lm[263].y);
    int radius = (int)fmax(2.0, 0.04 * iod);
    /* Everything runs on the face's box plus the guided filter's reach: the window's ring
     * margin (two feathers round the face region) needs none of it. */
    rect r = face_rect(face, w, h, (int)fmax(radius, EDGE_BAND * iod) + 1);
    size_t n = (size_t)r.w * r.h;
    if (n == 0) {
        memset(vis, 255, (size_t)w * h);
        return 0;
    }
    /* guide (n), then lab (3 n) and spare (n): the guided filter's 4 planes once lab is
     * done; box_mean's scratch; the sub-rectangle's face mask */
    size_t at = (n + 1) & ~(size_t)1;
    float *guide = buf, *lab = buf + at, *spare = lab + 3 * n, *scratch = buf + 5 * at;
    uint8_t *sub_face = (uint8_t *)(scratch + ((box_scratch(r.w, r.h) + 1) & ~(size_t)1));
    ag_fuse_point pts[AG_FACE_LANDMARKS];
    for (int i = 0; i < AG_FACE_LANDMARKS; i++)
        pts[i] = (ag_fuse_point){lm[i].x - r.x0, lm[i].y - r.y0};
    for (int y = 0; y < r.h; y++) {
        size_t o = (size_t)y * r.w, i = (size_t)(y + r.y0) * w + r.x0;
        memcpy(sub_face + o, face + i, (size_t)r.w);
        for (int x = 0; x < r.w; x++) {
            const float *c = rgb + (i + x) * 3;
            float *p = lab + (o + x) * 3;
            guide[o + x] = (0.299f * c[0] + 0.587f * c[1] + 0.114f * c[2]) / 255.0f;
            if (!sub_face[o + x]) { /* only the face is classified */
                p[0] = p[1] = p[2] = 0;
                continue;
            }
            memcpy(p, c, 3 * sizeof(float));
            ag_fuse_rgb_to_lab(p, 1);
            float chroma = sqrtf(p[1] * p[1] + p[2] * p[2]);
            p[1] = hue_degrees(p[2], p[1]), p[2] = chroma;
        }
    }
    uint8_t *sub_vis = vis; /* the sub-rectangle's, packed; spread into the window after */
    if (mark_occluders(sub_vis, lab, sub_face, r.w, r.h, pts, spare, scratch) == 0) {
        memset(vis, 255, (size_t)w * h);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        sub_vis[i] = sub_vis[i] ? 0 : 255;
    guided_filter(sub_vis, guide, r.w, r.h, radius, lab, scratch);
    /* spread the packed rows to their places (from the last: each moves to a later
     * offset), then everything outside the sub-rectangle is visible */
    for (int y = r.h - 1; y >= 0; y--)
        memmove(vis + (size_t)(y + r.y0) * w + r.x0, sub_vis + (size_t)y * r.w, (size_t)r.w);
    for (int y = 0; y < h; y++) {
        uint8_t *row = vis + (size_t)y * w;
        if (y < r.y0 || y >= r.y0 + r.h) {
            memset(row, 255, (size_t)w);
            continue;
        }
        memset(row, 255, (size_t)r.x0);
        memset(row + r.x0 + r.w, 255, (size_t)(w - r.x0 - r.w));
    }
    return 1;
}
