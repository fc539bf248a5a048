/*
 * detect.c - BlazeFace full range on the engine: the image letterboxed into 192x192 (a
 * downscaled copy, so the cost does not grow with the photo), the network's two raw maps
 * (models/face-detect.safetensors, tools/face_convert.py), then in C what MediaPipe's
 * TfLiteTensorsToDetections and NonMaxSuppression calculators do: one anchor per cell of the
 * 48x48 grid (stride 4, unit size), boxes and keypoints decoded as offsets in input pixels
 * from the anchor centre, score = sigmoid(clip(logit, +-100)), weighted non-maximum
 * suppression at IoU 0.3 (each kept face is the score-weighted mean of the candidates it
 * suppresses), and the coordinates mapped back through the letterbox.
 */
#include "face_internal.h"

#include "../engine_internal.h"
#include "../util/util_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double ag_face_now_ms(void) {
    return (double)ag_now_us() / 1e3;
}

int ag_face_models_load(ag_model **detect, ag_model **mesh, ag_error *err) {
    *detect = *mesh = NULL;
    int rc = ag_model_load("face-detect", detect, err);
    if (rc == AG_OK)
        rc = ag_model_load("face-mesh", mesh, err);
    if (rc) {
        ag_model_destroy(*detect);
        *detect = NULL;
    }
    return rc;
}

/* The engine of one face network, checked against the outputs the code below reads. */
static int face_engine(const ag_model *model, const ag_engine_options *options, int oc0, int hw0,
                       ag_engine **out, ag_error *err) {
    int rc = ag_engine_create(model, options, out, err);
    if (rc == AG_OK)
        rc = ag_engine_prepare(*out, AG_FACE_SIDE, AG_FACE_SIDE, err);
    int h, w, c, h1, w1, c1;
    if (rc == AG_OK && (ag_engine_output_shape(*out, 0, &h, &w, &c) != 2 ||
                        ag_engine_output_shape(*out, 1, &h1, &w1, &c1) != 2 || c != oc0 ||
                        h != hw0 || w != hw0 || c1 != 1 || h1 != hw0 || w1 != hw0))
        rc = ag_error_set(err, AG_E_FORMAT,
                          "%s: not a %s network (outputs (%d, %d, %d) and (1) expected)",
                          ag_model_get_info(model)->path, oc0 == 16 ? "face detector" : "face mesh",
                          hw0, hw0, oc0);
    if (rc) {
        ag_engine_destroy(*out);
        *out = NULL;
    }
    return rc;
}

void ag_face_detector_destroy(ag_face_detector *d) {
    if (!d)
        return;
    ag_engine_destroy(d->detect);
    ag_engine_destroy(d->mesh);
    ag_free(d->input);
    ag_free(d->regressors);
    ag_free(d->scores);
    ag_free(d->landmarks);
    ag_free(d->presence);
    ag_free(d->pass);
    ag_free(d->candidates);
    ag_free(d->kept);
    ag_free(d);
}

int ag_face_detector_create(const ag_model *detect, const ag_model *mesh,
                            const ag_engine_options *options, ag_face_detector **out,
                            ag_error *err) {
    *out = NULL;
    if (!detect)
        return ag_error_set(err, AG_E_ARG, "face detector: no detection model");
    ag_face_detector *d = ag_calloc(1, sizeof *d);
    if (!d)
        return ag_error_set(err, AG_E_NOMEM, "face detector: out of memory");
    size_t side2 = (size_t)AG_FACE_SIDE * AG_FACE_SIDE;
    d->input = ag_malloc(sizeof(float) * side2 * 3);
    d->regressors = ag_malloc(sizeof(float) * AG_FACE_ANCHORS * 16);
    d->scores = ag_malloc(sizeof(float) * AG_FACE_ANCHORS);
    d->landmarks = ag_malloc(sizeof(float) * AG_FACE_LANDMARKS * 3);
    d->presence = ag_malloc(sizeof(float));
    d->pass = ag_malloc(sizeof *d->pass * AG_FACE_ANCHORS);
    d->candidates = ag_malloc(sizeof *d->candidates * AG_FACE_CANDIDATES);
    d->kept = ag_malloc(sizeof *d->kept * AG_FACE_CANDIDATES);
    int rc = AG_OK;
    if (!d->input || !d->regressors || !d->scores || !d->landmarks || !d->presence || !d->pass ||
        !d->candidates || !d->kept)
        rc = ag_error_set(err, AG_E_NOMEM, "face detector: out of memory");
    if (rc == AG_OK)
        rc = face_engine(detect, options, 16, AG_FACE_GRID, &d->detect, err);
    if (rc == AG_OK && mesh)
        rc = face_engine(mesh, options, AG_FACE_LANDMARKS * 3, 1, &d->mesh, err);
    if (rc) {
        ag_face_detector_destroy(d);
        return rc;
    }
    *out = d;
    return AG_OK;
}

double ag_face_detector_last_ms(const ag_face_detector *d) {
    return d ? d->timing.total_ms : 0.0;
}

void ag_face_detector_last_timing(const ag_face_detector *d, ag_face_timing *out) {
    if (d)
        *out = d->timing;
    else
        memset(out, 0, sizeof *out);
}

/* ---- decoding -------------------------------------------------------------------------- */

static float sigmoid_clipped(float logit) {
    logit = logit < -100.0f ? -100.0f : logit > 100.0f ? 100.0f : logit;
    return 1.0f / (1.0f + expf(-logit));
}

/* Candidates with score >= min_score, in letterbox pixels; returns their count. */
static int decode(ag_face_candidate *out, const float *reg, const float *logits, float min_score) {
    int n = 0;
    for (int i = 0; i < AG_FACE_ANCHORS; i++) {
        float score = sigmoid_clipped(logits[i]);
        if (!(score >= min_score))
            continue;
        float ax = (float)((i % AG_FACE_GRID) + 0.5) * 4.0f;
        float ay = (float)((i / AG_FACE_GRID) + 0.5) * 4.0f;
        const float *r = reg + (size_t)i * 16; /* x, y, w, h, 6 x (x, y) */
        int finite = 1;
        for (int k = 0; k < 16; k++)
            finite &= isfinite(r[k]) && fabsf(r[k]) < 1e6f;
        if (!finite)
            continue;
        ag_face_candidate *c = &out[n++];
        float cx = r[0] + ax, cy = r[1] + ay;
        c->score = score;
        c->v[0] = cx - r[2] / 2, c->v[1] = cy - r[3] / 2;
        c->v[2] = cx + r[2] / 2, c->v[3] = cy + r[3] / 2;
        for (int k = 0; k < 6; k++)
            c->v[4 + 2 * k] = r[4 + 2 * k] + ax, c->v[5 + 2 * k] = r[5 + 2 * k] + ay;
    }
    return n;
}

static float iou(const float *a, const float *b) {
    float ix = fminf(a[2], b[2]) - fmaxf(a[0], b[0]);
    float iy = fminf(a[3], b[3]) - fmaxf(a[1], b[1]);
    if (ix <= 0.0f || iy <= 0.0f)
        return 0.0f;
    float inter = ix * iy;
    float uni = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
    return uni > 0.0f ? inter / uni : 0.0f;
}

static int by_score(const void *pa, const void *pb) {
    const ag_face_candidate *a = pa, *b = pb;
    return (a->score < b->score) - (a->score > b->score);
}

/* MediaPipe's weighted NMS: the best remaining candidate absorbs every one overlapping it by
 * more than the threshold; the face is their score-weighted mean with the best one's score. */
static int weighted_nms(ag_face_candidate *out, ag_face_candidate *c, int n) {
    qsort(c, (size_t)n, sizeof *c, by_score);
    int kept = 0;
    for (int i = 0; i < n; i++) {
        if (c[i].score < 0.0f)
            continue; /* absorbed */
        double sum[16] = {0}, wsum = 0.0;
        float best[4];
        memcpy(best, c[i].v, sizeof best);
        for (int j = i; j < n; j++) {
            if (c[j].score < 0.0f || (j > i && !(iou(best, c[j].v) > AG_FACE_NMS_IOU)))
                continue;
            for (int k = 0; k < 16; k++)
                sum[k] += (double)c[j].score * (double)c[j].v[k];
            wsum += (double)c[j].score;
            if (j > i)
                c[j].score = -1.0f;
        }
        out[kept].score = c[i].score;
        for (int k = 0; k < 16; k++)
            out[kept].v[k] = (float)(sum[k] / wsum);
        kept++;
    }
    return kept;
}

static float box_area(const ag_face *f) {
    return (f->box[2] - f->box[0]) * (f->box[3] - f->box[1]);
}

static int by_area(const void *pa, const void *pb) {
    float a = box_area(pa), b = box_area(pb);
    return (a < b) - (a > b);
}

/* ---- the call -------------------------------------------------------------------------- */

void ag_face_decode_pass(ag_face_detector *d, const ag_affine *m, int interior, float min_score,
                         int *n) {
    int count = decode(d->pass, d->regressors, d->scores, min_score);
    const float edge = 1.0f, far = AG_FACE_SIDE - 1.0f;
    for (int i = 0; i < count && *n < AG_FACE_CANDIDATES; i++) {
        const float *v = d->pass[i].v;
        if (((interior & 1) && v[0] < edge) || ((interior & 2) && v[2] > far) ||
            ((interior & 4) && v[1] < edge) || ((interior & 8) && v[3] > far))
            continue;
        ag_face_candidate *c = &d->candidates[(*n)++];
        c->score = d->pass[i].score;
        for (int k = 0; k < 8; k++) {
            c->v[2 * k] = (float)(m->a * (double)v[2 * k] + m->c);
            c->v[2 * k + 1] = (float)(m->e * (double)v[2 * k + 1] + m->f);
        }
    }
}

int ag_face_select(ag_face_detector *d, int n, int max_faces, ag_face *faces, int *found) {
    n = weighted_nms(d->kept, d->candidates, n);
    if (found)
        *found = n;
    int kept = 0;
    for (int i = 0; i < n; i++) {
        ag_face_candidate *c = &d->kept[i];
        ag_face f;
        memset(&f, 0, sizeof f);
        f.score = c->score;
        memcpy(f.box, c->v, sizeof f.box);
        memcpy(f.keypoints, c->v + 4, sizeof f.keypoints);
        if (kept < max_faces) {
            faces[kept++] = f;
        } else if (max_faces > 0) {
            /* Keep the largest max_faces: replace the smallest kept when larger. */
            int small = 0;
            for (int j = 1; j < kept; j++)
                small = box_area(&faces[j]) < box_area(&faces[small]) ? j : small;
            if (box_area(&f) > box_area(&faces[small]))
                faces[small] = f;
        }
    }
    qsort(faces, (size_t)kept, sizeof *faces, by_area);
    return kept;
}

/*
 * One detector run on the 192x192 view `m` (view pixels -> image pixels: a scale and an
 * offset) of the image, zero outside it: its candidates, mapped to image pixels, appended to
 * d->candidates[*n...]. `interior` (bits left, right, top, bottom) names the view's edges
 * that cut the image: a box touching one is a face cut by the tile, dropped (another tile
 * or the whole-image pass holds it whole).
 */
static int run_pass(ag_face_detector *d, const ag_image *image, const ag_affine *m, int interior,
                    float min_score, int *n, ag_error *err) {
    size_t side2 = (size_t)AG_FACE_SIDE * AG_FACE_SIDE;
    ag_face_timing *t = &d->timing;
    double t0 = ag_face_now_ms();
    uint8_t *box = ag_malloc(side2 * image->bands);
    if (!box)
        return ag_error_set(err, AG_E_NOMEM, "face detection: out of memory");
    int rc = ag_face_warp(image, m, AG_FACE_SIDE, AG_FACE_SIDE, AG_WARP_LETTERBOX, AG_WARP_CUBIC,
                          box, NULL, err);
    for (size_t i = 0; rc == AG_OK && i < side2; i++)
        for (int c = 0; c < 3; c++) /* bands beyond RGB are dropped */
            d->input[i * 3 + c] = box[i * image->bands + c] / 127.5f - 1.0f;
    ag_free(box);
    double t1 = ag_face_now_ms();
    t->detect_warp_ms += t1 - t0;
    float *outs[2] = {d->regressors, d->scores};
    if (rc == AG_OK)
        rc = ag_engine_run_raw(d->detect, d->input, AG_FACE_SIDE, AG_FACE_SIDE, outs, err);
    if (rc)
        return rc;
    double t2 = ag_face_now_ms();
    t->detect_net_ms += t2 - t1;
    t->passes++;
    ag_face_decode_pass(d, m, interior, min_score, n);
    t->decode_ms += ag_face_now_ms() - t2;
    return AG_OK;
}

int ag_faces_detect(ag_face_detector *d, const ag_image *image, const ag_face_options *options,
                    ag_face *faces, int capacity, int *count, int *found, ag_error *err) {
    double t0 = ag_face_now_ms();
    *count = 0;
    if (d)
        memset(&d->timing, 0, sizeof d->timing);
    if (found)
        *found = 0;
    if (!d || !image || !image->pixels || image->width < 1 || image->height < 1 ||
        (image->bands != 3 && image->bands != 4) || capacity < 0 || (capacity && !faces))
        return ag_error_set(err, AG_E_ARG, "face detection: bad arguments");
    float min_score = options && options->min_score > 0.0f ? options->min_score : 0.6f;
    int max_faces = options && options->max_faces > 0 ? options->max_faces : 8;
    float expand = options && options->expand > 0.0f ? options->expand : 1.3f;
    max_faces = max_faces > AG_FACE_MAX ? AG_FACE_MAX : max_faces;
    max_faces = max_faces > capacity ? capacity : max_faces;

    int W = image->width, H = image->height, n = 0;
    /* Pass 0, the letterbox: the long side to 192, centred. */
    double scale = (double)AG_FACE_SIDE / (W > H ? W : H);
    ag_affine m = {1 / scale, 0,         -(AG_FACE_SIDE - W * scale) / 2 / scale,
                   0,         1 / scale, -(AG_FACE_SIDE - H * scale) / 2 / scale};
    int rc = run_pass(d, image, &m, 0, min_score, &n, err);
    /* The tiles: the long side to 384, 192 tiles overlapping by 48 px or more. */
    int long_side = W > H ? W : H;
    if (rc == AG_OK && !(options && options->single_pass) && long_side >= AG_FACE_TILE_MIN) {
        double s1 = (double)AG_FACE_TILE_SIDE / long_side, ws = W * s1, hs = H * s1;
        int nx = ws <= AG_FACE_SIDE ? 1 : (int)ceil((ws - AG_FACE_SIDE) / 144.0) + 1;
        int ny = hs <= AG_FACE_SIDE ? 1 : (int)ceil((hs - AG_FACE_SIDE) / 144.0) + 1;
        for (int ty = 0; ty < ny && rc == AG_OK; ty++)
            for (int tx = 0; tx < nx && rc == AG_OK; tx++) {
                double x0 = nx == 1 ? (ws - AG_FACE_SIDE) / 2 : tx * (ws - AG_FACE_SIDE) / (nx - 1);
                double y0 = ny == 1 ? (hs - AG_FACE_SIDE) / 2 : ty * (hs - AG_FACE_SIDE) / (ny - 1);
                ag_affine t = {1 / s1, 0, x0 / s1, 0, 1 / s1, y0 / s1};
                int interior = (tx > 0) | (tx < nx - 1) << 1 | (ty > 0) << 2 | (ty < ny - 1) << 3;
                rc = run_pass(d, image, &t, interior, min_score, &n, err);
            }
    }
    if (rc)
        return rc;
    double t_nms = ag_face_now_ms();
    int kept = ag_face_select(d, n, max_faces, faces, found);
    d->timing.decode_ms += ag_face_now_ms() - t_nms;
    for (int i = 0; i < kept && rc == AG_OK; i++) {
        if (d->mesh && !(options && options->no_landmarks))
            rc = ag_face_mesh_run(d, image, expand, &faces[i], err);
        else
            ag_face_quad_from_keypoints(faces[i].keypoints, expand, faces[i].quad);
    }
    if (rc)
        return rc;
    *count = kept;
    d->timing.total_ms = ag_face_now_ms() - t0;
    return AG_OK;
}
