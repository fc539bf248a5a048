/*
 * disc_face.h - a face of landmarks on a disc, for the fusion tests that need a face
 * without a detector: its oval on the circle of radius r round (cx, cy), the other
 * landmarks spread inside it (a golden-angle spiral, the same every run).
 */
#ifndef AG_TEST_DISC_FACE_H
#define AG_TEST_DISC_FACE_H

#include "../src/face/face_internal.h" /* ag_face_oval */

#include <math.h>
#include <string.h>

static inline void disc_face(ag_face *f, double cx, double cy, double r) {
    memset(f, 0, sizeof *f);
    for (int i = 0; i < AG_FACE_LANDMARKS; i++) {
        double q = 0.8 * r * sqrt((i * 0.618034) - floor(i * 0.618034)), t = i * 2.399963;
        f->landmarks[i][0] = (float)(cx + q * cos(t)),
        f->landmarks[i][1] = (float)(cy + q * sin(t));
    }
    for (int k = 0; k < AG_FACE_OVAL_COUNT; k++) {
        double t = 2 * M_PI * k / AG_FACE_OVAL_COUNT;
        f->landmarks[ag_face_oval[k]][0] = (float)(cx + r * cos(t));
        f->landmarks[ag_face_oval[k]][1] = (float)(cy + r * sin(t));
    }
    f->has_landmarks = 1, f->score = f->presence = 1;
    f->box[0] = (float)(cx - r), f->box[1] = (float)(cy - r);
    f->box[2] = (float)(cx + r), f->box[3] = (float)(cy + r);
}

#endif
