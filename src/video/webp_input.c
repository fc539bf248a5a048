/*
 * webp_input.c - animated WebP as a video input. Debian 12's libavformat (5.1) has no
 * animated WebP demuxer (it reads the first frame as a still image), so libwebp's own
 * demuxer and WebPAnimDecoder do it: the container is parsed first (every chunk header, no
 * pixel, in one linear pass that stops at the frame bound) and the canvas, the frame count
 * and the total duration are checked against the limits before the decoder allocates its
 * canvas; then frames come out one at a time,
 * composited by libwebp (offsets, blending, disposal), flattened over white into one RGB
 * buffer. Memory: the decoder's two RGBA canvases plus that RGB frame, whatever the length.
 * The file's bytes belong to the caller (input.c maps the file) and outlive this object.
 */
#include "webp_input_internal.h"

#include "../util/util_internal.h"
#include "video_internal.h"

#include <string.h>
#include <webp/demux.h>

/* Frames of 10 ms or less are shown for 100 ms by browsers (Blink, Gecko), as for GIF. */
#define MIN_FRAME_MS 10
#define SHORT_FRAME_MS 100

struct ag_webp_input {
    WebPAnimDecoder *dec;
    int width, height;
    int64_t frames, duration_ms;
    int plays;
    int64_t next_pts_ms; /* start of the next frame */
    int last_end_ms;     /* libwebp's timestamp of the previous frame's end */
    uint8_t *rgb;        /* (height, width, 3) */
};

static int64_t shown_ms(int duration_ms) {
    return duration_ms <= MIN_FRAME_MS ? SHORT_FRAME_MS : duration_ms;
}

int ag_webp_input_is_animated(const uint8_t *head, size_t size) {
    /* RIFF size WEBP, then VP8X first with the animation flag (bit 1 of its flags byte) */
    return size >= 21 && memcmp(head, "RIFF", 4) == 0 && memcmp(head + 8, "WEBPVP8X", 8) == 0 &&
           (head[20] & 0x02);
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/*
 * The frames and their total duration from the chunk headers, in one pass: libwebp's
 * demuxer finds frame n by walking its list from the first, so asking it for every frame
 * is quadratic (70,000 empty frames: 6 s). Stops past max_frames (0: no bound). 0, or -1
 * for a chunk that overruns the file (libwebp then says what is wrong).
 */
static int scan_frames(const uint8_t *d, size_t size, int64_t max_frames, int64_t *frames,
                       int64_t *duration_ms) {
    *frames = *duration_ms = 0;
    size_t pos = 12; /* "RIFF" size "WEBP" */
    while (pos <= size && size - pos >= 8) {
        uint64_t len = le32(d + pos + 4);
        if (len > size - pos - 8)
            return -1;
        /* ANMF: X, Y, width - 1, height - 1 and duration, 24 bits each, then flags */
        if (!memcmp(d + pos, "ANMF", 4) && len >= 16) {
            const uint8_t *f = d + pos + 8 + 12;
            *duration_ms += shown_ms((int)(f[0] | f[1] << 8 | f[2] << 16));
            if (++*frames > max_frames && max_frames > 0)
                return 0;
        }
        pos += 8 + (size_t)len + (len & 1);
    }
    return 0;
}

/* Everything the header and the chunk headers say, checked before any pixel is decoded. */
static int check_container(ag_webp_input *w, const WebPData *data, const char *label,
                           const ag_video_limits *limits, ag_error *err) {
    int64_t max_frames = limits ? limits->max_frames : 0;
    if (data->size < 12 ||
        scan_frames(data->bytes, data->size, max_frames, &w->frames, &w->duration_ms) != 0)
        return ag_error_set(err, AG_E_FORMAT, "%s: truncated or damaged animated WebP", label);
    if (max_frames > 0 && w->frames > max_frames)
        return ag_error_set(err, AG_E_LIMIT, "%s: more than %lld frames; the limit is %lld", label,
                            (long long)max_frames, (long long)max_frames);
    double seconds = (double)w->duration_ms / 1000;
    if (limits && limits->max_seconds > 0 && seconds > limits->max_seconds)
        return ag_error_set(err, AG_E_LIMIT, "%s: %.1f s long; the limit is %.1f s", label, seconds,
                            limits->max_seconds);
    /* libwebp's parse itself is linear: it checks what the scan did not (chunk order,
     * frame bounds inside the canvas, complete frames). */
    WebPDemuxState state;
    WebPDemuxer *demux = WebPDemuxPartial(data, &state);
    if (!demux || state != WEBP_DEMUX_DONE) {
        WebPDemuxDelete(demux);
        return ag_error_set(err, AG_E_FORMAT, "%s: truncated or damaged animated WebP", label);
    }
    w->width = (int)WebPDemuxGetI(demux, WEBP_FF_CANVAS_WIDTH);
    w->height = (int)WebPDemuxGetI(demux, WEBP_FF_CANVAS_HEIGHT);
    w->frames = WebPDemuxGetI(demux, WEBP_FF_FRAME_COUNT);
    w->plays = (int)WebPDemuxGetI(demux, WEBP_FF_LOOP_COUNT);
    WebPDemuxDelete(demux);
    size_t max_pixels =
        limits && limits->max_pixels ? limits->max_pixels : AG_VIDEO_DEFAULT_MAX_PIXELS;
    if ((size_t)w->width * (size_t)w->height > max_pixels)
        return ag_error_set(
            err, AG_E_LIMIT, "%s: frames of %dx%d = %.1f megapixels; the limit is %.1f", label,
            w->width, w->height, (double)w->width * w->height / 1e6, (double)max_pixels / 1e6);
    if (w->width < AG_MIN_SIDE || w->height < AG_MIN_SIDE)
        return ag_error_set(err, AG_E_UNSUPPORTED,
                            "%s: frames of %dx%d; the smallest we take is %dx%d", label, w->width,
                            w->height, AG_MIN_SIDE, AG_MIN_SIDE);
    if (w->frames == 0)
        return ag_error_set(err, AG_E_FORMAT, "%s: an animated WebP without frames", label);
    return 0;
}

int ag_webp_input_open(ag_webp_input **out, const uint8_t *bytes, size_t size, const char *label,
                       const ag_video_limits *limits, ag_error *err) {
    *out = NULL;
    ag_webp_input *w = ag_calloc(1, sizeof *w);
    if (!w)
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory", label);
    WebPData data = {.bytes = bytes, .size = size};
    int rc = check_container(w, &data, label, limits, err);
    if (rc)
        goto fail;
    w->rgb = ag_malloc((size_t)w->width * (size_t)w->height * 3);
    WebPAnimDecoderOptions options;
    if (!w->rgb || !WebPAnimDecoderOptionsInit(&options)) {
        rc = ag_error_set(err, AG_E_NOMEM, "%s: out of memory for a %dx%d frame", label, w->width,
                          w->height);
        goto fail;
    }
    options.color_mode = MODE_RGBA;
    options.use_threads = 0;
    w->dec = WebPAnimDecoderNew(&data, &options);
    if (!w->dec) {
        rc = ag_error_set(err, AG_E_FORMAT, "%s: libwebp cannot decode this animation", label);
        goto fail;
    }
    *out = w;
    return 0;
fail:
    ag_webp_input_destroy(w);
    return rc;
}

void ag_webp_input_describe(const ag_webp_input *w, int *width, int *height, int64_t *frames,
                            int64_t *duration_ms, int *plays) {
    *width = w->width;
    *height = w->height;
    *frames = w->frames;
    *duration_ms = w->duration_ms;
    *plays = w->plays;
}

/* rgb (h, w, 3) = rgba (h, w, 4) over white: a video frame has no alpha. */
static void flatten(uint8_t *rgb, const uint8_t *rgba, size_t pixels) {
    for (size_t i = 0; i < pixels; i++) {
        unsigned a = rgba[4 * i + 3];
        for (int c = 0; c < 3; c++)
            rgb[3 * i + c] = (uint8_t)((rgba[4 * i + c] * a + 255u * (255u - a) + 127u) / 255u);
    }
}

int ag_webp_input_next(ag_webp_input *w, const uint8_t **rgb, int64_t *pts_ms, int64_t *duration_ms,
                       ag_error *err) {
    if (!WebPAnimDecoderHasMoreFrames(w->dec))
        return 0;
    uint8_t *rgba;
    int end_ms;
    if (!WebPAnimDecoderGetNext(w->dec, &rgba, &end_ms))
        return ag_error_set(err, AG_E_FORMAT, "damaged animated WebP frame after %.2f s",
                            (double)w->next_pts_ms / 1000);
    flatten(w->rgb, rgba, (size_t)w->width * (size_t)w->height);
    *rgb = w->rgb;
    *pts_ms = w->next_pts_ms;
    *duration_ms = shown_ms(end_ms - w->last_end_ms);
    w->last_end_ms = end_ms;
    w->next_pts_ms += *duration_ms;
    return 1;
}

void ag_webp_input_destroy(ag_webp_input *w) {
    if (!w)
        return;
    WebPAnimDecoderDelete(w->dec);
    ag_free(w->rgb);
    ag_free(w);
}
