/*
 * realesrgan.c - users' Real-ESRGAN checkpoints as graphs: the architecture (SRVGGNetCompact
 * or RRDBNet, their width, depth and scale) is inferred from the state_dict's names and
 * shapes, never from the file name, then built from the ops of docs/graph.md.
 *
 *   SRVGGNetCompact (realesr-animevideov3: 16 convs, realesr-general-x4v3: 32): body.0 conv
 *     3->F, body.1 PReLU(F), num_conv x (conv F->F, PReLU), a last conv F -> 3 s², pixel
 *     shuffle by s, plus the input upsampled by s (nearest).
 *   RRDBNet (RealESRGAN_x4plus: 23 blocks, _anime_6B: 6, x2plus: 23 with a pixel-unshuffle
 *     of the input by 2, the 1x models by 4; ESRGAN's old files, 4x-UltraSharp and the like,
 *     and BSRGAN's name the same parts differently: rrdb_layouts): conv_first, num_block RRDBs of
 * three dense blocks of five convs (conv j reads the concatenation of the block input and every
 * earlier conv's output, LeakyReLU 0.2 after conv1-4, x5 * 0.2 + x; the RRDB's out * 0.2 + x),
 * conv_body, + the conv_first features, 0-3 (nearest x2, conv, LeakyReLU) for x1-x8, conv_hr,
 * LeakyReLU, conv_last.
 *
 * Both take RGB in [0, 1] and give RGB in [0, 1] (Real-ESRGAN clamps, x 255, rounds). The 0.2
 * of each dense block is the bound weight_scale of its conv5; the RRDB's is add_scaled.
 *
 * The engine's first op on the image is a conv, so two steps become convs with weights
 * derived at load (ag_realesrgan_prepare adds them to the set), exactly:
 *   - SRVGG's nearest-upsampled input: a 1x1 conv copying channel c to c s^2 + k (k < s^2),
 *     added before the pixel shuffle (shuffling that is the nearest upsampling);
 *   - a pixel-unshuffle by f + conv_first: one 3f x 3f stride-f conv with zero pads f, whose
 *     tap (f a + dy, f b + dx) of input channel c is conv_first's (a, b) of channel
 *     c f² + f dy + dx (x2plus: 6x6 stride 2; the 1x models: 12x12 stride 4).
 */
#include "upscaler_internal.h"

#include "../kernels/kernels.h"

#include <stdio.h>
#include <string.h>

typedef ag_upscaler_builder rb;

static const ag_tensor_ref *find(const ag_tensor_set *set, const char *name) {
    return ag_tensor_set_find(set, name);
}

static const ag_tensor_ref *findf(const ag_tensor_set *set, const char *fmt, int i) {
    char name[AG_TENSOR_NAME_BYTES];
    snprintf(name, sizeof name, fmt, i);
    return find(set, name);
}

int ag_is_conv(const ag_tensor_ref *t, int k) {
    return t && t->ndim == 4 && t->shape[2] == k && t->shape[3] == k;
}

static int is_conv3(const ag_tensor_ref *t) {
    return ag_is_conv(t, 3);
}

/* ---- inference from the tensors ----------------------------------------------------------- */

static int infer_srvgg(const ag_tensor_set *set, const char *path, ag_realesrgan_arch *a,
                       ag_error *err) {
    const ag_tensor_ref *first = find(set, "body.0.weight");
    const ag_tensor_ref *act = find(set, "body.1.weight");
    if (!is_conv3(first) || first->shape[1] != 3)
        return ag_error_set(err, AG_E_FORMAT, "%s: body.0 is not a 3x3 conv of RGB", path);
    a->feat = (int)first->shape[0];
    if (!act || act->ndim != 1 || act->shape[0] != a->feat)
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "%s: SRVGGNetCompact without PReLU activations (body.1.weight) is "
                            "not supported",
                            path);
    int last = 0;
    while (is_conv3(findf(set, "body.%d.weight", last + 2)))
        last += 2;
    a->blocks = last / 2 - 1; /* num_conv */
    const ag_tensor_ref *out = findf(set, "body.%d.weight", last);
    int oc = (int)out->shape[0];
    a->scale = 0;
    for (int s = 1; s <= 8; s++)
        if (3 * s * s == oc)
            a->scale = s;
    if (a->blocks < 1 || !a->scale)
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: SRVGGNetCompact's last conv body.%d has %d outputs, not 3 s^2",
                            path, last, oc);
    a->kind = AG_REALESRGAN_SRVGG;
    snprintf(a->detail, sizeof a->detail, "%d features, %d convs", a->feat, a->blocks);
    return AG_OK;
}

/* The three key layouts of RRDBNet files. Each part's state_dict prefix is its format with
 * one int: a block's takes (block, dense block, conv); the old layout's numbered parts take
 * their index in its nn.Sequential (body: model.1.sub.<blocks>, k-th upsample conv: model.<3k>,
 * then the HR conv and the last at 3 ups + 2 and + 4). */
typedef struct rrdb_layout {
    const char *label;
    const char *first, *block, *body, *up, *hr, *last;
} rrdb_layout;

static const rrdb_layout rrdb_layouts[] = {
    [AG_RRDB_NEW] = {"Real-ESRGAN/BasicSR keys", "conv_first", "body.%d.rdb%d.conv%d", "conv_body",
                     "conv_up%d", "conv_hr", "conv_last"},
    [AG_RRDB_BSRGAN] = {"BSRGAN/RealSR keys", "conv_first", "RRDB_trunk.%d.RDB%d.conv%d",
                        "trunk_conv", "upconv%d", "HRconv", "conv_last"},
    [AG_RRDB_OLD] = {"old ESRGAN keys", "model.0", "model.1.sub.%d.RDB%d.conv%d.0",
                     "model.1.sub.%d", "model.%d", "model.%d", "model.%d"},
};

typedef enum rrdb_part { PART_FIRST, PART_BODY, PART_UP, PART_HR, PART_LAST } rrdb_part;

/* The prefix of `part` (PART_UP: upsample conv `up`, 1-based) in the arch's layout. */
static void rrdb_prefix(const ag_realesrgan_arch *a, rrdb_part part, int up, char *out) {
    const rrdb_layout *l = &rrdb_layouts[a->layout];
    int old = a->layout == AG_RRDB_OLD;
    const char *fmt[] = {l->first, l->body, l->up, l->hr, l->last};
    int arg[] = {0, a->blocks, old ? 3 * up : up, 3 * a->ups + 2, 3 * a->ups + 4};
    snprintf(out, AG_TENSOR_NAME_BYTES, fmt[part], arg[part]);
}

static void rrdb_block_prefix(const ag_realesrgan_arch *a, int block, int rdb, int conv,
                              char *out) {
    snprintf(out, AG_TENSOR_NAME_BYTES, rrdb_layouts[a->layout].block, block, rdb, conv);
}

static const ag_tensor_ref *rrdb_weight(const ag_tensor_set *set, const ag_realesrgan_arch *a,
                                        rrdb_part part, int up) {
    char name[AG_TENSOR_NAME_BYTES + 8];
    rrdb_prefix(a, part, up, name);
    strcat(name, ".weight");
    return find(set, name);
}

static int rrdb_layout_of(const ag_tensor_set *set) {
    if (find(set, "body.0.rdb1.conv1.weight"))
        return AG_RRDB_NEW;
    if (find(set, "RRDB_trunk.0.RDB1.conv1.weight"))
        return AG_RRDB_BSRGAN;
    if (find(set, "model.1.sub.0.RDB1.conv1.0.weight"))
        return AG_RRDB_OLD;
    return 0;
}

static int infer_rrdb(const ag_tensor_set *set, const char *path, ag_realesrgan_arch *a,
                      ag_error *err) {
    if (find(set, "model.1.sub.0.RDB1.conv1x1.weight"))
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "%s: ESRGAN+ (dense blocks with conv1x1) is not supported", path);
    a->layout = rrdb_layout_of(set);
    if (!a->layout)
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: not an RRDBNet (no body.0.rdb1.conv1, RRDB_trunk.0.RDB1.conv1 or "
                            "model.1.sub.0.RDB1.conv1.0 weight)",
                            path);
    a->blocks = 0;
    char name[AG_TENSOR_NAME_BYTES + 8];
    for (;; a->blocks++) {
        rrdb_block_prefix(a, a->blocks, 1, 1, name);
        if (a->blocks >= AG_RRDB_MAX_BLOCKS || !find(set, strcat(name, ".weight")))
            break;
    }
    a->ups = 0;
    while (a->ups < 4 && is_conv3(rrdb_weight(set, a, PART_UP, a->ups + 1)))
        a->ups++;
    const ag_tensor_ref *first = rrdb_weight(set, a, PART_FIRST, 0);
    const ag_tensor_ref *last = rrdb_weight(set, a, PART_LAST, 0);
    rrdb_block_prefix(a, 0, 1, 1, name);
    const ag_tensor_ref *c1 = find(set, strcat(name, ".weight"));
    char last_name[AG_TENSOR_NAME_BYTES];
    rrdb_prefix(a, PART_LAST, 0, last_name);
    if (!is_conv3(first) || !is_conv3(c1) || !is_conv3(last) || last->shape[0] != 3)
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: an RRDBNet (%s) needs its first conv, %s and %s as 3x3 convs, the "
                            "last to 3 channels",
                            path, rrdb_layouts[a->layout].label, name, last_name);
    a->feat = (int)first->shape[0];
    a->grow = (int)c1->shape[0];
    int in = (int)first->shape[1];
    a->unshuffle = in == 3 ? 1 : in == 12 ? 2 : in == 48 ? 4 : 0;
    if (!a->unshuffle || a->ups > 3 || (1 << a->ups) % a->unshuffle)
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: an RRDBNet whose first conv reads %d channels (3, or 12 and 48 "
                            "for a pixel-unshuffled input) with %d upsampling convs has no "
                            "scale of 1, 2, 4 or 8",
                            path, in, a->ups);
    a->scale = (1 << a->ups) / a->unshuffle;
    a->kind = AG_REALESRGAN_RRDB;
    snprintf(a->detail, sizeof a->detail, "%s, %d features, %d block%s, growth %d%s",
             rrdb_layouts[a->layout].label, a->feat, a->blocks, a->blocks == 1 ? "" : "s", a->grow,
             a->unshuffle == 2   ? ", pixel-unshuffle 2"
             : a->unshuffle == 4 ? ", pixel-unshuffle 4"
                                 : "");
    return AG_OK;
}

const char *ag_realesrgan_name(ag_realesrgan_kind kind) {
    static const char *const names[] = {[AG_REALESRGAN_SRVGG] = "srvggnet-compact",
                                        [AG_REALESRGAN_RRDB] = "rrdbnet",
                                        [AG_REALESRGAN_SPAN] = "span",
                                        [AG_REALESRGAN_PLKSR] = "realplksr"};
    return kind >= AG_REALESRGAN_SRVGG && kind <= AG_REALESRGAN_PLKSR ? names[kind] : "";
}

int ag_realesrgan_detect(const ag_tensor_set *set) {
    return ag_span_detect(set) || ag_plksr_detect(set) || rrdb_layout_of(set) ||
           find(set, "model.1.sub.0.RDB1.conv1x1.weight") || find(set, "conv_first.weight") ||
           find(set, "body.0.weight");
}

int ag_realesrgan_infer(const ag_tensor_set *set, const char *path, ag_realesrgan_arch *a,
                        ag_error *err) {
    memset(a, 0, sizeof *a);
    if (ag_span_detect(set))
        return ag_span_infer(set, path, a, err);
    if (ag_plksr_detect(set))
        return ag_plksr_infer(set, path, a, err);
    if (ag_realesrgan_detect(set) && !find(set, "body.0.weight"))
        return infer_rrdb(set, path, a, err);
    if (find(set, "body.0.weight"))
        return infer_srvgg(set, path, a, err);
    return ag_error_set(err, AG_E_FORMAT,
                        "%s: not a Real-ESRGAN checkpoint (neither SRVGGNetCompact's body.0 nor "
                        "RRDBNet's conv_first)",
                        path);
}

/* ---- derived weights --------------------------------------------------------------------- */

#define S2D_WEIGHT "conv_first.s2d.weight"

int ag_upscaler_add_tensor(ag_tensor_set *set, const char *name, int ndim, const int64_t *shape,
                           float *data, const char *path, ag_error *err) {
    int rc = ag_tensor_set_own(set, data, err);
    ag_tensor_ref ref = {.dtype = AG_DTYPE_F32, .ndim = ndim, .data = data};
    snprintf(ref.name, sizeof ref.name, "%s", name);
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
        ref.shape[d] = shape[d], n *= (size_t)shape[d];
    ref.nbytes = n * sizeof(float);
    if (rc == AG_OK)
        rc = ag_tensor_set_add(set, &ref, err);
    return ag_error_prefix(rc, path, err);
}

int ag_tensor_values(const ag_tensor_ref *t, double *out, size_t count, const char *path,
                     ag_error *err) {
    size_t size = ag_dtype_size(t->dtype);
    if (t->dtype == AG_DTYPE_I8 || count * size > t->nbytes)
        return ag_error_set(err, AG_E_UNSUPPORTED, "%s: %s must be float (F32, F16, BF16, F64)",
                            path, t->name);
    const void *data;
    void *tmp; /* a strided view, gathered (its shape was checked by the caller) */
    int rc = ag_tensor_ref_elements(t, &data, &tmp, err);
    if (rc != AG_OK)
        return ag_error_prefix(rc, path, err);
    const uint8_t *src = data;
    for (size_t i = 0; i < count; i++) {
        if (t->dtype == AG_DTYPE_F32 || t->dtype == AG_DTYPE_F64) {
            float f;
            double d;
            memcpy(t->dtype == AG_DTYPE_F32 ? (void *)&f : (void *)&d, src + i * size, size);
            out[i] = t->dtype == AG_DTYPE_F32 ? (double)f : d;
        } else {
            uint16_t h;
            memcpy(&h, src + i * 2, 2);
            uint32_t bits = (uint32_t)h << 16;
            float f;
            memcpy(&f, &bits, sizeof f);
            out[i] = t->dtype == AG_DTYPE_F16 ? (double)ag_f16_to_f32(h) : (double)f;
        }
    }
    ag_free(tmp);
    return AG_OK;
}

/* (3 s^2, 3, 1, 1): out channel c s^2 + k = in channel c. */
static int add_base_weight(ag_tensor_set *set, int s, const char *path, ag_error *err) {
    int64_t shape[4] = {3 * s * s, 3, 1, 1};
    float *w = ag_calloc((size_t)9 * s * s, sizeof(float));
    if (!w)
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory", path);
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < s * s; k++)
            w[(c * s * s + k) * 3 + c] = 1.0f;
    return ag_upscaler_add_tensor(set, AG_UPSCALER_BASE_WEIGHT, 4, shape, w, path, err);
}

/* The first conv (F, 3 f², 3, 3) over the input pixel-unshuffled by f (channel c f² + dy f +
 * dx holds pixel (f y + dy, f x + dx) of channel c) as one (F, 3, 3f, 3f) conv of stride f
 * and zero pads f over the image: its tap (f a + dy, f b + dx) is the first conv's (a, b). */
static int add_s2d_weight(ag_tensor_set *set, const ag_realesrgan_arch *a, const char *path,
                          ag_error *err) {
    const ag_tensor_ref *t = rrdb_weight(set, a, PART_FIRST, 0);
    if (t->dtype != AG_DTYPE_F32)
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "%s: the first conv of a pixel-unshuffle RRDBNet must be float32",
                            path);
    if (t->shape[0] < 1 || t->shape[0] > AG_MAP_MAX_CHANNELS)
        return ag_error_set(err, AG_E_FORMAT, "%s: the first conv makes %lld channels; 1 to %d",
                            path, (long long)t->shape[0], AG_MAP_MAX_CHANNELS);
    int f = a->unshuffle, feat = (int)t->shape[0], in = 3 * f * f, k = 3 * f;
    int64_t shape[4] = {feat, 3, k, k};
    const void *data;
    void *tmp;
    int rc = ag_tensor_ref_elements(t, &data, &tmp, err);
    if (rc != AG_OK)
        return ag_error_prefix(rc, path, err);
    float *w = ag_malloc((size_t)feat * 3 * k * k * sizeof(float));
    if (!w) {
        ag_free(tmp);
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory", path);
    }
    const uint8_t *src = data;
    for (int o = 0; o < feat; o++)
        for (int ch = 0; ch < in; ch++)
            for (int ty = 0; ty < 3; ty++)
                for (int tx = 0; tx < 3; tx++) {
                    int c = ch / (f * f), dy = ch / f % f, dx = ch % f;
                    float v;
                    memcpy(&v, src + sizeof v * (((size_t)(o * in + ch) * 3 + ty) * 3 + tx),
                           sizeof v);
                    w[((size_t)(o * 3 + c) * k + f * ty + dy) * k + f * tx + dx] = v;
                }
    ag_free(tmp);
    return ag_upscaler_add_tensor(set, S2D_WEIGHT, 4, shape, w, path, err);
}

int ag_realesrgan_prepare(ag_tensor_set *set, const char *path, ag_error *err) {
    ag_realesrgan_arch a;
    int rc = ag_realesrgan_infer(set, path, &a, err);
    if (rc)
        return rc;
    if (a.kind == AG_REALESRGAN_SRVGG || a.kind == AG_REALESRGAN_PLKSR)
        return add_base_weight(set, a.scale, path, err);
    if (a.kind == AG_REALESRGAN_SPAN)
        return ag_span_prepare(set, &a, path, err);
    if (a.unshuffle > 1)
        return add_s2d_weight(set, &a, path, err);
    return AG_OK;
}

/* ---- graph ------------------------------------------------------------------------------- */

static int add(rb *b, ag_node *n) {
    return ag_graph_add(b->g, n, b->err);
}

int ag_upscaler_conv(ag_upscaler_builder *b, const char *name, int x, const char *weight,
                     const char *bias, int k, int stride, int pad, float weight_scale) {
    ag_node n = ag_node_make(AG_OP_CONV, name, x, -1);
    const ag_tensor_ref *w = find(b->set, weight);
    const ag_tensor_ref *t = bias ? find(b->set, bias) : NULL;
    if (!w || w->ndim != 4 || w->shape[2] != k || w->shape[3] != k || (bias && !t)) {
        ag_error_set(b->err, AG_E_FORMAT, "%s: '%s' is not a %dx%d conv%s", b->path, name, k, k,
                     bias ? " with a bias" : "");
        return -1;
    }
    n.tensor[AG_T_WEIGHT] = (int)(w - b->set->tensors);
    if (t)
        n.tensor[AG_T_BIAS] = (int)(t - b->set->tensors);
    n.k = k, n.stride = stride, n.groups = 1;
    n.pad[0] = n.pad[1] = n.pad[2] = n.pad[3] = pad;
    n.pad_mode = AG_PAD_ZERO;
    n.weight_scale = n.bias_scale = weight_scale;
    return add(b, &n);
}

int ag_upscaler_conv_k(ag_upscaler_builder *b, const char *prefix, int x, int k) {
    char weight[AG_TENSOR_NAME_BYTES + 8], bias[AG_TENSOR_NAME_BYTES + 8];
    snprintf(weight, sizeof weight, "%s.weight", prefix);
    snprintf(bias, sizeof bias, "%s.bias", prefix);
    return ag_upscaler_conv(b, prefix, x, weight, bias, k, 1, k / 2, 1.0f);
}

/* The 3x3 conv (+ bias) of the state_dict prefix `prefix` reading x. */
static int conv(rb *b, const char *prefix, int x, float weight_scale) {
    char weight[AG_TENSOR_NAME_BYTES + 8], bias[AG_TENSOR_NAME_BYTES + 8];
    snprintf(weight, sizeof weight, "%s.weight", prefix);
    snprintf(bias, sizeof bias, "%s.bias", prefix);
    return ag_upscaler_conv(b, prefix, x, weight, bias, 3, 1, 1, weight_scale);
}

static int lrelu(rb *b, const char *prefix, int x) {
    char name[AG_GRAPH_NAME_BYTES];
    snprintf(name, sizeof name, "%.48s.act", prefix);
    ag_node n = ag_node_make(AG_OP_LRELU, name, x, -1);
    n.alpha = 0.2f;
    return add(b, &n);
}

/* Dense block `rdb` of RRDB `block` on x: returns conv5 * 0.2 + x. */
static int dense_block(rb *b, const ag_realesrgan_arch *a, int block, int rdb, int x) {
    int feats[5] = {x};
    char prefix[AG_TENSOR_NAME_BYTES], name[AG_GRAPH_NAME_BYTES];
    for (int j = 1; j <= 5; j++) {
        int in = feats[0];
        rrdb_block_prefix(a, block, rdb, j, prefix);
        if (j > 1) {
            snprintf(name, sizeof name, "%.52s.cat", prefix);
            ag_node cat = ag_node_make(AG_OP_CONCAT, name, -1, -1);
            for (int k = 0; k < j; k++)
                cat.src[k] = feats[k];
            if ((in = add(b, &cat)) < 0)
                return -1;
        }
        int c = conv(b, prefix, in, j == 5 ? 0.2f : 1.0f);
        if (c < 0)
            return -1;
        if (j == 5) {
            snprintf(name, sizeof name, "%.52s.add", prefix);
            ag_node sum = ag_node_make(AG_OP_ADD, name, c, x);
            return add(b, &sum);
        }
        if ((feats[j] = lrelu(b, prefix, c)) < 0)
            return -1;
    }
    return -1;
}

/* conv (3x3, + bias) of the layout's `part` reading x, then LeakyReLU 0.2 if `act`. */
static int rrdb_conv(rb *b, const ag_realesrgan_arch *a, rrdb_part part, int up, int x, int act) {
    char prefix[AG_TENSOR_NAME_BYTES];
    rrdb_prefix(a, part, up, prefix);
    int y = conv(b, prefix, x, 1.0f);
    return y >= 0 && act ? lrelu(b, prefix, y) : y;
}

static int build_rrdb(rb *b, const ag_realesrgan_arch *a) {
    char name[AG_GRAPH_NAME_BYTES], first_name[AG_TENSOR_NAME_BYTES],
        bias[AG_TENSOR_NAME_BYTES + 8];
    rrdb_prefix(a, PART_FIRST, 0, first_name);
    snprintf(bias, sizeof bias, "%s.bias", first_name);
    int f = a->unshuffle;
    int first = f > 1 ? ag_upscaler_conv(b, first_name, 0, S2D_WEIGHT, bias, 3 * f, f, f, 1.0f)
                      : rrdb_conv(b, a, PART_FIRST, 0, 0, 0);
    int y = first;
    for (int i = 0; i < a->blocks && y >= 0; i++) {
        int in = y;
        for (int j = 1; j <= 3 && y >= 0; j++)
            y = dense_block(b, a, i, j, y);
        if (y < 0)
            return -1;
        snprintf(name, sizeof name, "rrdb%d.out", i);
        ag_node n = ag_node_make(AG_OP_ADD_SCALED, name, y, in);
        n.alpha = 0.2f;
        y = add(b, &n);
    }
    if (y < 0 || (y = rrdb_conv(b, a, PART_BODY, 0, y, 0)) < 0)
        return -1;
    ag_node sum = ag_node_make(AG_OP_ADD, "trunk", first, y);
    if ((y = add(b, &sum)) < 0)
        return -1;
    for (int u = 1; u <= a->ups; u++) {
        snprintf(name, sizeof name, "up%d.nearest", u);
        ag_node n = ag_node_make(AG_OP_NEAREST, name, y, -1);
        n.up = 2;
        if ((y = add(b, &n)) < 0 || (y = rrdb_conv(b, a, PART_UP, u, y, 1)) < 0)
            return -1;
    }
    if ((y = rrdb_conv(b, a, PART_HR, 0, y, 1)) < 0)
        return -1;
    return rrdb_conv(b, a, PART_LAST, 0, y, 0);
}

static int build_srvgg(rb *b, const ag_realesrgan_arch *a) {
    char name[AG_GRAPH_NAME_BYTES];
    int y = 0;
    for (int i = 0; i <= a->blocks; i++) {
        snprintf(name, sizeof name, "body.%d", 2 * i);
        if ((y = conv(b, name, y, 1.0f)) < 0)
            return -1;
        snprintf(name, sizeof name, "body.%d", 2 * i + 1);
        ag_node act = ag_node_make(AG_OP_PRELU, name, y, -1);
        const ag_tensor_ref *slope = findf(b->set, "body.%d.weight", 2 * i + 1);
        if (!slope || slope->ndim != 1 || slope->shape[0] != a->feat) {
            ag_error_set(b->err, AG_E_FORMAT, "%s: %s.weight is not a PReLU of %d channels",
                         b->path, name, a->feat);
            return -1;
        }
        act.tensor[AG_T_GAMMA] = (int)(slope - b->set->tensors);
        if ((y = add(b, &act)) < 0)
            return -1;
    }
    snprintf(name, sizeof name, "body.%d", 2 * a->blocks + 2);
    if ((y = conv(b, name, y, 1.0f)) < 0)
        return -1;
    int base = ag_upscaler_conv(b, "base", 0, AG_UPSCALER_BASE_WEIGHT, NULL, 1, 1, 0, 1.0f);
    if (base < 0)
        return -1;
    ag_node sum = ag_node_make(AG_OP_ADD, "sum", y, base);
    ag_node ps = ag_node_make(AG_OP_PIXEL_SHUFFLE, "out", -1, -1);
    ps.up = a->scale;
    if ((ps.src[0] = add(b, &sum)) < 0)
        return -1;
    return add(b, &ps);
}

int ag_realesrgan_graph(const ag_tensor_set *set, const char *path, ag_realesrgan_arch *arch,
                        ag_graph *g, ag_error *err) {
    int rc = ag_realesrgan_infer(set, path, arch, err);
    if (rc)
        return rc;
    rb b = {set, path, g, err};
    ag_graph_init(g);
    int out = arch->kind == AG_REALESRGAN_RRDB    ? build_rrdb(&b, arch)
              : arch->kind == AG_REALESRGAN_SPAN  ? ag_span_graph(&b, arch)
              : arch->kind == AG_REALESRGAN_PLKSR ? ag_plksr_graph(&b, arch)
                                                  : build_srvgg(&b, arch);
    if (out < 0)
        return err->code ? err->code : AG_E_FORMAT;
    return ag_graph_add_output(g, out, err);
}
