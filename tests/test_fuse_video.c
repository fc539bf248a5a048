/*
 * test_fuse_video.c - fusion of a clip's frames (issue 31 item 7): the pipeline's fuse step
 * (src/pipeline/pipeline.c) and the face track (src/face/track.c), on real faces
 * (tests/data/faces: obama.jpg into biden.jpg):
 *   - the step is ag_face_fuse byte for byte (the face given, or the N-th detected); a still
 *     image without the face is an error naming the step, a clip's frame passes unchanged;
 *   - smoothing: a face swaying by known whole pixels under sensor noise; the fused face's
 *     position in each output (the centroid of what the fusion changed, the known sway taken
 *     off) and the landmarks given to the fusion jitter less from frame to frame with the
 *     track than with each frame's own detection;
 *   - the track follows its face by overlap when another grows larger, loses it when it
 *     leaves and finds it again by identity when it comes back elsewhere (not the other
 *     face), and restarts the filter at a cut.
 */
#include "test.h"

#include "../src/util/util_internal.h"

#include <stdint.h>

#define DATA AG_SOURCE_DIR "/tests/data/"
#define MODELS AG_SOURCE_DIR "/models/"
#define SIDE 224  /* the clip's frames: a window of biden.jpg halved (300 x 300) */
#define FRAMES 10 /* of the swaying face */
#define NOISE 6   /* sensor noise, +- grey levels */

static ag_model *det_model, *mesh_model;
static ag_face_detector *detector;
static ag_image source, target;
static ag_face source_face;

/* *out <- im halved by a 2x2 box (RGB). */
static int halve(const ag_image *im, ag_image *out) {
    *out = (ag_image){im->width / 2, im->height / 2, 3, NULL};
    out->pixels = ag_malloc((size_t)out->width * out->height * 3);
    CHECK(out->pixels);
    for (int y = 0; y < out->height; y++)
        for (int x = 0; x < out->width; x++)
            for (int c = 0; c < 3; c++) {
                const uint8_t *p = im->pixels + ((size_t)(2 * y) * im->width + 2 * x) * 3 + c;
                size_t row = (size_t)im->width * 3;
                out->pixels[((size_t)y * out->width + x) * 3 + c] =
                    (uint8_t)((p[0] + p[3] + p[row] + p[row + 3] + 2) / 4);
            }
    return 0;
}

static int setup(void) {
    if (detector)
        return 0;
    ag_error err = {0};
    CHECK_OK(ag_model_load(MODELS "face-detect.safetensors", &det_model, &err), &err);
    CHECK_OK(ag_model_load(MODELS "face-mesh.safetensors", &mesh_model, &err), &err);
    ag_engine_options eo = {.threads = 2};
    CHECK_OK(ag_face_detector_create(det_model, mesh_model, &eo, &detector, &err), &err);
    ag_decode_options d = {0};
    CHECK_OK(ag_image_decode_file(DATA "faces/obama.jpg", &d, &source, &err), &err);
    ag_image full = {0};
    CHECK_OK(ag_image_decode_file(DATA "faces/biden.jpg", &d, &full, &err), &err);
    if (halve(&full, &target))
        return 1;
    ag_image_fini(&full);
    ag_face_options fo = {.max_faces = 1};
    int n = 0;
    CHECK_OK(ag_faces_detect(detector, &source, &fo, &source_face, 1, &n, NULL, &err), &err);
    CHECK(n == 1 && source_face.has_landmarks);
    return 0;
}

/* The sway of frame k, in whole pixels (the true motion). */
static void sway(int k, int *x, int *y) {
    *x = 38 + (int)lround(6 * sin(2 * M_PI * k / 40.0));
    *y = 20 + (int)lround(4 * sin(2 * M_PI * k / 29.0));
}

/* Frame k: the SIDE x SIDE window of the target at sway(k), with seeded noise. */
static int make_frame(int k, ag_image *out) {
    int ox, oy;
    sway(k, &ox, &oy);
    *out = (ag_image){SIDE, SIDE, 3, ag_malloc((size_t)SIDE * SIDE * 3)};
    CHECK(out->pixels);
    uint32_t seed = 2463534242u + (uint32_t)k * 7919u;
    for (int y = 0; y < SIDE; y++)
        for (int x = 0; x < SIDE; x++)
            for (int c = 0; c < 3; c++) {
                seed ^= seed << 13, seed ^= seed >> 17, seed ^= seed << 5;
                int v = target.pixels[((size_t)(y + oy) * target.width + x + ox) * 3 + c] +
                        (int)(seed % (2 * NOISE + 1)) - NOISE;
                out->pixels[((size_t)y * SIDE + x) * 3 + c] = (uint8_t)(v < 0     ? 0
                                                                        : v > 255 ? 255
                                                                                  : v);
            }
    return 0;
}

/* Mean squared frame-to-frame step of points p[k] (k = 0..n), in px^2. */
static double jitter(const double (*p)[2], int n) {
    double s = 0;
    for (int k = 1; k < n; k++)
        s += (p[k][0] - p[k - 1][0]) * (p[k][0] - p[k - 1][0]) +
             (p[k][1] - p[k - 1][1]) * (p[k][1] - p[k - 1][1]);
    return s / (n - 1);
}

/* The centroid of what the fusion changed (|out - in| summed over the bands), in the
 * target photo's coordinates (the sway added back). */
static void change_centroid(const ag_image *in, const ag_image *out, int k, double c[2]) {
    double sw = 0, sx = 0, sy = 0;
    for (int y = 0; y < in->height; y++)
        for (int x = 0; x < in->width; x++) {
            const uint8_t *a = in->pixels + ((size_t)y * in->width + x) * 3;
            const uint8_t *b = out->pixels + ((size_t)y * in->width + x) * 3;
            int d = abs(a[0] - b[0]) + abs(a[1] - b[1]) + abs(a[2] - b[2]);
            sw += d, sx += d * (x + 0.5), sy += d * (y + 0.5);
        }
    int ox, oy;
    sway(k, &ox, &oy);
    c[0] = sw > 0 ? sx / sw + ox : 0, c[1] = sw > 0 ? sy / sw + oy : 0;
}

/* The landmarks' mean, sway added back. */
static void landmark_mean(const ag_face *f, int k, double c[2]) {
    int ox, oy;
    sway(k, &ox, &oy);
    c[0] = c[1] = 0;
    for (int i = 0; i < AG_FACE_LANDMARKS; i++)
        c[0] += (double)f->landmarks[i][0], c[1] += (double)f->landmarks[i][1];
    c[0] = c[0] / AG_FACE_LANDMARKS + ox, c[1] = c[1] / AG_FACE_LANDMARKS + oy;
}

/* The mean frame-to-frame step of every landmark, sway taken off, in px^2. */
static double landmark_jitter(const ag_face *faces, int n) {
    double s = 0;
    for (int k = 1; k < n; k++) {
        int ax, ay, bx, by;
        sway(k - 1, &ax, &ay), sway(k, &bx, &by);
        for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
            double dx = (double)(faces[k].landmarks[i][0] - faces[k - 1].landmarks[i][0]) + bx - ax;
            double dy = (double)(faces[k].landmarks[i][1] - faces[k - 1].landmarks[i][1]) + by - ay;
            s += dx * dx + dy * dy;
        }
    }
    return s / ((n - 1) * (double)AG_FACE_LANDMARKS);
}

static int same_image(const ag_image *a, const ag_image *b) {
    return a->width == b->width && a->height == b->height && a->bands == b->bands &&
           !memcmp(a->pixels, b->pixels, (size_t)a->width * a->height * a->bands);
}

/* The step is ag_face_fuse; a still image without the face fails in the step, a clip's
 * frame without it passes unchanged. */
LEAK_CHECKED(test_fuse_step) {
    ag_error err = {0};
    ag_image frame = {0}, by_hand = {0}, given = {0}, detected = {0}, blank = {0}, passed = {0};
    if (make_frame(0, &frame))
        return 1;
    ag_face tf;
    ag_face_options fo = {.max_faces = 1};
    int n = 0;
    CHECK_OK(ag_faces_detect(detector, &frame, &fo, &tf, 1, &n, NULL, &err), &err);
    ag_fuse_options o;
    ag_fuse_options_init(&o);
    CHECK_OK(ag_face_fuse(&source, &source_face, &frame, &tf, &o, &by_hand, NULL, &err), &err);
    ag_pipeline p;
    ag_pipeline_init(&p);
    p.fuse_source = &source, p.fuse_source_face = &source_face, p.fuse_target = &tf;
    ag_pipeline_result res;
    CHECK_OK(ag_pipeline_apply(&p, &frame, &given, &res, &err), &err);
    CHECK(res.fused && same_image(&given, &by_hand));
    p.fuse_target = NULL, p.detector = detector, p.fuse_target_face = 1;
    CHECK_OK(ag_pipeline_apply(&p, &frame, &detected, &res, &err), &err);
    CHECK(res.fused && res.fused_face == 0 && same_image(&detected, &by_hand));
    /* No face: a still image fails in the step; a clip's frame passes as it is. */
    blank = (ag_image){SIDE, SIDE, 3, ag_calloc((size_t)SIDE * SIDE, 3)};
    CHECK(blank.pixels);
    CHECK(ag_pipeline_apply(&p, &blank, &passed, &res, &err) == AG_E_ARG);
    CHECK(res.failed == AG_STEP_FUSE && !passed.pixels && strstr(err.message, "no face"));
    ag_face_track *track = NULL;
    CHECK_OK(ag_face_track_create(NULL, &track, &err), &err);
    p.fuse_track = track;
    CHECK_OK(ag_pipeline_apply(&p, &blank, &passed, &res, &err), &err);
    CHECK(!res.fused && res.fused_face == -1 && same_image(&passed, &blank));
    printf("  the step: ag_face_fuse's bytes (face given and detected); no face: \"%s\" for a "
           "photo, a frame passes unchanged\n",
           "no face found in the image");
    ag_face_track_destroy(track);
    ag_image_fini(&passed);
    ag_image_fini(&blank);
    ag_image_fini(&detected);
    ag_image_fini(&given);
    ag_image_fini(&by_hand);
    ag_image_fini(&frame);
    return 0;
}

/* One pass over the swaying clip: each frame fused through the pipeline (with a track, or
 * each frame's own detection); the fused face's centroid and the landmarks the fusion got
 * (a second track fed the same detections: the pipeline's own makes the same). */
static int fuse_clip(int smoothed, double (*centroid)[2], ag_face *given) {
    ag_error err = {0};
    ag_face_track *track = NULL, *mirror = NULL;
    if (smoothed) {
        CHECK_OK(ag_face_track_create(NULL, &track, &err), &err);
        CHECK_OK(ag_face_track_create(NULL, &mirror, &err), &err);
    }
    ag_pipeline p;
    ag_pipeline_init(&p);
    p.fuse_source = &source, p.fuse_source_face = &source_face, p.detector = detector;
    p.fuse_target_face = 1, p.fuse_track = track;
    ag_face *faces = ag_malloc(sizeof *faces * AG_FACE_MAX);
    CHECK(faces);
    for (int k = 0; k < FRAMES; k++) {
        ag_image frame = {0}, out = {0};
        if (make_frame(k, &frame))
            return 1;
        ag_face_options fo = {.max_faces = AG_FACE_MAX};
        int n = 0, index = 0;
        CHECK_OK(ag_faces_detect(detector, &frame, &fo, faces, AG_FACE_MAX, &n, NULL, &err), &err);
        CHECK(n >= 1);
        given[k] = faces[0];
        if (mirror)
            CHECK_OK(ag_face_track_update(mirror, &frame, faces, n, &index, &given[k], &err), &err);
        CHECK(index == 0);
        ag_pipeline_result res;
        CHECK_OK(ag_pipeline_apply(&p, &frame, &out, &res, &err), &err);
        CHECK(res.fused);
        change_centroid(&frame, &out, k, centroid[k]);
        ag_image_fini(&out);
        ag_image_fini(&frame);
    }
    ag_free(faces);
    ag_face_track_destroy(mirror);
    ag_face_track_destroy(track);
    return 0;
}

/* The fused face and the landmarks jitter less with the track than without. */
LEAK_CHECKED(test_smoothing_lowers_jitter) {
    double raw_c[FRAMES][2], smooth_c[FRAMES][2], raw_m[FRAMES][2], smooth_m[FRAMES][2];
    ag_face *raw = ag_malloc(sizeof *raw * FRAMES), *smooth = ag_malloc(sizeof *smooth * FRAMES);
    CHECK(raw && smooth);
    if (fuse_clip(0, raw_c, raw) || fuse_clip(1, smooth_c, smooth))
        return 1;
    for (int k = 0; k < FRAMES; k++)
        landmark_mean(&raw[k], k, raw_m[k]), landmark_mean(&smooth[k], k, smooth_m[k]);
    double jc_raw = jitter((const double(*)[2])raw_c, FRAMES);
    double jc_smooth = jitter((const double(*)[2])smooth_c, FRAMES);
    double jl_raw = landmark_jitter(raw, FRAMES), jl_smooth = landmark_jitter(smooth, FRAMES);
    double jm_raw = jitter((const double(*)[2])raw_m, FRAMES);
    double jm_smooth = jitter((const double(*)[2])smooth_m, FRAMES);
    printf("  %d frames of %dx%d, sway +-6 px, noise +-%d: mean squared step (px^2), each "
           "frame's detection / the track's: fused face's centroid %.4f / %.4f, landmarks "
           "%.4f / %.4f, their mean %.4f / %.4f\n",
           FRAMES, SIDE, SIDE, NOISE, jc_raw, jc_smooth, jl_raw, jl_smooth, jm_raw, jm_smooth);
    CHECK(jc_smooth < jc_raw);
    CHECK(jl_smooth < 0.7 * jl_raw);
    ag_free(smooth);
    ag_free(raw);
    return 0;
}

/* A face moved to (dx, dy) and scaled about its centre by s. */
static ag_face moved(const ag_face *f, float dx, float dy, float s) {
    ag_face m = *f;
    float cx = (f->box[0] + f->box[2]) / 2, cy = (f->box[1] + f->box[3]) / 2;
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        m.landmarks[i][0] = cx + (f->landmarks[i][0] - cx) * s + dx;
        m.landmarks[i][1] = cy + (f->landmarks[i][1] - cy) * s + dy;
    }
    for (int k = 0; k < 4; k++)
        m.box[k] = (k % 2 ? cy : cx) + (f->box[k] - (k % 2 ? cy : cx)) * s + (k % 2 ? dy : dx);
    return m;
}

/* A stand-in for a face-recognition network (the track's embed hook): the mean colour
 * under the face's box, the frame painted one colour per person. */
static int colour_embed(void *user, const ag_image *frame, const ag_face *face, float *vec,
                        int *dim) {
    (void)user;
    int x = (int)((face->box[0] + face->box[2]) / 2), y = (int)((face->box[1] + face->box[3]) / 2);
    x = x < 0 ? 0 : x >= frame->width ? frame->width - 1 : x;
    y = y < 0 ? 0 : y >= frame->height ? frame->height - 1 : y;
    for (int c = 0; c < 3; c++)
        vec[c] = frame->pixels[((size_t)y * frame->width + x) * 3 + c] / 255.0f - 0.5f;
    *dim = 3;
    return AG_OK;
}

/* A frame of 1600 x 800 painted red under face a and blue under face b. */
static void paint(ag_image *im, const ag_face *a, const ag_face *b, int background) {
    memset(im->pixels, background, (size_t)im->width * im->height * 3);
    for (int k = 0; k < 2; k++) {
        const ag_face *f = k ? b : a;
        if (!f)
            continue;
        for (int y = (int)fmaxf(0, f->box[1]); y < (int)fminf(im->height, f->box[3]); y++)
            for (int x = (int)fmaxf(0, f->box[0]); x < (int)fminf(im->width, f->box[2]); x++) {
                uint8_t *p = im->pixels + ((size_t)y * im->width + x) * 3;
                p[0] = k ? 20 : 230, p[1] = 40, p[2] = k ? 230 : 20;
            }
    }
}

/* One frame of the two-people clip: a (may be absent) and b, in the order given. */
static int step(ag_face_track *t, ag_image *im, ag_face *now, const ag_face *a, const ag_face *b,
                int a_first, int *index, ag_face *out) {
    ag_error err = {0};
    int n = 0;
    if (a && a_first)
        now[n++] = *a;
    now[n++] = *b;
    if (a && !a_first)
        now[n++] = *a;
    paint(im, a, b, 128);
    CHECK_OK(ag_face_track_update(t, im, now, n, index, out, &err), &err);
    return 0;
}

/* Two people: the track keeps its own when the other grows larger, loses it when it
 * leaves; without an embedding takes it back where it left, with one (the hook) finds it
 * (not the other) when it comes back elsewhere; a cut restarts the filter. */
LEAK_CHECKED(test_track_follows_and_finds_again) {
    ag_error err = {0};
    ag_face_options fo = {.max_faces = 1};
    ag_face *f = ag_malloc(sizeof *f * 6);
    CHECK(f);
    ag_face *biden = f, *now = f + 1, *out = f + 3, *a = f + 4, *b = f + 5;
    int n = 0;
    CHECK_OK(ag_faces_detect(detector, &target, &fo, biden, 1, &n, NULL, &err), &err);
    ag_image im = {1600, 800, 3, ag_malloc(1600 * 800 * 3)};
    CHECK(im.pixels);
    for (int embedded = 0; embedded < 2; embedded++) {
        ag_face_track_options to;
        ag_face_track_options_init(&to);
        to.embed = embedded ? colour_embed : NULL;
        ag_face_track *t = NULL;
        CHECK_OK(ag_face_track_create(&to, &t, &err), &err);
        int index = -1;
        /* Frame 0: a (obama) is the larger, face 1; b (biden) far right. */
        *a = moved(&source_face, 0, 0, 1.0f), *b = moved(biden, 900, 0, 0.8f);
        if (step(t, &im, now, a, b, 1, &index, out))
            return 1;
        CHECK(index == 0);
        /* Frames 1-5: b grows larger and comes first; a is followed by overlap. */
        for (int k = 1; k <= 5; k++) {
            *a = moved(&source_face, 3.0f * k, 0, 1.0f), *b = moved(biden, 900, 0, 1.2f);
            if (step(t, &im, now, a, b, 0, &index, out))
                return 1;
            CHECK_MSG(index == 1, "frame %d: face %d followed", k, index);
        }
        /* Frames 6-8: a left the picture: nothing (not b). */
        for (int k = 6; k <= 8; k++) {
            if (step(t, &im, now, NULL, b, 0, &index, out))
                return 1;
            CHECK_MSG(index == -1, "frame %d: face %d taken", k, index);
        }
        /* Frame 9: a back; without the embedding where it left, with it elsewhere. */
        *a = moved(&source_face, embedded ? 500 : 20, embedded ? 300 : 10, 0.9f);
        if (step(t, &im, now, a, b, 0, &index, out))
            return 1;
        CHECK_MSG(index == 1, "found face %d again", index);
        /* Frame 10: a moved a little: smoothed (not at the raw landmarks). */
        *a = moved(a, 6, 0, 1.0f);
        if (step(t, &im, now, a, b, 0, &index, out))
            return 1;
        CHECK(index == 1 && out->landmarks[0][0] < now[1].landmarks[0][0] - 0.01f);
        /* Frame 11: a cut (the grey turned dark), a in the same place: the filter restarts. */
        *a = moved(a, 6, 0, 1.0f);
        paint(&im, a, b, 0);
        now[0] = *b, now[1] = *a;
        CHECK_OK(ag_face_track_update(t, &im, now, 2, &index, out, &err), &err);
        CHECK(index == 1 && out->landmarks[0][0] == now[1].landmarks[0][0]);
        ag_face_track_stats st;
        ag_face_track_get_stats(t, &st);
        printf("  %s: %lld frames: found in %lld, lost %lld, found again %lld, cuts %lld\n",
               embedded ? "with an embedding" : "no embedding", (long long)st.frames,
               (long long)st.found, (long long)st.lost, (long long)st.reacquired,
               (long long)st.cuts);
        CHECK(st.frames == 12 && st.found == 9 && st.lost == 1 && st.cuts == 1);
        ag_face_track_destroy(t);
    }
    ag_image_fini(&im);
    ag_free(f);
    return 0;
}

int main(int argc, char **argv) {
    ag_error err = {0};
    if (ag_image_startup(argv[0], &err) != 0) {
        fprintf(stderr, "ag_image_startup: %s\n", err.message);
        return 1;
    }
    if (setup())
        return 1;
    static const test_case tests[] = {
        TEST(test_fuse_step),
        TEST(test_smoothing_lowers_jitter),
        TEST(test_track_follows_and_finds_again),
    };
    int rc = test_run_all(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
    ag_image_fini(&target);
    ag_image_fini(&source);
    ag_face_detector_destroy(detector);
    ag_model_destroy(mesh_model);
    ag_model_destroy(det_model);
    ag_image_shutdown();
    return rc;
}
