/*
 * fuse.c - face fusion (ag_face_fuse): a source face fused into a target photo from the
 * two faces' FaceMesh landmarks, as the classical face-fusion tools do, in stages:
 *
 *   geometry  the source's landmarks similarity-aligned onto the target's, interpolated with
 *             them by shape_ratio; a ring of fixed points two feathers round the convex hull
 *             of both (the face region), so the warp is the identity on and beyond it;
 *             a Delaunay triangulation of the fused landmarks and the ring (fuse_geometry.c)
 *   warp      both images onto the fused geometry, per triangle (fuse_warp.c)
 *   colour    in Lab: the warped source's skin given the warped target's mean and spread,
 *             textures mixed by texture_ratio, adjustments, smoothing (fuse_color.c)
 *   blend     Poisson over the fused face oval (fuse_poisson.c), a feathered edge
 *
 * Everything runs in the ring's bounding window of the target; one allocation per call
 * holds every buffer. Pixels outside the ring's triangles are never written.
 */
#include "fuse_internal.h"

#include "../util/util_internal.h"

#include <math.h>
#include <string.h>

#define MIN_FACE_PX 64 /* a face's box side under this is refused: too few pixels to fuse */

/* FaceMesh's inner lip line (the mouth's inside) and the eye openings, in order round each. */
const int ag_fuse_inner_lips[20] = {78,  191, 80,  81,  82,  13, 312, 311, 310, 415,
                                    308, 324, 318, 402, 317, 14, 87,  178, 88,  95};
const int ag_fuse_eye_right[16] = {33,  246, 161, 160, 159, 158, 157, 173,
                                   133, 155, 154, 153, 145, 144, 163, 7};
const int ag_fuse_eye_left[16] = {362, 398, 384, 385, 386, 387, 388, 466,
                                  263, 249, 390, 373, 374, 380, 381, 382};

void ag_fuse_options_init(ag_fuse_options *o) {
    memset(o, 0, sizeof *o);
    o->shape_ratio = o->texture_ratio = 0.7f;
    o->mode = AG_FUSE_NORMAL;
    o->keep_occluders = 1;
    o->relight = 1;
    o->pose = 1;
    o->max_window_pixels = AG_FUSE_WINDOW_PIXELS;
}

/* Every buffer of one fusion, over the window (w, h) at image pixel (x0, y0). */
typedef struct fuse_work {
    int x0, y0, w, h;
    ag_fuse_point fused[AG_FUSE_POINTS];                    /* window coordinates */
    ag_fuse_point tgt[AG_FUSE_POINTS], src[AG_FUSE_POINTS]; /* each image's coordinates */
    int tri[AG_FUSE_MAX_TRIANGLES][3];
    int ntri;
    ag_affine to_tgt[AG_FUSE_MAX_TRIANGLES], to_src[AG_FUSE_MAX_TRIANGLES];
    /* the source's share of the texture over each triangle, a plane (x, y, 1) in window
     * pixels: 1 where the source is not foreshortened, less where it is (pose_weights) */
    float share[AG_FUSE_MAX_TRIANGLES][3];
    int16_t *map;     /* (h, w): triangle index, -1 outside */
    float *tw, *sw;   /* (h, w, 3): target, source warped (sw becomes the fused face F) */
    float *lab;       /* (h, w, 3): tw in Lab, then the Poisson correction d */
    float *tmp;       /* (h, w) + h: smoothing */
    uint8_t *face;    /* (h, w): the fused oval (the Poisson region) */
    uint8_t *feature; /* (h, w): eyes and the mouth's inside */
    uint8_t *alpha;   /* (h, w): the feathered face */
    uint8_t *skin;    /* (h, w): face and not feature: the colour statistics */
    uint8_t *work;    /* (h, w): face and its 4-neighbours: where F is needed */
    uint8_t *visible; /* (h, w): 255 where the target's face is not covered (fuse_visible.c) */
    void *block;
} fuse_work;

static int check_face(const ag_face *f, const char *which, ag_error *err) {
    if (!f->has_landmarks)
        return ag_error_set(err, AG_E_ARG, "fuse: the %s face has no landmarks", which);
    double side = fmin(f->box[2] - f->box[0], f->box[3] - f->box[1]);
    if (!(side >= MIN_FACE_PX))
        return ag_error_set(err, AG_E_ARG,
                            "fuse: the %s face is too small (%.0f px; at least %d px)", which, side,
                            MIN_FACE_PX);
    for (int i = 0; i < AG_FACE_LANDMARKS; i++)
        if (!isfinite(f->landmarks[i][0]) || !isfinite(f->landmarks[i][1]))
            return ag_error_set(err, AG_E_ARG, "fuse: the %s face's landmarks are not finite",
                                which);
    return AG_OK;
}

static int check_options(const ag_fuse_options *o, ag_error *err) {
    const struct {
        const char *name;
        float v, lo, hi;
    } r[] = {{"shape_ratio", o->shape_ratio, 0, 1}, {"texture_ratio", o->texture_ratio, 0, 1},
             {"smooth", o->smooth, 0, 1},           {"brightness", o->brightness, -1, 1},
             {"contrast", o->contrast, -1, 1},      {"saturation", o->saturation, -1, 1}};
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        if (!(r[i].v >= r[i].lo && r[i].v <= r[i].hi))
            return ag_error_set(err, AG_E_ARG, "fuse: %s %g is not in [%g, %g]", r[i].name,
                                (double)r[i].v, (double)r[i].lo, (double)r[i].hi);
    if (o->size != 0 && (o->size < 64 || o->size > 4096))
        return ag_error_set(err, AG_E_ARG, "fuse: size %d is not 0 or in [64, 4096]", o->size);
    if (o->max_window_pixels != 0 && o->max_window_pixels < 4096)
        return ag_error_set(err, AG_E_ARG, "fuse: max_window_pixels %ld is not 0 or at least 4096",
                            o->max_window_pixels);
    if (o->mode < AG_FUSE_NORMAL || o->mode > AG_FUSE_OVERLAY)
        return ag_error_set(err, AG_E_ARG, "fuse: unknown mode %d", (int)o->mode);
    if (o->enhance < AG_FUSE_ENHANCE_AUTO || o->enhance > AG_FUSE_ENHANCE_UPSCALE)
        return ag_error_set(err, AG_E_ARG, "fuse: unknown enhance %d", (int)o->enhance);
    if (ag_fuse_enhance_kind(o) < 0)
        return ag_error_set(err, AG_E_ARG, "fuse: enhance %s needs %s",
                            o->enhance == AG_FUSE_ENHANCE_RESTORE ? "restore" : "upscale",
                            o->enhance == AG_FUSE_ENHANCE_RESTORE ? "a restorer (restore model)"
                                                                  : "an upscaler");
    return AG_OK;
}

static double polygon_area(const ag_fuse_point *p, int n) {
    double a = 0;
    for (int i = 0; i < n; i++)
        a += p[i].x * p[(i + 1) % n].y - p[(i + 1) % n].x * p[i].y;
    return fabs(a) / 2;
}

/* The fused landmarks, the ring, the window, each image's points, the triangulation. */
static void pose_weights(fuse_work *wk, double source_scale, int on);

static void plan_geometry(fuse_work *wk, const ag_face *sf, const ag_face *tf, float shape,
                          int pose, int tw_px, int th_px, float *feather) {
    ag_fuse_point ls[AG_FACE_LANDMARKS], lt[AG_FACE_LANDMARKS], oval[AG_FUSE_RING];
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        ls[i] = (ag_fuse_point){sf->landmarks[i][0], sf->landmarks[i][1]};
        lt[i] = (ag_fuse_point){tf->landmarks[i][0], tf->landmarks[i][1]};
    }
    ag_affine a = ag_fuse_similarity(ls, lt, AG_FACE_LANDMARKS), inv = ag_affine_invert(&a);
    ag_fuse_point fused[AG_FUSE_POINTS];
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        ag_fuse_point s = ag_fuse_apply(&a, ls[i]);
        fused[i] = (ag_fuse_point){lt[i].x + (double)shape * (s.x - lt[i].x),
                                   lt[i].y + (double)shape * (s.y - lt[i].y)};
        wk->tgt[i] = lt[i], wk->src[i] = ls[i];
    }
    double cx = 0, cy = 0;
    for (int k = 0; k < AG_FUSE_RING; k++) {
        oval[k] = lt[ag_face_oval[k]];
        cx += oval[k].x / AG_FUSE_RING, cy += oval[k].y / AG_FUSE_RING;
    }
    *feather = (float)fmax(4.0, 0.06 * sqrt(polygon_area(oval, AG_FUSE_RING)));
    /* The face region: the convex hull of the target's and the fused landmarks. Each ring
     * point is two feathers past where the ray from the oval's centre through its oval
     * landmark leaves that hull, so the ring's hull (all the warp covers) lies within the
     * face region plus two feathers. */
    ag_fuse_point both[2 * AG_FACE_LANDMARKS], hull[2 * AG_FACE_LANDMARKS + 1];
    memcpy(both, lt, sizeof lt);
    memcpy(both + AG_FACE_LANDMARKS, fused, sizeof lt);
    int nh = ag_fuse_hull(both, 2 * AG_FACE_LANDMARKS, hull);
    double x0 = 1e300, y0 = 1e300, x1 = -1e300, y1 = -1e300;
    for (int k = 0; k < AG_FUSE_RING; k++) {
        ag_fuse_point t = lt[ag_face_oval[k]];
        double tx = t.x - cx, ty = t.y - cy, len = hypot(tx, ty);
        ag_fuse_point u = len > 0 ? (ag_fuse_point){tx / len, ty / len} : (ag_fuse_point){0, 0};
        double r = fmax(len, ag_fuse_ray_exit(hull, nh, (ag_fuse_point){cx, cy}, u)) +
                   2 * (double)*feather;
        ag_fuse_point q = {cx + u.x * r, cy + u.y * r};
        fused[AG_FACE_LANDMARKS + k] = wk->tgt[AG_FACE_LANDMARKS + k] = q;
        wk->src[AG_FACE_LANDMARKS + k] = ag_fuse_apply(&inv, q);
        x0 = fmin(x0, q.x), x1 = fmax(x1, q.x), y0 = fmin(y0, q.y), y1 = fmax(y1, q.y);
    }
    wk->x0 = (int)fmax(0, floor(x0) - 1), wk->y0 = (int)fmax(0, floor(y0) - 1);
    wk->w = (int)fmin(tw_px, ceil(x1) + 1) - wk->x0;
    wk->h = (int)fmin(th_px, ceil(y1) + 1) - wk->y0;
    for (int i = 0; i < AG_FUSE_POINTS; i++)
        wk->fused[i] = (ag_fuse_point){fused[i].x - wk->x0, fused[i].y - wk->y0};
    ag_fuse_triangulate(wk->fused, AG_FUSE_POINTS, wk->tri, &wk->ntri);
    for (int t = 0; t < wk->ntri; t++) {
        ag_fuse_point f[3], s[3], g[3];
        for (int k = 0; k < 3; k++)
            f[k] = wk->fused[wk->tri[t][k]], s[k] = wk->src[wk->tri[t][k]],
            g[k] = wk->tgt[wk->tri[t][k]];
        wk->to_tgt[t] = ag_fuse_triangle_map(f, g);
        wk->to_src[t] = ag_fuse_triangle_map(f, s);
    }
    double det = fabs(a.a * a.e - a.b * a.d);
    pose_weights(wk, det > 0 ? 1 / sqrt(det) : 1, pose);
}

/*
 * A turned head's far side is foreshortened in the source: the warp stretches it onto the
 * fused geometry. Each triangle's least stretch factor, the smaller singular value of its
 * map into the source over the similarity's scale, gives the source's share of the texture
 * there: a smoothstep from 0 at SHARE_FROM to 1 at SHARE_TO (the rest comes from the
 * target, relit and colour-matched). The share at each vertex is the mean over its triangles,
 * and linear across each triangle (continuous: no edge along the triangles).
 */
#define SHARE_FROM 0.55
#define SHARE_TO 0.85
static void pose_weights(fuse_work *wk, double source_scale, int on) {
    double vsum[AG_FUSE_POINTS] = {0}, tshare[AG_FUSE_MAX_TRIANGLES];
    int vcount[AG_FUSE_POINTS] = {0};
    for (int t = 0; t < wk->ntri; t++) {
        const ag_affine *m = &wk->to_src[t];
        double tr = m->a * m->a + m->b * m->b + m->d * m->d + m->e * m->e;
        double det = fabs(m->a * m->e - m->b * m->d);
        double least = sqrt(fmax(0, (tr - sqrt(fmax(0, tr * tr - 4 * det * det))) / 2));
        double u = (least / source_scale - SHARE_FROM) / (SHARE_TO - SHARE_FROM);
        u = u < 0 ? 0 : u > 1 ? 1 : u;
        tshare[t] = on ? u * u * (3 - 2 * u) : 1;
        for (int k = 0; k < 3; k++)
            vsum[wk->tri[t][k]] += tshare[t], vcount[wk->tri[t][k]]++;
    }
    for (int t = 0; t < wk->ntri; t++) {
        ag_fuse_point f[3], bary[3] = {{0, 0}, {1, 0}, {0, 1}};
        double v[3];
        for (int k = 0; k < 3; k++) {
            int i = wk->tri[t][k];
            f[k] = wk->fused[i], v[k] = vcount[i] ? vsum[i] / vcount[i] : 1;
        }
        ag_affine b = ag_fuse_triangle_map(f, bary); /* window pixel -> barycentric (l1, l2) */
        double d1 = v[1] - v[0], d2 = v[2] - v[0];
        wk->share[t][0] = (float)(d1 * b.a + d2 * b.d);
        wk->share[t][1] = (float)(d1 * b.b + d2 * b.e);
        wk->share[t][2] = (float)(v[0] + d1 * b.c + d2 * b.f);
    }
}

/* The work block's bytes for a window of n pixels and h rows (alloc_work). */
static size_t work_bytes(size_t n, size_t h) {
    return n * (3 * 3 * sizeof(float) + sizeof(float) + sizeof(int16_t) + 6) + h * sizeof(float) +
           64;
}

/* The Poisson solver's grids for a box of n pixels (ag_fuse_laplace): every coarser level
 * (at most a quarter of the one above, 6 floats a pixel: 2 n floats in all) and the masks of
 * all levels (n + n / 3 bytes). */
static size_t laplace_bytes(size_t n) {
    return 2 * n * sizeof(float) + n + n / 3 + 16;
}

static int alloc_work(fuse_work *wk, ag_error *err) {
    size_t n = (size_t)wk->w * wk->h, bytes = work_bytes(n, (size_t)wk->h);
    uint8_t *b = wk->block = ag_malloc(bytes);
    if (!b)
        return ag_error_set(err, AG_E_NOMEM, "fuse: out of memory (%zu bytes)", bytes);
    wk->tw = (float *)b, wk->sw = wk->tw + 3 * n, wk->lab = wk->sw + 3 * n;
    wk->tmp = wk->lab + 3 * n;
    wk->map = (int16_t *)(wk->tmp + n + wk->h);
    wk->face = (uint8_t *)(wk->map + n), wk->feature = wk->face + n;
    wk->alpha = wk->feature + n, wk->skin = wk->alpha + n, wk->work = wk->skin + n;
    wk->visible = wk->work + n;
    return AG_OK;
}

/* The masks of the fused geometry: face oval, features, skin, and alpha: rising from 0 on
 * the oval's edge to 255 a ramp inside it, as a smoothstep of the distance to the oval
 * polygon itself (not a blur of its raster, whose staircase a threshold kept). */
static void make_masks(fuse_work *wk, float feather, int wide) {
    int w = wk->w, h = wk->h;
    size_t n = (size_t)w * h;
    ag_fuse_point p[AG_FUSE_RING];
    memset(wk->face, 0, n), memset(wk->feature, 0, n);
    for (int k = 0; k < AG_FUSE_RING; k++)
        p[k] = wk->fused[ag_face_oval[k]];
    ag_fuse_fill_polygon(wk->face, w, h, p, AG_FUSE_RING, 1);
    const int *sets[3] = {ag_fuse_inner_lips, ag_fuse_eye_right, ag_fuse_eye_left};
    const int sizes[3] = {20, 16, 16};
    for (int s = 0; s < 3; s++) {
        for (int k = 0; k < sizes[s]; k++)
            p[k] = wk->fused[sets[s][k]];
        ag_fuse_fill_polygon(wk->feature, w, h, p, sizes[s], 1);
    }
    for (size_t i = 0; i < n; i++)
        wk->face[i] = (uint8_t)(wk->face[i] && wk->map[i] >= 0);
    for (int k = 0; k < AG_FUSE_RING; k++)
        p[k] = wk->fused[ag_face_oval[k]];
    float ramp = fmaxf(2.0f, feather * (wide ? 1.0f : 0.75f));
    ag_fuse_edge_ramp(wk->alpha, wk->face, w, h, p, AG_FUSE_RING, ramp, wk->tmp);
}

/* visible <- where the warped target's face is not covered (its occluders stay on top:
 * the blend's alpha is 0 on them, the skin statistics leave them out); sw, lab and tmp,
 * consecutive, are its scratch (the source is warped after). */
/* The blend's alpha is 0 where the face is under a quarter visible and rises to the full
 * alpha at all visible: an occluder's soft edge (the guided filter's) stays the target's. */
#define VISIBLE_FROM 64
static void find_occluders(fuse_work *wk, int keep) {
    size_t n = (size_t)wk->w * wk->h;
    /* sw, lab and tmp: 7 n + h floats; a window too thin for the sub-rectangle's planes
     * (a face mostly outside the image) is taken as uncovered */
    int fits = ag_fuse_visible_floats(wk->w, wk->h) <= 7 * n + (size_t)wk->h;
    if (!keep || !fits ||
        !ag_fuse_visible(wk->visible, wk->tw, wk->face, wk->w, wk->h, wk->fused, wk->sw))
        memset(wk->visible, 255, n);
    for (size_t i = 0; i < n; i++) {
        wk->skin[i] = (uint8_t)(wk->face[i] && !wk->feature[i] && wk->visible[i] >= 128);
        int v = wk->visible[i] < VISIBLE_FROM
                    ? 0
                    : (wk->visible[i] - VISIBLE_FROM) * 255 / (255 - VISIBLE_FROM);
        wk->alpha[i] = (uint8_t)((wk->alpha[i] * v + 127) / 255);
    }
}

/* The window's pixels of the target into tw (so pixels no triangle covers stay the target),
 * then the target through its triangle maps. */
static void warp_images(fuse_work *wk, const ag_image *target) {
    int w = wk->w, h = wk->h, bands = target->bands;
    for (int y = 0; y < h; y++) {
        const uint8_t *row =
            target->pixels + ((size_t)(wk->y0 + y) * target->width + wk->x0) * bands;
        float *tw_x = wk->tw + (size_t)y * w * 3;
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++)
                tw_x[x * 3 + c] = row[x * bands + c];
    }
    ag_fuse_raster(wk->map, w, h, wk->fused, (const int(*)[3])wk->tri, wk->ntri);
    ag_fuse_sample(wk->tw, wk->map, w, h, wk->to_tgt, target);
}

/* sw <- the source through its triangle maps (the target's warped pixels where none). */
static void warp_source(fuse_work *wk, const ag_image *source) {
    memcpy(wk->sw, wk->tw, sizeof(float) * 3 * (size_t)wk->w * wk->h);
    ag_fuse_sample(wk->sw, wk->map, wk->w, wk->h, wk->to_src, source);
}

static void mark_work(fuse_work *wk) {
    int w = wk->w, h = wk->h;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            size_t i = (size_t)y * w + x;
            int near = wk->face[i] || (x > 0 && wk->face[i - 1]) ||
                       (x < w - 1 && wk->face[i + 1]) || (y > 0 && wk->face[i - w]) ||
                       (y < h - 1 && wk->face[i + w]);
            wk->work[i] = (uint8_t)(near && wk->map[i] >= 0);
        }
}

/* The target's shading on the warped source (fuse_light.c): local gains over a tent of
 * LIGHT_REACH of the face's size (the square root of its oval's area, feather / 0.06) on
 * each side, on cells of a 32nd of it (at least 2 px: the grids fit in tmp). */
#define LIGHT_REACH 0.2f

/* The ellipses the shading leaves out: each eye opening's centre, a circle of SOCKET times
 * its half-width (lids, socket, the bag below); the outer lips' box grown by LIPS. */
#define SOCKET 1.7f
#define LIPS 1.25f
static void feature_holes(const fuse_work *wk, float holes[3][4]) {
    static const int outer_lips[] = {61, 291, 0, 17, 40, 270, 91, 321};
    const int *eyes[2] = {ag_fuse_eye_right, ag_fuse_eye_left};
    for (int e = 0; e < 2; e++) {
        double cx = 0, cy = 0, half = 0;
        for (int k = 0; k < 16; k++)
            cx += wk->fused[eyes[e][k]].x / 16, cy += wk->fused[eyes[e][k]].y / 16;
        for (int k = 0; k < 16; k++)
            half = fmax(half, hypot(wk->fused[eyes[e][k]].x - cx, wk->fused[eyes[e][k]].y - cy));
        float r = SOCKET * (float)fmax(half, 1);
        holes[e][0] = (float)cx, holes[e][1] = (float)cy, holes[e][2] = holes[e][3] = r;
    }
    double x0 = 1e300, y0 = 1e300, x1 = -1e300, y1 = -1e300;
    for (size_t k = 0; k < sizeof outer_lips / sizeof outer_lips[0]; k++) {
        ag_fuse_point q = wk->fused[outer_lips[k]];
        x0 = fmin(x0, q.x), x1 = fmax(x1, q.x), y0 = fmin(y0, q.y), y1 = fmax(y1, q.y);
    }
    holes[2][0] = (float)(x0 + x1) / 2, holes[2][1] = (float)(y0 + y1) / 2;
    holes[2][2] = LIPS * (float)fmax(1, (x1 - x0) / 2),
    holes[2][3] = LIPS * (float)fmax(1, (y1 - y0) / 2);
}
static void relight(fuse_work *wk, const ag_fuse_options *o, float feather) {
    if (!o->relight)
        return;
    float face = feather / 0.06f;
    int cell = (int)fmaxf(2.0f, roundf(face / 32)),
        radius = (int)fmaxf(1.0f, roundf(LIGHT_REACH * face / (2 * cell)));
    if (ag_fuse_relight_floats(wk->w, wk->h, cell) > (size_t)wk->w * wk->h + (size_t)wk->h)
        return;
    float holes[3][4];
    feature_holes(wk, holes);
    ag_fuse_relight(wk->sw, wk->lab, wk->skin, wk->face, wk->visible, wk->work, wk->w, wk->h,
                    (const float(*)[4])holes, 3, cell, radius, wk->tmp);
}

/* sw <- the fused face F (RGB) on the work pixels: the warped source in Lab moved to the
 * warped target's skin statistics, mixed with the target, adjusted, smoothed. */
static void fuse_color(fuse_work *wk, const ag_fuse_options *o, float feather) {
    size_t n = (size_t)wk->w * wk->h;
    for (size_t i = 0; i < n; i++)
        if (wk->work[i]) {
            memcpy(wk->lab + i * 3, wk->tw + i * 3, 3 * sizeof(float));
            ag_fuse_rgb_to_lab(wk->lab + i * 3, 1);
            ag_fuse_rgb_to_lab(wk->sw + i * 3, 1);
        }
    relight(wk, o, feather);
    double sm[3], ssd[3], tm[3], tsd[3];
    ag_fuse_stats(wk->sw, wk->skin, n, sm, ssd);
    ag_fuse_stats(wk->lab, wk->skin, n, tm, tsd);
    ag_fuse_match_skin(wk->sw, wk->work, n, sm, ssd, tm, tsd);
    float whole = o->shape_ratio >= 0.5f ? 1.0f : 0.0f; /* features: from one face, whole */
    for (size_t i = 0; i < n; i++) {
        if (!wk->work[i])
            continue;
        float *f = wk->sw + i * 3;
        const float *t = wk->lab + i * 3;
        const float *sh = wk->share[wk->map[i]];
        float x = (float)(i % (size_t)wk->w) + 0.5f, y = (float)(i / (size_t)wk->w) + 0.5f;
        float share = sh[0] * x + sh[1] * y + sh[2];
        share = share < 0 ? 0 : share > 1 ? 1 : share;
        float k = wk->feature[i] ? whole : o->texture_ratio * share;
        for (int c = 0; c < 3; c++)
            f[c] = o->mode == AG_FUSE_OVERLAY && c > 0 ? t[c] : t[c] + k * (f[c] - t[c]);
        f[0] += 25.0f * o->brightness;
        f[0] = (float)tm[0] + (f[0] - (float)tm[0]) * (1.0f + o->contrast);
        f[1] *= 1.0f + o->saturation, f[2] *= 1.0f + o->saturation;
    }
    if (o->smooth > 0)
        ag_fuse_smooth(wk->sw, wk->skin, wk->w, wk->h, (int)fmaxf(1.0f, feather / 6), o->smooth,
                       wk->tmp);
    for (size_t i = 0; i < n; i++)
        if (wk->work[i])
            ag_fuse_lab_to_rgb(wk->sw + i * 3, 1);
}

/* The Poisson correction d (harmonic on the face, tw - F just outside it), over the face's
 * bounding box plus one pixel (the rest of the window needs none): into lab, packed as
 * (bh, bw, 3) at window pixel (bx, by), with its free mask packed into skin (no longer
 * needed after the colour stage). */
typedef struct solve_box {
    int bx, by, bw, bh;
} solve_box;

/* Whether the edge pixel i (window) borders a covered face pixel. */
static int covered_edge(const fuse_work *wk, int x, int y) {
    size_t i = (size_t)y * wk->w + x;
    const int nb[4][2] = {{-1, 0}, {1, 0}, {0, -1}, {0, 1}};
    for (int k = 0; k < 4; k++) {
        int u = x + nb[k][0], v = y + nb[k][1];
        if (u < 0 || v < 0 || u >= wk->w || v >= wk->h)
            continue;
        size_t j = (size_t)v * wk->w + u;
        if (wk->face[j] && wk->visible[j] < 128)
            return 1;
    }
    return wk->visible[i] < 128;
}

/* The Poisson edge's values where an occluder covers it (T there is hair, not face) are
 * not the target's: each takes the nearest uncovered edge pixel's (breadth first along the
 * edge, 8-way), so nothing of the occluder bleeds into the face. feature (free after the
 * colour stage) marks the edge in the box, tmp is the queue. */
static void fill_covered_edge(fuse_work *wk, const solve_box *b) {
    uint8_t *state = wk->feature; /* 0 not edge, 1 known, 2 to fill */
    int *queue = (int *)wk->tmp;
    size_t head = 0, tail = 0, m = (size_t)b->bw * b->bh;
    int any = 0;
    for (size_t o = 0; o < m; o++) {
        int x = (int)(o % b->bw) + b->bx, y = (int)(o / b->bw) + b->by;
        size_t i = (size_t)y * wk->w + x;
        state[o] = 0;
        if (wk->work[i] && !wk->face[i])
            state[o] = covered_edge(wk, x, y) ? 2 : 1, any |= state[o] == 2;
    }
    if (!any)
        return;
    for (size_t o = 0; o < m; o++)
        if (state[o] == 1)
            queue[tail++] = (int)o;
    float *d = wk->lab;
    while (head < tail) {
        int o = queue[head++], x = o % b->bw, y = o / b->bw;
        for (int dy = -1; dy <= 1; dy++)
            for (int dx = -1; dx <= 1; dx++) {
                int u = x + dx, v = y + dy;
                if (u < 0 || v < 0 || u >= b->bw || v >= b->bh)
                    continue;
                int q = v * b->bw + u;
                if (state[q] != 2)
                    continue;
                memcpy(d + (size_t)q * 3, d + (size_t)o * 3, 3 * sizeof(float));
                state[q] = 1, queue[tail++] = q;
            }
    }
}

static int solve_correction(fuse_work *wk, solve_box *b, ag_fuse_timing *t, ag_error *err) {
    int x0 = wk->w, y0 = wk->h, x1 = -1, y1 = -1;
    for (int y = 0; y < wk->h; y++)
        for (int x = 0; x < wk->w; x++)
            if (wk->face[(size_t)y * wk->w + x])
                x0 = x < x0 ? x : x0, x1 = x > x1 ? x : x1, y0 = y < y0 ? y : y0,
                y1 = y > y1 ? y : y1;
    if (x1 < 0)
        return *b = (solve_box){0, 0, 0, 0}, AG_OK;
    b->bx = x0 > 0 ? x0 - 1 : 0, b->by = y0 > 0 ? y0 - 1 : 0;
    b->bw = (x1 + 2 < wk->w ? x1 + 2 : wk->w) - b->bx;
    b->bh = (y1 + 2 < wk->h ? y1 + 2 : wk->h) - b->by;
    float *d = wk->lab;
    for (int y = 0; y < b->bh; y++)
        for (int x = 0; x < b->bw; x++) {
            size_t i = (size_t)(y + b->by) * wk->w + x + b->bx, o = (size_t)y * b->bw + x;
            int edge = wk->work[i] && !wk->face[i];
            wk->skin[o] = wk->face[i];
            for (int c = 0; c < 3; c++)
                d[o * 3 + c] = edge ? wk->tw[i * 3 + c] - wk->sw[i * 3 + c] : 0;
        }
    fill_covered_edge(wk, b);
    return ag_fuse_laplace(d, wk->skin, b->bw, b->bh, 0.1f, 40, &t->cycles, &t->residual, err);
}

/* out's window <- tw + alpha (F + d - tw) on covered pixels (d = 0 without a solve). */
static void compose(const fuse_work *wk, ag_image *out, const solve_box *b) {
    int bands = out->bands;
    for (int y = 0; y < wk->h; y++) {
        uint8_t *row = out->pixels + ((size_t)(wk->y0 + y) * out->width + wk->x0) * bands;
        for (int x = 0; x < wk->w; x++) {
            size_t i = (size_t)y * wk->w + x;
            if (wk->map[i] < 0)
                continue;
            float a = wk->alpha[i] / 255.0f;
            const float *d = NULL;
            if (b && x >= b->bx && y >= b->by && x < b->bx + b->bw && y < b->by + b->bh)
                d = wk->lab + ((size_t)(y - b->by) * b->bw + x - b->bx) * 3;
            for (int c = 0; c < 3; c++) {
                float t = wk->tw[i * 3 + c], v = t;
                if (a > 0)
                    v = t + a * (wk->sw[i * 3 + c] + (d ? d[c] : 0) - t);
                row[x * bands + c] = (uint8_t)(v <= 0 ? 0 : v >= 255 ? 255 : v + 0.5f);
            }
        }
    }
}

static int copy_image(const ag_image *in, ag_image *out, ag_error *err) {
    size_t bytes = (size_t)in->width * in->height * in->bands;
    out->pixels = ag_malloc(bytes);
    if (!out->pixels)
        return ag_error_set(err, AG_E_NOMEM, "fuse: out of memory (%zu bytes)", bytes);
    memcpy(out->pixels, in->pixels, bytes);
    out->width = in->width, out->height = in->height, out->bands = in->bands;
    return AG_OK;
}

static int check_image(const ag_image *im, const char *which, ag_error *err) {
    if (!im || !im->pixels || im->width < 1 || im->height < 1 || (im->bands != 3 && im->bands != 4))
        return ag_error_set(err, AG_E_ARG, "fuse: the %s image is not RGB or RGBA", which);
    return AG_OK;
}

/* *out <- `in` with its long side `size` (warp.c's cubic, box-prefiltered when shrinking);
 * *face the target's face in its pixels. */
static int resize_target(const ag_image *in, int size, ag_face *face, ag_image *out,
                         ag_error *err) {
    int longest = in->width > in->height ? in->width : in->height;
    double s = (double)size / longest;
    int w = (int)fmax(1, round(in->width * s)), h = (int)fmax(1, round(in->height * s));
    double sx = (double)w / in->width, sy = (double)h / in->height;
    out->pixels = ag_malloc((size_t)w * h * in->bands);
    if (!out->pixels)
        return ag_error_set(err, AG_E_NOMEM, "fuse: out of memory resizing to %dx%d", w, h);
    out->width = w, out->height = h, out->bands = in->bands;
    ag_affine m = {1 / sx, 0, 0, 0, 1 / sy, 0};
    int rc = ag_face_warp(in, &m, w, h, AG_WARP_REFLECT, AG_WARP_CUBIC, out->pixels, NULL, err);
    for (int i = 0; i < AG_FACE_LANDMARKS; i++)
        face->landmarks[i][0] *= (float)sx, face->landmarks[i][1] *= (float)sy;
    face->box[0] *= (float)sx, face->box[2] *= (float)sx;
    face->box[1] *= (float)sy, face->box[3] *= (float)sy;
    if (rc)
        ag_image_fini(out);
    return rc;
}

/*
 * A source face over PREFILTER_ABOVE times the target's would alias: the warp samples it
 * bilinearly, one tap in every few pixels. Its window (the landmarks' box and as much
 * again around it, which holds the ring the warp reads) is first shrunk by warp.c's box
 * prefilter and cubic to PREFILTER_TO times the target's face, its landmarks with it.
 */
#define PREFILTER_ABOVE 2.0
#define PREFILTER_TO 1.25

/* The source's face size over the target's (the similarity's inverse scale). */
static double face_ratio(const ag_face *sf, const ag_face *tf) {
    ag_fuse_point ls[AG_FACE_LANDMARKS], lt[AG_FACE_LANDMARKS];
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        ls[i] = (ag_fuse_point){sf->landmarks[i][0], sf->landmarks[i][1]};
        lt[i] = (ag_fuse_point){tf->landmarks[i][0], tf->landmarks[i][1]};
    }
    ag_affine a = ag_fuse_similarity(ls, lt, AG_FACE_LANDMARKS);
    double scale = sqrt(fabs(a.a * a.e - a.b * a.d));
    return scale > 0 ? 1.0 / scale : 1.0;
}

/* The source's face window: its landmarks' box with half its size around it, whole pixels,
 * inside the image. */
void ag_fuse_source_window(const ag_face *f, int width, int height, double box[4]) {
    double x0 = 1e300, y0 = 1e300, x1 = -1e300, y1 = -1e300;
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        double x = f->landmarks[i][0], y = f->landmarks[i][1];
        x0 = fmin(x0, x), x1 = fmax(x1, x), y0 = fmin(y0, y), y1 = fmax(y1, y);
    }
    double mx = (x1 - x0) / 2, my = (y1 - y0) / 2;
    box[0] = fmax(0, floor(x0 - mx)), box[1] = fmax(0, floor(y0 - my));
    box[2] = fmin(width, ceil(x1 + mx)), box[3] = fmin(height, ceil(y1 + my));
}

/* *out, *face <- the source's face window shrunk by r (< 1), the landmarks in its pixels. */
static int shrink_source(const ag_image *in, const ag_face *sf, double r, ag_image *out,
                         ag_face *face, ag_error *err) {
    double box[4];
    ag_fuse_source_window(sf, in->width, in->height, box);
    double x0 = box[0], y0 = box[1], x1 = box[2], y1 = box[3];
    int w = (int)fmax(8, ceil((x1 - x0) * r)), h = (int)fmax(8, ceil((y1 - y0) * r));
    out->pixels = ag_malloc((size_t)w * h * in->bands);
    if (!out->pixels)
        return ag_error_set(err, AG_E_NOMEM, "fuse: out of memory shrinking the source");
    out->width = w, out->height = h, out->bands = in->bands;
    ag_affine m = {1 / r, 0, x0, 0, 1 / r, y0};
    int rc = ag_face_warp(in, &m, w, h, AG_WARP_REFLECT, AG_WARP_CUBIC, out->pixels, NULL, err);
    *face = *sf;
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        face->landmarks[i][0] = (float)(((double)sf->landmarks[i][0] - x0) * r);
        face->landmarks[i][1] = (float)(((double)sf->landmarks[i][1] - y0) * r);
    }
    for (int k = 0; k < 4; k++) /* x0, y0, x1, y1 */
        face->box[k] = (float)(((double)sf->box[k] - (k % 2 ? y0 : x0)) * r);
    if (rc)
        ag_image_fini(out);
    return rc;
}

static int fuse_sized(const ag_image *source, const ag_face *source_face, const ag_image *target,
                      const ag_face *target_face, const ag_fuse_options *o, ag_image *out,
                      ag_fuse_timing *timing, ag_error *err);

/* The window a fusion works on at most: the options' bound (0: the default). */
static size_t window_cap(const ag_fuse_options *o) {
    return o->max_window_pixels > 0 ? (size_t)o->max_window_pixels : (size_t)AG_FUSE_WINDOW_PIXELS;
}

/* A source face under ENHANCE_BELOW times the target's is sharpened first (fuse_enhance.c). */
#define ENHANCE_BELOW 0.8

int ag_face_fuse_wants_enhance(const ag_face *source_face, const ag_face *target_face,
                               const ag_fuse_options *o, double *factor) {
    double ratio = face_ratio(source_face, target_face);
    if (factor)
        *factor = ratio > 0 ? 1 / ratio : 1;
    return (!o || o->enhance != AG_FUSE_ENHANCE_NONE) && ratio < ENHANCE_BELOW;
}

static int fuse_filtered(const ag_image *source, const ag_face *source_face, const ag_image *target,
                         const ag_face *target_face, const ag_fuse_options *o, ag_image *out,
                         ag_fuse_timing *timing, ag_error *err);

/* The source sharpened by `kind`, then fused as any source (shrunk when now much larger). */
static int fuse_enhanced(const ag_image *source, const ag_face *source_face, const ag_image *target,
                         const ag_face *target_face, const ag_fuse_options *o, int kind,
                         ag_image *out, ag_fuse_timing *timing, ag_error *err) {
    double t0 = ag_face_now_ms();
    ag_image sharp = {0};
    ag_face *face = ag_malloc(sizeof *face);
    if (!face)
        return ag_error_set(err, AG_E_NOMEM, "fuse: out of memory");
    /* the upscaled window at most the target's pixels and the window bound */
    size_t most = (size_t)target->width * target->height;
    most = most < window_cap(o) ? most : window_cap(o);
    int rc = ag_fuse_enhance_source(source, source_face, o, kind, most, &sharp, face, err);
    double ms = ag_face_now_ms() - t0;
    ag_fuse_options plain = *o;
    plain.enhance = AG_FUSE_ENHANCE_NONE;
    /* a restorer smaller than the face (a 256 px network on a large face) would not sharpen
     * it: the source as it is */
    int larger =
        rc == AG_OK && face_ratio(face, target_face) > face_ratio(source_face, target_face);
    if (rc == AG_OK && larger)
        rc = fuse_filtered(&sharp, face, target, target_face, &plain, out, timing, err);
    else if (rc == AG_OK)
        rc = fuse_filtered(source, source_face, target, target_face, &plain, out, timing, err);
    if (rc == AG_OK && timing && larger)
        timing->enhanced = kind, timing->enhance_ms = ms, timing->total_ms += ms;
    ag_image_fini(&sharp);
    ag_free(face);
    return rc;
}

/* fuse_sized, with the source sharpened first when its face is much smaller than the
 * target's, shrunk first when much larger. */
static int fuse_filtered(const ag_image *source, const ag_face *source_face, const ag_image *target,
                         const ag_face *target_face, const ag_fuse_options *o, ag_image *out,
                         ag_fuse_timing *timing, ag_error *err) {
    int rc = check_image(source, "source", err);
    rc = rc ? rc : check_face(source_face, "source", err); /* as given, before any shrink */
    rc = rc ? rc : check_face(target_face, "target", err);
    if (rc)
        return rc;
    double ratio = face_ratio(source_face, target_face);
    int kind = ag_fuse_enhance_kind(o);
    if (ratio < ENHANCE_BELOW && kind > AG_FUSE_ENHANCE_NONE)
        return fuse_enhanced(source, source_face, target, target_face, o, kind, out, timing, err);
    if (ratio <= PREFILTER_ABOVE)
        return fuse_sized(source, source_face, target, target_face, o, out, timing, err);
    ag_image small = {0};
    ag_face *face = ag_malloc(sizeof *face);
    if (!face)
        return ag_error_set(err, AG_E_NOMEM, "fuse: out of memory");
    double r = PREFILTER_TO / ratio;
    rc = shrink_source(source, source_face, r, &small, face, err);
    if (rc == AG_OK)
        rc = fuse_sized(&small, face, target, target_face, o, out, timing, err);
    if (rc == AG_OK && timing)
        timing->source_shrink = (float)r;
    ag_image_fini(&small);
    ag_free(face);
    return rc;
}

size_t ag_face_fuse_bytes(size_t source_pixels, size_t target_pixels, size_t longest_side,
                          size_t window_pixels) {
    size_t tgt = target_pixels * 4, side = longest_side;
    size_t cap = window_pixels ? window_pixels : (size_t)AG_FUSE_WINDOW_PIXELS;
    /* Held through the fusion: the resized target (size=N, at most target_pixels), the
     * shrunk source (a window of at most the source, each side max(8, ceil(side x r)),
     * r < PREFILTER_TO / PREFILTER_ABOVE = 5/8: (5/8 w + 9) (5/8 h + 9) pixels at most)
     * and the output (a copy of the target fused); their two face structs. */
    size_t small = (source_pixels * 25 / 64 + 12 * side + 81) * 4;
    size_t held = tgt + small + tgt + 2 * sizeof(ag_face);
    /* Then, one at a time: a warp (the resize or the source's shrink, every image's side at
     * most longest_side), or fuse_sized's work block over its window (at most the target
     * and the cap) with its bookkeeping and the Poisson grids over the face's box (at most
     * the window). A window over the cap adds its shrunk copy and that copy fused (the cap's
     * pixels, 4 bands each), the shrink's warp before, and the small fusion's own shrunk
     * source (a second one at most as large) and its face struct. */
    size_t inputs = source_pixels > target_pixels ? source_pixels : target_pixels;
    size_t warp = ag_face_warp_bytes(inputs, side, side, side);
    size_t window = target_pixels < cap ? target_pixels : cap;
    size_t fuse = sizeof(fuse_work) + work_bytes(window, side) + laplace_bytes(window);
    if (target_pixels > cap) { /* the outer fuse_work held too; a warp (either shrink) */
        size_t copies = 2 * (cap * 4 + 8 * side + 64) + small + 2 * sizeof(ag_face);
        fuse = copies + sizeof(fuse_work) + (fuse > warp ? fuse : warp);
    }
    return held + (warp > fuse ? warp : fuse);
}

size_t ag_face_fuse_enhance_bytes(size_t target_pixels, size_t window_pixels,
                                  size_t restorer_side) {
    size_t cap = window_pixels ? window_pixels : (size_t)AG_FUSE_WINDOW_PIXELS;
    size_t upscaled = target_pixels < cap ? target_pixels : cap;
    size_t restored = restorer_side * restorer_side;
    size_t most = upscaled > restored ? upscaled : restored;
    return most * 4 * 4 + 2 * sizeof(ag_face) + 64;
}

int ag_face_fuse(const ag_image *source, const ag_face *source_face, const ag_image *target,
                 const ag_face *target_face, const ag_fuse_options *options, ag_image *out,
                 ag_fuse_timing *timing, ag_error *err) {
    ag_fuse_options defaults;
    ag_fuse_options_init(&defaults);
    const ag_fuse_options *o = options ? options : &defaults;
    memset(out, 0, sizeof *out);
    int rc = check_image(target, "target", err);
    rc = rc ? rc : check_options(o, err);
    if (rc)
        return rc;
    int longest = target->width > target->height ? target->width : target->height;
    if (!o->size || o->size == longest)
        return fuse_filtered(source, source_face, target, target_face, o, out, timing, err);
    ag_image resized = {0};
    ag_face *face = ag_malloc(sizeof *face);
    if (!face)
        return ag_error_set(err, AG_E_NOMEM, "fuse: out of memory");
    *face = *target_face;
    rc = resize_target(target, o->size, face, &resized, err);
    if (rc == AG_OK)
        rc = fuse_filtered(source, source_face, &resized, face, o, out, timing, err);
    ag_image_fini(&resized);
    ag_free(face);
    return rc;
}

/* out's window += the change the small fusion made (fused - small), bilinearly enlarged
 * by (1/sx, 1/sy); pixels where it is 0 at every tap stay the target's bit for bit. */
static void add_change(ag_image *out, const fuse_work *wk, const ag_image *small,
                       const ag_image *fused, double sx, double sy) {
    int bands = out->bands, w = small->width, h = small->height;
    for (int y = 0; y < wk->h; y++) {
        double v = (y + 0.5) * sy - 0.5;
        v = v < 0 ? 0 : v > h - 1 ? h - 1 : v;
        int v0 = (int)v, v1 = v0 + 1 < h ? v0 + 1 : v0;
        float fv = (float)(v - v0);
        uint8_t *row = out->pixels + ((size_t)(wk->y0 + y) * out->width + wk->x0) * bands;
        for (int x = 0; x < wk->w; x++) {
            double u = (x + 0.5) * sx - 0.5;
            u = u < 0 ? 0 : u > w - 1 ? w - 1 : u;
            int u0 = (int)u, u1 = u0 + 1 < w ? u0 + 1 : u0;
            float fu = (float)(u - u0);
            size_t tap[4] = {(size_t)v0 * w + u0, (size_t)v0 * w + u1, (size_t)v1 * w + u0,
                             (size_t)v1 * w + u1};
            float wt[4] = {(1 - fu) * (1 - fv), fu * (1 - fv), (1 - fu) * fv, fu * fv};
            for (int c = 0; c < 3; c++) {
                float d = 0;
                int any = 0;
                for (int k = 0; k < 4; k++) {
                    int dk = fused->pixels[tap[k] * bands + c] - small->pixels[tap[k] * bands + c];
                    d += wt[k] * (float)dk, any |= dk;
                }
                if (!any)
                    continue;
                float val = row[x * bands + c] + d;
                row[x * bands + c] = (uint8_t)(val <= 0 ? 0 : val >= 255 ? 255 : val + 0.5f);
            }
        }
    }
}

/*
 * A window over the cap (a face filling a large photo) is fused at the scale that brings it
 * to the cap: the target's window shrunk (warp.c's box prefilter and cubic), fused, and the
 * change that made enlarged onto the target's own pixels (add_change). The work is the
 * cap's, not the photo's; what the small fusion left alone stays the target's exactly.
 */
static int fuse_scaled(const ag_image *source, const ag_face *sf, const ag_image *target,
                       const ag_face *tf, const ag_fuse_options *o, const fuse_work *wk, size_t cap,
                       ag_image *out, ag_fuse_timing *tm, ag_error *err) {
    double s = sqrt((double)cap / ((double)wk->w * wk->h));
    int sw = (int)fmax(8, floor(wk->w * s)), sh = (int)fmax(8, floor(wk->h * s));
    double sx = (double)sw / wk->w, sy = (double)sh / wk->h;
    ag_image small = {0}, fused = {0};
    ag_face *face = ag_malloc(sizeof *face);
    small.pixels = ag_malloc((size_t)sw * sh * target->bands);
    int rc = AG_OK;
    if (!face || !small.pixels) {
        rc = ag_error_set(err, AG_E_NOMEM, "fuse: out of memory shrinking the window");
        goto done;
    }
    small.width = sw, small.height = sh, small.bands = target->bands;
    ag_affine m = {1 / sx, 0, wk->x0, 0, 1 / sy, wk->y0};
    rc = ag_face_warp(target, &m, sw, sh, AG_WARP_REFLECT, AG_WARP_CUBIC, small.pixels, NULL, err);
    if (rc)
        goto done;
    *face = *tf;
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        face->landmarks[i][0] = (float)(((double)tf->landmarks[i][0] - wk->x0) * sx);
        face->landmarks[i][1] = (float)(((double)tf->landmarks[i][1] - wk->y0) * sy);
    }
    for (int k = 0; k < 4; k++) /* x0, y0, x1, y1 */
        face->box[k] =
            (float)(((double)tf->box[k] - (k % 2 ? wk->y0 : wk->x0)) * (k % 2 ? sy : sx));
    ag_fuse_options inner = *o;
    inner.size = 0, inner.max_window_pixels = (long)cap;
    rc = fuse_filtered(source, sf, &small, face, &inner, &fused, tm, err);
    if (rc == AG_OK)
        add_change(out, wk, &small, &fused, sx, sy);
done:
    ag_image_fini(&fused);
    ag_free(small.pixels);
    ag_free(face);
    return rc;
}

static int fuse_sized(const ag_image *source, const ag_face *source_face, const ag_image *target,
                      const ag_face *target_face, const ag_fuse_options *o, ag_image *out,
                      ag_fuse_timing *timing, ag_error *err) {
    double t0 = ag_face_now_ms();
    ag_fuse_timing tm = {.source_shrink = 1.0f};
    int rc = copy_image(target, out, err); /* the images and faces were checked */
    if (rc || (o->shape_ratio == 0 && o->texture_ratio == 0)) {
        if (timing)
            *timing = tm;
        return rc;
    }
    fuse_work *wk = ag_malloc(sizeof *wk);
    if (!wk) {
        ag_image_fini(out);
        return ag_error_set(err, AG_E_NOMEM, "fuse: out of memory");
    }
    memset(wk, 0, sizeof *wk);
    float feather;
    plan_geometry(wk, source_face, target_face, o->shape_ratio, o->pose, target->width,
                  target->height, &feather);
    double t1 = ag_face_now_ms();
    if (wk->w < 3 || wk->h < 3) /* the face lies outside the image */
        goto done;
    if ((size_t)wk->w * wk->h > window_cap(o)) {
        rc = fuse_scaled(source, source_face, target, target_face, o, wk, window_cap(o), out, &tm,
                         err);
        goto done;
    }
    rc = alloc_work(wk, err);
    if (rc)
        goto done;
    warp_images(wk, target);
    make_masks(wk, feather, o->mode == AG_FUSE_BLEND);
    find_occluders(wk, o->keep_occluders);
    warp_source(wk, source);
    double t2 = ag_face_now_ms();
    mark_work(wk);
    fuse_color(wk, o, feather);
    double t3 = ag_face_now_ms();
    solve_box box;
    int solved = o->mode != AG_FUSE_BLEND;
    if (solved)
        rc = solve_correction(wk, &box, &tm, err);
    if (rc == AG_OK)
        compose(wk, out, solved ? &box : NULL);
    double t4 = ag_face_now_ms();
    tm.geometry_ms = t1 - t0, tm.warp_ms = t2 - t1, tm.color_ms = t3 - t2, tm.blend_ms = t4 - t3;
    tm.region_px = wk->w * wk->h;
    for (size_t i = 0; i < (size_t)wk->w * wk->h; i++)
        tm.face_px += wk->face[i];
done:
    ag_free(wk->block);
    ag_free(wk);
    if (rc)
        ag_image_fini(out);
    tm.total_ms = ag_face_now_ms() - t0;
    if (timing)
        *timing = tm;
    return rc;
}
