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
