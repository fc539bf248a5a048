/*
 * fuse.c - `animegan fuse --source S --target T -o OUTPUT`: the source's face fused into
 * the target photo (ag_face_fuse, src/face/fuse.c), the faces found by the bundled detector
 * (cli/faces.c's set-up), optionally stylised with a model before or after.
 */
#include "commands.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FUSE_MAX_PIXELS ((size_t)100000000) /* either image's header: refused above this */

typedef struct fuse_args {
    const char *source, *target, *output;
    int source_face, target_face; /* 1-based, as `animegan faces` prints */
    const char *like[2];          /* --source-like, --target-like: a photo of the person */
    unsigned face_given;          /* bit 0: --source-face, bit 1: --target-face */
    ag_fuse_options fuse;
    ag_cli_engine_args e;      /* e.model: --style, NULL for none */
    int anime_template;        /* --style stylises the source before fusing */
    const char *restore_model; /* --restore-model: sharpens a small source (--enhance) */
    int quality, bench, runs;
    int clip; /* the target is a video and the output a video container (cli/video.c) */
    ag_cli_video_args video;
} fuse_args;

enum {
    OPT_SOURCE_FACE = 256,
    OPT_TARGET_FACE,
    OPT_SOURCE_LIKE,
    OPT_TARGET_LIKE,
    OPT_SHAPE,
    OPT_TEXTURE,
    OPT_MODE,
    OPT_SMOOTH,
    OPT_KEEP_OCCLUDERS,
    OPT_PAINT_OCCLUDERS,
    OPT_ENHANCE,
    OPT_RESTORE_MODEL,
    OPT_BRIGHTNESS,
    OPT_CONTRAST,
    OPT_SATURATION,
    OPT_SIZE,
    OPT_MAX_WINDOW,
    OPT_STYLE,
    OPT_ANIME_TEMPLATE,
    OPT_QUALITY,
    OPT_BENCH,
    OPT_RUNS,
};

/* --option's value in its row's range (src/pipeline/options.c). */
static int parse_float(const char *option, const char *text, float *out) {
    return ag_cli_parse_step_float("fuse", option, text, out);
}

static void print_help(const struct option *table, const char *shorts) {
    fputs("Usage: animegan fuse --source S --target T -o OUTPUT [options]\n"
          "\n"
          "Fuse the face of photo S into photo T (the template: pose, hair, background): the\n"
          "source's 468 landmarks aligned to the target's, the geometry interpolated, both\n"
          "faces warped over a triangulation, the source's colours moved to the target's skin,\n"
          "and the result blended in seamlessly (Poisson). The output has the size of T\n"
          "(or --size); pixels away from the face are T's, bit for bit.\n"
          "\n"
          "Options:\n"
          "  -s, --source PATH        the face to put in (required)\n"
          "  -T, --target PATH        the photo it goes into (required)\n"
          "  -o, --output PATH        output file; .png, .jpg or .webp (required)\n"
          "      --precision P        fp32, bf16, int8 or auto, for --style (default: auto)\n"
          "  -t, --threads N          worker threads, 0 = every core (default: 0)\n"
          "      --quality N          JPEG/WebP quality 1-100 (default: 90)\n"
          "      --crf, --preset, --start, --duration, --max-frames  as convert's, when T is\n"
          "                           a clip and OUTPUT .mp4, .mov, .mkv or .webm: the face\n"
          "                           fused into every frame (tracked, its landmarks\n"
          "                           smoothed; frames without it unchanged), sound and\n"
          "                           timing kept; --size shrinks frames over N\n"
          "      --bench              also print one JSON line: the fusion's stage times\n"
          "                           (median of --runs, landmarks known) and detection's\n"
          "      --runs N             fusions timed by --bench, 1-1000 (default: 20)\n"
          "  -h, --help               show this help\n",
          stdout);
    ag_cli_print_step_help(AG_CMD_FUSE, table, shorts, 27);
    fputs("\n"
          "Exit status: 0 written, 1 an image, a face or the model failed (no output is\n"
          "left), 2 bad command line.\n",
          stdout);
}

/* One fuse option: 0 handled, -1 bad value (reported), 1 not one of them. */
static int parse_option(int opt, const char *arg, fuse_args *a) {
    ag_fuse_options *f = &a->fuse;
    switch (opt) {
    case 's': a->source = arg; return 0;
    case 'T': a->target = arg; return 0;
    case 'o': a->output = arg; return 0;
    case OPT_SOURCE_FACE:
        a->face_given |= 1;
        return ag_cli_parse_step_int("fuse", "source-face", arg, &a->source_face);
    case OPT_TARGET_FACE:
        a->face_given |= 2;
        return ag_cli_parse_step_int("fuse", "target-face", arg, &a->target_face);
    case OPT_SOURCE_LIKE: a->like[0] = arg; return 0;
    case OPT_TARGET_LIKE: a->like[1] = arg; return 0;
    case 'r':
        if (parse_float("ratio", arg, &f->shape_ratio))
            return -1;
        f->texture_ratio = f->shape_ratio;
        return 0;
    case OPT_SHAPE: return parse_float("shape-ratio", arg, &f->shape_ratio);
    case OPT_TEXTURE: return parse_float("texture-ratio", arg, &f->texture_ratio);
    case OPT_MODE: {
        int m = ag_cli_parse_step_choice("fuse", "mode", arg);
        return m < 0 ? -1 : (f->mode = (ag_fuse_mode)m, 0);
    }
    case OPT_SMOOTH: return parse_float("smooth", arg, &f->smooth);
    case OPT_KEEP_OCCLUDERS: f->keep_occluders = 1; return 0;
    case OPT_PAINT_OCCLUDERS: f->keep_occluders = 0; return 0;
    case OPT_ENHANCE: {
        int e = ag_cli_parse_step_choice("fuse", "enhance", arg);
        return e < 0 ? -1 : (f->enhance = (ag_fuse_enhance)e, 0);
    }
    case OPT_RESTORE_MODEL: a->restore_model = arg; return 0;
    case OPT_BRIGHTNESS: return parse_float("brightness", arg, &f->brightness);
    case OPT_CONTRAST: return parse_float("contrast", arg, &f->contrast);
    case OPT_SATURATION: return parse_float("saturation", arg, &f->saturation);
    case OPT_MAX_WINDOW: {
        int v;
        if (ag_cli_parse_step_int("fuse", "max-window-pixels", arg, &v))
            return -1;
        return f->max_window_pixels = v, 0;
    }
    case OPT_SIZE:
        if (!strcmp(arg, "original"))
            return f->size = 0, 0;
        return ag_cli_parse_step_int("fuse", "size", arg, &f->size);
    case OPT_STYLE: a->e.model = arg; return 0;
    case OPT_ANIME_TEMPLATE: a->anime_template = 1; return 0;
    case OPT_QUALITY: return ag_cli_parse_int("fuse", "quality", arg, 1, 100, &a->quality);
    case OPT_BENCH: a->bench = 1; return 0;
    case OPT_RUNS: return ag_cli_parse_int("fuse", "runs", arg, 1, 1000, &a->runs);
    default: return 1;
    }
}

static int parse_args(int argc, char **argv, fuse_args *a) {
    static const char short_options[] = ":s:T:o:r:t:h";
    static const struct option long_options[] = {
        {"source", required_argument, NULL, 's'},
        {"target", required_argument, NULL, 'T'},
        {"output", required_argument, NULL, 'o'},
        {"source-face", required_argument, NULL, OPT_SOURCE_FACE},
        {"target-face", required_argument, NULL, OPT_TARGET_FACE},
        {"source-like", required_argument, NULL, OPT_SOURCE_LIKE},
        {"target-like", required_argument, NULL, OPT_TARGET_LIKE},
        {"ratio", required_argument, NULL, 'r'},
        {"shape-ratio", required_argument, NULL, OPT_SHAPE},
        {"texture-ratio", required_argument, NULL, OPT_TEXTURE},
        {"mode", required_argument, NULL, OPT_MODE},
        {"smooth", required_argument, NULL, OPT_SMOOTH},
        {"keep-occluders", no_argument, NULL, OPT_KEEP_OCCLUDERS},
        {"paint-occluders", no_argument, NULL, OPT_PAINT_OCCLUDERS},
        {"enhance", required_argument, NULL, OPT_ENHANCE},
        {"restore-model", required_argument, NULL, OPT_RESTORE_MODEL},
        {"max-window-pixels", required_argument, NULL, OPT_MAX_WINDOW},
        {"brightness", required_argument, NULL, OPT_BRIGHTNESS},
        {"contrast", required_argument, NULL, OPT_CONTRAST},
        {"saturation", required_argument, NULL, OPT_SATURATION},
        {"size", required_argument, NULL, OPT_SIZE},
        {"style", required_argument, NULL, OPT_STYLE},
        {"anime-template", no_argument, NULL, OPT_ANIME_TEMPLATE},
        {"precision", required_argument, NULL, 'P'},
        {"threads", required_argument, NULL, 't'},
        {"quality", required_argument, NULL, OPT_QUALITY},
        {"bench", no_argument, NULL, OPT_BENCH},
        {"runs", required_argument, NULL, OPT_RUNS},
        {"help", no_argument, NULL, 'h'},
        AG_CLI_VIDEO_LONG_OPTIONS,
        {NULL, 0, NULL, 0},
    };
    if (ag_cli_option_table_asked(argc, argv))
        return ag_cli_print_option_table(long_options, NULL), 1;
    opterr = 0;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, short_options, long_options, NULL)) != -1) {
        if (opt == 'h')
            return print_help(long_options, short_options), 1;
        int rc = parse_option(opt, optarg, a);
        if (rc == 1 && (opt == 't' || opt == 'P'))
            rc = ag_cli_engine_option("fuse", opt, optarg, &a->e) == 1 ? 0 : -1;
        if (rc == 1 && opt >= AG_CLI_OPT_CRF && opt <= AG_CLI_OPT_MAX_FRAMES)
            rc = ag_cli_video_option("fuse", opt, optarg, &a->video) == 1 ? 0 : -1;
        if (rc == 1)
            return ag_cli_bad_option("fuse", opt, optopt, argv[optind - 1]), -1;
        if (rc)
            return -1;
    }
    if (optind < argc)
        return ag_cli_usage_error("fuse", "unexpected argument '%s'", argv[optind]), -1;
    if (!a->source || !a->target || !a->output)
        return ag_cli_usage_error("fuse", "--source, --target and -o are all needed"), -1;
    if (a->fuse.enhance == AG_FUSE_ENHANCE_RESTORE && !a->restore_model)
        return ag_cli_usage_error("fuse", "--enhance restore needs --restore-model"), -1;
    for (int i = 0; i < 2; i++)
        if (a->like[i] && (a->face_given >> i & 1))
            return ag_cli_usage_error("fuse", "--%s-like and --%s-face both choose the %s face",
                                      i ? "target" : "source", i ? "target" : "source",
                                      i ? "target" : "source"),
                   -1;
    if (a->anime_template && !a->e.model)
        return ag_cli_usage_error("fuse", "--anime-template applies only with --style"), -1;
    int route = ag_cli_video_route(a->target, a->output);
    if (route == AG_CLI_ROUTE_FAILED)
        return -1;
    if ((a->clip = route == AG_CLI_ROUTE_VIDEO) && a->bench)
        return ag_cli_usage_error("fuse", "--bench times photos, not clips"), -1;
    if (!a->clip && ag_cli_video_given(&a->video))
        return ag_cli_usage_error("fuse", "the video options apply only to a clip"), -1;
    if (!a->clip && ag_format_from_path(a->output) < 0)
        return ag_cli_usage_error("fuse", "%s: the extension is not .png, .jpg or .webp",
                                  a->output),
               -1;
    return 0;
}

/* The n-th (1-based) face of `im`, largest first, or (like: a descriptor) the one most like it;
 * a precise message when there is none. */
static int find_face(ag_face_detector *d, ag_face_embedder *e, const float *like,
                     const ag_image *im, const char *path, const char *which, int n, ag_face *faces,
                     ag_face *out, ag_error *err) {
    ag_face_options fo = {.max_faces = AG_FACE_MAX};
    int count = 0;
    int rc = ag_faces_detect(d, im, &fo, faces, AG_FACE_MAX, &count, NULL, err);
    if (rc)
        return rc;
    if (count == 0) {
        snprintf(err->message, sizeof err->message, "%s: no face found in the %s image", path,
                 which);
        return err->code = AG_E_ARG;
    }
    if (like && (n = ag_cli_face_like(e, im, which, faces, count, like, err)) < 0)
        return n;
    if (n > count) {
        snprintf(err->message, sizeof err->message, "%s: --%s-face %d, but the %s has %d face%s",
                 path, which, n, which, count, count == 1 ? "" : "s");
        return err->code = AG_E_ARG;
    }
    *out = faces[n - 1];
    if (!out->has_landmarks) {
        snprintf(err->message, sizeof err->message,
                 "%s: the %s face has no landmarks (FaceMesh did not confirm it)", path, which);
        return err->code = AG_E_ARG;
    }
    return AG_OK;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int by_value(const void *pa, const void *pb) {
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

/* --bench: `runs` fusions with the landmarks known; one JSON line of medians. */
static int bench(const ag_image *s, const ag_face *sf, const ag_image *t, const ag_face *tf,
                 const fuse_args *a, const ag_fuse_options *fo, double detect_ms, ag_error *err) {
    double *ms = ag_malloc(sizeof *ms * (size_t)a->runs * 6);
    if (!ms)
        return err->code = AG_E_NOMEM;
    ag_fuse_timing tm = {0};
    int rc = AG_OK, ow = 0, oh = 0;
    /* At --size, time the fusion on the resized target (ratio 0 returns just that), not the
     * resize: the figure is "a fusion of a target that size". */
    ag_image sized = {0};
    ag_face *sized_face = NULL;
    ag_fuse_options o = *fo;
    if (o.size) {
        ag_fuse_options r = o;
        r.shape_ratio = r.texture_ratio = 0;
        sized_face = ag_malloc(sizeof *sized_face);
        rc = sized_face ? ag_face_fuse(s, sf, t, tf, &r, &sized, NULL, err) : AG_E_NOMEM;
        if (rc == AG_OK) {
            float kx = (float)sized.width / t->width, ky = (float)sized.height / t->height;
            *sized_face = *tf;
            for (int i = 0; i < AG_FACE_LANDMARKS; i++)
                sized_face->landmarks[i][0] *= kx, sized_face->landmarks[i][1] *= ky;
            sized_face->box[0] *= kx, sized_face->box[2] *= kx;
            sized_face->box[1] *= ky, sized_face->box[3] *= ky;
            t = &sized, tf = sized_face, o.size = 0;
        }
    }
    for (int i = 0; i < a->runs && rc == AG_OK; i++) {
        ag_image out = {0};
        double c0 = cpu_ms();
        rc = ag_face_fuse(s, sf, t, tf, &o, &out, &tm, err);
        double row[6] = {tm.total_ms, tm.geometry_ms, tm.warp_ms,
                         tm.color_ms, tm.blend_ms,    cpu_ms() - c0};
        ow = out.width, oh = out.height;
        ag_image_fini(&out);
        for (int k = 0; k < 6; k++)
            ms[(size_t)k * a->runs + i] = row[k];
    }
    if (rc == AG_OK) {
        static const char *const names[6] = {"fuse_ms",  "geometry_ms", "warp_ms",
                                             "color_ms", "blend_ms",    "fuse_cpu_ms"};
        printf("{\"width\": %d, \"height\": %d, \"runs\": %d", ow, oh, a->runs);
        for (int k = 0; k < 6; k++) {
            double *col = ms + (size_t)k * a->runs;
            qsort(col, (size_t)a->runs, sizeof *col, by_value);
            printf(", \"%s\": %.3f", names[k], col[a->runs / 2]);
        }
        printf(", \"region_px\": %d, \"face_px\": %d, \"cycles\": %d, \"residual\": %.4f, "
               "\"enhanced\": %d, \"enhance_ms\": %.3f, \"detect_ms\": %.3f, \"cpu\": \"%s\"}\n",
               tm.region_px, tm.face_px, tm.cycles, (double)tm.residual, tm.enhanced, tm.enhance_ms,
               detect_ms, ag_cpu_get_info()->model);
    }
    ag_image_fini(&sized);
    ag_free(sized_face);
    ag_free(ms);
    return rc;
}

/* The track's identity (ag_face_track_options.embed): the face-recognition descriptor. */
static int embed_face(void *user, const ag_image *frame, const ag_face *face, float *vec,
                      int *dim) {
    ag_error err = {0};
    *dim = AG_FACE_DESCRIPTOR;
    return ag_face_embed(user, frame, face, vec, &err);
}

/* A clip: the pipeline's fusion step over every frame, the face followed (by identity with
 * the face-recognition model: --target-like's person, else the first frame's face); the exit
 * status. */
static int fuse_clip(const fuse_args *a, const ag_image *src, const ag_face *sf,
                     ag_face_detector *detector, ag_face_embedder *embedder, const float *like,
                     ag_engine *style, ag_error *err) {
    ag_face_track_options to;
    ag_face_track_options_init(&to);
    to.face = a->target_face;
    ag_model *embed_model = NULL;
    ag_face_embedder *own = NULL;
    ag_engine_options eo = {.threads = a->e.engine.threads, .precision = AG_PRECISION_FP32};
    if (!embedder && ag_face_embed_model_load(&embed_model, err) == AG_OK &&
        ag_face_embedder_create(embed_model, &eo, &own, err) == AG_OK)
        embedder = own;
    if (embedder) /* else by overlap and position only */
        to.embed = embed_face, to.embed_user = embedder, to.min_similarity = 0.9f;
    to.reference = like, to.reference_dim = like ? AG_FACE_DESCRIPTOR : 0;
    ag_face_track *track = NULL;
    if (ag_face_track_create(&to, &track, err)) {
        ag_face_embedder_destroy(own);
        ag_model_destroy(embed_model);
        return ag_cli_report(err), AG_EXIT_FAILED;
    }
    ag_pipeline p;
    ag_pipeline_init(&p);
    p.fuse_source = src, p.fuse_source_face = sf, p.fuse_track = track, p.fuse = a->fuse;
    p.fuse.size = 0; /* --size is the frames' max side */
    p.detector = detector;
    p.style = style;
    int status = ag_cli_video_pipeline(a->target, a->output, &p, 1, a->fuse.size, &a->video, 0);
    ag_face_track_destroy(track);
    ag_face_embedder_destroy(own);
    ag_model_destroy(embed_model);
    return status;
}

/* The engine that sharpens a small source (--enhance), loaded only when the fusion will use
 * it: the --restore-model, else the bundled upscaler at the scale that brings the source's
 * face to the target's (2, 3 or 4). */
typedef struct enhancer {
    ag_model *model;
    ag_engine *engine;
} enhancer;

static int open_enhancer(const fuse_args *a, const ag_face *sf, const ag_face *tf,
                         const ag_engine_options *eo, ag_fuse_options *fo, enhancer *en,
                         ag_error *err) {
    double factor;
    if (!ag_face_fuse_wants_enhance(sf, tf, fo, &factor))
        return AG_OK;
    if (a->restore_model && fo->enhance != AG_FUSE_ENHANCE_UPSCALE) {
        int rc = ag_cli_restorer_open(a->restore_model, eo, &en->model, &en->engine, err);
        return rc ? rc : (fo->restorer = en->engine, AG_OK);
    }
    if (fo->enhance == AG_FUSE_ENHANCE_RESTORE)
        return AG_OK;
    int scale = factor <= 2 ? 2 : factor <= 3 ? 3 : 4;
    int rc = ag_upscaler_load("esrgan-slim", scale, &en->model, err);
    rc = rc ? rc : ag_engine_create(en->model, eo, &en->engine, err);
    return rc ? rc : (fo->upscaler = en->engine, AG_OK);
}

/* The whole command after parsing: every resource released at the one exit. */
static int run(const fuse_args *a, int *status, ag_error *err) {
    ag_decode_options dec = {.max_pixels = FUSE_MAX_PIXELS};
    ag_image s = {0}, t = {0}, styled = {0}, out = {0};
    ag_cli_face_set fs = {0};
    ag_model *model = NULL;
    ag_engine *engine = NULL;
    ag_model *embed_model = NULL;
    ag_face_embedder *embedder = NULL;
    float like[2][AG_FACE_DESCRIPTOR];
    ag_face *faces = ag_malloc(sizeof *faces * (AG_FACE_MAX + 2));
    if (!faces)
        return err->code = AG_E_NOMEM;
    ag_face *sf = faces + AG_FACE_MAX, *tf = sf + 1;
    ag_engine_options eo = a->e.engine;
    eo.threads = eo.threads > 0 ? eo.threads : ag_cpu_count();
    ag_precision_choice choice;
    int rc = ag_image_decode_file(a->source, &dec, &s, err);
    rc = rc || a->clip ? rc : ag_image_decode_file(a->target, &dec, &t, err);
    if (rc == AG_OK && a->e.model) {
        rc = ag_cli_resolve_precision(&eo, &choice) ? AG_E_UNSUPPORTED : AG_OK;
        rc = rc ? rc : ag_model_load(a->e.model, &model, err);
        rc = rc ? rc : ag_engine_create(model, &eo, &engine, err);
    }
    rc = rc ? rc : ag_cli_faces_open(&fs, &eo, err);
    rc = rc ? rc : ag_cli_faces_like(a->like, fs.detector, &eo, &embed_model, &embedder, like, err);
    double t0 = now_ms();
    rc = rc ? rc
            : find_face(fs.detector, embedder, a->like[0] ? like[0] : NULL, &s, a->source, "source",
                        a->source_face, faces, sf, err);
    if (!a->clip)
        rc = rc ? rc
                : find_face(fs.detector, embedder, a->like[1] ? like[1] : NULL, &t, a->target,
                            "target", a->target_face, faces, tf, err);
    double detect_ms = now_ms() - t0;
    const ag_image *src = &s;
    if (rc == AG_OK && engine && a->anime_template) {
        rc = ag_stylize(engine, &s, 0, &styled, err);
        src = &styled;
    }
    ag_fuse_options fo = a->fuse;
    enhancer en = {0};
    if (!a->clip) /* a clip's faces are known frame by frame: no enhancer (yet) */
        rc = rc ? rc : open_enhancer(a, sf, tf, &eo, &fo, &en, err);
    /* The one pipeline: fuse, then (--style) stylise. */
    ag_pipeline p;
    ag_pipeline_init(&p);
    p.fuse_source = src, p.fuse_source_face = sf, p.fuse_target = tf, p.fuse = fo;
    p.style = a->anime_template ? NULL : engine;
    if (rc == AG_OK && a->clip)
        *status =
            fuse_clip(a, src, sf, fs.detector, embedder, a->like[1] ? like[1] : NULL, p.style, err);
    else if (rc == AG_OK)
        rc = ag_pipeline_apply(&p, &t, &out, NULL, err);
    const ag_image *result = &out;
    if (rc == AG_OK && a->bench)
        rc = bench(src, sf, &t, tf, a, &fo, detect_ms, err);
    if (rc == AG_OK && !a->clip)
        rc = ag_image_save_file(result, a->output, (ag_format)ag_format_from_path(a->output),
                                a->quality, err);
    ag_image_fini(&out);
    ag_image_fini(&styled);
    ag_face_embedder_destroy(embedder);
    ag_model_destroy(embed_model);
    ag_cli_faces_close(&fs);
    ag_engine_destroy(en.engine);
    ag_model_destroy(en.model);
    ag_engine_destroy(engine);
    ag_model_destroy(model);
    ag_image_fini(&t);
    ag_image_fini(&s);
    ag_free(faces);
    return rc;
}

int ag_cli_fuse(int argc, char **argv) {
    fuse_args a;
    memset(&a, 0, sizeof a);
    ag_cli_engine_args_init(&a.e);
    a.e.model = NULL;
    ag_fuse_options_init(&a.fuse);
    a.source_face = a.target_face = 1;
    a.quality = 90, a.runs = 20;
    ag_cli_video_args_init(&a.video);
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc > 0 ? AG_EXIT_OK : AG_EXIT_USAGE;
    ag_error err = {0};
    int status = AG_EXIT_OK;
    if (run(&a, &status, &err)) {
        if (err.message[0])
            ag_cli_report(&err);
        return AG_EXIT_FAILED;
    }
    return status;
}
