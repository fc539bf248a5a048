/*
 * image.c - libvips start-up and the plumbing every image file uses: error capture, reading
 * a pipeline's pixels into an ag_image, and wrapping an ag_image for libvips.
 *
 * Threads and memory: the engine owns the CPU budget (its worker threads run the generator),
 * and the server runs one request per worker thread. So libvips gets concurrency 1, and
 * ag_vips_read computes pixels with vips_region_prepare in the calling thread rather than
 * through vips_image_write_to_memory's thread pool: a decode costs one thread, the caller's.
 * Nothing here hands work to libvips' own threads, whose 8.14 thread set can lose a task:
 * encoding (encode.c), WebP decoding (webp_load.c) and enlarging (enlarge.c) are done
 * without libvips for that reason. The operation cache is off: it would keep decoded
 * images alive between requests, memory nobody accounts for, and every request is a
 * different image anyway.
 */
#include "image_internal.h"

#include "../util/util_internal.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <vips/vector.h> /* vips_vector_set_enabled: vips.h leaves it out */

static pthread_mutex_t startup_lock = PTHREAD_MUTEX_INITIALIZER;
static int started;

int ag_image_startup(const char *argv0, ag_error *err) {
    int rc = AG_OK;
    pthread_mutex_lock(&startup_lock);
    if (!started) {
        if (VIPS_INIT(argv0 ? argv0 : "animegan") != 0) {
            rc = ag_vips_error(err, AG_E_INTERNAL, "libvips", "start-up failed");
        } else {
            vips_concurrency_set(1);
            vips_cache_set_max(0);
            /* Loaders libvips marks untrusted (SVG, PDF, FITS, ...) are not fuzzed for hostile
             * input; we only ever want the six photo formats anyway (see decode.c). */
            vips_block_untrusted_set(TRUE);
            /* No run-time compiled (liborc) loops: Debian 12's liborc 0.4.33 frees compiled
             * code unsafely when two workers' pipelines end at once (a SEGV in
             * orc_code_free, seen in the ASan soak); the C loops are libvips' own. */
            vips_vector_set_enabled(FALSE);
            /* Leak reports cost time at every unref; keep them for an explicit VIPS_LEAK=1. */
            if (!getenv("VIPS_LEAK"))
                vips_leak_set(FALSE);
            started = 1;
        }
    }
    pthread_mutex_unlock(&startup_lock);
    return rc;
}

void ag_image_shutdown(void) {
    pthread_mutex_lock(&startup_lock);
    if (started) {
        vips_shutdown();
        started = 0;
    }
    pthread_mutex_unlock(&startup_lock);
}

void ag_image_fini(ag_image *image) {
    if (!image)
        return;
    ag_free(image->pixels);
    memset(image, 0, sizeof *image);
}

/* libvips' messages are "domain: text\n" lines; join them into one line. */
static void one_line(char *text) {
    size_t n = strlen(text);
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == ' '))
        text[--n] = '\0';
    for (char *p = text; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
}

int ag_vips_error(ag_error *err, int code, const char *label, const char *what) {
    /* Copy and clear in one step under libvips' own lock. */
    char *text = vips_error_buffer_copy();
    if (text)
        one_line(text);
    if (text && text[0])
        ag_error_set(err, code, "%s: %s (%s)", label, what, text);
    else
        ag_error_set(err, code, "%s: %s", label, what);
    g_free(text);
    return code;
}

static int copy_strips(VipsRegion *region, int width, int height, size_t row_bytes,
                       uint8_t *pixels) {
    for (int top = 0; top < height; top += AG_IMAGE_STRIP_ROWS) {
        int rows = height - top < AG_IMAGE_STRIP_ROWS ? height - top : AG_IMAGE_STRIP_ROWS;
        VipsRect strip = {.left = 0, .top = top, .width = width, .height = rows};
        if (vips_region_prepare(region, &strip) != 0)
            return -1;
        for (int y = top; y < top + rows; y++)
            memcpy(pixels + (size_t)y * row_bytes, VIPS_REGION_ADDR(region, 0, y), row_bytes);
    }
    return 0;
}

int ag_vips_read(VipsImage *image, const char *label, ag_image *out, ag_error *err) {
    memset(out, 0, sizeof *out);
    AG_ASSERT(image->BandFmt == VIPS_FORMAT_UCHAR && (image->Bands == 3 || image->Bands == 4));
    int width = image->Xsize, height = image->Ysize, bands = image->Bands;
    size_t row_bytes, total_bytes;
    if (!ag_mul_size((size_t)width, (size_t)bands, &row_bytes) ||
        !ag_mul_size(row_bytes, (size_t)height, &total_bytes))
        return ag_error_set(err, AG_E_LIMIT, "%s: image of %dx%d is too large", label, width,
                            height);
    uint8_t *pixels = ag_malloc(total_bytes);
    if (!pixels)
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory for %zu bytes of pixels", label,
                            total_bytes);
    int rc = AG_OK;
    VipsRegion *region = vips_region_new(image);
    if (!region) {
        rc = ag_vips_error(err, AG_E_NOMEM, label, "cannot read pixels");
        goto cleanup;
    }
    if (copy_strips(region, width, height, row_bytes, pixels) != 0) {
        rc = ag_vips_error(err, AG_E_FORMAT, label, "corrupt or truncated image data");
        goto cleanup;
    }
    out->width = width;
    out->height = height;
    out->bands = bands;
    out->pixels = pixels;
    pixels = NULL;
cleanup:
    if (region)
        g_object_unref(region);
    ag_free(pixels);
    return rc;
}

int ag_image_check(const ag_image *image, const char *what, size_t *bytes, ag_error *err) {
    if (!image || !image->pixels || image->width <= 0 || image->height <= 0 ||
        (image->bands != 3 && image->bands != 4))
        return ag_error_set(err, AG_E_ARG, "%s: expected 3 or 4 bands of pixels, got %dx%dx%d",
                            what, image ? image->width : 0, image ? image->height : 0,
                            image ? image->bands : 0);
    if (!ag_mul_size((size_t)image->width * (size_t)image->bands, (size_t)image->height, bytes) ||
        image->width > INT_MAX / 4)
        return ag_error_set(err, AG_E_ARG, "%s: %dx%d is too large", what, image->width,
                            image->height);
    return AG_OK;
}

int ag_vips_wrap(const ag_image *image, VipsImage **out, ag_error *err) {
    *out = NULL;
    size_t bytes;
    int rc = ag_image_check(image, "image", &bytes, err);
    if (rc != AG_OK)
        return rc;
    VipsImage *raw = vips_image_new_from_memory(image->pixels, bytes, image->width, image->height,
                                                image->bands, VIPS_FORMAT_UCHAR);
    if (!raw)
        return ag_vips_error(err, AG_E_NOMEM, "image", "cannot wrap pixels");
    /* new_from_memory leaves the interpretation to guesswork; the pipeline needs sRGB. */
    rc = vips_copy(raw, out, "interpretation", VIPS_INTERPRETATION_sRGB, NULL);
    g_object_unref(raw);
    if (rc != 0)
        return ag_vips_error(err, AG_E_INTERNAL, "image", "cannot wrap pixels");
    return AG_OK;
}
