/*
 * stylize.c - the 8-bit image entry point: RGB(A) in, the generator's rendering out at the
 * same size, alpha carried over, optionally beside the original.
 */
#include "engine_internal.h"

#include <string.h>

static int image_alloc(ag_image *img, int width, int height, int bands, ag_error *err) {
    size_t bytes;
    img->width = width, img->height = height, img->bands = bands;
    if (!ag_mul_size((size_t)width * height, (size_t)bands, &bytes) ||
        !(img->pixels = ag_malloc(bytes)))
        return ag_error_set(err, AG_E_NOMEM, "out of memory for a %dx%d image", width, height);
    return AG_OK;
}

/* The alpha band of the input goes unchanged onto the output. */
static void copy_alpha(ag_image *out, const ag_image *in) {
    size_t n = (size_t)in->width * in->height;
    for (size_t i = 0; i < n; i++)
        out->pixels[i * 4 + 3] = in->pixels[i * 4 + 3];
}

/* out (H, 2W, bands) <- the input on the left, the result on the right. */
static void place_side_by_side(ag_image *out, const ag_image *in, const ag_image *result) {
    size_t row = (size_t)in->width * in->bands;
    for (int y = 0; y < in->height; y++) {
        memcpy(out->pixels + 2 * row * y, in->pixels + row * y, row);
        memcpy(out->pixels + 2 * row * y + row, result->pixels + row * y, row);
    }
}

int ag_stylize(ag_engine *engine, const ag_image *in, int side_by_side, ag_image *out,
               ag_error *err) {
    memset(out, 0, sizeof *out);
    if (!in || !in->pixels || (in->bands != 3 && in->bands != 4))
        return ag_error_set(err, AG_E_ARG, "image must be 8-bit RGB or RGBA");
    ag_image result = {0};
    int rc = image_alloc(&result, in->width, in->height, in->bands, err);
    if (rc)
        return rc;
    ag_io io = {.in_u8 = in->pixels, .out_u8 = result.pixels, .bands = in->bands};
    rc = ag_engine_run_io(engine, &io, in->width, in->height, err);
    if (rc == AG_OK && in->bands == 4)
        copy_alpha(&result, in);
    if (rc == AG_OK && side_by_side) {
        rc = image_alloc(out, 2 * in->width, in->height, in->bands, err);
        if (rc == AG_OK)
            place_side_by_side(out, in, &result);
        ag_image_fini(&result);
        return rc;
    }
    if (rc) {
        ag_image_fini(&result);
        return rc;
    }
    *out = result;
    return AG_OK;
}
