/*
 * oracle.h - what every model fuzz target asserts of a file that loads: the graph builds
 * (ag_model_build: weights bound, ag_graph_check) and no map that a kernel reads is wider
 * than its per-channel arrays on the stack (AG_MAP_MAX_CHANNELS), but a linear's vector read
 * by slices and an output nothing reads.
 */
#ifndef AG_FUZZ_ORACLE_H
#define AG_FUZZ_ORACLE_H

#include "../src/graph/graph.h"
#include "../src/kernels/kernels.h"
#include "../src/model/model_internal.h"

static int fuzz_is_output(const ag_graph *g, int i) {
    for (int o = 0; o < g->output_count; o++)
        if (g->outputs[o] == i)
            return 1;
    return 0;
}

static void fuzz_check_model(const ag_tensor_set *set, const ag_graph *graph, const char *path) {
    ag_model *m = NULL;
    ag_error err = {0};
    if (ag_model_build(set, graph, path, "fuzz", &m, &err) != AG_OK) {
        AG_ASSERT(m == NULL && err.code != 0);
        return;
    }
    const ag_graph *g = &m->graph;
    for (int i = 1; i < g->count; i++) {
        const ag_node *n = &g->nodes[i];
        for (int j = 0; j < AG_NODE_MAX_SRC && n->src[j] >= 0; j++) {
            const ag_node *s = &g->nodes[n->src[j]];
            AG_ASSERT(s->out_c <= AG_MAP_MAX_CHANNELS ||
                      (s->op == AG_OP_LINEAR && n->op == AG_OP_SLICE));
        }
        AG_ASSERT(n->out_c <= AG_MAP_MAX_CHANNELS || n->op == AG_OP_LINEAR || fuzz_is_output(g, i));
    }
    ag_model_destroy(m);
}

#endif
