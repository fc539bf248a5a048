/*
 * identify.c - who a face is: dlib's face recognition ResNet (models/face-recognition.safetensors,
 * tools/convert_face_recognition.py) on the engine, fed the crop face-api feeds it, and the
 * nearest-descriptor choice `fuse --target-like` makes.
 *
 * face-api's crop: the min box of the 68 dlib landmarks padded by 20% of its width and height,
 * padded to a square about its centre with zeros, resized bilinearly to 150x150. FaceMesh's 468
 * points stand in for the 68 (the usual correspondence: jaw, brows, nose, eyes, lips). face-api
 * does not rotate; dlib's own chips are upright, and a tilted head moves the descriptor, so the
 * box is taken in the frame turned by the eye line (the same crop for a level face).
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

/* The crop's centre, side and angle in image pixels: the 68 points' box in the frame turned by
 * the eye line (without landmarks: the detector's box and eye keypoints), padded, squared. */
static void crop_square(const ag_face *f, double centre[2], double *side, double *angle) {
    const float(*kp)[2] = f->keypoints;
    double x0, y0, x1, y1, th;
    if (f->has_landmarks) {
        const float(*lm)[2] = f->landmarks;
        double ex = 0, ey = 0; /* image-right eye minus image-left eye, summed over 6 points */
        for (int i = 36; i < 42; i++) {
            ex += (double)lm[dlib68[i + 6]][0] - (double)lm[dlib68[i]][0];
            ey += (double)lm[dlib68[i + 6]][1] - (double)lm[dlib68[i]][1];
        }
        th = atan2(ey, ex);
        double c = cos(th), s = sin(th);
        x0 = y0 = INFINITY, x1 = y1 = -INFINITY;
        for (int i = 0; i < 68; i++) { /* rotate by -th */
            double px = lm[dlib68[i]][0], py = lm[dlib68[i]][1];
            double u = c * px + s * py, v = -s * px + c * py;
            x0 = fmin(x0, u), x1 = fmax(x1, u), y0 = fmin(y0, v), y1 = fmax(y1, v);
        }
        double u = (x0 + x1) / 2, v = (y0 + y1) / 2;
        centre[0] = c * u - s * v, centre[1] = s * u + c * v;
    } else {
        th = atan2((double)kp[1][1] - (double)kp[0][1], (double)kp[1][0] - (double)kp[0][0]);
        x0 = f->box[0], y0 = f->box[1], x1 = f->box[2], y1 = f->box[3];
        centre[0] = (x0 + x1) / 2, centre[1] = (y0 + y1) / 2;
    }
    *side = 1.2 * fmax(x1 - x0, y1 - y0);
    *angle = th;
}

int ag_face_embed_crop(const ag_image *image, const ag_face *face, float *crop, ag_error *err) {
    double centre[2], side, th;
    crop_square(face, centre, &side, &th);
    if (!(side >= 1.0) || !isfinite(centre[0]) || !isfinite(centre[1]))
        return ag_error_set(err, AG_E_ARG, "face embedding: the face's box is empty");
    double k = side / SIDE, c = cos(th) * k, s = sin(th) * k, half = SIDE / 2.0;
    /* src = centre + (x - 75) (c, s) + (y - 75) (-s, c) */
    ag_affine m = {c, -s, centre[0] - half * c + half * s, s, c, centre[1] - half * s - half * c};
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
