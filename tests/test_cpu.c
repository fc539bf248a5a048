/*
 * test_cpu.c - CPU detection (src/util/cpu.c) against the kernel's view in /proc/cpuinfo,
 * the ANIMEGAN_ISA override, and the precision policy (src/precision.c) on this CPU and on
 * described ones: an AVX2-only server, an AVX-512 Xeon without bf16, a Zen 4/5 or Sapphire
 * Rapids with AVX512-BF16, and oneDNN limited by ONEDNN_MAX_CPU_ISA.
 */
#include "../src/util/cpu.c"

#include "../src/util/util_internal.h"
#include "test.h"

#include <sys/wait.h>

/* The "flags" and "model name" lines of the first processor in /proc/cpuinfo. */
static int read_proc(char *flags, size_t flags_size, char *model, size_t model_size) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return -1;
    char line[8192];
    flags[0] = model[0] = '\0';
    while (fgets(line, sizeof line, f) && (!flags[0] || !model[0])) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        if (!flags[0] && strncmp(line, "flags", 5) == 0)
            snprintf(flags, flags_size, " %s ", colon + 1);
        else if (!model[0] && strncmp(line, "model name", 10) == 0)
            snprintf(model, model_size, "%s", colon + 1);
    }
    fclose(f);
    for (char *p = flags; *p; p++)
        if (*p == '\n' || *p == '\t')
            *p = ' ';
    trim(model);
    return 0;
}

static int has_word(const char *list, const char *word) {
    char needle[64];
    snprintf(needle, sizeof needle, " %s ", word);
    return strstr(list, needle) != NULL;
}

/* Every flag cpuid + xgetbv gives is the one the kernel shows, and the names agree. */
static int test_flags_match_proc_cpuinfo(void) {
    char flags[8192], model[256];
    const ag_cpu_info *info = ag_cpu_get_info();
    CHECK(info == ag_cpu_get_info());
    if (read_proc(flags, sizeof flags, model, sizeof model) != 0 || !flags[0]) {
        printf("  no flags in /proc/cpuinfo: only the brand string checked\n");
        CHECK(info->model[0]);
        return 0;
    }
    char ours[sizeof info->flags_text + 3];
    snprintf(ours, sizeof ours, " %.*s ", (int)sizeof info->flags_text - 1, info->flags_text);
    for (int i = 0; i < AG_CPU_FLAG_COUNT; i++) {
        int mine = (info->flags >> i) & 1u, kernel = has_word(flags, flag_names[i]);
        CHECK_MSG(mine == kernel, "%s: cpuid says %d, /proc/cpuinfo %d", flag_names[i], mine,
                  kernel);
        CHECK(has_word(ours, flag_names[i]) == mine);
    }
    printf("  %s: %s; best %s, oneDNN %s\n", info->model, info->flags_text,
           ag_isa_name(info->best_isa), info->onednn_isa);
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512], vendor[64] = "";
    while (f && fgets(line, sizeof line, f) && !vendor[0])
        if (!strncmp(line, "vendor_id", 9) && strchr(line, ':'))
            snprintf(vendor, sizeof vendor, "%s", strchr(line, ':') + 1), trim(vendor);
    if (f)
        fclose(f);
    if (vendor[0])
        CHECK_MSG(!strcmp(vendor, info->vendor), "vendor '%s' vs '%s'", vendor, info->vendor);
    /* The model is cpuid's brand string, blanks trimmed, which the kernel usually shows too;
     * a VM's kernel may show its own name (a Firecracker guest: "AMD EPYC" for "Oxide
     * Virtual Turin-like Processor"), so cpuid is read here directly as well. */
    char brand[64] = "";
#ifdef AG_X86
    unsigned r[12];
    if (__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) {
        for (unsigned i = 0; i < 3; i++)
            __cpuid(0x80000002u + i, r[4 * i], r[4 * i + 1], r[4 * i + 2], r[4 * i + 3]);
        memcpy(brand, r, 48);
        trim(brand);
    }
#endif
    if (brand[0])
        CHECK_MSG(!strcmp(brand, info->model), "cpuid '%s' vs '%s'", brand, info->model);
    else if (model[0])
        CHECK_MSG(!strcmp(model, info->model), "'%s' vs '%s'", model, info->model);
    if (model[0] && strcmp(model, info->model))
        printf("  the kernel calls it '%s'\n", model);
    return 0;
}

/* The variant follows the flags, and GCC's own detection agrees about the two levels. */
static int test_best_isa(void) {
    const ag_cpu_info *info = ag_cpu_get_info();
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    __builtin_cpu_init();
    int v3 = __builtin_cpu_supports("x86-64-v3"), v4 = __builtin_cpu_supports("x86-64-v4");
    CHECK_MSG(info->best_isa == (v4   ? AG_ISA_AVX512
                                 : v3 ? AG_ISA_AVX2
                                      : AG_ISA_GENERIC),
              "best %s, gcc v3 %d v4 %d", ag_isa_name(info->best_isa), v3, v4);
#endif
    CHECK(info->isa <= info->best_isa);
    CHECK(best_isa(AG_CPU_AVX2 | AG_CPU_FMA, 0) == AG_ISA_GENERIC);
    CHECK(best_isa(AG_CPU_AVX2 | AG_CPU_FMA | AG_CPU_AVX512F, 1) == AG_ISA_AVX2);
    /* ONEDNN never widens what the hardware has. */
    CHECK((info->onednn_flags & ~info->flags) == 0);
    return 0;
}

/* ANIMEGAN_ISA and AG_NOSIMD lower the variant, never raise it, and say when ignored. */
static int test_isa_override(void) {
    ag_cpu_info t = {.best_isa = AG_ISA_AVX2};
    unsetenv("AG_NOSIMD");
    setenv("ANIMEGAN_ISA", "generic", 1);
    apply_isa_override(&t);
    CHECK(t.isa == AG_ISA_GENERIC && !t.isa_note[0]);
    setenv("ANIMEGAN_ISA", "avx512", 1);
    apply_isa_override(&t);
    CHECK(t.isa == AG_ISA_AVX2 && strstr(t.isa_note, "beyond"));
    t.isa_note[0] = '\0';
    setenv("ANIMEGAN_ISA", "sse9", 1);
    apply_isa_override(&t);
    CHECK(t.isa == AG_ISA_AVX2 && strstr(t.isa_note, "sse9"));
    t.isa_note[0] = '\0';
    unsetenv("ANIMEGAN_ISA");
    setenv("AG_NOSIMD", "1", 1);
    apply_isa_override(&t);
    CHECK(t.isa == AG_ISA_GENERIC);
    unsetenv("AG_NOSIMD");
    apply_isa_override(&t);
    CHECK(t.isa == AG_ISA_AVX2);
    CHECK(ag_isa_parse("avx2") == AG_ISA_AVX2 && ag_isa_parse("AVX2") < 0);
    CHECK(!strcmp(ag_isa_name(AG_ISA_AVX512), "avx512"));
    return 0;
}

/* ---- precision ------------------------------------------------------------------------- */

#define V3 (AG_CPU_AVX2 | AG_CPU_FMA)
#define V4                                                                                         \
    (V3 | AG_CPU_AVX512F | AG_CPU_AVX512BW | AG_CPU_AVX512VL | AG_CPU_AVX512DQ | AG_CPU_AVX512CD)

static ag_cpu_info described(unsigned flags, unsigned onednn_flags) {
    ag_cpu_info c = {.flags = flags, .onednn_flags = onednn_flags, .vendor = "AuthenticAMD"};
    snprintf(c.onednn_isa, sizeof c.onednn_isa, "%s",
             (onednn_flags & AG_CPU_AVX512F) ? "avx512_core" : "avx2");
    return c;
}

static ag_precision resolve(ag_precision want, ag_backend backend, ag_cpu_info c, int *emulated,
                            int *rc) {
    ag_precision_choice choice;
    *rc = ag_precision_resolve(want, backend, &c, &choice);
    *emulated = choice.emulated;
    if (*rc == 0)
        AG_ASSERT(choice.precision != AG_PRECISION_AUTO);
    return choice.precision;
}

static int test_auto_picks_native_only(void) {
    int em, rc;
    ag_cpu_info avx2 = described(V3, V3);
    ag_cpu_info skx = described(V4 | AG_CPU_AVX512_VNNI, V4 | AG_CPU_AVX512_VNNI);
    ag_cpu_info zen = described(V4 | AG_CPU_AVX512_VNNI | AG_CPU_AVX512_BF16,
                                V4 | AG_CPU_AVX512_VNNI | AG_CPU_AVX512_BF16);
    ag_cpu_info spr_limited = described(zen.flags | AG_CPU_AMX_TILE | AG_CPU_AMX_BF16, V3);
    ag_cpu_info spr = described(spr_limited.flags, spr_limited.flags);
    ag_cpu_info intel_bf16 = zen; /* AVX512-BF16 without AMX: native, but slower than fp32 */
    snprintf(spr.vendor, sizeof spr.vendor, "GenuineIntel");
    snprintf(intel_bf16.vendor, sizeof intel_bf16.vendor, "GenuineIntel");
    /* int8 first wherever VNNI is native (all of these have AVX512-VNNI). */
    CHECK(resolve(AG_PRECISION_AUTO, AG_BACKEND_ONEDNN, spr, &em, &rc) == AG_PRECISION_INT8 &&
          !rc && !em);
    CHECK(resolve(AG_PRECISION_AUTO, AG_BACKEND_ONEDNN, intel_bf16, &em, &rc) ==
              AG_PRECISION_INT8 &&
          !rc && !em);
    /* Without VNNI: bf16 where it is native and faster, else fp32. */
    ag_cpu_info zen_no_vnni = described(V4 | AG_CPU_AVX512_BF16, V4 | AG_CPU_AVX512_BF16);
    ag_cpu_info spr_no_vnni = described(zen_no_vnni.flags | AG_CPU_AMX_TILE | AG_CPU_AMX_BF16,
                                        zen_no_vnni.flags | AG_CPU_AMX_TILE | AG_CPU_AMX_BF16);
    ag_cpu_info intel_bf16_no_vnni = zen_no_vnni;
    snprintf(spr_no_vnni.vendor, sizeof spr_no_vnni.vendor, "GenuineIntel");
    snprintf(intel_bf16_no_vnni.vendor, sizeof intel_bf16_no_vnni.vendor, "GenuineIntel");
    CHECK(resolve(AG_PRECISION_AUTO, AG_BACKEND_ONEDNN, spr_no_vnni, &em, &rc) ==
              AG_PRECISION_BF16 &&
          !rc && !em);
    CHECK(resolve(AG_PRECISION_AUTO, AG_BACKEND_ONEDNN, intel_bf16_no_vnni, &em, &rc) ==
              AG_PRECISION_FP32 &&
          !rc && !em);
    CHECK(resolve(AG_PRECISION_AUTO, AG_BACKEND_ONEDNN, zen_no_vnni, &em, &rc) ==
              AG_PRECISION_BF16 &&
          !rc && !em);
    CHECK(resolve(AG_PRECISION_BF16, AG_BACKEND_ONEDNN, intel_bf16, &em, &rc) ==
              AG_PRECISION_BF16 &&
          !rc && !em); /* asked for: runs, and it is not emulated */
    /* auto: int8 where VNNI is native, bf16 where it is native, fp32 elsewhere; never
     * emulated. */
    CHECK(resolve(AG_PRECISION_AUTO, AG_BACKEND_ONEDNN, avx2, &em, &rc) == AG_PRECISION_FP32 &&
          !rc && !em);
    CHECK(resolve(AG_PRECISION_AUTO, AG_BACKEND_ONEDNN, skx, &em, &rc) == AG_PRECISION_INT8 &&
          !rc && !em);
    CHECK(resolve(AG_PRECISION_AUTO, AG_BACKEND_ONEDNN, zen, &em, &rc) == AG_PRECISION_INT8 &&
          !rc && !em);
    CHECK(resolve(AG_PRECISION_AUTO, AG_BACKEND_ONEDNN, spr_limited, &em, &rc) ==
              AG_PRECISION_FP32 &&
          !rc && !em);
    /* The reference backend runs fp32 only. */
    CHECK(resolve(AG_PRECISION_AUTO, AG_BACKEND_REFERENCE, zen, &em, &rc) == AG_PRECISION_FP32);
    /* The reference backend runs no int8; VNNI the CPU has but oneDNN is held from: no int8. */
    CHECK(resolve(AG_PRECISION_AUTO, AG_BACKEND_REFERENCE, skx, &em, &rc) == AG_PRECISION_FP32);
    ag_cpu_info vnni_held = described(V4 | AG_CPU_AVX512_VNNI, V4);
    CHECK(resolve(AG_PRECISION_AUTO, AG_BACKEND_ONEDNN, vnni_held, &em, &rc) == AG_PRECISION_FP32);
    return 0;
}

static int test_explicit_precision(void) {
    int em, rc;
    ag_cpu_info skx = described(V4 | AG_CPU_AVX512_VNNI, V4 | AG_CPU_AVX512_VNNI);
    ag_cpu_info zen = described(V4 | AG_CPU_AVX512_BF16, V4 | AG_CPU_AVX512_BF16);
    ag_cpu_info avx2 = described(V3, V3);
    ag_precision_choice choice;
    /* bf16 without AVX512-BF16: runs, emulated, with the warning. */
    CHECK(ag_precision_resolve(AG_PRECISION_BF16, AG_BACKEND_ONEDNN, &skx, &choice) == 0);
    CHECK(choice.precision == AG_PRECISION_BF16 && choice.emulated);
    CHECK(strstr(choice.note, "emulated") && !strchr(choice.note, '\n'));
    CHECK(resolve(AG_PRECISION_BF16, AG_BACKEND_ONEDNN, zen, &em, &rc) == AG_PRECISION_BF16 &&
          !em && !rc);
    /* Below AVX-512 oneDNN 2.6 has no bf16 convolution at all: refused with the reason. */
    CHECK(ag_precision_resolve(AG_PRECISION_BF16, AG_BACKEND_ONEDNN, &avx2, &choice) ==
          AG_E_UNSUPPORTED);
    CHECK(strstr(choice.note, "AVX-512"));
    /* The CPU has bf16, oneDNN is held at AVX2. */
    ag_cpu_info held = described(zen.flags, V3);
    CHECK(ag_precision_resolve(AG_PRECISION_BF16, AG_BACKEND_ONEDNN, &held, &choice) ==
          AG_E_UNSUPPORTED);
    CHECK(strstr(choice.note, "ONEDNN_MAX_CPU_ISA"));
    ag_cpu_info held512 = described(zen.flags, V4);
    CHECK(resolve(AG_PRECISION_BF16, AG_BACKEND_ONEDNN, held512, &em, &rc) == AG_PRECISION_BF16 &&
          em && !rc);
    /* fp32 is native everywhere; int8 runs everywhere, emulated (slower) without VNNI. */
    CHECK(resolve(AG_PRECISION_FP32, AG_BACKEND_ONEDNN, avx2, &em, &rc) == AG_PRECISION_FP32 &&
          !em && !rc);
    CHECK(resolve(AG_PRECISION_INT8, AG_BACKEND_ONEDNN, avx2, &em, &rc) == AG_PRECISION_INT8 &&
          !rc);
    CHECK(ag_precision_resolve((ag_precision)42, AG_BACKEND_ONEDNN, &avx2, &choice) == AG_E_ARG);
    return 0;
}

static int test_precision_names(void) {
    for (int p = AG_PRECISION_FP32; p <= AG_PRECISION_AUTO; p++)
        CHECK(ag_precision_parse(ag_precision_name((ag_precision)p)) == p);
    CHECK(ag_precision_parse("fp16") < 0 && ag_precision_parse("") < 0);
    return 0;
}

/* On this machine: auto is what the flags imply, and an engine runs it. */
static int test_auto_on_this_cpu(void) {
    const ag_cpu_info *info = ag_cpu_get_info();
    ag_precision_choice choice;
    CHECK(ag_precision_resolve(AG_PRECISION_AUTO, AG_BACKEND_ONEDNN, NULL, &choice) == 0);
    int bf16 = (info->flags & info->onednn_flags & AG_CPU_AMX_BF16) ||
               ((info->flags & info->onednn_flags & AG_CPU_AVX512_BF16) &&
                !strcmp(info->vendor, "AuthenticAMD"));
    int vnni = (info->flags & info->onednn_flags &
                (AG_CPU_AVX512_VNNI | AG_CPU_AVX_VNNI | AG_CPU_AMX_INT8)) != 0;
    CHECK(choice.precision == (vnni   ? AG_PRECISION_INT8
                               : bf16 ? AG_PRECISION_BF16
                                      : AG_PRECISION_FP32) &&
          !choice.emulated);
    printf("  %s\n", choice.note);
    ag_model *model = NULL;
    ag_engine *engine = NULL;
    ag_error err = {0};
    CHECK_OK(ag_model_load(AG_SOURCE_DIR "/models/hayao.safetensors", &model, &err), &err);
    ag_engine_options o = {.precision = choice.precision, .threads = 2};
    int rc = ag_engine_create(model, &o, &engine, &err);
    if (rc == 0)
        rc = ag_engine_prepare(engine, 32, 24, &err);
    ag_engine_destroy(engine);
    ag_model_destroy(model);
    CHECK_OK(rc, &err);
    return 0;
}

/* ---- the front ends ---------------------------------------------------------------------- */

/* Run `env ENV $BUILD/animegan ARGS 2>&1` into out; returns the exit status (-1: not run). */
static int run_cli(const char *env, const char *args, char *out, size_t out_size) {
    const char *build = getenv("BUILD");
    char cmd[1024];
    if (!build || !build[0])
        build = "build";
    snprintf(cmd, sizeof cmd, "env %s %s%s/animegan %s 2>&1", env,
             build[0] == '/' ? "" : AG_SOURCE_DIR "/", build, args);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, out_size - 1, p);
    out[n] = '\0';
    int status = pclose(p);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* --version, bench JSON and the bf16 warning or refusal as oneDNN's ISA is lowered. */
static int test_cli_reports_cpu_and_precision(void) {
    static char out[8192];
    const ag_cpu_info *info = ag_cpu_get_info();
    CHECK(run_cli("", "--version", out, sizeof out) == 0);
    CHECK_MSG(strstr(out, info->model) && strstr(out, "isa: ") && strstr(out, "precision auto: "),
              "%s", out);
    CHECK(run_cli("", "bench --size 16 --runs 1 --warmup 0 --threads 2 --precision auto", out,
                  sizeof out) == 0);
    CHECK_MSG(strstr(out, "\"requested\": \"auto\"") && strstr(out, "\"emulated\": false") &&
                  strstr(out, "\"cpu\": ") && strstr(out, "\"isa\": ") &&
                  strstr(out, "\"onednn_isa\": "),
              "%s", out);
    CHECK(run_cli("ANIMEGAN_ISA=avx2", "bench --size 16 --runs 1 --warmup 0 --threads 2", out,
                  sizeof out) == 0);
    if (info->best_isa >= AG_ISA_AVX2)
        CHECK_MSG(strstr(out, "\"isa\": \"avx2\""), "%s", out);
    if (!(info->flags & AG_CPU_AVX512F))
        return 0; /* the rest needs oneDNN's AVX-512 to lower */
    /* AVX-512 without bf16: explicit bf16 runs, emulated, with one warning line. */
    CHECK(run_cli("ONEDNN_MAX_CPU_ISA=AVX512_CORE",
                  "bench --size 16 --runs 1 --warmup 0 --threads 2 --precision bf16", out,
                  sizeof out) == 0);
    CHECK_MSG(strstr(out, "\"emulated\": true") && strstr(out, "warning: bf16 is emulated"), "%s",
              out);
    CHECK(run_cli("ONEDNN_MAX_CPU_ISA=AVX512_CORE",
                  "bench --size 16 --runs 1 --warmup 0 --threads 2 --precision auto", out,
                  sizeof out) == 0);
    CHECK_MSG(strstr(out, "\"precision\": \"fp32\"") && !strstr(out, "warning"), "%s", out);
    /* AVX2 only: bf16 refused with the reason, exit 1. */
    CHECK(run_cli("ONEDNN_MAX_CPU_ISA=AVX2",
                  "bench --size 16 --runs 1 --warmup 0 --threads 2 --precision bf16", out,
                  sizeof out) == 1);
    CHECK_MSG(strstr(out, "bf16 needs AVX-512"), "%s", out);
    return 0;
}

TEST_MAIN(TEST(test_flags_match_proc_cpuinfo), TEST(test_best_isa), TEST(test_isa_override),
          TEST(test_auto_picks_native_only), TEST(test_explicit_precision),
          TEST(test_precision_names), TEST(test_auto_on_this_cpu),
          TEST(test_cli_reports_cpu_and_precision))
