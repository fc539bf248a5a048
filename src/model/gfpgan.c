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
