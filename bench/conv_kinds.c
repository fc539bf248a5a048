/*
 * conv_kinds.c - one 3x3 stride-1 conv layer of GPEN's decoder in four of oneDNN's kinds,
 * timed interleaved in one run: int8 (u8 x s8, NHWC, direct), bf16 (direct, fp32 out),
 * fp32 Winograd F(4x4, 3x3) (nChw16c, what fp32 restorer engines run) and fp32 direct
 * (NHWC); a kind this CPU has no kernel for says so. Prints each one's best time and its
 * speed-up over fp32 direct: the evidence for which precision would pay.
 *
 *   make build/bench/conv_kinds && OMP_NUM_THREADS=2 build/bench/conv_kinds
 */
#include <dnnl.h>
#include <stdio.h>
#include <time.h>

#define KINDS 4
#define FP32_DIRECT (KINDS - 1)

typedef struct kind {
    const char *name;
    dnnl_data_type_t src, weight;
    dnnl_format_tag_t tag;
    dnnl_alg_kind_t alg;
} kind;

typedef struct layer {
    dnnl_primitive_t primitive;
    dnnl_exec_arg_t args[4];
    const char *impl;
} layer;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int make(dnnl_engine_t e, layer *l, const kind *k, int H, int IC, int OC) {
    dnnl_memory_desc_t src, w, dst;
    dnnl_dims_t sd = {1, IC, H, H}, dd = {1, OC, H, H}, wd = {OC, IC, 3, 3};
    dnnl_dims_t strides = {1, 1}, pad = {1, 1};
    dnnl_memory_desc_init_by_tag(&src, 4, sd, k->src, k->tag);
    dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, k->tag);
    dnnl_memory_desc_init_by_tag(&w, 4, wd, k->weight, dnnl_format_tag_any);
    dnnl_convolution_desc_t d;
    if (dnnl_convolution_forward_desc_init(&d, dnnl_forward_inference, k->alg, &src, &w, NULL, &dst,
                                           strides, pad, pad))
        return -1;
    dnnl_primitive_attr_t attr;
    dnnl_primitive_attr_create(&attr);
    if (k->src == dnnl_u8) {
        float scale = 0.01f;
        dnnl_primitive_attr_set_output_scales(attr, 1, 0, &scale);
    }
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &d, attr, e, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success)
        return -1;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &l->impl);
    dnnl_primitive_create(&l->primitive, pd);
    dnnl_query_t what[4] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_dst_md,
                            dnnl_query_scratchpad_md};
    int arg[4] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_SCRATCHPAD};
    for (int i = 0; i < 4; i++) {
        l->args[i].arg = arg[i];
        dnnl_memory_create(&l->args[i].memory, dnnl_primitive_desc_query_md(pd, what[i], 0), e,
                           DNNL_MEMORY_ALLOCATE);
    }
    return 0;
}

int main(void) {
    static const kind kinds[KINDS] = {
        {"int8 u8 x s8", dnnl_u8, dnnl_s8, dnnl_nhwc, dnnl_convolution_direct},
        {"bf16", dnnl_bf16, dnnl_bf16, dnnl_nhwc, dnnl_convolution_direct},
        {"fp32 Winograd", dnnl_f32, dnnl_f32, dnnl_nChw16c, dnnl_convolution_winograd},
        {"fp32 direct", dnnl_f32, dnnl_f32, dnnl_nhwc, dnnl_convolution_direct},
    };
    static const int layers[][3] = {
        {512, 128, 64}, {256, 256, 128}, {128, 512, 256}, {64, 1024, 512}, {32, 1024, 512}};
    dnnl_engine_t e;
    dnnl_stream_t s;
    dnnl_engine_create(&e, dnnl_cpu, 0);
    dnnl_stream_create(&s, e, dnnl_stream_default_flags);
    for (int i = 0; i < 5; i++) {
        int H = layers[i][0], IC = layers[i][1], OC = layers[i][2];
        layer l[KINDS];
        int ok[KINDS];
        double best[KINDS];
        for (int k = 0; k < KINDS; k++)
            best[k] = 1e9;
        for (int k = 0; k < KINDS; k++)
            ok[k] = make(e, &l[k], &kinds[k], H, IC, OC) == 0;
        for (int run = 0; run < 6; run++) /* interleaved; the first run is warm-up */
            for (int k = 0; k < KINDS; k++) {
                if (!ok[k])
                    continue;
                double t = now();
                dnnl_primitive_execute(l[k].primitive, s, 4, l[k].args);
                dnnl_stream_wait(s);
                t = now() - t;
                if (run && t < best[k])
                    best[k] = t;
            }
        for (int k = 0; k < KINDS; k++)
            if (ok[k])
                printf("%4d px %4d -> %4d  %-14s %-28s %8.2f ms  %.2fx fp32 direct\n", H, IC, OC,
                       kinds[k].name, l[k].impl, best[k] * 1e3, best[FP32_DIRECT] / best[k]);
            else
                printf("%4d px %4d -> %4d  %-14s not available on this CPU\n", H, IC, OC,
                       kinds[k].name);
    }
    return 0;
}
