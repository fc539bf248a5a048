/*
 * gif_out_internal.h - the animated GIF sink of src/video/video.c (gif_out.c). Not part of
 * the public API.
 */
#ifndef AG_GIF_OUT_INTERNAL_H
#define AG_GIF_OUT_INTERNAL_H

#include "animegan.h"

#include "libav_internal.h"

typedef struct ag_gif_sink ag_gif_sink;

/* Frames of width x height, timestamps in `in_tb`, written through `io` (which the caller
 * owns and flushes); `plays` as WebP counts them (0 = forever, 1 = once, N). */
int ag_gif_sink_create(ag_gif_sink **out, int width, int height, AVRational in_tb, int plays,
                       AVIOContext *io, ag_error *err);
/* One frame, (height, width, 3) RGB rows `stride` bytes apart, shown from pts: 0 when
 * written, 1 when left out (it would start under 2 cs after the one before), <0 on error. */
int ag_gif_sink_add(ag_gif_sink *s, const uint8_t *rgb, int stride, int64_t pts, ag_error *err);
/* The last frame lasts until end_pts; flush everything and write the trailer. */
int ag_gif_sink_finish(ag_gif_sink *s, int64_t end_pts, ag_error *err);
void ag_gif_sink_destroy(ag_gif_sink *s);

#endif
