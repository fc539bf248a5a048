/*
 * identify.c - who a face is: dlib's face recognition ResNet (models/face-recognition.safetensors,
 * tools/convert_face_recognition.py) on the engine, fed the crop face-api feeds it, and the
 * nearest-descriptor choice `fuse --target-like` makes.
 *
 * face-api's crop for descriptors (FaceLandmarks.alignDlib): a square of side (mean distance
 * from the eye centres to the mouth's) / 0.45, placed so that the mean of the three centres
 * lies at (0.5, 0.43) of it, cropped (zeros outside the image) and resized bilinearly to
 * 150x150. FaceMesh's 468 points stand in for dlib's 68 (the usual correspondence). face-api
 * does not rotate; dlib's own chips are upright and a tilted head moves the descriptor, so the
 * square is taken in the frame turned by the eye line (the same crop for a level face).
 */
#include "identify_internal.h"

#include "face_internal.h"

#include "../engine_internal.h"
#include "../util/util_internal.h"

#include <math.h>
#include <string.h>

#define SIDE AG_FACE_EMBED_SIDE
#define CROP_FLOATS ((size_t)SIDE * SIDE * 3)

/* dlib's 68 points on FaceMesh: jaw 0-16, brows 17-26, nose 27-35, eyes 36-47, lips 48-67. */
static const int dlib68[68] = {162, 234, 93,  58,  172, 136, 149, 148, 152, 377, 378, 365, 397, 288,
                               323, 454, 389, 71,  63,  105, 66,  107, 336, 296, 334, 293, 301, 168,
                               197, 5,   4,   75,  97,  2,   326, 305, 33,  160, 158, 133, 153, 144,
                               362, 385, 387, 263, 373, 380, 61,  39,  37,  0,   267, 269, 291, 405,
                               314, 17,  84,  181, 78,  82,  13,  312, 308, 317, 14,  87};

/* face-api's FaceRecognitionNet: the mean RGB it subtracts before / 255. */
static const float mean_rgb[3] = {122.782f, 117.001f, 104.298f};

struct ag_face_embedder {
    ag_engine *engine;
    float *input; /* (150, 150, 3) */
    float descriptor[AG_FACE_DESCRIPTOR];
};

int ag_face_embed_model_load(ag_model **out, ag_error *err) {
    return ag_model_load("face-recognition", out, err);
}

void ag_face_embedder_destroy(ag_face_embedder *e) {
    if (!e)
        return;
    ag_engine_destroy(e->engine);
    ag_free(e->input);
    ag_free(e);
}

int ag_face_embedder_create(const ag_model *model, const ag_engine_options *options,
                            ag_face_embedder **out, ag_error *err) {
    *out = NULL;
    if (!model)
        return ag_error_set(err, AG_E_ARG, "face embedder: no model");
    ag_face_embedder *e = ag_calloc(1, sizeof *e);
    if (!e || !(e->input = ag_malloc(CROP_FLOATS * sizeof(float)))) {
        ag_face_embedder_destroy(e);
        return ag_error_set(err, AG_E_NOMEM, "face embedder: out of memory");
    }
    int rc = ag_engine_create(model, options, &e->engine, err);
    if (rc == AG_OK)
        rc = ag_engine_prepare(e->engine, SIDE, SIDE, err);
    int h, w, c;
    if (rc == AG_OK && (ag_engine_output_shape(e->engine, 0, &h, &w, &c) != 1 || h != 1 || w != 1 ||
                        c != AG_FACE_DESCRIPTOR))
        rc = ag_error_set(err, AG_E_FORMAT, "%s: not a face descriptor network (one output of %d)",
                          ag_model_get_info(model)->path, AG_FACE_DESCRIPTOR);
    if (rc) {
        ag_face_embedder_destroy(e);
        return rc;
    }
    *out = e;
    return AG_OK;
}

/* The mean of points [from, to) of the 68, in image pixels. */
static void centre_of(const float (*lm)[2], int from, int to, double out[2]) {
    out[0] = out[1] = 0;
    for (int i = from; i < to; i++)
        out[0] += (double)lm[dlib68[i]][0], out[1] += (double)lm[dlib68[i]][1];
    out[0] /= to - from, out[1] /= to - from;
}

/* face-api's alignDlib: from the eye centres (dlib 36-41, 42-47) and the mouth's (48-67; the
 * detector's keypoints without landmarks), a square of side (mean eye-to-mouth distance) /
 * 0.45 whose point (0.5, 0.43) is the three centres' mean; here in the frame turned by the
 * eye line. */
static void crop_square(const ag_face *f, double ref[2], double *side, double *angle) {
    double le[2], re[2], mo[2];
    if (f->has_landmarks) {
        centre_of(f->landmarks, 36, 42, le);
        centre_of(f->landmarks, 42, 48, re);
        centre_of(f->landmarks, 48, 68, mo);
    } else {
        for (int k = 0; k < 2; k++)
            le[k] = f->keypoints[0][k], re[k] = f->keypoints[1][k], mo[k] = f->keypoints[3][k];
    }
    for (int k = 0; k < 2; k++)
        ref[k] = (le[k] + re[k] + mo[k]) / 3;
    double eye_to_mouth =
        (hypot(mo[0] - le[0], mo[1] - le[1]) + hypot(mo[0] - re[0], mo[1] - re[1])) / 2;
    *side = eye_to_mouth / 0.45;
    *angle = atan2(re[1] - le[1], re[0] - le[0]);
}

int ag_face_embed_crop(const ag_image *image, const ag_face *face, float *crop, ag_error *err) {
    double ref[2], side, th;
    crop_square(face, ref, &side, &th);
    if (!(side >= 1.0) || !isfinite(ref[0]) || !isfinite(ref[1]))
        return ag_error_set(err, AG_E_ARG, "face embedding: the face's box is empty");
    /* In the turned frame: the square's top-left corner tl = ref - (0.5, 0.43) side, and TF's
     * resizeBilinear (no half-pixel centres): output pixel centre u samples the square at
     * (u - 0.5) k + 0.5, k = side / 150. */
    double k = side / SIDE, c = cos(th), s = sin(th), o = 0.5 - 0.5 * k;
    double tl_x = ref[0] - 0.5 * side * c + 0.43 * side * s;
    double tl_y = ref[1] - 0.5 * side * s - 0.43 * side * c;
    ag_affine m = {c * k, -s * k, tl_x + (c - s) * o, s * k, c * k, tl_y + (s + c) * o};
    return ag_face_warp(image, &m, SIDE, SIDE, AG_WARP_LETTERBOX, AG_WARP_LINEAR, NULL, crop, err);
}

int ag_face_embed_crop_run(ag_face_embedder *e, const float *crop, float *descriptor,
                           ag_error *err) {
    for (size_t i = 0; i < CROP_FLOATS; i++)
        e->input[i] = (crop[i] - mean_rgb[i % 3]) / 255.0f;
    float *outs[1] = {e->descriptor};
    int rc = ag_engine_run_raw(e->engine, e->input, SIDE, SIDE, outs, err);
    if (rc)
        return rc;
    memcpy(descriptor, e->descriptor, sizeof e->descriptor);
    return AG_OK;
}

int ag_face_embed(ag_face_embedder *e, const ag_image *image, const ag_face *face,
                  float *descriptor, ag_error *err) {
    if (image->bands < 3)
        return ag_error_set(err, AG_E_ARG, "face embedding: the image is not RGB");
    /* The crop lands in the input buffer, normalised there in place. */
    int rc = ag_face_embed_crop(image, face, e->input, err);
    return rc ? rc : ag_face_embed_crop_run(e, e->input, descriptor, err);
}

float ag_face_distance(const float *a, const float *b) {
    double sum = 0;
    for (int i = 0; i < AG_FACE_DESCRIPTOR; i++) {
        double d = (double)a[i] - (double)b[i];
        sum += d * d;
    }
    return (float)sqrt(sum);
}

int ag_face_most_like(ag_face_embedder *e, const ag_image *image, const ag_face *faces, int count,
                      const float *reference, float *distance, ag_error *err) {
    if (count < 1)
        return ag_error_set(err, AG_E_ARG, "face choice: no face to choose from");
    int best = -1;
    float best_d = INFINITY, d[AG_FACE_DESCRIPTOR];
    for (int i = 0; i < count; i++) {
        int rc = ag_face_embed(e, image, &faces[i], d, err);
        if (rc)
            return rc;
        float dist = ag_face_distance(reference, d);
        if (dist < best_d)
            best = i, best_d = dist;
    }
    if (distance)
        *distance = best_d;
    return best;
}

int ag_face_describe(ag_face_detector *detector, ag_face_embedder *e, const ag_image *photo,
                     const char *label, float *descriptor, ag_error *err) {
    ag_face *faces = ag_malloc(sizeof *faces); /* 190 KB: the heap, not a worker's stack */
    if (!faces)
        return ag_error_set(err, AG_E_NOMEM, "face embedding: out of memory");
    ag_face_options fo = {.max_faces = 1};
    int count = 0;
    int rc = ag_faces_detect(detector, photo, &fo, faces, 1, &count, NULL, err);
    if (rc == AG_OK && count == 0)
        rc = ag_error_set(err, AG_E_ARG, "%s: no face found to compare faces with", label);
    if (rc == AG_OK)
        rc = ag_face_embed(e, photo, &faces[0], descriptor, err);
    ag_free(faces);
    return rc;
}
