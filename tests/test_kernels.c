/*
 * test_kernels.c - the optimised passes against the reference ops on seeded random inputs,
 * at odd sizes: fused norm/activation/padding, fused resize, the oneDNN convolution of
 * every layer shape of the generator, and the arena planner's invariant.
 * Tolerance: |a - b| <= 1e-5 + 1e-5 * |ref| per element (same fp32 math, different order).
 */
#include "test.h"

#include "../src/kernels/kernels.h"
#include "../src/kernels/onednn.h"
#include "../src/tensor/arena.h"

#include <stdint.h>

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static float rand_uniform(void) { /* xorshift64*, in [-1, 1) */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (float)((rng_state * 2685821657736338717ull) >> 40) / (float)(1 << 23) - 1.0f;
}

static float *random_floats(size_t n, float offset) {
    float *p = ag_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = rand_uniform() + offset;
    return p;
}

/* Max of |a - b| - rtol * |b|; <= atol means close. */
static float max_excess(const float *a, const float *b, size_t n, float rtol) {
    float worst = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float e = fabsf(a[i] - b[i]) - rtol * fabsf(b[i]);
        if (e > worst || isnan(a[i]))
            worst = isnan(a[i]) ? INFINITY : e;
    }
    return worst;
}

/* pre / post: LeakyReLU before / after the residual add. */
static int check_norm_act_pad(int H, int W, int C, ag_pad pad, int with_residual, int pre,
                              int post) {
    size_t n = (size_t)H * W * C;
    int HP = H + pad.top + pad.bottom, WP = W + pad.left + pad.right;
    size_t np = (size_t)HP * WP * C;
    float *x = random_floats(n, 3.0f), *res = random_floats(n, 0.0f);
    float *gamma = random_floats((size_t)C, 1.0f), *beta = random_floats((size_t)C, 0.0f);
    float *ref = ag_malloc(n * sizeof(float)), *ref_padded = ag_malloc(np * sizeof(float));
    float *out = ag_malloc(np * sizeof(float)), *scale = ag_malloc(2 * C * sizeof(float));
    double *partials = ag_malloc(2 * (size_t)H * sizeof(double));
    memcpy(ref, x, n * sizeof(float));
    ag_ref_layer_norm(ref, gamma, beta, H, W, C, 1e-5f);
    if (pre)
        ag_ref_leaky_relu(ref, n, AG_LRELU_SLOPE);
    if (with_residual)
        ag_ref_add(ref, res, n);
    if (post)
        ag_ref_leaky_relu(ref, n, AG_LRELU_SLOPE);
    ag_ref_reflect_pad(ref_padded, ref, H, W, C, pad);
    ag_norm_affine affine = {scale, scale + C, NULL, AG_GATE_NONE};
    ag_fused_norm_stats(affine, partials, x, gamma, beta, H, W, C, 1e-5f, 2);
    ag_fused_norm_act_pad(out, x, with_residual ? res : NULL, 0, affine,
                          pre ? AG_LRELU_SLOPE : 1.0f, post ? AG_LRELU_SLOPE : 1.0f, H, W, C, pad,
                          2);
    float e = max_excess(out, ref_padded, np, 1e-5f);
    ag_free(x), ag_free(res), ag_free(gamma), ag_free(beta), ag_free(ref);
    ag_free(ref_padded), ag_free(out), ag_free(scale), ag_free(partials);
    CHECK_MSG(e <= 1e-5f, "%dx%dx%d excess %g", H, W, C, (double)e);
    return 0;
}

static int test_fused_norm_act_pad(void) {
    ag_pad p1 = {1, 1, 1, 1}, p3 = {3, 3, 3, 3}, asym = {0, 1, 0, 1}, none = {0, 0, 0, 0};
    CHECK(check_norm_act_pad(9, 7, 32, p1, 0, 0, 1) == 0);
    CHECK(check_norm_act_pad(13, 11, 64, p3, 0, 0, 1) == 0);
    CHECK(check_norm_act_pad(5, 8, 128, asym, 0, 0, 1) == 0);
    CHECK(check_norm_act_pad(6, 5, 256, none, 1, 0, 0) == 0);
    CHECK(check_norm_act_pad(4, 4, 3, p3, 0, 0, 1) == 0);
    /* channel counts that are not a multiple of 16 (vector part plus scalar tail) */
    CHECK(check_norm_act_pad(6, 7, 4, p1, 1, 0, 1) == 0);
    CHECK(check_norm_act_pad(6, 7, 20, p3, 1, 1, 0) == 0);
    CHECK(check_norm_act_pad(5, 9, 48, asym, 1, 1, 1) == 0);
    return 0;
}

/* The bf16 path equals the fp32 path up to bf16 rounding (8 significant bits). */
static int test_fused_band_bf16(void) {
    int H = 7, W = 9, C = 64;
    size_t n = (size_t)H * W * C, np = (size_t)(H + 2) * (W + 2) * C;
    ag_pad pad = {1, 1, 1, 1};
    float *x = random_floats(n, 0.5f), *out = ag_malloc(np * sizeof(float));
    uint16_t *xb = ag_malloc(n * 2), *outb = ag_malloc(np * 2);
    float scale[64], shift[64];
    for (int c = 0; c < C; c++)
        scale[c] = 1.0f + 0.01f * c, shift[c] = -0.3f;
    for (size_t i = 0; i < n; i++) { /* x rounded to bf16 so both paths see the same input */
        uint32_t u;
        memcpy(&u, &x[i], 4);
        xb[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        u = (uint32_t)xb[i] << 16;
        memcpy(&x[i], &u, 4);
    }
    ag_norm_affine affine = {scale, shift, NULL, AG_GATE_NONE};
    ag_fused_norm_act_pad(out, x, NULL, 0, affine, AG_LRELU_SLOPE, 1.0f, H, W, C, pad, 2);
    ag_fused_norm_act_pad(outb, xb, NULL, 1, affine, AG_LRELU_SLOPE, 1.0f, H, W, C, pad, 2);
    float worst = 0.0f;
    for (size_t i = 0; i < np; i++) {
        uint32_t u = (uint32_t)outb[i] << 16;
        float v;
        memcpy(&v, &u, 4);
        worst = fmaxf(worst, fabsf(v - out[i]) - fabsf(out[i]) / 256.0f);
    }
    double partials_f[2 * 7], partials_b[2 * 7];
    ag_fused_row_stats(partials_f, x, 0, 0, H, (size_t)W * C, 2);
    ag_fused_row_stats(partials_b, xb, 1, 0, H, (size_t)W * C, 2);
    ag_free(x), ag_free(out), ag_free(xb), ag_free(outb);
    CHECK_MSG(worst <= 1e-6f, "excess %g", (double)worst);
    for (int i = 0; i < 2 * H; i++)
        CHECK(fabs(partials_f[i] - partials_b[i]) <= 1e-9 * (1.0 + fabs(partials_f[i])));
    return 0;
}

/* A large map whose mean dwarfs its spread: fp32 accumulation would lose the variance. */
static int test_norm_stats_accuracy(void) {
    int H = 256, W = 256, C = 64;
    size_t n = (size_t)H * W * C;
    float *x = ag_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = 1000.0f + (i % 2 ? 0.5f : -0.5f);
    float gamma[64], beta[64], scale[128];
    for (int c = 0; c < C; c++)
        gamma[c] = 1.0f, beta[c] = 0.0f;
    double *partials = ag_malloc(2 * (size_t)H * sizeof(double));
    ag_norm_affine affine = {scale, scale + C, NULL, AG_GATE_NONE};
    ag_fused_norm_stats(affine, partials, x, gamma, beta, H, W, C, 1e-12f, 2);
    /* Exact: mean 1000, std 0.5, so scale 2 and shift -2000. */
    float got_scale = scale[0], got_shift = scale[C];
    ag_free(x), ag_free(partials);
    CHECK_MSG(fabsf(got_scale - 2.0f) < 1e-5f, "scale %g", (double)got_scale);
    CHECK_MSG(fabsf(got_shift + 2000.0f) < 1e-2f, "shift %g", (double)got_shift);
    return 0;
}

/* A band of rows [first, first + rows) of the padded resized map equals the same rows of
 * reference resize + reference pad. */
static int check_resize_band(int HI, int WI, int HO, int WO, int C, ag_resize_mode mode, int first,
                             int rows) {
    ag_pad pad = {1, 1, 1, 1};
    size_t ni = (size_t)HI * WI * C, no = (size_t)HO * WO * C;
    size_t row_floats = (size_t)(WO + 2) * C, np = (size_t)(HO + 2) * row_floats;
    float *in = random_floats(ni, 0.0f), *ref = ag_malloc(no * sizeof(float));
    float *ref_padded = ag_malloc(np * sizeof(float));
    float *out = ag_malloc((size_t)rows * row_floats * sizeof(float));
    ag_resize_tap *taps_y = ag_malloc(HO * sizeof *taps_y),
                  *taps_x = ag_malloc(WO * sizeof *taps_x);
    ag_ref_resize_bilinear(ref, in, HI, WI, HO, WO, C, mode);
    ag_ref_reflect_pad(ref_padded, ref, HO, WO, C, pad);
    ag_resize_taps(taps_y, HI, HO, mode);
    ag_resize_taps(taps_x, WI, WO, mode);
    ag_band_source src = {.kind = AG_BAND_RESIZE,
                          .H = HO,
                          .W = WO,
                          .C = C,
                          .pad = pad,
                          .a = in,
                          .HI = HI,
                          .WI = WI,
                          .row_taps = taps_y,
                          .col_taps = taps_x};
    ag_fused_band(out, &src, first, rows, 2);
    float e = max_excess(out, ref_padded + first * row_floats, (size_t)rows * row_floats, 0.0f);
    ag_free(in), ag_free(ref), ag_free(ref_padded), ag_free(out), ag_free(taps_y);
    ag_free(taps_x);
    CHECK_MSG(e == 0.0f, "resize %dx%d->%dx%d mode %d excess %g", HI, WI, HO, WO, mode, (double)e);
    return 0;
}

static int test_fused_resize_band(void) {
    for (int mode = AG_RESIZE_ASYMMETRIC; mode <= AG_RESIZE_HALF_PIXEL; mode++) {
        CHECK(check_resize_band(4, 5, 9, 11, 128, (ag_resize_mode)mode, 0, 11) == 0);
        CHECK(check_resize_band(2, 2, 4, 4, 128, (ag_resize_mode)mode, 2, 4) == 0);
        CHECK(check_resize_band(7, 3, 14, 6, 64, (ag_resize_mode)mode, 5, 3) == 0);
    }
    return 0;
}

/* Image bands: u8 scaled to [-1, 1] and reflected, any row range, RGBA input. */
static int test_fused_image_band(void) {
    int H = 9, W = 8, bands = 4;
    ag_pad pad = {3, 3, 3, 3};
    uint8_t px[9 * 8 * 4];
    float rgb[9 * 8 * 3], ref[15 * 14 * 3], out[15 * 14 * 3];
    for (int i = 0; i < H * W * bands; i++)
        px[i] = (uint8_t)(i * 37);
    for (int i = 0; i < H * W; i++)
        for (int c = 0; c < 3; c++)
            rgb[i * 3 + c] = (float)px[i * bands + c] / 127.5f - 1.0f;
    ag_ref_reflect_pad(ref, rgb, H, W, 3, pad);
    ag_band_source src = {
        .kind = AG_BAND_IMAGE, .H = H, .W = W, .C = 3, .pad = pad, .u8 = px, .bands = bands};
    ag_fused_band(out, &src, 4, 11, 2);
    CHECK(max_excess(out, ref + 4 * 14 * 3, 11 * 14 * 3, 0.0f) == 0.0f);
    return 0;
}

/* The TF-legacy taps: src = dst * in / out, clamped; checked by hand for 3 -> 6. */
static int test_resize_taps_asymmetric(void) {
    ag_resize_tap t[6];
    ag_resize_taps(t, 3, 6, AG_RESIZE_ASYMMETRIC);
    CHECK(t[0].i0 == 0 && t[0].i1 == 1 && t[0].frac == 0.0f);
    CHECK(t[1].i0 == 0 && t[1].frac == 0.5f);
    CHECK(t[5].i0 == 2 && t[5].i1 == 2 && t[5].frac == 0.5f);
    ag_resize_taps(t, 3, 5, AG_RESIZE_ALIGN_CORNERS);
    CHECK(t[4].i0 == 2 && t[4].frac == 0.0f && t[2].i0 == 1 && t[2].frac == 0.0f);
    return 0;
}

static int check_dnnl_conv(ag_dnnl *dnnl, int H, int W, int IC, int OC, int K, int stride,
                           int groups, int bias) {
    ag_error err = {0};
    int HO = (H - K) / stride + 1, WO = (W - K) / stride + 1;
    size_t nw = (size_t)OC * (IC / groups) * K * K, no = (size_t)HO * WO * OC;
    float *in = random_floats((size_t)H * W * IC, 0.0f), *w = random_floats(nw, 0.0f);
    float *b = random_floats((size_t)OC, 0.0f);
    float *ref = ag_malloc(no * sizeof(float)), *out = ag_malloc(no * sizeof(float));
    ag_ref_conv2d(ref, in, w, bias ? b : NULL, H, W, IC, OC, K, stride, groups);
    ag_conv_shape shape = {H, W, IC, OC, K, stride, groups, bias, 0, 0, {0, 0, 0, 0}, 0};
    ag_dnnl_conv *conv = NULL;
    size_t scratch_bytes = 0, weight_bytes = 0;
    int rc = ag_dnnl_conv_create(dnnl, &shape, &conv, &scratch_bytes, &weight_bytes, &err);
    void *scratch = ag_malloc(scratch_bytes + 64), *prepared = ag_malloc(weight_bytes + 64);
    if (rc == AG_OK)
        rc = ag_dnnl_conv_prepare_weights(conv, w, prepared, &err);
    if (rc == AG_OK) {
        ag_dnnl_conv_bind(conv, in, out, bias ? b : NULL, prepared, scratch);
        rc = ag_dnnl_conv_run(conv, &err);
    }
    float e = rc == AG_OK ? max_excess(out, ref, no, 1e-4f) : INFINITY;
    ag_dnnl_conv_destroy(conv);
    ag_free(in), ag_free(w), ag_free(b), ag_free(ref), ag_free(out), ag_free(scratch);
    ag_free(prepared);
    CHECK_MSG(rc == AG_OK, "%s", err.message);
    CHECK_MSG(e <= 1e-4f, "conv %dx%d %d->%d k%d s%d g%d: excess %g", H, W, IC, OC, K, stride,
              groups, (double)e);
    return 0;
}

/* Every convolution shape of the generators (and an upscaler's narrow outputs), on small
 * odd-sized maps. */
static int test_onednn_conv_shapes(void) {
    ag_dnnl *dnnl = NULL;
    ag_error err = {0};
    CHECK_OK(ag_dnnl_create(&dnnl, &err), &err);
    static const int shapes[][6] = {
        /* IC, OC, K, stride, groups, bias */
        {3, 32, 7, 1, 1, 0},
        {32, 64, 3, 2, 1, 0},
        {64, 64, 3, 1, 1, 0},
        {64, 128, 3, 2, 1, 0},
        {128, 128, 3, 1, 1, 0},
        {128, 256, 1, 1, 1, 0},
        {256, 256, 3, 1, 256, 1},
        {512, 512, 3, 1, 512, 1},
        {256, 512, 1, 1, 1, 0},
        {512, 256, 1, 1, 1, 0},
        {256, 128, 3, 1, 1, 0},
        {128, 64, 3, 1, 1, 0},
        {64, 32, 7, 1, 1, 0},
        {32, 3, 1, 1, 1, 0},
        /* narrow (OC <= 4): kernel-row runs of 36 (a tail vector), 9 (shorter than one),
         * 48 (whole vectors) and 21 floats */
        {12, 3, 3, 1, 1, 1},
        {3, 3, 3, 1, 1, 0},
        {16, 4, 3, 1, 1, 1},
        {7, 1, 3, 1, 1, 0},
        {12, 2, 5, 1, 1, 1},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int *s = shapes[i];
        failed |= check_dnnl_conv(dnnl, 13, 10, s[0], s[1], s[2], s[3], s[4], s[5]);
    }
    ag_dnnl_destroy(dnnl);
    CHECK(!failed);
    return 0;
}

/* No two buffers live at the same step may share a byte. */
static int test_arena_plan_disjoint(void) {
    ag_arena_buffer b[40];
    for (int i = 0; i < 40; i++) {
        b[i].bytes = (size_t)(rand_uniform() + 1.0f) * 5000 + 1;
        b[i].first_step = i / 2;
        b[i].last_step = i / 2 + (i % 3);
    }
    size_t total = ag_arena_plan(b, 40), sum = 0;
    for (int i = 0; i < 40; i++) {
        CHECK(b[i].offset % AG_ARENA_ALIGN == 0 && b[i].offset + b[i].bytes <= total);
        sum += b[i].bytes;
        for (int j = 0; j < i; j++) {
            int live = b[i].first_step <= b[j].last_step && b[j].first_step <= b[i].last_step;
            int apart =
                b[i].offset + b[i].bytes <= b[j].offset || b[j].offset + b[j].bytes <= b[i].offset;
            CHECK(!live || apart);
        }
    }
    CHECK(total < sum); /* sharing happened */
    return 0;
}

TEST_MAIN(TEST(test_fused_norm_act_pad), TEST(test_fused_band_bf16), TEST(test_norm_stats_accuracy),
          TEST(test_fused_resize_band), TEST(test_fused_image_band),
          TEST(test_resize_taps_asymmetric), TEST(test_onednn_conv_shapes),
          TEST(test_arena_plan_disjoint))
