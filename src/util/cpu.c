/*
 * cpu.c - what this CPU offers, detected once per process: its model name, the instruction
 * sets the precisions and our fused-pass variants need (cpuid, with xgetbv for the register
 * state the OS saves) and the variant in use after ANIMEGAN_ISA. What oneDNN will use is
 * added above this layer, by src/kernels/onednn.c's ag_cpu_get_info, which calls
 * ag_cpu_detect once. src/kernels/fused_dispatch.c picks its function table from `isa`;
 * src/precision.c picks the precision from the flags; the front ends print them.
 */
#include "util_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define AG_X86 1
#endif

/* The names /proc/cpuinfo uses, in AG_CPU_* bit order. */
static const char *const flag_names[AG_CPU_FLAG_COUNT] = {
    "avx2",        "fma",      "avx512f",     "avx512bw", "avx512vl", "avx512dq", "avx512cd",
    "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16",
};

static const char *const isa_names[] = {"generic", "avx2", "avx512"};

const char *ag_isa_name(ag_isa isa) {
    return (unsigned)isa < sizeof isa_names / sizeof isa_names[0] ? isa_names[isa] : "?";
}

int ag_isa_parse(const char *text) {
    for (int i = 0; i < (int)(sizeof isa_names / sizeof isa_names[0]); i++)
        if (strcmp(text, isa_names[i]) == 0)
            return i;
    return -1;
}

/* Trim leading and trailing blanks in place (brand strings are padded with spaces). */
static void trim(char *s) {
    size_t start = 0, n = strlen(s);
    while (start < n && isspace((unsigned char)s[start]))
        start++;
    while (n > start && isspace((unsigned char)s[n - 1]))
        n--;
    memmove(s, s + start, n - start);
    s[n - start] = '\0';
}

/* The first "model name" line of /proc/cpuinfo into out; 0 when found. */
static int proc_model_name(char *out, size_t size) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return -1;
    char line[512];
    int rc = -1;
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon)
            continue;
        snprintf(out, size, "%s", colon + 1);
        trim(out);
        rc = out[0] ? 0 : -1;
        break;
    }
    fclose(f);
    return rc;
}

#ifdef AG_X86
static unsigned bit(unsigned reg, int b) {
    return (reg >> b) & 1u;
}

/* XCR0: the register state the OS saves on a context switch (0 without OSXSAVE). */
static unsigned long long xcr0(unsigned ecx1) {
    if (!bit(ecx1, 27))
        return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

/* AG_CPU_* flags, and whether the rest of x86-64-v3 (F16C, BMI1/2, LZCNT, MOVBE) is there. */
static unsigned detect_flags(int *v3_rest) {
    unsigned a, b, c, d, max = __get_cpuid_max(0, NULL);
    *v3_rest = 0;
    if (max < 1)
        return 0;
    __cpuid(1, a, b, c, d);
    unsigned long long xcr = xcr0(c);
    int ymm = (xcr & 0x6) == 0x6;                 /* SSE + AVX state */
    int zmm = ymm && (xcr & 0xe0) == 0xe0;        /* opmask + both halves of the zmm file */
    int tiles = (xcr & 0x60000ull) == 0x60000ull; /* XTILECFG + XTILEDATA */
    unsigned flags = 0, ecx1 = c;
    if (ymm && bit(ecx1, 12))
        flags |= AG_CPU_FMA;
    if (max < 7)
        return flags;
    __cpuid_count(7, 0, a, b, c, d);
    unsigned ebx7 = b, ecx7 = c, edx7 = d;
    if (ymm && bit(ebx7, 5))
        flags |= AG_CPU_AVX2;
    if (zmm) {
        static const int ebx_bits[][2] = {{16, AG_CPU_AVX512F},
                                          {30, AG_CPU_AVX512BW},
                                          {31, AG_CPU_AVX512VL},
                                          {17, AG_CPU_AVX512DQ},
                                          {28, AG_CPU_AVX512CD}};
        for (size_t i = 0; i < sizeof ebx_bits / sizeof ebx_bits[0]; i++)
            if (bit(ebx7, ebx_bits[i][0]))
                flags |= (unsigned)ebx_bits[i][1];
        if (bit(ecx7, 11))
            flags |= AG_CPU_AVX512_VNNI;
    }
    if (tiles) {
        flags |= bit(edx7, 24) ? AG_CPU_AMX_TILE : 0;
        flags |= bit(edx7, 24) && bit(edx7, 25) ? AG_CPU_AMX_INT8 : 0;
        flags |= bit(edx7, 24) && bit(edx7, 22) ? AG_CPU_AMX_BF16 : 0;
    }
    if (a >= 1) { /* leaf 7's eax: the highest subleaf */
        unsigned a1, b1, c1, d1;
        __cpuid_count(7, 1, a1, b1, c1, d1);
        if (ymm && bit(a1, 4))
            flags |= AG_CPU_AVX_VNNI;
        if (zmm && bit(a1, 5))
            flags |= AG_CPU_AVX512_BF16;
    }
    unsigned lzcnt = 0;
    if (__get_cpuid_max(0x80000000u, NULL) >= 0x80000001u) {
        unsigned a8, b8, c8, d8;
        __cpuid(0x80000001u, a8, b8, c8, d8);
        lzcnt = bit(c8, 5);
    }
    *v3_rest = bit(ecx1, 29) && bit(ebx7, 3) && bit(ebx7, 8) && lzcnt && bit(ecx1, 22);
    return flags;
}

/* The 12-byte vendor string of leaf 0. */
static void vendor_string(char *out, size_t size) {
    unsigned a, regs[3];
    __cpuid(0, a, regs[0], regs[2], regs[1]); /* ebx, edx, ecx spell it in that order */
    char text[13];
    memcpy(text, regs, 12);
    text[12] = '\0';
    snprintf(out, size, "%s", text);
    (void)a;
}

/* The 48-byte brand string of leaves 0x80000002-4, trimmed; "" when absent. */
static void brand_string(char *out, size_t size) {
    unsigned regs[12];
    out[0] = '\0';
    if (__get_cpuid_max(0x80000000u, NULL) < 0x80000004u)
        return;
    for (unsigned i = 0; i < 3; i++)
        __cpuid(0x80000002u + i, regs[4 * i], regs[4 * i + 1], regs[4 * i + 2], regs[4 * i + 3]);
    char text[49];
    memcpy(text, regs, 48);
    text[48] = '\0';
    snprintf(out, size, "%s", text);
    trim(out);
}
#else
static unsigned detect_flags(int *v3_rest) {
    *v3_rest = 0;
    return 0;
}

static void brand_string(char *out, size_t size) {
    out[0] = size ? '\0' : out[0];
}

static void vendor_string(char *out, size_t size) {
    out[0] = size ? '\0' : out[0];
}
#endif

static ag_isa best_isa(unsigned flags, int v3_rest) {
#ifdef AG_X86
    const unsigned v3 = AG_CPU_AVX2 | AG_CPU_FMA;
    const unsigned v4 =
        AG_CPU_AVX512F | AG_CPU_AVX512BW | AG_CPU_AVX512VL | AG_CPU_AVX512DQ | AG_CPU_AVX512CD;
    if ((flags & v3) != v3 || !v3_rest)
        return AG_ISA_GENERIC;
    return (flags & v4) == v4 ? AG_ISA_AVX512 : AG_ISA_AVX2;
#else
    (void)flags, (void)v3_rest;
    return AG_ISA_GENERIC;
#endif
}

/* ANIMEGAN_ISA (or AG_NOSIMD=1) lowers the variant; never raises it above the CPU's best. */
static void apply_isa_override(ag_cpu_info *info) {
    const char *want = getenv("ANIMEGAN_ISA");
    const char *nosimd = getenv("AG_NOSIMD");
    info->isa = info->best_isa;
    if (nosimd && strcmp(nosimd, "0") != 0 && nosimd[0] && (!want || !want[0]))
        want = "generic";
    if (!want || !want[0])
        return;
    int parsed = ag_isa_parse(want);
    if (parsed < 0) {
        snprintf(info->isa_note, sizeof info->isa_note,
                 "ANIMEGAN_ISA=%.32s is not avx512, avx2 or generic: using %s", want,
                 ag_isa_name(info->isa));
    } else if (parsed > (int)info->best_isa) {
        snprintf(info->isa_note, sizeof info->isa_note,
                 "ANIMEGAN_ISA=%s is beyond this CPU: using %s", want, ag_isa_name(info->isa));
    } else {
        info->isa = (ag_isa)parsed;
    }
}

void ag_cpu_detect(ag_cpu_info *info) {
    ag_cpu_info cpu = {0};
    int v3_rest = 0;
    cpu.flags = detect_flags(&v3_rest);
    brand_string(cpu.model, sizeof cpu.model);
    vendor_string(cpu.vendor, sizeof cpu.vendor);
    if (!cpu.model[0] && proc_model_name(cpu.model, sizeof cpu.model) != 0)
        snprintf(cpu.model, sizeof cpu.model, "unknown");
    size_t used = 0;
    for (int i = 0; i < AG_CPU_FLAG_COUNT; i++) {
        if (!(cpu.flags & (1u << i)))
            continue;
        int n = snprintf(cpu.flags_text + used, sizeof cpu.flags_text - used, "%s%s",
                         used ? " " : "", flag_names[i]);
        if (n < 0 || (size_t)n >= sizeof cpu.flags_text - used)
            break;
        used += (size_t)n;
    }
    cpu.best_isa = best_isa(cpu.flags, v3_rest);
    apply_isa_override(&cpu);
    *info = cpu;
}
