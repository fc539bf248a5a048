/*
 * kind_gate.c - the upscalers' gates in int8 engines: Mish and sigmoid_gate (SiLU, SPAN's and
 * RealPLKSR's attentions) on whole fp32 maps, as the generic kind runs them, but 16 lanes at
 * a time (ag_fused_gate_map) instead of the op table's scalar expf loops. fp32 engines apply
 * these gates in the conv chains (lower.c); int8 chains know only LeakyReLUs, so there they
 * stay passes, and these passes were a third of RealPLKSR's int8 time.
 */
#include "kind.h"

static int gate_applies(const ag_engine *e, int gi) {
    ag_op op = ag_engine_head(e, gi)->op;
    return ag_mode_int8_maps(e) && (op == AG_OP_MISH || op == AG_OP_SIGMOID_GATE);
}

static void gate_node(const void *kernel, const ag_node *n, const ag_op_io *io) {
    (void)kernel;
    ag_fused_gate_map(io->out, io->src[0], n->op == AG_OP_MISH ? NULL : io->src[1], n->alpha,
                      ag_shape_floats(io->in[0]), io->threads);
}

const ag_kind ag_kind_gate = {
    .name = "gate",
    .applies = gate_applies,
    .run = ag_kind_run_node,
    .node = gate_node,
};
