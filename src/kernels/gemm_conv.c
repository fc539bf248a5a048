/*
 * gemm_conv.c - convolutions as a few large matrix products over whole NHWC maps, for the
 * StyleGAN family's modulated convs (ops_style.c). Their weights are big (GPEN-512: 284 MB)
 * and shared by every worker: a oneDNN conv primitive would keep a reordered copy per
 * engine, these products read the model's one packed copy, (IC, K*K, OC), in place.
 *
 * A K x K conv is K*K matrix products accumulated into the output: tap (ky, kx) multiplies
 * the input shifted by (ky, kx), an (M, IC) matrix, by that tap's (IC, OC) slice of the
 * weight. Over the padded width WP the shifted rows of R output rows are one matrix with a
 * constant stride, so a band of rows is one product per tap (the K - 1 columns past each
 * row's end are computed and dropped). A stride-2 transposed conv is one product of the
 * input by all the taps at once, (M, IC) x (IC, K*K*OC), scattered into the output.
 * The bands keep the product's output near 1 MB, in cache, and each band scales only the
 * input rows it reads (the style per input channel), so no scaled copy of a map exists.
 *
 * Two kinds of product: fp32 on oneDNN's sgemm, or bf16 x bf16 -> fp32 (ag_gemm_bf16) on
 * oneDNN matmul primitives, made once per plan for the band's two row counts (oneDNN 2.6
 * has no public bf16 gemm; its matmul runs AMX tiles or AVX512-BF16 dot products) and
 * accumulating over the taps by a sum post-op. Both run on the engine's OpenMP threads.
 */
#include "kernels.h"
#include "onednn.h"
#include "onednn_internal.h"

#include "../util/util_internal.h"

#include <dnnl.h>
#include <string.h>

#define BAND_FLOATS (256 * 1024) /* the product's output per band: 1 MB */
/* A transposed conv's band holds K*K products per input pixel: at 1 MB GPEN's 256 px layer
 * ran one input row (M = 256) per product; 4 MB measured 82 -> 62 ms there, 58 -> 54 and
 * 66 -> 57 ms at 64 and 128 px (fp32, 2 threads). */
#define CONV_T_BAND_FLOATS (1024 * 1024)

/* Output rows per band of a stride-1 conv, at least one. */
static int conv_band_rows(int HO, int WP, int OC) {
    int rows = BAND_FLOATS / (WP * OC);
    return rows < 1 ? 1 : rows > HO ? HO : rows;
}

/* A round 16 floats, so what follows stays 64-byte aligned. */
static size_t round16(size_t floats) {
    return (floats + 15) & ~(size_t)15;
}

size_t ag_gemm_conv_band_floats(int HO, int WP, int OC) {
    return (size_t)conv_band_rows(HO, WP, OC) * WP * OC;
}

/* The padded input rows one band reads: its rows and the K - 1 below them. */
size_t ag_gemm_conv_rows_floats(int HO, int WP, int IC, int K, int OC) {
    return round16((size_t)(conv_band_rows(HO, WP, OC) + K - 1) * WP * IC);
}

/* Input rows per band of a transposed conv, at least one. */
static int conv_t_band_rows(int H, int W, int KK, int OC) {
    int rows = CONV_T_BAND_FLOATS / (W * KK * OC);
    return rows < 1 ? 1 : rows > H ? H : rows;
}

size_t ag_gemm_conv_t_band_floats(int H, int W, int K, int OC) {
    return (size_t)conv_t_band_rows(H, W, K * K, OC) * W * K * K * OC;
}

size_t ag_gemm_conv_t_rows_floats(int H, int W, int IC, int K, int OC) {
    return round16((size_t)conv_t_band_rows(H, W, K * K, OC) * W * IC);
}

/* ---- bf16 products --------------------------------------------------------------------- */

/* One matmul: (M, K) bf16 rows lda apart times (K, N) bf16 rows ldb apart into (M, N) fp32
 * rows ldc apart, the memories bound per run. */
typedef struct product {
    dnnl_primitive_t primitive;
    dnnl_memory_t a, b, c, scratch;
} product;

struct ag_gemm_bf16 {
    ag_dnnl *dnnl;
    product p[2][2];        /* [a shorter last band][accumulate into the output] */
    const uint16_t *weight; /* bound: the packed (IC, K*K, OC) in bf16 */
    const float *demod_sq;  /* bound: its demodulation sums (IC, OC) */
    void *scratchpad;       /* bound: ag_gemm_bf16_create's scratch_bytes */
};

/* Accumulate into the output: a sum post-op. */
static dnnl_status_t add_sum(dnnl_primitive_attr_t attr, const void *arg) {
    (void)arg;
    dnnl_post_ops_t post = NULL;
    dnnl_status_t st = dnnl_post_ops_create(&post);
    if (st == dnnl_success)
        st = dnnl_post_ops_append_sum(post, 1.0f);
    if (st == dnnl_success)
        st = dnnl_primitive_attr_set_post_ops(attr, post);
    if (post)
        dnnl_post_ops_destroy(post);
    return st;
}

static dnnl_status_t product_create(product *p, ag_dnnl *dnnl, dnnl_dim_t M, dnnl_dim_t N,
                                    dnnl_dim_t K, dnnl_dim_t lda, dnnl_dim_t ldb, dnnl_dim_t ldc,
                                    int accumulate, size_t *scratch_bytes) {
    dnnl_engine_t engine = ag_dnnl_engine_handle(dnnl);
    dnnl_memory_desc_t a, b, c;
    dnnl_dims_t da = {M, K}, db = {K, N}, dc = {M, N}, sa = {lda, 1}, sb = {ldb, 1}, sc = {ldc, 1};
    dnnl_status_t st = dnnl_memory_desc_init_by_strides(&a, 2, da, dnnl_bf16, sa);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_strides(&b, 2, db, dnnl_bf16, sb);
    if (st == dnnl_success)
        st = dnnl_memory_desc_init_by_strides(&c, 2, dc, dnnl_f32, sc);
    dnnl_matmul_desc_t desc;
    if (st == dnnl_success)
        st = dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c);
    /* a, b and c are fully given: the descriptor reports them back as they are */
    const ag_dnnl_arg_memory args[] = {{dnnl_query_src_md, 0, &p->a},
                                       {dnnl_query_weights_md, 0, &p->b},
                                       {dnnl_query_dst_md, 0, &p->c},
                                       {dnnl_query_scratchpad_md, 0, &p->scratch}};
    dnnl_primitive_desc_t pd = NULL;
    size_t bytes = 0;
    if (st == dnnl_success)
        st = ag_dnnl_primitive_create(&desc, engine, accumulate ? add_sum : NULL, NULL, args, 4,
                                      &p->primitive, &pd, &bytes);
    if (st == dnnl_success)
        *scratch_bytes = bytes > *scratch_bytes ? bytes : *scratch_bytes;
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    return st;
}

static void product_destroy(product *p) {
    dnnl_memory_t mems[4] = {p->a, p->b, p->c, p->scratch};
    for (int i = 0; i < 4; i++)
        if (mems[i])
            dnnl_memory_destroy(mems[i]);
    if (p->primitive)
        dnnl_primitive_destroy(p->primitive);
}

int ag_gemm_bf16_create(ag_dnnl *dnnl, int transposed, int HP, int WP, int IC, int OC, int K,
                        ag_gemm_bf16 **out, size_t *scratch_bytes, ag_error *err) {
    *out = NULL;
    ag_gemm_bf16 *g = ag_calloc(1, sizeof *g);
    if (!g)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    g->dnnl = dnnl;
    int KK = K * K, HO = HP - K + 1, WO = WP - K + 1;
    int rows = transposed ? conv_t_band_rows(HP, WP, KK, OC) : conv_band_rows(HO, WP, OC);
    int last_rows = (transposed ? HP : HO) % rows; /* 0: every band is whole */
    dnnl_status_t st = dnnl_success;
    for (int last = 0; last < (last_rows ? 2 : 1) && st == dnnl_success; last++) {
        int R = last ? last_rows : rows;
        if (transposed) {
            st = product_create(&g->p[last][0], dnnl, (dnnl_dim_t)R * WP, (dnnl_dim_t)KK * OC, IC,
                                IC, (dnnl_dim_t)KK * OC, (dnnl_dim_t)KK * OC, 0, scratch_bytes);
            continue;
        }
        for (int acc = 0; acc < 2 && st == dnnl_success; acc++)
            st = product_create(&g->p[last][acc], dnnl, (dnnl_dim_t)(R - 1) * WP + WO, OC, IC, IC,
                                (dnnl_dim_t)KK * OC, OC, acc, scratch_bytes);
    }
    if (st != dnnl_success) {
        ag_gemm_bf16_destroy(g);
        return ag_error_set(err, AG_E_INTERNAL, "oneDNN: bf16 matmul creation failed (status %d)",
                            (int)st);
    }
    *out = g;
    return AG_OK;
}

void ag_gemm_bf16_bind(ag_gemm_bf16 *g, const uint16_t *weight, const float *demod_sq,
                       void *scratchpad) {
    g->weight = weight;
    g->demod_sq = demod_sq;
    g->scratchpad = scratchpad;
}

const float *ag_gemm_bf16_demod_sq(const ag_gemm_bf16 *g) {
    return g->demod_sq;
}

const uint16_t *ag_gemm_bf16_weight(const ag_gemm_bf16 *g) {
    return g->weight;
}

void ag_gemm_bf16_destroy(ag_gemm_bf16 *g) {
    if (!g)
        return;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            product_destroy(&g->p[i][j]);
    ag_free(g);
}

static void product_run(const ag_gemm_bf16 *g, const product *p, const uint16_t *a,
                        const uint16_t *b, float *c) {
    dnnl_memory_set_data_handle(p->a, (void *)a);
    dnnl_memory_set_data_handle(p->b, (void *)b);
    dnnl_memory_set_data_handle(p->c, c);
    dnnl_memory_set_data_handle(p->scratch, g->scratchpad);
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, p->a},
                               {DNNL_ARG_WEIGHTS, p->b},
                               {DNNL_ARG_DST, p->c},
                               {DNNL_ARG_SCRATCHPAD, p->scratch}};
    dnnl_status_t st =
        dnnl_primitive_execute(p->primitive, ag_dnnl_stream_handle(g->dnnl), 4, args);
    AG_ASSERT(st == dnnl_success); /* shapes fixed at create: nothing left to fail */
}

/* ---- the convolutions ------------------------------------------------------------------ */

void ag_gemm_conv(float *out, const float *src, const float *style, int H, int W, int IC,
                  const int *pad, const float *w, int OC, int K, const float *scale,
                  const float *shift, void *rows, float *band, const ag_gemm_bf16 *bf16,
                  int threads) {
    int WP = W + pad[2] + pad[3], HO = H + pad[0] + pad[1] - K + 1, WO = WP - K + 1, KK = K * K;
    int band_rows = conv_band_rows(HO, WP, OC);
    for (int y0 = 0; y0 < HO; y0 += band_rows) {
        int R = y0 + band_rows <= HO ? band_rows : HO - y0;
        /* The padded rows [y0, y0 + R + K - 1) the band reads, scaled; then its rows
         * m = r * WP + x, the last stopping at WO so no tap reads past them. */
        ag_fused_modulate(rows, bf16 != NULL, src, H, W, IC, style, pad, y0, R + K - 1, threads);
        dnnl_dim_t M = (dnnl_dim_t)(R - 1) * WP + WO;
        for (int t = 0; t < KK; t++) {
            size_t at = ((size_t)(t / K) * WP + t % K) * IC;
            if (bf16)
                product_run(bf16, &bf16->p[R != band_rows][t > 0], (const uint16_t *)rows + at,
                            bf16->weight + (size_t)t * OC, band);
            else
                dnnl_sgemm('N', 'N', M, OC, IC, 1.0f, (const float *)rows + at, IC,
                           w + (size_t)t * OC, (dnnl_dim_t)KK * OC, t ? 1.0f : 0.0f, band, OC);
        }
        ag_fused_scale_shift(out + (size_t)y0 * WO * OC, band, (size_t)WP * OC, R, WO, OC, scale,
                             shift, threads);
    }
}

void ag_gemm_conv_t(float *out, const float *src, const float *style, int H, int W, int IC,
                    const float *w, int OC, int K, int stride, const float *scale,
                    const float *shift, void *rows, float *band, const ag_gemm_bf16 *bf16,
                    int threads) {
    static const int no_pad[4] = {0, 0, 0, 0};
    int HO = (H - 1) * stride + K, WO = (W - 1) * stride + K, KK = K * K;
    int band_rows = conv_t_band_rows(H, W, KK, OC);
    memset(out, 0, sizeof(float) * (size_t)HO * WO * OC);
    for (int a0 = 0; a0 < H; a0 += band_rows) {
        int R = a0 + band_rows <= H ? band_rows : H - a0;
        ag_fused_modulate(rows, bf16 != NULL, src, H, W, IC, style, no_pad, a0, R, threads);
        if (bf16)
            product_run(bf16, &bf16->p[R != band_rows][0], rows, bf16->weight, band);
        else
            dnnl_sgemm('N', 'N', (dnnl_dim_t)R * W, (dnnl_dim_t)KK * OC, IC, 1.0f, rows, IC, w,
                       (dnnl_dim_t)KK * OC, 0.0f, band, (dnnl_dim_t)KK * OC);
        /* Input pixel (a, b), tap (ky, kx) adds to output (a * stride + ky, b * stride + kx). */
        ag_fused_scatter_taps(out, band, R, a0, W, WO, K, stride, OC, threads);
    }
    ag_fused_scale_shift(out, out, (size_t)WO * OC, HO, WO, OC, scale, shift, threads);
}
