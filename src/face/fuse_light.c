/*
 * fuse_light.c - the target's shading on the fused face (issue 31 item 5): the light on a
 * face is its low frequencies, its detail the rest. The warped source's lightness (L* + 16,
 * nearly proportional to the cube root of luminance: a gain there is a gain on luminance)
 * is multiplied by a smooth gain, the target's local skin mean over the source's. Both
 * local means are normalised box means over the skin only (the eyes with their lids and
 * sockets, the mouth and the occluders left out, so the gain over an eye is the skin's round
 * it and the eye keeps its brightness against the cheeks), on a grid of cells of a few
 * pixels, blurred twice (a tent), and interpolated bilinearly to every pixel. A face lit
 * from the left in the source so loses that light and takes the target's.
 */
#include "fuse_internal.h"

#include <math.h>
#include <string.h>

/* In place, the (2r + 1)-box sum of a grid (gh, gw) along rows then columns; tmp: gw + gh. */
static void box_sum(float *g, int gw, int gh, int r, float *tmp) {
    for (int y = 0; y < gh; y++) {
        float *row = g + (size_t)y * gw;
        double s = 0;
        for (int x = 0; x < gw + r; x++) {
            if (x < gw)
                s += (double)row[x];
            if (x - r >= 0)
                tmp[x - r] = (float)s;
            if (x - 2 * r >= 0)
                s -= (double)row[x - 2 * r];
        }
        memcpy(row, tmp, sizeof(float) * (size_t)gw);
    }
    for (int x = 0; x < gw; x++) {
        double s = 0;
        for (int y = 0; y < gh + r; y++) {
            if (y < gh)
                s += (double)g[(size_t)y * gw + x];
            if (y - r >= 0)
                tmp[y - r] = (float)s;
            if (y - 2 * r >= 0)
                s -= (double)g[(size_t)(y - 2 * r) * gw + x];
        }
        for (int y = 0; y < gh; y++)
            g[(size_t)y * gw + x] = tmp[y];
    }
}

size_t ag_fuse_relight_floats(int w, int h, int cell) {
    size_t gw = (size_t)(w + cell - 1) / cell, gh = (size_t)(h + cell - 1) / cell;
    return 3 * gw * gh + gw + gh;
}

/* The gain: the target's local skin sum over the source's, each with a prior (tg, sg) that
 * makes it tend to the global gain where little skin is near, raised to `trust` about the
 * global gain; at most 3x either way. */
static float cell_gain(double t, double s, double tg, double sg, double global, double trust) {
    double g = global * pow((t + tg) / (s + sg) / global, trust);
    return (float)(g > 3 ? 3 : g < 1.0 / 3 ? 1.0 / 3 : g);
}

/* How far the local gains are trusted: 1 on an uncovered face, less as occluders cover more
 * of it, 0 from a tenth. Under hair whose thin tips the occluder search misses, the fused
 * face shows through; with the local light of the skin beside them it stands out from the
 * hair more than with the global gain (fuse_test.sh's occluders_kept_ratio_1 on
 * obama_hair.png: 6.16 grey levels with the local gain, 5.97 with the global one, bound 6). */
#define COVERED_OFF 0.1
static double trust(const uint8_t *face, const uint8_t *visible, size_t n) {
    size_t in = 0, covered = 0;
    for (size_t i = 0; i < n; i++)
        in += face[i] != 0, covered += face[i] && visible[i] < 128;
    double t = in ? 1 - (double)covered / (double)in / COVERED_OFF : 1;
    return t < 0 ? 0 : t;
}

static int in_hole(const float (*holes)[4], int n, float x, float y) {
    for (int k = 0; k < n; k++) {
        float u = (x - holes[k][0]) / holes[k][2], v = (y - holes[k][1]) / holes[k][3];
        if (u * u + v * v < 1)
            return 1;
    }
    return 0;
}

void ag_fuse_relight(float *src, const float *tgt, const uint8_t *skin, const uint8_t *face,
                     const uint8_t *visible, const uint8_t *work, int w, int h,
                     const float (*holes)[4], int nholes, int cell, int radius, float *buf) {
    int gw = (w + cell - 1) / cell, gh = (h + cell - 1) / cell;
    size_t m = (size_t)gw * gh;
    float *ts = buf, *ss = buf + m, *tmp = buf + 2 * m;
    memset(buf, 0, sizeof(float) * 2 * m);
    double tsum = 0, ssum = 0, count = 0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            size_t i = (size_t)y * w + x, c = (size_t)(y / cell) * gw + x / cell;
            if (!skin[i] || in_hole(holes, nholes, x + 0.5f, y + 0.5f))
                continue;
            float lt = tgt[i * 3] + 16, ls = src[i * 3] + 16;
            ts[c] += lt, ss[c] += ls, tsum += (double)lt, ssum += (double)ls, count++;
        }
    if (count == 0)
        return;
    for (int pass = 0; pass < 2; pass++)
        box_sum(ts, gw, gh, radius, tmp), box_sum(ss, gw, gh, radius, tmp);
    /* The prior: a tenth of the pixels under a whole tent (two boxes of (2r + 1)^2 cells of
     * cell^2 px) at the global means. */
    double side = 2.0 * radius + 1, full = side * side * side * side * cell * cell;
    double tg = 0.1 * full * tsum / count, sg = 0.1 * full * ssum / count;
    double global = tsum / ssum, t = trust(face, visible, (size_t)w * h);
    for (size_t i = 0; i < m; i++)
        ts[i] = cell_gain(ts[i], ss[i], tg, sg, global, t);
    for (int y = 0; y < h; y++) {
        float v = (y + 0.5f) / cell - 0.5f;
        v = v < 0 ? 0 : v > gh - 1 ? (float)(gh - 1) : v;
        int v0 = (int)v, v1 = v0 + 1 < gh ? v0 + 1 : v0;
        float fv = v - v0;
        for (int x = 0; x < w; x++) {
            size_t i = (size_t)y * w + x;
            if (!work[i])
                continue;
            float u = (x + 0.5f) / cell - 0.5f;
            u = u < 0 ? 0 : u > gw - 1 ? (float)(gw - 1) : u;
            int u0 = (int)u, u1 = u0 + 1 < gw ? u0 + 1 : u0;
            float fu = u - u0;
            float g = (1 - fv) * ((1 - fu) * ts[v0 * gw + u0] + fu * ts[v0 * gw + u1]) +
                      fv * ((1 - fu) * ts[v1 * gw + u0] + fu * ts[v1 * gw + u1]);
            src[i * 3] = (src[i * 3] + 16) * g - 16;
        }
    }
}
