/*
 * int8_conv.c - one convolution layer of the v2 generator at 512x512 in fp32, bf16 and int8
 * on oneDNN, timed alone (no bands, no passes): what the int8 building block
 * (src/kernels/onednn_int8.c) gains over the convolutions the engine runs today.
 *
 *   make build/bench/int8_conv && build/bench/int8_conv [--threads 2] [--runs 30] [--network]
 *
 * Layers: 64 -> 64 3x3 at 256x256 (block A's second half) and 128 -> 128 3x3 at 128x128
 * (the residual blocks' neighbours), padded input NHWC as the engine binds it. Each variant
 * is its own primitive (weights reordered once), 3 warm-up runs, then --runs timed ones;
 * prints one line per layer and variant: median and min ms, GFLOP/s, speed-up over fp32.
 * --network times all 25 convolutions of the v2 generator at 512x512 the same way and sums
 * the medians: the convolutions' share of an int8 engine, without the passes between.
 * Not part of make test; timings on a shared machine are noise, read the ratios.
 */
#include "../src/kernels/onednn.h"
#include "../src/kernels/onednn_int8.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *aligned(size_t bytes) {
    void *p = NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 64) ? NULL : p;
}

typedef struct timing {
    double median, min;
} timing;

typedef int (*run_fn)(void *conv, ag_error *err);

static timing time_runs(run_fn run, void *conv, int runs) {
    double *ms = calloc((size_t)runs, sizeof *ms);
    ag_error err = {0};
    timing t = {NAN, NAN};
    for (int i = 0; i < 3; i++)
        if (run(conv, &err))
            goto out;
    for (int i = 0; i < runs; i++) {
        double start = now_ms();
        if (run(conv, &err))
            goto out;
        ms[i] = now_ms() - start;
    }
    qsort(ms, (size_t)runs, sizeof *ms, compare_doubles);
    t.median = ms[runs / 2], t.min = ms[0];
out:
    if (err.message[0])
        fprintf(stderr, "int8_conv: %s\n", err.message);
    free(ms);
    return t;
}

static int run_float(void *conv, ag_error *err) {
    return ag_dnnl_conv_run(conv, err);
}

static ag_int8_quant run_q;
static int run_int8(void *conv, ag_error *err) {
    return ag_dnnl_int8_conv_run(conv, &run_q, NULL, err);
}

static void report(const char *layer, const char *what, const char *impl, timing t, double gflop,
                   double fp32_ms) {
    printf("%-30s %-14s %8.2f %8.2f %8.1f %6.2fx  %s\n", layer, what, t.median, t.min,
           gflop / (t.median / 1e3), fp32_ms / t.median, impl);
}

/* fp32 or bf16 through onednn.c, exactly as the engine creates its convolutions. */
static timing float_conv(ag_dnnl *dnnl, ag_conv_shape s, const float *w, void *src, void *dst,
                         int runs) {
    ag_dnnl_conv *conv = NULL;
    ag_error err = {0};
    size_t scratch_bytes = 0, weight_bytes = 0;
    timing t = {NAN, NAN};
    if (ag_dnnl_conv_create(dnnl, &s, &conv, &scratch_bytes, &weight_bytes, &err)) {
        fprintf(stderr, "int8_conv: %s\n", err.message);
        return t;
    }
    void *prepared = aligned(weight_bytes), *scratch = aligned(scratch_bytes);
    if (!ag_dnnl_conv_prepare_weights(conv, w, prepared, &err)) {
        ag_dnnl_conv_bind(conv, src, dst, NULL, prepared, scratch);
        t = time_runs(run_float, conv, runs);
    }
    ag_dnnl_conv_destroy(conv);
    free(prepared), free(scratch);
    return t;
}

static timing int8_conv(ag_dnnl *dnnl, ag_int8_conv_shape s, const int8_t *w_s8,
                        const float *w_scale, const uint8_t *src, void *dst, int runs, char *impl,
                        size_t impl_size) {
    int u8_dst = s.u8_dst;
    ag_dnnl_int8_conv *conv = NULL;
    ag_error err = {0};
    size_t scratch_bytes = 0, weight_bytes = 0;
    timing t = {NAN, NAN};
    float multiplier = u8_dst ? run_q.x_scale / run_q.y_scale : 1.0f;
    if (ag_dnnl_int8_conv_create(dnnl, &s, w_scale, multiplier, &conv, &scratch_bytes,
                                 &weight_bytes, &err)) {
        fprintf(stderr, "int8_conv: %s\n", err.message);
        return t;
    }
    snprintf(impl, impl_size, "%s", ag_dnnl_int8_conv_impl(conv));
    void *prepared = aligned(weight_bytes), *scratch = aligned(scratch_bytes);
    if (!ag_dnnl_int8_conv_prepare_weights(conv, w_s8, prepared, &err)) {
        ag_dnnl_int8_conv_bind(conv, src, dst, prepared, scratch);
        t = time_runs(run_int8, conv, runs);
    }
    ag_dnnl_int8_conv_destroy(conv);
    free(prepared), free(scratch);
    return t;
}

typedef struct layer_shape {
    int HP, WP, IC, OC, K, stride, groups;
} layer_shape;

/* Times of one layer: fp32, bf16, int8 u8->f32, int8 u8->u8 (in t[0..3]). */
static void time_layer(ag_dnnl *dnnl, layer_shape L, int runs, int print, timing t[4]) {
    int HO = (L.HP - L.K) / L.stride + 1, WO = (L.WP - L.K) / L.stride + 1;
    size_t nx = (size_t)L.HP * L.WP * L.IC, ny = (size_t)HO * WO * L.OC;
    size_t per_oc = (size_t)(L.IC / L.groups) * L.K * L.K, nw = (size_t)L.OC * per_oc;
    float *x = aligned(nx * 4), *y = aligned(ny * 4), *w = aligned(nw * 4);
    float *w_scale = aligned((size_t)L.OC * 4);
    uint16_t *xb = aligned(nx * 2), *yb = aligned(ny * 2);
    uint8_t *xu = aligned(nx), *yu = aligned(ny);
    int8_t *w_s8 = aligned(nw);
    uint32_t state = 12345u;
    for (size_t i = 0; i < nx; i++) {
        state = state * 1664525u + 1013904223u;
        x[i] = (float)(state >> 8) / 16777216.0f * 2.0f - 0.4f;
        uint32_t u;
        memcpy(&u, &x[i], 4);
        xb[i] = (uint16_t)(u >> 16);
    }
    for (size_t i = 0; i < nw; i++) {
        state = state * 1664525u + 1013904223u;
        w[i] = ((float)(state >> 8) / 16777216.0f - 0.5f) * 0.1f;
    }
    run_q = ag_int8_quant_from_range(-0.4f, 1.6f);
    run_q.y_scale = 0.05f, run_q.y_zero = 128;
    ag_quantize_u8(xu, x, nx, run_q.x_scale, run_q.x_zero);
    ag_int8_quantize_weights(w_s8, w_scale, w, L.OC, per_oc, ag_int8_weight_max());
    char name[64], impl[64] = "";
    snprintf(name, sizeof name, "%d->%d%s %dx%d/%d at %dx%d", L.IC, L.OC, L.groups > 1 ? " dw" : "",
             L.K, L.K, L.stride, HO, WO);
    double gflop = 2.0 * (double)ny * (double)per_oc / 1e9;
    ag_conv_shape fs = {L.HP, L.WP, L.IC, L.OC, L.K, L.stride, L.groups, 0, 0, 0, {0, 0, 0, 0}};
    ag_conv_shape bs = {L.HP, L.WP, L.IC, L.OC, L.K, L.stride, L.groups, 0, 1, 1, {0, 0, 0, 0}};
    ag_int8_conv_shape is = {L.HP, L.WP, L.IC, L.OC, L.K, L.stride, L.groups, 0, 0};
    ag_int8_conv_shape us = {L.HP, L.WP, L.IC, L.OC, L.K, L.stride, L.groups, 0, 1};
    t[0] = float_conv(dnnl, fs, w, x, y, runs);
    t[1] = float_conv(dnnl, bs, w, xb, yb, runs);
    t[2] = int8_conv(dnnl, is, w_s8, w_scale, xu, y, runs, impl, sizeof impl);
    t[3] = int8_conv(dnnl, us, w_s8, w_scale, xu, yu, runs, impl, sizeof impl);
    if (print) {
        report(name, "fp32", "onednn.c", t[0], gflop, t[0].median);
        report(name, "bf16", "onednn.c", t[1], gflop, t[0].median);
        report(name, "int8 u8->f32", impl, t[2], gflop, t[0].median);
        report(name, "int8 u8->u8", impl, t[3], gflop, t[0].median);
    } else {
        printf("%-30s %8.2f %8.2f %8.2f %8.2f  %5.2fx  %s\n", name, t[0].median, t[1].median,
               t[2].median, t[3].median, t[0].median / t[2].median, impl);
    }
    free(x), free(y), free(w), free(w_scale), free(xb), free(yb), free(xu), free(yu), free(w_s8);
}

/* The 25 convolutions of the v2 generator at S x S (tools/reference_model.py), padded. */
static void network(ag_dnnl *dnnl, int S, int runs) {
    int h = S / 2, q = S / 4;
    layer_shape L[25];
    int n = 0;
    L[n++] = (layer_shape){S + 6, S + 6, 3, 32, 7, 1, 1};
    L[n++] = (layer_shape){S + 1, S + 1, 32, 64, 3, 2, 1};
    L[n++] = (layer_shape){h + 2, h + 2, 64, 64, 3, 1, 1};
    L[n++] = (layer_shape){h + 1, h + 1, 64, 128, 3, 2, 1};
    L[n++] = (layer_shape){q + 2, q + 2, 128, 128, 3, 1, 1};
    L[n++] = (layer_shape){q + 2, q + 2, 128, 128, 3, 1, 1};
    for (int b = 0; b < 4; b++) {
        int in = b ? 256 : 128, mid = 2 * in;
        L[n++] = (layer_shape){q, q, in, mid, 1, 1, 1};
        L[n++] = (layer_shape){q + 2, q + 2, mid, mid, 3, 1, mid};
        L[n++] = (layer_shape){q, q, mid, 256, 1, 1, 1};
    }
    L[n++] = (layer_shape){q + 2, q + 2, 256, 128, 3, 1, 1};
    L[n++] = (layer_shape){h + 2, h + 2, 128, 128, 3, 1, 1};
    L[n++] = (layer_shape){h + 2, h + 2, 128, 128, 3, 1, 1};
    L[n++] = (layer_shape){S + 2, S + 2, 128, 64, 3, 1, 1};
    L[n++] = (layer_shape){S + 2, S + 2, 64, 64, 3, 1, 1};
    L[n++] = (layer_shape){S + 6, S + 6, 64, 32, 7, 1, 1};
    L[n++] = (layer_shape){S, S, 32, 3, 1, 1, 1};
    printf("%-30s %8s %8s %8s %8s  %6s  %s\n", "layer (median ms)", "fp32", "bf16", "int8>f32",
           "int8>u8", "int8x", "int8 kernel");
    double sum[4] = {0};
    for (int i = 0; i < n; i++) {
        timing t[4];
        time_layer(dnnl, L[i], runs, 0, t);
        for (int k = 0; k < 4; k++)
            sum[k] += t[k].median;
    }
    printf("%-30s %8.1f %8.1f %8.1f %8.1f  %5.2fx  (u8->u8: %.2fx)\n", "all 25 convolutions",
           sum[0], sum[1], sum[2], sum[3], sum[0] / sum[2], sum[0] / sum[3]);
}

int main(int argc, char **argv) {
    int threads = 2, runs = 30, whole = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--network"))
            whole = 1;
        else {
            fprintf(stderr, "usage: %s [--threads N] [--runs N] [--network]\n", argv[0]);
            return 2;
        }
    }
    if (threads < 1 || runs < 1)
        return 2;
    omp_set_num_threads(threads);
    const ag_cpu_info *cpu = ag_cpu_get_info();
    printf("%s; oneDNN %s; %d threads; %d timed runs; weights up to +-%d\n", cpu->model,
           cpu->onednn_isa, threads, runs, ag_int8_weight_max());
    ag_dnnl *dnnl = NULL;
    ag_error err = {0};
    if (ag_dnnl_create(&dnnl, &err)) {
        fprintf(stderr, "int8_conv: %s\n", err.message);
        return 1;
    }
    if (whole) {
        network(dnnl, 512, runs);
    } else {
        printf("%-30s %-14s %8s %8s %8s %7s  %s\n", "layer", "precision", "med ms", "min ms",
               "GFLOP/s", "vs fp32", "oneDNN kernel");
        timing t[4];
        time_layer(dnnl, (layer_shape){258, 258, 64, 64, 3, 1, 1}, runs, 1, t);
        time_layer(dnnl, (layer_shape){130, 130, 128, 128, 3, 1, 1}, runs, 1, t);
    }
    ag_dnnl_destroy(dnnl);
    return 0;
}
