/*
 * audio_internal.h - re-encoding one audio stream when the output container cannot take its
 * codec as it is (AAC into MP4/MOV/MKV, Opus into WebM). Runs on video.c's reader thread;
 * packets go to the shared muxer through ag_video_mux_packet. Not part of the public API.
 */
#ifndef AG_AUDIO_INTERNAL_H
#define AG_AUDIO_INTERNAL_H

#include "animegan.h"

#include "libav_internal.h"

typedef struct ag_audio_encoder ag_audio_encoder;

/*
 * Create the decoder, resampler and encoder for `ist` and add its stream to `out` (before
 * the header is written). `pipe` is passed back to ag_video_mux_packet. AG_E_UNSUPPORTED
 * when the stream cannot be decoded or there is no encoder for the container (the caller
 * drops the stream and says so).
 */
int ag_audio_encoder_create(ag_audio_encoder **out_enc, void *pipe, AVStream *ist,
                            AVFormatContext *out, ag_error *err);
/* Decode `pkt` (timestamps in ist's time base, `offset` of them removed) and encode. */
int ag_audio_encoder_send(ag_audio_encoder *a, const AVPacket *pkt, int64_t offset, ag_error *err);
/* Drain the decoder, the resampler and the encoder at the end of the input. */
int ag_audio_encoder_flush(ag_audio_encoder *a, ag_error *err);
int ag_audio_encoder_stream(const ag_audio_encoder *a); /* output stream index */
const char *ag_audio_encoder_codec(const ag_audio_encoder *a);
void ag_audio_encoder_destroy(ag_audio_encoder *a);

/* Interleave one packet into the output (video.c): 0, or an AG_E_* code already recorded. */
int ag_video_mux_packet(void *pipe, AVPacket *pkt);

#endif
