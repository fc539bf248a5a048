/*
 * pipeline.c - one request on one image: restore faces, stylise, upscale, each step over its
 * engine when the request names one (animegan.h's ag_pipeline). Every front end (cli/,
 * server/, python/, the video path) parses its own input into an ag_pipeline and calls
 * ag_pipeline_run; a new step is a row here and a field there.
 */
#include "animegan.h"

#include "../util/util_internal.h"

#include <string.h>

typedef struct step_row {
    const char *name;
    int (*runs)(const ag_pipeline *p);
    int (*run)(const ag_pipeline *p, const ag_image *in, ag_image *out, ag_pipeline_result *res,
               ag_error *err);
} step_row;

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
    [AG_STEP_RESTORE] = {.name = "restore", .runs = restore_runs, .run = restore_run},
    [AG_STEP_STYLIZE] = {.name = "stylize", .runs = stylize_runs, .run = stylize_run},
    [AG_STEP_UPSCALE] = {.name = "upscale", .runs = upscale_runs, .run = upscale_run},
};

void ag_pipeline_init(ag_pipeline *p) {
    memset(p, 0, sizeof *p);
    ag_restore_options_init(&p->restore);
    ag_upscale_options_init(&p->upscale);
}

const char *ag_pipeline_step_name(ag_pipeline_step step) {
    return step >= 0 && step < AG_STEP_COUNT ? steps[step].name : "?";
}

static int copy_image(const ag_image *in, ag_image *out, ag_error *err) {
    size_t bytes = (size_t)in->width * (size_t)in->height * (size_t)in->bands;
    *out = *in;
    if (!(out->pixels = ag_malloc(bytes ? bytes : 1)))
        return ag_error_set(err, AG_E_NOMEM, "out of memory for a %dx%d image", in->width,
                            in->height);
    memcpy(out->pixels, in->pixels, bytes);
    return AG_OK;
}

/* The steps from `in`; `owned` (== in, or NULL when borrowed) is freed as soon as the first
 * step has its result, so a run holds at most two images at a time. */
static int run_steps(const ag_pipeline *p, const ag_image *in, ag_image *owned, ag_image *out,
                     ag_pipeline_result *res, ag_error *err) {
    memset(res, 0, sizeof *res);
    res->failed = AG_STEP_COUNT;
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
