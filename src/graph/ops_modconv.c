/*
 * ops_modconv.c - the kernels of the modulated convolution (StyleGAN2's, GPEN's, GFPGAN's)
 * and of the transposed convolution, which shares its loops (the rest of their rows is in
 * ops_style.c): reference loops, the fast path on sgemm (gemm_conv.c), and the two halves
 * (ag_modconv_demod, ag_modconv_gemm) an engine's kernel kind calls when its kernel takes
 * the product's place (src/engine/kind_modconv.c, kind_wino.c).
 */
#include "ops.h"

#include "../kernels/kernels.h"

#include <math.h>
#include <string.h>

/* Floats of n's demodulation factors (a round 16, so what follows stays aligned). */
static size_t demod_floats(const ag_node *n) {
    return ((size_t)n->out_c + 15) & ~(size_t)15;
}

/* The fast path's scaled (and padded) input rows of one band, in floats; a narrow 1x1's
 * transposed weight. */
static size_t modulated_band_floats(const ag_node *n, const ag_shape *in, ag_shape out) {
    if (n->k == 1 && n->up != 2 && n->out_c <= AG_MODCONV_NARROW_OC) /* the weight, (OC, IC) */
        return (size_t)n->in_c * n->out_c;
    if (n->up == 2)
        return ag_gemm_conv_t_rows_floats(in[0].h, in[0].w, in[0].c, n->k, n->out_c);
    int WP = in[0].w + n->pad[2] + n->pad[3];
    return ag_gemm_conv_rows_floats(out.h, WP, in[0].c, n->k, n->out_c);
}

/* The demodulation factors, then (fast path) a band's scaled input rows and its products. */
size_t ag_scratch_modconv(const ag_node *n, const ag_shape *in, ag_shape out) {
    if (n->up == 2)
        return demod_floats(n) + modulated_band_floats(n, in, out) +
               ag_gemm_conv_t_band_floats(in[0].h, in[0].w, n->k, n->out_c);
    int WP = in[0].w + n->pad[2] + n->pad[3];
    return demod_floats(n) + modulated_band_floats(n, in, out) +
           ag_gemm_conv_band_floats(out.h, WP, n->out_c);
}

/* ---- reference kernels and the fast path ------------------------------------------------- */

/*
 * out (HO, WO, OC) = transposed convolution of in (H, W, IC), each input channel times
 * style[ic] (NULL: 1): input pixel (a, b) spreads over output (a * stride + ky - crop_top,
 * b * stride + kx - crop_left). The weight is (IC, OC, K, K) (ConvTranspose2d), or a
 * modulated conv's packed (IC, K*K, OC) when `packed`.
 */
static void conv_transpose(float *out, ag_shape o, const float *in, const float *style, ag_shape s,
                           const float *w, int packed, int K, int stride, const int *crop) {
    memset(out, 0, sizeof(float) * ag_shape_floats(o));
    int IC = s.c, OC = o.c;
    for (int a = 0; a < s.h; a++)
        for (int b = 0; b < s.w; b++) {
            const float *x = in + ((size_t)a * s.w + b) * IC;
            for (int ky = 0; ky < K; ky++) {
                int y = a * stride + ky - crop[0];
                if (y < 0 || y >= o.h)
                    continue;
                for (int kx = 0; kx < K; kx++) {
                    int xo = b * stride + kx - crop[2];
                    if (xo < 0 || xo >= o.w)
                        continue;
                    float *dst = out + ((size_t)y * o.w + xo) * OC;
                    for (int oc = 0; oc < OC; oc++) {
                        float acc = 0.0f;
                        for (int ic = 0; ic < IC; ic++) {
                            size_t wi = packed ? ((size_t)ic * K * K + ky * K + kx) * OC + oc
                                               : (((size_t)ic * OC + oc) * K + ky) * K + kx;
                            acc += x[ic] * (style ? style[ic] : 1.0f) * w[wi];
                        }
                        dst[oc] += acc;
                    }
                }
            }
        }
}

/* out (HO, WO, OC) = the conv of x (H, W, IC), each channel times style[ic], zero-padded by
 * pad [t, b, l, r], by the packed weight. */
static void conv_packed(float *out, ag_shape o, const float *x, const float *style, ag_shape in,
                        const int *pad, const float *w, int K) {
    int IC = in.c, OC = o.c;
    for (int y = 0; y < o.h; y++)
        for (int xo = 0; xo < o.w; xo++) {
            float *dst = out + ((size_t)y * o.w + xo) * OC;
            memset(dst, 0, sizeof(float) * (size_t)OC);
            for (int t = 0; t < K * K; t++) {
                int sy = y + t / K - pad[0], sx = xo + t % K - pad[2];
                if (sy < 0 || sy >= in.h || sx < 0 || sx >= in.w)
                    continue;
                const float *src = x + ((size_t)sy * in.w + sx) * IC;
                for (int ic = 0; ic < IC; ic++) {
                    const float *wt = w + ((size_t)ic * K * K + t) * OC;
                    for (int oc = 0; oc < OC; oc++)
                        dst[oc] += src[ic] * style[ic] * wt[oc];
                }
            }
        }
}

/* Demodulation: each output channel by 1 / |w[o] * s| (1 without demod), from the weight,
 * or from its sums over the taps `wsq` (IC, OC) when given (a bf16 engine's). */
static void demodulation(const ag_node *n, const float *s, const float *wsq, float *d) {
    int IC = n->in_c, OC = n->out_c, KK = n->k * n->k;
    double sq[4096] = {0};
    for (int ic = 0; ic < IC && n->demod; ic++) {
        double si = (double)s[ic] * (double)s[ic];
        for (int t = 0; t < KK && !wsq; t++) {
            const float *w = n->weight + ((size_t)ic * KK + t) * OC;
            for (int oc = 0; oc < OC; oc++)
                sq[oc] += (double)w[oc] * (double)w[oc] * si;
        }
        for (int oc = 0; wsq && oc < OC; oc++)
            sq[oc] += (double)wsq[(size_t)ic * OC + oc] * si;
    }
    for (int oc = 0; oc < OC; oc++)
        d[oc] = n->demod ? (float)(1.0 / sqrt(sq[oc] + (double)n->eps)) : 1.0f;
}

/* The weight (OC, IC, K, K) as loaded, into the kernels' (IC, K*K, OC). */
void ag_pack_modconv(const ag_node *n, float *weight, float *tmp) {
    int IC = n->in_c, OC = n->out_c, KK = n->k * n->k;
    size_t count = (size_t)OC * IC * KK;
    memcpy(tmp, weight, sizeof(float) * count);
    for (int oc = 0; oc < OC; oc++)
        for (int ic = 0; ic < IC; ic++)
            for (int t = 0; t < KK; t++)
                weight[((size_t)ic * KK + t) * OC + oc] = tmp[((size_t)oc * IC + ic) * KK + t];
}

/* A 1x1 modconv's packed weight (IC, 1, OC) as (OC, IC) into wt, from its bf16 copy when
 * given (a bf16 engine's; exact in fp32). */
static void transposed_weight(const ag_node *n, const uint16_t *bf16, float *wt) {
    int IC = n->in_c, OC = n->out_c;
    for (int ic = 0; ic < IC; ic++)
        for (int oc = 0; oc < OC; oc++) {
            size_t at = (size_t)ic * OC + oc;
            uint32_t u = bf16 ? (uint32_t)bf16[at] << 16 : 0;
            float v;
            memcpy(&v, &u, sizeof v);
            wt[(size_t)oc * IC + ic] = bf16 ? v : n->weight[at];
        }
}

float *ag_modconv_demod(const ag_node *n, const ag_op_io *io, const float *wsq) {
    demodulation(n, io->src[1], wsq, io->scratch);
    return io->scratch;
}

void ag_modconv_gemm(const ag_node *n, const ag_op_io *io, const float *d,
                     const ag_gemm_bf16 *bf16) {
    ag_shape in = io->in[0], o = io->o;
    const float *s = io->src[1];
    int OC = o.c, K = n->k;
    float *x = io->scratch + demod_floats(n);
    if (K == 1 && n->up != 2 && OC <= AG_MODCONV_NARROW_OC) {
        transposed_weight(n, bf16 ? ag_gemm_bf16_weight(bf16) : NULL, x);
        ag_fused_modconv_narrow(io->out, io->src[0], (size_t)in.h * in.w, in.c, s, x, OC, d,
                                n->bias, io->threads);
        return;
    }
    size_t rows = modulated_band_floats(n, io->in, o); /* the band follows the scaled rows */
    if (n->up == 2)
        ag_gemm_conv_t(io->out, io->src[0], s, in.h, in.w, in.c, n->weight, OC, K, 2, d, n->bias, x,
                       x + rows, bf16, io->threads);
    else
        ag_gemm_conv(io->out, io->src[0], s, in.h, in.w, in.c, n->pad, n->weight, OC, K, d, n->bias,
                     x, x + rows, bf16, io->threads);
}

/*
 * The style scales the input channels, the conv runs with the unmodulated weight (never
 * modulated per image), and demodulation scales its output channels, with the bias, in the
 * conv's epilogue. The fast backend's conv is matrix products (gemm_conv.c, on sgemm), the
 * reference's loops; an engine's kernel kinds replace the product (kind_modconv.c).
 */
void ag_run_modconv(const ag_node *n, const ag_op_io *io) {
    ag_shape in = io->in[0], o = io->o;
    const float *s = io->src[1];
    int OC = o.c, K = n->k;
    float *d = ag_modconv_demod(n, io, NULL);
    if (io->fast) {
        ag_modconv_gemm(n, io, d, NULL);
        return;
    }
    if (n->up == 2) {
        int crop[4] = {0, 0, 0, 0};
        conv_transpose(io->out, o, io->src[0], s, in, n->weight, 1, K, 2, crop);
    } else {
        conv_packed(io->out, o, io->src[0], s, in, n->pad, n->weight, K);
    }
    for (size_t p = 0; p < (size_t)o.h * o.w; p++)
        for (int oc = 0; oc < OC; oc++)
            io->out[p * OC + oc] = io->out[p * OC + oc] * d[oc] + (n->bias ? n->bias[oc] : 0.0f);
}

void ag_run_conv_t(const ag_node *n, const ag_op_io *io) {
    ag_shape o = io->o;
    conv_transpose(io->out, o, io->src[0], NULL, io->in[0], n->weight, 0, n->k, n->stride, n->pad);
    if (n->bias)
        for (size_t p = 0; p < (size_t)o.h * o.w; p++)
            for (int c = 0; c < o.c; c++)
                io->out[p * o.c + c] += n->bias[c];
}
