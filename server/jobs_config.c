/*
 * jobs_config.c - the defaults of the video jobs' options (--jobs-dir and its bounds; the
 * rows are in config.c's table) and their term in the memory budget: what config.c and
 * budget.c need of jobs.c, kept apart so that they (and their unit tests) do not pull in
 * the job runner.
 */
#include "server.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ag_jobs_config_defaults(ag_jobs_config *c) {
    memset(c, 0, sizeof *c);
    c->max_bytes = (size_t)200 << 20;
    c->max_seconds = 600;
    c->max_pixels = (size_t)4096 * 2160; /* 4K UHD and DCI */
    c->max_jobs = 16;
    c->quota_bytes = (size_t)2048 << 20;
    c->ttl_s = 3600;
    c->max_frames = 36000;   /* 10 minutes at 60 fps */
    c->max_work_mpx = 20000; /* 10 minutes at 30 fps of 1024x1024 frames (~19,000) */
    c->max_result_bytes = (size_t)1024 << 20;
    c->lease_s = 30;
    c->max_reclaims = 3;
    c->segment_s = 60;
}

/* The side of a square frame of as many pixels as the largest a job may stylise at
 * upscale=n (the bytes go by pixels): max_side, and with n > 1 also what
 * --max-output-pixels allows of the n times larger frames (the intake refuses more, side
 * by side counted), rounded up. */
static size_t frame_side(const ag_server_config *c, int n, int side_by_side) {
    size_t side = (size_t)c->max_side;
    if (n <= 1)
        return side;
    size_t per_px = (size_t)n * (size_t)n * (side_by_side ? 2 : 1);
    size_t fit = (size_t)ceil(sqrt((double)c->max_output_pixels / (double)per_px));
    return fit < side ? fit : side;
}

size_t ag_jobs_budget_bytes(const ag_server_config *c) {
    if (!c->jobs.dir)
        return 0;
    /* Frames in flight at the output size, the decoder's reference and reorder frames at
     * the input size (H.264 may keep 16, plus the frame being decoded and the one swscale
     * reads: 18 in YUV 4:2:0), and the demuxer's and encoders' own state. The frames are
     * the largest of each upscale=N the server offers (1 without an upscaler), side by
     * side or not; the upscaler's window and image are in the workers' term (budget.c). */
    int upscaler = c->upscale_model && strcmp(c->upscale_model, "none") != 0;
    size_t frames = 0;
    for (int slot = -1; slot < (upscaler ? AG_SERVER_UPSCALES : 0); slot++) {
        int n = slot < 0 ? 1 : ag_server_upscale_factor(slot);
        for (int sbs = 0; sbs <= 1; sbs++) {
            ag_video_options o;
            ag_video_options_init(&o);
            o.side_by_side = sbs;
            o.out_scale = n;
            int side = (int)frame_side(c, n, sbs);
            size_t bytes = ag_video_frame_bytes(side, side, &o);
            frames = bytes > frames ? bytes : frames;
        }
    }
    size_t pixels = c->jobs.max_pixels < c->max_pixels ? c->jobs.max_pixels : c->max_pixels;
    return frames + pixels * 3 / 2 * 18 + ((size_t)32 << 20);
}

/* Bytes per output pixel of each result format, measured on stylised clips (tools/
 * make_test_clips.sh's clip.mp4 at 128x96 and a 640x360 pan over a photo, hayao) with some
 * margin: a GIF (a palette and LZW per frame, dithered) takes 0.64 to 1.03, about 13 to 25
 * times the H.264 upload; the lossy animated WebP 0.10; H.264 and VP9 at their CRF 0.04 to
 * 0.07, which the input's own size (times N^2 with upscale=N) usually exceeds. */
static const struct {
    const char *ext;
    double bytes_per_px;
    size_t bytes_per_frame; /* a GIF frame's own colour table and headers */
    int from_input;         /* a video codec: at least the input's size again */
} result_rates[] = {
    {"gif", 1.0, 1024, 0}, {"webp", 0.3, 64, 0}, {"mp4", 0.1, 0, 1},
    {"webm", 0.1, 0, 1},   {"mkv", 0.1, 0, 1},   {"mov", 0.1, 0, 1},
};

size_t ag_jobs_result_bytes(const char *ext, int64_t frames, int out_width, int out_height,
                            size_t in_bytes, int upscale) {
    int row = 2; /* an unknown extension is treated as MP4 */
    for (size_t i = 0; i < sizeof result_rates / sizeof result_rates[0]; i++)
        if (!strcmp(ext, result_rates[i].ext))
            row = (int)i;
    double per_frame = (double)out_width * (double)out_height * result_rates[row].bytes_per_px +
                       (double)result_rates[row].bytes_per_frame;
    double bytes = (double)(frames > 0 ? frames : 0) * per_frame + (double)(64 << 10);
    if (result_rates[row].from_input) {
        double n = upscale > 1 ? upscale : 1;
        double again = (double)in_bytes * n * n;
        bytes = again > bytes ? again : bytes;
    }
    return bytes >= (double)SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)bytes;
}
