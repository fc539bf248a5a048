/*
 * gif_out.c - the animated GIF output of ag_video_convert (clip.mp4, anim.gif or anim.webp ->
 * .gif), streamed: each stylised RGB frame goes through libavfilter's palettegen (a palette of
 * 256 colours made for that frame alone: stats_mode=single) and paletteuse (new=1: a local
 * colour table per frame, Sierra-2-4A error diffusion), then libavcodec's GIF encoder and
 * libavformat's GIF muxer write it to the pipeline's temporary file.
 *
 * Why one palette per frame: a palette for the whole clip (palettegen's default) is only
 * known after the last frame, so every frame would wait in the filter graph until then, and
 * memory would grow with the length of the clip. Per frame, the graph holds one frame and its
 * palette at a time. The cost is 768 bytes of colour table per frame and, on content whose
 * colours drift, a palette that changes from frame to frame.
 *
 * Timing: GIF counts delays in centiseconds, and browsers show a delay under 2 cs as 10 cs,
 * so timestamps are rounded to centiseconds (from the start of the clip, so the rounding does
 * not accumulate) and a frame that would start less than 2 cs after the one before is left
 * out (the one before lasts longer). The last frame's delay is its own duration.
 */
#include "gif_out_internal.h"

#include "../util/util_internal.h"
#include "video_internal.h"

#include <string.h>

#define GIF_MIN_DELAY_CS 2
static const AVRational centiseconds = {1, 100};

struct ag_gif_sink {
    AVFilterGraph *graph;
    AVFilterContext *src, *sink;
    AVCodecContext *enc;
    AVFormatContext *out;
    AVFrame *pal; /* a frame out of the graph: (height, width) palette indices */
    AVPacket *pkt;
    AVRational in_tb; /* of the timestamps given to ag_gif_sink_add */
    int width, height;
    int64_t last_cs; /* start of the latest frame kept, -1 before the first */
};

static int av_fail(ag_error *err, int code, const char *what, int av) {
    char msg[128];
    return ag_error_set(err, code, "GIF: %s: %s", what, ag_video_averror(av, msg, sizeof msg));
}

/* buffer -> split -> palettegen -> paletteuse -> buffersink, for frames of one size. */
static int open_graph(ag_gif_sink *s, ag_error *err) {
    char args[160];
    snprintf(args, sizeof args, "video_size=%dx%d:pix_fmt=%d:time_base=1/100:pixel_aspect=1/1",
             s->width, s->height, AV_PIX_FMT_RGB24);
    s->graph = avfilter_graph_alloc();
    if (!s->graph)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for the GIF palette filter");
    s->graph->nb_threads = 1; /* the stylise step is the slow one by far */
    int av = avfilter_graph_create_filter(&s->src, avfilter_get_by_name("buffer"), "in", args, NULL,
                                          s->graph);
    if (av >= 0)
        av = avfilter_graph_create_filter(&s->sink, avfilter_get_by_name("buffersink"), "out", NULL,
                                          NULL, s->graph);
    AVFilterInOut *outputs = avfilter_inout_alloc(), *inputs = avfilter_inout_alloc();
    if (av >= 0 && (!outputs || !inputs))
        av = AVERROR(ENOMEM);
    if (av >= 0) {
        outputs->name = av_strdup("in");
        outputs->filter_ctx = s->src;
        inputs->name = av_strdup("out");
        inputs->filter_ctx = s->sink;
        av = avfilter_graph_parse_ptr(s->graph,
                                      "split[a][b];[a]palettegen=stats_mode=single:"
                                      "reserve_transparent=0[p];[b][p]paletteuse=new=1",
                                      &inputs, &outputs, NULL);
    }
    avfilter_inout_free(&inputs);
    avfilter_inout_free(&outputs);
    if (av >= 0)
        av = avfilter_graph_config(s->graph, NULL);
    return av < 0 ? av_fail(err, AG_E_INTERNAL, "the palette filter", av) : 0;
}

/* GIF encoder and muxer writing through `io`; `plays` as WebP counts (0 = forever). */
static int open_encoder_muxer(ag_gif_sink *s, AVIOContext *io, int plays, ag_error *err) {
    const AVCodec *codec = avcodec_find_encoder(AV_CODEC_ID_GIF);
    if (!codec)
        return ag_error_set(err, AG_E_UNSUPPORTED, "this FFmpeg has no GIF encoder");
    s->enc = avcodec_alloc_context3(codec);
    if (!s->enc || avformat_alloc_output_context2(&s->out, NULL, "gif", NULL) < 0 || !s->out)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for the GIF encoder");
    s->enc->width = s->width;
    s->enc->height = s->height;
    s->enc->pix_fmt = AV_PIX_FMT_PAL8;
    s->enc->time_base = centiseconds;
    int av = avcodec_open2(s->enc, codec, NULL);
    if (av < 0)
        return av_fail(err, AG_E_INTERNAL, "cannot open the encoder", av);
    AVStream *st = avformat_new_stream(s->out, NULL);
    if (!st || avcodec_parameters_from_context(st->codecpar, s->enc) < 0)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for the GIF stream");
    st->time_base = centiseconds;
    s->out->pb = io;
    s->out->flags |= AVFMT_FLAG_CUSTOM_IO;
    /* The muxer's loop: -1 writes no loop extension (one play), N repeats N times after the
     * first play, 0 forever. */
    AVDictionary *opts = NULL;
    av_dict_set_int(&opts, "loop", plays == 0 ? 0 : plays == 1 ? -1 : plays - 1, 0);
    av = avformat_write_header(s->out, &opts);
    av_dict_free(&opts);
    return av < 0 ? av_fail(err, AG_E_IO, "cannot start the file", av) : 0;
}

int ag_gif_sink_create(ag_gif_sink **out, int width, int height, AVRational in_tb, int plays,
                       AVIOContext *io, ag_error *err) {
    *out = NULL;
    ag_gif_sink *s = ag_calloc(1, sizeof *s);
    if (!s)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    s->width = width;
    s->height = height;
    s->in_tb = in_tb;
    s->last_cs = -1;
    s->pal = av_frame_alloc();
    s->pkt = av_packet_alloc();
    int rc = !s->pal || !s->pkt ? ag_error_set(err, AG_E_NOMEM, "out of memory") : 0;
    if (rc == 0)
        rc = open_graph(s, err);
    if (rc == 0)
        rc = open_encoder_muxer(s, io, plays, err);
    if (rc) {
        ag_gif_sink_destroy(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* Encode and mux what the encoder has (frame NULL: flush it). */
static int encode(ag_gif_sink *s, const AVFrame *frame, ag_error *err) {
    int av = avcodec_send_frame(s->enc, frame);
    while (av >= 0) {
        av = avcodec_receive_packet(s->enc, s->pkt);
        if (av == AVERROR(EAGAIN) || av == AVERROR_EOF)
            return 0;
        if (av < 0)
            break;
        s->pkt->stream_index = 0;
        av_packet_rescale_ts(s->pkt, centiseconds, s->out->streams[0]->time_base);
        av = av_write_frame(s->out, s->pkt);
        av_packet_unref(s->pkt);
        if (av < 0)
            return av_fail(err, AG_E_IO, "writing the output", av);
    }
    return av_fail(err, AG_E_INTERNAL, "encoding", av);
}

/* Take every paletted frame the graph has ready to the encoder. */
static int drain_graph(ag_gif_sink *s, ag_error *err) {
    for (;;) {
        int av = av_buffersink_get_frame(s->sink, s->pal);
        if (av == AVERROR(EAGAIN) || av == AVERROR_EOF)
            return 0;
        if (av < 0)
            return av_fail(err, AG_E_INTERNAL, "the palette filter", av);
        int rc = encode(s, s->pal, err);
        av_frame_unref(s->pal);
        if (rc)
            return rc;
    }
}

int ag_gif_sink_add(ag_gif_sink *s, const uint8_t *rgb, int stride, int64_t pts, ag_error *err) {
    int64_t cs = av_rescale_q(pts, s->in_tb, centiseconds);
    if (s->last_cs >= 0 && cs < s->last_cs + GIF_MIN_DELAY_CS)
        return 1; /* would show for under 2 cs: left out (see the top of the file) */
    AVFrame *f = av_frame_alloc();
    if (!f)
        return ag_error_set(err, AG_E_NOMEM, "out of memory for a GIF frame");
    f->format = AV_PIX_FMT_RGB24;
    f->width = s->width;
    f->height = s->height;
    int av = av_frame_get_buffer(f, 0);
    if (av >= 0) {
        for (int y = 0; y < s->height; y++)
            memcpy(f->data[0] + (size_t)y * f->linesize[0], rgb + (size_t)y * stride,
                   (size_t)s->width * 3);
        f->pts = cs;
        av = av_buffersrc_add_frame(s->src, f); /* takes the frame's buffer */
    }
    av_frame_free(&f);
    if (av < 0)
        return av_fail(err, AG_E_INTERNAL, "the palette filter", av);
    s->last_cs = cs;
    return drain_graph(s, err);
}

int ag_gif_sink_finish(ag_gif_sink *s, int64_t end_pts, ag_error *err) {
    int av = av_buffersrc_add_frame(s->src, NULL);
    if (av < 0)
        return av_fail(err, AG_E_INTERNAL, "the palette filter", av);
    int rc = drain_graph(s, err);
    if (rc == 0)
        rc = encode(s, NULL, err);
    if (rc)
        return rc;
    /* The muxer gives the last frame the delay before it unless told (final_delay). */
    int64_t last = av_rescale_q(end_pts, s->in_tb, centiseconds) - s->last_cs;
    if (last < GIF_MIN_DELAY_CS)
        last = GIF_MIN_DELAY_CS;
    av_opt_set_int(s->out->priv_data, "final_delay", last > 65535 ? 65535 : last, 0);
    av = av_write_trailer(s->out);
    return av < 0 ? av_fail(err, AG_E_IO, "cannot finish the file", av) : 0;
}

void ag_gif_sink_destroy(ag_gif_sink *s) {
    if (!s)
        return;
    avfilter_graph_free(&s->graph);
    avcodec_free_context(&s->enc);
    if (s->out)
        avformat_free_context(s->out); /* its pb is the pipeline's */
    av_frame_free(&s->pal);
    av_packet_free(&s->pkt);
    ag_free(s);
}
