/*
 * fused_isa.h - the ISA variants of the fused passes. The Makefile compiles fused.c once per
 * variant (-DAG_FUSED_ISA=avx512 with -march=x86-64-v4, avx2 with x86-64-v3, generic with
 * the baseline), and this header, included by fused.c in place of kernels.h, gives each
 * copy's public functions the variant's suffix (ag_fused_band_avx2, ...) and makes its
 * table (ag_fused_ops_avx2, fused_table.inc). fused_dispatch.c defines the unsuffixed
 * ag_fused_* functions the engine calls: one table, chosen once from ag_cpu_get_info()->isa.
 * A new public function of fused.c needs its line in each of the three lists below (the
 * link fails with "multiple definition" until it has them).
 */
#ifndef AG_FUSED_ISA_H
#define AG_FUSED_ISA_H

#ifdef AG_FUSED_ISA
#define AG_FUSED_CAT_(a, b) a##_##b
#define AG_FUSED_CAT(a, b) AG_FUSED_CAT_(a, b)
#define AG_FUSED_NAME(name) AG_FUSED_CAT(name, AG_FUSED_ISA)
#define ag_fused_row_stats AG_FUSED_NAME(ag_fused_row_stats)
#define ag_norm_affine_from_stats AG_FUSED_NAME(ag_norm_affine_from_stats)
#define ag_fused_norm_stats AG_FUSED_NAME(ag_fused_norm_stats)
#define ag_fused_band AG_FUSED_NAME(ag_fused_band)
#define ag_fused_band_stats AG_FUSED_NAME(ag_fused_band_stats)
#define ag_fused_norm_act_pad AG_FUSED_NAME(ag_fused_norm_act_pad)
#define ag_fused_output AG_FUSED_NAME(ag_fused_output)
#define ag_output_to_u8 AG_FUSED_NAME(ag_output_to_u8)
#define ag_fused_range AG_FUSED_NAME(ag_fused_range)
#define ag_fused_band_stats_u8 AG_FUSED_NAME(ag_fused_band_stats_u8)
#define ag_fused_quantize_rows AG_FUSED_NAME(ag_fused_quantize_rows)
#define ag_fused_materialize_u8 AG_FUSED_NAME(ag_fused_materialize_u8)
#define ag_fused_channel_sums AG_FUSED_NAME(ag_fused_channel_sums)
#define ag_fused_conv_narrow AG_FUSED_NAME(ag_fused_conv_narrow)
#define ag_fused_scale_shift AG_FUSED_NAME(ag_fused_scale_shift)
#define ag_fused_modulate AG_FUSED_NAME(ag_fused_modulate)
#define ag_fused_modulate_blocked AG_FUSED_NAME(ag_fused_modulate_blocked)
#define ag_fused_unblock_scale_shift AG_FUSED_NAME(ag_fused_unblock_scale_shift)
#define ag_fused_scatter_taps AG_FUSED_NAME(ag_fused_scatter_taps)
#define ag_fused_bias_lrelu AG_FUSED_NAME(ag_fused_bias_lrelu)
#define ag_fused_noise AG_FUSED_NAME(ag_fused_noise)
#define ag_fused_modconv_narrow AG_FUSED_NAME(ag_fused_modconv_narrow)
#define ag_fused_modulate_range AG_FUSED_NAME(ag_fused_modulate_range)
#define ag_fused_modulate_u8 AG_FUSED_NAME(ag_fused_modulate_u8)
#define ag_fused_upfirdn AG_FUSED_NAME(ag_fused_upfirdn)
#define ag_fused_gate_map AG_FUSED_NAME(ag_fused_gate_map)
#endif

#include "kernels.h"

/* One variant's passes (the kernels.h functions of the same names). */
typedef struct ag_fused_ops {
    const char *isa; /* "avx512", "avx2", "generic" */
    __typeof__(ag_fused_row_stats) *row_stats;
    __typeof__(ag_norm_affine_from_stats) *norm_affine_from_stats;
    __typeof__(ag_fused_norm_stats) *norm_stats;
    __typeof__(ag_fused_band) *band;
    __typeof__(ag_fused_band_stats) *band_stats;
    __typeof__(ag_fused_norm_act_pad) *norm_act_pad;
    __typeof__(ag_fused_output) *output;
    __typeof__(ag_output_to_u8) *output_to_u8;
    __typeof__(ag_fused_range) *range;
    __typeof__(ag_fused_band_stats_u8) *band_stats_u8;
    __typeof__(ag_fused_quantize_rows) *quantize_rows;
    __typeof__(ag_fused_materialize_u8) *materialize_u8;
    __typeof__(ag_fused_channel_sums) *channel_sums;
    __typeof__(ag_fused_conv_narrow) *conv_narrow;
    __typeof__(ag_fused_scale_shift) *scale_shift;
    __typeof__(ag_fused_modulate) *modulate;
    __typeof__(ag_fused_modulate_blocked) *modulate_blocked;
    __typeof__(ag_fused_unblock_scale_shift) *unblock_scale_shift;
    __typeof__(ag_fused_scatter_taps) *scatter_taps;
    __typeof__(ag_fused_bias_lrelu) *bias_lrelu;
    __typeof__(ag_fused_noise) *noise;
    __typeof__(ag_fused_modconv_narrow) *modconv_narrow;
    __typeof__(ag_fused_modulate_range) *modulate_range;
    __typeof__(ag_fused_modulate_u8) *modulate_u8;
    __typeof__(ag_fused_upfirdn) *upfirdn;
    __typeof__(ag_fused_gate_map) *gate_map;
} ag_fused_ops;

/* The variants built (x86-64: all three; elsewhere generic only). */
extern const ag_fused_ops ag_fused_ops_generic;
#if defined(__x86_64__)
#define AG_FUSED_X86 1
extern const ag_fused_ops ag_fused_ops_avx2;
extern const ag_fused_ops ag_fused_ops_avx512;
#endif

/* The scalar helper every variant has alike; fused_dispatch.c calls it directly. */
uint8_t ag_output_to_u8_generic(float y);

/* The table of `isa`, or NULL when it is not built or this CPU cannot run it (tests). */
const ag_fused_ops *ag_fused_ops_for(ag_isa isa);

/* The table in use: ag_cpu_get_info()->isa's, chosen on the first call. */
const ag_fused_ops *ag_fused_ops_active(void);

#endif
