/*
 * op_table.c - the op table (ops.h): every op's descriptor, its attributes with their
 * ranges and its tensors' JSON keys. The functions live in the family files.
 */
#include "ops.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define OFF(field) offsetof(ag_node, field)
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const char *const pad_modes[] = {"reflect", "zero", NULL};
static const char *const resize_modes[] = {"", "asymmetric", "align-corners", "half-pixel", NULL};
static const char *const axes[] = {"spatial", "channel", NULL};

#define INT(key, field, lo, hi, def)                                                               \
    { key, AG_ATTR_INT, OFF(field), lo, hi, def, NULL, 0 }
#define FLT(key, field, lo, hi, def)                                                               \
    { key, AG_ATTR_FLOAT, OFF(field), lo, hi, def, NULL, 0 }
#define PAD(lo, hi)                                                                                \
    { "pad", AG_ATTR_PAD, OFF(pad), lo, hi, 0, NULL, 0 }
#define ENUM(key, field, names, lo, hi, def)                                                       \
    { key, AG_ATTR_ENUM, OFF(field), lo, hi, def, names, 0 }
#define ATTRS(name, ...) static const ag_attr name[] = {__VA_ARGS__};

ATTRS(conv_attrs, INT("stride", stride, 1, 4, 1), INT("groups", groups, 0, 4096, 1), PAD(0, 10),
      ENUM("pad_mode", pad_mode, pad_modes, 0, 1, AG_PAD_REFLECT),
      FLT("weight_scale", weight_scale, 1e-12, 1e12, 1), FLT("bias_scale", bias_scale, 0, 1e12, 1))
ATTRS(pool_attrs, INT("k", k, 1, 11, 1), INT("stride", stride, 1, 4, 1), PAD(0, 10))
ATTRS(norm_attrs, FLT("eps", eps, 0, 0.999999, 1e-5))
ATTRS(lrelu_attrs, FLT("alpha", alpha, 0, 1, 0.2))
ATTRS(resize_attrs, ENUM("mode", mode, resize_modes, 1, 3, AG_RESIZE_ASYMMETRIC))
ATTRS(matmul_attrs, INT("transpose", transpose, 0, 1, 0))
ATTRS(softmax_attrs, ENUM("axis", axis, axes, 0, 1, AG_AXIS_SPATIAL))
ATTRS(sum_norm_attrs, FLT("eps", eps, 0, 1, 1e-5))
ATTRS(pad_channels_attrs, INT("channels", out_c, 0, 4096, 0))
ATTRS(linear_attrs, FLT("weight_scale", weight_scale, 1e-12, 1e12, 1),
      FLT("bias_scale", bias_scale, 0, 1e12, 1))
ATTRS(pixel_norm_attrs, FLT("eps", eps, 0, 1, 1e-8))
ATTRS(bias_lrelu_attrs, FLT("alpha", alpha, 0, 1, 0.2), FLT("gain", gain, 1e-6, 16, M_SQRT2),
      FLT("bias_scale", bias_scale, 0, 1e12, 1))
ATTRS(modconv_attrs, PAD(0, 10), INT("up", up, 1, 2, 1), INT("demod", demod, 0, 1, 1),
      FLT("eps", eps, 0, 1, 1e-8), FLT("weight_scale", weight_scale, 1e-12, 1e12, 1),
      FLT("bias_scale", bias_scale, 0, 1e12, 1))
ATTRS(conv_t_attrs, INT("stride", stride, 1, 4, 2), PAD(0, 10),
      FLT("weight_scale", weight_scale, 1e-12, 1e12, 1), FLT("bias_scale", bias_scale, 0, 1e12, 1))
ATTRS(upfirdn_attrs, INT("up", up, 1, 4, 1), INT("down", down, 1, 4, 1), PAD(0, 10),
      FLT("gain", gain, 1e-6, 64, 1),
      {"fir", AG_ATTR_FLOATS, OFF(fir), -1e6, 1e6, 0, NULL, OFF(fir_taps)})
ATTRS(range_attrs, INT("c0", c0, 0, 65536, 0), INT("c1", c1, 0, 65536, 0))
ATTRS(noise_attrs, INT("concat", concat, 0, 1, 0))
ATTRS(resample_attrs, INT("up", up, 1, 4, 1), INT("down", down, 1, 4, 1))
ATTRS(up_attrs, INT("up", up, 1, 8, 2))
ATTRS(down_attrs, INT("down", down, 1, 8, 2))
ATTRS(group_norm_attrs, INT("groups", groups, 1, 4096, 32), FLT("eps", eps, 0, 0.999999, 1e-6))
ATTRS(attention_attrs, INT("heads", groups, 1, 64, 1))
ATTRS(adain_attrs, FLT("eps", eps, 0, 0.999999, 1e-5))
ATTRS(add_scaled_attrs, FLT("alpha", alpha, -16, 16, 1))
ATTRS(gate_attrs, FLT("shift", alpha, -1, 1, 0))
ATTRS(dysample_attrs, INT("up", up, 1, 8, 2), INT("groups", groups, 1, 64, 4))

static const ag_tensor_key weight_bias[] = {{"weight", AG_T_WEIGHT}, {"bias", AG_T_BIAS}};
static const ag_tensor_key weight_only[] = {{"weight", AG_T_WEIGHT}};
static const ag_tensor_key bias_only[] = {{"bias", AG_T_BIAS}};
static const ag_tensor_key gamma_beta[] = {{"gamma", AG_T_GAMMA}, {"beta", AG_T_BETA}};
static const ag_tensor_key scale_shift[] = {
    {"scale", AG_T_GAMMA}, {"shift", AG_T_BETA}, {"gamma", AG_T_GAMMA}, {"beta", AG_T_BETA}};
static const ag_tensor_key slope[] = {{"slope", AG_T_GAMMA}, {"gamma", AG_T_GAMMA}};
static const ag_tensor_key noise_keys[] = {{"weight", AG_T_WEIGHT}, {"noise", AG_T_AUX}};

#define SRC(lo, hi) .min_src = lo, .max_src = hi
#define ATTRS_OF(list) .attrs = list, .attr_count = COUNT(list)
#define TENSORS_OF(list) .tensors = list, .tensor_count = COUNT(list)

/* An activation: elementwise, one input. */
#define ACT(op_name, fuse, ...)                                                                    \
    { .name = op_name, SRC(1, 1), .run = ag_run_activation, .fusion = fuse, __VA_ARGS__ }

/* One row per op, fields by name: what is left out is NULL, 0 or AG_FUSE_NONE (see ag_op_desc).
 * test_graph checks that every op has a row. */
const ag_op_desc ag_op_table[AG_OP_COUNT] = {
    [AG_OP_INPUT] = {.name = "input", SRC(0, 0), .channels = ag_channels_input},
    [AG_OP_CONV] = {.name = "conv",
                    SRC(1, 1),
                    ATTRS_OF(conv_attrs),
                    TENSORS_OF(weight_bias),
                    .bind = ag_bind_conv,
                    .check = ag_check_conv,
                    .channels = ag_channels_bound,
                    .shape = ag_shape_window,
                    .flops = ag_flops_conv,
                    .scratch = ag_scratch_padded,
                    .run = ag_run_conv,
                    .fusion = AG_FUSE_CONV},
    [AG_OP_LAYER_NORM] = {.name = "layer_norm",
                          SRC(1, 1),
                          ATTRS_OF(norm_attrs),
                          TENSORS_OF(gamma_beta),
                          .check = ag_check_norm,
                          .run = ag_run_layer_norm,
                          .fusion = AG_FUSE_NORM},
    [AG_OP_INSTANCE_NORM] = {.name = "instance_norm",
                             SRC(1, 1),
                             ATTRS_OF(norm_attrs),
                             TENSORS_OF(gamma_beta),
                             .check = ag_check_norm,
                             .run = ag_run_instance_norm,
                             .fusion = AG_FUSE_NORM},
    [AG_OP_LADE] = {.name = "lade",
                    SRC(1, 1),
                    ATTRS_OF(norm_attrs),
                    TENSORS_OF(weight_only),
                    .bind = ag_bind_lade,
                    .check = ag_check_lade,
                    .flops = ag_flops_lade,
                    .scratch = ag_scratch_input_map,
                    .run = ag_run_lade,
                    .fusion = AG_FUSE_NORM},
    [AG_OP_AFFINE] = {.name = "affine",
                      SRC(1, 1),
                      TENSORS_OF(scale_shift),
                      .check = ag_check_affine,
                      .run = ag_run_affine,
                      .fusion = AG_FUSE_NORM},
    [AG_OP_LRELU] = ACT("lrelu", AG_FUSE_ACT, ATTRS_OF(lrelu_attrs)),
    [AG_OP_PRELU] = {.name = "prelu",
                     SRC(1, 1),
                     TENSORS_OF(slope),
                     .check = ag_check_prelu,
                     .run = ag_run_prelu,
                     .fusion = AG_FUSE_PRELU},
    [AG_OP_RELU] = ACT("relu", AG_FUSE_ACT),
    [AG_OP_RELU6] = ACT("relu6", AG_FUSE_NONE),
    [AG_OP_TANH] = ACT("tanh", AG_FUSE_TANH),
    [AG_OP_SIGMOID] = ACT("sigmoid", AG_FUSE_NONE),
    [AG_OP_ADD] = {.name = "add",
                   SRC(2, 2),
                   .check = ag_check_add,
                   .shape = ag_shape_add,
                   .run = ag_run_add,
                   .fusion = AG_FUSE_ADD},
    [AG_OP_RESIZE] = {.name = "resize",
                      SRC(2, 2),
                      .size_only = 1u << 1,
                      ATTRS_OF(resize_attrs),
                      .shape = ag_shape_resize,
                      .run = ag_run_resize,
                      .fusion = AG_FUSE_RESIZE},
    [AG_OP_RESIZE2X] = {.name = "resize2x",
                        SRC(1, 1),
                        ATTRS_OF(resize_attrs),
                        .shape = ag_shape_resize2x,
                        .run = ag_run_resize,
                        .fusion = AG_FUSE_RESIZE},
    [AG_OP_MATMUL] = {.name = "matmul",
                      SRC(1, 1),
                      ATTRS_OF(matmul_attrs),
                      TENSORS_OF(weight_only),
                      .bind = ag_bind_matmul,
                      .check = ag_check_matmul,
                      .channels = ag_channels_bound,
                      .flops = ag_flops_matmul,
                      .run = ag_run_matmul},
    [AG_OP_SOFTMAX] = {.name = "softmax",
                       SRC(1, 1),
                       ATTRS_OF(softmax_attrs),
                       .run = ag_run_softmax},
    [AG_OP_SUM_NORMALIZE] = {.name = "sum_normalize",
                             SRC(1, 1),
                             ATTRS_OF(sum_norm_attrs),
                             .run = ag_run_sum_normalize},
    [AG_OP_MAX_POOL] = {.name = "max_pool",
                        SRC(1, 1),
                        ATTRS_OF(pool_attrs),
                        .shape = ag_shape_window,
                        .scratch = ag_scratch_padded,
                        .run = ag_run_max_pool},
    [AG_OP_PAD_CHANNELS] = {.name = "pad_channels",
                            SRC(1, 1),
                            ATTRS_OF(pad_channels_attrs),
                            .check = ag_check_pad_channels,
                            .channels = ag_channels_bound,
                            .run = ag_run_pad_channels},
    [AG_OP_CONST] = {.name = "const",
                     SRC(0, 0),
                     TENSORS_OF(weight_only),
                     .bind = ag_bind_const,
                     .check = ag_check_const,
                     .channels = ag_channels_bound,
                     .shape = ag_shape_const,
                     .run = ag_run_const},
    [AG_OP_LINEAR] = {.name = "linear",
                      SRC(1, 1),
                      ATTRS_OF(linear_attrs),
                      TENSORS_OF(weight_bias),
                      .bind = ag_bind_linear,
                      .check = ag_check_linear,
                      .channels = ag_channels_bound,
                      .shape = ag_shape_linear,
                      .flops = ag_flops_linear,
                      .scratch = ag_scratch_linear,
                      .run = ag_run_linear},
    [AG_OP_PIXEL_NORM] = {.name = "pixel_norm",
                          SRC(1, 1),
                          ATTRS_OF(pixel_norm_attrs),
                          .run = ag_run_pixel_norm},
    [AG_OP_BIAS_LRELU] = {.name = "bias_lrelu",
                          SRC(1, 1),
                          ATTRS_OF(bias_lrelu_attrs),
                          TENSORS_OF(bias_only),
                          .bind = ag_bind_bias_lrelu,
                          .run = ag_run_bias_lrelu},
    [AG_OP_MODCONV] = {.name = "modconv",
                       SRC(2, 2),
                       ATTRS_OF(modconv_attrs),
                       TENSORS_OF(weight_bias),
                       .bind = ag_bind_modconv,
                       .check = ag_check_modconv,
                       .channels = ag_channels_bound,
                       .shape = ag_shape_modconv,
                       .flops = ag_flops_modconv,
                       .scratch = ag_scratch_modconv,
                       .run = ag_run_modconv,
                       .pack = ag_pack_modconv},
    [AG_OP_CONV_T] = {.name = "conv_t",
                      SRC(1, 1),
                      ATTRS_OF(conv_t_attrs),
                      TENSORS_OF(weight_bias),
                      .bind = ag_bind_conv_t,
                      .check = ag_check_conv_t,
                      .channels = ag_channels_bound,
                      .shape = ag_shape_conv_t,
                      .flops = ag_flops_conv_t,
                      .run = ag_run_conv_t},
    [AG_OP_UPFIRDN] = {.name = "upfirdn",
                       SRC(1, 1),
                       ATTRS_OF(upfirdn_attrs),
                       .check = ag_check_upfirdn,
                       .shape = ag_shape_upfirdn,
                       .flops = ag_flops_upfirdn,
                       .scratch = ag_scratch_upfirdn,
                       .run = ag_run_upfirdn},
    [AG_OP_CONCAT] = {.name = "concat",
                      SRC(2, AG_NODE_MAX_SRC),
                      .check = ag_check_concat,
                      .channels = ag_channels_concat,
                      .shape = ag_shape_same_size,
                      .run = ag_run_concat},
    [AG_OP_SLICE] = {.name = "slice",
                     SRC(1, 1),
                     ATTRS_OF(range_attrs),
                     .check = ag_check_slice,
                     .channels = ag_channels_slice,
                     .run = ag_run_slice},
    [AG_OP_SFT] = {.name = "sft",
                   SRC(3, 3),
                   ATTRS_OF(range_attrs),
                   .check = ag_check_sft,
                   .shape = ag_shape_same_size,
                   .run = ag_run_sft},
    [AG_OP_NOISE] = {.name = "noise",
                     SRC(1, 2),
                     ATTRS_OF(noise_attrs),
                     TENSORS_OF(noise_keys),
                     .bind = ag_bind_noise,
                     .check = ag_check_noise,
                     .channels = ag_channels_noise,
                     .shape = ag_shape_noise,
                     .run = ag_run_noise},
    [AG_OP_RESAMPLE] = {.name = "resample",
                        SRC(1, 1),
                        ATTRS_OF(resample_attrs),
                        .check = ag_check_resample,
                        .shape = ag_shape_resample,
                        .run = ag_run_resample},
    [AG_OP_NEAREST] = {.name = "nearest",
                       SRC(1, 1),
                       ATTRS_OF(up_attrs),
                       .shape = ag_shape_nearest,
                       .run = ag_run_nearest,
                       .fusion = AG_FUSE_RESIZE},
    [AG_OP_PIXEL_SHUFFLE] = {.name = "pixel_shuffle",
                             SRC(1, 1),
                             ATTRS_OF(up_attrs),
                             .check = ag_check_pixel_shuffle,
                             .channels = ag_channels_pixel_shuffle,
                             .shape = ag_shape_pixel_shuffle,
                             .run = ag_run_pixel_shuffle},
    [AG_OP_PIXEL_UNSHUFFLE] = {.name = "pixel_unshuffle",
                               SRC(1, 1),
                               ATTRS_OF(down_attrs),
                               .channels = ag_channels_pixel_unshuffle,
                               .shape = ag_shape_pixel_unshuffle,
                               .run = ag_run_pixel_unshuffle},
    [AG_OP_ADD_SCALED] = {.name = "add_scaled",
                          SRC(2, 2),
                          ATTRS_OF(add_scaled_attrs),
                          .check = ag_check_add,
                          .shape = ag_shape_add,
                          .run = ag_run_add_scaled},
    [AG_OP_GROUP_NORM] = {.name = "group_norm",
                          SRC(1, 1),
                          ATTRS_OF(group_norm_attrs),
                          TENSORS_OF(gamma_beta),
                          .check = ag_check_group_norm,
                          .run = ag_run_group_norm,
                          .fusion = AG_FUSE_NORM},
    [AG_OP_TOKEN_NORM] = {.name = "token_norm",
                          SRC(1, 1),
                          ATTRS_OF(norm_attrs),
                          TENSORS_OF(gamma_beta),
                          .run = ag_run_token_norm},
    [AG_OP_GELU] = ACT("gelu", AG_FUSE_NONE),
    [AG_OP_ATTENTION] = {.name = "attention",
                         SRC(3, 3),
                         ATTRS_OF(attention_attrs),
                         .check = ag_check_attention,
                         .shape = ag_shape_attention,
                         .flops = ag_flops_attention,
                         .scratch = ag_scratch_attention,
                         .run = ag_run_attention},
    [AG_OP_CODEBOOK] = {.name = "codebook",
                        SRC(1, 1),
                        TENSORS_OF(weight_only),
                        .bind = ag_bind_codebook,
                        .check = ag_check_codebook,
                        .channels = ag_channels_bound,
                        .run = ag_run_codebook},
    [AG_OP_ADAIN] = {.name = "adain",
                     SRC(2, 2),
                     ATTRS_OF(adain_attrs),
                     .check = ag_check_adain,
                     .run = ag_run_adain},
    [AG_OP_SIGMOID_GATE] = {.name = "sigmoid_gate",
                            SRC(2, 2),
                            ATTRS_OF(gate_attrs),
                            .check = ag_check_add,
                            .shape = ag_shape_add,
                            .run = ag_run_sigmoid_gate,
                            .fusion = AG_FUSE_GATE},
    [AG_OP_MISH] = {.name = "mish", SRC(1, 1), .run = ag_run_mish, .fusion = AG_FUSE_GATE},
    [AG_OP_CHANNEL_NORM] = {.name = "channel_norm",
                            SRC(1, 1),
                            ATTRS_OF(norm_attrs),
                            TENSORS_OF(gamma_beta),
                            .check = ag_check_norm_affine,
                            .run = ag_run_channel_norm},
    [AG_OP_DYSAMPLE] = {.name = "dysample",
                        SRC(3, 3),
                        ATTRS_OF(dysample_attrs),
                        .check = ag_check_dysample,
                        .shape = ag_shape_dysample,
                        .run = ag_run_dysample},
};

const ag_op_desc *ag_op_desc_of(ag_op op) {
    return &ag_op_table[op];
}

void ag_op_defaults(ag_node *n) {
    const ag_op_desc *d = ag_op_desc_of(n->op);
    for (int i = 0; i < d->attr_count; i++) {
        const ag_attr *a = &d->attrs[i];
        char *field = (char *)n + a->offset;
        switch (a->kind) {
        case AG_ATTR_INT:
        case AG_ATTR_ENUM: *(int *)field = (int)a->def; break;
        case AG_ATTR_FLOAT: *(float *)field = (float)a->def; break;
        case AG_ATTR_PAD: memset(field, 0, 4 * sizeof(int)); break;
        case AG_ATTR_FLOATS: *(int *)((char *)n + a->count_offset) = 0; break;
        }
    }
}

int ag_attr_fits(const ag_attr *a, double v) {
    if (!(v >= a->lo && v <= a->hi))
        return 0;
    return a->kind == AG_ATTR_FLOAT || a->kind == AG_ATTR_FLOATS || v == floor(v);
}

const char *ag_op_name(ag_op op) {
    return op >= 0 && op < AG_OP_COUNT ? ag_op_table[op].name : "?";
}

int ag_op_parse(const char *name) {
    for (int i = 0; i < AG_OP_COUNT; i++)
        if (name && !strcmp(name, ag_op_table[i].name))
            return i;
    return -1;
}

/* ---- helpers --------------------------------------------------------------------------- */

int ag_op_fail(char *why, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, AG_OP_WHY, fmt, ap);
    va_end(ap);
    return -1;
}

int ag_dims_is(const ag_dims *d, int ndim, int64_t max, const int64_t *want) {
    int n = d->ndim;
    if (ndim == 2 && n == 4 && d->d[2] == 1 && d->d[3] == 1)
        n = 2;
    if (n != ndim)
        return 0;
    for (int i = 0; i < ndim; i++)
        if (d->d[i] < 1 || d->d[i] > max || (want[i] >= 0 && d->d[i] != want[i]))
            return 0;
    return 1;
}

int ag_bind_per_channel(const ag_node *n, int c, const ag_dims *t, char *why) {
    int64_t per_c[1] = {c};
    for (int s = 0; s < AG_NODE_TENSORS; s++) {
        if (!t[s].ndim)
            continue;
        if (s != AG_T_GAMMA && s != AG_T_BETA)
            return ag_op_fail(why, "takes no %s tensor", s == AG_T_WEIGHT ? "weight" : "other");
        if (!ag_dims_is(&t[s], 1, 4096, per_c))
            return ag_op_fail(why, "a per-channel tensor is not (%d)", c);
    }
    (void)n;
    return 0;
}
