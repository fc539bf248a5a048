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

/* JPEG has no alpha: composite over white, what a viewer shows for transparency. */
static int flatten_white(VipsImage *in, VipsImage **t, VipsImage **out) {
    VipsArrayDouble *white = vips_array_double_newv(3, 255.0, 255.0, 255.0);
    int rc = vips_flatten(in, &t[0], "background", white, NULL);
    vips_area_unref(VIPS_AREA(white));
    if (rc != 0)
        return -1;
    if (t[0]->BandFmt == VIPS_FORMAT_UCHAR) {
        *out = t[0];
        return 0;
    }
    if (vips_cast(t[0], &t[1], VIPS_FORMAT_UCHAR, NULL) != 0)
        return -1;
    *out = t[1];
    return 0;
}

/* Run the saver; *buf is g_malloc'ed by libvips. */
static int save_buffer(VipsImage *in, ag_format format, int quality, void **buf, size_t *len) {
    VipsObject *scope = VIPS_OBJECT(vips_image_new());
    VipsImage **t = (VipsImage **)vips_object_local_array(scope, 2);
    VipsImage *x = in;
    int rc = -1;
    switch (format) {
    case AG_FORMAT_PNG: rc = vips_pngsave_buffer(x, buf, len, "strip", TRUE, NULL); break;
    case AG_FORMAT_JPEG:
        if (x->Bands == 4 && flatten_white(in, t, &x) != 0)
            break;
        rc = vips_jpegsave_buffer(x, buf, len, "Q", quality, "strip", TRUE, "optimize_coding", TRUE,
                                  NULL);
        break;
    case AG_FORMAT_WEBP:
        rc = vips_webpsave_buffer(x, buf, len, "Q", quality, "strip", TRUE, NULL);
        break;
    }
    g_object_unref(scope);
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
    VipsImage *in;
    int rc = ag_vips_wrap(image, &in, err);
    if (rc != AG_OK)
        return rc;
    void *buf = NULL;
    size_t len = 0;
    if (save_buffer(in, format, quality, &buf, &len) != 0) {
        rc = ag_vips_error(err, AG_E_INTERNAL, "encode", ag_format_extension(format));
        goto cleanup;
    }
    /* Copy into our allocator so the caller frees with ag_free and metrics see the bytes. */
    *data = ag_malloc(len);
    if (!*data) {
        rc = ag_error_set(err, AG_E_NOMEM, "encode: out of memory for %zu bytes", len);
        goto cleanup;
    }
    memcpy(*data, buf, len);
    *size = len;
cleanup:
    g_free(buf);
    g_object_unref(in);
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
