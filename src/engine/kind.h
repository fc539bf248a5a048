/*
 * kind.h - the table of kernel kinds: how a group's step runs. One row per kind (kinds.c's
 * ag_kinds, first match wins), each kind in its own file: kind_conv.c (a conv on oneDNN, fp32
 * or bf16, and u8 x s8), kind_modconv.c (a modulated conv's bf16 products, fp32 Winograd,
 * u8 x s8) and the generic step (any op on whole fp32 maps through the op table).
 *
 * A group holds its kind and one opaque kernel pointer (state.h). Adding a kind is a row
 * here and in ag_kinds plus its file; neither the graph nor the plan changes for it.
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
    /* The step. */
    int (*run)(ag_engine *e, int gi, const ag_io *io, ag_error *err);
    void (*destroy)(void *kernel);
} ag_kind;

extern const ag_kind ag_kind_conv;         /* kind_conv.c: fp32 / bf16 conv on oneDNN */
extern const ag_kind ag_kind_conv_int8;    /* kind_conv.c: u8 x s8 conv */
extern const ag_kind ag_kind_modconv_bf16; /* kind_modconv.c: bf16 products */
extern const ag_kind ag_kind_modconv_int8; /* kind_modconv.c: 3x3 u8 x s8 */
extern const ag_kind ag_kind_modconv_wino; /* kind_modconv.c: 3x3 fp32 Winograd */
extern const ag_kind ag_kind_generic;      /* kind_modconv.c: the op table's kernel */

/* The prepared weights of group gi: shared by the model, or in the engine's block. */
static inline void *ag_kind_weights(ag_engine *e, int gi) {
    const ag_group_exec *x = &e->exec[gi];
    return x->shared_weights ? (void *)x->shared_weights : e->weights + x->weight_offset;
}

#endif
