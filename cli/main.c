/*
 * main.c - the `animegan` executable: starts the image library, dispatches to a subcommand
 * (cli/convert.c, bench.c, models.c, or the HTTP service in server/) and shuts down. The only
 * place that decides the process's exit status.
 */
#include "commands.h"

#include <stdlib.h>
#include <string.h>

static void print_help(void) {
    fputs("Usage: animegan COMMAND [options]\n"
          "\n"
          "A photo studio on the CPU: AnimeGANv2 and v3 styles, face restoration (GPEN,\n"
          "GFPGAN), upscaling (ESRGAN), face fusion and video.\n"
          "\n"
          "Commands:\n"
          "  convert INPUT... -o OUTPUT   stylise images (see 'animegan convert --help')\n"
          "  upscale INPUT... -o OUTPUT   enlarge images (see 'animegan upscale --help')\n"
          "  models                       list the bundled models and their licences\n"
          "  faces IMAGE... [--json]      the faces found (see 'animegan faces --help')\n"
          "  fuse --source S --target T -o OUTPUT\n"
          "                               fuse a face into a photo (see 'animegan fuse --help')\n"
          "  restore INPUT... -o OUTPUT --model FILE\n"
          "                               restore faces with GPEN or GFPGAN\n"
          "                               (see 'animegan restore --help')\n"
          "  bench                        time the generator, print JSON "
          "(see 'animegan bench --help')\n"
          "  serve                        run the HTTP service (see 'animegan serve --help')\n"
          "  help                         show this help\n"
          "\n"
          "Options:\n"
          "  -h, --help      show this help\n"
          "  -V, --version   print the version\n"
          "\n"
          "convert options (defaults in brackets): -o/--output PATH, -m/--model NAME|PATH\n"
          "[hayao], -t/--threads N [0 = every core], --precision fp32|bf16|int8|auto [auto],\n"
          "--backend onednn|reference [onednn], --upsample asymmetric|align-corners|half-pixel\n"
          "[the model's], --max-side N [1024], --portrait, --size N [512], --side-by-side,\n"
          "--quality N [90], --format png|jpg|webp [png], -q/--quiet.\n"
          "\n"
          "Environment:\n"
          "  ANIMEGAN_MODEL_PATH   colon-separated directories searched for bundled models\n"
          "  ANIMEGAN_ISA          avx2 or generic: run our passes' lower variant (with\n"
          "                        ONEDNN_MAX_CPU_ISA=AVX2 for oneDNN's, to time an AVX2 server)\n"
          "\n"
          "Example:\n"
          "  animegan convert photo.jpg -o anime.png\n"
          "  animegan convert holiday/ -o holiday-anime/ --format jpg --quality 85\n",
          stdout);
}

/* The version, and the CPU with what this process runs on it. */
static void print_version(void) {
    const ag_cpu_info *cpu = ag_cpu_get_info();
    ag_precision_choice autop;
    ag_precision_resolve(AG_PRECISION_AUTO, AG_BACKEND_ONEDNN, cpu, &autop);
    printf("animegan %s\n", AG_VERSION);
    printf("cpu: %s (%s, %d cpus)\n", cpu->model, cpu->vendor[0] ? cpu->vendor : "?",
           ag_cpu_count());
    printf("cpu flags: %s\n", cpu->flags_text[0] ? cpu->flags_text : "none of interest");
    printf("isa: %s (best %s), onednn %s\n", ag_isa_name(cpu->isa), ag_isa_name(cpu->best_isa),
           cpu->onednn_isa);
    printf("precision auto: %s\n", ag_precision_name(autop.precision));
    if (cpu->isa_note[0])
        fprintf(stderr, "animegan: %s\n", cpu->isa_note);
}

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
} command;

static const command commands[] = {
    {"convert", ag_cli_convert}, {"models", ag_cli_models},   {"faces", ag_cli_faces},
    {"upscale", ag_cli_upscale}, {"bench", ag_cli_bench},     {"serve", ag_server_main},
    {"fuse", ag_cli_fuse},       {"restore", ag_cli_restore},
};

/* The options and words that need no image library: answered before starting it. */
static int run_builtin(const char *word) {
    if (!strcmp(word, "-h") || !strcmp(word, "--help") || !strcmp(word, "help"))
        return print_help(), AG_EXIT_OK;
    if (!strcmp(word, "-V") || !strcmp(word, "--version"))
        return print_version(), AG_EXIT_OK;
    return -1;
}

static int dispatch(int argc, char **argv) {
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        ag_error err = {0};
        if (ag_image_startup(argv[0], &err)) {
            ag_cli_report(&err);
            return AG_EXIT_FAILED;
        }
        int status = commands[i].run(argc - 1, argv + 1);
        ag_image_shutdown();
        return status;
    }
    if (argv[1][0] == '-')
        return ag_cli_usage_error(NULL, "unknown option '%s'", argv[1]);
    return ag_cli_usage_error(NULL, "unknown command '%s'", argv[1]);
}

/* `animegan --option-table [CMD]`: the commands with a table, or CMD's (serve's is its
 * --options-markdown). */
static int option_table(int argc, char **argv) {
    if (argc == 2) {
        for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
            if (strcmp(commands[i].name, "serve") != 0)
                puts(commands[i].name);
        return AG_EXIT_OK;
    }
    if (argc != 3 || !strcmp(argv[2], "serve"))
        return ag_cli_usage_error(NULL, "--option-table takes one command other than serve");
    char *args[] = {argv[0], argv[2], "--option-table", NULL};
    return dispatch(3, args);
}

int main(int argc, char **argv) {
    if (argc < 2)
        return ag_cli_usage_error(NULL, "missing command (convert, models, bench or serve)");
    if (!strcmp(argv[1], "--option-table"))
        return option_table(argc, argv);
    int status = run_builtin(argv[1]);
    if (status < 0)
        status = dispatch(argc, argv);
    /* stdout may be a full disk or a closed pipe: a JSON report cut short must not exit 0. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fputs("animegan: cannot write to standard output\n", stderr);
        if (status == AG_EXIT_OK)
            status = AG_EXIT_FAILED;
    }
    return status;
}
