/*
 * video_internal.h - what src/video/input.c (opening and checking a container) shares with
 * src/video/video.c (the decode -> stylise -> encode pipeline). Not part of the public API.
 */
#ifndef AG_VIDEO_INTERNAL_H
#define AG_VIDEO_INTERNAL_H

#include "animegan.h"
#include "webp_input_internal.h"

#include "libav_internal.h"
#include <stdio.h>

#define AG_VIDEO_DEFAULT_MAX_PIXELS ((size_t)4096 * 4096)

/* The bytes behind a demuxer: a file of ours or a buffer, never a URL libavformat opens. */
typedef struct ag_video_source {
    FILE *file;          /* or NULL for memory */
    const uint8_t *data; /* (size) */
    size_t size, pos;
} ag_video_source;

/*
 * An open input: the demuxer, its I/O, the chosen video stream and what the header says.
 * An animated WebP has no demuxer in libavformat 5.1: then `webp` reads it (from the mapped
 * file or the caller's bytes) and `format` is a stand-in with one video stream, no iformat
 * and no I/O, which describes the frames (size, time base 1/1000, count, duration) to the
 * pipeline; it is never read from.
 */
typedef struct ag_video_input {
    AVFormatContext *format;
    AVIOContext *io;
    ag_video_source source;
    ag_webp_input *webp;
    void *map; /* (map_bytes) the mapped WebP file */
    size_t map_bytes;
    int video_index; /* stream index */
    int plays;       /* an animation's play count, 0 = forever (also for a video) */
    ag_video_info info;
} ag_video_input;

/*
 * Open `path` (or data/size when path is NULL), read the header and the stream parameters,
 * and check them against `limits` before any frame is decoded. `label` names the input in
 * messages. On failure everything is released and `in` is zeroed.
 */
int ag_video_input_open(ag_video_input *in, const char *path, const void *data, size_t size,
                        const char *label, const ag_video_limits *limits, ag_error *err);
void ag_video_input_close(ag_video_input *in);

/*
 * An MP4/MOV's sample tables (mp4_check.c), counted from its box headers before
 * libavformat builds an index from them: 0, or AG_E_LIMIT when a track declares more
 * samples or table entries than limits->max_frames allows (a default bound when 0).
 * Rewinds the source.
 */
int ag_mp4_check(ag_video_source *src, int64_t size, const ag_video_limits *limits,
                 const char *label, ag_error *err);

/* Load FFmpeg (ag_libav_load) and, once per process, route its logging (off unless
 * AG_VIDEO_DEBUG=1). Before any other libav* call; 0 or AG_E_UNSUPPORTED. */
int ag_video_init(ag_error *err);

/* libavutil's text for an AVERROR code. */
const char *ag_video_averror(int code, char *buf, size_t size);

#endif
