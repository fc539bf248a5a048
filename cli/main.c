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
          "Turn photos into anime-style pictures with AnimeGANv2 on the CPU.\n"
          "\n"
          "Commands:\n"
          "  convert INPUT... -o OUTPUT   stylise images (see 'animegan convert --help')\n"
          "  models                       list the bundled models and their licences\n"
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
          "[hayao], -t/--threads N [0 = every core], --precision fp32|bf16|int8 [fp32],\n"
          "--backend onednn|reference [onednn], --upsample asymmetric|align-corners|half-pixel\n"
          "[the model's], --max-side N [1024], --portrait, --size N [512], --side-by-side,\n"
          "--quality N [90], --format png|jpg|webp [png], -q/--quiet.\n"
          "\n"
          "Environment:\n"
          "  ANIMEGAN_MODEL_PATH   colon-separated directories searched for bundled models\n"
          "\n"
          "Example:\n"
          "  animegan convert photo.jpg -o anime.png\n"
          "  animegan convert holiday/ -o holiday-anime/ --format jpg --quality 85\n",
          stdout);
}

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
} command;

static const command commands[] = {
    {"convert", ag_cli_convert},
    {"models", ag_cli_models},
    {"bench", ag_cli_bench},
    {"serve", ag_server_main},
};

/* The options and words that need no image library: answered before starting it. */
static int run_builtin(const char *word) {
    if (!strcmp(word, "-h") || !strcmp(word, "--help") || !strcmp(word, "help"))
        return print_help(), AG_EXIT_OK;
    if (!strcmp(word, "-V") || !strcmp(word, "--version"))
        return printf("animegan %s\n", AG_VERSION), AG_EXIT_OK;
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

int main(int argc, char **argv) {
    if (argc < 2)
        return ag_cli_usage_error(NULL, "missing command (convert, models, bench or serve)");
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
