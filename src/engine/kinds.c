/*
 * kinds.c - each group's kernel kind (kind.h) and its kernel at the planned size: made per
 * plan, their prepared weights in one allocation, bound once the arena exists, destroyed
 * with the plan. Nothing here knows a particular kind.
 */
#include "kind.h"

#include "../util/util_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern const ag_kind ag_kind_conv, ag_kind_conv_int8;            /* kind_conv.c */
extern const ag_kind ag_kind_modconv_bf16, ag_kind_modconv_int8; /* kind_modconv.c */
extern const ag_kind ag_kind_modconv_wino;                       /* kind_wino.c */
extern const ag_kind ag_kind_gate;                               /* kind_gate.c */
extern const ag_kind ag_kind_generic;                            /* kind_generic.c */

/* First match wins: the specific kinds of a mode before the general ones. */
static const ag_kind *const ag_kinds[] = {
    &ag_kind_conv_int8,    /* u8 x s8 conv (int8 groups) */
    &ag_kind_conv,         /* fp32 / bf16 conv on oneDNN */
    &ag_kind_modconv_bf16, /* modulated conv, bf16 products */
    &ag_kind_modconv_int8, /* 3x3 modulated conv, u8 x s8 */
    &ag_kind_modconv_wino, /* 3x3 modulated conv, fp32 Winograd */
    &ag_kind_gate,         /* int8 engines' Mish and sigmoid gates, 16 lanes */
    &ag_kind_generic,      /* any op, its kernel in the op table */
};

const ag_kind *const *ag_kinds_all(int *count) {
    *count = (int)(sizeof ag_kinds / sizeof ag_kinds[0]);
    return ag_kinds;
}

static const ag_kind *kind_of(const ag_engine *e, int gi) {
    for (size_t i = 0; i < sizeof ag_kinds / sizeof ag_kinds[0]; i++)
        if (ag_kinds[i]->applies(e, gi))
            return ag_kinds[i];
    return &ag_kind_generic;
}

void ag_engine_destroy_kernels(ag_engine *e) {
    for (int gi = 0; e->exec && gi < e->group_count; gi++) {
        ag_group_exec *x = &e->exec[gi];
        if (x->kind && x->kernel)
            x->kind->destroy(x->kernel);
        x->kernel = NULL;
    }
}

/* The previous plan's kernels, replaced by create_kernels. */
typedef struct old_kernel {
    const ag_kind *kind;
    void *kernel;
} old_kernel;

/* Prepared weights are kept when every kernel keeps its layout (the usual case when only the
 * image size changes); otherwise reordered again into one allocation. Keeping them matters
 * for a server: each reorder is a oneDNN primitive, made, cached and freed per plan, whose
 * heap churn made the int8 engine's RSS wander with the sizes it had seen. */
static size_t prepared_size(size_t bytes) {
    return (bytes + AG_ARENA_ALIGN - 1) & ~(size_t)(AG_ARENA_ALIGN - 1);
}

/* Whether group gi has weights of its own to prepare. */
static int own_weights(const ag_engine *e, int gi) {
    const ag_group_exec *x = &e->exec[gi];
    return x->kernel && x->kind->prepare && !x->shared_weights;
}

static int prepare_weights(ag_engine *e, const old_kernel *old, const size_t *bytes,
                           ag_error *err) {
    int same = e->weights != NULL;
    size_t total = 0;
    for (int gi = 0; gi < e->group_count; gi++) {
        const ag_group_exec *x = &e->exec[gi];
        e->exec[gi].weight_offset = total;
        total += prepared_size(bytes[gi]);
        if (own_weights(e, gi))
            same = same && x->kind->same_weights(x->kernel,
                                                 old[gi].kind == x->kind ? old[gi].kernel : NULL);
    }
    if (same)
        return AG_OK;
    ag_free(e->weights_block);
    e->weights = NULL;
    e->weights_block = ag_malloc(total + AG_ARENA_ALIGN);
    if (!e->weights_block)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for %zu bytes of weights", total);
    ag_advise_huge_pages(e->weights_block, total + AG_ARENA_ALIGN);
    uint8_t *aligned = (uint8_t *)(((uintptr_t)e->weights_block + AG_ARENA_ALIGN - 1) &
                                   ~(uintptr_t)(AG_ARENA_ALIGN - 1));
    for (int gi = 0; gi < e->group_count; gi++) {
        int rc = own_weights(e, gi)
                     ? e->exec[gi].kind->prepare(e, gi, aligned + e->exec[gi].weight_offset, err)
                     : AG_OK;
        if (rc)
            return rc;
    }
    e->weights = aligned;
    return AG_OK;
}

static size_t max_size(size_t a, size_t b) {
    return a > b ? a : b;
}

/* Group gi's kind and kernel; the shared buffers' sizes grow to what it needs. */
static int create_kernel(ag_engine *e, int gi, size_t *scratch_max, size_t *band_max,
                         size_t *weight_bytes, ag_error *err) {
    ag_group_exec *x = &e->exec[gi];
    const ag_kind *kind = kind_of(e, gi);
    ag_kind_sizes sizes = {0, 0, 0, 0};
    void *kernel = NULL;
    int rc = kind->create ? kind->create(e, gi, &kernel, &sizes, err) : AG_OK;
    *scratch_max = max_size(*scratch_max, sizes.scratch);
    *band_max = max_size(*band_max, sizes.band);
    e->band_u8_bytes = max_size(e->band_u8_bytes, sizes.band_u8);
    *weight_bytes = sizes.weights;
    x->kind = kernel || !kind->create ? kind : &ag_kind_generic;
    x->kernel = kernel;
    return rc;
}

int ag_engine_create_kernels(ag_engine *e, size_t *scratch_max, size_t *band_max, ag_error *err) {
    int n = e->group_count;
    old_kernel *old = ag_calloc((size_t)n, sizeof *old);
    size_t *weight_bytes = ag_calloc((size_t)n, sizeof *weight_bytes);
    int rc = old && weight_bytes ? AG_OK : ag_error_set(err, AG_E_NOMEM, "out of memory");
    *scratch_max = *band_max = 0;
    e->band_u8_bytes = 0;
    for (int gi = 0; gi < n && rc == AG_OK; gi++) {
        old[gi].kind = e->exec[gi].kind;
        old[gi].kernel = e->exec[gi].kernel;
        e->exec[gi].kernel = NULL;
        e->exec[gi].shared_weights = NULL;
        rc = create_kernel(e, gi, scratch_max, band_max, &weight_bytes[gi], err);
    }
    e->prepared_bytes = 0;
    for (int gi = 0; rc == AG_OK && gi < n; gi++)
        e->prepared_bytes += prepared_size(weight_bytes[gi]);
    if (getenv("AG_PLAN_DEBUG"))
        fprintf(stderr, "plan: prepared weights %zu MB\n", e->prepared_bytes >> 20);
    if (rc == AG_OK && !e->measure_only)
        rc = prepare_weights(e, old, weight_bytes, err);
    /* Whatever happened, exactly one set of kernels survives. */
    for (int gi = 0; old && gi < n; gi++)
        if (old[gi].kind && old[gi].kernel)
            old[gi].kind->destroy(old[gi].kernel);
    if (rc)
        ag_engine_destroy_kernels(e);
    ag_free(old);
    ag_free(weight_bytes);
    return rc;
}

void ag_engine_bind_kernels(ag_engine *e) {
    for (int gi = 0; gi < e->group_count; gi++)
        if (e->exec[gi].kernel && e->exec[gi].kind->bind)
            e->exec[gi].kind->bind(e, gi);
}
