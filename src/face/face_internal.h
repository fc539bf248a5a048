/*
 * face_internal.h - what the files of src/face/ share: the resampler (warp.c), the network
 * side (192), the detector's state, and the landmark indices the recipes use.
 */
#ifndef AG_FACE_INTERNAL_H
#define AG_FACE_INTERNAL_H

#include "animegan.h"

#include <stdint.h>

#define AG_FACE_SIDE 192 /* both networks' input side */
#define AG_FACE_GRID 48  /* detector anchors: 48 x 48 cells of 4 input pixels */
#define AG_FACE_ANCHORS (AG_FACE_GRID * AG_FACE_GRID)
#define AG_FACE_NMS_IOU 0.3f
#define AG_FACE_CANDIDATES (2 * AG_FACE_ANCHORS) /* over all passes; more are dropped */
#define AG_FACE_TILE_SIDE 384                    /* the long side of the tiled pass */
#define AG_FACE_TILE_MIN 768 /* photos with a smaller long side get the whole-image pass only */

/* An affine map from output pixel coordinates to source ones, both with pixel centres at
 * +0.5: src = (a x + b y + c, d x + e y + f). */
typedef struct ag_affine {
    double a, b, c, d, e, f;
} ag_affine;

typedef enum ag_warp_border {
    AG_WARP_REFLECT = 0, /* taps outside the image mirror it (-1 -> 1) */
    AG_WARP_LETTERBOX,   /* taps clamped; a pixel whose centre falls outside is 0 */
} ag_warp_border;

typedef enum ag_warp_filter {
    AG_WARP_CUBIC = 0, /* Keys, a = -0.5: the crops people see */
    AG_WARP_LINEAR,    /* bilinear: the mesh's input crop (as MediaPipe's), 4x cheaper */
} ag_warp_filter;

/*
 * out (oh, ow, bands of src) <- src resampled through `m` (tools/face_reference.py `warp` is
 * the same algorithm): with s = sqrt|det m| the source pixels per output pixel, a box shrink
 * by f = floor(s) first when s >= 2 (the antialiasing prefilter; a temporary of 1/f^2 of the
 * image), then the filter (a Keys cubic, a = -0.5, or a tent) widened by r = max(1, s / f).
 * Only the window of source pixels the output's taps reach is read (and shrunk). Exactly
 * one of out_u8 (rounded, clamped) and out_f32 (0..255, unclamped) is non-NULL.
 */
int ag_face_warp(const ag_image *src, const ag_affine *m, int ow, int oh, ag_warp_border border,
                 ag_warp_filter filter, uint8_t *out_u8, float *out_f32, ag_error *err);

/* The most ag_face_warp allocates for a source of at most `pixels` pixels (any bands), no
 * side over `side`, and an output of ow x oh: its box-shrunk window, row sums and scratch
 * (the fusion's memory term, ag_face_fuse_bytes). */
size_t ag_face_warp_bytes(size_t pixels, size_t side, size_t ow, size_t oh);

/* The inverse of an affine map (the maps here are similarities: never singular). */
ag_affine ag_affine_invert(const ag_affine *m);

/* The affine map of the square crop of side `size` onto `quad` (TL, BL, BR, TR). */
ag_affine ag_face_quad_map(const float (*quad)[2], int size);

/* The FFHQ quad from 468 landmarks, or from the 6 keypoints (eyes, mouth) without them. */
void ag_face_quad_from_landmarks(const float (*lm)[2], float expand, float (*quad)[2]);
void ag_face_quad_from_keypoints(const float (*kp)[2], float expand, float (*quad)[2]);

/*
 * FFHQ's fill of a quad (image pixels) that leaves the image (fill.c), in the pixels of the
 * image shrunk by f: *out the crop padded by reflection, blurred and blended to the median
 * towards its outer edge, whose pixel (0, 0) is shrunk pixel origin; out->pixels NULL when
 * the quad stays inside (or is not a square of side < 2 size there). `out` is the caller's
 * (ag_image_fini).
 */
int ag_face_fill(const ag_image *image, int f, int size, const float (*quad)[2], ag_image *out,
                 int origin[2], ag_error *err);

/* FaceMesh's face oval, in order around the face. */
#define AG_FACE_OVAL_COUNT 36
extern const int ag_face_oval[AG_FACE_OVAL_COUNT];

/* One decoded anchor: score, box x0 y0 x1 y1, 6 keypoints, in letterbox pixels. */
typedef struct ag_face_candidate {
    float score;
    float v[16];
} ag_face_candidate;

struct ag_face_detector {
    ag_engine *detect, *mesh;      /* mesh NULL: keypoints only */
    float *input;                  /* (192, 192, 3) */
    float *regressors;             /* (48, 48, 16) */
    float *scores;                 /* (48, 48, 1) */
    float *landmarks;              /* (1, 1, 1404) */
    float *presence;               /* (1, 1, 1) */
    ag_face_candidate *pass;       /* AG_FACE_ANCHORS: one run's, in its 192 pixels */
    ag_face_candidate *candidates; /* AG_FACE_CANDIDATES: every run's, in image pixels */
    ag_face_candidate *kept;       /* AG_FACE_CANDIDATES */
    ag_face_timing timing;         /* the last call's */
};

double ag_face_now_ms(void); /* CLOCK_MONOTONIC */

/* The detector's raw maps (d->regressors, d->scores) of one pass on the view `m` (192
 * pixels -> image pixels) decoded: candidates over min_score appended to d->candidates[*n..]
 * (at most AG_FACE_CANDIDATES), less those touching an `interior` edge (bits left, right,
 * top, bottom). fuzz/fuzz_face.c calls this and ag_face_select without the networks. */
void ag_face_decode_pass(ag_face_detector *d, const ag_affine *m, int interior, float min_score,
                         int *n);

/* Weighted NMS of d->candidates[0..n), the largest max_faces kept in faces, sorted by box
 * area; returns how many; *found (may be NULL) the count before the cap. */
int ag_face_select(ag_face_detector *d, int n, int max_faces, ag_face *faces, int *found);

/* FaceMesh on one face (mesh.c): landmarks, presence and the quad; keypoints otherwise. */
int ag_face_mesh_run(ag_face_detector *d, const ag_image *image, float expand, ag_face *face,
                     ag_error *err);

#endif
