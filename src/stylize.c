/*
 * stylize.c - the 8-bit image entry point: RGB(A) in, the generator's rendering out at the
 * same size, alpha carried over, optionally beside the original.
 *
 * Every model takes any side from AG_MIN_SIDE (8). A network that needs more (the tiny
 * AnimeGANv3 halves its maps four times: min_side 16) runs on the image reflect-padded to
 * its minimum, centred, and the result is cropped back: the networks pad by reflection
 * themselves, so the border they see is the one they were trained with.
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

/* Index i of a row of n >= 2 pixels mirrored at both ends without repeating the edge
 * (numpy's "reflect"), folded as often as a pad wider than the row needs. */
static int reflect_index(int i, int n) {
    int period = 2 * (n - 1);
    i %= period;
    if (i < 0)
        i += period;
    return i < n ? i : period - i;
}

/* Run the engine on `in` into `result` (same size), padding to the network's minimum. */
static int run_padded(ag_engine *engine, const ag_image *in, ag_image *result, ag_error *err) {
    int min = engine->model->info.min_side;
    int w = in->width, h = in->height, bands = in->bands;
    if ((w >= min && h >= min) || w < AG_MIN_SIDE || h < AG_MIN_SIDE) {
        ag_io io = {.in_u8 = in->pixels, .out_u8 = result->pixels, .bands = bands};
        return ag_engine_run_io(engine, &io, w, h, err);
    }
    int pw = w > min ? w : min, ph = h > min ? h : min;
    int x0 = (pw - w) / 2, y0 = (ph - h) / 2;
    ag_image pad = {0}, out = {0};
    int rc = image_alloc(&pad, pw, ph, bands, err);
    if (rc == AG_OK)
        rc = image_alloc(&out, pw, ph, bands, err);
    if (rc == AG_OK) {
        for (int y = 0; y < ph; y++) {
            const uint8_t *src = in->pixels + (size_t)reflect_index(y - y0, h) * w * bands;
            uint8_t *dst = pad.pixels + (size_t)y * pw * bands;
            for (int x = 0; x < pw; x++)
                memcpy(dst + (size_t)x * bands, src + (size_t)reflect_index(x - x0, w) * bands,
                       (size_t)bands);
        }
        ag_io io = {.in_u8 = pad.pixels, .out_u8 = out.pixels, .bands = bands};
        rc = ag_engine_run_io(engine, &io, pw, ph, err);
    }
    for (int y = 0; rc == AG_OK && y < h; y++)
        memcpy(result->pixels + (size_t)y * w * bands,
               out.pixels + ((size_t)(y + y0) * pw + (size_t)x0) * bands, (size_t)w * bands);
    ag_image_fini(&pad);
    ag_image_fini(&out);
    return rc;
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
    rc = run_padded(engine, in, &result, err);
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
