/*
 * fuse_geometry.c - the geometry of face fusion: the similarity that puts the source's
 * landmarks onto the target's (Umeyama's closed form of Procrustes, in 2-D), and the
 * Delaunay triangulation (Bowyer-Watson) of the fused landmarks plus the ring round the face
 * that the piecewise-affine warp (fuse_warp.c) runs over. A triangulation is computed per
 * fusion on the fused geometry itself, so its triangles are never folded there.
 */
#include "fuse_internal.h"

#include <math.h>
#include <stdlib.h>

ag_affine ag_fuse_similarity(const ag_fuse_point *from, const ag_fuse_point *to, int n) {
    double fx = 0, fy = 0, tx = 0, ty = 0;
    for (int i = 0; i < n; i++)
        fx += from[i].x, fy += from[i].y, tx += to[i].x, ty += to[i].y;
    fx /= n, fy /= n, tx /= n, ty /= n;
    /* With centred points, the best rotation-scale (a, b) (as the complex number a + ib)
     * is sum(conj(f) t) / sum |f|^2. */
    double sxx = 0, sxy = 0, var = 0;
    for (int i = 0; i < n; i++) {
        double ux = from[i].x - fx, uy = from[i].y - fy, vx = to[i].x - tx, vy = to[i].y - ty;
        sxx += ux * vx + uy * vy;
        sxy += ux * vy - uy * vx;
        var += ux * ux + uy * uy;
    }
    double a = var > 0 ? sxx / var : 1.0, b = var > 0 ? sxy / var : 0.0;
    return (ag_affine){a, -b, tx - (a * fx - b * fy), b, a, ty - (b * fx + a * fy)};
}

ag_fuse_point ag_fuse_apply(const ag_affine *m, ag_fuse_point p) {
    return (ag_fuse_point){m->a * p.x + m->b * p.y + m->c, m->d * p.x + m->e * p.y + m->f};
}

static int by_xy(const void *pa, const void *pb) {
    const ag_fuse_point *a = pa, *b = pb;
    return a->x < b->x ? -1 : a->x > b->x ? 1 : (a->y > b->y) - (a->y < b->y);
}

static double cross3(ag_fuse_point o, ag_fuse_point a, ag_fuse_point b) {
    return (a.x - o.x) * (b.y - o.y) - (a.y - o.y) * (b.x - o.x);
}

int ag_fuse_hull(ag_fuse_point *pt, int n, ag_fuse_point *hull) {
    if (n < 3) {
        for (int i = 0; i < n; i++)
            hull[i] = pt[i];
        return n;
    }
    qsort(pt, (size_t)n, sizeof *pt, by_xy); /* Andrew's monotone chain */
    int k = 0;
    for (int i = 0; i < n; i++) {
        while (k >= 2 && cross3(hull[k - 2], hull[k - 1], pt[i]) <= 0)
            k--;
        hull[k++] = pt[i];
    }
    for (int i = n - 2, lower = k + 1; i >= 0; i--) {
        while (k >= lower && cross3(hull[k - 2], hull[k - 1], pt[i]) <= 0)
            k--;
        hull[k++] = pt[i];
    }
    return k - 1; /* the last is the first again */
}

double ag_fuse_ray_exit(const ag_fuse_point *hull, int n, ag_fuse_point c, ag_fuse_point u) {
    double best = INFINITY;
    for (int i = 0; i < n; i++) {
        ag_fuse_point a = hull[i], b = hull[(i + 1) % n];
        double nx = b.y - a.y, ny = a.x - b.x; /* the edge's outward normal */
        double along = nx * u.x + ny * u.y;
        if (along > 0)
            best = fmin(best, (nx * (a.x - c.x) + ny * (a.y - c.y)) / along);
    }
    return isfinite(best) && best > 0 ? best : 0;
}

/* A triangle of the working set with its circumcircle. */
typedef struct bw_tri {
    int v[3];
    double cx, cy, r2;
} bw_tri;

static double orient(ag_fuse_point a, ag_fuse_point b, ag_fuse_point c) {
    return (b.x - a.x) * (c.y - a.y) - (b.y - a.y) * (c.x - a.x);
}

static bw_tri make_tri(const ag_fuse_point *p, int i, int j, int k) {
    if (orient(p[i], p[j], p[k]) < 0) { /* one orientation throughout */
        int t = j;
        j = k, k = t;
    }
    bw_tri t = {{i, j, k}, 0, 0, -1};
    double ax = p[i].x, ay = p[i].y, bx = p[j].x - ax, by = p[j].y - ay;
    double cx = p[k].x - ax, cy = p[k].y - ay, d = 2 * (bx * cy - by * cx);
    if (d != 0) {
        double b2 = bx * bx + by * by, c2 = cx * cx + cy * cy;
        double ux = (cy * b2 - by * c2) / d, uy = (bx * c2 - cx * b2) / d;
        t.cx = ax + ux, t.cy = ay + uy, t.r2 = ux * ux + uy * uy;
    } else { /* collinear: every later point "inside", so it is replaced at once */
        t.r2 = INFINITY;
    }
    return t;
}

/* Insert point `pi` into the working set: remove the triangles whose circumcircle holds it,
 * fan the hole's boundary to it. Returns the new triangle count. */
static int insert_point(const ag_fuse_point *p, int pi, bw_tri *tris, int count) {
    int edges[3 * AG_FUSE_MAX_TRIANGLES][2], ne = 0, kept = 0;
    for (int t = 0; t < count; t++) {
        double dx = p[pi].x - tris[t].cx, dy = p[pi].y - tris[t].cy;
        if (dx * dx + dy * dy < tris[t].r2) {
            for (int e = 0; e < 3; e++) {
                int a = tris[t].v[e], b = tris[t].v[(e + 1) % 3], shared = -1;
                for (int k = 0; k < ne && shared < 0; k++)
                    if (edges[k][0] == b && edges[k][1] == a)
                        shared = k;
                if (shared >= 0) { /* interior edge of the hole: drop both copies */
                    edges[shared][0] = edges[ne - 1][0], edges[shared][1] = edges[ne - 1][1];
                    ne--;
                } else {
                    edges[ne][0] = a, edges[ne][1] = b, ne++;
                }
            }
        } else {
            tris[kept++] = tris[t];
        }
    }
    for (int k = 0; k < ne && kept < AG_FUSE_MAX_TRIANGLES; k++)
        tris[kept++] = make_tri(p, edges[k][0], edges[k][1], pi);
    return kept;
}

void ag_fuse_triangulate(const ag_fuse_point *pt, int n, int (*tri)[3], int *count) {
    ag_fuse_point p[AG_FUSE_POINTS + 3];
    bw_tri tris[AG_FUSE_MAX_TRIANGLES];
    n = n > AG_FUSE_POINTS ? AG_FUSE_POINTS : n;
    double x0 = 1e300, y0 = 1e300, x1 = -1e300, y1 = -1e300;
    for (int i = 0; i < n; i++) {
        p[i] = pt[i];
        x0 = fmin(x0, pt[i].x), x1 = fmax(x1, pt[i].x);
        y0 = fmin(y0, pt[i].y), y1 = fmax(y1, pt[i].y);
    }
    /* The super triangle: far enough that no circumcircle through it bends the hull. */
    double cx = (x0 + x1) / 2, cy = (y0 + y1) / 2, r = fmax(x1 - x0, y1 - y0) * 64 + 64;
    p[n] = (ag_fuse_point){cx - 2 * r, cy - r};
    p[n + 1] = (ag_fuse_point){cx + 2 * r, cy - r};
    p[n + 2] = (ag_fuse_point){cx, cy + 2 * r};
    int nt = 1;
    tris[0] = make_tri(p, n, n + 1, n + 2);
    for (int i = 0; i < n; i++) {
        int dup = 0;
        for (int j = 0; j < i && !dup; j++)
            dup = fabs(p[i].x - p[j].x) < 1e-3 && fabs(p[i].y - p[j].y) < 1e-3;
        if (!dup)
            nt = insert_point(p, i, tris, nt);
    }
    int out = 0;
    for (int t = 0; t < nt; t++) {
        const int *v = tris[t].v;
        if (v[0] >= n || v[1] >= n || v[2] >= n)
            continue;
        tri[out][0] = v[0], tri[out][1] = v[1], tri[out][2] = v[2];
        out++;
    }
    *count = out;
}
