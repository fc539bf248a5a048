/*
 * webp_anim.c - the animated WebP output of ag_video_convert (clip.mp4 or anim.gif -> .webp):
 * libwebp's WebPAnimEncoder takes the stylised frames one by one with their timestamps in
 * milliseconds and keeps them compressed; at the end the file is assembled and written to the
 * pipeline's temporary file. Memory is the encoder's two canvases plus the compressed frames
 * (the size of the output file), which is why the service's --max-video-seconds matters for
 * this format. Animated WebP has no sound.
 */
#include "webp_anim_internal.h"

#include "../util/util_internal.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <webp/encode.h>
#include <webp/mux.h>

#define WEBP_QUALITY 85

struct ag_webp_sink {
    WebPAnimEncoder *enc;
    WebPConfig config;
    int width, height;
    int64_t last_ms;
};

int ag_webp_sink_create(ag_webp_sink **out, int width, int height, int plays, ag_error *err) {
    *out = NULL;
    ag_webp_sink *s = ag_calloc(1, sizeof *s);
    if (!s)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    WebPAnimEncoderOptions options;
    if (!WebPAnimEncoderOptionsInit(&options) || !WebPConfigInit(&s->config)) {
        ag_free(s);
        return ag_error_set(err, AG_E_INTERNAL, "libwebp version mismatch");
    }
    options.anim_params.loop_count = plays;
    options.allow_mixed = 0;
    s->config.quality = WEBP_QUALITY;
    s->config.method = 4;
    s->enc = WebPAnimEncoderNew(width, height, &options);
    if (!s->enc) {
        ag_free(s);
        return ag_error_set(err, AG_E_NOMEM, "out of memory for the WebP encoder");
    }
    s->width = width;
    s->height = height;
    s->last_ms = -1;
    *out = s;
    return 0;
}

int ag_webp_sink_add(ag_webp_sink *s, const uint8_t *rgb, int stride, int64_t timestamp_ms,
                     ag_error *err) {
    if (timestamp_ms <= s->last_ms)
        timestamp_ms = s->last_ms + 1; /* WebP counts whole milliseconds, strictly rising */
    WebPPicture pic;
    if (!WebPPictureInit(&pic))
        return ag_error_set(err, AG_E_INTERNAL, "libwebp version mismatch");
    pic.width = s->width;
    pic.height = s->height;
    pic.use_argb = 1;
    int rc = 0;
    if (!WebPPictureImportRGB(&pic, rgb, stride))
        rc = ag_error_set(err, AG_E_NOMEM, "out of memory for a WebP frame");
    else if (timestamp_ms > INT32_MAX ||
             !WebPAnimEncoderAdd(s->enc, &pic, (int)timestamp_ms, &s->config))
        rc = ag_error_set(err, AG_E_INTERNAL, "WebP: %s", WebPAnimEncoderGetError(s->enc));
    WebPPictureFree(&pic);
    s->last_ms = timestamp_ms;
    return rc;
}

int ag_webp_sink_finish(ag_webp_sink *s, int64_t end_ms, int fd, ag_error *err) {
    if (end_ms <= s->last_ms)
        end_ms = s->last_ms + 1;
    WebPData data;
    WebPDataInit(&data);
    if (end_ms > INT32_MAX || !WebPAnimEncoderAdd(s->enc, NULL, (int)end_ms, NULL) ||
        !WebPAnimEncoderAssemble(s->enc, &data))
        return ag_error_set(err, AG_E_INTERNAL, "WebP: %s", WebPAnimEncoderGetError(s->enc));
    int rc = 0;
    size_t done = 0;
    while (done < data.size) {
        ssize_t n = write(fd, data.bytes + done, data.size - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = ag_error_set(err, AG_E_IO, "writing the output: %s", strerror(errno));
            break;
        }
        done += (size_t)n;
    }
    WebPDataClear(&data);
    return rc;
}

void ag_webp_sink_destroy(ag_webp_sink *s) {
    if (!s)
        return;
    WebPAnimEncoderDelete(s->enc);
    ag_free(s);
}
