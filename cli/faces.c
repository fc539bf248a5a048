/*
 * faces.c - `animegan faces IMAGE... [--json]`: what the face detector finds (src/face/),
 * one JSON object per image and line with --json; and the detector set-up convert.c shares
 * (the two bundled face networks, loaded once per run).
 */
#include "commands.h"

#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int ag_cli_faces_open(ag_cli_face_set *f, const ag_engine_options *options, ag_error *err) {
    memset(f, 0, sizeof *f);
    ag_engine_options o = options ? *options : (ag_engine_options){0};
    o.precision = AG_PRECISION_FP32; /* small networks: fp32 is fast enough and exact */
    o.resize = AG_RESIZE_DEFAULT;
    int rc = ag_face_models_load(&f->detect, &f->mesh, err);
    if (rc == AG_OK)
        rc = ag_face_detector_create(f->detect, f->mesh, &o, &f->detector, err);
    if (rc)
        ag_cli_faces_close(f);
    return rc;
}

void ag_cli_faces_close(ag_cli_face_set *f) {
    ag_face_detector_destroy(f->detector);
    ag_model_destroy(f->mesh);
    ag_model_destroy(f->detect);
    memset(f, 0, sizeof *f);
}

static void print_help(void) {
    fputs("Usage: animegan faces IMAGE... [options]\n"
          "\n"
          "Find the faces in images (MediaPipe BlazeFace full range + FaceMesh, bundled as\n"
          "face-detect and face-mesh) and print them, largest first, in the pixel coordinates\n"
          "of the decoded, EXIF-oriented image.\n"
          "\n"
          "Options:\n"
          "      --json           one JSON object per image and line: {\"image\", \"width\",\n"
          "                       \"height\", \"faces\": [{\"score\", \"box\": [x0, y0, x1, y1],\n"
          "                       \"keypoints\": 6 x [x, y], \"quad\": 4 x [x, y]}]}\n"
          "      --min-score S    detection threshold, 0.05-1 (default: 0.6)\n"
          "      --max-faces N    faces reported per image, 1-64 (default: 8)\n"
          "      --single-pass    the whole-image pass only (no tiles for small faces)\n"
          "      --bench          time the detector instead: per image, one JSON line with\n"
          "                       the median ms of each stage over --runs runs (after one\n"
          "                       untimed): ms_median, ms_min, detect_warp_ms, detect_net_ms,\n"
          "                       decode_ms, mesh_warp_ms, mesh_net_ms, passes, faces, cpu\n"
          "      --runs N         timed runs of --bench, 1-10000 (default: 20)\n"
          "  -t, --threads N      worker threads, 0 = every core (default: 0)\n"
          "  -h, --help           show this help\n"
          "\n"
          "Keypoints: the subject's right eye, left eye, nose tip, mouth centre, right ear,\n"
          "left ear. The quad is the FFHQ-aligned crop --portrait uses (top-left,\n"
          "bottom-left, bottom-right, top-right).\n"
          "Exit status: 0 every image read, 1 an image or the models failed, 2 bad command line.\n",
          stdout);
}

static void json_string(FILE *out, const char *text) {
    fputc('"', out);
    for (const char *p = text; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

/* One image as the JSON line of `animegan faces --json` and POST /api/v1/faces. */
void ag_cli_faces_json(FILE *out, const char *image, int width, int height, const ag_face *faces,
                       int count) {
    fputs("{\"image\": ", out);
    json_string(out, image);
    fprintf(out, ", \"width\": %d, \"height\": %d, \"faces\": [", width, height);
    for (int i = 0; i < count; i++) {
        const ag_face *f = &faces[i];
        fprintf(out, "%s{\"score\": %.4f, \"box\": [%.2f, %.2f, %.2f, %.2f], \"keypoints\": [",
                i ? ", " : "", (double)f->score, (double)f->box[0], (double)f->box[1],
                (double)f->box[2], (double)f->box[3]);
        for (int k = 0; k < 6; k++)
            fprintf(out, "%s[%.2f, %.2f]", k ? ", " : "", (double)f->keypoints[k][0],
                    (double)f->keypoints[k][1]);
        fputs("], \"quad\": [", out);
        for (int k = 0; k < 4; k++)
            fprintf(out, "%s[%.2f, %.2f]", k ? ", " : "", (double)f->quad[k][0],
                    (double)f->quad[k][1]);
        fputs("]}", out);
    }
    fputs("]}\n", out);
}

static void print_text(const char *image, int width, int height, const ag_face *faces, int count,
                       int found) {
    printf("%s: %dx%d, %d face%s", image, width, height, count, count == 1 ? "" : "s");
    if (found > count)
        printf(" (of %d found; --max-faces)", found);
    putchar('\n');
    for (int i = 0; i < count; i++) {
        const ag_face *f = &faces[i];
        double dx = (double)f->quad[3][0] - (double)f->quad[0][0];
        double dy = (double)f->quad[3][1] - (double)f->quad[0][1];
        printf("  face %d: score %.3f, box (%.1f, %.1f)-(%.1f, %.1f), crop %.0f px at %.1f "
               "degrees%s\n",
               i + 1, (double)f->score, (double)f->box[0], (double)f->box[1], (double)f->box[2],
               (double)f->box[3], sqrt(dx * dx + dy * dy), atan2(dy, dx) * 180.0 / M_PI,
               f->has_landmarks ? "" : " (no landmarks: from the keypoints)");
    }
}

static int nomem(ag_error *err) {
    err->code = AG_E_NOMEM;
    snprintf(err->message, sizeof err->message, "out of memory");
    return AG_E_NOMEM;
}

static int by_value(const void *pa, const void *pb) {
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

/* The median of column `col` of runs x 7 (total, then the five stages, then passes). */
static double median_of(double *rows, int runs, int col, double *scratch) {
    for (int i = 0; i < runs; i++)
        scratch[i] = rows[(size_t)i * 7 + col];
    qsort(scratch, (size_t)runs, sizeof *scratch, by_value);
    return runs % 2 ? scratch[runs / 2] : 0.5 * (scratch[runs / 2 - 1] + scratch[runs / 2]);
}

/* `faces --bench`: one untimed call, then `runs` timed ones of ag_faces_detect on `im`. */
static int bench_image(ag_face_detector *d, const char *path, const ag_image *im,
                       const ag_face_options *fo, ag_face *faces, int runs, int threads,
                       ag_error *err) {
    double *rows = ag_malloc(sizeof *rows * (size_t)runs * 8);
    if (!rows)
        return nomem(err);
    double *scratch = rows + (size_t)runs * 7, best = 1e300;
    int n = 0, rc = AG_OK;
    for (int i = -1; i < runs && rc == AG_OK; i++) {
        rc = ag_faces_detect(d, im, fo, faces, AG_FACE_MAX, &n, NULL, err);
        ag_face_timing t;
        ag_face_detector_last_timing(d, &t);
        if (i < 0 || rc)
            continue;
        double row[7] = {t.total_ms,     t.detect_warp_ms, t.detect_net_ms, t.decode_ms,
                         t.mesh_warp_ms, t.mesh_net_ms,    t.passes};
        memcpy(rows + (size_t)i * 7, row, sizeof row);
        best = t.total_ms < best ? t.total_ms : best;
    }
    if (rc == AG_OK) {
        printf("{\"image\": ");
        json_string(stdout, path);
        printf(", \"width\": %d, \"height\": %d, \"faces\": %d, \"threads\": %d, \"runs\": %d, "
               "\"passes\": %.0f, \"ms_median\": %.3f, \"ms_min\": %.3f",
               im->width, im->height, n, threads, runs, median_of(rows, runs, 6, scratch),
               median_of(rows, runs, 0, scratch), best);
        static const char *const names[5] = {"detect_warp_ms", "detect_net_ms", "decode_ms",
                                             "mesh_warp_ms", "mesh_net_ms"};
        for (int k = 0; k < 5; k++)
            printf(", \"%s\": %.3f", names[k], median_of(rows, runs, k + 1, scratch));
        printf(", \"cpu\": ");
        json_string(stdout, ag_cpu_get_info()->model);
        printf("}\n");
    }
    ag_free(rows);
    return rc;
}

enum { OPT_JSON = 256, OPT_MIN_SCORE, OPT_MAX_FACES, OPT_SINGLE_PASS, OPT_BENCH, OPT_RUNS };

int ag_cli_faces(int argc, char **argv) {
    static const struct option long_options[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"min-score", required_argument, NULL, OPT_MIN_SCORE},
        {"max-faces", required_argument, NULL, OPT_MAX_FACES},
        {"single-pass", no_argument, NULL, OPT_SINGLE_PASS},
        {"bench", no_argument, NULL, OPT_BENCH},
        {"runs", required_argument, NULL, OPT_RUNS},
        {"threads", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    if (ag_cli_option_table_asked(argc, argv))
        return ag_cli_print_option_table(long_options, NULL);
    int json = 0, threads = 0, max_faces = 8, single_pass = 0, bench = 0, runs = 20;
    double min_score = 0.6;
    opterr = 0;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, ":t:h", long_options, NULL)) != -1) {
        char *end;
        switch (opt) {
        case 'h': return print_help(), AG_EXIT_OK;
        case OPT_JSON: json = 1; break;
        case OPT_SINGLE_PASS: single_pass = 1; break;
        case OPT_BENCH: bench = 1; break;
        case OPT_RUNS:
            if (ag_cli_parse_int("faces", "runs", optarg, 1, 10000, &runs))
                return AG_EXIT_USAGE;
            break;
        case 't':
            if (ag_cli_parse_int("faces", "threads", optarg, 0, 4096, &threads))
                return AG_EXIT_USAGE;
            break;
        case OPT_MAX_FACES:
            if (ag_cli_parse_int("faces", "max-faces", optarg, 1, AG_FACE_MAX, &max_faces))
                return AG_EXIT_USAGE;
            break;
        case OPT_MIN_SCORE:
            min_score = strtod(optarg, &end);
            if (*end || end == optarg || !(min_score >= 0.05 && min_score <= 1.0))
                return ag_cli_usage_error("faces", "--min-score: '%s' is not in [0.05, 1]", optarg);
            break;
        default: return ag_cli_bad_option("faces", opt, optopt, argv[optind - 1]);
        }
    }
    if (optind == argc)
        return ag_cli_usage_error("faces", "no input images");
    ag_engine_options eo = {.threads = threads > 0 ? threads : ag_cpu_count()};
    ag_cli_face_set f;
    ag_error err = {0};
    if (ag_cli_faces_open(&f, &eo, &err)) {
        ag_cli_report(&err);
        return AG_EXIT_FAILED;
    }
    ag_face *faces = ag_malloc(sizeof *faces * AG_FACE_MAX);
    if (!faces) {
        ag_cli_faces_close(&f);
        fputs("animegan: out of memory\n", stderr);
        return AG_EXIT_FAILED;
    }
    ag_face_options fo = {
        .min_score = (float)min_score, .max_faces = max_faces, .single_pass = single_pass};
    int status = AG_EXIT_OK;
    for (int i = optind; i < argc; i++) {
        ag_image im = {0};
        ag_decode_options d = {0}; /* full size: coordinates of the decoded image */
        int n = 0, found = 0;
        int rc = ag_image_decode_file(argv[i], &d, &im, &err);
        if (rc == AG_OK && bench)
            rc = bench_image(f.detector, argv[i], &im, &fo, faces, runs, eo.threads, &err);
        else if (rc == AG_OK)
            rc = ag_faces_detect(f.detector, &im, &fo, faces, AG_FACE_MAX, &n, &found, &err);
        if (rc) {
            fflush(stdout);
            if (strstr(err.message, argv[i]))
                ag_cli_report(&err);
            else
                fprintf(stderr, "animegan: %s: %s\n", argv[i], err.message);
            status = AG_EXIT_FAILED;
        } else if (bench) {
            /* the JSON line is printed */
        } else if (json) {
            ag_cli_faces_json(stdout, argv[i], im.width, im.height, faces, n);
        } else {
            print_text(argv[i], im.width, im.height, faces, n, found);
        }
        if (rc == AG_OK && found > n)
            fprintf(stderr, "animegan: %s: %d faces found, %d kept (--max-faces)\n", argv[i], found,
                    n);
        ag_image_fini(&im);
    }
    ag_free(faces);
    ag_cli_faces_close(&f);
    return status;
}

/* ---- the face modes of `animegan convert` ------------------------------------------------ */

/* The centre square of `in` as a quad (the fallback of --portrait when no face is found). */
static void centre_quad(const ag_image *in, float quad[4][2]) {
    float s = (float)(in->width < in->height ? in->width : in->height);
    float x0 = (in->width - s) / 2, y0 = (in->height - s) / 2;
    const float q[4][2] = {{x0, y0}, {x0, y0 + s}, {x0 + s, y0 + s}, {x0 + s, y0}};
    memcpy(quad, q, sizeof q);
}

int ag_cli_faces_render(ag_cli_face_set *fs, const ag_cli_face_mode *mode, const ag_image *in,
                        const char *label, ag_image *outs, int capacity, int *count,
                        ag_error *err) {
    *count = 0;
    ag_face *faces = ag_malloc(sizeof *faces * AG_FACE_MAX);
    if (!faces)
        return nomem(err);
    ag_face_options fo = {.max_faces = mode->max_faces};
    int n = 0, found = 0;
    int rc = ag_faces_detect(fs->detector, in, &fo, faces, AG_FACE_MAX, &n, &found, err);
    if (rc == AG_OK && found > n)
        fprintf(stderr, "animegan: %s: %d faces found, the %d largest used (--max-faces)\n", label,
                found, n);
    if (rc == AG_OK && mode->paste) {
        rc = ag_stylize_paste_faces(mode->engine, mode->face_engine, in, faces, n, mode->size,
                                    &outs[0], err);
        *count = rc == AG_OK;
    } else if (rc == AG_OK) {
        if (n == 0) {
            fprintf(stderr, "animegan: %s: no face found; used the centre crop\n", label);
            memset(&faces[0], 0, sizeof faces[0]);
            centre_quad(in, faces[0].quad);
            n = 1;
        }
        int want = mode->all_faces ? n : 1;
        want = want > capacity ? capacity : want;
        for (int i = 0; i < want && rc == AG_OK; i++) {
            ag_image crop = {0};
            rc = ag_face_align(in, &faces[i], mode->size, &crop, err);
            if (rc == AG_OK)
                rc = ag_stylize(mode->engine, &crop, mode->side_by_side, &outs[i], err);
            ag_image_fini(&crop);
            *count += rc == AG_OK;
        }
    }
    ag_free(faces);
    if (rc) {
        for (int i = 0; i < *count; i++)
            ag_image_fini(&outs[i]);
        *count = 0;
    }
    return rc;
}
