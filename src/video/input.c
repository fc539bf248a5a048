/*
 * input.c - opening an untrusted container with libavformat, bounded: the bytes come through
 * our own AVIOContext (a file we opened, or a buffer), so no protocol or nested file is ever
 * opened (HLS playlists, concat lists and references are refused); the demuxer is picked by
 * probing the content and must be one of a short list of real video containers; the header's
 * frame size and duration are checked against the limits before a single frame is decoded.
 * Used by video.c for conversion and by ag_video_probe for the front ends and the fuzzer.
 */
#include "video_internal.h"

#include "../util/util_internal.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define IO_BUFFER_BYTES (64 * 1024)
#define PROBE_BYTES (64 * 1024)

/* Demuxers we take, by the first name in libavformat's list ("mov,mp4,m4a,..."). */
static const char *const allowed_demuxers[] = {"mov", "matroska", "avi", "flv",  "mpegts",
                                               "ogg", "nut",      "gif", "mpeg", "asf"};

const char *ag_video_averror(int code, char *buf, size_t size) {
    if (av_strerror(code, buf, size) < 0)
        snprintf(buf, size, "error %d", code);
    return buf;
}

/* ---- logging ------------------------------------------------------------------------------- */

/* Every failure comes back to the caller as one ag_error line; libav*'s own messages (codec
 * banners, per-packet warnings on a damaged file) would be noise in the CLI and raw,
 * unstructured lines in the service's log. AG_VIDEO_DEBUG=1 lets them through. */
static void quiet_log(void *avcl, int level, const char *fmt, va_list vl) {
    (void)avcl, (void)level, (void)fmt, (void)vl;
}

static void setup_logging(void) {
    const char *debug = getenv("AG_VIDEO_DEBUG");
    if (!debug || strcmp(debug, "1") != 0)
        av_log_set_callback(quiet_log);
}

int ag_video_init(ag_error *err) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    int rc = ag_libav_load(err);
    if (rc == 0)
        pthread_once(&once, setup_logging);
    return rc;
}

/* ---- I/O over our own bytes -------------------------------------------------------------- */

static int source_read(void *opaque, uint8_t *buf, int size) {
    ag_video_source *s = opaque;
    if (s->file) {
        size_t n = fread(buf, 1, (size_t)size, s->file);
        if (n == 0)
            return ferror(s->file) ? AVERROR(EIO) : AVERROR_EOF;
        return (int)n;
    }
    size_t left = s->size - s->pos;
    if (left == 0)
        return AVERROR_EOF;
    size_t n = left < (size_t)size ? left : (size_t)size;
    memcpy(buf, s->data + s->pos, n);
    s->pos += n;
    return (int)n;
}

static int64_t source_size(ag_video_source *s) {
    if (!s->file)
        return (int64_t)s->size;
    off_t here = ftello(s->file);
    if (here < 0 || fseeko(s->file, 0, SEEK_END) != 0)
        return -1;
    off_t end = ftello(s->file);
    if (fseeko(s->file, here, SEEK_SET) != 0)
        return -1;
    return end;
}

static int64_t source_seek(void *opaque, int64_t offset, int whence) {
    ag_video_source *s = opaque;
    int64_t size = source_size(s);
    if (whence & AVSEEK_SIZE)
        return size < 0 ? AVERROR(ENOSYS) : size;
    whence &= ~AVSEEK_FORCE;
    int64_t base = whence == SEEK_SET ? 0 : whence == SEEK_END ? size : -1;
    if (whence == SEEK_CUR)
        base = s->file ? (int64_t)ftello(s->file) : (int64_t)s->pos;
    if (base < 0 || offset < -base || (size >= 0 && base + offset > size))
        return AVERROR(EINVAL);
    int64_t target = base + offset;
    if (s->file) {
        if (fseeko(s->file, (off_t)target, SEEK_SET) != 0)
            return AVERROR(errno);
    } else {
        s->pos = (size_t)target;
    }
    return target;
}

/* libavformat opens further files for playlists and references: never, for uploads. */
static int refuse_nested_open(struct AVFormatContext *s, AVIOContext **pb, const char *url,
                              int flags, AVDictionary **options) {
    (void)s, (void)pb, (void)url, (void)flags, (void)options;
    return AVERROR(EPERM);
}

/* ---- picking the demuxer ----------------------------------------------------------------- */

static int demuxer_allowed(const char *name) {
    size_t len = strcspn(name, ",");
    for (size_t i = 0; i < sizeof allowed_demuxers / sizeof allowed_demuxers[0]; i++)
        if (strlen(allowed_demuxers[i]) == len && strncmp(name, allowed_demuxers[i], len) == 0)
            return 1;
    return 0;
}

/* The photo formats users send most, by signature, named as libavformat's still-image
 * demuxers would be ("png_pipe" -> "PNG"): telling them from a video this way needs no
 * libavformat, so a photo never loads FFmpeg. NULL for anything else (an animated WebP is
 * checked before this). */
static const char *still_image_signature(const uint8_t *head, size_t got) {
    if (got >= 8 && memcmp(head, "\x89PNG\r\n\x1a\n", 8) == 0)
        return "PNG";
    if (got >= 3 && memcmp(head, "\xff\xd8\xff", 3) == 0)
        return "JPEG";
    if (got >= 12 && memcmp(head, "RIFF", 4) == 0 && memcmp(head + 8, "WEBP", 4) == 0)
        return "WEBP";
    if (got >= 4 && (memcmp(head, "II*\0", 4) == 0 || memcmp(head, "MM\0*", 4) == 0))
        return "TIFF";
    return NULL;
}

/* "jpeg_pipe" -> "JPEG"; NULL when the demuxer is not one of libavformat's still images. */
static const char *still_image_name(const char *demuxer, char *buf, size_t size) {
    size_t len = strlen(demuxer);
    if (strcmp(demuxer, "image2") == 0)
        return "still";
    if (len < 6 || strcmp(demuxer + len - 5, "_pipe") != 0)
        return NULL;
    size_t n = len - 5 < size - 1 ? len - 5 : size - 1;
    for (size_t i = 0; i < n; i++)
        buf[i] = (char)(demuxer[i] >= 'a' && demuxer[i] <= 'z' ? demuxer[i] - 32 : demuxer[i]);
    buf[n] = 0;
    return buf;
}

/* A GIF's play count from its NETSCAPE2.0 loop extension, which encoders put right after the
 * global colour table (libavformat reads it but keeps it private): none means once, N means
 * N repeats after the first play, 0 forever. Returns plays as WebP counts them (0 = forever). */
static int gif_plays(const uint8_t *buf, int size) {
    static const char tag[] = "NETSCAPE2.0";
    for (int i = 0; i + 11 + 4 <= size; i++)
        if (buf[i] == 'N' && memcmp(buf + i, tag, 11) == 0 && buf[i + 11] == 3 &&
            buf[i + 12] == 1) {
            int repeats = buf[i + 13] | buf[i + 14] << 8;
            return repeats == 0 ? 0 : repeats + 1;
        }
    return 1;
}

/* Probe the first bytes and return the demuxer, or fill err. Rewinds the source. */
static const AVInputFormat *pick_demuxer(ag_video_source *src, const char *label, int *plays,
                                         ag_error *err) {
    uint8_t *buf = av_mallocz(PROBE_BYTES + AVPROBE_PADDING_SIZE);
    if (!buf)
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory", label), NULL;
    int got = 0;
    while (got < PROBE_BYTES) {
        int n = source_read(src, buf + got, PROBE_BYTES - got);
        if (n <= 0)
            break;
        got += n;
    }
    source_seek(src, 0, SEEK_SET);
    const AVInputFormat *fmt = NULL;
    if (got == 0) {
        ag_error_set(err, AG_E_FORMAT, "%s: empty file, not a video", label);
    } else {
        AVProbeData pd = {.filename = "", .buf = buf, .buf_size = got};
        int score = 0;
        fmt = av_probe_input_format3(&pd, 1, &score);
        char name[32];
        const char *still = fmt ? still_image_name(fmt->name, name, sizeof name) : NULL;
        if (!fmt || score < AVPROBE_SCORE_EXTENSION / 2) {
            ag_error_set(err, AG_E_FORMAT, "%s: not a video file (no known container)", label);
            fmt = NULL;
        } else if (still) {
            ag_error_set(err, AG_E_UNSUPPORTED, "%s: a %s image, not a video", label, still);
            fmt = NULL;
        } else if (!demuxer_allowed(fmt->name)) {
            ag_error_set(err, AG_E_UNSUPPORTED,
                         "%s: the %s format is not a video container we read "
                         "(MP4/MOV, MKV/WebM, AVI, FLV, MPEG-TS/PS, Ogg, GIF, animated WebP)",
                         label, fmt->name);
            fmt = NULL;
        } else if (strcmp(fmt->name, "gif") == 0) {
            *plays = gif_plays(buf, got);
        }
    }
    av_free(buf);
    return fmt;
}

/* ---- header checks ----------------------------------------------------------------------- */

static int rotation_of(const AVStream *st) {
    size_t size = 0;
    const uint8_t *matrix = av_stream_get_side_data(st, AV_PKT_DATA_DISPLAYMATRIX, &size);
    if (!matrix || size < 9 * sizeof(int32_t))
        return 0;
    double ccw = av_display_rotation_get((const int32_t *)matrix);
    if (isnan(ccw))
        return 0;
    long cw = lround(-ccw / 90.0) * 90;
    return (int)(((cw % 360) + 360) % 360);
}

static double duration_of(const AVFormatContext *fc, const AVStream *st) {
    if (st->duration > 0 && st->time_base.num > 0)
        return (double)st->duration * av_q2d(st->time_base);
    if (fc->duration > 0)
        return (double)fc->duration / AV_TIME_BASE;
    return 0;
}

/* The container's whole length, every stream: the audio is demuxed (and copied or
 * re-encoded) too, so a 1 s clip with an hour of sound is an hour of work and output. */
static int check_streams(const AVFormatContext *fc, const ag_video_limits *limits,
                         const char *label, ag_error *err) {
    if (!limits || limits->max_seconds <= 0)
        return 0;
    double longest = fc->duration > 0 ? (double)fc->duration / AV_TIME_BASE : 0;
    const char *which = "the container";
    for (unsigned i = 0; i < fc->nb_streams; i++) {
        const AVStream *st = fc->streams[i];
        double d = st->duration > 0 && st->time_base.num > 0 && st->time_base.den > 0
                       ? (double)st->duration * av_q2d(st->time_base)
                       : 0;
        if (d > 0 && d >= longest) { /* the stream that makes the container this long */
            longest = d;
            which = st->codecpar->codec_type == AVMEDIA_TYPE_AUDIO ? "its audio" : "a stream";
        }
    }
    if (longest > limits->max_seconds)
        return ag_error_set(err, AG_E_LIMIT, "%s: %s is %.1f s long; the limit is %.1f s", label,
                            which, longest, limits->max_seconds);
    return 0;
}

/* Frame size and duration against the limits; `when` says which pass found them. */
static int check_limits(ag_video_input *in, const ag_video_limits *limits, const char *label,
                        ag_error *err) {
    AVStream *st = in->format->streams[in->video_index];
    const AVCodecParameters *par = st->codecpar;
    size_t max_pixels =
        limits && limits->max_pixels ? limits->max_pixels : AG_VIDEO_DEFAULT_MAX_PIXELS;
    if (par->width < 0 || par->height < 0 || (size_t)par->width * (size_t)par->height > max_pixels)
        return ag_error_set(err, AG_E_LIMIT,
                            "%s: frames of %dx%d = %.1f megapixels; the limit is %.1f", label,
                            par->width, par->height, (double)par->width * par->height / 1e6,
                            (double)max_pixels / 1e6);
    double seconds = duration_of(in->format, st);
    if (limits && limits->max_seconds > 0 && seconds > limits->max_seconds)
        return ag_error_set(err, AG_E_LIMIT, "%s: %.1f s long; the limit is %.1f s", label, seconds,
                            limits->max_seconds);
    if (limits && limits->max_frames > 0 && st->nb_frames > limits->max_frames)
        return ag_error_set(err, AG_E_LIMIT, "%s: %lld frames; the limit is %lld", label,
                            (long long)st->nb_frames, (long long)limits->max_frames);
    return check_streams(in->format, limits, label, err);
}

static void fill_info(ag_video_input *in) {
    AVFormatContext *fc = in->format;
    AVStream *st = fc->streams[in->video_index];
    ag_video_info *info = &in->info;
    memset(info, 0, sizeof *info);
    snprintf(info->container, sizeof info->container, "%.*s", (int)strcspn(fc->iformat->name, ","),
             fc->iformat->name);
    snprintf(info->video_codec, sizeof info->video_codec, "%s",
             avcodec_get_name(st->codecpar->codec_id));
    info->rotation = rotation_of(st);
    int swap = info->rotation == 90 || info->rotation == 270;
    info->width = swap ? st->codecpar->height : st->codecpar->width;
    info->height = swap ? st->codecpar->width : st->codecpar->height;
    AVRational rate = st->avg_frame_rate.num > 0 ? st->avg_frame_rate : st->r_frame_rate;
    info->fps = rate.num > 0 && rate.den > 0 ? av_q2d(rate) : 0;
    info->duration_s = duration_of(fc, st);
    info->frames =
        st->nb_frames > 0 ? st->nb_frames : (int64_t)(info->duration_s * info->fps + 0.5);
    for (unsigned i = 0; i < fc->nb_streams; i++) {
        const AVCodecParameters *p = fc->streams[i]->codecpar;
        if (p->codec_type != AVMEDIA_TYPE_AUDIO)
            continue;
        if (info->audio_streams++ == 0)
            snprintf(info->audio_codec, sizeof info->audio_codec, "%s",
                     avcodec_get_name(p->codec_id));
    }
}

static int find_video_stream(ag_video_input *in, const char *label, ag_error *err) {
    AVFormatContext *fc = in->format;
    in->video_index = -1;
    for (unsigned i = 0; i < fc->nb_streams; i++) {
        const AVStream *st = fc->streams[i];
        if (st->codecpar->codec_type == AVMEDIA_TYPE_VIDEO &&
            !(st->disposition & AV_DISPOSITION_ATTACHED_PIC)) {
            in->video_index = (int)i;
            break;
        }
    }
    if (in->video_index < 0)
        return ag_error_set(err, AG_E_UNSUPPORTED, "%s: no video stream (%s)", label,
                            fc->nb_streams ? "audio or data only" : "no streams");
    const AVCodecParameters *par = fc->streams[in->video_index]->codecpar;
    if (par->codec_id == AV_CODEC_ID_NONE)
        return ag_error_set(err, AG_E_UNSUPPORTED, "%s: unknown video codec", label);
    if (!avcodec_find_decoder(par->codec_id))
        return ag_error_set(err, AG_E_UNSUPPORTED, "%s: no decoder for the %s video codec", label,
                            avcodec_get_name(par->codec_id));
    return 0;
}

/* ---- animated WebP ------------------------------------------------------------------------ */

/* The first `size` bytes (fewer for a shorter input) into head; the source is rewound. */
static size_t read_head(ag_video_source *src, uint8_t *head, int size) {
    int got = 0;
    while (got < size) {
        int n = source_read(src, head + got, size - got);
        if (n <= 0)
            break;
        got += n;
    }
    source_seek(src, 0, SEEK_SET);
    return (size_t)got;
}

/* The stand-in format context that describes the WebP's frames to the pipeline. */
static int describe_webp(ag_video_input *in, const char *label, ag_error *err) {
    int w, h;
    int64_t frames, ms;
    ag_webp_input_describe(in->webp, &w, &h, &frames, &ms, &in->plays);
    in->format = avformat_alloc_context();
    AVStream *st = in->format ? avformat_new_stream(in->format, NULL) : NULL;
    if (!st)
        return ag_error_set(err, AG_E_NOMEM, "%s: out of memory", label);
    st->codecpar->codec_type = AVMEDIA_TYPE_VIDEO;
    st->codecpar->codec_id = AV_CODEC_ID_WEBP;
    st->codecpar->width = w;
    st->codecpar->height = h;
    st->codecpar->color_range = AVCOL_RANGE_JPEG;
    st->time_base = (AVRational){1, 1000};
    st->start_time = 0;
    st->duration = ms;
    st->nb_frames = frames;
    st->avg_frame_rate =
        ms > 0 ? av_d2q((double)frames * 1000 / (double)ms, 1000) : (AVRational){0, 1};
    in->video_index = 0;
    ag_video_info *info = &in->info;
    memset(info, 0, sizeof *info);
    snprintf(info->container, sizeof info->container, "webp");
    snprintf(info->video_codec, sizeof info->video_codec, "webp");
    info->width = w;
    info->height = h;
    info->duration_s = (double)ms / 1000;
    info->fps = av_q2d(st->avg_frame_rate);
    info->frames = frames;
    return 0;
}

/* libwebp decodes from memory: the file is mapped (the caller's bytes are used as they are). */
static int open_webp(ag_video_input *in, const char *path, const char *label,
                     const ag_video_limits *limits, ag_error *err) {
    const uint8_t *bytes = in->source.data;
    size_t size = in->source.size;
    int rc = 0;
    if (path) {
        struct stat st;
        if (fstat(fileno(in->source.file), &st) != 0 || st.st_size <= 0) {
            rc = ag_error_set(err, AG_E_IO, "%s: %s", label, strerror(errno));
            goto fail;
        }
        in->map_bytes = (size_t)st.st_size;
        in->map = mmap(NULL, in->map_bytes, PROT_READ, MAP_PRIVATE, fileno(in->source.file), 0);
        if (in->map == MAP_FAILED) {
            in->map = NULL;
            rc = ag_error_set(err, AG_E_IO, "%s: %s", label, strerror(errno));
            goto fail;
        }
        bytes = in->map;
        size = in->map_bytes;
    }
    if ((rc = ag_webp_input_open(&in->webp, bytes, size, label, limits, err)) ||
        (rc = describe_webp(in, label, err)))
        goto fail;
    return 0;
fail:
    ag_video_input_close(in);
    return rc;
}

/* ---- open / close ------------------------------------------------------------------------ */

int ag_video_input_open(ag_video_input *in, const char *path, const void *data, size_t size,
                        const char *label, const ag_video_limits *limits, ag_error *err) {
    memset(in, 0, sizeof *in);
    in->video_index = -1;
    if (path) {
        in->source.file = fopen(path, "rbe");
        if (!in->source.file)
            return ag_error_set(err, AG_E_IO, "%s: %s", label, strerror(errno));
    } else {
        in->source.data = data;
        in->source.size = size;
    }
    char msg[128];
    int rc = AG_E_NOMEM;
    uint8_t head[32];
    size_t got = read_head(&in->source, head, (int)sizeof head);
    int webp = ag_webp_input_is_animated(head, got);
    const char *still = webp ? NULL : still_image_signature(head, got);
    if (still) {
        rc = ag_error_set(err, AG_E_UNSUPPORTED, "%s: a %s image, not a video", label, still);
        goto fail;
    }
    if ((rc = ag_video_init(err)) != 0)
        goto fail;
    rc = AG_E_NOMEM;
    if (webp)
        return open_webp(in, path, label, limits, err);
    const AVInputFormat *fmt = pick_demuxer(&in->source, label, &in->plays, err);
    if (!fmt) {
        rc = err->code;
        goto fail;
    }
    /* libavformat's mov demuxer expands the sample tables while opening: counted first. */
    if (!strncmp(fmt->name, "mov,", 4) &&
        (rc = ag_mp4_check(&in->source, source_size(&in->source), limits, label, err)) != 0)
        goto fail;
    uint8_t *buffer = av_malloc(IO_BUFFER_BYTES);
    if (!buffer)
        goto nomem;
    in->io =
        avio_alloc_context(buffer, IO_BUFFER_BYTES, 0, &in->source, source_read, NULL, source_seek);
    if (!in->io) {
        av_free(buffer);
        goto nomem;
    }
    in->format = avformat_alloc_context();
    if (!in->format)
        goto nomem;
    in->format->pb = in->io;
    in->format->flags |= AVFMT_FLAG_CUSTOM_IO;
    in->format->io_open = refuse_nested_open;
    AVDictionary *opts = NULL;
    av_dict_set(&opts, "format_whitelist", fmt->name, 0);
    av_dict_set(&opts, "protocol_whitelist", "none", 0);
    int av = avformat_open_input(&in->format, label, fmt, &opts);
    av_dict_free(&opts);
    if (av < 0) {
        /* avformat_open_input frees the context on failure */
        rc = ag_error_set(err, AG_E_FORMAT, "%s: not a readable %.*s file: %s", label,
                          (int)strcspn(fmt->name, ","), fmt->name,
                          ag_video_averror(av, msg, sizeof msg));
        goto fail;
    }
    /* Before find_stream_info, which decodes: what the container header alone declares. */
    if ((rc = find_video_stream(in, label, err)) != 0 ||
        (rc = check_limits(in, limits, label, err)) != 0)
        goto fail;
    av = avformat_find_stream_info(in->format, NULL);
    if (av < 0) {
        rc = ag_error_set(err, AG_E_FORMAT, "%s: cannot read the streams: %s", label,
                          ag_video_averror(av, msg, sizeof msg));
        goto fail;
    }
    if ((rc = find_video_stream(in, label, err)) != 0 ||
        (rc = check_limits(in, limits, label, err)) != 0)
        goto fail;
    const AVCodecParameters *par = in->format->streams[in->video_index]->codecpar;
    if (par->width < AG_MIN_SIDE || par->height < AG_MIN_SIDE) {
        rc = ag_error_set(err, par->width > 0 ? AG_E_UNSUPPORTED : AG_E_FORMAT,
                          "%s: frames of %dx%d; the smallest we take is %dx%d", label, par->width,
                          par->height, AG_MIN_SIDE, AG_MIN_SIDE);
        goto fail;
    }
    fill_info(in);
    return 0;
nomem:
    rc = ag_error_set(err, AG_E_NOMEM, "%s: out of memory", label);
fail:
    ag_video_input_close(in);
    return rc;
}

void ag_video_input_close(ag_video_input *in) {
    int stand_in = in->webp != NULL; /* the WebP's format context has no demuxer to close */
    ag_webp_input_destroy(in->webp); /* before the unmap: its demuxer points into the bytes */
    if (in->map)
        munmap(in->map, in->map_bytes);
    if (in->format && stand_in)
        avformat_free_context(in->format);
    else if (in->format)
        avformat_close_input(&in->format);
    if (in->io) {
        av_freep(&in->io->buffer);
        avio_context_free(&in->io);
    }
    if (in->source.file)
        fclose(in->source.file);
    memset(in, 0, sizeof *in);
    in->video_index = -1;
}

int ag_video_probe(const char *path, const ag_video_limits *limits, ag_video_info *info,
                   ag_error *err) {
    ag_video_input in;
    int rc = ag_video_input_open(&in, path, NULL, 0, path, limits, err);
    if (rc == 0)
        *info = in.info;
    ag_video_input_close(&in);
    return rc;
}

int ag_video_probe_memory(const void *data, size_t size, const ag_video_limits *limits,
                          ag_video_info *info, ag_error *err) {
    ag_video_input in;
    int rc = ag_video_input_open(&in, NULL, data, size, "upload", limits, err);
    if (rc == 0)
        *info = in.info;
    ag_video_input_close(&in);
    return rc;
}

int ag_video_output_supported(const char *path) {
    static const char *const extensions[] = {"mp4", "m4v", "mov", "mkv", "webm", "webp", "gif"};
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash ? slash + 1 : path, '.');
    if (!dot)
        return 0;
    for (size_t i = 0; i < sizeof extensions / sizeof extensions[0]; i++)
        if (strcasecmp(dot + 1, extensions[i]) == 0)
            return 1;
    return 0;
}
