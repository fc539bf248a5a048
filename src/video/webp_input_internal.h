/*
 * webp_input_internal.h - animated WebP input (webp_input.c), opened by input.c and read
 * frame by frame by video.c's reader thread. Not part of the public API.
 */
#ifndef AG_WEBP_INPUT_INTERNAL_H
#define AG_WEBP_INPUT_INTERNAL_H

#include "animegan.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ag_webp_input ag_webp_input;

/* 1 when the first `size` bytes begin an animated WebP (VP8X with the animation flag). */
int ag_webp_input_is_animated(const uint8_t *head, size_t size);

/*
 * Parse the container in bytes/size (which must outlive the object) and check the canvas,
 * frame count and total duration against `limits` before any pixel is decoded; then create
 * the decoder. `label` starts every message.
 */
int ag_webp_input_open(ag_webp_input **out, const uint8_t *bytes, size_t size, const char *label,
                       const ag_video_limits *limits, ag_error *err);

/* Canvas size, frame count, total duration as shown, and plays (0 = forever). */
void ag_webp_input_describe(const ag_webp_input *w, int *width, int *height, int64_t *frames,
                            int64_t *duration_ms, int *plays);

/*
 * The next frame, composited and flattened over white: (height, width, 3) RGB in *rgb,
 * valid until the next call, shown from *pts_ms for *duration_ms (frames of 10 ms or less
 * last 100 ms, as browsers show them). 1 with a frame, 0 after the last, <0 on failure.
 */
int ag_webp_input_next(ag_webp_input *w, const uint8_t **rgb, int64_t *pts_ms, int64_t *duration_ms,
                       ag_error *err);

void ag_webp_input_destroy(ag_webp_input *w);

#endif
