/*
 * onednn_internal.h - what the files that include dnnl.h (onednn.c, onednn_int8.c,
 * gemm_conv.c) share: the set-up of a primitive with our own scratchpad and its memories.
 */
#ifndef AG_ONEDNN_INTERNAL_H
#define AG_ONEDNN_INTERNAL_H

#include <dnnl.h>
#include <stddef.h>

/* One argument memory of a primitive, made from what the primitive descriptor reports for
 * (what, index), without data: the engine binds its buffers per plan. */
typedef struct ag_dnnl_arg_memory {
    dnnl_query_t what; /* dnnl_query_src_md, ..., dnnl_query_scratchpad_md */
    int index;
    dnnl_memory_t *mem;
} ag_dnnl_arg_memory;

/* Adds to a primitive's attribute (output scales, zero points, post-ops); `arg` is the
 * caller's. */
typedef dnnl_status_t (*ag_dnnl_attr_fn)(dnnl_primitive_attr_t attr, const void *arg);

/*
 * The primitive of op descriptor `desc` on `engine` with a user-managed scratchpad (its
 * bytes come from the engine's arena plan, never from oneDNN), `more` (NULL: nothing) adding
 * the rest of its attribute; then one memory without data per `args` row. *pd is the caller's
 * to destroy whenever it is set (for queries such as the weights' layout), also on failure;
 * *scratch_bytes (may be NULL) the scratchpad's size. A failure leaves what was created in
 * *primitive and the memories for the caller's destroy.
 */
dnnl_status_t ag_dnnl_primitive_create(const void *desc, dnnl_engine_t engine, ag_dnnl_attr_fn more,
                                       const void *more_arg, const ag_dnnl_arg_memory *args,
                                       int arg_count, dnnl_primitive_t *primitive,
                                       dnnl_primitive_desc_t *pd, size_t *scratch_bytes);

#endif
