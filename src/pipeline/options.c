/*
 * options.c - the options of the pipeline's steps, one row each, as every front end spells
 * them (the CLI's long option, the API's query parameter, Python's keyword), with the range
 * or the fixed set of values every front end parses against (cli/options.c, server/options.c,
 * Python's outside_row and row_choice) and the help text the CLI's --help prints
 * (cli/help.c). A new option of a step is a row here; --help shows it at once, and the tests
 * fail until the front ends that the row names take it: test_cli (option tables, --help,
 * choices, docs/api.md's ranges and values), test_server_parsers (the API's ends, just past
 * them, and its choices) and tests/python/test_options.py (the keywords').
 */
#include "animegan.h"

#include <stdio.h>
#include <string.h>

#define ROW(step_, name_, commands_, query_, keyword_, type_, min_, max_, def_, arg_, help_)       \
    {                                                                                              \
        .step = AG_STEP_##step_, .name = name_, .commands = commands_, .query = query_,            \
        .keyword = keyword_, .type = AG_OPTION_##type_, .min = min_, .max = max_, .def = def_,     \
        .arg = arg_, .help = help_                                                                 \
    }
/* A row whose value is one of a fixed set (NULL-terminated after the help); def: the
 * default's index (-1: none). */
#define CHOICE(step_, name_, commands_, query_, keyword_, type_, def_, help_, ...)                 \
    {                                                                                              \
        .step = AG_STEP_##step_, .name = name_, .commands = commands_, .query = query_,            \
        .keyword = keyword_, .type = AG_OPTION_##type_, .def = def_,                               \
        .choices = (const char *const[]){__VA_ARGS__, NULL}, .help = help_                         \
    }

#define C AG_CMD_CONVERT
#define R AG_CMD_RESTORE
#define U AG_CMD_UPSCALE
#define F AG_CMD_FUSE

/* The help is what --help prints after the option and its value; it adds the range (before
 * a "(default: ...)" the text has, else at the end with the row's default) and the choices
 * (as the value: --mode normal|blend|overlay). */
// clang-format off
static const ag_step_option options[] = {
    ROW(FUSE, "source-face", F, "source_face", "source_face", INT, 1, AG_FACE_MAX, 1, "N",
        "which face of the source, as 'animegan faces' numbers them; 1: the largest"),
    ROW(FUSE, "target-face", F, "target_face", "target_face", INT, 1, AG_FACE_MAX, 1, "N",
        "which face of the target"),
    ROW(FUSE, "target-like", F, NULL, "target_like", TEXT, 0, 0, 0, "PHOTO",
        "the face of the target most like the face in PHOTO (who it is: dlib's face "
        "descriptor, bundled as face-recognition; under 0.6 apart is one person); not with "
        "--target-face"),
    ROW(FUSE, "source-like", F, NULL, "source_like", TEXT, 0, 0, 0, "PHOTO",
        "likewise, which face of the source; not with --source-face"),
    ROW(FUSE, "ratio", F, "ratio", NULL, FLOAT, 0, 1, 0.7, "R",
        "sets both ratios below; 0 returns the target unchanged"),
    ROW(FUSE, "shape-ratio", F, "shape_ratio", "shape_ratio", FLOAT, 0, 1, 0.7, "R",
        "geometry: 0 the target's face shape, 1 the source's"),
    ROW(FUSE, "texture-ratio", F, "texture_ratio", "texture_ratio", FLOAT, 0, 1, 0.7, "R",
        "how much of the source's skin and features replace the target's"),
    CHOICE(FUSE, "mode", F, "mode", "mode", TEXT, AG_FUSE_NORMAL,
           "seamless (Poisson), feathered (no Poisson) or the fused lightness over the "
           "target's colour",
           "normal", "blend", "overlay"),
    ROW(FUSE, "smooth", F, "smooth", "smooth", FLOAT, 0, 1, 0, "S", "skin smoothing"),
    ROW(FUSE, "paint-occluders", F, "paint_occluders", "paint_occluders", FLAG, 0, 1, 0, NULL,
        "paint the face over what covers the target's face (hair, a hand)"),
    ROW(FUSE, "keep-occluders", F, NULL, NULL, FLAG, 0, 1, 1, NULL,
        "keep what covers the target's face from the target (the default)"),
    CHOICE(FUSE, "enhance", F, "enhance", "enhance", TEXT, AG_FUSE_ENHANCE_AUTO,
           "a source face smaller than the target's is sharpened first; auto: by the "
           "--restore-model when given, else by the bundled upscaler",
           "auto", "none", "restore", "upscale"),
    ROW(FUSE, "restore-model", F, NULL, "restorer", TEXT, 0, 0, 0, "PATH",
        "a face restorer (GPEN, GFPGAN, CodeFormer .pth) for --enhance"),
    ROW(FUSE, "brightness", F, "brightness", "brightness", FLOAT, -1, 1, 0, "B",
        "on the fused face"),
    ROW(FUSE, "contrast", F, "contrast", "contrast", FLOAT, -1, 1, 0, "C", "on the fused face"),
    ROW(FUSE, "saturation", F, "saturation", "saturation", FLOAT, -1, 1, 0, "S",
        "on the fused face"),
    ROW(FUSE, "size", F, "size", "size", INT, 64, 4096, 0, "N",
        "output long side in pixels, or original (default: the target's)"),
    ROW(FUSE, "max-window-pixels", F, NULL, NULL, INT, 4096, 1 << 30, AG_FUSE_WINDOW_PIXELS, "N",
        "the face's work window over N px is fused at the scale that fits N, its change "
        "enlarged"),
    ROW(RESTORE, "model", R, NULL, NULL, TEXT, 0, 0, 0, "FILE",
        "the GPEN, GFPGAN or CodeFormer checkpoint (required)"),
    ROW(RESTORE, "restore-faces", C, "restore", NULL, TEXT, 0, 0, 0, "FILE",
        "restore the faces with a GPEN, GFPGAN or CodeFormer checkpoint before stylising "
        "(see 'animegan restore --help')"),
    ROW(RESTORE, "fidelity", C | R, NULL, "fidelity", FLOAT, 0, 1, 1, "W",
        "the restored face's weight against the original, GPEN's alpha; 1: restored only"),
    ROW(RESTORE, "codeformer-fidelity", C | R, "codeformer_fidelity", "codeformer_fidelity",
        FLOAT, 0, 1, 0.5, "W",
        "CodeFormer's w: lower restores more, higher keeps closer to the input"),
    ROW(RESTORE, "max-faces", C | R, NULL, "max_faces", INT, 1, AG_FACE_MAX, 8, "N",
        "faces used per photo, largest first"),
    ROW(RESTORE, "aligned", C | R, NULL, "aligned", FLAG, 0, 1, 0, NULL,
        "the inputs are aligned face crops: resized to the network's size and restored "
        "whole (output at that size)"),
    ROW(STYLIZE, "model", C, "model", "weights", TEXT, 0, 0, 0, "NAME|PATH",
        "a bundled style, or a .safetensors, .pt or .onnx file (default: hayao; see "
        "'animegan models')"),
    ROW(STYLIZE, "side-by-side", C, "side_by_side", "side_by_side", FLAG, 0, 1, 0, NULL,
        "write the input and the result next to each other"),
    CHOICE(STYLIZE, "portrait", C, "portrait", "portrait", TEXT, -1,
           "face2paint: the FFHQ-aligned crop of the largest face (from the photo at up to "
           "4096 px; --portrait alone), or with =center, or when no face is found, the "
           "centre square; resized to --size",
           "face", "center", "centre"),
    ROW(STYLIZE, "all-faces", C, NULL, NULL, FLAG, 0, 1, 0, NULL,
        "with --portrait: one output per face (NAME.face1.png, ...)"),
    ROW(STYLIZE, "paste-faces", C, "paste_faces", NULL, FLAG, 0, 1, 0, NULL,
        "stylise the whole photo, and each face also as an aligned --size crop pasted back "
        "(details for small faces)"),
    ROW(STYLIZE, "face-model", C, "face_model", NULL, TEXT, 0, 0, 0, "M",
        "the model for the faces of --paste-faces (default: -m)"),
    ROW(STYLIZE, "style", F, "style", NULL, TEXT, 0, 0, 0, "M",
        "stylise the result with model M (fuse, then anime)"),
    ROW(STYLIZE, "anime-template", F, "anime_template", NULL, FLAG, 0, 1, 0, NULL,
        "with --style: the target is already anime; stylise the source face first, then "
        "fuse"),
    ROW(STYLIZE, "size", C, NULL, "size", INT, AG_MIN_SIDE, 8192, 512, "N",
        "portrait / face crop size in pixels"),
    ROW(UPSCALE, "model", U, NULL, NULL, TEXT, 0, 0, 0, "NAME|PATH",
        "esrgan-slim or esrgan-medium (bundled, x2 x3 x4 x8), or an upscaler's .pth or "
        ".safetensors (ESRGAN/RRDBNet, Compact, SPAN, RealPLKSR; 'animegan models --inspect "
        "FILE') (default: esrgan-medium)"),
    ROW(UPSCALE, "upscale", C | R, NULL, NULL, INT, 1, AG_UPSCALE_MAX_SCALE, 0, "N",
        "upscale the result N times, tiled; photos, video and animations"),
    /* The API's upscale=N is one of the server's upscalers (server.h: a slot each for 2 and
     * 4, loaded and budgeted at start-up), not any factor. */
    CHOICE(UPSCALE, "upscale", 0, "upscale", NULL, INT, 0,
           "the API's: 2 or 4, the server's upscalers (0: none)", "0", "2", "4"),
    ROW(UPSCALE, "scale", U, NULL, "scale", INT, 1, AG_UPSCALE_MAX_SCALE, 0, "N",
        "output side / input side: picks the bundled model of that scale; another scale than "
        "the network's resizes its result with Lanczos3 (default: the model's own; bundled "
        "4)"),
    ROW(UPSCALE, "upscale-model", C | R, NULL, NULL, TEXT, 0, 0, 0, "M",
        "the upscaler of --upscale (default: esrgan-medium)"),
    ROW(UPSCALE, "tile", C | R | U, NULL, "tile", INT, 16, 8192, 0, "N",
        "tile side in input pixels (default: the largest whose window fits --max-mb)"),
    ROW(UPSCALE, "tile-pad", C | R | U, NULL, NULL, INT, 0, 256, -1, "N",
        "context around each tile (default: the network's reach, at most 32)"),
    ROW(UPSCALE, "max-mb", C | R | U, NULL, "max_mb", INT, 16, 1 << 20,
        AG_UPSCALE_DEFAULT_MAX_BYTES >> 20, "N", "memory budget of one tile window in MiB"),
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

int ag_step_option_choice(const ag_step_option *o, const char *value) {
    for (int i = 0; o->choices && value && o->choices[i]; i++)
        if (!strcmp(o->choices[i], value))
            return i;
    return -1;
}

/* Appends `word` to the list in buf[0..*len): ", " before all but the last, " or " before it
 * (`last`). */
static void list_word(char *buf, size_t cap, size_t *len, const char *word, int first, int last) {
    const char *sep = first ? "" : last ? " or " : ", ";
    int n = snprintf(buf + *len, cap - *len, "%s%s", sep, word);
    if (n > 0)
        *len = *len + (size_t)n < cap ? *len + (size_t)n : cap - 1;
}

const char *ag_step_option_choices(const ag_step_option *o, const char *const *extra, char *buf,
                                   size_t cap) {
    const char *words[32];
    int n = 0;
    for (int i = 0; o->choices && o->choices[i] && n < 32; i++)
        words[n++] = o->choices[i];
    for (int i = 0; extra && extra[i] && n < 32; i++)
        words[n++] = extra[i];
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++)
        list_word(buf, cap, &len, words[i], i == 0, i == n - 1);
    return buf;
}

const char *ag_step_option_refusal(const ag_step_option *o, const char *spelled,
                                   const char *const *extra, const char *value, char *buf,
                                   size_t cap) {
    char list[160];
    snprintf(buf, cap, "%s must be %s, not '%s'", spelled,
             ag_step_option_choices(o, extra, list, sizeof list), value ? value : "");
    return buf;
}
