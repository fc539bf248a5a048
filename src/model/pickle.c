/*
 * pickle.c - the pickle reader behind pytorch.c: a stack machine over the opcodes torch.save
 * emits for a state_dict (protocols 2 to 5), building an object graph of ag_pkl_obj. It
 * executes nothing: known callables become plain objects, others are refused. See
 * pickle_internal.h for the bounds.
 */
#include "pickle_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* A state_dict of a few hundred tensors needs a few thousand objects and stack slots; these
 * bounds are far above any real checkpoint's pickle and far below trouble. */
#define AG_PKL_MAX_OBJECTS (1 << 20)
#define AG_PKL_MAX_STACK (1 << 20)
#define AG_PKL_MAX_MARKS (1 << 16)
#define AG_PKL_MAX_MEMO (1 << 20)
#define AG_PKL_MAX_ITEMS (1 << 20) /* per tuple, list or dict */
#define AG_PKL_MAX_BYTES ((size_t)64 << 20)
#define AG_PKL_MAX_LINE 256 /* a GLOBAL's module or name */

/* The objects every pickle may use, created first so they cost no allocation later. */
enum { OBJ_NONE = 0, OBJ_FALSE, OBJ_TRUE, OBJ_EMPTY_TUPLE, OBJ_FIRST_FREE };

enum {
    OP_MARK = '(',
    OP_STOP = '.',
    OP_POP = '0',
    OP_POP_MARK = '1',
    OP_DUP = '2',
    OP_BINBYTES = 'B',
    OP_SHORT_BINBYTES = 'C',
    OP_BINFLOAT = 'G',
    OP_BININT = 'J',
    OP_BININT1 = 'K',
    OP_BININT2 = 'M',
    OP_NONE = 'N',
    OP_BINPERSID = 'Q',
    OP_REDUCE = 'R',
    OP_BINSTRING = 'T',
    OP_SHORT_BINSTRING = 'U',
    OP_BINUNICODE = 'X',
    OP_EMPTY_LIST = ']',
    OP_APPEND = 'a',
    OP_BUILD = 'b',
    OP_GLOBAL = 'c',
    OP_APPENDS = 'e',
    OP_BINGET = 'h',
    OP_LONG_BINGET = 'j',
    OP_BINPUT = 'q',
    OP_LONG_BINPUT = 'r',
    OP_SETITEM = 's',
    OP_TUPLE = 't',
    OP_SETITEMS = 'u',
    OP_EMPTY_DICT = '}',
    OP_EMPTY_TUPLE = ')',
    OP_PROTO = 0x80,
    OP_NEWOBJ = 0x81,
    OP_TUPLE1 = 0x85,
    OP_TUPLE2 = 0x86,
    OP_TUPLE3 = 0x87,
    OP_NEWTRUE = 0x88,
    OP_NEWFALSE = 0x89,
    OP_LONG1 = 0x8a,
    OP_LONG4 = 0x8b,
    OP_SHORT_BINUNICODE = 0x8c,
    OP_BINUNICODE8 = 0x8d,
    OP_BINBYTES8 = 0x8e,
    OP_STACK_GLOBAL = 0x93,
    OP_MEMOIZE = 0x94,
    OP_FRAME = 0x95,
};

typedef struct reader {
    ag_pkl *vm;
    const uint8_t *data;
    size_t size, pos;
    size_t op_pos; /* offset of the opcode being run, for messages */
    uint8_t op;
    const char *label;
    ag_error *err;
} reader;

__attribute__((format(printf, 3, 4))) static int fail(reader *r, int code, const char *fmt, ...) {
    char reason[AG_ERROR_MESSAGE_BYTES];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    return ag_error_set(r->err, code, "%s: %s (pickle opcode 0x%02x at offset %zu)", r->label,
                        reason, r->op, r->op_pos);
}

/* Make room for element `count` of an array, within `max` elements and the memory budget. */
static int grow(reader *r, void **array, int32_t count, int32_t *capacity, size_t elem_bytes,
                int32_t max, const char *what) {
    if (count < *capacity)
        return AG_OK;
    if (count >= max)
        return fail(r, AG_E_LIMIT, "more than %d %s", (int)max, what);
    int32_t wanted = *capacity < 8 ? 8 : (*capacity > max / 2 ? max : *capacity * 2);
    size_t added = (size_t)(wanted - *capacity) * elem_bytes;
    if (added > AG_PKL_MAX_BYTES - r->vm->bytes)
        return fail(r, AG_E_LIMIT, "needs more than %zu bytes of memory", AG_PKL_MAX_BYTES);
    void *grown = ag_realloc(*array, (size_t)wanted * elem_bytes);
    if (!grown)
        return fail(r, AG_E_NOMEM, "out of memory");
    r->vm->bytes += added;
    *array = grown;
    *capacity = wanted;
    return AG_OK;
}

static int new_obj(reader *r, ag_pkl_type type, int32_t *index) {
    ag_pkl *vm = r->vm;
    int rc = grow(r, (void **)&vm->objs, vm->obj_count, &vm->obj_capacity, sizeof *vm->objs,
                  AG_PKL_MAX_OBJECTS, "objects");
    if (rc != AG_OK)
        return rc;
    *index = vm->obj_count++;
    memset(&vm->objs[*index], 0, sizeof vm->objs[*index]);
    vm->objs[*index].type = (uint8_t)type;
    return AG_OK;
}

static int seq_append(reader *r, int32_t container, int32_t item) {
    ag_pkl_obj *obj = &r->vm->objs[container];
    int rc = grow(r, (void **)&obj->seq.items, obj->seq.count, &obj->seq.capacity,
                  sizeof *obj->seq.items, AG_PKL_MAX_ITEMS, "items in one container");
    if (rc == AG_OK)
        obj->seq.items[obj->seq.count++] = item;
    return rc;
}

/* ---- the stack ------------------------------------------------------------------------- */

/* Items below the innermost MARK belong to an outer frame: no opcode may pop them. */
static int32_t fence(const reader *r) {
    return r->vm->mark_count ? r->vm->marks[r->vm->mark_count - 1] : 0;
}

static int push(reader *r, int32_t index) {
    ag_pkl *vm = r->vm;
    int rc = grow(r, (void **)&vm->stack, vm->stack_count, &vm->stack_capacity, sizeof *vm->stack,
                  AG_PKL_MAX_STACK, "stack entries");
    if (rc == AG_OK)
        vm->stack[vm->stack_count++] = index;
    return rc;
}

static int need_items(reader *r, int32_t n) {
    if (r->vm->stack_count - fence(r) < n)
        return fail(r, AG_E_FORMAT, "stack underflow");
    return AG_OK;
}

static int pop(reader *r, int32_t *index) {
    int rc = need_items(r, 1);
    if (rc == AG_OK)
        *index = r->vm->stack[--r->vm->stack_count];
    return rc;
}

static int top(reader *r, int32_t *index) {
    int rc = need_items(r, 1);
    if (rc == AG_OK)
        *index = r->vm->stack[r->vm->stack_count - 1];
    return rc;
}

static int push_mark(reader *r) {
    ag_pkl *vm = r->vm;
    int rc = grow(r, (void **)&vm->marks, vm->mark_count, &vm->mark_capacity, sizeof *vm->marks,
                  AG_PKL_MAX_MARKS, "open MARKs");
    if (rc == AG_OK)
        vm->marks[vm->mark_count++] = vm->stack_count;
    return rc;
}

static int pop_mark(reader *r, int32_t *begin) {
    if (r->vm->mark_count == 0)
        return fail(r, AG_E_FORMAT, "no MARK to close");
    *begin = r->vm->marks[--r->vm->mark_count];
    return AG_OK;
}

/* ---- reading operands ------------------------------------------------------------------ */

static int take(reader *r, size_t n, const uint8_t **out) {
    if (r->size - r->pos < n)
        return fail(r, AG_E_FORMAT, "truncated: operand of %zu bytes, %zu left", n,
                    r->size - r->pos);
    *out = r->data + r->pos;
    r->pos += n;
    return AG_OK;
}

static uint64_t read_le(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = n; i > 0; i--)
        v = (v << 8) | p[i - 1];
    return v;
}

static int take_le(reader *r, size_t n, uint64_t *value) {
    const uint8_t *p = NULL;
    int rc = take(r, n, &p);
    if (rc == AG_OK)
        *value = read_le(p, n);
    return rc;
}

/* A '\n'-terminated line of GLOBAL, without the newline. */
static int take_line(reader *r, const char **line, size_t *len) {
    size_t left = r->size - r->pos;
    const uint8_t *start = r->data + r->pos;
    const uint8_t *nl = memchr(start, '\n', left < AG_PKL_MAX_LINE ? left : AG_PKL_MAX_LINE);
    if (!nl)
        return fail(r, AG_E_FORMAT, "GLOBAL name not terminated within %d bytes", AG_PKL_MAX_LINE);
    *line = (const char *)start;
    *len = (size_t)(nl - start);
    r->pos += *len + 1;
    return AG_OK;
}

/* ---- values ---------------------------------------------------------------------------- */

static int push_int(reader *r, int64_t value) {
    int32_t index = 0;
    int rc = new_obj(r, AG_PKL_INT, &index);
    if (rc != AG_OK)
        return rc;
    r->vm->objs[index].i = value;
    return push(r, index);
}

static int push_bytes(reader *r, ag_pkl_type type, const uint8_t *ptr, size_t len) {
    int32_t index = 0;
    int rc = new_obj(r, type, &index);
    if (rc != AG_OK)
        return rc;
    r->vm->objs[index].str.ptr = (const char *)ptr;
    r->vm->objs[index].str.len = len;
    return push(r, index);
}

/* BINSTRING, BINUNICODE, BINBYTES and kin: a length of `len_bytes` bytes, then the bytes. */
static int op_string(reader *r, ag_pkl_type type, size_t len_bytes, bool is_signed) {
    uint64_t n = 0;
    const uint8_t *p = NULL;
    int rc = take_le(r, len_bytes, &n);
    if (rc != AG_OK)
        return rc;
    if (is_signed && (n & 0x80000000u))
        return fail(r, AG_E_FORMAT, "negative string length");
    if (n > r->size - r->pos)
        return fail(r, AG_E_FORMAT, "truncated: string of %llu bytes, %zu left",
                    (unsigned long long)n, r->size - r->pos);
    rc = take(r, (size_t)n, &p);
    return rc != AG_OK ? rc : push_bytes(r, type, p, (size_t)n);
}

/* LONG1 / LONG4: little-endian two's complement of n bytes. */
static int op_long(reader *r, size_t len_bytes) {
    uint64_t n = 0;
    const uint8_t *p = NULL;
    int rc = take_le(r, len_bytes, &n);
    if (rc != AG_OK)
        return rc;
    if (len_bytes == 4 && (n & 0x80000000u))
        return fail(r, AG_E_FORMAT, "negative LONG4 length");
    if (n > r->size - r->pos)
        return fail(r, AG_E_FORMAT, "truncated: integer of %llu bytes, %zu left",
                    (unsigned long long)n, r->size - r->pos);
    rc = take(r, (size_t)n, &p);
    if (rc != AG_OK)
        return rc;
    if (n > 8)
        return push_bytes(r, AG_PKL_BIGINT, p, (size_t)n);
    uint64_t v = read_le(p, (size_t)n);
    if (n > 0 && n < 8 && (p[n - 1] & 0x80))
        v |= ~(uint64_t)0 << (8 * n);
    return push_int(r, (int64_t)v);
}

static int op_binfloat(reader *r) {
    const uint8_t *p = NULL;
    int rc = take(r, 8, &p);
    if (rc != AG_OK)
        return rc;
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++)
        bits = (bits << 8) | p[i]; /* big-endian, unlike every other operand */
    int32_t index = 0;
    rc = new_obj(r, AG_PKL_FLOAT, &index);
    if (rc != AG_OK)
        return rc;
    memcpy(&r->vm->objs[index].f, &bits, sizeof bits);
    return push(r, index);
}

/* ---- globals and calls ----------------------------------------------------------------- */

static void classify_global(ag_pkl_obj *global, const ag_pkl_obj *module, const ag_pkl_obj *name) {
    static const struct {
        const char *module, *name;
        ag_pkl_global kind;
        ag_dtype dtype;
    } known[] = {
        {"collections", "OrderedDict", AG_PKL_G_ORDERED_DICT, AG_DTYPE_F32},
        {"torch._utils", "_rebuild_tensor_v2", AG_PKL_G_REBUILD_TENSOR, AG_DTYPE_F32},
        {"torch._utils", "_rebuild_parameter", AG_PKL_G_REBUILD_PARAMETER, AG_DTYPE_F32},
        {"torch._utils", "_rebuild_parameter_with_state", AG_PKL_G_REBUILD_PARAMETER, AG_DTYPE_F32},
        {"torch", "FloatStorage", AG_PKL_G_DTYPE, AG_DTYPE_F32},
        {"torch", "HalfStorage", AG_PKL_G_DTYPE, AG_DTYPE_F16},
        {"torch", "BFloat16Storage", AG_PKL_G_DTYPE, AG_DTYPE_BF16},
        {"torch", "DoubleStorage", AG_PKL_G_DTYPE, AG_DTYPE_F64},
        {"torch", "CharStorage", AG_PKL_G_DTYPE, AG_DTYPE_I8},
        {"torch", "float32", AG_PKL_G_DTYPE, AG_DTYPE_F32},
        {"torch", "float16", AG_PKL_G_DTYPE, AG_DTYPE_F16},
        {"torch", "bfloat16", AG_PKL_G_DTYPE, AG_DTYPE_BF16},
        {"torch", "float64", AG_PKL_G_DTYPE, AG_DTYPE_F64},
        {"torch", "int8", AG_PKL_G_DTYPE, AG_DTYPE_I8},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (ag_pkl_str_eq(module, known[i].module) && ag_pkl_str_eq(name, known[i].name)) {
            global->global.kind = (uint8_t)known[i].kind;
            global->global.dtype = (uint8_t)known[i].dtype;
            return;
        }
    }
}

static int push_global(reader *r, int32_t module, int32_t name) {
    int32_t index = 0;
    int rc = new_obj(r, AG_PKL_GLOBAL, &index);
    if (rc != AG_OK)
        return rc;
    ag_pkl_obj *obj = &r->vm->objs[index];
    obj->global.module = module;
    obj->global.name = name;
    classify_global(obj, &r->vm->objs[module], &r->vm->objs[name]);
    return push(r, index);
}

/* STACK_GLOBAL: module and name strings from the stack. */
static int op_stack_global(reader *r) {
    int32_t module = 0, name = 0;
    int rc = pop(r, &name);
    if (rc == AG_OK)
        rc = pop(r, &module);
    if (rc != AG_OK)
        return rc;
    if (r->vm->objs[module].type != AG_PKL_STR || r->vm->objs[name].type != AG_PKL_STR)
        return fail(r, AG_E_FORMAT, "STACK_GLOBAL needs two strings");
    return push_global(r, module, name);
}

/* GLOBAL: the same with the two names as '\n'-terminated operands. */
static int op_global(reader *r) {
    const char *module = NULL, *name = NULL;
    size_t module_len = 0, name_len = 0;
    int rc = take_line(r, &module, &module_len);
    if (rc == AG_OK)
        rc = take_line(r, &name, &name_len);
    if (rc == AG_OK)
        rc = push_bytes(r, AG_PKL_STR, (const uint8_t *)module, module_len);
    if (rc == AG_OK)
        rc = push_bytes(r, AG_PKL_STR, (const uint8_t *)name, name_len);
    return rc == AG_OK ? op_stack_global(r) : rc;
}

/* Calling anything but the known callables would mean running code the file chose. */
static int refuse_call(reader *r, const ag_pkl_obj *callable) {
    const ag_pkl_obj *module = &r->vm->objs[callable->global.module];
    const ag_pkl_obj *name = &r->vm->objs[callable->global.name];
    int module_len = module->str.len > 80 ? 80 : (int)module->str.len;
    int name_len = name->str.len > 80 ? 80 : (int)name->str.len;
    return ag_error_set(r->err, AG_E_UNSUPPORTED,
                        "%s: holds a pickled object of class '%.*s.%.*s', not a state_dict; "
                        "save model.state_dict() instead",
                        r->label, module_len, module->str.ptr, name_len, name->str.ptr);
}

/* Legacy torch.save(model) pickles each nn.Module class as the persistent id
 * ('module', class, source_file, source). */
static int refuse_persistent_call(reader *r, const ag_pkl_obj *fn) {
    const ag_pkl_obj *pid = &r->vm->objs[fn->ref];
    if (pid->type == AG_PKL_TUPLE && pid->seq.count >= 2) {
        const ag_pkl_obj *cls = &r->vm->objs[pid->seq.items[1]];
        if (cls->type == AG_PKL_GLOBAL)
            return refuse_call(r, cls);
    }
    return ag_error_set(r->err, AG_E_UNSUPPORTED,
                        "%s: creates an object from a persistent id, not a state_dict; save "
                        "model.state_dict() instead",
                        r->label);
}

/* REDUCE and NEWOBJ: callable(*args), for the callables a state_dict uses. */
static int op_call(reader *r) {
    int32_t args = 0, callable = 0;
    int rc = pop(r, &args);
    if (rc == AG_OK)
        rc = pop(r, &callable);
    if (rc != AG_OK)
        return rc;
    const ag_pkl_obj *fn = &r->vm->objs[callable];
    const ag_pkl_obj *tuple = &r->vm->objs[args];
    if (fn->type == AG_PKL_PERSID)
        return refuse_persistent_call(r, fn);
    if (fn->type != AG_PKL_GLOBAL)
        return fail(r, AG_E_FORMAT, "calls a Python %s", ag_pkl_type_name(fn));
    if (tuple->type != AG_PKL_TUPLE)
        return fail(r, AG_E_FORMAT, "call arguments are a Python %s, not a tuple",
                    ag_pkl_type_name(tuple));
    int32_t result = 0;
    int32_t argc = tuple->seq.count;
    switch ((ag_pkl_global)fn->global.kind) {
    case AG_PKL_G_ORDERED_DICT:
        if (argc != 0)
            return fail(r, AG_E_FORMAT, "OrderedDict called with arguments");
        rc = new_obj(r, AG_PKL_DICT, &result);
        break;
    case AG_PKL_G_REBUILD_TENSOR:
        if (r->op != OP_REDUCE || argc < 6 || argc > 7)
            return fail(r, AG_E_FORMAT, "_rebuild_tensor_v2 called with %d arguments", argc);
        rc = new_obj(r, AG_PKL_TENSOR, &result);
        if (rc == AG_OK)
            r->vm->objs[result].ref = args;
        break;
    case AG_PKL_G_REBUILD_PARAMETER:
        /* A Parameter is its data tensor plus flags we do not need. */
        if (argc < 1 || r->vm->objs[tuple->seq.items[0]].type != AG_PKL_TENSOR)
            return fail(r, AG_E_FORMAT, "_rebuild_parameter called without a tensor");
        result = tuple->seq.items[0];
        break;
    default: return refuse_call(r, fn);
    }
    return rc == AG_OK ? push(r, result) : rc;
}

/* BUILD sets an object's state: a state_dict's `_metadata`, which we do not need. */
static int op_build(reader *r) {
    int32_t state = 0, target = 0;
    int rc = pop(r, &state);
    if (rc == AG_OK)
        rc = top(r, &target);
    if (rc != AG_OK)
        return rc;
    uint8_t type = r->vm->objs[target].type;
    if (type != AG_PKL_DICT && type != AG_PKL_TENSOR)
        return fail(r, AG_E_FORMAT, "BUILD on a Python %s", ag_pkl_type_name(&r->vm->objs[target]));
    return AG_OK;
}

static int op_persid(reader *r) {
    int32_t pid = 0, index = 0;
    int rc = pop(r, &pid);
    if (rc == AG_OK)
        rc = new_obj(r, AG_PKL_PERSID, &index);
    if (rc != AG_OK)
        return rc;
    r->vm->objs[index].ref = pid;
    return push(r, index);
}

/* ---- containers ------------------------------------------------------------------------ */

/* A tuple of the stack items from `begin` up, which are popped. */
static int push_tuple(reader *r, int32_t begin) {
    int32_t index = 0;
    int rc = new_obj(r, AG_PKL_TUPLE, &index);
    for (int32_t i = begin; rc == AG_OK && i < r->vm->stack_count; i++)
        rc = seq_append(r, index, r->vm->stack[i]);
    if (rc != AG_OK)
        return rc;
    r->vm->stack_count = begin;
    return push(r, index);
}

static int op_tuple_n(reader *r, int32_t n) {
    int rc = need_items(r, n);
    return rc == AG_OK ? push_tuple(r, r->vm->stack_count - n) : rc;
}

static int op_tuple_mark(reader *r) {
    int32_t begin = 0;
    int rc = pop_mark(r, &begin);
    return rc == AG_OK ? push_tuple(r, begin) : rc;
}

static int push_empty(reader *r, ag_pkl_type type) {
    int32_t index = 0;
    int rc = new_obj(r, type, &index);
    return rc == AG_OK ? push(r, index) : rc;
}

/* Moves the stack items from `begin` up into the list or dict just below them. */
static int extend_below(reader *r, int32_t begin, ag_pkl_type type) {
    if (begin - 1 < fence(r))
        return fail(r, AG_E_FORMAT, "stack underflow");
    int32_t container = r->vm->stack[begin - 1];
    if (r->vm->objs[container].type != type)
        return fail(r, AG_E_FORMAT, "adds items to a Python %s",
                    ag_pkl_type_name(&r->vm->objs[container]));
    if (type == AG_PKL_DICT && (r->vm->stack_count - begin) % 2 != 0)
        return fail(r, AG_E_FORMAT, "SETITEMS with an odd number of items");
    int rc = AG_OK;
    for (int32_t i = begin; rc == AG_OK && i < r->vm->stack_count; i++)
        rc = seq_append(r, container, r->vm->stack[i]);
    r->vm->stack_count = begin;
    return rc;
}

/* APPEND / SETITEM: the last one or two items. */
static int op_add(reader *r, ag_pkl_type type) {
    int32_t n = type == AG_PKL_DICT ? 2 : 1;
    int rc = need_items(r, n);
    return rc == AG_OK ? extend_below(r, r->vm->stack_count - n, type) : rc;
}

/* APPENDS / SETITEMS: everything above the MARK. */
static int op_add_mark(reader *r, ag_pkl_type type) {
    int32_t begin = 0;
    int rc = pop_mark(r, &begin);
    return rc == AG_OK ? extend_below(r, begin, type) : rc;
}

/* POP: outside a MARK frame Python pops the MARK itself. */
static int op_pop(reader *r) {
    int32_t begin = 0;
    if (r->vm->stack_count > fence(r)) {
        r->vm->stack_count--;
        return AG_OK;
    }
    return pop_mark(r, &begin);
}

static int op_pop_mark(reader *r) {
    int32_t begin = 0;
    int rc = pop_mark(r, &begin);
    if (rc == AG_OK)
        r->vm->stack_count = begin;
    return rc;
}

static int op_dup(reader *r) {
    int32_t index = 0;
    int rc = top(r, &index);
    return rc == AG_OK ? push(r, index) : rc;
}

/* ---- the memo -------------------------------------------------------------------------- */

/* Memo keys are normally 0, 1, 2, ...; a sparse key grows the array up to it. */
static int memo_reserve(reader *r, uint64_t key) {
    ag_pkl *vm = r->vm;
    if (key >= AG_PKL_MAX_MEMO)
        return fail(r, AG_E_LIMIT, "memo key %llu above the limit of %d", (unsigned long long)key,
                    AG_PKL_MAX_MEMO);
    if (key < (uint64_t)vm->memo_size)
        return AG_OK;
    int32_t size = vm->memo_size < 32 ? 64 : vm->memo_size * 2;
    if ((uint64_t)size <= key)
        size = (int32_t)key + 1;
    if (size > AG_PKL_MAX_MEMO)
        size = AG_PKL_MAX_MEMO;
    size_t added = (size_t)(size - vm->memo_size) * sizeof *vm->memo;
    if (added > AG_PKL_MAX_BYTES - vm->bytes)
        return fail(r, AG_E_LIMIT, "needs more than %zu bytes of memory", AG_PKL_MAX_BYTES);
    int32_t *grown = ag_realloc(vm->memo, (size_t)size * sizeof *vm->memo);
    if (!grown)
        return fail(r, AG_E_NOMEM, "out of memory");
    for (int32_t i = vm->memo_size; i < size; i++)
        grown[i] = -1;
    vm->memo = grown;
    vm->memo_size = size;
    vm->bytes += added;
    return AG_OK;
}

static int memo_put(reader *r, uint64_t key) {
    int32_t index = 0;
    int rc = top(r, &index);
    if (rc == AG_OK)
        rc = memo_reserve(r, key);
    if (rc != AG_OK)
        return rc;
    if (r->vm->memo[key] < 0)
        r->vm->memo_entries++;
    r->vm->memo[key] = index;
    return AG_OK;
}

static int memo_get(reader *r, uint64_t key) {
    if (key >= (uint64_t)r->vm->memo_size || r->vm->memo[key] < 0)
        return fail(r, AG_E_FORMAT, "memo key %llu was never stored", (unsigned long long)key);
    return push(r, r->vm->memo[key]);
}

static int op_memo(reader *r, size_t key_bytes, bool put) {
    uint64_t key = 0;
    int rc = take_le(r, key_bytes, &key);
    if (rc != AG_OK)
        return rc;
    return put ? memo_put(r, key) : memo_get(r, key);
}

/* ---- the machine ----------------------------------------------------------------------- */

static int op_proto(reader *r) {
    uint64_t version = 0;
    int rc = take_le(r, 1, &version);
    if (rc == AG_OK && version > 5)
        return fail(r, AG_E_UNSUPPORTED, "pickle protocol %llu (at most 5 is known)",
                    (unsigned long long)version);
    return rc;
}

/* FRAME only announces how many bytes follow; the reader does not need it. */
static int op_frame(reader *r) {
    uint64_t frame_bytes = 0;
    return take_le(r, 8, &frame_bytes);
}

static int step(reader *r) {
    uint64_t v = 0;
    int rc;
    switch (r->op) {
    case OP_PROTO: return op_proto(r);
    case OP_FRAME: return op_frame(r);
    case OP_MARK: return push_mark(r);
    case OP_POP: return op_pop(r);
    case OP_POP_MARK: return op_pop_mark(r);
    case OP_DUP: return op_dup(r);
    case OP_NONE: return push(r, OBJ_NONE);
    case OP_NEWTRUE: return push(r, OBJ_TRUE);
    case OP_NEWFALSE: return push(r, OBJ_FALSE);
    case OP_BININT:
        rc = take_le(r, 4, &v);
        return rc == AG_OK ? push_int(r, (int32_t)(uint32_t)v) : rc;
    case OP_BININT1: rc = take_le(r, 1, &v); return rc == AG_OK ? push_int(r, (int64_t)v) : rc;
    case OP_BININT2: rc = take_le(r, 2, &v); return rc == AG_OK ? push_int(r, (int64_t)v) : rc;
    case OP_LONG1: return op_long(r, 1);
    case OP_LONG4: return op_long(r, 4);
    case OP_BINFLOAT: return op_binfloat(r);
    case OP_SHORT_BINUNICODE: return op_string(r, AG_PKL_STR, 1, false);
    case OP_BINUNICODE: return op_string(r, AG_PKL_STR, 4, false);
    case OP_BINUNICODE8: return op_string(r, AG_PKL_STR, 8, false);
    case OP_SHORT_BINSTRING: return op_string(r, AG_PKL_STR, 1, false);
    case OP_BINSTRING: return op_string(r, AG_PKL_STR, 4, true);
    case OP_SHORT_BINBYTES: return op_string(r, AG_PKL_BYTES, 1, false);
    case OP_BINBYTES: return op_string(r, AG_PKL_BYTES, 4, false);
    case OP_BINBYTES8: return op_string(r, AG_PKL_BYTES, 8, false);
    case OP_EMPTY_TUPLE: return push(r, OBJ_EMPTY_TUPLE);
    case OP_TUPLE: return op_tuple_mark(r);
    case OP_TUPLE1: return op_tuple_n(r, 1);
    case OP_TUPLE2: return op_tuple_n(r, 2);
    case OP_TUPLE3: return op_tuple_n(r, 3);
    case OP_EMPTY_LIST: return push_empty(r, AG_PKL_LIST);
    case OP_APPEND: return op_add(r, AG_PKL_LIST);
    case OP_APPENDS: return op_add_mark(r, AG_PKL_LIST);
    case OP_EMPTY_DICT: return push_empty(r, AG_PKL_DICT);
    case OP_SETITEM: return op_add(r, AG_PKL_DICT);
    case OP_SETITEMS: return op_add_mark(r, AG_PKL_DICT);
    case OP_GLOBAL: return op_global(r);
    case OP_STACK_GLOBAL: return op_stack_global(r);
    case OP_REDUCE: return op_call(r);
    case OP_NEWOBJ: return op_call(r);
    case OP_BUILD: return op_build(r);
    case OP_BINPERSID: return op_persid(r);
    case OP_BINPUT: return op_memo(r, 1, true);
    case OP_LONG_BINPUT: return op_memo(r, 4, true);
    case OP_MEMOIZE: return memo_put(r, (uint64_t)r->vm->memo_entries);
    case OP_BINGET: return op_memo(r, 1, false);
    case OP_LONG_BINGET: return op_memo(r, 4, false);
    default: return fail(r, AG_E_FORMAT, "unknown or unsupported pickle opcode");
    }
}

static int create_constants(reader *r) {
    static const ag_pkl_type types[OBJ_FIRST_FREE] = {AG_PKL_NONE, AG_PKL_BOOL, AG_PKL_BOOL,
                                                      AG_PKL_TUPLE};
    for (int i = 0; i < OBJ_FIRST_FREE; i++) {
        int32_t index = 0;
        int rc = new_obj(r, types[i], &index);
        if (rc != AG_OK)
            return rc;
    }
    r->vm->objs[OBJ_TRUE].i = 1;
    return AG_OK;
}

int ag_pkl_load(ag_pkl *vm, const uint8_t *data, size_t size, const char *label, int32_t *root,
                size_t *end, ag_error *err) {
    reader r = {.vm = vm, .data = data, .size = size, .label = label, .err = err};
    int rc = create_constants(&r);
    while (rc == AG_OK && r.pos < r.size) {
        r.op_pos = r.pos;
        r.op = data[r.pos++];
        if (r.op == OP_STOP) {
            rc = pop(&r, root);
            if (rc == AG_OK)
                *end = r.pos;
            return rc;
        }
        rc = step(&r);
    }
    if (rc == AG_OK)
        rc = ag_error_set(err, AG_E_FORMAT,
                          "%s: pickle ends at offset %zu without STOP "
                          "(truncated?)",
                          label, size);
    return rc;
}

void ag_pkl_fini(ag_pkl *vm) {
    if (!vm)
        return;
    for (int32_t i = 0; i < vm->obj_count; i++) {
        uint8_t type = vm->objs[i].type;
        if (type == AG_PKL_TUPLE || type == AG_PKL_LIST || type == AG_PKL_DICT)
            ag_free(vm->objs[i].seq.items);
    }
    ag_free(vm->objs);
    ag_free(vm->stack);
    ag_free(vm->marks);
    ag_free(vm->memo);
    memset(vm, 0, sizeof *vm);
}

const char *ag_pkl_type_name(const ag_pkl_obj *obj) {
    static const char *const names[] = {"None",  "bool",          "int",   "int",  "float",
                                        "str",   "bytes",         "tuple", "list", "dict",
                                        "class", "persistent id", "tensor"};
    return obj->type < sizeof names / sizeof names[0] ? names[obj->type] : "?";
}

bool ag_pkl_str_eq(const ag_pkl_obj *obj, const char *text) {
    size_t len = strlen(text);
    return obj->type == AG_PKL_STR && obj->str.len == len && memcmp(obj->str.ptr, text, len) == 0;
}
