/*
 * align.c - the FFHQ crop (NVlabs' recreate_aligned_images, as the animegan2 Colab uses it
 * with expand 1.3): eye centres and mouth from the landmarks, the oriented square
 *   x = e2e - rot90(e2m), normalised, times max(2 |e2e|, 1.8 |e2m|) * expand;  y = rot90(x);
 *   centre = eye_avg + 0.1 e2m;  quad = c-x-y, c-x+y, c+x+y, c+x-y (TL, BL, BR, TR)
 * and its warp to size x size (warp.c: box shrink + widened cubic). Where the quad leaves
 * the image, the image is mirrored (no blur: FFHQ blurs its reflected border and blends it
 * towards the median, which for stylisation only smears the edge of the crop).
 */
#include "face_internal.h"

#include "../util/util_internal.h"

#include <math.h>
#include <string.h>

/* Image-left eye (the subject's right): FFHQ's lm[36:42] on FaceMesh; image-right eye;
 * mouth corners 61 and 291. */
static const int eye_left[6] = {33, 160, 158, 133, 153, 144};
static const int eye_right[6] = {362, 385, 387, 263, 373, 380};

const int ag_face_oval[AG_FACE_OVAL_COUNT] = {
    10,  338, 297, 332, 284, 251, 389, 356, 454, 323, 361, 288, 397, 365, 379, 378, 400, 377,
    152, 148, 176, 149, 150, 136, 172, 58,  132, 93,  234, 127, 162, 21,  54,  103, 67,  109};

static void quad_from(const double el[2], const double er[2], const double mouth[2], float expand,
                      float (*quad)[2]) {
    double eye_avg[2] = {(el[0] + er[0]) / 2, (el[1] + er[1]) / 2};
    double e2e[2] = {er[0] - el[0], er[1] - el[1]};
    double e2m[2] = {mouth[0] - eye_avg[0], mouth[1] - eye_avg[1]};
    /* x = e2e - flipud(e2m) * [-1, 1] = e2e - (-e2m.y, e2m.x) */
    double x[2] = {e2e[0] + e2m[1], e2e[1] - e2m[0]};
    double len = hypot(x[0], x[1]);
    double size = fmax(hypot(e2e[0], e2e[1]) * 2.0, hypot(e2m[0], e2m[1]) * 1.8) * (double)expand;
    if (len > 0)
        x[0] *= size / len, x[1] *= size / len;
    double y[2] = {-x[1], x[0]};
    double c[2] = {eye_avg[0] + 0.1 * e2m[0], eye_avg[1] + 0.1 * e2m[1]};
    const double sx[4] = {-1, -1, 1, 1}, sy[4] = {-1, 1, 1, -1};
    for (int k = 0; k < 4; k++) {
        quad[k][0] = (float)(c[0] + sx[k] * x[0] + sy[k] * y[0]);
        quad[k][1] = (float)(c[1] + sx[k] * x[1] + sy[k] * y[1]);
    }
}

void ag_face_quad_from_landmarks(const float (*lm)[2], float expand, float (*quad)[2]) {
    double el[2] = {0, 0}, er[2] = {0, 0};
    for (int i = 0; i < 6; i++) {
        el[0] += (double)lm[eye_left[i]][0] / 6.0, el[1] += (double)lm[eye_left[i]][1] / 6.0;
        er[0] += (double)lm[eye_right[i]][0] / 6.0, er[1] += (double)lm[eye_right[i]][1] / 6.0;
    }
    double mouth[2] = {((double)lm[61][0] + (double)lm[291][0]) / 2.0,
                       ((double)lm[61][1] + (double)lm[291][1]) / 2.0};
    quad_from(el, er, mouth, expand, quad);
}

/* Keypoint 0 is the subject's right eye: the image-left one, as FFHQ's eye_left. */
void ag_face_quad_from_keypoints(const float (*kp)[2], float expand, float (*quad)[2]) {
    double el[2] = {kp[0][0], kp[0][1]}, er[2] = {kp[1][0], kp[1][1]};
    double mouth[2] = {kp[3][0], kp[3][1]};
    quad_from(el, er, mouth, expand, quad);
}

ag_affine ag_face_quad_map(const float (*quad)[2], int size) {
    double tl[2] = {quad[0][0], quad[0][1]}, bl[2] = {quad[1][0], quad[1][1]};
    double tr[2] = {quad[3][0], quad[3][1]};
    return (ag_affine){(tr[0] - tl[0]) / size, (bl[0] - tl[0]) / size, tl[0],
                       (tr[1] - tl[1]) / size, (bl[1] - tl[1]) / size, tl[1]};
}

int ag_face_align(const ag_image *image, const ag_face *face, int size, ag_image *out,
                  ag_error *err) {
    memset(out, 0, sizeof *out);
    if (!image || !image->pixels || !face || size < 8 || size > 4096)
        return ag_error_set(err, AG_E_ARG, "face align: bad arguments (size %d)", size);
    for (int k = 0; k < 4; k++)
        if (!isfinite(face->quad[k][0]) || !isfinite(face->quad[k][1]))
            return ag_error_set(err, AG_E_ARG, "face align: the quad is not finite");
    ag_affine m = ag_face_quad_map(face->quad, size);
    if (!(fabs(m.a * m.e - m.b * m.d) > 1e-12))
        return ag_error_set(err, AG_E_ARG, "face align: the quad is degenerate");
    /* The warp's own shrink factor: the fill works in the same pixels. */
    double s = sqrt(fabs(m.a * m.e - m.b * m.d));
    if (!(s < 65536.0)) /* as the warp: no image is that much larger than a crop */
        return ag_error_set(err, AG_E_ARG, "face align: the quad is too large");
    int f = s >= 2.0 ? (int)floor(s) : 1, origin[2];
    ag_image padded;
    int rc = ag_face_fill(image, f, size, face->quad, &padded, origin, err);
    if (rc)
        return rc;
    const ag_image *src = image;
    if (padded.pixels) { /* the map, into the padded image's pixels */
        m = (ag_affine){m.a / f, m.b / f, m.c / f - origin[0],
                        m.d / f, m.e / f, m.f / f - origin[1]};
        src = &padded;
    }
    out->pixels = ag_malloc((size_t)size * size * image->bands);
    if (!out->pixels) {
        ag_image_fini(&padded);
        return ag_error_set(err, AG_E_NOMEM, "face align: out of memory");
    }
    out->width = out->height = size, out->bands = image->bands;
    rc = ag_face_warp(src, &m, size, size, AG_WARP_REFLECT, AG_WARP_CUBIC, out->pixels, NULL, err);
    ag_image_fini(&padded);
    if (rc)
        ag_image_fini(out);
    return rc;
}
