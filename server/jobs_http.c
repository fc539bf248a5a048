/*
 * jobs_http.c - the video jobs' HTTP side, on the MHD thread: POST /api/v1/jobs spools the
 * upload to --jobs-dir (chunk by chunk, under the upload watch: --timeout scaled to the
 * size and --min-upload-rate, the spool quota reserved from the bytes received) and hands
 * the complete upload to the intake thread, which answers 202 or the refusal; GET
 * /api/v1/jobs/ID reports the state and progress, GET .../result streams the result from
 * its file, DELETE cancels and removes ("cancelling" while a run stops). The query options
 * are a table, as config.c's command-line options are.
 *
 * Bounds from the headers, before a byte of the body is read: --max-video-mb (from
 * Content-Length), --max-jobs slots (queued + running + finished results kept) and
 * --jobs-quota-mb (an upload needs twice its size: itself and the result; with upscale=N
 * 1 + N^2 times, the result having N^2 times the pixels).
 */
#include "jobs_internal.h"
#include "jobs_redis.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- replies ---------------------------------------------------------------------------- */

/* Queue the response prepared in r (r->out is ag_malloc'ed and owned by r). */
static int send_prepared(struct MHD_Connection *conn, ag_request *r, const char *location) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(r->out_size, r->out, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "X-Request-Id", r->id);
    MHD_add_response_header(resp, "Content-Type", r->content_type);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    if (location && r->status != 405)
        MHD_add_response_header(resp, "Location", location);
    if (r->retry_after_s > 0) {
        char num[16];
        snprintf(num, sizeof num, "%d", r->retry_after_s);
        MHD_add_response_header(resp, "Retry-After", num);
    }
    if (r->status == 405)
        MHD_add_response_header(resp, "Allow", location ? location : "GET, DELETE");
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    atomic_store(&r->state, AG_REQ_REPLIED);
    return ret;
}

static void prepare(ag_request *r, int status, char *body, size_t size) {
    ag_free(r->out);
    r->out = (uint8_t *)body;
    r->out_size = body ? size : 0;
    r->status = status;
    r->content_type = "application/json";
}

static int reply(struct MHD_Connection *conn, ag_request *r, int status, char *body, size_t size,
                 const char *location) {
    prepare(r, status, body, size);
    return send_prepared(conn, r, location);
}

static void vprepare_error(ag_request *r, int status, const char *code, const char *fmt,
                           va_list ap) {
    char msg[480]; /* the work bound's names every network's price */
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t cap = 64 + 2 * strlen(code) + 6 * strlen(msg);
    char *buf = ag_malloc(cap);
    size_t n = buf ? ag_json_error(buf, cap, code, msg) : 0;
    r->error_code = code;
    prepare(r, status, buf, n);
}

void ag_jobs_prepare_error(ag_request *r, int status, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprepare_error(r, status, code, fmt, ap);
    va_end(ap);
}

static int reply_error(struct MHD_Connection *conn, ag_request *r, int status, const char *code,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int reply_error(struct MHD_Connection *conn, ag_request *r, int status, const char *code,
                       const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprepare_error(r, status, code, fmt, ap);
    va_end(ap);
    return send_prepared(conn, r, NULL);
}

static const char *shown_state(const job *b) {
    if (b->state == JOB_RUNNING && b->remove_when_stopped)
        return "cancelling"; /* DELETE asked; the run stops at its next frame or packet */
    return ag_job_state_names[b->state];
}

void ag_jobs_json(ag_text *t, const ag_jobs *j, const job *b) {
    ag_text_printf(t, "{\"id\":\"%s\",\"state\":\"%s\",\"frames_done\":%lld,\"frames_total\":%lld",
                   b->id, shown_state(b), (long long)b->frames_done, (long long)b->frames_total);
    if (b->state == JOB_RUNNING && b->frames_done > 0) {
        double elapsed = (double)(ag_now_us() - b->started_us) / 1e6;
        double left = (double)(b->frames_total - b->frames_done) * elapsed / (double)b->frames_done;
        ag_text_printf(t, ",\"eta_s\":%.1f", left > 0 ? left : 0);
    }
    if (b->state == JOB_QUEUED)
        ag_text_printf(t, ",\"jobs_ahead\":%d", j->redis ? b->ahead : ag_jobs_ahead(j, b));
    if (j->redis && b->state == JOB_RUNNING && b->instance[0]) {
        ag_text_append(t, ",\"instance\":", 12);
        ag_text_json_string(t, b->instance);
        if (b->segments > 1) /* cut over the cluster (docs/cluster.md) */
            ag_text_printf(t, ",\"segments\":%d,\"segments_done\":%d", b->segments,
                           b->segments - b->segments_left);
    }
    ag_text_printf(t, ",\"upscale\":%d", b->upscale > 1 ? b->upscale : 1);
    if (b->restore)
        ag_text_printf(t, ",\"restore\":%d", b->restore);
    if (b->out_width > 0)
        ag_text_printf(t, ",\"width\":%d,\"height\":%d", b->out_width, b->out_height);
    ag_text_printf(t, ",\"url\":\"/api/v1/jobs/%s\"", b->id);
    if (b->state == JOB_DONE) {
        ag_text_printf(t, ",\"result_url\":\"/api/v1/jobs/%s/result\",\"format\":\"%s\"", b->id,
                       b->ext);
        if (b->audio_note[0]) {
            ag_text_append(t, ",\"audio\":", 9);
            ag_text_json_string(t, b->audio_note);
        }
    }
    if (b->state == JOB_FAILED) {
        ag_text_append(t, ",\"error\":{\"code\":", 17);
        ag_text_json_string(t, b->error_code);
        ag_text_append(t, ",\"message\":", 11);
        ag_text_json_string(t, b->error);
        ag_text_append(t, "}", 1);
    }
    ag_text_append(t, "}\n", 2);
}

int ag_jobs_prepare_job(ag_request *r, const ag_jobs *j, const job *b, int status) {
    ag_text t;
    ag_text_init(&t, AG_JOB_STATE_JSON_MAX);
    ag_jobs_json(&t, j, b);
    size_t size = 0;
    char *body = ag_text_take(&t, &size);
    if (!body) {
        ag_jobs_prepare_error(r, 503, "out_of_memory", "the server is out of memory");
        return -1;
    }
    prepare(r, status, body, size);
    return 0;
}

static int reply_job(struct MHD_Connection *conn, ag_request *r, ag_jobs *j, const job *b,
                     int status) {
    ag_jobs_prepare_job(r, j, b, status);
    return send_prepared(conn, r, NULL);
}

/* ---- the query options ------------------------------------------------------------------ */

/*
 * POST /api/v1/jobs?... : the convert options that apply to video (parsed as /api/v1/convert
 * parses them), the output format, and the photo-only ones, refused by name (400) rather
 * than silently ignored. docs/api.md lists the same table.
 */
typedef enum { OPT_CONVERT, OPT_FORMAT, OPT_PHOTO_ONLY, OPT_FUSE } job_opt_kind;

static const struct job_opt {
    const char *key;
    job_opt_kind kind;
} job_opts[] = {
    {"model", OPT_CONVERT},
    {"max_side", OPT_CONVERT},
    {"side_by_side", OPT_CONVERT},
    {"upscale", OPT_CONVERT},
    {"restore", OPT_CONVERT},
    {"codeformer_fidelity", OPT_CONVERT},
    {"format", OPT_FORMAT},
    {"portrait", OPT_PHOTO_ONLY},
    {"quality", OPT_PHOTO_ONLY},
    {"paste_faces", OPT_PHOTO_ONLY},
    {"face_model", OPT_PHOTO_ONLY},
    {"face", OPT_PHOTO_ONLY},
    /* a fusion job's (the body has a `source` image): parsed as /api/v1/fuse parses them */
    {"ratio", OPT_FUSE},
    {"shape_ratio", OPT_FUSE},
    {"texture_ratio", OPT_FUSE},
    {"mode", OPT_FUSE},
    {"smooth", OPT_FUSE},
    {"brightness", OPT_FUSE},
    {"contrast", OPT_FUSE},
    {"saturation", OPT_FUSE},
    {"source_face", OPT_FUSE},
    {"target_face", OPT_FUSE},
};

static const char *const job_formats[] = {"mp4", "webm", "mkv", "mov", "webp", "gif"};

typedef struct job_options {
    ag_server *s;
    ag_convert_options convert, fusion;
    unsigned seen, fusion_seen;
    int format_seen;
    char ext[8];
    int failed;
    ag_reply_error err;
} job_options;

static int set_format(job_options *o, const char *value) {
    if (o->format_seen++) {
        ag_reply_error_set(&o->err, 400, "bad_option", "query parameter 'format' given twice");
        return -1;
    }
    for (size_t i = 0; value && i < sizeof job_formats / sizeof job_formats[0]; i++)
        if (!strcmp(value, job_formats[i]))
            return snprintf(o->ext, sizeof o->ext, "%s", value), 0;
    ag_reply_error_set(&o->err, 400, "bad_option",
                       "format: '%.40s' is not mp4, webm, mkv, mov, webp or gif",
                       value ? value : "");
    return -1;
}

static enum MHD_Result option_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value) {
    (void)kind;
    job_options *o = cls;
    const struct job_opt *opt = NULL;
    for (size_t i = 0; key && i < sizeof job_opts / sizeof job_opts[0]; i++)
        if (!strcmp(key, job_opts[i].key))
            opt = &job_opts[i];
    int rc = 0;
    if (!opt) {
        ag_reply_error_set(&o->err, 400, "unknown_option",
                           "unknown query parameter '%.40s' (known: model, max_side, "
                           "side_by_side, upscale, restore, codeformer_fidelity, format; with "
                           "a 'source' image: ratio, "
                           "shape_ratio, texture_ratio, mode, smooth, brightness, contrast, "
                           "saturation, source_face, target_face)",
                           key ? key : "");
        rc = -1;
    } else if (opt->kind == OPT_PHOTO_ONLY) {
        ag_reply_error_set(&o->err, 400, "bad_option", "%s applies to photos, not video", key);
        rc = -1;
    } else if (opt->kind == OPT_FORMAT) {
        rc = set_format(o, value);
    } else if (opt->kind == OPT_FUSE) {
        ag_server *s = o->s;
        rc = ag_option_set(&o->fusion, &o->fusion_seen, 0, key, value, s->model_names,
                           s->model_count, s->config.max_side, &o->err);
    } else {
        ag_server *s = o->s;
        rc = ag_convert_option_set(&o->convert, &o->seen, key, value, s->model_names,
                                   s->model_count, s->config.max_side, &o->err);
    }
    o->failed = rc != 0;
    return rc ? MHD_NO : MHD_YES;
}

/* ---- POST /api/v1/jobs ------------------------------------------------------------------ */

static int raw_type_ok(const char *ct) {
    if (!ct || !ct[0])
        return 1;
    return !strncasecmp(ct, "video/", 6) || !strncasecmp(ct, "application/octet-stream", 24) ||
           !strncasecmp(ct, "image/gif", 9) || !strncasecmp(ct, "image/webp", 10);
}

/* The body's framing: Content-Length (0 when chunked) within --max-video-mb. 0 or a reply. */
static int declared_length(ag_jobs *j, struct MHD_Connection *conn, ag_request *r,
                           size_t *declared) {
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
    const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Transfer-Encoding");
    *declared = 0;
    if (te)
        return 0;
    if (!cl)
        return reply_error(conn, r, 411, "length_required",
                           "send the video with a Content-Length (or chunked)"),
               -1;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(cl, &end, 10);
    if (!cl[0] || *end || errno || cl[0] == '-' || cl[0] == '+')
        return reply_error(conn, r, 400, "bad_request", "malformed Content-Length"), -1;
    if (v > j->c->max_bytes)
        return reply_error(conn, r, 413, "too_large",
                           "the video is %.1f MiB; the limit is %zu MiB (--max-video-mb)",
                           (double)v / 1048576.0, j->c->max_bytes >> 20),
               -1;
    if (v == 0)
        return reply_error(conn, r, 400, "bad_request", "the request has no video (empty body)"),
               -1;
    *declared = (size_t)v;
    return 0;
}

/* What an upload of n bytes holds of the quota: itself and its result (N^2 times its
 * size with upscale=N: ag_jobs_result_factor). */
static size_t upload_reserve(int upscale, size_t n) {
    return n + n * ag_jobs_result_factor(upscale);
}

/* Jobs of this client uploading, queued or running. Lock held. */
static int client_jobs(const ag_jobs *j, const char *client) {
    int n = 0;
    for (int i = 0; i < j->c->max_jobs; i++) {
        const job *b = &j->slots[i];
        n += b->state >= JOB_UPLOADING && b->state <= JOB_RUNNING && !strcmp(b->client, client);
    }
    return n;
}

/* The bytes an upload holds of the cluster's spool ahead of its chunks (chunked uploads). */
#define REDIS_HOLD_STEP ((size_t)8 << 20)

/* --jobs-redis: the upload admitted by the cluster's bounds (per-client jobs, spool); 0 or
 * a reply. The bytes held are b->reserved_bytes (given back at completion if it fails). */
static int redis_admit(ag_jobs *j, struct MHD_Connection *conn, ag_request *r, job *b,
                       size_t declared) {
    size_t bytes = upload_reserve(b->upscale, declared ? declared : REDIS_HOLD_STEP);
    int why = 0;
    int rc = ag_jobs_redis_admit(j, b->id, r->client, bytes, &why);
    if (rc == AG_JR_OK) {
        b->reserved_bytes = bytes;
        return 0;
    }
    r->retry_after_s = rc == AG_JR_DOWN ? AG_JR_RETRY_AFTER_S : 60;
    if (rc == AG_JR_DOWN)
        return reply_error(conn, r, 503, "jobs_unavailable",
                           "the job queue (Redis) is unreachable; try again shortly"),
               -1;
    if (why == 1)
        return reply_error(conn, r, 429, "too_many_jobs",
                           "this client has %d jobs queued or running (--jobs-per-client)",
                           j->c->per_client),
               -1;
    return reply_error(conn, r, 507, "spool_full",
                       "the job spool is full (--jobs-quota-mb %zu across the cluster); try "
                       "again later",
                       j->c->quota_bytes >> 20),
           -1;
}

/* A slot for the upload, when its declared size (and the result's) fits the quota. The
 * quota itself is reserved as the bytes come (upload_chunk). */
static int take_slot(ag_jobs *j, struct MHD_Connection *conn, ag_request *r, size_t declared,
                     int upscale, job **out) {
    pthread_mutex_lock(&j->lock);
    job *b = ag_jobs_free_slot(j);
    /* with --jobs-redis the quota and the per-client bound are the cluster's (redis_admit) */
    int quota =
        b && !j->redis && j->spool_bytes + upload_reserve(upscale, declared) > j->c->quota_bytes;
    int per_client =
        b && !j->redis && client_jobs(j, r->client) >= j->c->per_client && j->c->per_client > 0;
    if (per_client)
        b = NULL;
    if (b && !quota) {
        memset(b, 0, sizeof *b);
        b->state = JOB_UPLOADING;
        b->upscale = upscale;
    }
    pthread_mutex_unlock(&j->lock);
    *out = b;
    if (per_client)
        return r->retry_after_s = 60,
               reply_error(conn, r, 429, "too_many_jobs",
                           "this client has %d jobs queued or running (--jobs-per-client)",
                           j->c->per_client),
               -1;
    if (!b)
        return r->retry_after_s = 60,
               reply_error(conn, r, 503, "too_many_jobs",
                           "%d jobs are held (queued, running or finished and not yet "
                           "expired); the limit is --max-jobs",
                           j->c->max_jobs),
               -1;
    if (quota && upscale > 1) /* say why a job that fits without upscale=N does not */
        return r->retry_after_s = 60,
               reply_error(conn, r, 507, "spool_full",
                           "the job spool is full (--jobs-quota-mb %zu; an upscale=%d job holds "
                           "%zu times its upload); try again later",
                           j->c->quota_bytes >> 20, upscale, upload_reserve(upscale, 1)),
               -1;
    if (quota)
        return r->retry_after_s = 60,
               reply_error(conn, r, 507, "spool_full",
                           "the job spool is full (--jobs-quota-mb %zu); try again later",
                           j->c->quota_bytes >> 20),
               -1;
    return 0;
}

static int create_headers(ag_jobs *j, struct MHD_Connection *conn, ag_request *r) {
    ag_server *s = j->server;
    job_options o = {.s = s};
    snprintf(o.ext, sizeof o.ext, "mp4");
    ag_convert_options_init(&o.convert, s->config.max_side);
    ag_convert_options_init(&o.fusion, s->config.max_side);
    o.fusion.step = AG_CONVERT_FUSE;
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, option_iter, &o);
    if (o.failed)
        return reply_error(conn, r, o.err.status, o.err.code, "%s", o.err.message);
    if (o.convert.upscale && !s->upscalers[0]) /* as convert's upscale_fits says it */
        return reply_error(conn, r, 503, "upscale_unavailable",
                           "this server has no upscaler (--upscale-model none)");
    ag_reply_error refused;
    if (ag_restore_check(s, &o.convert, s->face_detect && s->face_mesh, &refused) != 0)
        return reply_error(conn, r, refused.status, refused.code, "%s", refused.message);
    int upscale = o.convert.upscale > 1 ? o.convert.upscale : 1;
    if (!atomic_load(&s->accepting))
        return r->retry_after_s = 5,
               reply_error(conn, r, 503, "shutting_down", "the server is shutting down");
    ag_job_upload u = {.fd = -1, .request = r};
    const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
    if (ct && !strncasecmp(ct, "multipart/", 10)) {
        ag_reply_error e;
        if (ag_upload_content_type(ct, &u.kind, u.boundary, &e) != 0)
            return reply_error(conn, r, e.status, e.code, "%s", e.message);
    } else if (!raw_type_ok(ct)) {
        return reply_error(conn, r, 415, "unsupported_media_type",
                           "Content-Type '%.60s' is not a video: send the bytes as video/*, "
                           "image/gif, image/webp or "
                           "application/octet-stream, or as multipart/form-data field 'video'",
                           ct);
    }
    size_t declared = 0;
    job *b = NULL;
    if (declared_length(j, conn, r, &declared) != 0 ||
        take_slot(j, conn, r, declared, upscale, &b) != 0)
        return MHD_YES; /* answered */
    ag_job_upload *up = ag_malloc(sizeof *up);
    char path[4096];
    if (!up || ag_jobs_new_id(j, b->id) != 0) {
        ag_free(up);
        pthread_mutex_lock(&j->lock);
        ag_jobs_release_slot(j, b);
        pthread_mutex_unlock(&j->lock);
        return reply_error(conn, r, 503, "out_of_memory", "cannot start the upload");
    }
    if (j->redis && redis_admit(j, conn, r, b, declared) != 0) {
        ag_free(up);
        pthread_mutex_lock(&j->lock);
        ag_jobs_release_slot(j, b);
        pthread_mutex_unlock(&j->lock);
        return MHD_YES; /* answered */
    }
    *up = u;
    up->slot = b;
    snprintf(b->ext, sizeof b->ext, "%s", o.ext);
    /* the uploader the runner takes turns by (ag_request_client: the peer, or the client a
     * trusted proxy names) */
    snprintf(b->client, sizeof b->client, "%s", r->client);
    b->model = o.convert.model;
    b->max_side = o.convert.max_side;
    b->side_by_side = o.convert.side_by_side;
    b->restore = o.convert.restore;
    b->codeformer_fidelity = o.convert.codeformer_fidelity;
    b->fuse_given = o.fusion_seen != 0;
    b->fuse_style = (o.seen & 1u) != 0; /* model= (the first of options.c's keys) */
    b->fuse = o.fusion.fusion;
    b->source_face = o.fusion.source_face, b->target_face = o.fusion.target_face;
    ag_jobs_path(j, b, "upload", path, sizeof path);
    up->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    r->video_upload = up;
    if (up->fd < 0)
        return reply_error(conn, r, 500, "spool_error", "cannot create the spool file: %s",
                           strerror(errno));
    /* Under the upload watch as a photo upload is: --min-upload-rate, and --timeout plus
     * the time the largest video takes at that rate. */
    const ag_server_config *c = &s->config;
    double limit_s = c->timeout_s;
    if (c->min_upload_rate)
        limit_s += (double)(declared ? declared : j->c->max_bytes) / (double)c->min_upload_rate;
    r->upload_limit_us = (uint64_t)(limit_s * 1e6);
    atomic_store(&r->state, AG_REQ_BODY);
    ag_http_watch_add(s, r);
    return MHD_YES;
}

/* --jobs-redis: a chunk within what the upload holds of the cluster's spool, more held in
 * steps (one Redis call per 8 MiB, not per chunk). */
static int redis_chunk(ag_jobs *j, ag_request *r, const char *data, size_t n) {
    ag_job_upload *up = r->video_upload;
    job *b = up->slot;
    size_t need = upload_reserve(b->upscale, up->bytes + n);
    if (need > b->reserved_bytes) {
        size_t more = need - b->reserved_bytes;
        more = more > REDIS_HOLD_STEP ? more : REDIS_HOLD_STEP;
        int rc = ag_jobs_redis_hold(j, b->id, (long long)more, 0);
        if (rc != AG_JR_OK) {
            r->status = rc == AG_JR_DOWN ? 503 : 507;
            r->error_code = rc == AG_JR_DOWN ? "jobs_unavailable_closed" : "spool_full_closed";
            r->closed_by_us = 1;
            return MHD_NO;
        }
        b->reserved_bytes += more;
    }
    if (ag_jobs_write_all(up->fd, data, n) != 0) {
        r->status = 507;
        r->error_code = "spool_write_failed";
        r->closed_by_us = 1;
        return MHD_NO;
    }
    up->bytes += n;
    r->body_size = up->bytes;
    atomic_store(&r->received, up->bytes);
    return MHD_YES;
}

static int upload_chunk(ag_jobs *j, ag_request *r, const char *data, size_t n) {
    ag_job_upload *up = r->video_upload;
    if (up->fd < 0)
        return MHD_NO;
    if (n > j->c->max_bytes - up->bytes) {
        r->status = 413;
        r->error_code = "too_large_closed";
        r->closed_by_us = 1;
        return MHD_NO;
    }
    /* The quota from what arrives: the upload and its result (twice the bytes, or more
     * with upscale=N). */
    if (j->redis)
        return redis_chunk(j, r, data, n);
    pthread_mutex_lock(&j->lock);
    size_t reserve = upload_reserve(up->slot->upscale, n);
    int full = j->spool_bytes + reserve > j->c->quota_bytes;
    if (!full) {
        j->spool_bytes += reserve;
        up->slot->reserved_bytes += reserve;
    }
    pthread_mutex_unlock(&j->lock);
    if (full) {
        r->status = 507;
        r->error_code = "spool_full_closed";
        r->closed_by_us = 1;
        return MHD_NO;
    }
    if (ag_jobs_write_all(up->fd, data, n) != 0) {
        r->status = 507;
        r->error_code = "spool_write_failed";
        r->closed_by_us = 1;
        return MHD_NO;
    }
    up->bytes += n;
    r->body_size = up->bytes; /* the log's bytes_in */
    atomic_store(&r->received, up->bytes);
    return MHD_YES;
}

/* The body is complete: the intake thread makes it a job (or refuses it) and resumes us. */
static int upload_complete(ag_jobs *j, struct MHD_Connection *conn, ag_request *r) {
    ag_job_upload *up = r->video_upload;
    if (up->bytes == 0) {
        close(up->fd);
        up->fd = -1;
        return reply_error(conn, r, 400, "bad_request", "the request has no video (empty body)");
    }
    atomic_store(&r->state, AG_REQ_QUEUED);
    ag_request_ref(r);            /* the intake's reference, dropped by ag_job_finish */
    MHD_suspend_connection(conn); /* before the push: the intake may resume at once */
    ag_jobs_intake_push(j, up);
    return MHD_YES;
}

void ag_jobs_request_done(ag_server *s, ag_request *r) {
    ag_job_upload *up = r->video_upload;
    if (!up)
        return;
    ag_jobs *j = s->jobs;
    r->video_upload = NULL;
    if (up->fd >= 0)
        close(up->fd);
    if (up->slot) {
        char path[4096];
        pthread_mutex_lock(&j->lock);
        ag_jobs_path(j, up->slot, "upload", path, sizeof path);
        unlink(path);
        ag_jobs_path(j, up->slot, "in", path, sizeof path);
        unlink(path);
        char id[AG_JOB_ID_MAX + 1];
        snprintf(id, sizeof id, "%s", up->slot->id);
        int held = j->redis && up->slot->reserved_bytes > 0;
        if (j->redis)
            up->slot->reserved_bytes = 0;
        ag_jobs_release_slot(j, up->slot);
        pthread_mutex_unlock(&j->lock);
        if (held)
            ag_jobs_redis_hold(j, id, 0, 1); /* down: the upload's deadline forgets it */
    }
    ag_free(up);
}

/* ---- GET / DELETE ----------------------------------------------------------------------- */

static int get_result(ag_jobs *j, struct MHD_Connection *conn, ag_request *r, job *b) {
    if (b->state != JOB_DONE)
        return reply_error(conn, r, 409, "not_ready",
                           "the job is %s; the result comes when it is done",
                           ag_job_state_names[b->state]);
    char path[4096];
    ag_jobs_result_path(j, b, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return reply_error(conn, r, 410, "gone", "the result is no longer there");
    }
    /* MHD reads the file as it sends and closes the fd when the response is destroyed; the
     * open fd keeps the bytes even if the job expires meanwhile. */
    struct MHD_Response *resp = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
    if (!resp) {
        close(fd);
        return MHD_NO;
    }
    const char *mime = !strcmp(b->ext, "webm")   ? "video/webm"
                       : !strcmp(b->ext, "mkv")  ? "video/x-matroska"
                       : !strcmp(b->ext, "mov")  ? "video/quicktime"
                       : !strcmp(b->ext, "webp") ? "image/webp"
                       : !strcmp(b->ext, "gif")  ? "image/gif"
                                                 : "video/mp4";
    char disp[64];
    snprintf(disp, sizeof disp, "attachment; filename=\"anime.%s\"", b->ext);
    MHD_add_response_header(resp, "X-Request-Id", r->id);
    MHD_add_response_header(resp, "Content-Type", mime);
    MHD_add_response_header(resp, "Content-Disposition", disp);
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    r->status = 200;
    r->content_type = mime;
    r->out_size = (size_t)st.st_size;
    enum MHD_Result ret = MHD_queue_response(conn, 200, resp);
    MHD_destroy_response(resp);
    atomic_store(&r->state, AG_REQ_REPLIED);
    return ret;
}

static int delete_job(ag_jobs *j, struct MHD_Connection *conn, ag_request *r, job *b) {
    if (b->state == JOB_RUNNING) {
        /* Stopped at its next frame or packet, then removed: cancelled whatever the run
         * returns. Until then it says "cancelling". */
        atomic_store(&b->cancel, 1);
        b->remove_when_stopped = 1;
        return reply_job(conn, r, j, b, 202);
    }
    job copy = *b;
    if (b->state == JOB_QUEUED) {
        copy.state = JOB_CANCELLED;
        atomic_fetch_add(&j->finished[2], 1);
    }
    ag_jobs_remove_files(j, b);
    ag_jobs_release_slot(j, b);
    return reply_job(conn, r, j, &copy, 200);
}

/* --jobs-redis: GET, GET .../result and DELETE of a job held in Redis, the same from any
 * instance (the files are on the shared --jobs-dir). */
static int redis_job_request(ag_jobs *j, struct MHD_Connection *conn, ag_request *r, const char *id,
                             size_t id_len, int is_result, int del) {
    job b;
    int cancelling = 0;
    int rc = del ? ag_jobs_redis_delete(j, id, id_len, &b, &cancelling)
                 : ag_jobs_redis_load(j, id, id_len, &b);
    if (rc == AG_JR_DOWN)
        return r->retry_after_s = AG_JR_RETRY_AFTER_S,
               reply_error(conn, r, 503, "jobs_unavailable",
                           "the job queue (Redis) is unreachable; try again shortly");
    if (rc == AG_JR_MISSING)
        return reply_error(conn, r, 404, "no_such_job",
                           "no job with this id (unknown, expired after --job-ttl, or deleted)");
    if (del) {
        if (b.state == JOB_CANCELLED)
            atomic_fetch_add(&j->finished[2], 1);
        return reply_job(conn, r, j, &b, cancelling ? 202 : 200);
    }
    return is_result ? get_result(j, conn, r, &b) : reply_job(conn, r, j, &b, 200);
}

/* What the page needs to know before offering video: the limits. */
static int jobs_limits(ag_jobs *j, struct MHD_Connection *conn, ag_request *r) {
    const ag_server *s = j->server;
    char *body = ag_malloc(400);
    int n = body ? snprintf(body, 400,
                            "{\"max_video_bytes\":%zu,\"max_video_seconds\":%.0f,"
                            "\"max_video_frames\":%lld,\"max_job_megapixels\":%zu,"
                            "\"max_jobs\":%d,\"formats\":[\"mp4\",\"webm\",\"mkv\",\"mov\","
                            "\"webp\",\"gif\"],\"upscale\":%s,\"max_output_pixels\":%zu}\n",
                            j->c->max_bytes, j->c->max_seconds, (long long)j->c->max_frames,
                            j->c->max_work_mpx, j->c->max_jobs, s->upscalers[0] ? "[0,2,4]" : "[0]",
                            s->config.max_output_pixels)
                 : 0;
    return reply(conn, r, 200, body, (size_t)n, NULL);
}

int ag_jobs_request(ag_server *s, struct MHD_Connection *conn, const char *url, const char *method,
                    const char *upload_data, size_t *upload_data_size, ag_request *r) {
    ag_jobs *j = s->jobs;
    int state = atomic_load(&r->state);
    if (state == AG_REQ_BODY) {
        if (*upload_data_size) {
            size_t n = *upload_data_size;
            *upload_data_size = 0;
            return upload_chunk(j, r, upload_data, n);
        }
        return upload_complete(j, conn, r);
    }
    if (state == AG_REQ_DONE) { /* resumed by the intake thread */
        const ag_job_upload *up = r->video_upload;
        return send_prepared(conn, r,
                             up && up->location[0] && r->status == 202 ? up->location : NULL);
    }
    if (state != AG_REQ_HEADERS)
        return MHD_YES;
    if (!j)
        return reply_error(conn, r, 404, "jobs_disabled",
                           "video jobs are off on this server (start it with --jobs-dir)");
    const char *rest = url + strlen("/api/v1/jobs");
    if (rest[0] == 0 || !strcmp(rest, "/")) {
        if (!strcmp(method, "POST"))
            return create_headers(j, conn, r);
        if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
            return reply(conn, r, 405, NULL, 0, "GET, POST");
        if (*upload_data_size) {
            *upload_data_size = 0;
            return MHD_YES;
        }
        return jobs_limits(j, conn, r);
    }
    /* GET/DELETE on one job: answered once the (empty) request is complete. */
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    const char *id = rest + 1;
    size_t id_len = strcspn(id, "/");
    const char *sub = id + id_len;
    int is_result = !strcmp(sub, "/result");
    if (sub[0] && !is_result)
        return reply_error(conn, r, 404, "not_found", "no such path");
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    int del = !strcmp(method, "DELETE") && !is_result;
    if (!get && !del)
        return reply(conn, r, 405, NULL, 0, is_result ? "GET" : "GET, DELETE");
    if (j->redis)
        return redis_job_request(j, conn, r, id, id_len, is_result, del);
    pthread_mutex_lock(&j->lock);
    job *b = ag_jobs_find(j, id, id_len);
    int rc;
    if (!b)
        rc = reply_error(conn, r, 404, "no_such_job",
                         "no job with this id (unknown, expired after --job-ttl, or deleted)");
    else if (del)
        rc = delete_job(j, conn, r, b);
    else if (is_result)
        rc = get_result(j, conn, r, b);
    else
        rc = reply_job(conn, r, j, b, 200);
    pthread_mutex_unlock(&j->lock);
    return rc;
}

/* ---- metrics ---------------------------------------------------------------------------- */

void ag_jobs_render_metrics(void *jobs, ag_text *t) {
    ag_jobs *j = jobs;
    if (!j)
        return;
    int counts[JOB_CANCELLED + 1] = {0};
    pthread_mutex_lock(&j->lock);
    for (int i = 0; i < j->c->max_jobs; i++)
        counts[j->slots[i].state]++;
    size_t spool = j->spool_bytes;
    pthread_mutex_unlock(&j->lock);
    ag_text_printf(t,
                   "# HELP animegan_jobs Video jobs held, by state.\n# TYPE animegan_jobs gauge\n");
    for (int s = JOB_UPLOADING; s <= JOB_CANCELLED; s++)
        ag_text_printf(t, "animegan_jobs{state=\"%s\"} %d\n", ag_job_state_names[s], counts[s]);
    ag_text_printf(t, "# HELP animegan_jobs_finished_total Video jobs finished, by outcome.\n"
                      "# TYPE animegan_jobs_finished_total counter\n");
    static const char *const outcomes[] = {"done", "failed", "cancelled"};
    for (int i = 0; i < 3; i++)
        ag_text_printf(t, "animegan_jobs_finished_total{state=\"%s\"} %llu\n", outcomes[i],
                       (unsigned long long)atomic_load(&j->finished[i]));
    ag_text_printf(t,
                   "# HELP animegan_video_frames_total Video frames stylised.\n"
                   "# TYPE animegan_video_frames_total counter\nanimegan_video_frames_total %llu\n",
                   (unsigned long long)atomic_load(&j->frames_total));
    ag_text_printf(t, "# HELP animegan_job_duration_seconds Time a job took to convert.\n"
                      "# TYPE animegan_job_duration_seconds histogram\n");
    uint64_t cumulative = 0;
    for (int i = 0; i < AG_JOB_DURATION_BUCKETS; i++) {
        cumulative += atomic_load(&j->duration_buckets[i]);
        ag_text_printf(t, "animegan_job_duration_seconds_bucket{le=\"%g\"} %llu\n",
                       ag_job_duration_le_s[i], (unsigned long long)cumulative);
    }
    cumulative += atomic_load(&j->duration_buckets[AG_JOB_DURATION_BUCKETS]);
    ag_text_printf(t,
                   "animegan_job_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
                   "animegan_job_duration_seconds_sum %.3f\n"
                   "animegan_job_duration_seconds_count %llu\n",
                   (unsigned long long)cumulative, atomic_load(&j->duration_sum_s),
                   (unsigned long long)atomic_load(&j->duration_count));
    ag_text_printf(t,
                   "# HELP animegan_jobs_spool_bytes Bytes of the job spool, files and "
                   "reservations.\n# TYPE animegan_jobs_spool_bytes gauge\n"
                   "animegan_jobs_spool_bytes %zu\n"
                   "# HELP animegan_jobs_spool_quota_bytes The spool bound (--jobs-quota-mb).\n"
                   "# TYPE animegan_jobs_spool_quota_bytes gauge\n"
                   "animegan_jobs_spool_quota_bytes %zu\n",
                   spool, j->c->quota_bytes);
    if (j->redis)
        ag_jobs_redis_metrics(j, t);
}
