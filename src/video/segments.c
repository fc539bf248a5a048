/*
 * segments.c - one clip over several workers: where to cut it (keyframes, from a demux of
 * its video packets), and the segment files each worker's encoder writes and the join reads
 * (the format is in segments_internal.h). The join itself is ag_video_convert's pipeline
 * with its video packets taken from the segment files (video.c): the sound is read, copied
 * or re-encoded once from the source, as a whole-clip conversion does it.
 *
 * Why the joined file equals a whole-clip conversion: each worker decodes from a keyframe,
 * keeps the frames of its range with their own timestamps (the whole clip's offset removed,
 * not the segment's) and encodes them with the same encoder settings, so its packets carry
 * the timestamps and durations the whole clip's encoder would give them; only where each
 * segment starts a new GOP do the bits differ. The join checks that every segment was made
 * with the same encoder headers and that decode timestamps keep growing across the joints.
 */
#include "segments_internal.h"

#include "video_internal.h"

#include "../util/util_internal.h"

#include <errno.h>
#include <string.h>

#define SEGMENT_MAGIC "AGSEG\1\0\0"
#define SEGMENT_END 0xffffffffu
#define SEGMENT_MAX_PACKET ((uint32_t)256 << 20)  /* bytes: far past any encoded frame */
#define SEGMENT_MAX_EXTRADATA ((uint32_t)1 << 20) /* bytes of codec headers */

/* ---- the cut points ------------------------------------------------------------------------ */

/* Read the video packets: keyframes at least `step` after the previous cut become cuts. */
static int scan_keyframes(ag_video_input *in, int64_t step, int64_t *cuts, int *cut_count,
                          ag_error *err) {
    AVStream *st = in->format->streams[in->video_index];
    AVPacket *pkt = av_packet_alloc();
    if (!pkt)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    int64_t first = AV_NOPTS_VALUE, end = AV_NOPTS_VALUE;
    int n = 0, rc = 0;
    for (;;) {
        int av = av_read_frame(in->format, pkt);
        if (av == AVERROR_EOF)
            break;
        if (av < 0) {
            char msg[128];
            rc = ag_error_set(err, AG_E_FORMAT, "truncated or damaged: %s",
                              ag_video_averror(av, msg, sizeof msg));
            break;
        }
        int64_t t = pkt->pts != AV_NOPTS_VALUE ? pkt->pts : pkt->dts;
        if (pkt->stream_index == st->index && t != AV_NOPTS_VALUE) {
            if (first == AV_NOPTS_VALUE)
                first = t;
            if (end == AV_NOPTS_VALUE || t + pkt->duration > end)
                end = t + pkt->duration;
            int64_t since = n ? cuts[n] : first;
            if ((pkt->flags & AV_PKT_FLAG_KEY) && n < AG_VIDEO_MAX_SEGMENTS - 1 &&
                t - since >= step)
                cuts[++n] = t;
        }
        av_packet_unref(pkt);
    }
    av_packet_free(&pkt);
    if (n > 0 && end - cuts[n] < step / 2)
        n--; /* a short tail runs with the segment before it */
    *cut_count = n;
    return rc;
}

int ag_video_plan_segments(const char *path, double seconds, const ag_video_limits *limits,
                           int64_t cuts[AG_VIDEO_MAX_SEGMENTS + 1], int *count, ag_error *err) {
    cuts[0] = INT64_MIN;
    cuts[1] = INT64_MAX;
    *count = 1;
    if (!(seconds > 0))
        return 0;
    int rc = ag_video_init(err);
    if (rc)
        return rc;
    ag_video_input in;
    if ((rc = ag_video_input_open(&in, path, NULL, 0, path, limits, err)))
        return rc;
    /* MP4/MOV and Matroska/WebM index their keyframes, so a segment's run seeks to its own
     * exactly; other containers (MPEG-TS, AVI, ...) are converted whole. */
    int indexed = !strcmp(in.info.container, "mov") || !strcmp(in.info.container, "matroska");
    if (!in.webp && indexed) {
        AVFormatContext *fc = in.format;
        for (unsigned i = 0; i < fc->nb_streams; i++)
            if ((int)i != in.video_index)
                fc->streams[i]->discard = AVDISCARD_ALL;
        AVRational tb = fc->streams[in.video_index]->time_base;
        int64_t step = av_rescale_q((int64_t)(seconds * AV_TIME_BASE), AV_TIME_BASE_Q, tb);
        int n = 0;
        rc = scan_keyframes(&in, step > 0 ? step : 1, cuts, &n, err);
        if (rc == 0) {
            cuts[n + 1] = INT64_MAX;
            *count = n + 1;
        }
    }
    ag_video_input_close(&in);
    return rc;
}

/* ---- writing -------------------------------------------------------------------------------- */

static uint8_t *put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

static uint8_t *put_i64(uint8_t *p, int64_t v) {
    uint64_t u = (uint64_t)v;
    for (int i = 0; i < 8; i++)
        *p++ = (uint8_t)(u >> (8 * i));
    return p;
}

int ag_segment_write_header(AVIOContext *io, AVRational time_base, const AVCodecContext *enc) {
    uint8_t head[8 + 12], *p = head;
    memcpy(p, SEGMENT_MAGIC, 8);
    p = put_u32(p + 8, (uint32_t)time_base.num);
    p = put_u32(p, (uint32_t)time_base.den);
    p = put_u32(p, (uint32_t)enc->extradata_size);
    avio_write(io, head, (int)(p - head));
    if (enc->extradata_size > 0)
        avio_write(io, enc->extradata, enc->extradata_size);
    return io->error < 0 ? AG_E_IO : 0;
}

static void write_record(AVIOContext *io, int64_t pts, int64_t dts, int64_t duration,
                         uint32_t flags, const uint8_t *data, uint32_t size) {
    uint8_t head[32], *p = head;
    p = put_i64(p, pts);
    p = put_i64(p, dts);
    p = put_i64(p, duration);
    p = put_u32(p, flags);
    p = put_u32(p, size);
    avio_write(io, head, (int)(p - head));
    if (size)
        avio_write(io, data, (int)size);
}

void ag_segment_write_packet(AVIOContext *io, const AVPacket *pkt) {
    write_record(io, pkt->pts, pkt->dts, pkt->duration, (uint32_t)pkt->flags & ~SEGMENT_END,
                 pkt->data, (uint32_t)pkt->size);
}

void ag_segment_write_end(AVIOContext *io, int64_t packets) {
    write_record(io, packets, 0, 0, SEGMENT_END, NULL, 0);
}

/* ---- reading -------------------------------------------------------------------------------- */

static uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int64_t get_i64(const uint8_t *p) {
    return (int64_t)((uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32);
}

void ag_segment_reader_init(ag_segment_reader *r, const char *const *paths, int count,
                            const AVCodecContext *enc) {
    memset(r, 0, sizeof *r);
    r->paths = paths;
    r->count = count;
    r->index = -1;
    r->enc = enc;
    r->last_dts = INT64_MIN;
}

void ag_segment_reader_fini(ag_segment_reader *r) {
    if (r->file)
        fclose(r->file);
    r->file = NULL;
}

static int damaged(ag_segment_reader *r, const char *why, ag_error *err) {
    return ag_error_set(err, AG_E_FORMAT, "segment %d of %d (%s): %s", r->index + 1, r->count,
                        r->paths[r->index], why);
}

/* Open the next file and check its header against the join's encoder. */
static int open_next(ag_segment_reader *r, ag_error *err) {
    ag_segment_reader_fini(r);
    r->index++;
    r->packets = 0;
    r->file = fopen(r->paths[r->index], "rbe");
    if (!r->file)
        return ag_error_set(err, AG_E_IO, "segment %d of %d: %s: %s", r->index + 1, r->count,
                            r->paths[r->index], strerror(errno));
    uint8_t head[20];
    if (fread(head, 1, sizeof head, r->file) != sizeof head || memcmp(head, SEGMENT_MAGIC, 8))
        return damaged(r, "not a segment file", err);
    uint32_t num = get_u32(head + 8), den = get_u32(head + 12), size = get_u32(head + 16);
    if ((int)num != r->enc->time_base.num || (int)den != r->enc->time_base.den)
        return damaged(r, "another time base than the clip's", err);
    if (size > SEGMENT_MAX_EXTRADATA || (int)size != r->enc->extradata_size)
        return damaged(r, "encoded with other settings (codec headers differ)", err);
    uint8_t extradata[4096];
    for (uint32_t done = 0; done < size;) {
        uint32_t n = size - done < sizeof extradata ? size - done : (uint32_t)sizeof extradata;
        if (fread(extradata, 1, n, r->file) != n ||
            memcmp(extradata, r->enc->extradata + done, n) != 0)
            return damaged(r, "encoded with other settings (codec headers differ)", err);
        done += n;
    }
    return 0;
}

int ag_segment_next(ag_segment_reader *r, AVPacket *pkt, ag_error *err) {
    for (;;) {
        if (!r->file) {
            if (r->index + 1 >= r->count)
                return 0;
            int rc = open_next(r, err);
            if (rc)
                return rc;
        }
        uint8_t head[32];
        if (fread(head, 1, sizeof head, r->file) != sizeof head)
            return damaged(r, "cut short", err);
        uint32_t flags = get_u32(head + 24), size = get_u32(head + 28);
        if (flags == SEGMENT_END) {
            if (get_i64(head) != r->packets || fgetc(r->file) != EOF)
                return damaged(r, "its packet count does not match", err);
            ag_segment_reader_fini(r);
            continue;
        }
        if (size == 0 || size > SEGMENT_MAX_PACKET)
            return damaged(r, "a packet of an impossible size", err);
        int64_t dts = get_i64(head + 8);
        if (dts == AV_NOPTS_VALUE || dts <= r->last_dts)
            return damaged(r, "its decode timestamps do not follow the segment before", err);
        if (av_new_packet(pkt, (int)size) < 0)
            return ag_error_set(err, AG_E_NOMEM, "out of memory for a packet");
        if (fread(pkt->data, 1, size, r->file) != size) {
            av_packet_unref(pkt);
            return damaged(r, "cut short", err);
        }
        pkt->pts = get_i64(head);
        pkt->dts = dts;
        pkt->duration = get_i64(head + 16);
        pkt->flags = (int)flags;
        r->last_dts = dts;
        r->packets++;
        return 1;
    }
}
