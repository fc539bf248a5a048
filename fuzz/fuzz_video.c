/*
 * fuzz_video.c - libFuzzer target for the video entry: the container probe and demux of
 * src/video/input.c on arbitrary bytes (libavformat behind our own AVIOContext, with the
 * demuxer whitelist and no nested opens), then up to 64 packets read; an animated WebP goes
 * through libwebp's demuxer and the limits, then up to 8 frames are decoded. Frames are capped at
 * 512x512 and 60 s by the limits, as the service caps them, so no input spends long in one
 * run. Checks that every failure fills the error, that a success describes a real stream,
 * and that nothing allocated through ag_malloc is left.
 *
 * Build and run: fuzz/run.sh (seeds: the clips of tools/make_test_clips.sh).
 */
#include "../src/util/util_internal.h"
#include "../src/video/video_internal.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t before = ag_allocated_bytes();
    ag_video_limits limits = {.max_pixels = 512 * 512, .max_seconds = 60};
    ag_error err = {0};
    ag_video_input in;
    int rc = ag_video_input_open(&in, NULL, data, size, "fuzz", &limits, &err);
    AG_ASSERT(rc == AG_OK || (err.code == rc && strncmp(err.message, "fuzz: ", 6) == 0));
    if (rc == AG_OK) {
        AG_ASSERT(in.video_index >= 0 && (unsigned)in.video_index < in.format->nb_streams);
        AG_ASSERT(in.info.width >= AG_MIN_SIDE && in.info.height >= AG_MIN_SIDE);
        AG_ASSERT((size_t)in.info.width * (size_t)in.info.height <= limits.max_pixels);
        AG_ASSERT(in.info.rotation % 90 == 0 && in.info.rotation >= 0 && in.info.rotation < 360);
        const uint8_t *rgb;
        int64_t pts, ms, last = -1;
        for (int i = 0; in.webp && i < 8; i++) {
            int got = ag_webp_input_next(in.webp, &rgb, &pts, &ms, &err);
            AG_ASSERT(got >= 0 || err.code == got);
            if (got <= 0)
                break;
            AG_ASSERT(pts > last && ms > 0);
            last = pts;
        }
        AVPacket *pkt = in.webp ? NULL : av_packet_alloc();
        for (int i = 0; pkt && i < 64 && av_read_frame(in.format, pkt) >= 0; i++) {
            AG_ASSERT(pkt->stream_index >= 0 &&
                      (unsigned)pkt->stream_index < in.format->nb_streams);
            av_packet_unref(pkt);
        }
        av_packet_free(&pkt);
    }
    ag_video_input_close(&in);
    AG_ASSERT(ag_allocated_bytes() == before);
    return 0;
}
