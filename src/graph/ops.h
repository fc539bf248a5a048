/*
 * ops.h - the op table: one descriptor per op says everything the loaders, the checker,
 * the shape planner, the flop count, the reference interpreter and the engine's lowering
 * need to know about it (docs/graph.md, "The op table").
 *
 * Adding an op: an ag_op value (graph.h), its descriptor in op_table.c, and its functions
 * in the family's file (ops_basic.c, ops_style.c, ops_resample.c or a new ops_<family>.c).
 * An op without a fused lowering (fusion AG_FUSE_NONE) runs on both backends through its
 * reference kernel, on whole fp32 maps in the arena, with the scratch it declares.
 */
#ifndef AG_GRAPH_OPS_H
#define AG_GRAPH_OPS_H

#include "graph.h"

#include <stddef.h>
#include <stdint.h>

typedef enum ag_attr_kind {
    AG_ATTR_INT,    /* int field */
    AG_ATTR_FLOAT,  /* float field */
    AG_ATTR_PAD,    /* int[4]: [top, bottom, left, right] */
    AG_ATTR_ENUM,   /* int-sized enum field, from the names list */
    AG_ATTR_FLOATS, /* float array, its length in the int field at count_offset */
} ag_attr_kind;

/* One attribute of an op: its JSON key, where it lives in ag_node, and the range the JSON
 * reader and ag_graph_check hold it to. */
typedef struct ag_attr {
    const char *key;
    ag_attr_kind kind;
    size_t offset;
    double lo, hi;            /* each value's range */
    double def;               /* its default (ag_node_make) */
    const char *const *names; /* ENUM: value i's name, NULL-terminated */
    size_t count_offset;      /* FLOATS */
} ag_attr;

/* A JSON key naming tensor slot `slot` (several keys may name one slot: scale = gamma). */
typedef struct ag_tensor_key {
    const char *key;
    int slot;
} ag_tensor_key;

/* A tensor's shape as the loader found it (ndim 0: no tensor in that slot). */
typedef struct ag_dims {
    int ndim;
    int64_t d[4];
} ag_dims;

/* A reference kernel's arguments: whole NHWC fp32 maps. */
typedef struct ag_op_io {
    const float *src[AG_NODE_MAX_SRC];
    ag_shape in[AG_NODE_MAX_SRC];
    int src_count;
    float *out;
    ag_shape o;
    float *scratch; /* the descriptor's scratch floats */
    int fast;       /* matmuls on sgemm */
    /* fast: a bias_lrelu node the engine fused into this op's output (NULL: none) */
    const struct ag_node *act;
    int threads;
    ag_resize_mode resize; /* the engine's override of resize modes (AG_RESIZE_DEFAULT: none) */
} ag_op_io;

/* How the oneDNN backend's lowering treats an op (src/engine/lower.c). */
typedef enum ag_fusion {
    AG_FUSE_NONE = 0, /* a step of its own: the reference kernel on whole fp32 maps */
    AG_FUSE_CONV,     /* heads a group: a oneDNN conv reading its input band by band */
    AG_FUSE_NORM,     /* per-channel affine applied by the conv group's reader */
    AG_FUSE_ACT,      /* (leaky) ReLU in the group's chain */
    AG_FUSE_PRELU,    /* PReLU: per-channel slopes in the chain, before a residual add */
    AG_FUSE_ADD,      /* residual add in the group's chain */
    AG_FUSE_RESIZE,   /* bilinear or nearest resize absorbed into the next conv's band */
    AG_FUSE_TANH,     /* the graph output's tanh, applied by the output pass */
    AG_FUSE_GATE, /* SiLU (a sigmoid_gate of x by x) or Mish in an fp32 chain's LeakyReLU place */
} ag_fusion;

/* Error text of a descriptor function: `why` holds AG_OP_WHY bytes. */
#define AG_OP_WHY 160

typedef struct ag_op_desc {
    const char *name;
    int min_src, max_src;
    unsigned size_only; /* bit j: src[j] gives only its size, its data is never read */
    const ag_attr *attrs;
    int attr_count;
    const ag_tensor_key *tensors; /* the JSON keys of its tensor slots */
    int tensor_count;
    /* At model build, from its inputs' channels and its tensors' shapes: derive the fields
     * the weights give (in_c, out_c, k, aux sizes) and refuse tensors of the wrong shape.
     * NULL: only gamma and beta, each (C), may be present. */
    int (*bind)(ag_node *n, const int *src_c, const ag_dims *t, char *why);
    /* After binding, beyond the attribute ranges: weights present, channels agreeing. */
    int (*check)(const ag_node *n, const int *src_c, char *why);
    /* Output channels (NULL: src[0]'s). */
    int (*channels)(const ag_node *n, const int *src_c);
    /* Output shape at one image size (NULL: src[0]'s, with `channels`). */
    int (*shape)(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
    /* Multiply-adds x 2 (NULL: 0, counted as memory-bound). */
    double (*flops)(const ag_node *n, const ag_shape *in, ag_shape out);
    /* Scratch floats its reference kernel needs (NULL: none). */
    size_t (*scratch)(const ag_node *n, const ag_shape *in, ag_shape out);
    void (*run)(const ag_node *n, const ag_op_io *io);
    ag_fusion fusion;
    /* Once, after binding: rearrange the bound weight (as many floats in `tmp`) into the
     * layout the kernels read (NULL: kept as loaded). */
    void (*pack)(const ag_node *n, float *weight, float *tmp);
} ag_op_desc;

/* The descriptor of op (valid ops only). */
const ag_op_desc *ag_op_desc_of(ag_op op);

/* Set every attribute of n to the op's default (ag_node_make calls it). */
void ag_op_defaults(ag_node *n);

/* Whether value v fits attribute a (ag_graph_check and the JSON reader). */
int ag_attr_fits(const ag_attr *a, double v);

/* ---- helpers for descriptor functions -------------------------------------------------- */

int ag_op_fail(char *why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether d is exactly (d0[, d1[, d2[, d3]]]), -1 matching any size 1..max; a 2-D shape
 * may be stored as (a, b, 1, 1). */
int ag_dims_is(const ag_dims *d, int ndim, int64_t max, const int64_t *want);
/* gamma and beta, when present, are (c). */
int ag_bind_per_channel(const ag_node *n, int c, const ag_dims *t, char *why);
static inline size_t ag_shape_floats(ag_shape s) {
    return (size_t)s.h * s.w * s.c;
}

/* Family tables, indexed by op, filled in op_table.c from the family files' functions. */
extern const ag_op_desc ag_op_table[AG_OP_COUNT];

/* ops_basic.c: the convolutional generators' ops */
int ag_bind_conv(ag_node *n, const int *src_c, const ag_dims *t, char *why);
int ag_bind_lade(ag_node *n, const int *src_c, const ag_dims *t, char *why);
int ag_bind_matmul(ag_node *n, const int *src_c, const ag_dims *t, char *why);
int ag_check_conv(const ag_node *n, const int *src_c, char *why);
int ag_check_norm(const ag_node *n, const int *src_c, char *why);
int ag_check_lade(const ag_node *n, const int *src_c, char *why);
int ag_check_affine(const ag_node *n, const int *src_c, char *why);
int ag_check_prelu(const ag_node *n, const int *src_c, char *why);
int ag_check_add(const ag_node *n, const int *src_c, char *why);
int ag_check_matmul(const ag_node *n, const int *src_c, char *why);
int ag_check_pad_channels(const ag_node *n, const int *src_c, char *why);
int ag_channels_bound(const ag_node *n, const int *src_c);
int ag_channels_input(const ag_node *n, const int *src_c);
int ag_shape_window(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
int ag_shape_resize(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
int ag_shape_resize2x(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
int ag_shape_add(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
double ag_flops_conv(const ag_node *n, const ag_shape *in, ag_shape out);
double ag_flops_matmul(const ag_node *n, const ag_shape *in, ag_shape out);
double ag_flops_lade(const ag_node *n, const ag_shape *in, ag_shape out);
size_t ag_scratch_padded(const ag_node *n, const ag_shape *in, ag_shape out);
size_t ag_scratch_input_map(const ag_node *n, const ag_shape *in, ag_shape out);
void ag_run_conv(const ag_node *n, const ag_op_io *io);
void ag_run_max_pool(const ag_node *n, const ag_op_io *io);
void ag_run_layer_norm(const ag_node *n, const ag_op_io *io);
void ag_run_instance_norm(const ag_node *n, const ag_op_io *io);
void ag_run_lade(const ag_node *n, const ag_op_io *io);
void ag_run_affine(const ag_node *n, const ag_op_io *io);
void ag_run_prelu(const ag_node *n, const ag_op_io *io);
void ag_run_activation(const ag_node *n, const ag_op_io *io);
void ag_run_add(const ag_node *n, const ag_op_io *io);
void ag_run_resize(const ag_node *n, const ag_op_io *io);
void ag_run_matmul(const ag_node *n, const ag_op_io *io);
void ag_run_softmax(const ag_node *n, const ag_op_io *io);
void ag_run_sum_normalize(const ag_node *n, const ag_op_io *io);
void ag_run_pad_channels(const ag_node *n, const ag_op_io *io);

/* ops_transformer.c: CodeFormer */
int ag_check_group_norm(const ag_node *n, const int *src_c, char *why);
int ag_check_attention(const ag_node *n, const int *src_c, char *why);
int ag_bind_codebook(ag_node *n, const int *src_c, const ag_dims *t, char *why);
int ag_check_codebook(const ag_node *n, const int *src_c, char *why);
int ag_check_adain(const ag_node *n, const int *src_c, char *why);
int ag_shape_attention(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
double ag_flops_attention(const ag_node *n, const ag_shape *in, ag_shape out);
size_t ag_scratch_attention(const ag_node *n, const ag_shape *in, ag_shape out);
void ag_run_group_norm(const ag_node *n, const ag_op_io *io);
void ag_run_token_norm(const ag_node *n, const ag_op_io *io);
void ag_run_attention(const ag_node *n, const ag_op_io *io);
void ag_run_codebook(const ag_node *n, const ag_op_io *io);
void ag_run_adain(const ag_node *n, const ag_op_io *io);

/* ops_style.c: StyleGAN2 / GPEN / GFPGAN */
int ag_bind_const(ag_node *n, const int *src_c, const ag_dims *t, char *why);
int ag_bind_linear(ag_node *n, const int *src_c, const ag_dims *t, char *why);
int ag_bind_bias_lrelu(ag_node *n, const int *src_c, const ag_dims *t, char *why);
int ag_bind_modconv(ag_node *n, const int *src_c, const ag_dims *t, char *why);
int ag_bind_conv_t(ag_node *n, const int *src_c, const ag_dims *t, char *why);
int ag_bind_noise(ag_node *n, const int *src_c, const ag_dims *t, char *why);
int ag_check_const(const ag_node *n, const int *src_c, char *why);
int ag_check_linear(const ag_node *n, const int *src_c, char *why);
int ag_check_modconv(const ag_node *n, const int *src_c, char *why);
int ag_check_conv_t(const ag_node *n, const int *src_c, char *why);
int ag_check_upfirdn(const ag_node *n, const int *src_c, char *why);
int ag_check_concat(const ag_node *n, const int *src_c, char *why);
int ag_check_slice(const ag_node *n, const int *src_c, char *why);
int ag_check_sft(const ag_node *n, const int *src_c, char *why);
int ag_check_noise(const ag_node *n, const int *src_c, char *why);
int ag_channels_concat(const ag_node *n, const int *src_c);
int ag_channels_slice(const ag_node *n, const int *src_c);
int ag_channels_noise(const ag_node *n, const int *src_c);
int ag_shape_const(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
int ag_shape_linear(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
int ag_shape_modconv(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
int ag_shape_conv_t(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
int ag_shape_upfirdn(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
int ag_shape_same_size(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
int ag_shape_noise(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
double ag_flops_linear(const ag_node *n, const ag_shape *in, ag_shape out);
double ag_flops_modconv(const ag_node *n, const ag_shape *in, ag_shape out);
double ag_flops_conv_t(const ag_node *n, const ag_shape *in, ag_shape out);
double ag_flops_upfirdn(const ag_node *n, const ag_shape *in, ag_shape out);
size_t ag_scratch_upfirdn(const ag_node *n, const ag_shape *in, ag_shape out);
size_t ag_scratch_linear(const ag_node *n, const ag_shape *in, ag_shape out);
void ag_run_const(const ag_node *n, const ag_op_io *io);
void ag_run_linear(const ag_node *n, const ag_op_io *io);
void ag_run_pixel_norm(const ag_node *n, const ag_op_io *io);
void ag_run_bias_lrelu(const ag_node *n, const ag_op_io *io);
void ag_run_upfirdn(const ag_node *n, const ag_op_io *io);
void ag_run_concat(const ag_node *n, const ag_op_io *io);
void ag_run_slice(const ag_node *n, const ag_op_io *io);
void ag_run_sft(const ag_node *n, const ag_op_io *io);
void ag_run_noise(const ag_node *n, const ag_op_io *io);

/* ops_modconv.c: the modulated and transposed convolutions' kernels */
size_t ag_scratch_modconv(const ag_node *n, const ag_shape *in, ag_shape out);
void ag_pack_modconv(const ag_node *n, float *weight, float *tmp);
void ag_run_modconv(const ag_node *n, const ag_op_io *io);
void ag_run_conv_t(const ag_node *n, const ag_op_io *io);
/* A modulated conv's halves, for a kernel kind's kernel in place of its product
 * (ag_node_kernel_fn): its demodulation (OC) into the op's scratch, returned (wsq: the
 * weight's squares summed over the taps (IC, OC); NULL: from the weight), and its product on
 * sgemm, or bf16 products given bf16 (gemm_conv.c): out <- conv(src[0] * src[1]) * d + bias. */
struct ag_gemm_bf16; /* src/kernels/kernels.h */
float *ag_modconv_demod(const ag_node *n, const ag_op_io *io, const float *wsq);
void ag_modconv_gemm(const ag_node *n, const ag_op_io *io, const float *d,
                     const struct ag_gemm_bf16 *bf16);

/* ops_resample.c */
int ag_check_resample(const ag_node *n, const int *src_c, char *why);
int ag_check_pixel_shuffle(const ag_node *n, const int *src_c, char *why);
int ag_channels_pixel_shuffle(const ag_node *n, const int *src_c);
int ag_channels_pixel_unshuffle(const ag_node *n, const int *src_c);
int ag_shape_resample(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
int ag_shape_nearest(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
int ag_shape_pixel_shuffle(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
int ag_shape_pixel_unshuffle(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
void ag_run_resample(const ag_node *n, const ag_op_io *io);
void ag_run_nearest(const ag_node *n, const ag_op_io *io);
void ag_run_pixel_shuffle(const ag_node *n, const ag_op_io *io);
void ag_run_pixel_unshuffle(const ag_node *n, const ag_op_io *io);

/* ops_upscale.c */
void ag_run_add_scaled(const ag_node *n, const ag_op_io *io);
void ag_run_sigmoid_gate(const ag_node *n, const ag_op_io *io);
void ag_run_mish(const ag_node *n, const ag_op_io *io);
int ag_check_norm_affine(const ag_node *n, const int *src_c, char *why);
void ag_run_channel_norm(const ag_node *n, const ag_op_io *io);
int ag_check_dysample(const ag_node *n, const int *src_c, char *why);
int ag_shape_dysample(const ag_node *n, const ag_shape *in, ag_shape *out, char *why);
void ag_run_dysample(const ag_node *n, const ag_op_io *io);

/* A kernel an engine made for one node at its size (a kernel kind's, src/engine/kind_*.c),
 * run in place of the op's own: out <- op(src[0..]) as the op's run would compute it. The
 * op table knows no kind: a kind brings its kernel and this function, nothing here changes. */
typedef void (*ag_node_kernel_fn)(const void *kernel, const ag_node *n, const ag_op_io *io);

/* The engine's fast paths for ag_node_run: the ops' own (matmuls on sgemm, fused passes),
 * a kernel kind's kernel in place of the op's, and the bias_lrelu the lowering fused into a
 * noise injection. */
typedef struct ag_node_fast {
    ag_node_kernel_fn run; /* NULL: the op's own fast path */
    const void *kernel;    /* run's */
    const ag_node *act;    /* a bias_lrelu fused into the node's output */
} ag_node_fast;

/* One node on whole fp32 maps (both backends), through its op's reference kernel (node.c):
 * out <- op(src[0..]); `scratch` holds ag_node_scratch_floats floats. The reference loops
 * when `fast` is NULL. */
void ag_node_run(const ag_node *n, const ag_shape *shapes, int index, const float *const *src,
                 float *out, float *scratch, const ag_node_fast *fast, ag_resize_mode resize,
                 int threads);
size_t ag_node_scratch_floats(const ag_node *n, const ag_shape *shapes, int index);

/* The largest side of any map (a bound for the shape arithmetic: no overflow). */
#define AG_MAP_MAX_SIDE (1 << 20)

#endif
