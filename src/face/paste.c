/*
 * paste.c - faces pasted back: a stylised aligned crop returns to the photo through the
 * inverse of its warp (warp.c, so a 512 crop shrinking onto a small face is prefiltered),
 * blended by a feathered mask. The mask is the face-oval polygon of the landmarks in crop
 * pixels (without landmarks, the ellipse inscribed in the crop's central part), filled at
 * pixel centres, then box-blurred twice (a ramp about size/16 wide). Image pixels whose mask
 * is 0, and every pixel outside the crop's footprint, are not written: they stay exactly the
 * plain conversion.
 */
#include "face_internal.h"

#include "../util/util_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_float(const void *pa, const void *pb) {
    float a = *(const float *)pa, b = *(const float *)pb;
    return (a > b) - (a < b);
}

/* mask (S, S) <- 255 inside the polygon (even-odd, at pixel centres), else 0. */
static void fill_polygon(uint8_t *mask, int S, const float (*pt)[2], int n) {
    float xs[AG_FACE_OVAL_COUNT + 1];
    memset(mask, 0, (size_t)S * S);
    for (int y = 0; y < S; y++) {
        float cy = y + 0.5f;
        int k = 0;
        for (int i = 0; i < n; i++) {
            const float *a = pt[i], *b = pt[(i + 1) % n];
            if ((a[1] <= cy) != (b[1] <= cy))
                xs[k++] = a[0] + (cy - a[1]) / (b[1] - a[1]) * (b[0] - a[0]);
        }
        qsort(xs, (size_t)k, sizeof xs[0], cmp_float);
        for (int i = 0; i + 1 < k; i += 2) {
            int x0 = (int)ceilf(xs[i] - 0.5f), x1 = (int)ceilf(xs[i + 1] - 0.5f);
            x0 = x0 < 0 ? 0 : x0;
            x1 = x1 > S ? S : x1;
            if (x1 > x0)
                memset(mask + (size_t)y * S + x0, 255, (size_t)(x1 - x0));
        }
    }
}

/* One pass of a (2R+1) box blur along rows (stride 1) or columns (stride S), via tmp. */
static void box_blur(uint8_t *m, uint16_t *tmp, int S, int R, int vertical) {
    for (int line = 0; line < S; line++) {
        size_t base = vertical ? (size_t)line : (size_t)line * S;
        size_t step = vertical ? (size_t)S : 1;
        unsigned sum = 0;
        for (int i = -R; i <= R; i++)
            sum += i >= 0 && i < S ? m[base + (size_t)i * step] : 0;
        for (int i = 0; i < S; i++) {
            tmp[i] = (uint16_t)((sum + R) / (2 * R + 1));
            int add = i + R + 1, sub = i - R;
            sum += add < S ? m[base + (size_t)add * step] : 0;
            sum -= sub >= 0 ? m[base + (size_t)sub * step] : 0;
        }
        for (int i = 0; i < S; i++)
            m[base + (size_t)i * step] = (uint8_t)tmp[i];
    }
}

static int make_mask(uint8_t *mask, int S, const ag_face *face, const ag_affine *to_crop,
                     ag_error *err) {
    float pt[AG_FACE_OVAL_COUNT][2];
    int n = AG_FACE_OVAL_COUNT;
    if (face->has_landmarks) {
        for (int i = 0; i < n; i++) {
            double x = face->landmarks[ag_face_oval[i]][0], y = face->landmarks[ag_face_oval[i]][1];
            pt[i][0] = (float)(to_crop->a * x + to_crop->b * y + to_crop->c);
            pt[i][1] = (float)(to_crop->d * x + to_crop->e * y + to_crop->f);
        }
    } else {
        for (int i = 0; i < n; i++) {
            double t = 2 * M_PI * i / n;
            pt[i][0] = (float)(S * (0.5 + 0.30 * cos(t)));
            pt[i][1] = (float)(S * (0.52 + 0.36 * sin(t)));
        }
    }
    fill_polygon(mask, S, (const float(*)[2])pt, n);
    uint16_t *tmp = ag_malloc(sizeof *tmp * (size_t)S);
    if (!tmp)
        return ag_error_set(err, AG_E_NOMEM, "face paste: out of memory");
    int R = S / 32 > 1 ? S / 32 : 1;
    for (int pass = 0; pass < 2; pass++) {
        box_blur(mask, tmp, S, R, 0);
        box_blur(mask, tmp, S, R, 1);
    }
    ag_free(tmp);
    return AG_OK;
}

int ag_face_paste(ag_image *image, const ag_face *face, const ag_image *crop, ag_error *err) {
    if (!image || !image->pixels || !face || !crop || !crop->pixels ||
        crop->width != crop->height || crop->bands != image->bands)
        return ag_error_set(err, AG_E_ARG, "face paste: bad arguments");
    int S = crop->width;
    ag_affine to_image = ag_face_quad_map(face->quad, S);
    ag_affine to_crop = ag_affine_invert(&to_image);
    /* The crop's footprint in the image, clipped. */
    double x0 = 1e30, y0 = 1e30, x1 = -1e30, y1 = -1e30;
    for (int k = 0; k < 4; k++) {
        x0 = fmin(x0, face->quad[k][0]), x1 = fmax(x1, face->quad[k][0]);
        y0 = fmin(y0, face->quad[k][1]), y1 = fmax(y1, face->quad[k][1]);
    }
    int bx0 = (int)fmax(0, floor(x0)), by0 = (int)fmax(0, floor(y0));
    int bx1 = (int)fmin(image->width, ceil(x1)), by1 = (int)fmin(image->height, ceil(y1));
    if (!(bx1 > bx0 && by1 > by0))
        return AG_OK;
    int bw = bx1 - bx0, bh = by1 - by0, bands = image->bands;
    /* bbox pixel (x, y) -> crop: to_crop of image (x + bx0, y + by0). */
    ag_affine m = to_crop;
    m.c += to_crop.a * bx0 + to_crop.b * by0;
    m.f += to_crop.d * bx0 + to_crop.e * by0;
    uint8_t *mask = ag_malloc((size_t)S * S);
    uint8_t *face_px = ag_malloc((size_t)bw * bh * bands);
    uint8_t *mask_px = ag_malloc((size_t)bw * bh);
    int rc = mask && face_px && mask_px
                 ? AG_OK
                 : ag_error_set(err, AG_E_NOMEM, "face paste: out of memory");
    if (rc == AG_OK)
        rc = make_mask(mask, S, face, &to_crop, err);
    ag_image mask_img = {S, S, 1, mask};
    if (rc == AG_OK)
        rc = ag_face_warp(crop, &m, bw, bh, AG_WARP_REFLECT, AG_WARP_CUBIC, face_px, NULL, err);
    if (rc == AG_OK)
        rc =
            ag_face_warp(&mask_img, &m, bw, bh, AG_WARP_REFLECT, AG_WARP_CUBIC, mask_px, NULL, err);
    for (int y = 0; rc == AG_OK && y < bh; y++)
        for (int x = 0; x < bw; x++) {
            unsigned a = mask_px[(size_t)y * bw + x];
            double u = m.a * (x + 0.5) + m.b * (y + 0.5) + m.c;
            double v = m.d * (x + 0.5) + m.e * (y + 0.5) + m.f;
            if (!a || u < 0 || v < 0 || u >= S || v >= S)
                continue; /* outside the mask or the crop: untouched */
            uint8_t *p = image->pixels + ((size_t)(y + by0) * image->width + x + bx0) * bands;
            const uint8_t *q = face_px + ((size_t)y * bw + x) * bands;
            for (int b = 0; b < (bands == 4 ? 3 : bands); b++)
                p[b] = (uint8_t)((p[b] * (255 - a) + q[b] * a + 127) / 255);
        }
    ag_free(mask_px);
    ag_free(face_px);
    ag_free(mask);
    return rc;
}

int ag_stylize_paste_faces(ag_engine *engine, ag_engine *face_engine, const ag_image *in,
                           const ag_face *faces, int count, int size, ag_image *out,
                           ag_error *err) {
    size = size > 0 ? size : 512;
    face_engine = face_engine ? face_engine : engine;
    int rc = ag_stylize(engine, in, 0, out, err);
    for (int i = 0; rc == AG_OK && i < count; i++) {
        ag_image crop = {0}, styl = {0};
        rc = ag_face_align(in, &faces[i], size, &crop, err);
        if (rc == AG_OK)
            rc = ag_stylize(face_engine, &crop, 0, &styl, err);
        if (rc == AG_OK)
            rc = ag_face_paste(out, &faces[i], &styl, err);
        ag_image_fini(&styl);
        ag_image_fini(&crop);
    }
    if (rc)
        ag_image_fini(out);
    return rc;
}
