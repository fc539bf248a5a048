/*
 * fuse_poisson.c - the Poisson solve of seamless blending. Blending a face F into the
 * target T with F's gradients and T's values on the region's edge is f = F + d with d
 * harmonic inside and d = T - F on the edge (Perez et al. 2003, in correction form), so
 * the solver here is Laplace's equation with Dirichlet values on an arbitrary mask, three
 * channels at once.
 *
 * Multigrid, cell-centred: every level solves  4 x_p - sum of its 4 neighbours = f_p  on its
 * free pixels (fixed neighbours: their values on the finest level, 0 on the coarser ones,
 * which solve for corrections). Red-black Gauss-Seidel smooths; a coarse pixel is free when
 * its 2 x 2 children all are, its right-hand side the sum of their residuals (the coarse
 * spacing is twice: (2h)^2 = 4 h^2 times the mean); bilinear prolongation (9/16, 3/16,
 * 3/16, 1/16) adds the correction back. One allocation holds every level.
 */
#include "fuse_internal.h"

#include "../util/util_internal.h"

#include <math.h>
#include <string.h>

#define MAX_LEVELS 12
#define PRE_SWEEPS 2
#define POST_SWEEPS 2
#define COARSE_SWEEPS 40

typedef struct level {
    int w, h;
    float *x;        /* (h, w, 3): the unknowns (finest: the caller's d) */
    float *f;        /* (h, w, 3): right-hand side; NULL on the finest (0) */
    uint8_t *free_p; /* (h, w) */
} level;

static void sweep(level *l, int parity) {
    int w = l->w;
    for (int y = 1; y < l->h - 1; y++) {
        const uint8_t *free_x = l->free_p + (size_t)y * w;
        float *x_row = l->x + (size_t)y * w * 3;
        const float *f_row = l->f ? l->f + (size_t)y * w * 3 : NULL;
        for (int x = 1 + ((y + parity) & 1); x < w - 1; x += 2) {
            if (!free_x[x])
                continue;
            float *p = x_row + (size_t)x * 3;
            const float *up = p - (size_t)w * 3, *dn = p + (size_t)w * 3;
            for (int c = 0; c < 3; c++) {
                float s = p[c - 3] + p[c + 3] + up[c] + dn[c];
                p[c] = 0.25f * (f_row ? s + f_row[x * 3 + c] : s);
            }
        }
    }
}

static void smooth(level *l, int sweeps) {
    for (int i = 0; i < sweeps; i++)
        sweep(l, 0), sweep(l, 1);
}

/* The residual at pixel offset o (free): f + neighbours - 4 x. */
static inline void residual_at(const level *l, size_t o, float r[3]) {
    const float *p = l->x + o * 3, *up = p - (size_t)l->w * 3, *dn = p + (size_t)l->w * 3;
    for (int c = 0; c < 3; c++)
        r[c] = (l->f ? l->f[o * 3 + c] : 0.0f) + p[c - 3] + p[c + 3] + up[c] + dn[c] - 4 * p[c];
}

static float max_residual(const level *l) {
    float worst = 0;
    for (int y = 1; y < l->h - 1; y++)
        for (int x = 1; x < l->w - 1; x++) {
            size_t o = (size_t)y * l->w + x;
            if (!l->free_p[o])
                continue;
            float r[3];
            residual_at(l, o, r);
            for (int c = 0; c < 3; c++)
                worst = fmaxf(worst, fabsf(r[c]));
        }
    return worst;
}

/* coarse->f <- the sums of the fine residuals, coarse->x <- 0. */
static void restrict_residual(const level *fine, level *coarse) {
    memset(coarse->x, 0, sizeof(float) * 3 * (size_t)coarse->w * coarse->h);
    for (int y = 0; y < coarse->h; y++)
        for (int x = 0; x < coarse->w; x++) {
            size_t o = (size_t)y * coarse->w + x;
            float *f = coarse->f + o * 3;
            f[0] = f[1] = f[2] = 0;
            if (!coarse->free_p[o])
                continue;
            for (int k = 0; k < 4; k++) {
                float r[3];
                residual_at(fine, (size_t)(2 * y + (k >> 1)) * fine->w + 2 * x + (k & 1), r);
                f[0] += r[0], f[1] += r[1], f[2] += r[2];
            }
        }
}

static inline const float *coarse_at(const level *c, int x, int y) {
    static const float zero[3] = {0, 0, 0};
    if (x < 0 || y < 0 || x >= c->w || y >= c->h || !c->free_p[(size_t)y * c->w + x])
        return zero;
    return c->x + ((size_t)y * c->w + x) * 3;
}

static void prolong_add(level *fine, const level *coarse) {
    for (int y = 1; y < fine->h - 1; y++)
        for (int x = 1; x < fine->w - 1; x++) {
            size_t o = (size_t)y * fine->w + x;
            if (!fine->free_p[o])
                continue;
            int cx = x >> 1, cy = y >> 1, sx = x & 1 ? 1 : -1, sy = y & 1 ? 1 : -1;
            const float *a = coarse_at(coarse, cx, cy), *b = coarse_at(coarse, cx + sx, cy);
            const float *c = coarse_at(coarse, cx, cy + sy);
            const float *d = coarse_at(coarse, cx + sx, cy + sy);
            for (int k = 0; k < 3; k++)
                fine->x[o * 3 + k] += 0.5625f * a[k] + 0.1875f * (b[k] + c[k]) + 0.0625f * d[k];
        }
}

static void v_cycle(level *levels, int count, int l) {
    if (l == count - 1) {
        smooth(&levels[l], COARSE_SWEEPS);
        return;
    }
    smooth(&levels[l], PRE_SWEEPS);
    restrict_residual(&levels[l], &levels[l + 1]);
    v_cycle(levels, count, l + 1);
    prolong_add(&levels[l], &levels[l + 1]);
    smooth(&levels[l], POST_SWEEPS);
}

/* The coarse levels' sizes and masks; returns the level count. */
static int plan_levels(level *levels, int w, int h, size_t *floats, size_t *bytes) {
    int count = 1;
    levels[0].w = w, levels[0].h = h;
    *floats = 0, *bytes = (size_t)w * h;
    while (count < MAX_LEVELS && levels[count - 1].w >= 8 && levels[count - 1].h >= 8) {
        level *c = &levels[count++];
        c->w = levels[count - 2].w / 2, c->h = levels[count - 2].h / 2;
        *floats += (size_t)6 * c->w * c->h;
        *bytes += (size_t)c->w * c->h;
    }
    return count;
}

static void coarsen_mask(const level *fine, level *coarse) {
    for (int y = 0; y < coarse->h; y++)
        for (int x = 0; x < coarse->w; x++) {
            const uint8_t *f = fine->free_p + (size_t)(2 * y) * fine->w + 2 * x;
            int all = f[0] && f[1] && f[fine->w] && f[fine->w + 1];
            int edge = x == 0 || y == 0 || x == coarse->w - 1 || y == coarse->h - 1;
            coarse->free_p[(size_t)y * coarse->w + x] = (uint8_t)(all && !edge);
        }
}

int ag_fuse_laplace(float *d, const uint8_t *free_px, int w, int h, float tol, int max_cycles,
                    int *cycles, float *residual, ag_error *err) {
    level levels[MAX_LEVELS];
    memset(levels, 0, sizeof levels);
    size_t floats, bytes;
    int count = plan_levels(levels, w, h, &floats, &bytes);
    float *buf = ag_malloc(floats * sizeof(float) + bytes);
    if (!buf)
        return ag_error_set(err, AG_E_NOMEM, "fuse: out of memory for the Poisson solve");
    float *next = buf;
    uint8_t *masks = (uint8_t *)(buf + floats);
    levels[0].x = d, levels[0].f = NULL, levels[0].free_p = masks;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            size_t o = (size_t)y * w + x;
            masks[o] = (uint8_t)(free_px[o] && x > 0 && y > 0 && x < w - 1 && y < h - 1);
        }
    masks += (size_t)w * h;
    for (int l = 1; l < count; l++) {
        levels[l].x = next, levels[l].f = next + (size_t)3 * levels[l].w * levels[l].h;
        next += (size_t)6 * levels[l].w * levels[l].h;
        levels[l].free_p = masks;
        masks += (size_t)levels[l].w * levels[l].h;
        coarsen_mask(&levels[l - 1], &levels[l]);
    }
    float r = max_residual(&levels[0]);
    int done = 0;
    while (done < max_cycles && r > tol) {
        v_cycle(levels, count, 0);
        r = max_residual(&levels[0]);
        done++;
    }
    ag_free(buf);
    *cycles = done;
    *residual = r;
    return AG_OK;
}
