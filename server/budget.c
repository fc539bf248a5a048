/*
 * budget.c - the worst-case memory of the service as a formula of its settings, printed at
 * start-up and reported by /api/v1/status and /metrics. Every buffer the service holds
 * belongs to one of these terms, and each term has a bound by construction:
 *
 *   bound = base                          RSS measured after start-up (code, libraries,
 *                                         weights, engines before their first image)
 *         + runtime                       allowance: thread stacks, allocator and libvips
 *                                         state, 32 MiB + 8 MiB per worker
 *         + W x worker                    one conversion in flight per worker:
 *               arena                       the largest model's ag_engine_arena_bytes_for
 *                                           at the largest side S, + with several models
 *                                           the largest at the portrait size (paste_faces
 *                                           with another face_model); a worker releases
 *                                           the arenas of the models it is not running
 *             + decode                      the loader's frame (max_pixels x 4: the header
 *                                           check bounds its bytes, whatever the depth
 *                                           and bands) + the 8-bit upright copy of a
 *                                           rotated image (max_pixels x 4) + S^2 x 4 x 2
 *                                           (the result, and a crop enlarged into it)
 *             + stylize                     float in/out (2 x S^2 x 3 x 4) + 8-bit result
 *                                           (side by side: 2 x S^2 x 4)
 *             + encode                      encoder working copy (2 x S^2 x 4)
 *               (or, with the face models, a fusion when larger: ag_budget_fuse_bytes,
 *               the "fusion" term, its inputs, output and work buffers at
 *               --fuse-max-pixels (at most --max-pixels),
 *               and its style=NAME steps, ag_budget_fuse_style_bytes)
 *             + upscale                     with an upscaler: the tile window
 *                                           (--upscale-max-mb), the upscaled image and
 *                                           the encoder's copy (3 x O x 4), + the
 *                                           network's own result beyond O when its scale
 *                                           is above the asked one (O x (s/N)^2 x 4)
 *         + (queue + W) x request         admitted requests: upload (max_upload) + encoded
 *                                         response, the largest a request can be answered
 *                                         with: convert's (2 x S^2 x 4 + 1%), O x 4 + 1%
 *                                         with an upscaler, and with the face models a
 *                                         fusion's (fuse_max_pixels x 4 + 1%: the fused image
 *                                         has the target's size, ag_budget_fuse_response_
 *                                         bytes) + bookkeeping
 *         + connections x pool            MHD per-connection memory + a small response
 *         + cache                         --cache-mb, and the fusion face cache's table
 *                                         (--fuse-cache-entries x ~30 KiB)
 *         + video jobs                    with --jobs-dir: the runner's frames in flight
 *                                         (ag_video_frame_bytes at S, side by side, and
 *                                         with an upscaler the largest upscale=N frames
 *                                         O allows) and 32 MiB of demuxer and codec
 *                                         state; the frames' inference and upscaling run
 *                                         on the workers, within their term (a photo
 *                                         served between a frame's upscaling steps asks
 *                                         no upscaler: it holds the worker's other terms
 *                                         while the frame holds the upscale one)
 *
 * S = max(--max-side, portrait size), O = --max-output-pixels. Admission makes "(queue + W)" exact:
 * a slot is taken when a convert (or fuse) request's headers arrive and given back when its
 * response completes. The encoded response belongs to the request (r->out), is sent from
 * that buffer and freed at completion, after the slot is given back: a slow client keeps
 * its response only while it keeps its slot, so each slot holds at most one upload and one
 * response, of any route, whichever worker made it.
 */
#include "server.h"

#include <stdio.h>

#define MIB ((size_t)1 << 20)

static size_t mul_sat(size_t a, size_t b) {
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

static size_t add_sat(size_t a, size_t b) {
    return a + b < a ? SIZE_MAX : a + b;
}

void ag_budget_compute(ag_budget *b, const ag_server_config *c, const ag_model *const *models,
                       int model_count, size_t base_rss_bytes) {
    size_t side = (size_t)(c->max_side > c->portrait_size ? c->max_side : c->portrait_size);
    size_t px = side * side;

    b->workers = c->workers;
    b->face_bytes = 0;    /* ag_budget_add_faces */
    b->upscale_bytes = 0; /* ag_budget_add_upscale */
    b->fuse_bytes = 0;    /* ag_budget_add_fuse */
    b->admitted = c->queue + c->workers;
    b->connections = c->max_connections;
    b->base_bytes = base_rss_bytes;
    b->runtime_bytes = 32 * MIB + (size_t)c->workers * 8 * MIB;

    /* A worker keeps only the arenas of the models it runs (ag_worker_use_models): one, or
     * two for paste_faces with another face_model, whose crops are portrait-sized. */
    size_t largest = 0, largest_crop = 0;
    for (int i = 0; i < model_count; i++) {
        size_t a = ag_engine_arena_bytes_for(models[i], &c->engine, (int)side, (int)side);
        size_t p = model_count > 1 ? ag_engine_arena_bytes_for(models[i], &c->engine,
                                                               c->portrait_size, c->portrait_size)
                                   : 0;
        largest = a > largest ? a : largest;
        largest_crop = p > largest_crop ? p : largest_crop;
    }
    b->arena_bytes = model_count > 1 ? add_sat(largest, largest_crop) : largest;
    /* The loader's frame (at most max_pixels x 4 bytes, checked from the header: decode.c)
     * and the 8-bit upright copy a rotated image needs, both alive at once. */
    b->decode_bytes = add_sat(mul_sat(c->max_pixels, 8), px * 4 * 2);
    size_t stylize = px * 3 * 4 * 2 + px * 4 * 2;
    size_t encode = px * 4 * 2;
    size_t images = add_sat(b->decode_bytes, stylize + encode);
    /* A fusion's style=NAME stylises at most S too (server/fuse.c); the images it holds
     * then fit in convert's terms, but the larger is counted should that ever change. */
    size_t fuse_style = ag_budget_fuse_style_bytes(c);
    if (fuse_style > images) {
        b->decode_bytes = add_sat(b->decode_bytes, fuse_style - images);
        images = fuse_style;
    }
    b->worker_bytes = add_sat(b->arena_bytes, images);

    size_t response = px * 4 * 2 + px * 4 * 2 / 100 + 64 * 1024;
    b->upload_bytes = c->max_upload_bytes + 4096;
    b->request_bytes = b->upload_bytes + response;
    /* MHD's pool, a small response, and the gate's relay buffers */
    b->connection_bytes =
        c->connection_memory_bytes + 64 * 1024 + AG_GATE_IN_BYTES + AG_GATE_OUT_BYTES;
    b->cache_bytes = c->cache_bytes;
    b->video_bytes = ag_jobs_budget_bytes(c);

    size_t total = add_sat(b->base_bytes, b->runtime_bytes);
    total = add_sat(total, mul_sat((size_t)b->workers, b->worker_bytes));
    total = add_sat(total, mul_sat((size_t)b->admitted, b->request_bytes));
    total = add_sat(total, mul_sat((size_t)b->connections, b->connection_bytes));
    total = add_sat(total, b->cache_bytes);
    total = add_sat(total, b->video_bytes);
    b->total_bytes = total;
}

void ag_budget_format(const ag_budget *b, char *buf, size_t cap) {
    double m = (double)MIB;
    snprintf(buf, cap,
             "%.1f MiB = base %.1f + runtime %.1f + %d workers x %.1f (arena %.1f + decode %.1f "
             "+ images %.1f + fusion %.1f + faces %.1f + upscale %.1f) + %d admitted x %.1f "
             "(upload + "
             "response) + %d "
             "connections x %.2f + cache %.1f + video jobs %.1f",
             (double)b->total_bytes / m, (double)b->base_bytes / m, (double)b->runtime_bytes / m,
             b->workers, (double)b->worker_bytes / m, (double)b->arena_bytes / m,
             (double)b->decode_bytes / m,
             (double)(b->worker_bytes - b->arena_bytes - b->decode_bytes - b->face_bytes -
                      b->upscale_bytes - b->fuse_bytes) /
                 m,
             (double)b->fuse_bytes / m, (double)b->face_bytes / m, (double)b->upscale_bytes / m,
             b->admitted, (double)b->request_bytes / m, b->connections,
             (double)b->connection_bytes / m, (double)b->cache_bytes / m,
             (double)b->video_bytes / m);
}

size_t ag_budget_fuse_style_bytes(const ag_server_config *c) {
    size_t side = (size_t)(c->max_side > c->portrait_size ? c->max_side : c->portrait_size);
    size_t px = side * side, image = mul_sat(ag_fuse_max_pixels(c), 4); /* 8-bit, up to 4 bands */
    /* After fusing (source and target freed): the fused image and its copy at --max-side;
     * then that copy, the engine's float tensors in and out and its 8-bit result; then the
     * result and the encoder's copy. anime_template stylises the source first while the
     * target is held: both images and the source's copy, then the target, the copy, the
     * tensors and the result. */
    size_t shape = add_sat(image, px * 4);
    size_t stylize = px * 4 + px * 3 * 4 * 2 + px * 4;
    size_t encode = px * 4 + px * 4 * 2;
    size_t tmpl_shape = add_sat(mul_sat(image, 2), px * 4);
    size_t tmpl_stylize = add_sat(image, stylize);
    size_t most = shape > stylize ? shape : stylize;
    most = encode > most ? encode : most;
    most = tmpl_shape > most ? tmpl_shape : most;
    return tmpl_stylize > most ? tmpl_stylize : most;
}

size_t ag_budget_fuse_bytes(const ag_server_config *c) {
    size_t px = ag_fuse_max_pixels(c), image = mul_sat(px, 4); /* 8-bit, up to 4 bands */
    /* Every image of a fusion has a short side of at least 64 px (server/fuse.c refuses a
     * smaller one: no face of 64 px fits), so a side of at most max_pixels / 64; the
     * resized target (size=N) has a long side of at most 4096. */
    size_t side = px / 64 > 4096 ? px / 64 : 4096;
    /* Decoding the target with the source held: the loader's frame and the upright copy
     * (convert's decode term) and the decoded image. */
    size_t decode = mul_sat(image, 4);
    /* Detecting, then fusing: both inputs (the worker's), the faces array, the detector's
     * 192 x 192 view (its warp is no larger than the fusion's, within the next term), and
     * what ag_face_fuse allocates (the output among it) for images of at most max_pixels
     * and that side: the worker's size check holds the resized target to max_pixels too. */
    size_t fuse =
        add_sat(mul_sat(image, 2), sizeof(ag_face) * (AG_FACE_MAX + 2) + (size_t)192 * 192 * 4);
    fuse = add_sat(fuse, ag_face_fuse_bytes(px, px, side, AG_FUSE_WINDOW_PIXELS));
    /* a small source sharpened first (enhance=: the worker's upscaler, or a restorer of at
     * most GPEN-2048's side) */
    fuse = add_sat(fuse, ag_face_fuse_enhance_bytes(px, AG_FUSE_WINDOW_PIXELS, 2048));
    /* Encoding, the inputs freed: the output and the encoder's working copy. */
    size_t encode = mul_sat(image, 3);
    size_t most = fuse > decode ? fuse : decode;
    most = encode > most ? encode : most;
    size_t style = ag_budget_fuse_style_bytes(c);
    return style > most ? style : most;
}

size_t ag_budget_face_bytes(const ag_server_config *c, const ag_model *detect,
                            const ag_model *mesh) {
    if (!detect)
        return 0;
    size_t side = (size_t)(c->max_side > c->portrait_size ? c->max_side : c->portrait_size);
    size_t crop = (size_t)c->portrait_size * (size_t)c->portrait_size * 4;
    size_t bytes = ag_engine_arena_bytes_for(detect, &c->engine, 192, 192);
    if (mesh)
        bytes = add_sat(bytes, ag_engine_arena_bytes_for(mesh, &c->engine, 192, 192));
    /* detector buffers (~2 MiB) + crop, stylised crop, the paste's mask and footprint
     * (<= the image) and the warp's box-shrunk copy (<= 1/4 of the image) */
    bytes = add_sat(bytes, 3 * MIB + 3 * crop);
    bytes = add_sat(bytes, side * side * 4 * 2);
    /* FFHQ's fill when the quad leaves the image (src/face/fill.c): a padded crop of at most
     * 2.3 q per side, q < 2 x the crop size in the warp's pixels, at 16 bytes a pixel (u8
     * image and crop, two float planes) */
    size_t fill_side = (size_t)c->portrait_size * 46 / 10 + 8;
    return add_sat(bytes, fill_side * fill_side * 16);
}

void ag_budget_rebase(ag_budget *b, size_t base_rss_bytes) {
    b->total_bytes = add_sat(b->total_bytes - b->base_bytes, base_rss_bytes);
    b->base_bytes = base_rss_bytes;
}

/* The per-request term's response raised to `response` bytes when that is larger (every
 * admitted slot may hold the largest response any route gives). */
static void raise_response(ag_budget *b, size_t response) {
    size_t current = b->request_bytes - b->upload_bytes;
    if (response <= current)
        return;
    b->total_bytes = add_sat(b->total_bytes, mul_sat((size_t)b->admitted, response - current));
    b->request_bytes = add_sat(b->upload_bytes, response);
}

void ag_budget_add_upscale(ag_budget *b, size_t window_bytes, size_t output_pixels,
                           size_t upscale_image_bytes) {
    /* A worker: the tile window, what ag_upscale holds (the network's result at its own
     * scale, its resized copy, the alpha) and the encoder's working copies of the result.
     * A request: the encoded response, PNG's worst (raw + 1%) of the largest result. */
    size_t image = mul_sat(output_pixels, 4);
    b->upscale_bytes = add_sat(window_bytes, add_sat(upscale_image_bytes, mul_sat(image, 2)));
    b->worker_bytes = add_sat(b->worker_bytes, b->upscale_bytes);
    b->total_bytes = add_sat(b->total_bytes, mul_sat((size_t)b->workers, b->upscale_bytes));
    raise_response(b, add_sat(image, image / 100 + 64 * 1024));
}

void ag_budget_add_fuse_cache(ag_budget *b, size_t bytes) {
    b->cache_bytes = add_sat(b->cache_bytes, bytes);
    b->total_bytes = add_sat(b->total_bytes, bytes);
}

size_t ag_budget_fuse_response_bytes(const ag_server_config *c) {
    /* The fused image has the target's size, or size=N's, both within max_pixels (fuse.c
     * checks the resized one as ag_face_fuse rounds it), with the target's bands (up to 4);
     * style=NAME shrinks it to S first, within convert's response. PNG's worst is the raw
     * rows, a filter byte each, in stored deflate blocks (5 bytes per 16 KiB block, 0.03%)
     * and IDAT chunks (12 bytes per 8 KiB, 0.15%): under 1% when every row is at least 64
     * px (fuse.c refuses a smaller side; a filter byte per 192 bytes is 0.52%), and a
     * resized image narrower than that has at most 4096 rows, in the 64 KiB. */
    size_t image = mul_sat(ag_fuse_max_pixels(c), 4);
    return add_sat(image, image / 100 + 64 * 1024);
}

void ag_budget_add_fuse(ag_budget *b, size_t fuse_bytes, size_t response_bytes) {
    /* Every admitted slot may hold a fusion's response until its client has read it. */
    raise_response(b, response_bytes);
    /* A worker runs a conversion or a fusion: its images are the larger of the two. */
    size_t images =
        b->worker_bytes - b->arena_bytes - b->face_bytes - b->upscale_bytes - b->fuse_bytes;
    size_t more = fuse_bytes > images ? fuse_bytes - images : 0;
    if (more <= b->fuse_bytes)
        return;
    size_t grow = more - b->fuse_bytes;
    b->fuse_bytes = more;
    b->worker_bytes = add_sat(b->worker_bytes, grow);
    b->total_bytes = add_sat(b->total_bytes, mul_sat((size_t)b->workers, grow));
}

void ag_budget_add_faces(ag_budget *b, size_t face_bytes) {
    b->face_bytes = face_bytes;
    b->worker_bytes = add_sat(b->worker_bytes, face_bytes);
    b->total_bytes = add_sat(b->total_bytes, mul_sat((size_t)b->workers, face_bytes));
}
