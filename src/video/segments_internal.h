/*
 * segments_internal.h - one clip over several workers (segments.c): where to cut it, and the
 * segment file between a worker's encoder and the join. Not part of the public API.
 *
 * A segment file holds the encoder's packets exactly as the muxer of a whole-clip conversion
 * would get them (timestamps, durations, key flags in the encoder's time base), so that the
 * join muxes the same packets the same way; a container would round timestamps (Matroska)
 * or drop decode timestamps and durations (NUT). Little-endian:
 *   "AGSEG\1\0\0", time base num, den (u32), extradata size (u32) and bytes;
 *   per packet: pts, dts, duration (i64), flags (u32), size (u32), bytes;
 *   the end: flags 0xffffffff and the packet count in pts (nothing after it).
 */
#ifndef AG_SEGMENTS_INTERNAL_H
#define AG_SEGMENTS_INTERNAL_H

#include "libav_internal.h"

#include <stdio.h>

/* Writing (the pipeline's writer, through the output's AVIOContext). 0 or AG_E_IO. */
int ag_segment_write_header(AVIOContext *io, AVRational time_base, const AVCodecContext *enc);
void ag_segment_write_packet(AVIOContext *io, const AVPacket *pkt);
void ag_segment_write_end(AVIOContext *io, int64_t packets);

/* Reading the segments of a join in order, each checked against the encoder the join
 * opened (the same time base and headers: the packets decode with its stream's). */
typedef struct ag_segment_reader {
    const char *const *paths;
    int count, index; /* the file open now */
    FILE *file;
    const AVCodecContext *enc;
    int64_t packets;  /* read from the current file */
    int64_t last_dts; /* across files: decode timestamps only grow */
} ag_segment_reader;

void ag_segment_reader_init(ag_segment_reader *r, const char *const *paths, int count,
                            const AVCodecContext *enc);
/* The next packet (in the encoder's time base): 1, 0 after the last file, or an AG_E_* code
 * with err set (a damaged file, or one that does not follow the one before). */
int ag_segment_next(ag_segment_reader *r, AVPacket *pkt, ag_error *err);
void ag_segment_reader_fini(ag_segment_reader *r);

#endif
