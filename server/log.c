/*
 * log.c - one structured line per request on stderr (logfmt by default, or JSON): the
 * per-request monitoring the seed services added with psutil after they leaked, here from
 * the start: id, route, status, bytes, queue and inference time, RSS and its change over
 * the request. Each line is formatted into a stack buffer and written with one write(2), so
 * lines from different threads never interleave.
 */
#include "server.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void write_line(const char *buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        buf += w;
        n -= (size_t)w;
    }
}

static void timestamp(char *buf, size_t cap) {
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, cap - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

/* Append `key=value` (logfmt, value quoted when needed) or `"key":"value"` (JSON). */
typedef struct line {
    char buf[1024];
    size_t n;
    int json;
} line;

static void put_raw(line *l, const char *s, size_t len) {
    if (l->n + len >= sizeof l->buf - 2)
        len = sizeof l->buf - 2 - l->n;
    memcpy(l->buf + l->n, s, len);
    l->n += len;
}

static void put_key(line *l, const char *key) {
    if (l->json) {
        put_raw(l, l->n > 1 ? ",\"" : "\"", l->n > 1 ? 2 : 1);
        put_raw(l, key, strlen(key));
        put_raw(l, "\":", 2);
    } else {
        if (l->n)
            put_raw(l, " ", 1);
        put_raw(l, key, strlen(key));
        put_raw(l, "=", 1);
    }
}

static void put_str(line *l, const char *key, const char *value) {
    put_key(l, key);
    if (!value)
        value = "";
    int quote = l->json || !value[0] || strpbrk(value, " =\"\\") != NULL;
    if (quote)
        put_raw(l, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
        if (*p == '"' || *p == '\\') {
            put_raw(l, "\\", 1);
            put_raw(l, (const char *)p, 1);
        } else if (*p < 0x20 || *p == 0x7f) {
            put_raw(l, "?", 1);
        } else {
            put_raw(l, (const char *)p, 1);
        }
    }
    if (quote)
        put_raw(l, "\"", 1);
}

static void put_fmt(line *l, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void put_fmt(line *l, const char *key, const char *fmt, ...) {
    char v[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    put_key(l, key);
    if (n > 0)
        put_raw(l, v, (size_t)n < sizeof v ? (size_t)n : sizeof v - 1);
}

static void finish(line *l) {
    if (l->json)
        put_raw(l, "}", 1);
    l->buf[l->n++] = '\n';
    write_line(l->buf, l->n);
}

static void begin(line *l, ag_log_format format, const char *level) {
    char ts[40];
    l->n = 0;
    l->json = format == AG_LOG_JSON;
    if (l->json)
        put_raw(l, "{", 1);
    timestamp(ts, sizeof ts);
    put_str(l, "ts", ts);
    put_str(l, "level", level);
}

void ag_log_request(ag_log_format format, const ag_request *r, size_t bytes_in, size_t bytes_out,
                    size_t rss_bytes) {
    line l;
    begin(&l, format, r->status >= 500 ? "error" : r->status >= 400 ? "warn" : "info");
    put_str(&l, "id", r->id);
    put_str(&l, "method", r->method);
    put_str(&l, "route", ag_route_name(r->route));
    put_fmt(&l, "status", "%d", r->status);
    put_fmt(&l, "bytes_in", "%zu", bytes_in);
    put_fmt(&l, "bytes_out", "%zu", bytes_out);
    put_fmt(&l, "queue_ms", "%.1f", r->queue_ms);
    put_fmt(&l, "inference_ms", "%.1f", r->inference_ms);
    put_fmt(&l, "total_ms", "%.1f", r->total_ms);
    put_fmt(&l, "rss_mb", "%.1f", (double)rss_bytes / 1048576.0);
    put_fmt(&l, "rss_delta_kb", "%lld",
            ((long long)rss_bytes - (long long)r->rss_start_bytes) / 1024);
    if (r->route == AG_ROUTE_CONVERT) {
        char px[32];
        if (r->in_width) {
            snprintf(px, sizeof px, "%dx%d", r->in_width, r->in_height);
            put_str(&l, "in_px", px);
        }
        if (r->out_width) {
            snprintf(px, sizeof px, "%dx%d", r->out_width, r->out_height);
            put_str(&l, "out_px", px);
        }
        if (r->cache_hit >= 0)
            put_str(&l, "cache", r->cache_hit ? "hit" : "miss");
    }
    if (r->error_code)
        put_str(&l, "error", r->error_code);
    finish(&l);
}

void ag_log_event(ag_log_format format, const char *level, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    line l;
    begin(&l, format, level);
    put_str(&l, "msg", msg);
    finish(&l);
}
