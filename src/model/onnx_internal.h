/*
 * onnx_internal.h - the parts of an ONNX ModelProto the importer reads (onnx_pb.c parses
 * them, onnx_import.c turns them into an ag_graph).
 *
 * Everything points into the file buffer: strings are (pointer, length) spans, not NUL
 * terminated; tensors keep the span of their data and the span of their whole TensorProto
 * so typed repeated fields can be decoded on demand. Every span has been checked to lie
 * inside the buffer, and every count is bounded (below), before any of it is stored.
 */
#ifndef AG_ONNX_INTERNAL_H
#define AG_ONNX_INTERNAL_H

#include "model_internal.h"

#define AG_ONNX_MAX_NODES 4096
#define AG_ONNX_MAX_TENSORS 4096  /* initializers plus Constant-node tensors */
#define AG_ONNX_MAX_NAMES 65536   /* node inputs plus outputs, all nodes */
#define AG_ONNX_MAX_NODE_IO 64    /* inputs (or outputs) of one node */
#define AG_ONNX_MAX_ATTRS 32768   /* all nodes */
#define AG_ONNX_MAX_NODE_ATTRS 32 /* one node */
#define AG_ONNX_MAX_GRAPH_IO 64   /* graph inputs (or outputs) */
#define AG_ONNX_MAX_DIMS 8
#define AG_ONNX_MAX_DIM ((int64_t)1 << 31) /* one dimension of a tensor */
#define AG_ONNX_MAX_NAME_BYTES 4096

/* TensorProto.DataType values the importer knows. */
enum {
    AG_ONNX_FLOAT = 1,
    AG_ONNX_INT32 = 6,
    AG_ONNX_INT64 = 7,
    AG_ONNX_FLOAT16 = 10,
};

/* AttributeProto.AttributeType values. */
enum {
    AG_ONNX_ATTR_FLOAT = 1,
    AG_ONNX_ATTR_INT = 2,
    AG_ONNX_ATTR_STRING = 3,
    AG_ONNX_ATTR_TENSOR = 4,
    AG_ONNX_ATTR_GRAPH = 5,
    AG_ONNX_ATTR_FLOATS = 6,
    AG_ONNX_ATTR_INTS = 7,
};

typedef struct ag_pb_span {
    const uint8_t *ptr;
    size_t len;
} ag_pb_span;

typedef struct ag_onnx_tensor {
    ag_pb_span name;
    bool initializer; /* of the graph; otherwise the value of a node attribute */
    int32_t data_type;
    int ndim;
    int64_t dims[AG_ONNX_MAX_DIMS];
    int64_t count;    /* elements: the product of dims */
    bool has_raw;     /* raw_data present */
    ag_pb_span raw;   /* raw_data, exactly count x element size bytes */
    ag_pb_span msg;   /* the whole TensorProto, to decode float/int32/int64_data from */
    int typed_field;  /* 4 float_data, 5 int32_data, 7 int64_data; 0 when raw or empty */
    ag_pb_span typed; /* float_data as one packed run of count floats (points into the file) */
} ag_onnx_tensor;

typedef struct ag_onnx_attr {
    ag_pb_span name;
    int32_t type; /* AG_ONNX_ATTR_* (or another AttributeType, refused by the importer) */
    float f;
    int64_t i;
    ag_pb_span s;
    int tensor;     /* TENSOR: index into ag_onnx_model.tensors */
    ag_pb_span msg; /* the AttributeProto, for FLOATS / INTS */
    int count;      /* FLOATS / INTS: number of elements */
} ag_onnx_attr;

typedef struct ag_onnx_node {
    ag_pb_span name, op_type, domain;
    int input_first, input_count; /* into ag_onnx_model.names; an empty span: input absent */
    int output_first, output_count;
    int attr_first, attr_count; /* into ag_onnx_model.attrs */
} ag_onnx_node;

/* A graph input or output: name, element type and shape (-1 for a symbolic dimension). */
typedef struct ag_onnx_value_info {
    ag_pb_span name;
    int32_t elem_type;
    int ndim; /* -1: no shape given */
    int64_t dims[AG_ONNX_MAX_DIMS];
} ag_onnx_value_info;

typedef struct ag_onnx_model {
    int64_t ir_version;
    int64_t opset; /* of the default domain ("" or "ai.onnx"); 0 if not imported */
    ag_pb_span producer;
    ag_onnx_node *nodes;
    int node_count;
    ag_pb_span *names;
    int name_count;
    ag_onnx_attr *attrs;
    int attr_count;
    ag_onnx_tensor *tensors; /* initializers and tensors of node attributes */
    int tensor_count, initializer_count;
    ag_onnx_value_info inputs[AG_ONNX_MAX_GRAPH_IO], outputs[AG_ONNX_MAX_GRAPH_IO];
    int input_count, output_count;
} ag_onnx_model;

/* Parses a whole .onnx file held in memory into `out` (zeroed by the caller); the model
 * points into `data`, which must outlive it. On failure `out` is released. */
int ag_onnx_pb_parse(const uint8_t *data, size_t size, const char *label, ag_onnx_model *out,
                     ag_error *err);
void ag_onnx_model_fini(ag_onnx_model *model);

/* Decodes a FLOAT or FLOAT16 tensor into `out` (t->count floats). */
int ag_onnx_tensor_floats(const ag_onnx_tensor *t, float *out, const char *label, ag_error *err);
/* Decodes an INT64 or INT32 tensor of at most `max` elements into `out`. */
int ag_onnx_tensor_ints(const ag_onnx_tensor *t, int64_t *out, int64_t max, const char *label,
                        ag_error *err);
/* The elements of an INTS / FLOATS attribute; at most `max` (*count says how many). */
int ag_onnx_attr_ints(const ag_onnx_attr *a, int64_t *out, int max, int *count);
int ag_onnx_attr_floats(const ag_onnx_attr *a, float *out, int max, int *count);

bool ag_pb_span_eq(ag_pb_span s, const char *text);
/* Prints a span for messages: "%.*s" with ag_pb_span_arg. */
#define AG_PB_SPAN_ARG(s) (int)((s).len > 80 ? 80 : (s).len), (const char *)(s).ptr

#endif
