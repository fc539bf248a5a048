/*
 * models.c - `animegan models`: the bundled models found on the search path, each loaded to
 * show what it is and under which terms its weights may be used; `--inspect FILE` says what
 * any model file is (a style, an upscaler, a face restorer...) or why it is refused.
 */
#include "commands.h"

#include <getopt.h>

#include <string.h>

#define MAX_BUNDLED 64

static void print_help(void) {
    fputs("Usage: animegan models [--inspect FILE]\n"
          "\n"
          "List the bundled models: name, kind, style, network, parameter count, the image\n"
          "sizes it takes, file and the licence terms of the weights. Models are looked up\n"
          "in $ANIMEGAN_MODEL_PATH (colon-separated), then <executable's directory>/../models,\n"
          "then the install data directory. Any model file can also be passed to\n"
          "'animegan convert --model PATH'.\n"
          "\n"
          "Options:\n"
          "  --inspect FILE  what FILE is (network, scale, features, blocks, parameters, the\n"
          "                  precisions that run on this CPU) or why it is refused\n"
          "  -h, --help      show this help\n",
          stdout);
}

static void print_model(const ag_model_info *info) {
    printf("%s\n", info->name);
    printf("  kind:       %s\n", info->kind);
    printf("  style:      %s\n", info->style[0] ? info->style : "(unknown)");
    printf("  network:    %s, %zu parameters (%.1f MB fp32)\n", info->architecture,
           info->param_count, (double)info->weight_bytes / 1048576.0);
    if (info->role == AG_MODEL_UPSCALER)
        printf("  scale:      x%d (animegan upscale --model %s, or --scale N of its family)\n",
               info->scale, info->name);
    else if (info->min_side > AG_MIN_SIDE)
        printf("  sizes:      any side >= %d (the network needs %d: smaller sides are "
               "reflect-padded; the original needs multiples of %d)\n",
               AG_MIN_SIDE, info->min_side, info->side_multiple);
    else
        printf("  sizes:      any side >= %d (the original needs multiples of %d)\n", AG_MIN_SIDE,
               info->side_multiple);
    if (!strcmp(info->architecture, "animeganv2"))
        printf("  upsample:   %s, eps %g\n", ag_resize_mode_name(info->resize),
               (double)info->norm_eps);
    printf("  file:       %s (%s, %s)\n", info->path, info->format, info->architecture);
    printf("  licence:    %s\n", info->license[0] ? info->license : "(unknown: see the file)");
}

/* Which precisions an engine accepts for the model on this CPU (fp32 always, bf16 and int8
 * where the graph and the CPU allow), and what auto picks. */
static void print_precisions(const ag_model *model) {
    static const ag_precision precisions[] = {AG_PRECISION_FP32, AG_PRECISION_BF16,
                                              AG_PRECISION_INT8};
    printf("  precisions:");
    for (int i = 0; i < 3; i++) {
        ag_engine_options o = {
            .backend = AG_BACKEND_ONEDNN, .precision = precisions[i], .threads = 1};
        ag_precision_choice choice;
        ag_engine *engine = NULL;
        ag_error err = {0};
        if (ag_precision_resolve(precisions[i], AG_BACKEND_ONEDNN, NULL, &choice) != AG_OK ||
            ag_engine_create(model, &o, &engine, &err) != AG_OK)
            continue;
        printf(" %s%s", ag_precision_name(precisions[i]), choice.emulated ? " (emulated)" : "");
        ag_engine_destroy(engine);
    }
    ag_precision_choice choice;
    if (ag_precision_resolve(AG_PRECISION_AUTO, AG_BACKEND_ONEDNN, NULL, &choice) == AG_OK)
        printf("; auto: %s", ag_precision_name(choice.precision));
    putchar('\n');
}

/* Any file the project reads: a style or upscaler (safetensors, PyTorch, ONNX), else a face
 * restorer (GPEN, GFPGAN checkpoints). Refused by both: each reason, one line. */
static int inspect(const char *path) {
    ag_model *model = NULL;
    ag_error err = {0}, restore_err = {0};
    if (ag_model_load(path, &model, &err) != AG_OK &&
        ag_restore_model_load(path, &model, &restore_err) != AG_OK) {
        fprintf(stderr, "animegan: %s is refused: %s", path, err.message);
        if (restore_err.code != AG_E_IO && strcmp(restore_err.message, err.message))
            fprintf(stderr, "; as a face restorer: %s", restore_err.message);
        fputc('\n', stderr);
        return AG_EXIT_FAILED;
    }
    const ag_model_info *info = ag_model_get_info(model);
    print_model(info);
    if (info->detail[0])
        printf("  inferred:   %s\n", info->detail);
    print_precisions(model);
    ag_model_destroy(model);
    return AG_EXIT_OK;
}

int ag_cli_models(int argc, char **argv) {
    static const struct option long_options[] = {{"help", no_argument, NULL, 'h'},
                                                 {"inspect", required_argument, NULL, 'i'},
                                                 {NULL, 0, NULL, 0}};
    if (ag_cli_option_table_asked(argc, argv))
        return ag_cli_print_option_table(long_options, NULL);
    if (argc > 1) {
        if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)
            return print_help(), AG_EXIT_OK;
        if (strcmp(argv[1], "--inspect") == 0) {
            if (argc != 3)
                return ag_cli_usage_error("models", "--inspect takes one FILE");
            return inspect(argv[2]);
        }
        return ag_cli_usage_error("models", "unexpected argument '%s'", argv[1]);
    }
    const char *names[MAX_BUNDLED];
    int count = ag_model_list_bundled(names, MAX_BUNDLED);
    if (count <= 0) {
        fputs("animegan: no bundled models found (set ANIMEGAN_MODEL_PATH to the directory "
              "holding them)\n",
              stderr);
        return AG_EXIT_FAILED;
    }
    if (count > MAX_BUNDLED)
        count = MAX_BUNDLED;
    int status = AG_EXIT_OK;
    for (int i = 0; i < count; i++) {
        ag_model *model = NULL;
        ag_error err = {0};
        if (ag_model_load(names[i], &model, &err)) {
            fflush(stdout); /* keep the error next to the listing it interrupts */
            ag_cli_report(&err);
            status = AG_EXIT_FAILED;
            continue;
        }
        if (i > 0)
            putchar('\n');
        print_model(ag_model_get_info(model));
        ag_model_destroy(model);
    }
    return status;
}
