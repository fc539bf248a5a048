/*
 * safetensors.c - parser of .safetensors files (the bundled model format): an 8-byte
 * little-endian header length, a JSON header naming each tensor's dtype, shape and byte
 * range, then the raw data. Every range is checked against the file before a tensor points
 * into it; the tensors are not copied.
 */
#include "model_internal.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <string.h>

/* cJSON's allocations go through ag_malloc too, so the leak checks and the metrics see
 * them. Its hooks are process-wide: set them once. */
static pthread_once_t cjson_hooks_once = PTHREAD_ONCE_INIT;

static void install_cjson_hooks(void) {
    cJSON_Hooks hooks = {ag_malloc, ag_free};
    cJSON_InitHooks(&hooks);
}

/* Real headers are a few kB per hundred tensors; the format's own reference reader refuses
 * more than 100 MB. 16 MB keeps a hostile header from costing much cJSON memory. */
#define AG_SAFETENSORS_MAX_HEADER_BYTES ((uint64_t)16 << 20)

/* JSON numbers are doubles: offsets and dims above 2^53 cannot be exact. */
#define AG_JSON_MAX_EXACT 9007199254740992.0

static uint64_t read_u64_le(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static bool json_u64(const cJSON *item, uint64_t *out) {
    if (!cJSON_IsNumber(item))
        return false;
    double v = item->valuedouble;
    if (!(v >= 0.0 && v <= AG_JSON_MAX_EXACT) || v != (double)(uint64_t)v)
        return false;
    *out = (uint64_t)v;
    return true;
}

static bool parse_dtype(const char *text, ag_dtype *out) {
    static const struct {
        const char *name;
        ag_dtype dtype;
    } names[] = {{"F32", AG_DTYPE_F32},
                 {"F16", AG_DTYPE_F16},
                 {"BF16", AG_DTYPE_BF16},
                 {"F64", AG_DTYPE_F64},
                 {"I8", AG_DTYPE_I8}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(text, names[i].name) == 0) {
            *out = names[i].dtype;
            return true;
        }
    }
    return false;
}

static int parse_shape(const cJSON *shape, const char *label, const char *name, ag_tensor_ref *ref,
                       ag_error *err) {
    if (!cJSON_IsArray(shape))
        return ag_error_set(err, AG_E_FORMAT, "%s: tensor '%s': 'shape' is not an array", label,
                            name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > AG_TENSOR_MAX_DIMS)
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "%s: tensor '%s': %d dimensions, at most %d are supported", label, name,
                            ndim, AG_TENSOR_MAX_DIMS);
    ref->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        uint64_t dim;
        if (!json_u64(cJSON_GetArrayItem(shape, i), &dim))
            return ag_error_set(err, AG_E_FORMAT,
                                "%s: tensor '%s': shape entry %d is not a non-negative integer",
                                label, name, i);
        ref->shape[i] = (int64_t)dim;
    }
    return AG_OK;
}

/* Points ref->data at [begin, end) of the data section after checking it matches the shape. */
static int parse_offsets(const cJSON *offsets, const uint8_t *body, size_t body_bytes,
                         const char *label, const char *name, ag_tensor_ref *ref, ag_error *err) {
    uint64_t begin, end;
    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
        !json_u64(cJSON_GetArrayItem(offsets, 0), &begin) ||
        !json_u64(cJSON_GetArrayItem(offsets, 1), &end))
        return ag_error_set(
            err, AG_E_FORMAT,
            "%s: tensor '%s': 'data_offsets' is not a pair of non-negative integers", label, name);
    if (begin > end || end > body_bytes)
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: tensor '%s': data_offsets [%llu, %llu] outside the file "
                            "(%zu data bytes)",
                            label, name, (unsigned long long)begin, (unsigned long long)end,
                            body_bytes);
    size_t need = ag_dtype_size(ref->dtype);
    bool overflow = false;
    for (int i = 0; i < ref->ndim; i++)
        overflow |= !ag_mul_size(need, (size_t)ref->shape[i], &need);
    if (overflow || need != end - begin)
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: tensor '%s': its shape needs %s%zu bytes but data_offsets "
                            "[%llu, %llu] hold %llu",
                            label, name, overflow ? "more than " : "", need,
                            (unsigned long long)begin, (unsigned long long)end,
                            (unsigned long long)(end - begin));
    ref->data = body + begin;
    ref->nbytes = need;
    return AG_OK;
}

static int parse_tensor(const cJSON *entry, const uint8_t *body, size_t body_bytes,
                        const char *label, ag_tensor_set *out, ag_error *err) {
    const char *name = entry->string;
    if (strlen(name) >= AG_TENSOR_NAME_BYTES)
        return ag_error_set(err, AG_E_FORMAT, "%s: tensor name '%.40s...' is longer than %d bytes",
                            label, name, AG_TENSOR_NAME_BYTES - 1);
    if (!cJSON_IsObject(entry))
        return ag_error_set(err, AG_E_FORMAT, "%s: tensor '%s': entry is not a JSON object", label,
                            name);
    ag_tensor_ref ref = {0};
    strcpy(ref.name, name);
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(entry, "dtype");
    if (!cJSON_IsString(dtype))
        return ag_error_set(err, AG_E_FORMAT, "%s: tensor '%s': no 'dtype' string", label, name);
    if (!parse_dtype(dtype->valuestring, &ref.dtype))
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "%s: tensor '%s': dtype '%.20s' is not supported (F32, F16, BF16, "
                            "F64 or I8)",
                            label, name, dtype->valuestring);
    int rc = parse_shape(cJSON_GetObjectItemCaseSensitive(entry, "shape"), label, name, &ref, err);
    if (rc != AG_OK)
        return rc;
    rc = parse_offsets(cJSON_GetObjectItemCaseSensitive(entry, "data_offsets"), body, body_bytes,
                       label, name, &ref, err);
    if (rc != AG_OK)
        return rc;
    return ag_error_prefix(ag_tensor_set_add(out, &ref, err), label, err);
}

static int parse_metadata(const cJSON *meta, const char *label, ag_tensor_set *out, ag_error *err) {
    if (!cJSON_IsObject(meta))
        return ag_error_set(err, AG_E_FORMAT, "%s: '__metadata__' is not a JSON object", label);
    const cJSON *item;
    cJSON_ArrayForEach(item, meta) {
        if (!cJSON_IsString(item))
            return ag_error_set(err, AG_E_FORMAT, "%s: metadata '%.60s' is not a string", label,
                                item->string);
        int rc = ag_tensor_set_meta(out, item->string, item->valuestring, err);
        if (rc != AG_OK)
            return ag_error_prefix(rc, label, err);
    }
    return AG_OK;
}

static int parse_header(const cJSON *root, const uint8_t *body, size_t body_bytes,
                        const char *label, ag_tensor_set *out, ag_error *err) {
    if (!cJSON_IsObject(root))
        return ag_error_set(err, AG_E_FORMAT, "%s: safetensors header is not a JSON object", label);
    const cJSON *entry;
    cJSON_ArrayForEach(entry, root) {
        int rc = strcmp(entry->string, "__metadata__") == 0
                     ? parse_metadata(entry, label, out, err)
                     : parse_tensor(entry, body, body_bytes, label, out, err);
        if (rc != AG_OK)
            return rc;
    }
    return AG_OK;
}

int ag_safetensors_parse(const uint8_t *data, size_t size, const char *label, ag_tensor_set *out,
                         ag_error *err) {
    if (size < 8)
        return ag_error_set(err, AG_E_FORMAT, "%s: %zu bytes is too short for a safetensors file",
                            label, size);
    uint64_t header_bytes = read_u64_le(data);
    if (header_bytes > size - 8)
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: safetensors header length %llu runs past the end of the file "
                            "(size %zu)",
                            label, (unsigned long long)header_bytes, size);
    if (header_bytes > AG_SAFETENSORS_MAX_HEADER_BYTES)
        return ag_error_set(err, AG_E_LIMIT,
                            "%s: safetensors header of %llu bytes exceeds the %llu byte limit",
                            label, (unsigned long long)header_bytes,
                            (unsigned long long)AG_SAFETENSORS_MAX_HEADER_BYTES);
    pthread_once(&cjson_hooks_once, install_cjson_hooks);
    cJSON *root = cJSON_ParseWithLength((const char *)data + 8, (size_t)header_bytes);
    if (!root)
        return ag_error_set(err, AG_E_FORMAT, "%s: safetensors header is not valid JSON", label);
    const uint8_t *body = data + 8 + header_bytes;
    int rc = parse_header(root, body, size - 8 - (size_t)header_bytes, label, out, err);
    cJSON_Delete(root);
    if (rc != AG_OK)
        ag_tensor_set_fini(out);
    return rc;
}
