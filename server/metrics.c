/*
 * metrics.c - counters and histograms in fixed arrays of atomics (no allocation, no lock on
 * the request path) and their Prometheus text exposition (format 0.0.4). Labels come from
 * fixed tables: route names and the status codes the service produces, so the series count
 * is bounded whatever clients send.
 */
#include "server.h"

#include <stdio.h>
#include <string.h>

/* Upper bounds in seconds, shared by every histogram: 1 ms to 1 minute. */
static const double bucket_le_s[AG_HIST_BUCKETS] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                    0.5,   1,     2.5,  5,     10,   30,  60};

/* Every status the service answers (the video jobs' 202, 409, 410, 411 and 507 too), then
 * 0: anything else, counted as code="other". */
static const int status_codes[AG_STATUS_SLOTS] = {200, 202, 304, 400, 404, 405, 408, 409,
                                                  410, 411, 413, 414, 415, 422, 431, 499,
                                                  500, 501, 503, 504, 505, 507, 0};

static const char *const route_names[AG_ROUTE_COUNT] = {
    "page", "convert", "models", "status",  "healthz", "readyz", "metrics",
    "jobs", "faces",   "fuse",   "restore", "upscale", "other"};

const char *ag_route_name(ag_route route) {
    return (unsigned)route < AG_ROUTE_COUNT ? route_names[route] : "other";
}

ag_route ag_route_counted(const ag_request *r) {
    if (r->route != AG_ROUTE_CONVERT)
        return r->route;
    static const ag_route by_step[] = {
        [AG_CONVERT_STYLE] = AG_ROUTE_CONVERT,   [AG_CONVERT_FACES] = AG_ROUTE_FACES,
        [AG_CONVERT_FUSE] = AG_ROUTE_FUSE,       [AG_CONVERT_RESTORE] = AG_ROUTE_RESTORE,
        [AG_CONVERT_UPSCALE] = AG_ROUTE_UPSCALE,
    };
    return by_step[r->options.step];
}

int ag_metrics_status_slot(int status) {
    for (int i = 0; i < AG_STATUS_SLOTS - 1; i++)
        if (status_codes[i] == status)
            return i;
    return AG_STATUS_SLOTS - 1;
}

void ag_metrics_observe(ag_histogram *h, uint64_t us) {
    int i = 0;
    while (i < AG_HIST_BUCKETS && (double)us > bucket_le_s[i] * 1e6)
        i++;
    atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
}

void ag_metrics_count_request(ag_metrics *m, ag_route route, int status, uint64_t duration_us,
                              size_t bytes_in, size_t bytes_out) {
    if ((unsigned)route >= AG_ROUTE_COUNT)
        route = AG_ROUTE_OTHER;
    atomic_fetch_add_explicit(&m->requests[route][ag_metrics_status_slot(status)], 1,
                              memory_order_relaxed);
    ag_metrics_observe(&m->latency[route], duration_us);
    atomic_fetch_add_explicit(&m->bytes_in, bytes_in, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->bytes_out, bytes_out, memory_order_relaxed);
}

static uint64_t load(const atomic_uint_fast64_t *a) {
    return atomic_load_explicit((atomic_uint_fast64_t *)a, memory_order_relaxed);
}

static void header(ag_text *t, const char *name, const char *type, const char *help) {
    ag_text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(ag_text *t, const char *name, const char *help, double value) {
    header(t, name, "gauge", help);
    ag_text_printf(t, "%s %.17g\n", name, value);
}

static void counter(ag_text *t, const char *name, const char *help, uint64_t value) {
    header(t, name, "counter", help);
    ag_text_printf(t, "%s %llu\n", name, (unsigned long long)value);
}

/* One histogram series; `labels` is "" or `key="value",` (with the trailing comma). */
static void histogram_series(ag_text *t, const char *name, const char *labels,
                             const ag_histogram *h) {
    uint64_t cumulative = 0;
    for (int i = 0; i < AG_HIST_BUCKETS; i++) {
        cumulative += load(&h->buckets[i]);
        ag_text_printf(t, "%s_bucket{%sle=\"%g\"} %llu\n", name, labels, bucket_le_s[i],
                       (unsigned long long)cumulative);
    }
    cumulative += load(&h->buckets[AG_HIST_BUCKETS]);
    ag_text_printf(t, "%s_bucket{%sle=\"+Inf\"} %llu\n", name, labels,
                   (unsigned long long)cumulative);
    size_t len = strlen(labels);
    /* Drop the trailing comma for the plain series. */
    ag_text_printf(t, "%s_sum%s%.*s%s %.6f\n", name, len ? "{" : "", len ? (int)len - 1 : 0, labels,
                   len ? "}" : "", (double)load(&h->sum_us) / 1e6);
    ag_text_printf(t, "%s_count%s%.*s%s %llu\n", name, len ? "{" : "", len ? (int)len - 1 : 0,
                   labels, len ? "}" : "", (unsigned long long)load(&h->count));
}

int ag_metrics_render(const ag_metrics *m, const ag_metrics_gauges *g, char **buf, size_t *size,
                      size_t max_bytes) {
    ag_text t;
    ag_text_init(&t, max_bytes);

    header(&t, "animegan_http_requests_total", "counter",
           "HTTP requests completed, by route and status code.");
    for (int r = 0; r < AG_ROUTE_COUNT; r++) {
        for (int s = 0; s < AG_STATUS_SLOTS; s++) {
            uint64_t n = load(&m->requests[r][s]);
            /* Always expose the convert outcomes dashboards plot, even at zero. */
            int always = (r == AG_ROUTE_CONVERT || r == AG_ROUTE_FACES) &&
                         (status_codes[s] == 200 || status_codes[s] == 503 ||
                          status_codes[s] == 504 || status_codes[s] == 500);
            if (!n && !always)
                continue;
            if (status_codes[s])
                ag_text_printf(&t, "animegan_http_requests_total{route=\"%s\",code=\"%d\"} %llu\n",
                               route_names[r], status_codes[s], (unsigned long long)n);
            else
                ag_text_printf(&t,
                               "animegan_http_requests_total{route=\"%s\",code=\"other\"} %llu\n",
                               route_names[r], (unsigned long long)n);
        }
    }

    header(&t, "animegan_http_request_duration_seconds", "histogram",
           "Time from request headers to the response completed, by route.");
    for (int r = 0; r < AG_ROUTE_COUNT; r++) {
        if (!load(&m->latency[r].count) && r != AG_ROUTE_CONVERT && r != AG_ROUTE_FACES)
            continue;
        char labels[48];
        snprintf(labels, sizeof labels, "route=\"%s\",", route_names[r]);
        histogram_series(&t, "animegan_http_request_duration_seconds", labels, &m->latency[r]);
    }
    header(&t, "animegan_queue_wait_seconds", "histogram",
           "Time a conversion waited in the queue for a worker.");
    histogram_series(&t, "animegan_queue_wait_seconds", "", &m->queue_wait);
    header(&t, "animegan_inference_seconds", "histogram",
           "Time a worker spent on one conversion (decode, stylize, encode).");
    histogram_series(&t, "animegan_inference_seconds", "", &m->inference);

    counter(&t, "animegan_http_received_bytes_total", "Request body bytes received.",
            load(&m->bytes_in));
    counter(&t, "animegan_http_sent_bytes_total", "Response body bytes sent.", load(&m->bytes_out));
    counter(&t, "animegan_images_converted_total", "Images converted successfully.",
            load(&m->converted));
    counter(&t, "animegan_faces_detected_total",
            "Faces the detector found (portrait=face, paste_faces, /api/v1/faces).",
            load(&m->faces_detected));
    counter(&t, "animegan_restorations_total",
            "Images that went through face restoration (restore=K, /api/v1/restore).",
            load(&m->restorations));
    counter(&t, "animegan_faces_restored_total", "Faces restored by a --restore-model.",
            load(&m->faces_restored));
    counter(&t, "animegan_upscaled_total",
            "Images and video job frames upscaled (upscale=N, /api/v1/upscale).",
            load(&m->upscaled));
    counter(&t, "animegan_fuse_cache_hits_total",
            "Fusion uploads whose faces were known (the detector skipped).",
            load(&m->fuse_cache_hits));
    counter(&t, "animegan_fuse_cache_misses_total", "Fusion uploads detected anew.",
            load(&m->fuse_cache_misses));
    counter(&t, "animegan_fuse_cache_evictions_total",
            "Fusion face entries dropped (per-client or total bound, TTL).",
            load(&m->fuse_cache_evictions));
    gauge(&t, "animegan_fuse_cache_entries", "Fusion face entries held now.",
          atomic_load(&m->fuse_cache_entries));
    header(&t, "animegan_face_detect_seconds", "histogram",
           "Time of face detection and landmarks on one image.");
    histogram_series(&t, "animegan_face_detect_seconds", "", &m->face_detect);
    counter(&t, "animegan_rejected_queue_full_total", "Conversions refused with 503: queue full.",
            load(&m->rejected_full));
    counter(&t, "animegan_queue_timeouts_total", "Conversions that waited too long (504).",
            load(&m->timed_out));
    counter(&t, "animegan_client_gone_total",
            "Requests whose client closed the connection before the response was sent.",
            load(&m->client_gone));
    counter(&t, "animegan_library_messages_total",
            "libvips and GLib warnings, logged (rate-limited) as source=VIPS lines.",
            load(&m->library_messages));
    counter(&t, "animegan_connections_evicted_total",
            "Idle connections closed to make room for a new one at --max-connections.",
            load(&m->connections_evicted));
    counter(&t, "animegan_uploads_cut_total",
            "Uploads closed with 408: past their deadline (--timeout) or under --min-upload-rate.",
            load(&m->uploads_cut));

    gauge(&t, "animegan_queue_depth", "Conversions waiting for a worker.", g->queue_depth);
    gauge(&t, "animegan_queue_capacity", "Conversions that may wait (--queue).", g->queue_capacity);
    gauge(&t, "animegan_inflight_requests",
          "Conversions admitted (uploading, queued, running or sending).", g->admitted);
    gauge(&t, "animegan_inflight_limit", "Admission limit: queue + workers.", g->admit_limit);
    gauge(&t, "animegan_workers", "Inference workers.", g->workers);
    gauge(&t, "animegan_workers_busy", "Workers converting an image now.", g->busy_workers);
    gauge(&t, "animegan_worker_longest_busy_seconds",
          "Longest time a worker has been on its current image (0 when all are idle).",
          g->longest_busy_s);
    gauge(&t, "animegan_http_connections", "Open HTTP connections.",
          atomic_load((atomic_int *)&m->connections));
    gauge(&t, "animegan_accepting", "1 while accepting work, 0 while draining.", g->accepting);
    gauge(&t, "animegan_ready", "1 when models are loaded and workers are up.", g->ready);
    gauge(&t, "animegan_process_resident_memory_bytes", "Resident set size of the process.",
          (double)g->rss_bytes);
    gauge(&t, "animegan_process_peak_resident_memory_bytes", "Peak resident set size.",
          (double)g->peak_rss_bytes);
    gauge(&t, "animegan_memory_bound_bytes",
          "Worst-case memory from the start-up formula (RSS should stay below).",
          (double)g->memory_bound_bytes);
    gauge(&t, "animegan_allocated_bytes", "Live bytes allocated through the library allocator.",
          (double)g->allocated_bytes);
    gauge(&t, "animegan_allocated_peak_bytes", "Peak of animegan_allocated_bytes.",
          (double)g->allocated_peak_bytes);
    gauge(&t, "animegan_engine_arena_bytes", "Activation arenas planned, summed over engines.",
          (double)g->arena_bytes);
    gauge(&t, "animegan_max_upload_bytes", "Largest accepted request body.",
          (double)g->max_upload_bytes);
    counter(&t, "animegan_cache_hits_total", "Result cache hits.", g->cache.hits);
    counter(&t, "animegan_cache_misses_total", "Result cache misses.", g->cache.misses);
    counter(&t, "animegan_cache_evictions_total", "Result cache evictions.", g->cache.evictions);
    gauge(&t, "animegan_cache_bytes", "Bytes held by the result cache.", (double)g->cache.bytes);
    gauge(&t, "animegan_cache_capacity_bytes", "Result cache bound (--cache-mb).",
          (double)g->cache.capacity_bytes);
    gauge(&t, "animegan_cache_entries", "Results in the cache.", g->cache.entries);
    gauge(&t, "animegan_uptime_seconds", "Seconds since start-up.", g->uptime_s);
    header(&t, "animegan_build_info", "gauge", "Version and loaded models.");
    for (int i = 0; i < g->model_count; i++) {
        ag_text_append(&t, "animegan_build_info{version=\"" AG_VERSION "\",model=",
                       strlen("animegan_build_info{version=\"" AG_VERSION "\",model="));
        ag_text_json_string(&t, g->model_names[i]); /* same escaping as Prometheus labels */
        ag_text_append(&t, "} 1\n", 4);
    }
    if (g->extra)
        g->extra(g->extra_ctx, &t); /* the video jobs' metrics (jobs_http.c) */
    *buf = ag_text_take(&t, size);
    return *buf ? 0 : -1;
}
