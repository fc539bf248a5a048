/*
 * webp_load.c - WebP input read by libwebp on the caller's thread.
 *
 * libvips 8.14's WebP loader decodes the frame through a sink, i.e. on one of libvips' own
 * threads, and that thread set can lose a task (image.c, docs/stability.md). So WebP is
 * demuxed and decoded here, then handed to the same colour, orientation and resize steps
 * as every other format. The container is parsed first (canvas size, EXIF orientation,
 * ICC profile) so the size limits apply before a pixel is decoded.
 */
#include "image_internal.h"

#include "../util/util_internal.h"

#include <libexif/exif-data.h>
#include <string.h>
#include <webp/decode.h>
#include <webp/demux.h>

/* EXIF orientation (1..8) from a WebP EXIF chunk, 1 when absent or unreadable. The chunk
 * holds the TIFF structure, usually without the "Exif\0\0" prefix libexif wants. */
static int exif_orientation(const uint8_t *blob, size_t size) {
    static const uint8_t prefix[6] = {'E', 'x', 'i', 'f', 0, 0};
    if (size < 8 || size > UINT32_MAX - sizeof prefix)
        return 1;
    int has_prefix = memcmp(blob, prefix, sizeof prefix) == 0;
    uint8_t *copy = has_prefix ? NULL : ag_malloc(size + sizeof prefix);
    if (!has_prefix && !copy)
        return 1;
    if (copy) {
        memcpy(copy, prefix, sizeof prefix);
        memcpy(copy + sizeof prefix, blob, size);
    }
    int orientation = 1;
    ExifData *exif = exif_data_new();
    if (exif) {
        exif_data_load_data(exif, copy ? copy : blob,
                            (unsigned)(copy ? size + sizeof prefix : size));
        ExifEntry *e = exif_content_get_entry(exif->ifd[EXIF_IFD_0], EXIF_TAG_ORIENTATION);
        if (e && e->format == EXIF_FORMAT_SHORT && e->components == 1 && e->size >= 2)
            orientation = exif_get_short(e->data, exif_data_get_byte_order(exif));
        exif_data_unref(exif);
    }
    ag_free(copy);
    return orientation >= 1 && orientation <= 8 ? orientation : 1;
}

/* NULL for data that is not a complete, well-formed WebP file (truncated ones included). */
static WebPDemuxer *open_demux(const void *data, size_t size) {
    WebPData bytes = {.bytes = data, .size = size};
    return WebPDemux(&bytes);
}

static int corrupt(ag_error *err, const char *label) {
    return ag_error_set(err, AG_E_FORMAT, "%s: corrupt or truncated WebP", label);
}

/* The first frame, which an animation may place anywhere on its canvas. */
static int first_frame(WebPDemuxer *demux, WebPIterator *frame) {
    if (!WebPDemuxGetFrame(demux, 1, frame))
        return 0;
    if (frame->width > 0 && frame->height > 0 && frame->x_offset >= 0 && frame->y_offset >= 0)
        return 1;
    WebPDemuxReleaseIterator(frame);
    return 0;
}

int ag_webp_read_info(const void *data, size_t size, const char *label, ag_webp_info *info,
                      ag_error *err) {
    memset(info, 0, sizeof *info);
    WebPDemuxer *demux = open_demux(data, size);
    if (!demux)
        return corrupt(err, label);
    WebPIterator frame;
    int ok = first_frame(demux, &frame);
    if (ok) {
        uint32_t flags = WebPDemuxGetI(demux, WEBP_FF_FORMAT_FLAGS);
        info->width = (int)WebPDemuxGetI(demux, WEBP_FF_CANVAS_WIDTH);
        info->height = (int)WebPDemuxGetI(demux, WEBP_FF_CANVAS_HEIGHT);
        int covers = frame.x_offset == 0 && frame.y_offset == 0 && frame.width == info->width &&
                     frame.height == info->height;
        info->bands = (flags & ALPHA_FLAG) || frame.has_alpha || !covers ? 4 : 3;
        WebPBitstreamFeatures features;
        info->lossless = WebPGetFeatures(frame.fragment.bytes, frame.fragment.size, &features) ==
                             VP8_STATUS_OK &&
                         features.format == 2;
        ok = info->width > 0 && info->height > 0 && frame.x_offset + frame.width <= info->width &&
             frame.y_offset + frame.height <= info->height;
        WebPDemuxReleaseIterator(&frame);
    }
    WebPChunkIterator chunk;
    info->orientation = 1;
    if (ok && WebPDemuxGetChunk(demux, "EXIF", 1, &chunk)) {
        info->orientation = exif_orientation(chunk.chunk.bytes, chunk.chunk.size);
        WebPDemuxReleaseChunkIterator(&chunk);
    }
    if (ok && WebPDemuxGetChunk(demux, "ICCP", 1, &chunk)) {
        /* The payload points into `data`, which outlives the demuxer. */
        info->icc = chunk.chunk.bytes;
        info->icc_size = chunk.chunk.size;
        WebPDemuxReleaseChunkIterator(&chunk);
    }
    WebPDemuxDelete(demux);
    return ok ? AG_OK : corrupt(err, label);
}

/* Decode the frame straight into its place on the canvas: no intermediate buffer. */
static int decode_frame(const WebPIterator *frame, ag_image *canvas) {
    WebPDecoderConfig config;
    if (!WebPInitDecoderConfig(&config))
        return 0;
    size_t stride = (size_t)canvas->width * (size_t)canvas->bands;
    size_t offset = (size_t)frame->y_offset * stride + (size_t)frame->x_offset * canvas->bands;
    config.output.colorspace = canvas->bands == 4 ? MODE_RGBA : MODE_RGB;
    config.output.is_external_memory = 1;
    config.output.u.RGBA.rgba = canvas->pixels + offset;
    config.output.u.RGBA.stride = (int)stride;
    config.output.u.RGBA.size = stride * (size_t)canvas->height - offset;
    int ok = WebPDecode(frame->fragment.bytes, frame->fragment.size, &config) == VP8_STATUS_OK &&
             config.output.width == frame->width && config.output.height == frame->height;
    WebPFreeDecBuffer(&config.output);
    return ok;
}

int ag_webp_decode(const void *data, size_t size, const ag_webp_info *info, const char *label,
                   ag_image *out, ag_error *err) {
    memset(out, 0, sizeof *out);
    ag_image canvas = {.width = info->width, .height = info->height, .bands = info->bands};
    size_t bytes;
    if (!ag_mul_size((size_t)info->width * (size_t)info->bands, (size_t)info->height, &bytes))
        return ag_error_set(err, AG_E_LIMIT, "%s: image of %dx%d is too large", label, info->width,
                            info->height);
    /* Zeroed: where an animation's first frame does not reach, the canvas is transparent. */
    canvas.pixels = ag_calloc(1, bytes);
    if (!canvas.pixels)
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory for %zu bytes of pixels", label,
                            bytes);
    WebPDemuxer *demux = open_demux(data, size);
    WebPIterator frame;
    int ok = demux && first_frame(demux, &frame);
    if (ok) {
        ok = frame.x_offset + frame.width <= canvas.width &&
             frame.y_offset + frame.height <= canvas.height && decode_frame(&frame, &canvas);
        WebPDemuxReleaseIterator(&frame);
    }
    WebPDemuxDelete(demux);
    if (!ok) {
        ag_image_fini(&canvas);
        return corrupt(err, label);
    }
    *out = canvas;
    return AG_OK;
}
