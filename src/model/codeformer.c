/*
 * codeformer.c - CodeFormer (sczhou/CodeFormer, basicsr/archs/codeformer_arch.py and
 * vqgan_arch.py) from its state_dict: the architecture from tensor shapes, the layout every
 * file is checked against, and the graph.
 *
 * The network: a VQGAN encoder (a conv, two ResBlocks per level at 512 .. 16 px with a
 * stride-2 Downsample between levels, AttnBlocks at 16, then ResBlock, AttnBlock, ResBlock,
 * GroupNorm, conv to the 256-channel latent); a transformer over the latent's 256 tokens
 * (feat_emb, `layers` pre-norm layers of 8-head self-attention with the learned position
 * embedding added to queries and keys, GELU feed-forward; LayerNorm and the logits head);
 * the top-1 code of each token looked up in the codebook, AdaIN'ed to the latent's
 * statistics (adain=True, as inference_codeformer.py); the VQGAN generator mirroring the
 * encoder with nearest Upsamples, where after the block of fuse_generator_block at each
 * size of connect_list the controllable feature transformation adds
 * w (dec * scale + shift), scale and shift computed from the encoder's feature of that size.
 * ResBlocks are GroupNorm(32, eps 1e-6), swish, conv 3x3, twice, plus a 1x1 conv_out when
 * the width changes. The generator's output is the image in [-1, 1] (clamped by the caller).
 *
 * Anchors: position_emb (tokens, dim), encoder.blocks.0 (nf), the first ResBlock's conv1 of
 * each level (its channels), quantize.embedding (codebook, emb_dim), ft_layers.{n} (layers),
 * linear1 (mlp), fuse_convs_dict.{size} (connect_list). The head count is not in the file:
 * 8, as upstream's CodeFormer.
 */
#include "restore_internal.h"

#include <stdio.h>
#include <string.h>

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define CF_SIZE 512
#define CF_LATENT 16 /* the latent's side: CF_SIZE >> (AG_CF_LEVELS - 1) */
#define CF_HEADS 8
#define CF_GROUPS 32 /* upstream's GroupNorm(32) */

/* Upstream's fuse_encoder_block / fuse_generator_block by level (512 .. 16 px). */
static const int enc_fuse_block[AG_CF_LEVELS] = {2, 5, 8, 11, 14, 18};
static const int gen_fuse_block[AG_CF_LEVELS] = {21, 18, 15, 12, 9, 6};

/* ---- the VQGAN's block lists ------------------------------------------------------------ */

typedef enum vq_kind { VQ_CONV, VQ_RES, VQ_ATTN, VQ_DOWN, VQ_UP, VQ_NORM } vq_kind;
typedef struct vq_block {
    vq_kind kind;
    int ic, oc;
    int level; /* of its output: 0 at 512 px .. AG_CF_LEVELS - 1 at 16 */
} vq_block;
#define VQ_MAX_BLOCKS 40

static void push(vq_block *b, int *n, vq_kind kind, int ic, int oc, int level) {
    AG_ASSERT(*n < VQ_MAX_BLOCKS);
    b[(*n)++] = (vq_block){kind, ic, oc, level};
}

/* upstream's Encoder(3, nf, emb_dim, ch_mult, 2, 512, [16]). */
static int encoder_blocks(const ag_codeformer_arch *cf, vq_block *b) {
    int n = 0, c = cf->nf, last = AG_CF_LEVELS - 1;
    push(b, &n, VQ_CONV, 3, c, 0);
    for (int i = 0; i <= last; i++) {
        for (int r = 0; r < 2; r++) {
            push(b, &n, VQ_RES, c, cf->ch[i], i);
            c = cf->ch[i];
            if (i == last)
                push(b, &n, VQ_ATTN, c, c, i);
        }
        if (i != last)
            push(b, &n, VQ_DOWN, c, c, i + 1);
    }
    push(b, &n, VQ_RES, c, c, last);
    push(b, &n, VQ_ATTN, c, c, last);
    push(b, &n, VQ_RES, c, c, last);
    push(b, &n, VQ_NORM, c, c, last);
    push(b, &n, VQ_CONV, c, cf->emb_dim, last);
    return n;
}

/* upstream's Generator(nf, emb_dim, ch_mult, 2, 512, [16]). */
static int generator_blocks(const ag_codeformer_arch *cf, vq_block *b) {
    int n = 0, last = AG_CF_LEVELS - 1, c = cf->ch[last];
    push(b, &n, VQ_CONV, cf->emb_dim, c, last);
    push(b, &n, VQ_RES, c, c, last);
    push(b, &n, VQ_ATTN, c, c, last);
    push(b, &n, VQ_RES, c, c, last);
    for (int i = last; i >= 0; i--) {
        for (int r = 0; r < 2; r++) {
            push(b, &n, VQ_RES, c, cf->ch[i], i);
            c = cf->ch[i];
            if (i == last)
                push(b, &n, VQ_ATTN, c, c, i);
        }
        if (i != 0)
            push(b, &n, VQ_UP, c, c, i - 1);
    }
    push(b, &n, VQ_NORM, c, c, 0);
    push(b, &n, VQ_CONV, c, 3, 0);
    return n;
}

/* ---- the layout ------------------------------------------------------------------------- */

static void conv(ag_layout *l, const char *p, int ic, int oc, int k) {
    ag_layout_add(l, 4, SHAPE(oc, ic, k, k), "%s.weight", p);
    ag_layout_add(l, 1, SHAPE(oc), "%s.bias", p);
}

static void norm(ag_layout *l, const char *p, int c) {
    ag_layout_add(l, 1, SHAPE(c), "%s.weight", p);
    ag_layout_add(l, 1, SHAPE(c), "%s.bias", p);
}

static void res_layout(ag_layout *l, const char *p, int ic, int oc) {
    char q[AG_TENSOR_NAME_BYTES];
    snprintf(q, sizeof q, "%s.norm1", p);
    norm(l, q, ic);
    snprintf(q, sizeof q, "%s.conv1", p);
    conv(l, q, ic, oc, 3);
    snprintf(q, sizeof q, "%s.norm2", p);
    norm(l, q, oc);
    snprintf(q, sizeof q, "%s.conv2", p);
    conv(l, q, oc, oc, 3);
    snprintf(q, sizeof q, "%s.conv_out", p);
    if (ic != oc)
        conv(l, q, ic, oc, 1);
}

static void block_layout(ag_layout *l, const char *p, const vq_block *b) {
    static const char *const attn[] = {"q", "k", "v", "proj_out"};
    char q[AG_TENSOR_NAME_BYTES];
    switch (b->kind) {
    case VQ_CONV: conv(l, p, b->ic, b->oc, 3); break;
    case VQ_RES: res_layout(l, p, b->ic, b->oc); break;
    case VQ_ATTN:
        snprintf(q, sizeof q, "%s.norm", p);
        norm(l, q, b->ic);
        for (int i = 0; i < 4; i++) {
            snprintf(q, sizeof q, "%s.%s", p, attn[i]);
            conv(l, q, b->ic, b->ic, 1);
        }
        break;
    case VQ_DOWN:
    case VQ_UP:
        snprintf(q, sizeof q, "%s.conv", p);
        conv(l, q, b->ic, b->oc, 3);
        break;
    case VQ_NORM: norm(l, p, b->ic); break;
    }
}

static void vqgan_layout(const ag_codeformer_arch *cf, ag_layout *l) {
    vq_block b[VQ_MAX_BLOCKS];
    char p[AG_TENSOR_NAME_BYTES];
    int n = encoder_blocks(cf, b);
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "encoder.blocks.%d", i);
        block_layout(l, p, &b[i]);
    }
    ag_layout_add(l, 2, SHAPE(cf->codebook, cf->emb_dim), "quantize.embedding.weight");
    n = generator_blocks(cf, b);
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "generator.blocks.%d", i);
        block_layout(l, p, &b[i]);
    }
}

static void transformer_layout(const ag_codeformer_arch *cf, ag_layout *l) {
    const int d = cf->dim;
    ag_layout_add(l, 2, SHAPE(CF_LATENT * CF_LATENT, d), "position_emb");
    ag_layout_add(l, 2, SHAPE(d, cf->emb_dim), "feat_emb.weight");
    ag_layout_add(l, 1, SHAPE(d), "feat_emb.bias");
    for (int i = 0; i < cf->layers; i++) {
        ag_layout_add(l, 2, SHAPE(3 * d, d), "ft_layers.%d.self_attn.in_proj_weight", i);
        ag_layout_add(l, 1, SHAPE(3 * d), "ft_layers.%d.self_attn.in_proj_bias", i);
        ag_layout_add(l, 2, SHAPE(d, d), "ft_layers.%d.self_attn.out_proj.weight", i);
        ag_layout_add(l, 1, SHAPE(d), "ft_layers.%d.self_attn.out_proj.bias", i);
        ag_layout_add(l, 2, SHAPE(cf->mlp, d), "ft_layers.%d.linear1.weight", i);
        ag_layout_add(l, 1, SHAPE(cf->mlp), "ft_layers.%d.linear1.bias", i);
        ag_layout_add(l, 2, SHAPE(d, cf->mlp), "ft_layers.%d.linear2.weight", i);
        ag_layout_add(l, 1, SHAPE(d), "ft_layers.%d.linear2.bias", i);
        for (int k = 1; k <= 2; k++) {
            ag_layout_add(l, 1, SHAPE(d), "ft_layers.%d.norm%d.weight", i, k);
            ag_layout_add(l, 1, SHAPE(d), "ft_layers.%d.norm%d.bias", i, k);
        }
    }
    norm(l, "idx_pred_layer.0", d);
    ag_layout_add(l, 2, SHAPE(cf->codebook, d), "idx_pred_layer.1.weight");
}

static void fuse_layout(const ag_codeformer_arch *cf, ag_layout *l) {
    char p[AG_TENSOR_NAME_BYTES];
    for (int i = 0; i < AG_CF_LEVELS; i++) {
        if (!cf->fuse[i])
            continue;
        int c = cf->ch[i], s = CF_SIZE >> i;
        snprintf(p, sizeof p, "fuse_convs_dict.%d.encode_enc", s);
        res_layout(l, p, 2 * c, c);
        for (int k = 0; k < 4; k++) {
            snprintf(p, sizeof p, "fuse_convs_dict.%d.%s.%d", s, k < 2 ? "scale" : "shift",
                     2 * (k % 2));
            conv(l, p, c, c, 3);
        }
    }
}

/* ---- the architecture ------------------------------------------------------------------- */

static int dim_of(const ag_tensor_set *set, const char *name, int ndim, int dim, const char *path,
                  int *out, ag_error *err) {
    int64_t v = ag_restore_dim(set, name, ndim, dim, path, "CodeFormer", err);
    *out = (int)v;
    return v < 0 ? AG_E_FORMAT : AG_OK;
}

static int read_anchors(const ag_tensor_set *set, const char *path, ag_codeformer_arch *cf,
                        ag_error *err) {
    char name[AG_TENSOR_NAME_BYTES];
    int tokens = 0, rc = dim_of(set, "position_emb", 2, 0, path, &tokens, err);
    if (rc == AG_OK)
        rc = dim_of(set, "position_emb", 2, 1, path, &cf->dim, err);
    if (rc == AG_OK)
        rc = dim_of(set, "encoder.blocks.0.weight", 4, 0, path, &cf->nf, err);
    for (int i = 0; rc == AG_OK && i < AG_CF_LEVELS; i++) {
        snprintf(name, sizeof name, "encoder.blocks.%d.conv1.weight", 1 + 3 * i);
        rc = dim_of(set, name, 4, 0, path, &cf->ch[i], err);
    }
    if (rc == AG_OK)
        rc = dim_of(set, "quantize.embedding.weight", 2, 0, path, &cf->codebook, err);
    if (rc == AG_OK)
        rc = dim_of(set, "quantize.embedding.weight", 2, 1, path, &cf->emb_dim, err);
    if (rc == AG_OK)
        rc = dim_of(set, "ft_layers.0.linear1.weight", 2, 0, path, &cf->mlp, err);
    if (rc != AG_OK)
        return rc;
    if (tokens != CF_LATENT * CF_LATENT)
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: tensor 'position_emb' has %d positions where CodeFormer's "
                            "16x16 latent has 256",
                            path, tokens);
    while (cf->layers < 64) {
        snprintf(name, sizeof name, "ft_layers.%d.linear1.weight", cf->layers);
        if (!ag_tensor_set_find(set, name))
            break;
        cf->layers++;
    }
    for (int i = 0; i < AG_CF_LEVELS; i++) {
        snprintf(name, sizeof name, "fuse_convs_dict.%d.scale.0.weight", CF_SIZE >> i);
        cf->fuse[i] = ag_tensor_set_find(set, name) != NULL;
    }
    return AG_OK;
}

/* The widths GroupNorm(32) and the 8 heads split. */
static int check_widths(const ag_codeformer_arch *cf, const char *path, ag_error *err) {
    if (cf->dim % cf->heads)
        return ag_error_set(err, AG_E_FORMAT,
                            "%s: tensor 'position_emb' is %d wide, which CodeFormer's %d heads "
                            "do not divide",
                            path, cf->dim, cf->heads);
    for (int i = 0; i < AG_CF_LEVELS; i++)
        if (cf->ch[i] % CF_GROUPS || (i == 0 && cf->nf % CF_GROUPS))
            return ag_error_set(err, AG_E_FORMAT,
                                "%s: tensor 'encoder.blocks.%d.conv1.weight' has %d channels, "
                                "not a multiple of GroupNorm's 32 groups",
                                path, 1 + 3 * i, cf->ch[i]);
    return AG_OK;
}

int ag_codeformer_arch_infer(const ag_tensor_set *set, const char *path, ag_restore_arch *a,
                             ag_layout *l, ag_error *err) {
    a->kind = AG_RESTORE_CODEFORMER;
    a->size = CF_SIZE;
    a->log_size = 9;
    snprintf(l->net, sizeof l->net, "CodeFormer %dx%d", CF_SIZE, CF_SIZE);
    ag_codeformer_arch *cf = &a->cf;
    cf->heads = CF_HEADS;
    int rc = read_anchors(set, path, cf, err);
    if (rc == AG_OK)
        rc = check_widths(cf, path, err);
    if (rc != AG_OK)
        return rc;
    transformer_layout(cf, l);
    vqgan_layout(cf, l);
    fuse_layout(cf, l);
    return AG_OK;
}

/* ---- views for the linear layers -------------------------------------------------------- */

/* The 2-D weight `name` as (OC, IC, 1, 1), in place. */
static void as_1x1(ag_tensor_set *set, const char *name) {
    ag_tensor_ref *t = (ag_tensor_ref *)ag_tensor_set_find(set, name);
    AG_ASSERT(t && t->ndim == 2);
    t->ndim = 4;
    t->shape[2] = t->shape[3] = 1;
    t->stride[2] = t->stride[3] = 1;
}

/* A view "<name><suffix>" of rows [r0, r0 + rows) of the 1-D or 2-D tensor `name`; 2-D as
 * (rows, IC, 1, 1). */
static int row_view(ag_tensor_set *set, const char *name, const char *suffix, int64_t r0,
                    int64_t rows, ag_error *err) {
    ag_tensor_ref v = *ag_tensor_set_find(set, name);
    size_t es = ag_dtype_size(v.dtype);
    int64_t row =
        v.ndim == 2 ? (v.strided ? v.stride[0] : v.shape[1]) : (v.strided ? v.stride[0] : 1);
    v.data = (const uint8_t *)v.data + (size_t)(r0 * row) * es;
    v.shape[0] = rows;
    if (v.ndim == 2) {
        v.ndim = 4;
        v.shape[2] = v.shape[3] = 1;
        v.stride[2] = v.stride[3] = 1;
    }
    v.nbytes = (size_t)rows * (v.ndim == 4 ? (size_t)v.shape[1] : 1) * es;
    snprintf(v.name, sizeof v.name, "%s%s", name, suffix);
    return ag_tensor_set_add(set, &v, err);
}

int ag_codeformer_views(ag_tensor_set *set, const ag_restore_arch *a, ag_error *err) {
    const ag_codeformer_arch *cf = &a->cf;
    static const char *const qkv[3] = {"#q", "#k", "#v"};
    char name[AG_TENSOR_NAME_BYTES];
    as_1x1(set, "feat_emb.weight");
    as_1x1(set, "idx_pred_layer.1.weight");
    int rc = AG_OK;
    for (int i = 0; rc == AG_OK && i < cf->layers; i++) {
        static const char *const linear[] = {"self_attn.out_proj", "linear1", "linear2"};
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "ft_layers.%d.%s.weight", i, linear[k]);
            as_1x1(set, name);
        }
        for (int k = 0; rc == AG_OK && k < 3; k++) {
            snprintf(name, sizeof name, "ft_layers.%d.self_attn.in_proj_weight", i);
            rc = row_view(set, name, qkv[k], (int64_t)k * cf->dim, cf->dim, err);
            snprintf(name, sizeof name, "ft_layers.%d.self_attn.in_proj_bias", i);
            if (rc == AG_OK)
                rc = row_view(set, name, qkv[k], (int64_t)k * cf->dim, cf->dim, err);
        }
    }
    if (rc != AG_OK)
        return rc;
    /* position_emb (tokens, dim) = (16, 16, dim) pixels-major: as (1, dim, 16, 16). */
    ag_tensor_ref pos = *ag_tensor_set_find(set, "position_emb");
    int64_t row = pos.strided ? pos.stride[0] : pos.shape[1], col = pos.strided ? pos.stride[1] : 1;
    pos.ndim = 4;
    memcpy(pos.shape, SHAPE(1, cf->dim, CF_LATENT, CF_LATENT), 4 * sizeof(int64_t));
    memcpy(pos.stride, SHAPE(0, col, CF_LATENT * row, row), 4 * sizeof(int64_t));
    pos.strided = true;
    snprintf(pos.name, sizeof pos.name, "position_emb#map");
    return ag_tensor_set_add(set, &pos, err);
}

/* ---- the graph -------------------------------------------------------------------------- */

static int node_of(ag_rgraph *b, ag_op op, const char *p, const char *suffix, int x, int y) {
    ag_node n = ag_rg_node(op, p, suffix, x, y);
    return ag_rg_add(b, &n);
}

/* A conv of tensors `weight` / `bias` (indices, bias -1: none), zero pads top, bottom,
 * left, right. */
static int conv_of(ag_rgraph *b, const char *p, int x, int weight, int bias, int stride,
                   const int *pad) {
    ag_node n = ag_rg_node(AG_OP_CONV, p, "conv", x, -1);
    n.tensor[AG_T_WEIGHT] = weight;
    n.tensor[AG_T_BIAS] = bias;
    n.k = (int)b->set->tensors[weight].shape[2];
    n.stride = stride;
    memcpy(n.pad, pad, sizeof n.pad);
    n.pad_mode = AG_PAD_ZERO;
    n.weight_scale = 1.0f;
    return ag_rg_add(b, &n);
}

static int conv_named(ag_rgraph *b, const char *p, int x) {
    int w = ag_rg_tensor(b, "%s.weight", p), k = (int)b->set->tensors[w].shape[2];
    const int same[4] = {k / 2, k / 2, k / 2, k / 2};
    return conv_of(b, p, x, w, ag_rg_tensor(b, "%s.bias", p), 1, same);
}

/* GroupNorm "<p>.{weight,bias}" (32 groups, eps 1e-6) or LayerNorm over the channels. */
static int norm_node(ag_rgraph *b, ag_op op, const char *p, int x) {
    ag_node n = ag_rg_node(op, p, "norm", x, -1);
    n.tensor[AG_T_GAMMA] = ag_rg_tensor(b, "%s.weight", p);
    n.tensor[AG_T_BETA] = ag_rg_tensor(b, "%s.bias", p);
    n.groups = CF_GROUPS;
    n.eps = op == AG_OP_GROUP_NORM ? 1e-6f : 1e-5f;
    return ag_rg_add(b, &n);
}

/* x * sigmoid(x). */
static int swish(ag_rgraph *b, const char *p, int x) {
    ag_node n = ag_rg_node(AG_OP_SIGMOID_GATE, p, "swish", x, x);
    n.alpha = 0.0f;
    return ag_rg_add(b, &n);
}

static int res_node(ag_rgraph *b, const char *p, int x, int ic, int oc) {
    char q[AG_TENSOR_NAME_BYTES], c[AG_TENSOR_NAME_BYTES];
    int y = x;
    for (int k = 1; k <= 2; k++) {
        snprintf(q, sizeof q, "%s.norm%d", p, k);
        snprintf(c, sizeof c, "%s.conv%d", p, k);
        y = conv_named(b, c, swish(b, q, norm_node(b, AG_OP_GROUP_NORM, q, y)));
    }
    if (ic != oc) {
        snprintf(c, sizeof c, "%s.conv_out", p);
        x = conv_named(b, c, x);
    }
    return node_of(b, AG_OP_ADD, p, "add", y, x);
}

/* AttnBlock: x + proj_out(attention(q, k, v of GroupNorm(x))), one head. */
static int attn_node(ag_rgraph *b, const char *p, int x) {
    char q[AG_TENSOR_NAME_BYTES];
    snprintf(q, sizeof q, "%s.norm", p);
    int h = norm_node(b, AG_OP_GROUP_NORM, q, x), qkv[3];
    static const char *const names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        snprintf(q, sizeof q, "%s.%s", p, names[i]);
        qkv[i] = conv_named(b, q, h);
    }
    ag_node a = ag_rg_node(AG_OP_ATTENTION, p, "attention", qkv[0], qkv[1]);
    a.src[2] = qkv[2];
    a.groups = 1;
    snprintf(q, sizeof q, "%s.proj_out", p);
    return node_of(b, AG_OP_ADD, p, "add", x, conv_named(b, q, ag_rg_add(b, &a)));
}

static int block_node(ag_rgraph *b, const char *p, const vq_block *blk, int x) {
    char q[AG_TENSOR_NAME_BYTES];
    snprintf(q, sizeof q, "%s.conv", p);
    switch (blk->kind) {
    case VQ_CONV: return conv_named(b, p, x);
    case VQ_RES: return res_node(b, p, x, blk->ic, blk->oc);
    case VQ_ATTN: return attn_node(b, p, x);
    case VQ_DOWN: { /* pad right and bottom by 1, conv 3x3 stride 2 */
        const int pad[4] = {0, 1, 0, 1};
        return conv_of(b, q, x, ag_rg_tensor(b, "%s.weight", q), ag_rg_tensor(b, "%s.bias", q), 2,
                       pad);
    }
    case VQ_UP: {
        ag_node n = ag_rg_node(AG_OP_NEAREST, p, "nearest", x, -1);
        n.up = 2;
        return conv_named(b, q, ag_rg_add(b, &n));
    }
    case VQ_NORM: return norm_node(b, AG_OP_GROUP_NORM, p, x);
    }
    return -1;
}

/* A linear layer as a 1x1 conv of tensors "<p><suffix>" ("" or "#q" ...), bias optional. */
static int linear_node(ag_rgraph *b, const char *p, const char *wname, const char *bname, int x) {
    const int none[4] = {0, 0, 0, 0};
    return conv_of(b, p, x, ag_rg_tensor(b, "%s", wname), bname ? ag_rg_tensor(b, "%s", bname) : -1,
                   1, none);
}

/* One TransformerSALayer (pre-norm): x += out_proj(attn(n1 + pos, n1 + pos, n1));
 * x += linear2(gelu(linear1(norm2(x)))). */
static int transformer_layer(ag_rgraph *b, const ag_codeformer_arch *cf, int i, int x, int pos) {
    char p[48], w[AG_TENSOR_NAME_BYTES], bias[AG_TENSOR_NAME_BYTES];
    snprintf(p, sizeof p, "ft_layers.%d.norm1", i);
    int n1 = norm_node(b, AG_OP_TOKEN_NORM, p, x);
    snprintf(p, sizeof p, "ft_layers.%d.self_attn", i);
    int qk_in = node_of(b, AG_OP_ADD, p, "pos", n1, pos), qkv[3];
    for (int k = 0; k < 3; k++) {
        static const char *const part[3] = {"q", "k", "v"};
        snprintf(w, sizeof w, "%s.in_proj_weight#%s", p, part[k]);
        snprintf(bias, sizeof bias, "%s.in_proj_bias#%s", p, part[k]);
        qkv[k] = linear_node(b, w, w, bias, k < 2 ? qk_in : n1);
    }
    ag_node a = ag_rg_node(AG_OP_ATTENTION, p, "attention", qkv[0], qkv[1]);
    a.src[2] = qkv[2];
    a.groups = cf->heads;
    snprintf(w, sizeof w, "%s.out_proj.weight", p);
    snprintf(bias, sizeof bias, "%s.out_proj.bias", p);
    int o = linear_node(b, w, w, bias, ag_rg_add(b, &a));
    x = node_of(b, AG_OP_ADD, p, "add", x, o);
    snprintf(p, sizeof p, "ft_layers.%d.norm2", i);
    int h = norm_node(b, AG_OP_TOKEN_NORM, p, x);
    for (int k = 1; k <= 2; k++) {
        snprintf(w, sizeof w, "ft_layers.%d.linear%d.weight", i, k);
        snprintf(bias, sizeof bias, "ft_layers.%d.linear%d.bias", i, k);
        h = linear_node(b, w, w, bias, h);
        if (k == 1)
            h = node_of(b, AG_OP_GELU, w, "gelu", h, -1);
    }
    snprintf(p, sizeof p, "ft_layers.%d", i);
    return node_of(b, AG_OP_ADD, p, "ffn_add", x, h);
}

/* The latent (16, 16, emb_dim) to the AdaIN'ed codebook features of its predicted codes. */
static int codes_node(ag_rgraph *b, const ag_codeformer_arch *cf, int lq) {
    int x = linear_node(b, "feat_emb", "feat_emb.weight", "feat_emb.bias", lq);
    ag_node pos = ag_rg_node(AG_OP_CONST, "position_emb", "map", -1, -1);
    pos.tensor[AG_T_WEIGHT] = ag_rg_tensor(b, "position_emb#map");
    int p = ag_rg_add(b, &pos);
    for (int i = 0; i < cf->layers; i++)
        x = transformer_layer(b, cf, i, x, p);
    x = norm_node(b, AG_OP_TOKEN_NORM, "idx_pred_layer.0", x);
    int logits = linear_node(b, "idx_pred_layer.1", "idx_pred_layer.1.weight", NULL, x);
    ag_node cb = ag_rg_node(AG_OP_CODEBOOK, "quantize", "codebook", logits, -1);
    cb.tensor[AG_T_WEIGHT] = ag_rg_tensor(b, "quantize.embedding.weight");
    ag_node adain = ag_rg_node(AG_OP_ADAIN, "quantize", "adain", ag_rg_add(b, &cb), lq);
    adain.eps = 1e-5f;
    return ag_rg_add(b, &adain);
}

/* Fuse_sft_block: dec + w (dec * scale + shift), scale and shift two convs (LeakyReLU 0.2
 * between) of ResBlock(concat(enc, dec)); w the engine's run-time fidelity. */
static int fuse_node(ag_rgraph *b, const ag_codeformer_arch *cf, int level, int enc, int dec) {
    char p[48], q[AG_TENSOR_NAME_BYTES];
    snprintf(p, sizeof p, "fuse_convs_dict.%d", CF_SIZE >> level);
    snprintf(q, sizeof q, "%s.encode_enc", p);
    int c = cf->ch[level];
    int e = res_node(b, q, node_of(b, AG_OP_CONCAT, p, "concat", enc, dec), 2 * c, c), ss[2];
    for (int k = 0; k < 2; k++) {
        snprintf(q, sizeof q, "%s.%s.0", p, k ? "shift" : "scale");
        int y = node_of(b, AG_OP_LRELU, q, "act", conv_named(b, q, e), -1);
        snprintf(q, sizeof q, "%s.%s.2", p, k ? "shift" : "scale");
        ss[k] = conv_named(b, q, y);
    }
    ag_node sft = ag_rg_node(AG_OP_SFT, p, "sft", dec, ss[0]);
    sft.src[2] = ss[1];
    ag_node mix = ag_rg_node(AG_OP_ADD_SCALED, p, "fidelity", ag_rg_add(b, &sft), dec);
    mix.alpha = 0.5f;
    mix.runtime_alpha = 1;
    return ag_rg_add(b, &mix);
}

int ag_codeformer_graph(const ag_restore_arch *a, const ag_tensor_set *set, ag_graph *g,
                        ag_error *err) {
    const ag_codeformer_arch *cf = &a->cf;
    ag_graph_init(g);
    ag_rgraph b = {.g = g, .set = set, .err = err};
    vq_block blk[VQ_MAX_BLOCKS];
    int enc[AG_CF_LEVELS], x = 0, n = encoder_blocks(cf, blk);
    char p[AG_TENSOR_NAME_BYTES];
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "encoder.blocks.%d", i);
        x = block_node(&b, p, &blk[i], x);
        for (int l = 0; l < AG_CF_LEVELS; l++)
            if (enc_fuse_block[l] == i)
                enc[l] = x;
    }
    x = codes_node(&b, cf, x);
    n = generator_blocks(cf, blk);
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "generator.blocks.%d", i);
        x = block_node(&b, p, &blk[i], x);
        for (int l = 0; l < AG_CF_LEVELS; l++)
            if (gen_fuse_block[l] == i && cf->fuse[l])
                x = fuse_node(&b, cf, l, enc[l], x);
    }
    if (b.failed)
        return err->code;
    return ag_graph_add_output(g, x, err);
}
