/*
 * fuzz_server.c - libFuzzer target for the server's request parsers: the Content-Type rules,
 * multipart/form-data and image signatures (upload.c, multipart.c) and the query options
 * (options.c), and the gate's reading of a request head (head.c). The first byte picks the
 * parser; the rest is the input. Sizes are capped like
 * the service caps them. Build and run with tests/server/fuzz.sh.
 */
#include "../../server/head.c"
#include "../../server/multipart.c"
#include "../../server/options.c"
#include "../../server/upload.c"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *cstring(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

static void fuzz_upload(const uint8_t *data, size_t size) {
    /* "<content type>\n<body>" */
    const uint8_t *nl = memchr(data, '\n', size < 512 ? size : 512);
    if (!nl)
        return;
    char *ct = cstring(data, (size_t)(nl - data));
    size_t body_size = size - (size_t)(nl - data) - 1;
    uint8_t *body = malloc(body_size ? body_size : 1); /* exact size: ASan sees overreads */
    if (!body)
        abort();
    memcpy(body, nl + 1, body_size);
    ag_body_kind kind;
    char boundary[AG_BOUNDARY_BYTES];
    ag_reply_error err;
    if (ag_upload_content_type(ct, &kind, boundary, &err) == 0) {
        const uint8_t *image;
        size_t n;
        if (ag_upload_image(body, body_size, kind, boundary, &image, &n, &err) == 0) {
            if (image < body || image + n > body + body_size || n == 0)
                abort();
        } else if (err.status != 400 && err.status != 415) {
            abort();
        }
    } else if (err.status != 400 && err.status != 415) {
        abort();
    }
    free(body);
    free(ct);
}

static void fuzz_options(const uint8_t *data, size_t size) {
    /* a query string: key=value&key=value... (NULL value when there is no '=') */
    static const char *const names[] = {"hayao", "shinkai", "paprika"};
    char *q = cstring(data, size);
    ag_convert_options o;
    ag_reply_error err;
    unsigned seen = 0;
    ag_convert_options_init(&o, 1024);
    for (char *save = NULL, *pair = strtok_r(q, "&", &save); pair;
         pair = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(pair, '=');
        if (eq)
            *eq = '\0';
        if (ag_convert_option_set(&o, &seen, pair, eq ? eq + 1 : NULL, names, 3, 1024, &err)) {
            if ((err.status != 400 && err.status != 404) || !err.message[0] ||
                strlen(err.message) >= sizeof err.message)
                abort();
            break;
        }
    }
    if (o.model < 0 || o.model > 2 || o.max_side < AG_MIN_SIDE || o.max_side > 1024 ||
        o.quality < 1 || o.quality > 100 || (o.portrait & ~1) || (o.side_by_side & ~1))
        abort();
    free(q);
}

static void fuzz_head(const uint8_t *data, size_t size) {
    static const ag_head_limits lim = {16 * 1024, 8192, 32, 64};
    char *buf = malloc(size ? size : 1); /* exact size: ASan sees overreads */
    if (!buf)
        abort();
    memcpy(buf, data, size);
    ag_head_verdict v;
    int rc = ag_head_check(buf, size, &lim, &v);
    if (rc == 1 && (v.head_bytes == 0 || v.head_bytes > size || v.head_bytes > lim.max_head))
        abort();
    if (rc == -1 && ((v.status != 400 && v.status != 414 && v.status != 431 && v.status != 505) ||
                     !v.code || !v.message[0]))
        abort();
    if (rc < -1 || rc > 1)
        abort();
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 256 * 1024)
        return 0;
    switch (data[0] % 3) {
    case 1: fuzz_options(data + 1, size - 1); break;
    case 2: fuzz_head(data + 1, size - 1); break;
    default: fuzz_upload(data + 1, size - 1); break;
    }
    return 0;
}
