/*
 * graph.h - the network as a graph of ops over NHWC fp32 feature maps (batch 1); see
 * docs/graph.md for the op set and its JSON form.
 *
 * A loader builds a graph with ag_graph_add (nodes in topological order: every input is an
 * earlier node), pointing weight fields at fp32 arrays the model owns. ag_graph_check then
 * validates it once at load (shapes of weights, limits, kernel preconditions) and
 * ag_graph_shapes derives every node's (H, W, C) for one image size, without allocating.
 */
#ifndef AG_GRAPH_H
#define AG_GRAPH_H

#include "animegan.h"

#include <stddef.h>

#define AG_GRAPH_MAX_NODES 512
#define AG_GRAPH_MAX_OUTPUTS 4
#define AG_GRAPH_NAME_BYTES 64

typedef enum ag_op {
    AG_OP_INPUT = 0,     /* the image, (H, W, 3) */
    AG_OP_CONV,          /* [pad] + conv (+ bias) */
    AG_OP_LAYER_NORM,    /* GroupNorm(1) + per-channel gamma/beta */
    AG_OP_INSTANCE_NORM, /* per channel over H, W (+ gamma/beta) */
    AG_OP_LADE,          /* instance norm of x rescaled to the statistics of weight·x */
    AG_OP_AFFINE,        /* x * scale + shift per channel */
    AG_OP_LRELU,         /* alpha */
    AG_OP_PRELU,         /* slope per channel */
    AG_OP_RELU,
    AG_OP_RELU6,
    AG_OP_TANH,
    AG_OP_SIGMOID,
    AG_OP_ADD,           /* in[0] + in[1] */
    AG_OP_RESIZE,        /* bilinear to the (H, W) of in[1] */
    AG_OP_RESIZE2X,      /* bilinear to (2H, 2W) */
    AG_OP_MATMUL,        /* per pixel: x (C) times weight (C, M), or (M, C) transposed */
    AG_OP_SOFTMAX,       /* axis: spatial or channel */
    AG_OP_SUM_NORMALIZE, /* x / (eps + sum over channels) */
    AG_OP_MAX_POOL,
    AG_OP_PAD_CHANNELS, /* zero channels appended */
    AG_OP_COUNT
} ag_op;

typedef enum ag_pad_mode { AG_PAD_REFLECT = 0, AG_PAD_ZERO } ag_pad_mode;
typedef enum ag_axis { AG_AXIS_SPATIAL = 0, AG_AXIS_CHANNEL } ag_axis;

enum { AG_T_WEIGHT = 0, AG_T_BIAS, AG_T_GAMMA, AG_T_BETA, AG_NODE_TENSORS };

typedef struct ag_node {
    ag_op op;
    char name[AG_GRAPH_NAME_BYTES];
    int in[2]; /* node indices; -1 when unused */
    /* conv, max_pool */
    int k, stride, groups; /* groups 0 before binding: one per input channel (depthwise) */
    int pad[4];            /* top, bottom, left, right */
    ag_pad_mode pad_mode;
    /* Tensors, as indices into the loader's ag_tensor_set (-1: none), then, once the model
     * is built (ag_model_from_graph), as fp32 arrays in the model's one weight block.
     * Which are used depends on op. */
    int tensor[AG_NODE_TENSORS];
    const float *weight; /* conv (OC, IC/groups, K, K); lade (C, C); matmul (C, M) or (M, C) */
    const float *bias;   /* conv (OC) */
    const float *gamma;  /* norms (C); affine scale; prelu slope */
    const float *beta;   /* norms (C); affine shift */
    int in_c, out_c;     /* conv, matmul: from the weights at build; pad_channels: out_c */
    int transpose;       /* matmul */
    float alpha, eps;    /* lrelu; norms, lade, sum_normalize */
    ag_resize_mode mode; /* resize */
    ag_axis axis;        /* softmax */
} ag_node;

typedef struct ag_graph {
    ag_node nodes[AG_GRAPH_MAX_NODES];
    int count;
    int outputs[AG_GRAPH_MAX_OUTPUTS];
    int output_count;
} ag_graph;

/* Shape of one node's output at a planned image size. */
typedef struct ag_shape {
    int h, w, c;
} ag_shape;

/* Append a node (copied); returns its index, or -1 with `err` set (graph full). The input
 * node is added implicitly by ag_graph_init as node 0, named "input". Outputs are added
 * with ag_graph_add_output (at least one). */
void ag_graph_init(ag_graph *g);
int ag_graph_add(ag_graph *g, const ag_node *node, ag_error *err);
/* A node template with every field neutral (in = -1, stride/groups 1, eps 1e-5). */
ag_node ag_node_make(ag_op op, const char *name, int in0, int in1);
int ag_graph_add_output(ag_graph *g, int node, ag_error *err);
int ag_graph_find(const ag_graph *g, const char *name);

/* Validate once the weights are bound: inputs precede use, channel counts agree, weights present,
 * limits of docs/graph.md. `label` names the file in the message. */
int ag_graph_check(const ag_graph *g, const char *label, ag_error *err);

/* Every node's output shape for a width x height input; AG_E_ARG (naming the node) when a
 * map would shrink below 1 pixel or a resize/add pair disagrees. */
int ag_graph_shapes(const ag_graph *g, int width, int height, ag_shape *shapes, ag_error *err);

/* Multiply-adds x 2 of the convolutions and matmuls at width x height. */
double ag_graph_flop(const ag_graph *g, int width, int height);

const char *ag_op_name(ag_op op);
/* -1 when unknown. */
int ag_op_parse(const char *name);

#endif
