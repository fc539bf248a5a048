/*
 * options.c - the options of the pipeline's steps, one row each, as every front end spells
 * them (the CLI's long option, the API's query parameter, Python's keyword), with the
 * range the CLI parses against. A new option of a step is a row here; test_cli fails until
 * the front ends that the row names take it.
 */
#include "animegan.h"

#include <string.h>

#define ROW(step_, name_, commands_, query_, keyword_, type_, min_, max_, def_, help_)             \
    {                                                                                              \
        .step = AG_STEP_##step_, .name = name_, .commands = commands_, .query = query_,            \
        .keyword = keyword_, .type = AG_OPTION_##type_, .min = min_, .max = max_, .def = def_,     \
        .help = help_                                                                              \
    }

#define C AG_CMD_CONVERT
#define R AG_CMD_RESTORE
#define U AG_CMD_UPSCALE

// clang-format off
static const ag_step_option options[] = {
    ROW(RESTORE, "restore-faces", C, "restore", NULL, TEXT, 0, 0, 0,
        "restore the faces with a GPEN or GFPGAN checkpoint first (API: the K-th --restore-model)"),
    ROW(RESTORE, "fidelity", C | R, NULL, "fidelity", FLOAT, 0, 1, 1,
        "the restored face's weight against the original"),
    ROW(RESTORE, "codeformer-fidelity", C | R, "codeformer_fidelity", "codeformer_fidelity",
        FLOAT, 0, 1, 0.5, "CodeFormer's w: 0 = quality, 1 = the input's identity"),
    ROW(RESTORE, "max-faces", C | R, NULL, "max_faces", INT, 1, AG_FACE_MAX, 8,
        "faces used per photo, largest first"),
    ROW(RESTORE, "aligned", C | R, NULL, "aligned", FLAG, 0, 1, 0,
        "the inputs are aligned face crops"),
    ROW(STYLIZE, "model", C | R | U, "model", "weights", TEXT, 0, 0, 0,
        "the style (convert), restorer (restore) or upscaler (upscale)"),
    ROW(STYLIZE, "side-by-side", C, "side_by_side", "side_by_side", FLAG, 0, 1, 0,
        "the input and the result next to each other"),
    ROW(STYLIZE, "portrait", C, "portrait", "portrait", TEXT, 0, 0, 0,
        "face2paint: the aligned crop of the largest face (face), or the centre square"),
    ROW(STYLIZE, "paste-faces", C, "paste_faces", NULL, FLAG, 0, 1, 0,
        "the whole photo, each face also stylised as an aligned crop and pasted back"),
    ROW(STYLIZE, "face-model", C, "face_model", NULL, TEXT, 0, 0, 0,
        "the style of the pasted faces"),
    ROW(STYLIZE, "size", C, NULL, "size", INT, AG_MIN_SIDE, 8192, 512,
        "portrait / face crop size in pixels"),
    ROW(UPSCALE, "upscale", C | R, "upscale", NULL, INT, 1, AG_UPSCALE_MAX_SCALE, 0,
        "upscale the result N times, tiled"),
    ROW(UPSCALE, "scale", U, NULL, "scale", INT, 1, AG_UPSCALE_MAX_SCALE, 0,
        "upscale's factor (default: the model's)"),
    ROW(UPSCALE, "upscale-model", C | R, NULL, NULL, TEXT, 0, 0, 0,
        "the upscaler of --upscale (API: the server's --upscale-model)"),
    ROW(UPSCALE, "tile", C | R | U, NULL, "tile", INT, 16, 8192, 0,
        "tile side in input pixels (default: the largest within --max-mb)"),
    ROW(UPSCALE, "tile-pad", C | R | U, NULL, NULL, INT, 0, 256, -1,
        "pixels of context around each tile (default: the network's reach)"),
    ROW(UPSCALE, "max-mb", C | R | U, NULL, "max_mb", INT, 16, 1 << 20,
        AG_UPSCALE_DEFAULT_MAX_BYTES >> 20,
        "memory of one tile window in MiB"),
};
// clang-format on

const ag_step_option *ag_step_options(int *count) {
    *count = (int)(sizeof options / sizeof options[0]);
    return options;
}

const ag_step_option *ag_step_option_find(const char *name) {
    for (size_t i = 0; name && i < sizeof options / sizeof options[0]; i++)
        if (!strcmp(options[i].name, name))
            return &options[i];
    return NULL;
}
