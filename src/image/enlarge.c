/*
 * enlarge.c - Lanczos3 enlarging of an ag_image, on the caller's thread.
 *
 * Why not libvips: vips_resize enlarges with vips_affine, which evaluates its background
 * through libvips' thread set, whose 8.14 version can lose a task (image.c,
 * docs/stability.md), and interpolates bicubically where face2paint (PIL's Image.LANCZOS)
 * uses Lanczos3. This follows PIL's resampler: output pixel i samples the input around
 * (i + 0.5) * in / out with a Lanczos3 window clipped at the borders and renormalised.
 * Rows stream: each input row is resampled horizontally once into a ring of the few rows
 * the vertical taps need, so the working memory is a handful of output rows. Alpha is
 * premultiplied around it.
 */
#include "image_internal.h"

#include "../util/util_internal.h"

#include <math.h>
#include <string.h>

#define LANCZOS_SUPPORT 3.0
#define MAX_TAPS 8 /* 2 * support + 1 = 7, and the ring's size; a power of two */

typedef struct taps {
    int first, count;
    float weight[MAX_TAPS];
} taps;

static double sinc(double x) {
    if (x == 0.0)
        return 1.0;
    x *= M_PI;
    return sin(x) / x;
}

static double lanczos3(double x) {
    return x > -LANCZOS_SUPPORT && x < LANCZOS_SUPPORT ? sinc(x) * sinc(x / LANCZOS_SUPPORT) : 0.0;
}

/* The taps of each of n_out outputs over n_in inputs (n_out >= n_in), as PIL computes them. */
static void make_taps(int n_in, int n_out, taps *t) {
    double scale = (double)n_in / n_out;
    for (int i = 0; i < n_out; i++) {
        double centre = (i + 0.5) * scale;
        int first = (int)(centre - LANCZOS_SUPPORT + 0.5);
        int end = (int)(centre + LANCZOS_SUPPORT + 0.5);
        first = first < 0 ? 0 : first;
        end = end > n_in ? n_in : end;
        double w[MAX_TAPS], sum = 0.0;
        int count = end - first;
        for (int k = 0; k < count; k++)
            sum += w[k] = lanczos3(first + k - centre + 0.5);
        t[i].first = first;
        t[i].count = count;
        for (int k = 0; k < count; k++)
            t[i].weight[k] = (float)(sum != 0.0 ? w[k] / sum : 0.0);
    }
}

/* One input row, premultiplied when it has alpha, resampled to the output width. */
static void resample_row(const uint8_t *in, int bands, const taps *tx, int width, float *out) {
    for (int x = 0; x < width; x++) {
        float acc[4] = {0};
        const taps *t = &tx[x];
        for (int k = 0; k < t->count; k++) {
            const uint8_t *p = in + (size_t)(t->first + k) * bands;
            float w = t->weight[k];
            float a = bands == 4 ? p[3] * (1.0f / 255.0f) : 1.0f;
            for (int c = 0; c < 3; c++)
                acc[c] += w * p[c] * a;
            if (bands == 4)
                acc[3] += w * p[3];
        }
        memcpy(out + (size_t)x * bands, acc, (size_t)bands * sizeof(float));
    }
}

static uint8_t to_u8(float v) {
    return v <= 0.0f ? 0 : v >= 255.0f ? 255 : (uint8_t)lrintf(v);
}

/* One output row from the ring of horizontally resampled rows, unpremultiplied. */
static void blend_rows(float *const *ring, const taps *t, int width, int bands, uint8_t *out) {
    for (int x = 0; x < width * bands; x += bands) {
        float acc[4] = {0};
        for (int k = 0; k < t->count; k++) {
            const float *r = ring[(t->first + k) % MAX_TAPS] + x;
            for (int c = 0; c < bands; c++)
                acc[c] += t->weight[k] * r[c];
        }
        float unmultiply = 1.0f;
        if (bands == 4) {
            out[x + 3] = to_u8(acc[3]);
            unmultiply = out[x + 3] ? 255.0f / acc[3] : 0.0f;
        }
        for (int c = 0; c < 3; c++)
            out[x + c] = to_u8(acc[c] * unmultiply);
    }
}

int ag_image_enlarge(const ag_image *in, int width, int height, const char *label, ag_image *out,
                     ag_error *err) {
    memset(out, 0, sizeof *out);
    AG_ASSERT(width >= in->width && height >= in->height && (in->bands == 3 || in->bands == 4));
    int bands = in->bands;
    size_t row_floats = (size_t)width * bands, bytes;
    if (!ag_mul_size(row_floats, (size_t)height, &bytes))
        return ag_error_set(err, AG_E_LIMIT, "%s: %dx%d is too large", label, width, height);
    taps *tx = ag_malloc(sizeof(taps) * ((size_t)width + height));
    float *ring_mem = ag_malloc(sizeof(float) * row_floats * MAX_TAPS);
    uint8_t *pixels = ag_malloc(bytes);
    if (!tx || !ring_mem || !pixels) {
        ag_free(tx);
        ag_free(ring_mem);
        ag_free(pixels);
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory enlarging to %dx%d", label, width,
                            height);
    }
    taps *ty = tx + width;
    make_taps(in->width, width, tx);
    make_taps(in->height, height, ty);
    float *ring[MAX_TAPS];
    for (int i = 0; i < MAX_TAPS; i++)
        ring[i] = ring_mem + row_floats * i;
    int next_row = 0; /* input rows below this one are in the ring (the last MAX_TAPS) */
    size_t in_stride = (size_t)in->width * bands;
    for (int y = 0; y < height; y++) {
        /* Taps only move forward and span at most 7 rows, so the ring holds them all. */
        for (; next_row < ty[y].first + ty[y].count; next_row++)
            resample_row(in->pixels + in_stride * next_row, bands, tx, width,
                         ring[next_row % MAX_TAPS]);
        blend_rows(ring, &ty[y], width, bands, pixels + row_floats * y);
    }
    ag_free(tx);
    ag_free(ring_mem);
    *out = (ag_image){.width = width, .height = height, .bands = bands, .pixels = pixels};
    return AG_OK;
}
