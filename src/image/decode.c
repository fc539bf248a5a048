/*
 * decode.c - encoded bytes to an ag_image: sniff the format, read the header, check limits,
 * plan the output size, then decode, convert to 8-bit sRGB, orient and resize in one pass.
 *
 * The plan (output size, portrait crop, JPEG shrink-on-load) is made from the header alone,
 * so an image that is too large or too small is refused before a single pixel is decoded.
 * Loaders run in sequential mode with fail_on=error: a truncated or corrupt file fails the
 * decode (AG_E_FORMAT) instead of coming back half grey.
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
} ag_loader;

static const ag_loader loaders[] = {
    {"VipsForeignLoadJpegBuffer", "JPEG", 0, 1}, {"VipsForeignLoadPngBuffer", "PNG", 0, 0},
    {"VipsForeignLoadWebpBuffer", "WebP", 1, 0}, {"VipsForeignLoadTiffBuffer", "TIFF", 1, 0},
    {"VipsForeignLoadNsgifBuffer", "GIF", 1, 0}, {"VipsForeignLoadHeifBuffer", "HEIF", 1, 0},
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

static int plan_decode(VipsImage *header, const ag_decode_options *o, const char *label,
                       ag_decode_plan *p, ag_error *err) {
    memset(p, 0, sizeof *p);
    p->jpeg_shrink = 1;
    upright_size(header, &p->src_width, &p->src_height);
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

/* Crop and resize an upright uchar image as planned. */
static int apply_geometry(VipsImage *in, const ag_decode_plan *p, const char *label,
                          VipsImage **out, ag_error *err) {
    VipsImage *cropped = NULL;
    if (p->crop_side > 0 && vips_extract_area(in, &cropped, p->crop_left, p->crop_top, p->crop_side,
                                              p->crop_side, NULL) != 0)
        return ag_vips_error(err, AG_E_INTERNAL, label, "portrait crop failed");
    VipsImage *x = cropped ? cropped : in;
    int rc = AG_OK;
    if (x->Xsize == p->width && x->Ysize == p->height) {
        *out = x;
        g_object_ref(x);
    } else {
        rc = ag_vips_resize_exact(x, p->width, p->height, out, label, err);
    }
    if (cropped)
        g_object_unref(cropped);
    return rc;
}

/*
 * EXIF orientation other than 1 needs random access (rotating reads columns), which the
 * sequential loader cannot give. So decode the stored frame to memory first, then rotate,
 * crop and resize that. Upright images skip the copy and stream straight through.
 */
static int orient_and_shape(VipsImage *srgb, int orientation, const ag_decode_plan *p,
                            const char *label, ag_image *out, ag_error *err) {
    ag_image stored = {0};
    VipsImage *wrapped = NULL, *upright = NULL, *shaped = NULL;
    int rc = AG_OK;
    if (orientation == 1) {
        upright = srgb;
        g_object_ref(upright);
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
    if ((rc = apply_geometry(upright, p, label, &shaped, err)) != AG_OK)
        goto cleanup;
    rc = ag_vips_read(shaped, label, out, err);
cleanup:
    if (shaped)
        g_object_unref(shaped);
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
    if (rc == AG_OK)
        rc = plan_decode(*image, o, label, plan, err);
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

int ag_image_decode(const void *data, size_t size, const char *label,
                    const ag_decode_options *options, ag_image *out, ag_error *err) {
    memset(out, 0, sizeof *out);
    static const ag_decode_options defaults = {0};
    const ag_decode_options *o = options ? options : &defaults;
    label = label ? label : "image";
    const ag_loader *loader;
    VipsImage *image = NULL, *srgb = NULL;
    ag_decode_plan plan = {0};
    int rc = check_options(o, label, err);
    if (rc == AG_OK)
        rc = find_loader(data, size, label, &loader, err);
    if (rc == AG_OK)
        rc = open_planned(loader, data, size, o, label, &image, &plan, err);
    if (rc == AG_OK)
        rc = ag_vips_to_srgb8(image, &srgb, label, err);
    if (rc == AG_OK)
        rc = orient_and_shape(srgb, vips_image_get_orientation(image), &plan, label, out, err);
    if (srgb)
        g_object_unref(srgb);
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
