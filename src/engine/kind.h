/*
 * kind.h - the table of kernel kinds: how a group's step runs. One row per kind (kinds.c's
 * ag_kinds, first match wins), each kind in its own file: kind_conv.c (a conv on oneDNN, fp32
 * or bf16, and u8 x s8), kind_modconv.c (a modulated conv's bf16 products, u8 x s8),
 * kind_wino.c (its fp32 Winograd), kind_gate.c (int8 engines' upscaler gates, 16 lanes) and
 * kind_generic.c (any op on whole fp32 maps through the op table).
 *
 * A group holds its kind and one opaque kernel pointer (state.h). Adding a kind is its file
 * (kind_X.c: its functions and its row, over its kernel in src/kernels/) and its line in
 * kinds.c's table; neither the graph, the plan nor this header changes for it.
 */
#ifndef AG_ENGINE_KIND_H
#define AG_ENGINE_KIND_H

#include "state.h"

/* What a kind's kernel needs from the plan, at the planned size. */
typedef struct ag_kind_sizes {
    size_t scratch; /* oneDNN scratchpad (shared by every step) */
    size_t band;    /* the fp32 / bf16 band buffer (shared) */
    size_t band_u8; /* the u8 band buffer (shared) */
    size_t weights; /* its own prepared weights (0: none, or shared by the model) */
} ag_kind_sizes;

typedef struct ag_kind {
    const char *name;
    /* Whether group gi's step is of this kind, at this engine's mode. */
    int (*applies)(const ag_engine *e, int gi);
    /* Its kernel at the planned size into *kernel (NULL: none fits, the step runs generic). */
    int (*create)(ag_engine *e, int gi, void **kernel, ag_kind_sizes *sizes, ag_error *err);
    /* The prepared weights of `kernel` and `old` (same kind, the previous plan's; may be
     * NULL) share a layout. NULL: the kind prepares none. */
    int (*same_weights)(const void *kernel, const void *old);
    /* Its weights into `prepared` (sizes.weights bytes). NULL: none. */
    int (*prepare)(ag_engine *e, int gi, void *prepared, ag_error *err);
    /* Its buffers, once the arena exists. NULL: nothing to bind. */
    void (*bind)(ag_engine *e, int gi);
    /* The step (ag_kind_run_node: the op's kernel on whole maps, through the op table). */
    int (*run)(ag_engine *e, int gi, const ag_io *io, ag_error *err);
    /* With ag_kind_run_node: the kernel run in place of the op's own (src/graph/ops.h);
     * NULL: the op's own. */
    ag_node_kernel_fn node;
    void (*destroy)(void *kernel);
} ag_kind;

/* kinds.c: the table, in its order (the generic kind last). */
const ag_kind *const *ag_kinds_all(int *count);

/* kind_generic.c: the step of a whole-map kind, the op's kernel (or the kind's node
 * kernel) on whole fp32 maps of materialised groups. */
int ag_kind_run_node(ag_engine *e, int gi, const ag_io *io, ag_error *err);

/* The prepared weights of group gi: shared by the model, or in the engine's block. */
static inline void *ag_kind_weights(ag_engine *e, int gi) {
    const ag_group_exec *x = &e->exec[gi];
    return x->shared_weights ? (void *)x->shared_weights : e->weights + x->weight_offset;
}

/* Group gi's head is a 3x3 modulated conv with a one-pixel border, not upsampling: the
 * shape of the Winograd and u8 x s8 kernels. */
static inline int ag_kind_modconv_3x3(const ag_engine *e, int gi) {
    const ag_node *n = ag_engine_head(e, gi);
    return n->op == AG_OP_MODCONV && n->up != 2 && n->k == 3 && n->pad[0] == 1 && n->pad[1] == 1 &&
           n->pad[2] == 1 && n->pad[3] == 1;
}

/* A row's same_weights and destroy when they are its kernel type T's own (T_same_weights,
 * T_destroy), behind the row's untyped pointers: kind_same_T and kind_destroy_T. */
#define AG_KIND_SAME_WEIGHTS(T)                                                                    \
    static int kind_same_##T(const void *kernel, const void *old) {                                \
        return T##_same_weights(kernel, old);                                                      \
    }
#define AG_KIND_DESTROY(T)                                                                         \
    static void kind_destroy_##T(void *kernel) {                                                   \
        T##_destroy(kernel);                                                                       \
    }

#endif
