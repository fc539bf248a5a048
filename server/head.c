/*
 * head.c - the strict reading of a request head (RFC 9112) that the gate (gate.c) applies
 * to the first bytes of every connection, before libmicrohttpd parses them: libmicrohttpd
 * 0.9.75 joins an obsolete line fold into the header name, ends a value at a NUL, and
 * answers an oversized head with HTML or not at all. A pure function over a byte buffer:
 * bounded by its length, no allocation.
 */
#include "server.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static int tchar(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int refuse(ag_head_verdict *v, int status, const char *code, const char *message) {
    v->status = status;
    v->code = code;
    snprintf(v->message, sizeof v->message, "%s", message);
    return -1;
}

/* End of the line starting at p (the LF, or NULL when not in [p, end)); a CR is allowed only
 * right before the LF. Sets *bad on a bare CR or a NUL or other control in the line. */
static const char *line_end(const char *p, const char *end, int *bad) {
    for (const char *q = p; q < end; q++) {
        unsigned char c = (unsigned char)*q;
        if (c == '\n')
            return q;
        if (c == '\r' && (q + 1 >= end || q[1] != '\n')) {
            if (q + 1 < end)
                *bad = 1; /* a bare CR; at the very end it may be a CRLF half-read */
        } else if (c != '\r' && c != '\t' && (c < 0x20 || c == 0x7f)) {
            *bad = 1;
        }
    }
    return NULL;
}

/* Note Content-Length and Transfer-Encoding (name [p, colon), value up to eol): how the
 * body ends must be read the same way here as by libmicrohttpd, or a body could smuggle a
 * head past the gate; whatever is not plain is left to http.c's framing check. */
static void framing_field(ag_head_verdict *v, const char *p, const char *colon, const char *eol,
                          int *lengths, int *codings) {
    size_t name_len = (size_t)(colon - p);
    const char *a = colon + 1, *b = eol;
    while (a < b && (*a == ' ' || *a == '\t'))
        a++;
    while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
        b--;
    if (name_len == 14 && !strncasecmp(p, "content-length", 14)) {
        uint64_t x = 0;
        int ok = a < b && b - a <= 18;
        for (const char *q = a; ok && q < b; q++) {
            ok = *q >= '0' && *q <= '9';
            x = x * 10 + (uint64_t)(*q - '0');
        }
        if (!ok || (*lengths && x != v->content_length))
            v->body = AG_HEAD_BODY_UNKNOWN;
        v->content_length = x;
        (*lengths)++;
    } else if (name_len == 17 && !strncasecmp(p, "transfer-encoding", 17)) {
        if ((*codings)++ || b - a != 7 || strncasecmp(a, "chunked", 7))
            v->body = AG_HEAD_BODY_UNKNOWN;
    }
}

static int head_complete(ag_head_verdict *v, int lengths, int codings) {
    if (v->body != AG_HEAD_BODY_UNKNOWN)
        v->body = codings   ? (lengths ? AG_HEAD_BODY_UNKNOWN : AG_HEAD_BODY_CHUNKED)
                  : lengths ? AG_HEAD_BODY_LENGTH
                            : AG_HEAD_BODY_NONE;
    return 1;
}

static size_t trim_cr(const char *p, const char *lf) {
    return (size_t)(lf - p) - (lf > p && lf[-1] == '\r');
}

int ag_head_check(const char *buf, size_t n, const ag_head_limits *lim, ag_head_verdict *v) {
    memset(v, 0, sizeof *v);
    const char *p = buf, *end = buf + n;
    /* RFC 9112 2.2: at least one empty line before the request line may be ignored. */
    for (int i = 0; i < 4 && p < end && (*p == '\r' || *p == '\n'); i++)
        p += *p == '\r' && p + 1 < end && p[1] == '\n' ? 2 : 1;
    int bad = 0;
    const char *lf = line_end(p, end, &bad);
    size_t line_max = lim->max_target + 32;
    if (!lf) {
        if ((size_t)(end - p) > line_max)
            return refuse(v, 414, "uri_too_long", "the request line is too long");
        return bad ? refuse(v, 400, "bad_request", "a control character in the request line") : 0;
    }
    size_t len = trim_cr(p, lf);
    if (bad)
        return refuse(v, 400, "bad_request", "a control character in the request line");
    /* method SP target SP HTTP/x.y */
    const char *sp1 = memchr(p, ' ', len);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', len - (size_t)(sp1 + 1 - p)) : NULL;
    if (!sp1 || !sp2 || sp1 == p || sp2 == sp1 + 1)
        return refuse(v, 400, "bad_request", "malformed request line");
    size_t method_len = (size_t)(sp1 - p), target_len = (size_t)(sp2 - sp1 - 1);
    for (size_t i = 0; i < method_len; i++)
        if (!tchar((unsigned char)p[i]))
            return refuse(v, 400, "bad_request", "malformed method");
    snprintf(v->method, sizeof v->method, "%.*s",
             (int)(method_len < sizeof v->method ? method_len : sizeof v->method - 1), p);
    size_t args = 0;
    for (size_t i = 0; i < target_len; i++) {
        unsigned char c = (unsigned char)sp1[1 + i];
        if (c <= 0x20 || c >= 0x7f)
            return refuse(v, 400, "bad_request", "a space or non-ASCII byte in the target");
        args += c == '&' || c == '?';
    }
    snprintf(v->target, sizeof v->target, "%.*s",
             (int)(target_len < sizeof v->target ? target_len : sizeof v->target - 1), sp1 + 1);
    if (target_len > lim->max_target)
        return refuse(v, 414, "uri_too_long", "the request target is too long");
    if (args > lim->max_args)
        return refuse(v, 414, "uri_too_long", "too many query arguments");
    const char *version = sp2 + 1;
    size_t version_len = len - (size_t)(version - p);
    if (version_len != 8 || memcmp(version, "HTTP/", 5) != 0 || version[6] != '.' ||
        version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9')
        return refuse(v, 400, "bad_request", "malformed HTTP version");
    if (memcmp(version, "HTTP/1.1", 8) != 0 && memcmp(version, "HTTP/1.0", 8) != 0)
        return refuse(v, 505, "http_version_not_supported", "only HTTP/1.0 and 1.1 are served");

    /* Header lines up to the empty one. */
    int fields = 0, lengths = 0, codings = 0;
    for (p = lf + 1;;) {
        bad = 0;
        lf = line_end(p, end, &bad);
        if (bad)
            return refuse(v, 400, "bad_request", "a bare CR, NUL or control character in a header");
        if (!lf)
            break;
        size_t field_len = trim_cr(p, lf);
        if (field_len == 0) {
            v->head_bytes = (size_t)(lf + 1 - buf);
            return v->head_bytes > lim->max_head
                       ? refuse(v, 431, "headers_too_large", "the request head is too large")
                       : head_complete(v, lengths, codings);
        }
        if (*p == ' ' || *p == '\t')
            return refuse(v, 400, "bad_request", "obsolete line folding");
        const char *colon = memchr(p, ':', field_len);
        if (!colon || colon == p)
            return refuse(v, 400, "bad_request", "a header line without a name");
        for (const char *q = p; q < colon; q++)
            if (!tchar((unsigned char)*q))
                return refuse(v, 400, "bad_request",
                              "malformed header name (whitespace before the colon?)");
        if (++fields > lim->max_fields)
            return refuse(v, 431, "headers_too_large", "too many header fields");
        framing_field(v, p, colon, p + field_len, &lengths, &codings);
        p = lf + 1;
    }
    if ((size_t)(end - buf) > lim->max_head)
        return refuse(v, 431, "headers_too_large", "the request head is too large");
    return 0;
}
