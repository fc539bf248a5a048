/*
 * onnx_pb.c - reader of ONNX files (a protobuf ModelProto) for the importer in
 * onnx_import.c: the graph's nodes with their attributes, the initializers, the graph
 * inputs and outputs with their shapes, and the opset.
 *
 * The protobuf wire format is read here directly rather than through protobuf-c. The file
 * is untrusted and the subset needed is small (five message types, four wire types): a
 * reader written for it checks every length against the bytes left before a pointer is
 * formed, caps every count (onnx_internal.h) before it sizes an array, and nests only as
 * deep as the schema does (ModelProto > GraphProto > NodeProto > AttributeProto >
 * TensorProto; subgraph attributes are not descended into), so it is bounded by
 * construction. protobuf-c would add a generated onnx.pb-c.c of several thousand lines, a
 * run-time library and a code generator to the build, unpack every field we skip into heap
 * objects, and recurse into nested graphs; none of it is needed to read these files.
 *
 * Nothing is copied: names and tensor data point into the file buffer.
 */
#include "onnx_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_BYTES = 2, WIRE_FIXED32 = 5 };

typedef struct pb {
    const uint8_t *p, *end;
} pb;

typedef struct pb_field {
    uint32_t num;
    int wire;
    uint64_t u;       /* WIRE_VARINT, WIRE_FIXED32, WIRE_FIXED64 */
    ag_pb_span bytes; /* WIRE_BYTES */
} pb_field;

/* The parse in progress; `what` names the message being read, for the error messages. */
typedef struct pb_ctx {
    const char *label;
    ag_error *err;
    size_t file_bytes;
    uint64_t tensor_elems; /* all tensors, against the file size */
    ag_onnx_model *m;
} pb_ctx;

/* A reader over a span; an absent field's span is (NULL, 0), read as empty. */
static pb pb_of(ag_pb_span s) {
    if (!s.ptr)
        return (pb){NULL, NULL};
    return (pb){s.ptr, s.ptr + s.len};
}

bool ag_pb_span_eq(ag_pb_span s, const char *text) {
    size_t n = strlen(text);
    return s.len == n && (n == 0 || memcmp(s.ptr, text, n) == 0);
}

/* 0: read; 1: truncated; 2: more than 64 bits. */
static int pb_varint(pb *r, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p == r->end)
            return 1;
        uint8_t b = *r->p++;
        if (shift == 63 && b > 1)
            return 2;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return 2;
}

static uint64_t read_le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Reads the next field of a message. 1: a field; 0: end of the message; <0: error. */
static int pb_next(pb_ctx *c, pb *r, pb_field *f, const char *what) {
    if (r->p == r->end)
        return 0;
    uint64_t tag;
    int rc = pb_varint(r, &tag);
    if (rc == 0 && (tag >> 3 == 0 || tag >> 3 > 0x1fffffff))
        return ag_error_set(c->err, AG_E_FORMAT, "%s: field number %llu in %s", c->label,
                            (unsigned long long)(tag >> 3), what);
    if (rc != 0)
        return ag_error_set(c->err, AG_E_FORMAT, "%s: %s in a field tag of %s", c->label,
                            rc == 1 ? "file truncated" : "varint longer than 64 bits", what);
    f->num = (uint32_t)(tag >> 3);
    f->wire = (int)(tag & 7);
    f->u = 0;
    f->bytes = (ag_pb_span){NULL, 0};
    size_t left = (size_t)(r->end - r->p);
    switch (f->wire) {
    case WIRE_VARINT:
        rc = pb_varint(r, &f->u);
        if (rc != 0)
            return ag_error_set(c->err, AG_E_FORMAT, "%s: %s in field %u of %s", c->label,
                                rc == 1 ? "file truncated" : "varint longer than 64 bits", f->num,
                                what);
        return 1;
    case WIRE_FIXED64:
    case WIRE_FIXED32: {
        int n = f->wire == WIRE_FIXED64 ? 8 : 4;
        if (left < (size_t)n)
            return ag_error_set(c->err, AG_E_FORMAT, "%s: file truncated in field %u of %s",
                                c->label, f->num, what);
        f->u = read_le(r->p, n);
        r->p += n;
        return 1;
    }
    case WIRE_BYTES: {
        uint64_t len;
        rc = pb_varint(r, &len);
        if (rc != 0)
            return ag_error_set(c->err, AG_E_FORMAT, "%s: %s in the length of field %u of %s",
                                c->label, rc == 1 ? "file truncated" : "varint longer than 64 bits",
                                f->num, what);
        left = (size_t)(r->end - r->p);
        if (len > left)
            return ag_error_set(c->err, AG_E_FORMAT,
                                "%s: field %u of %s claims %llu bytes, %zu are left (file "
                                "truncated?)",
                                c->label, f->num, what, (unsigned long long)len, left);
        f->bytes = (ag_pb_span){r->p, (size_t)len};
        r->p += len;
        return 1;
    }
    default:
        return ag_error_set(c->err, AG_E_FORMAT,
                            "%s: field %u of %s has wire type %d (groups or invalid)", c->label,
                            f->num, what, f->wire);
    }
}

static int expect_wire(pb_ctx *c, const pb_field *f, int wire, const char *what) {
    if (f->wire == wire)
        return AG_OK;
    return ag_error_set(c->err, AG_E_FORMAT, "%s: field %u of %s has wire type %d, expected %d",
                        c->label, f->num, what, f->wire, wire);
}

/* A string field: at most AG_ONNX_MAX_NAME_BYTES, no NUL inside. */
static int read_string(pb_ctx *c, const pb_field *f, ag_pb_span *out, const char *what) {
    int rc = expect_wire(c, f, WIRE_BYTES, what);
    if (rc != AG_OK)
        return rc;
    if (f->bytes.len > AG_ONNX_MAX_NAME_BYTES || memchr(f->bytes.ptr, '\0', f->bytes.len))
        return ag_error_set(c->err, AG_E_FORMAT,
                            "%s: string field %u of %s is longer than %d bytes or holds a NUL",
                            c->label, f->num, what, AG_ONNX_MAX_NAME_BYTES);
    *out = f->bytes;
    return AG_OK;
}

/* Grows an array of `elem` bytes holding `count` to room for one more, under `max`. The
 * capacity is implicit: 16, then doubling, so it is reallocated when `count` is 0 or a
 * power of two from 16 on. */
static int grow(pb_ctx *c, void **array, int count, int max, size_t elem, const char *what) {
    if (count >= max)
        return ag_error_set(c->err, AG_E_LIMIT, "%s: more than %d %s", c->label, max, what);
    if (count != 0 && (count < 16 || (count & (count - 1)) != 0))
        return AG_OK;
    int cap = count == 0 ? 16 : count * 2;
    void *grown = ag_realloc(*array, (size_t)cap * elem);
    if (!grown)
        return ag_error_set(c->err, AG_E_NOMEM, "%s: out of memory for %d %s", c->label, count + 1,
                            what);
    *array = grown;
    return AG_OK;
}

/* ---- repeated scalars (packed or not) ----------------------------------------------------- */

/* Decodes every element of repeated varint field `num` of `msg`: at most `max` into `out`
 * (may be NULL to count). 0: ok; 1: malformed; 2: more than `max`. */
static int repeated_varints(ag_pb_span msg, uint32_t num, int64_t *out, int64_t max,
                            int64_t *count) {
    pb r = pb_of(msg);
    int64_t n = 0;
    while (r.p < r.end) {
        uint64_t tag, v, len;
        if (pb_varint(&r, &tag) != 0)
            return 1;
        int wire = (int)(tag & 7);
        bool ours = (tag >> 3) == num;
        if (wire == WIRE_VARINT) {
            if (pb_varint(&r, &v) != 0)
                return 1;
            if (ours) {
                if (n >= max)
                    return 2;
                if (out)
                    out[n] = (int64_t)v;
                n++;
            }
        } else if (wire == WIRE_BYTES) {
            if (pb_varint(&r, &len) != 0 || len > (uint64_t)(r.end - r.p))
                return 1;
            pb packed = {r.p, r.p + len};
            r.p += len;
            while (ours && packed.p < packed.end) {
                if (pb_varint(&packed, &v) != 0)
                    return 1;
                if (n >= max)
                    return 2;
                if (out)
                    out[n] = (int64_t)v;
                n++;
            }
        } else if (wire == WIRE_FIXED32 || wire == WIRE_FIXED64) {
            size_t bytes = wire == WIRE_FIXED32 ? 4 : 8;
            if (ours || (size_t)(r.end - r.p) < bytes)
                return 1;
            r.p += bytes;
        } else {
            return 1;
        }
    }
    *count = n;
    return 0;
}

/* The same for a repeated float field (fixed32). */
static int repeated_floats(ag_pb_span msg, uint32_t num, float *out, int64_t max, int64_t *count) {
    pb r = pb_of(msg);
    int64_t n = 0;
    while (r.p < r.end) {
        uint64_t tag, v, len;
        if (pb_varint(&r, &tag) != 0)
            return 1;
        int wire = (int)(tag & 7);
        bool ours = (tag >> 3) == num;
        if (wire == WIRE_FIXED32 || wire == WIRE_FIXED64) {
            size_t bytes = wire == WIRE_FIXED32 ? 4 : 8;
            if ((size_t)(r.end - r.p) < bytes || (ours && wire != WIRE_FIXED32))
                return 1;
            if (ours) {
                if (n >= max)
                    return 2;
                if (out)
                    memcpy(&out[n], r.p, 4);
                n++;
            }
            r.p += bytes;
        } else if (wire == WIRE_BYTES) {
            if (pb_varint(&r, &len) != 0 || len > (uint64_t)(r.end - r.p))
                return 1;
            if (ours) {
                if (len % 4)
                    return 1;
                if ((int64_t)(len / 4) > max - n)
                    return 2;
                if (out)
                    memcpy(&out[n], r.p, (size_t)len);
                n += (int64_t)(len / 4);
            }
            r.p += len;
        } else if (wire == WIRE_VARINT) {
            if (ours || pb_varint(&r, &v) != 0)
                return 1;
        } else {
            return 1;
        }
    }
    *count = n;
    return 0;
}

int ag_onnx_attr_ints(const ag_onnx_attr *a, int64_t *out, int max, int *count) {
    int64_t n = 0;
    int rc = repeated_varints(a->msg, 8, out, max, &n);
    *count = (int)n;
    return rc == 0 ? AG_OK : AG_E_FORMAT;
}

int ag_onnx_attr_floats(const ag_onnx_attr *a, float *out, int max, int *count) {
    int64_t n = 0;
    int rc = repeated_floats(a->msg, 7, out, max, &n);
    *count = (int)n;
    return rc == 0 ? AG_OK : AG_E_FORMAT;
}

/* ---- TensorProto ------------------------------------------------------------------------ */

static size_t elem_bytes(int32_t data_type) {
    switch (data_type) {
    case AG_ONNX_FLOAT: return 4;
    case AG_ONNX_INT32: return 4;
    case AG_ONNX_INT64: return 8;
    case AG_ONNX_FLOAT16: return 2;
    }
    return 0;
}

static const char *type_name(int32_t data_type) {
    static const char *names[] = {"UNDEFINED",  "FLOAT",   "UINT8",  "INT8",   "UINT16",
                                  "INT16",      "INT32",   "INT64",  "STRING", "BOOL",
                                  "FLOAT16",    "DOUBLE",  "UINT32", "UINT64", "COMPLEX64",
                                  "COMPLEX128", "BFLOAT16"};
    if (data_type >= 0 && data_type < (int32_t)(sizeof names / sizeof names[0]))
        return names[data_type];
    return "unknown";
}

/* Counts the elements of typed field `num` (4 float_data, 5 int32_data, 7 int64_data) and,
 * for float_data held in a single packed run, points `run` at it. */
static int typed_count(pb_ctx *c, ag_onnx_tensor *t, uint32_t num, const char *what) {
    int64_t n = 0;
    int rc = num == 4 ? repeated_floats(t->msg, num, NULL, INT64_MAX, &n)
                      : repeated_varints(t->msg, num, NULL, INT64_MAX, &n);
    if (rc != 0)
        return ag_error_set(c->err, AG_E_FORMAT, "%s: %s: malformed field %u", c->label, what, num);
    if (t->typed_field && t->typed_field != (int)num && n > 0)
        return ag_error_set(c->err, AG_E_FORMAT, "%s: %s holds two kinds of typed data", c->label,
                            what);
    if (n > 0 && t->count != n)
        return ag_error_set(c->err, AG_E_FORMAT,
                            "%s: %s: its dims give %lld elements but field %u holds %lld", c->label,
                            what, (long long)t->count, num, (long long)n);
    if (n > 0)
        t->typed_field = (int)num;
    return AG_OK;
}

static int parse_tensor(pb_ctx *c, ag_pb_span msg, ag_onnx_tensor *t, const char *where) {
    char what[160];
    snprintf(what, sizeof what, "%s", where);
    memset(t, 0, sizeof *t);
    t->msg = msg;
    t->data_type = 0;
    pb r = pb_of(msg), probe = r;
    pb_field f;
    int rc, seen_dims = 0;
    bool external = false, floats_packed = false;
    int float_runs = 0;
    /* The name first, so every later message can name the tensor. */
    while ((rc = pb_next(c, &probe, &f, what)) == 1) {
        if (f.num == 8 && (rc = read_string(c, &f, &t->name, what)) != AG_OK)
            return rc;
    }
    if (rc < 0)
        return rc;
    if (t->name.len)
        snprintf(what, sizeof what, "tensor '%.*s'", AG_PB_SPAN_ARG(t->name));
    while ((rc = pb_next(c, &r, &f, what)) == 1) {
        switch (f.num) {
        case 1: /* dims */ seen_dims = 1; break;
        case 2: /* data_type */
            if ((rc = expect_wire(c, &f, WIRE_VARINT, what)) != AG_OK)
                return rc;
            t->data_type = (int32_t)f.u;
            break;
        case 3:
            return ag_error_set(c->err, AG_E_UNSUPPORTED, "%s: %s is segmented", c->label, what);
        case 4:
            float_runs++;
            floats_packed = f.wire == WIRE_BYTES;
            if (floats_packed)
                t->typed = f.bytes;
            break;
        case 9:
            if ((rc = expect_wire(c, &f, WIRE_BYTES, what)) != AG_OK)
                return rc;
            t->raw = f.bytes;
            t->has_raw = true;
            break;
        case 13: external = true; break;
        case 14:
            if ((rc = expect_wire(c, &f, WIRE_VARINT, what)) != AG_OK)
                return rc;
            external |= f.u == 1;
            break;
        default: break; /* name (read above), doc_string, other typed fields */
        }
    }
    if (rc < 0)
        return rc;
    if (external)
        return ag_error_set(c->err, AG_E_UNSUPPORTED,
                            "%s: %s keeps its data in an external file, which is not supported "
                            "(save the model with its weights inside the .onnx)",
                            c->label, what);
    if (elem_bytes(t->data_type) == 0)
        return ag_error_set(c->err, AG_E_UNSUPPORTED,
                            "%s: %s has data type %d (%s); only FLOAT, FLOAT16, INT32 and INT64 "
                            "are supported",
                            c->label, what, (int)t->data_type, type_name(t->data_type));
    int64_t ndim = 0;
    if (seen_dims) {
        rc = repeated_varints(msg, 1, t->dims, AG_ONNX_MAX_DIMS, &ndim);
        if (rc == 2)
            return ag_error_set(c->err, AG_E_UNSUPPORTED, "%s: %s has more than %d dimensions",
                                c->label, what, AG_ONNX_MAX_DIMS);
        if (rc != 0)
            return ag_error_set(c->err, AG_E_FORMAT, "%s: %s: malformed dims", c->label, what);
    }
    t->ndim = (int)ndim;
    t->count = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (t->dims[i] < 0 || t->dims[i] > AG_ONNX_MAX_DIM)
            return ag_error_set(c->err, AG_E_FORMAT, "%s: %s: dimension %d is %lld", c->label, what,
                                i, (long long)t->dims[i]);
        if (t->dims[i] == 0)
            t->count = 0;
    }
    /* The product is checked against the file size before each step, so it cannot
     * overflow; a zero dimension makes the tensor empty whatever follows. */
    for (int i = 0; i < t->ndim && t->count > 0; i++) {
        if (t->dims[i] > 0 && (uint64_t)t->count > c->file_bytes / (uint64_t)t->dims[i])
            return ag_error_set(c->err, AG_E_FORMAT,
                                "%s: %s declares more elements than the file has bytes (%zu)",
                                c->label, what, c->file_bytes);
        t->count *= t->dims[i];
    }
    c->tensor_elems += (uint64_t)t->count;
    if (c->tensor_elems > c->file_bytes)
        return ag_error_set(c->err, AG_E_FORMAT,
                            "%s: the tensors declare more elements than the file has bytes "
                            "(%zu), at %s",
                            c->label, c->file_bytes, what);
    size_t need = (size_t)t->count * elem_bytes(t->data_type);
    if (t->has_raw) {
        if (t->raw.len != need)
            return ag_error_set(c->err, AG_E_FORMAT,
                                "%s: %s: its dims need %zu bytes of raw_data, it has %zu", c->label,
                                what, need, t->raw.len);
        t->typed = (ag_pb_span){NULL, 0};
        return AG_OK;
    }
    uint32_t field = t->data_type == AG_ONNX_FLOAT ? 4 : t->data_type == AG_ONNX_INT64 ? 7 : 5;
    if ((rc = typed_count(c, t, 4, what)) != AG_OK || (rc = typed_count(c, t, 5, what)) != AG_OK ||
        (rc = typed_count(c, t, 7, what)) != AG_OK)
        return rc;
    if (t->count > 0 && t->typed_field != (int)field)
        return ag_error_set(c->err, AG_E_FORMAT,
                            "%s: %s of type %s holds no data for its %lld elements", c->label, what,
                            type_name(t->data_type), (long long)t->count);
    /* float_data in one packed run is little-endian fp32 like raw_data: point into it. */
    if (!(field == 4 && float_runs == 1 && floats_packed))
        t->typed = (ag_pb_span){NULL, 0};
    return AG_OK;
}

static int add_tensor(pb_ctx *c, ag_pb_span msg, bool initializer, const char *where, int *index) {
    ag_onnx_model *m = c->m;
    int rc = grow(c, (void **)&m->tensors, m->tensor_count, AG_ONNX_MAX_TENSORS, sizeof *m->tensors,
                  "tensors");
    if (rc != AG_OK)
        return rc;
    rc = parse_tensor(c, msg, &m->tensors[m->tensor_count], where);
    if (rc != AG_OK)
        return rc;
    m->tensors[m->tensor_count].initializer = initializer;
    m->initializer_count += initializer;
    *index = m->tensor_count++;
    return AG_OK;
}

static int float_of(const ag_onnx_tensor *t, int64_t i, float *out) {
    const uint8_t *p = t->has_raw ? t->raw.ptr : t->typed.ptr;
    if (t->data_type == AG_ONNX_FLOAT) {
        memcpy(out, p + 4 * i, 4);
        return 0;
    }
    uint16_t h = (uint16_t)read_le(p + 2 * i, 2);
    *out = ag_f16_to_f32(h);
    return 0;
}

int ag_onnx_tensor_floats(const ag_onnx_tensor *t, float *out, const char *label, ag_error *err) {
    if (t->data_type != AG_ONNX_FLOAT && t->data_type != AG_ONNX_FLOAT16)
        return ag_error_set(err, AG_E_FORMAT, "%s: tensor '%.*s' is %s, not a float tensor", label,
                            AG_PB_SPAN_ARG(t->name), type_name(t->data_type));
    if (t->count == 0)
        return AG_OK;
    if (t->has_raw || t->typed.ptr) {
        for (int64_t i = 0; i < t->count; i++)
            float_of(t, i, &out[i]);
        return AG_OK;
    }
    int64_t n = 0;
    if (t->data_type == AG_ONNX_FLOAT) {
        if (repeated_floats(t->msg, 4, out, t->count, &n) != 0 || n != t->count)
            return ag_error_set(err, AG_E_FORMAT, "%s: tensor '%.*s': malformed float_data", label,
                                AG_PB_SPAN_ARG(t->name));
        return AG_OK;
    }
    /* FLOAT16 in int32_data: one value per element, the half's bits. */
    int64_t *bits = ag_malloc((size_t)t->count * sizeof *bits);
    if (!bits)
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory", label);
    int rc = repeated_varints(t->msg, 5, bits, t->count, &n);
    if (rc == 0 && n == t->count)
        for (int64_t i = 0; i < t->count; i++)
            out[i] = ag_f16_to_f32((uint16_t)bits[i]);
    ag_free(bits);
    if (rc != 0 || n != t->count)
        return ag_error_set(err, AG_E_FORMAT, "%s: tensor '%.*s': malformed int32_data", label,
                            AG_PB_SPAN_ARG(t->name));
    return AG_OK;
}

int ag_onnx_tensor_ints(const ag_onnx_tensor *t, int64_t *out, int64_t max, const char *label,
                        ag_error *err) {
    if (t->data_type != AG_ONNX_INT64 && t->data_type != AG_ONNX_INT32)
        return ag_error_set(err, AG_E_FORMAT, "%s: tensor '%.*s' is %s, not an integer tensor",
                            label, AG_PB_SPAN_ARG(t->name), type_name(t->data_type));
    if (t->count > max)
        return ag_error_set(err, AG_E_LIMIT, "%s: tensor '%.*s' has %lld elements, at most %lld",
                            label, AG_PB_SPAN_ARG(t->name), (long long)t->count, (long long)max);
    if (t->has_raw) {
        for (int64_t i = 0; i < t->count; i++)
            out[i] = t->data_type == AG_ONNX_INT64
                         ? (int64_t)read_le(t->raw.ptr + 8 * i, 8)
                         : (int64_t)(int32_t)(uint32_t)read_le(t->raw.ptr + 4 * i, 4);
        return AG_OK;
    }
    int64_t n = 0;
    if (t->count > 0 &&
        (repeated_varints(t->msg, t->data_type == AG_ONNX_INT64 ? 7 : 5, out, max, &n) != 0 ||
         n != t->count))
        return ag_error_set(err, AG_E_FORMAT, "%s: tensor '%.*s': malformed integer data", label,
                            AG_PB_SPAN_ARG(t->name));
    if (t->data_type == AG_ONNX_INT32)
        for (int64_t i = 0; i < t->count; i++)
            out[i] = (int64_t)(int32_t)(uint32_t)out[i];
    return AG_OK;
}

/* ---- NodeProto, AttributeProto ---------------------------------------------------------- */

static int parse_attr(pb_ctx *c, ag_pb_span msg, ag_onnx_attr *a, const char *node_what) {
    char what[200];
    snprintf(what, sizeof what, "an attribute of %s", node_what);
    memset(a, 0, sizeof *a);
    a->msg = msg;
    a->tensor = -1;
    pb r = pb_of(msg);
    pb_field f;
    int rc;
    ag_pb_span tensor = {NULL, 0};
    bool has_tensor = false;
    while ((rc = pb_next(c, &r, &f, what)) == 1) {
        switch (f.num) {
        case 1:
            if ((rc = read_string(c, &f, &a->name, what)) != AG_OK)
                return rc;
            snprintf(what, sizeof what, "attribute '%.*s' of %s", AG_PB_SPAN_ARG(a->name),
                     node_what);
            break;
        case 20:
            if ((rc = expect_wire(c, &f, WIRE_VARINT, what)) != AG_OK)
                return rc;
            a->type = (int32_t)f.u;
            break;
        case 2:
            if ((rc = expect_wire(c, &f, WIRE_FIXED32, what)) != AG_OK)
                return rc;
            {
                uint32_t bits = (uint32_t)f.u;
                memcpy(&a->f, &bits, 4);
            }
            break;
        case 3:
            if ((rc = expect_wire(c, &f, WIRE_VARINT, what)) != AG_OK)
                return rc;
            a->i = (int64_t)f.u;
            break;
        case 4:
            if ((rc = expect_wire(c, &f, WIRE_BYTES, what)) != AG_OK)
                return rc;
            if (f.bytes.len > AG_ONNX_MAX_NAME_BYTES)
                return ag_error_set(c->err, AG_E_LIMIT, "%s: %s: string of %zu bytes", c->label,
                                    what, f.bytes.len);
            a->s = f.bytes;
            break;
        case 5:
            if ((rc = expect_wire(c, &f, WIRE_BYTES, what)) != AG_OK)
                return rc;
            tensor = f.bytes;
            has_tensor = true;
            break;
        default: break; /* graphs, strings, tensors...: the importer refuses their types */
        }
    }
    if (rc < 0)
        return rc;
    if (a->name.len == 0)
        return ag_error_set(c->err, AG_E_FORMAT, "%s: %s has no name", c->label, what);
    int64_t n = 0;
    if (a->type == AG_ONNX_ATTR_INTS && repeated_varints(msg, 8, NULL, 4096, &n) != 0)
        return ag_error_set(c->err, AG_E_FORMAT, "%s: %s: malformed or more than 4096 ints",
                            c->label, what);
    if (a->type == AG_ONNX_ATTR_FLOATS && repeated_floats(msg, 7, NULL, 4096, &n) != 0)
        return ag_error_set(c->err, AG_E_FORMAT, "%s: %s: malformed or more than 4096 floats",
                            c->label, what);
    a->count = (int)n;
    if (a->type == AG_ONNX_ATTR_TENSOR) {
        if (!has_tensor)
            return ag_error_set(c->err, AG_E_FORMAT, "%s: %s is a TENSOR without a tensor",
                                c->label, what);
        return add_tensor(c, tensor, false, what, &a->tensor);
    }
    return AG_OK;
}

/* Appends the names of repeated string field `num` of a node (1 inputs, 2 outputs). */
static int node_names(pb_ctx *c, ag_pb_span msg, uint32_t num, int *first, int *count,
                      const char *what) {
    ag_onnx_model *m = c->m;
    pb r = pb_of(msg);
    pb_field f;
    int rc;
    *first = m->name_count;
    *count = 0;
    while ((rc = pb_next(c, &r, &f, what)) == 1) {
        if (f.num != num)
            continue;
        if (*count >= AG_ONNX_MAX_NODE_IO)
            return ag_error_set(c->err, AG_E_LIMIT, "%s: %s has more than %d %s", c->label, what,
                                AG_ONNX_MAX_NODE_IO, num == 1 ? "inputs" : "outputs");
        if ((rc = grow(c, (void **)&m->names, m->name_count, AG_ONNX_MAX_NAMES, sizeof *m->names,
                       "node inputs and outputs")) != AG_OK)
            return rc;
        if ((rc = read_string(c, &f, &m->names[m->name_count], what)) != AG_OK)
            return rc;
        m->name_count++;
        (*count)++;
    }
    return rc;
}

static int parse_node(pb_ctx *c, ag_pb_span msg) {
    ag_onnx_model *m = c->m;
    char what[160];
    snprintf(what, sizeof what, "node %d", m->node_count);
    int rc =
        grow(c, (void **)&m->nodes, m->node_count, AG_ONNX_MAX_NODES, sizeof *m->nodes, "nodes");
    if (rc != AG_OK)
        return rc;
    ag_onnx_node *n = &m->nodes[m->node_count];
    memset(n, 0, sizeof *n);
    pb r = pb_of(msg);
    pb_field f;
    while ((rc = pb_next(c, &r, &f, what)) == 1) {
        ag_pb_span *field = f.num == 3   ? &n->name
                            : f.num == 4 ? &n->op_type
                            : f.num == 7 ? &n->domain
                                         : NULL;
        int sr = field ? read_string(c, &f, field, what) : AG_OK;
        if (sr != AG_OK)
            return sr;
    }
    if (rc < 0)
        return rc;
    if (n->name.len)
        snprintf(what, sizeof what, "node \"%.*s\"", AG_PB_SPAN_ARG(n->name));
    if (n->op_type.len == 0)
        return ag_error_set(c->err, AG_E_FORMAT, "%s: %s has no op_type", c->label, what);
    if ((rc = node_names(c, msg, 1, &n->input_first, &n->input_count, what)) < 0 ||
        (rc = node_names(c, msg, 2, &n->output_first, &n->output_count, what)) < 0)
        return rc;
    n->attr_first = m->attr_count;
    r = pb_of(msg);
    while ((rc = pb_next(c, &r, &f, what)) == 1) {
        if (f.num != 5)
            continue;
        if ((rc = expect_wire(c, &f, WIRE_BYTES, what)) != AG_OK)
            return rc;
        if (n->attr_count >= AG_ONNX_MAX_NODE_ATTRS)
            return ag_error_set(c->err, AG_E_LIMIT, "%s: %s has more than %d attributes", c->label,
                                what, AG_ONNX_MAX_NODE_ATTRS);
        if ((rc = grow(c, (void **)&m->attrs, m->attr_count, AG_ONNX_MAX_ATTRS, sizeof *m->attrs,
                       "attributes")) != AG_OK)
            return rc;
        /* Attribute tensors may grow m->tensors but not m->nodes: n stays valid. */
        if ((rc = parse_attr(c, f.bytes, &m->attrs[m->attr_count], what)) != AG_OK)
            return rc;
        m->attr_count++;
        n->attr_count++;
    }
    if (rc < 0)
        return rc;
    if (n->output_count == 0)
        return ag_error_set(c->err, AG_E_FORMAT, "%s: %s has no outputs", c->label, what);
    m->node_count++;
    return AG_OK;
}

/* ---- ValueInfoProto ---------------------------------------------------------------------- */

static int parse_shape(pb_ctx *c, ag_pb_span msg, ag_onnx_value_info *v, const char *what) {
    pb r = pb_of(msg);
    pb_field f;
    int rc;
    v->ndim = 0;
    while ((rc = pb_next(c, &r, &f, what)) == 1) {
        if (f.num != 1)
            continue;
        if ((rc = expect_wire(c, &f, WIRE_BYTES, what)) != AG_OK)
            return rc;
        if (v->ndim >= AG_ONNX_MAX_DIMS)
            return ag_error_set(c->err, AG_E_UNSUPPORTED, "%s: %s has more than %d dimensions",
                                c->label, what, AG_ONNX_MAX_DIMS);
        int64_t dim = -1;
        pb d = pb_of(f.bytes);
        pb_field g;
        while ((rc = pb_next(c, &d, &g, what)) == 1) {
            if (g.num == 1) {
                if ((rc = expect_wire(c, &g, WIRE_VARINT, what)) != AG_OK)
                    return rc;
                if ((int64_t)g.u < 0 || (int64_t)g.u > AG_ONNX_MAX_DIM)
                    return ag_error_set(c->err, AG_E_FORMAT, "%s: %s: dimension %lld", c->label,
                                        what, (long long)(int64_t)g.u);
                dim = (int64_t)g.u;
            }
        }
        if (rc < 0)
            return rc;
        v->dims[v->ndim++] = dim;
    }
    return rc;
}

static int parse_value_info(pb_ctx *c, ag_pb_span msg, ag_onnx_value_info *v, const char *kind) {
    char what[160];
    snprintf(what, sizeof what, "a graph %s", kind);
    memset(v, 0, sizeof *v);
    v->ndim = -1;
    pb r = pb_of(msg);
    pb_field f;
    int rc;
    ag_pb_span type = {NULL, 0};
    while ((rc = pb_next(c, &r, &f, what)) == 1) {
        if (f.num == 1) {
            if ((rc = read_string(c, &f, &v->name, what)) != AG_OK)
                return rc;
            snprintf(what, sizeof what, "graph %s '%.*s'", kind, AG_PB_SPAN_ARG(v->name));
        } else if (f.num == 2) {
            if ((rc = expect_wire(c, &f, WIRE_BYTES, what)) != AG_OK)
                return rc;
            type = f.bytes;
        }
    }
    if (rc < 0)
        return rc;
    /* TypeProto: tensor_type (1) -> elem_type (1), shape (2). */
    r = pb_of(type);
    while ((rc = pb_next(c, &r, &f, what)) == 1) {
        if (f.num != 1)
            continue;
        if ((rc = expect_wire(c, &f, WIRE_BYTES, what)) != AG_OK)
            return rc;
        pb t = pb_of(f.bytes);
        pb_field g;
        while ((rc = pb_next(c, &t, &g, what)) == 1) {
            if (g.num == 1) {
                if ((rc = expect_wire(c, &g, WIRE_VARINT, what)) != AG_OK)
                    return rc;
                v->elem_type = (int32_t)g.u;
            } else if (g.num == 2) {
                if ((rc = expect_wire(c, &g, WIRE_BYTES, what)) != AG_OK ||
                    (rc = parse_shape(c, g.bytes, v, what)) < 0)
                    return rc;
            }
        }
        if (rc < 0)
            return rc;
    }
    return rc;
}

/* ---- GraphProto, ModelProto ------------------------------------------------------------- */

static int parse_graph(pb_ctx *c, ag_pb_span msg) {
    ag_onnx_model *m = c->m;
    pb r = pb_of(msg);
    pb_field f;
    int rc, index;
    char where[64];
    while ((rc = pb_next(c, &r, &f, "the graph")) == 1) {
        if ((f.num == 1 || f.num == 5 || f.num == 11 || f.num == 12) &&
            (rc = expect_wire(c, &f, WIRE_BYTES, "the graph")) != AG_OK)
            return rc;
        switch (f.num) {
        case 1: rc = parse_node(c, f.bytes); break;
        case 5:
            snprintf(where, sizeof where, "initializer %d", m->initializer_count);
            rc = add_tensor(c, f.bytes, true, where, &index);
            break;
        case 15:
            return ag_error_set(c->err, AG_E_UNSUPPORTED,
                                "%s: sparse initializers are not supported", c->label);
        case 11:
        case 12: {
            bool input = f.num == 11;
            int *count = input ? &m->input_count : &m->output_count;
            if (*count >= AG_ONNX_MAX_GRAPH_IO)
                return ag_error_set(c->err, AG_E_LIMIT, "%s: more than %d graph %s", c->label,
                                    AG_ONNX_MAX_GRAPH_IO, input ? "inputs" : "outputs");
            ag_onnx_value_info *v = input ? &m->inputs[*count] : &m->outputs[*count];
            rc = parse_value_info(c, f.bytes, v, input ? "input" : "output");
            (*count)++;
            break;
        }
        default: rc = AG_OK; break;
        }
        if (rc < 0)
            return rc;
    }
    return rc;
}

static int parse_opset(pb_ctx *c, ag_pb_span msg) {
    pb r = pb_of(msg);
    pb_field f;
    int rc;
    ag_pb_span domain = {NULL, 0};
    int64_t version = 0;
    while ((rc = pb_next(c, &r, &f, "an opset_import")) == 1) {
        if (f.num == 1 && (rc = read_string(c, &f, &domain, "an opset_import")) != AG_OK)
            return rc;
        if (f.num == 2) {
            if ((rc = expect_wire(c, &f, WIRE_VARINT, "an opset_import")) != AG_OK)
                return rc;
            version = (int64_t)f.u;
        }
    }
    if (rc < 0)
        return rc;
    if (domain.len == 0 || ag_pb_span_eq(domain, "ai.onnx"))
        c->m->opset = version;
    return AG_OK;
}

int ag_onnx_pb_parse(const uint8_t *data, size_t size, const char *label, ag_onnx_model *out,
                     ag_error *err) {
    pb_ctx c = {.label = label, .err = err, .file_bytes = size, .m = out};
    memset(out, 0, sizeof *out);
    if (size == 0 || !data)
        return ag_error_set(err, AG_E_FORMAT, "%s: empty file", label);
    pb r = {data, data + size};
    pb_field f;
    int rc;
    ag_pb_span graph = {NULL, 0};
    int graphs = 0;
    while ((rc = pb_next(&c, &r, &f, "the ModelProto")) == 1) {
        switch (f.num) {
        case 1:
            if ((rc = expect_wire(&c, &f, WIRE_VARINT, "the ModelProto")) != AG_OK)
                goto fail;
            out->ir_version = (int64_t)f.u;
            break;
        case 2:
            if ((rc = read_string(&c, &f, &out->producer, "the ModelProto")) != AG_OK)
                goto fail;
            break;
        case 7:
            if ((rc = expect_wire(&c, &f, WIRE_BYTES, "the ModelProto")) != AG_OK)
                goto fail;
            graph = f.bytes;
            graphs++;
            break;
        case 8:
            if ((rc = expect_wire(&c, &f, WIRE_BYTES, "the ModelProto")) != AG_OK ||
                (rc = parse_opset(&c, f.bytes)) != AG_OK)
                goto fail;
            break;
        default: break;
        }
    }
    if (rc < 0)
        goto fail;
    if (graphs != 1) {
        rc = ag_error_set(err, AG_E_FORMAT, "%s: %s", label,
                          graphs ? "two graphs in one ModelProto"
                                 : "not an ONNX model (no graph in the ModelProto)");
        goto fail;
    }
    if (out->ir_version < 3 || out->ir_version > 100) {
        rc = ag_error_set(err, AG_E_FORMAT, "%s: not an ONNX model (ir_version %lld)", label,
                          (long long)out->ir_version);
        goto fail;
    }
    if ((rc = parse_graph(&c, graph)) < 0)
        goto fail;
    if (out->node_count == 0 || out->output_count == 0 || out->input_count == 0) {
        rc = ag_error_set(err, AG_E_FORMAT, "%s: the graph has no %s", label,
                          out->node_count == 0    ? "nodes"
                          : out->input_count == 0 ? "inputs"
                                                  : "outputs");
        goto fail;
    }
    return AG_OK;
fail:
    ag_onnx_model_fini(out);
    return rc;
}

void ag_onnx_model_fini(ag_onnx_model *model) {
    if (!model)
        return;
    ag_free(model->nodes);
    ag_free(model->names);
    ag_free(model->attrs);
    ag_free(model->tensors);
    memset(model, 0, sizeof *model);
}
