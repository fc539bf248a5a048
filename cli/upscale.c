/*
 * upscale.c - `animegan upscale INPUT... -o OUTPUT` and the upscaling step of
 * `animegan convert --upscale N`: the options, and one upscaler (model + engine) per run.
 * The batch itself (inputs, outputs, decode, save, progress) is cli/convert.c's.
 */
#include "commands.h"

#include <string.h>

void ag_cli_upscale_help(const struct option *table, const char *shorts) {
    fputs("Usage: animegan upscale INPUT... -o OUTPUT [options]\n"
          "\n"
          "Enlarge images with a super-resolution network, tile by tile (any size; memory is\n"
          "bounded by the tile). INPUT and OUTPUT as for 'animegan convert': a file or a\n"
          "directory of them; alpha is kept (enlarged separately).\n"
          "\n"
          "Options:\n"
          "  -o, --output PATH      output file or directory (required)\n"
          "  -t, --threads N        worker threads, 0 = every core (default: 0)\n"
          "      --precision P      fp32, bf16, int8 or auto (default: auto)\n"
          "      --backend B        onednn or reference (default: onednn)\n"
          "      --max-side N       downscale inputs whose long side exceeds N first,\n"
          "                         0 = never (default: 0)\n"
          "      --quality N        JPEG and WebP quality, 1-100 (default: 90)\n"
          "      --format F         png, jpg or webp, for files written into an output\n"
          "                         directory (default: png)\n"
          "  -q, --quiet            no progress bar or summary\n"
          "  -h, --help             show this help\n",
          stdout);
    ag_cli_print_step_help(AG_CMD_UPSCALE, table, shorts, 25);
    fputs("\n"
          "Video and animations (one input whose output is .mp4, .mov, .mkv, .webm, .gif or\n"
          "animated .webp) are upscaled frame by frame, streamed, sound kept; --crf, --preset,\n"
          "--start, --duration and --max-frames as for 'animegan convert'.\n"
          "\n"
          "'animegan convert --upscale N [--upscale-model M]' upscales the anime output,\n"
          "photos, video and animations alike.\n"
          "Exit status: 0 all upscaled, 1 an input or the model failed, 2 bad command line.\n",
          stdout);
}

void ag_cli_upscale_args_init(ag_cli_upscale_args *u) {
    memset(u, 0, sizeof *u);
    u->tile_pad = -1;
    u->max_mb = (int)(AG_UPSCALE_DEFAULT_MAX_BYTES >> 20);
}

int ag_cli_upscale_option(const char *command, int opt, const char *arg, int upscale_only,
                          ag_cli_upscale_args *u) {
    int wrong = 0;
    switch (opt) {
    case AG_CLI_OPT_UPSCALE:
    case AG_CLI_OPT_SCALE:
        wrong = upscale_only != (opt == AG_CLI_OPT_SCALE);
        if (!wrong && ag_cli_parse_step_int(command, opt == AG_CLI_OPT_SCALE ? "scale" : "upscale",
                                            arg, &u->scale))
            return -1;
        break;
    case AG_CLI_OPT_UPSCALE_MODEL:
        if ((wrong = upscale_only) == 0) {
            if (!arg[0])
                return ag_cli_usage_error(command, "--upscale-model: empty name"), -1;
            u->model = arg;
        }
        break;
    case AG_CLI_OPT_TILE:
        if (ag_cli_parse_step_int(command, "tile", arg, &u->tile))
            return -1;
        break;
    case AG_CLI_OPT_TILE_PAD:
        if (ag_cli_parse_step_int(command, "tile-pad", arg, &u->tile_pad))
            return -1;
        break;
    case AG_CLI_OPT_MAX_MB:
        if (ag_cli_parse_step_int(command, "max-mb", arg, &u->max_mb))
            return -1;
        break;
    default: return 0;
    }
    if (wrong)
        return ag_cli_usage_error(command, "%s",
                                  upscale_only ? "use --scale and --model with upscale"
                                               : "--scale is upscale's; convert takes "
                                                 "--upscale N"),
               -1;
    u->given = 1;
    return 1;
}

int ag_cli_upscaler_open(ag_cli_upscaler *up, const ag_cli_upscale_args *args,
                         const ag_engine_options *engine, ag_error *err) {
    memset(up, 0, sizeof *up);
    ag_upscale_options_init(&up->options);
    up->options.scale = args->scale;
    up->options.tile_px = args->tile;
    up->options.tile_pad_px = args->tile_pad;
    up->options.max_bytes = (size_t)args->max_mb << 20;
    const char *name = args->model ? args->model : AG_CLI_UPSCALE_DEFAULT_MODEL;
    int rc = ag_upscaler_load(name, args->scale, &up->model, err);
    if (rc == AG_OK)
        rc = ag_engine_create(up->model, engine, &up->engine, err);
    if (rc)
        ag_cli_upscaler_close(up);
    return rc;
}

void ag_cli_upscaler_close(ag_cli_upscaler *up) {
    ag_engine_destroy(up->engine);
    ag_model_destroy(up->model);
    up->engine = NULL, up->model = NULL;
}

int ag_cli_upscale(int argc, char **argv) {
    return ag_cli_convert_command(argc, argv, AG_CLI_UPSCALE);
}
