/*
 * libav_internal.h - the FFmpeg libraries, loaded on first use instead of at process start.
 *
 * Linked normally, libavformat, libavcodec, libavfilter and what they pull in (x265, rav1e,
 * SVT-AV1, flite's voices, ...) are 90 more shared objects whose relocated pages cost every
 * process about 20 MB of RSS and 0.1 s before main, although only video conversion calls
 * them. So src/video/ calls them through `ag_libav`, a table of pointers that libav.c fills
 * with dlopen/dlsym the first time a video is opened. Each name below is #defined to its
 * table entry, so the video code reads as plain FFmpeg calls.
 *
 * Every FFmpeg header src/video/ uses is included here, before the #defines (a later
 * #include of one of them is then a no-op); include this header, not FFmpeg's. A function
 * that is called but missing from the list fails the link (FFmpeg is not linked).
 */
#ifndef AG_LIBAV_INTERNAL_H
#define AG_LIBAV_INTERNAL_H

#include "animegan.h"

#include <libavcodec/avcodec.h>
#include <libavfilter/avfilter.h>
#include <libavfilter/buffersink.h>
#include <libavfilter/buffersrc.h>
#include <libavformat/avformat.h>
#include <libavutil/audio_fifo.h>
#include <libavutil/display.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libswresample/swresample.h>
#include <libswscale/swscale.h>

/* The libraries, in dependency order (each one's own dependencies come before it). */
enum {
    AG_LIBAVUTIL,
    AG_LIBSWRESAMPLE,
    AG_LIBSWSCALE,
    AG_LIBAVCODEC,
    AG_LIBAVFORMAT,
    AG_LIBAVFILTER
};

/* Every function src/video/ calls, with the library that exports it. */
#define AG_LIBAV_FUNCTIONS(X)                                                                      \
    X(AG_LIBAVUTIL, av_audio_fifo_alloc)                                                           \
    X(AG_LIBAVUTIL, av_audio_fifo_free)                                                            \
    X(AG_LIBAVUTIL, av_audio_fifo_read)                                                            \
    X(AG_LIBAVUTIL, av_audio_fifo_size)                                                            \
    X(AG_LIBAVUTIL, av_audio_fifo_write)                                                           \
    X(AG_LIBAVUTIL, av_channel_layout_copy)                                                        \
    X(AG_LIBAVUTIL, av_channel_layout_default)                                                     \
    X(AG_LIBAVUTIL, av_channel_layout_uninit)                                                      \
    X(AG_LIBAVUTIL, av_d2q)                                                                        \
    X(AG_LIBAVUTIL, av_dict_copy)                                                                  \
    X(AG_LIBAVUTIL, av_dict_free)                                                                  \
    X(AG_LIBAVUTIL, av_dict_set)                                                                   \
    X(AG_LIBAVUTIL, av_dict_set_int)                                                               \
    X(AG_LIBAVUTIL, av_display_rotation_get)                                                       \
    X(AG_LIBAVUTIL, av_frame_alloc)                                                                \
    X(AG_LIBAVUTIL, av_frame_free)                                                                 \
    X(AG_LIBAVUTIL, av_frame_get_buffer)                                                           \
    X(AG_LIBAVUTIL, av_frame_make_writable)                                                        \
    X(AG_LIBAVUTIL, av_frame_unref)                                                                \
    X(AG_LIBAVUTIL, av_free)                                                                       \
    X(AG_LIBAVUTIL, av_freep)                                                                      \
    X(AG_LIBAVUTIL, av_get_pix_fmt_name)                                                           \
    X(AG_LIBAVUTIL, av_log_set_callback)                                                           \
    X(AG_LIBAVUTIL, av_malloc)                                                                     \
    X(AG_LIBAVUTIL, av_mallocz)                                                                    \
    X(AG_LIBAVUTIL, av_opt_set_int)                                                                \
    X(AG_LIBAVUTIL, av_rescale_q)                                                                  \
    X(AG_LIBAVUTIL, av_samples_alloc_array_and_samples)                                            \
    X(AG_LIBAVUTIL, av_strdup)                                                                     \
    X(AG_LIBAVUTIL, av_strerror)                                                                   \
    X(AG_LIBSWRESAMPLE, swr_alloc_set_opts2)                                                       \
    X(AG_LIBSWRESAMPLE, swr_convert)                                                               \
    X(AG_LIBSWRESAMPLE, swr_free)                                                                  \
    X(AG_LIBSWRESAMPLE, swr_get_out_samples)                                                       \
    X(AG_LIBSWRESAMPLE, swr_init)                                                                  \
    X(AG_LIBSWSCALE, sws_freeContext)                                                              \
    X(AG_LIBSWSCALE, sws_getCachedContext)                                                         \
    X(AG_LIBSWSCALE, sws_getCoefficients)                                                          \
    X(AG_LIBSWSCALE, sws_getContext)                                                               \
    X(AG_LIBSWSCALE, sws_scale)                                                                    \
    X(AG_LIBSWSCALE, sws_setColorspaceDetails)                                                     \
    X(AG_LIBAVCODEC, av_new_packet)                                                                \
    X(AG_LIBAVCODEC, av_packet_alloc)                                                              \
    X(AG_LIBAVCODEC, av_packet_free)                                                               \
    X(AG_LIBAVCODEC, av_packet_rescale_ts)                                                         \
    X(AG_LIBAVCODEC, av_packet_unref)                                                              \
    X(AG_LIBAVCODEC, avcodec_alloc_context3)                                                       \
    X(AG_LIBAVCODEC, avcodec_find_decoder)                                                         \
    X(AG_LIBAVCODEC, avcodec_find_encoder)                                                         \
    X(AG_LIBAVCODEC, avcodec_find_encoder_by_name)                                                 \
    X(AG_LIBAVCODEC, avcodec_free_context)                                                         \
    X(AG_LIBAVCODEC, avcodec_get_name)                                                             \
    X(AG_LIBAVCODEC, avcodec_open2)                                                                \
    X(AG_LIBAVCODEC, avcodec_parameters_copy)                                                      \
    X(AG_LIBAVCODEC, avcodec_parameters_from_context)                                              \
    X(AG_LIBAVCODEC, avcodec_parameters_to_context)                                                \
    X(AG_LIBAVCODEC, avcodec_receive_frame)                                                        \
    X(AG_LIBAVCODEC, avcodec_receive_packet)                                                       \
    X(AG_LIBAVCODEC, avcodec_send_frame)                                                           \
    X(AG_LIBAVCODEC, avcodec_send_packet)                                                          \
    X(AG_LIBAVFORMAT, av_interleaved_write_frame)                                                  \
    X(AG_LIBAVFORMAT, av_probe_input_format3)                                                      \
    X(AG_LIBAVFORMAT, av_read_frame)                                                               \
    X(AG_LIBAVFORMAT, av_stream_get_side_data)                                                     \
    X(AG_LIBAVFORMAT, av_write_frame)                                                              \
    X(AG_LIBAVFORMAT, av_write_trailer)                                                            \
    X(AG_LIBAVFORMAT, avformat_alloc_context)                                                      \
    X(AG_LIBAVFORMAT, avformat_alloc_output_context2)                                              \
    X(AG_LIBAVFORMAT, avformat_close_input)                                                        \
    X(AG_LIBAVFORMAT, avformat_find_stream_info)                                                   \
    X(AG_LIBAVFORMAT, avformat_free_context)                                                       \
    X(AG_LIBAVFORMAT, avformat_new_stream)                                                         \
    X(AG_LIBAVFORMAT, avformat_open_input)                                                         \
    X(AG_LIBAVFORMAT, avformat_query_codec)                                                        \
    X(AG_LIBAVFORMAT, avformat_seek_file)                                                          \
    X(AG_LIBAVFORMAT, avformat_write_header)                                                       \
    X(AG_LIBAVFORMAT, avio_alloc_context)                                                          \
    X(AG_LIBAVFORMAT, avio_context_free)                                                           \
    X(AG_LIBAVFORMAT, avio_flush)                                                                  \
    X(AG_LIBAVFORMAT, avio_write)                                                                  \
    X(AG_LIBAVFILTER, av_buffersink_get_frame)                                                     \
    X(AG_LIBAVFILTER, av_buffersrc_add_frame)                                                      \
    X(AG_LIBAVFILTER, avfilter_get_by_name)                                                        \
    X(AG_LIBAVFILTER, avfilter_graph_alloc)                                                        \
    X(AG_LIBAVFILTER, avfilter_graph_config)                                                       \
    X(AG_LIBAVFILTER, avfilter_graph_create_filter)                                                \
    X(AG_LIBAVFILTER, avfilter_graph_free)                                                         \
    X(AG_LIBAVFILTER, avfilter_graph_parse_ptr)                                                    \
    X(AG_LIBAVFILTER, avfilter_inout_alloc)                                                        \
    X(AG_LIBAVFILTER, avfilter_inout_free)

/* One pointer per function, typed from FFmpeg's own declaration. */
typedef struct ag_libav_table {
#define AG_LIBAV_FIELD(lib, name) __typeof__(name) *name;
    AG_LIBAV_FUNCTIONS(AG_LIBAV_FIELD)
#undef AG_LIBAV_FIELD
} ag_libav_table;

/* Filled once by ag_libav_load; read-only afterwards. */
extern ag_libav_table ag_libav;

/*
 * Load the libraries and resolve the table, once per process (later calls return the first
 * call's result). Thread-safe. 0, or AG_E_UNSUPPORTED naming the library or function that is
 * missing. The libraries stay loaded until the process exits (FFmpeg cannot be unloaded).
 */
int ag_libav_load(ag_error *err);

/* The names, for every file but the loader (which fills the fields of the same names). */
#ifndef AG_LIBAV_LOADER
#define av_audio_fifo_alloc (ag_libav.av_audio_fifo_alloc)
#define av_audio_fifo_free (ag_libav.av_audio_fifo_free)
#define av_audio_fifo_read (ag_libav.av_audio_fifo_read)
#define av_audio_fifo_size (ag_libav.av_audio_fifo_size)
#define av_audio_fifo_write (ag_libav.av_audio_fifo_write)
#define av_channel_layout_copy (ag_libav.av_channel_layout_copy)
#define av_channel_layout_default (ag_libav.av_channel_layout_default)
#define av_channel_layout_uninit (ag_libav.av_channel_layout_uninit)
#define av_d2q (ag_libav.av_d2q)
#define av_dict_copy (ag_libav.av_dict_copy)
#define av_dict_free (ag_libav.av_dict_free)
#define av_dict_set (ag_libav.av_dict_set)
#define av_dict_set_int (ag_libav.av_dict_set_int)
#define av_display_rotation_get (ag_libav.av_display_rotation_get)
#define av_frame_alloc (ag_libav.av_frame_alloc)
#define av_frame_free (ag_libav.av_frame_free)
#define av_frame_get_buffer (ag_libav.av_frame_get_buffer)
#define av_frame_make_writable (ag_libav.av_frame_make_writable)
#define av_frame_unref (ag_libav.av_frame_unref)
#define av_free (ag_libav.av_free)
#define av_freep (ag_libav.av_freep)
#define av_get_pix_fmt_name (ag_libav.av_get_pix_fmt_name)
#define av_log_set_callback (ag_libav.av_log_set_callback)
#define av_malloc (ag_libav.av_malloc)
#define av_mallocz (ag_libav.av_mallocz)
#define av_opt_set_int (ag_libav.av_opt_set_int)
#define av_rescale_q (ag_libav.av_rescale_q)
#define av_samples_alloc_array_and_samples (ag_libav.av_samples_alloc_array_and_samples)
#define av_strdup (ag_libav.av_strdup)
#define av_strerror (ag_libav.av_strerror)
#define swr_alloc_set_opts2 (ag_libav.swr_alloc_set_opts2)
#define swr_convert (ag_libav.swr_convert)
#define swr_free (ag_libav.swr_free)
#define swr_get_out_samples (ag_libav.swr_get_out_samples)
#define swr_init (ag_libav.swr_init)
#define sws_freeContext (ag_libav.sws_freeContext)
#define sws_getCachedContext (ag_libav.sws_getCachedContext)
#define sws_getCoefficients (ag_libav.sws_getCoefficients)
#define sws_getContext (ag_libav.sws_getContext)
#define sws_scale (ag_libav.sws_scale)
#define sws_setColorspaceDetails (ag_libav.sws_setColorspaceDetails)
#define av_new_packet (ag_libav.av_new_packet)
#define av_packet_alloc (ag_libav.av_packet_alloc)
#define av_packet_free (ag_libav.av_packet_free)
#define av_packet_rescale_ts (ag_libav.av_packet_rescale_ts)
#define av_packet_unref (ag_libav.av_packet_unref)
#define avcodec_alloc_context3 (ag_libav.avcodec_alloc_context3)
#define avcodec_find_decoder (ag_libav.avcodec_find_decoder)
#define avcodec_find_encoder (ag_libav.avcodec_find_encoder)
#define avcodec_find_encoder_by_name (ag_libav.avcodec_find_encoder_by_name)
#define avcodec_free_context (ag_libav.avcodec_free_context)
#define avcodec_get_name (ag_libav.avcodec_get_name)
#define avcodec_open2 (ag_libav.avcodec_open2)
#define avcodec_parameters_copy (ag_libav.avcodec_parameters_copy)
#define avcodec_parameters_from_context (ag_libav.avcodec_parameters_from_context)
#define avcodec_parameters_to_context (ag_libav.avcodec_parameters_to_context)
#define avcodec_receive_frame (ag_libav.avcodec_receive_frame)
#define avcodec_receive_packet (ag_libav.avcodec_receive_packet)
#define avcodec_send_frame (ag_libav.avcodec_send_frame)
#define avcodec_send_packet (ag_libav.avcodec_send_packet)
#define av_interleaved_write_frame (ag_libav.av_interleaved_write_frame)
#define av_probe_input_format3 (ag_libav.av_probe_input_format3)
#define av_read_frame (ag_libav.av_read_frame)
#define av_stream_get_side_data (ag_libav.av_stream_get_side_data)
#define av_write_frame (ag_libav.av_write_frame)
#define av_write_trailer (ag_libav.av_write_trailer)
#define avformat_alloc_context (ag_libav.avformat_alloc_context)
#define avformat_alloc_output_context2 (ag_libav.avformat_alloc_output_context2)
#define avformat_close_input (ag_libav.avformat_close_input)
#define avformat_find_stream_info (ag_libav.avformat_find_stream_info)
#define avformat_free_context (ag_libav.avformat_free_context)
#define avformat_new_stream (ag_libav.avformat_new_stream)
#define avformat_open_input (ag_libav.avformat_open_input)
#define avformat_query_codec (ag_libav.avformat_query_codec)
#define avformat_seek_file (ag_libav.avformat_seek_file)
#define avformat_write_header (ag_libav.avformat_write_header)
#define avio_alloc_context (ag_libav.avio_alloc_context)
#define avio_context_free (ag_libav.avio_context_free)
#define avio_flush (ag_libav.avio_flush)
#define avio_write (ag_libav.avio_write)
#define av_buffersink_get_frame (ag_libav.av_buffersink_get_frame)
#define av_buffersrc_add_frame (ag_libav.av_buffersrc_add_frame)
#define avfilter_get_by_name (ag_libav.avfilter_get_by_name)
#define avfilter_graph_alloc (ag_libav.avfilter_graph_alloc)
#define avfilter_graph_config (ag_libav.avfilter_graph_config)
#define avfilter_graph_create_filter (ag_libav.avfilter_graph_create_filter)
#define avfilter_graph_free (ag_libav.avfilter_graph_free)
#define avfilter_graph_parse_ptr (ag_libav.avfilter_graph_parse_ptr)
#define avfilter_inout_alloc (ag_libav.avfilter_inout_alloc)
#define avfilter_inout_free (ag_libav.avfilter_inout_free)
#endif

#endif
