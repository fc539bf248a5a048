/*
 * encode.c - ag_image to PNG, JPEG or WebP bytes, the format name helpers, and the atomic
 * file writer (temporary file in the target directory, fsync, rename).
 *
 * Output never carries metadata ("strip"): the input's EXIF (GPS, camera serial) must not
 * leak into a stylised picture, and orientation is already applied to the pixels.
 */
#include "image_internal.h"

#include "../util/util_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* After stdio.h: jpeglib.h uses FILE without including it. */
#include <jpeglib.h>
#include <png.h>
#include <setjmp.h>
#include <webp/encode.h>

int ag_format_parse(const char *text) {
    if (!text)
        return -1;
    if (strcasecmp(text, "png") == 0)
        return AG_FORMAT_PNG;
    if (strcasecmp(text, "jpg") == 0 || strcasecmp(text, "jpeg") == 0)
        return AG_FORMAT_JPEG;
    if (strcasecmp(text, "webp") == 0)
        return AG_FORMAT_WEBP;
    return -1;
}

int ag_format_from_path(const char *path) {
    if (!path)
        return -1;
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash + 1 : path, '.');
    return dot ? ag_format_parse(dot + 1) : -1;
}

const char *ag_format_mime(ag_format format) {
    switch (format) {
    case AG_FORMAT_PNG: return "image/png";
    case AG_FORMAT_JPEG: return "image/jpeg";
    case AG_FORMAT_WEBP: return "image/webp";
    }
    return "application/octet-stream";
}

/* Without the dot, and accepted back by ag_format_parse. */
const char *ag_format_extension(ag_format format) {
    switch (format) {
    case AG_FORMAT_PNG: return "png";
    case AG_FORMAT_JPEG: return "jpg";
    case AG_FORMAT_WEBP: return "webp";
    }
    return "";
}

/*
 * The encoders call libpng, libjpeg-turbo and libwebp directly, on the caller's thread.
 * libvips' savers run in its worker threads, and libvips 8.14 (Debian 12) retires a worker
 * that has been idle for 15 s in a way that can lose a task handed to it at that moment:
 * the caller then waits forever (libvips rewrote its thread set in 8.15). A server worker
 * that decodes, runs a 15 s inference and encodes hit exactly that window (found under
 * valgrind in CI). Decoding runs on the caller's thread too (image.c says how). The three
 * libraries are the ones libvips itself links.
 */

/* libpng's simplified API, compressed once into a buffer of the worst-case size. */
static int encode_png(const ag_image *im, uint8_t **out, size_t *size, ag_error *err) {
    png_image png;
    memset(&png, 0, sizeof png);
    png.version = PNG_IMAGE_VERSION;
    png.width = (png_uint_32)im->width;
    png.height = (png_uint_32)im->height;
    png.format = im->bands == 4 ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;
    png_alloc_size_t capacity = PNG_IMAGE_PNG_SIZE_MAX(png);
    uint8_t *buf = ag_malloc(capacity);
    if (!buf)
        return ag_error_set(err, AG_E_NOMEM, "encode png: out of memory for %zu bytes",
                            (size_t)capacity);
    png_alloc_size_t used = capacity;
    /* A result larger than the buffer comes back as success with the size it needed. */
    if (!png_image_write_to_memory(&png, buf, &used, 0, im->pixels, 0, NULL) || used > capacity) {
        ag_free(buf);
        return ag_error_set(err, AG_E_INTERNAL, "encode png: %s",
                            png.message[0] ? png.message : "larger than the worst case");
    }
    uint8_t *fitted = ag_realloc(buf, used);
    *out = fitted ? fitted : buf;
    *size = used;
    return AG_OK;
}

/* The encoded bytes, from the codec's own allocation into ours (the caller frees with ag_free
 * and the server's accounting sees them). */
static int copy_out(const void *bytes, size_t n, const char *codec, uint8_t **out, size_t *size,
                    ag_error *err) {
    *out = ag_malloc(n);
    if (!*out)
        return ag_error_set(err, AG_E_NOMEM, "encode %s: out of memory for %zu bytes", codec, n);
    memcpy(*out, bytes, n);
    *size = n;
    return AG_OK;
}

typedef struct jpeg_failure {
    struct jpeg_error_mgr manager;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} jpeg_failure;

static void jpeg_fail(j_common_ptr cinfo) {
    jpeg_failure *f = (jpeg_failure *)cinfo->err;
    f->manager.format_message(cinfo, f->message);
    longjmp(f->jump, 1);
}

/* One output row: RGB as is; RGBA composited over white (JPEG has no alpha; white is what
 * a viewer shows for transparency). */
static void jpeg_row(const ag_image *im, int y, uint8_t *rgb) {
    const uint8_t *src = im->pixels + (size_t)y * (size_t)im->width * (size_t)im->bands;
    if (im->bands == 3) {
        memcpy(rgb, src, (size_t)im->width * 3);
        return;
    }
    for (int x = 0; x < im->width; x++, src += 4) {
        unsigned alpha = src[3];
        for (int c = 0; c < 3; c++)
            rgb[3 * x + c] = (uint8_t)((src[c] * alpha + 255u * (255u - alpha) + 127u) / 255u);
    }
}

/* libjpeg-turbo into its own malloc'ed memory destination, then copied into ours. Chroma is
 * subsampled 4:2:0 below quality 90 and kept whole from 90, as libvips does; Huffman tables
 * are optimised (smaller files, no quality change). */
static int encode_jpeg(const ag_image *im, int quality, uint8_t **out, size_t *size,
                       ag_error *err) {
    struct jpeg_compress_struct cinfo;
    jpeg_failure failure = {0};
    unsigned char *volatile mem = NULL;
    unsigned long mem_size = 0;
    uint8_t *volatile row = ag_malloc((size_t)im->width * 3);
    if (!row)
        return ag_error_set(err, AG_E_NOMEM, "encode jpeg: out of memory");
    cinfo.err = jpeg_std_error(&failure.manager);
    failure.manager.error_exit = jpeg_fail;
    if (setjmp(failure.jump)) {
        jpeg_destroy_compress(&cinfo);
        free(mem);
        ag_free(row);
        return ag_error_set(err, AG_E_INTERNAL, "encode jpeg: %s", failure.message);
    }
    jpeg_create_compress(&cinfo);
    jpeg_mem_dest(&cinfo, (unsigned char **)&mem, &mem_size);
    cinfo.image_width = (JDIMENSION)im->width;
    cinfo.image_height = (JDIMENSION)im->height;
    cinfo.input_components = 3;
    cinfo.in_color_space = JCS_RGB;
    jpeg_set_defaults(&cinfo);
    jpeg_set_quality(&cinfo, quality, TRUE);
    cinfo.optimize_coding = TRUE;
    if (quality >= 90)
        cinfo.comp_info[0].h_samp_factor = cinfo.comp_info[0].v_samp_factor = 1;
    jpeg_start_compress(&cinfo, TRUE);
    for (int y = 0; y < im->height; y++) {
        JSAMPROW rows[1] = {row};
        jpeg_row(im, y, row);
        jpeg_write_scanlines(&cinfo, rows, 1);
    }
    jpeg_finish_compress(&cinfo);
    jpeg_destroy_compress(&cinfo);
    ag_free(row);
    int rc = copy_out(mem, mem_size, "jpeg", out, size, err);
    free(mem);
    return rc;
}

/* libwebp's simple API: lossy at the given quality, alpha kept. */
static int encode_webp(const ag_image *im, int quality, uint8_t **out, size_t *size,
                       ag_error *err) {
    if (im->width > WEBP_MAX_DIMENSION || im->height > WEBP_MAX_DIMENSION)
        return ag_error_set(err, AG_E_ARG, "encode webp: %dx%d is over WebP's %d pixels a side",
                            im->width, im->height, WEBP_MAX_DIMENSION);
    uint8_t *mem = NULL;
    int stride = im->width * im->bands;
    size_t n = im->bands == 4
                   ? WebPEncodeRGBA(im->pixels, im->width, im->height, stride, (float)quality, &mem)
                   : WebPEncodeRGB(im->pixels, im->width, im->height, stride, (float)quality, &mem);
    if (n == 0) {
        WebPFree(mem);
        return ag_error_set(err, AG_E_INTERNAL, "encode webp: the encoder failed");
    }
    int rc = copy_out(mem, n, "webp", out, size, err);
    WebPFree(mem);
    return rc;
}

int ag_image_encode(const ag_image *image, ag_format format, int quality, void **data, size_t *size,
                    ag_error *err) {
    *data = NULL;
    *size = 0;
    if (format != AG_FORMAT_PNG && format != AG_FORMAT_JPEG && format != AG_FORMAT_WEBP)
        return ag_error_set(err, AG_E_ARG, "encode: unknown format %d", (int)format);
    if (format != AG_FORMAT_PNG && (quality < 1 || quality > 100))
        return ag_error_set(err, AG_E_ARG, "encode: quality %d is outside 1..100", quality);
    size_t bytes;
    int rc = ag_image_check(image, "encode", &bytes, err);
    if (rc != AG_OK)
        return rc;
    uint8_t *out = NULL;
    switch (format) {
    case AG_FORMAT_PNG: rc = encode_png(image, &out, size, err); break;
    case AG_FORMAT_JPEG: rc = encode_jpeg(image, quality, &out, size, err); break;
    default: rc = encode_webp(image, quality, &out, size, err); break;
    }
    *data = out;
    return rc;
}

static int write_all(int fd, const uint8_t *data, size_t size) {
    while (size > 0) {
        ssize_t n = write(fd, data, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        data += n;
        size -= (size_t)n;
    }
    return 0;
}

/* "<dir>/.<base>.XXXXXX" next to `path`, so the final rename stays within one filesystem. */
static int temp_template(const char *path, char *out, size_t out_size) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    int dir_len = slash ? (int)(slash - path) + 1 : 0;
    int n = snprintf(out, out_size, "%.*s.%s.XXXXXX", dir_len, path, base);
    return n > 0 && (size_t)n < out_size ? 0 : -1;
}

/* Make the rename durable. Best effort: the file itself is complete and synced already, and
 * some filesystems cannot sync a directory, so a failure here is not worth failing a save
 * whose result is in place. */
static void fsync_dir(const char *path) {
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    int dir_len = !slash ? 0 : slash == path ? 1 : (int)(slash - path);
    int n =
        dir_len ? snprintf(dir, sizeof dir, "%.*s", dir_len, path) : snprintf(dir, sizeof dir, ".");
    if (n < 0 || (size_t)n >= sizeof dir)
        return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return;
    (void)fsync(fd);
    close(fd);
}

/* Write, sync and rename into place. On failure the temporary file is removed, errno says
 * why and *step names the failing step. */
static int write_atomically(const char *path, const uint8_t *data, size_t size, const char **step) {
    char tmp[PATH_MAX];
    *step = "path too long";
    if (temp_template(path, tmp, sizeof tmp) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    *step = "cannot create a temporary file";
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return -1;
    /* mkstemp creates 0600; an output picture is meant to be readable like any new file. */
    *step = "cannot set permissions";
    if (fchmod(fd, 0644) != 0)
        goto fail;
    *step = "write failed";
    if (write_all(fd, data, size) != 0)
        goto fail;
    *step = "fsync failed";
    if (fsync(fd) != 0)
        goto fail;
    *step = "close failed";
    int closed = close(fd); /* never retried: Linux frees the descriptor even on EINTR */
    fd = -1;
    if (closed != 0)
        goto fail;
    *step = "rename failed";
    if (rename(tmp, path) != 0)
        goto fail;
    fsync_dir(path);
    return 0;
fail:;
    int saved = errno;
    if (fd >= 0)
        close(fd);
    unlink(tmp);
    errno = saved;
    return -1;
}

int ag_image_save_file(const ag_image *image, const char *path, ag_format format, int quality,
                       ag_error *err) {
    if (!path || !path[0])
        return ag_error_set(err, AG_E_ARG, "save: empty path");
    void *data;
    size_t size;
    int rc = ag_image_encode(image, format, quality, &data, &size, err);
    if (rc != AG_OK)
        return rc;
    const char *step;
    if (write_atomically(path, data, size, &step) != 0)
        rc = ag_error_set(err, AG_E_IO, "%s: %s: %s", path, step, strerror(errno));
    ag_free(data);
    return rc;
}
