/*
 * mesh.c - FaceMesh on one detected face: the ROI MediaPipe's face-landmark graph uses (a
 * square of 1.5x the box's long side around its centre, rotated so that the detector's eye
 * keypoints 0 -> 1 lie level), warped bilinearly (as MediaPipe does) to 192x192 in [0, 1],
 * the network's 468 (x, y, z) in
 * crop pixels mapped back through the same affine. A presence logit below 0 (probability
 * 0.5) means the crop holds no face: the quad then comes from the detector's keypoints.
 */
#include "face_internal.h"

#include "../engine_internal.h"
#include "../util/util_internal.h"

#include <math.h>
#include <string.h>

/* Crop pixels (192) -> image pixels. */
static ag_affine roi_map(const ag_face *f) {
    double x0 = f->box[0], y0 = f->box[1], x1 = f->box[2], y1 = f->box[3];
    double cx = (x0 + x1) / 2.0, cy = (y0 + y1) / 2.0;
    double bw = x1 - x0, bh = y1 - y0;
    double side = 1.5 * (bw > bh ? bw : bh);
    double th = atan2((double)f->keypoints[1][1] - (double)f->keypoints[0][1],
                      (double)f->keypoints[1][0] - (double)f->keypoints[0][0]);
    double k = side / AG_FACE_SIDE, c = cos(th) * k, s = sin(th) * k;
    double half = AG_FACE_SIDE / 2.0;
    /* src = centre + (x - 96) * ux + (y - 96) * uy, ux = (c, s), uy = (-s, c) */
    return (ag_affine){c, -s, cx - half * c + half * s, s, c, cy - half * s - half * c};
}

int ag_face_mesh_run(ag_face_detector *d, const ag_image *image, float expand, ag_face *face,
                     ag_error *err) {
    size_t side2 = (size_t)AG_FACE_SIDE * AG_FACE_SIDE;
    ag_affine m = roi_map(face);
    double t0 = ag_face_now_ms();
    uint8_t *crop = ag_malloc(side2 * image->bands);
    if (!crop)
        return ag_error_set(err, AG_E_NOMEM, "face mesh: out of memory");
    int rc = ag_face_warp(image, &m, AG_FACE_SIDE, AG_FACE_SIDE, AG_WARP_REFLECT, AG_WARP_LINEAR,
                          crop, NULL, err);
    for (size_t i = 0; rc == AG_OK && i < side2; i++)
        for (int c = 0; c < 3; c++)
            d->input[i * 3 + c] = crop[i * image->bands + c] / 255.0f;
    ag_free(crop);
    double t1 = ag_face_now_ms();
    d->timing.mesh_warp_ms += t1 - t0;
    float *outs[2] = {d->landmarks, d->presence};
    if (rc == AG_OK)
        rc = ag_engine_run_raw(d->mesh, d->input, AG_FACE_SIDE, AG_FACE_SIDE, outs, err);
    if (rc)
        return rc;
    d->timing.mesh_net_ms += ag_face_now_ms() - t1;
    d->timing.meshes++;
    float logit = d->presence[0];
    logit = logit < -100.0f ? -100.0f : logit > 100.0f ? 100.0f : logit;
    face->presence = 1.0f / (1.0f + expf(-logit));
    face->has_landmarks = face->presence >= 0.5f;
    if (!face->has_landmarks) {
        ag_face_quad_from_keypoints(face->keypoints, expand, face->quad);
        return AG_OK;
    }
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        double x = d->landmarks[3 * i], y = d->landmarks[3 * i + 1];
        face->landmarks[i][0] = (float)(m.a * x + m.b * y + m.c);
        face->landmarks[i][1] = (float)(m.d * x + m.e * y + m.f);
    }
    ag_face_quad_from_landmarks((const float(*)[2])face->landmarks, expand, face->quad);
    return AG_OK;
}
