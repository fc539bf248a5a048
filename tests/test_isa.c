/*
 * test_isa.c - the ISA variants of the fused passes (src/kernels/fused.c compiled per ISA,
 * src/kernels/fused_dispatch.c) give the same bits: every pass of every variant this CPU
 * runs against the baseline (generic) one on seeded random inputs, fp32 and bf16, channel
 * counts with and without a vector tail; then the whole generator with each variant
 * swapped in; and ANIMEGAN_ISA forcing the lower variant in a child process.
 * The variants differ only in vector width: -std=c11 keeps -ffp-contract=off, so no FMA
 * contraction changes a rounding, and the expected difference is exactly zero.
 */
#include "test.h"

#include "../src/kernels/fused_dispatch.c"

#include <math.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;

static float rand_uniform(void) { /* xorshift64*, in [-1, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 2685821657736338717ull) >> 40) / (float)(1 << 23) - 1.0f;
}

static void fill(float *p, size_t n, float offset) {
    for (size_t i = 0; i < n; i++)
        p[i] = rand_uniform() + offset;
}

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* The variants this CPU runs, generic first (the one the others are compared with). */
static int variants(const ag_fused_ops **out) {
    int n = 0;
    for (int isa = AG_ISA_GENERIC; isa <= AG_ISA_AVX512; isa++)
        if (ag_fused_ops_for((ag_isa)isa))
            out[n++] = ag_fused_ops_for((ag_isa)isa);
    return n;
}

/* First differing byte of two buffers, -1 when equal. */
static long first_diff(const void *a, const void *b, size_t bytes) {
    const unsigned char *x = a, *y = b;
    for (size_t i = 0; i < bytes; i++)
        if (x[i] != y[i])
            return (long)i;
    return -1;
}

/* The u8 band of run_band's mode 2: this scale and zero point. */
#define U8_SCALE 0.011f
#define U8_ZERO 97

/* One band of each kind, C channels, fp32 (bf16 0), bf16 (1) or a u8 band from fp32 (2),
 * through `ops`, into out. */
typedef struct band_case {
    int kind, bf16, H, W, C, first, rows;
    ag_pad pad;
    float pre, post;
    int residual, zero_pad;
} band_case;

static int run_band(const ag_fused_ops *ops, const band_case *k, void *out, size_t out_bytes) {
    size_t n = (size_t)k->H * k->W * k->C;
    int HI = (k->H + 1) / 2, WI = (k->W + 1) / 2;
    size_t ni = (size_t)HI * WI * k->C;
    size_t esz = k->bf16 == 1 ? 2 : 4, big = n > ni ? n : ni;
    float *x = ag_malloc(big * 4), *res = ag_malloc(n * 4), *a = ag_malloc(ni * 4);
    void *xv = ag_malloc(big * esz), *resv = ag_malloc(n * esz), *av = ag_malloc(ni * esz);
    float *scale = ag_malloc((size_t)k->C * 4), *shift = ag_malloc((size_t)k->C * 4);
    uint8_t *u8 = ag_malloc((size_t)k->H * k->W * 4);
    ag_resize_tap *ty = ag_malloc((size_t)k->H * sizeof *ty),
                  *tx = ag_malloc((size_t)k->W * sizeof *tx);
    rng_state = 0x9E3779B97F4A7C15ull + (uint64_t)k->C * 131u + (uint64_t)k->kind;
    fill(x, big, 0.3f), fill(res, n, 0.0f), fill(a, ni, -0.2f);
    fill(scale, (size_t)k->C, 1.0f), fill(shift, (size_t)k->C, 0.0f);
    for (size_t i = 0; i < (size_t)k->H * k->W * 4; i++)
        u8[i] = (uint8_t)(rand_uniform() * 127.0f + 128.0f);
    if (k->bf16 == 1) {
        for (size_t i = 0; i < big; i++)
            ((uint16_t *)xv)[i] = to_bf16(x[i]);
        for (size_t i = 0; i < n; i++)
            ((uint16_t *)resv)[i] = to_bf16(res[i]);
        for (size_t i = 0; i < ni; i++)
            ((uint16_t *)av)[i] = to_bf16(a[i]);
    } else {
        memcpy(xv, x, big * 4), memcpy(resv, res, n * 4), memcpy(av, a, ni * 4);
    }
    ag_resize_taps(ty, HI, k->H, AG_RESIZE_ASYMMETRIC);
    ag_resize_taps(tx, WI, k->W, AG_RESIZE_ASYMMETRIC);
    ag_band_source s = {.kind = (ag_band_kind)k->kind,
                        .bf16 = k->bf16 == 1,
                        .H = k->H,
                        .W = k->W,
                        .C = k->kind == AG_BAND_IMAGE ? 3 : k->C,
                        .pad = k->pad,
                        .zero_pad = k->zero_pad,
                        .u8 = k->C % 2 ? u8 : NULL,
                        .f32 = x,
                        .bands = 4,
                        .x = xv,
                        .residual = k->residual ? resv : NULL,
                        .affine = {scale, shift},
                        .pre_slope = k->pre,
                        .post_slope = k->post,
                        .a = av,
                        .HI = HI,
                        .WI = WI,
                        .row_taps = ty,
                        .col_taps = tx};
    memset(out, 0xa5, out_bytes);
    if (k->bf16 == 2)
        ops->band_stats_u8(out, U8_SCALE, U8_ZERO, &s, k->first, k->rows, NULL, 2);
    else
        ops->band(out, &s, k->first, k->rows, 2);
    ag_free(x), ag_free(res), ag_free(a), ag_free(xv), ag_free(resv), ag_free(av);
    ag_free(scale), ag_free(shift), ag_free(u8), ag_free(ty), ag_free(tx);
    return 0;
}

static int test_bands_equal_across_variants(void) {
    const ag_fused_ops *v[3];
    int nv = variants(v);
    printf("  variants this CPU runs:");
    for (int i = 0; i < nv; i++)
        printf(" %s", v[i]->isa);
    printf("\n");
    static const int channels[] = {3, 16, 20, 48, 64, 128};
    int cases = 0;
    for (int kind = AG_BAND_IMAGE; kind <= AG_BAND_RESIZE; kind++)
        for (int bf16 = 0; bf16 <= 2; bf16++) /* fp32, bf16, u8 */
            for (size_t ci = 0; ci < sizeof channels / sizeof channels[0]; ci++) {
                int C = kind == AG_BAND_IMAGE ? 3 : channels[ci];
                if (kind == AG_BAND_IMAGE && ci > 1)
                    break;
                band_case k = {.kind = kind,
                               .bf16 = bf16,
                               .H = 9,
                               .W = 13,
                               .C = kind == AG_BAND_IMAGE ? (ci ? 4 : 3) : C,
                               .first = 1,
                               .rows = 9,
                               .pad = {1, 2, 3, 1},
                               .pre = AG_LRELU_SLOPE,
                               .post = ci % 2 ? AG_LRELU_SLOPE : 1.0f,
                               .residual = (int)ci % 2,
                               .zero_pad = ci == 2 || (bf16 && ci == 5)};
                int Cb = kind == AG_BAND_IMAGE ? 3 : C;
                size_t bytes = (size_t)k.rows * (k.W + k.pad.left + k.pad.right) * Cb *
                               (bf16 == 2 ? 1
                                : bf16    ? 2
                                          : 4);
                void *ref = ag_malloc(bytes), *got = ag_malloc(bytes);
                run_band(v[0], &k, ref, bytes);
                for (int i = 1; i < nv; i++) {
                    run_band(v[i], &k, got, bytes);
                    long d = first_diff(ref, got, bytes);
                    if (d >= 0) {
                        ag_free(ref), ag_free(got);
                        CHECK_MSG(d < 0, "%s vs %s: kind %d bf16 %d C %d differ at byte %ld",
                                  v[i]->isa, v[0]->isa, kind, bf16, C, d);
                    }
                }
                ag_free(ref), ag_free(got);
                cases++;
            }
    printf("  %d band cases, bit-identical\n", cases);
    return 0;
}

/* int8: each variant's u8 band (quantised in registers as it is built) is exactly its fp32
 * band quantised afterwards, zero padding included (the zero point): every kind, channel
 * counts with and without a vector tail, values clamped at both ends. */
static int test_u8_band_is_quantised_f32_band(void) {
    const ag_fused_ops *v[3];
    int nv = variants(v), cases = 0;
    static const int channels[] = {3, 16, 20, 64};
    float inv = 1.0f / U8_SCALE, zero_half = (float)U8_ZERO + 0.5f;
    for (int i = 0; i < nv; i++)
        for (int kind = AG_BAND_IMAGE; kind <= AG_BAND_RESIZE; kind++)
            for (size_t ci = 0; ci < sizeof channels / sizeof channels[0]; ci++) {
                int C = kind == AG_BAND_IMAGE ? 3 : channels[ci];
                band_case k = {.kind = kind,
                               .H = 9,
                               .W = 13,
                               .C = kind == AG_BAND_IMAGE ? (ci % 2 ? 4 : 3) : C,
                               .first = 0,
                               .rows = 11,
                               .pad = {1, 1, 2, 1},
                               .pre = AG_LRELU_SLOPE,
                               .post = ci % 2 ? AG_LRELU_SLOPE : 1.0f,
                               .residual = (int)ci % 2,
                               .zero_pad = ci >= 2};
                size_t n = (size_t)k.rows * (k.W + k.pad.left + k.pad.right) * C;
                float *f32 = ag_malloc(n * 4);
                uint8_t *u8 = ag_malloc(n);
                run_band(v[i], &k, f32, n * 4);
                k.bf16 = 2;
                run_band(v[i], &k, u8, n);
                long bad = -1;
                for (size_t j = 0; j < n && bad < 0; j++) {
                    float t = f32[j] * inv + zero_half;
                    t = t < 0.0f ? 0.0f : t > 255.0f ? 255.0f : t;
                    bad = u8[j] == (uint8_t)(int)t ? -1 : (long)j;
                }
                ag_free(f32), ag_free(u8);
                CHECK_MSG(bad < 0, "%s: kind %d C %d: u8 band differs at %ld", v[i]->isa, kind, C,
                          bad);
                cases++;
            }
    printf("  %d u8 band cases equal the quantised fp32 bands\n", cases);
    return 0;
}

/* int8's u8 maps: quantize_rows stores each row and channel within half a step of the fp32
 * values (and takes their statistics and ranges exactly as the fp32 pass does); materialising
 * a u8 map in place is within a step of doing it in fp32; both bit-identical across variants. */
static int test_u8_maps(void) {
    const ag_fused_ops *v[3];
    int nv = variants(v), H = 5, W = 7;
    static const int channels[] = {3, 16, 20, 64};
    for (size_t ci = 0; ci < sizeof channels / sizeof channels[0]; ci++) {
        int C = channels[ci];
        size_t n = (size_t)H * W * C, q = 2 * (size_t)C * H;
        float *y = ag_malloc(n * 4), *scale = ag_malloc((size_t)C * 4),
              *shift = ag_malloc((size_t)C * 4);
        float *pairs[3], *scratch = ag_malloc(n * 4);
        float *old = ag_malloc(q * 4);
        uint8_t *maps[3];
        double partials[2 * 5];
        rng_state = 0x51ED2701u + (uint64_t)C;
        fill(y, n, 0.2f), fill(scale, (size_t)C, 1.0f), fill(shift, (size_t)C, 0.0f);
        for (size_t i = 0; i < n; i++) /* channels of different magnitudes */
            y[i] *= (float)(1 + (int)(i % (size_t)C) % 5);
        for (int k = 0; k < nv; k++) {
            pairs[k] = ag_malloc(q * 4), maps[k] = ag_malloc(n);
            float range[2 * 2 * 64]; /* two threads' slots: lo[C], hi[C] each */
            for (int c = 0; c < 2 * 2 * C; c++)
                range[c] = c % (2 * C) < C ? INFINITY : -INFINITY;
            ag_stats_rows t = {partials, NULL, 0, 0, H, (size_t)W * C, range, C};
            v[k]->quantize_rows(maps[k], pairs[k], y, 0, H, W, C, &t, 2);
            double want[2 * 5]; /* the statistics exactly as the fp32 pass takes them */
            v[k]->row_stats(want, y, 0, 0, H, (size_t)W * C, 2);
            CHECK_MSG(memcmp(want, partials, sizeof want) == 0, "%s C %d: moments differ",
                      v[k]->isa, C);
            for (int c = 0; c < C; c++) { /* the range slots hold each channel's extremes */
                float lo = INFINITY, hi = -INFINITY;
                for (size_t i = (size_t)c; i < n; i += (size_t)C)
                    lo = fminf(lo, y[i]), hi = fmaxf(hi, y[i]);
                CHECK(fminf(range[c], range[2 * C + c]) == lo &&
                      fmaxf(range[C + c], range[3 * C + c]) == hi);
            }
            double worst = 0.0;
            for (size_t i = 0; i < n; i++) {
                size_t r = i / ((size_t)W * C), c = i % (size_t)C;
                float back =
                    (float)maps[k][i] * pairs[k][2 * C * r + c] + pairs[k][2 * C * r + C + c];
                double d =
                    fabs((double)back - (double)y[i]) / ((double)pairs[k][2 * C * r + c] + 1e-30);
                worst = d > worst ? d : worst;
            }
            CHECK_MSG(worst <= 0.5 + 1e-3, "%s C %d: %.3f steps from fp32", v[k]->isa, C, worst);
            if (k == 0)
                memcpy(old, pairs[0], q * 4);
            ag_norm_affine a = {scale, shift, NULL, AG_GATE_NONE};
            v[k]->materialize_u8(maps[k], pairs[k], NULL, NULL, a, AG_LRELU_SLOPE, 1.0f, H, W, C,
                                 scratch, NULL, 2);
            CHECK(k == 0 ||
                  (memcmp(maps[k], maps[0], n) == 0 && memcmp(pairs[k], pairs[0], q * 4) == 0));
        }
        for (size_t i = 0; i < n; i++) { /* against the fp32 chain on the stored values */
            size_t r = i / ((size_t)W * C), c = i % (size_t)C;
            float z = y[i] * scale[c] + shift[c];
            z = z < 0.0f ? z * AG_LRELU_SLOPE : z;
            float back = (float)maps[0][i] * pairs[0][2 * C * r + c] + pairs[0][2 * C * r + C + c];
            /* one step of the stored map through the affine, half a step of the new one */
            double bound = fabs((double)scale[c]) * 0.5 * (double)old[2 * C * r + c] +
                           0.5 * (double)pairs[0][2 * C * r + c];
            CHECK_MSG(fabs((double)back - (double)z) <= bound * 1.01 + 1e-6,
                      "C %d: materialised %g vs %g", C, (double)back, (double)z);
        }
        for (int k = 0; k < nv; k++)
            ag_free(pairs[k]), ag_free(maps[k]);
        ag_free(y), ag_free(scale), ag_free(shift), ag_free(scratch), ag_free(old);
    }
    printf("  u8 maps: within half a step, materialised within a step, variants identical\n");
    return 0;
}

/* Row statistics (fp32 and bf16, lengths with and without a 16-lane tail), the affine fold,
 * norm_act_pad in place and with padding, and the output pass. */
static int test_stats_and_output_equal(void) {
    const ag_fused_ops *v[3];
    int nv = variants(v);
    enum { H = 6, W = 11, C = 20, N = H * W * C };
    float *x = ag_malloc(N * 4), gamma[C], beta[C], scale[2][C], shift[2][C];
    uint16_t *xb = ag_malloc(N * 2);
    rng_state = 77;
    fill(x, N, 5.0f), fill(gamma, C, 1.0f), fill(beta, C, 0.0f);
    for (int i = 0; i < N; i++)
        xb[i] = to_bf16(x[i]);
    double p[2][2 * H], pb[2][2 * H];
    size_t pad_n = (size_t)(H + 2) * (W + 2) * C;
    float *padded[2] = {ag_malloc(pad_n * 4), ag_malloc(pad_n * 4)};
    float *out[2] = {ag_malloc(H * W * 3 * 4), ag_malloc(H * W * 3 * 4)};
    uint8_t *u8[2] = {ag_malloc(H * W * 4), ag_malloc(H * W * 4)};
    int rc = 0;
    for (int i = 1; i < nv && !rc; i++) {
        const ag_fused_ops *o[2] = {v[0], v[i]};
        for (int j = 0; j < 2; j++) {
            ag_norm_affine af = {scale[j], shift[j], NULL, AG_GATE_NONE};
            o[j]->row_stats(p[j], x, 0, 0, H, (size_t)W * C - 3, 2); /* a tail of 13 */
            o[j]->row_stats(pb[j], xb, 1, 0, H, (size_t)W * C, 2);
            o[j]->norm_stats(af, p[j], x, gamma, beta, H, W, C, 1e-5f, 2);
            o[j]->norm_act_pad(padded[j], x, NULL, 0, af, AG_LRELU_SLOPE, 1.0f, H, W, C,
                               (ag_pad){1, 1, 1, 1}, 2);
            memset(u8[j], 7, H * W * 4);
            o[j]->output(out[j], u8[j], 4, x, 1, H, W / 2, 2);
        }
        const char *what = memcmp(p[0], p[1], sizeof p[0])                    ? "fp32 stats"
                           : memcmp(pb[0], pb[1], sizeof pb[0])               ? "bf16 stats"
                           : memcmp(scale[0], scale[1], sizeof scale[0])      ? "affine scale"
                           : memcmp(shift[0], shift[1], sizeof shift[0])      ? "affine shift"
                           : memcmp(padded[0], padded[1], pad_n * 4)          ? "norm_act_pad"
                           : memcmp(out[0], out[1], (size_t)H * (W / 2) * 12) ? "output f32"
                           : memcmp(u8[0], u8[1], H * W * 4)                  ? "output u8"
                                                                              : NULL;
        if (what) {
            fprintf(stderr, "  %s differs from %s: %s\n", v[i]->isa, v[0]->isa, what);
            rc = 1;
        }
        CHECK(v[i]->output_to_u8(0.3f) == v[0]->output_to_u8(0.3f));
    }
    ag_free(x), ag_free(xb), ag_free(padded[0]), ag_free(padded[1]);
    ag_free(out[0]), ag_free(out[1]), ag_free(u8[0]), ag_free(u8[1]);
    return rc;
}

/* Per-channel sums (instance norm, LADE): every variant the same bits, channel counts with
 * and without a vector tail, and within float rounding of sums taken in double. */
static int test_channel_sums(void) {
    const ag_fused_ops *v[3];
    int nv = variants(v);
    static const int channels[] = {3, 16, 20, 48, 256};
    enum { N = 256, CMAX = 256 };
    float *x = ag_malloc(N * CMAX * 4), shift[CMAX];
    rng_state = 4242;
    fill(x, N * CMAX, 3.0f), fill(shift, CMAX, 3.0f);
    int rc = 0;
    for (size_t ci = 0; ci < sizeof channels / sizeof channels[0] && !rc; ci++) {
        int C = channels[ci];
        double t1[2][CMAX], t2[2][CMAX], worst = 0.0;
        for (int i = 0; i < nv && !rc; i++) {
            double *s1 = t1[i > 0], *s2 = t2[i > 0];
            for (int c = 0; c < C; c++)
                s1[c] = 0.5, s2[c] = 0.25; /* added to, not overwritten */
            v[i]->channel_sums(s1, s2, x, N, C, shift);
            if (i > 0 &&
                (memcmp(t1[0], t1[1], (size_t)C * 8) || memcmp(t2[0], t2[1], (size_t)C * 8))) {
                fprintf(stderr, "  %s differs from %s at C=%d\n", v[i]->isa, v[0]->isa, C);
                rc = 1;
            }
        }
        for (int c = 0; c < C && !rc; c++) {
            double a = 0.5, b = 0.25;
            for (int p = 0; p < N; p++) {
                double d = (double)(x[(size_t)p * C + c] - shift[c]);
                a += d, b += d * d;
            }
            double e = fmax(fabs(t1[0][c] - a), fabs(t2[0][c] - b) / (b > 1.0 ? b : 1.0));
            worst = e > worst ? e : worst;
        }
        printf("  C=%d: worst error against double sums %.2e (bound 1e-3)\n", C, worst);
        rc |= worst >= 1e-3;
    }
    ag_free(x);
    return rc;
}

/* The narrow convolution (OC <= AG_NARROW_OC; FMAs, so not bit-equal across variants):
 * every variant within float rounding of a direct convolution in double, with pixel blocks'
 * tails (odd widths) and runs that are no multiple of 16 floats (IC 5; K * IC 36 and 100: a tail
 * vector). */
static int test_conv_narrow(void) {
    const ag_fused_ops *v[3];
    int nv = variants(v);
    static const struct {
        int IC, OC, K, HP, WP;
    } cases[] = {{32, 3, 7, 12, 19},
                 {5, 1, 3, 6, 9},
                 {16, 2, 3, 5, 8},
                 {20, 4, 5, 9, 14},
                 {12, 3, 3, 7, 11}};
    int rc = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int IC = cases[ci].IC, OC = cases[ci].OC, K = cases[ci].K, HP = cases[ci].HP,
            WP = cases[ci].WP, HO = HP - K + 1, WO = WP - K + 1;
        size_t nw = (size_t)OC * IC * K * K, no = (size_t)HO * WO * OC;
        float *src = ag_malloc((size_t)HP * WP * IC * 4), *w = ag_malloc(nw * 4),
              *packed = ag_malloc((size_t)OC * K * ag_narrow_run(K, IC) * 4),
              *out = ag_malloc(no * 4), bias[AG_NARROW_OC];
        rng_state = 99 + ci;
        fill(src, (size_t)HP * WP * IC, 0.2f), fill(w, nw, 0.0f), fill(bias, OC, 0.0f);
        ag_narrow_pack(packed, w, OC, IC, K); /* as onednn.c packs */
        for (int vi = 0; vi < nv; vi++) {
            v[vi]->conv_narrow(out, src, packed, bias, HP, WP, IC, OC, K, 2);
            double worst = 0.0;
            for (int y = 0; y < HO; y++)
                for (int x = 0; x < WO; x++)
                    for (int o = 0; o < OC; o++) {
                        double acc = bias[o];
                        for (int i = 0; i < IC; i++)
                            for (int ky = 0; ky < K; ky++)
                                for (int kx = 0; kx < K; kx++)
                                    acc += (double)src[((size_t)(y + ky) * WP + x + kx) * IC + i] *
                                           (double)w[(((size_t)o * IC + i) * K + ky) * K + kx];
                        double e = fabs(acc - (double)out[((size_t)y * WO + x) * OC + o]);
                        worst = e > worst ? e : worst;
                    }
            printf("  %s IC=%d OC=%d K=%d %dx%d: worst error against double %.2e (bound 1e-4)\n",
                   v[vi]->isa, IC, OC, K, HO, WO, worst);
            rc |= worst >= 1e-4;
        }
        ag_free(src), ag_free(w), ag_free(packed), ag_free(out);
    }
    return rc;
}

/* The output pass's tanh (lanes, no libm): within 3e-7 of tanhf over the range a generator's
 * last conv produces, saturated beyond it, NaN-free. */
static int test_output_tanh(void) {
    enum { N = 4001 };
    float *y = ag_malloc(N * 3 * 4), *out = ag_malloc(N * 3 * 4);
    for (int i = 0; i < N * 3; i++)
        y[i] = -12.0f + 24.0f * (float)i / (float)(N * 3 - 1);
    y[0] = -1e30f, y[1] = 1e30f, y[2] = 0.0f, y[3] = -1e-8f;
    ag_fused_output(out, NULL, 3, y, 1, 1, N, 2);
    double worst = 0.0;
    for (int i = 0; i < N * 3; i++) {
        double e = isnan(out[i]) ? 1.0 : fabs((double)out[i] - (double)tanhf(y[i]));
        worst = e > worst ? e : worst;
    }
    printf("  worst error against tanhf %.2e (bound 3e-7)\n", worst);
    ag_free(y), ag_free(out);
    return worst > 3e-7;
}

/* A chain's gate (SiLU, Mish: the upscalers' activations applied by a conv's reader) over
 * x * scale + shift, through norm_act_pad with 35 channels (two vectors and a scalar tail):
 * every variant the same bits, within 1e-6 of the result (+ 1e-20) of the double formulas
 * over [-100, 100], NaN-free. */
static int test_chain_gates(void) {
    enum { H = 7, W = 41, C = 35, N = H * W * C };
    float *x = ag_malloc(N * 4), *base = ag_malloc(N * 4), *out = ag_malloc(N * 4);
    float scale[C], shift[C];
    for (int i = 0; i < N; i++)
        x[i] = -100.0f + 200.0f * (float)i / (float)(N - 1);
    for (int c = 0; c < C; c++)
        scale[c] = 1.0f - 0.01f * (float)c, shift[c] = 0.05f * (float)c;
    const ag_fused_ops *ops[3];
    int count = variants(ops), failed = 0;
    ag_pad none = {0, 0, 0, 0};
    for (ag_gate gate = AG_GATE_SILU; gate <= AG_GATE_MISH; gate++) {
        ag_norm_affine a = {scale, shift, NULL, gate};
        double worst = 0.0;
        for (int v = 0; v < count; v++) {
            ops[v]->norm_act_pad(v ? out : base, x, NULL, 0, a, 1.0f, 1.0f, H, W, C, none, 2);
            if (v && first_diff(out, base, N * 4) >= 0) {
                printf("  %s differs from generic\n", ops[v]->isa);
                failed = 1;
            }
        }
        for (int i = 0; i < N; i++) {
            double z = (double)(x[i] * scale[i % C] + shift[i % C]); /* as the kernel, in float */
            double want = gate == AG_GATE_SILU ? z / (1 + exp(-z))
                          : z >= 20            ? z
                                               : z * tanh(log1p(exp(z)));
            double e =
                isnan(base[i]) ? 1e30 : fabs((double)base[i] - want) / (1e-6 * fabs(want) + 1e-20);
            worst = e > worst ? e : worst;
        }
        printf("  %s: worst error %.2f of the bound\n", gate == AG_GATE_SILU ? "silu" : "mish",
               worst);
        failed |= worst > 1.0;
    }
    ag_free(x), ag_free(base), ag_free(out);
    return failed;
}

/* The generator end to end, the table swapped under the engine: the same output bits. */
static int test_generator_equal_across_variants(void) {
    const ag_fused_ops *v[3];
    int nv = variants(v);
    ag_model *model = NULL;
    ag_error err = {0};
    CHECK_OK(ag_model_load(AG_SOURCE_DIR "/models/hayao.safetensors", &model, &err), &err);
    enum { W = 40, H = 28, N = W * H * 3 };
    float *in = ag_malloc(N * 4), *ref = ag_malloc(N * 4), *got = ag_malloc(N * 4);
    rng_state = 5;
    fill(in, N, 0.0f);
    int rc = 0;
    /* bf16 where oneDNN runs it at all (AVX-512); test_precision checks the refusal below. */
    ag_precision_choice choice;
    int last = ag_precision_resolve(AG_PRECISION_BF16, AG_BACKEND_ONEDNN, NULL, &choice) == AG_OK;
    for (int bf16 = 0; bf16 <= last && !rc; bf16++) {
        ag_engine_options o = {.precision = bf16 ? AG_PRECISION_BF16 : AG_PRECISION_FP32,
                               .threads = 2};
        for (int i = 0; i < nv && !rc; i++) {
            ag_engine *engine = NULL;
            (void)ag_fused_ops_active(); /* the once-only choice is made; now override it */
            active = v[i];
            rc = ag_engine_create(model, &o, &engine, &err);
            if (!rc)
                rc = ag_engine_run_f32(engine, in, W, H, i ? got : ref, &err);
            ag_engine_destroy(engine);
            if (rc)
                fprintf(stderr, "  %s: %s\n", v[i]->isa, err.message);
            else if (i && memcmp(ref, got, N * 4)) {
                float worst = 0.0f;
                for (int j = 0; j < N; j++)
                    worst = fmaxf(worst, fabsf(ref[j] - got[j]));
                fprintf(stderr, "  %s %s output differs from %s by up to %g\n",
                        bf16 ? "bf16" : "fp32", v[i]->isa, v[0]->isa, (double)worst);
                rc = 1;
            }
        }
    }
    active = NULL;
    choose();
    ag_free(in), ag_free(ref), ag_free(got);
    ag_model_destroy(model);
    return rc;
}

/* The table in use is the variant ag_cpu_get_info names. */
static int test_active_is_cpu_isa(void) {
    const ag_cpu_info *cpu = ag_cpu_get_info();
    CHECK(!strcmp(ag_fused_ops_active()->isa, ag_isa_name(cpu->isa)));
    const char *want = getenv("ANIMEGAN_ISA");
    if (want && ag_isa_parse(want) >= 0 && ag_isa_parse(want) <= (int)cpu->best_isa)
        CHECK_MSG(!strcmp(ag_fused_ops_active()->isa, want), "forced %s, running %s", want,
                  ag_fused_ops_active()->isa);
    return 0;
}

/* ANIMEGAN_ISA=avx2 and =generic in a child: the dispatch follows (the choice is per process). */
static int test_forced_isa_in_child(void) {
    static const char *const forced[] = {"avx2", "generic"};
    for (size_t i = 0; i < 2; i++) {
        if (ag_isa_parse(forced[i]) > (int)ag_cpu_get_info()->best_isa)
            continue;
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("ANIMEGAN_ISA", forced[i], 1);
            execl("/proc/self/exe", "test_isa", "test_active_is_cpu_isa", (char *)NULL);
            _exit(127);
        }
        int status = 0;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "ANIMEGAN_ISA=%s: status %d",
                  forced[i], status);
    }
    return 0;
}

TEST_MAIN(TEST(test_bands_equal_across_variants), TEST(test_u8_band_is_quantised_f32_band),
          TEST(test_u8_maps), TEST(test_stats_and_output_equal), TEST(test_channel_sums),
          TEST(test_conv_narrow), TEST(test_output_tanh), TEST(test_chain_gates),
          TEST(test_generator_equal_across_variants), TEST(test_active_is_cpu_isa),
          TEST(test_forced_isa_in_child))
