/*
 * fuse_internal.h - the stages of face fusion (fuse.c drives them): geometry
 * (fuse_geometry.c: Procrustes, the ring, Delaunay), the piecewise-affine warp
 * (fuse_warp.c), colour in CIE Lab (fuse_color.c) and the Poisson solver (fuse_poisson.c).
 * tests/test_fuse.c checks each against a known answer.
 */
#ifndef AG_FUSE_INTERNAL_H
#define AG_FUSE_INTERNAL_H

#include "face_internal.h"

#include <stddef.h>
#include <stdint.h>

#define AG_FUSE_RING AG_FACE_OVAL_COUNT /* one ring point outside each oval landmark */
#define AG_FUSE_POINTS (AG_FACE_LANDMARKS + AG_FUSE_RING)
/* A triangulation of n points has at most 2n - 5 triangles; Bowyer-Watson's working set
 * (with the 3 super-triangle vertices) at most 2 (n + 3) - 5. */
#define AG_FUSE_MAX_TRIANGLES (2 * (AG_FUSE_POINTS + 3))

typedef struct ag_fuse_point {
    double x, y;
} ag_fuse_point;

/* ---- geometry (fuse_geometry.c) ---- */

/* The similarity (rotation, uniform scale, translation) m minimising sum |m(from_i) - to_i|^2
 * over n points (Umeyama's closed form; no reflection). */
ag_affine ag_fuse_similarity(const ag_fuse_point *from, const ag_fuse_point *to, int n);

ag_fuse_point ag_fuse_apply(const ag_affine *m, ag_fuse_point p);

/* The source's face window (x0, y0, x1, y1): its landmarks' box with half its size around
 * it, whole pixels, inside width x height (fuse.c). */
void ag_fuse_source_window(const ag_face *f, int width, int height, double box[4]);

/*
 * The convex hull of pt[0..n) (sorted in place) into hull[0..count), count returned;
 * hull needs n + 1 entries. Counter-clockwise with y up: each edge has the hull on its
 * left, cross(b - a, p - a) >= 0 for every point p.
 */
int ag_fuse_hull(ag_fuse_point *pt, int n, ag_fuse_point *hull);

/* How far the ray from c along the unit vector u runs inside the convex polygon hull[0..n)
 * (as ag_fuse_hull makes it; c inside): the distance to where it leaves. */
double ag_fuse_ray_exit(const ag_fuse_point *hull, int n, ag_fuse_point c, ag_fuse_point u);

/*
 * Delaunay triangulation (Bowyer-Watson) of pt[0..n), n <= AG_FUSE_POINTS: tri[0..*count)
 * index pt, counter-clockwise in image coordinates (y down: clockwise on screen). Points
 * within 1e-3 of one already inserted are skipped (a closed mouth's two lip lines): they
 * are vertices of no triangle. The triangles tile the convex hull of the points inserted.
 */
void ag_fuse_triangulate(const ag_fuse_point *pt, int n, int (*tri)[3], int *count);

/* ---- piecewise-affine warp (fuse_warp.c) ---- */

/*
 * map (h, w) <- the index of the triangle of `tri` (vertices `pt`, in the map's pixel
 * coordinates: pixel i has its centre at i + 0.5) whose interior holds each pixel centre,
 * -1 for none; an edge-ownership rule gives a pixel on a shared edge to one triangle.
 */
void ag_fuse_raster(int16_t *map, int w, int h, const ag_fuse_point *pt, const int (*tri)[3],
                    int count);

/*
 * out (h, w, 3) <- src bilinearly sampled (pixel centres at +0.5, edges clamped) through the
 * per-triangle affine maps `m` (window pixel centre -> src coordinates) at pixels whose
 * map entry is >= 0; other pixels are left as they are.
 */
void ag_fuse_sample(float *out, const int16_t *map, int w, int h, const ag_affine *m,
                    const ag_image *src);

/* The affine map of triangle (a, b, c) onto (p, q, r); singular triangles give all zeros. */
ag_affine ag_fuse_triangle_map(const ag_fuse_point *abc, const ag_fuse_point *pqr);

/* mask (h, w) <- value inside the polygon pt[0..n) (even-odd, pixel centres), others kept. */
void ag_fuse_fill_polygon(uint8_t *mask, int w, int h, const ag_fuse_point *pt, int n,
                          uint8_t value);

/*
 * alpha (h, w) <- the blend's edge: 0 outside (where `inside` is 0), rising inside as a
 * smoothstep of the distance from each pixel centre to the polygon pt[0..n) (sub-pixel: no
 * staircase of the raster `inside` was drawn on) to 255 at `ramp` px and beyond. dist:
 * w * h floats of scratch.
 */
void ag_fuse_edge_ramp(uint8_t *alpha, const uint8_t *inside, int w, int h, const ag_fuse_point *pt,
                       int n, float ramp, float *dist);

/* ---- colour (fuse_color.c) ---- */

/* In place, n pixels of 3 floats: sRGB 0..255 <-> CIE L*a*b* (D65). */
void ag_fuse_rgb_to_lab(float *px, size_t n);
void ag_fuse_lab_to_rgb(float *px, size_t n);

/* Mean and standard deviation of each channel over pixels whose mask is non-zero; returns
 * their count. */
size_t ag_fuse_stats(const float *px, const uint8_t *mask, size_t n, double mean[3], double sd[3]);

/* px <- (px - from_mean) / from_sd * to_sd + to_mean, per channel (the ratio of spreads at
 * most 3, a spread under 1 taken as 1), on pixels whose mask is non-zero (mask NULL: all). */
void ag_fuse_transfer(float *px, const uint8_t *mask, size_t n, const double from_mean[3],
                      const double from_sd[3], const double to_mean[3], const double to_sd[3]);

/* The fused face's skin given the target's: a and b as ag_fuse_transfer, the lightness by
 * the gain on L* + 16 that moves the mean (at most 3x either way), so brightness ratios
 * within the face (the eyes and mouth against the cheeks) stay the source's. */
void ag_fuse_match_skin(float *px, const uint8_t *mask, size_t n, const double from_mean[3],
                        const double from_sd[3], const double to_mean[3], const double to_sd[3]);

/* Skin smoothing of the lightness (channel 0) of lab (h, w, 3) where mask != 0: a box
 * blur of radius r blended in by amount, less across edges. tmp: w * h + h floats. */
void ag_fuse_smooth(float *lab, const uint8_t *mask, int w, int h, int r, float amount, float *tmp);

/* ---- enhancement (fuse_enhance.c) ---- */

/* Which enhancement the options ask for: AG_FUSE_ENHANCE_NONE, _RESTORE or _UPSCALE (auto
 * resolved by the engines set), -1 when the one asked for has no engine. */
int ag_fuse_enhance_kind(const ag_fuse_options *o);

/* *out, *face <- the source sharpened by `kind` (RESTORE or UPSCALE), its face's landmarks,
 * box and quad in the new pixels; an upscale's result at most max_pixels. */
int ag_fuse_enhance_source(const ag_image *src, const ag_face *sf, const ag_fuse_options *o,
                           int kind, size_t max_pixels, ag_image *out, ag_face *face,
                           ag_error *err);

/* ---- shading (fuse_light.c) ---- */

/*
 * The target's low-frequency shading on the source (both (h, w, 3) Lab, on the same fused
 * geometry): src's L* + 16 times the gain (the target's local skin mean over the source's,
 * box means over `skin` less the ellipses holes[0..nholes) (centre x, y, radii x, y: the
 * eyes' sockets, the mouth), on a grid of cell x cell px, radius `radius` cells, twice),
 * at pixels whose `work` is non-zero; the more of `face` is not `visible` (occluders), the
 * nearer the gain stays to the global one. buf: ag_fuse_relight_floats(w, h, cell) floats.
 */
void ag_fuse_relight(float *src, const float *tgt, const uint8_t *skin, const uint8_t *face,
                     const uint8_t *visible, const uint8_t *work, int w, int h,
                     const float (*holes)[4], int nholes, int cell, int radius, float *buf);
size_t ag_fuse_relight_floats(int w, int h, int cell);

/* ---- Poisson (fuse_poisson.c) ---- */

/*
 * Solve Laplace's equation on the pixels of d (h, w, 3) whose `free` entry is non-zero,
 * with the others fixed (Dirichlet): multigrid V-cycles (red-black Gauss-Seidel smoothing,
 * 2 x 2 restriction, bilinear prolongation) until the largest residual is under tol or
 * max_cycles ran. The grid's outer rows and columns are fixed whatever `free` says.
 * Returns 0 or AG_E_NOMEM; *cycles and *residual say how far it got.
 */
int ag_fuse_laplace(float *d, const uint8_t *free_px, int w, int h, float tol, int max_cycles,
                    int *cycles, float *residual, ag_error *err);

/* ---- visibility (fuse_visible.c) ---- */

/*
 * vis (h, w) <- 255 where the target's face is visible, 0 on what covers it (hair, a hand:
 * not the target's skin, reaching in from the edge of face), soft at the occluders' own
 * edges; 255 everywhere when nothing covers it (returns 0, else 1). rgb (h, w, 3): the
 * target; face: the oval's mask; lm: its 468 landmarks in the same pixels.
 * buf: ag_fuse_visible_floats(w, h) floats.
 */
int ag_fuse_visible(uint8_t *vis, const float *rgb, const uint8_t *face, int w, int h,
                    const ag_fuse_point *lm, float *buf);
size_t ag_fuse_visible_floats(int w, int h);

/* FaceMesh's inner lip line and eye openings, in order round each (fuse.c takes them whole
 * from one face; test_fuse checks it). */
extern const int ag_fuse_inner_lips[20], ag_fuse_eye_right[16], ag_fuse_eye_left[16];

#endif
