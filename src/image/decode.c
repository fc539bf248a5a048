/*
 * decode.c - encoded bytes to an ag_image: sniff the format, read the header, check limits,
 * plan the output size, then decode, convert to 8-bit sRGB, orient and resize in one pass.
 *
 * The plan (output size, portrait crop, JPEG shrink-on-load) is made from the header alone,
 * so an image that is too large or too small is refused before a single pixel is decoded.
 * Loaders run in sequential mode with fail_on=error: a truncated or corrupt file fails the
 * decode (AG_E_FORMAT) instead of coming back half grey. WebP is the exception: libwebp
 * decodes its first frame to memory (webp_load.c), then the same steps follow.
 */
#include "image_internal.h"

#include "../util/util_internal.h"

#include <stdio.h>
#include <string.h>

/* The formats we decode, by the libvips class that vips_foreign_find_load_buffer names.
 * Anything else libvips might recognise (SVG, PDF, FITS, ...) is refused: a photo service
 * has no use for it and each loader is more attack surface. */
typedef struct ag_loader {
    const char *class_name;
    const char *format;
    int multipage; /* takes "n" and "page": only the first frame or page is decoded */
    int jpeg;      /* takes "shrink" (shrink-on-load by 2, 4 or 8) */
    int webp;      /* decoded by libwebp (webp_load.c), not by the libvips loader */
} ag_loader;

static const ag_loader loaders[] = {
    {"VipsForeignLoadJpegBuffer", "JPEG", 0, 1, 0}, {"VipsForeignLoadPngBuffer", "PNG", 0, 0, 0},
    {"VipsForeignLoadWebpBuffer", "WebP", 1, 0, 1}, {"VipsForeignLoadTiffBuffer", "TIFF", 1, 0, 0},
    {"VipsForeignLoadNsgifBuffer", "GIF", 1, 0, 0}, {"VipsForeignLoadHeifBuffer", "HEIF", 1, 0, 0},
};

/* What the header says and what we will make of it. */
typedef struct ag_decode_plan {
    int src_width, src_height; /* upright, i.e. after EXIF orientation */
    int crop_left, crop_top;   /* portrait: centre square of side crop_side, upright */
    int crop_side;             /* 0: no crop */
    int width, height;         /* output size */
    int jpeg_shrink;           /* 1, 2, 4 or 8 */
} ag_decode_plan;

static int find_loader(const void *data, size_t size, const char *label, const ag_loader **loader,
                       ag_error *err) {
    *loader = NULL;
    if (!data || size == 0)
        return ag_error_set(err, AG_E_FORMAT, "%s: empty input", label);
    const char *name = vips_foreign_find_load_buffer(data, size);
    if (!name) {
        vips_error_clear();
        return ag_error_set(err, AG_E_FORMAT, "%s: not a recognised image format", label);
    }
    for (size_t i = 0; i < sizeof loaders / sizeof loaders[0]; i++) {
        if (strcmp(name, loaders[i].class_name) == 0) {
            *loader = &loaders[i];
            return AG_OK;
        }
    }
    return ag_error_set(err, AG_E_UNSUPPORTED,
                        "%s: %s images are not supported (JPEG, PNG, WebP, TIFF, GIF, HEIF are)",
                        label, name);
}

/*
 * What a decoder holds, from the header alone. libvips streams most images strip by strip,
 * but several layouts make the loader hold the whole frame at its stored depth: a TIFF
 * strip or tile as large as the image, an interlaced PNG, a GIF or WebP canvas, a HEIF
 * image (libheif's planes plus libvips' interleaved copy), and a progressive or multi-scan
 * JPEG (libjpeg keeps every DCT coefficient of the full-size image, even when shrinking on
 * load). So the check is on bytes, not pixels: the largest of these must fit the decode
 * term of the memory bound, max_pixels x 4 bytes (an 8-bit RGBA frame of --max-pixels).
 * The JPEG cost is also bounded in work: each progressive scan is one more pass over the
 * coefficients, so a file of thousands of scans costs seconds of CPU at any output size.
 */
#define AG_JPEG_MAX_SCANS 64

typedef struct ag_jpeg_layout {
    int scans;         /* SOS markers before EOI */
    int progressive;   /* SOF2, SOF6, SOF10, SOF14 */
    size_t coef_bytes; /* libjpeg's whole-image coefficient buffer (int16 per coefficient) */
} ag_jpeg_layout;

static size_t round_up(size_t v, size_t m) {
    return (v + m - 1) / m * m;
}

static void jpeg_frame(const uint8_t *seg, size_t len, ag_jpeg_layout *j) {
    /* P(1) Y(2) X(2) Nf(1) then Nf x (C, HV, Tq). */
    if (len < 6)
        return;
    size_t height = (size_t)seg[1] << 8 | seg[2], width = (size_t)seg[3] << 8 | seg[4];
    int nf = seg[5], hmax = 1, vmax = 1;
    if (nf < 1 || len < 6 + 3 * (size_t)nf)
        return;
    for (int c = 0; c < nf; c++) {
        int h = seg[7 + 3 * c] >> 4, v = seg[7 + 3 * c] & 15;
        hmax = h > hmax ? h : hmax;
        vmax = v > vmax ? v : vmax;
    }
    size_t bytes = 0;
    for (int c = 0; c < nf; c++) {
        size_t h = seg[7 + 3 * c] >> 4, v = seg[7 + 3 * c] & 15;
        h = h ? h : 1;
        v = v ? v : 1;
        /* libjpeg: blocks per component, rounded up to whole MCUs (jdcoefct.c). */
        size_t bw = (width * h + 8 * (size_t)hmax - 1) / (8 * (size_t)hmax);
        size_t bh = (height * v + 8 * (size_t)vmax - 1) / (8 * (size_t)vmax);
        bytes += round_up(bw, h) * round_up(bh, v) * 64 * 2;
    }
    j->coef_bytes = bytes;
}

/* Walk the markers of a JPEG: linear in its size, reads nothing outside [p, p + n). What a
 * truncated or corrupt file leaves out simply is not counted; libjpeg refuses it later. */
static void jpeg_layout(const uint8_t *p, size_t n, ag_jpeg_layout *j) {
    memset(j, 0, sizeof *j);
    size_t i = 2;
    while (i + 4 <= n) {
        if (p[i] != 0xFF) {
            i++;
            continue;
        }
        int m = p[i + 1];
        if (m == 0xFF) {
            i++; /* fill byte */
            continue;
        }
        if (m == 0xD9)
            return; /* EOI */
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD7) || m == 0x00) {
            i += 2;
            continue;
        }
        size_t len = (size_t)p[i + 2] << 8 | p[i + 3];
        if (len < 2 || i + 2 + len > n)
            return;
        const uint8_t *seg = p + i + 4;
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
            j->progressive = m == 0xC2 || m == 0xC6 || m == 0xCA || m == 0xCE;
            jpeg_frame(seg, len - 2, j);
        }
        i += 2 + len;
        if (m != 0xDA)
            continue;
        j->scans++;
        /* Entropy-coded data: up to the next marker that is not a stuffed 0xFF00 or RSTn. */
        while (i + 1 < n) {
            const uint8_t *ff = memchr(p + i, 0xFF, n - i - 1);
            if (!ff)
                return;
            i = (size_t)(ff - p);
            int next = p[i + 1];
            if (next == 0x00 || (next >= 0xD0 && next <= 0xD7) || next == 0xFF)
                i += next == 0xFF ? 1 : 2;
            else
                break;
        }
    }
}

/* The decode term of the bound: what a decoder holds must fit max_pixels x 4 bytes (413). */
static int check_decode_term(double held, const char *what, const char *format, int width,
                             int height, int bands, int sample_bytes, const ag_decode_options *o,
                             const char *label, ag_error *err) {
    if (o->max_pixels > 0 && held > (double)o->max_pixels * 4)
        return ag_error_set(err, AG_E_LIMIT,
                            "%s: %s %dx%d, %d band(s) of %d byte(s): its %s take %.0f MiB to "
                            "decode; the limit is %.0f MiB (max pixels x 4)",
                            label, format, width, height, bands, sample_bytes, what,
                            held / 1048576.0, (double)o->max_pixels * 4 / 1048576.0);
    return AG_OK;
}

/* Refuse, from the header, a layout we do not take (415) or a frame whose decoder would
 * hold more than the decode term of the bound (413). `image` is opened at shrink 1. */
static int check_held_bytes(const ag_loader *loader, const void *data, size_t size,
                            VipsImage *image, const ag_decode_options *o, const char *label,
                            ag_error *err) {
    if (image->Bands > 4)
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "%s: %s with %d bands; at most 4 (grey, RGB, CMYK, with alpha) are "
                            "taken",
                            label, loader->format, image->Bands);
    double px = (double)image->Xsize * image->Ysize;
    double held = px * image->Bands * (double)vips_format_sizeof(image->BandFmt);
    const char *what = "decoded frame";
    if (loader->jpeg) {
        ag_jpeg_layout j;
        jpeg_layout(data, size, &j);
        if (j.scans > AG_JPEG_MAX_SCANS)
            return ag_error_set(err, AG_E_LIMIT,
                                "%s: progressive JPEG with %d scans; the limit is %d", label,
                                j.scans, AG_JPEG_MAX_SCANS);
        /* Baseline, one scan: streamed a few rows at a time. */
        held = j.progressive || j.scans > 1 ? (double)j.coef_bytes : 0;
        what = "DCT coefficients";
    } else if (!strcmp(loader->format, "PNG")) {
        /* Non-interlaced PNGs stream by rows; Adam7 ones are read whole. IHDR's last byte. */
        const uint8_t *b = data;
        if (!(size > 28 && b[28] != 0))
            held = 0;
    } else if (!strcmp(loader->format, "HEIF")) {
        held *= 2;
    }
    return check_decode_term(held, what, loader->format, image->Xsize, image->Ysize, image->Bands,
                             (int)vips_format_sizeof(image->BandFmt), o, label, err);
}

/* Open lazily: this parses the header only; pixels are decoded when a region asks. */
static int open_image(const ag_loader *loader, const void *data, size_t size, int shrink,
                      const char *label, VipsImage **out, ag_error *err) {
    if (loader->multipage)
        *out = vips_image_new_from_buffer(data, size, "", "access", VIPS_ACCESS_SEQUENTIAL,
                                          "fail_on", VIPS_FAIL_ON_ERROR, "n", 1, "page", 0, NULL);
    else if (loader->jpeg)
        *out = vips_image_new_from_buffer(data, size, "", "access", VIPS_ACCESS_SEQUENTIAL,
                                          "fail_on", VIPS_FAIL_ON_ERROR, "shrink", shrink, NULL);
    else
        *out = vips_image_new_from_buffer(data, size, "", "access", VIPS_ACCESS_SEQUENTIAL,
                                          "fail_on", VIPS_FAIL_ON_ERROR, NULL);
    if (!*out) {
        char what[64];
        snprintf(what, sizeof what, "corrupt or truncated %s", loader->format);
        return ag_vips_error(err, AG_E_FORMAT, label, what);
    }
    return AG_OK;
}

static void upright_size(VipsImage *image, int *width, int *height) {
    int swap = vips_image_get_orientation_swap(image);
    *width = swap ? image->Ysize : image->Xsize;
    *height = swap ? image->Xsize : image->Ysize;
}

int ag_image_probe(const void *data, size_t size, int *width, int *height, ag_error *err) {
    *width = *height = 0;
    const ag_loader *loader;
    VipsImage *image = NULL;
    int rc = find_loader(data, size, "image", &loader, err);
    if (rc == AG_OK)
        rc = open_image(loader, data, size, 1, "image", &image, err);
    if (rc != AG_OK)
        return rc;
    upright_size(image, width, height);
    g_object_unref(image);
    return AG_OK;
}

static int check_options(const ag_decode_options *o, const char *label, ag_error *err) {
    if (o->max_side < 0)
        return ag_error_set(err, AG_E_ARG, "%s: max_side %d is negative", label, o->max_side);
    if (o->portrait_size != 0 &&
        (o->portrait_size < AG_MIN_SIDE || o->portrait_size > AG_IMAGE_MAX_PORTRAIT_SIZE))
        return ag_error_set(err, AG_E_ARG, "%s: portrait_size %d is outside %d..%d", label,
                            o->portrait_size, AG_MIN_SIDE, AG_IMAGE_MAX_PORTRAIT_SIZE);
    return AG_OK;
}

/* Shrink-on-load is a block shrink: leave at least a factor of 2 for Lanczos afterwards
 * (as vips_thumbnail does) so its aliasing is smoothed away. */
static int jpeg_shrink_for(double factor) {
    return factor >= 16 ? 8 : factor >= 8 ? 4 : factor >= 4 ? 2 : 1;
}

static void plan_size(const ag_decode_options *o, ag_decode_plan *p) {
    int w = p->src_width, h = p->src_height;
    p->width = w;
    p->height = h;
    if (o->portrait) {
        /* face2paint: centre square crop (integer halves, as PIL's crop box), then resize. */
        p->crop_side = w < h ? w : h;
        p->crop_left = (w - p->crop_side) / 2;
        p->crop_top = (h - p->crop_side) / 2;
        p->width = p->height = o->portrait_size > 0 ? o->portrait_size : 512;
    } else if (o->max_side > 0 && (w > o->max_side || h > o->max_side)) {
        int long_side = w > h ? w : h, short_side = w > h ? h : w;
        int scaled = (int)((double)short_side * o->max_side / long_side + 0.5);
        scaled = scaled < 1 ? 1 : scaled;
        p->width = w > h ? o->max_side : scaled;
        p->height = w > h ? scaled : o->max_side;
        p->jpeg_shrink = jpeg_shrink_for((double)long_side / o->max_side);
    }
}

/* Plan from the upright size the header gives. */
static int plan_decode(int src_width, int src_height, const ag_decode_options *o, const char *label,
                       ag_decode_plan *p, ag_error *err) {
    memset(p, 0, sizeof *p);
    p->jpeg_shrink = 1;
    p->src_width = src_width;
    p->src_height = src_height;
    double pixels = (double)p->src_width * p->src_height;
    if (o->max_pixels > 0 && pixels > (double)o->max_pixels)
        return ag_error_set(err, AG_E_LIMIT,
                            "%s: image is %dx%d (%.0f pixels), over the limit of %zu", label,
                            p->src_width, p->src_height, pixels, o->max_pixels);
    plan_size(o, p);
    if (p->width < AG_MIN_SIDE || p->height < AG_MIN_SIDE) {
        if (p->width == p->src_width && p->height == p->src_height)
            return ag_error_set(err, AG_E_ARG,
                                "%s: image is %dx%d; both sides must be at least %d pixels", label,
                                p->width, p->height, AG_MIN_SIDE);
        return ag_error_set(err, AG_E_ARG,
                            "%s: image is %dx%d, %dx%d after resizing; both sides must be at "
                            "least %d pixels",
                            label, p->src_width, p->src_height, p->width, p->height, AG_MIN_SIDE);
    }
    return AG_OK;
}

/* Crop and resize an upright uchar image as planned, computing the result into `out`. */
static int shape(VipsImage *in, const ag_decode_plan *p, const char *label, ag_image *out,
                 ag_error *err) {
    VipsImage *cropped = NULL, *resized = NULL;
    ag_image small = {0};
    if (p->crop_side > 0 && vips_extract_area(in, &cropped, p->crop_left, p->crop_top, p->crop_side,
                                              p->crop_side, NULL) != 0)
        return ag_vips_error(err, AG_E_INTERNAL, label, "portrait crop failed");
    VipsImage *x = cropped ? cropped : in;
    int rc;
    if (x->Xsize == p->width && x->Ysize == p->height) {
        rc = ag_vips_read(x, label, out, err);
    } else if (p->width >= x->Xsize && p->height >= x->Ysize) {
        /* A portrait crop under its output size: enlarge.c, not libvips (it says why). */
        rc = ag_vips_read(x, label, &small, err);
        if (rc == AG_OK)
            rc = ag_image_enlarge(&small, p->width, p->height, label, out, err);
    } else {
        rc = ag_vips_resize_exact(x, p->width, p->height, &resized, label, err);
        if (rc == AG_OK)
            rc = ag_vips_read(resized, label, out, err);
    }
    if (resized)
        g_object_unref(resized);
    if (cropped)
        g_object_unref(cropped);
    ag_image_fini(&small);
    return rc;
}

/*
 * EXIF orientation other than 1 needs random access (rotating reads columns), which the
 * sequential loader cannot give. So decode the stored frame to memory first, then rotate,
 * crop and resize that. Upright images skip the copy and stream straight through, and so
 * does a frame already decoded to memory (`in_memory`).
 */
static int orient_and_shape(VipsImage *srgb, int orientation, int in_memory,
                            const ag_decode_plan *p, const char *label, ag_image *out,
                            ag_error *err) {
    ag_image stored = {0};
    VipsImage *wrapped = NULL, *upright = NULL;
    int rc = AG_OK;
    if (orientation == 1) {
        upright = srgb;
        g_object_ref(upright);
    } else if (in_memory) {
        vips_image_set_int(srgb, VIPS_META_ORIENTATION, orientation);
        if (vips_autorot(srgb, &upright, NULL) != 0) {
            rc = ag_vips_error(err, AG_E_INTERNAL, label, "EXIF rotation failed");
            goto cleanup;
        }
    } else {
        if ((rc = ag_vips_read(srgb, label, &stored, err)) != AG_OK ||
            (rc = ag_vips_wrap(&stored, &wrapped, err)) != AG_OK)
            goto cleanup;
        vips_image_set_int(wrapped, VIPS_META_ORIENTATION, orientation);
        if (vips_autorot(wrapped, &upright, NULL) != 0) {
            rc = ag_vips_error(err, AG_E_INTERNAL, label, "EXIF rotation failed");
            goto cleanup;
        }
    }
    rc = shape(upright, p, label, out, err);
cleanup:
    if (upright)
        g_object_unref(upright);
    if (wrapped)
        g_object_unref(wrapped);
    ag_image_fini(&stored);
    return rc;
}

/* Open, reopening with shrink-on-load when the plan allows it. */
static int open_planned(const ag_loader *loader, const void *data, size_t size,
                        const ag_decode_options *o, const char *label, VipsImage **image,
                        ag_decode_plan *plan, ag_error *err) {
    int rc = open_image(loader, data, size, 1, label, image, err);
    if (rc == AG_OK) {
        int width, height;
        upright_size(*image, &width, &height);
        rc = plan_decode(width, height, o, label, plan, err);
    }
    if (rc == AG_OK)
        rc = check_held_bytes(loader, data, size, *image, o, label, err);
    if (rc == AG_OK && loader->jpeg && plan->jpeg_shrink > 1) {
        g_object_unref(*image);
        rc = open_image(loader, data, size, plan->jpeg_shrink, label, image, err);
    }
    if (rc != AG_OK && *image) {
        g_object_unref(*image);
        *image = NULL;
    }
    return rc;
}

/* Through a libvips loader, streaming when the image is upright. */
static int decode_vips(const ag_loader *loader, const void *data, size_t size,
                       const ag_decode_options *o, const char *label, ag_image *out,
                       ag_error *err) {
    VipsImage *image = NULL, *srgb = NULL;
    ag_decode_plan plan;
    int rc = open_planned(loader, data, size, o, label, &image, &plan, err);
    if (rc == AG_OK)
        rc = ag_vips_to_srgb8(image, &srgb, label, err);
    if (rc == AG_OK)
        rc = orient_and_shape(srgb, vips_image_get_orientation(image), 0, &plan, label, out, err);
    if (srgb)
        g_object_unref(srgb);
    if (image)
        g_object_unref(image);
    return rc;
}

/* Through libwebp: the frame is decoded to memory, then the same steps as above. */
static int decode_webp(const void *data, size_t size, const ag_decode_options *o, const char *label,
                       ag_image *out, ag_error *err) {
    ag_webp_info info;
    ag_decode_plan plan;
    ag_image frame = {0};
    VipsImage *image = NULL, *srgb = NULL;
    int rc = ag_webp_read_info(data, size, label, &info, err);
    /* Our frame, plus what libwebp holds while it writes it: for a lossless frame an ARGB
     * copy of the whole of it (4 bytes a pixel), for a lossy one a few macroblock rows and
     * the alpha plane (counted as 1). */
    if (rc == AG_OK)
        rc = check_decode_term((double)info.width * info.height *
                                   (info.bands + (info.lossless ? 4 : 1)),
                               info.lossless ? "frame and libwebp's ARGB copy" : "frame", "WebP",
                               info.width, info.height, info.bands, 1, o, label, err);
    if (rc == AG_OK) {
        int swap = info.orientation >= 5; /* 5..8 turn the image a quarter */
        rc = plan_decode(swap ? info.height : info.width, swap ? info.width : info.height, o, label,
                         &plan, err);
    }
    if (rc == AG_OK)
        rc = ag_webp_decode(data, size, &info, label, &frame, err);
    if (rc == AG_OK)
        rc = ag_vips_wrap(&frame, &image, err);
    if (rc == AG_OK) {
        if (info.icc)
            vips_image_set_blob_copy(image, VIPS_META_ICC_NAME, info.icc, info.icc_size);
        rc = ag_vips_to_srgb8(image, &srgb, label, err);
    }
    if (rc == AG_OK)
        rc = orient_and_shape(srgb, info.orientation, 1, &plan, label, out, err);
    if (srgb)
        g_object_unref(srgb);
    if (image)
        g_object_unref(image);
    ag_image_fini(&frame);
    return rc;
}

int ag_image_decode(const void *data, size_t size, const char *label,
                    const ag_decode_options *options, ag_image *out, ag_error *err) {
    memset(out, 0, sizeof *out);
    static const ag_decode_options defaults = {0};
    const ag_decode_options *o = options ? options : &defaults;
    label = label ? label : "image";
    const ag_loader *loader;
    int rc = check_options(o, label, err);
    if (rc == AG_OK)
        rc = find_loader(data, size, label, &loader, err);
    if (rc != AG_OK)
        return rc;
    if (loader->webp)
        return decode_webp(data, size, o, label, out, err);
    return decode_vips(loader, data, size, o, label, out, err);
}

/* The decode's crop and resize on pixels already in memory (the Python package's arrays). */
int ag_image_shape(const ag_image *in, const ag_decode_options *options, const char *label,
                   ag_image *out, ag_error *err) {
    memset(out, 0, sizeof *out);
    static const ag_decode_options defaults = {0};
    const ag_decode_options *o = options ? options : &defaults;
    label = label ? label : "image";
    size_t bytes;
    ag_decode_plan plan;
    VipsImage *image = NULL;
    int rc = check_options(o, label, err);
    if (rc == AG_OK)
        rc = ag_image_check(in, label, &bytes, err);
    if (rc == AG_OK)
        rc = plan_decode(in->width, in->height, o, label, &plan, err);
    if (rc == AG_OK)
        rc = ag_vips_wrap(in, &image, err);
    if (rc == AG_OK)
        rc = shape(image, &plan, label, out, err);
    if (image)
        g_object_unref(image);
    return rc;
}

int ag_image_decode_file(const char *path, const ag_decode_options *options, ag_image *out,
                         ag_error *err) {
    memset(out, 0, sizeof *out);
    uint8_t *data;
    size_t size;
    int rc = ag_read_file(path, AG_IMAGE_MAX_FILE_BYTES, &data, &size, err);
    if (rc != AG_OK)
        return rc;
    rc = ag_image_decode(data, size, path, options, out, err);
    ag_free(data);
    return rc;
}

/* ---- libvips and GLib messages ------------------------------------------------------------ */

static ag_library_log_fn log_fn;
static void *log_ctx;

static void on_glib_log(const gchar *domain, GLogLevelFlags level, const gchar *message,
                        gpointer data) {
    (void)data;
    ag_library_log_fn fn = __atomic_load_n(&log_fn, __ATOMIC_ACQUIRE);
    if (!fn) {
        g_log_default_handler(domain, level, message, NULL);
        return;
    }
    /* Info and debug only where GLib's own handler would print them (G_MESSAGES_DEBUG):
     * libvips says "reducev: using vector path" and the like on every resize, which filled
     * the service's log (and a request's lines) with chatter. */
    if ((level & (G_LOG_LEVEL_INFO | G_LOG_LEVEL_DEBUG)) &&
        g_log_writer_default_would_drop(level & G_LOG_LEVEL_MASK, domain))
        return;
    const char *name = level & (G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL) ? "error"
                       : level & G_LOG_LEVEL_WARNING                      ? "warn"
                       : level & (G_LOG_LEVEL_MESSAGE | G_LOG_LEVEL_INFO) ? "info"
                                                                          : "debug";
    fn(log_ctx, domain ? domain : "GLib", name, message ? message : "");
}

void ag_image_set_log_handler(ag_library_log_fn fn, void *ctx) {
    static const char *const domains[] = {"VIPS", "GLib", "GLib-GObject", "GLib-GIO"};
    log_ctx = ctx;
    __atomic_store_n(&log_fn, fn, __ATOMIC_RELEASE);
    GLogLevelFlags all = G_LOG_LEVEL_MASK | G_LOG_FLAG_FATAL | G_LOG_FLAG_RECURSION;
    for (size_t i = 0; i < sizeof domains / sizeof domains[0]; i++)
        g_log_set_handler(domains[i], all, on_glib_log, NULL);
    g_log_set_default_handler(fn ? on_glib_log : g_log_default_handler, NULL);
}
