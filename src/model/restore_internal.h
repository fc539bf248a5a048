/*
 * restore_internal.h - the face restoration networks (GPEN's FullGenerator, GFPGAN's
 * GFPGANv1Clean) as the loaders see them: the architecture inferred from a state_dict's
 * tensor names and shapes, and the expected key layout every file is checked against.
 *
 * ag_restore_arch_infer decides which network a parsed file holds from a few anchor tensors
 * (src/model/gpen.c, src/model/gfpgan.c read their sizes), builds the whole layout that
 * architecture implies (name -> shape, as upstream's modules register them) and checks the
 * file against it: the first tensor that does not fit, is missing, or is extra is named in
 * one line. tools/make_restore_fixtures.py writes the same layouts from Python.
 */
#ifndef AG_RESTORE_INTERNAL_H
#define AG_RESTORE_INTERNAL_H

#include "model_internal.h"

#include <stdbool.h>

typedef enum ag_restore_kind {
    AG_RESTORE_GPEN = 1,
    AG_RESTORE_GFPGAN,
    AG_RESTORE_CODEFORMER
} ag_restore_kind;

/* Resolutions 2^2 .. 2^11 (4 .. 2048) index the channel tables by their log2. */
#define AG_RESTORE_MAX_LOG 11

/* CodeFormer (sczhou/CodeFormer): a VQGAN of AG_CF_LEVELS resolutions 512 .. 16 (level i at
 * 512 >> i), a transformer over its 16 x 16 latent and the fuse blocks of connect_list. */
#define AG_CF_LEVELS 6
typedef struct ag_codeformer_arch {
    int nf;                  /* the first conv's width */
    int ch[AG_CF_LEVELS];    /* VQGAN channels at level i (nf x ch_mult[i]) */
    int emb_dim, codebook;   /* the latent's channels (256), codebook entries (1024) */
    int dim, mlp, layers;    /* transformer width, feed-forward width, layers */
    int heads;               /* not in the file: upstream's 8 */
    bool fuse[AG_CF_LEVELS]; /* fuse_convs_dict.{512 >> i} present (connect_list) */
} ag_codeformer_arch;

typedef struct ag_restore_arch {
    ag_restore_kind kind;
    int size, log_size; /* the face side S = 2^log_size, 8 .. 2048 */
    int style_dim;      /* D, the style (w) width */
    int n_mlp;          /* mapping layers (GFPGAN keeps them in the file, unused) */
    int n_latent;       /* GFPGAN: one w per decoder layer, 2 log_size - 2; GPEN: 1 */
    int channels[AG_RESTORE_MAX_LOG + 1]; /* decoder channels at 2^i (GPEN's encoder too) */
    int unet[AG_RESTORE_MAX_LOG + 1];     /* GFPGAN: U-Net channels at 2^i (half) */
    bool sft_half;                        /* GFPGAN: SFT on the second half of the channels */
    int64_t params;                       /* elements of every tensor of the layout */
    ag_codeformer_arch cf;                /* CodeFormer */
} ag_restore_arch;

/* One expected tensor: its name and shape, after the loader's dropping of a leading size-1
 * axis from 5-D modulated-conv weights (so (OC, IC, K, K)). */
typedef struct ag_layout_entry {
    char name[AG_TENSOR_NAME_BYTES];
    int ndim;
    int64_t shape[AG_TENSOR_MAX_DIMS];
} ag_layout_entry;

/* A network's whole state_dict layout; bounded (a GPEN-2048 has ~200 tensors). */
#define AG_LAYOUT_MAX 1024
typedef struct ag_layout {
    ag_layout_entry *entries; /* ag_malloc'ed, AG_LAYOUT_MAX */
    int count;
    bool overflow; /* more than AG_LAYOUT_MAX were added: an invariant broken */
    char net[48];  /* "GPEN 512x512", for messages */
} ag_layout;

int ag_layout_init(ag_layout *l, ag_error *err);
void ag_layout_fini(ag_layout *l);
/* Append "<fmt...>" with `ndim` dims given after the name's arguments are formatted: the
 * caller passes the shape as an array. */
void ag_layout_add(ag_layout *l, int ndim, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Check the set against the layout: in file order, the first tensor that is not in the
 * layout or has another shape; then the first layout tensor missing from the file. */
int ag_layout_check(const ag_layout *l, const ag_tensor_set *set, const char *path, ag_error *err);

/* A tensor's dimension `dim` (negative from the end) when it exists with `ndim` dims, else
 * -1 with `err` naming it and what `net` expected. */
int64_t ag_restore_dim(const ag_tensor_set *set, const char *name, int ndim, int dim,
                       const char *path, const char *net, ag_error *err);

/* Anchors and layouts per network (gpen.c, gfpgan.c): fill `a` from the set's shapes, then
 * `l` with every tensor the architecture has. */
int ag_gpen_arch(const ag_tensor_set *set, const char *path, ag_restore_arch *a, ag_layout *l,
                 ag_error *err);
int ag_gfpgan_arch(const ag_tensor_set *set, const char *path, ag_restore_arch *a, ag_layout *l,
                   ag_error *err);
int ag_codeformer_arch_infer(const ag_tensor_set *set, const char *path, ag_restore_arch *a,
                             ag_layout *l, ag_error *err);

/* Which network the set holds and its architecture, checked tensor by tensor. A set that
 * fits neither is refused naming its first tensor. */
int ag_restore_arch_infer(const ag_tensor_set *set, const char *path, ag_restore_arch *a,
                          ag_error *err);

/* ---- graphs (restore_graph.c, gpen.c, gfpgan.c) ----------------------------------------- */

#include "../graph/graph.h"

/* A graph under construction from a checked set: the first failure is kept in `err` and
 * every later call returns -1, so a builder reads as a list of calls checked once. */
typedef struct ag_rgraph {
    ag_graph *g;
    const ag_tensor_set *set;
    ag_error *err;
    bool failed;
} ag_rgraph;

/* Index of the formatted tensor name in the set (present: the layout was checked). */
int ag_rg_tensor(const ag_rgraph *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append n; its index, or -1. */
int ag_rg_add(ag_rgraph *b, const ag_node *n);
/* The node of `op` named "<prefix>.<suffix>" reading in0 (and in1). */
ag_node ag_rg_node(ag_op op, const char *prefix, const char *suffix, int in0, int in1);
/* A zero-padded conv (stride 1, pad K/2, or as given) of tensors "<p>.weight" / "<p>.bias". */
int ag_rg_conv(ag_rgraph *b, const char *p, int x, int k, int stride, int pad, bool bias,
               float weight_scale);
int ag_rg_unary(ag_rgraph *b, ag_op op, const char *prefix, const char *suffix, int x);
/* StyleGAN2's modulated conv of x by the style vector w: "<p>.modulation.{weight,bias}"
 * turns w into per-input-channel scales, "<p>.weight" (OC, IC, K, K) convolves; mod_scale
 * and conv_scale are the equalised learning rate's (1 for GFPGAN, whose weights are stored
 * scaled). up: a transposed conv of stride 2 (GPEN's, before its blur). */
int ag_rg_modconv(ag_rgraph *b, const char *p, int x, int w, float mod_scale, float conv_scale,
                  bool demod, bool up, int bias_tensor);

/* Squeeze every (1, C, 1, 1) bias of a checked set to (C), as the graph's ops take them. */
void ag_restore_squeeze_biases(ag_tensor_set *set);

/* The network of a checked set as a graph over an S x S face in [-1, 1] -> the restored
 * face in [-1, 1] (unclamped, no tanh), into the caller's g (ag_graph_init'ed here). */
int ag_gpen_graph(const ag_restore_arch *a, const ag_tensor_set *set, ag_graph *g, ag_error *err);
int ag_gfpgan_graph(const ag_restore_arch *a, const ag_tensor_set *set, ag_graph *g, ag_error *err);

/* CodeFormer's linear layers as 1x1 convs: its 2-D weights reshaped to (OC, IC, 1, 1) in
 * place, the attention's in_proj split into q, k, v views ("<name>#q" ...) and the position
 * embedding viewed as a (1, dim, 16, 16) map ("position_emb#map"). After the layout check. */
int ag_codeformer_views(ag_tensor_set *set, const ag_restore_arch *a, ag_error *err);
/* The graph; its fuse blocks' add_scaled nodes take the fidelity w at run time
 * (runtime_alpha, ag_engine_set_runtime_alpha), 0.5 (upstream's default) unless set. */
int ag_codeformer_graph(const ag_restore_arch *a, const ag_tensor_set *set, ag_graph *g,
                        ag_error *err);

/* A restorer model from a parsed checkpoint (restore_model.c; the weights are copied, the
 * set's biases squeezed in place): what ag_restore_model_load does after parsing. */
int ag_restore_model_from_set(ag_tensor_set *set, const char *path, struct ag_model **out,
                              ag_error *err);

#endif
