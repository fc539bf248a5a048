/*
 * ops_upscale.c - the op the upscalers add to the table (ops.h): add_scaled, RRDBNet's
 * residual-in-residual "out * 0.2 + x" (the dense blocks' own 0.2 is their conv5's
 * weight_scale). No fused lowering: both backends run the reference kernel on whole maps.
 */
#include "ops.h"

/* src[0] * alpha + src[1]; shapes as add's (ag_check_add, ag_shape_add). */
void ag_run_add_scaled(const ag_node *n, const ag_op_io *io) {
    const float *restrict a = io->src[0], *restrict b = io->src[1];
    float *restrict out = io->out;
    size_t count = ag_shape_floats(io->in[0]);
    for (size_t i = 0; i < count; i++)
        out[i] = a[i] * n->alpha + b[i];
}
