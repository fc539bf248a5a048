/*
 * fused.c - the passes between the oneDNN convolutions. A convolution's padded input is
 * never a whole tensor: ag_fused_band computes a band of its rows on the fly from where
 * they come from (the image, the previous conv's raw output plus its norm, residual and
 * activation, or a bilinear resize), reflection padding included. Statistics are taken per
 * row right after the conv wrote them. Parallel over rows with OpenMP, the team oneDNN
 * uses.
 */
#include "../util/util_internal.h"
#include "fused_isa.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* This file is compiled once per ISA (AVX-512, AVX2, baseline x86-64: the Makefile's
 * FUSED_ISAS) and src/kernels/fused_dispatch.c picks one variant at start-up, so one binary
 * runs everywhere at full width and ANIMEGAN_ISA can force a lower variant. */
#define AG_HOT

/* ---- statistics ------------------------------------------------------------------------ */

/* Sixteen float lanes (one AVX-512 register) summed over blocks short enough that float
 * loses nothing that matters, each block flushed into double. Values are taken relative
 * to the row's first element, so a large mean does not cancel the variance away. */
#define STATS_LANES 16
#define STATS_BLOCK 1024

/* bf16 is the top half of an fp32; stores round to nearest even (no NaNs occur here). */
static inline float bf16_load(const uint16_t *p, size_t i) {
    uint32_t u = (uint32_t)p[i] << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline void bf16_store(uint16_t *p, size_t i, float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    p[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Sixteen lanes in GCC's portable vector types: one AVX-512 register in the x86-64-v4
 * clone, two AVX2 or four SSE registers in the others. Unaligned (aligned(4/2)). */
typedef float v16f __attribute__((vector_size(64), aligned(4)));
typedef int32_t v16i __attribute__((vector_size(64), aligned(4)));
typedef uint32_t v16u __attribute__((vector_size(64), aligned(4)));
typedef uint16_t v16h __attribute__((vector_size(32), aligned(2)));

/* Macros rather than functions: a vector passed or returned by value is an ABI question
 * between clones; inside one function it is just registers. */
#define vsplat(v) ((v16f){0} + (float)(v))
#define vload_f32(p) (*(const v16f *)(p))
#define vstore_f32(p, v) (*(v16f *)(p) = (v))
#define vload_bf16(p) ((v16f)(__builtin_convertvector(*(const v16h *)(p), v16u) << 16))
#define vstore_bf16(p, v)                                                                          \
    do {                                                                                           \
        v16u u_ = (v16u)(v);                                                                       \
        u_ = (u_ + 0x7fffu + ((u_ >> 16) & 1u)) >> 16;                                             \
        *(v16h *)(p) = __builtin_convertvector(u_, v16h);                                          \
    } while (0)

/* e^z of 16 lanes, z clamped to [-87, 87] (2^n stays a normal float): 2^n e^r, n the
 * integer nearest z / ln 2 (floored from a positive shift: no lane compare), e^r a degree-6
 * Taylor polynomial (|r| <= ln 2 / 2): within 2e-7 relative of expf, the same bits in every
 * variant (no libm, no FMA). */
#define vexp(z)                                                                                    \
    ({                                                                                             \
        v16f c_ = vmin((z), vsplat(87.0f));                                                        \
        c_ = vmax(c_, vsplat(-87.0f));                                                             \
        v16i n_ = __builtin_convertvector(c_ * 1.44269504f + 128.5f, v16i) - 128;                  \
        v16f nf_ = __builtin_convertvector(n_, v16f);                                              \
        v16f r_ = (c_ - nf_ * 0.693145752f) - nf_ * 1.42860677e-6f;                                \
        v16f p_ =                                                                                  \
            1.0f +                                                                                 \
            r_ * (1.0f +                                                                           \
                  r_ * (0.5f + r_ * (1.0f / 6 +                                                    \
                                     r_ * (1.0f / 24 + r_ * (1.0f / 120 + r_ * (1.0f / 720))))));  \
        p_ *(v16f)((n_ + 127) << 23);                                                              \
    })

/* A chain's gate (ag_gate) of 16 lanes: SiLU z / (1 + e^-z); Mish z q / (q + 2), q = e (e +
 * 2), e = e^min(z, 20) (tanh(softplus z) is 1 in float from there on, as PyTorch's linear
 * softplus above 20). Scalar: the same formulas with expf (a row's channel tail). */
#define vgate(z, gate)                                                                             \
    ({                                                                                             \
        v16f g_ = (z), e_;                                                                         \
        if ((gate) == AG_GATE_SILU) {                                                              \
            e_ = vexp(-g_);                                                                        \
            g_ = g_ / (1.0f + e_);                                                                 \
        } else {                                                                                   \
            e_ = vmin(g_, vsplat(20.0f));                                                          \
            e_ = vexp(e_);                                                                         \
            e_ = e_ * (e_ + 2.0f);                                                                 \
            g_ = g_ * e_ / (e_ + 2.0f);                                                            \
        }                                                                                          \
        g_;                                                                                        \
    })

static inline float gate_scalar(float z, ag_gate gate) {
    if (gate == AG_GATE_SILU)
        return z / (1.0f + expf(-z));
    float e = expf(z < 20.0f ? z : 20.0f), q = e * (e + 2.0f);
    return z * q / (q + 2.0f);
}

/* The residual r joined to the value z of 16 lanes: added, or by an attention gate
 * (AG_GATE_ON_RESIDUAL) with sigmoid(z) = 1 / (1 + e^-z). Scalar: the same with expf. */
#define vjoin(z, r, gate)                                                                          \
    ({                                                                                             \
        v16f j_ = (z), jr_ = (r);                                                                  \
        if ((gate) == AG_GATE_SPAN_ATTENTION)                                                      \
            j_ = (j_ + jr_) * (1.0f / (1.0f + vexp(-j_)) - 0.5f);                                  \
        else if ((gate) == AG_GATE_SCALE_RESIDUAL)                                                 \
            j_ = jr_ * (1.0f / (1.0f + vexp(-j_)));                                                \
        else                                                                                       \
            j_ += jr_;                                                                             \
        j_;                                                                                        \
    })

static inline float join_scalar(float z, float r, ag_gate gate) {
    if (gate == AG_GATE_SPAN_ATTENTION)
        return (z + r) * (1.0f / (1.0f + expf(-z)) - 0.5f);
    if (gate == AG_GATE_SCALE_RESIDUAL)
        return r * (1.0f / (1.0f + expf(-z)));
    return z + r;
}

/* The quantisation of a u8 band: u8 = clamp(v * inv + zero + 0.5, 0, 255) truncated (round
 * half up, which the kernels' half-even differs from only at exact halves). */
typedef struct band_quant {
    float inv, zero_half; /* 1 / scale, zero + 0.5 */
    uint8_t zero;         /* the u8 of a real 0 (zero padding) */
} band_quant;

typedef uint8_t v16b __attribute__((vector_size(16), aligned(1)));

/* The lane operations GCC's generic vectors lower badly: comparisons and u8 <-> int32
 * conversions of a 64-byte vector become one scalar per lane on AVX2 (and the u8 widening
 * on AVX-512 too), which made the int8 passes scalar. So each ISA variant spells them with
 * its own instructions: vmin, vmax, vleaky (LeakyReLU as a lane select: z where z >= 0,
 * z * slope elsewhere; slope 1: identity), vload_u8_raw (16 bytes to 16 floats) and
 * vpack_u8 (16 floats already in [0, 255] to 16 bytes, truncated). The semantics are the
 * generic ones exactly, NaN and -0 included (min/max return b unless a < b / a > b). */
#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define vmin(a, b) ((v16f)_mm512_min_ps((__m512)(a), (__m512)(b)))
#define vmax(a, b) ((v16f)_mm512_max_ps((__m512)(a), (__m512)(b)))
#define vleaky(z, slope)                                                                           \
    ((v16f)_mm512_mask_mul_ps((__m512)(z),                                                         \
                              _mm512_cmp_ps_mask((__m512)(z), _mm512_setzero_ps(), _CMP_LT_OQ),    \
                              (__m512)(z), (__m512)(slope)))
#define vload_u8_raw(p)                                                                            \
    ((v16f)_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p)))))
#define vpack_u8(p, t)                                                                             \
    _mm_storeu_si128((__m128i *)(p), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32((__m512)(t))))
#elif defined(__AVX2__)
#include <immintrin.h>
/* A v16f is two YMM registers here; the union names them (it stays in registers). Macros,
 * not functions (-Wpsabi, see vsplat), so each has its own local names (n) and they nest. */
typedef union v16f_halves {
    v16f v;
    __m256 h[2];
} v16f_halves;
#define AVX2_HALVES(op, a, b, n)                                                                   \
    ({                                                                                             \
        v16f_halves n##a_ = {.v = (a)}, n##b_ = {.v = (b)};                                        \
        n##a_.h[0] = op(n##a_.h[0], n##b_.h[0]), n##a_.h[1] = op(n##a_.h[1], n##b_.h[1]);          \
        n##a_.v;                                                                                   \
    })
#define vmin(a, b) AVX2_HALVES(_mm256_min_ps, a, b, min_)
#define vmax(a, b) AVX2_HALVES(_mm256_max_ps, a, b, max_)
#define avx2_leaky(z, m) _mm256_blendv_ps(z, m, _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_LT_OQ))
#define vleaky(z, slope)                                                                           \
    ({                                                                                             \
        v16f leaky_z_ = (z);                                                                       \
        AVX2_HALVES(avx2_leaky, leaky_z_, leaky_z_ *(slope), leaky_);                              \
    })
#define vload_u8_raw(p)                                                                            \
    ({                                                                                             \
        __m128i b_ = _mm_loadu_si128((const __m128i *)(p));                                        \
        v16f_halves u_;                                                                            \
        u_.h[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b_));                                    \
        u_.h[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b_, 8)));                 \
        u_.v;                                                                                      \
    })
/* packus works within 128-bit lanes: the dwords come out as a0-3 b0-3 . . a4-7 b4-7 . . */
#define vpack_u8(p, t)                                                                             \
    do {                                                                                           \
        v16f_halves pack_t_ = {.v = (t)};                                                          \
        __m256i w_ = _mm256_packus_epi32(_mm256_cvttps_epi32(pack_t_.h[0]),                        \
                                         _mm256_cvttps_epi32(pack_t_.h[1]));                       \
        w_ = _mm256_packus_epi16(w_, w_);                                                          \
        w_ = _mm256_permutevar8x32_epi32(w_, _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5));           \
        _mm_storeu_si128((__m128i *)(p), _mm256_castsi256_si128(w_));                              \
    } while (0)
#else
#define vmin(a, b) ((v16f)(((v16i)(a) & ((a) < (b))) | ((v16i)(b) & ~((a) < (b)))))
#define vmax(a, b) ((v16f)(((v16i)(a) & ((a) > (b))) | ((v16i)(b) & ~((a) > (b)))))
#define vleaky(z, slope)                                                                           \
    ((v16f)(((v16i)(z) & ~((z) < 0.0f)) | ((v16i)((z) * (slope)) & ((z) < 0.0f))))
#define vload_u8_raw(p)                                                                            \
    __builtin_convertvector(__builtin_convertvector(*(const v16b *)(p), v16i), v16f)
#define vpack_u8(p, t)                                                                             \
    do {                                                                                           \
        v16b b_ = __builtin_convertvector(__builtin_convertvector((t), v16i), v16b);               \
        memcpy((p), &b_, sizeof b_);                                                               \
    } while (0)
#endif

static inline uint8_t quant_u8(float v, band_quant q) {
    float t = v * q.inv + q.zero_half;
    t = t < 0.0f ? 0.0f : t;
    t = t > 255.0f ? 255.0f : t;
    return (uint8_t)(int)t;
}

/* The dequantisation of one row of a u8 map: v = u8 * scale[c] + lo[c] (C each). Bytes go
 * through int32 lanes: GCC converts u8 lanes straight to float one scalar at a time. */
typedef struct row_dq {
    const float *scale, *lo;
} row_dq;

static const row_dq no_dq = {NULL, NULL};

#define vload_u8(p, d, c) (vload_u8_raw(p) * vload_f32((d).scale + (c)) + vload_f32((d).lo + (c)))
#define load_u8(p, i, d, c) ((float)(p)[i] * (d).scale[c] + (d).lo[c])
#define ROW_DQ_U8(pairs, y, C)                                                                     \
    ((pairs) ? (row_dq){(pairs) + 2 * (size_t)(C) * (size_t)(y),                                   \
                        (pairs) + 2 * (size_t)(C) * (size_t)(y) + (C)}                             \
             : no_dq)
#define ROW_DQ_NONE(pairs, y, C) ((void)(pairs), (void)(y), (void)(C), no_dq)
/* The affine a applied to a u8 row dequantised by d, as one affine on the bytes:
 * (u * scale + lo) * a.scale + a.shift = u * (scale * a.scale) + (lo * a.scale + a.shift),
 * into out (2C floats). */
static ag_norm_affine fold_dq(float *out, ag_norm_affine a, row_dq d, int C) {
    ag_norm_affine f = {out, out + C, a.slope, a.gate};
    for (int c = 0; c < C; c++) {
        f.scale[c] = d.scale[c] * a.scale[c];
        f.shift[c] = d.lo[c] * a.scale[c] + a.shift[c];
    }
    return f;
}

#define vstore_u8(p, v, q)                                                                         \
    do {                                                                                           \
        v16f t_ =                                                                                  \
            vmin(vmax((v)*vsplat((q).inv) + vsplat((q).zero_half), vsplat(0.0f)), vsplat(255.0f)); \
        vpack_u8((p), t_);                                                                         \
    } while (0)

#define AG_ROWS_MOMENTS
#define ROW_DQ ROW_DQ_NONE
#define T float
#define TO float
#define SFX f32
#define LOAD(p, i, d, c) ((void)(d), (void)(c), (p)[i])
#define STORE(p, i, v, q) ((void)(q), (p)[i] = (v))
#define VLOAD(p, d, c) vload_f32(p)
#define VSTORE(p, v, q) vstore_f32(p, v)
#define LOAD_RAW(p, i) ((p)[i])
#define VLOAD_RAW vload_f32
#include "fused_rows.inc"
#undef T
#undef TO
#undef SFX
#undef LOAD
#undef LOAD_RAW
#undef VLOAD_RAW
#undef STORE
#undef VLOAD
#undef VSTORE

#define T uint16_t
#define TO uint16_t
#define SFX bf16
#define LOAD(p, i, d, c) ((void)(d), (void)(c), bf16_load((p), (i)))
#define STORE(p, i, v, q) ((void)(q), bf16_store((p), (i), (v)))
#define VLOAD(p, d, c) vload_bf16(p)
#define LOAD_RAW(p, i) bf16_load((p), (i))
#define VLOAD_RAW vload_bf16
#define VSTORE(p, v, q) vstore_bf16(p, v)
#include "fused_rows.inc"
#undef T
#undef TO
#undef SFX
#undef LOAD
#undef LOAD_RAW
#undef VLOAD_RAW
#undef STORE
#undef VLOAD
#undef VSTORE
#undef AG_ROWS_MOMENTS

/* fp32 sources into bf16 bands (a StyleGAN graph's convs in bf16: its maps stay fp32). */
#define T float
#define TO uint16_t
#define SFX f32bf16
#define LOAD(p, i, d, c) ((void)(d), (void)(c), (p)[i])
#define STORE(p, i, v, q) ((void)(q), bf16_store((p), (i), (v)))
#define VLOAD(p, d, c) vload_f32(p)
#define LOAD_RAW(p, i) ((p)[i])
#define VLOAD_RAW vload_f32
#define VSTORE(p, v, q) vstore_bf16(p, v)
#include "fused_rows.inc"
#undef T
#undef TO
#undef SFX
#undef LOAD
#undef LOAD_RAW
#undef VLOAD_RAW
#undef STORE
#undef VLOAD
#undef VSTORE

/* int8: fp32 sources, u8 bands quantised in registers (no fp32 band). */
#define T float
#define TO uint8_t
#define SFX u8
#define LOAD(p, i, d, c) ((void)(d), (void)(c), (p)[i])
#define STORE(p, i, v, q) ((p)[i] = quant_u8((v), (q)))
#define VLOAD(p, d, c) vload_f32(p)
#define VSTORE vstore_u8
#define LOAD_RAW(p, i) ((p)[i])
#define VLOAD_RAW vload_f32
#include "fused_rows.inc"
#undef T
#undef SFX
#undef LOAD
#undef LOAD_RAW
#undef VLOAD_RAW
#undef VLOAD
#undef ROW_DQ

/* int8: u8 maps (a scale and offset per row) into u8 bands, then into fp32 bands (the
 * convs that stay fp32, and materialising rows). */
#define ROW_DQ ROW_DQ_U8
#define T uint8_t
#define SFX u8u8
#define LOAD load_u8
#define VLOAD vload_u8
#define LOAD_RAW(p, i) ((float)(p)[i])
#define VLOAD_RAW vload_u8_raw
#include "fused_rows.inc"
#undef TO
#undef SFX
#undef STORE
#undef VSTORE

#define TO float
#define SFX u8f32
#define STORE(p, i, v, q) ((void)(q), (p)[i] = (v))
#define VSTORE(p, v, q) vstore_f32(p, v)
#include "fused_rows.inc"
#undef T
#undef TO
#undef SFX
#undef LOAD
#undef LOAD_RAW
#undef VLOAD_RAW
#undef STORE
#undef VLOAD
#undef VSTORE
#undef ROW_DQ

void ag_fused_row_stats(double *partials, const void *y, int bf16, int first, int rows,
                        size_t row_n, int threads) {
    ag_stats_rows t = {partials, y, bf16, first, rows, row_n, NULL, 0};
    ag_fused_band_stats(NULL, NULL, 0, 0, &t, threads);
}

void ag_norm_affine_from_stats(ag_norm_affine affine, const double *partials, int H, size_t row_n,
                               const float *gamma, const float *beta, int C, float eps) {
    double mean = 0.0, m2 = 0.0;
    for (int r = 0; r < H; r++)
        mean += partials[2 * r];
    mean /= H;
    for (int r = 0; r < H; r++) {
        double d = partials[2 * r] - mean;
        m2 += partials[2 * r + 1] + d * d * (double)row_n;
    }
    double rstd = 1.0 / sqrt(m2 / ((double)row_n * H) + (double)eps);
    for (int c = 0; c < C; c++) {
        affine.scale[c] = (float)(rstd * (double)gamma[c]);
        affine.shift[c] = (float)((double)beta[c] - mean * rstd * (double)gamma[c]);
    }
}

void ag_fused_norm_stats(ag_norm_affine affine, double *partials, const float *x,
                         const float *gamma, const float *beta, int H, int W, int C, float eps,
                         int threads) {
    size_t row_n = (size_t)W * C;
    ag_fused_row_stats(partials, x, 0, 0, H, row_n, threads);
    ag_norm_affine_from_stats(affine, partials, H, row_n, gamma, beta, C, eps);
}

/* ---- bands ------------------------------------------------------------------------------ */

/* Row i of a band from `first`: fp32 or bf16 (s->bf16), or u8 with q when `u8`. */
static void band_row(void *out, const ag_band_source *s, int first, int i, int u8, band_quant q) {
    size_t row_elems = (size_t)(s->W + s->pad.left + s->pad.right) * s->C;
    size_t elem = u8 ? 1 : s->bf16 || s->band_bf16 ? 2 : 4;
    int y = first + i - s->pad.top;
    if (s->zero_pad && (y < 0 || y >= s->H)) {
        memset((uint8_t *)out + (size_t)i * row_elems * elem, u8 ? q.zero : 0, row_elems * elem);
        return;
    }
    y = ag_reflect_index(y, s->H);
    int in_u8 = s->kind == AG_BAND_RAW ? s->x_q != NULL : s->kind == AG_BAND_RESIZE && s->a_q;
    if (u8)
        (in_u8 ? band_row_u8u8 : band_row_u8)((uint8_t *)out + (size_t)i * row_elems, s, y, q);
    else if (in_u8)
        band_row_u8f32((float *)out + (size_t)i * row_elems, s, y, q);
    else if (s->bf16)
        band_row_bf16((uint16_t *)out + (size_t)i * row_elems, s, y, q);
    else if (s->band_bf16)
        band_row_f32bf16((uint16_t *)out + (size_t)i * row_elems, s, y, q);
    else
        band_row_f32((float *)out + (size_t)i * row_elems, s, y, q);
}

static inline float range_lrelu(float v, float slope) {
    return v < 0.0f ? v * slope : v;
}

/* The chain band_row applies (scale NULL: none; residual r or NULL) to the 16 channels at
 * v[i], r[i]. */
#define RANGE_CHAIN(v, r, i, scale, shift, slope, c, vpre, vpost)                                  \
    ({                                                                                             \
        v16f chain_z_ = vload_f32((v) + (i));                                                      \
        if (scale) {                                                                               \
            chain_z_ = vleaky(chain_z_ * vload_f32((scale) + (c)) + vload_f32((shift) + (c)),      \
                              (slope) ? vload_f32((slope) + (c)) : (vpre));                        \
            if (r)                                                                                 \
                chain_z_ += vload_f32((r) + (i));                                                  \
            chain_z_ = vleaky(chain_z_, vpost);                                                    \
        }                                                                                          \
        chain_z_;                                                                                  \
    })

/* range_row for 16 channels (cute-v3's 512x512 maps): the extremes stay in registers, two
 * pairs for alternate pixels, where the general loop's loads and stores of lo and hi chain
 * one pixel to the next through memory. */
static AG_HOT void range_row16(const float *v, const float *r, int W, const float *scale,
                               const float *shift, const float *slope, float pre, float post,
                               float *lo, float *hi) {
    v16f vpre = vsplat(pre), vpost = vsplat(post);
    v16f lo0 = vload_f32(lo), hi0 = vload_f32(hi), lo1 = lo0, hi1 = hi0;
    int p = 0;
    for (; p + 1 < W; p += 2) {
        v16f z0 = RANGE_CHAIN(v, r, (size_t)p * 16, scale, shift, slope, 0, vpre, vpost);
        v16f z1 = RANGE_CHAIN(v, r, (size_t)p * 16 + 16, scale, shift, slope, 0, vpre, vpost);
        lo0 = vmin(z0, lo0), hi0 = vmax(z0, hi0);
        lo1 = vmin(z1, lo1), hi1 = vmax(z1, hi1);
    }
    if (p < W) {
        v16f z = RANGE_CHAIN(v, r, (size_t)p * 16, scale, shift, slope, 0, vpre, vpost);
        lo0 = vmin(z, lo0), hi0 = vmax(z, hi0);
    }
    vstore_f32(lo, vmin(lo1, lo0));
    vstore_f32(hi, vmax(hi1, hi0));
}

/* Per-channel minimum and maximum over W pixels of C fp32 channels, the chain applied as
 * band_row applies it (scale NULL: none; residual r or NULL); lo and hi hold C entries.
 * Whole vectors of 16 channels, a scalar loop for the rest. */
static AG_HOT void range_row(const float *v, const float *r, int W, int C, const float *scale,
                             const float *shift, const float *slope, float pre, float post,
                             float *lo, float *hi) {
    if (C == 16) {
        range_row16(v, r, W, scale, shift, slope, pre, post, lo, hi);
        return;
    }
    v16f vpre = vsplat(pre), vpost = vsplat(post);
    int vec_c = C - C % 16;
    for (int p = 0; p < W; p++) {
        size_t base = (size_t)p * C;
        for (int c = 0; c < vec_c; c += 16) {
            v16f z = RANGE_CHAIN(v, r, base + c, scale, shift, slope, c, vpre, vpost);
            vstore_f32(lo + c, vmin(z, vload_f32(lo + c)));
            vstore_f32(hi + c, vmax(z, vload_f32(hi + c)));
        }
        for (int c = vec_c; c < C; c++) {
            float t = v[base + c];
            if (scale) {
                t = range_lrelu(t * scale[c] + shift[c], slope ? slope[c] : pre) +
                    (r ? r[base + c] : 0.0f);
                t = range_lrelu(t, post);
            }
            lo[c] = t < lo[c] ? t : lo[c];
            hi[c] = t > hi[c] ? t : hi[c];
        }
    }
}

static void stats_row(const ag_stats_rows *t, int r) {
    if (t->bf16)
        row_moments_bf16((const uint16_t *)t->y + (size_t)r * t->row_n, t->row_n,
                         &t->partials[2 * r], &t->partials[2 * r + 1]);
    else
        row_moments_f32((const float *)t->y + (size_t)r * t->row_n, t->row_n, &t->partials[2 * r],
                        &t->partials[2 * r + 1]);
    if (t->range && !t->bf16) { /* the row is still in cache */
        float *lo = t->range + (size_t)2 * t->C * (size_t)omp_get_thread_num();
        range_row((const float *)t->y + (size_t)r * t->row_n, NULL, (int)(t->row_n / t->C), t->C,
                  NULL, NULL, NULL, 1.0f, 1.0f, lo, lo + t->C);
    }
}

static const band_quant no_quant = {1.0f, 0.0f, 0};

void ag_fused_band(void *out, const ag_band_source *s, int first, int rows, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < rows; i++)
        band_row(out, s, first, i, 0, no_quant);
}

void ag_fused_band_stats(void *out, const ag_band_source *s, int first, int rows,
                         const ag_stats_rows *t, int threads) {
    int stat_rows = t ? t->rows : 0, band_rows = out ? rows : 0;
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static) nowait
        for (int r = 0; r < stat_rows; r++)
            stats_row(t, t->first + r);
#pragma omp for schedule(static)
        for (int i = 0; i < band_rows; i++)
            band_row(out, s, first, i, 0, no_quant);
    }
}

void ag_fused_norm_act_pad(void *out, const void *x, const void *residual, int bf16,
                           ag_norm_affine affine, float pre_slope, float post_slope, int H, int W,
                           int C, ag_pad pad, int threads) {
    ag_band_source s = {.kind = AG_BAND_RAW,
                        .bf16 = bf16,
                        .H = H,
                        .W = W,
                        .C = C,
                        .pad = pad,
                        .x = x,
                        .residual = residual,
                        .affine = affine,
                        .pre_slope = pre_slope,
                        .post_slope = post_slope};
    ag_fused_band(out, &s, 0, H + pad.top + pad.bottom, threads);
}

/* ---- int8: source ranges and quantised bands ------------------------------------------- */

void ag_fused_range(const ag_band_source *s, float *lo_out, float *hi_out, int threads) {
    if (s->kind == AG_BAND_IMAGE && !s->f32) { /* u8 pixels scaled to [-1, 1] */
        *lo_out = -1.0f, *hi_out = 1.0f;
        return;
    }
    int resize = s->kind == AG_BAND_RESIZE, chain = s->kind == AG_BAND_RAW;
    int H = resize ? s->HI : s->H, W = resize ? s->WI : s->W;
    int C = s->kind == AG_BAND_IMAGE ? 3 : s->C;
    const float *base = s->kind == AG_BAND_IMAGE ? s->f32
                        : resize                 ? (const float *)s->a
                                                 : (const float *)s->x;
    const float *res = chain ? (const float *)s->residual : NULL;
    float lo = INFINITY, hi = -INFINITY;
#pragma omp parallel num_threads(threads)
    {
        float tlo[AG_MAP_MAX_CHANNELS], thi[AG_MAP_MAX_CHANNELS];
        for (int c = 0; c < C; c++)
            tlo[c] = INFINITY, thi[c] = -INFINITY;
#pragma omp for schedule(static)
        for (int r = 0; r < H; r++) {
            size_t off = (size_t)r * W * C;
            range_row(base + off, res ? res + off : NULL, W, C, chain ? s->affine.scale : NULL,
                      s->affine.shift, s->affine.slope, s->pre_slope, s->post_slope, tlo, thi);
        }
#pragma omp critical
        for (int c = 0; c < C; c++) {
            lo = tlo[c] < lo ? tlo[c] : lo;
            hi = thi[c] > hi ? thi[c] : hi;
        }
    }
    *lo_out = lo, *hi_out = hi;
}

void ag_fused_band_stats_u8(uint8_t *out, float scale, int32_t zero, const ag_band_source *s,
                            int first, int rows, const ag_stats_rows *t, int threads) {
    int stat_rows = t ? t->rows : 0;
    band_quant q = {1.0f / scale, (float)zero + 0.5f, (uint8_t)zero};
#pragma omp parallel num_threads(threads)
    {
#pragma omp for schedule(static) nowait
        for (int r = 0; r < stat_rows; r++)
            stats_row(t, t->first + r);
#pragma omp for schedule(static)
        for (int i = 0; i < rows; i++)
            band_row(out, s, first, i, 1, q);
    }
}

/* The per-channel range of one fp32 row (W, C) into lo and hi (C each) and, when mean is not
 * NULL, its moments exactly as row_moments_f32 takes them, in one read of the row instead of
 * two: with C a multiple of 16, lane l holds the channels = l mod 16 in both loops, and the
 * blocks end at the same elements. Otherwise the two passes. */
static AG_HOT void scan_row(const float *v, int W, int C, float *lo, float *hi, double *mean,
                            double *m2) {
    size_t n = (size_t)W * C;
    for (int c = 0; c < C; c++)
        lo[c] = INFINITY, hi[c] = -INFINITY;
    if (!mean || C % 16) {
        range_row(v, NULL, W, C, NULL, NULL, NULL, 1.0f, 1.0f, lo, hi);
        if (mean)
            row_moments_f32(v, n, mean, m2);
        return;
    }
    v16f vshift = vsplat(v[0]);
    double s1 = 0.0, s2 = 0.0;
    int c = 0;
    for (size_t i = 0; i < n;) {
        v16f a1 = vsplat(0.0f), a2 = vsplat(0.0f);
        size_t end = i + STATS_BLOCK < n ? i + STATS_BLOCK : n;
        for (; i < end; i += STATS_LANES) {
            v16f x = vload_f32(v + i), d = x - vshift;
            vstore_f32(lo + c, vmin(x, vload_f32(lo + c)));
            vstore_f32(hi + c, vmax(x, vload_f32(hi + c)));
            c = c + STATS_LANES == C ? 0 : c + STATS_LANES;
            a1 += d;
            a2 += d * d;
        }
        for (int l = 0; l < STATS_LANES; l++)
            s1 += (double)a1[l], s2 += (double)a2[l];
    }
    *mean = (double)v[0] + s1 / (double)n;
    *m2 = s2 - s1 * s1 / (double)n;
    if (*m2 < 0.0)
        *m2 = 0.0;
}

/* One row r (W, C) of a u8 map from fp32 values v, with each channel's scale and offset from
 * its range in this row (pairs: C scales, then C offsets): channels differ in magnitude, and
 * a row's own range needs no pass before the conv. With t and r >= t->first, the row's
 * statistics (t->partials when not NULL) and the thread's range slot (t->range) too, from
 * the same read of the row. */
static AG_HOT void quantize_map_row(uint8_t *out, float *pairs, const float *v, int W, int C,
                                    const ag_stats_rows *t, int r) {
    float lo[AG_MAP_MAX_CHANNELS], hi[AG_MAP_MAX_CHANNELS], inv[AG_MAP_MAX_CHANNELS];
    float off[AG_MAP_MAX_CHANNELS];
    int stats = t && r >= t->first;
    double *moments = stats && t->partials ? &t->partials[2 * r] : NULL;
    scan_row(v, W, C, lo, hi, moments, moments ? moments + 1 : NULL);
    if (stats && t->range) { /* the thread's slot: lo[C], then hi[C] */
        float *tlo = t->range + (size_t)2 * C * (size_t)omp_get_thread_num(), *thi = tlo + C;
        for (int c = 0; c < C; c++) {
            tlo[c] = lo[c] < tlo[c] ? lo[c] : tlo[c];
            thi[c] = hi[c] > thi[c] ? hi[c] : thi[c];
        }
    }
    for (int c = 0; c < C; c++) {
        float scale = (hi[c] - lo[c]) / 255.0f;
        inv[c] = scale > 0.0f ? 1.0f / scale : 0.0f;
        off[c] = 0.5f - lo[c] * inv[c]; /* (v - lo) / scale, rounded */
        pairs[c] = scale, pairs[C + c] = lo[c];
    }
    int vec_c = C - C % 16;
    for (int p = 0; p < W; p++) {
        size_t base = (size_t)p * C;
        for (int c = 0; c < vec_c; c += 16) {
            v16f q = vmin(vmax(vload_f32(v + base + c) * vload_f32(inv + c) + vload_f32(off + c),
                               vsplat(0.0f)),
                          vsplat(255.0f));
            vpack_u8(out + base + c, q);
        }
        for (int c = vec_c; c < C; c++)
            out[base + c] = quant_u8(v[base + c], (band_quant){inv[c], off[c], 0});
    }
}

void ag_fused_quantize_rows(uint8_t *out, float *row_q, const float *tmp, int first, int rows,
                            int W, int C, const ag_stats_rows *t, int threads) {
    size_t row_n = (size_t)W * C;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < rows; i++) {
        int r = first + i;
        const float *v = tmp + (size_t)i * row_n;
        quantize_map_row(out + (size_t)r * row_n, row_q + 2 * (size_t)C * (size_t)r, v, W, C, t, r);
    }
}

void ag_fused_materialize_u8(uint8_t *x, float *x_q, const uint8_t *residual,
                             const float *residual_q, ag_norm_affine affine, float pre, float post,
                             int H, int W, int C, float *scratch, float *range, int threads) {
    size_t row_n = (size_t)W * C;
    ag_stats_rows t = {NULL, NULL, 0, 0, H, row_n, range, C};
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int r = 0; r < H; r++) {
        float *v = scratch + row_n * (size_t)omp_get_thread_num();
        uint8_t *row = x + (size_t)r * row_n;
        float fold[2 * AG_MAP_MAX_CHANNELS];
        norm_act_row_u8f32(v, row, residual ? residual + (size_t)r * row_n : NULL,
                           fold_dq(fold, affine, ROW_DQ_U8(x_q, r, C), C), pre, post, W, C,
                           no_quant, ROW_DQ_U8(residual_q, r, C));
        quantize_map_row(row, x_q + 2 * (size_t)C * (size_t)r, v, W, C, &t, r);
    }
}

/* ---- output ---------------------------------------------------------------------------- */

uint8_t ag_output_to_u8(float y) {
    float v = rintf((y + 1.0f) * 127.5f);
    return (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
}

/* tanh of 16 lanes, in place: sign(x) (1 - 2 / (e^(2|x|) + 1)), with e^z = 2^n e^r, n the
 * integer nearest z / ln 2 and e^r a degree-6 Taylor polynomial (|r| <= ln 2 / 2). Within
 * 2e-7 of tanhf (the output is 8-bit), the same bits in every variant (no libm, no FMA),
 * and a fifth of tanhf's time: it was 2.5% of a v3 run. */
#define vtanh_inplace(v)                                                                           \
    do {                                                                                           \
        v16i neg_ = (v) < 0.0f;                                                                    \
        v16f z_ = (v16f)((v16i)(v)&0x7fffffff) * 2.0f;                                             \
        z_ = (v16f)(((v16i)z_ & (z_ < 18.0f)) | ((v16i)vsplat(18.0f) & ~(z_ < 18.0f)));            \
        v16i n_ = __builtin_convertvector(z_ * 1.44269504f + 0.5f, v16i);                          \
        v16f nf_ = __builtin_convertvector(n_, v16f);                                              \
        v16f r_ = (z_ - nf_ * 0.693145752f) - nf_ * 1.42860677e-6f;                                \
        v16f p_ =                                                                                  \
            1.0f +                                                                                 \
            r_ * (1.0f +                                                                           \
                  r_ * (0.5f + r_ * (1.0f / 6 +                                                    \
                                     r_ * (1.0f / 24 + r_ * (1.0f / 120 + r_ * (1.0f / 720))))));  \
        v16f e_ = p_ * (v16f)((n_ + 127) << 23);                                                   \
        v16f t_ = 1.0f - 2.0f / (e_ + 1.0f);                                                       \
        (v) = (v16f)(((v16i)t_ & ~neg_) | ((v16i)(-t_) & neg_));                                   \
    } while (0)

void ag_fused_output(float *out_f32, uint8_t *out_u8, int bands, const float *y, int apply_tanh,
                     int H, int W, int threads) {
    size_t row_n = (size_t)W * 3;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int row = 0; row < H; row++)
        for (size_t i0 = 0; i0 < row_n; i0 += 16) { /* 16 values, the last ones padded */
            size_t m = row_n - i0 < 16 ? row_n - i0 : 16, at = (size_t)row * row_n + i0;
            float t[16] = {0.0f};
            memcpy(t, y + at, m * sizeof(float));
            if (apply_tanh) {
                v16f v = vload_f32(t);
                vtanh_inplace(v);
                vstore_f32(t, v);
            }
            for (size_t k = 0; k < m; k++) {
                size_t i = at + k;
                if (out_f32)
                    out_f32[i] = t[k];
                if (out_u8)
                    out_u8[i / 3 * (size_t)bands + i % 3] = ag_output_to_u8(t[k]);
            }
        }
}

/* ---- narrow convolutions ---------------------------------------------------------------- */

/* Output pixels a block shares each weight load between: with OC accumulators each, as many
 * as the variant's vector registers hold (16 zmm; 16 ymm and 16 xmm hold a v16f in 2 and 4). */
#if defined(__AVX512F__)
#define NARROW_PIXELS 4
#elif defined(__AVX2__)
#define NARROW_PIXELS 2
#else
#define NARROW_PIXELS 1
#endif

static inline float sum16(v16f v) {
    float s = 0.0f;
    for (int l = 0; l < 16; l++)
        s += v[l];
    return s;
}

/* P output pixels from x: each the OC dot products of its K source runs (the K*IC floats
 * under a kernel row, contiguous in NHWC; the next pixel's start IC further) with the
 * packed weights. Inlined with constant P and OC, so the accumulators stay in registers.
 * Multiply-adds contract to FMAs here (-std=c11 keeps them apart elsewhere). */
__attribute__((always_inline, optimize("fp-contract=fast"))) static inline void
narrow_block(float *out, const float *src, const float *w, const float *bias, size_t row, int IC,
             int K, int P, int OC) {
    size_t L = (size_t)K * IC, LV = L - L % 16, run = (size_t)ag_narrow_run(K, IC);
    v16f acc[NARROW_PIXELS][AG_NARROW_OC];
#pragma GCC unroll 16
    for (int p = 0; p < P; p++)
#pragma GCC unroll 16
        for (int o = 0; o < OC; o++)
            acc[p][o] = vsplat(0.0f);
    float tail[NARROW_PIXELS][AG_NARROW_OC] = {{0.0f}};
    for (int ky = 0; ky < K; ky++) {
        const float *in = src + (size_t)ky * row, *wk = w + (size_t)ky * run;
        /* j: where the weights' vector starts; the input's is j, or L - 16 for the tail */
        for (size_t j = 0; j < run - (run == L ? L % 16 : 0); j += 16) {
            size_t at = j < LV ? j : L - 16;
            v16f wv[AG_NARROW_OC];
#pragma GCC unroll 16
            for (int o = 0; o < OC; o++)
                wv[o] = vload_f32(wk + (size_t)o * K * run + j);
#pragma GCC unroll 16
            for (int p = 0; p < P; p++) {
                v16f a = vload_f32(in + (size_t)p * IC + at);
#pragma GCC unroll 16
                for (int o = 0; o < OC; o++)
                    acc[p][o] += a * wv[o];
            }
        }
        for (size_t j = LV; j < L && run == L; j++) /* a run shorter than a vector */
            for (int p = 0; p < P; p++)
                for (int o = 0; o < OC; o++)
                    tail[p][o] += in[(size_t)p * IC + j] * wk[(size_t)o * K * run + j];
    }
    for (int p = 0; p < P; p++)
        for (int o = 0; o < OC; o++)
            out[p * OC + o] = sum16(acc[p][o]) + tail[p][o] + (bias ? bias[o] : 0.0f);
}

/* One output row of OC channels, NARROW_PIXELS pixels a block, then one at a time. */
__attribute__((always_inline, optimize("fp-contract=fast"))) static inline void
narrow_row(float *out, const float *src, const float *w, const float *bias, size_t row, int IC,
           int K, int WO, int OC) {
    int x = 0;
    for (; x + NARROW_PIXELS <= WO; x += NARROW_PIXELS)
        narrow_block(out + (size_t)x * OC, src + (size_t)x * IC, w, bias, row, IC, K, NARROW_PIXELS,
                     OC);
    for (; x < WO; x++)
        narrow_block(out + (size_t)x * OC, src + (size_t)x * IC, w, bias, row, IC, K, 1, OC);
}

__attribute__((optimize("fp-contract=fast"))) void
ag_fused_conv_narrow(float *dst, const float *src, const float *w, const float *bias, int HP,
                     int WP, int IC, int OC, int K, int threads) {
    int HO = HP - K + 1, WO = WP - K + 1;
    size_t row = (size_t)WP * IC;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int y = 0; y < HO; y++) {
        float *out = dst + (size_t)y * WO * OC;
        const float *in = src + (size_t)y * row;
        switch (OC) { /* constant OC per copy: the accumulators are registers */
        case 1: narrow_row(out, in, w, bias, row, IC, K, WO, 1); break;
        case 2: narrow_row(out, in, w, bias, row, IC, K, WO, 2); break;
        case 3: narrow_row(out, in, w, bias, row, IC, K, WO, 3); break;
        default: narrow_row(out, in, w, bias, row, IC, K, WO, 4); break;
        }
    }
}

/* Per-channel sums of (x - shift) and its square over n positions of x (n, C), taken in
 * float lanes (the caller keeps n to a block, so float holds them) and added to the double
 * totals t1, t2: sixteen channels a vector, the positions of a block in order. */
void ag_fused_channel_sums(double *t1, double *t2, const float *x, size_t n, int C,
                           const float *shift) {
    int c = 0;
    for (; c + 16 <= C; c += 16) {
        v16f s = vload_f32(shift + c), a = vsplat(0.0f), b = vsplat(0.0f);
        for (size_t p = 0; p < n; p++) {
            v16f d = vload_f32(x + p * (size_t)C + (size_t)c) - s;
            a += d;
            b += d * d;
        }
        for (int l = 0; l < 16; l++)
            t1[c + l] += (double)a[l], t2[c + l] += (double)b[l];
    }
    for (; c < C; c++) {
        float a = 0.0f, b = 0.0f;
        for (size_t p = 0; p < n; p++) {
            float d = x[p * (size_t)C + (size_t)c] - shift[c];
            a += d;
            b += d * d;
        }
        t1[c] += (double)a, t2[c] += (double)b;
    }
}

/* Whole-map gates (int8 engines, whose chains know only LeakyReLUs), 16 lanes a vector with
 * the chains' formulas (vgate, vjoin): out = Mish(x) when g is NULL, else (x [+ r]) (sigmoid(g)
 * - shift); a scalar tail with expf. Blocks of vectors split over the threads. */
#define GATE_BLOCK 4096
void ag_fused_gate_map(float *out, const float *x, const float *r, const float *g, float shift,
                       size_t count, int threads) {
    long blocks = (long)((count + GATE_BLOCK - 1) / GATE_BLOCK);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long b = 0; b < blocks; b++) {
        size_t i = (size_t)b * GATE_BLOCK, end = i + GATE_BLOCK < count ? i + GATE_BLOCK : count;
        for (; i + 16 <= end; i += 16) {
            v16f v = vload_f32(x + i);
            if (r)
                v += vload_f32(r + i);
            if (g)
                v = v * (1.0f / (1.0f + vexp(-vload_f32(g + i))) - shift);
            else
                v = vgate(v, AG_GATE_MISH);
            vstore_f32(out + i, v);
        }
        for (; i < end; i++) {
            float v = r ? x[i] + r[i] : x[i];
            out[i] = g ? v * (1.0f / (1.0f + expf(-g[i])) - shift) : gate_scalar(v, AG_GATE_MISH);
        }
    }
}

#include "fused_style.inc"

#include "fused_table.inc"
