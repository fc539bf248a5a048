/*
 * webp_anim_internal.h - the animated WebP sink of src/video/video.c (webp_anim.c). Not part
 * of the public API.
 */
#ifndef AG_WEBP_ANIM_INTERNAL_H
#define AG_WEBP_ANIM_INTERNAL_H

#include "animegan.h"

typedef struct ag_webp_sink ag_webp_sink;

/* `plays`: the loop count, 0 = forever. */
int ag_webp_sink_create(ag_webp_sink **out, int width, int height, int plays, ag_error *err);
/* One frame, (height, width, 3) RGB rows `stride` bytes apart, shown from timestamp_ms. */
int ag_webp_sink_add(ag_webp_sink *s, const uint8_t *rgb, int stride, int64_t timestamp_ms,
                     ag_error *err);
/* The last frame lasts until end_ms; assemble the file and write it all to fd. */
int ag_webp_sink_finish(ag_webp_sink *s, int64_t end_ms, int fd, ag_error *err);
void ag_webp_sink_destroy(ag_webp_sink *s);

#endif
