/*
 * one_face.h - the largest face of a test photo, with the bundled detector and mesh loaded at
 * the first call (test_fuse_real, test_fuse_quality); one_face_close() at the end.
 */
#ifndef AG_TEST_ONE_FACE_H
#define AG_TEST_ONE_FACE_H

#include "test.h"

static ag_model *det_model, *mesh_model;
static ag_face_detector *detector;

static int detect(const ag_image *im, ag_face *face) {
    ag_error err;
    if (!detector) {
        CHECK_OK(ag_model_load(AG_SOURCE_DIR "/models/face-detect.safetensors", &det_model, &err),
                 &err);
        CHECK_OK(ag_model_load(AG_SOURCE_DIR "/models/face-mesh.safetensors", &mesh_model, &err),
                 &err);
        ag_engine_options eo = {.threads = 1};
        CHECK_OK(ag_face_detector_create(det_model, mesh_model, &eo, &detector, &err), &err);
    }
    ag_face_options fo = {.max_faces = 1};
    int n = 0;
    CHECK_OK(ag_faces_detect(detector, im, &fo, face, 1, &n, NULL, &err), &err);
    CHECK_MSG(n == 1 && face->has_landmarks, "no face with landmarks");
    return 0;
}

static void one_face_close(void) {
    ag_face_detector_destroy(detector);
    ag_model_destroy(mesh_model);
    ag_model_destroy(det_model);
    detector = NULL, mesh_model = det_model = NULL;
}

#endif
