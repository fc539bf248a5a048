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

#define AG_GRAPH_MAX_NODES 1536 /* RealESRGAN_x4plus: ~1000 */
#define AG_GRAPH_MAX_OUTPUTS 4
#define AG_GRAPH_NAME_BYTES 64
#define AG_NODE_MAX_SRC 8 /* inputs of a node: a dense block's concat has five */
#define AG_FIR_MAX_TAPS 8 /* upfirdn's separable FIR */

/* The ops; each has one descriptor in the op table (ops.h, op_table.c) that says
 * everything else about it. */
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
    AG_OP_ADD,           /* src[0] + src[1] */
    AG_OP_RESIZE,        /* bilinear to the (H, W) of src[1] */
    AG_OP_RESIZE2X,      /* bilinear to (2H, 2W) */
    AG_OP_MATMUL,        /* per pixel: x (C) times weight (C, M), or (M, C) transposed */
    AG_OP_SOFTMAX,       /* axis: spatial or channel */
    AG_OP_SUM_NORMALIZE, /* x / (eps + sum over channels) */
    AG_OP_MAX_POOL,
    AG_OP_PAD_CHANNELS, /* zero channels appended */
    /* StyleGAN family (ops_style.c) */
    AG_OP_CONST,      /* a constant map from its weight (1, C, H, W) */
    AG_OP_LINEAR,     /* x flattened in NCHW order times weight (M, K)ᵀ + bias: (1, 1, M) */
    AG_OP_PIXEL_NORM, /* x / sqrt(mean over channels of x² + eps), per pixel */
    AG_OP_BIAS_LRELU, /* lrelu(x + bias, alpha) * gain: StyleGAN's FusedLeakyReLU */
    AG_OP_MODCONV,    /* modulated conv: src[1] the style (1, 1, IC) */
    AG_OP_CONV_T,     /* transposed conv, weight (IC, OC, K, K) */
    AG_OP_UPFIRDN,    /* upsample, pad, separable FIR, downsample (upfirdn2d) */
    AG_OP_CONCAT,     /* along channels, src[0..] */
    AG_OP_SLICE,      /* channels [c0, c1) */
    AG_OP_SFT,        /* channels [c0, c1) of x * src[1] + src[2] */
    AG_OP_NOISE,      /* x + weight * noise, or concat(x, weight * noise) */
    /* resampling (ops_resample.c) */
    AG_OP_RESAMPLE,        /* bilinear by up / down, PyTorch's align_corners False */
    AG_OP_NEAREST,         /* nearest upsample by `up` */
    AG_OP_PIXEL_SHUFFLE,   /* (H, W, C r²) -> (H r, W r, C), r = `up` */
    AG_OP_PIXEL_UNSHUFFLE, /* (H r, W r, C) -> (H, W, C r²), r = `down` */
    AG_OP_ADD_SCALED,      /* src[0] * alpha + src[1] (ops_upscale.c) */
    /* CodeFormer (ops_transformer.c) */
    AG_OP_GROUP_NORM, /* per group of channels over H, W, then gamma/beta */
    AG_OP_TOKEN_NORM, /* LayerNorm over the channels of each pixel */
    AG_OP_GELU,       /* x · Φ(x), erf form */
    AG_OP_ATTENTION,  /* softmax(q kᵀ / sqrt(d)) v, pixels as tokens, `heads` heads */
    AG_OP_CODEBOOK,   /* the weight row of each pixel's largest logit */
    AG_OP_ADAIN,      /* src[0] to the per-channel mean and std of src[1] */
    /* upscalers: SPAN, RealPLKSR (ops_upscale.c) */
    AG_OP_SIGMOID_GATE, /* src[0] * (sigmoid(src[1]) - alpha) */
    AG_OP_MISH,         /* x * tanh(softplus(x)) */
    AG_OP_CHANNEL_NORM, /* per pixel over its channels + per-channel gamma/beta */
    AG_OP_DYSAMPLE,     /* x sampled at offsets (src[1] gated by sigmoid(src[2])): (sH, sW, C) */
    AG_OP_COUNT
} ag_op;

typedef enum ag_pad_mode { AG_PAD_REFLECT = 0, AG_PAD_ZERO } ag_pad_mode;
typedef enum ag_axis { AG_AXIS_SPATIAL = 0, AG_AXIS_CHANNEL } ag_axis;

/* Tensor slots of a node. AUX: noise's constant map. */
enum { AG_T_WEIGHT = 0, AG_T_BIAS, AG_T_GAMMA, AG_T_BETA, AG_T_AUX, AG_NODE_TENSORS };

/*
 * A node: its op, up to AG_NODE_MAX_SRC inputs, tensor slots and the parameter block. The
 * parameters are typed, named slots shared by the ops (a conv and a max pool read the same
 * window fields, a modulated conv too); each op's descriptor lists the ones it reads with
 * their ranges (ops.h), and the JSON reader, the checker and docs/graph.md follow that list.
 */
typedef struct ag_node {
    ag_op op;
    char name[AG_GRAPH_NAME_BYTES];
    int src[AG_NODE_MAX_SRC]; /* node indices; -1 past the op's inputs */
    /* window: conv, max_pool, modconv, conv_t (pad = output crop), upfirdn */
    int k, stride, groups; /* groups 0 before binding: one per input channel (depthwise);
                              group_norm's groups, attention's heads */
    int pad[4];            /* top, bottom, left, right */
    ag_pad_mode pad_mode;
    /* Tensors, as indices into the loader's ag_tensor_set (-1: none), then, once the model
     * is built (ag_model_from_graph), as fp32 arrays in the model's one weight block. */
    int tensor[AG_NODE_TENSORS];
    union {
        const float *t[AG_NODE_TENSORS];
        struct {
            const float *weight; /* conv (OC, IC/groups, K, K); lade (C, C); matmul ... */
            const float *bias;   /* conv, linear, modconv, conv_t (OC); bias_lrelu (C) */
            const float *gamma;  /* norms (C); affine scale; prelu slope */
            const float *beta;   /* norms (C); affine shift */
            const float *aux;    /* noise: its constant (H, W) map */
        };
    };
    /* Multipliers applied to the weight and bias when the model binds them: a loader's
     * equalised learning rate (StyleGAN's 1/sqrt(fan_in) * lr_mul, lr_mul). */
    float weight_scale, bias_scale;
    int in_c, out_c;     /* from the weights at build; pad_channels: out_c */
    int transpose;       /* matmul */
    float alpha, eps;    /* lrelu, bias_lrelu; norms, lade, sum_normalize, pixel_norm, modconv */
    ag_resize_mode mode; /* resize */
    ag_axis axis;        /* softmax */
    int up, down;        /* upfirdn, modconv (up 2), resample, nearest, pixel (un)shuffle */
    int c0, c1;          /* slice, sft: channel range [c0, c1); c1 0: to the last */
    int demod;           /* modconv: demodulate each output channel */
    int concat;          /* noise: GPEN's concatenation of weight * noise */
    float gain;          /* bias_lrelu (sqrt 2); upfirdn (up² when upsampling) */
    int runtime_alpha;   /* add_scaled: alpha is the engine's run-time value when one is set
                            (ag_engine_set_runtime_alpha: CodeFormer's fidelity w) */
    int aux_h, aux_w;    /* noise, const: the constant map's size, from its tensor */
    int fir_taps;        /* upfirdn: 0 = [1, 3, 3, 1] */
    float fir[AG_FIR_MAX_TAPS];
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
/* A node template with every field at the op's default (src = -1 but in0, in1; stride,
 * groups, up, down 1; eps 1e-5, alpha 0.2; the attributes' defaults of the op table). */
ag_node ag_node_make(ag_op op, const char *name, int in0, int in1);
/* Inputs of node n: the leading src[] entries >= 0. */
int ag_node_src_count(const ag_node *n);
int ag_graph_add_output(ag_graph *g, int node, ag_error *err);
int ag_graph_find(const ag_graph *g, const char *name);

/* Validate once the weights are bound: inputs precede use, channel counts agree, weights present,
 * limits of docs/graph.md. `label` names the file in the message. */
int ag_graph_check(const ag_graph *g, const char *label, ag_error *err);

/* Output channels of node n from its inputs' (checked) channels and its own fields. */
int ag_node_channels(const ag_graph *g, const ag_node *n);

/* Every node's output shape for a width x height input; AG_E_ARG (naming the node) when a
 * map would shrink below 1 pixel or a resize/add pair disagrees. */
int ag_graph_shapes(const ag_graph *g, int width, int height, ag_shape *shapes, ag_error *err);

/* Multiply-adds x 2 of the convolutions, matmuls and the other ops' flops functions at
 * width x height. */
double ag_graph_flop(const ag_graph *g, int width, int height);

const char *ag_op_name(ag_op op);
/* -1 when unknown. */
int ag_op_parse(const char *name);

#endif
