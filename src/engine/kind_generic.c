/*
 * kind_generic.c - the generic kind: any node the bands do not absorb, on whole fp32 maps of
 * materialised groups, through its op's kernel in the op table (sgemm for the matmuls). The
 * whole-map kinds (kind_modconv.c) run the same step with their kernel in the op's place.
 */
#include "kind.h"

static int generic_applies(const ag_engine *e, int gi) {
    (void)e, (void)gi;
    return 1;
}

int ag_kind_run_node(ag_engine *e, int gi, const ag_io *io, ag_error *err) {
    (void)io, (void)err;
    const ag_group_exec *x = &e->exec[gi];
    ag_node_fast fast = {x->kind->node, x->kernel, NULL};
    ag_engine_run_node(e, gi, &fast);
    return AG_OK;
}

const ag_kind ag_kind_generic = {
    .name = "generic",
    .applies = generic_applies,
    .run = ag_kind_run_node,
};
