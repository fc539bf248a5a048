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

#define A(list) list, COUNT(list)
#define T(list) list, COUNT(list)
#define NO_ATTRS NULL, 0
#define NO_TENSORS NULL, 0

/* An activation: elementwise, one input. */
#define ACT(op_name, attrs, fuse)                                                                  \
    {                                                                                              \
        op_name, 1, 1, 0, attrs, NO_TENSORS, NULL, NULL, NULL, NULL, NULL, NULL,                   \
            ag_run_activation, fuse, NULL                                                          \
    }

const ag_op_desc ag_op_table[AG_OP_COUNT] = {
    [AG_OP_INPUT] = {"input", 0, 0, 0, NO_ATTRS, NO_TENSORS, NULL, NULL, ag_channels_input, NULL,
                     NULL, NULL, NULL, AG_FUSE_NONE, NULL},
    [AG_OP_CONV] = {"conv", 1, 1, 0, A(conv_attrs), T(weight_bias), ag_bind_conv, ag_check_conv,
                    ag_channels_bound, ag_shape_window, ag_flops_conv, ag_scratch_padded,
                    ag_run_conv, AG_FUSE_CONV, NULL},
    [AG_OP_LAYER_NORM] = {"layer_norm", 1, 1, 0, A(norm_attrs), T(gamma_beta), NULL, ag_check_norm,
                          NULL, NULL, NULL, NULL, ag_run_layer_norm, AG_FUSE_NORM, NULL},
    [AG_OP_INSTANCE_NORM] = {"instance_norm", 1, 1, 0, A(norm_attrs), T(gamma_beta), NULL,
                             ag_check_norm, NULL, NULL, NULL, NULL, ag_run_instance_norm,
                             AG_FUSE_NORM, NULL},
    [AG_OP_LADE] = {"lade", 1, 1, 0, A(norm_attrs), T(weight_only), ag_bind_lade, ag_check_lade,
                    NULL, NULL, ag_flops_lade, ag_scratch_input_map, ag_run_lade, AG_FUSE_NORM,
                    NULL},
    [AG_OP_AFFINE] = {"affine", 1, 1, 0, NO_ATTRS, T(scale_shift), NULL, ag_check_affine, NULL,
                      NULL, NULL, NULL, ag_run_affine, AG_FUSE_NORM, NULL},
    [AG_OP_LRELU] = ACT("lrelu", A(lrelu_attrs), AG_FUSE_ACT),
    [AG_OP_PRELU] = {"prelu", 1, 1, 0, NO_ATTRS, T(slope), NULL, ag_check_prelu, NULL, NULL, NULL,
                     NULL, ag_run_prelu, AG_FUSE_PRELU, NULL},
    [AG_OP_RELU] = ACT("relu", NO_ATTRS, AG_FUSE_ACT),
    [AG_OP_RELU6] = ACT("relu6", NO_ATTRS, AG_FUSE_NONE),
    [AG_OP_TANH] = ACT("tanh", NO_ATTRS, AG_FUSE_TANH),
    [AG_OP_SIGMOID] = ACT("sigmoid", NO_ATTRS, AG_FUSE_NONE),
    [AG_OP_ADD] = {"add", 2, 2, 0, NO_ATTRS, NO_TENSORS, NULL, ag_check_add, NULL, ag_shape_add,
                   NULL, NULL, ag_run_add, AG_FUSE_ADD, NULL},
    [AG_OP_RESIZE] = {"resize", 2, 2, 1u << 1, A(resize_attrs), NO_TENSORS, NULL, NULL, NULL,
                      ag_shape_resize, NULL, NULL, ag_run_resize, AG_FUSE_RESIZE, NULL},
    [AG_OP_RESIZE2X] = {"resize2x", 1, 1, 0, A(resize_attrs), NO_TENSORS, NULL, NULL, NULL,
                        ag_shape_resize2x, NULL, NULL, ag_run_resize, AG_FUSE_RESIZE, NULL},
    [AG_OP_MATMUL] = {"matmul", 1, 1, 0, A(matmul_attrs), T(weight_only), ag_bind_matmul,
                      ag_check_matmul, ag_channels_bound, NULL, ag_flops_matmul, NULL,
                      ag_run_matmul, AG_FUSE_NONE, NULL},
    [AG_OP_SOFTMAX] = {"softmax", 1, 1, 0, A(softmax_attrs), NO_TENSORS, NULL, NULL, NULL, NULL,
                       NULL, NULL, ag_run_softmax, AG_FUSE_NONE, NULL},
    [AG_OP_SUM_NORMALIZE] = {"sum_normalize", 1, 1, 0, A(sum_norm_attrs), NO_TENSORS, NULL, NULL,
                             NULL, NULL, NULL, NULL, ag_run_sum_normalize, AG_FUSE_NONE, NULL},
    [AG_OP_MAX_POOL] = {"max_pool", 1, 1, 0, A(pool_attrs), NO_TENSORS, NULL, NULL, NULL,
                        ag_shape_window, NULL, ag_scratch_padded, ag_run_max_pool, AG_FUSE_NONE,
                        NULL},
    [AG_OP_PAD_CHANNELS] = {"pad_channels", 1, 1, 0, A(pad_channels_attrs), NO_TENSORS, NULL,
                            ag_check_pad_channels, ag_channels_bound, NULL, NULL, NULL,
                            ag_run_pad_channels, AG_FUSE_NONE, NULL},
    [AG_OP_CONST] = {"const", 0, 0, 0, NO_ATTRS, T(weight_only), ag_bind_const, ag_check_const,
                     ag_channels_bound, ag_shape_const, NULL, NULL, ag_run_const, AG_FUSE_NONE,
                     NULL},
    [AG_OP_LINEAR] = {"linear", 1, 1, 0, A(linear_attrs), T(weight_bias), ag_bind_linear,
                      ag_check_linear, ag_channels_bound, ag_shape_linear, ag_flops_linear,
                      ag_scratch_linear, ag_run_linear, AG_FUSE_NONE, NULL},
    [AG_OP_PIXEL_NORM] = {"pixel_norm", 1, 1, 0, A(pixel_norm_attrs), NO_TENSORS, NULL, NULL, NULL,
                          NULL, NULL, NULL, ag_run_pixel_norm, AG_FUSE_NONE, NULL},
    [AG_OP_BIAS_LRELU] = {"bias_lrelu", 1, 1, 0, A(bias_lrelu_attrs), T(bias_only),
                          ag_bind_bias_lrelu, NULL, NULL, NULL, NULL, NULL, ag_run_bias_lrelu,
                          AG_FUSE_NONE, NULL},
    [AG_OP_MODCONV] = {"modconv", 2, 2, 0, A(modconv_attrs), T(weight_bias), ag_bind_modconv,
                       ag_check_modconv, ag_channels_bound, ag_shape_modconv, ag_flops_modconv,
                       ag_scratch_modconv, ag_run_modconv, AG_FUSE_NONE, ag_pack_modconv},
    [AG_OP_CONV_T] = {"conv_t", 1, 1, 0, A(conv_t_attrs), T(weight_bias), ag_bind_conv_t,
                      ag_check_conv_t, ag_channels_bound, ag_shape_conv_t, ag_flops_conv_t, NULL,
                      ag_run_conv_t, AG_FUSE_NONE, NULL},
    [AG_OP_UPFIRDN] = {"upfirdn", 1, 1, 0, A(upfirdn_attrs), NO_TENSORS, NULL, ag_check_upfirdn,
                       NULL, ag_shape_upfirdn, ag_flops_upfirdn, ag_scratch_upfirdn, ag_run_upfirdn,
                       AG_FUSE_NONE, NULL},
    [AG_OP_CONCAT] = {"concat", 2, AG_NODE_MAX_SRC, 0, NO_ATTRS, NO_TENSORS, NULL, ag_check_concat,
                      ag_channels_concat, ag_shape_same_size, NULL, NULL, ag_run_concat,
                      AG_FUSE_NONE, NULL},
    [AG_OP_SLICE] = {"slice", 1, 1, 0, A(range_attrs), NO_TENSORS, NULL, ag_check_slice,
                     ag_channels_slice, NULL, NULL, NULL, ag_run_slice, AG_FUSE_NONE, NULL},
    [AG_OP_SFT] = {"sft", 3, 3, 0, A(range_attrs), NO_TENSORS, NULL, ag_check_sft, NULL,
                   ag_shape_same_size, NULL, NULL, ag_run_sft, AG_FUSE_NONE, NULL},
    [AG_OP_NOISE] = {"noise", 1, 2, 0, A(noise_attrs), T(noise_keys), ag_bind_noise, ag_check_noise,
                     ag_channels_noise, ag_shape_noise, NULL, NULL, ag_run_noise, AG_FUSE_NONE,
                     NULL},
    [AG_OP_RESAMPLE] = {"resample", 1, 1, 0, A(resample_attrs), NO_TENSORS, NULL, ag_check_resample,
                        NULL, ag_shape_resample, NULL, NULL, ag_run_resample, AG_FUSE_NONE, NULL},
    [AG_OP_NEAREST] = {"nearest", 1, 1, 0, A(up_attrs), NO_TENSORS, NULL, NULL, NULL,
                       ag_shape_nearest, NULL, NULL, ag_run_nearest, AG_FUSE_NONE, NULL},
    [AG_OP_PIXEL_SHUFFLE] = {"pixel_shuffle", 1, 1, 0, A(up_attrs), NO_TENSORS, NULL,
                             ag_check_pixel_shuffle, ag_channels_pixel_shuffle,
                             ag_shape_pixel_shuffle, NULL, NULL, ag_run_pixel_shuffle, AG_FUSE_NONE,
                             NULL},
    [AG_OP_PIXEL_UNSHUFFLE] = {"pixel_unshuffle", 1, 1, 0, A(down_attrs), NO_TENSORS, NULL, NULL,
                               ag_channels_pixel_unshuffle, ag_shape_pixel_unshuffle, NULL, NULL,
                               ag_run_pixel_unshuffle, AG_FUSE_NONE, NULL},
    [AG_OP_ADD_SCALED] = {"add_scaled", 2, 2, 0, A(add_scaled_attrs), NO_TENSORS, NULL,
                          ag_check_add, NULL, ag_shape_add, NULL, NULL, ag_run_add_scaled,
                          AG_FUSE_NONE, NULL},
    [AG_OP_GROUP_NORM] = {"group_norm", 1, 1, 0, A(group_norm_attrs), T(gamma_beta), NULL,
                          ag_check_group_norm, NULL, NULL, NULL, NULL, ag_run_group_norm,
                          AG_FUSE_NORM, NULL},
    [AG_OP_TOKEN_NORM] = {"token_norm", 1, 1, 0, A(norm_attrs), T(gamma_beta), NULL, NULL, NULL,
                          NULL, NULL, NULL, ag_run_token_norm, AG_FUSE_NONE, NULL},
    [AG_OP_GELU] = ACT("gelu", NO_ATTRS, AG_FUSE_NONE),
    [AG_OP_ATTENTION] = {"attention", 3, 3, 0, A(attention_attrs), NO_TENSORS, NULL,
                         ag_check_attention, NULL, ag_shape_attention, ag_flops_attention,
                         ag_scratch_attention, ag_run_attention, AG_FUSE_NONE, NULL},
    [AG_OP_CODEBOOK] = {"codebook", 1, 1, 0, NO_ATTRS, T(weight_only), ag_bind_codebook,
                        ag_check_codebook, ag_channels_bound, NULL, NULL, NULL, ag_run_codebook,
                        AG_FUSE_NONE, NULL},
    [AG_OP_ADAIN] = {"adain", 2, 2, 0, A(adain_attrs), NO_TENSORS, NULL, ag_check_adain, NULL, NULL,
                     NULL, NULL, ag_run_adain, AG_FUSE_NONE, NULL},
    [AG_OP_SIGMOID_GATE] = {"sigmoid_gate", 2, 2, 0, A(gate_attrs), NO_TENSORS, NULL, ag_check_add,
                            NULL, ag_shape_add, NULL, NULL, ag_run_sigmoid_gate, AG_FUSE_GATE,
                            NULL},
    [AG_OP_MISH] = {"mish", 1, 1, 0, NO_ATTRS, NO_TENSORS, NULL, NULL, NULL, NULL, NULL, NULL,
                    ag_run_mish, AG_FUSE_GATE, NULL},
    [AG_OP_CHANNEL_NORM] = {"channel_norm", 1, 1, 0, A(norm_attrs), T(gamma_beta), NULL,
                            ag_check_norm_affine, NULL, NULL, NULL, NULL, ag_run_channel_norm,
                            AG_FUSE_NONE, NULL},
    [AG_OP_DYSAMPLE] = {"dysample", 3, 3, 0, A(dysample_attrs), NO_TENSORS, NULL, ag_check_dysample,
                        NULL, ag_shape_dysample, NULL, NULL, ag_run_dysample, AG_FUSE_NONE, NULL},
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
