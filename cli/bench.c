/*
 * bench.c - `animegan bench`: time the generator alone (ag_engine_run_f32, no decoding or
 * encoding) on a deterministic synthetic image or a given photo, and print one JSON object
 * on stdout so scripts and bench/ can collect results.
 */
#include "commands.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct bench_args {
    ag_cli_engine_args e;
    int size, size_given;
    int runs, warmup;
    const char *input;
} bench_args;

static void print_help(void) {
    fputs("Usage: animegan bench [options]\n"
          "\n"
          "Time the generator (ag_engine_run_f32: no decoding or encoding) and print one JSON\n"
          "object on stdout: size, width, height, precision, requested, emulated, backend,\n"
          "upsample, threads, runs, warmup, ms_median, ms_min, ms_max, ms_mean, prepare_ms,\n"
          "gflop, gflops, cpu_ms_median (a run's process CPU time: on one thread, its time\n"
          "on a shared machine), peak_rss_mb, arena_mb, model, version, cpu, cpu_flags, isa,\n"
          "onednn_isa.\n"
          "\n"
          "Options:\n"
          "      --size N           side of the square synthetic image; with --input, the\n"
          "                         long side the photo is reduced to (default: 512)\n"
          "      --input FILE       time on this photo instead of the synthetic image\n"
          "      --runs N           timed runs, 1-100000 (default: 5)\n"
          "      --warmup N         untimed runs first, 0-1000 (default: 1)\n"
          "  -m, --model NAME|PATH  bundled model name or model file (default: hayao)\n"
          "  -t, --threads N        worker threads, 0 = every core (default: 0)\n"
          "      --precision P      fp32, bf16, int8 or auto: the fastest native on this CPU\n"
          "                         that meets its quality bar (default: auto)\n"
          "      --backend B        onednn or reference (default: onednn)\n"
          "      --upsample MODE    asymmetric, align-corners or half-pixel\n"
          "                         (default: the model's own mode)\n"
          "  -h, --help             show this help\n",
          stdout);
}

enum { OPT_SIZE = 256, OPT_RUNS, OPT_WARMUP, OPT_INPUT };

static const struct option long_options[] = {
    AG_CLI_ENGINE_LONG_OPTIONS,
    {"size", required_argument, NULL, OPT_SIZE},
    {"runs", required_argument, NULL, OPT_RUNS},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"input", required_argument, NULL, OPT_INPUT},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int parse_option(int opt, const char *arg, bench_args *a) {
    switch (opt) {
    case OPT_SIZE:
        a->size_given = 1;
        return ag_cli_parse_int("bench", "size", arg, AG_MIN_SIDE, 8192, &a->size);
    case OPT_RUNS: return ag_cli_parse_int("bench", "runs", arg, 1, 100000, &a->runs);
    case OPT_WARMUP: return ag_cli_parse_int("bench", "warmup", arg, 0, 1000, &a->warmup);
    case OPT_INPUT: a->input = arg; return 0;
    default: return -1; /* not reached */
    }
}

/* Returns -1 to go on, or the exit status (after --help or a usage error). */
static int parse_args(int argc, char **argv, bench_args *a) {
    if (ag_cli_option_table_asked(argc, argv))
        return ag_cli_print_option_table(long_options, NULL);
    opterr = 0;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, ":m:t:h", long_options, NULL)) != -1) {
        if (opt == 'h')
            return print_help(), AG_EXIT_OK;
        if (opt == '?' || opt == ':')
            return ag_cli_bad_option("bench", opt, optopt, argv[optind - 1]);
        int handled = ag_cli_engine_option("bench", opt, optarg, &a->e);
        if (handled < 0 || (!handled && parse_option(opt, optarg, a)))
            return AG_EXIT_USAGE;
    }
    if (optind < argc)
        return ag_cli_usage_error("bench", "unexpected argument '%s'", argv[optind]);
    return -1;
}

/* ---- the input tensor -------------------------------------------------------------------- */

/*
 * Smooth gradients plus fixed-seed noise: photo-like enough that no op sees a degenerate
 * (constant) input, and identical on every run so timings compare.
 */
static void fill_synthetic(float *hwc, int width, int height) {
    uint32_t state = 0x9e3779b9u;
    for (int y = 0; y < height; y++) {
        for (int x = 0; x < width; x++) {
            for (int c = 0; c < 3; c++) {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                float noise = (float)(state >> 8) / 16777216.0f - 0.5f;
                float wave = sinf(0.05f * (float)x + 2.0f * (float)c) * cosf(0.03f * (float)y);
                float v = 0.7f * wave + 0.3f * noise;
                hwc[((size_t)y * width + x) * 3 + c] = v;
            }
        }
    }
}

/* Decode `path` and map its RGB to [-1, 1]; *hwc is ag_malloc'ed. */
static int load_photo(const bench_args *a, float **hwc, int *width, int *height, ag_error *err) {
    ag_decode_options options = {.max_side = a->size_given ? a->size : 1024};
    ag_image image = {0};
    int rc = ag_image_decode_file(a->input, &options, &image, err);
    if (rc)
        return rc;
    size_t pixels = (size_t)image.width * (size_t)image.height;
    *hwc = ag_malloc(pixels * 3 * sizeof **hwc);
    if (!*hwc) {
        ag_image_fini(&image);
        err->code = AG_E_NOMEM;
        snprintf(err->message, sizeof err->message, "out of memory for %s", a->input);
        return AG_E_NOMEM;
    }
    for (size_t i = 0; i < pixels; i++)
        for (int c = 0; c < 3; c++)
            (*hwc)[i * 3 + c] = (float)image.pixels[i * (size_t)image.bands + c] / 127.5f - 1.0f;
    *width = image.width;
    *height = image.height;
    ag_image_fini(&image);
    return 0;
}

static int make_input(const bench_args *a, float **hwc, int *width, int *height, ag_error *err) {
    if (a->input)
        return load_photo(a, hwc, width, height, err);
    *width = *height = a->size;
    *hwc = ag_malloc((size_t)a->size * (size_t)a->size * 3 * sizeof **hwc);
    if (!*hwc) {
        err->code = AG_E_NOMEM;
        snprintf(err->message, sizeof err->message, "out of memory for a %dx%d image", a->size,
                 a->size);
        return AG_E_NOMEM;
    }
    fill_synthetic(*hwc, *width, *height);
    return 0;
}

/* ---- timing and the report --------------------------------------------------------------- */

static double now_ms(void) {
    return (double)ag_now_us() * 1e-3;
}

/* The process's CPU time: on one thread, a run's time without what the scheduler gave to
 * other processes (a shared machine's load); on more, it adds their spin-waits. */
static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct timings {
    double prepare_ms, median_ms, min_ms, max_ms, mean_ms;
    double cpu_median_ms; /* of the runs' process CPU times */
} timings;

static double median_of(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, compare_doubles);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Sort `ms` and `cpu` in place and summarise them. */
static timings summarise(double *ms, double *cpu, int runs, double prepare_ms) {
    double sum = 0, median = median_of(ms, runs);
    for (int i = 0; i < runs; i++)
        sum += ms[i];
    timings t = {prepare_ms, median, ms[0], ms[runs - 1], sum / runs, median_of(cpu, runs)};
    return t;
}

/* Print `text` as a JSON string (model names can be file paths with any bytes). */
static void print_json_string(const char *text) {
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

/* What ran it: the CPU, our passes' variant and oneDNN's ISA (ANIMEGAN_ISA and
 * ONEDNN_MAX_CPU_ISA lower the last two). */
static void print_cpu(void) {
    const ag_cpu_info *cpu = ag_cpu_get_info();
    printf(", \"cpu\": ");
    print_json_string(cpu->model);
    printf(", \"cpu_flags\": \"%s\", \"isa\": \"%s\", \"onednn_isa\": \"%s\"", cpu->flags_text,
           ag_isa_name(cpu->isa), cpu->onednn_isa);
}

static void print_report(const bench_args *a, const ag_model *model, const ag_engine *engine,
                         const ag_engine_options *options, const ag_precision_choice *precision,
                         int width, int height, timings t) {
    const ag_model_info *info = ag_model_get_info(model);
    ag_resize_mode resize = options->resize ? options->resize : info->resize;
    double gflop = ag_model_flop(model, width, height) / 1e9;
    printf("{\"model\": ");
    print_json_string(info->name);
    printf(", \"input\": ");
    if (a->input)
        print_json_string(a->input);
    else
        printf("\"synthetic\"");
    printf(", \"size\": %d, \"width\": %d, \"height\": %d", width > height ? width : height, width,
           height);
    printf(", \"precision\": \"%s\", \"backend\": \"%s\", \"upsample\": \"%s\"",
           ag_cli_precision_name(options->precision), ag_cli_backend_name(options->backend),
           ag_resize_mode_name(resize));
    printf(", \"requested\": \"%s\", \"emulated\": %s", ag_precision_name(a->e.engine.precision),
           precision->emulated ? "true" : "false");
    printf(", \"threads\": %d, \"runs\": %d, \"warmup\": %d", options->threads, a->runs, a->warmup);
    printf(", \"prepare_ms\": %.3f, \"ms_median\": %.3f, \"ms_min\": %.3f, \"ms_max\": %.3f, "
           "\"ms_mean\": %.3f",
           t.prepare_ms, t.median_ms, t.min_ms, t.max_ms, t.mean_ms);
    printf(", \"gflop\": %.4f, \"gflops\": %.3f", gflop,
           t.median_ms > 0 ? gflop / (t.median_ms / 1e3) : 0.0);
    printf(", \"cpu_ms_median\": %.3f", t.cpu_median_ms);
    printf(", \"peak_rss_mb\": %.1f, \"arena_mb\": %.1f, \"version\": \"%s\"",
           (double)ag_process_peak_rss_bytes() / 1048576.0,
           (double)ag_engine_arena_bytes(engine) / 1048576.0, AG_VERSION);
    print_cpu();
    printf("}\n");
}

/* One pass: the generator, or an upscaler's whole image as one tile (ag_upscale; its 8-bit
 * conversions are under 1% of the network). */
static int run_once(ag_engine *engine, const ag_image *image, const float *in, float *out,
                    int width, int height, ag_error *err) {
    if (!image)
        return ag_engine_run_f32(engine, in, width, height, out, err);
    ag_upscale_options u;
    ag_upscale_options_init(&u);
    u.tile_px = width > height ? width : height;
    ag_image big = {0};
    int rc = ag_upscale(engine, image, &u, &big, err);
    ag_image_fini(&big);
    return rc;
}

/* Warm up, then time each run separately (wall and CPU); ms has 2 * a->runs slots. */
static int time_runs(ag_engine *engine, const bench_args *a, const ag_image *image, const float *in,
                     float *out, int width, int height, double *ms, ag_error *err) {
    for (int i = 0; i < a->warmup; i++)
        if (run_once(engine, image, in, out, width, height, err))
            return -1;
    for (int i = 0; i < a->runs; i++) {
        double start = now_ms(), cpu = cpu_ms();
        if (run_once(engine, image, in, out, width, height, err))
            return -1;
        ms[i] = now_ms() - start;
        ms[a->runs + i] = cpu_ms() - cpu;
    }
    return 0;
}

static int run_bench(const bench_args *a, ag_model *model, ag_engine_options *options,
                     const ag_precision_choice *precision, ag_error *err) {
    ag_engine *engine = NULL;
    float *in = NULL, *out = NULL;
    double *ms = ag_malloc(2 * (size_t)a->runs * sizeof *ms);
    int width = 0, height = 0, rc = AG_E_NOMEM;
    if (!ms) {
        snprintf(err->message, sizeof err->message, "out of memory");
        goto done;
    }
    if ((rc = make_input(a, &in, &width, &height, err)) ||
        (rc = ag_engine_create(model, options, &engine, err)))
        goto done;
    if (!(out = ag_malloc((size_t)width * (size_t)height * 3 * sizeof *out))) {
        rc = AG_E_NOMEM;
        snprintf(err->message, sizeof err->message, "out of memory");
        goto done;
    }
    /* Planning the arena happens once per size; report it apart from the steady state. */
    double start = now_ms();
    if ((rc = ag_engine_prepare(engine, width, height, err)))
        goto done;
    double prepare_ms = now_ms() - start;
    /* An upscaler's input as the 8-bit image ag_upscale takes. */
    int upscaler = ag_model_get_info(model)->role == AG_MODEL_UPSCALER;
    ag_image image = {width, height, 3, upscaler ? ag_malloc((size_t)width * height * 3) : NULL};
    if (upscaler && !image.pixels) {
        rc = AG_E_NOMEM;
        snprintf(err->message, sizeof err->message, "out of memory");
        goto done;
    }
    for (size_t i = 0; upscaler && i < (size_t)width * height * 3; i++)
        image.pixels[i] = (uint8_t)((in[i] + 1.0f) * 127.5f + 0.5f);
    rc = time_runs(engine, a, upscaler ? &image : NULL, in, out, width, height, ms, err);
    ag_free(image.pixels);
    if (rc)
        goto done;
    print_report(a, model, engine, options, precision, width, height,
                 summarise(ms, ms + a->runs, a->runs, prepare_ms));
done:
    ag_free(out);
    ag_engine_destroy(engine);
    ag_free(in);
    ag_free(ms);
    return rc;
}

/*
 * A generator, an upscaler, or a face restorer (a GPEN or GFPGAN checkpoint, which
 * ag_model_load does not take): the restorer runs at its one size, in the precision
 * ag_restore_precision_resolve gives for the one asked, on the aligned face a synthetic
 * image stands for.
 */
static int load_model(bench_args *a, ag_engine_options *options, ag_precision_choice *precision,
                      ag_model **model, ag_error *err) {
    if (ag_model_load(a->e.model, model, err) == AG_OK)
        return AG_OK;
    ag_error restore_err = {0};
    if (ag_restore_model_load(a->e.model, model, &restore_err) != AG_OK)
        return -1; /* the generator loader's message: the usual case */
    const ag_model_info *info = ag_model_get_info(*model);
    if (a->size != info->min_side && a->size != 512)
        fprintf(stderr, "animegan: bench: a %s restorer runs at %d px only; --size ignored\n",
                info->architecture, info->min_side);
    a->size = info->min_side;
    if (ag_restore_precision_resolve(a->e.engine.precision, NULL, precision) != AG_OK) {
        err->code = AG_E_UNSUPPORTED;
        snprintf(err->message, sizeof err->message, "%s", precision->note);
        return -1;
    }
    options->precision = precision->precision;
    return AG_OK;
}

int ag_cli_bench(int argc, char **argv) {
    bench_args a = {.size = 512, .runs = 5, .warmup = 1};
    ag_cli_engine_args_init(&a.e);
    int status = parse_args(argc, argv, &a);
    if (status >= 0)
        return status;

    ag_engine_options options = a.e.engine;
    if (options.threads <= 0)
        options.threads = ag_cpu_count();
    ag_precision_choice precision;
    if (ag_cli_resolve_precision(&options, &precision))
        return AG_EXIT_FAILED;
    ag_model *model = NULL;
    ag_error err = {0};
    status = AG_EXIT_OK;
    if (load_model(&a, &options, &precision, &model, &err) ||
        run_bench(&a, model, &options, &precision, &err)) {
        ag_cli_report(&err);
        status = AG_EXIT_FAILED;
    }
    ag_model_destroy(model);
    return status;
}
