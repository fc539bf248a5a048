/*
 * gpen.c - GPEN's FullGenerator (yangxy/GPEN, face_model/gpen_model.py) from its state_dict:
 * the architecture from tensor shapes and the layout every file is checked against.
 *
 * Anchors: generator.input.input (1, C4, 4, 4) gives the 4x4 channels; final_linear.0
 * (D, C4 * 16) the style width; the encoder's ecd1..ecd(L-2) the size S = 2^L; the decoder's
 * generator.convs.{2j}.conv.weight (OC, IC, 3, 3) the channels at 2^(j+3); generator.style.i
 * the mapping depth. GPEN-BFR-512 is S 512, D 512, 8 mapping layers, channel multiplier 2;
 * GPEN-BFR-256 multiplier 1, narrow 0.5; the 1024 and 2048 files follow the same table.
 * The network itself is described in tools/gpen_reference.py.
 */
#include "restore_internal.h"

#include <math.h>
#include <stdio.h>

/* Consecutive indices from `first` for which the formatted name exists. */
static int count_run(const ag_tensor_set *set, const char *fmt, int first, int max) {
    char name[AG_TENSOR_NAME_BYTES];
    int n = 0;
    for (; n < max; n++) {
        snprintf(name, sizeof name, fmt, first + n);
        if (!ag_tensor_set_find(set, name))
            break;
    }
    return n;
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})

static void mod_conv(ag_layout *l, const char *p, int ic, int oc, int k, int d, bool blur) {
    ag_layout_add(l, 4, SHAPE(oc, ic, k, k), "%s.weight", p);
    ag_layout_add(l, 2, SHAPE(ic, d), "%s.modulation.weight", p);
    ag_layout_add(l, 1, SHAPE(ic), "%s.modulation.bias", p);
    if (blur)
        ag_layout_add(l, 2, SHAPE(4, 4), "%s.blur.kernel", p);
}

/* StyledConv: modulated conv, NoiseInjection (concat), FusedLeakyReLU over 2 * OC. */
static void styled_conv(ag_layout *l, const char *p, int ic, int oc, int d, bool up) {
    char conv[AG_TENSOR_NAME_BYTES];
    snprintf(conv, sizeof conv, "%s.conv", p);
    mod_conv(l, conv, ic, oc, 3, d, up);
    ag_layout_add(l, 1, SHAPE(1), "%s.noise.weight", p);
    ag_layout_add(l, 1, SHAPE(2 * oc), "%s.activate.bias", p);
}

static void to_rgb(ag_layout *l, const char *p, int ic, int d, bool up) {
    char conv[AG_TENSOR_NAME_BYTES];
    snprintf(conv, sizeof conv, "%s.conv", p);
    mod_conv(l, conv, ic, 3, 1, d, false);
    ag_layout_add(l, 4, SHAPE(1, 3, 1, 1), "%s.bias", p);
    if (up)
        ag_layout_add(l, 2, SHAPE(4, 4), "%s.upsample.kernel", p);
}

static void gpen_layout(const ag_restore_arch *a, ag_layout *l) {
    const int *ch = a->channels, d = a->style_dim, L = a->log_size;
    char p[AG_TENSOR_NAME_BYTES];
    for (int i = 1; i <= a->n_mlp; i++) {
        ag_layout_add(l, 2, SHAPE(d, d), "generator.style.%d.weight", i);
        ag_layout_add(l, 1, SHAPE(d), "generator.style.%d.bias", i);
    }
    ag_layout_add(l, 4, SHAPE(1, ch[2], 4, 4), "generator.input.input");
    styled_conv(l, "generator.conv1", ch[2], ch[2], d, false);
    to_rgb(l, "generator.to_rgb1", 2 * ch[2], d, false);
    for (int i = 3; i <= L; i++) {
        snprintf(p, sizeof p, "generator.convs.%d", 2 * (i - 3));
        styled_conv(l, p, 2 * ch[i - 1], ch[i], d, true);
        snprintf(p, sizeof p, "generator.convs.%d", 2 * (i - 3) + 1);
        styled_conv(l, p, 2 * ch[i], ch[i], d, false);
        snprintf(p, sizeof p, "generator.to_rgbs.%d", i - 3);
        to_rgb(l, p, 2 * ch[i], d, true);
    }
    ag_layout_add(l, 4, SHAPE(ch[L], 3, 1, 1), "ecd0.0.0.weight");
    ag_layout_add(l, 1, SHAPE(ch[L]), "ecd0.0.1.bias");
    for (int n = 1; n <= L - 2; n++) { /* ecd n: 2^(L-n+1) -> 2^(L-n) */
        ag_layout_add(l, 2, SHAPE(4, 4), "ecd%d.0.0.kernel", n);
        ag_layout_add(l, 4, SHAPE(ch[L - n], ch[L - n + 1], 3, 3), "ecd%d.0.1.weight", n);
        ag_layout_add(l, 1, SHAPE(ch[L - n]), "ecd%d.0.2.bias", n);
    }
    ag_layout_add(l, 2, SHAPE(d, ch[2] * 16), "final_linear.0.weight");
    ag_layout_add(l, 1, SHAPE(d), "final_linear.0.bias");
}

int ag_gpen_arch(const ag_tensor_set *set, const char *path, ag_restore_arch *a, ag_layout *l,
                 ag_error *err) {
    a->kind = AG_RESTORE_GPEN;
    a->n_latent = 1;
    int n_enc = count_run(set, "ecd%d.0.1.weight", 1, AG_RESTORE_MAX_LOG);
    a->log_size = n_enc + 2;
    a->size = 1 << a->log_size;
    snprintf(l->net, sizeof l->net, "GPEN %dx%d", a->size, a->size);
    if (n_enc < 1 || a->log_size > AG_RESTORE_MAX_LOG)
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: %d encoder stages ecd1.. (GPEN has 1 to %d: sizes 8 to 2048)",
                            path, n_enc, AG_RESTORE_MAX_LOG - 2);
    a->n_mlp = count_run(set, "generator.style.%d.weight", 1, 32);
    int64_t c4 = ag_restore_dim(set, "generator.input.input", 4, 1, path, l->net, err);
    int64_t d = c4 < 0 ? -1 : ag_restore_dim(set, "final_linear.0.weight", 2, 0, path, l->net, err);
    if (d < 0)
        return AG_E_FORMAT;
    a->style_dim = (int)d;
    a->channels[2] = (int)c4;
    for (int i = 3; i <= a->log_size; i++) {
        char name[AG_TENSOR_NAME_BYTES];
        snprintf(name, sizeof name, "generator.convs.%d.conv.weight", 2 * (i - 3));
        int64_t c = ag_restore_dim(set, name, 4, 0, path, l->net, err);
        if (c < 0)
            return AG_E_FORMAT;
        a->channels[i] = (int)c;
    }
    gpen_layout(a, l);
    return AG_OK;
}

/* ---- the graph ------------------------------------------------------------------------- */

#define SQRT2 1.41421356f

/* FusedLeakyReLU: lrelu(x + bias * bias_scale, 0.2) * sqrt(2). */
static int bias_lrelu(ag_rgraph *b, const char *p, const char *bias, int x, float bias_scale) {
    ag_node n = ag_rg_node(AG_OP_BIAS_LRELU, p, "act", x, -1);
    n.tensor[AG_T_BIAS] = ag_rg_tensor(b, "%s.%s", p, bias);
    n.alpha = 0.2f;
    n.gain = SQRT2;
    n.bias_scale = bias_scale;
    return ag_rg_add(b, &n);
}

/* upfirdn2d with the [1, 3, 3, 1] kernel: pads [top, bottom, left, right]. */
static int blur(ag_rgraph *b, const char *p, int x, int up, int pad0, int pad1, float gain) {
    ag_node n = ag_rg_node(AG_OP_UPFIRDN, p, "blur", x, -1);
    n.up = up;
    n.pad[0] = n.pad[2] = pad0;
    n.pad[1] = n.pad[3] = pad1;
    n.gain = gain;
    return ag_rg_add(b, &n);
}

/* The encoder: ecd0 (1x1) at S, then blur + 3x3 stride 2 down to 4x4; feat[i] is the map at
 * 2^i. Returns the 4x4 map. */
static int encoder(ag_rgraph *b, const ag_restore_arch *a, int *feat) {
    const int L = a->log_size;
    char p[32];
    int x = ag_rg_conv(b, "ecd0.0.0", 0, 1, 1, 0, false, 1.0f / sqrtf(3.0f));
    feat[L] = x = bias_lrelu(b, "ecd0.0", "1.bias", x, 1.0f);
    for (int n = 1; n <= L - 2; n++) {
        int cin = a->channels[L - n + 1];
        snprintf(p, sizeof p, "ecd%d.0.1", n);
        x = blur(b, p, x, 1, 2, 2, 1.0f);
        x = ag_rg_conv(b, p, x, 3, 2, 0, false, 1.0f / sqrtf(9.0f * (float)cin));
        snprintf(p, sizeof p, "ecd%d.0", n);
        feat[L - n] = x = bias_lrelu(b, p, "2.bias", x, 1.0f);
    }
    return x;
}

/* final_linear + FusedLeakyReLU, pixel norm, the mapping MLP (lr_mul 0.01): the style w. */
static int style(ag_rgraph *b, const ag_restore_arch *a, int x4) {
    ag_node n = ag_rg_node(AG_OP_LINEAR, "final_linear.0", "linear", x4, -1);
    n.tensor[AG_T_WEIGHT] = ag_rg_tensor(b, "final_linear.0.weight");
    n.weight_scale = 1.0f / sqrtf(16.0f * (float)a->channels[2]);
    int z = bias_lrelu(b, "final_linear.0", "bias", ag_rg_add(b, &n), 1.0f);
    ag_node pn = ag_rg_node(AG_OP_PIXEL_NORM, "generator.style", "0", z, -1);
    pn.eps = 1e-8f;
    int w = ag_rg_add(b, &pn);
    const float lr_mul = 0.01f; /* upstream's lr_mlp, not in the file */
    for (int i = 1; i <= a->n_mlp; i++) {
        char p[40];
        snprintf(p, sizeof p, "generator.style.%d", i);
        ag_node l = ag_rg_node(AG_OP_LINEAR, p, "linear", w, -1);
        l.tensor[AG_T_WEIGHT] = ag_rg_tensor(b, "%s.weight", p);
        l.weight_scale = lr_mul / sqrtf((float)a->style_dim);
        w = bias_lrelu(b, p, "bias", ag_rg_add(b, &l), lr_mul);
    }
    return w;
}

/* StyledConv: modulated conv [transposed, stride 2, then blur], the encoder feature
 * concatenated in (NoiseInjection), FusedLeakyReLU over both halves. */
static int styled_conv_node(ag_rgraph *b, const ag_restore_arch *a, const char *p, int x, int w,
                            int feat, bool up) {
    char conv[48];
    snprintf(conv, sizeof conv, "%s.conv", p);
    const ag_tensor_ref *wt = &b->set->tensors[ag_rg_tensor(b, "%s.weight", conv)];
    float fan_in = (float)(wt->shape[1] * 9);
    int y = ag_rg_modconv(b, conv, x, w, 1.0f / sqrtf((float)a->style_dim), 1.0f / sqrtf(fan_in),
                          true, up, -1);
    if (up)
        y = blur(b, conv, y, 1, 1, 1, 4.0f);
    ag_node n = ag_rg_node(AG_OP_NOISE, p, "noise", y, feat);
    n.tensor[AG_T_WEIGHT] = ag_rg_tensor(b, "%s.noise.weight", p);
    n.concat = 1;
    return bias_lrelu(b, p, "activate.bias", ag_rg_add(b, &n), 1.0f);
}

/* ToRGB: 1x1 modulated conv without demodulation + bias, plus the upsampled skip. */
static int to_rgb_node(ag_rgraph *b, const ag_restore_arch *a, const char *p, int x, int w,
                       int skip) {
    char conv[48];
    snprintf(conv, sizeof conv, "%s.conv", p);
    const ag_tensor_ref *wt = &b->set->tensors[ag_rg_tensor(b, "%s.weight", conv)];
    int y = ag_rg_modconv(b, conv, x, w, 1.0f / sqrtf((float)a->style_dim),
                          1.0f / sqrtf((float)wt->shape[1]), false, false,
                          ag_rg_tensor(b, "%s.bias", p));
    if (skip < 0)
        return y;
    int up = blur(b, p, skip, 2, 2, 1, 4.0f);
    ag_node add = ag_rg_node(AG_OP_ADD, p, "skip", y, up);
    return ag_rg_add(b, &add);
}

int ag_gpen_graph(const ag_restore_arch *a, const ag_tensor_set *set, ag_graph *g, ag_error *err) {
    ag_graph_init(g);
    ag_rgraph b = {.g = g, .set = set, .err = err};
    int feat[AG_RESTORE_MAX_LOG + 1];
    int w = style(&b, a, encoder(&b, a, feat));
    ag_node c = ag_rg_node(AG_OP_CONST, "generator.input", "input", -1, -1);
    c.tensor[AG_T_WEIGHT] = ag_rg_tensor(&b, "generator.input.input");
    int x = styled_conv_node(&b, a, "generator.conv1", ag_rg_add(&b, &c), w, feat[2], false);
    int skip = to_rgb_node(&b, a, "generator.to_rgb1", x, w, -1);
    for (int i = 3; i <= a->log_size; i++) {
        char p[40];
        snprintf(p, sizeof p, "generator.convs.%d", 2 * (i - 3));
        x = styled_conv_node(&b, a, p, x, w, feat[i], true);
        snprintf(p, sizeof p, "generator.convs.%d", 2 * (i - 3) + 1);
        x = styled_conv_node(&b, a, p, x, w, feat[i], false);
        snprintf(p, sizeof p, "generator.to_rgbs.%d", i - 3);
        skip = to_rgb_node(&b, a, p, x, w, skip);
    }
    if (b.failed)
        return err->code;
    return ag_graph_add_output(g, skip, err);
}
