/*
 * fuse_warp.c - the piecewise-affine warp of face fusion: the triangles of the fused
 * geometry rasterised once into a map of triangle indices (each pixel centre in exactly one
 * triangle: the top-left rule on shared edges), then each image sampled through its own
 * per-triangle affine maps (bilinear: the maps here scale by about 1, so no prefilter),
 * and the polygon fill the masks are made of. All in the pixels of the fusion's window.
 */
#include "fuse_internal.h"

#include "../util/util_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

ag_affine ag_fuse_triangle_map(const ag_fuse_point *abc, const ag_fuse_point *pqr) {
    double ux = abc[1].x - abc[0].x, uy = abc[1].y - abc[0].y;
    double vx = abc[2].x - abc[0].x, vy = abc[2].y - abc[0].y;
    double det = ux * vy - vx * uy;
    if (!(fabs(det) > 1e-12))
        return (ag_affine){0, 0, 0, 0, 0, 0};
    /* L = [q - p, r - p] [u, v]^-1 */
    double i00 = vy / det, i01 = -vx / det, i10 = -uy / det, i11 = ux / det;
    double px = pqr[1].x - pqr[0].x, py = pqr[1].y - pqr[0].y;
    double qx = pqr[2].x - pqr[0].x, qy = pqr[2].y - pqr[0].y;
    ag_affine m = {px * i00 + qx * i10, px * i01 + qx * i11, 0,
                   py * i00 + qy * i10, py * i01 + qy * i11, 0};
    m.c = pqr[0].x - (m.a * abc[0].x + m.b * abc[0].y);
    m.f = pqr[0].y - (m.d * abc[0].x + m.e * abc[0].y);
    return m;
}

/* Whether a point with edge value e on the edge a -> b belongs to the triangle: inside, or
 * on an edge whose direction the rule owns (its reverse, the neighbour's, is not owned). */
static int owns(double e, double dx, double dy) {
    return e > 0 || (e == 0 && (dy > 0 || (dy == 0 && dx > 0)));
}

static void raster_triangle(int16_t *map, int w, int h, const ag_fuse_point *p, int16_t id) {
    double area = (p[1].x - p[0].x) * (p[2].y - p[0].y) - (p[1].y - p[0].y) * (p[2].x - p[0].x);
    if (!(area > 0)) /* degenerate (or not finite): covers no pixel centre */
        return;
    double x0 = fmin(p[0].x, fmin(p[1].x, p[2].x)), x1 = fmax(p[0].x, fmax(p[1].x, p[2].x));
    double y0 = fmin(p[0].y, fmin(p[1].y, p[2].y)), y1 = fmax(p[0].y, fmax(p[1].y, p[2].y));
    int i0 = (int)fmax(0, floor(x0 - 0.5)), i1 = (int)fmin(w - 1, ceil(x1 - 0.5));
    int j0 = (int)fmax(0, floor(y0 - 0.5)), j1 = (int)fmin(h - 1, ceil(y1 - 0.5));
    for (int j = j0; j <= j1; j++) {
        double cy = j + 0.5;
        for (int i = i0; i <= i1; i++) {
            double cx = i + 0.5;
            int in = 1;
            for (int e = 0; e < 3 && in; e++) {
                const ag_fuse_point *a = &p[e], *b = &p[(e + 1) % 3];
                double dx = b->x - a->x, dy = b->y - a->y;
                in = owns(dx * (cy - a->y) - dy * (cx - a->x), dx, dy);
            }
            if (in)
                map[(size_t)j * w + i] = id;
        }
    }
}

void ag_fuse_raster(int16_t *map, int w, int h, const ag_fuse_point *pt, const int (*tri)[3],
                    int count) {
    for (size_t i = 0; i < (size_t)w * h; i++)
        map[i] = -1;
    for (int t = 0; t < count; t++) {
        ag_fuse_point p[3] = {pt[tri[t][0]], pt[tri[t][1]], pt[tri[t][2]]};
        raster_triangle(map, w, h, p, (int16_t)t);
    }
}

void ag_fuse_sample(float *out, const int16_t *map, int w, int h, const ag_affine *m,
                    const ag_image *src) {
    int sw = src->width, sh = src->height, bands = src->bands;
    for (int y = 0; y < h; y++) {
        const int16_t *map_x = map + (size_t)y * w;
        float *out_x = out + (size_t)y * w * 3;
        for (int x = 0; x < w; x++) {
            if (map_x[x] < 0)
                continue;
            const ag_affine *t = &m[map_x[x]];
            double X = x + 0.5, Y = y + 0.5;
            double u = t->a * X + t->b * Y + t->c - 0.5, v = t->d * X + t->e * Y + t->f - 0.5;
            u = u < 0 ? 0 : u > sw - 1 ? sw - 1 : u;
            v = v < 0 ? 0 : v > sh - 1 ? sh - 1 : v;
            int u0 = (int)u, v0 = (int)v;
            int u1 = u0 + 1 < sw ? u0 + 1 : u0, v1 = v0 + 1 < sh ? v0 + 1 : v0;
            float fu = (float)(u - u0), fv = (float)(v - v0);
            const uint8_t *r0 = src->pixels + (size_t)v0 * sw * bands;
            const uint8_t *r1 = src->pixels + (size_t)v1 * sw * bands;
            for (int b = 0; b < 3; b++) {
                float top = r0[u0 * bands + b] + fu * (r0[u1 * bands + b] - r0[u0 * bands + b]);
                float bot = r1[u0 * bands + b] + fu * (r1[u1 * bands + b] - r1[u0 * bands + b]);
                out_x[x * 3 + b] = top + fv * (bot - top);
            }
        }
    }
}

static int cmp_double(const void *pa, const void *pb) {
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

void ag_fuse_fill_polygon(uint8_t *mask, int w, int h, const ag_fuse_point *pt, int n,
                          uint8_t value) {
    double xs[AG_FUSE_RING + 1];
    AG_ASSERT(n <= AG_FUSE_RING);
    double y0 = 1e300, y1 = -1e300;
    for (int i = 0; i < n; i++)
        y0 = fmin(y0, pt[i].y), y1 = fmax(y1, pt[i].y);
    int j0 = (int)fmax(0, floor(y0)), j1 = (int)fmin(h - 1, ceil(y1));
    for (int y = j0; y <= j1; y++) {
        double cy = y + 0.5;
        int k = 0;
        for (int i = 0; i < n; i++) {
            ag_fuse_point a = pt[i], b = pt[(i + 1) % n];
            if ((a.y <= cy) != (b.y <= cy))
                xs[k++] = a.x + (cy - a.y) / (b.y - a.y) * (b.x - a.x);
        }
        qsort(xs, (size_t)k, sizeof xs[0], cmp_double);
        for (int i = 0; i + 1 < k; i += 2) {
            int x0 = (int)ceil(xs[i] - 0.5), x1 = (int)ceil(xs[i + 1] - 0.5);
            x0 = x0 < 0 ? 0 : x0;
            x1 = x1 > w ? w : x1;
            if (x1 > x0)
                memset(mask + (size_t)y * w + x0, value, (size_t)(x1 - x0));
        }
    }
}

/* The distance from (x, y) to the segment a-b. */
static double segment_distance(ag_fuse_point a, ag_fuse_point b, double x, double y) {
    double vx = b.x - a.x, vy = b.y - a.y, wx = x - a.x, wy = y - a.y, vv = vx * vx + vy * vy;
    double u = vv > 0 ? (vx * wx + vy * wy) / vv : 0;
    u = u < 0 ? 0 : u > 1 ? 1 : u;
    return hypot(wx - u * vx, wy - u * vy);
}

void ag_fuse_edge_ramp(uint8_t *alpha, const uint8_t *inside, int w, int h, const ag_fuse_point *pt,
                       int n, float ramp, float *dist) {
    size_t count = (size_t)w * h;
    for (size_t i = 0; i < count; i++)
        dist[i] = ramp;
    /* Each edge updates only the pixels within `ramp` of it: the cost is the outline's
     * length times the ramp, not the window's area times the edges. */
    for (int k = 0; k < n; k++) {
        ag_fuse_point a = pt[k], b = pt[(k + 1) % n];
        int x0 = (int)fmax(0, floor(fmin(a.x, b.x) - (double)ramp - 1));
        int x1 = (int)fmin(w - 1, ceil(fmax(a.x, b.x) + (double)ramp));
        int y0 = (int)fmax(0, floor(fmin(a.y, b.y) - (double)ramp - 1));
        int y1 = (int)fmin(h - 1, ceil(fmax(a.y, b.y) + (double)ramp));
        for (int y = y0; y <= y1; y++)
            for (int x = x0; x <= x1; x++) {
                size_t i = (size_t)y * w + x;
                if (!inside[i])
                    continue;
                float d = (float)segment_distance(a, b, x + 0.5, y + 0.5);
                dist[i] = d < dist[i] ? d : dist[i];
            }
    }
    for (size_t i = 0; i < count; i++) {
        float t = inside[i] ? dist[i] / ramp : 0; /* smoothstep of the depth inside */
        alpha[i] = (uint8_t)(255.0f * t * t * (3 - 2 * t) + 0.5f);
    }
}
