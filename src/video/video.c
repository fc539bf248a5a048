/*
 * video.c - ag_video_convert: a clip in, the same clip stylised out, as a stream.
 *
 *   reader thread                     calling thread              writer thread
 *   demux, decode, swscale to RGB,    ag_stylize (or the          swscale to YUV, encode,
 *   rotate; audio packets to the  --> caller's stylize      -->   mux video packets
 *   muxer (copy) or the audio         callback), progress
 *   encoder (audio.c)     decoded queue                stylized queue
 *
 * Both queues hold options->queue_frames frames, so the frames alive at any moment are the
 * two queues, one being converted on each thread, and the encoder's look-ahead, whatever the
 * length of the clip. The muxer is shared by the reader (audio) and the writer (video) under
 * one lock; av_interleaved_write_frame orders the packets by time.
 *
 * One failure anywhere (or a cancel from the progress callback) records the first error and
 * aborts both queues, which wakes every thread; the calling thread joins both, then either
 * writes the trailer and renames the temporary file into place, or removes it.
 */
#include "video_internal.h"

#include "../util/util_internal.h"
#include "audio_internal.h"
#include "gif_out_internal.h"
#include "segments_internal.h"
#include "webp_anim_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define DURATION_RING 256 /* > any encoder delay: look-ahead + B-frames + threads */

/* ---- a bounded queue of frames ------------------------------------------------------------ */

typedef struct frame_slot {
    ag_image image;   /* (height, width, 3) */
    int64_t pts;      /* in the video stream's time base, start offset removed */
    int64_t duration; /* same unit; 0 when unknown */
} frame_slot;

typedef struct frame_queue {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    frame_slot *ring; /* capacity slots */
    int capacity, head, count;
    int finished; /* the producer is done */
    int aborted;  /* stop everything; pending frames are freed by fini */
} frame_queue;

static int queue_init(frame_queue *q, int capacity) {
    memset(q, 0, sizeof *q);
    q->ring = ag_calloc((size_t)capacity, sizeof *q->ring);
    if (!q->ring)
        return -1;
    q->capacity = capacity;
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->changed, NULL);
    return 0;
}

static void queue_fini(frame_queue *q) {
    if (!q->ring)
        return;
    for (int i = 0; i < q->count; i++)
        ag_image_fini(&q->ring[(q->head + i) % q->capacity].image);
    pthread_mutex_destroy(&q->lock);
    pthread_cond_destroy(&q->changed);
    ag_free(q->ring);
    q->ring = NULL;
}

/* Takes ownership of slot->image on success; -1 when aborted (the caller still owns it). */
static int queue_push(frame_queue *q, frame_slot *slot) {
    pthread_mutex_lock(&q->lock);
    while (q->count == q->capacity && !q->aborted)
        pthread_cond_wait(&q->changed, &q->lock);
    int rc = -1;
    if (!q->aborted) {
        q->ring[(q->head + q->count) % q->capacity] = *slot;
        q->count++;
        memset(slot, 0, sizeof *slot);
        rc = 0;
        pthread_cond_broadcast(&q->changed);
    }
    pthread_mutex_unlock(&q->lock);
    return rc;
}

/* 1 with a frame, 0 at the end, -1 when aborted. */
static int queue_pop(frame_queue *q, frame_slot *slot) {
    pthread_mutex_lock(&q->lock);
    while (q->count == 0 && !q->finished && !q->aborted)
        pthread_cond_wait(&q->changed, &q->lock);
    int rc = q->aborted ? -1 : 0;
    if (!q->aborted && q->count > 0) {
        *slot = q->ring[q->head];
        memset(&q->ring[q->head], 0, sizeof q->ring[q->head]);
        q->head = (q->head + 1) % q->capacity;
        q->count--;
        rc = 1;
        pthread_cond_broadcast(&q->changed);
    }
    pthread_mutex_unlock(&q->lock);
    return rc;
}

static void queue_set(frame_queue *q, int finished, int aborted) {
    pthread_mutex_lock(&q->lock);
    q->finished |= finished;
    q->aborted |= aborted;
    pthread_cond_broadcast(&q->changed);
    pthread_mutex_unlock(&q->lock);
}

/* ---- the pipeline ------------------------------------------------------------------------- */

typedef struct duration_entry {
    int64_t pts, duration;
} duration_entry;

typedef struct pipeline {
    const ag_video_options *opt;
    ag_engine *engine;
    const ag_video_segment *segment; /* opt->segment: this range into a segment file */
    const char *const *join;         /* ag_video_join: video packets from these files */
    int join_count;
    int64_t segment_packets; /* written to the segment file */
    ag_video_input in;
    AVStream *ist; /* the video stream */

    /* reader */
    AVCodecContext *dec;
    struct SwsContext *to_rgb;
    AVFrame *rgb_in;       /* (scaled_h, scaled_w, 3), padded as swscale's SIMD needs */
    int64_t video_packets; /* demuxed, to tell a truncated file from a short one */
    int reached_end;       /* stopped at --duration, not at the end of the file */
    int rotation;
    int scaled_w, scaled_h; /* swscale output, before rotation */
    int frame_w, frame_h;   /* what is stylised */
    int64_t start_pts;      /* video time base; frames before it are dropped */
    int64_t end_pts;        /* INT64_MAX: to the end */
    int64_t offset_pts;     /* subtracted from every video timestamp */
    int64_t start_us;       /* absolute start, AV_TIME_BASE units; 0 = from the beginning */
    int64_t end_us;         /* INT64_MAX: to the end */
    int64_t last_in_pts;
    int64_t default_duration;
    int64_t first_pts;    /* of the first frame kept, for --max-seconds on headerless clips */
    int64_t frames_read;  /* kept, for limits.max_frames */
    int64_t video_end_us; /* the video stream's declared end (INT64_MAX: not declared) */

    /* output */
    AVFormatContext *out;
    AVIOContext *out_io;
    int out_fd;
    size_t out_written; /* bytes, against opt->max_output_bytes */
    char tmp_path[PATH_MAX];
    AVCodecContext *enc;
    AVStream *ost;
    struct SwsContext *to_yuv;
    AVFrame *rgb_out;   /* (out_h, out_w, 3), padded: the stylised frame is copied in */
    ag_webp_sink *webp; /* .webp output: an animated WebP instead of encoder + muxer */
    ag_gif_sink *gif;   /* .gif output: the same, as an animated GIF */
    AVFrame *yuv;
    int out_w, out_h;
    int *stream_map;          /* input stream index -> output stream index, -1 dropped */
    ag_audio_encoder **audio; /* per input stream: NULL unless re-encoded */
    pthread_mutex_t mux_lock;
    duration_entry durations[DURATION_RING];
    int64_t durations_written;
    int64_t frames_written;
    int64_t last_out_end; /* pts + duration of the latest frame, output time base of enc */

    frame_queue decoded, stylized;
    pthread_mutex_t error_lock;
    atomic_int failed;
    ag_error error;
    int64_t frames_total;
} pipeline;

/* Record the first failure and wake every thread. Returns err->code. */
static int pipeline_fail(pipeline *p, const ag_error *err) {
    pthread_mutex_lock(&p->error_lock);
    if (!atomic_load(&p->failed)) {
        p->error = *err;
        atomic_store(&p->failed, 1);
    }
    pthread_mutex_unlock(&p->error_lock);
    queue_set(&p->decoded, 0, 1);
    queue_set(&p->stylized, 0, 1);
    return err->code;
}

static int fail_av(pipeline *p, int code, const char *what, int av) {
    char msg[128];
    ag_error err = {0};
    ag_error_set(&err, code, "%s: %s", what, ag_video_averror(av, msg, sizeof msg));
    return pipeline_fail(p, &err);
}

/* Mux one packet (already in the output stream's time base). */
static int mux_packet(pipeline *p, AVPacket *pkt) {
    pthread_mutex_lock(&p->mux_lock);
    int av = av_interleaved_write_frame(p->out, pkt);
    pthread_mutex_unlock(&p->mux_lock);
    return av < 0 ? fail_av(p, AG_E_IO, "writing the output", av) : 0;
}

int ag_video_mux_packet(void *pipe, AVPacket *pkt) {
    return mux_packet(pipe, pkt);
}

/* ---- reader: demux, decode, convert to RGB -------------------------------------------------- */

/* dst (dh, dw, 3) packed = src (sh, sw, 3) with rows `stride` bytes apart, turned clockwise. */
static void rotate_rgb(uint8_t *dst, const uint8_t *src, int stride, int sw, int sh, int rotation) {
    int dw = rotation == 180 ? sw : sh;
    int dh = rotation == 180 ? sh : sw;
    for (int y = 0; y < dh; y++) {
        uint8_t *out_row = dst + (size_t)y * dw * 3;
        for (int x = 0; x < dw; x++) {
            int sx, sy;
            if (rotation == 90)
                sx = y, sy = sh - 1 - x;
            else if (rotation == 180)
                sx = sw - 1 - x, sy = sh - 1 - y;
            else
                sx = sw - 1 - y, sy = x;
            memcpy(out_row + (size_t)x * 3, src + (size_t)sy * stride + (size_t)sx * 3, 3);
        }
    }
}

static int frame_to_rgb(pipeline *p, const AVFrame *f, ag_image *out, ag_error *err) {
    int full_range = f->color_range == AVCOL_RANGE_JPEG;
    int flags = (p->scaled_w != f->width || p->scaled_h != f->height) ? SWS_LANCZOS : SWS_BICUBIC;
    p->to_rgb =
        sws_getCachedContext(p->to_rgb, f->width, f->height, f->format, p->scaled_w, p->scaled_h,
                             AV_PIX_FMT_RGB24, flags | SWS_ACCURATE_RND, NULL, NULL, NULL);
    if (!p->to_rgb)
        return ag_error_set(err, AG_E_UNSUPPORTED, "cannot convert frames of %s to RGB",
                            av_get_pix_fmt_name(f->format));
    int space = f->colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT : (int)f->colorspace;
    sws_setColorspaceDetails(p->to_rgb, sws_getCoefficients(space), full_range,
                             sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
    size_t row = (size_t)p->scaled_w * 3;
    uint8_t *rgb = ag_malloc(row * p->scaled_h);
    if (!rgb)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for a %dx%d frame", p->scaled_w,
                            p->scaled_h);
    sws_scale(p->to_rgb, (const uint8_t *const *)f->data, f->linesize, 0, f->height,
              p->rgb_in->data, p->rgb_in->linesize);
    if (p->rotation) {
        rotate_rgb(rgb, p->rgb_in->data[0], p->rgb_in->linesize[0], p->scaled_w, p->scaled_h,
                   p->rotation);
    } else {
        for (int y = 0; y < p->scaled_h; y++)
            memcpy(rgb + y * row, p->rgb_in->data[0] + (size_t)y * p->rgb_in->linesize[0], row);
    }
    *out = (ag_image){.width = p->frame_w, .height = p->frame_h, .bands = 3, .pixels = rgb};
    return 0;
}

/* Returns 0 to go on, 1 when past the end of the range, <0 on failure (recorded). */
static int reader_frame(pipeline *p, AVFrame *f) {
    int64_t pts = f->best_effort_timestamp;
    if (pts == AV_NOPTS_VALUE)
        pts = p->last_in_pts == AV_NOPTS_VALUE ? 0 : p->last_in_pts + p->default_duration;
    if (pts < p->start_pts)
        return 0;
    if (pts >= p->end_pts) {
        p->reached_end = 1;
        return 1;
    }
    if (p->last_in_pts != AV_NOPTS_VALUE && pts <= p->last_in_pts)
        return 0; /* a repeated or out-of-order timestamp: the container cannot hold it */
    if (p->segment && p->first_pts == AV_NOPTS_VALUE && p->start_pts != INT64_MIN &&
        pts != p->start_pts) { /* the seek went past the keyframe: frames would be lost */
        ag_error err;
        ag_error_set(&err, AG_E_FORMAT,
                     "the segment does not start at its keyframe (%lld, not %lld)", (long long)pts,
                     (long long)p->start_pts);
        return pipeline_fail(p, &err);
    }
    p->last_in_pts = pts;
    if (p->first_pts == AV_NOPTS_VALUE)
        p->first_pts = pts;
    double limit = p->opt->limits.max_seconds;
    if (limit > 0 && (double)(pts - p->first_pts) * av_q2d(p->ist->time_base) > limit) {
        ag_error err;
        ag_error_set(&err, AG_E_LIMIT, "the video runs past %.1f s, the limit", limit);
        return pipeline_fail(p, &err);
    }
    int64_t max_frames = p->opt->limits.max_frames;
    if (max_frames > 0 && ++p->frames_read > max_frames) {
        ag_error err;
        ag_error_set(&err, AG_E_LIMIT, "the video has more than %lld frames, the limit",
                     (long long)max_frames);
        return pipeline_fail(p, &err);
    }
    frame_slot slot = {.pts = pts - p->offset_pts, .duration = f->pkt_duration};
    ag_error err = {0};
    if (frame_to_rgb(p, f, &slot.image, &err))
        return pipeline_fail(p, &err);
    if (queue_push(&p->decoded, &slot)) {
        ag_image_fini(&slot.image);
        return -1; /* aborted elsewhere */
    }
    return 0;
}

/* Send one packet (NULL: flush) and drain the decoder. Same returns as reader_frame. */
static int reader_decode(pipeline *p, const AVPacket *pkt, AVFrame *f) {
    int av = avcodec_send_packet(p->dec, pkt);
    if (av < 0 && av != AVERROR(EAGAIN) && av != AVERROR_EOF) {
        if (pkt && p->frames_written + p->decoded.count > 0)
            return 0; /* a damaged packet mid-stream: skip it, as players do */
        return fail_av(p, AG_E_FORMAT, "decoding the video", av);
    }
    for (;;) {
        av = avcodec_receive_frame(p->dec, f);
        if (av == AVERROR(EAGAIN) || av == AVERROR_EOF)
            return 0;
        if (av < 0)
            return fail_av(p, AG_E_FORMAT, "decoding the video", av);
        int rc = reader_frame(p, f);
        av_frame_unref(f);
        if (rc)
            return rc;
    }
}

/* How far past the video's end audio packets are read before the reader stops. */
#define AUDIO_TAIL_US 5000000

/* An audio packet: copied (timestamps shifted by the start), re-encoded or dropped; 1 when
 * the reading can stop (the sound has gone past the picture). */
static int reader_audio(pipeline *p, AVPacket *pkt) {
    AVStream *ist = p->in.format->streams[pkt->stream_index];
    int out_index = p->stream_map[pkt->stream_index];
    if (out_index < 0)
        return 0;
    int64_t offset = av_rescale_q(p->start_us, AV_TIME_BASE_Q, ist->time_base);
    int64_t end = p->end_us == INT64_MAX ? INT64_MAX
                                         : av_rescale_q(p->end_us, AV_TIME_BASE_Q, ist->time_base);
    int64_t t = pkt->pts != AV_NOPTS_VALUE ? pkt->pts : pkt->dts;
    if (p->start_us > 0 && (t == AV_NOPTS_VALUE || t < offset))
        return 0;
    if (t != AV_NOPTS_VALUE && t >= end)
        return 0;
    /* The sound stops with the picture: past the video's end it is dropped, and a few
     * seconds past it (interleaving leaves no more video behind) the reading stops. */
    int64_t t_us =
        t == AV_NOPTS_VALUE ? AV_NOPTS_VALUE : av_rescale_q(t, ist->time_base, AV_TIME_BASE_Q);
    if (t_us != AV_NOPTS_VALUE && t_us >= p->video_end_us)
        return t_us - p->video_end_us > AUDIO_TAIL_US ? 1 : 0;
    double limit = p->opt->limits.max_seconds;
    if (t_us != AV_NOPTS_VALUE && limit > 0 && (double)(t_us - p->start_us) / 1e6 > limit + 1) {
        ag_error err;
        ag_error_set(&err, AG_E_LIMIT, "the audio runs past %.1f s, the limit", limit);
        return pipeline_fail(p, &err);
    }
    ag_audio_encoder *a = p->audio[pkt->stream_index];
    if (a) {
        ag_error err = {0};
        int rc = ag_audio_encoder_send(a, pkt, offset, &err);
        return rc ? pipeline_fail(p, &err) : 0;
    }
    AVStream *ost = p->out->streams[out_index];
    if (pkt->pts != AV_NOPTS_VALUE)
        pkt->pts -= offset;
    if (pkt->dts != AV_NOPTS_VALUE)
        pkt->dts -= offset;
    av_packet_rescale_ts(pkt, ist->time_base, ost->time_base);
    pkt->stream_index = out_index;
    pkt->pos = -1;
    return mux_packet(p, pkt);
}

static void reader_finish(pipeline *p, int rc);

static void *reader_main(void *arg) {
    pipeline *p = arg;
    AVPacket *pkt = av_packet_alloc();
    AVFrame *f = av_frame_alloc();
    int rc = 0;
    if (!pkt || !f) {
        ag_error err;
        ag_error_set(&err, AG_E_NOMEM, "out of memory");
        rc = pipeline_fail(p, &err);
    }
    while (rc == 0 && !atomic_load(&p->failed)) {
        if (p->opt->cancelled && p->opt->cancelled(p->opt->cancelled_user)) {
            ag_error err;
            ag_error_set(&err, AG_E_CANCELLED, "cancelled");
            rc = pipeline_fail(p, &err);
            break;
        }
        int av = av_read_frame(p->in.format, pkt);
        if (av == AVERROR_EOF)
            break;
        if (av < 0) {
            /* A truncated or damaged container: a player would show what it got, but a
             * conversion that silently loses the end is worse than a clear refusal. */
            char at[48] = "";
            if (p->last_in_pts != AV_NOPTS_VALUE)
                snprintf(at, sizeof at, " after %.2f s",
                         (double)p->last_in_pts * av_q2d(p->ist->time_base));
            char what[96];
            snprintf(what, sizeof what, "truncated or damaged%s", at);
            rc = fail_av(p, AG_E_FORMAT, what, av);
            break;
        }
        if (pkt->stream_index == p->ist->index) {
            p->video_packets++;
            if (!p->join) /* joining: the segments hold the video */
                rc = reader_decode(p, pkt, f);
        } else if ((unsigned)pkt->stream_index < p->in.format->nb_streams)
            rc = reader_audio(p, pkt);
        av_packet_unref(pkt);
    }
    if (rc >= 0 && !atomic_load(&p->failed) && !p->join)
        rc = reader_decode(p, NULL, f); /* the frames the decoder still holds */
    for (unsigned i = 0; i < p->in.format->nb_streams && rc >= 0 && !atomic_load(&p->failed); i++) {
        ag_error err = {0};
        if (p->audio[i] && ag_audio_encoder_flush(p->audio[i], &err))
            rc = pipeline_fail(p, &err);
    }
    reader_finish(p, rc);
    av_frame_free(&f);
    av_packet_free(&pkt);
    return NULL;
}

/* After the last frame: a file shorter than its index, or no frame at all, is an error. */
static void reader_finish(pipeline *p, int rc) {
    /* An MP4/MOV index that lists more samples than the file holds: cut short. */
    int64_t declared = p->ist->nb_frames;
    if (rc == 0 && !p->reached_end && p->start_us == 0 && !p->segment && !atomic_load(&p->failed) &&
        declared > 0 && p->video_packets < declared) {
        ag_error err;
        ag_error_set(&err, AG_E_FORMAT,
                     "truncated or damaged: %lld of the %lld frames in its index",
                     (long long)p->video_packets, (long long)declared);
        pipeline_fail(p, &err);
    }
    if (rc >= 0 && !atomic_load(&p->failed) && !p->join && p->last_in_pts == AV_NOPTS_VALUE) {
        ag_error err;
        ag_error_set(&err, AG_E_FORMAT, "no video frame could be decoded%s",
                     p->start_us > 0 ? " in the requested range" : "");
        pipeline_fail(p, &err);
    }
    queue_set(&p->decoded, 1, 0);
}

/* The animated WebP reader: libwebp's composited frames through the same steps as decoded
 * video frames (range, limits, scaling), timestamps in milliseconds. */
static void *webp_reader_main(void *arg) {
    pipeline *p = arg;
    AVFrame *f = av_frame_alloc();
    int rc = 0;
    if (!f) {
        ag_error err;
        ag_error_set(&err, AG_E_NOMEM, "out of memory");
        rc = pipeline_fail(p, &err);
    }
    while (rc == 0 && !atomic_load(&p->failed)) {
        const uint8_t *rgb;
        int64_t pts, duration;
        ag_error err = {0};
        int got = ag_webp_input_next(p->in.webp, &rgb, &pts, &duration, &err);
        if (got <= 0) {
            if (got < 0)
                rc = pipeline_fail(p, &err);
            break;
        }
        p->video_packets++;
        /* Borrowed pixels: the frame has no buffer of its own to free. */
        f->format = AV_PIX_FMT_RGB24;
        f->width = p->in.info.width;
        f->height = p->in.info.height;
        f->data[0] = (uint8_t *)rgb;
        f->linesize[0] = f->width * 3;
        f->best_effort_timestamp = pts;
        f->pkt_duration = duration;
        f->color_range = AVCOL_RANGE_JPEG;
        rc = reader_frame(p, f);
    }
    reader_finish(p, rc);
    av_frame_free(&f);
    return NULL;
}

/* ---- writer: RGB to YUV, encode, mux --------------------------------------------------------- */

static int64_t duration_for(pipeline *p, int64_t pts) {
    for (int i = 0; i < DURATION_RING; i++)
        if (p->durations[i].pts == pts && p->durations[i].duration > 0)
            return p->durations[i].duration;
    return p->default_duration;
}

/* A segment's packet, in the encoder's time base (the header was never written, so the
 * stream's time base is still the encoder's), to the segment file. */
static int write_segment_packet(pipeline *p, const AVPacket *pkt) {
    ag_segment_write_packet(p->out_io, pkt);
    p->segment_packets++;
    return p->out_io->error < 0 ? fail_av(p, AG_E_IO, "writing the segment", p->out_io->error) : 0;
}

/* Joining: the segments' packets, in order, muxed as the encoder's would be. */
static int writer_join(pipeline *p, AVPacket *pkt) {
    ag_segment_reader r;
    ag_segment_reader_init(&r, p->join, p->join_count, p->enc);
    ag_error err = {0};
    int rc = 0;
    while (rc == 0 && !atomic_load(&p->failed)) {
        int got = ag_segment_next(&r, pkt, &err);
        if (got <= 0) {
            rc = got < 0 ? pipeline_fail(p, &err) : 0;
            break;
        }
        int64_t end = pkt->pts + (pkt->duration > 0 ? pkt->duration : p->default_duration);
        if (end > p->last_out_end)
            p->last_out_end = end;
        p->frames_written++;
        av_packet_rescale_ts(pkt, p->enc->time_base, p->ost->time_base);
        pkt->stream_index = p->ost->index;
        rc = mux_packet(p, pkt);
        av_packet_unref(pkt);
    }
    ag_segment_reader_fini(&r);
    return rc;
}

static int writer_drain(pipeline *p, AVPacket *pkt) {
    for (;;) {
        int av = avcodec_receive_packet(p->enc, pkt);
        if (av == AVERROR(EAGAIN) || av == AVERROR_EOF)
            return 0;
        if (av < 0)
            return fail_av(p, AG_E_INTERNAL, "encoding the video", av);
        pkt->duration = duration_for(p, pkt->pts);
        av_packet_rescale_ts(pkt, p->enc->time_base, p->ost->time_base);
        pkt->stream_index = p->ost->index;
        int rc = p->segment ? write_segment_packet(p, pkt) : mux_packet(p, pkt);
        av_packet_unref(pkt);
        if (rc)
            return rc;
    }
}

static int64_t to_ms(const pipeline *p, int64_t pts) {
    return av_rescale_q(pts, p->ist->time_base, (AVRational){1, 1000});
}

/* An animated WebP or GIF frame. */
static int writer_animation(pipeline *p, const frame_slot *slot) {
    ag_error err = {0};
    int64_t end = slot->pts + (slot->duration > 0 ? slot->duration : p->default_duration);
    if (end > p->last_out_end)
        p->last_out_end = end;
    const uint8_t *rgb = slot->image.pixels;
    int stride = slot->image.width * 3;
    int rc = p->webp ? ag_webp_sink_add(p->webp, rgb, stride, to_ms(p, slot->pts), &err)
                     : ag_gif_sink_add(p->gif, rgb, stride, slot->pts, &err);
    if (rc < 0)
        return pipeline_fail(p, &err);
    if (rc == 0) /* 1: a GIF frame left out, shorter than GIF can show */
        p->frames_written++;
    return 0;
}

static int writer_frame(pipeline *p, const frame_slot *slot, AVPacket *pkt) {
    if (p->webp || p->gif)
        return writer_animation(p, slot);
    int av = av_frame_make_writable(p->yuv);
    if (av < 0)
        return fail_av(p, AG_E_NOMEM, "encoding the video", av);
    size_t row = (size_t)p->out_w * 3;
    if (slot->image.width != p->out_w || slot->image.height != p->out_h || slot->image.bands != 3) {
        ag_error e;
        ag_error_set(&e, AG_E_INTERNAL, "a stylised frame of %dx%d, expected %dx%d",
                     slot->image.width, slot->image.height, p->out_w, p->out_h);
        return pipeline_fail(p, &e);
    }
    for (int y = 0; y < p->out_h; y++)
        memcpy(p->rgb_out->data[0] + (size_t)y * p->rgb_out->linesize[0],
               slot->image.pixels + y * row, row);
    sws_scale(p->to_yuv, (const uint8_t *const *)p->rgb_out->data, p->rgb_out->linesize, 0,
              p->out_h, p->yuv->data, p->yuv->linesize);
    p->yuv->pts = slot->pts;
    p->yuv->pkt_duration = slot->duration;
    duration_entry *d = &p->durations[p->durations_written++ % DURATION_RING];
    d->pts = slot->pts;
    d->duration = slot->duration;
    int64_t end = slot->pts + (slot->duration > 0 ? slot->duration : p->default_duration);
    if (end > p->last_out_end)
        p->last_out_end = end;
    av = avcodec_send_frame(p->enc, p->yuv);
    if (av < 0)
        return fail_av(p, AG_E_INTERNAL, "encoding the video", av);
    p->frames_written++;
    return writer_drain(p, pkt);
}

static void *writer_main(void *arg) {
    pipeline *p = arg;
    AVPacket *pkt = av_packet_alloc();
    int rc = 0;
    if (!pkt) {
        ag_error err;
        ag_error_set(&err, AG_E_NOMEM, "out of memory");
        rc = pipeline_fail(p, &err);
    }
    frame_slot slot;
    if (rc == 0 && p->join) {
        writer_join(p, pkt);
        rc = -1; /* nothing to encode */
    }
    while (rc == 0) {
        int got = queue_pop(&p->stylized, &slot);
        if (got <= 0) {
            if (got < 0)
                rc = -1;
            break;
        }
        rc = writer_frame(p, &slot, pkt);
        ag_image_fini(&slot.image);
    }
    if (rc == 0 && !atomic_load(&p->failed) && p->enc) {
        int av = avcodec_send_frame(p->enc, NULL);
        if (av < 0)
            fail_av(p, AG_E_INTERNAL, "encoding the video", av);
        else
            writer_drain(p, pkt);
    }
    av_packet_free(&pkt);
    return NULL;
}

/* ---- set-up -----------------------------------------------------------------------------------
 */

static AVFrame *rgb_frame(int width, int height) {
    AVFrame *f = av_frame_alloc();
    if (!f)
        return NULL;
    f->format = AV_PIX_FMT_RGB24;
    f->width = width;
    f->height = height;
    if (av_frame_get_buffer(f, 0) < 0)
        av_frame_free(&f);
    return f;
}

static int open_decoder(pipeline *p, ag_error *err) {
    if (p->in.webp) /* libwebp decodes (webp_reader_main) */
        return (p->rgb_in = rgb_frame(p->scaled_w, p->scaled_h))
                   ? 0
                   : ag_error_set(err, AG_E_NOMEM, "out of memory for a frame");
    const AVCodec *codec = avcodec_find_decoder(p->ist->codecpar->codec_id);
    p->dec = codec ? avcodec_alloc_context3(codec) : NULL;
    if (!p->dec)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for the decoder");
    char msg[128];
    int av = avcodec_parameters_to_context(p->dec, p->ist->codecpar);
    if (av >= 0) {
        p->dec->pkt_timebase = p->ist->time_base;
        p->dec->thread_count = 1; /* the stylise step is the slow one by far */
        av = avcodec_open2(p->dec, codec, NULL);
    }
    if (av < 0)
        return ag_error_set(err, AG_E_UNSUPPORTED, "cannot open the %s decoder: %s", codec->name,
                            ag_video_averror(av, msg, sizeof msg));
    if (!(p->rgb_in = rgb_frame(p->scaled_w, p->scaled_h)))
        return ag_error_set(err, AG_E_NOMEM, "out of memory for a frame");
    return 0;
}

/* Frame sizes: display size after rotation, downscaled to max_side, even for yuv420p. */
/* The widest frames we encode (H.264's and VP9's limits are 8192-16384; past them the
 * encoders fail late, after the first frame). */
#define AG_VIDEO_MAX_OUT_SIDE 16384

static void plan_sizes(pipeline *p) {
    int w = p->in.info.width, h = p->in.info.height;
    int longest = w > h ? w : h;
    int max_side = p->opt->max_side;
    if (max_side > 0 && longest > max_side) {
        double scale = (double)max_side / longest;
        w = (int)lround(w * scale);
        h = (int)lround(h * scale);
    }
    w &= ~1;
    h &= ~1;
    if (w < AG_MIN_SIDE)
        w = AG_MIN_SIDE;
    if (h < AG_MIN_SIDE)
        h = AG_MIN_SIDE;
    p->frame_w = w;
    p->frame_h = h;
    int swap = p->rotation == 90 || p->rotation == 270;
    p->scaled_w = swap ? h : w;
    p->scaled_h = swap ? w : h;
    int scale = p->opt->out_scale > 1 ? p->opt->out_scale : 1;
    p->out_w = (p->opt->side_by_side ? 2 * w : w) * scale;
    p->out_h = h * scale;
}

/* A segment: its frames only, their timestamps those of the whole clip (offset_pts kept). */
static void plan_segment_range(pipeline *p, int64_t origin_us) {
    const ag_video_segment *seg = p->segment;
    if (seg->from_pts > p->start_pts)
        p->start_pts = seg->from_pts;
    if (seg->to_pts < p->end_pts)
        p->end_pts = seg->to_pts;
    AVRational tb = p->ist->time_base;
    int64_t origin = av_rescale_q(origin_us, AV_TIME_BASE_Q, tb);
    int64_t from = p->start_pts != INT64_MIN ? p->start_pts : origin;
    int64_t to = p->end_pts != INT64_MAX ? p->end_pts
                 : p->ist->duration > 0  ? origin + p->ist->duration
                                         : AV_NOPTS_VALUE;
    double fps = p->in.info.fps;
    if (to != AV_NOPTS_VALUE && to > from && fps > 0)
        p->frames_total = (int64_t)((double)(to - from) * av_q2d(tb) * fps + 0.5);
}

static void plan_range(pipeline *p) {
    const AVFormatContext *fc = p->in.format;
    AVRational tb = p->ist->time_base;
    /* Times count from the first video frame, so --start 0.5 at 25 fps begins exactly
     * with frame 12 whatever the audio's priming delay makes the container's start. */
    int64_t origin = p->ist->start_time != AV_NOPTS_VALUE
                         ? av_rescale_q(p->ist->start_time, tb, AV_TIME_BASE_Q)
                     : fc->start_time != AV_NOPTS_VALUE ? fc->start_time
                                                        : 0;
    p->start_us = 0;
    p->end_us = INT64_MAX;
    p->start_pts = INT64_MIN;
    p->end_pts = INT64_MAX;
    p->offset_pts = 0;
    if (p->opt->start_s > 0) {
        p->start_us = origin + (int64_t)(p->opt->start_s * AV_TIME_BASE);
        p->start_pts = av_rescale_q(p->start_us, AV_TIME_BASE_Q, tb);
        p->offset_pts = p->start_pts;
    }
    if (p->opt->duration_s > 0) {
        int64_t from = p->opt->start_s > 0 ? p->start_us : origin;
        p->end_us = from + (int64_t)(p->opt->duration_s * AV_TIME_BASE);
        p->end_pts = av_rescale_q(p->end_us, AV_TIME_BASE_Q, tb);
    }
    p->video_end_us = p->ist->duration > 0
                          ? origin + av_rescale_q(p->ist->duration, tb, AV_TIME_BASE_Q)
                          : INT64_MAX;
    double fps = p->in.info.fps;
    p->default_duration = fps > 0 ? av_rescale_q(1, av_d2q(1.0 / fps, 1 << 20), tb) : 1;
    if (p->default_duration <= 0)
        p->default_duration = 1;
    double seconds = p->in.info.duration_s;
    if (p->opt->start_s > 0)
        seconds -= p->opt->start_s;
    if (p->opt->duration_s > 0 && p->opt->duration_s < seconds)
        seconds = p->opt->duration_s;
    p->frames_total = seconds > 0 && fps > 0 ? (int64_t)(seconds * fps + 0.5) : p->in.info.frames;
    if (p->opt->start_s <= 0 && p->opt->duration_s <= 0 && p->in.info.frames > 0)
        p->frames_total = p->in.info.frames;
    if (p->segment)
        plan_segment_range(p, origin);
}

/* ---- the output file: our own fd behind an AVIOContext, renamed at the end ------------------ */

static int out_write(void *opaque, uint8_t *buf, int size) {
    pipeline *p = opaque;
    int fd = p->out_fd;
    size_t bound = p->opt->max_output_bytes;
    if (bound && (size_t)size > bound - p->out_written) {
        ag_error err;
        ag_error_set(&err, AG_E_LIMIT, "the result grew past %.1f MiB, the limit",
                     (double)bound / 1048576.0);
        pipeline_fail(p, &err);
        return AVERROR(EFBIG);
    }
    p->out_written += (size_t)size;
    int done = 0;
    while (done < size) {
        ssize_t n = write(fd, buf + done, (size_t)(size - done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return AVERROR(errno);
        done += (int)n;
    }
    return size;
}

static int64_t out_seek(void *opaque, int64_t offset, int whence) {
    int fd = ((pipeline *)opaque)->out_fd;
    if (whence & AVSEEK_SIZE) {
        struct stat st;
        return fstat(fd, &st) == 0 ? (int64_t)st.st_size : AVERROR(errno);
    }
    off_t pos = lseek(fd, (off_t)offset, whence & ~AVSEEK_FORCE);
    return pos < 0 ? AVERROR(errno) : (int64_t)pos;
}

static int open_output_file(pipeline *p, const char *path, ag_error *err) {
    const char *slash = strrchr(path, '/');
    int n = slash ? snprintf(p->tmp_path, sizeof p->tmp_path, "%.*s/.%s.XXXXXX",
                             (int)(slash - path), path, slash + 1)
                  : snprintf(p->tmp_path, sizeof p->tmp_path, ".%s.XXXXXX", path);
    if (n < 0 || (size_t)n >= sizeof p->tmp_path) {
        p->tmp_path[0] = 0;
        return ag_error_set(err, AG_E_IO, "%s: path too long", path);
    }
    p->out_fd = mkostemp(p->tmp_path, O_CLOEXEC);
    if (p->out_fd < 0) {
        int e = errno;
        p->tmp_path[0] = 0;
        return ag_error_set(err, AG_E_IO, "%s: cannot create a file there: %s", path, strerror(e));
    }
    /* mkstemp creates 0600; the output is meant to be readable like any new file, except
     * in a service's spool, where results are the uploader's alone. */
    if (!p->opt->private_output && fchmod(p->out_fd, 0644) != 0)
        return ag_error_set(err, AG_E_IO, "%s: %s", path, strerror(errno));
    uint8_t *buffer = av_malloc(64 * 1024);
    p->out_io =
        buffer ? avio_alloc_context(buffer, 64 * 1024, 1, p, NULL, out_write, out_seek) : NULL;
    if (!p->out_io) {
        av_free(buffer);
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    }
    if (p->out) {
        p->out->pb = p->out_io;
        p->out->flags |= AVFMT_FLAG_CUSTOM_IO;
    }
    return 0;
}

static int open_encoder(pipeline *p, ag_error *err) {
    int vp9 = p->out->oformat->video_codec == AV_CODEC_ID_VP9 ||
              strcmp(p->out->oformat->name, "webm") == 0;
    const char *name = vp9 ? "libvpx-vp9" : "libx264";
    const AVCodec *codec = avcodec_find_encoder_by_name(name);
    if (!codec)
        return ag_error_set(err, AG_E_UNSUPPORTED, "this FFmpeg has no %s encoder", name);
    AVCodecContext *e = p->enc = avcodec_alloc_context3(codec);
    if (!e)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for the encoder");
    const AVCodecParameters *in = p->ist->codecpar;
    e->width = p->out_w;
    e->height = p->out_h;
    e->pix_fmt = AV_PIX_FMT_YUV420P;
    e->time_base = p->ist->time_base;
    AVRational rate =
        p->ist->avg_frame_rate.num > 0 ? p->ist->avg_frame_rate : p->ist->r_frame_rate;
    if (rate.num > 0 && rate.den > 0)
        e->framerate = rate;
    AVRational sar = in->sample_aspect_ratio;
    if (sar.num > 0 && sar.den > 0)
        e->sample_aspect_ratio =
            (p->rotation == 90 || p->rotation == 270) ? (AVRational){sar.den, sar.num} : sar;
    e->color_range = in->color_range == AVCOL_RANGE_JPEG ? AVCOL_RANGE_JPEG : in->color_range;
    e->colorspace = in->color_space;
    e->color_primaries = in->color_primaries;
    e->color_trc = in->color_trc;
    if (p->out->oformat->flags & AVFMT_GLOBALHEADER)
        e->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    int crf = p->opt->crf >= 0 ? p->opt->crf : vp9 ? 31 : 18;
    AVDictionary *opts = NULL;
    char value[16];
    snprintf(value, sizeof value, "%d", crf);
    av_dict_set(&opts, "crf", value, 0);
    snprintf(value, sizeof value, "%d", AG_VIDEO_LOOKAHEAD);
    if (vp9) {
        e->bit_rate = 0;
        e->thread_count = 2;
        av_dict_set(&opts, "deadline", "good", 0);
        av_dict_set(&opts, "cpu-used", "4", 0);
        av_dict_set(&opts, "row-mt", "1", 0);
        av_dict_set(&opts, "lag-in-frames", value, 0);
    } else {
        e->thread_count = 1; /* frame threads would each hold frames; encoding is not the cost */
        av_dict_set(&opts, "preset", p->opt->preset ? p->opt->preset : "medium", 0);
        av_dict_set(&opts, "rc-lookahead", value, 0);
    }
    char msg[128];
    int av = avcodec_open2(e, codec, &opts);
    av_dict_free(&opts);
    if (av < 0)
        return ag_error_set(err, AG_E_ARG, "cannot open the %s encoder: %s", name,
                            ag_video_averror(av, msg, sizeof msg));
    p->ost = avformat_new_stream(p->out, NULL);
    if (!p->ost || avcodec_parameters_from_context(p->ost->codecpar, e) < 0)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for the output stream");
    p->ost->time_base = e->time_base;
    p->ost->avg_frame_rate = e->framerate;
    p->ost->sample_aspect_ratio = e->sample_aspect_ratio;

    p->yuv = av_frame_alloc();
    if (!p->yuv)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    p->yuv->format = AV_PIX_FMT_YUV420P;
    p->yuv->width = p->out_w;
    p->yuv->height = p->out_h;
    p->yuv->color_range = e->color_range;
    p->yuv->colorspace = e->colorspace;
    if (av_frame_get_buffer(p->yuv, 0) < 0 || !(p->rgb_out = rgb_frame(p->out_w, p->out_h)))
        return ag_error_set(err, AG_E_NOMEM, "out of memory for a frame");
    p->to_yuv =
        sws_getContext(p->out_w, p->out_h, AV_PIX_FMT_RGB24, p->out_w, p->out_h, AV_PIX_FMT_YUV420P,
                       SWS_BICUBIC | SWS_ACCURATE_RND, NULL, NULL, NULL);
    if (!p->to_yuv)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for the colour converter");
    int space = e->colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT : (int)e->colorspace;
    sws_setColorspaceDetails(p->to_yuv, sws_getCoefficients(SWS_CS_DEFAULT), 1,
                             sws_getCoefficients(space), e->color_range == AVCOL_RANGE_JPEG, 0,
                             1 << 16, 1 << 16);
    return 0;
}

/* Map the audio streams: copy when the container takes the codec, else re-encode. */
static int plan_audio(pipeline *p, ag_video_result *res, ag_error *err) {
    AVFormatContext *ic = p->in.format;
    p->stream_map = ag_malloc(ic->nb_streams * sizeof *p->stream_map);
    p->audio = ag_calloc(ic->nb_streams ? ic->nb_streams : 1, sizeof *p->audio);
    if (!p->stream_map || !p->audio)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    size_t note = 0;
    for (unsigned i = 0; i < ic->nb_streams; i++) {
        p->stream_map[i] = -1;
        AVStream *ist = ic->streams[i];
        if (ist->codecpar->codec_type != AVMEDIA_TYPE_AUDIO)
            continue;
        const char *codec = avcodec_get_name(ist->codecpar->codec_id);
        const char *how;
        char what[sizeof res->audio_note];
        if (avformat_query_codec(p->out->oformat, ist->codecpar->codec_id, FF_COMPLIANCE_NORMAL) ==
            1) {
            AVStream *ost = avformat_new_stream(p->out, NULL);
            if (!ost || avcodec_parameters_copy(ost->codecpar, ist->codecpar) < 0)
                return ag_error_set(err, AG_E_NOMEM, "out of memory for an audio stream");
            ost->codecpar->codec_tag = 0;
            ost->time_base = ist->time_base;
            av_dict_copy(&ost->metadata, ist->metadata, 0);
            ost->disposition = ist->disposition;
            p->stream_map[i] = ost->index;
            res->audio_copied++;
            snprintf(what, sizeof what, "%s copied", codec);
            how = what;
        } else {
            int rc = ag_audio_encoder_create(&p->audio[i], p, ist, p->out, err);
            if (rc == AG_E_UNSUPPORTED) {
                res->audio_dropped++;
                snprintf(what, sizeof what, "%s dropped (%.100s)", codec, err->message);
                *err = (ag_error){0};
            } else if (rc) {
                return rc;
            } else {
                p->stream_map[i] = ag_audio_encoder_stream(p->audio[i]);
                res->audio_encoded++;
                snprintf(what, sizeof what, "%s re-encoded to %s", codec,
                         ag_audio_encoder_codec(p->audio[i]));
            }
            how = what;
        }
        if (note < sizeof res->audio_note)
            note += (size_t)snprintf(res->audio_note + note, sizeof res->audio_note - note,
                                     "%saudio %u: %s", note ? ", " : "", i, how);
    }
    return 0;
}

/* Every input stream dropped (a segment's sound is the join's). */
static int map_no_streams(pipeline *p, ag_error *err) {
    unsigned n = p->in.format->nb_streams;
    p->stream_map = ag_malloc((n ? n : 1) * sizeof *p->stream_map);
    p->audio = ag_calloc(n ? n : 1, sizeof *p->audio);
    if (!p->stream_map || !p->audio)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    for (unsigned i = 0; i < n; i++)
        p->stream_map[i] = -1;
    return 0;
}

/* An animated WebP or GIF: frames only (the sound is dropped, and said so), the input's
 * play count kept. */
static int open_animation_output(pipeline *p, const char *out_path, int gif, ag_video_result *res,
                                 ag_error *err) {
    if (map_no_streams(p, err))
        return err->code;
    if (p->in.info.audio_streams > 0) {
        res->audio_dropped = p->in.info.audio_streams;
        snprintf(res->audio_note, sizeof res->audio_note,
                 "audio dropped (animated %s has no sound)", gif ? "GIF" : "WebP");
    }
    int rc = open_output_file(p, out_path, err);
    if (rc == 0 && gif)
        rc = ag_gif_sink_create(&p->gif, p->out_w, p->out_h, p->ist->time_base, p->in.plays,
                                p->out_io, err);
    else if (rc == 0)
        rc = ag_webp_sink_create(&p->webp, p->out_w, p->out_h, p->in.plays, err);
    return rc;
}

/* The muxer of a video container's name (.mp4, .mov, .mkv, .webm); NULL for any other. */
static const char *video_format(const char *path) {
    const char *dot = ag_video_output_supported(path) ? strrchr(path, '.') : NULL;
    return !dot                            ? NULL
           : strcasecmp(dot, ".webm") == 0 ? "webm"
           : strcasecmp(dot, ".mkv") == 0  ? "matroska"
           : strcasecmp(dot, ".mov") == 0  ? "mov"
           : strcasecmp(dot, ".mp4") == 0  ? "mp4"
                                           : NULL;
}

/* A segment: the encoder of the joined output's container, its packets into a segment file
 * (the muxer is allocated for the encoder's settings only; no header is written). */
static int open_segment_output(pipeline *p, const char *out_path, ag_error *err) {
    const char *format = video_format(p->segment->container ? p->segment->container : "");
    if (!format)
        return ag_error_set(err, AG_E_ARG, "%s: a clip in segments is an .mp4, .mov, .mkv or .webm",
                            p->segment->container ? p->segment->container : "(none)");
    if (avformat_alloc_output_context2(&p->out, NULL, format, NULL) < 0 || !p->out)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for the muxer");
    int rc = open_encoder(p, err);
    if (rc == 0)
        rc = map_no_streams(p, err);
    if (rc == 0)
        rc = open_output_file(p, out_path, err);
    if (rc == 0 && ag_segment_write_header(p->out_io, p->enc->time_base, p->enc))
        rc = ag_error_set(err, AG_E_IO, "%s: cannot start the segment", out_path);
    return rc;
}

static int open_output(pipeline *p, const char *out_path, ag_video_result *res, ag_error *err) {
    if (p->segment)
        return open_segment_output(p, out_path, err);
    if (!ag_video_output_supported(out_path))
        return ag_error_set(err, AG_E_ARG,
                            "%s: name the output .mp4, .mov, .mkv, .webm, .webp or .gif", out_path);
    const char *dot = strrchr(out_path, '.');
    if (p->join && !video_format(out_path))
        return ag_error_set(err, AG_E_ARG, "%s: segments join into .mp4, .mov, .mkv or .webm",
                            out_path);
    if (strcasecmp(dot, ".webp") == 0 || strcasecmp(dot, ".gif") == 0)
        return open_animation_output(p, out_path, strcasecmp(dot, ".gif") == 0, res, err);
    const char *format = video_format(out_path);
    if (avformat_alloc_output_context2(&p->out, NULL, format, NULL) < 0 || !p->out)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for the muxer");
    int rc = open_encoder(p, err); /* joining too: its stream is the one the segments had */
    if (rc == 0)
        rc = plan_audio(p, res, err);
    if (rc == 0)
        rc = open_output_file(p, out_path, err);
    if (rc)
        return rc;
    av_dict_copy(&p->out->metadata, p->in.format->metadata, 0);
    av_dict_set(&p->out->metadata, "encoder", NULL, 0);
    char msg[128];
    int av = avformat_write_header(p->out, NULL);
    if (av < 0)
        return ag_error_set(err, AG_E_IO, "%s: cannot start the file: %s", out_path,
                            ag_video_averror(av, msg, sizeof msg));
    return 0;
}

/* Seek near the start for --start; frames before it are decoded and dropped. */
static int seek_to_start(pipeline *p, ag_error *err) {
    if (p->in.webp) /* WebP: frames before the start are skipped */
        return 0;
    int av = 0;
    if (p->segment && p->start_pts != INT64_MIN) /* to its keyframe (or one before) */
        av = avformat_seek_file(p->in.format, p->ist->index, INT64_MIN, p->start_pts, p->start_pts,
                                0);
    else if (p->start_us > 0)
        av = avformat_seek_file(p->in.format, -1, INT64_MIN, p->start_us, p->start_us, 0);
    if (av < 0) {
        char msg[128];
        return ag_error_set(err, AG_E_FORMAT, "cannot seek to %.3f s: %s", p->opt->start_s,
                            ag_video_averror(av, msg, sizeof msg));
    }
    return 0;
}

static void pipeline_fini(pipeline *p) {
    queue_fini(&p->decoded);
    queue_fini(&p->stylized);
    if (p->audio && p->in.format)
        for (unsigned i = 0; i < p->in.format->nb_streams; i++)
            ag_audio_encoder_destroy(p->audio[i]);
    ag_free(p->audio);
    ag_free(p->stream_map);
    sws_freeContext(p->to_yuv);
    sws_freeContext(p->to_rgb);
    av_frame_free(&p->yuv);
    av_frame_free(&p->rgb_out);
    av_frame_free(&p->rgb_in);
    ag_webp_sink_destroy(p->webp);
    ag_gif_sink_destroy(p->gif); /* before out_io, which it writes through */
    avcodec_free_context(&p->enc);
    avcodec_free_context(&p->dec);
    if (p->out)
        avformat_free_context(p->out);
    if (p->out_io) {
        av_freep(&p->out_io->buffer);
        avio_context_free(&p->out_io);
    }
    if (p->out_fd >= 0)
        close(p->out_fd);
    if (p->tmp_path[0])
        unlink(p->tmp_path);
    ag_video_input_close(&p->in);
    pthread_mutex_destroy(&p->mux_lock);
    pthread_mutex_destroy(&p->error_lock);
}

/* Write the trailer, sync and rename the temporary file into place. */
static int finish_output(pipeline *p, const char *out_path, ag_error *err) {
    char msg[128];
    if (p->segment) {
        ag_segment_write_end(p->out_io, p->segment_packets);
        avio_flush(p->out_io);
        if (p->out_io->error < 0)
            return ag_error_set(err, AG_E_IO, "%s: cannot finish the segment: %s", out_path,
                                ag_video_averror(p->out_io->error, msg, sizeof msg));
        goto sync;
    }
    if (p->webp) {
        int rc = ag_webp_sink_finish(p->webp, to_ms(p, p->last_out_end), p->out_fd, err);
        if (rc)
            return rc;
        goto sync;
    }
    int av = 0;
    if (p->gif) {
        int rc = ag_gif_sink_finish(p->gif, p->last_out_end, err);
        if (rc)
            return rc;
    } else {
        av = av_write_trailer(p->out);
    }
    if (av >= 0)
        avio_flush(p->out_io);
    if (av < 0 || p->out_io->error < 0)
        return ag_error_set(err, AG_E_IO, "%s: cannot finish the file: %s", out_path,
                            ag_video_averror(av < 0 ? av : p->out_io->error, msg, sizeof msg));
sync:
    if (fsync(p->out_fd) != 0 || close(p->out_fd) != 0) {
        p->out_fd = -1;
        return ag_error_set(err, AG_E_IO, "%s: %s", out_path, strerror(errno));
    }
    p->out_fd = -1;
    if (rename(p->tmp_path, out_path) != 0)
        return ag_error_set(err, AG_E_IO, "%s: %s", out_path, strerror(errno));
    p->tmp_path[0] = 0;
    return 0;
}

void ag_video_options_init(ag_video_options *options) {
    memset(options, 0, sizeof *options);
    options->max_side = 1024;
    options->crf = -1;
    options->queue_frames = 2;
}

size_t ag_video_frame_bytes(int width, int height, const ag_video_options *options) {
    int q = options && options->queue_frames > 0 ? options->queue_frames : 2;
    int sbs = options && options->side_by_side ? 2 : 1;
    size_t s2 =
        options && options->out_scale > 1 ? (size_t)options->out_scale * options->out_scale : 1;
    size_t frame = (size_t)width * height * 3, out = frame * sbs * s2;
    /* queues (q frames each way), reader's frame + rotation copy, the stylised frame (x2 side
     * by side) before and after upscaling and its input, the YUV frame, the encoder's
     * look-ahead and reference frames in YUV */
    size_t yuv = out / 2;
    return (size_t)q * (frame + out) + 2 * frame + frame * (1 + sbs) + (s2 > 1 ? out : 0) +
           (size_t)(AG_VIDEO_LOOKAHEAD + 8) * yuv;
}

static int stylize_frame(pipeline *p, const ag_image *in, ag_image *out, ag_error *err) {
    if (p->opt->stylize)
        return p->opt->stylize(p->opt->stylize_user, in, p->opt->side_by_side, out, err);
    return ag_stylize(p->engine, in, p->opt->side_by_side, out, err);
}

/* The calling thread's part: stylise each decoded frame, report progress. */
static void run_stylize(pipeline *p) {
    frame_slot slot, done;
    int64_t count = 0;
    for (;;) {
        int got = queue_pop(&p->decoded, &slot);
        if (got <= 0)
            break;
        ag_error err = {0};
        memset(&done, 0, sizeof done);
        int rc = stylize_frame(p, &slot.image, &done.image, &err);
        ag_image_fini(&slot.image);
        if (rc) {
            pipeline_fail(p, &err);
            break;
        }
        done.pts = slot.pts;
        done.duration = slot.duration;
        if (queue_push(&p->stylized, &done)) {
            ag_image_fini(&done.image);
            break;
        }
        count++;
        int64_t total = p->frames_total > count ? p->frames_total : count;
        if (p->opt->progress && p->opt->progress(p->opt->progress_user, count, total)) {
            ag_error_set(&err, AG_E_CANCELLED, "cancelled");
            pipeline_fail(p, &err);
            break;
        }
    }
    queue_set(&p->stylized, 1, 0);
}

static int convert(ag_engine *engine, const char *in_path, const char *out_path,
                   const ag_video_options *options, const char *const *join, int join_count,
                   ag_video_result *result, ag_error *err) {
    ag_video_options defaults;
    if (!options) {
        ag_video_options_init(&defaults);
        options = &defaults;
    }
    ag_video_result res_local;
    ag_video_result *res = result ? result : &res_local;
    memset(res, 0, sizeof *res);
    if (!engine && !options->stylize && !join)
        return ag_error_set(err, AG_E_ARG, "no engine and no stylize callback");
    if (join && join_count < 1)
        return ag_error_set(err, AG_E_ARG, "no segment to join");
    int loaded = ag_video_init(err); /* before pipeline_fini could call into libav* */
    if (loaded)
        return loaded;
    pipeline *p = ag_calloc(1, sizeof *p);
    if (!p)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    p->opt = options;
    p->engine = engine;
    p->segment = join ? NULL : options->segment;
    p->join = join;
    p->join_count = join_count;
    p->out_fd = -1;
    p->last_in_pts = AV_NOPTS_VALUE;
    p->first_pts = AV_NOPTS_VALUE;
    pthread_mutex_init(&p->mux_lock, NULL);
    pthread_mutex_init(&p->error_lock, NULL);
    int q = options->queue_frames > 0 ? options->queue_frames : 2;

    int rc = ag_video_input_open(&p->in, in_path, NULL, 0, in_path, &options->limits, err);
    if (rc)
        goto done;
    p->ist = p->in.format->streams[p->in.video_index];
    p->rotation = p->in.info.rotation;
    /* Only the video stream and the audio streams are demuxed. */
    for (unsigned i = 0; i < p->in.format->nb_streams; i++) {
        enum AVMediaType t = p->in.format->streams[i]->codecpar->codec_type;
        if ((int)i != p->in.video_index && t != AVMEDIA_TYPE_AUDIO)
            p->in.format->streams[i]->discard = AVDISCARD_ALL;
    }
    plan_sizes(p);
    plan_range(p);
    if (p->out_w > AG_VIDEO_MAX_OUT_SIDE || p->out_h > AG_VIDEO_MAX_OUT_SIDE) {
        rc = ag_error_set(err, AG_E_LIMIT,
                          "frames of %dx%d would come out %dx%d, past %d pixels a side (use "
                          "--max-side or a smaller scale)",
                          p->frame_w, p->frame_h, p->out_w, p->out_h, AG_VIDEO_MAX_OUT_SIDE);
        goto done;
    }
    if ((rc = open_decoder(p, err)) || (rc = open_output(p, out_path, res, err)) ||
        (rc = seek_to_start(p, err)))
        goto done;
    if (queue_init(&p->decoded, q) || queue_init(&p->stylized, q)) {
        rc = ag_error_set(err, AG_E_NOMEM, "out of memory");
        goto done;
    }
    pthread_t reader, writer;
    if (pthread_create(&reader, NULL, p->in.webp ? webp_reader_main : reader_main, p) != 0) {
        rc = ag_error_set(err, AG_E_NOMEM, "cannot start the reader thread");
        goto done;
    }
    if (pthread_create(&writer, NULL, writer_main, p) != 0) {
        ag_error e;
        ag_error_set(&e, AG_E_NOMEM, "cannot start the writer thread");
        pipeline_fail(p, &e);
        pthread_join(reader, NULL);
        rc = e.code;
        *err = e;
        goto done;
    }
    run_stylize(p);
    pthread_join(reader, NULL);
    pthread_join(writer, NULL);
    if (atomic_load(&p->failed)) {
        *err = p->error;
        rc = err->code ? err->code : AG_E_INTERNAL;
        goto done;
    }
    if ((rc = finish_output(p, out_path, err)))
        goto done;
    res->frames = p->frames_written;
    res->width = p->out_w;
    res->height = p->out_h;
    res->duration_s = (double)p->last_out_end * av_q2d(p->ist->time_base);
done:
    pipeline_fini(p);
    ag_free(p);
    return rc;
}

int ag_video_convert(ag_engine *engine, const char *in_path, const char *out_path,
                     const ag_video_options *options, ag_video_result *result, ag_error *err) {
    return convert(engine, in_path, out_path, options, NULL, 0, result, err);
}

int ag_video_join(const char *in_path, const char *const *segments, int count, const char *out_path,
                  const ag_video_options *options, ag_video_result *result, ag_error *err) {
    return convert(NULL, in_path, out_path, options, segments, count, result, err);
}
