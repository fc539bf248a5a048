/*
 * restore.c - `animegan restore INPUT... -o OUTPUT --model FILE`: face restoration with the
 * user's GPEN or GFPGAN checkpoint (ag_restore_faces), as a batch of convert's (files,
 * directories, progress, one line per failure), and the pieces `convert --restore-faces FILE`
 * shares: the restorer's engine and the per-photo step.
 */
#include "commands.h"

#include <stdio.h>
#include <string.h>

void ag_cli_restore_help(const struct option *table, const char *shorts) {
    fputs("Usage: animegan restore INPUT... -o OUTPUT --model FILE [options]\n"
          "\n"
          "Restore the faces of photos with a GPEN (GPEN-BFR-256.pth, GPEN-BFR-512.pth, the\n"
          "1024 and 2048 files), GFPGAN (GFPGANv1.3.pth, GFPGANv1.4.pth) or CodeFormer\n"
          "(codeformer.pth) checkpoint, read directly; the network's size and layout come\n"
          "from the file's tensors. Each face is found, cropped FFHQ-aligned at the network's\n"
          "size, restored and pasted back through a feathered face mask; the rest of the\n"
          "photo is left as it was. A photo without a face is written unchanged (said on\n"
          "stderr). INPUT and OUTPUT as for convert: a file to a file, or several files and\n"
          "directories to a directory. With --upscale N the whole photo is then upscaled\n"
          "(GPEN's demo pipeline: restored faces on an upscaled background).\n"
          "\n"
          "Options:\n"
          "  -o, --output PATH      output file or directory (required)\n"
          "  -t, --threads N        worker threads, 0 = every core (default: 0)\n"
          "      --precision P      fp32, bf16, int8 or auto: auto is bf16 where this CPU\n"
          "                         runs it natively, else fp32; int8 only when asked\n"
          "                         (default: auto)\n"
          "      --backend B        onednn or reference (default: onednn)\n"
          "      --max-side N       downscale inputs whose long side exceeds N pixels,\n"
          "                         0 = never (default: 0)\n"
          "      --quality N        JPEG and WebP quality, 1-100 (default: 90)\n"
          "      --format F         png, jpg or webp, for files written into an output\n"
          "                         directory (default: png)\n"
          "  -q, --quiet            no progress bar, summary or no-face notes\n"
          "  -h, --help             show this help\n",
          stdout);
    ag_cli_print_step_help(AG_CMD_RESTORE, table, shorts, 25);
    fputs("\n"
          "GFPGAN's noise inputs are the checkpoint's stored buffers, so the output is\n"
          "deterministic (upstream draws new noise on each call).\n"
          "'animegan convert --restore-faces FILE' restores the faces before stylising.\n"
          "Exit status: 0 all written, 1 an input or the model failed, 2 bad command line,\n"
          "130 interrupted.\n",
          stdout);
}

int ag_cli_restore_check(const char **restore_model, const char *model, const char *default_model,
                         int incompatible) {
    if (*restore_model)
        return ag_cli_usage_error("restore", "--restore-faces belongs to convert: restore takes "
                                             "the checkpoint as --model");
    if (model == default_model)
        return ag_cli_usage_error("restore",
                                  "missing --model FILE (a GPEN, GFPGAN or CodeFormer checkpoint)");
    if (incompatible)
        return ag_cli_usage_error("restore", "--portrait, --paste-faces, --side-by-side and "
                                             "--upsample belong to convert");
    *restore_model = model;
    return -1;
}

/* A bundled model's name (no path, no extension) where a checkpoint file is expected. */
static int is_bundled_name(const char *name) {
    const char *names[64];
    int count = ag_model_list_bundled(names, 64);
    for (int i = 0; !strchr(name, '/') && !strchr(name, '.') && i < count && i < 64; i++)
        if (!strcmp(names[i], name))
            return 1;
    return 0;
}

int ag_cli_restorer_open(const char *path, const ag_engine_options *options, ag_model **model,
                         ag_engine **engine, ag_error *err) {
    if (is_bundled_name(path)) {
        err->code = AG_E_ARG;
        snprintf(err->message, sizeof err->message,
                 "a restorer checkpoint (GPEN, GFPGAN, CodeFormer .pth) is expected; %s is %s",
                 path,
                 !strncmp(path, "esrgan", 6)  ? "an upscaler"
                 : !strncmp(path, "face-", 5) ? "a face finder's network"
                                              : "a style");
        return err->code;
    }
    ag_engine_options o = *options;
    ag_precision_choice precision;
    if (ag_restore_precision_resolve(options->precision, NULL, &precision) != AG_OK) {
        err->code = AG_E_UNSUPPORTED;
        snprintf(err->message, sizeof err->message, "%s", precision.note);
        return err->code;
    }
    if (precision.emulated || options->precision == AG_PRECISION_INT8)
        fprintf(stderr, "animegan: %s\n", precision.note);
    o.precision = precision.precision;
    o.resize = AG_RESIZE_DEFAULT;
    int rc = ag_restore_model_load(path, model, err);
    if (rc == AG_OK) /* one engine, one precision: the model keeps only its weights */
        rc = ag_model_prepare_precision(*model, o.precision, 1, err);
    if (rc == AG_OK)
        rc = ag_engine_create(*model, &o, engine, err);
    if (rc != AG_OK) {
        ag_model_destroy(*model);
        *model = NULL;
    }
    return rc;
}

void ag_cli_restore_report(const ag_restore_options *options, const ag_restore_result *result,
                           const char *label) {
    if (!options->aligned && result->found == 0)
        fprintf(stderr, "animegan: %s: no face found; written unchanged\n", label);
    else if (result->found > result->restored)
        fprintf(stderr, "animegan: %s: %d faces, the largest %d restored (--max-faces)\n", label,
                result->found, result->restored);
}

int ag_cli_restore(int argc, char **argv) {
    return ag_cli_convert_command(argc, argv, AG_CLI_RESTORE);
}
