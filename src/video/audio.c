/*
 * audio.c - one audio stream decoded, resampled and re-encoded when the output container
 * cannot take the input's codec (e.g. AAC into WebM, PCM into MP4): Opus for WebM, AAC for
 * the others. Decoded samples pass through a FIFO that holds less than two encoder frames,
 * so memory does not depend on the length of the clip. Output timestamps count samples from
 * the first decoded frame, so the sound stays where it was against the picture.
 */
#include "audio_internal.h"

#include "../util/util_internal.h"

#include <string.h>

struct ag_audio_encoder {
    void *pipe;
    AVStream *ist, *ost;
    AVCodecContext *dec, *enc;
    SwrContext *swr;
    AVAudioFifo *fifo;
    AVFrame *in, *out;
    AVPacket *pkt;
    int64_t next_pts; /* encoder time base (1 / sample rate); AV_NOPTS_VALUE before the first */
};

static int av_fail(ag_error *err, int code, const char *what, int av) {
    char msg[128];
    if (av_strerror(av, msg, sizeof msg) < 0)
        snprintf(msg, sizeof msg, "error %d", av);
    return ag_error_set(err, code, "audio: %s: %s", what, msg);
}

static int pick_rate(const AVCodec *codec, int wanted) {
    if (!codec->supported_samplerates)
        return wanted;
    int best = 0;
    for (const int *r = codec->supported_samplerates; *r; r++) {
        if (*r == wanted)
            return wanted;
        if (*r == 48000)
            best = 48000;
    }
    return best ? best : codec->supported_samplerates[0];
}

int ag_audio_encoder_create(ag_audio_encoder **out_enc, void *pipe, AVStream *ist,
                            AVFormatContext *out, ag_error *err) {
    *out_enc = NULL;
    int webm = strcmp(out->oformat->name, "webm") == 0;
    const AVCodec *dcodec = avcodec_find_decoder(ist->codecpar->codec_id);
    const AVCodec *ecodec = avcodec_find_encoder_by_name(webm ? "libopus" : "aac");
    if (!dcodec)
        return ag_error_set(err, AG_E_UNSUPPORTED, "no decoder");
    if (!ecodec)
        return ag_error_set(err, AG_E_UNSUPPORTED, "no %s encoder", webm ? "Opus" : "AAC");
    ag_audio_encoder *a = ag_calloc(1, sizeof *a);
    if (!a)
        return ag_error_set(err, AG_E_NOMEM, "out of memory");
    a->pipe = pipe;
    a->ist = ist;
    a->next_pts = AV_NOPTS_VALUE;
    int rc = AG_E_NOMEM;
    int av;
    a->dec = avcodec_alloc_context3(dcodec);
    a->enc = avcodec_alloc_context3(ecodec);
    a->in = av_frame_alloc();
    a->out = av_frame_alloc();
    a->pkt = av_packet_alloc();
    if (!a->dec || !a->enc || !a->in || !a->out || !a->pkt)
        goto nomem;
    if ((av = avcodec_parameters_to_context(a->dec, ist->codecpar)) < 0 ||
        (a->dec->pkt_timebase = ist->time_base, av = avcodec_open2(a->dec, dcodec, NULL)) < 0) {
        rc = av_fail(err, AG_E_UNSUPPORTED, "cannot open the decoder", av);
        goto fail;
    }
    int channels = a->dec->ch_layout.nb_channels >= 2 ? 2 : 1;
    av_channel_layout_default(&a->enc->ch_layout, channels);
    a->enc->sample_rate = pick_rate(ecodec, a->dec->sample_rate > 0 ? a->dec->sample_rate : 48000);
    a->enc->sample_fmt = ecodec->sample_fmts ? ecodec->sample_fmts[0] : AV_SAMPLE_FMT_FLTP;
    a->enc->time_base = (AVRational){1, a->enc->sample_rate};
    a->enc->bit_rate = channels * 64000;
    if (out->oformat->flags & AVFMT_GLOBALHEADER)
        a->enc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    if ((av = avcodec_open2(a->enc, ecodec, NULL)) < 0) {
        rc = av_fail(err, AG_E_UNSUPPORTED, "cannot open the encoder", av);
        goto fail;
    }
    a->ost = avformat_new_stream(out, NULL);
    if (!a->ost || avcodec_parameters_from_context(a->ost->codecpar, a->enc) < 0)
        goto nomem;
    a->ost->time_base = a->enc->time_base;
    av_dict_copy(&a->ost->metadata, ist->metadata, 0);
    a->ost->disposition = ist->disposition;
    AVChannelLayout in_layout;
    if (a->dec->ch_layout.order == AV_CHANNEL_ORDER_UNSPEC || a->dec->ch_layout.nb_channels == 0)
        av_channel_layout_default(
            &in_layout, a->dec->ch_layout.nb_channels > 0 ? a->dec->ch_layout.nb_channels : 1);
    else if (av_channel_layout_copy(&in_layout, &a->dec->ch_layout) < 0)
        goto nomem;
    av = swr_alloc_set_opts2(&a->swr, &a->enc->ch_layout, a->enc->sample_fmt, a->enc->sample_rate,
                             &in_layout, a->dec->sample_fmt, a->dec->sample_rate, 0, NULL);
    av_channel_layout_uninit(&in_layout);
    if (av < 0 || (av = swr_init(a->swr)) < 0) {
        rc = av_fail(err, AG_E_UNSUPPORTED, "cannot set up the resampler", av);
        goto fail;
    }
    int frame = a->enc->frame_size > 0 ? a->enc->frame_size : 1024;
    a->fifo = av_audio_fifo_alloc(a->enc->sample_fmt, channels, 2 * frame);
    if (!a->fifo)
        goto nomem;
    *out_enc = a;
    return 0;
nomem:
    rc = ag_error_set(err, AG_E_NOMEM, "out of memory");
fail:
    ag_audio_encoder_destroy(a);
    return rc;
}

static int drain_encoder(ag_audio_encoder *a, ag_error *err) {
    for (;;) {
        int av = avcodec_receive_packet(a->enc, a->pkt);
        if (av == AVERROR(EAGAIN) || av == AVERROR_EOF)
            return 0;
        if (av < 0)
            return av_fail(err, AG_E_INTERNAL, "encoding", av);
        av_packet_rescale_ts(a->pkt, a->enc->time_base, a->ost->time_base);
        a->pkt->stream_index = a->ost->index;
        int rc = ag_video_mux_packet(a->pipe, a->pkt);
        av_packet_unref(a->pkt);
        if (rc)
            return ag_error_set(err, rc, "writing the output");
    }
}

/* Encode whole frames from the FIFO; at the end (`last`) also the partial remainder. */
static int encode_fifo(ag_audio_encoder *a, int last, ag_error *err) {
    int frame = a->enc->frame_size > 0 ? a->enc->frame_size : 1024;
    while (av_audio_fifo_size(a->fifo) >= frame || (last && av_audio_fifo_size(a->fifo) > 0)) {
        int n = av_audio_fifo_size(a->fifo) < frame ? av_audio_fifo_size(a->fifo) : frame;
        av_frame_unref(a->out);
        a->out->nb_samples = n;
        a->out->format = a->enc->sample_fmt;
        a->out->sample_rate = a->enc->sample_rate;
        if (av_channel_layout_copy(&a->out->ch_layout, &a->enc->ch_layout) < 0 ||
            av_frame_get_buffer(a->out, 0) < 0)
            return ag_error_set(err, AG_E_NOMEM, "out of memory");
        if (av_audio_fifo_read(a->fifo, (void **)a->out->data, n) != n)
            return ag_error_set(err, AG_E_INTERNAL, "audio: FIFO read");
        a->out->pts = a->next_pts;
        a->next_pts += n;
        int av = avcodec_send_frame(a->enc, a->out);
        if (av < 0)
            return av_fail(err, AG_E_INTERNAL, "encoding", av);
        int rc = drain_encoder(a, err);
        if (rc)
            return rc;
    }
    return 0;
}

/* Resample `in` (NULL: flush the resampler) into the FIFO, then encode what fills frames. */
static int resample(ag_audio_encoder *a, const AVFrame *in, ag_error *err) {
    int max_out = swr_get_out_samples(a->swr, in ? in->nb_samples : 0);
    if (max_out < 0)
        return ag_error_set(err, AG_E_INTERNAL, "audio: resampler");
    if (max_out > 0) {
        uint8_t **buf = NULL;
        int av = av_samples_alloc_array_and_samples(&buf, NULL, a->enc->ch_layout.nb_channels,
                                                    max_out, a->enc->sample_fmt, 0);
        if (av < 0)
            return ag_error_set(err, AG_E_NOMEM, "out of memory");
        int n = swr_convert(a->swr, buf, max_out, in ? (const uint8_t **)in->extended_data : NULL,
                            in ? in->nb_samples : 0);
        int rc = 0;
        if (n < 0)
            rc = av_fail(err, AG_E_FORMAT, "resampling", n);
        else if (n > 0 && av_audio_fifo_write(a->fifo, (void **)buf, n) < n)
            rc = ag_error_set(err, AG_E_NOMEM, "out of memory");
        av_freep(&buf[0]);
        av_freep(&buf);
        if (rc)
            return rc;
    }
    return encode_fifo(a, in == NULL, err);
}

static int decode(ag_audio_encoder *a, const AVPacket *pkt, int64_t offset, ag_error *err) {
    int av = avcodec_send_packet(a->dec, pkt);
    if (av < 0 && av != AVERROR_EOF)
        return pkt ? 0 : av_fail(err, AG_E_FORMAT, "decoding", av); /* skip a damaged packet */
    for (;;) {
        av = avcodec_receive_frame(a->dec, a->in);
        if (av == AVERROR(EAGAIN) || av == AVERROR_EOF)
            return 0;
        if (av < 0)
            return av_fail(err, AG_E_FORMAT, "decoding", av);
        if (a->next_pts == AV_NOPTS_VALUE) {
            int64_t t = a->in->best_effort_timestamp;
            a->next_pts = t == AV_NOPTS_VALUE
                              ? 0
                              : av_rescale_q(t - offset, a->ist->time_base, a->enc->time_base);
        }
        int rc = resample(a, a->in, err);
        av_frame_unref(a->in);
        if (rc)
            return rc;
    }
}

int ag_audio_encoder_send(ag_audio_encoder *a, const AVPacket *pkt, int64_t offset, ag_error *err) {
    return decode(a, pkt, offset, err);
}

int ag_audio_encoder_flush(ag_audio_encoder *a, ag_error *err) {
    int rc = decode(a, NULL, 0, err);
    if (rc == 0 && a->next_pts != AV_NOPTS_VALUE)
        rc = resample(a, NULL, err);
    if (rc == 0) {
        int av = avcodec_send_frame(a->enc, NULL);
        if (av < 0 && av != AVERROR_EOF)
            return av_fail(err, AG_E_INTERNAL, "encoding", av);
        rc = drain_encoder(a, err);
    }
    return rc;
}

int ag_audio_encoder_stream(const ag_audio_encoder *a) {
    return a->ost->index;
}

const char *ag_audio_encoder_codec(const ag_audio_encoder *a) {
    return a->enc->codec_id == AV_CODEC_ID_OPUS ? "Opus" : "AAC";
}

void ag_audio_encoder_destroy(ag_audio_encoder *a) {
    if (!a)
        return;
    av_audio_fifo_free(a->fifo);
    swr_free(&a->swr);
    av_packet_free(&a->pkt);
    av_frame_free(&a->in);
    av_frame_free(&a->out);
    avcodec_free_context(&a->dec);
    avcodec_free_context(&a->enc);
    ag_free(a);
}
