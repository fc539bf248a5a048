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
