/*
 * restore_arch.c - which face restoration network a state_dict holds, and the check of every
 * tensor against the layout its architecture implies (see restore_internal.h). The layouts
 * themselves are built in gpen.c and gfpgan.c from a few anchor shapes.
 */
#include "restore_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int ag_layout_init(ag_layout *l, ag_error *err) {
    memset(l, 0, sizeof *l);
    l->entries = ag_malloc(AG_LAYOUT_MAX * sizeof *l->entries);
    if (!l->entries)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for a network layout");
    return AG_OK;
}

void ag_layout_fini(ag_layout *l) {
    if (!l)
        return;
    ag_free(l->entries);
    memset(l, 0, sizeof *l);
}

void ag_layout_add(ag_layout *l, int ndim, const int64_t *shape, const char *fmt, ...) {
    AG_ASSERT(ndim >= 1 && ndim <= AG_TENSOR_MAX_DIMS);
    if (l->count >= AG_LAYOUT_MAX) {
        l->overflow = true;
        return;
    }
    ag_layout_entry *e = &l->entries[l->count++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->name, sizeof e->name, fmt, ap);
    va_end(ap);
    e->ndim = ndim;
    memcpy(e->shape, shape, (size_t)ndim * sizeof *shape);
}

/* "(a, b, c)" into buf. */
static const char *shape_text(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t at = (size_t)snprintf(buf, len, "(");
    for (int i = 0; i < ndim && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (at < len)
        snprintf(buf + at, len - at, ")");
    return buf;
}

static const ag_layout_entry *layout_find(const ag_layout *l, const char *name) {
    for (int i = 0; i < l->count; i++)
        if (strcmp(l->entries[i].name, name) == 0)
            return &l->entries[i];
    return NULL;
}

static bool same_shape(const ag_layout_entry *e, const ag_tensor_ref *t) {
    if (e->ndim != t->ndim)
        return false;
    for (int i = 0; i < e->ndim; i++)
        if (e->shape[i] != t->shape[i])
            return false;
    return true;
}

int ag_layout_check(const ag_layout *l, const ag_tensor_set *set, const char *path, ag_error *err) {
    AG_ASSERT(!l->overflow);
    char have[96], want[96];
    for (int i = 0; i < set->count; i++) {
        const ag_tensor_ref *t = &set->tensors[i];
        const ag_layout_entry *e = layout_find(l, t->name);
        if (!e)
            return ag_error_set(err, AG_E_FORMAT, "%s: tensor '%s' is not part of %s", path,
                                t->name, l->net);
        if (!same_shape(e, t))
            return ag_error_set(err, AG_E_FORMAT, "%s: tensor '%s' is %s where %s has %s", path,
                                t->name, shape_text(have, sizeof have, t->ndim, t->shape), l->net,
                                shape_text(want, sizeof want, e->ndim, e->shape));
        if (t->dtype != AG_DTYPE_F32 && t->dtype != AG_DTYPE_F16 && t->dtype != AG_DTYPE_BF16)
            return ag_error_set(err, AG_E_UNSUPPORTED,
                                "%s: tensor '%s' is not float32, float16 or bfloat16", path,
                                t->name);
    }
    for (int i = 0; i < l->count; i++)
        if (!ag_tensor_set_find(set, l->entries[i].name))
            return ag_error_set(err, AG_E_FORMAT, "%s: tensor '%s' of %s is missing", path,
                                l->entries[i].name, l->net);
    return AG_OK;
}

int64_t ag_restore_dim(const ag_tensor_set *set, const char *name, int ndim, int dim,
                       const char *path, const char *net, ag_error *err) {
    const ag_tensor_ref *t = ag_tensor_set_find(set, name);
    if (!t) {
        ag_error_set(err, AG_E_FORMAT, "%s: tensor '%s' of %s is missing", path, name, net);
        return -1;
    }
    int d = dim < 0 ? ndim + dim : dim;
    if (t->ndim != ndim || t->shape[d] < 1 || t->shape[d] > 65536) {
        char have[96];
        ag_error_set(err, AG_E_FORMAT, "%s: tensor '%s' is %s, not the %d-D tensor %s has", path,
                     name, shape_text(have, sizeof have, t->ndim, t->shape), ndim, net);
        return -1;
    }
    return t->shape[d];
}

int ag_restore_arch_infer(const ag_tensor_set *set, const char *path, ag_restore_arch *a,
                          ag_error *err) {
    memset(a, 0, sizeof *a);
    bool gpen = ag_tensor_set_find(set, "generator.input.input") != NULL;
    bool gfpgan = ag_tensor_set_find(set, "stylegan_decoder.constant_input.weight") != NULL;
    bool codeformer = ag_tensor_set_find(set, "position_emb") &&
                      ag_tensor_set_find(set, "quantize.embedding.weight");
    if (!gpen && !gfpgan && !codeformer) {
        if (set->count == 0)
            return ag_error_set(err, AG_E_FORMAT, "%s: holds no tensors", path);
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: tensor '%s' fits neither GPEN nor GFPGAN nor CodeFormer (a "
                            "state_dict of another network?)",
                            path, set->tensors[0].name);
    }
    ag_layout l;
    int rc = ag_layout_init(&l, err);
    if (rc != AG_OK)
        return rc;
    rc = gpen     ? ag_gpen_arch(set, path, a, &l, err)
         : gfpgan ? ag_gfpgan_arch(set, path, a, &l, err)
                  : ag_codeformer_arch_infer(set, path, a, &l, err);
    if (rc == AG_OK)
        rc = ag_layout_check(&l, set, path, err);
    for (int i = 0; rc == AG_OK && i < l.count; i++) {
        int64_t n = 1;
        for (int d = 0; d < l.entries[i].ndim; d++)
            n *= l.entries[i].shape[d];
        a->params += n;
    }
    ag_layout_fini(&l);
    return rc;
}
