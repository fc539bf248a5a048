/*
 * precision.c - which precision runs: the one place that knows which precisions the engine
 * has, which meet their quality bar, and which instructions make each native. The CLI and
 * the server resolve --precision (auto or explicit) here before creating engines.
 */
#include "animegan.h"

#include <stdio.h>
#include <string.h>

static const char *const precision_names[] = {"fp32", "bf16", "int8", "auto"};

const char *ag_precision_name(ag_precision precision) {
    return (unsigned)precision < 4 ? precision_names[precision] : "?";
}

int ag_precision_parse(const char *text) {
    for (int i = 0; i < 4; i++)
        if (strcmp(text, precision_names[i]) == 0)
            return i;
    return -1;
}

typedef struct precision_row {
    ag_precision precision;
    int available;     /* the engine runs it */
    int meets_bar;     /* its measured quality against fp32 clears the bar */
    int reference;     /* the reference backend runs it */
    unsigned minimum;  /* all of these AG_CPU_* flags are needed to run it at all */
    unsigned native;   /* any of these AG_CPU_* flags makes it native; 0: always native */
    const char *needs; /* those instructions, for the messages */
    const char *why;   /* its quality, for auto's note */
    const char *slow;  /* what it is without `native`, for the warning ("is emulated, ...") */
    /* Native and also faster than the next row on this kind of CPU (NULL: whenever native). */
    int (*faster)(const ag_cpu_info *cpu);
} precision_row;

/*
 * bf16 pays only where its dot products outrun fp32 FMAs: AMX tiles, or AMD's AVX512-BF16
 * (Zen 5: 1.93x fp32 end to end). On an Intel Xeon with AVX512-BF16 but no AMX (this
 * project's 2026-12-01 VM: Sapphire Rapids flags, AMX hidden) oneDNN's native
 * brgconv:avx512_core_bf16 ran a 64->64 3x3 layer at 0.54x fp32 and the generator at 0.64x
 * (bench/int8_conv.c, animegan bench --size 256), so auto keeps fp32 there.
 */
static int bf16_faster(const ag_cpu_info *cpu) {
    if (cpu->flags & cpu->onednn_flags & AG_CPU_AMX_BF16)
        return 1;
    return strcmp(cpu->vendor, "AuthenticAMD") == 0;
}

/*
 * Fastest first. int8 (u8 activations with a per-image zero point, s8 weights, VNNI):
 * 45-52 dB against fp32 on the test photos for every bundled generator
 * (tests/test_int8_engine.c, bar 38 dB). bf16: 54 dB against fp32 (tests/test_precision.c);
 * its speed: below.
 */
#define AVX512_CORE (AG_CPU_AVX512F | AG_CPU_AVX512BW | AG_CPU_AVX512VL | AG_CPU_AVX512DQ)
static const precision_row rows[] = {
    {AG_PRECISION_INT8, 1, 1, 0, 0, AG_CPU_AVX512_VNNI | AG_CPU_AVX_VNNI | AG_CPU_AMX_INT8,
     "AVX512-VNNI, AVX-VNNI or AMX", "45 dB or more against fp32",
     /* measured on the 2026-12-01 Xeon held to AVX2: v2 1.56x fp32, hayao-v3 1.03x, cute 0.98x */
     "runs on oneDNN's non-VNNI kernels, about as fast as fp32 (v2 up to 1.6x)", NULL},
    /* oneDNN 2.6 emulates bf16 convolutions on AVX-512 only; below it has none at all. */
    {AG_PRECISION_BF16, 1, 1, 0, AVX512_CORE, AG_CPU_AVX512_BF16 | AG_CPU_AMX_BF16,
     "AVX512-BF16 or AMX", "54 dB against fp32", "is emulated, 4-5x slower than fp32", bf16_faster},
    {AG_PRECISION_FP32, 1, 1, 1, 0, 0, "", "the reference precision", "", NULL},
};
#define ROW_COUNT (sizeof rows / sizeof rows[0])

static const precision_row *row_of(ag_precision p) {
    for (size_t i = 0; i < ROW_COUNT; i++)
        if (rows[i].precision == p)
            return &rows[i];
    return NULL;
}

/* Native for oneDNN on this CPU: the flags both the CPU and oneDNN's ISA limit allow. */
static int is_native(const precision_row *r, const ag_cpu_info *cpu) {
    return r->native == 0 || (cpu->flags & cpu->onednn_flags & r->native) != 0;
}

static int can_run(const precision_row *r, const ag_cpu_info *cpu) {
    return (cpu->flags & cpu->onednn_flags & r->minimum) == r->minimum;
}

/* Whether auto may pick row r: available on `backend`, over its quality bar, native on
 * `cpu` and faster than the next row there. */
static int auto_may_pick(const precision_row *r, ag_backend backend, const ag_cpu_info *cpu) {
    int runs = r->available && (backend == AG_BACKEND_ONEDNN || r->reference);
    return runs && r->meets_bar && can_run(r, cpu) && is_native(r, cpu) &&
           (!r->faster || r->faster(cpu));
}

int ag_precision_resolve(ag_precision requested, ag_backend backend, const ag_cpu_info *cpu,
                         ag_precision_choice *out) {
    memset(out, 0, sizeof *out);
    out->precision = AG_PRECISION_FP32;
    if (!cpu)
        cpu = ag_cpu_get_info();
    if (requested == AG_PRECISION_AUTO) {
        for (size_t i = 0; i < ROW_COUNT; i++) {
            const precision_row *r = &rows[i];
            if (!auto_may_pick(r, backend, cpu))
                continue;
            out->precision = r->precision;
            snprintf(out->note, sizeof out->note, "auto: %s (%s%s%s)",
                     ag_precision_name(r->precision), r->why, r->native ? ", native " : "",
                     r->native ? r->needs : "");
            return AG_OK;
        }
        return AG_E_INTERNAL; /* not reached: fp32 always qualifies */
    }
    const precision_row *r = row_of(requested);
    if (!r)
        return AG_E_ARG;
    out->precision = requested;
    /* The reference backend is plain C in fp32; the engine refuses the others there. */
    if (backend == AG_BACKEND_ONEDNN && r->available && !can_run(r, cpu)) {
        int held = (cpu->flags & r->minimum) == r->minimum; /* the CPU could, oneDNN may not */
        snprintf(out->note, sizeof out->note, "%s needs AVX-512 (native with %s); %s has %s only",
                 ag_precision_name(requested), r->needs,
                 held ? "oneDNN held by ONEDNN_MAX_CPU_ISA" : "this CPU", cpu->onednn_isa);
        return AG_E_UNSUPPORTED;
    }
    if (backend == AG_BACKEND_ONEDNN && r->available && !is_native(r, cpu)) {
        out->emulated = 1;
        if (cpu->flags & r->native)
            snprintf(out->note, sizeof out->note,
                     "warning: %s %s: ONEDNN_MAX_CPU_ISA keeps oneDNN from this CPU's %s",
                     ag_precision_name(requested), r->slow, r->needs);
        else
            snprintf(out->note, sizeof out->note, "warning: %s %s on this CPU (no %s)",
                     ag_precision_name(requested), r->slow, r->needs);
    }
    return AG_OK;
}

/*
 * Face restorers (GPEN, GFPGAN): bf16 is their modulated convs' products in bf16 (fp32
 * activations; the other convs stay fp32): 54-57 dB against PyTorch's fp32 on the fixtures'
 * face (tests/test_restore.c), 51 dB (GFPGANv1.4) and 55 dB (GPEN-BFR-512) against our fp32
 * on a real 512 px face at full size (bench/restore.sh). int8, asked for only, runs their
 * 3x3 modulated convs u8 x s8 (src/kernels/int8_modconv.c): 46-55 dB on the fixtures,
 * 38.8 dB (GFPGANv1.4) and 48.6 dB (GPEN-BFR-512) at full size; faster than fp32, not than
 * bf16 where the CPU has it (2026-12-04, AMD EPYC), so auto never picks it.
 */
#define RESTORE_BF16_WHY "bf16 products, 51 dB or more against fp32"
#define RESTORE_INT8_WHY                                                                           \
    "int8: the 3x3 modulated convs u8 x s8, the rest fp32 (39-49 dB against fp32 at full size)"

int ag_restore_precision_resolve(ag_precision requested, const ag_cpu_info *cpu,
                                 ag_precision_choice *out) {
    if (!cpu)
        cpu = ag_cpu_get_info();
    if (requested == AG_PRECISION_BF16 || requested == AG_PRECISION_FP32)
        return ag_precision_resolve(requested, AG_BACKEND_ONEDNN, cpu, out);
    if (requested == AG_PRECISION_INT8) {
        int rc = ag_precision_resolve(requested, AG_BACKEND_ONEDNN, cpu, out);
        if (rc == AG_OK && !out->note[0])
            snprintf(out->note, sizeof out->note, "%s", RESTORE_INT8_WHY);
        return rc;
    }
    if (requested != AG_PRECISION_AUTO)
        return AG_E_ARG;
    memset(out, 0, sizeof *out);
    const precision_row *r = row_of(AG_PRECISION_BF16);
    int bf16 = auto_may_pick(r, AG_BACKEND_ONEDNN, cpu);
    out->precision = bf16 ? AG_PRECISION_BF16 : AG_PRECISION_FP32;
    snprintf(out->note, sizeof out->note, "auto: %s%s",
             bf16 ? RESTORE_BF16_WHY ", native " : "fp32 (bf16 would not be faster here)",
             bf16 ? r->needs : "");
    return AG_OK;
}
