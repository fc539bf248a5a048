/*
 * fuse_enhance.c - a source face smaller than the target's sharpened before fusing (issue 31
 * item 4), so a face cut from a group photo is not fused as a blur into a sharp photo:
 *   restore  the source face's FFHQ-aligned crop at the restorer's size, restored (GPEN,
 *            GFPGAN, CodeFormer: ag_restore_faces on an aligned crop); the new source is
 *            that crop, its landmarks mapped into it;
 *   upscale  the face's window (its landmarks' box and half as much again each side, which
 *            holds the ring the warp reads) upscaled at the upscaler's scale, its result
 *            over the window bound first shrunk to fit it.
 * fuse.c then shrinks a result over twice the target's face as it shrinks any large source.
 */
#include "fuse_internal.h"

#include "../engine_internal.h"
#include "../util/util_internal.h"

#include <math.h>
#include <string.h>

/* The upscaler's result is sharpened by this unsharp mask: a GAN upscaler draws edges
 * but leaves skin smooth (esrgan-slim on a face cut from a group photo: its fused detail
 * 0.51 of the target's; with the mask, see docs/fusion.md). */
#define UNSHARP 1.5f

int ag_fuse_enhance_kind(const ag_fuse_options *o) {
    switch (o->enhance) {
    case AG_FUSE_ENHANCE_NONE: return AG_FUSE_ENHANCE_NONE;
    case AG_FUSE_ENHANCE_RESTORE: return o->restorer ? AG_FUSE_ENHANCE_RESTORE : -1;
    case AG_FUSE_ENHANCE_UPSCALE: return o->upscaler ? AG_FUSE_ENHANCE_UPSCALE : -1;
    default:
        return o->restorer   ? AG_FUSE_ENHANCE_RESTORE
               : o->upscaler ? AG_FUSE_ENHANCE_UPSCALE
                             : AG_FUSE_ENHANCE_NONE;
    }
}

/* face's landmarks, box and quad through m (new pixels <- old pixels). */
static void map_face(ag_face *face, const ag_affine *m) {
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        ag_fuse_point p =
            ag_fuse_apply(m, (ag_fuse_point){face->landmarks[i][0], face->landmarks[i][1]});
        face->landmarks[i][0] = (float)p.x, face->landmarks[i][1] = (float)p.y;
    }
    for (int k = 0; k < 4; k++) {
        ag_fuse_point p = ag_fuse_apply(m, (ag_fuse_point){face->quad[k][0], face->quad[k][1]});
        face->quad[k][0] = (float)p.x, face->quad[k][1] = (float)p.y;
    }
    double x0 = 1e300, y0 = 1e300, x1 = -1e300, y1 = -1e300;
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        double x = face->landmarks[i][0], y = face->landmarks[i][1];
        x0 = fmin(x0, x), x1 = fmax(x1, x), y0 = fmin(y0, y), y1 = fmax(y1, y);
    }
    face->box[0] = (float)x0, face->box[1] = (float)y0, face->box[2] = (float)x1,
    face->box[3] = (float)y1;
}

static int restore_source(const ag_image *src, const ag_face *sf, ag_engine *engine, ag_image *out,
                          ag_face *face, ag_error *err) {
    *face = *sf;
    int finite = 1;
    for (int k = 0; k < 4; k++)
        finite &= isfinite(face->quad[k][0]) && isfinite(face->quad[k][1]);
    if (!finite || face->quad[0][0] == face->quad[3][0])
        ag_face_quad_from_landmarks((const float(*)[2])face->landmarks, 1.0f, face->quad);
    int size = ag_model_get_info(engine->model)->min_side;
    ag_affine m = ag_face_quad_map(face->quad, size), inv = ag_affine_invert(&m);
    ag_image crop = {0};
    int rc = ag_face_align(src, face, size, &crop, err);
    ag_restore_options ro;
    ag_restore_options_init(&ro);
    ro.aligned = 1;
    if (rc == AG_OK)
        rc = ag_restore_faces(engine, NULL, &crop, &ro, out, NULL, err);
    ag_image_fini(&crop);
    if (rc == AG_OK)
        map_face(face, &inv);
    return rc;
}

/* An unsharp mask on im's colour bands: v + amount (v - the [1 2 1]^2 blur of v), a row
 * of three at a time from a copy. */
static int sharpen(ag_image *im, float amount, ag_error *err) {
    int w = im->width, h = im->height, b = im->bands;
    size_t row = (size_t)w * b;
    uint8_t *copy = ag_malloc(row * h);
    if (!copy)
        return ag_error_set(err, AG_E_NOMEM, "fuse: out of memory sharpening the source");
    memcpy(copy, im->pixels, row * h);
    for (int y = 0; y < h; y++) {
        const uint8_t *r[3] = {copy + row * (size_t)(y > 0 ? y - 1 : 0), copy + row * (size_t)y,
                               copy + row * (size_t)(y < h - 1 ? y + 1 : y)};
        for (int x = 0; x < w; x++) {
            int xl = (x > 0 ? x - 1 : 0) * b, xc = x * b, xr = (x < w - 1 ? x + 1 : x) * b;
            for (int c = 0; c < 3; c++) {
                int sum = 0;
                for (int k = 0; k < 3; k++)
                    sum += (k == 1 ? 2 : 1) * (r[k][xl + c] + 2 * r[k][xc + c] + r[k][xr + c]);
                float v = r[1][xc + c], s = v + amount * (v - (float)sum / 16);
                im->pixels[row * (size_t)y + (size_t)xc + c] = (uint8_t)(s <= 0     ? 0
                                                                         : s >= 255 ? 255
                                                                                    : s + 0.5f);
            }
        }
    }
    ag_free(copy);
    return AG_OK;
}

static int upscale_source(const ag_image *src, const ag_face *sf, ag_engine *engine,
                          size_t max_pixels, ag_image *out, ag_face *face, ag_error *err) {
    double box[4];
    ag_fuse_source_window(sf, src->width, src->height, box);
    double x0 = box[0], y0 = box[1], x1 = box[2], y1 = box[3];
    int scale = ag_model_get_info(engine->model)->scale;
    scale = scale > 1 ? scale : 1;
    /* the window, shrunk when its upscale would pass max_pixels */
    double r = fmin(1.0, sqrt((double)max_pixels / ((x1 - x0) * (y1 - y0) * scale * scale)));
    int w = (int)fmax(8, floor((x1 - x0) * r)), h = (int)fmax(8, floor((y1 - y0) * r));
    ag_image crop = {.width = w, .height = h, .bands = src->bands};
    crop.pixels = ag_malloc((size_t)w * h * src->bands);
    if (!crop.pixels)
        return ag_error_set(err, AG_E_NOMEM, "fuse: out of memory enhancing the source");
    ag_affine m = {(x1 - x0) / w, 0, x0, 0, (y1 - y0) / h, y0};
    int rc = ag_face_warp(src, &m, w, h, AG_WARP_REFLECT, AG_WARP_CUBIC, crop.pixels, NULL, err);
    if (rc == AG_OK)
        rc = ag_upscale(engine, &crop, NULL, out, err);
    ag_free(crop.pixels);
    if (rc == AG_OK)
        rc = sharpen(out, UNSHARP, err);
    if (rc)
        return rc;
    double sx = (double)out->width / (x1 - x0), sy = (double)out->height / (y1 - y0);
    ag_affine to_out = {sx, 0, -x0 * sx, 0, sy, -y0 * sy};
    *face = *sf;
    map_face(face, &to_out);
    return AG_OK;
}

int ag_fuse_enhance_source(const ag_image *src, const ag_face *sf, const ag_fuse_options *o,
                           int kind, size_t max_pixels, ag_image *out, ag_face *face,
                           ag_error *err) {
    memset(out, 0, sizeof *out);
    if (kind == AG_FUSE_ENHANCE_RESTORE)
        return restore_source(src, sf, o->restorer, out, face, err);
    return upscale_source(src, sf, o->upscaler, max_pixels, out, face, err);
}
