/*
 * ops_transformer.c - the ops CodeFormer adds to the table (ops.h): group_norm, token_norm,
 * gelu (an activation, ops_basic.c), attention, codebook, adain. No fused lowering: both
 * backends run the reference kernels of src/kernels/transformer.c on whole maps, except the
 * attention's products, on sgemm in the fast path (ops.c).
 */
#include "ops.h"

#include "../kernels/kernels.h"
#include "../kernels/transformer.h"

void ag_run_token_norm(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0];
    ag_ref_token_norm(io->out, io->src[0], n->gamma, n->beta, (size_t)in.h * in.w, in.c, n->eps);
}

/* q, k, v of one shape; heads (the `groups` field) divide the channels. */
int ag_check_attention(const ag_node *n, const int *src_c, char *why) {
    if (src_c[1] != src_c[0] || src_c[2] != src_c[0])
        return ag_op_fail(why, "q, k, v have %d, %d, %d channels", src_c[0], src_c[1], src_c[2]);
    if (n->groups < 1 || src_c[0] % n->groups)
        return ag_op_fail(why, "%d channels do not split into %d heads", src_c[0], n->groups);
    return 0;
}

int ag_shape_attention(const ag_node *n, const ag_shape *in, ag_shape *out, char *why) {
    (void)n, (void)out;
    for (int j = 1; j < 3; j++)
        if (in[j].h != in[0].h || in[j].w != in[0].w)
            return ag_op_fail(why, "input %d is %dx%d, the query %dx%d", j, in[j].w, in[j].h,
                              in[0].w, in[0].h);
    return 0;
}

double ag_flops_attention(const ag_node *n, const ag_shape *in, ag_shape out) {
    (void)n, (void)out;
    double t = (double)in[0].h * in[0].w;
    return 4.0 * t * t * in[0].c;
}

/* The scores: a T x T matrix (the fast path's; the reference uses a row). CodeFormer's
 * 16 x 16 latent: 256 KB. */
size_t ag_scratch_attention(const ag_node *n, const ag_shape *in, ag_shape out) {
    (void)n, (void)out;
    size_t t = (size_t)in[0].h * in[0].w;
    return t * t;
}

void ag_run_attention(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0];
    if (io->fast)
        ag_attention_fast(io->out, io->src[0], io->src[1], io->src[2], (size_t)in.h * in.w, in.c,
                          n->groups, io->scratch, io->threads);
    else
        ag_ref_attention(io->out, io->src[0], io->src[1], io->src[2], (size_t)in.h * in.w, in.c,
                         n->groups, io->scratch);
}

/* weight (N, D): N logits in, D channels out. */
int ag_bind_codebook(ag_node *n, const int *src_c, const ag_dims *t, char *why) {
    int64_t n_any[2] = {src_c[0], -1};
    if (!ag_dims_is(&t[AG_T_WEIGHT], 2, 65536, n_any))
        return ag_op_fail(why, "needs a (%d, D) codebook for its %d logits", src_c[0], src_c[0]);
    n->in_c = (int)t[AG_T_WEIGHT].d[0];
    n->out_c = (int)t[AG_T_WEIGHT].d[1];
    return 0;
}

int ag_check_codebook(const ag_node *n, const int *src_c, char *why) {
    if (!n->weight || n->in_c != src_c[0] || n->out_c < 1 || n->out_c > 4096)
        return ag_op_fail(why, "a (%d, %d) codebook for %d logits", n->in_c, n->out_c, src_c[0]);
    return 0;
}

void ag_run_codebook(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0];
    ag_ref_codebook(io->out, io->src[0], n->weight, (size_t)in.h * in.w, in.c, n->out_c);
}

/* content, style: the channels agree; the sizes may differ (the output is the content's). */
int ag_check_adain(const ag_node *n, const int *src_c, char *why) {
    (void)n;
    return src_c[1] != src_c[0]
               ? ag_op_fail(why, "style of %d channels for content of %d", src_c[1], src_c[0])
               : 0;
}

void ag_run_adain(const ag_node *n, const ag_op_io *io) {
    ag_shape x = io->in[0], s = io->in[1];
    ag_ref_adain(io->out, io->src[0], (size_t)x.h * x.w, io->src[1], (size_t)s.h * s.w, x.c,
                 n->eps);
}
