/*
 * image_internal.h - what the files of src/image/ share: libvips error capture, the
 * conversion of any decoded image to 8-bit sRGB, exact-size Lanczos resizing, and the
 * copies between a VipsImage pipeline and an ag_image. Not part of the public API.
 *
 * Ownership convention of the helpers below: `in` is borrowed, `*out` is a new reference
 * the caller releases with g_object_unref.
 */
#ifndef AG_IMAGE_INTERNAL_H
#define AG_IMAGE_INTERNAL_H

#include "animegan.h"

#include <vips/vips.h>

/* Rows computed per vips_region_prepare when copying a pipeline out: enough for libvips'
 * per-call overhead to vanish, small enough that the strip buffer stays a few MB. */
#define AG_IMAGE_STRIP_ROWS 64

/* Largest portrait_size accepted (a 16384^2 RGBA image is already 1 GiB). */
#define AG_IMAGE_MAX_PORTRAIT_SIZE 16384

/* Largest file ag_image_decode_file reads into memory. */
#define AG_IMAGE_MAX_FILE_BYTES ((size_t)1 << 30)

/*
 * Fill `err` with `code` and "label: what (libvips' text)", then clear libvips' error
 * buffer. Call right after the failing libvips call: the buffer is process-wide, so the
 * longer we wait the more likely another thread's message lands in it. Returns `code`.
 */
int ag_vips_error(ag_error *err, int code, const char *label, const char *what);

/* Convert a freshly loaded image of any colour space, depth and band count to uchar sRGB
 * with 3 bands, or 4 when it has alpha. Pixels are computed lazily, on read. */
int ag_vips_to_srgb8(VipsImage *in, VipsImage **out, const char *label, ag_error *err);

/* Lanczos3 reduction of a uchar 3- or 4-band image to exactly width x height (alpha is
 * premultiplied around the resampling so transparent pixels do not bleed colour). Used to
 * shrink: enlarging goes through ag_image_enlarge. */
int ag_vips_resize_exact(VipsImage *in, int width, int height, VipsImage **out, const char *label,
                         ag_error *err);

/* Lanczos3 enlarging of a 3- or 4-band image to width x height, neither smaller than the
 * input, on the calling thread (enlarge.c); out is a new ag_image. */
int ag_image_enlarge(const ag_image *in, int width, int height, const char *label, ag_image *out,
                     ag_error *err);

/* Compute every pixel of `image` (uchar, 3 or 4 bands) in the calling thread, strip by strip
 * in top-to-bottom order (so sequential loaders work), into a new ag_image. A decoder error
 * met on the way (corrupt or truncated data) becomes AG_E_FORMAT naming `label`. */
int ag_vips_read(VipsImage *image, const char *label, ag_image *out, ag_error *err);

/* 3 or 4 bands of pixels whose size fits (*bytes, and rows an int can stride); else AG_E_ARG
 * naming `what`. */
int ag_image_check(const ag_image *image, const char *what, size_t *bytes, ag_error *err);

/* Wrap the pixels of `image` as a uchar sRGB VipsImage without copying; `image` must
 * outlive *out. AG_E_ARG when the ag_image is not a valid 3- or 4-band image. */
int ag_vips_wrap(const ag_image *image, VipsImage **out, ag_error *err);

/* What a WebP file's container says; icc points into the file's bytes (NULL: none). */
typedef struct ag_webp_info {
    int width, height; /* canvas, as stored */
    int bands;         /* 3, or 4 when the first frame has alpha or leaves canvas uncovered */
    int orientation;   /* EXIF orientation 1..8, 1 when there is none */
    int lossless;      /* VP8L: libwebp decodes into an ARGB copy of the whole frame */
    const void *icc;
    size_t icc_size;
} ag_webp_info;

/* Parse a WebP container without decoding pixels; AG_E_FORMAT unless it is complete. */
int ag_webp_read_info(const void *data, size_t size, const char *label, ag_webp_info *info,
                      ag_error *err);

/* Decode the first frame (of an animation: onto a transparent canvas) with libwebp on the
 * calling thread, into a new ag_image of info's size and bands. */
int ag_webp_decode(const void *data, size_t size, const ag_webp_info *info, const char *label,
                   ag_image *out, ag_error *err);

#endif
