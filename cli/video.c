/*
 * video.c - `animegan convert clip.mp4 -o anime.mp4`: the video branch of convert. convert.c
 * parses the command line (the video options through ag_cli_video_option) and hands one
 * input whose output is a video container, or whose content probes as a video, to
 * ag_cli_video_run, which loads the model, converts with ag_video_convert and draws the
 * progress: a bar on a terminal, a line every few seconds otherwise.
 */
#include "commands.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define LOG_EVERY_S 5.0

void ag_cli_video_args_init(ag_cli_video_args *v) {
    memset(v, 0, sizeof *v);
    v->crf = -1;
}

/* Seconds as "12.5", "1:30" or "1:02:03.5"; -1 when malformed. */
static double parse_time(const char *text) {
    double total = 0;
    int fields = 0;
    const char *s = text;
    for (;;) {
        char *end = NULL;
        errno = 0;
        if (!(*s >= '0' && *s <= '9'))
            return -1;
        double v = strtod(s, &end);
        if (errno || end == s || !isfinite(v) || v < 0)
            return -1;
        total = total * 60 + v;
        if (++fields > 3)
            return -1;
        if (*end == '\0')
            break;
        if (*end != ':' || memchr(s, '.', (size_t)(end - s)))
            return -1;
        s = end + 1;
    }
    return total;
}

int ag_cli_video_option(const char *command, int opt, const char *arg, ag_cli_video_args *v) {
    static const char *const presets[] = {"ultrafast", "superfast", "veryfast", "faster",  "fast",
                                          "medium",    "slow",      "slower",   "veryslow"};
    switch (opt) {
    case AG_CLI_OPT_CRF: return ag_cli_parse_int(command, "crf", arg, 0, 63, &v->crf) ? -1 : 1;
    case AG_CLI_OPT_MAX_FRAMES:
        return ag_cli_parse_int(command, "max-frames", arg, 1, INT_MAX, &v->max_frames) ? -1 : 1;
    case AG_CLI_OPT_PRESET:
        for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
            if (strcmp(arg, presets[i]) == 0)
                return v->preset = presets[i], 1;
        return ag_cli_usage_error(command,
                                  "--preset: '%s' is not an x264 preset (ultrafast ... "
                                  "veryslow)",
                                  arg),
               -1;
    case AG_CLI_OPT_START:
    case AG_CLI_OPT_DURATION: {
        double t = parse_time(arg);
        if (t < 0 || t > 1e7)
            return ag_cli_usage_error(command,
                                      "--%s: '%s' is not a time (seconds, MM:SS or HH:MM:SS)",
                                      opt == AG_CLI_OPT_START ? "start" : "duration", arg),
                   -1;
        if (opt == AG_CLI_OPT_START)
            v->start_s = t, v->start_given = 1;
        else
            v->duration_s = t, v->duration_given = 1;
        if (opt == AG_CLI_OPT_DURATION && t == 0)
            return ag_cli_usage_error(command, "--duration: must be more than 0"), -1;
        return 1;
    }
    default: return 0;
    }
}

int ag_cli_video_given(const ag_cli_video_args *v) {
    return v->crf >= 0 || v->preset || v->start_given || v->duration_given || v->max_frames;
}

/* ---- routing ------------------------------------------------------------------------------- */

static int is_directory(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int ag_cli_video_route(const char *input, const char *output) {
    if (is_directory(input))
        return AG_CLI_ROUTE_PHOTO;
    const char *dot = strrchr(output, '.');
    int animation = dot && (strcasecmp(dot, ".webp") == 0 || strcasecmp(dot, ".gif") == 0);
    if (ag_video_output_supported(output) && !animation)
        return AG_CLI_ROUTE_VIDEO;
    /* A still-image output: a video input is a mistake worth one clear line, but animated
     * GIFs and WebPs keep their first-frame behaviour, and anything that is not a video goes
     * on to the image decoder (and its messages). */
    ag_video_info info;
    ag_error err = {0};
    int video = ag_video_probe(input, NULL, &info, &err) == 0;
    /* .webp and .gif name photos too: a video or an animation becomes an animation. */
    if (video && animation)
        return AG_CLI_ROUTE_VIDEO;
    /* An animation beyond the limits (a huge canvas, too many frames) is no photo either,
     * and a .gif is written only as an animation: the probe's word is the one that counts,
     * but for a still image (AG_E_UNSUPPORTED), whose messages are the photo path's. */
    int gif = dot && strcasecmp(dot, ".gif") == 0;
    if (!video && animation && (err.code == AG_E_LIMIT || (gif && err.code != AG_E_UNSUPPORTED))) {
        fprintf(stderr, "animegan: %s\n", err.message);
        return AG_CLI_ROUTE_FAILED;
    }
    if (video && strcmp(info.container, "gif") != 0 && strcmp(info.container, "webp") != 0) {
        fprintf(stderr,
                "animegan: %s is a video (%s, %s): name the output .mp4, .mov, .mkv or .webm\n",
                input, info.container, info.video_codec);
        return AG_CLI_ROUTE_FAILED;
    }
    return AG_CLI_ROUTE_PHOTO;
}

/* ---- progress ------------------------------------------------------------------------------- */

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig) {
    (void)sig;
    interrupted = 1;
}

typedef struct video_progress {
    int terminal, quiet;
    double start_s, last_draw_s;
    int drawn;
} video_progress;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void format_duration(char *buf, size_t size, double seconds) {
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, size, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, size, "%ld:%02ld", s / 60, s % 60);
}

static int on_progress(void *user, int64_t done, int64_t total) {
    video_progress *p = user;
    if (interrupted)
        return 1;
    if (p->quiet)
        return 0;
    double now = now_s();
    double elapsed = now - p->start_s;
    if (!p->terminal && now - p->last_draw_s < LOG_EVERY_S && done < total)
        return 0;
    p->last_draw_s = now;
    double fps = elapsed > 0 ? (double)done / elapsed : 0;
    char eta[32] = "--:--";
    if (fps > 0)
        format_duration(eta, sizeof eta, (double)(total - done) / fps);
    if (!p->terminal) {
        fprintf(stderr, "animegan: frame %lld of %lld, %.2f frames/s, ETA %s\n", (long long)done,
                (long long)total, fps, eta);
        return 0;
    }
    enum { BAR = 30 };
    fputs("\r[", stderr);
    for (int i = 0; i < BAR; i++)
        fputc(i < (double)BAR * (double)done / (double)(total ? total : 1) ? '#' : '.', stderr);
    fprintf(stderr, "] %lld/%lld frames  %.2f fps  ETA %s\033[K", (long long)done, (long long)total,
            fps, eta);
    fflush(stderr);
    p->drawn = 1;
    return 0;
}

/* ---- the conversion ------------------------------------------------------------------------ */

/* Each frame, when it is upscaled: the pipeline of the style (none when upscaling only),
 * then the upscaler. */
static int chain_frame(void *user, const ag_image *in, int side_by_side, ag_image *out,
                       ag_error *err) {
    (void)side_by_side; /* the pipeline's, the same */
    return ag_pipeline_apply(user, in, out, NULL, err);
}

/* The style's engine (unless upscaling only) and the upscaler's (when upscaling). */
static int open_engines(const ag_cli_engine_args *e, const ag_engine_options *options,
                        const ag_cli_upscale_args *up, int style, ag_model **model,
                        ag_engine **engine, ag_cli_upscaler *upscaler, ag_error *err) {
    int rc = AG_OK;
    if (style && (rc = ag_model_load(e->model, model, err)) == AG_OK)
        rc = ag_engine_create(*model, options, engine, err);
    if (rc == AG_OK && up)
        rc = ag_cli_upscaler_open(upscaler, up, options, err);
    return rc;
}

/* vo from the command line's video options, progress on stderr. */
static void video_options(ag_video_options *vo, int max_side, int side_by_side,
                          const ag_cli_video_args *v, video_progress *progress) {
    ag_video_options_init(vo);
    vo->max_side = max_side;
    vo->side_by_side = side_by_side;
    vo->crf = v->crf;
    vo->preset = v->preset;
    vo->start_s = v->start_s;
    vo->duration_s = v->duration_s;
    vo->limits.max_frames = v->max_frames;
    vo->progress = on_progress;
    vo->progress_user = progress;
}

/* Ctrl-C and SIGTERM cancel at the next frame, which removes the temporary file; the
 * handler stays, so a second Ctrl-C cannot leave a partial file behind either. */
static void catch_interrupts(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* The conversion and its report; the exit status. */
static int convert_clip(const char *input, const char *output, ag_engine *engine,
                        const ag_video_options *vo, video_progress *progress, int quiet) {
    ag_error err = {0};
    ag_video_result res;
    progress->start_s = progress->last_draw_s = now_s();
    int rc = ag_video_convert(engine, input, output, vo, &res, &err);
    if (progress->drawn)
        fputs("\r\033[K", stderr);
    if (rc == 0) {
        if (!quiet) {
            char took[32];
            format_duration(took, sizeof took, now_s() - progress->start_s);
            fprintf(stderr, "converted %s: %lld frames of %dx%d, %.2f s, in %s; %s\n", output,
                    (long long)res.frames, res.width, res.height, res.duration_s, took,
                    res.audio_note[0] ? res.audio_note : "no audio");
        }
        return AG_EXIT_OK;
    }
    if (rc == AG_E_CANCELLED) {
        fprintf(stderr, "animegan: interrupted; %s not written\n", output);
        return AG_EXIT_INTERRUPTED;
    }
    if (strstr(err.message, input) || strstr(err.message, output))
        ag_cli_report(&err);
    else
        fprintf(stderr, "animegan: %s: %s\n", input, err.message);
    return AG_EXIT_FAILED;
}

int ag_cli_video_pipeline(const char *input, const char *output, const ag_pipeline *p,
                          int out_scale, int max_side, const ag_cli_video_args *v, int quiet) {
    ag_video_options vo;
    video_progress progress = {.terminal = isatty(STDERR_FILENO), .quiet = quiet};
    video_options(&vo, max_side, p->side_by_side, v, &progress);
    vo.stylize = chain_frame;
    vo.stylize_user = (void *)p;
    vo.out_scale = out_scale;
    catch_interrupts();
    return convert_clip(input, output, NULL, &vo, &progress, quiet);
}

int ag_cli_video_run(const char *input, const char *output, const ag_cli_engine_args *e,
                     const ag_cli_upscale_args *up, int style, int max_side, int side_by_side,
                     const ag_cli_video_args *v, int quiet) {
    ag_engine_options options = e->engine;
    if (options.threads <= 0)
        options.threads = ag_cpu_count();
    ag_video_options vo;
    video_progress progress = {.terminal = isatty(STDERR_FILENO), .quiet = quiet};
    video_options(&vo, max_side, side_by_side, v, &progress);
    catch_interrupts();

    ag_model *model = NULL;
    ag_engine *engine = NULL;
    ag_cli_upscaler upscaler = {0};
    ag_pipeline chain;
    ag_pipeline_init(&chain);
    ag_error err = {0};
    int status = AG_EXIT_FAILED;
    if (open_engines(e, &options, up, style, &model, &engine, &upscaler, &err) == 0) {
        if (up) { /* frames come out `scale` times larger: the upscaler's, or its model's */
            chain.style = engine, chain.side_by_side = side_by_side;
            chain.upscaler = upscaler.engine, chain.upscale = upscaler.options;
            vo.stylize = chain_frame;
            vo.stylize_user = &chain;
            vo.out_scale = up->scale ? up->scale : ag_model_get_info(upscaler.model)->scale;
        }
        status = convert_clip(input, output, engine, &vo, &progress, quiet);
    } else {
        ag_cli_report(&err);
    }
    ag_cli_upscaler_close(&upscaler);
    ag_engine_destroy(engine);
    ag_model_destroy(model);
    return status;
}
