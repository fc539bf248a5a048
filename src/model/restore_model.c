/*
 * restore_model.c - a GPEN or GFPGAN checkpoint to a model the engine runs: parse (PyTorch
 * zip or legacy, through the safe pickle reader), infer and check the architecture
 * (restore_arch.c), build the graph (gpen.c, gfpgan.c), bind the weights once
 * (ag_model_build). The model's kind is "restorer" and it runs only at min_side x min_side,
 * the face size its constant input and noise maps were made for.
 */
#include "restore_internal.h"

#include <stdio.h>
#include <string.h>

/* GPEN 2048 in fp32 is ~290 MB; a file several times that is not one of these networks. */
#define AG_RESTORE_MAX_FILE_BYTES ((size_t)1 << 30)

int ag_restore_model_from_set(ag_tensor_set *set, const char *path, ag_model **out, ag_error *err) {
    ag_restore_arch a;
    int rc = ag_restore_arch_infer(set, path, &a, err);
    if (rc != AG_OK)
        return rc;
    ag_restore_squeeze_biases(set);
    if (a.kind == AG_RESTORE_CODEFORMER && (rc = ag_codeformer_views(set, &a, err)) != AG_OK)
        return ag_error_prefix(rc, path, err);
    static const char *const names[] = {[AG_RESTORE_GPEN] = "gpen",
                                        [AG_RESTORE_GFPGAN] = "gfpgan",
                                        [AG_RESTORE_CODEFORMER] = "codeformer"};
    const char *arch = names[a.kind];
    if ((rc = ag_tensor_set_meta(set, "architecture", arch, err)) != AG_OK ||
        (rc = ag_tensor_set_meta(set, "kind", "restorer", err)) != AG_OK)
        return ag_error_prefix(rc, path, err);
    ag_graph *g = ag_malloc(sizeof *g);
    if (!g)
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory for the graph", path);
    rc = a.kind == AG_RESTORE_GPEN     ? ag_gpen_graph(&a, set, g, err)
         : a.kind == AG_RESTORE_GFPGAN ? ag_gfpgan_graph(&a, set, g, err)
                                       : ag_codeformer_graph(&a, set, g, err);
    if (rc != AG_OK)
        ag_error_prefix(rc, path, err);
    else
        rc = ag_model_build(set, g, path, "pytorch", out, err);
    ag_free(g);
    if (rc == AG_OK)
        (*out)->info.min_side = (*out)->info.side_multiple = a.size;
    return rc;
}

int ag_restore_model_load_memory(const void *data, size_t size, const char *label, ag_model **out,
                                 ag_error *err) {
    *out = NULL;
    ag_tensor_set set = {0};
    int rc = ag_pytorch_parse(data, size, label, &set, err);
    if (rc == AG_OK)
        rc = ag_restore_model_from_set(&set, label, out, err);
    ag_tensor_set_fini(&set);
    return rc;
}

int ag_restore_model_load(const char *path, ag_model **out, ag_error *err) {
    *out = NULL;
    uint8_t *data;
    size_t size;
    int rc = ag_read_file(path, AG_RESTORE_MAX_FILE_BYTES, &data, &size, err);
    if (rc != AG_OK)
        return rc;
    rc = ag_restore_model_load_memory(data, size, path, out, err);
    ag_free(data);
    return rc;
}
