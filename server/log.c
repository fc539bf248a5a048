/*
 * log.c - one structured line per request on stderr (logfmt by default, or JSON): the
 * per-request monitoring the seed services added with psutil after they leaked, here from
 * the start: id, route, status, bytes, queue and inference time, RSS and its change over
 * the request. Each line is formatted into a stack buffer and written with one write(2), so
 * lines from different threads never interleave.
 */
#include "server.h"

#include <errno.h>
#include <pthread.h>
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

/* Append `key=value` (logfmt, value quoted when needed) or `"key":"value"` (JSON). The last
 * bytes of buf are kept for the closing quote, brace and newline, and an escape is written
 * whole or not at all, so a long value is cut but the line stays valid. */
typedef struct line {
    char buf[1024];
    size_t n;
    int json;
} line;

#define LINE_TAIL 4 /* '"', '}', '\n', NUL */

static void put_raw(line *l, const char *s, size_t len) {
    if (l->n + len > sizeof l->buf - LINE_TAIL)
        return;
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

/* Length of the well-formed UTF-8 sequence at p (1-4), or 0 when it is not one. */
static size_t utf8_len(const unsigned char *p) {
    if (p[0] < 0x80)
        return 1;
    size_t n = p[0] >= 0xF0 && p[0] <= 0xF4 ? 4 : p[0] >= 0xE0 ? 3 : p[0] >= 0xC2 ? 2 : 0;
    if (n == 0 || p[0] > 0xF4)
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    if ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] > 0x9F) ||
        (p[0] == 0xF0 && p[1] < 0x90) || (p[0] == 0xF4 && p[1] > 0x8F))
        return 0; /* overlong, surrogate or past U+10FFFF */
    return n;
}

/* Values may hold client bytes (the method, a path, libmicrohttpd's and libvips' texts):
 * quotes and backslashes are escaped, control characters and bytes that are not UTF-8
 * become \u00XX (JSON) or \xXX (logfmt), so every line is valid JSON or logfmt. */
static void put_str(line *l, const char *key, const char *value) {
    put_key(l, key);
    if (!value)
        value = "";
    int quote = l->json || !value[0] || strpbrk(value, " =\"\\") != NULL;
    for (const unsigned char *p = (const unsigned char *)value; *p && !quote; p++)
        quote = *p < 0x20 || *p >= 0x7f;
    if (quote)
        put_raw(l, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)value; *p;) {
        size_t n = utf8_len(p);
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\', esc[1] = (char)*p;
            put_raw(l, esc, 2);
            p++;
        } else if (n == 0 || *p < 0x20 || *p == 0x7f) {
            snprintf(esc, sizeof esc, l->json ? "\\u%04x" : "\\x%02x", *p);
            put_raw(l, esc, strlen(esc));
            p++;
        } else {
            put_raw(l, (const char *)p, n);
            p += n;
        }
    }
    if (quote)
        l->buf[l->n++] = '"'; /* from the tail: always fits */
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
    if (l->n > sizeof l->buf - 2)
        l->n = sizeof l->buf - 2;
    if (l->json)
        l->buf[l->n++] = '}';
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
    put_str(&l, "route", ag_route_name(ag_route_counted(r)));
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

/* ---- libvips and GLib messages -------------------------------------------------------- */

static _Thread_local char thread_request[AG_REQUEST_ID_BYTES];

void ag_log_thread_request(const char *id) {
    snprintf(thread_request, sizeof thread_request, "%s", id ? id : "");
}

/* At most LIB_BURST lines at once and LIB_PER_S a second on average (a token bucket, one
 * for the process); what is dropped is counted and said on the next line that gets out. */
#define LIB_BURST 20.0
#define LIB_PER_S 5.0

static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static double lib_tokens = LIB_BURST;
static uint64_t lib_last_us, lib_dropped;

void ag_log_library(void *ctx, const char *domain, const char *level, const char *message) {
    ag_log_library_ctx *c = ctx;
    atomic_fetch_add(c->counter, 1);
    uint64_t now = ag_now_us(), dropped = 0;
    pthread_mutex_lock(&lib_lock);
    if (lib_last_us)
        lib_tokens += (double)(now - lib_last_us) / 1e6 * LIB_PER_S;
    lib_tokens = lib_tokens > LIB_BURST ? LIB_BURST : lib_tokens;
    lib_last_us = now;
    int out = lib_tokens >= 1;
    if (out) {
        lib_tokens -= 1;
        dropped = lib_dropped;
        lib_dropped = 0;
    } else {
        lib_dropped++;
    }
    pthread_mutex_unlock(&lib_lock);
    if (!out)
        return;
    line l;
    begin(&l, c->format, level);
    if (thread_request[0])
        put_str(&l, "id", thread_request);
    put_str(&l, "source", domain);
    put_str(&l, "msg", message);
    if (dropped)
        put_fmt(&l, "suppressed", "%llu", (unsigned long long)dropped);
    finish(&l);
}
