/*
 * identify_internal.h - the two halves of ag_face_embed (src/face/identify.c), for the golden
 * test (tests/test_face_identify.c) and tools that need the crop the network sees.
 */
#ifndef AG_FACE_IDENTIFY_INTERNAL_H
#define AG_FACE_IDENTIFY_INTERNAL_H

#include "animegan.h"

#define AG_FACE_EMBED_SIDE 150 /* the network's input side */

/* The crop face-api feeds the network, (150, 150, 3) floats in 0..255: its alignDlib square
 * (from the eye and mouth centres of the 68 dlib points, taken from FaceMesh's 468), zeros
 * outside the image, resampled bilinearly; here turned upright first (the eye line level). */
int ag_face_embed_crop(const ag_image *image, const ag_face *face, float *crop, ag_error *err);

/* The descriptor of such a crop: the mean RGB subtracted, / 255, the network. */
int ag_face_embed_crop_run(ag_face_embedder *embedder, const float *crop, float *descriptor,
                           ag_error *err);

#endif
