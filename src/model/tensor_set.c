/*
 * tensor_set.c - the named tensors and string metadata a model file parser produces
 * (safetensors.c, pytorch.c), consumed by model.c. Every array is bounded so that a hostile
 * file cannot make the set grow without limit.
 */
#include "model_internal.h"

#include <string.h>

/* A generator has ~100 tensors; thousands means a different (or hostile) file. */
#define AG_TENSOR_SET_MAX 4096
/* Blobs are storages or derived tensors: at most one of each per tensor. */
#define AG_TENSOR_SET_MAX_BLOBS (2 * AG_TENSOR_SET_MAX)

size_t ag_dtype_size(ag_dtype dtype) {
    switch (dtype) {
    case AG_DTYPE_F32: return 4;
    case AG_DTYPE_F16: return 2;
    case AG_DTYPE_BF16: return 2;
    case AG_DTYPE_F64: return 8;
    case AG_DTYPE_I8: return 1;
    }
    return 0;
}

void ag_tensor_set_fini(ag_tensor_set *set) {
    if (!set)
        return;
    ag_free(set->tensors);
    for (int i = 0; i < set->blob_count; i++)
        ag_free(set->blobs[i]);
    ag_free(set->blobs);
    for (int i = 0; i < set->meta_count; i++) {
        ag_free(set->meta_keys[i]);
        ag_free(set->meta_values[i]);
    }
    memset(set, 0, sizeof *set);
}

/* Make room for one more element of an array that holds `count` of `capacity`. */
static int grow(void **array, int count, int *capacity, size_t elem_bytes) {
    if (count < *capacity)
        return AG_OK;
    int wanted = *capacity ? *capacity * 2 : 16;
    void *grown = ag_realloc(*array, (size_t)wanted * elem_bytes);
    if (!grown)
        return AG_E_NOMEM;
    *array = grown;
    *capacity = wanted;
    return AG_OK;
}

/* The loaders check these against the file already; here they guard model.c's assumptions. */
static int check_ref(const ag_tensor_ref *ref, ag_error *err) {
    if (!memchr(ref->name, '\0', sizeof ref->name))
        return ag_error_set(err, AG_E_FORMAT, "tensor name '%.40s...' is longer than %d bytes",
                            ref->name, AG_TENSOR_NAME_BYTES - 1);
    if (ref->ndim < 0 || ref->ndim > AG_TENSOR_MAX_DIMS)
        return ag_error_set(err, AG_E_UNSUPPORTED, "tensor '%s' has %d dimensions (at most %d)",
                            ref->name, ref->ndim, AG_TENSOR_MAX_DIMS);
    size_t bytes = ag_dtype_size(ref->dtype);
    for (int i = 0; i < ref->ndim; i++) {
        if (ref->shape[i] < 0 || !ag_mul_size(bytes, (size_t)ref->shape[i], &bytes))
            return ag_error_set(err, AG_E_FORMAT, "tensor '%s': bad dimension %lld", ref->name,
                                (long long)ref->shape[i]);
    }
    if (ag_dtype_size(ref->dtype) == 0 || bytes != ref->nbytes || (bytes && !ref->data))
        return ag_error_set(err, AG_E_FORMAT, "tensor '%s': %zu data bytes do not match its shape",
                            ref->name, ref->nbytes);
    return AG_OK;
}

int ag_tensor_set_add(ag_tensor_set *set, const ag_tensor_ref *ref, ag_error *err) {
    int rc = check_ref(ref, err);
    if (rc != AG_OK)
        return rc;
    if (set->count >= AG_TENSOR_SET_MAX)
        return ag_error_set(err, AG_E_LIMIT, "more than %d tensors", AG_TENSOR_SET_MAX);
    if (ag_tensor_set_find(set, ref->name))
        return ag_error_set(err, AG_E_FORMAT, "tensor '%s' appears twice", ref->name);
    if (grow((void **)&set->tensors, set->count, &set->capacity, sizeof *set->tensors) != AG_OK)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for %d tensors", set->count + 1);
    set->tensors[set->count++] = *ref;
    return AG_OK;
}

int ag_tensor_set_own(ag_tensor_set *set, void *blob, ag_error *err) {
    if (set->blob_count >= AG_TENSOR_SET_MAX_BLOBS) {
        ag_free(blob);
        return ag_error_set(err, AG_E_LIMIT, "more than %d storages", AG_TENSOR_SET_MAX_BLOBS);
    }
    if (grow((void **)&set->blobs, set->blob_count, &set->blob_capacity, sizeof *set->blobs) !=
        AG_OK) {
        ag_free(blob);
        return ag_error_set(err, AG_E_NOMEM, "out of memory for %d storages", set->blob_count + 1);
    }
    set->blobs[set->blob_count++] = blob;
    return AG_OK;
}

static char *dup_string(const char *s) {
    size_t n = strlen(s) + 1;
    char *copy = ag_malloc(n);
    if (copy)
        memcpy(copy, s, n);
    return copy;
}

/* A key given twice keeps the last value, as a JSON object or a Python dict would. */
int ag_tensor_set_meta(ag_tensor_set *set, const char *key, const char *value, ag_error *err) {
    int slot = set->meta_count;
    for (int i = 0; i < set->meta_count; i++) {
        if (strcmp(set->meta_keys[i], key) == 0)
            slot = i;
    }
    if (slot == AG_META_MAX)
        return ag_error_set(err, AG_E_LIMIT, "more than %d metadata entries (at '%.60s')",
                            AG_META_MAX, key);
    char *value_copy = dup_string(value);
    char *key_copy = slot == set->meta_count ? dup_string(key) : NULL;
    if (!value_copy || (slot == set->meta_count && !key_copy)) {
        ag_free(value_copy);
        ag_free(key_copy);
        return ag_error_set(err, AG_E_NOMEM, "out of memory for metadata '%.60s'", key);
    }
    if (slot == set->meta_count) {
        set->meta_keys[slot] = key_copy;
        set->meta_count++;
    } else {
        ag_free(set->meta_values[slot]);
    }
    set->meta_values[slot] = value_copy;
    return AG_OK;
}

const ag_tensor_ref *ag_tensor_set_find(const ag_tensor_set *set, const char *name) {
    for (int i = 0; i < set->count; i++) {
        if (strcmp(set->tensors[i].name, name) == 0)
            return &set->tensors[i];
    }
    return NULL;
}

int ag_tensor_ref_elements(const ag_tensor_ref *ref, const void **out, void **tmp, ag_error *err) {
    *tmp = NULL;
    *out = ref->data;
    if (!ref->strided || ref->nbytes == 0)
        return AG_OK;
    uint8_t *dst = ag_malloc(ref->nbytes);
    if (!dst)
        return ag_error_set(err, AG_E_NOMEM, "out of memory gathering tensor '%s' (%zu bytes)",
                            ref->name, ref->nbytes);
    /* Padded to 4 dims with leading size-1 axes. */
    size_t es = ag_dtype_size(ref->dtype);
    int64_t n[4] = {1, 1, 1, 1}, s[4] = {0, 0, 0, 0};
    for (int i = 0; i < ref->ndim; i++) {
        n[4 - ref->ndim + i] = ref->shape[i];
        s[4 - ref->ndim + i] = ref->stride[i];
    }
    const uint8_t *base = ref->data;
    uint8_t *cursor = dst;
    for (int64_t a = 0; a < n[0]; a++)
        for (int64_t b = 0; b < n[1]; b++)
            for (int64_t c = 0; c < n[2]; c++)
                for (int64_t d = 0; d < n[3]; d++, cursor += es)
                    memcpy(cursor, base + (size_t)(a * s[0] + b * s[1] + c * s[2] + d * s[3]) * es,
                           es);
    *out = *tmp = dst;
    return AG_OK;
}

const char *ag_tensor_set_meta_get(const ag_tensor_set *set, const char *key) {
    for (int i = 0; i < set->meta_count; i++) {
        if (strcmp(set->meta_keys[i], key) == 0)
            return set->meta_values[i];
    }
    return NULL;
}
