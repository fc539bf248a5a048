/*
 * fuse_like.c - `animegan fuse --source-like PHOTO / --target-like PHOTO`: which face by who it
 * is (src/face/identify.c): each PHOTO's largest face as a descriptor, then the face of the
 * source or target nearest to it.
 */
#include "commands.h"

#include <stdio.h>

/* --source-like, --target-like: the face-recognition model, an embedder and each photo's
 * face as a descriptor; nothing loaded when neither is asked. */
int ag_cli_faces_like(const char *const paths[2], ag_face_detector *d, const ag_engine_options *eo,
                      ag_model **model, ag_face_embedder **e, float (*like)[AG_FACE_DESCRIPTOR],
                      ag_error *err) {
    if (!paths[0] && !paths[1])
        return AG_OK;
    ag_engine_options o = *eo;
    o.precision = AG_PRECISION_FP32; /* 0.5 GFLOP a face: fp32, as the detector */
    int rc = ag_face_embed_model_load(model, err);
    rc = rc ? rc : ag_face_embedder_create(*model, &o, e, err);
    for (int i = 0; i < 2 && rc == AG_OK; i++) {
        if (!paths[i])
            continue;
        ag_decode_options dec = {.max_pixels = AG_CLI_LIKE_MAX_PIXELS};
        ag_image photo = {0};
        char label[96];
        snprintf(label, sizeof label, "--%s-like %.80s", i ? "target" : "source", paths[i]);
        rc = ag_image_decode_file(paths[i], &dec, &photo, err);
        rc = rc ? rc : ag_face_describe(d, *e, &photo, label, like[i], err);
        ag_image_fini(&photo);
    }
    return rc;
}

/* The face of `im` most like `like` (--*-like), 1-based; says which on stderr. */
int ag_cli_face_like(ag_face_embedder *e, const ag_image *im, const char *which,
                     const ag_face *faces, int count, const float *like, ag_error *err) {
    float dist = 0;
    int best = ag_face_most_like(e, im, faces, count, like, &dist, err);
    if (best >= 0)
        fprintf(stderr, "animegan: fuse: --%s-like: %s face %d of %d, %.2f from the photo's (%s)\n",
                which, which, best + 1, count, (double)dist,
                dist < AG_FACE_SAME_PERSON ? "the same person under 0.6"
                                           : "over 0.6: perhaps not the same person");
    return best < 0 ? best : best + 1;
}
