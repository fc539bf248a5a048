/*
 * upscale.c - an upscaler network over an 8-bit image of any size, tile by tile.
 *
 * Every tile runs the network on a window of the same size (the tile plus `pad` pixels of
 * context on each side, slid inwards at the image's borders), so the engine plans its arena
 * once and memory is bounded by the window, not the image. Only the tile's own pixels are
 * kept from each window's output; with a pad at least the network's reach (its receptive
 * radius, from the graph) a tile sees what the whole image would have shown it, so the
 * result equals an untiled run up to float rounding. Networks reaching further (RRDBNet:
 * 350 convs) get the pad capped (AG_UPSCALE_MAX_PAD), as Real-ESRGAN's tile_pad does.
 *
 * Sides the network needs in multiples (x2plus's pixel-unshuffle) are reached by reflecting
 * the image beyond its right and bottom edges and cropping the output, as Real-ESRGAN's
 * mod_pad does. Alpha is enlarged separately (Lanczos3), as is a requested scale other than
 * the network's own.
 */
#include "engine_internal.h"
#include "image/image_internal.h"
#include "util/util_internal.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

void ag_upscale_options_init(ag_upscale_options *o) {
    memset(o, 0, sizeof *o);
    o->tile_pad_px = -1;
    o->max_bytes = AG_UPSCALE_DEFAULT_MAX_BYTES;
}

/* ---- the network's reach ---------------------------------------------------------------- */

/* Receptive radius of the graph's output in input pixels: each conv adds its half kernel
 * at its map's resolution, resampling adds a pixel, DySample two (its bilinear neighbour and
 * offsets, which are learnt and unbounded: a larger one reads past the context). */
int ag_upscale_reach(const ag_model *model) {
    const ag_graph *g = &model->graph;
    double res[AG_GRAPH_MAX_NODES], reach[AG_GRAPH_MAX_NODES];
    res[0] = 1, reach[0] = 0;
    for (int i = 1; i < g->count; i++) {
        const ag_node *n = &g->nodes[i];
        double r = 0, s = res[n->src[0]];
        for (int j = 0; j < AG_NODE_MAX_SRC && n->src[j] >= 0; j++)
            if (reach[n->src[j]] > r)
                r = reach[n->src[j]];
        switch (n->op) {
        case AG_OP_CONV: r += (n->k / 2) / s, s /= n->stride; break;
        case AG_OP_NEAREST:
        case AG_OP_PIXEL_SHUFFLE: r += 1 / s, s *= n->up; break;
        case AG_OP_DYSAMPLE: r += 2 / s, s *= n->up; break; /* bilinear + learnt offsets */
        case AG_OP_PIXEL_UNSHUFFLE: s /= n->down, r += 1 / s; break;
        default: break;
        }
        res[i] = s, reach[i] = r;
    }
    return (int)ceil(reach[g->outputs[0]]);
}

/* ---- planning -------------------------------------------------------------------------- */

static int round_up(int v, int m) {
    return (v + m - 1) / m * m;
}

/* Bytes of one window of side w x h: the arena, the float input and the output. */
static size_t window_bytes(const ag_engine *e, int w, int h) {
    int s = e->model->info.scale;
    size_t px = (size_t)w * h;
    return ag_engine_arena_bytes_for(e->model, &e->options, w, h) +
           px * sizeof(float) * 3 * (1 + (size_t)s * s);
}

/* window_for_budget's linear estimate. */
static int window_estimate(const ag_engine *e, size_t budget, int multiple) {
    const int a = 64, b = 128;
    double fa = (double)window_bytes(e, a, a), fb = (double)window_bytes(e, b, b);
    double per_px = (fb - fa) / (b * b - a * a), fixed = fa - per_px * a * a;
    if (per_px <= 0)
        return 4096;
    if ((double)budget <= fixed) /* not even an empty window: no side at all */
        return 0;
    double side = sqrt(((double)budget - fixed) / per_px);
    int w = side > 4096 ? 4096 : side < 0 ? 0 : (int)side;
    return w / multiple * multiple;
}

/* The largest square window side within `budget`: the arena grows with the pixels, so two
 * measured sizes give its fixed part and its bytes per pixel; the side found is then
 * measured and shrunk while it is over (the arena is not exactly linear in the pixels: bands
 * stop growing with the rows, a Winograd conv's blocked copies start at 32 px). */
static int window_for_budget(const ag_engine *e, size_t budget, int multiple) {
    int w = window_estimate(e, budget, multiple);
    for (int step; w > 0 && w < 4096 && window_bytes(e, w, w) > budget; w -= step)
        step = (w / 32 > multiple ? w / 32 : multiple) / multiple * multiple;
    return w > 0 ? w : 0;
}

/* The budget's largest tile evened out over the tiles it needs: the same count of tiles, each
 * as small as covers the image, so the windows' overlap is computed no more than needed (a
 * 1024 px photo in four 760 px windows ran 2.2 times its pixels; in four 576 px ones 1.3). */
static int balanced_tile(int padded_w, int padded_h, int tile, int multiple) {
    int nx = (padded_w + tile - 1) / tile, ny = (padded_h + tile - 1) / tile;
    int tx = (padded_w + nx - 1) / nx, ty = (padded_h + ny - 1) / ny;
    return round_up(tx > ty ? tx : ty, multiple);
}

int ag_upscale_plan_for(const ag_engine *e, int width, int height, const ag_upscale_options *o,
                        ag_upscale_plan *p, ag_error *err) {
    const ag_model_info *info = &e->model->info;
    memset(p, 0, sizeof *p);
    if (info->scale < 1 || info->role != AG_MODEL_UPSCALER)
        return ag_error_set(err, AG_E_ARG, "model %s is not an upscaler (kind %s)", info->name,
                            info->kind);
    if (width < 1 || height < 1)
        return ag_error_set(err, AG_E_ARG, "image is %dx%d", width, height);
    int m = info->side_multiple > 0 ? info->side_multiple : 1;
    int min_side = round_up(info->min_side > AG_MIN_SIDE ? info->min_side : AG_MIN_SIDE, m);
    p->padded_w = round_up(width, m), p->padded_h = round_up(height, m);
    p->padded_w = p->padded_w < min_side ? min_side : p->padded_w;
    p->padded_h = p->padded_h < min_side ? min_side : p->padded_h;
    int reach = ag_upscale_reach(e->model);
    int pad = o->tile_pad_px >= 0 ? o->tile_pad_px
                                  : (reach < AG_UPSCALE_MAX_PAD ? reach : AG_UPSCALE_MAX_PAD);
    p->pad_px = round_up(pad, m);
    int tile = o->tile_px;
    if (tile <= 0) {
        int side = window_for_budget(e, o->max_bytes, m);
        tile = side - 2 * p->pad_px;
        if (tile < 16)
            return ag_error_set(err, AG_E_LIMIT,
                                "a memory budget of %zu MB leaves no room for a %d-pixel tile "
                                "with %d pixels of context",
                                o->max_bytes >> 20, 16, p->pad_px);
        tile = balanced_tile(p->padded_w, p->padded_h, tile, m);
    }
    p->tile_px = round_up(tile < min_side ? min_side : tile, m);
    p->window_w = p->tile_px + 2 * p->pad_px, p->window_h = p->window_w;
    if (p->window_w > p->padded_w)
        p->window_w = p->padded_w;
    if (p->window_h > p->padded_h)
        p->window_h = p->padded_h;
    p->tiles_x = (p->padded_w + p->tile_px - 1) / p->tile_px;
    p->tiles_y = (p->padded_h + p->tile_px - 1) / p->tile_px;
    if (p->window_w == p->padded_w)
        p->tiles_x = 1;
    if (p->window_h == p->padded_h)
        p->tiles_y = 1;
    p->bytes = window_bytes(e, p->window_w, p->window_h);
    return AG_OK;
}

/* ---- running -------------------------------------------------------------------------- */

/* Index i of a side of n pixels extended by reflection (without repeating the edge). */
static int reflect(int i, int n) {
    if (i < n)
        return i;
    int r = 2 * n - 2 - i;
    return r < 0 ? 0 : r;
}

/* The window at (x0, y0), (h, w, 3) floats in the network's range. */
static void fill_window(float *win, const ag_image *in, int x0, int y0, int w, int h, float mul,
                        int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int y = 0; y < h; y++) {
        const uint8_t *row =
            in->pixels + (size_t)reflect(y0 + y, in->height) * in->width * in->bands;
        float *out_w = win + (size_t)y * w * 3;
        for (int x = 0; x < w; x++) {
            const uint8_t *px = row + (size_t)reflect(x0 + x, in->width) * in->bands;
            for (int c = 0; c < 3; c++)
                out_w[x * 3 + c] = px[c] * mul;
        }
    }
}

static uint8_t to_u8(float v) {
    v = v < 0 ? 0 : v > 255 ? 255 : v;
    return (uint8_t)lrintf(v);
}

/* The output rows and columns of window output `y` (sh, sw, 3) that belong to the tile
 * [tx0, tx1) x [ty0, ty1) (input pixels, clipped to the image), into `out`. */
static void keep_tile(ag_image *out, const float *y, int sw, int s, int wx0, int wy0, int tx0,
                      int tx1, int ty0, int ty1, float mul, int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int oy = ty0 * s; oy < ty1 * s; oy++) {
        const float *src = y + ((size_t)(oy - wy0 * s) * sw + (size_t)(tx0 - wx0) * s) * 3;
        uint8_t *dst = out->pixels + ((size_t)oy * out->width + (size_t)tx0 * s) * out->bands;
        for (int ox = 0; ox < (tx1 - tx0) * s; ox++)
            for (int c = 0; c < 3; c++)
                dst[ox * out->bands + c] = to_u8(src[ox * 3 + c] * mul);
    }
}

/* Start of the window holding tile [t0, t0 + tile): `pad` before it, slid inside [0, n). */
static int window_start(int t0, int pad, int win, int n) {
    int s = t0 - pad;
    if (s + win > n)
        s = n - win;
    return s < 0 ? 0 : s;
}

static int run_tiles(ag_engine *e, const ag_image *in, const ag_upscale_plan *p,
                     const ag_upscale_options *o, ag_image *out, ag_error *err) {
    const ag_model_info *info = &e->model->info;
    int s = info->scale, w = p->window_w, h = p->window_h;
    float in_mul = info->pixel_max / 255.0f, out_mul = 255.0f / info->pixel_max;
    size_t win_bytes = sizeof(float) * 3 * (size_t)w * h;
    float *win = ag_malloc(win_bytes), *y = ag_malloc(win_bytes * s * s);
    /* fresh maps each call: huge pages fault them in 512 times less often */
    ag_advise_huge_pages(win, win ? win_bytes : 0);
    ag_advise_huge_pages(y, y ? win_bytes * s * s : 0);
    int rc =
        win && y ? AG_OK : ag_error_set(err, AG_E_NOMEM, "out of memory for a %dx%d tile", w, h);
    if (rc == AG_OK && o->progress) /* the total, before the first tile */
        o->progress(o->progress_user, 0, p->tiles_x * p->tiles_y);
    for (int ty = 0; rc == AG_OK && ty < p->tiles_y; ty++)
        for (int tx = 0; rc == AG_OK && tx < p->tiles_x; tx++) {
            int tx0 = tx * p->tile_px, ty0 = ty * p->tile_px;
            int tx1 = p->tiles_x == 1 ? in->width : tx0 + p->tile_px;
            int ty1 = p->tiles_y == 1 ? in->height : ty0 + p->tile_px;
            tx1 = tx1 > in->width ? in->width : tx1;
            ty1 = ty1 > in->height ? in->height : ty1;
            if (tx0 >= tx1 || ty0 >= ty1)
                continue; /* a tile wholly in the reflected margin */
            int wx0 = window_start(tx0, p->pad_px, w, p->padded_w);
            int wy0 = window_start(ty0, p->pad_px, h, p->padded_h);
            fill_window(win, in, wx0, wy0, w, h, in_mul, e->threads);
            float *outs[1] = {y};
            rc = ag_engine_run_raw(e, win, w, h, outs, err);
            if (rc == AG_OK)
                keep_tile(out, y, w * s, s, wx0, wy0, tx0, tx1, ty0, ty1, out_mul, e->threads);
            int done = ty * p->tiles_x + tx + 1, total = p->tiles_x * p->tiles_y;
            if (rc == AG_OK && o->progress && o->progress(o->progress_user, done, total))
                rc = ag_error_set(err, AG_E_CANCELLED, "cancelled");
        }
    ag_free(win);
    ag_free(y);
    return rc;
}

/* ---- resampling the result -------------------------------------------------------------- */

/* `img` replaced by its Lanczos3 resampling to width x height. */
static int resample(ag_image *img, int width, int height, ag_error *err) {
    ag_image next = {0};
    int rc;
    if (width >= img->width && height >= img->height) {
        rc = ag_image_enlarge(img, width, height, "upscale", &next, err);
    } else {
        VipsImage *wrapped = NULL, *small = NULL;
        rc = ag_vips_wrap(img, &wrapped, err);
        if (rc == AG_OK)
            rc = ag_vips_resize_exact(wrapped, width, height, &small, "upscale", err);
        if (rc == AG_OK)
            rc = ag_vips_read(small, "upscale", &next, err);
        if (small)
            g_object_unref(small);
        if (wrapped)
            g_object_unref(wrapped);
    }
    if (rc == AG_OK) {
        ag_image_fini(img);
        *img = next;
    }
    return rc;
}

/* The input's alpha, Lanczos3-enlarged to out's size, into out's fourth band. */
static int carry_alpha(ag_image *out, const ag_image *in, ag_error *err) {
    ag_image big = {0};
    int rc = ag_image_enlarge(in, out->width, out->height, "upscale", &big, err);
    if (rc)
        return rc;
    size_t n = (size_t)out->width * out->height;
    for (size_t i = 0; i < n; i++)
        out->pixels[i * 4 + 3] = big.pixels[i * 4 + 3];
    ag_image_fini(&big);
    return AG_OK;
}

int ag_upscale(ag_engine *e, const ag_image *in, const ag_upscale_options *o, ag_image *out,
               ag_error *err) {
    memset(out, 0, sizeof *out);
    size_t bytes;
    int rc = ag_image_check(in, "upscale", &bytes, err);
    if (rc)
        return rc;
    ag_upscale_options defaults;
    if (!o) {
        ag_upscale_options_init(&defaults);
        o = &defaults;
    }
    int s = e->model->info.scale, want = o->scale > 0 ? o->scale : s;
    if (o->scale < 0 || want > AG_UPSCALE_MAX_SCALE)
        return ag_error_set(err, AG_E_ARG, "scale %d is not in 1..%d", o->scale,
                            AG_UPSCALE_MAX_SCALE);
    ag_upscale_plan p;
    if ((rc = ag_upscale_plan_for(e, in->width, in->height, o, &p, err)))
        return rc;
    size_t out_bytes;
    if (!ag_mul_size((size_t)in->width * s * in->bands, (size_t)in->height * s, &out_bytes) ||
        !(out->pixels = ag_malloc(out_bytes)))
        return ag_error_set(err, AG_E_NOMEM, "out of memory for a %dx%d result", in->width * s,
                            in->height * s);
    ag_advise_huge_pages(out->pixels, out_bytes);
    out->width = in->width * s, out->height = in->height * s, out->bands = in->bands;
    if (in->bands == 4) /* opaque until the alpha is carried over: resampling premultiplies */
        for (size_t i = 0; i < (size_t)out->width * out->height; i++)
            out->pixels[i * 4 + 3] = 255;
    rc = run_tiles(e, in, &p, o, out, err);
    if (rc == AG_OK && want != s)
        rc = resample(out, in->width * want, in->height * want, err);
    if (rc == AG_OK && in->bands == 4)
        rc = carry_alpha(out, in, err);
    if (rc)
        ag_image_fini(out);
    return rc;
}

static size_t add_sat(size_t a, size_t b) {
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

size_t ag_upscale_image_bytes(const ag_model *upscaler, int scale, size_t output_pixels,
                              int bands) {
    int s = upscaler->info.scale, want = scale > 0 ? scale : s;
    /* the network's result: output_pixels x (s / want)², rounded up */
    double net_px = ceil((double)output_pixels * s * s / ((double)want * want));
    size_t net = net_px * bands >= (double)SIZE_MAX ? SIZE_MAX : (size_t)net_px * (size_t)bands,
           out = 0;
    if (!ag_mul_size(output_pixels, (size_t)bands, &out))
        return SIZE_MAX;
    size_t total = add_sat(net, want != s ? out : 0); /* the resized copy */
    return add_sat(total, bands == 4 ? out : 0);      /* the alpha, enlarged as RGBA */
}

/* ---- loading ---------------------------------------------------------------------------- */

/* The bundled families: one file per scale, <family>-x<N>.safetensors. */
static const struct {
    const char *name;
    int scales[4];
} families[] = {
    {"esrgan-slim", {2, 3, 4, 8}},
    {"esrgan-medium", {2, 3, 4, 8}},
};
#define FAMILY_DEFAULT_SCALE 4

/* The family file for `scale`: that scale, else the smallest larger, else the largest. */
static int family_scale(int f, int scale) {
    int want = scale > 0 ? scale : FAMILY_DEFAULT_SCALE, n = 4;
    for (int i = 0; i < n; i++)
        if (families[f].scales[i] >= want)
            return families[f].scales[i];
    return families[f].scales[n - 1];
}

int ag_upscaler_load(const char *name, int scale, ag_model **out, ag_error *err) {
    *out = NULL;
    if (scale < 0 || scale > AG_UPSCALE_MAX_SCALE)
        return ag_error_set(err, AG_E_ARG, "scale %d is not in 1..%d", scale, AG_UPSCALE_MAX_SCALE);
    int family = -1;
    for (int f = 0; f < (int)(sizeof families / sizeof families[0]); f++)
        if (name && !strcmp(name, families[f].name))
            family = f;
    char file[64];
    if (family >= 0)
        snprintf(file, sizeof file, "%s-x%d", name, family_scale(family, scale));
    int rc = ag_model_load(family >= 0 ? file : name, out, err);
    if (rc)
        return rc;
    const ag_model_info *info = ag_model_get_info(*out);
    if (info->role != AG_MODEL_UPSCALER) {
        rc = ag_error_set(err, AG_E_ARG, "model %s is a %s, not an upscaler", info->name,
                          info->kind);
        ag_model_destroy(*out);
        *out = NULL;
    }
    return rc;
}
