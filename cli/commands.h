/*
 * commands.h - the subcommands of the `animegan` executable and the helpers they share.
 * cli/main.c dispatches on argv[1]; each command gets argv shifted by one, so argv[0] is the
 * command's own name ("convert", "serve", ...) and getopt_long starts at argv[1] as usual.
 *
 * Exit statuses of every command: 0 success, 1 something failed (reported on stderr as
 * "animegan: <message>"), 2 bad command line (one line plus a "Try ... --help" hint).
 *
 * cli/main.c calls ag_image_startup before any command and ag_image_shutdown after it
 * returns, so commands (including the server) must not call either.
 */
#ifndef AG_CLI_COMMANDS_H
#define AG_CLI_COMMANDS_H

#include "animegan.h"

#include <stdio.h>

enum { AG_EXIT_OK = 0, AG_EXIT_FAILED = 1, AG_EXIT_USAGE = 2, AG_EXIT_INTERRUPTED = 130 };

/* The engine's options in the --help of the commands that run a generator (convert, bench). */
#define AG_CLI_ENGINE_HELP                                                                         \
    "  -t, --threads N        worker threads, 0 = every core (default: 0)\n"                       \
    "      --precision P      fp32, bf16, int8 or auto: the fastest native on this CPU\n"          \
    "                         that meets its quality bar (default: auto)\n"                        \
    "      --backend B        onednn or reference (default: onednn)\n"                             \
    "      --upsample MODE    asymmetric, align-corners or half-pixel\n"                           \
    "                         (default: the model's own mode)\n"

/* ---- commands (argv[0] is the command name) ---------------------------------------------- */

int ag_cli_convert(int argc, char **argv);
int ag_cli_bench(int argc, char **argv);
int ag_cli_models(int argc, char **argv);
int ag_cli_faces(int argc, char **argv);
int ag_cli_fuse(int argc, char **argv);
int ag_cli_restore(int argc, char **argv);
/* convert's batch (cli/convert.c), also `animegan restore` (no generator: the restorer's
 * options and work) and `animegan upscale` (no generator, the upscaler only). */
typedef enum ag_cli_kind { AG_CLI_CONVERT = 0, AG_CLI_RESTORE, AG_CLI_UPSCALE } ag_cli_kind;
int ag_cli_convert_command(int argc, char **argv, ag_cli_kind kind);

/* The HTTP service, provided by server/; same argv convention and exit statuses. */
extern int ag_server_main(int argc, char **argv);

/* ---- shared option parsing (cli/options.c) ----------------------------------------------- */

/*
 * Parse a whole decimal integer in [min, max]. On failure prints the usage error for
 * `command` naming `option` and returns -1 (the caller returns AG_EXIT_USAGE).
 */
int ag_cli_parse_int(const char *command, const char *option, const char *text, int min, int max,
                     int *out);
/* The same for an option of the steps' table (ag_step_options), in the row's range. */
int ag_cli_parse_step_int(const char *command, const char *option, const char *text, int *out);
int ag_cli_parse_step_float(const char *command, const char *option, const char *text, float *out);
/* The index of `text` among the row's choices; -1 after the row's one-line refusal ("--mode
 * must be normal, blend or overlay, not 'x'"). */
int ag_cli_parse_step_choice(const char *command, const char *option, const char *text);

/* Options that pick the model and shape the engine; shared by convert and bench. */
typedef struct ag_cli_engine_args {
    const char *model; /* bundled name or path */
    ag_engine_options engine;
} ag_cli_engine_args;

void ag_cli_engine_args_init(ag_cli_engine_args *args);

/* getopt_long entries for the engine options, to splice into a command's table. */
// clang-format off
#define AG_CLI_ENGINE_LONG_OPTIONS                                                                 \
    {"model", required_argument, NULL, 'm'}, {"threads", required_argument, NULL, 't'},            \
        {"precision", required_argument, NULL, 'P'}, {"backend", required_argument, NULL, 'B'},    \
        {"upsample", required_argument, NULL, 'U'}
// clang-format on

/*
 * Handle one getopt result if it is an engine option: returns 1 when handled, 0 when `opt`
 * is not one, -1 (usage error already printed) when its value is bad.
 */
int ag_cli_engine_option(const char *command, int opt, const char *arg, ag_cli_engine_args *args);

/*
 * `animegan CMD --option-table` (what `animegan --option-table CMD` runs): one line per long
 * option the command takes, "--name none|required|optional" (its argument), leaving out
 * `refused` (NULL-terminated names of a shared table this command refuses). tests/test_cli.c
 * checks each command's --help against it.
 */
struct option;
int ag_cli_option_table_asked(int argc, char **argv);
int ag_cli_print_option_table(const struct option *table, const char *const *refused);

/*
 * --help's step options (cli/help.c): every row of the step table that `command` (an AG_CMD_*
 * bit) takes, under a heading per step, "  -x, --name VALUE" (the letter when `shorts`, the
 * command's getopt short options, has the `table` entry's) and the row's text from `column`
 * on, with its range, default and choices, wrapped at 80 columns. Starts with a blank line.
 */
void ag_cli_print_step_help(int command, const struct option *table, const char *shorts,
                            int column);

/*
 * Report a getopt '?' or ':' result for `command` ("unknown option", "needs a value") as one
 * line plus the help hint. Returns AG_EXIT_USAGE.
 */
int ag_cli_bad_option(const char *command, int opt, int optopt_value, const char *word);

/* Print "animegan: <fmt...>" and the "Try 'animegan <command> --help'" hint; AG_EXIT_USAGE. */
int ag_cli_usage_error(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Print "animegan: <message>" for a failed library call. */
void ag_cli_report(const ag_error *err);

/*
 * Resolve options->precision (auto, or an explicit one) for this CPU with ag_precision_resolve
 * and store the result back; prints the one-line warning when it is emulated. Returns 0,
 * or -1 after printing why this CPU cannot run it (the command then exits 1).
 */
int ag_cli_resolve_precision(ag_engine_options *options, ag_precision_choice *choice);

const char *ag_cli_precision_name(ag_precision precision);
const char *ag_cli_backend_name(ag_backend backend);

/* ---- video (cli/video.c) ----------------------------------------------------------------- */

typedef struct ag_cli_video_args {
    int crf;            /* -1: the encoder's default (H.264 18, VP9 31) */
    const char *preset; /* x264 preset, NULL: medium */
    double start_s, duration_s;
    int start_given, duration_given;
    int max_frames; /* refuse inputs with more frames; 0: no limit */
} ag_cli_video_args;

enum {
    AG_CLI_OPT_CRF = 512,
    AG_CLI_OPT_PRESET,
    AG_CLI_OPT_START,
    AG_CLI_OPT_DURATION,
    AG_CLI_OPT_MAX_FRAMES
};

// clang-format off
#define AG_CLI_VIDEO_LONG_OPTIONS                                                                  \
    {"crf", required_argument, NULL, AG_CLI_OPT_CRF},                                              \
        {"preset", required_argument, NULL, AG_CLI_OPT_PRESET},                                    \
        {"start", required_argument, NULL, AG_CLI_OPT_START},                                      \
        {"duration", required_argument, NULL, AG_CLI_OPT_DURATION},                                \
        {"max-frames", required_argument, NULL, AG_CLI_OPT_MAX_FRAMES}
// clang-format on

void ag_cli_video_args_init(ag_cli_video_args *v);
/* Like ag_cli_engine_option, for the video options: 1 handled, 0 not one, -1 bad value. */
int ag_cli_video_option(const char *command, int opt, const char *arg, ag_cli_video_args *v);
/* Whether any video option was given (they are refused for photos). */
int ag_cli_video_given(const ag_cli_video_args *v);
/* AG_CLI_ROUTE_VIDEO: convert `input` as a video (the output is a video container),
 * _PHOTO: as a photo, _FAILED: a one-line error was printed (a video to a still image). */
enum { AG_CLI_ROUTE_PHOTO = 0, AG_CLI_ROUTE_VIDEO, AG_CLI_ROUTE_FAILED };
int ag_cli_video_route(const char *input, const char *output);
/* Convert one video (the style unless `style` is 0, then the upscaler of `up` unless NULL);
 * returns the exit status (130 after Ctrl-C, nothing written). */
struct ag_cli_upscale_args;
int ag_cli_video_run(const char *input, const char *output, const ag_cli_engine_args *e,
                     const struct ag_cli_upscale_args *up, int style, int max_side,
                     int side_by_side, const ag_cli_video_args *v, int quiet);
/* A clip through the caller's pipeline (fuse's), its frames out_scale times the input's
 * (0 or 1: the same); the exit status as ag_cli_video_run's. */
int ag_cli_video_pipeline(const char *input, const char *output, const ag_pipeline *p,
                          int out_scale, int max_side, const ag_cli_video_args *v, int quiet);

/* ---- upscaling (cli/upscale.c) ----------------------------------------------------------- */

/* `animegan upscale` and convert's --upscale share cli/convert.c's batch (inputs, outputs,
 * decode, save); this is the upscaling step they add. */
typedef struct ag_cli_upscale_args {
    int scale;         /* convert --upscale N / upscale --scale N; 0: none / the model's own */
    const char *model; /* convert --upscale-model / upscale --model (default esrgan-medium) */
    int tile;          /* --tile N input pixels, 0: from --max-mb */
    int tile_pad;      /* --tile-pad N, -1: the network's reach (at most 32) */
    int max_mb;        /* --max-mb: the tile's memory budget */
    int given;         /* any of these options was given */
} ag_cli_upscale_args;

enum {
    AG_CLI_OPT_UPSCALE = 600,
    AG_CLI_OPT_UPSCALE_MODEL,
    AG_CLI_OPT_SCALE,
    AG_CLI_OPT_TILE,
    AG_CLI_OPT_TILE_PAD,
    AG_CLI_OPT_MAX_MB
};

// clang-format off
#define AG_CLI_UPSCALE_LONG_OPTIONS                                                                \
    {"upscale", required_argument, NULL, AG_CLI_OPT_UPSCALE},                                      \
        {"upscale-model", required_argument, NULL, AG_CLI_OPT_UPSCALE_MODEL},                      \
        {"scale", required_argument, NULL, AG_CLI_OPT_SCALE},                                      \
        {"tile", required_argument, NULL, AG_CLI_OPT_TILE},                                        \
        {"tile-pad", required_argument, NULL, AG_CLI_OPT_TILE_PAD},                                \
        {"max-mb", required_argument, NULL, AG_CLI_OPT_MAX_MB}
// clang-format on

#define AG_CLI_UPSCALE_DEFAULT_MODEL "esrgan-medium"

void ag_cli_upscale_args_init(ag_cli_upscale_args *u);
/* Like ag_cli_engine_option for the upscaling options (--scale only when `upscale_only`,
 * --upscale and --upscale-model only when not): 1 handled, 0 not one, -1 bad value. */
int ag_cli_upscale_option(const char *command, int opt, const char *arg, int upscale_only,
                          ag_cli_upscale_args *u);

/* The upscaler of one run: its model and engine, planned per window size. */
typedef struct ag_cli_upscaler {
    ag_model *model;
    ag_engine *engine;
    ag_upscale_options options;
} ag_cli_upscaler;

int ag_cli_upscaler_open(ag_cli_upscaler *up, const ag_cli_upscale_args *args,
                         const ag_engine_options *engine, ag_error *err);
void ag_cli_upscaler_close(ag_cli_upscaler *up);
void ag_cli_upscale_help(const struct option *table, const char *shorts);
int ag_cli_upscale(int argc, char **argv);

/* ---- faces (cli/faces.c) ------------------------------------------------------------------ */

/* The two bundled face networks and a detector over them, for one run. */
typedef struct ag_cli_face_set {
    ag_model *detect, *mesh;
    ag_face_detector *detector;
} ag_cli_face_set;

int ag_cli_faces_open(ag_cli_face_set *faces, const ag_engine_options *options, ag_error *err);
void ag_cli_faces_close(ag_cli_face_set *faces);
/* fuse --source-like / --target-like (cli/fuse_like.c): paths[i] (NULL: not asked) decoded
 * (at most AG_CLI_LIKE_MAX_PIXELS) and their largest faces described into like[i], with the
 * face-recognition model and an embedder made into *model, *embedder (the caller frees both)
 * when either is asked; then the 1-based face of faces[0..count) most like one. */
#define AG_CLI_LIKE_MAX_PIXELS ((size_t)100000000)
int ag_cli_faces_like(const char *const paths[2], ag_face_detector *detector,
                      const ag_engine_options *options, ag_model **model,
                      ag_face_embedder **embedder, float (*like)[AG_FACE_DESCRIPTOR],
                      ag_error *err);
int ag_cli_face_like(ag_face_embedder *embedder, const ag_image *image, const char *which,
                     const ag_face *faces, int count, const float *like, ag_error *err);
/* What `animegan convert` does with faces: --portrait (face-aware), --all-faces, or
 * --paste-faces (then `face_engine` renders the crops). */
typedef struct ag_cli_face_mode {
    int paste, all_faces, side_by_side;
    int size, max_faces;
    ag_engine *engine, *face_engine;
} ag_cli_face_mode;

/* The images one decoded input gives: one portrait (the largest face's aligned crop, or the
 * centre crop with a line on stderr when there is none), one per face with all_faces, or the
 * whole photo with the faces pasted back. outs[0..*count) are the caller's (ag_image_fini). */
int ag_cli_faces_render(ag_cli_face_set *faces, const ag_cli_face_mode *mode, const ag_image *in,
                        const char *label, ag_image *outs, int capacity, int *count, ag_error *err);

/* The JSON line of `animegan faces --json` for one image. */
void ag_cli_faces_json(FILE *out, const char *image, int width, int height, const ag_face *faces,
                       int count);

/* ---- face restoration (cli/restore.c) ---------------------------------------------------- */

void ag_cli_restore_help(const struct option *table, const char *shorts);
/* After restore's options: the restoration model is --model (required, *restore_model set
 * from it); `incompatible` a face or layout option given. -1 to go on, else the exit status. */
int ag_cli_restore_check(const char **restore_model, const char *model, const char *default_model,
                         int incompatible);
/* The restoration model of `path` and an engine over it (the precision
 * ag_restore_precision_resolve gives for options->precision, the engine's threads). */
int ag_cli_restorer_open(const char *path, const ag_engine_options *options, ag_model **model,
                         ag_engine **engine, ag_error *err);
/* After the pipeline restored `label`: says on stderr when there was no face (the image was
 * kept as it was) or when --max-faces left some out. */
void ag_cli_restore_report(const ag_restore_options *options, const ag_restore_result *result,
                           const char *label);

/* ---- progress bar (cli/progress.c) ------------------------------------------------------- */

typedef struct ag_progress {
    int enabled; /* drawing at all: a terminal and not --quiet */
    int total, done, failed;
    double start_s;
    int drawn;         /* a bar is on the current line and must be cleared before other output */
    const char *verb;  /* of the summary: "converted" (NULL), "restored", "upscaled" */
    const char *stage; /* the steps inside the current image ("face", "tile"), or NULL */
    int stage_done, stage_total;
} ag_progress;

/* Draw on stderr only when it is a terminal and `quiet` is off. */
void ag_progress_init(ag_progress *progress, int total, int quiet);
/* Restart the clock and draw the empty bar (call when the first item begins). */
void ag_progress_start(ag_progress *progress);
/* Record one finished item (ok or not) and redraw. */
void ag_progress_step(ag_progress *progress, int ok);
/* Erase the bar so a message can be printed on a clean line; the next step redraws it. */
void ag_progress_clear(ag_progress *progress);
/* Replace the bar with a one-line summary (only when enabled). */
void ag_progress_finish(ag_progress *progress);
/* An ag_step_progress_fn over an ag_progress (`user`): the steps of the current image
 * (progress->stage names them) shown after the count; never cancels. */
int ag_progress_stage(void *user, int done, int total);

#endif
