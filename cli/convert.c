/*
 * convert.c - `animegan convert INPUT... -o OUTPUT`: plan which file goes where, load the model
 * once, then decode -> stylise -> save each input with one engine. A bad input is reported
 * and skipped; the exit status says whether anything failed. `animegan restore` (cli/restore.c)
 * is the same batch with face restoration in place of the stylisation, and
 * `convert --restore-faces FILE` restores the faces before stylising.
 */
#include "commands.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct convert_args {
    ag_cli_engine_args e;
    const char *output;
    ag_decode_options decode;
    int size_given;
    int side_by_side;
    int quality;
    int format; /* --format: of files written into an output directory */
    int quiet;
    ag_cli_video_args video;
    /* faces: portrait 1 = face-aware (the decode's portrait flag is then off), 2 = centre */
    int portrait, all_faces, paste_faces, max_faces;
    const char *face_model;
    /* face restoration: --restore-faces FILE (convert) or --model FILE (restore) */
    const char *command; /* "convert", "restore" or "upscale", for messages */
    int restore_only;    /* `animegan restore` */
    const char *restore_model;
    ag_restore_options restore;
    int fidelity_given, aligned_given, codeformer_fidelity_given;
    ag_cli_upscale_args up;
    int upscale_only; /* `animegan upscale`: no generator, the upscaler only */
    int model_given;
} convert_args;

typedef struct job {
    char *input; /* ag_malloc'ed */
    char *output;
} job;

typedef struct job_list {
    job *items;
    int count, capacity;
    int dir_mode; /* OUTPUT is a directory (created before the first save) */
    int format;   /* of every output */
    int failures; /* inputs rejected while planning, already reported */
} job_list;

/* ---- options ----------------------------------------------------------------------------- */

enum {
    OPT_MAX_SIDE = 256,
    OPT_PORTRAIT,
    OPT_SIZE,
    OPT_SIDE_BY_SIDE,
    OPT_QUALITY,
    OPT_FORMAT,
    OPT_ALL_FACES,
    OPT_PASTE_FACES,
    OPT_FACE_MODEL,
    OPT_MAX_FACES,
    OPT_RESTORE_FACES,
    OPT_FIDELITY,
    OPT_CODEFORMER_FIDELITY,
    OPT_ALIGNED
};

static const struct option long_options[] = {
    {"output", required_argument, NULL, 'o'},
    AG_CLI_ENGINE_LONG_OPTIONS,
    {"max-side", required_argument, NULL, OPT_MAX_SIDE},
    {"portrait", optional_argument, NULL, OPT_PORTRAIT},
    {"all-faces", no_argument, NULL, OPT_ALL_FACES},
    {"paste-faces", no_argument, NULL, OPT_PASTE_FACES},
    {"face-model", required_argument, NULL, OPT_FACE_MODEL},
    {"max-faces", required_argument, NULL, OPT_MAX_FACES},
    {"restore-faces", required_argument, NULL, OPT_RESTORE_FACES},
    {"fidelity", required_argument, NULL, OPT_FIDELITY},
    {"codeformer-fidelity", required_argument, NULL, OPT_CODEFORMER_FIDELITY},
    {"aligned", no_argument, NULL, OPT_ALIGNED},
    {"size", required_argument, NULL, OPT_SIZE},
    {"side-by-side", no_argument, NULL, OPT_SIDE_BY_SIDE},
    {"quality", required_argument, NULL, OPT_QUALITY},
    {"format", required_argument, NULL, OPT_FORMAT},
    AG_CLI_VIDEO_LONG_OPTIONS,
    AG_CLI_UPSCALE_LONG_OPTIONS,
    {"quiet", no_argument, NULL, 'q'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static const char short_options[] = ":o:m:t:qh";

static void print_help(void) {
    fputs("Usage: animegan convert INPUT... -o OUTPUT [options]\n"
          "\n"
          "Turn photos into anime-style pictures with an AnimeGANv2 or AnimeGANv3 generator.\n"
          "INPUT is an image file (JPEG, PNG, WebP, TIFF, GIF, HEIF) or a directory of them.\n"
          "With one input file, OUTPUT is the file to write and its extension (.png, .jpg,\n"
          ".webp) picks the format. With several inputs or a directory, OUTPUT is a directory\n"
          "(created if missing) that receives one file per input with the same base name.\n"
          "Outputs are written to a temporary file and renamed, so a failure leaves none.\n"
          "\n"
          "Options:\n"
          "  -o, --output PATH      output file or directory (required)\n" AG_CLI_ENGINE_HELP
          "      --max-side N       downscale inputs whose long side exceeds N pixels,\n"
          "                         0 = never (default: 1024)\n"
          "      --quality N        JPEG and WebP quality, 1-100 (default: 90)\n"
          "      --format F         png, jpg or webp, for files written into an output\n"
          "                         directory (default: png)\n"
          "  -q, --quiet            no progress bar or summary (errors are still printed)\n"
          "  -h, --help             show this help\n",
          stdout);
    ag_cli_print_step_help(AG_CMD_CONVERT, long_options, short_options, 25);
    fputs("\n"
          "Video (one input whose output is .mp4, .mov, .mkv or .webm; H.264, VP9 for .webm;\n"
          "timing, rotation and sound kept; --max-side applies to frames). A video, animated\n"
          "GIF or animated WebP written to .gif or .webp becomes an animation (no sound):\n"
          "      --crf N            quality, lower is better (H.264 0-51: 18, VP9 0-63: 31)\n"
          "      --preset P         x264 preset, ultrafast ... veryslow (default: medium)\n"
          "      --start T          convert from time T (seconds, MM:SS or HH:MM:SS)\n"
          "      --duration T       convert this long (default: to the end)\n"
          "      --max-frames N     refuse an input with more than N frames (default: no limit)\n"
          "\n"
          "A progress bar is shown on a terminal when converting several images.\n"
          "Exit status: 0 all converted, 1 an input or the model failed, 2 bad command line,\n"
          "130 interrupted.\n",
          stdout);
}

/* The options of the shared table that restore and upscale refuse (test_cli checks they do). */
static const char *const refused_by_restore[] = {
    "portrait",     "all-faces",     "paste-faces", "face-model", "size",
    "side-by-side", "restore-faces", "upsample",    "crf",        "preset",
    "start",        "duration",      "max-frames",  "scale",      NULL};
static const char *const refused_by_upscale[] = {"portrait",
                                                 "all-faces",
                                                 "paste-faces",
                                                 "face-model",
                                                 "size",
                                                 "side-by-side",
                                                 "upsample",
                                                 "max-faces",
                                                 "upscale",
                                                 "upscale-model",
                                                 "restore-faces",
                                                 "fidelity",
                                                 "aligned",
                                                 "codeformer-fidelity",
                                                 NULL};
static const char *const refused_by_convert[] = {"scale", NULL};

/* One convert-only option: 0 ok, -1 bad value (reported). */
static int parse_option(int opt, const char *arg, convert_args *a) {
    switch (opt) {
    case 'o': a->output = arg; return 0;
    case 'q': a->quiet = 1; return 0;
    case OPT_PORTRAIT: { /* face (--portrait alone), center or centre */
        int choice = arg ? ag_cli_parse_step_choice(a->command, "portrait", arg) : 0;
        if (choice < 0)
            return -1;
        a->portrait = choice == 0 ? 1 : 2;
        a->decode.portrait = choice != 0;
        return 0;
    }
    case OPT_ALL_FACES: a->all_faces = 1; return 0;
    case OPT_PASTE_FACES: a->paste_faces = 1; return 0;
    case OPT_FACE_MODEL: a->face_model = arg; return 0;
    case OPT_RESTORE_FACES: a->restore_model = arg; return 0;
    case OPT_ALIGNED: a->restore.aligned = a->aligned_given = 1; return 0;
    case OPT_FIDELITY:
        a->fidelity_given = 1;
        return ag_cli_parse_step_float(a->command, "fidelity", arg, &a->restore.fidelity);
    case OPT_CODEFORMER_FIDELITY:
        a->fidelity_given = a->codeformer_fidelity_given = 1;
        return ag_cli_parse_step_float(a->command, "codeformer-fidelity", arg,
                                       &a->restore.codeformer_fidelity);
    case OPT_MAX_FACES: return ag_cli_parse_step_int(a->command, "max-faces", arg, &a->max_faces);
    case OPT_SIDE_BY_SIDE: a->side_by_side = 1; return 0;
    case OPT_QUALITY: return ag_cli_parse_int(a->command, "quality", arg, 1, 100, &a->quality);
    case OPT_SIZE:
        a->size_given = 1;
        return ag_cli_parse_step_int(a->command, "size", arg, &a->decode.portrait_size);
    case OPT_MAX_SIDE:
        if (ag_cli_parse_int(a->command, "max-side", arg, 0, 1 << 16, &a->decode.max_side))
            return -1;
        if (a->decode.max_side > 0 && a->decode.max_side < AG_MIN_SIDE)
            return ag_cli_usage_error(a->command, "--max-side: must be 0 or at least %d",
                                      AG_MIN_SIDE),
                   -1;
        return 0;
    case OPT_FORMAT:
        if ((a->format = ag_format_parse(arg)) < 0)
            return ag_cli_usage_error(a->command, "--format: '%s' is not png, jpg or webp", arg),
                   -1;
        return 0;
    default: return -1; /* not reached: getopt returns only the options in the table */
    }
}

/* Returns -1 to go on converting, or the exit status (after --help or a usage error). */
/* `animegan upscale` takes convert's photo options but not the generator's or the faces'. */
static int check_upscale_only(const convert_args *a) {
    if (a->portrait || a->all_faces || a->paste_faces || a->side_by_side || a->size_given ||
        a->face_model || a->max_faces || a->e.engine.resize != AG_RESIZE_DEFAULT)
        return ag_cli_usage_error("upscale", "the portrait, face, --side-by-side and --upsample "
                                             "options are convert's");
    if (a->restore_model || a->fidelity_given || a->aligned_given)
        return ag_cli_usage_error("upscale", "face restoration is restore's: 'animegan restore "
                                             "--model FILE --upscale N' does both");
    return -1;
}

static int parse_args(int argc, char **argv, convert_args *a) {
    const char *cmd = a->command;
    if (ag_cli_option_table_asked(argc, argv))
        return ag_cli_print_option_table(long_options, a->restore_only   ? refused_by_restore
                                                       : a->upscale_only ? refused_by_upscale
                                                                         : refused_by_convert);
    opterr = 0; /* our own one-line messages instead of getopt's */
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, short_options, long_options, NULL)) != -1) {
        if (opt == 'h')
            return a->restore_only   ? ag_cli_restore_help(long_options, short_options)
                   : a->upscale_only ? ag_cli_upscale_help(long_options, short_options)
                                     : print_help(),
                   AG_EXIT_OK;
        if (opt == '?' || opt == ':')
            return ag_cli_bad_option(cmd, opt, optopt, argv[optind - 1]);
        a->model_given |= opt == 'm';
        int handled = ag_cli_engine_option(cmd, opt, optarg, &a->e);
        if (!handled)
            handled = ag_cli_video_option(cmd, opt, optarg, &a->video);
        if (!handled)
            handled = ag_cli_upscale_option(cmd, opt, optarg, a->upscale_only, &a->up);
        if (handled < 0 || (!handled && parse_option(opt, optarg, a)))
            return AG_EXIT_USAGE;
    }
    if (optind == argc)
        return ag_cli_usage_error(cmd, "no input files");
    if (!a->output || !a->output[0])
        return ag_cli_usage_error(cmd, "missing -o OUTPUT");
    if (a->upscale_only) {
        a->up.model = a->model_given ? a->e.model : NULL;
        return check_upscale_only(a);
    }
    if (a->up.given && !a->up.scale)
        return ag_cli_usage_error(cmd, "--upscale-model, --tile, --tile-pad and --max-mb "
                                       "apply only with --upscale N");
    if (a->size_given && !a->portrait && !a->paste_faces)
        return ag_cli_usage_error(a->command,
                                  "--size applies only with --portrait or --paste-faces");
    if (a->all_faces && a->portrait != 1)
        return ag_cli_usage_error(a->command, "--all-faces applies only with --portrait (face)");
    if (a->paste_faces && (a->portrait || a->side_by_side))
        return ag_cli_usage_error(a->command,
                                  "--paste-faces keeps the whole photo: not with --portrait or "
                                  "--side-by-side");
    if (a->face_model && !a->paste_faces)
        return ag_cli_usage_error(a->command, "--face-model applies only with --paste-faces");
    int restoring = a->restore_model || a->restore_only;
    if (a->max_faces && a->portrait != 1 && !a->paste_faces && !restoring)
        return ag_cli_usage_error(a->command, "--max-faces applies only with --portrait, "
                                              "--paste-faces or --restore-faces");
    if ((a->fidelity_given || a->aligned_given) && !restoring)
        return ag_cli_usage_error(a->command,
                                  "--fidelity, --codeformer-fidelity and --aligned apply only "
                                  "to face restoration");
    if (restoring && (a->portrait || a->paste_faces))
        return ag_cli_usage_error(a->command, "face restoration is not combined with "
                                              "--portrait or --paste-faces");
    return -1;
}

/* ---- planning: which input goes to which output ------------------------------------------ */

static int is_directory(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_regular_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* "dir" + "/" + name + ext (ext may be ""), ag_malloc'ed; NULL when out of memory. */
static char *path_join(const char *dir, const char *name, size_t name_len, const char *ext) {
    size_t dir_len = strlen(dir);
    while (dir_len > 1 && dir[dir_len - 1] == '/')
        dir_len--;
    size_t size = dir_len + 1 + name_len + strlen(ext) + 1;
    char *path = ag_malloc(size);
    if (path)
        snprintf(path, size, "%.*s/%.*s%s", (int)dir_len, dir, (int)name_len, name, ext);
    return path;
}

static char *copy_string(const char *text) {
    size_t size = strlen(text) + 1;
    char *copy = ag_malloc(size);
    if (copy)
        memcpy(copy, text, size);
    return copy;
}

/* OUTPUT_DIR/<input's base name without extension>.<format extension> */
static char *output_in_directory(const char *dir, const char *input, int format) {
    const char *base = base_name(input);
    const char *dot = strrchr(base, '.');
    size_t stem_len = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    const char *ext = ag_format_extension((ag_format)format);
    char dotted[16];
    snprintf(dotted, sizeof dotted, ".%s", ext[0] == '.' ? ext + 1 : ext);
    return path_join(dir, base, stem_len, dotted);
}

static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/*
 * Append a job, taking ownership of both strings. Refuses (reporting why) an output that
 * would overwrite its own input or another input's result, since either would lose a file.
 * Returns -1 only when out of memory.
 */
static int add_job(job_list *jobs, char *input, char *output) {
    if (!input || !output)
        goto nomem;
    const char *clash = NULL;
    for (int i = 0; i < jobs->count && !clash; i++)
        if (strcmp(jobs->items[i].output, output) == 0)
            clash = jobs->items[i].input;
    if (clash || same_file(input, output)) {
        if (clash)
            fprintf(stderr, "animegan: %s: skipped, %s is already the output of %s\n", input,
                    output, clash);
        else
            fprintf(stderr, "animegan: %s: skipped, writing %s would overwrite the input\n", input,
                    output);
        jobs->failures++;
        ag_free(input);
        ag_free(output);
        return 0;
    }
    if (jobs->count == jobs->capacity) {
        int capacity = jobs->capacity ? 2 * jobs->capacity : 16;
        job *items = ag_realloc(jobs->items, (size_t)capacity * sizeof *items);
        if (!items)
            goto nomem;
        jobs->items = items;
        jobs->capacity = capacity;
    }
    jobs->items[jobs->count++] = (job){input, output};
    return 0;
nomem:
    ag_free(input);
    ag_free(output);
    return -1;
}

static void free_jobs(job_list *jobs) {
    for (int i = 0; i < jobs->count; i++) {
        ag_free(jobs->items[i].input);
        ag_free(jobs->items[i].output);
    }
    ag_free(jobs->items);
    *jobs = (job_list){0};
}

/* Files in a directory we try to decode; anything else there (notes, sidecars) is ignored. */
static int looks_like_image(const char *name) {
    static const char *const extensions[] = {"jpg", "jpeg", "png",  "webp", "tif", "tiff",
                                             "gif", "heic", "heif", "avif", "bmp"};
    const char *dot = strrchr(name, '.');
    if (name[0] == '.' || !dot)
        return 0;
    for (size_t i = 0; i < sizeof extensions / sizeof extensions[0]; i++)
        if (strcasecmp(dot + 1, extensions[i]) == 0)
            return 1;
    return 0;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of the image files directly in `dir`; NULL with *count -1 when out of memory. */
static char **list_images(DIR *dir, const char *dir_path, int *count) {
    char **names = NULL;
    int n = 0, capacity = 0;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (!looks_like_image(entry->d_name))
            continue;
        char *path = path_join(dir_path, entry->d_name, strlen(entry->d_name), "");
        int regular = path && is_regular_file(path);
        ag_free(path);
        if (!regular)
            continue;
        if (n == capacity) {
            capacity = capacity ? 2 * capacity : 32;
            char **grown = ag_realloc(names, (size_t)capacity * sizeof *grown);
            if (!grown)
                goto nomem;
            names = grown;
        }
        if (!(names[n] = copy_string(entry->d_name)))
            goto nomem;
        n++;
    }
    qsort(names, (size_t)n, sizeof *names, compare_names);
    *count = n;
    return names;
nomem:
    for (int i = 0; i < n; i++)
        ag_free(names[i]);
    ag_free(names);
    *count = -1;
    return NULL;
}

/* Queue every image directly inside `dir`; -1 only when out of memory. */
static int plan_directory(job_list *jobs, const char *dir_path, const char *output) {
    DIR *dir = opendir(dir_path);
    if (!dir) {
        fprintf(stderr, "animegan: cannot read directory %s: %s\n", dir_path, strerror(errno));
        jobs->failures++;
        return 0;
    }
    int count;
    char **names = list_images(dir, dir_path, &count);
    closedir(dir);
    if (count < 0)
        return -1;
    if (count == 0) {
        fprintf(stderr, "animegan: %s: no image files (jpg, png, webp, tiff, gif, heic)\n",
                dir_path);
        jobs->failures++;
    }
    int rc = 0;
    for (int i = 0; i < count; i++) {
        char *input = path_join(dir_path, names[i], strlen(names[i]), "");
        if (rc == 0)
            rc = add_job(jobs, input, output_in_directory(output, names[i], jobs->format));
        else
            ag_free(input);
        ag_free(names[i]);
    }
    ag_free(names);
    return rc;
}

/* Returns -1 to go on, or the exit status after a usage error or running out of memory. */
static int plan_jobs(job_list *jobs, char **inputs, int count, const convert_args *a) {
    const char *output = a->output;
    jobs->dir_mode = count > 1 || is_directory(output) || output[strlen(output) - 1] == '/';
    for (int i = 0; i < count; i++)
        jobs->dir_mode |= is_directory(inputs[i]);

    if (!jobs->dir_mode) {
        if ((jobs->format = ag_format_from_path(output)) < 0)
            return ag_cli_usage_error(
                a->command, "cannot tell the image format of %s: name it .png, .jpg or .webp",
                output);
        if (add_job(jobs, copy_string(inputs[0]), copy_string(output)))
            goto nomem;
        return -1;
    }
    struct stat st;
    int exists = stat(output, &st) == 0;
    if (!exists && ag_format_from_path(output) >= 0)
        return ag_cli_usage_error(a->command,
                                  "%s names an image file, but several inputs or an input "
                                  "directory need an output directory (name it without .%s, "
                                  "or convert one file)",
                                  output, strrchr(output, '.') + 1);
    if (exists && !S_ISDIR(st.st_mode))
        return ag_cli_usage_error(a->command,
                                  "%s is not a directory (several inputs or an input "
                                  "directory need an output directory)",
                                  output);
    jobs->format = a->format;
    for (int i = 0; i < count; i++) {
        int rc = is_directory(inputs[i])
                     ? plan_directory(jobs, inputs[i], output)
                     : add_job(jobs, copy_string(inputs[i]),
                               output_in_directory(output, inputs[i], jobs->format));
        if (rc)
            goto nomem;
    }
    return -1;
nomem:
    fputs("animegan: out of memory\n", stderr);
    return AG_EXIT_FAILED;
}

/* ---- running ----------------------------------------------------------------------------- */

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig) {
    (void)sig;
    interrupted = 1;
}

/*
 * In a batch, Ctrl-C finishes the image in flight and stops, so no save is cut short; the
 * handler resets itself, so a second Ctrl-C kills at once.
 */
static void catch_interrupts(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* mkdir -p: create `path` and its missing parents. */
static int make_directories(const char *path, ag_error *err) {
    char buf[4096];
    size_t len = strlen(path);
    if (len >= sizeof buf) {
        err->code = AG_E_IO;
        snprintf(err->message, sizeof err->message, "output directory name too long: %.64s...",
                 path);
        return AG_E_IO;
    }
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (mkdir(buf, 0777) != 0 && !(errno == EEXIST && is_directory(buf))) {
            err->code = AG_E_IO;
            if (errno == EEXIST)
                snprintf(err->message, sizeof err->message,
                         "cannot create directory %s: %s is not a directory", path, buf);
            else
                snprintf(err->message, sizeof err->message, "cannot create directory %s: %s", path,
                         strerror(errno));
            return AG_E_IO;
        }
        buf[i] = saved;
    }
    return 0;
}

typedef struct batch {
    ag_engine *engine;         /* NULL for `animegan upscale` and `restore` */
    ag_engine *restorer;       /* --restore-faces / restore: over the restoration model */
    ag_cli_upscaler *upscaler; /* NULL without upscaling */
    ag_cli_face_set *faces;    /* the face modes: the detector */
    ag_cli_face_mode *mode;
    const convert_args *args;
    const job_list *jobs;
    int dir_ready; /* the output directory exists */
    ag_progress progress;
} batch;

/*
 * decode -> stylise -> save. The output directory is created just before the first save so
 * that a batch where nothing converts leaves nothing behind. *fatal is set when the
 * directory cannot be created, since every later save would fail the same way.
 */
static int nomem(ag_error *err) {
    err->code = AG_E_NOMEM;
    snprintf(err->message, sizeof err->message, "out of memory");
    return AG_E_NOMEM;
}

/* OUTPUT with ".faceN" before its extension (--all-faces), ag_malloc'ed; NULL: no memory. */
static char *face_path(const char *output, int n) {
    const char *base = base_name(output);
    const char *dot = strrchr(base, '.');
    size_t stem = dot && dot != base ? (size_t)(dot - output) : strlen(output);
    size_t size = strlen(output) + 24;
    char *path = ag_malloc(size);
    if (path)
        snprintf(path, size, "%.*s.face%d%s", (int)stem, output, n, output + stem);
    return path;
}

/* ag_pipeline's step_started: the bar's stage (faces, then tiles). */
static void bar_stage(void *user, ag_pipeline_step step) {
    ((ag_progress *)user)->stage = step == AG_STEP_RESTORE ? "face" : "tile";
}

/* The request on every photo of the batch (the face modes' stylisation is faces_render). */
static ag_pipeline batch_pipeline(batch *b, int face_render) {
    ag_pipeline p;
    ag_pipeline_init(&p);
    p.restorer = b->restorer;
    p.detector = b->faces ? b->faces->detector : NULL;
    p.restore = b->args->restore;
    p.style = face_render ? NULL : b->engine;
    p.side_by_side = b->args->side_by_side;
    if (b->upscaler)
        p.upscaler = b->upscaler->engine, p.upscale = b->upscaler->options;
    p.progress = ag_progress_stage, p.progress_user = &b->progress;
    p.step_started = bar_stage;
    return p;
}

/* The face modes (--portrait, --paste-faces): faces_render stylises, one output per face
 * with --all-faces, then each goes through the rest of the pipeline (upscaling). */
static int render_faces(batch *b, const job *j, ag_image *in, ag_image *outs, int *count,
                        ag_error *err) {
    ag_pipeline rest = batch_pipeline(b, 1);
    rest.restorer = NULL;
    int rc = ag_cli_faces_render(b->faces, b->mode, in, j->input, outs, AG_FACE_MAX, count, err);
    for (int i = 0; rc == 0 && rest.upscaler && i < *count; i++) {
        ag_image face = outs[i];
        rc = ag_pipeline_run(&rest, &face, &outs[i], NULL, err);
    }
    return rc;
}

static int convert_one(batch *b, const job *j, int *fatal, ag_error *err) {
    ag_image in = {0}, outs[AG_FACE_MAX];
    int count = 0;
    ag_decode_options decode = b->args->decode;
    if (b->args->portrait == 1) /* the crop from the photo at up to 4096 px */
        decode.max_side = decode.max_side && decode.max_side < 4096 ? 4096 : decode.max_side;
    int rc = ag_image_decode_file(j->input, &decode, &in, err);
    if (rc == 0 && b->faces && !b->restorer) {
        rc = render_faces(b, j, &in, outs, &count, err);
    } else if (rc == 0) {
        ag_pipeline p = batch_pipeline(b, 0);
        ag_pipeline_result res;
        count = (rc = ag_pipeline_run(&p, &in, &outs[0], &res, err)) == 0;
        if (b->restorer && res.failed > AG_STEP_RESTORE && !b->args->quiet)
            ag_cli_restore_report(&b->args->restore, &res.faces, j->input);
    }
    b->progress.stage = NULL;
    if (rc == 0 && b->jobs->dir_mode && !b->dir_ready) {
        *fatal = rc = make_directories(b->args->output, err);
        b->dir_ready = rc == 0;
    }
    for (int i = 0; rc == 0 && i < count; i++) {
        char *path = b->args->all_faces ? face_path(j->output, i + 1) : NULL;
        if (b->args->all_faces && !path)
            rc = nomem(err);
        else
            rc = ag_image_save_file(&outs[i], path ? path : j->output, (ag_format)b->jobs->format,
                                    b->args->quality, err);
        ag_free(path);
    }
    for (int i = 0; i < count; i++)
        ag_image_fini(&outs[i]);
    ag_image_fini(&in);
    return rc;
}

/* One line per failure; the input is named unless the message already names a file. */
static void report_failure(batch *b, const job *j, int fatal, const ag_error *err) {
    ag_progress_clear(&b->progress);
    if (fatal || strstr(err->message, base_name(j->input)) ||
        strstr(err->message, base_name(j->output)))
        ag_cli_report(err);
    else
        fprintf(stderr, "animegan: %s: %s\n", j->input, err->message);
}

static int run_batch(ag_engine *engine, ag_engine *restorer, ag_cli_upscaler *upscaler,
                     ag_cli_face_set *faces, ag_cli_face_mode *mode, const job_list *jobs,
                     const convert_args *a) {
    batch b = {.engine = engine,
               .restorer = restorer,
               .upscaler = upscaler,
               .faces = faces,
               .mode = mode,
               .args = a,
               .jobs = jobs};
    int failures = jobs->failures;
    /* One photo gets the bar too when restoring or upscaling it takes minutes. */
    int long_steps = restorer || upscaler;
    ag_progress_init(&b.progress, jobs->count, a->quiet || (jobs->count < 2 && !long_steps));
    b.progress.verb = a->restore_only ? "restored" : a->upscale_only ? "upscaled" : NULL;
    if (jobs->count > 1)
        catch_interrupts();
    ag_progress_start(&b.progress);
    for (int i = 0; i < jobs->count && !interrupted; i++) {
        ag_error err = {0};
        int fatal = 0;
        int rc = convert_one(&b, &jobs->items[i], &fatal, &err);
        if (rc)
            report_failure(&b, &jobs->items[i], fatal, &err);
        if (fatal)
            return AG_EXIT_FAILED;
        failures += rc != 0;
        ag_progress_step(&b.progress, rc == 0);
    }
    if (interrupted) {
        ag_progress_clear(&b.progress);
        fprintf(stderr, "animegan: interrupted after %d of %d images\n", b.progress.done,
                jobs->count);
        return AG_EXIT_INTERRUPTED;
    }
    ag_progress_finish(&b.progress);
    return failures ? AG_EXIT_FAILED : AG_EXIT_OK;
}

/* --codeformer-fidelity given with a restorer that is not CodeFormer (it would be ignored). */
static int codeformer_fidelity_refused(const convert_args *a, const ag_model *restorer,
                                       ag_error *err) {
    const char *arch = ag_model_get_info(restorer)->architecture;
    if (!a->codeformer_fidelity_given || !strcmp(arch, "codeformer"))
        return 0;
    err->code = AG_E_ARG;
    snprintf(err->message, sizeof err->message,
             "--codeformer-fidelity applies only to a CodeFormer checkpoint: %s is %s",
             a->restore_model, !strcmp(arch, "gpen") ? "GPEN" : "GFPGAN");
    return 1;
}

static int convert_jobs(const job_list *jobs, const convert_args *a) {
    if (jobs->count == 0)
        return AG_EXIT_FAILED; /* every input was rejected while planning, and reported */
    ag_engine_options options = a->e.engine;
    if (options.threads <= 0)
        options.threads = ag_cpu_count();
    ag_precision_choice precision;
    if (ag_cli_resolve_precision(&options, &precision))
        return AG_EXIT_FAILED;
    ag_model *model = NULL, *face_model = NULL, *restore_model = NULL;
    ag_engine *engine = NULL, *face_engine = NULL, *restorer = NULL;
    ag_cli_face_set faces = {0};
    int face_mode = a->portrait == 1 || a->paste_faces || (a->restore_model && !a->restore.aligned);
    ag_cli_face_mode mode = {.paste = a->paste_faces,
                             .all_faces = a->all_faces,
                             .side_by_side = a->side_by_side,
                             .size = a->decode.portrait_size,
                             .max_faces = a->max_faces};
    ag_error err = {0};
    int status = AG_EXIT_FAILED;
    ag_cli_upscaler upscaler = {0};
    int generator = !a->restore_only && !a->upscale_only;
    int rc = generator ? ag_model_load(a->e.model, &model, &err) : AG_OK;
    if (rc == 0 && generator)
        rc = ag_engine_create(model, &options, &engine, &err);
    if (rc == 0 && a->restore_model)
        rc = ag_cli_restorer_open(a->restore_model, &a->e.engine, &restore_model, &restorer, &err);
    if (rc == 0 && a->restore_model && codeformer_fidelity_refused(a, restore_model, &err))
        rc = err.code, status = AG_EXIT_USAGE;
    if (rc == 0 && (a->upscale_only || a->up.scale))
        rc = ag_cli_upscaler_open(&upscaler, &a->up, &options, &err);
    if (rc == 0 && face_mode)
        rc = ag_cli_faces_open(&faces, &options, &err);
    /* The face crops get their own engine, planned once at --size. */
    if (rc == 0 && a->paste_faces && a->face_model)
        rc = ag_model_load(a->face_model, &face_model, &err);
    if (rc == 0 && a->paste_faces)
        rc = ag_engine_create(face_model ? face_model : model, &options, &face_engine, &err);
    mode.engine = engine, mode.face_engine = face_engine;
    if (rc == 0)
        status = run_batch(engine, restorer, upscaler.engine ? &upscaler : NULL,
                           face_mode ? &faces : NULL, &mode, jobs, a);
    else
        ag_cli_report(&err);
    ag_cli_upscaler_close(&upscaler);
    ag_engine_destroy(face_engine);
    ag_model_destroy(face_model);
    ag_engine_destroy(restorer);
    ag_model_destroy(restore_model);
    ag_cli_faces_close(&faces);
    ag_engine_destroy(engine);
    ag_model_destroy(model);
    return status;
}

/* A clip with its faces restored (convert or restore --restore-faces): the one pipeline over
 * every frame: restore, stylise (not for `restore`), --upscale. */
static int restore_clip(const char *input, const convert_args *a) {
    ag_engine_options options = a->e.engine;
    if (options.threads <= 0)
        options.threads = ag_cpu_count();
    ag_precision_choice precision;
    if (ag_cli_resolve_precision(&options, &precision))
        return AG_EXIT_FAILED;
    ag_model *model = NULL, *restore_model = NULL;
    ag_engine *engine = NULL, *restorer = NULL;
    ag_cli_face_set faces = {0};
    ag_cli_upscaler upscaler = {0};
    ag_error err = {0};
    int status = AG_EXIT_FAILED;
    int rc = a->restore_only ? AG_OK : ag_model_load(a->e.model, &model, &err);
    if (rc == 0 && !a->restore_only)
        rc = ag_engine_create(model, &options, &engine, &err);
    if (rc == 0)
        rc = ag_cli_restorer_open(a->restore_model, &a->e.engine, &restore_model, &restorer, &err);
    if (rc == 0 && codeformer_fidelity_refused(a, restore_model, &err))
        rc = err.code, status = AG_EXIT_USAGE;
    if (rc == 0 && a->up.scale)
        rc = ag_cli_upscaler_open(&upscaler, &a->up, &options, &err);
    if (rc == 0 && !a->restore.aligned)
        rc = ag_cli_faces_open(&faces, &options, &err);
    if (rc == 0) {
        ag_pipeline p;
        ag_pipeline_init(&p);
        p.restorer = restorer, p.detector = faces.detector, p.restore = a->restore;
        p.style = engine, p.side_by_side = a->side_by_side;
        p.upscaler = upscaler.engine, p.upscale = upscaler.options;
        int scale = upscaler.engine ? a->up.scale : 1;
        status = ag_cli_video_pipeline(input, a->output, &p, scale, a->decode.max_side, &a->video,
                                       a->quiet);
    } else {
        ag_cli_report(&err);
    }
    ag_cli_upscaler_close(&upscaler);
    ag_cli_faces_close(&faces);
    ag_engine_destroy(restorer);
    ag_model_destroy(restore_model);
    ag_engine_destroy(engine);
    ag_model_destroy(model);
    return status;
}

int ag_cli_convert(int argc, char **argv) {
    return ag_cli_convert_command(argc, argv, AG_CLI_CONVERT);
}

int ag_cli_convert_command(int argc, char **argv, ag_cli_kind kind) {
    convert_args a;
    memset(&a, 0, sizeof a);
    ag_cli_engine_args_init(&a.e);
    ag_cli_upscale_args_init(&a.up);
    static const char *const names[] = {"convert", "restore", "upscale"};
    a.command = names[kind];
    a.restore_only = kind == AG_CLI_RESTORE;
    a.upscale_only = kind == AG_CLI_UPSCALE;
    ag_restore_options_init(&a.restore);
    /* Restoration and upscaling are for detail: inputs keep their size unless asked. */
    a.decode =
        (ag_decode_options){.max_side = kind == AG_CLI_CONVERT ? 1024 : 0, .portrait_size = 512};
    const char *default_model = a.e.model;
    a.quality = 90;
    a.format = AG_FORMAT_PNG;
    ag_cli_video_args_init(&a.video);

    int status = parse_args(argc, argv, &a);
    if (status >= 0)
        return status;
    if (a.max_faces)
        a.restore.max_faces = a.max_faces;
    if (a.restore_only &&
        (status = ag_cli_restore_check(&a.restore_model, a.e.model, default_model,
                                       a.portrait || a.paste_faces || a.side_by_side ||
                                           a.e.engine.resize != AG_RESIZE_DEFAULT)) >= 0)
        return status;
    int route = argc - optind == 1 ? ag_cli_video_route(argv[optind], a.output) : 0;
    if (route == AG_CLI_ROUTE_FAILED)
        return AG_EXIT_FAILED;
    if (route == AG_CLI_ROUTE_VIDEO) {
        if (a.portrait || a.paste_faces)
            return ag_cli_usage_error("convert", "--portrait and --paste-faces apply to photos, "
                                                 "not video");
        if (a.restore_model)
            return restore_clip(argv[optind], &a);
        int upscaling = a.upscale_only || a.up.scale;
        return ag_cli_video_run(argv[optind], a.output, &a.e, upscaling ? &a.up : NULL,
                                !a.upscale_only, a.decode.max_side, a.side_by_side, &a.video,
                                a.quiet);
    }
    if (ag_cli_video_given(&a.video))
        return ag_cli_usage_error("convert", "--crf, --preset, --start and --duration apply to "
                                             "video outputs (.mp4, .mov, .mkv, .webm)");
    job_list jobs = {0};
    status = plan_jobs(&jobs, argv + optind, argc - optind, &a);
    if (status < 0)
        status = convert_jobs(&jobs, &a);
    free_jobs(&jobs);
    return status;
}
