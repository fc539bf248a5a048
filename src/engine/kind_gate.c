/*
 * kind_gate.c - the upscalers' gates in int8 engines: Mish and sigmoid_gate (SiLU, SPAN's and
 * RealPLKSR's attentions) on whole fp32 maps, as the generic kind runs them, but 16 lanes at
 * a time (ag_fused_gate_map) instead of the op table's scalar expf loops; SPAN's attention
 * with the add before it, one pass (the add's group, the gate its act: lower.c). fp32 engines
 * apply these gates in the conv chains (lower.c); int8 chains know only LeakyReLUs, so there
 * they stay passes, and these passes were a third of RealPLKSR's int8 time.
 */
#include "kind.h"

static int gate_applies(const ag_engine *e, int gi) {
    ag_op op = ag_engine_head(e, gi)->op;
    return ag_mode_int8_maps(e) && (op == AG_OP_MISH || op == AG_OP_SIGMOID_GATE ||
                                    (op == AG_OP_ADD && e->groups[gi].act >= 0));
}

static void gate_node(const void *kernel, const ag_node *n, const ag_op_io *io) {
    (void)kernel;
    size_t count = ag_shape_floats(io->in[0]);
    if (n->op == AG_OP_ADD) { /* (z + r)(sigmoid(z) - 1/2), z the add's term the gate reads */
        int z = io->act->src[1] == n->src[0] ? 0 : 1;
        ag_fused_gate_map(io->out, io->src[z], io->src[1 - z], io->src[z], io->act->alpha, count,
                          io->threads);
        return;
    }
    ag_fused_gate_map(io->out, io->src[0], NULL, n->op == AG_OP_MISH ? NULL : io->src[1], n->alpha,
                      count, io->threads);
}

const ag_kind ag_kind_gate = {
    .name = "gate",
    .applies = gate_applies,
    .run = ag_kind_run_node,
    .node = gate_node,
};
