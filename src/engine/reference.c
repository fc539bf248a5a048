/*
 * reference.c - the reference backend: the graph run node by node with the plain kernels,
 * every node's output its own fp32 map in the arena (offsets by liveness), nothing fused.
 * Slow and obvious: the oracle the oneDNN backend's fusion is tested against, and the
 * interpreter of any graph a loader produces.
 */
#include "state.h"

#include <math.h>
#include <string.h>

static size_t map_floats(ag_shape s) {
    return (size_t)s.h * s.w * s.c;
}

/* Every node its own buffer, live from its step to its last reader's. */
int ag_reference_plan(ag_engine *e, ag_error *err) {
    (void)err;
    const ag_graph *g = &e->model->graph;
    int last[AG_GRAPH_MAX_NODES] = {0};
    for (int i = 0; i < g->count; i++)
        last[i] = i;
    for (int i = 0; i < g->count; i++)
        for (int j = 0; j < AG_NODE_MAX_SRC; j++)
            if (g->nodes[i].src[j] >= 0)
                last[g->nodes[i].src[j]] = i;
    for (int o = 0; o < g->output_count; o++)
        last[g->outputs[o]] = g->count;
    size_t scratch = 0;
    for (int i = 1; i < g->count; i++) {
        size_t s = ag_node_scratch_floats(&g->nodes[i], e->shapes, i);
        scratch = s > scratch ? s : scratch;
        e->node_buffer[i] =
            ag_engine_plan_add(e, sizeof(float) * map_floats(e->shapes[i]), i, last[i]);
    }
    e->node_buffer[0] = ag_engine_plan_add(e, sizeof(float) * map_floats(e->shapes[0]), 0, last[0]);
    e->pad_id = ag_engine_plan_add(e, sizeof(float) * (scratch ? scratch : 1), 0, g->count);
    return AG_OK;
}

int ag_reference_steps(ag_engine *e, const ag_io *io, ag_error *err) {
    const ag_graph *g = &e->model->graph;
    float *x = ag_engine_buffer(e, e->node_buffer[0]);
    size_t n = (size_t)e->planned_h * e->planned_w;
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < 3; c++)
            x[i * 3 + c] = io->in_u8 ? (float)io->in_u8[i * io->bands + c] / 127.5f - 1.0f
                                     : io->in_f32[i * 3 + c];
    float *scratch = ag_engine_buffer(e, e->pad_id);
    for (int i = 1; i < g->count; i++) {
        const ag_node *node = &g->nodes[i];
        int rc = ag_engine_cancelled(e, err);
        if (rc)
            return rc;
        const float *src[AG_NODE_MAX_SRC] = {NULL};
        for (int j = 0; j < AG_NODE_MAX_SRC && node->src[j] >= 0; j++)
            src[j] = ag_engine_buffer(e, e->node_buffer[node->src[j]]);
        ag_node now;
        ag_node_run(ag_engine_node_now(e, node, &now), e->shapes, i, src,
                    ag_engine_buffer(e, e->node_buffer[i]), scratch, NULL, e->resize, 1);
    }
    return AG_OK;
}

int ag_reference_run(ag_engine *e, const ag_io *io, ag_error *err) {
    const ag_graph *g = &e->model->graph;
    int rc = ag_reference_steps(e, io, err);
    if (rc)
        return rc;
    int out = g->outputs[0];
    ag_shape s = e->shapes[out];
    ag_fused_output(io->out_f32, io->out_u8, io->bands, ag_engine_buffer(e, e->node_buffer[out]), 0,
                    s.h, s.w, 1);
    return AG_OK;
}
