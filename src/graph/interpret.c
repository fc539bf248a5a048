/*
 * interpret.c - the reference backend: the graph run node by node with the plain kernels,
 * every node's output its own fp32 map in the arena (offsets by liveness), nothing fused.
 * Slow and obvious: the oracle the oneDNN backend's fusion is tested against, and the
 * interpreter of any graph a loader produces.
 */
#include "../engine_internal.h"
#include "ops.h"

#include <math.h>
#include <string.h>

static size_t map_floats(ag_shape s) {
    return (size_t)s.h * s.w * s.c;
}

/* The shapes of node `index`'s inputs. */
static void input_shapes(const ag_node *n, const ag_shape *shapes, ag_shape *in) {
    for (int j = 0; j < AG_NODE_MAX_SRC; j++)
        in[j] = n->src[j] >= 0 ? shapes[n->src[j]] : (ag_shape){0, 0, 0};
}

size_t ag_node_scratch_floats(const ag_node *n, const ag_shape *shapes, int index) {
    const ag_op_desc *d = ag_op_desc_of(n->op);
    ag_shape in[AG_NODE_MAX_SRC];
    if (index == 0 || !d->scratch)
        return 0;
    input_shapes(n, shapes, in);
    return d->scratch(n, in, shapes[index]);
}

void ag_node_run(const ag_node *n, const ag_shape *shapes, int index, const float *const *src,
                 float *out, float *scratch, const ag_node_fast *fast, ag_resize_mode resize,
                 int threads) {
    const ag_op_desc *d = ag_op_desc_of(n->op);
    ag_op_io io = {.out = out,
                   .o = shapes[index],
                   .scratch = scratch,
                   .fast = fast != NULL,
                   .bf16 = fast ? fast->bf16 : NULL,
                   .wino = fast ? fast->wino : NULL,
                   .int8 = fast ? fast->int8 : NULL,
                   .act = fast ? fast->act : NULL,
                   .threads = threads,
                   .resize = resize};
    input_shapes(n, shapes, io.in);
    io.src_count = ag_node_src_count(n);
    for (int j = 0; j < io.src_count; j++)
        io.src[j] = src[j];
    AG_ASSERT(d->run);
    d->run(n, &io);
}

/* ---- the reference plan ---------------------------------------------------------------- */

int ag_interpret_plan(ag_engine *e, ag_error *err) {
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

void ag_interpret_steps(ag_engine *e, const ag_io *io) {
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
        const float *src[AG_NODE_MAX_SRC] = {NULL};
        for (int j = 0; j < AG_NODE_MAX_SRC && node->src[j] >= 0; j++)
            src[j] = ag_engine_buffer(e, e->node_buffer[node->src[j]]);
        ag_node_run(node, e->shapes, i, src, ag_engine_buffer(e, e->node_buffer[i]), scratch, NULL,
                    e->resize, 1);
    }
}

void ag_interpret_run(ag_engine *e, const ag_io *io) {
    const ag_graph *g = &e->model->graph;
    ag_interpret_steps(e, io);
    int out = g->outputs[0];
    ag_shape s = e->shapes[out];
    ag_fused_output(io->out_f32, io->out_u8, io->bands, ag_engine_buffer(e, e->node_buffer[out]), 0,
                    s.h, s.w, 1);
}
