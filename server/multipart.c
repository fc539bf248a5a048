/*
 * multipart.c - multipart/form-data (RFC 7578 over RFC 2046) on a complete body already in
 * memory: the server buffers the upload anyway (bounded by --max-upload-mb), so the parser
 * needs no streaming state, never allocates, and hands back a slice of the body.
 *
 *   preamble CRLF? "--" boundary CRLF headers CRLF CRLF data CRLF "--" boundary ... "--"
 *
 * Bounds: a part's header block is at most 8 KiB and 32 lines; at most 256 parts.
 */
#include "server.h"

#include <string.h>
#include <strings.h>

#define MAX_HEADER_BLOCK 8192
#define MAX_HEADER_LINES 32
#define MAX_PARTS 256

static const uint8_t *find(const uint8_t *hay, size_t hay_size, const void *needle,
                           size_t needle_size) {
    return memmem(hay, hay_size, needle, needle_size);
}

/* Copy a header parameter value (quoted or token) into out; returns 0 when present. */
static int header_param(const char *line, size_t len, const char *param, char *out, size_t cap) {
    size_t plen = strlen(param);
    size_t i = 0;
    /* Parameters follow ';' outside quotes. */
    int in_quotes = 0;
    for (; i < len; i++) {
        if (line[i] == '"')
            in_quotes = !in_quotes;
        if (line[i] != ';' || in_quotes)
            continue;
        size_t j = i + 1;
        while (j < len && (line[j] == ' ' || line[j] == '\t'))
            j++;
        if (j + plen >= len || strncasecmp(line + j, param, plen) != 0 || line[j + plen] != '=')
            continue;
        j += plen + 1;
        size_t k = 0;
        if (j < len && line[j] == '"') {
            j++;
            while (j < len && line[j] != '"') {
                if (line[j] == '\\' && j + 1 < len)
                    j++;
                if (k + 1 < cap)
                    out[k++] = line[j];
                j++;
            }
            if (j >= len)
                return -1; /* unterminated quote */
        } else {
            while (j < len && line[j] != ';' && line[j] != ' ' && line[j] != '\t') {
                if (k + 1 < cap)
                    out[k++] = line[j];
                j++;
            }
        }
        out[k] = '\0';
        return 0;
    }
    return -1;
}

/* Parse the header block [p, end) of one part into out (name, filename, content type). */
static int parse_part_headers(const uint8_t *p, const uint8_t *end, ag_multipart_part *out) {
    int lines = 0, have_disposition = 0;
    out->name[0] = out->filename[0] = out->content_type[0] = '\0';
    while (p < end) {
        const uint8_t *eol = find(p, (size_t)(end - p), "\r\n", 2);
        if (!eol)
            eol = end;
        if (++lines > MAX_HEADER_LINES)
            return -1;
        const char *line = (const char *)p;
        size_t len = (size_t)(eol - p);
        const char *colon = memchr(line, ':', len);
        if (!colon)
            return -1;
        size_t name_len = (size_t)(colon - line);
        const char *value = colon + 1;
        size_t value_len = len - name_len - 1;
        while (value_len && (*value == ' ' || *value == '\t'))
            value++, value_len--;
        if (name_len == 19 && !strncasecmp(line, "Content-Disposition", 19)) {
            if (value_len < 9 || strncasecmp(value, "form-data", 9) != 0)
                return -1;
            if (header_param(value, value_len, "name", out->name, sizeof out->name) != 0)
                return -1;
            header_param(value, value_len, "filename", out->filename, sizeof out->filename);
            have_disposition = 1;
        } else if (name_len == 12 && !strncasecmp(line, "Content-Type", 12)) {
            size_t n =
                value_len < sizeof out->content_type - 1 ? value_len : sizeof out->content_type - 1;
            memcpy(out->content_type, value, n);
            out->content_type[n] = '\0';
        }
        p = eol + 2;
    }
    return have_disposition ? 0 : -1;
}

int ag_multipart_walk(const uint8_t *body, size_t size, const char *boundary,
                      int (*each)(void *user, const ag_multipart_part *part), void *user) {
    char delim[AG_BOUNDARY_BYTES + 4];
    size_t blen = strlen(boundary);
    if (blen == 0 || blen > 70)
        return -1;
    /* "\r\n--boundary": the first delimiter may also start the body without the CRLF. */
    delim[0] = '\r';
    delim[1] = '\n';
    delim[2] = delim[3] = '-';
    memcpy(delim + 4, boundary, blen);
    size_t dlen = blen + 4;

    const uint8_t *end = body + size;
    const uint8_t *p;
    if (size >= dlen - 2 && memcmp(body, delim + 2, dlen - 2) == 0) {
        p = body + dlen - 2;
    } else {
        const uint8_t *d = find(body, size, delim, dlen);
        if (!d)
            return -1;
        p = d + dlen;
    }
    for (int parts = 0; parts < MAX_PARTS; parts++) {
        /* After a delimiter: "--" closes the body, otherwise optional padding then CRLF. */
        if (end - p >= 2 && p[0] == '-' && p[1] == '-')
            return 0;
        while (p < end && (*p == ' ' || *p == '\t'))
            p++;
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
            return -1;
        p += 2;
        size_t window =
            (size_t)(end - p) < MAX_HEADER_BLOCK + 4 ? (size_t)(end - p) : MAX_HEADER_BLOCK + 4;
        const uint8_t *headers_end;
        if (window >= 2 && p[0] == '\r' && p[1] == '\n')
            headers_end = p; /* no headers at all: not form-data, rejected below */
        else if ((headers_end = find(p, window, "\r\n\r\n", 4)) != NULL)
            headers_end += 2;
        else
            return -1;
        ag_multipart_part part;
        if (parse_part_headers(p, headers_end, &part) != 0)
            return -1;
        const uint8_t *data = headers_end + 2;
        const uint8_t *next = find(data, (size_t)(end - data), delim, dlen);
        if (!next)
            return -1;
        part.data = data;
        part.size = (size_t)(next - data);
        int stop = each(user, &part);
        if (stop)
            return stop;
        p = next + dlen;
    }
    return -1;
}

typedef struct field_search {
    const char *field;
    ag_multipart_part *out;
    int found;
} field_search;

static int match_field(void *user, const ag_multipart_part *part) {
    field_search *f = user;
    if (strcmp(part->name, f->field))
        return 0;
    if (f->found++)
        return 2;
    *f->out = *part;
    return 0;
}

int ag_multipart_find(const uint8_t *body, size_t size, const char *boundary, const char *field,
                      ag_multipart_part *out) {
    /* Every part is parsed up to the closing delimiter, so a field sent twice (which image
     * was meant?) or a body broken after the field is refused rather than half-used. */
    field_search f = {field, out, 0};
    int rc = ag_multipart_walk(body, size, boundary, match_field, &f);
    return rc ? rc : f.found ? 0 : 1;
}
