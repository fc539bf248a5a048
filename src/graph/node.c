/*
 * node.c - one node on whole fp32 maps through its op's reference kernel (the op table's
 * run), for both backends: the reference runs every node so, the oneDNN backend the ones
 * its bands do not absorb.
 */
#include "ops.h"

#include "../util/util_internal.h"

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
                   .act = fast ? fast->act : NULL,
                   .threads = threads,
                   .resize = resize};
    input_shapes(n, shapes, io.in);
    io.src_count = ag_node_src_count(n);
    for (int j = 0; j < io.src_count; j++)
        io.src[j] = src[j];
    AG_ASSERT(d->run);
    if (fast && fast->run)
        fast->run(fast->kernel, n, &io);
    else
        d->run(n, &io);
}
