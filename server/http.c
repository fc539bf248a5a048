/*
 * http.c - libmicrohttpd glue: the daemon, routing, and the life of one request.
 *
 * Threading: one internal polling thread with epoll (MHD_USE_INTERNAL_POLLING_THREAD |
 * MHD_USE_EPOLL). Everything it does is short (parse headers, copy body bytes, format small
 * JSON), so one thread serves many slow clients without a thread (and stack) per connection;
 * the image work runs on the workers and the connection is suspended meanwhile
 * (MHD_suspend_connection / MHD_resume_connection), so this thread never waits for inference.
 *
 * A convert request, call by call of the access handler:
 *   1. headers: allocate the owner (ag_request), check method, options, Content-Type and
 *      Content-Length (413 before a byte of body is read), then take an admission slot
 *      (503 + Retry-After when queue + workers are taken). A response queued here makes MHD
 *      discard the body and close the connection.
 *   2. body chunks: copied into one buffer sized from Content-Length (or grown up to the
 *      limit for chunked bodies; going over closes the connection at once).
 *   3. body complete: find the image (multipart or raw), check its signature (415), take a
 *      job reference, suspend, push to the queue.
 *   4. after the worker resumes us: queue the response it prepared.
 *   5. completion callback (every path: success, error, client gone, timeout): count, log,
 *      give the admission slot back, drop the connection's reference - the release point.
 */
#include "server.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#define SMALL_BODY_MAX ((size_t)256 * 1024) /* /metrics, /status, /models */
#define CHUNKED_INITIAL ((size_t)256 * 1024)

/* ---- the request owner ------------------------------------------------------------------ */

static void request_free(ag_request *r) {
    ag_free(r->body);
    r->body = NULL;
    ag_free(r->out);
    r->out = NULL;
    ag_free(r);
}

void ag_request_ref(ag_request *r) {
    atomic_fetch_add(&r->refs, 1);
}

void ag_request_unref(ag_request *r) {
    if (atomic_fetch_sub(&r->refs, 1) == 1)
        request_free(r);
}

static int valid_request_id(const char *s) {
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        if (n >= AG_REQUEST_ID_BYTES - 1)
            return 0;
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              c == '-' || c == '_' || c == '.'))
            return 0;
    }
    return n > 0;
}

typedef struct route_row {
    const char *path;
    int prefix; /* also the paths under path/ */
    ag_route route;
    ag_convert_step step; /* a convert route's (the others': AG_CONVERT_STYLE, unused) */
} route_row;

static const route_row routes[] = {
    {"/api/v1/convert", 0, AG_ROUTE_CONVERT, AG_CONVERT_STYLE},
    {"/api/v1/faces", 0, AG_ROUTE_CONVERT, AG_CONVERT_FACES},
    {"/api/v1/fuse", 0, AG_ROUTE_CONVERT, AG_CONVERT_FUSE},
    {"/api/v1/restore", 0, AG_ROUTE_CONVERT, AG_CONVERT_RESTORE},
    {"/api/v1/upscale", 0, AG_ROUTE_CONVERT, AG_CONVERT_UPSCALE},
    {"/api/v1/models", 0, AG_ROUTE_MODELS, AG_CONVERT_STYLE},
    {"/api/v1/status", 0, AG_ROUTE_STATUS, AG_CONVERT_STYLE},
    {"/healthz", 0, AG_ROUTE_HEALTHZ, AG_CONVERT_STYLE},
    {"/readyz", 0, AG_ROUTE_READYZ, AG_CONVERT_STYLE},
    {"/metrics", 0, AG_ROUTE_METRICS, AG_CONVERT_STYLE},
    {"/api/v1/jobs", 1, AG_ROUTE_JOBS, AG_CONVERT_STYLE}, /* video jobs: jobs_http.c */
};

/* The row of path url, NULL for none. */
static const route_row *route_row_of(const char *url) {
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        size_t n = strlen(routes[i].path);
        if (!strncmp(url, routes[i].path, n) &&
            (url[n] == '\0' || (routes[i].prefix && url[n] == '/')))
            return &routes[i];
    }
    return NULL;
}

static ag_route route_of(const char *url) {
    const route_row *row = route_row_of(url);
    if (row)
        return row->route;
    return ag_web_find(url) ? AG_ROUTE_PAGE : AG_ROUTE_OTHER;
}

static const char *origin_form(const char *url);

ag_route ag_http_route_of(const char *target) {
    char path[AG_HEAD_PATH_BYTES];
    snprintf(path, sizeof path, "%s", origin_form(target));
    path[strcspn(path, "?")] = '\0';
    return route_of(path);
}

void ag_http_new_request_id(ag_server *s, char id[AG_REQUEST_ID_BYTES]) {
    uint8_t bits[16];
    if (getrandom(bits, sizeof bits, GRND_NONBLOCK) != (ssize_t)sizeof bits) {
        /* The pool is not ready (early boot): unique, not secret. */
        uint64_t n = atomic_fetch_add(&s->next_id, 1);
        memcpy(bits, &s->id_prefix, 4);
        memcpy(bits + 4, &n, 8);
        memset(bits + 12, 0, 4);
    }
    for (int i = 0; i < 16; i++)
        snprintf(id + 2 * i, 3, "%02x", bits[i]);
}

static ag_request *request_new(ag_server *s, struct MHD_Connection *conn, const char *url,
                               const char *method) {
    ag_request *r = ag_calloc(1, sizeof *r);
    if (!r)
        return NULL;
    atomic_init(&r->refs, 1);
    atomic_init(&r->state, AG_REQ_HEADERS);
    r->connection = conn;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->fd = ci ? ci->connect_fd : -1;
    ag_request_client(s, conn, r->fd, r->client);
    r->start_us = ag_now_us();
    r->rss_start_bytes = ag_process_rss_bytes();
    r->route = route_of(url);
    r->cache_hit = -1;
    r->faces = -1;
    const route_row *row = route_row_of(url);
    ag_convert_options_init(&r->options, s->config.max_side);
    r->options.step = row ? row->step : AG_CONVERT_STYLE;
    snprintf(r->method, sizeof r->method, "%s", method);
    /* Our ids are 128 random bits, so /api/v1/status?request_id= cannot be walked to read
     * other clients' queue state (they were a counter). A client's own id is kept for the
     * log and echoed, but it is a key for the status lookup only when it is long enough to
     * be a secret of its own (the page sends 32 random hex digits); a short one ("1",
     * "req-7") could be anyone's. */
    const char *given = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Request-Id");
    if (given && valid_request_id(given)) {
        snprintf(r->id, sizeof r->id, "%s", given);
        r->keyed = strlen(given) >= AG_REQUEST_KEY_MIN;
    } else {
        ag_http_new_request_id(s, r->id);
        r->keyed = 1;
    }
    return r;
}

/* ---- replies: every body lives in the request (or in the binary) ------------------------ */

static const char fallback_nomem[] =
    "{\"error\":{\"code\":\"out_of_memory\",\"message\":\"the server is out of memory; try "
    "again\"}}\n";

static void reply_clear(ag_request *r) {
    ag_free(r->out);
    r->out = NULL;
    r->out_static = NULL;
    r->out_size = 0;
}

static void reply_error(ag_request *r, int status, const char *code, const char *message) {
    reply_clear(r);
    r->status = status;
    r->error_code = code;
    r->content_type = "application/json";
    size_t cap = 64 + 2 * strlen(code) + 6 * strlen(message);
    char *buf = ag_malloc(cap);
    if (!buf) {
        r->out_static = (const uint8_t *)fallback_nomem;
        r->out_size = sizeof fallback_nomem - 1;
        return;
    }
    r->out = (uint8_t *)buf;
    r->out_size = ag_json_error(buf, cap, code, message);
}

static void reply_reply_error(ag_request *r, const ag_reply_error *e) {
    reply_error(r, e->status, e->code, e->message);
}

/* Take ownership of an ag_malloc'ed body (NULL: out of memory -> 503). */
static void reply_owned(ag_request *r, int status, const char *content_type, char *body,
                        size_t size) {
    if (!body) {
        reply_error(r, 503, "out_of_memory", "the server is out of memory; try again");
        r->retry_after_s = 1;
        return;
    }
    reply_clear(r);
    r->status = status;
    r->content_type = content_type;
    r->out = (uint8_t *)body;
    r->out_size = size;
}

static void reply_text(ag_request *r, int status, const char *content_type, const char *text) {
    size_t n = strlen(text);
    char *copy = ag_malloc(n + 1);
    if (copy)
        memcpy(copy, text, n + 1);
    reply_owned(r, status, content_type, copy, n);
}

void ag_job_finish(ag_server *s, ag_request *r) {
    (void)s;
    struct MHD_Connection *conn = r->connection;
    atomic_store(&r->state, AG_REQ_DONE);
    /* The connection's reference keeps r alive until the completion callback, which cannot
     * run before the resume below; after it, this thread must not touch r. */
    ag_request_unref(r);
    MHD_resume_connection(conn);
}

void ag_job_fail(ag_server *s, ag_request *r, int status, const char *code, const char *message) {
    reply_error(r, status, code, message);
    if (status == 503)
        r->retry_after_s = ag_server_retry_after_s(s);
    ag_job_finish(s, r);
}

static void add_header(struct MHD_Response *resp, const char *name, const char *value) {
    /* Only fails on out of memory or invalid characters; the response still goes out. */
    (void)MHD_add_response_header(resp, name, value);
}

static enum MHD_Result send_reply(ag_server *s, struct MHD_Connection *conn, ag_request *r) {
    const void *body = r->out_static ? (const void *)r->out_static : (const void *)r->out;
    /* PERSISTENT: MHD does not copy or free; the buffer belongs to r, freed at completion,
     * after MHD has finished sending. */
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(r->out_size, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    char num[32];
    add_header(resp, "X-Request-Id", r->id);
    if (r->content_type)
        add_header(resp, "Content-Type", r->content_type);
    add_header(resp, "X-Content-Type-Options", "nosniff");
    if (r->route == AG_ROUTE_PAGE && r->asset) {
        /* Revalidated by ETag; the policy forbids any origin but this one, so the page
         * cannot load anything from the network, by construction. */
        add_header(resp, "ETag", ag_web_etag(r->asset));
        add_header(resp, "Cache-Control", "no-cache");
        add_header(resp, "Referrer-Policy", "no-referrer");
        add_header(resp, "Content-Security-Policy",
                   "default-src 'self'; img-src 'self' blob: data:; media-src 'self' blob:; "
                   "style-src 'self'; "
                   "script-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
                   "form-action 'self'; frame-ancestors 'none'");
    } else {
        add_header(resp, "Cache-Control", "no-store");
    }
    if (r->route == AG_ROUTE_CONVERT && r->enqueued_us) {
        snprintf(num, sizeof num, "%.1f", r->queue_ms);
        add_header(resp, "X-Queue-Ms", num);
        snprintf(num, sizeof num, "%.1f", r->inference_ms);
        add_header(resp, "X-Inference-Ms", num);
        /* No X-Cache: a hit would tell any client that someone else converted this photo
         * with these options. Hits and misses are in /metrics and the log only. */
        if (r->faces >= 0) {
            snprintf(num, sizeof num, "%d", r->faces);
            add_header(resp, "X-Faces", num);
        }
        if (r->portrait_fallback)
            add_header(resp, "X-Portrait", "center");
        if (r->chosen_face > 0) { /* fuse's target_like: which face, how near */
            snprintf(num, sizeof num, "%d", r->chosen_face);
            add_header(resp, "X-Target-Face", num);
            snprintf(num, sizeof num, "%.3f", (double)r->chosen_distance);
            add_header(resp, "X-Target-Distance", num);
        }
        if (r->status == 200 && r->options.step != AG_CONVERT_FACES) {
            char disp[64];
            snprintf(disp, sizeof disp, "inline; filename=\"anime.%s\"",
                     ag_format_extension(r->options.format));
            add_header(resp, "Content-Disposition", disp);
        }
    }
    if (r->retry_after_s > 0) {
        snprintf(num, sizeof num, "%d", r->retry_after_s);
        add_header(resp, "Retry-After", num);
    }
    if (r->status == 405)
        add_header(resp, "Allow", r->route == AG_ROUTE_CONVERT ? "POST" : "GET, HEAD");
    if (!atomic_load(&s->accepting) || r->close)
        add_header(resp, "Connection", "close");
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    atomic_store(&r->state, AG_REQ_REPLIED);
    return ret;
}

/* ---- small endpoints -------------------------------------------------------------------- */

/* Seconds the busiest worker has been on its current job; 0 when all are idle. */
static double longest_busy_s(const ag_server *s) {
    uint64_t now = ag_now_us();
    double longest = 0;
    for (int i = 0; s->workers && i < s->config.workers; i++) {
        uint64_t since = atomic_load(&s->workers[i].busy_since_us);
        if (since && since < now && (double)(now - since) / 1e6 > longest)
            longest = (double)(now - since) / 1e6;
    }
    return longest;
}

static void gauges_sample(ag_server *s, ag_metrics_gauges *g) {
    memset(g, 0, sizeof *g);
    g->queue_depth = ag_queue_depth(&s->queue);
    g->queue_capacity = s->config.queue;
    g->admitted = atomic_load(&s->admitted);
    g->admit_limit = s->admit_limit;
    g->workers = s->config.workers;
    g->busy_workers = atomic_load(&s->busy_workers);
    g->accepting = atomic_load(&s->accepting);
    g->ready = atomic_load(&s->ready);
    g->rss_bytes = ag_process_rss_bytes();
    g->peak_rss_bytes = ag_process_peak_rss_bytes();
    g->allocated_bytes = ag_allocated_bytes();
    g->allocated_peak_bytes = ag_allocated_peak_bytes();
    for (int i = 0; s->workers && i < s->config.workers; i++)
        g->arena_bytes += atomic_load(&s->workers[i].arena_bytes);
    g->longest_busy_s = longest_busy_s(s);
    g->memory_bound_bytes = s->budget.total_bytes;
    g->max_upload_bytes = s->config.max_upload_bytes;
    g->uptime_s = (double)(ag_now_us() - s->start_us) / 1e6;
    g->cache_enabled = s->cache != NULL;
    ag_cache_get_stats(s->cache, &g->cache);
    g->model_names = s->model_names;
    if (s->jobs) {
        g->extra = ag_jobs_render_metrics;
        g->extra_ctx = s->jobs;
    }
    g->model_count = s->model_count;
}

static void handle_metrics(ag_server *s, ag_request *r) {
    ag_metrics_gauges g;
    char *buf = NULL;
    size_t size = 0;
    gauges_sample(s, &g);
    if (ag_metrics_render(&s->metrics, &g, &buf, &size, SMALL_BODY_MAX) != 0)
        buf = NULL;
    reply_owned(r, 200, "text/plain; version=0.0.4; charset=utf-8", buf, size);
}

/* The --restore-model files as a JSON array: restore=K is the K-th (1-based). */
static void restorers_json(const ag_server *s, ag_text *t) {
    ag_text_append(t, "[", 1);
    for (int i = 0; i < s->restorer_count; i++) {
        const ag_model_info *info = ag_model_get_info(s->restorers[i]);
        const char *path = s->config.restore_models[i], *slash = strrchr(path, '/');
        ag_text_printf(t, "%s{\"restore\":%d,\"name\":", i ? "," : "", i + 1);
        ag_text_json_string(t, slash ? slash + 1 : path);
        ag_text_append(t, ",\"architecture\":", 16);
        ag_text_json_string(t, info->architecture);
        ag_text_printf(
            t,
            ",\"face_size\":%d,\"gflop_per_face\":%.4g,\"param_count\":%zu,"
            "\"weight_bytes\":%zu,\"precision\":\"%s\"}",
            info->min_side, ag_model_flop(s->restorers[i], info->min_side, info->min_side) / 1e9,
            info->param_count, info->weight_bytes, ag_precision_name(s->restore_precision));
    }
    ag_text_append(t, "]", 1);
}

/* upscale=2 and 4 as a JSON array ([] with --upscale-model none): the model of each and its
 * own scale (another is its result resized with Lanczos). */
static void upscalers_json(const ag_server *s, ag_text *t) {
    ag_text_append(t, "[", 1);
    for (int i = 0; i < AG_SERVER_UPSCALES && s->upscalers[i]; i++) {
        const ag_model_info *info = ag_model_get_info(s->upscalers[i]);
        ag_text_printf(t, "%s{\"upscale\":%d,\"name\":", i ? "," : "", ag_server_upscale_factor(i));
        ag_text_json_string(t, info->name);
        ag_text_append(t, ",\"architecture\":", 16);
        ag_text_json_string(t, info->architecture);
        ag_text_printf(t, ",\"model_scale\":%d,\"param_count\":%zu,\"weight_bytes\":%zu}",
                       info->scale, info->param_count, info->weight_bytes);
    }
    ag_text_append(t, "]", 1);
}

/* Every file --upscale-model loaded: its scale and the upscale=N it serves. */
static void upscale_models_json(const ag_server *s, ag_text *t) {
    ag_text_append(t, "[", 1);
    for (int m = 0; m < s->upscale_model_count; m++) {
        const ag_model_info *info = ag_model_get_info(s->upscale_models[m]);
        ag_text_printf(t, "%s{\"name\":", m ? "," : "");
        ag_text_json_string(t, info->name);
        ag_text_append(t, ",\"architecture\":", 16);
        ag_text_json_string(t, info->architecture);
        ag_text_printf(t, ",\"scale\":%d,\"serves\":[", info->scale);
        for (int i = 0, n = 0; i < AG_SERVER_UPSCALES; i++)
            if (s->upscalers[i] == s->upscale_models[m])
                ag_text_printf(t, "%s%d", n++ ? "," : "", ag_server_upscale_factor(i));
        ag_text_append(t, "]}", 2);
    }
    ag_text_append(t, "]", 1);
}

static void handle_models(ag_server *s, ag_request *r) {
    ag_text t;
    ag_text_init(&t, SMALL_BODY_MAX);
    ag_text_append(&t, "{\"default\":", 11);
    ag_text_json_string(&t, s->model_names[0]);
    ag_text_append(&t, ",\"models\":[", 11);
    for (int i = 0; i < s->model_count; i++) {
        const ag_model_info *info = ag_model_get_info(s->models[i]);
        ag_text_append(&t, i ? ",{\"name\":" : "{\"name\":", i ? 9 : 8);
        ag_text_json_string(&t, s->model_names[i]);
        ag_text_append(&t, ",\"style\":", 9);
        ag_text_json_string(&t, info->style);
        ag_text_append(&t, ",\"architecture\":", 16);
        ag_text_json_string(&t, info->architecture);
        ag_text_append(&t, ",\"format\":", 10);
        ag_text_json_string(&t, info->format);
        ag_text_append(&t, ",\"license\":", 11);
        ag_text_json_string(&t, info->license);
        ag_text_printf(&t,
                       ",\"side_multiple\":%d,\"min_side\":%d,\"gflop_512\":%.1f,"
                       "\"param_count\":%zu,\"weight_bytes\":%zu}",
                       info->side_multiple, AG_MIN_SIDE, /* ag_stylize pads below the
                                                             network's own minimum */
                       ag_model_flop(s->models[i], 512, 512) / 1e9, info->param_count,
                       info->weight_bytes);
    }
    ag_text_append(&t, "],\"restorers\":", 14);
    restorers_json(s, &t);
    ag_text_append(&t, ",\"upscalers\":", 13);
    upscalers_json(s, &t);
    ag_text_append(&t, ",\"upscale_models\":", 18);
    upscale_models_json(s, &t);
    ag_text_printf(&t,
                   ",\"options\":{\"portrait\":[0,1],\"side_by_side\":[0,1],\"max_side\":{\"min\":%"
                   "d,\"max\":%d},\"format\":[\"png\",\"jpeg\",\"webp\"],\"quality\":{\"min\":1,"
                   "\"max\":100,\"default\":%d},\"restore\":{\"min\":0,\"max\":%d},\"upscale\":%s,"
                   "\"max_output_pixels\":%zu}}\n",
                   AG_MIN_SIDE, s->config.max_side, AG_DEFAULT_QUALITY, s->restorer_count,
                   s->upscalers[0] ? "[0,2,4]" : "[0]", s->config.max_output_pixels);
    size_t size = 0;
    char *buf = ag_text_take(&t, &size);
    reply_owned(r, 200, "application/json", buf, size);
}

/* Alive unless a worker has been on one image for longer than --stuck-seconds: no image
 * takes that long, so the worker is stuck (e.g. in a library; docs/stability.md, known
 * issues) and only a restart gets it back. A supervisor polling /healthz does that. */
static void handle_healthz(ag_server *s, ag_request *r) {
    double busy = longest_busy_s(s);
    if (s->config.stuck_s > 0 && busy > s->config.stuck_s) {
        char message[160];
        snprintf(message, sizeof message,
                 "a worker has been on one image for %.0f s (--stuck-seconds %g); restart me", busy,
                 s->config.stuck_s);
        reply_error(r, 503, "worker_stuck", message);
        return;
    }
    reply_text(r, 200, "application/json", "{\"status\":\"ok\"}\n");
}

static int match_id(const void *item, const void *arg) {
    const ag_request *r = item;
    return r->keyed && !strcmp(r->id, (const char *)arg);
}

static void handle_status(ag_server *s, struct MHD_Connection *conn, ag_request *r) {
    ag_metrics_gauges g;
    gauges_sample(s, &g);
    const ag_server_config *c = &s->config;
    const ag_budget *b = &s->budget;
    char formula[512];
    ag_budget_format(b, formula, sizeof formula);
    uint64_t served = atomic_load(&s->metrics.converted);
    uint64_t requests = 0;
    for (int i = 0; i < AG_ROUTE_COUNT; i++)
        requests += atomic_load(&s->metrics.latency[i].count);

    ag_text t;
    ag_text_init(&t, SMALL_BODY_MAX);
    ag_text_printf(&t,
                   "{\"version\":\"%s\",\"uptime_s\":%.1f,\"accepting\":%s,\"ready\":%s,"
                   "\"models\":[",
                   AG_VERSION, g.uptime_s, g.accepting ? "true" : "false",
                   g.ready ? "true" : "false");
    for (int i = 0; i < s->model_count; i++) {
        if (i)
            ag_text_append(&t, ",", 1);
        ag_text_json_string(&t, s->model_names[i]);
    }
    ag_text_append(&t, "],\"restorers\":", 14);
    restorers_json(s, &t);
    ag_text_append(&t, ",\"upscalers\":", 13);
    upscalers_json(s, &t);
    ag_text_printf(&t,
                   ",\"workers\":%d,\"threads_per_worker\":%d,\"busy_workers\":%d,"
                   "\"longest_busy_s\":%.1f,"
                   "\"queue\":{\"depth\":%d,\"capacity\":%d,\"timeout_s\":%g},"
                   "\"inflight\":{\"admitted\":%d,\"limit\":%d},"
                   "\"served\":%llu,\"requests\":%llu,",
                   c->workers, c->threads_per_worker, g.busy_workers, g.longest_busy_s,
                   g.queue_depth, c->queue, c->queue_timeout_s, g.admitted, g.admit_limit,
                   (unsigned long long)served, (unsigned long long)requests);
    ag_text_printf(&t, "\"precision\":\"%s\",\"isa\":\"%s\",\"cpu\":",
                   ag_precision_name(c->engine.precision), ag_isa_name(ag_cpu_get_info()->isa));
    ag_text_json_string(&t, ag_cpu_get_info()->model);
    ag_text_append(&t, ",", 1);
    ag_text_printf(&t,
                   "\"memory\":{\"rss_bytes\":%zu,\"peak_rss_bytes\":%zu,\"allocated_bytes\":%zu,"
                   "\"arena_bytes\":%zu,\"bound_bytes\":%zu,\"bound\":{\"base_bytes\":%zu,"
                   "\"runtime_bytes\":%zu,\"workers\":%d,\"per_worker_bytes\":%zu,"
                   "\"arena_bytes\":%zu,\"decode_bytes\":%zu,\"admitted\":%d,"
                   "\"per_request_bytes\":%zu,\"connections\":%d,\"per_connection_bytes\":%zu,"
                   "\"cache_bytes\":%zu},\"formula\":",
                   g.rss_bytes, g.peak_rss_bytes, g.allocated_bytes, g.arena_bytes, b->total_bytes,
                   b->base_bytes, b->runtime_bytes, b->workers, b->worker_bytes, b->arena_bytes,
                   b->decode_bytes, b->admitted, b->request_bytes, b->connections,
                   b->connection_bytes, b->cache_bytes);
    ag_text_json_string(&t, formula);
    ag_text_printf(&t,
                   "},\"limits\":{\"max_upload_bytes\":%zu,\"max_pixels\":%zu,\"max_side\":%d,"
                   "\"max_connections\":%d,\"timeout_s\":%d,\"max_output_pixels\":%zu},"
                   "\"cache\":{\"enabled\":%s,\"capacity_bytes\":%zu,\"bytes\":%zu,"
                   "\"entries\":%d,\"hits\":%llu,\"misses\":%llu}",
                   c->max_upload_bytes, c->max_pixels, c->max_side, c->max_connections,
                   c->timeout_s, c->max_output_pixels, g.cache_enabled ? "true" : "false",
                   g.cache.capacity_bytes, g.cache.bytes, g.cache.entries,
                   (unsigned long long)g.cache.hits, (unsigned long long)g.cache.misses);

    /* Video jobs, when on: the page reads this rather than asking /api/v1/jobs (404 when off). */
    if (s->jobs)
        ag_text_printf(&t, ",\"jobs\":{\"max_video_bytes\":%zu,\"max_video_seconds\":%.0f}",
                       c->jobs.max_bytes, c->jobs.max_seconds);
    /* ?request_id=ID: where that conversion is (the web page polls this while it waits). */
    const char *want = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "request_id");
    if (want && valid_request_id(want)) {
        const char *state = "unknown";
        int position = ag_queue_position(&s->queue, match_id, want), done = 0, total = 0;
        int permille = 0;
        if (position > 0) {
            state = "queued";
        } else {
            for (int i = 0; i < c->workers; i++) {
                ag_worker *w = &s->workers[i];
                pthread_mutex_lock(&w->current_lock);
                int hit = !strcmp(w->current_id, want);
                pthread_mutex_unlock(&w->current_lock);
                if (hit) {
                    state = "working";
                    done = atomic_load(&w->steps_done), total = atomic_load(&w->steps_total);
                    permille = atomic_load(&w->step_permille);
                    break;
                }
            }
        }
        ag_text_append(&t, ",\"request\":{\"id\":", 17);
        ag_text_json_string(&t, want);
        ag_text_printf(&t, ",\"state\":\"%s\",\"position\":%d", state, position);
        if (total > 0) { /* faces restored or tiles upscaled so far, and of the one under way */
            double part = done < total ? permille / 1000.0 : 0.0;
            ag_text_printf(&t, ",\"steps_done\":%d,\"steps_total\":%d,\"progress\":%.3f", done,
                           total, (done + part) / total);
        }
        ag_text_append(&t, "}", 1);
    }
    ag_text_append(&t, "}\n", 2);
    size_t size = 0;
    char *buf = ag_text_take(&t, &size);
    reply_owned(r, 200, "application/json", buf, size);
}

static void handle_page(struct MHD_Connection *conn, const char *url, ag_request *r) {
    const ag_web_asset *a = ag_web_find(url);
    const char *inm = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "If-None-Match");
    reply_clear(r);
    r->asset = a;
    r->content_type = a->mime;
    r->status = inm && !strcmp(inm, ag_web_etag(a)) ? 304 : 200;
    if (r->status == 200) {
        r->out_static = a->data;
        r->out_size = a->size;
    }
}

/* ---- framing (RFC 9112): what a front end and we could read differently is refused ------ */

typedef struct framing {
    int content_lengths, transfer_encodings;
    const char *content_length; /* the first one */
    int lengths_differ;
    int bad_name, bad_value;
    char te[128]; /* every Transfer-Encoding value, comma-joined */
} framing;

static int is_tchar(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static enum MHD_Result framing_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                    size_t key_size, const char *value, size_t value_size) {
    (void)kind;
    framing *f = cls;
    if (key_size == 0)
        f->bad_name = 1;
    for (size_t i = 0; i < key_size; i++)
        if (!is_tchar((unsigned char)key[i]))
            f->bad_name = 1; /* "Transfer-Encoding :" arrives as "Transfer-Encoding " */
    /* MHD ends a line at a bare LF (RFC 9112 allows that) but leaves a bare CR in the
     * value, and a NUL makes the C string shorter than the value. */
    if (value && (strlen(value) != value_size || memchr(value, '\r', value_size) ||
                  memchr(value, '\n', value_size)))
        f->bad_value = 1;
    if (!value)
        return MHD_YES;
    if (!strcasecmp(key, "Content-Length")) {
        if (f->content_lengths++ == 0)
            f->content_length = value;
        else if (strcmp(value, f->content_length) != 0)
            f->lengths_differ = 1;
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        size_t n = strlen(f->te);
        snprintf(f->te + n, sizeof f->te - n, "%s%s", n ? "," : "", value);
        f->transfer_encodings++;
    }
    return MHD_YES;
}

/* A Transfer-Encoding list: 0 when it is one plain "chunked" (OWS and case aside), 1 when
 * chunked is last after other codings (we decode none: 501), 2 when chunked is not last,
 * so the body's length cannot be told (RFC 9112 6.3: 400 and close). */
static int te_kind(const char *te) {
    int codings = 0, chunked_last = 0;
    const char *p = te;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (!*p)
            break;
        const char *start = p;
        while (*p && *p != ',' && *p != ' ' && *p != '\t')
            p++;
        size_t n = (size_t)(p - start);
        codings++;
        chunked_last = n == 7 && !strncasecmp(start, "chunked", 7);
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p && *p != ',')
            return 2; /* a parameter or garbage */
    }
    return !chunked_last ? 2 : codings == 1 ? 0 : 1;
}

/* Refuse a request head whose framing is ambiguous. Returns 0, or fills err (and the request
 * is answered from its headers, which makes MHD close the connection). */
static int framing_check(struct MHD_Connection *conn, ag_reply_error *err) {
    framing f;
    memset(&f, 0, sizeof f);
    MHD_get_connection_values_n(conn, MHD_HEADER_KIND, framing_iter, &f);
    int te = f.transfer_encodings ? te_kind(f.te) : 0;
    if (f.bad_name)
        ag_reply_error_set(err, 400, "bad_request",
                           "malformed header field name (whitespace before the colon?)");
    else if (f.bad_value)
        ag_reply_error_set(err, 400, "bad_request", "a header value holds a CR, LF or NUL");
    else if (f.lengths_differ)
        ag_reply_error_set(err, 400, "bad_request", "Content-Length given twice, differently");
    else if (f.transfer_encodings && f.content_lengths)
        ag_reply_error_set(err, 400, "bad_request",
                           "Content-Length together with Transfer-Encoding");
    else if (te)
        ag_reply_error_set(err, te == 1 ? 501 : 400, te == 1 ? "not_implemented" : "bad_request",
                           "Transfer-Encoding '%.60s': only a plain 'chunked' is taken", f.te);
    else
        return 0;
    return -1;
}

/* Absolute-form targets ("GET http://host/path", RFC 9112 3.2.2) name the origin-form path
 * after their authority. */
static const char *origin_form(const char *url) {
    const char *p = NULL;
    if (!strncasecmp(url, "http://", 7))
        p = url + 7;
    else if (!strncasecmp(url, "https://", 8))
        p = url + 8;
    if (!p)
        return url;
    const char *slash = strchr(p, '/');
    return slash ? slash : "/";
}

/* ---- the watch over admitted requests ---------------------------------------------------- */

/*
 * Every request holding an admission slot is in s->watch, added when it is admitted and
 * removed in the completion callback, both under watch_lock. The main thread's
 * ag_http_watch looks at each one's socket under the same lock; MHD closes a socket only
 * after the completion callback returned, so the descriptor it polls or shuts down is
 * always this request's own.
 *
 * MHD alone would not free the slot of a client that closed mid-upload: with epoll it
 * reads until a short read and waits for the next edge, so a FIN that came with the last
 * bytes is seen only at the idle timeout (17 packets every 30 s held every slot). Shutting
 * the socket down here makes MHD read the end at once and complete the request.
 */
void ag_http_watch_add(ag_server *s, ag_request *r) {
    pthread_mutex_lock(&s->watch_lock);
    for (int i = 0; i < s->watch_cap; i++) {
        if (!s->watch[i]) {
            s->watch[i] = r;
            r->watched = i + 1;
            break;
        }
    }
    pthread_mutex_unlock(&s->watch_lock);
}

static void watch_remove(ag_server *s, ag_request *r) {
    if (!r->watched)
        return;
    pthread_mutex_lock(&s->watch_lock);
    s->watch[r->watched - 1] = NULL;
    r->watched = 0;
    pthread_mutex_unlock(&s->watch_lock);
}

static int fd_gone(int fd) {
    if (fd < 0)
        return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

int ag_request_client_gone(const ag_request *r) {
    return fd_gone(r->fd);
}

#define UPLOAD_RATE_GRACE_US 5000000u

static void cut(ag_request *r, int why) {
    atomic_store(&r->cut, why);
    shutdown(r->fd, SHUT_RDWR); /* MHD sees the end on its next read and completes r */
}

void ag_http_watch(ag_server *s) {
    if (!s->watch)
        return;
    const ag_server_config *c = &s->config;
    uint64_t now = ag_now_us();
    pthread_mutex_lock(&s->watch_lock);
    for (int i = 0; i < s->watch_cap; i++) {
        ag_request *r = s->watch[i];
        if (!r || atomic_load(&r->cut) != AG_CUT_NONE)
            continue;
        int state = atomic_load(&r->state);
        if (state == AG_REQ_BODY) {
            uint64_t elapsed = now > r->start_us ? now - r->start_us : 0;
            size_t got = atomic_load(&r->received);
            if (fd_gone(r->fd))
                cut(r, AG_CUT_GONE);
            else if (elapsed >
                     (r->upload_limit_us ? r->upload_limit_us : (uint64_t)c->timeout_s * 1000000u))
                cut(r, AG_CUT_DEADLINE);
            else if (c->min_upload_rate && elapsed > UPLOAD_RATE_GRACE_US &&
                     (double)got < (double)c->min_upload_rate * ((double)elapsed / 1e6))
                cut(r, AG_CUT_SLOW);
        } else if (state == AG_REQ_QUEUED && fd_gone(r->fd) && ag_queue_remove(&s->queue, r)) {
            /* Ours now (no worker has it): answered without any work. The completion
             * callback, which needs the lock we hold, runs after we let go. */
            atomic_store(&r->cut, AG_CUT_GONE);
            ag_job_fail(s, r, 499, "client_gone", "the client closed the connection");
        }
    }
    pthread_mutex_unlock(&s->watch_lock);
}

/* ---- convert ---------------------------------------------------------------------------- */

typedef struct option_walk {
    ag_server *s;
    ag_convert_options *opts;
    unsigned seen;
    int failed;
    ag_reply_error err;
} option_walk;

static enum MHD_Result option_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value) {
    (void)kind;
    option_walk *w = cls;
    if (ag_option_set(w->opts, &w->seen, 0, key, value, w->s->model_names, w->s->model_count,
                      w->s->config.max_side, &w->err) != 0) {
        w->failed = 1;
        return MHD_NO;
    }
    return MHD_YES;
}

/* Content-Length as a size; -1 when malformed. */
static int parse_length(const char *s, size_t *out) {
    size_t v = 0;
    if (!s || !*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (SIZE_MAX - 9) / 10)
            return -1;
        v = v * 10 + (size_t)(*s - '0');
    }
    *out = v;
    return 0;
}

static int admit(ag_server *s) {
    int n = atomic_load(&s->admitted);
    while (n < s->admit_limit)
        if (atomic_compare_exchange_weak(&s->admitted, &n, n + 1))
            return 1;
    return 0;
}

int ag_server_retry_after_s(ag_server *s) {
    double ewma_s = (double)atomic_load(&s->inference_ewma_us) / 1e6;
    if (ewma_s <= 0)
        ewma_s = 2;
    int waiting = ag_queue_depth(&s->queue) + atomic_load(&s->busy_workers);
    double t = ewma_s * (waiting > 0 ? waiting : 1) / s->config.workers;
    int secs = (int)(t + 0.999);
    return secs < 1 ? 1 : secs > 60 ? 60 : secs;
}

static void convert_headers(ag_server *s, struct MHD_Connection *conn, ag_request *r) {
    const ag_server_config *c = &s->config;
    ag_reply_error e;
    char msg[200];
    if (strcmp(r->method, "POST") != 0) {
        reply_error(r, 405, "method_not_allowed", "use POST to convert an image");
        return;
    }
    if (!atomic_load(&s->accepting)) {
        reply_error(r, 503, "shutting_down", "the server is shutting down; try again");
        r->retry_after_s = 5;
        return;
    }
    option_walk w = {.s = s, .opts = &r->options};
    /* The first --restore-model unless restore=K; 2x unless upscale=N. */
    r->options.restore = r->options.step == AG_CONVERT_RESTORE;
    r->options.upscale = r->options.step == AG_CONVERT_UPSCALE ? 2 : 0;
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, option_iter, &w);
    if (!w.failed && ag_convert_options_check(&r->options, &w.err) != 0)
        w.failed = 1;
    if (w.failed) {
        reply_reply_error(r, &w.err);
        return;
    }
    const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
    if (ag_upload_content_type(ct, &r->body_kind, r->boundary, &e) != 0) {
        reply_reply_error(r, &e);
        return;
    }
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
    const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Transfer-Encoding");
    if (te) {
        r->declared_size = SIZE_MAX; /* chunked (framing_check): checked as it arrives */
    } else if (cl) {
        if (parse_length(cl, &r->declared_size) != 0) {
            reply_error(r, 400, "bad_request", "malformed Content-Length");
            return;
        }
        if (r->declared_size > c->max_upload_bytes) {
            snprintf(msg, sizeof msg,
                     "the upload is %.1f MiB; the limit is %zu MiB (--max-upload-mb)",
                     (double)r->declared_size / 1048576.0, c->max_upload_bytes >> 20);
            reply_error(r, 413, "too_large", msg);
            return;
        }
    } else {
        r->declared_size = 0;
    }
    if (r->declared_size == 0) {
        reply_error(r, 400, "bad_request", "the request has no image (empty body)");
        return;
    }
    if (!admit(s)) {
        atomic_fetch_add(&s->metrics.rejected_full, 1);
        reply_error(r, 503, "queue_full", "the server is busy; try again shortly");
        r->retry_after_s = ag_server_retry_after_s(s);
        return;
    }
    r->admitted = 1;
    ag_http_watch_add(s, r);
    size_t want =
        r->declared_size == SIZE_MAX
            ? (CHUNKED_INITIAL < c->max_upload_bytes ? CHUNKED_INITIAL : c->max_upload_bytes)
            : r->declared_size;
    r->body = ag_malloc(want);
    if (!r->body) {
        reply_error(r, 503, "out_of_memory", "the server is out of memory; try again");
        r->retry_after_s = ag_server_retry_after_s(s);
        return;
    }
    r->body_capacity = want;
    atomic_store(&r->state, AG_REQ_BODY);
}

/* Returns 0, or -1 to close the connection (a chunked body over the limit: MHD cannot queue
 * a response while a body is arriving, and reading the rest would be unbounded). */
static int convert_chunk(ag_server *s, ag_request *r, const char *data, size_t n) {
    if (r->body_too_large)
        return -1;
    if (n > s->config.max_upload_bytes - r->body_size) {
        r->body_too_large = 1;
        r->closed_by_us = 1;
        r->status = 413;
        r->error_code = "too_large_closed";
        ag_free(r->body);
        r->body = NULL;
        r->body_capacity = 0;
        return -1;
    }
    if (r->body_size + n > r->body_capacity) {
        size_t cap = r->body_capacity * 2;
        while (cap < r->body_size + n)
            cap *= 2;
        if (cap > s->config.max_upload_bytes)
            cap = s->config.max_upload_bytes;
        uint8_t *grown = ag_realloc(r->body, cap);
        if (!grown) {
            r->status = 503;
            r->closed_by_us = 1;
            r->error_code = "out_of_memory_closed";
            return -1;
        }
        r->body = grown;
        r->body_capacity = cap;
    }
    memcpy(r->body + r->body_size, data, n);
    r->body_size += n;
    atomic_store(&r->received, r->body_size);
    return 0;
}

static void convert_complete(ag_server *s, struct MHD_Connection *conn, ag_request *r) {
    ag_reply_error e;
    if (r->options.step == AG_CONVERT_FUSE
            ? ag_fuse_uploads(s, r, &e) != 0
            : ag_upload_image(r->body, r->body_size, r->body_kind, r->boundary, &r->image,
                              &r->image_size, &e) != 0) {
        reply_reply_error(r, &e);
        atomic_store(&r->state, AG_REQ_DONE);
        return;
    }
    r->enqueued_us = ag_now_us();
    r->deadline_us = r->enqueued_us + (uint64_t)(s->config.queue_timeout_s * 1e6);
    atomic_store(&r->state, AG_REQ_QUEUED);
    ag_request_ref(r); /* the job's reference, dropped by ag_job_finish */
    /* Suspend before the push: a worker may finish and resume before we return. */
    MHD_suspend_connection(conn);
    if (ag_queue_push(&s->queue, r, r->deadline_us) != 0) {
        /* Cannot happen while admission holds (capacity = queue + workers); the queue is only
         * closed after every admitted request completed. Fail safe anyway. */
        ag_job_fail(s, r, 503, "queue_full", "the server is busy; try again shortly");
    }
}

/* ---- MHD callbacks ---------------------------------------------------------------------- */

/* GET/HEAD endpoints, answered once the request is complete. */
static enum MHD_Result respond_small(ag_server *s, struct MHD_Connection *conn, const char *url,
                                     const char *method, ag_request *r) {
    if (r->route == AG_ROUTE_OTHER) {
        reply_error(r, 404, "not_found", "no such path");
        return send_reply(s, conn, r);
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        reply_error(r, 405, "method_not_allowed", "use GET");
        return send_reply(s, conn, r);
    }
    switch (r->route) {
    case AG_ROUTE_PAGE: handle_page(conn, url, r); break;
    case AG_ROUTE_MODELS: handle_models(s, r); break;
    case AG_ROUTE_STATUS: handle_status(s, conn, r); break;
    case AG_ROUTE_HEALTHZ: handle_healthz(s, r); break;
    case AG_ROUTE_READYZ:
        if (atomic_load(&s->ready) && atomic_load(&s->accepting)) {
            reply_text(r, 200, "application/json", "{\"status\":\"ready\"}\n");
        } else {
            int ready = atomic_load(&s->ready);
            reply_error(r, 503, ready ? "shutting_down" : "not_ready",
                        ready ? "the server is shutting down" : "models are still loading");
            r->retry_after_s = 1;
        }
        break;
    case AG_ROUTE_METRICS: handle_metrics(s, r); break;
    default: reply_error(r, 404, "not_found", "no such path"); break;
    }
    return send_reply(s, conn, r);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    (void)version;
    ag_server *s = cls;
    ag_request *r = *con_cls;
    url = origin_form(url);
    if (!r) {
        r = request_new(s, conn, url, method);
        if (!r)
            return MHD_NO; /* no memory even for the owner: close */
        *con_cls = r;
        ag_reply_error fe;
        if (framing_check(conn, &fe) != 0) {
            reply_reply_error(r, &fe);
            r->close = 1;
            r->closed_by_us = 1;
            return send_reply(s, conn, r);
        }
        if (r->route == AG_ROUTE_JOBS)
            return (enum MHD_Result)ag_jobs_request(s, conn, url, method, upload_data,
                                                    upload_data_size, r);
        if (r->route == AG_ROUTE_CONVERT) {
            convert_headers(s, conn, r);
            if (atomic_load(&r->state) == AG_REQ_BODY)
                return MHD_YES;
            /* Refused from the headers: MHD sends this without reading the body and closes. */
            return send_reply(s, conn, r);
        }
        /* Everything else answers once the request is complete, which keeps the connection
         * alive (a response queued from the headers alone makes MHD close it), unless it
         * declares a body longer than the 64 KiB we read and ignore: answered now, closed. */
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > 65536) {
            r->close = 1;
            r->closed_by_us = 1;
            return respond_small(s, conn, url, method, r);
        }
        return MHD_YES;
    }

    if (r->route == AG_ROUTE_JOBS)
        return (enum MHD_Result)ag_jobs_request(s, conn, url, method, upload_data, upload_data_size,
                                                r);
    switch (atomic_load(&r->state)) {
    case AG_REQ_HEADERS:
        if (*upload_data_size) {
            /* A body on a GET: ignored, and only a little of it is read; past that, the
             * answer goes out now and the connection closes (ours, not a vanished client). */
            r->body_size += *upload_data_size;
            *upload_data_size = 0;
            if (r->body_size <= 65536)
                return MHD_YES;
            /* (a chunked one: a declared length is answered from the headers) */
            reply_error(r, 413, "payload_too_large",
                        "a body on this route is ignored, up to 64 KiB");
            r->closed_by_us = 1;
            return MHD_NO;
        }
        return respond_small(s, conn, url, method, r);
    case AG_REQ_BODY:
        if (*upload_data_size) {
            if (convert_chunk(s, r, upload_data, *upload_data_size) != 0)
                return MHD_NO;
            *upload_data_size = 0;
            return MHD_YES;
        }
        convert_complete(s, conn, r);
        if (atomic_load(&r->state) == AG_REQ_DONE && !r->enqueued_us)
            return send_reply(s, conn, r);
        return MHD_YES;
    case AG_REQ_DONE: return send_reply(s, conn, r);
    default:
        /* Suspended states get no calls; a replied request gets no more. */
        *upload_data_size = 0;
        return MHD_YES;
    }
}

/* The admin listener: the monitoring routes only, the same handler. */
static enum MHD_Result on_admin_request(void *cls, struct MHD_Connection *conn, const char *url,
                                        const char *method, const char *version,
                                        const char *upload_data, size_t *upload_data_size,
                                        void **con_cls) {
    if (!*con_cls) {
        ag_route route = route_of(url);
        if (route != AG_ROUTE_HEALTHZ && route != AG_ROUTE_READYZ && route != AG_ROUTE_METRICS &&
            route != AG_ROUTE_STATUS)
            url = "/admin-port-serves-only-monitoring"; /* AG_ROUTE_OTHER: 404 */
    }
    return on_request(cls, conn, url, method, version, upload_data, upload_data_size, con_cls);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    ag_server *s = cls;
    const union MHD_ConnectionInfo *di = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_DAEMON);
    if (di && di->daemon == s->daemon) {
        /* The answer is written: the gate may judge this connection's next head. */
        const union MHD_ConnectionInfo *fi =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        ag_gate_request_done(s, fi ? fi->connect_fd : -1);
    }
    ag_request *r = *con_cls;
    if (!r)
        return;
    *con_cls = NULL;
    watch_remove(s, r);
    int state = atomic_load(&r->state);
    int ok = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && state == AG_REQ_REPLIED;
    int why = atomic_load(&r->cut);
    if (!ok && (why == AG_CUT_DEADLINE || why == AG_CUT_SLOW)) {
        /* Closed by us, mid-upload: no response can be queued then (MHD), so the log and
         * the counters say what it would have been. */
        r->status = 408;
        r->error_code = why == AG_CUT_DEADLINE ? "upload_timeout" : "upload_too_slow";
        r->closed_by_us = 1;
        atomic_fetch_add(&s->metrics.uploads_cut, 1);
    } else if (!ok && !r->closed_by_us) {
        /* The client went away (or timed out) before the response was sent: 499, nginx's
         * "client closed request", whatever we had prepared. */
        r->status = 499;
        r->error_code = toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ? "timeout" : "client_gone";
    }
    if (r->status == 499) /* also when we found it gone and answered into the void */
        atomic_fetch_add(&s->metrics.client_gone, 1);
    uint64_t end = ag_now_us();
    r->total_ms = (double)(end - r->start_us) / 1000.0;
    size_t out = ok ? r->out_size : 0;
    if (!strcmp(r->method, "HEAD"))
        out = 0;
    /* /api/v1/faces, /fuse, /restore and /upscale share the convert route's handling, not
     * its series; every image they answer is one converted. */
    ag_route counted = ag_route_counted(r);
    if (r->route == AG_ROUTE_CONVERT && r->options.step != AG_CONVERT_FACES && r->status == 200 &&
        ok)
        atomic_fetch_add(&s->metrics.converted, 1);
    ag_metrics_count_request(&s->metrics, counted, r->status, end - r->start_us, r->body_size, out);
    if (!s->config.quiet)
        ag_log_request(s->config.log_format, r, r->body_size, out, ag_process_rss_bytes());
    if (r->admitted)
        atomic_fetch_sub(&s->admitted, 1);
    ag_jobs_request_done(s, r);
    ag_request_unref(r); /* the connection's reference: normally the last one */
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    (void)conn;
    (void)socket_context;
    ag_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        atomic_fetch_add(&s->metrics.connections, 1);
        atomic_fetch_add(&s->metrics.connections_opened, 1);
    } else
        atomic_fetch_sub(&s->metrics.connections, 1);
}

/* MHD's complaints that it cannot set TCP options on, or push data through, the gate's
 * AF_UNIX socket pairs (three a response). libmicrohttpd 0.9.75 takes a connection given by
 * MHD_add_connection for TCP until a setsockopt fails with EINVAL, ENOPROTOOPT or ENOTSOCK,
 * but Linux answers EOPNOTSUPP on a local socket, so it tries again on every response. A
 * local socket has neither Nagle's delay nor a cork to push: nothing is delayed
 * (hardening3.py measures it against the admin listener's TCP), so these say nothing. */
static int mhd_tcp_option_noise(const char *msg) {
    static const char *const noise[] = {
        "Setting TCP_NODELAY option to ",
        "Setting TCP_CORK option to ",
        "Failed to push the data from buffers to the network.",
    };
    for (size_t i = 0; i < sizeof noise / sizeof noise[0]; i++)
        if (!strncmp(msg, noise[i], strlen(noise[i])))
            return 1;
    return 0;
}

static void log_mhd(ag_server *s, char *msg) {
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    ag_log_event(s->config.log_format, "warn", "libmicrohttpd: %s", msg);
}

/* The admin listener's MHD: its own TCP connections, every message logged. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    log_mhd(cls, msg);
}

/* The public MHD, behind the gate: every connection a local socket pair. */
static void on_gate_mhd_log(void *cls, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (!mhd_tcp_option_noise(msg))
        log_mhd(cls, msg);
}

/* ---- daemon ----------------------------------------------------------------------------- */

/* MHD's %-decoding, except that a path or query argument holding "%00" is left as sent:
 * decoded, the NUL would cut the C string short, so "/style.css%00.js" would serve
 * /style.css and "max_side=12%00" would read as 12. Left encoded, they are refused (404,
 * 400) like any other unknown path or malformed value. */
static size_t unescape_no_nul(void *cls, struct MHD_Connection *conn, char *s) {
    (void)cls;
    (void)conn;
    if (strstr(s, "%00"))
        return strlen(s);
    return MHD_http_unescape(s);
}

/* A listening TCP socket on ai (non-blocking, close-on-exec); -1 on failure. */
static int listen_socket(const struct addrinfo *ai) {
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    int on = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 128) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int ag_http_start(ag_server *s, ag_error *err) {
    const ag_server_config *c = &s->config;
    pthread_mutex_init(&s->watch_lock, NULL);
    /* Admitted requests, and video job uploads (each holds a job slot). */
    s->watch_cap = s->admit_limit + (c->jobs.dir ? c->jobs.max_jobs : 0);
    s->watch = ag_calloc((size_t)s->watch_cap, sizeof *s->watch);
    if (!s->watch) {
        err->code = AG_E_NOMEM;
        snprintf(err->message, sizeof err->message, "out of memory");
        return -1;
    }
    struct addrinfo hints = {0}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", c->port);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(c->host, port, &hints, &ai);
    if (gai != 0 || !ai) {
        err->code = AG_E_ARG;
        snprintf(err->message, sizeof err->message, "--host %s: %s", c->host,
                 gai ? gai_strerror(gai) : "no address");
        return -1;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    flags |= MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES ? MHD_USE_EPOLL : MHD_USE_POLL;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* The public socket is ours: the gate (gate.c) accepts on it and relays each connection
     * to MHD over a socket pair; MHD has no listening socket of its own. Its limit leaves
     * room for the ends of idle connections the gate closed that MHD has not reaped yet. */
    s->listen_fd = listen_socket(ai);
    if (s->listen_fd >= 0)
        s->daemon = MHD_start_daemon(
            flags | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC, 0, NULL, NULL, on_request, s,
            MHD_OPTION_EXTERNAL_LOGGER, on_gate_mhd_log, s, MHD_OPTION_CONNECTION_LIMIT,
            (unsigned)c->max_connections * 2, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)c->timeout_s,
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, c->connection_memory_bytes,
            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION,
            on_connection, s, MHD_OPTION_UNESCAPE_CALLBACK, unescape_no_nul, NULL, MHD_OPTION_END);
    if (s->daemon && c->admin_port >= 0) {
        /* Same address, another port: a small fixed connection limit and a short timeout;
         * no connection notifications, so the drain does not wait for probes. */
        struct sockaddr_storage admin;
        memcpy(&admin, ai->ai_addr, ai->ai_addrlen);
        if (admin.ss_family == AF_INET6)
            ((struct sockaddr_in6 *)&admin)->sin6_port = htons((uint16_t)c->admin_port);
        else
            ((struct sockaddr_in *)&admin)->sin_port = htons((uint16_t)c->admin_port);
        s->admin_daemon = MHD_start_daemon(
            flags, (uint16_t)c->admin_port, NULL, NULL, on_admin_request, s,
            MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, MHD_OPTION_SOCK_ADDR,
            (struct sockaddr *)&admin, MHD_OPTION_CONNECTION_LIMIT, 16u,
            MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
            c->connection_memory_bytes, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
            MHD_OPTION_UNESCAPE_CALLBACK, unescape_no_nul, NULL, MHD_OPTION_END);
        if (!s->admin_daemon) {
            freeaddrinfo(ai);
            err->code = AG_E_IO;
            snprintf(err->message, sizeof err->message,
                     "cannot listen on %s admin port %d (in use, or no permission)", c->host,
                     c->admin_port);
            return -1;
        }
        const union MHD_DaemonInfo *ainfo =
            MHD_get_daemon_info(s->admin_daemon, MHD_DAEMON_INFO_BIND_PORT);
        s->admin_port = ainfo && ainfo->port ? ainfo->port : c->admin_port;
    }
    freeaddrinfo(ai);
    if (!s->daemon) {
        err->code = AG_E_IO;
        snprintf(err->message, sizeof err->message,
                 "cannot listen on %s port %d (in use, or no permission)", c->host, c->port);
        return -1;
    }
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof bound;
    s->port = c->port;
    if (getsockname(s->listen_fd, (struct sockaddr *)&bound, &bound_len) == 0)
        s->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                    : ((struct sockaddr_in *)&bound)->sin_port);
    if (ag_gate_start(s, s->listen_fd, err) != AG_OK)
        return -1;
    return 0;
}

int ag_http_quiesce(ag_server *s) {
    if (!s->daemon || s->listen_fd < 0)
        return 0;
    /* The gate takes what the backlog holds (a connection the kernel completed may carry a
     * POST no load balancer would retry after a reset: MHD answers it 503 shutting_down),
     * stops accepting and closes idle connections. */
    int open = ag_gate_drain(s);
    /* The gate has shut the listening socket down right after its last accept: new
     * connections fail at once (a load balancer moves on) instead of waiting in the
     * backlog. Again here, for a gate that did not get to it in time. */
    shutdown(s->listen_fd, SHUT_RDWR);
    return open;
}

void ag_http_stop(ag_server *s) {
    if (s->admin_daemon) {
        MHD_stop_daemon(s->admin_daemon);
        s->admin_daemon = NULL;
    }
    if (s->daemon) {
        ag_gate_detach(s); /* no MHD_add_connection from here on */
        MHD_stop_daemon(s->daemon);
        s->daemon = NULL;
    }
    ag_gate_stop(s); /* after MHD: its completion callbacks look the gate up */
    if (s->listen_fd >= 0) {
        close(s->listen_fd);
        s->listen_fd = -1;
    }
    if (s->watch) {
        ag_free(s->watch);
        s->watch = NULL;
        pthread_mutex_destroy(&s->watch_lock);
    }
}
