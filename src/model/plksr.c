/*
 * plksr.c - RealPLKSR (Partial Large Kernel CNNs for Efficient Super-Resolution, as
 * spandrel's RealPLKSR runs it in eval mode) from a user's checkpoint: width, blocks, kernel,
 * partial channels, attention and scale from the tensors' names and shapes.
 *
 *   feats.0: 3x3 conv 3 -> dim; feats.1..n: PLKBlocks; feats.n+2: 3x3 conv dim -> 3 s²;
 *   plus the input repeated s² times per channel (repeat_interleave), pixel shuffle by s.
 *   A PLKBlock on x: channel_mixer (3x3 dim -> 2 dim, Mish, 3x3 -> dim), the partial large
 *   kernel (a k x k conv, k = 17 by default, over the first pdim channels only, the others
 *   passed through), the element-wise attention where present (x * sigmoid(3x3 conv x)),
 *   refine (1x1), GroupNorm(4) and + x. With layer_norm=True (feats.N.layer_norm.*) a
 *   LayerNorm over each pixel's channels (eps 1e-6) comes first instead of the GroupNorm.
 *
 * The repeated input is SRVGGNetCompact's base 1x1 conv (realesrgan.c adds it). With
 * dysample=True (to_img.*) DySample replaces the pixel shuffle: 1x1 convs to_img.offset and
 * to_img.scope give the sampling offsets, the op dysample samples, and to_img.end_conv (1x1,
 * 3 s² -> 3; absent at x1) mixes the result. Not supported, refused with one line: PLKSR
 * (the non-Real one, "channe_mixer") and the sparse kernels.
 */
#include "upscaler_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define PLKSR_GROUPS 4             /* norm_groups: not in the file; every released model uses 4 */
#define PLKSR_EPS 1e-5f            /* nn.GroupNorm's */
#define PLKSR_LAYER_NORM_EPS 1e-6f /* its own LayerNorm's */

static const ag_tensor_ref *findi(const ag_tensor_set *set, const char *fmt, int i) {
    char name[AG_TENSOR_NAME_BYTES];
    snprintf(name, sizeof name, fmt, i);
    return ag_tensor_set_find(set, name);
}

int ag_plksr_detect(const ag_tensor_set *set) {
    return ag_tensor_set_find(set, "feats.0.weight") &&
           (ag_tensor_set_find(set, "feats.1.lk.conv.weight") ||
            ag_tensor_set_find(set, "feats.1.lk.convs.0.weight") ||
            ag_tensor_set_find(set, "feats.1.lk.mn_conv.weight"));
}

static int refuse_variants(const ag_tensor_set *set, const char *path, ag_error *err) {
    static const struct {
        const char *key, *what;
    } variants[] = {
        {"feats.1.channe_mixer.0.weight", "PLKSR (not RealPLKSR)"},
        {"feats.1.lk.convs.0.weight", "sparse partial large kernels"},
        {"feats.1.lk.mn_conv.weight", "rectangular sparse partial large kernels"},
    };
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        if (ag_tensor_set_find(set, variants[i].key))
            return ag_error_set(err, AG_E_UNSUPPORTED, "%s: %s is not supported (it has %s)", path,
                                variants[i].what, variants[i].key);
    return AG_OK;
}

/* DySample's groups from to_img.offset (2 groups s², 3 s², 1, 1), its init_pos checked against
 * the sub-pixel centres the op computes (a buffer the class always makes the same way). */
static int dysample_groups(const ag_tensor_set *set, const char *path, ag_realesrgan_arch *a,
                           ag_error *err) {
    a->dysample = 0;
    const ag_tensor_ref *init = ag_tensor_set_find(set, "to_img.init_pos");
    if (!init)
        return AG_OK;
    const ag_tensor_ref *offset = ag_tensor_set_find(set, "to_img.offset.weight");
    const ag_tensor_ref *scope = ag_tensor_set_find(set, "to_img.scope.weight");
    int s = a->scale, in = 3 * s * s;
    if (!ag_is_conv(scope, 1) || !ag_is_conv(offset, 1) || scope->shape[0] != offset->shape[0] ||
        scope->shape[1] != offset->shape[1])
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: DySample needs to_img.scope.weight shaped as "
                            "to_img.offset.weight, both 1x1 convs",
                            path);
    int groups = ag_is_conv(offset, 1) ? (int)(offset->shape[0] / (2 * s * s)) : 0;
    if (groups < 1 || offset->shape[0] != 2 * groups * s * s || offset->shape[1] != in ||
        in % groups || init->ndim != 4 || init->shape[1] != offset->shape[0])
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: DySample needs to_img.offset.weight (2 G %d, %d, 1, 1) with G "
                            "dividing %d, and to_img.init_pos (1, 2 G %d, 1, 1)",
                            path, s * s, in, in, s * s);
    double pos[2 * 64 * 64];
    int count = 2 * groups * s * s, rc;
    if (count > (int)(sizeof pos / sizeof pos[0]))
        return ag_error_set(err, AG_E_FORMAT, "%s: DySample with %d groups at x%d", path, groups,
                            s);
    if ((rc = ag_tensor_values(init, pos, (size_t)count, path, err)))
        return rc;
    for (int c = 0; c < count; c++) {
        int k = c % (s * s), along_x = c < count / 2;
        double centre = ((along_x ? k % s : k / s) - (s - 1) / 2.0) / s;
        if (fabs(pos[c] - centre) > 1e-6)
            return ag_error_set(err, AG_E_FORMAT,
                                "%s: to_img.init_pos[%d] is %g, not the sub-pixel centre %g", path,
                                c, pos[c], centre);
    }
    a->dysample = groups;
    return AG_OK;
}

int ag_plksr_infer(const ag_tensor_set *set, const char *path, ag_realesrgan_arch *a,
                   ag_error *err) {
    int rc = refuse_variants(set, path, err);
    if (rc)
        return rc;
    const ag_tensor_ref *first = ag_tensor_set_find(set, "feats.0.weight");
    const ag_tensor_ref *lk = ag_tensor_set_find(set, "feats.1.lk.conv.weight");
    if (!ag_is_conv(first, 3) || first->shape[1] != 3 || !lk || lk->ndim != 4 ||
        lk->shape[2] != lk->shape[3] || lk->shape[2] % 2 == 0)
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: a RealPLKSR needs feats.0.weight (dim, 3, 3, 3) and "
                            "feats.1.lk.conv.weight (pdim, pdim, k, k), k odd",
                            path);
    a->feat = (int)first->shape[0];
    a->kernel = (int)lk->shape[2];
    a->partial = (int)lk->shape[0];
    a->blocks = 0;
    while (a->blocks < AG_PLKSR_MAX_BLOCKS &&
           findi(set, "feats.%d.channel_mixer.0.weight", a->blocks + 1))
        a->blocks++;
    const ag_tensor_ref *last = findi(set, "feats.%d.weight", a->blocks + 2);
    a->scale = 0;
    for (int s = 1; s <= 8 && ag_is_conv(last, 3); s++)
        if (3 * s * s == last->shape[0])
            a->scale = s;
    if (!a->scale || a->feat % PLKSR_GROUPS || a->partial > a->feat)
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: a RealPLKSR of %d blocks needs feats.%d.weight as a 3x3 conv to "
                            "3 s² channels (s 1-8), a width divisible by %d and pdim <= dim",
                            path, a->blocks, a->blocks + 2, PLKSR_GROUPS);
    a->attention = ag_tensor_set_find(set, "feats.1.attn.f.0.weight") != NULL;
    a->layer_norm = ag_tensor_set_find(set, "feats.1.layer_norm.weight") != NULL;
    a->unshuffle = 1;
    a->kind = AG_REALESRGAN_PLKSR;
    if ((rc = dysample_groups(set, path, a, err)))
        return rc;
    snprintf(a->detail, sizeof a->detail,
             "%d features, %d blocks, %dx%d partial kernels on %d channels%s%s%s", a->feat,
             a->blocks, a->kernel, a->kernel, a->partial,
             a->attention ? ", element-wise attention" : "", a->layer_norm ? ", LayerNorm" : "",
             a->dysample ? ", DySample" : "");
    return AG_OK;
}

/* ---- graph ------------------------------------------------------------------------------- */

static int add(ag_upscaler_builder *b, ag_node *n) {
    return ag_graph_add(b->g, n, b->err);
}

static int conv(ag_upscaler_builder *b, int block, const char *part, int x, int k) {
    char prefix[AG_TENSOR_NAME_BYTES];
    snprintf(prefix, sizeof prefix, "feats.%d.%s", block, part);
    return ag_upscaler_conv_k(b, prefix, x, k);
}

static int named(ag_upscaler_builder *b, ag_op op, int block, const char *part, int x, int y) {
    char name[AG_GRAPH_NAME_BYTES];
    snprintf(name, sizeof name, "feats.%d.%s", block, part);
    ag_node n = ag_node_make(op, name, x, y);
    return add(b, &n);
}

/* The partial large-kernel conv of block i on x: its first pdim channels convolved. */
static int partial_conv(ag_upscaler_builder *b, const ag_realesrgan_arch *a, int i, int x) {
    if (a->partial == a->feat)
        return conv(b, i, "lk.conv", x, a->kernel);
    char name[AG_GRAPH_NAME_BYTES];
    snprintf(name, sizeof name, "feats.%d.lk.head", i);
    ag_node head = ag_node_make(AG_OP_SLICE, name, x, -1);
    head.c0 = 0, head.c1 = a->partial;
    snprintf(name, sizeof name, "feats.%d.lk.tail", i);
    ag_node tail = ag_node_make(AG_OP_SLICE, name, x, -1);
    tail.c0 = a->partial, tail.c1 = a->feat;
    int h = add(b, &head), t = h < 0 ? -1 : add(b, &tail);
    if (t < 0 || (h = conv(b, i, "lk.conv", h, a->kernel)) < 0)
        return -1;
    return named(b, AG_OP_CONCAT, i, "lk.cat", h, t);
}

/* feats.i.<part> (weight = gamma, bias = beta) as a group_norm or a channel_norm node. */
static int norm(ag_upscaler_builder *b, int i, const char *part, ag_op op, int x) {
    char name[AG_GRAPH_NAME_BYTES], key[AG_TENSOR_NAME_BYTES];
    snprintf(name, sizeof name, "feats.%d.%s", i, part);
    snprintf(key, sizeof key, "%s.weight", name);
    const ag_tensor_ref *gamma = ag_tensor_set_find(b->set, key);
    snprintf(key, sizeof key, "%s.bias", name);
    const ag_tensor_ref *beta = ag_tensor_set_find(b->set, key);
    if (!gamma || !beta) {
        ag_error_set(b->err, AG_E_FORMAT, "%s: %s.weight or .bias is missing", b->path, name);
        return -1;
    }
    ag_node n = ag_node_make(op, name, x, -1);
    n.groups = PLKSR_GROUPS;
    n.eps = op == AG_OP_GROUP_NORM ? PLKSR_EPS : PLKSR_LAYER_NORM_EPS;
    n.tensor[AG_T_GAMMA] = (int)(gamma - b->set->tensors);
    n.tensor[AG_T_BETA] = (int)(beta - b->set->tensors);
    return add(b, &n);
}

static int plk_block(ag_upscaler_builder *b, const ag_realesrgan_arch *a, int i, int x) {
    int y = a->layer_norm ? norm(b, i, "layer_norm", AG_OP_CHANNEL_NORM, x) : x;
    if (y < 0 || (y = conv(b, i, "channel_mixer.0", y, 3)) < 0)
        return -1;
    if ((y = named(b, AG_OP_MISH, i, "channel_mixer.1", y, -1)) < 0 ||
        (y = conv(b, i, "channel_mixer.2", y, 3)) < 0 || (y = partial_conv(b, a, i, y)) < 0)
        return -1;
    if (a->attention) {
        int g = conv(b, i, "attn.f.0", y, 3);
        char name[AG_GRAPH_NAME_BYTES];
        snprintf(name, sizeof name, "feats.%d.attn", i);
        ag_node n = ag_node_make(AG_OP_SIGMOID_GATE, name, y, g);
        if (g < 0 || (y = add(b, &n)) < 0)
            return -1;
    }
    if ((y = conv(b, i, "refine", y, 1)) < 0 ||
        (!a->layer_norm && (y = norm(b, i, "norm", AG_OP_GROUP_NORM, y)) < 0))
        return -1;
    return named(b, AG_OP_ADD, i, "skip", y, x);
}

/* to_img: the offsets (1x1 convs), the dysample op, the end conv where the file has it. */
static int dysample(ag_upscaler_builder *b, const ag_realesrgan_arch *a, int x) {
    int offset = ag_upscaler_conv(b, "to_img.offset", x, "to_img.offset.weight",
                                  "to_img.offset.bias", 1, 1, 0, 1.0f);
    int scope = offset < 0 ? -1
                           : ag_upscaler_conv(b, "to_img.scope", x, "to_img.scope.weight", NULL, 1,
                                              1, 0, 1.0f);
    if (scope < 0)
        return -1;
    ag_node n = ag_node_make(AG_OP_DYSAMPLE, "to_img", x, offset);
    n.src[2] = scope, n.up = a->scale, n.groups = a->dysample;
    int y = add(b, &n);
    if (y < 0 || !ag_tensor_set_find(b->set, "to_img.end_conv.weight"))
        return y;
    return ag_upscaler_conv_k(b, "to_img.end_conv", y, 1);
}

int ag_plksr_graph(ag_upscaler_builder *b, const ag_realesrgan_arch *a) {
    int y = ag_upscaler_conv_k(b, "feats.0", 0, 3);
    for (int i = 1; i <= a->blocks && y >= 0; i++)
        y = plk_block(b, a, i, y);
    char last[32];
    snprintf(last, sizeof last, "feats.%d", a->blocks + 2);
    if (y < 0 || (y = ag_upscaler_conv_k(b, last, y, 3)) < 0)
        return -1;
    int base = ag_upscaler_conv(b, "repeat", 0, AG_UPSCALER_BASE_WEIGHT, NULL, 1, 1, 0, 1.0f);
    if (base < 0)
        return -1;
    ag_node sum = ag_node_make(AG_OP_ADD, "sum", y, base);
    if ((y = add(b, &sum)) < 0)
        return -1;
    if (a->dysample)
        return dysample(b, a, y);
    ag_node ps = ag_node_make(AG_OP_PIXEL_SHUFFLE, "out", y, -1);
    ps.up = a->scale;
    return add(b, &ps);
}
