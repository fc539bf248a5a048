/*
 * onnx_import_internal.h - the ONNX importer's state, shared by its three files:
 * onnx_import.c (values, expressions, tensors and nodes; the walk and the passes after it),
 * onnx_patterns.c (expressions materialised into graph nodes by pattern: LADE, instance
 * norm, affine chains, sum normalisation) and onnx_ops.c (one function per ONNX op, the
 * shape arithmetic among them). onnx_import.c's opening comment describes the method.
 */
#ifndef AG_ONNX_IMPORT_INTERNAL_H
#define AG_ONNX_IMPORT_INTERNAL_H

#include "onnx_internal.h"

#include "../graph/graph.h"

#include <stdbool.h>

/* Per-channel constants and shape vectors are small; anything larger is not one. */
#define MAX_CONST_FLOATS 4096
#define MAX_SYM 8

typedef enum vkind { V_UNDEF = 0, V_CONST, V_SHAPE, V_EXPR, V_PADDED } vkind;
/* L_SEQ: (1, H*W, C) or (H*W, C), our NHWC data read as rows of pixels; L_SEQT: the same
 * with the last two axes swapped, (1, C, H*W), as a Transpose before a Softmax leaves it. */
typedef enum layout { L_NONE = 0, L_NCHW, L_NHWC, L_SEQ, L_SEQT } layout;

/* One element of a shape: node < 0: the constant v; else v times the H, W or H*W of node. */
typedef struct sym {
    int node;
    char axis; /* 'H', 'W', 'P' (H*W) */
    int64_t v;
} sym;

typedef struct value {
    vkind kind;
    layout lay;
    int rank;        /* V_SHAPE: 0 or 1; L_SEQ, L_SEQT: 2 or 3; else 4 */
    int tensor;      /* V_CONST: index into the model's tensors */
    bool transposed; /* V_CONST: a 2-D constant read through a Transpose */
    int expr;        /* V_EXPR, V_PADDED */
    int pad[4];      /* V_PADDED: top, bottom, left, right */
    ag_pad_mode pad_mode;
    int n; /* V_SHAPE */
    sym s[MAX_SYM];
} value;

typedef enum ekind { E_MAP, E_CONST, E_MEAN, E_CSUM, E_ADD, E_SUB, E_MUL, E_DIV, E_SQRT } ekind;
enum { VARY_PIXEL = 1, VARY_CHANNEL = 2, VARY_MAP = 3 };

typedef struct expr {
    ekind k;
    int a, b; /* operands */
    int node; /* E_MAP: graph node */
    float *c; /* E_CONST: cn values (owned by the importer) */
    int cn;   /* 1: a scalar */
    int vary; /* VARY_* bits: what it varies over; 0 for a constant */
    int chan; /* channels; 0 when it broadcasts over them */
    int mat;  /* graph node it became, -1 */
    int src;  /* ONNX node that made it, for names and messages */
} expr;

typedef struct imp {
    const ag_onnx_model *m;
    const char *label;
    ag_error *err;
    ag_tensor_set *set;
    ag_graph *g;
    value *vals;
    int val_count;
    int *slots; /* hash of value names -> index in vals; -1 empty */
    ag_pb_span *val_names;
    size_t slot_mask;
    expr *ex;
    int ex_count, ex_cap;
    int *tensor_index; /* per model tensor: its index in `set`, -1 */
    int cur;           /* the ONNX node being imported */
    long *eq_budget;   /* structural comparisons left: a crafted DAG could make them explode */
    int node_src[AG_GRAPH_MAX_NODES]; /* ONNX node of each graph node */
} imp;

/* ---- onnx_import.c ------------------------------------------------------------------- */

const ag_onnx_node *ag_oi_onnx_node(const imp *im, int i);
/* The one line naming ONNX node `node` and why it cannot be imported; returns the code. */
int ag_oi_refuse_at(imp *im, int node, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define REFUSE(...) ag_oi_refuse_at(im, im->cur, __VA_ARGS__)
int ag_oi_nomem(imp *im);
/* The value named `name`, -1 when there is none. */
int ag_oi_lookup(const imp *im, ag_pb_span name);
/* Expressions: a new node of the DAG (its index, -1 with the error set), a graph map, a
 * constant of n floats (copied); what a given one is. */
int ag_oi_new_expr(imp *im, ekind k, int a, int b);
int ag_oi_map_expr(imp *im, int node);
int ag_oi_const_expr(imp *im, const float *values, int n);
bool ag_oi_is_const(const imp *im, int e);
bool ag_oi_is_scalar(const imp *im, int e, float *v);
bool ag_oi_expr_eq(const imp *im, int a, int b, int depth);
/* Model tensor t (or n derived floats) in the graph's tensor set: its index there. */
int ag_oi_use_tensor(imp *im, int t);
int ag_oi_derived_tensor(imp *im, const char *what, const float *values, int n);
/* Append graph node n made by ONNX node src: its index, -1 with the error set. */
int ag_oi_emit(imp *im, ag_node *n, int src);
int ag_oi_channels_of(const imp *im, int node);

/* ---- onnx_patterns.c ----------------------------------------------------------------- */

/* Expression e as graph nodes (once: later calls return the same node), -1 on error. */
int ag_oi_materialize(imp *im, int e, int depth);

/* ---- onnx_ops.c ---------------------------------------------------------------------- */

/* ONNX node im->cur into values and graph nodes. */
int ag_oi_import_node(imp *im);

#endif
