/*
 * upload.c - what a convert request body may be: the rules for Content-Type (decided from
 * the headers, before the body is read), picking the image out of a multipart body, and a
 * signature check so "not an image" (415) is told apart from "a damaged image" (422, which
 * only the decoder on a worker can say).
 */
#include "server.h"

#include <string.h>
#include <strings.h>

/* Media type of a Content-Type value, lower-cased, without parameters. */
static void media_type(const char *ct, char *out, size_t cap) {
    size_t j = 0;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    for (; *ct && *ct != ';' && *ct != ' ' && *ct != '\t' && j + 1 < cap; ct++)
        out[j++] = (*ct >= 'A' && *ct <= 'Z') ? (char)(*ct + 32) : *ct;
    out[j] = '\0';
}

static int boundary_char_ok(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           strchr("'()+_,-./:=? ", c) != NULL;
}

/* One parameter value at p (a token, or a quoted-string with its backslash escapes undone,
 * RFC 9110 5.6.6) into out (cap bytes, NULL: skipped); returns the end, or NULL when
 * malformed or too long. */
static const char *param_value(const char *p, char *out, size_t cap, size_t *len) {
    size_t n = 0;
    if (*p == '"') {
        for (p++; *p && *p != '"'; p++) {
            if (*p == '\\' && p[1])
                p++;
            if (out && n + 1 >= cap)
                return NULL;
            if (out)
                out[n] = *p;
            n++;
        }
        if (*p != '"')
            return NULL;
        p++;
    } else {
        for (; *p && *p != ';' && *p != ' ' && *p != '\t'; p++) {
            if (out && n + 1 >= cap)
                return NULL;
            if (out)
                out[n] = *p;
            n++;
        }
    }
    if (out)
        out[n] = '\0';
    *len = n;
    return p;
}

/* The boundary parameter of a multipart Content-Type (RFC 2046 §5.1.1: 1..70 characters
 * from a restricted set, quoted when it has spaces or specials). Parameters are walked one
 * by one, so a "boundary=" inside an earlier quoted value is that value's text, not ours. */
static int boundary_param(const char *ct, char out[AG_BOUNDARY_BYTES]) {
    const char *p = strchr(ct, ';');
    int found = 0;
    while (p && *p == ';') {
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        size_t name = strcspn(p, "=; \t");
        if (p[name] != '=')
            return -1; /* a parameter without a value */
        int ours = name == 8 && !strncasecmp(p, "boundary", 8);
        if (ours && found)
            return -1; /* given twice: which one? */
        size_t n = 0;
        p = param_value(p + name + 1, ours ? out : NULL, ours ? 71 : 0, &n);
        if (!p)
            return -1;
        if (ours) {
            for (size_t i = 0; i < n; i++)
                if (!boundary_char_ok((unsigned char)out[i]))
                    return -1;
            if (n == 0 || out[n - 1] == ' ')
                return -1;
            found = 1;
        }
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p && *p != ';')
            return -1;
    }
    return found ? 0 : -1;
}

int ag_upload_content_type(const char *content_type, ag_body_kind *kind,
                           char boundary[AG_BOUNDARY_BYTES], ag_reply_error *err) {
    char type[64];
    boundary[0] = '\0';
    if (!content_type || !content_type[0]) {
        *kind = AG_BODY_RAW;
        return 0;
    }
    media_type(content_type, type, sizeof type);
    if (!strcmp(type, "multipart/form-data")) {
        if (boundary_param(content_type, boundary) != 0) {
            ag_reply_error_set(err, 400, "bad_request",
                               "multipart/form-data needs a valid boundary parameter");
            return -1;
        }
        *kind = AG_BODY_MULTIPART;
        return 0;
    }
    if (!strncmp(type, "image/", 6) || !strcmp(type, "application/octet-stream")) {
        *kind = AG_BODY_RAW;
        return 0;
    }
    ag_reply_error_set(err, 415, "unsupported_media_type",
                       "Content-Type '%.60s' is not an image: send the image bytes as image/* or "
                       "application/octet-stream, or as multipart/form-data field 'image'",
                       type);
    return -1;
}

const char *ag_upload_sniff(const uint8_t *d, size_t n) {
    if (n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff)
        return "jpeg";
    if (n >= 8 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8))
        return "png";
    if (n >= 6 && (!memcmp(d, "GIF87a", 6) || !memcmp(d, "GIF89a", 6)))
        return "gif";
    if (n >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4))
        return "webp";
    if (n >= 4 && (!memcmp(d, "II*\0", 4) || !memcmp(d, "MM\0*", 4)))
        return "tiff";
    if (n >= 12 && !memcmp(d + 4, "ftyp", 4)) {
        static const char brands[][5] = {"heic", "heix", "hevc", "hevx", "heim",
                                         "heis", "mif1", "msf1", "avif", "avis"};
        for (size_t i = 0; i < sizeof brands / sizeof brands[0]; i++)
            if (!memcmp(d + 8, brands[i], 4))
                return "heif";
    }
    return NULL;
}

int ag_upload_image(const uint8_t *body, size_t size, ag_body_kind kind, const char *boundary,
                    const uint8_t **image, size_t *image_size, ag_reply_error *err) {
    const uint8_t *data = body;
    size_t n = size;
    if (kind == AG_BODY_MULTIPART) {
        ag_multipart_part part;
        int rc = ag_multipart_find(body, size, boundary, "image", &part);
        if (rc < 0) {
            ag_reply_error_set(err, 400, "bad_request", "malformed multipart/form-data body");
            return -1;
        }
        if (rc == 2) {
            ag_reply_error_set(err, 400, "bad_request",
                               "the multipart body has more than one field named 'image'");
            return -1;
        }
        if (rc > 0) {
            ag_reply_error_set(err, 400, "bad_request",
                               "the multipart body has no field named 'image'");
            return -1;
        }
        if (part.content_type[0]) {
            char type[64];
            media_type(part.content_type, type, sizeof type);
            if (strncmp(type, "image/", 6) != 0 && strcmp(type, "application/octet-stream") != 0) {
                ag_reply_error_set(err, 415, "unsupported_media_type",
                                   "the 'image' field is '%.60s', not an image", type);
                return -1;
            }
        }
        data = part.data;
        n = part.size;
    }
    if (n == 0) {
        ag_reply_error_set(err, 400, "bad_request", "the request has no image (empty body)");
        return -1;
    }
    if (!ag_upload_sniff(data, n)) {
        ag_reply_error_set(err, 415, "unsupported_media_type",
                           "the upload is not a JPEG, PNG, WebP, GIF, TIFF or HEIF image");
        return -1;
    }
    *image = data;
    *image_size = n;
    return 0;
}
