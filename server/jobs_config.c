/*
 * jobs_config.c - the defaults of the video jobs' options (--jobs-dir and its bounds; the
 * rows are in config.c's table) and their term in the memory budget: what config.c and
 * budget.c need of jobs.c, kept apart so that they (and their unit tests) do not pull in
 * the job runner.
 */
#include "server.h"

#include <errno.h>
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
}

size_t ag_jobs_budget_bytes(const ag_server_config *c) {
    if (!c->jobs.dir)
        return 0;
    ag_video_options o;
    ag_video_options_init(&o);
    o.side_by_side = 1; /* the worst case */
    /* Frames in flight at the output size, the decoder's reference and reorder frames at
     * the input size (H.264 may keep 16, plus the frame being decoded and the one swscale
     * reads: 18 in YUV 4:2:0), and the demuxer's and encoders' own state. */
    size_t pixels = c->jobs.max_pixels < c->max_pixels ? c->jobs.max_pixels : c->max_pixels;
    return ag_video_frame_bytes(c->max_side, c->max_side, &o) + pixels * 3 / 2 * 18 +
           ((size_t)32 << 20);
}
