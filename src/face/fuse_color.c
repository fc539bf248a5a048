/*
 * fuse_color.c - colour for face fusion, in CIE L*a*b* (D65), where a shift of the mean
 * and a scale of the spread move lightness and tint independently and about as the eye
 * sees them (Reinhard et al. 2001 used the related l-alpha-beta space for the same reason):
 * the conversions, the statistics over a mask, the transfer, and skin smoothing.
 */
#include "fuse_internal.h"

#include <math.h>
#include <pthread.h>

/* sRGB's transfer function and its inverse, from tables (powf per value was half of the
 * colour stage): decoding interpolates between the 256 code values, encoding between 4096
 * steps of linear light (under 0.005 of a grey level from the exact curve). */
#define ENCODE_STEPS 4096
#define CBRT_STEPS 8192
static float decode_lut[257], encode_lut[ENCODE_STEPS + 2], cbrt_lut[CBRT_STEPS + 2];
static pthread_once_t lut_once = PTHREAD_ONCE_INIT;

static void make_luts(void) {
    for (int i = 0; i <= 256; i++) {
        double c = (i > 255 ? 255 : i) / 255.0;
        decode_lut[i] = (float)(c <= 0.04045 ? c / 12.92 : pow((c + 0.055) / 1.055, 2.4));
    }
    for (int i = 0; i <= CBRT_STEPS + 1; i++)
        cbrt_lut[i] = (float)cbrt((double)i / CBRT_STEPS);
    for (int i = 0; i <= ENCODE_STEPS + 1; i++) {
        double c = (i > ENCODE_STEPS ? ENCODE_STEPS : i) / (double)ENCODE_STEPS;
        encode_lut[i] =
            (float)(255.0 * (c <= 0.0031308 ? 12.92 * c : 1.055 * pow(c, 1.0 / 2.4) - 0.055));
    }
}

static float srgb_to_linear(float c) {
    c = c < 0 ? 0 : c > 255 ? 255 : c;
    int i = (int)c;
    return decode_lut[i] + (c - (float)i) * (decode_lut[i + 1] - decode_lut[i]);
}

static float linear_to_srgb(float c) {
    c = c < 0 ? 0 : c > 1 ? ENCODE_STEPS : c * ENCODE_STEPS;
    int i = (int)c;
    return encode_lut[i] + (c - (float)i) * (encode_lut[i + 1] - encode_lut[i]);
}

/* CIE's f(t), with its linear part below (6/29)^3, and the inverse. The cube root from a
 * table on [0, 1] (t is a colour over the white point's: at most 1 from sRGB), linearly
 * interpolated: under 5e-6 off above (6/29)^3, 6e-4 of a unit of L*; cbrtf was most of a
 * conversion. */
static float lab_f(float t) {
    if (!(t > 0.008856452f))
        return t * 7.787037f + 0.137931f;
    if (t >= 1.0f)
        return cbrtf(t);
    float u = t * CBRT_STEPS;
    int i = (int)u;
    return cbrt_lut[i] + (u - (float)i) * (cbrt_lut[i + 1] - cbrt_lut[i]);
}

static float lab_finv(float f) {
    return f > 0.206896552f ? f * f * f : (f - 0.137931f) * 0.128418549f;
}

static const float white[3] = {0.95047f, 1.0f, 1.08883f}; /* D65 */

void ag_fuse_rgb_to_lab(float *px, size_t n) {
    pthread_once(&lut_once, make_luts);
    for (size_t i = 0; i < n; i++, px += 3) {
        float r = srgb_to_linear(px[0]), g = srgb_to_linear(px[1]), b = srgb_to_linear(px[2]);
        float x = (0.4124564f * r + 0.3575761f * g + 0.1804375f * b) / white[0];
        float y = (0.2126729f * r + 0.7151522f * g + 0.0721750f * b) / white[1];
        float z = (0.0193339f * r + 0.1191920f * g + 0.9503041f * b) / white[2];
        float fx = lab_f(x), fy = lab_f(y), fz = lab_f(z);
        px[0] = 116.0f * fy - 16.0f;
        px[1] = 500.0f * (fx - fy);
        px[2] = 200.0f * (fy - fz);
    }
}

void ag_fuse_lab_to_rgb(float *px, size_t n) {
    pthread_once(&lut_once, make_luts);
    for (size_t i = 0; i < n; i++, px += 3) {
        float fy = (px[0] + 16.0f) / 116.0f, fx = fy + px[1] / 500.0f, fz = fy - px[2] / 200.0f;
        float x = lab_finv(fx) * white[0], y = lab_finv(fy) * white[1], z = lab_finv(fz) * white[2];
        float r = 3.2404542f * x - 1.5371385f * y - 0.4985314f * z;
        float g = -0.9692660f * x + 1.8760108f * y + 0.0415560f * z;
        float b = 0.0556434f * x - 0.2040259f * y + 1.0572252f * z;
        px[0] = linear_to_srgb(r), px[1] = linear_to_srgb(g), px[2] = linear_to_srgb(b);
    }
}

size_t ag_fuse_stats(const float *px, const uint8_t *mask, size_t n, double mean[3], double sd[3]) {
    double sum[3] = {0, 0, 0}, sq[3] = {0, 0, 0};
    size_t count = 0;
    for (size_t i = 0; i < n; i++) {
        if (!mask[i])
            continue;
        for (int c = 0; c < 3; c++) {
            double v = (double)px[i * 3 + c];
            sum[c] += v, sq[c] += v * v;
        }
        count++;
    }
    for (int c = 0; c < 3; c++) {
        mean[c] = count ? sum[c] / (double)count : 0;
        double var = count ? sq[c] / (double)count - mean[c] * mean[c] : 0;
        sd[c] = var > 0 ? sqrt(var) : 0;
    }
    return count;
}

void ag_fuse_transfer(float *px, const uint8_t *mask, size_t n, const double from_mean[3],
                      const double from_sd[3], const double to_mean[3], const double to_sd[3]) {
    float scale[3], shift[3];
    for (int c = 0; c < 3; c++) {
        double s = to_sd[c] / (from_sd[c] > 1.0 ? from_sd[c] : 1.0);
        s = s > 3.0 ? 3.0 : s; /* a flat source face is not stretched into noise */
        scale[c] = (float)s;
        shift[c] = (float)(to_mean[c] - s * from_mean[c]);
    }
    for (size_t i = 0; i < n; i++)
        if (!mask || mask[i])
            for (int c = 0; c < 3; c++)
                px[i * 3 + c] = px[i * 3 + c] * scale[c] + shift[c];
}

/* dst (h, w) <- the (2r+1)-box mean of src (h, w, stride floats a pixel) along rows, then
 * along columns (edges averaged over the pixels they have). tmp: w floats. */
static void box_mean(float *dst, const float *src, int stride, int w, int h, int r, float *tmp) {
    for (int y = 0; y < h; y++) {
        const float *row = src + (size_t)y * w * stride;
        double sum = 0;
        int lo = 0, hi = -1;
        for (int x = 0; x < w; x++) {
            while (hi < x + r && hi + 1 < w)
                sum += (double)row[(size_t)++hi * stride];
            while (lo < x - r)
                sum -= (double)row[(size_t)lo++ * stride];
            dst[(size_t)y * w + x] = (float)(sum / (hi - lo + 1));
        }
    }
    for (int x = 0; x < w; x++) {
        double sum = 0;
        int lo = 0, hi = -1;
        for (int y = 0; y < h; y++) {
            while (hi < y + r && hi + 1 < h)
                sum += (double)dst[(size_t)++hi * w + x];
            while (lo < y - r)
                sum -= (double)dst[(size_t)lo++ * w + x];
            tmp[y] = (float)(sum / (hi - lo + 1));
        }
        for (int y = 0; y < h; y++)
            dst[(size_t)y * w + x] = tmp[y];
    }
}

void ag_fuse_smooth(float *lab, const uint8_t *mask, int w, int h, int r, float amount,
                    float *tmp) {
    float *blur = tmp, *col = tmp + (size_t)w * h;
    box_mean(blur, lab, 3, w, h, r, col);
    const float sigma = 6.0f; /* lightness steps larger than this are edges: kept */
    for (size_t i = 0; i < (size_t)w * h; i++) {
        if (!mask[i])
            continue;
        float d = blur[i] - lab[i * 3];
        lab[i * 3] += amount * d / (1.0f + (d / sigma) * (d / sigma));
    }
}

void ag_fuse_match_skin(float *px, const uint8_t *mask, size_t n, const double from_mean[3],
                        const double from_sd[3], const double to_mean[3], const double to_sd[3]) {
    /* Lightness by a gain: L* + 16 is nearly proportional to the cube root of luminance, so
     * a gain there is one on luminance, and every ratio of brightnesses (eyes over cheeks,
     * teeth over lips) stays the source's. A shift and a stretch of L* would move dark
     * features by more than the skin: hollow sockets under a stretch, make-up washed out
     * under a shift. */
    double gain = (to_mean[0] + 16) / (from_mean[0] + 16 > 1 ? from_mean[0] + 16 : 1);
    gain = gain > 3 ? 3 : gain < 1.0 / 3 ? 1.0 / 3 : gain;
    double fm[3] = {from_mean[0], from_mean[1], from_mean[2]};
    double fs[3] = {from_mean[0] + 16, from_sd[1], from_sd[2]};
    double tm[3] = {to_mean[0], to_mean[1], to_mean[2]};
    double ts[3] = {(from_mean[0] + 16) * gain, to_sd[1], to_sd[2]};
    ag_fuse_transfer(px, mask, n, fm, fs, tm, ts);
}
