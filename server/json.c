/*
 * json.c - a bounded text builder for the small JSON and Prometheus bodies the service
 * writes. It grows through ag_realloc up to a fixed maximum; any failure marks the text as
 * failed instead of truncating it silently, and the caller answers 500/503.
 */
#include "server.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void ag_text_init(ag_text *t, size_t max) {
    memset(t, 0, sizeof *t);
    t->max = max;
}

void ag_text_fini(ag_text *t) {
    ag_free(t->data);
    t->data = NULL;
    t->size = t->capacity = 0;
}

static int reserve(ag_text *t, size_t extra) {
    if (t->failed)
        return -1;
    if (t->size + extra + 1 <= t->capacity)
        return 0;
    size_t want = t->size + extra + 1;
    if (want > t->max) {
        t->failed = 1;
        return -1;
    }
    size_t cap = t->capacity ? t->capacity : 1024;
    while (cap < want)
        cap *= 2;
    if (cap > t->max)
        cap = t->max;
    char *p = ag_realloc(t->data, cap);
    if (!p) {
        t->failed = 1;
        return -1;
    }
    t->data = p;
    t->capacity = cap;
    return 0;
}

void ag_text_append(ag_text *t, const char *s, size_t n) {
    if (reserve(t, n))
        return;
    memcpy(t->data + t->size, s, n);
    t->size += n;
    t->data[t->size] = '\0';
}

void ag_text_printf(ag_text *t, const char *fmt, ...) {
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) {
        t->failed = 1;
        return;
    }
    if ((size_t)n < sizeof small) {
        ag_text_append(t, small, (size_t)n);
        return;
    }
    if (reserve(t, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(t->data + t->size, (size_t)n + 1, fmt, ap);
    va_end(ap);
    t->size += (size_t)n;
}

void ag_text_json_string(ag_text *t, const char *s) {
    ag_text_append(t, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        char esc[8];
        switch (*p) {
        case '"': ag_text_append(t, "\\\"", 2); break;
        case '\\': ag_text_append(t, "\\\\", 2); break;
        case '\n': ag_text_append(t, "\\n", 2); break;
        case '\r': ag_text_append(t, "\\r", 2); break;
        case '\t': ag_text_append(t, "\\t", 2); break;
        default:
            if (*p < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", *p);
                ag_text_append(t, esc, 6);
            } else {
                ag_text_append(t, (const char *)p, 1);
            }
        }
    }
    ag_text_append(t, "\"", 1);
}

char *ag_text_take(ag_text *t, size_t *size) {
    if (t->failed || !t->data) {
        ag_text_fini(t);
        return NULL;
    }
    char *d = t->data;
    *size = t->size;
    t->data = NULL;
    t->size = t->capacity = 0;
    return d;
}

/* Escape into a fixed buffer: the error path must work even when the heap does not. */
static size_t escape_into(char *out, size_t cap, const char *s) {
    size_t j = 0;
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p && j + 7 < cap; p++) {
        if (*p == '"' || *p == '\\') {
            out[j++] = '\\';
            out[j++] = (char)*p;
        } else if (*p < 0x20) {
            j += (size_t)snprintf(out + j, cap - j, "\\u%04x", *p);
        } else {
            out[j++] = (char)*p;
        }
    }
    out[j] = '\0';
    return j;
}

size_t ag_json_error(char *buf, size_t cap, const char *code, const char *message) {
    char c[64], m[512];
    escape_into(c, sizeof c, code);
    escape_into(m, sizeof m, message);
    int n = snprintf(buf, cap, "{\"error\":{\"code\":\"%s\",\"message\":\"%s\"}}\n", c, m);
    if (n < 0)
        return 0;
    return (size_t)n < cap ? (size_t)n : cap - 1;
}
