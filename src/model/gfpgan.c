/*
 * gfpgan.c - GFPGAN's GFPGANv1Clean (TencentARC/GFPGAN, gfpgan/archs/gfpganv1_clean_arch.py)
 * from its state_dict: the architecture from tensor shapes and the layout every file is
 * checked against.
 *
 * Anchors: conv_body_down.{n} counts the U-Net's stages (size S = 2^(stages + 2));
 * conv_body_first, conv_body_down.{n}.conv2 and final_conv give the U-Net's channels;
 * stylegan_decoder.constant_input and style_convs.{2j} the decoder's; the style width is the
 * modulation's input; condition_scale.0.2 says whether SFT covers half the channels.
 * GFPGANv1.3 / v1.4 are S 512, style 512, channel multiplier 2, sft_half, one w per decoder
 * layer (final_linear has (2 log S - 2) * 512 outputs). The network is described in
 * tools/gfpgan_reference.py.
 */
#include "restore_internal.h"

#include <math.h>
#include <stdio.h>

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})

static void conv(ag_layout *l, const char *p, int ic, int oc, int k, bool bias) {
    ag_layout_add(l, 4, SHAPE(oc, ic, k, k), "%s.weight", p);
    if (bias)
        ag_layout_add(l, 1, SHAPE(oc), "%s.bias", p);
}

/* ResBlock: conv1 3x3, conv2 3x3 (after the bilinear resize), skip 1x1 without bias. */
static void res_block(ag_layout *l, const char *stage, int n, int ic, int oc) {
    char p[AG_TENSOR_NAME_BYTES];
    snprintf(p, sizeof p, "%s.%d.conv1", stage, n);
    conv(l, p, ic, ic, 3, true);
    snprintf(p, sizeof p, "%s.%d.conv2", stage, n);
    conv(l, p, ic, oc, 3, true);
    snprintf(p, sizeof p, "%s.%d.skip", stage, n);
    conv(l, p, ic, oc, 1, false);
}

static void mod_conv(ag_layout *l, const char *p, int ic, int oc, int k, int d) {
    ag_layout_add(l, 4, SHAPE(oc, ic, k, k), "%s.modulated_conv.weight", p);
    ag_layout_add(l, 2, SHAPE(ic, d), "%s.modulated_conv.modulation.weight", p);
    ag_layout_add(l, 1, SHAPE(ic), "%s.modulated_conv.modulation.bias", p);
}

/* StyleConv: modulated conv, the noise weight (a scalar) and a per-channel bias. */
static void style_conv(ag_layout *l, const char *p, int ic, int oc, int d) {
    mod_conv(l, p, ic, oc, 3, d);
    ag_layout_add(l, 1, SHAPE(1), "%s.weight", p);
    ag_layout_add(l, 4, SHAPE(1, oc, 1, 1), "%s.bias", p);
}

static void to_rgb(ag_layout *l, const char *p, int ic, int d) {
    mod_conv(l, p, ic, 3, 1, d);
    ag_layout_add(l, 4, SHAPE(1, 3, 1, 1), "%s.bias", p);
}

static void unet_layout(const ag_restore_arch *a, ag_layout *l) {
    const int *un = a->unet, L = a->log_size;
    char p[AG_TENSOR_NAME_BYTES];
    conv(l, "conv_body_first", 3, un[L], 1, true);
    for (int n = 0; n <= L - 3; n++)
        res_block(l, "conv_body_down", n, un[L - n], un[L - n - 1]);
    conv(l, "final_conv", un[2], un[2], 3, true);
    for (int n = 0; n <= L - 3; n++) {
        res_block(l, "conv_body_up", n, un[n + 2], un[n + 3]);
        snprintf(p, sizeof p, "toRGB.%d", n);
        conv(l, p, un[n + 3], 3, 1, true);
        int sft = a->sft_half ? un[n + 3] : 2 * un[n + 3];
        for (int k = 0; k < 2; k++) {
            const char *kind = k ? "condition_shift" : "condition_scale";
            snprintf(p, sizeof p, "%s.%d.0", kind, n);
            conv(l, p, un[n + 3], un[n + 3], 3, true);
            snprintf(p, sizeof p, "%s.%d.2", kind, n);
            conv(l, p, un[n + 3], sft, 3, true);
        }
    }
    int64_t rows = (int64_t)a->n_latent * a->style_dim;
    ag_layout_add(l, 2, SHAPE(rows, un[2] * 16), "final_linear.weight");
    ag_layout_add(l, 1, SHAPE(rows), "final_linear.bias");
}

static void decoder_layout(const ag_restore_arch *a, ag_layout *l) {
    const int *ch = a->channels, d = a->style_dim, L = a->log_size;
    char p[AG_TENSOR_NAME_BYTES];
    for (int i = 0; i < a->n_mlp; i++) {
        ag_layout_add(l, 2, SHAPE(d, d), "stylegan_decoder.style_mlp.%d.weight", 2 * i + 1);
        ag_layout_add(l, 1, SHAPE(d), "stylegan_decoder.style_mlp.%d.bias", 2 * i + 1);
    }
    ag_layout_add(l, 4, SHAPE(1, ch[2], 4, 4), "stylegan_decoder.constant_input.weight");
    style_conv(l, "stylegan_decoder.style_conv1", ch[2], ch[2], d);
    to_rgb(l, "stylegan_decoder.to_rgb1", ch[2], d);
    for (int i = 3; i <= L; i++) {
        snprintf(p, sizeof p, "stylegan_decoder.style_convs.%d", 2 * (i - 3));
        style_conv(l, p, ch[i - 1], ch[i], d);
        snprintf(p, sizeof p, "stylegan_decoder.style_convs.%d", 2 * (i - 3) + 1);
        style_conv(l, p, ch[i], ch[i], d);
        snprintf(p, sizeof p, "stylegan_decoder.to_rgbs.%d", i - 3);
        to_rgb(l, p, ch[i], d);
    }
    for (int k = 0; k <= 2 * (L - 2); k++) { /* one per StyleConv, at its resolution */
        int64_t r = 1 << ((k + 5) / 2);
        ag_layout_add(l, 4, SHAPE(1, 1, r, r), "stylegan_decoder.noises.noise%d", k);
    }
}

/* Channels of the anchors; AG_E_FORMAT naming the first missing or odd one. */
static int read_channels(const ag_tensor_set *set, const char *path, ag_restore_arch *a,
                         const char *net, ag_error *err) {
    char name[AG_TENSOR_NAME_BYTES];
    const int L = a->log_size;
    int64_t v = ag_restore_dim(set, "conv_body_first.weight", 4, 0, path, net, err);
    if (v < 0)
        return AG_E_FORMAT;
    a->unet[L] = (int)v;
    for (int n = 0; n <= L - 3; n++) {
        snprintf(name, sizeof name, "conv_body_down.%d.conv2.weight", n);
        if ((v = ag_restore_dim(set, name, 4, 0, path, net, err)) < 0)
            return AG_E_FORMAT;
        a->unet[L - n - 1] = (int)v;
    }
    const char *c4 = "stylegan_decoder.constant_input.weight";
    if ((v = ag_restore_dim(set, c4, 4, 1, path, net, err)) < 0)
        return AG_E_FORMAT;
    a->channels[2] = (int)v;
    for (int i = 3; i <= L; i++) {
        snprintf(name, sizeof name, "stylegan_decoder.style_convs.%d.modulated_conv.weight",
                 2 * (i - 3));
        if ((v = ag_restore_dim(set, name, 4, 0, path, net, err)) < 0)
            return AG_E_FORMAT;
        a->channels[i] = (int)v;
        if (a->channels[i] != 2 * a->unet[i]) /* SFT pairs a U-Net map with a decoder map */
            return ag_error_set(err, AG_E_FORMAT,
                                "%s: tensor '%s' has %d output channels where the U-Net's %d "
                                "at %dx%d make %s expect %d",
                                path, name, a->channels[i], a->unet[i], 1 << i, 1 << i, net,
                                2 * a->unet[i]);
    }
    return AG_OK;
}

int ag_gfpgan_arch(const ag_tensor_set *set, const char *path, ag_restore_arch *a, ag_layout *l,
                   ag_error *err) {
    a->kind = AG_RESTORE_GFPGAN;
    int n_down = 0;
    for (char name[AG_TENSOR_NAME_BYTES]; n_down < AG_RESTORE_MAX_LOG; n_down++) {
        snprintf(name, sizeof name, "conv_body_down.%d.conv1.weight", n_down);
        if (!ag_tensor_set_find(set, name))
            break;
    }
    a->log_size = n_down + 2;
    a->size = 1 << a->log_size;
    snprintf(l->net, sizeof l->net, "GFPGAN %dx%d", a->size, a->size);
    if (n_down < 1 || a->log_size > 10)
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: %d U-Net stages conv_body_down.* (GFPGAN has 1 to 8: sizes 8 "
                            "to 1024)",
                            path, n_down);
    const char *mod = "stylegan_decoder.style_conv1.modulated_conv.modulation.weight";
    int64_t d = ag_restore_dim(set, mod, 2, 1, path, l->net, err);
    if (d < 0)
        return AG_E_FORMAT;
    a->style_dim = (int)d;
    a->n_latent = 2 * a->log_size - 2;
    for (char name[AG_TENSOR_NAME_BYTES]; a->n_mlp < 32; a->n_mlp++) {
        snprintf(name, sizeof name, "stylegan_decoder.style_mlp.%d.weight", 2 * a->n_mlp + 1);
        if (!ag_tensor_set_find(set, name))
            break;
    }
    int rc = read_channels(set, path, a, l->net, err);
    if (rc != AG_OK)
        return rc;
    int64_t sft = ag_restore_dim(set, "condition_scale.0.2.weight", 4, 0, path, l->net, err);
    if (sft < 0)
        return AG_E_FORMAT;
    a->sft_half = sft == a->unet[3];
    unet_layout(a, l);
    decoder_layout(a, l);
    return AG_OK;
}

/* ---- the graph ------------------------------------------------------------------------- */

#define SQRT1_2 0.70710678f

static int lrelu(ag_rgraph *b, const char *p, int x) {
    return ag_rg_unary(b, AG_OP_LRELU, p, "act", x);
}

/* Bilinear (align_corners False) by 2 up or down. */
static int resample(ag_rgraph *b, const char *p, const char *suffix, int x, bool up) {
    ag_node n = ag_rg_node(AG_OP_RESAMPLE, p, suffix, x, -1);
    n.up = up ? 2 : 1;
    n.down = up ? 1 : 2;
    return ag_rg_add(b, &n);
}

/* ResBlock: lrelu(conv1), resample, lrelu(conv2); plus the 1x1 skip of the resampled x. */
static int res_block_node(ag_rgraph *b, const char *stage, int index, int x, bool up) {
    char p[48], c[AG_TENSOR_NAME_BYTES];
    snprintf(p, sizeof p, "%s.%d", stage, index);
    snprintf(c, sizeof c, "%s.conv1", p);
    int y = lrelu(b, c, ag_rg_conv(b, c, x, 3, 1, -1, true, 1.0f));
    y = resample(b, c, "resample", y, up);
    snprintf(c, sizeof c, "%s.conv2", p);
    y = lrelu(b, c, ag_rg_conv(b, c, y, 3, 1, -1, true, 1.0f));
    snprintf(c, sizeof c, "%s.skip", p);
    int s = ag_rg_conv(b, c, resample(b, c, "resample", x, up), 1, 1, 0, false, 1.0f);
    ag_node add = ag_rg_node(AG_OP_ADD, p, "add", y, s);
    return ag_rg_add(b, &add);
}

/* condition_{scale,shift}.n: conv3, lrelu, conv3. */
static int condition(ag_rgraph *b, const char *kind, int n, int x) {
    char p[48];
    snprintf(p, sizeof p, "%s.%d.0", kind, n);
    int y = lrelu(b, p, ag_rg_conv(b, p, x, 3, 1, -1, true, 1.0f));
    snprintf(p, sizeof p, "%s.%d.2", kind, n);
    return ag_rg_conv(b, p, y, 3, 1, -1, true, 1.0f);
}

/* The U-Net: the latents (1, 1, (2L - 2) D) and the SFT scale / shift maps per size 2^i. */
static int unet(ag_rgraph *b, const ag_restore_arch *a, int *scale, int *shift) {
    const int L = a->log_size;
    int skips[AG_RESTORE_MAX_LOG + 1];
    int x = lrelu(b, "conv_body_first", ag_rg_conv(b, "conv_body_first", 0, 1, 1, 0, true, 1.0f));
    for (int n = 0; n <= L - 3; n++)
        skips[L - n - 1] = x = res_block_node(b, "conv_body_down", n, x, false);
    x = lrelu(b, "final_conv", ag_rg_conv(b, "final_conv", x, 3, 1, -1, true, 1.0f));
    ag_node lin = ag_rg_node(AG_OP_LINEAR, "final_linear", "linear", x, -1);
    lin.tensor[AG_T_WEIGHT] = ag_rg_tensor(b, "final_linear.weight");
    lin.tensor[AG_T_BIAS] = ag_rg_tensor(b, "final_linear.bias");
    int latents = ag_rg_add(b, &lin);
    for (int n = 0; n <= L - 3; n++) {
        char p[32];
        snprintf(p, sizeof p, "conv_body_up.%d", n);
        ag_node add = ag_rg_node(AG_OP_ADD, p, "unet_skip", x, skips[n + 2]);
        x = res_block_node(b, "conv_body_up", n, ag_rg_add(b, &add), true);
        scale[n + 3] = condition(b, "condition_scale", n, x);
        shift[n + 3] = condition(b, "condition_shift", n, x);
    }
    return latents;
}

/* Latent i of the decoder: channels [i D, (i + 1) D) of final_linear's output. */
static int latent(ag_rgraph *b, const ag_restore_arch *a, const char *p, int latents, int i) {
    ag_node n = ag_rg_node(AG_OP_SLICE, p, "latent", latents, -1);
    n.c0 = i * a->style_dim;
    n.c1 = (i + 1) * a->style_dim;
    return ag_rg_add(b, &n);
}

/* StyleConv: lrelu(modconv(x) * sqrt 2 + weight * noise + bias), computed as
 * sqrt 2 * lrelu(modconv(x) + weight / sqrt 2 * noise + bias / sqrt 2) since the leaky ReLU
 * commutes with a positive factor (a demodulated conv's output ignores weight scales). */
static int style_conv_node(ag_rgraph *b, const char *p, int x, int w, int k, bool up) {
    if (up)
        x = resample(b, p, "up", x, true);
    char mc[AG_TENSOR_NAME_BYTES];
    snprintf(mc, sizeof mc, "%s.modulated_conv", p);
    int y = ag_rg_modconv(b, mc, x, w, 1.0f, 1.0f, true, false, -1);
    ag_node n = ag_rg_node(AG_OP_NOISE, p, "noise", y, -1);
    n.tensor[AG_T_WEIGHT] = ag_rg_tensor(b, "%s.weight", p);
    n.tensor[AG_T_AUX] = ag_rg_tensor(b, "stylegan_decoder.noises.noise%d", k);
    n.weight_scale = SQRT1_2;
    ag_node act = ag_rg_node(AG_OP_BIAS_LRELU, p, "act", ag_rg_add(b, &n), -1);
    act.tensor[AG_T_BIAS] = ag_rg_tensor(b, "%s.bias", p);
    act.bias_scale = SQRT1_2;
    act.alpha = 0.2f;
    act.gain = 1.41421356f;
    return ag_rg_add(b, &act);
}

static int to_rgb_node(ag_rgraph *b, const char *p, int x, int w, int skip) {
    char mc[AG_TENSOR_NAME_BYTES];
    snprintf(mc, sizeof mc, "%s.modulated_conv", p);
    int y = ag_rg_modconv(b, mc, x, w, 1.0f, 1.0f, false, false, ag_rg_tensor(b, "%s.bias", p));
    if (skip < 0)
        return y;
    ag_node add = ag_rg_node(AG_OP_ADD, p, "skip", y, resample(b, p, "skip_up", skip, true));
    return ag_rg_add(b, &add);
}

int ag_gfpgan_graph(const ag_restore_arch *a, const ag_tensor_set *set, ag_graph *g,
                    ag_error *err) {
    ag_graph_init(g);
    ag_rgraph b = {.g = g, .set = set, .err = err};
    int scale[AG_RESTORE_MAX_LOG + 1], shift[AG_RESTORE_MAX_LOG + 1];
    int lat = unet(&b, a, scale, shift);
    const char *d = "stylegan_decoder";
    char p[64];
    ag_node c = ag_rg_node(AG_OP_CONST, d, "constant_input", -1, -1);
    c.tensor[AG_T_WEIGHT] = ag_rg_tensor(&b, "%s.constant_input.weight", d);
    snprintf(p, sizeof p, "%s.style_conv1", d);
    int x = style_conv_node(&b, p, ag_rg_add(&b, &c), latent(&b, a, p, lat, 0), 0, false);
    snprintf(p, sizeof p, "%s.to_rgb1", d);
    int skip = to_rgb_node(&b, p, x, latent(&b, a, p, lat, 1), -1);
    for (int i = 3; i <= a->log_size; i++) {
        int k = 2 * (i - 3) + 1; /* the layer's noise and latent */
        snprintf(p, sizeof p, "%s.style_convs.%d", d, k - 1);
        x = style_conv_node(&b, p, x, latent(&b, a, p, lat, k), k, true);
        ag_node sft = ag_rg_node(AG_OP_SFT, p, "sft", x, scale[i]);
        sft.src[2] = shift[i];
        sft.c0 = a->sft_half ? a->channels[i] / 2 : 0;
        x = ag_rg_add(&b, &sft);
        snprintf(p, sizeof p, "%s.style_convs.%d", d, k);
        x = style_conv_node(&b, p, x, latent(&b, a, p, lat, k + 1), k + 1, false);
        snprintf(p, sizeof p, "%s.to_rgbs.%d", d, i - 3);
        skip = to_rgb_node(&b, p, x, latent(&b, a, p, lat, k + 2), skip);
    }
    if (b.failed)
        return err->code;
    return ag_graph_add_output(g, skip, err);
}
