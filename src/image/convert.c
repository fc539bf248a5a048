/*
 * convert.c - turn whatever a loader produced (grey, CMYK, 16-bit, float, with or without
 * alpha and ICC profile) into the one layout the engine takes, uchar sRGB with an optional
 * alpha band, and shrink such images to an exact size with Lanczos3.
 *
 * Each function builds its intermediate images in a libvips "local array" hung off a scope
 * object, so one g_object_unref releases them all on every path.
 */
#include "image_internal.h"

#include "../util/util_internal.h"

/* Number of colour bands of an interpretation; any band after them is taken as alpha. */
static int colour_bands(VipsInterpretation interpretation) {
    switch (interpretation) {
    case VIPS_INTERPRETATION_B_W:
    case VIPS_INTERPRETATION_GREY16: return 1;
    case VIPS_INTERPRETATION_CMYK: return 4;
    default: return 3;
    }
}

/* 16-bit samples keep their top byte (65535 -> 255); other formats are clipped to 0..255,
 * libvips' scale for float sRGB and for the alpha of float images. */
static int to_uchar(VipsImage *in, VipsImage **out) {
    if (in->BandFmt == VIPS_FORMAT_USHORT)
        return vips_cast(in, out, VIPS_FORMAT_UCHAR, "shift", TRUE, NULL);
    return vips_cast(in, out, VIPS_FORMAT_UCHAR, NULL);
}

/*
 * The colour bands to uchar sRGB. An embedded ICC profile is honoured (a CMYK JPEG or a
 * Display P3 phone photo only looks right through it). Perceptual intent, because LUT-based
 * profiles must carry that one (A2B0) and may lack the others: Ghostscript's CMYK profile has
 * no relative colorimetric table. A profile lcms rejects is ignored rather than fatal, the
 * pixels are still good; the colourspace conversion below then does without it.
 */
static int colour_to_srgb8(VipsImage *in, VipsImage **out) {
    VipsObject *scope = VIPS_OBJECT(vips_image_new());
    VipsImage **t = (VipsImage **)vips_object_local_array(scope, 3);
    VipsImage *x = in;
    int rc = -1;
    if (vips_icc_present() && vips_image_get_typeof(x, VIPS_META_ICC_NAME)) {
        if (vips_icc_transform(x, &t[0], "srgb", "embedded", TRUE, "intent", VIPS_INTENT_PERCEPTUAL,
                               "depth", 8, NULL) == 0)
            x = t[0];
        else
            vips_error_clear();
    }
    if (x->Type != VIPS_INTERPRETATION_sRGB) {
        if (vips_colourspace(x, &t[1], VIPS_INTERPRETATION_sRGB, NULL) != 0)
            goto cleanup;
        x = t[1];
    }
    if (x->BandFmt != VIPS_FORMAT_UCHAR) {
        if (to_uchar(x, &t[2]) != 0)
            goto cleanup;
        x = t[2];
    }
    *out = x;
    g_object_ref(x);
    rc = 0;
cleanup:
    g_object_unref(scope);
    return rc;
}

int ag_vips_to_srgb8(VipsImage *in, VipsImage **out, const char *label, ag_error *err) {
    *out = NULL;
    VipsObject *scope = VIPS_OBJECT(vips_image_new());
    VipsImage **t = (VipsImage **)vips_object_local_array(scope, 6);
    int rc = AG_OK;
    /* Loaders can label a 1-band image sRGB or a 4-band one MULTIBAND; trust the guess. */
    VipsInterpretation interpretation = vips_image_guess_interpretation(in);
    int n_colour = colour_bands(interpretation);
    if (in->Bands < n_colour) {
        rc = ag_error_set(err, AG_E_UNSUPPORTED, "%s: %d-band image is not a colour image", label,
                          in->Bands);
        goto cleanup;
    }
    /* Alpha is split off first: colour conversions may rescale or drop extra bands. */
    if (vips_copy(in, &t[0], "interpretation", interpretation, NULL) != 0 ||
        vips_extract_band(t[0], &t[1], 0, "n", n_colour, NULL) != 0 ||
        colour_to_srgb8(t[1], &t[2]) != 0) {
        rc = ag_vips_error(err, AG_E_UNSUPPORTED, label, "cannot convert the colours to sRGB");
        goto cleanup;
    }
    VipsImage *x = t[2];
    if (in->Bands > n_colour) {
        if (vips_extract_band(in, &t[3], n_colour, NULL) != 0 || to_uchar(t[3], &t[4]) != 0 ||
            vips_bandjoin2(x, t[4], &t[5], NULL) != 0) {
            rc = ag_vips_error(err, AG_E_UNSUPPORTED, label, "cannot convert the alpha band");
            goto cleanup;
        }
        x = t[5];
    }
    AG_ASSERT(x->BandFmt == VIPS_FORMAT_UCHAR && (x->Bands == 3 || x->Bands == 4));
    *out = x;
    g_object_ref(x);
cleanup:
    g_object_unref(scope);
    return rc;
}

/* The resampling steps of ag_vips_resize_exact; returns the last image (owned by `t`) or
 * NULL with libvips' error set. */
static VipsImage *resize_steps(VipsImage *in, int width, int height, VipsImage **t) {
    VipsImage *x = in;
    int alpha = in->Bands == 4;
    if (alpha) {
        if (vips_premultiply(x, &t[0], NULL) != 0)
            return NULL;
        x = t[0];
    }
    /* Per-axis scales so both sides land exactly; gap 0 makes it one Lanczos3 convolution
     * over the whole factor (as PIL's LANCZOS does) instead of a box pre-shrink. */
    double hscale = (double)width / x->Xsize, vscale = (double)height / x->Ysize;
    if (vips_resize(x, &t[1], hscale, "vscale", vscale, "kernel", VIPS_KERNEL_LANCZOS3, "gap", 0.0,
                    NULL) != 0)
        return NULL;
    x = t[1];
    if (alpha) {
        /* Premultiplied data is float: round, since vips_cast truncates. */
        if (vips_unpremultiply(x, &t[2], NULL) != 0 ||
            vips_round(t[2], &t[3], VIPS_OPERATION_ROUND_RINT, NULL) != 0 ||
            vips_cast(t[3], &t[4], VIPS_FORMAT_UCHAR, NULL) != 0)
            return NULL;
        x = t[4];
    }
    return x;
}

int ag_vips_resize_exact(VipsImage *in, int width, int height, VipsImage **out, const char *label,
                         ag_error *err) {
    *out = NULL;
    AG_ASSERT(in->BandFmt == VIPS_FORMAT_UCHAR && (in->Bands == 3 || in->Bands == 4));
    VipsObject *scope = VIPS_OBJECT(vips_image_new());
    VipsImage **t = (VipsImage **)vips_object_local_array(scope, 5);
    int rc = AG_OK;
    VipsImage *x = resize_steps(in, width, height, t);
    if (!x) {
        rc = ag_vips_error(err, AG_E_INTERNAL, label, "resize failed");
        goto cleanup;
    }
    if (x->Xsize != width || x->Ysize != height || x->BandFmt != VIPS_FORMAT_UCHAR) {
        rc = ag_error_set(err, AG_E_INTERNAL, "%s: resizing to %dx%d gave %dx%d", label, width,
                          height, x->Xsize, x->Ysize);
        goto cleanup;
    }
    *out = x;
    g_object_ref(x);
cleanup:
    g_object_unref(scope);
    return rc;
}
