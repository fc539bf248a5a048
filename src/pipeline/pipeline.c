/*
 * pipeline.c - one request on one image: fuse a face, restore faces, stylise, upscale, each step
 * over its engine when the request names one (animegan.h's ag_pipeline). Every front end (cli/,
 * server/, python/, the video path) parses its own input into an ag_pipeline and calls
 * ag_pipeline_run; a new step is a row here and a field there.
 */
#include "animegan.h"

#include "../util/util_internal.h"

#include <math.h>
#include <string.h>

typedef struct step_row {
    const char *name;
    int (*runs)(const ag_pipeline *p);
    int (*run)(const ag_pipeline *p, const ag_image *in, ag_image *out, ag_pipeline_result *res,
               ag_error *err);
} step_row;

static int copy_image(const ag_image *in, ag_image *out, ag_error *err) {
    size_t bytes = (size_t)in->width * (size_t)in->height * (size_t)in->bands;
    *out = *in;
    if (!(out->pixels = ag_malloc(bytes ? bytes : 1)))
        return ag_error_set(err, AG_E_NOMEM, "out of memory for a %dx%d image", in->width,
                            in->height);
    memcpy(out->pixels, in->pixels, bytes);
    return AG_OK;
}

/* ---- fuse: a source face into one face of the image ---------------------------------------- */

#define FUSE_MIN_FACE_PX 64 /* ag_face_fuse's smallest face: a clip's smaller one passes */

static int fuse_runs(const ag_pipeline *p) {
    return p->fuse_source != NULL;
}

static int fuse_smallest_side(const ag_face *f) {
    return (int)fminf(f->box[2] - f->box[0], f->box[3] - f->box[1]);
}

/* A clip's face followed in the last frame at an eighth of the frame's long side or more:
 * the detector's whole-image pass finds it (its tiles are for faces under a sixteenth), at
 * a tenth of the cost on large frames. */
static int followed_large(const ag_pipeline *p, const ag_image *in) {
    float box[4];
    if (!p->fuse_track || !ag_face_track_last_box(p->fuse_track, box))
        return 0;
    float side = fminf(box[2] - box[0], box[3] - box[1]);
    return side * 8 >= (float)(in->width > in->height ? in->width : in->height);
}

/* The face of `in` to fuse into: *chosen, or *found 0 when this frame of a clip has none
 * (fuse_track), an error for a still image without it. */
static int fuse_target(const ag_pipeline *p, const ag_image *in, ag_face *chosen, int *found,
                       ag_pipeline_result *res, ag_error *err) {
    *found = 0;
    if (p->fuse_target)
        return *chosen = *p->fuse_target, *found = 1, AG_OK;
    if (!p->detector)
        return ag_error_set(err, AG_E_ARG, "fuse: no face detector and no target face given");
    ag_face *faces = ag_malloc(sizeof *faces * AG_FACE_MAX);
    if (!faces)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for the faces of a %dx%d image",
                            in->width, in->height);
    ag_face_options fo = {.max_faces = AG_FACE_MAX, .single_pass = followed_large(p, in)};
    int count = 0, n = p->fuse_target_face > 0 ? p->fuse_target_face : 1;
    int rc = ag_faces_detect(p->detector, in, &fo, faces, AG_FACE_MAX, &count, NULL, err);
    if (rc == AG_OK && p->fuse_track) {
        rc = ag_face_track_update(p->fuse_track, in, faces, count, &res->fused_face, chosen, err);
        *found = res->fused_face >= 0 && fuse_smallest_side(chosen) >= FUSE_MIN_FACE_PX;
    } else if (rc == AG_OK && count == 0) {
        rc = ag_error_set(err, AG_E_ARG, "no face found in the image");
    } else if (rc == AG_OK && count < n) {
        rc = ag_error_set(err, AG_E_ARG, "face %d asked, but the image has %d face%s", n, count,
                          count == 1 ? "" : "s");
    } else if (rc == AG_OK && !faces[n - 1].has_landmarks) {
        rc = ag_error_set(err, AG_E_ARG, "face %d has no landmarks (FaceMesh did not confirm it)",
                          n);
    } else if (rc == AG_OK) {
        *chosen = faces[n - 1], *found = 1, res->fused_face = n - 1;
    }
    ag_free(faces);
    return rc;
}

static int fuse_run(const ag_pipeline *p, const ag_image *in, ag_image *out,
                    ag_pipeline_result *res, ag_error *err) {
    ag_face *target = ag_malloc(sizeof *target);
    if (!target)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for a face");
    int found = 0;
    res->fused_face = -1;
    int rc = fuse_target(p, in, target, &found, res, err);
    if (rc == AG_OK && found)
        rc =
            ag_face_fuse(p->fuse_source, p->fuse_source_face, in, target, &p->fuse, out, NULL, err);
    else if (rc == AG_OK) /* a frame without the face: as it is */
        rc = copy_image(in, out, err);
    res->fused = rc == AG_OK && found;
    ag_free(target);
    return rc;
}

/* ---- restore, stylize, upscale -----------------------------------------------------------------
 */

static int restore_runs(const ag_pipeline *p) {
    return p->restorer != NULL;
}

static int restore_run(const ag_pipeline *p, const ag_image *in, ag_image *out,
                       ag_pipeline_result *res, ag_error *err) {
    ag_restore_options o = p->restore;
    if (p->progress)
        o.progress = p->progress, o.progress_user = p->progress_user;
    return ag_restore_faces(p->restorer, p->detector, in, &o, out, &res->faces, err);
}

static int stylize_runs(const ag_pipeline *p) {
    return p->style != NULL || p->stylize != NULL;
}

static int stylize_run(const ag_pipeline *p, const ag_image *in, ag_image *out,
                       ag_pipeline_result *res, ag_error *err) {
    (void)res;
    if (p->stylize)
        return p->stylize(p->stylize_user, in, out, err);
    return ag_stylize(p->style, in, p->side_by_side, out, err);
}

static int upscale_runs(const ag_pipeline *p) {
    return p->upscaler != NULL;
}

static int upscale_run(const ag_pipeline *p, const ag_image *in, ag_image *out,
                       ag_pipeline_result *res, ag_error *err) {
    (void)res;
    ag_upscale_options o = p->upscale;
    if (p->progress)
        o.progress = p->progress, o.progress_user = p->progress_user;
    return ag_upscale(p->upscaler, in, &o, out, err);
}

static const step_row steps[AG_STEP_COUNT] = {
    [AG_STEP_FUSE] = {.name = "fuse", .runs = fuse_runs, .run = fuse_run},
    [AG_STEP_RESTORE] = {.name = "restore", .runs = restore_runs, .run = restore_run},
    [AG_STEP_STYLIZE] = {.name = "stylize", .runs = stylize_runs, .run = stylize_run},
    [AG_STEP_UPSCALE] = {.name = "upscale", .runs = upscale_runs, .run = upscale_run},
};

void ag_pipeline_init(ag_pipeline *p) {
    memset(p, 0, sizeof *p);
    ag_fuse_options_init(&p->fuse);
    ag_restore_options_init(&p->restore);
    ag_upscale_options_init(&p->upscale);
}

const char *ag_pipeline_step_name(ag_pipeline_step step) {
    return step >= 0 && step < AG_STEP_COUNT ? steps[step].name : "?";
}

/* The steps from `in`; `owned` (== in, or NULL when borrowed) is freed as soon as the first
 * step has its result, so a run holds at most two images at a time. */
static int run_steps(const ag_pipeline *p, const ag_image *in, ag_image *owned, ag_image *out,
                     ag_pipeline_result *res, ag_error *err) {
    memset(res, 0, sizeof *res);
    res->failed = AG_STEP_COUNT;
    res->fused_face = -1;
    *out = (ag_image){0};
    ag_image held = {0}; /* the last step's result */
    const ag_image *cur = in;
    int rc = AG_OK;
    for (int s = 0; s < AG_STEP_COUNT; s++) {
        if (!steps[s].runs(p))
            continue;
        if (p->step_started)
            p->step_started(p->progress_user, (ag_pipeline_step)s);
        ag_image next = {0};
        if ((rc = steps[s].run(p, cur, &next, res, err)) != AG_OK) {
            res->failed = (ag_pipeline_step)s;
            break;
        }
        ag_image_fini(&held);
        ag_image_fini(owned);
        held = next, cur = &held;
    }
    if (rc == AG_OK && cur == &held)
        *out = held, held = (ag_image){0};
    else if (rc == AG_OK && owned)
        *out = *owned, *owned = (ag_image){0};
    else if (rc == AG_OK)
        rc = copy_image(in, out, err);
    ag_image_fini(&held);
    ag_image_fini(owned);
    return rc;
}

int ag_pipeline_run(const ag_pipeline *p, ag_image *image, ag_image *out,
                    ag_pipeline_result *result, ag_error *err) {
    ag_pipeline_result local;
    return run_steps(p, image, image, out, result ? result : &local, err);
}

int ag_pipeline_apply(const ag_pipeline *p, const ag_image *in, ag_image *out,
                      ag_pipeline_result *result, ag_error *err) {
    ag_pipeline_result local;
    return run_steps(p, in, NULL, out, result ? result : &local, err);
}
