/*
 * restore.c - face restoration over a whole photo (issue 19): detect every face, crop it
 * FFHQ-aligned at the restorer's size (align.c, expand 1.0: the framing GPEN and GFPGAN are
 * trained on), restore it on the restorer's engine, blend restored and original crop by the
 * fidelity weight (GPEN's alpha), and paste it back through the feathered face mask
 * (paste.c). An aligned input (--aligned) is already the network's crop: it goes in as it is
 * (Lanczos3-resized only when it is not the network's size, never through the FFHQ warp and
 * its padded border) and the output is the restored crop, pixel for pixel.
 * One face at a time: the memory is one crop and one restored crop over the engine's arena.
 */
#include "face_internal.h"

#include "../engine_internal.h"
#include "../image/image_internal.h"

#include <string.h>

void ag_restore_options_init(ag_restore_options *o) {
    memset(o, 0, sizeof *o);
    o->fidelity = 1.0f;
    o->max_faces = 8;
    o->codeformer_fidelity = 0.5f;
}

static int check_options(const ag_engine *engine, const ag_restore_options *o, ag_error *err) {
    const ag_model_info *info = ag_model_get_info(engine->model);
    if (info->role != AG_MODEL_RESTORER)
        return ag_error_set(err, AG_E_ARG,
                            "%s is a %s, not a face restorer (GPEN, GFPGAN, CodeFormer)",
                            info->name, info->kind);
    if (!(o->fidelity >= 0.0f && o->fidelity <= 1.0f))
        return ag_error_set(err, AG_E_ARG, "fidelity %g is not in [0, 1]", (double)o->fidelity);
    if (!(o->codeformer_fidelity >= 0.0f && o->codeformer_fidelity <= 1.0f))
        return ag_error_set(err, AG_E_ARG, "codeformer fidelity %g is not in [0, 1]",
                            (double)o->codeformer_fidelity);
    if (o->max_faces < 1 || o->max_faces > AG_FACE_MAX)
        return ag_error_set(err, AG_E_ARG, "max_faces %d is not in [1, %d]", o->max_faces,
                            AG_FACE_MAX);
    return AG_OK;
}

/* crop <- fidelity * restored + (1 - fidelity) * crop, rounded. */
static void blend(ag_image *crop, const ag_image *restored, float fidelity) {
    size_t n = (size_t)crop->width * crop->height * crop->bands;
    if (fidelity >= 1.0f) {
        memcpy(crop->pixels, restored->pixels, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float v = fidelity * restored->pixels[i] + (1.0f - fidelity) * crop->pixels[i];
        crop->pixels[i] = (uint8_t)(v + 0.5f);
    }
}

/* The face's aligned crop at `size`, restored and blended into *crop. */
static int restore_crop(ag_engine *engine, const ag_image *in, const ag_face *face, int size,
                        float fidelity, ag_image *crop, ag_error *err) {
    ag_image restored = {0};
    int rc = ag_face_align(in, face, size, crop, err);
    if (rc == AG_OK)
        rc = ag_stylize(engine, crop, 0, &restored, err);
    if (rc == AG_OK)
        blend(crop, &restored, fidelity);
    ag_image_fini(&restored);
    return rc;
}

static int copy_image(const ag_image *in, ag_image *out, ag_error *err) {
    size_t n = (size_t)in->width * in->height * in->bands;
    *out = *in;
    out->pixels = ag_malloc(n);
    if (!out->pixels)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for a %dx%d image", in->width,
                            in->height);
    memcpy(out->pixels, in->pixels, n);
    return AG_OK;
}

/* Lanczos3 shrink of `in` to exactly width x height (libvips). */
static int shrink(const ag_image *in, int width, int height, ag_image *out, ag_error *err) {
    VipsImage *wrapped = NULL, *small = NULL;
    int rc = ag_vips_wrap(in, &wrapped, err);
    if (rc == AG_OK)
        rc = ag_vips_resize_exact(wrapped, width, height, &small, "aligned face", err);
    if (rc == AG_OK)
        rc = ag_vips_read(small, "aligned face", out, err);
    if (small)
        g_object_unref(small);
    if (wrapped)
        g_object_unref(wrapped);
    return rc;
}

/* An aligned face at the network's size: a copy when it is that size already, else enlarged
 * (Lanczos3) to cover it and shrunk to it. */
static int aligned_input(const ag_image *in, int size, ag_image *out, ag_error *err) {
    memset(out, 0, sizeof *out);
    if (in->width == size && in->height == size)
        return copy_image(in, out, err);
    if (in->width >= size && in->height >= size)
        return shrink(in, size, size, out, err);
    int w = in->width > size ? in->width : size, h = in->height > size ? in->height : size;
    ag_image big = {0};
    int rc = ag_image_enlarge(in, w, h, "aligned face", &big, err);
    if (rc == AG_OK && (w > size || h > size))
        rc = shrink(&big, size, size, out, err);
    else if (rc == AG_OK)
        *out = big, big = (ag_image){0};
    ag_image_fini(&big);
    return rc;
}

/* An aligned face restored whole: *out is the network's output (blended by fidelity). */
static int restore_aligned(ag_engine *engine, const ag_image *in, int size, float fidelity,
                           ag_image *out, ag_error *err) {
    ag_image restored = {0};
    int rc = aligned_input(in, size, out, err);
    if (rc == AG_OK)
        rc = ag_stylize(engine, out, 0, &restored, err);
    if (rc == AG_OK)
        blend(out, &restored, fidelity);
    ag_image_fini(&restored);
    return rc;
}

int ag_restore_faces(ag_engine *engine, ag_face_detector *detector, const ag_image *in,
                     const ag_restore_options *options, ag_image *out, ag_restore_result *result,
                     ag_error *err) {
    memset(out, 0, sizeof *out);
    ag_restore_result res = {0};
    ag_restore_options o;
    if (options)
        o = *options;
    else
        ag_restore_options_init(&o);
    int rc = check_options(engine, &o, err);
    if (rc == AG_OK) /* CodeFormer's w; other restorers have no node that reads it */
        ag_engine_set_runtime_alpha(engine, o.codeformer_fidelity);
    int size = ag_model_get_info(engine->model)->min_side;
    if (rc == AG_OK && o.aligned) {
        rc = restore_aligned(engine, in, size, o.fidelity, out, err);
        res.found = res.restored = rc == AG_OK;
    } else if (rc == AG_OK) {
        ag_face *faces = ag_malloc(sizeof *faces * (size_t)o.max_faces);
        ag_face_options fo = {.max_faces = o.max_faces, .expand = 1.0f};
        rc = faces ? ag_faces_detect(detector, in, &fo, faces, o.max_faces, &res.restored,
                                     &res.found, err)
                   : ag_error_set(err, AG_E_NOMEM, "out of memory for faces");
        if (rc == AG_OK)
            rc = copy_image(in, out, err);
        if (rc == AG_OK && o.progress && res.restored > 0) /* the total, before the first */
            o.progress(o.progress_user, 0, res.restored);
        for (int i = 0; rc == AG_OK && i < res.restored; i++) {
            ag_image crop = {0};
            rc = restore_crop(engine, in, &faces[i], size, o.fidelity, &crop, err);
            if (rc == AG_OK)
                rc = ag_face_paste(out, &faces[i], &crop, err);
            ag_image_fini(&crop);
            if (rc == AG_OK && o.progress && o.progress(o.progress_user, i + 1, res.restored))
                rc = ag_error_set(err, AG_E_CANCELLED, "cancelled");
        }
        ag_free(faces);
    }
    if (rc != AG_OK)
        ag_image_fini(out);
    if (result)
        *result = rc == AG_OK ? res : (ag_restore_result){0};
    return rc;
}
