/*
 * options.c - the options of the pipeline's steps, one row each, as every front end spells
 * them (the CLI's long option, the API's query parameter, Python's keyword), with the
 * range every front end parses against (cli/options.c, server/options.c, Python's
 * outside_row). A new option of a step is a row here; the tests fail until the front ends
 * that the row names take it: test_cli (option tables, --help's ranges and defaults,
 * docs/api.md's ranges), test_server_parsers (the API's ends and just past them) and
 * tests/python/test_options.py (the keywords').
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
#define F AG_CMD_FUSE

// clang-format off
static const ag_step_option options[] = {
    ROW(FUSE, "source-face", F, "source_face", "source_face", INT, 1, AG_FACE_MAX, 1,
        "which face of the source, as 'animegan faces' numbers them (1: the largest)"),
    ROW(FUSE, "target-face", F, "target_face", "target_face", INT, 1, AG_FACE_MAX, 1,
        "which face of the target"),
    ROW(FUSE, "source-like", F, NULL, "source_like", TEXT, 0, 0, 0,
        "the face of the source most like the face in this photo"),
    ROW(FUSE, "target-like", F, NULL, "target_like", TEXT, 0, 0, 0,
        "the face of the target most like the face in this photo (API: an image part)"),
    ROW(FUSE, "ratio", F, "ratio", NULL, FLOAT, 0, 1, 0.7,
        "sets both ratios below; 0 returns the target unchanged"),
    ROW(FUSE, "shape-ratio", F, "shape_ratio", "shape_ratio", FLOAT, 0, 1, 0.7,
        "geometry: 0 the target's face shape, 1 the source's"),
    ROW(FUSE, "texture-ratio", F, "texture_ratio", "texture_ratio", FLOAT, 0, 1, 0.7,
        "how much of the source's skin and features replace the target's"),
    ROW(FUSE, "mode", F, "mode", "mode", TEXT, 0, 0, 0,
        "normal (seamless), blend (feathered) or overlay"),
    ROW(FUSE, "smooth", F, "smooth", "smooth", FLOAT, 0, 1, 0, "skin smoothing"),
    ROW(FUSE, "paint-occluders", F, "paint_occluders", "paint_occluders", FLAG, 0, 1, 0,
        "paint the face over what covers the target's face"),
    ROW(FUSE, "keep-occluders", F, NULL, NULL, FLAG, 0, 1, 1,
        "keep what covers the target's face (the default)"),
    ROW(FUSE, "enhance", F, "enhance", "enhance", TEXT, 0, 0, 0,
        "a smaller source face sharpened first: auto, none, restore or upscale"),
    ROW(FUSE, "restore-model", F, NULL, "restorer", TEXT, 0, 0, 0,
        "the face restorer of --enhance (API: the server's --restore-model)"),
    ROW(FUSE, "brightness", F, "brightness", "brightness", FLOAT, -1, 1, 0,
        "on the fused face"),
    ROW(FUSE, "contrast", F, "contrast", "contrast", FLOAT, -1, 1, 0, "on the fused face"),
    ROW(FUSE, "saturation", F, "saturation", "saturation", FLOAT, -1, 1, 0,
        "on the fused face"),
    ROW(FUSE, "size", F, "size", "size", INT, 64, 4096, 0,
        "output long side in pixels (default: the target's; API: also original)"),
    ROW(FUSE, "max-window-pixels", F, NULL, NULL, INT, 4096, 1 << 30, AG_FUSE_WINDOW_PIXELS,
        "a larger face work window is fused at the scale that fits"),
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
    ROW(STYLIZE, "style", F, "style", NULL, TEXT, 0, 0, 0,
        "fuse: stylise the result with this model"),
    ROW(STYLIZE, "anime-template", F, "anime_template", NULL, FLAG, 0, 1, 0,
        "fuse with --style: the target is already anime; stylise the source face first"),
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
    return ag_step_option_of(~0, name);
}

const ag_step_option *ag_step_option_of(int commands, const char *name) {
    for (size_t i = 0; name && i < sizeof options / sizeof options[0]; i++)
        if ((options[i].commands & commands) && !strcmp(options[i].name, name))
            return &options[i];
    return NULL;
}

const ag_step_option *ag_step_option_query(const char *query) {
    for (size_t i = 0; query && i < sizeof options / sizeof options[0]; i++)
        if (options[i].query && !strcmp(options[i].query, query))
            return &options[i];
    return NULL;
}
