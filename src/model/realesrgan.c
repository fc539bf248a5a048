/*
 * realesrgan.c - users' Real-ESRGAN checkpoints as graphs: the architecture (SRVGGNetCompact
 * or RRDBNet, their width, depth and scale) is inferred from the state_dict's names and
 * shapes, never from the file name, then built from the ops of docs/graph.md.
 *
 *   SRVGGNetCompact (realesr-animevideov3: 16 convs, realesr-general-x4v3: 32): body.0 conv
 *     3->F, body.1 PReLU(F), num_conv x (conv F->F, PReLU), a last conv F -> 3 s², pixel
 *     shuffle by s, plus the input upsampled by s (nearest).
 *   RRDBNet (RealESRGAN_x4plus: 23 blocks, _anime_6B: 6, x2plus: 23 with a pixel-unshuffle
 *     of the input by 2): conv_first, num_block RRDBs of three dense blocks of five convs
 *     (conv j reads the concatenation of the block input and every earlier conv's output,
 *     LeakyReLU 0.2 after conv1-4, x5 * 0.2 + x; the RRDB's out * 0.2 + x), conv_body, + the
 *     conv_first features, two (nearest x2, conv, LeakyReLU), conv_hr, LeakyReLU, conv_last.
 *
 * Both take RGB in [0, 1] and give RGB in [0, 1] (Real-ESRGAN clamps, x 255, rounds). The 0.2
 * of each dense block is the bound weight_scale of its conv5; the RRDB's is add_scaled.
 *
 * The engine's first op on the image is a conv, so two steps become convs with weights
 * derived at load (ag_realesrgan_prepare adds them to the set), exactly:
 *   - SRVGG's nearest-upsampled input: a 1x1 conv copying channel c to c s^2 + k (k < s^2),
 *     added before the pixel shuffle (shuffling that is the nearest upsampling);
 *   - x2plus's pixel-unshuffle + conv_first: one 6x6 stride-2 conv with zero pads 2, whose
 *     tap (2a + dy, 2b + dx) of input channel c is conv_first's (a, b) of channel 4c+2dy+dx.
 */
#include "model_internal.h"

#include "../kernels/kernels.h"

#include <stdio.h>
#include <string.h>

typedef struct rb {
    const ag_tensor_set *set;
    const char *path;
    ag_graph *g;
    ag_error *err;
} rb;

static const ag_tensor_ref *find(const ag_tensor_set *set, const char *name) {
    return ag_tensor_set_find(set, name);
}

static const ag_tensor_ref *findf(const ag_tensor_set *set, const char *fmt, int i) {
    char name[AG_TENSOR_NAME_BYTES];
    snprintf(name, sizeof name, fmt, i);
    return find(set, name);
}

static int is_conv3(const ag_tensor_ref *t) {
    return t && t->ndim == 4 && t->shape[2] == 3 && t->shape[3] == 3;
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
    return AG_OK;
}

static int infer_rrdb(const ag_tensor_set *set, const char *path, ag_realesrgan_arch *a,
                      ag_error *err) {
    const ag_tensor_ref *first = find(set, "conv_first.weight");
    const ag_tensor_ref *last = find(set, "conv_last.weight");
    const ag_tensor_ref *c1 = find(set, "body.0.rdb1.conv1.weight");
    if (!is_conv3(first) || !is_conv3(last) || last->shape[0] != 3 || !is_conv3(c1))
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: not an RRDBNet (conv_first, body.0.rdb1.conv1 and conv_last as "
                            "3x3 convs to 3 channels)",
                            path);
    a->feat = (int)first->shape[0];
    a->grow = (int)c1->shape[0];
    int in = (int)first->shape[1];
    a->scale = in == 3 ? 4 : in == 12 ? 2 : in == 48 ? 1 : 0;
    if (!a->scale)
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: conv_first reads %d channels: not 3, 12 or 48 (x4, x2, x1)", path,
                            in);
    a->unshuffle = a->scale == 4 ? 1 : 4 / a->scale;
    a->blocks = 0;
    while (a->blocks < 1000 && findf(set, "body.%d.rdb1.conv1.weight", a->blocks))
        a->blocks++;
    a->kind = AG_REALESRGAN_RRDB;
    return AG_OK;
}

int ag_realesrgan_detect(const ag_tensor_set *set) {
    return find(set, "conv_first.weight") || find(set, "body.0.weight");
}

int ag_realesrgan_infer(const ag_tensor_set *set, const char *path, ag_realesrgan_arch *a,
                        ag_error *err) {
    memset(a, 0, sizeof *a);
    if (find(set, "conv_first.weight"))
        return infer_rrdb(set, path, a, err);
    if (find(set, "body.0.weight"))
        return infer_srvgg(set, path, a, err);
    return ag_error_set(err, AG_E_FORMAT,
                        "%s: not a Real-ESRGAN checkpoint (neither SRVGGNetCompact's body.0 nor "
                        "RRDBNet's conv_first)",
                        path);
}

/* ---- derived weights --------------------------------------------------------------------- */

#define BASE_WEIGHT "base.weight"
#define S2D_WEIGHT "conv_first.s2d.weight"

/* Add an fp32 tensor of `shape` over `data` (ag_malloc'ed; the set owns it from here). */
static int add_tensor(ag_tensor_set *set, const char *name, const int64_t *shape, float *data,
                      const char *path, ag_error *err) {
    int rc = ag_tensor_set_own(set, data, err);
    ag_tensor_ref ref = {.dtype = AG_DTYPE_F32, .ndim = 4, .data = data};
    snprintf(ref.name, sizeof ref.name, "%s", name);
    size_t n = 1;
    for (int d = 0; d < 4; d++)
        ref.shape[d] = shape[d], n *= (size_t)shape[d];
    ref.nbytes = n * sizeof(float);
    if (rc == AG_OK)
        rc = ag_tensor_set_add(set, &ref, err);
    return ag_error_prefix(rc, path, err);
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
    return add_tensor(set, BASE_WEIGHT, shape, w, path, err);
}

/* conv_first (F, 12, 3, 3) over the unshuffled input as (F, 3, 6, 6) stride 2 over the image. */
static int add_s2d_weight(ag_tensor_set *set, const char *path, ag_error *err) {
    const ag_tensor_ref *t = find(set, "conv_first.weight");
    if (t->dtype != AG_DTYPE_F32)
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "%s: conv_first.weight of a pixel-unshuffle RRDBNet must be float32",
                            path);
    if (t->shape[0] < 1 || t->shape[0] > AG_MAP_MAX_CHANNELS)
        return ag_error_set(err, AG_E_FORMAT, "%s: conv_first makes %lld channels; 1 to %d", path,
                            (long long)t->shape[0], AG_MAP_MAX_CHANNELS);
    int f = (int)t->shape[0];
    int64_t shape[4] = {f, 3, 6, 6};
    const void *src;
    void *tmp;
    int rc = ag_tensor_ref_elements(t, &src, &tmp, err);
    if (rc != AG_OK)
        return ag_error_prefix(rc, path, err);
    float *w = ag_malloc((size_t)f * 3 * 36 * sizeof(float));
    if (!w) {
        ag_free(tmp);
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory", path);
    }
    for (int o = 0; o < f; o++)
        for (int ch = 0; ch < 12; ch++)
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 3; b++) {
                    int c = ch / 4, dy = ch / 2 % 2, dx = ch % 2;
                    float v;
                    memcpy(&v, (const uint8_t *)src + sizeof v * (((o * 12 + ch) * 3 + a) * 3 + b),
                           sizeof v);
                    w[((o * 3 + c) * 6 + 2 * a + dy) * 6 + 2 * b + dx] = v;
                }
    ag_free(tmp);
    return add_tensor(set, S2D_WEIGHT, shape, w, path, err);
}

int ag_realesrgan_prepare(ag_tensor_set *set, const char *path, ag_error *err) {
    ag_realesrgan_arch a;
    int rc = ag_realesrgan_infer(set, path, &a, err);
    if (rc)
        return rc;
    if (a.kind == AG_REALESRGAN_SRVGG)
        return add_base_weight(set, a.scale, path, err);
    if (a.unshuffle == 2)
        return add_s2d_weight(set, path, err);
    if (a.unshuffle > 2)
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "%s: an x1 RRDBNet (pixel-unshuffle by 4) is not supported", path);
    return AG_OK;
}

/* ---- graph ------------------------------------------------------------------------------- */

static int add(rb *b, ag_node *n) {
    return ag_graph_add(b->g, n, b->err);
}

/* A zero-padded conv node `name` reading x with weight tensor `weight` (k x k), the bias
 * `bias` (NULL: none), stride and pad; -1 on failure. */
static int conv_node(rb *b, const char *name, int x, const char *weight, const char *bias, int k,
                     int stride, int pad, float weight_scale) {
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

/* The 3x3 conv (+ bias) of the state_dict prefix `prefix` reading x. */
static int conv(rb *b, const char *prefix, int x, float weight_scale) {
    char weight[AG_TENSOR_NAME_BYTES], bias[AG_TENSOR_NAME_BYTES];
    snprintf(weight, sizeof weight, "%s.weight", prefix);
    snprintf(bias, sizeof bias, "%s.bias", prefix);
    return conv_node(b, prefix, x, weight, bias, 3, 1, 1, weight_scale);
}

static int lrelu(rb *b, const char *prefix, int x) {
    char name[AG_GRAPH_NAME_BYTES];
    snprintf(name, sizeof name, "%.48s.act", prefix);
    ag_node n = ag_node_make(AG_OP_LRELU, name, x, -1);
    n.alpha = 0.2f;
    return add(b, &n);
}

/* One dense block "body.i.rdbj" on x: returns conv5 * 0.2 + x. */
static int dense_block(rb *b, const char *prefix, int x) {
    int feats[5] = {x};
    char name[AG_GRAPH_NAME_BYTES];
    for (int j = 1; j <= 5; j++) {
        int in = feats[0];
        if (j > 1) {
            snprintf(name, sizeof name, "%.40s.cat%d", prefix, j);
            ag_node cat = ag_node_make(AG_OP_CONCAT, name, -1, -1);
            for (int k = 0; k < j; k++)
                cat.src[k] = feats[k];
            if ((in = add(b, &cat)) < 0)
                return -1;
        }
        snprintf(name, sizeof name, "%.40s.conv%d", prefix, j);
        int c = conv(b, name, in, j == 5 ? 0.2f : 1.0f);
        if (c < 0)
            return -1;
        if (j == 5) {
            snprintf(name, sizeof name, "%.40s.add", prefix);
            ag_node sum = ag_node_make(AG_OP_ADD, name, c, x);
            return add(b, &sum);
        }
        if ((feats[j] = lrelu(b, name, c)) < 0)
            return -1;
    }
    return -1;
}

static int build_rrdb(rb *b, const ag_realesrgan_arch *a) {
    char name[AG_GRAPH_NAME_BYTES];
    int first = a->unshuffle == 2
                    ? conv_node(b, "conv_first", 0, S2D_WEIGHT, "conv_first.bias", 6, 2, 2, 1.0f)
                    : conv(b, "conv_first", 0, 1.0f);
    int y = first;
    for (int i = 0; i < a->blocks && y >= 0; i++) {
        int in = y;
        for (int j = 1; j <= 3 && y >= 0; j++) {
            snprintf(name, sizeof name, "body.%d.rdb%d", i, j);
            y = dense_block(b, name, y);
        }
        if (y < 0)
            return -1;
        snprintf(name, sizeof name, "body.%d.out", i);
        ag_node n = ag_node_make(AG_OP_ADD_SCALED, name, y, in);
        n.alpha = 0.2f;
        y = add(b, &n);
    }
    if (y < 0 || (y = conv(b, "conv_body", y, 1.0f)) < 0)
        return -1;
    ag_node sum = ag_node_make(AG_OP_ADD, "trunk", first, y);
    if ((y = add(b, &sum)) < 0)
        return -1;
    static const char *const ups[] = {"conv_up1", "conv_up2"};
    for (int u = 0; u < 2; u++) {
        snprintf(name, sizeof name, "%s.up", ups[u]);
        ag_node n = ag_node_make(AG_OP_NEAREST, name, y, -1);
        n.up = 2;
        if ((y = add(b, &n)) < 0 || (y = conv(b, ups[u], y, 1.0f)) < 0 ||
            (y = lrelu(b, ups[u], y)) < 0)
            return -1;
    }
    if ((y = conv(b, "conv_hr", y, 1.0f)) < 0 || (y = lrelu(b, "conv_hr", y)) < 0 ||
        (y = conv(b, "conv_last", y, 1.0f)) < 0)
        return -1;
    return y;
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
    int base = conv_node(b, "base", 0, BASE_WEIGHT, NULL, 1, 1, 0, 1.0f);
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
    int out = arch->kind == AG_REALESRGAN_RRDB ? build_rrdb(&b, arch) : build_srvgg(&b, arch);
    if (out < 0)
        return err->code ? err->code : AG_E_FORMAT;
    return ag_graph_add_output(g, out, err);
}
