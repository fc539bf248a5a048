/*
 * span.c - SPAN (Swift Parameter-free Attention Network, as spandrel's SPAN runs it in eval
 * mode) from a user's checkpoint: the width and scale from the tensors' shapes.
 *
 *   x' = (x - rgb_mean) * 255 (absent when the file has "no_norm"), conv_1, six SPABs, conv_2,
 *   conv_cat (1x1) over [conv_1's output, conv_2's, block_1's, block_6's SiLU(out1)], then
 *   upsampler.0 (3x3 to 3 s²) and a pixel shuffle by s. A SPAB on x: out1 = c1_r(x),
 *   out2 = c2_r(SiLU(out1)), out3 = c3_r(SiLU(out2)), (out3 + x) * (sigmoid(out3) - 0.5).
 *
 * Each Conv3XC (conv_1, c1_r..c3_r, conv_2) is, in eval mode, one 3x3 conv whose weights
 * spandrel recomputes from its training branches at every forward: 1x1 (conv.0), 3x3
 * (conv.1), 1x1 (conv.2) composed, plus the 1x1 skip (sk) at the centre tap. Those are
 * composed here once, at load, in double ("<name>.fused.weight"/".bias"); the stale
 * eval_conv tensors of the file are not read. The input normalisation is a 1x1 conv with
 * derived weights (the engine's first op on the image is a conv). SiLU and the attention
 * are the sigmoid_gate op.
 */
#include "upscaler_internal.h"

#include <stdio.h>
#include <string.h>

#define SPAN_BLOCKS 6
#define NORM_NAME "span.norm"

static const double rgb_mean[3] = {0.4488, 0.4371, 0.4040};

/* The Conv3XC modules, in graph order. */
static int conv3xc_name(int i, char *out, size_t size) {
    if (i == 0)
        return snprintf(out, size, "conv_1");
    if (i == 3 * SPAN_BLOCKS + 1)
        return snprintf(out, size, "conv_2");
    return snprintf(out, size, "block_%d.c%d_r", (i - 1) / 3 + 1, (i - 1) % 3 + 1);
}
#define CONV3XC_COUNT (3 * SPAN_BLOCKS + 2)

static const ag_tensor_ref *findp(const ag_tensor_set *set, const char *prefix,
                                  const char *suffix) {
    char name[AG_TENSOR_NAME_BYTES + 32];
    snprintf(name, sizeof name, "%s.%s", prefix, suffix);
    return ag_tensor_set_find(set, name);
}

int ag_span_detect(const ag_tensor_set *set) {
    return ag_tensor_set_find(set, "conv_1.sk.weight") &&
           ag_tensor_set_find(set, "block_1.c1_r.sk.weight") &&
           ag_tensor_set_find(set, "conv_cat.weight");
}

int ag_span_infer(const ag_tensor_set *set, const char *path, ag_realesrgan_arch *a,
                  ag_error *err) {
    const ag_tensor_ref *sk = ag_tensor_set_find(set, "conv_1.sk.weight");
    const ag_tensor_ref *up = ag_tensor_set_find(set, "upsampler.0.weight");
    if (!ag_is_conv(sk, 1) || sk->shape[1] != 3 || !ag_is_conv(up, 3))
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: a SPAN needs conv_1.sk.weight (F, 3, 1, 1) and "
                            "upsampler.0.weight (3 s², F, 3, 3)",
                            path);
    a->feat = (int)sk->shape[0];
    a->scale = 0;
    for (int s = 1; s <= 8; s++)
        if (3 * s * s == up->shape[0])
            a->scale = s;
    if (!a->scale)
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: upsampler.0.weight has %lld outputs, not 3 s² (s 1-8)", path,
                            (long long)up->shape[0]);
    for (int i = 1; i <= SPAN_BLOCKS; i++) {
        char name[48];
        snprintf(name, sizeof name, "block_%d.c1_r.sk.weight", i);
        if (!ag_tensor_set_find(set, name))
            return ag_error_set(err, AG_E_FORMAT, "%s: a SPAN has six blocks; %s is missing", path,
                                name);
    }
    a->blocks = SPAN_BLOCKS;
    a->unshuffle = 1;
    a->kind = AG_REALESRGAN_SPAN;
    int norm = !ag_tensor_set_find(set, "no_norm");
    snprintf(a->detail, sizeof a->detail, "%d features, %d blocks%s", a->feat, a->blocks,
             norm ? "" : ", no input normalisation");
    return AG_OK;
}

/* ---- derived weights --------------------------------------------------------------------- */

/* Check t is (d0, d1, k, k) (k 0: a vector (d0)); the error names it. */
static int expect(const ag_tensor_ref *t, const char *prefix, const char *suffix, int64_t d0,
                  int64_t d1, int k, const char *path, ag_error *err) {
    int ok = t && (k ? t->ndim == 4 && t->shape[0] == d0 && t->shape[1] == d1 && t->shape[2] == k &&
                           t->shape[3] == k
                     : t->ndim == 1 && t->shape[0] == d0);
    if (ok)
        return AG_OK;
    if (k)
        return ag_error_set(err, AG_E_FORMAT, "%s: %s.%s is not (%lld, %lld, %d, %d)", path, prefix,
                            suffix, (long long)d0, (long long)d1, k, k);
    return ag_error_set(err, AG_E_FORMAT, "%s: %s.%s is not (%lld)", path, prefix, suffix,
                        (long long)d0);
}

/* The Conv3XC `prefix` (ci -> co) as one 3x3 conv: W = W2 ∘ W1' ∘ W0 + sk at the centre,
 * b = W2 (W1' b0 + b1) + b2 + sk_b, where W1' sums each 3x3 kernel for the bias. */
static int fuse_conv3xc(ag_tensor_set *set, const char *prefix, int ci, int co, const char *path,
                        ag_error *err) {
    const ag_tensor_ref *w0 = findp(set, prefix, "conv.0.weight");
    const ag_tensor_ref *w1 = findp(set, prefix, "conv.1.weight");
    int m = w0 && w0->ndim == 4 ? (int)w0->shape[0] : 0;
    int n = w1 && w1->ndim == 4 ? (int)w1->shape[0] : 0;
    const struct {
        const char *suffix;
        int64_t d0, d1;
        int k;
    } parts[] = {{"conv.0.weight", m, ci, 1}, {"conv.0.bias", m, 0, 0},
                 {"conv.1.weight", n, m, 3},  {"conv.1.bias", n, 0, 0},
                 {"conv.2.weight", co, n, 1}, {"conv.2.bias", co, 0, 0},
                 {"sk.weight", co, ci, 1},    {"sk.bias", co, 0, 0}};
    size_t counts[8], total = 0;
    for (int p = 0; p < 8; p++) {
        int rc = expect(findp(set, prefix, parts[p].suffix), prefix, parts[p].suffix, parts[p].d0,
                        parts[p].d1, parts[p].k, path, err);
        if (rc || m < 1 || n < 1)
            return rc ? rc : ag_error_set(err, AG_E_FORMAT, "%s: %s.conv is empty", path, prefix);
        counts[p] =
            (size_t)parts[p].d0 * (parts[p].k ? (size_t)parts[p].d1 * parts[p].k * parts[p].k : 1);
        total += counts[p];
    }
    double *v = ag_malloc((total + (size_t)n * ci * 9) * sizeof(double));
    float *w = ag_calloc((size_t)co * ci * 9 + co, sizeof(float)); /* weight, then bias */
    int rc = v && w ? AG_OK : ag_error_set(err, AG_E_NOMEM, "%s: out of memory", path);
    double *vals[8];
    for (int p = 0, off = 0; p < 8 && rc == AG_OK; off += (int)counts[p], p++) {
        vals[p] = v + off;
        rc = ag_tensor_values(findp(set, prefix, parts[p].suffix), vals[p], counts[p], path, err);
    }
    if (rc == AG_OK) {
        const double *W0 = vals[0], *B0 = vals[1], *W1 = vals[2], *B1 = vals[3], *W2 = vals[4],
                     *B2 = vals[5], *SK = vals[6], *SB = vals[7];
        double *W10 = v + total; /* (n, ci, 3, 3): W1 ∘ W0 */
        for (int o = 0; o < n; o++)
            for (int i = 0; i < ci; i++)
                for (int t = 0; t < 9; t++) {
                    double sum = 0;
                    for (int j = 0; j < m; j++)
                        sum += W1[((size_t)o * m + j) * 9 + t] * W0[(size_t)j * ci + i];
                    W10[((size_t)o * ci + i) * 9 + t] = sum;
                }
        float *bias = w + (size_t)co * ci * 9;
        for (int o = 0; o < co; o++) {
            double b = B2[o] + SB[o];
            for (int j = 0; j < n; j++) {
                double bj = B1[j];
                for (int k = 0; k < m; k++)
                    for (int t = 0; t < 9; t++)
                        bj += W1[((size_t)j * m + k) * 9 + t] * B0[k];
                b += W2[(size_t)o * n + j] * bj;
            }
            bias[o] = (float)b;
            for (int i = 0; i < ci; i++)
                for (int t = 0; t < 9; t++) {
                    double sum = t == 4 ? SK[(size_t)o * ci + i] : 0;
                    for (int j = 0; j < n; j++)
                        sum += W2[(size_t)o * n + j] * W10[((size_t)j * ci + i) * 9 + t];
                    w[((size_t)o * ci + i) * 9 + t] = (float)sum;
                }
        }
    }
    ag_free(v);
    if (rc != AG_OK) {
        ag_free(w);
        return rc;
    }
    char name[AG_TENSOR_NAME_BYTES];
    int64_t shape[4] = {co, ci, 3, 3}, bshape[1] = {co};
    snprintf(name, sizeof name, "%s.fused.weight", prefix);
    rc = ag_upscaler_add_tensor(set, name, 4, shape, w, path, err);
    if (rc)
        return rc;
    float *b = ag_malloc((size_t)co * sizeof(float));
    if (!b)
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory", path);
    memcpy(b, w + (size_t)co * ci * 9, (size_t)co * sizeof(float));
    snprintf(name, sizeof name, "%s.fused.bias", prefix);
    return ag_upscaler_add_tensor(set, name, 1, bshape, b, path, err);
}

/* (x - mean) * 255 as a 1x1 conv: weight 255 I, bias -255 mean. */
static int add_norm(ag_tensor_set *set, const char *path, ag_error *err) {
    float *w = ag_calloc(9, sizeof(float)), *b = ag_malloc(3 * sizeof(float));
    if (!w || !b) {
        ag_free(w);
        ag_free(b);
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory", path);
    }
    for (int c = 0; c < 3; c++)
        w[c * 3 + c] = 255.0f, b[c] = (float)(-255.0 * rgb_mean[c]);
    int64_t shape[4] = {3, 3, 1, 1}, bshape[1] = {3};
    int rc = ag_upscaler_add_tensor(set, NORM_NAME ".weight", 4, shape, w, path, err);
    if (rc) {
        ag_free(b);
        return rc;
    }
    return ag_upscaler_add_tensor(set, NORM_NAME ".bias", 1, bshape, b, path, err);
}

int ag_span_prepare(ag_tensor_set *set, const ag_realesrgan_arch *a, const char *path,
                    ag_error *err) {
    int rc = ag_tensor_set_find(set, "no_norm") ? AG_OK : add_norm(set, path, err);
    for (int i = 0; i < CONV3XC_COUNT && rc == AG_OK; i++) {
        char prefix[32];
        conv3xc_name(i, prefix, sizeof prefix);
        rc = fuse_conv3xc(set, prefix, i == 0 ? 3 : a->feat, a->feat, path, err);
    }
    return rc;
}

/* ---- graph ------------------------------------------------------------------------------- */

static int gate(ag_upscaler_builder *b, const char *name, int x, int g, float shift) {
    ag_node n = ag_node_make(AG_OP_SIGMOID_GATE, name, x, g);
    n.alpha = shift;
    return ag_graph_add(b->g, &n, b->err);
}

static int fused(ag_upscaler_builder *b, int i, int x) {
    char prefix[32], full[48];
    conv3xc_name(i, prefix, sizeof prefix);
    snprintf(full, sizeof full, "%s.fused", prefix);
    return ag_upscaler_conv_k(b, full, x, 3);
}

/* SPAB `i` (1-based) on x; *out1 gets its first conv's output after the SiLU (spandrel's
 * SiLU runs in place, so the out1 a SPAB returns is the activated one). */
static int spab(ag_upscaler_builder *b, int i, int x, int *out1) {
    char name[AG_GRAPH_NAME_BYTES];
    int y = x;
    for (int c = 1; c <= 3 && y >= 0; c++) {
        int o = fused(b, 3 * (i - 1) + c, y);
        if (c == 3 || o < 0) {
            y = o;
            break;
        }
        snprintf(name, sizeof name, "block_%d.silu%d", i, c);
        y = gate(b, name, o, o, 0.0f);
        if (c == 1)
            *out1 = y;
    }
    if (y < 0)
        return -1;
    snprintf(name, sizeof name, "block_%d.sum", i);
    ag_node sum = ag_node_make(AG_OP_ADD, name, y, x);
    int s = ag_graph_add(b->g, &sum, b->err);
    snprintf(name, sizeof name, "block_%d.attention", i);
    return s < 0 ? -1 : gate(b, name, s, y, 0.5f);
}

int ag_span_graph(ag_upscaler_builder *b, const ag_realesrgan_arch *a) {
    int x = 0;
    if (ag_tensor_set_find(b->set, NORM_NAME ".weight") &&
        (x = ag_upscaler_conv(b, NORM_NAME, 0, NORM_NAME ".weight", NORM_NAME ".bias", 1, 1, 0,
                              1.0f)) < 0)
        return -1;
    int feature = fused(b, 0, x), y = feature, b1 = -1, b6_1 = -1, first = -1;
    for (int i = 1; i <= SPAN_BLOCKS && y >= 0; i++) {
        y = spab(b, i, y, i == SPAN_BLOCKS ? &b6_1 : &first);
        if (i == 1)
            b1 = y;
    }
    if (feature < 0 || y < 0 || (y = fused(b, 3 * SPAN_BLOCKS + 1, y)) < 0)
        return -1;
    ag_node cat = ag_node_make(AG_OP_CONCAT, "cat", feature, y);
    cat.src[2] = b1, cat.src[3] = b6_1;
    if ((y = ag_graph_add(b->g, &cat, b->err)) < 0 ||
        (y = ag_upscaler_conv_k(b, "conv_cat", y, 1)) < 0 ||
        (y = ag_upscaler_conv_k(b, "upsampler.0", y, 3)) < 0)
        return -1;
    ag_node ps = ag_node_make(AG_OP_PIXEL_SHUFFLE, "out", y, -1);
    ps.up = a->scale;
    return ag_graph_add(b->g, &ps, b->err);
}
