/*
 * kind_generic.c - the generic kind: any node the bands do not absorb, on whole fp32 maps of
 * materialised groups, through its op's kernel in the op table (sgemm for the matmuls).
 */
#include "kind.h"

static int generic_applies(const ag_engine *e, int gi) {
    (void)e, (void)gi;
    return 1;
}

static int run_generic(ag_engine *e, int gi, const ag_io *io, ag_error *err) {
    (void)io, (void)err;
    ag_node_fast fast = {NULL, NULL, NULL, NULL};
    ag_engine_run_node(e, gi, &fast);
    return AG_OK;
}

const ag_kind ag_kind_generic = {
    .name = "generic",
    .applies = generic_applies,
    .run = run_generic,
};
