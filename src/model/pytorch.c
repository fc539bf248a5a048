/*
 * pytorch.c - parser of PyTorch state_dict files (torch.save(model.state_dict())), without
 * Python. Two layouts:
 *
 *   zip (torch >= 1.6): <prefix>/data.pkl holds the pickled dict; each storage is the raw
 *     entry <prefix>/data/<key>. Storages are copied out of the archive into blobs of the set.
 *   legacy (_use_new_zipfile_serialization=False): five pickles in a row (magic number,
 *     protocol version, sys_info, the dict, the list of storage keys), then for each key in
 *     that list a u64 element count and the raw elements. Tensors point into the file.
 *
 * In both, a tensor is _rebuild_tensor_v2(storage, offset, size, stride, ...) whose storage
 * is a persistent id ('storage', torch.FloatStorage, key, location, numel[, view]). Every
 * offset and stride is checked against its storage before a pointer is formed; a strided
 * view is kept as one (ag_tensor_ref.strided) and gathered only after the architecture has
 * checked its shape: an expanded view of 4 bytes may declare a gigabyte.
 */
#include "pickle_internal.h"

#include <stdio.h>
#include <string.h>
#include <zip.h>

/* Storage bytes read from a zip, and any one view: an AnimeGANv2 generator has 9 MB. */
#ifndef AG_PT_MAX_BYTES
#define AG_PT_MAX_BYTES ((size_t)1 << 30)
#endif
/* data.pkl of a state_dict is ~100 bytes per tensor. */
#define AG_PT_MAX_PICKLE_BYTES ((size_t)64 << 20)
#define AG_PT_MAX_STORAGES 4096
/* zlib's deflate expands at most 1032:1; a larger claim must not size an allocation. */
#define AG_DEFLATE_MAX_RATIO 1032u

typedef struct pt_storage {
    const ag_pkl_obj *key; /* STR in the pickle */
    ag_dtype dtype;
    const uint8_t *bytes; /* NULL until known */
    size_t nbytes;
} pt_storage;

typedef struct pt_file {
    const uint8_t *data;
    size_t size;
    const char *label;
    ag_tensor_set *out;
    ag_error *err;
    ag_pkl vm; /* the state_dict pickle; its strings point into `data` or `pickle` */
    int32_t root;
    pt_storage *storages;
    int storage_count;
    zip_t *zip;      /* zip layout: storages are read on first use */
    uint8_t *pickle; /* data.pkl copied out of the zip */
    char prefix[128];
    size_t bytes_read; /* under AG_PT_MAX_BYTES */
} pt_file;

static int clamp_len(size_t len) {
    return len > 80 ? 80 : (int)len;
}

static const ag_pkl_obj *obj(const pt_file *f, int32_t index) {
    return ag_pkl_at(&f->vm, index);
}

/* Item `i` of a tuple, or NULL. */
static const ag_pkl_obj *item(const pt_file *f, const ag_pkl_obj *tuple, int i) {
    if (tuple->type != AG_PKL_TUPLE || i >= tuple->seq.count)
        return NULL;
    return obj(f, tuple->seq.items[i]);
}

/* ---- storages -------------------------------------------------------------------------- */

static pt_storage *find_storage(pt_file *f, const ag_pkl_obj *key) {
    for (int i = 0; i < f->storage_count; i++) {
        const ag_pkl_obj *k = f->storages[i].key;
        if (k->str.len == key->str.len && memcmp(k->str.ptr, key->str.ptr, k->str.len) == 0)
            return &f->storages[i];
    }
    return NULL;
}

/* Checks a persistent id ('storage', type, key, location, numel[, view]); *dtype its type. */
static int check_pid(pt_file *f, const ag_pkl_obj *pid, ag_dtype *dtype) {
    const ag_pkl_obj *type = item(f, pid, 1), *key = item(f, pid, 2), *numel = item(f, pid, 4);
    if (!item(f, pid, 0) || !ag_pkl_str_eq(item(f, pid, 0), "storage") || pid->seq.count > 6 ||
        !numel || numel->type != AG_PKL_INT || key->type != AG_PKL_STR ||
        type->type != AG_PKL_GLOBAL)
        return ag_error_set(f->err, AG_E_FORMAT,
                            "%s: a persistent id is not ('storage', type, key, location, numel)",
                            f->label);
    if (type->global.kind != AG_PKL_G_DTYPE) {
        const ag_pkl_obj *name = obj(f, type->global.name);
        return ag_error_set(f->err, AG_E_UNSUPPORTED,
                            "%s: storage '%.*s' has type torch.%.*s; only float32, float16, "
                            "bfloat16, float64 and int8 tensors are supported",
                            f->label, clamp_len(key->str.len), key->str.ptr,
                            clamp_len(name->str.len), name->str.ptr);
    }
    *dtype = (ag_dtype)type->global.dtype;
    return AG_OK;
}

/* Registers every storage the pickle refers to, with its dtype (the legacy data section
 * gives element counts, so the dtypes are needed before it can be read). Each tensor has
 * one persistent id, so a state_dict has no more of them than tensors: the bound keeps the
 * key lookups below quadratic in 4096 at worst. */
static int collect_storages(pt_file *f) {
    int persids = 0;
    for (int32_t i = 0; i < f->vm.obj_count; i++) {
        if (obj(f, i)->type != AG_PKL_PERSID)
            continue;
        if (++persids > AG_PT_MAX_STORAGES)
            return ag_error_set(f->err, AG_E_LIMIT, "%s: more than %d persistent ids", f->label,
                                AG_PT_MAX_STORAGES);
        const ag_pkl_obj *pid = obj(f, obj(f, i)->ref);
        ag_dtype dtype = AG_DTYPE_F32;
        int rc = check_pid(f, pid, &dtype);
        if (rc != AG_OK)
            return rc;
        const ag_pkl_obj *key = item(f, pid, 2);
        pt_storage *known = find_storage(f, key);
        if (known && known->dtype != dtype)
            return ag_error_set(f->err, AG_E_FORMAT, "%s: storage '%.*s' has two dtypes", f->label,
                                clamp_len(key->str.len), key->str.ptr);
        if (known)
            continue;
        if (f->storage_count % 64 == 0) {
            pt_storage *grown =
                ag_realloc(f->storages, (size_t)(f->storage_count + 64) * sizeof *f->storages);
            if (!grown)
                return ag_error_set(f->err, AG_E_NOMEM, "%s: out of memory", f->label);
            f->storages = grown;
        }
        f->storages[f->storage_count++] = (pt_storage){.key = key, .dtype = dtype};
    }
    return AG_OK;
}

/* ---- the zip layout -------------------------------------------------------------------- */

/* Reads a whole entry into an ag_malloc'ed buffer, after checking its declared size. */
static int zip_read(pt_file *f, zip_int64_t index, size_t max_bytes, uint8_t **out,
                    size_t *out_bytes) {
    zip_stat_t st;
    zip_stat_init(&st);
    if (zip_stat_index(f->zip, (zip_uint64_t)index, 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE) ||
        !(st.valid & ZIP_STAT_COMP_SIZE))
        return ag_error_set(f->err, AG_E_FORMAT, "%s: zip entry %lld: %s", f->label,
                            (long long)index, zip_strerror(f->zip));
    const char *name = (st.valid & ZIP_STAT_NAME) ? st.name : "?";
    if (st.size > max_bytes || st.size > AG_PT_MAX_BYTES - f->bytes_read)
        return ag_error_set(f->err, AG_E_LIMIT,
                            "%s: zip entry '%.80s' of %llu bytes exceeds the "
                            "%zu byte limit",
                            f->label, name, (unsigned long long)st.size,
                            max_bytes < AG_PT_MAX_BYTES ? max_bytes : AG_PT_MAX_BYTES);
    if (st.comp_size > f->size || st.size / AG_DEFLATE_MAX_RATIO > st.comp_size)
        return ag_error_set(f->err, AG_E_FORMAT,
                            "%s: zip entry '%.80s' claims %llu bytes from "
                            "%llu compressed",
                            f->label, name, (unsigned long long)st.size,
                            (unsigned long long)st.comp_size);
    size_t size = (size_t)st.size;
    uint8_t *buf = ag_malloc(size ? size : 1);
    zip_file_t *zf = buf ? zip_fopen_index(f->zip, (zip_uint64_t)index, 0) : NULL;
    int rc = AG_OK;
    if (!buf) {
        rc = ag_error_set(f->err, AG_E_NOMEM, "%s: out of memory for %zu bytes", f->label, size);
        goto done;
    }
    if (!zf) {
        rc = ag_error_set(f->err, AG_E_FORMAT, "%s: zip entry '%.80s': %s", f->label, name,
                          zip_strerror(f->zip));
        goto done;
    }
    /* Reading past the end makes libzip check the CRC and the declared size. */
    uint8_t extra;
    zip_int64_t got = zip_fread(zf, buf, size);
    zip_int64_t past = got == (zip_int64_t)size ? zip_fread(zf, &extra, 1) : 0;
    if (got != (zip_int64_t)size || past != 0)
        rc = ag_error_set(f->err, AG_E_FORMAT, "%s: zip entry '%.80s' is corrupt: %s", f->label,
                          name, got < 0 || past < 0 ? zip_file_strerror(zf) : "wrong size");
done:
    if (zf)
        zip_fclose(zf);
    if (rc != AG_OK) {
        ag_free(buf);
        return rc;
    }
    f->bytes_read += size;
    *out = buf;
    *out_bytes = size;
    return AG_OK;
}

static int zip_load_storage(pt_file *f, pt_storage *st) {
    const ag_pkl_obj *key = st->key;
    char path[sizeof f->prefix + 128];
    if (key->str.len > 100)
        return ag_error_set(f->err, AG_E_FORMAT, "%s: storage key of %zu bytes", f->label,
                            key->str.len);
    snprintf(path, sizeof path, "%s/data/%.*s", f->prefix, (int)key->str.len, key->str.ptr);
    zip_int64_t index = zip_name_locate(f->zip, path, 0);
    if (index < 0)
        return ag_error_set(f->err, AG_E_FORMAT, "%s: storage '%s' missing from the archive",
                            f->label, path);
    uint8_t *blob = NULL;
    size_t nbytes = 0;
    int rc = zip_read(f, index, AG_PT_MAX_BYTES, &blob, &nbytes);
    if (rc == AG_OK)
        rc = ag_error_prefix(ag_tensor_set_own(f->out, blob, f->err), f->label, f->err);
    if (rc == AG_OK) {
        st->bytes = blob;
        st->nbytes = nbytes;
    }
    return rc;
}

/* The record directory: the prefix of the one "<prefix>/data.pkl" entry. */
static int zip_find_pickle(pt_file *f, zip_int64_t *index) {
    zip_int64_t count = zip_get_num_entries(f->zip, 0);
    for (zip_int64_t i = 0; i < count; i++) {
        const char *name = zip_get_name(f->zip, (zip_uint64_t)i, 0);
        const char *slash = name ? strchr(name, '/') : NULL;
        if (!slash || slash == name || strcmp(slash, "/data.pkl") != 0)
            continue;
        size_t len = (size_t)(slash - name);
        if (len >= sizeof f->prefix)
            return ag_error_set(f->err, AG_E_FORMAT, "%s: zip record name too long", f->label);
        memcpy(f->prefix, name, len);
        f->prefix[len] = '\0';
        *index = i;
        return AG_OK;
    }
    return ag_error_set(f->err, AG_E_FORMAT,
                        "%s: zip archive without a <name>/data.pkl entry: not a torch.save file",
                        f->label);
}

/* torch >= 2.1 records the byte order; raw storages are only usable when little-endian. */
static int zip_check_byteorder(pt_file *f) {
    char path[sizeof f->prefix + 16];
    snprintf(path, sizeof path, "%s/byteorder", f->prefix);
    zip_int64_t index = zip_name_locate(f->zip, path, 0);
    if (index < 0)
        return AG_OK;
    uint8_t *text = NULL;
    size_t len = 0;
    int rc = zip_read(f, index, 16, &text, &len);
    if (rc == AG_OK && !(len == 6 && memcmp(text, "little", 6) == 0))
        rc = ag_error_set(f->err, AG_E_UNSUPPORTED, "%s: storages are not little-endian", f->label);
    ag_free(text);
    return rc;
}

static int zip_open_archive(pt_file *f) {
    zip_error_t zerr;
    zip_error_init(&zerr);
    zip_source_t *src = zip_source_buffer_create(f->data, f->size, 0, &zerr);
    if (src) {
        f->zip = zip_open_from_source(src, ZIP_RDONLY, &zerr);
        if (!f->zip)
            zip_source_free(src);
    }
    int rc = AG_OK;
    if (!f->zip)
        rc = ag_error_set(f->err, AG_E_FORMAT, "%s: not a readable zip archive: %s", f->label,
                          zip_error_strerror(&zerr));
    zip_error_fini(&zerr);
    return rc;
}

static int convert(pt_file *f);

static int parse_zip(pt_file *f) {
    zip_int64_t index = 0;
    size_t pickle_bytes = 0;
    int rc = zip_open_archive(f);
    if (rc == AG_OK)
        rc = zip_find_pickle(f, &index);
    if (rc == AG_OK)
        rc = zip_check_byteorder(f);
    if (rc == AG_OK)
        rc = zip_read(f, index, AG_PT_MAX_PICKLE_BYTES, &f->pickle, &pickle_bytes);
    if (rc != AG_OK)
        return rc;
    char label[AG_ERROR_MESSAGE_BYTES + sizeof f->prefix + 16];
    snprintf(label, sizeof label, "%s: %s/data.pkl", f->label, f->prefix);
    size_t end = 0;
    rc = ag_pkl_load(&f->vm, f->pickle, pickle_bytes, label, &f->root, &end, f->err);
    if (rc == AG_OK)
        rc = collect_storages(f);
    if (rc == AG_OK)
        rc = convert(f);
    return rc;
}

/* ---- the legacy layout ----------------------------------------------------------------- */

/* Loads the pickle at *pos into `vm` and moves *pos past it. */
static int legacy_pickle(pt_file *f, ag_pkl *vm, size_t *pos, int32_t *root) {
    char label[AG_ERROR_MESSAGE_BYTES + 32];
    snprintf(label, sizeof label, "%s: pickle at byte %zu", f->label, *pos);
    size_t end = 0;
    int rc = ag_pkl_load(vm, f->data + *pos, f->size - *pos, label, root, &end, f->err);
    if (rc == AG_OK)
        *pos += end;
    return rc;
}

/* The magic number, protocol version and sys_info pickles in front of the dict. */
static int legacy_header(pt_file *f, size_t *pos) {
    static const uint8_t magic[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
    ag_pkl vm = {0};
    int32_t root = 0;
    int rc = legacy_pickle(f, &vm, pos, &root);
    const ag_pkl_obj *o = rc == AG_OK ? ag_pkl_at(&vm, root) : NULL;
    if (o && !(o->type == AG_PKL_BIGINT && o->str.len == sizeof magic &&
               memcmp(o->str.ptr, magic, sizeof magic) == 0))
        rc = ag_error_set(f->err, AG_E_FORMAT,
                          "%s: a pickle, but not a torch.save file (no PyTorch magic number)",
                          f->label);
    ag_pkl_fini(&vm);
    if (rc == AG_OK)
        rc = legacy_pickle(f, &vm, pos, &root);
    o = rc == AG_OK ? ag_pkl_at(&vm, root) : NULL;
    if (o && !(o->type == AG_PKL_INT && o->i == 1001))
        rc = ag_error_set(f->err, AG_E_UNSUPPORTED, "%s: legacy protocol version is not 1001",
                          f->label);
    ag_pkl_fini(&vm);
    if (rc == AG_OK)
        rc = legacy_pickle(f, &vm, pos, &root);
    o = rc == AG_OK ? ag_pkl_at(&vm, root) : NULL;
    for (int32_t i = 0; o && o->type == AG_PKL_DICT && i + 1 < o->seq.count; i += 2) {
        const ag_pkl_obj *value = ag_pkl_at(&vm, o->seq.items[i + 1]);
        if (ag_pkl_str_eq(ag_pkl_at(&vm, o->seq.items[i]), "little_endian") &&
            value->type == AG_PKL_BOOL && value->i == 0)
            rc = ag_error_set(f->err, AG_E_UNSUPPORTED, "%s: written on a big-endian machine",
                              f->label);
    }
    ag_pkl_fini(&vm);
    return rc;
}

/* After the key list: for each key, a u64 element count and the elements. */
static int legacy_data(pt_file *f, const ag_pkl *keys_vm, int32_t keys, size_t pos) {
    const ag_pkl_obj *list = ag_pkl_at(keys_vm, keys);
    if (list->type != AG_PKL_LIST)
        return ag_error_set(f->err, AG_E_FORMAT, "%s: storage key list is a Python %s", f->label,
                            ag_pkl_type_name(list));
    for (int32_t i = 0; i < list->seq.count; i++) {
        const ag_pkl_obj *key = ag_pkl_at(keys_vm, list->seq.items[i]);
        pt_storage *st = key->type == AG_PKL_STR ? find_storage(f, key) : NULL;
        if (!st || st->bytes)
            return ag_error_set(f->err, AG_E_FORMAT,
                                "%s: storage key %d of the list is unknown or repeated", f->label,
                                (int)i);
        size_t count = 0, nbytes = 0;
        if (f->size - pos < 8)
            return ag_error_set(f->err, AG_E_FORMAT, "%s: truncated before storage %d", f->label,
                                (int)i);
        for (int b = 7; b >= 0; b--)
            count = (count << 8) | f->data[pos + (size_t)b];
        if (!ag_mul_size(count, ag_dtype_size(st->dtype), &nbytes) || nbytes > f->size - pos - 8)
            return ag_error_set(f->err, AG_E_FORMAT,
                                "%s: storage '%.*s' of %zu elements "
                                "runs past the end of the file (size %zu)",
                                f->label, clamp_len(key->str.len), key->str.ptr, count, f->size);
        st->bytes = f->data + pos + 8;
        st->nbytes = nbytes;
        pos += 8 + nbytes;
    }
    return AG_OK;
}

static int parse_legacy(pt_file *f) {
    size_t pos = 0;
    ag_pkl keys_vm = {0};
    int32_t keys = 0;
    int rc = legacy_header(f, &pos);
    if (rc == AG_OK)
        rc = legacy_pickle(f, &f->vm, &pos, &f->root);
    if (rc == AG_OK)
        rc = collect_storages(f);
    if (rc == AG_OK)
        rc = legacy_pickle(f, &keys_vm, &pos, &keys);
    if (rc == AG_OK)
        rc = legacy_data(f, &keys_vm, keys, pos);
    ag_pkl_fini(&keys_vm);
    if (rc == AG_OK)
        rc = convert(f);
    return rc;
}

/* ---- tensors --------------------------------------------------------------------------- */

/* The tensor's geometry from _rebuild_tensor_v2's (storage, offset, size, stride, ...). */
static int tensor_geometry(const pt_file *f, const ag_pkl_obj *args, ag_tensor_ref *ref,
                           int64_t *offset, int64_t stride[AG_TENSOR_MAX_DIMS]) {
    const ag_pkl_obj *off = item(f, args, 1), *size = item(f, args, 2), *step = item(f, args, 3);
    if (!step || off->type != AG_PKL_INT || off->i < 0 || size->type != AG_PKL_TUPLE ||
        step->type != AG_PKL_TUPLE || size->seq.count != step->seq.count)
        return ag_error_set(f->err, AG_E_FORMAT,
                            "%s: tensor '%s': bad storage offset, size or stride", f->label,
                            ref->name);
    /* StyleGAN2's modulated convs store (1, OC, IC, K, K): leading size-1 axes beyond the
     * fourth are dropped, as they change neither the elements nor their order. */
    int drop = size->seq.count > AG_TENSOR_MAX_DIMS ? size->seq.count - AG_TENSOR_MAX_DIMS : 0;
    for (int i = 0; i < drop; i++) {
        const ag_pkl_obj *n = item(f, size, i);
        if (n->type != AG_PKL_INT || n->i != 1)
            return ag_error_set(f->err, AG_E_UNSUPPORTED,
                                "%s: tensor '%s' has %d dimensions, at most %d are supported",
                                f->label, ref->name, (int)size->seq.count, AG_TENSOR_MAX_DIMS);
    }
    *offset = off->i;
    ref->ndim = size->seq.count - drop;
    for (int i = 0; i < ref->ndim; i++) {
        const ag_pkl_obj *n = item(f, size, i + drop), *s = item(f, step, i + drop);
        if (n->type != AG_PKL_INT || s->type != AG_PKL_INT || n->i < 0 || s->i < 0)
            return ag_error_set(f->err, AG_E_FORMAT,
                                "%s: tensor '%s': size or stride %d is not a non-negative int",
                                f->label, ref->name, i);
        ref->shape[i] = n->i;
        stride[i] = s->i;
    }
    return AG_OK;
}

/* The storage behind the tensor's persistent id, narrowed to a legacy view if it has one. */
static int tensor_storage(pt_file *f, const ag_pkl_obj *args, const ag_tensor_ref *ref,
                          const uint8_t **bytes, size_t *nbytes) {
    const ag_pkl_obj *persid = item(f, args, 0);
    if (!persid || persid->type != AG_PKL_PERSID)
        return ag_error_set(f->err, AG_E_FORMAT, "%s: tensor '%s' has no storage", f->label,
                            ref->name);
    const ag_pkl_obj *pid = obj(f, persid->ref);
    pt_storage *st = find_storage(f, item(f, pid, 2));
    AG_ASSERT(st); /* collect_storages registered every persistent id */
    int rc = !st->bytes && f->zip ? zip_load_storage(f, st) : AG_OK;
    if (rc != AG_OK)
        return rc;
    if (!st->bytes)
        return ag_error_set(f->err, AG_E_FORMAT, "%s: tensor '%s': storage missing from the file",
                            f->label, ref->name);
    *bytes = st->bytes;
    *nbytes = st->nbytes;
    const ag_pkl_obj *view = item(f, pid, 5);
    if (!view || view->type == AG_PKL_NONE)
        return AG_OK;
    /* (view_key, offset, size) in elements: pre-1.0 files only. */
    const ag_pkl_obj *start = item(f, view, 1), *count = item(f, view, 2);
    size_t es = ag_dtype_size(st->dtype), begin_bytes = 0, view_bytes = 0;
    if (!count || start->type != AG_PKL_INT || count->type != AG_PKL_INT || start->i < 0 ||
        count->i < 0 || !ag_mul_size((size_t)start->i, es, &begin_bytes) ||
        !ag_mul_size((size_t)count->i, es, &view_bytes) || begin_bytes > st->nbytes ||
        view_bytes > st->nbytes - begin_bytes)
        return ag_error_set(f->err, AG_E_FORMAT, "%s: tensor '%s': bad storage view", f->label,
                            ref->name);
    *bytes += begin_bytes;
    *nbytes = view_bytes;
    return AG_OK;
}

/* Points the tensor at its elements, after checking the furthest one is in the storage. */
static int place(pt_file *f, ag_tensor_ref *ref, const uint8_t *bytes, size_t nbytes,
                 int64_t offset, const int64_t stride[AG_TENSOR_MAX_DIMS]) {
    size_t es = ag_dtype_size(ref->dtype), numel = 1, last = (size_t)offset, term = 0;
    bool ok = true, contiguous = true;
    for (int i = ref->ndim - 1; i >= 0; i--) {
        size_t n = (size_t)ref->shape[i];
        contiguous &= n == 1 || (size_t)stride[i] == numel;
        ok &= ag_mul_size(numel, n, &numel);
        ok &= n == 0 || (ag_mul_size(n - 1, (size_t)stride[i], &term) &&
                         !__builtin_add_overflow(last, term, &last));
    }
    ok &= ag_mul_size(numel, es, &ref->nbytes);
    if (ok && numel == 0)
        return AG_OK; /* no element to point at */
    size_t end_bytes = 0;
    if (!ok || !ag_mul_size(last + 1, es, &end_bytes) || last == SIZE_MAX || end_bytes > nbytes)
        return ag_error_set(f->err, AG_E_FORMAT,
                            "%s: tensor '%s': offset %lld, sizes and strides reach past its "
                            "storage of %zu bytes",
                            f->label, ref->name, (long long)offset, nbytes);
    ref->data = bytes + (size_t)offset * es;
    if (contiguous)
        return AG_OK;
    /* Gathered only once the architecture has checked the shape (ag_tensor_ref_elements);
     * even then an expanded view must stay under the limit a file's storages have. */
    if (ref->nbytes > AG_PT_MAX_BYTES)
        return ag_error_set(f->err, AG_E_LIMIT,
                            "%s: tensor '%s' of %zu bytes exceeds the %zu byte limit", f->label,
                            ref->name, ref->nbytes, AG_PT_MAX_BYTES);
    ref->strided = true;
    memcpy(ref->stride, stride, sizeof ref->stride);
    return AG_OK;
}

/* The dict key, without DataParallel's "module." prefix. */
static int tensor_name(const pt_file *f, const ag_pkl_obj *key, ag_tensor_ref *ref) {
    if (key->type != AG_PKL_STR)
        return ag_error_set(f->err, AG_E_FORMAT, "%s: a state_dict key is a Python %s, not a str",
                            f->label, ag_pkl_type_name(key));
    const char *name = key->str.ptr;
    size_t len = key->str.len;
    if (len > 7 && memcmp(name, "module.", 7) == 0) {
        name += 7;
        len -= 7;
    }
    if (len >= sizeof ref->name || memchr(name, '\0', len))
        return ag_error_set(f->err, AG_E_FORMAT,
                            "%s: tensor name '%.*s...' is longer than %d "
                            "bytes or holds a NUL",
                            f->label, clamp_len(len), name, AG_TENSOR_NAME_BYTES - 1);
    memcpy(ref->name, name, len);
    ref->name[len] = '\0';
    return AG_OK;
}

static int add_entry(pt_file *f, const ag_pkl_obj *key, const ag_pkl_obj *value) {
    ag_tensor_ref ref = {0};
    int rc = tensor_name(f, key, &ref);
    if (rc != AG_OK)
        return rc;
    if (value->type != AG_PKL_TENSOR)
        return ag_error_set(f->err, AG_E_UNSUPPORTED,
                            "%s: entry '%s' holds a Python %s, not a tensor: expected a "
                            "state_dict (names -> tensors)",
                            f->label, ref.name, ag_pkl_type_name(value));
    const ag_pkl_obj *args = obj(f, value->ref);
    const uint8_t *bytes = NULL;
    size_t nbytes = 0;
    int64_t offset = 0, stride[AG_TENSOR_MAX_DIMS] = {0};
    rc = tensor_geometry(f, args, &ref, &offset, stride);
    if (rc == AG_OK)
        rc = tensor_storage(f, args, &ref, &bytes, &nbytes);
    if (rc != AG_OK)
        return rc;
    const ag_pkl_obj *pid = obj(f, item(f, args, 0)->ref);
    ref.dtype = (ag_dtype)item(f, pid, 1)->global.dtype;
    rc = place(f, &ref, bytes, nbytes, offset, stride);
    if (rc == AG_OK)
        rc = ag_error_prefix(ag_tensor_set_add(f->out, &ref, f->err), f->label, f->err);
    return rc;
}

/* Training checkpoints nest the weights one level down: GFPGAN's {"params_ema": ...,
 * "params": ...}, GPEN's trainer {"g": ..., "d": ..., "g_ema": ...}. The first of these keys
 * whose value is a dict names the state_dict (the EMA weights are the ones released). */
static const char *nested_key(const pt_file *f, const ag_pkl_obj *dict, const ag_pkl_obj **out) {
    static const char *const keys[] = {"params_ema", "params", "g_ema"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        for (int32_t i = 0; i + 1 < dict->seq.count; i += 2) {
            const ag_pkl_obj *value = obj(f, dict->seq.items[i + 1]);
            if (ag_pkl_str_eq(obj(f, dict->seq.items[i]), keys[k]) && value->type == AG_PKL_DICT) {
                *out = value;
                return keys[k];
            }
        }
    return NULL;
}

static int convert(pt_file *f) {
    const ag_pkl_obj *dict = obj(f, f->root);
    const char *key = dict->type == AG_PKL_DICT ? nested_key(f, dict, &dict) : NULL;
    if (key) {
        int rc = ag_tensor_set_meta(f->out, "state_dict_key", key, f->err);
        if (rc != AG_OK)
            return ag_error_prefix(rc, f->label, f->err);
    }
    if (dict->type != AG_PKL_DICT)
        return ag_error_set(f->err, AG_E_UNSUPPORTED,
                            "%s: holds a Python %s, not a state_dict; save model.state_dict() "
                            "instead",
                            f->label, ag_pkl_type_name(dict));
    for (int32_t i = 0; i + 1 < dict->seq.count; i += 2) {
        int rc = add_entry(f, obj(f, dict->seq.items[i]), obj(f, dict->seq.items[i + 1]));
        if (rc != AG_OK)
            return rc;
    }
    return AG_OK;
}

int ag_pytorch_parse(const uint8_t *data, size_t size, const char *label, ag_tensor_set *out,
                     ag_error *err) {
    pt_file f = {.data = data, .size = size, .label = label, .out = out, .err = err};
    bool is_zip = size >= 4 && memcmp(data, "PK\x03\x04", 4) == 0;
    int rc;
    if (is_zip)
        rc = parse_zip(&f);
    else if (size >= 2 && data[0] == 0x80) /* pickle PROTO */
        rc = parse_legacy(&f);
    else
        rc = ag_error_set(err, AG_E_FORMAT,
                          "%s: not a PyTorch file (neither a zip archive nor a pickle)", label);
    if (rc == AG_OK)
        rc = ag_error_prefix(ag_tensor_set_meta(out, "format", "pytorch", err), label, err);
    if (rc == AG_OK)
        rc = ag_error_prefix(
            ag_tensor_set_meta(out, "serialization", is_zip ? "zip" : "legacy", err), label, err);
    ag_pkl_fini(&f.vm);
    ag_free(f.storages);
    ag_free(f.pickle);
    if (f.zip)
        zip_discard(f.zip);
    if (rc != AG_OK)
        ag_tensor_set_fini(out);
    return rc;
}
