/*
 * pickle_internal.h - a bounded, non-executing reader of the Python pickle subset that
 * torch.save writes for a state_dict. pytorch.c interprets the object graph it builds.
 *
 * The input is untrusted: nothing is ever called. The few callables a state_dict needs
 * (OrderedDict, torch._utils._rebuild_tensor_v2 / _rebuild_parameter) are recognised by name
 * and turned into plain objects; any other REDUCE / NEWOBJ is refused. Objects, stack, marks
 * and memo are bounded, and objects refer to each other by index (never pointers into a
 * growing array), so no input can make the reader loop, recurse or read out of bounds.
 */
#ifndef AG_PICKLE_INTERNAL_H
#define AG_PICKLE_INTERNAL_H

#include "model_internal.h"

typedef enum ag_pkl_type {
    AG_PKL_NONE = 0,
    AG_PKL_BOOL,
    AG_PKL_INT,    /* fits int64 */
    AG_PKL_BIGINT, /* LONG1/LONG4 wider than 8 bytes: raw little-endian bytes in `str` */
    AG_PKL_FLOAT,
    AG_PKL_STR,   /* unicode or py2 string: bytes in `str`, not NUL-terminated */
    AG_PKL_BYTES, /* bytes in `str` */
    AG_PKL_TUPLE,
    AG_PKL_LIST,
    AG_PKL_DICT,   /* `seq` holds key, value, key, value, ... */
    AG_PKL_GLOBAL, /* a class or function named by GLOBAL / STACK_GLOBAL */
    AG_PKL_PERSID, /* persistent id: `ref` is the id object (a tuple for torch) */
    AG_PKL_TENSOR, /* _rebuild_tensor_v2(*args): `ref` is the args tuple */
} ag_pkl_type;

/* The globals we know; everything else is AG_PKL_G_OTHER and may only be referenced. */
typedef enum ag_pkl_global {
    AG_PKL_G_OTHER = 0,
    AG_PKL_G_ORDERED_DICT,      /* collections.OrderedDict */
    AG_PKL_G_REBUILD_TENSOR,    /* torch._utils._rebuild_tensor_v2 */
    AG_PKL_G_REBUILD_PARAMETER, /* torch._utils._rebuild_parameter[_with_state] */
    AG_PKL_G_DTYPE,             /* torch.FloatStorage, torch.float16, ...: see `dtype` */
} ag_pkl_global;

typedef struct ag_pkl_obj {
    uint8_t type; /* ag_pkl_type */
    union {
        int64_t i; /* BOOL (0/1), INT */
        double f;  /* FLOAT */
        struct {
            const char *ptr; /* into the pickle bytes, which outlive the reader */
            size_t len;
        } str;
        struct {
            int32_t *items; /* object indices */
            int32_t count, capacity;
        } seq;
        struct {
            uint8_t kind;         /* ag_pkl_global */
            uint8_t dtype;        /* ag_dtype, for AG_PKL_G_DTYPE */
            int32_t module, name; /* STR objects */
        } global;
        int32_t ref;
    };
} ag_pkl_obj;

typedef struct ag_pkl {
    ag_pkl_obj *objs;
    int32_t obj_count, obj_capacity;
    int32_t *stack;
    int32_t stack_count, stack_capacity;
    int32_t *marks; /* stack heights at each open MARK */
    int32_t mark_count, mark_capacity;
    int32_t *memo; /* object index per memo key, -1 when unset */
    int32_t memo_size, memo_entries;
    size_t bytes; /* everything above, held under AG_PKL_MAX_BYTES */
} ag_pkl;

/*
 * Read one pickle from data[0, size) up to its STOP. `vm` must be zeroed; on success *root is
 * the unpickled object and *end the offset after STOP (several pickles may follow each other).
 * Messages start with `label`. Free with ag_pkl_fini, also after a failure.
 */
int ag_pkl_load(ag_pkl *vm, const uint8_t *data, size_t size, const char *label, int32_t *root,
                size_t *end, ag_error *err);
void ag_pkl_fini(ag_pkl *vm);

/* The object at `index` (valid for any index the reader handed out). */
static inline const ag_pkl_obj *ag_pkl_at(const ag_pkl *vm, int32_t index) {
    AG_ASSERT(index >= 0 && index < vm->obj_count);
    return &vm->objs[index];
}

/* Python's name of an object's type, for messages ("int", "tuple", ...). */
const char *ag_pkl_type_name(const ag_pkl_obj *obj);

/* A STR object equal to the C string `text`. */
bool ag_pkl_str_eq(const ag_pkl_obj *obj, const char *text);

#endif
