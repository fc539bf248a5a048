/*
 * engine.c - the engine's public API: plans and runs a model's graph, image in -> tensor ->
 * graph -> tensor -> image.
 *
 * At create, the precision mode is decided (mode.c) and the graph lowered once into groups
 * (lower.c): each conv with the per-channel chain that follows it (norm, LeakyReLU, residual
 * add), which its readers apply on the fly. Planning happens once per image size (plan.c):
 * every node's shape, each group's kernel kind and kernel with its prepared weights
 * (kind.h, kinds.c), and one arena holding every activation at offsets from ag_arena_plan.
 * Running (run.c) then only binds pointers and calls kernels: nothing in the step loop
 * allocates.
 *
 * Two backends share the graph and its shapes:
 *   onednn     convs on oneDNN, each reading its padded input rows band by band, built on
 *              the fly from the group it reads (norm, residual, activation, padding, resize,
 *              or the concatenation of several groups' maps); the other ops on whole maps.
 *   reference  every node on its own with the plain kernels (reference.c): the oracle.
 */
#include "kind.h"

#include "../util/util_internal.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>

/* The steps, then the output pass into the image. */
static int run_onednn(ag_engine *e, const ag_io *io, ag_error *err) {
    int rc = ag_engine_run_steps(e, io, err);
    if (rc)
        return rc;
    const ag_group_exec *x = &e->exec[e->output_group];
    ag_fused_output(io->out_f32, io->out_u8, io->bands, ag_engine_y_map(e, e->output_group),
                    e->output_tanh, x->out.h, x->out.w, e->threads);
    return AG_OK;
}

int ag_engine_run_io(ag_engine *e, const ag_io *io, int width, int height, ag_error *err) {
    int rc = ag_engine_prepare(e, width, height, err);
    if (rc)
        return rc;
    ag_shape out = e->shapes[e->model->graph.outputs[0]];
    if (out.h != height || out.w != width || out.c != 3)
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "%s gives a %dx%dx%d output for a %dx%d image, not an image of its "
                            "size",
                            e->model->info.name, out.w, out.h, out.c, width, height);
    omp_set_num_threads(e->threads);
    if (e->options.backend == AG_BACKEND_REFERENCE)
        return ag_reference_run(e, io, err);
    return run_onednn(e, io, err);
}

int ag_engine_run_raw(ag_engine *e, const float *in, int width, int height, float *const *outs,
                      ag_error *err) {
    int rc = ag_engine_prepare(e, width, height, err);
    if (rc)
        return rc;
    omp_set_num_threads(e->threads);
    ag_io io = {.in_f32 = in, .bands = 3};
    const ag_graph *g = &e->model->graph;
    rc = e->options.backend == AG_BACKEND_REFERENCE ? ag_reference_steps(e, &io, err)
                                                    : ag_engine_run_steps(e, &io, err);
    if (rc)
        return rc;
    for (int o = 0; o < g->output_count; o++) {
        ag_shape s = e->shapes[g->outputs[o]];
        size_t n = (size_t)s.h * s.w * s.c;
        const float *src = e->options.backend == AG_BACKEND_REFERENCE
                               ? ag_engine_buffer(e, e->node_buffer[g->outputs[o]])
                               : ag_engine_y_map(e, e->output_groups[o]);
        for (size_t i = 0; i < n; i++)
            outs[o][i] = o == 0 && e->output_tanh && e->options.backend != AG_BACKEND_REFERENCE
                             ? tanhf(src[i])
                             : src[i];
    }
    return AG_OK;
}

int ag_engine_output_shape(const ag_engine *e, int index, int *h, int *w, int *c) {
    const ag_graph *g = &e->model->graph;
    if (index < 0 || index >= g->output_count || !e->planned_w)
        return -1;
    ag_shape s = e->shapes[g->outputs[index]];
    *h = s.h, *w = s.w, *c = s.c;
    return g->output_count;
}

int ag_engine_run_f32(ag_engine *e, const float *in, int width, int height, float *out,
                      ag_error *err) {
    ag_io io = {.in_f32 = in, .out_f32 = out, .bands = 3};
    return ag_engine_run_io(e, &io, width, height, err);
}

static int engine_alloc(ag_engine *e, ag_error *err) {
    int n = e->model->graph.count;
    e->buffer_capacity = 3 * n + 16; /* int8: the row pairs of each q8 map too */
    e->shapes = ag_calloc((size_t)n, sizeof *e->shapes);
    e->exec = ag_calloc((size_t)n, sizeof *e->exec);
    e->node_buffer = ag_calloc((size_t)n, sizeof *e->node_buffer);
    e->buffers = ag_calloc((size_t)e->buffer_capacity, sizeof *e->buffers);
    if (!e->shapes || !e->exec || !e->node_buffer || !e->buffers)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    return AG_OK;
}

int ag_engine_create(const ag_model *model, const ag_engine_options *options, ag_engine **out,
                     ag_error *err) {
    *out = NULL;
    ag_engine_options defaults = {0}, resolved;
    ag_mode mode;
    int rc = ag_mode_decide(model, options ? options : &defaults, &mode, &resolved, err);
    if (rc)
        return rc;
    const ag_engine_options *o = &resolved;
    ag_engine *e = ag_calloc(1, sizeof *e);
    if (!e)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    e->model = model;
    e->options = *o;
    e->threads = o->threads > 0 ? o->threads : ag_cpu_count();
    e->band_bytes_target = AG_BAND_BYTES;
    const char *band_env = getenv("AG_BAND_BYTES"); /* for tuning runs only */
    if (band_env && atol(band_env) > 0)
        e->band_bytes_target = (size_t)atol(band_env);
    e->resize = o->resize;
    e->mode = mode;
    e->band_u8_id = e->range_id = e->q8_tmp_id = -1;
    const char *profile = getenv("AG_PROFILE"); /* for tuning runs only */
    if (profile && atoi(profile) > 0) {
        e->profile_ms = ag_calloc(AG_OP_COUNT, sizeof *e->profile_ms);
        e->profile_steps = ag_calloc(AG_OP_COUNT, sizeof *e->profile_steps);
        if (atoi(profile) > 1)
            e->profile_group_ms = ag_calloc(AG_GRAPH_MAX_NODES, sizeof *e->profile_group_ms);
    }
    rc = engine_alloc(e, err);
    if (rc == AG_OK && o->backend == AG_BACKEND_ONEDNN)
        rc = ag_engine_lower(e, err);
    if (rc == AG_OK && ag_mode_int8_maps(e))
        rc = ag_engine_quantize_weights(e, err);
    if (rc == AG_OK && o->backend == AG_BACKEND_ONEDNN)
        rc = ag_dnnl_create(&e->dnnl, err);
    if (rc == AG_OK && ag_mode_modconv_bf16(e))
        rc = ag_model_bf16_weights(model, err);
    if (rc) {
        ag_engine_destroy(e);
        return rc;
    }
    *out = e;
    return AG_OK;
}

void ag_engine_destroy(ag_engine *e) {
    if (!e)
        return;
    ag_engine_print_profile(e);
    ag_free(e->profile_group_ms);
    ag_free(e->profile_ms);
    ag_free(e->profile_steps);
    ag_engine_destroy_kernels(e);
    ag_dnnl_destroy(e->dnnl);
    ag_free(e->weights_block);
    ag_free(e->int8_block);
    ag_free(e->arena_block);
    ag_free(e->groups);
    ag_free(e->affine_block);
    ag_free(e->shapes);
    ag_free(e->exec);
    ag_free(e->node_buffer);
    ag_free(e->buffers);
    ag_free(e);
}

void ag_engine_release(ag_engine *e) {
    if (!e)
        return;
    ag_engine_destroy_kernels(e);
    ag_free(e->weights_block);
    e->weights_block = NULL;
    e->weights = NULL;
    ag_free(e->arena_block);
    e->arena = e->arena_block = NULL;
    e->arena_bytes = 0;
    e->planned_w = e->planned_h = 0;
}

size_t ag_engine_arena_bytes(const ag_engine *e) {
    return e->arena_bytes;
}

/* What an engine would plan for width x height: its arena and its prepared weights. */
static void measure(const ag_model *model, const ag_engine_options *options, int width, int height,
                    size_t *arena, size_t *prepared) {
    ag_engine *e;
    ag_error err;
    *arena = *prepared = 0;
    if (ag_engine_create(model, options, &e, &err) != AG_OK)
        return;
    e->measure_only = 1; /* plan, but allocate neither the arena nor prepared weights */
    if (ag_engine_prepare(e, width, height, &err) == AG_OK)
        *arena = e->arena_bytes, *prepared = e->prepared_bytes;
    ag_engine_destroy(e);
}

size_t ag_engine_arena_bytes_for(const ag_model *model, const ag_engine_options *options, int width,
                                 int height) {
    size_t arena, prepared;
    measure(model, options, width, height, &arena, &prepared);
    return arena;
}

size_t ag_engine_prepared_bytes_for(const ag_model *model, const ag_engine_options *options,
                                    int width, int height) {
    size_t arena, prepared;
    measure(model, options, width, height, &arena, &prepared);
    return prepared;
}

double ag_model_flop(const ag_model *model, int width, int height) {
    return ag_graph_flop(&model->graph, width, height);
}

void ag_engine_set_cancel(ag_engine *e, int (*cancelled)(void *user), void *user) {
    e->cancelled = cancelled;
    e->cancel_user = user;
}

void ag_engine_set_progress(ag_engine *e, int (*progress)(void *user, int done, int total),
                            void *user) {
    e->progress = progress;
    e->progress_user = user;
}
