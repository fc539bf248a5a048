/*
 * test_server_parsers.c - unit tests of the server's input parsers: multipart/form-data,
 * the Content-Type rules and image signatures, the query options, the command line and the
 * gate's strict reading of a request head.
 * Includes the server sources to reach their statics (as the style guide allows).
 */
#include "test.h"

#include "../server/address.c"
#include "../server/cgroup.c"
#include "../server/config.c"
#include "../server/defaults.c"
#include "../server/head.c"
#include "../server/jobs_config.c"
#include "../server/multipart.c"
#include "../server/options.c"
#include "../server/upload.c"

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#define BND "XyZ123"

static const uint8_t *u8(const char *s) {
    return (const uint8_t *)s;
}

static int find_part(const char *body, const char *field, ag_multipart_part *part) {
    return ag_multipart_find(u8(body), strlen(body), BND, field, part);
}

static int multipart_basic(void) {
    const char *body = "--" BND "\r\n"
                       "Content-Disposition: form-data; name=\"note\"\r\n\r\n"
                       "hello\r\n"
                       "--" BND "\r\n"
                       "Content-Disposition: form-data; name=\"image\"; filename=\"a b.png\"\r\n"
                       "Content-Type: image/png\r\n\r\n"
                       "PNGDATA\r\n--not-the-boundary\r\nmore\r\n"
                       "--" BND "--\r\n";
    ag_multipart_part p;
    CHECK(find_part(body, "image", &p) == 0);
    CHECK(p.size == strlen("PNGDATA\r\n--not-the-boundary\r\nmore"));
    CHECK(memcmp(p.data, "PNGDATA", 7) == 0);
    CHECK(!strcmp(p.filename, "a b.png"));
    CHECK(!strcmp(p.content_type, "image/png"));
    CHECK(find_part(body, "note", &p) == 0 && p.size == 5);
    CHECK(find_part(body, "missing", &p) == 1);
    return 0;
}

static int multipart_preamble_and_case(void) {
    const char *body = "this is a preamble\r\n"
                       "--" BND "   \r\n"
                       "content-disposition: FORM-DATA; filename=\"x;y.jpg\"; name=image\r\n\r\n"
                       "\r\n--" BND "--";
    ag_multipart_part p;
    CHECK(find_part(body, "image", &p) == 0);
    CHECK(p.size == 0);
    CHECK(!strcmp(p.filename, "x;y.jpg"));
    return 0;
}

static int multipart_malformed(void) {
    ag_multipart_part p;
    /* no delimiter at all */
    CHECK(find_part("just bytes", "image", &p) == -1);
    /* no closing delimiter after the data */
    CHECK(find_part("--" BND "\r\nContent-Disposition: form-data; name=\"image\"\r\n\r\nDATA",
                    "image", &p) == -1);
    /* headers never end */
    CHECK(find_part("--" BND "\r\nContent-Disposition: form-data; name=\"image\"\r\n", "image",
                    &p) == -1);
    /* LF-only line ends are not multipart */
    CHECK(find_part("--" BND "\nContent-Disposition: form-data; name=\"image\"\n\nD\n--" BND "--",
                    "image", &p) == -1);
    /* a part without Content-Disposition, or not form-data, or without a name */
    CHECK(find_part("--" BND "\r\nContent-Type: image/png\r\n\r\nD\r\n--" BND "--", "image", &p) ==
          -1);
    CHECK(find_part("--" BND
                    "\r\nContent-Disposition: attachment; name=\"image\"\r\n\r\nD\r\n--" BND "--",
                    "image", &p) == -1);
    CHECK(find_part("--" BND "\r\nContent-Disposition: form-data\r\n\r\nD\r\n--" BND "--", "image",
                    &p) == -1);
    /* unterminated quote */
    CHECK(find_part("--" BND "\r\nContent-Disposition: form-data; name=\"image\r\n\r\nD\r\n--" BND
                    "--",
                    "image", &p) == -1);
    /* a header line without a colon */
    CHECK(find_part("--" BND "\r\nContent-Disposition: form-data; name=\"image\"\r\nbogus\r\n\r\n"
                    "D\r\n--" BND "--",
                    "image", &p) == -1);
    /* boundary length limits */
    CHECK(ag_multipart_find(u8("x"), 1, "", "image", &p) == -1);
    char longb[80];
    memset(longb, 'a', 71);
    longb[71] = '\0';
    CHECK(ag_multipart_find(u8("x"), 1, longb, "image", &p) == -1);
    return 0;
}

static int multipart_header_bounds(void) {
    /* A header block over 8 KiB is refused instead of scanned without end. */
    size_t n = 20000;
    char *body = malloc(n + 200);
    CHECK(body != NULL);
    int k =
        snprintf(body, 200, "--" BND "\r\nContent-Disposition: form-data; name=\"image\"\r\nX: ");
    memset(body + k, 'a', n);
    strcpy(body + k + n, "\r\n\r\nD\r\n--" BND "--");
    ag_multipart_part p;
    int rc = ag_multipart_find(u8(body), strlen(body), BND, "image", &p);
    free(body);
    CHECK(rc == -1);
    /* Too many header lines. */
    char many[2048] = "--" BND "\r\nContent-Disposition: form-data; name=\"image\"\r\n";
    for (int i = 0; i < 40; i++)
        strcat(many, "X: y\r\n");
    strcat(many, "\r\nD\r\n--" BND "--");
    CHECK(find_part(many, "image", &p) == -1);
    return 0;
}

/* Deterministic mutation fuzzing: the parser must never read out of bounds (run under
 * SANITIZER=address) and any part it returns lies inside the body. */
static int multipart_mutations(void) {
    const char *seed = "pre\r\n--" BND "\r\n"
                       "Content-Disposition: form-data; name=\"a\"\r\n\r\nxx\r\n"
                       "--" BND "\r\n"
                       "Content-Disposition: form-data; name=\"image\"; filename=\"f\"\r\n"
                       "Content-Type: image/jpeg\r\n\r\n\xff\xd8\xff\r\n"
                       "--" BND "--\r\n";
    size_t n = strlen(seed);
    uint8_t *buf = malloc(n + 64);
    CHECK(buf != NULL);
    uint32_t x = 12345;
    for (int iter = 0; iter < 200000; iter++) {
        size_t len = n;
        memcpy(buf, seed, n);
        int edits = 1 + (int)((x = x * 1103515245u + 12345u) >> 16) % 4;
        for (int e = 0; e < edits; e++) {
            x = x * 1103515245u + 12345u;
            size_t at = (x >> 8) % len;
            switch ((x >> 4) & 3) {
            case 0: buf[at] = (uint8_t)(x >> 20); break;
            case 1: /* truncate */ len = at; break;
            case 2: buf[at] = "\r\n-\";="[(x >> 20) % 6]; break;
            default:
                if (len < n + 60) {
                    memmove(buf + at + 1, buf + at, len - at);
                    buf[at] = "\r\n-"[(x >> 20) % 3];
                    len++;
                }
            }
            if (len == 0)
                break;
        }
        /* Exact-size heap copy so ASan catches any overread. */
        uint8_t *exact = malloc(len ? len : 1);
        CHECK(exact != NULL);
        memcpy(exact, buf, len);
        ag_multipart_part p;
        int rc = ag_multipart_find(exact, len, BND, "image", &p);
        if (rc == 0)
            CHECK(p.data >= exact && p.data + p.size <= exact + len);
        free(exact);
    }
    free(buf);
    return 0;
}

static int content_types(void) {
    ag_body_kind kind;
    char b[AG_BOUNDARY_BYTES];
    ag_reply_error e;
    CHECK(ag_upload_content_type(NULL, &kind, b, &e) == 0 && kind == AG_BODY_RAW);
    CHECK(ag_upload_content_type("image/png", &kind, b, &e) == 0 && kind == AG_BODY_RAW);
    CHECK(ag_upload_content_type(" Image/JPEG; q=1", &kind, b, &e) == 0 && kind == AG_BODY_RAW);
    CHECK(ag_upload_content_type("application/octet-stream", &kind, b, &e) == 0);
    CHECK(ag_upload_content_type("multipart/form-data; boundary=" BND, &kind, b, &e) == 0);
    CHECK(kind == AG_BODY_MULTIPART && !strcmp(b, BND));
    CHECK(ag_upload_content_type("Multipart/Form-Data; charset=x; BOUNDARY=\"a b:c\"", &kind, b,
                                 &e) == 0);
    CHECK(!strcmp(b, "a b:c"));
    CHECK(ag_upload_content_type("text/plain", &kind, b, &e) == -1 && e.status == 415);
    CHECK(ag_upload_content_type("application/json", &kind, b, &e) == -1 && e.status == 415);
    CHECK(ag_upload_content_type("application/x-www-form-urlencoded", &kind, b, &e) == -1 &&
          e.status == 415);
    CHECK(ag_upload_content_type("multipart/form-data", &kind, b, &e) == -1 && e.status == 400);
    CHECK(ag_upload_content_type("multipart/form-data; boundary=", &kind, b, &e) == -1);
    CHECK(ag_upload_content_type("multipart/form-data; boundary=\"abc", &kind, b, &e) == -1);
    CHECK(ag_upload_content_type("multipart/form-data; boundary=a{b", &kind, b, &e) == -1);
    char longct[200] = "multipart/form-data; boundary=";
    memset(longct + strlen(longct), 'b', 71);
    CHECK(ag_upload_content_type(longct, &kind, b, &e) == -1);
    /* Parameters walked with their quoting: a "boundary=" inside an earlier quoted value is
     * that value's text (issue 17, finding 9), escapes are undone, a second one is refused. */
    CHECK(ag_upload_content_type("multipart/form-data; x=\"a; boundary=evil\"; boundary=good",
                                 &kind, b, &e) == 0);
    CHECK(!strcmp(b, "good"));
    CHECK(ag_upload_content_type("multipart/form-data; x=\"q\\\"; boundary=evil\"; boundary=ok",
                                 &kind, b, &e) == 0);
    CHECK(!strcmp(b, "ok"));
    CHECK(ag_upload_content_type("multipart/form-data; x=\"a; boundary=evil\"", &kind, b, &e) ==
          -1);
    CHECK(ag_upload_content_type("multipart/form-data; boundary=a; boundary=b", &kind, b, &e) ==
          -1);
    CHECK(ag_upload_content_type("multipart/form-data; boundary=\"a\\\"b\"", &kind, b, &e) == -1);
    return 0;
}

static int signatures(void) {
    CHECK(!strcmp(ag_upload_sniff(u8("\xff\xd8\xff\xe0"), 4), "jpeg"));
    CHECK(!strcmp(ag_upload_sniff(u8("\x89PNG\r\n\x1a\n...."), 12), "png"));
    CHECK(!strcmp(ag_upload_sniff(u8("GIF89a.."), 8), "gif"));
    CHECK(!strcmp(ag_upload_sniff(u8("RIFF\0\0\0\0WEBPVP8 "), 16), "webp"));
    CHECK(!strcmp(ag_upload_sniff(u8("II*\0...."), 8), "tiff"));
    CHECK(!strcmp(ag_upload_sniff(u8("\0\0\0\x18"
                                     "ftypheic...."),
                                  16),
                  "heif"));
    CHECK(!strcmp(ag_upload_sniff(u8("\0\0\0\x18"
                                     "ftypavif...."),
                                  16),
                  "heif"));
    CHECK(ag_upload_sniff(u8("\0\0\0\x18"
                             "ftypmp42...."),
                          16) == NULL);
    CHECK(ag_upload_sniff(u8("RIFF\0\0\0\0WAVE"), 12) == NULL);
    CHECK(ag_upload_sniff(u8("\xff\xd8"), 2) == NULL);
    CHECK(ag_upload_sniff(u8("hello world"), 11) == NULL);
    CHECK(ag_upload_sniff(u8(""), 0) == NULL);
    return 0;
}

static int upload_image(void) {
    const uint8_t *img;
    size_t n;
    ag_reply_error e;
    CHECK(ag_upload_image(u8("\xff\xd8\xff\xe0xx"), 6, AG_BODY_RAW, "", &img, &n, &e) == 0);
    CHECK(n == 6);
    CHECK(ag_upload_image(u8(""), 0, AG_BODY_RAW, "", &img, &n, &e) == -1 && e.status == 400);
    CHECK(ag_upload_image(u8("text"), 4, AG_BODY_RAW, "", &img, &n, &e) == -1 && e.status == 415);
    const char *mp = "--" BND "\r\nContent-Disposition: form-data; name=\"image\"\r\n"
                     "Content-Type: text/plain\r\n\r\n\xff\xd8\xff\r\n--" BND "--";
    CHECK(ag_upload_image(u8(mp), strlen(mp), AG_BODY_MULTIPART, BND, &img, &n, &e) == -1);
    CHECK(e.status == 415);
    mp = "--" BND "\r\nContent-Disposition: form-data; name=\"image\"\r\n\r\n\xff\xd8\xff\r\n--" BND
         "--";
    CHECK(ag_upload_image(u8(mp), strlen(mp), AG_BODY_MULTIPART, BND, &img, &n, &e) == 0);
    CHECK(n == 3 && img[0] == 0xff);
    mp = "--" BND "\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\n\xff\xd8\xff\r\n--" BND
         "--";
    CHECK(ag_upload_image(u8(mp), strlen(mp), AG_BODY_MULTIPART, BND, &img, &n, &e) == -1);
    CHECK(e.status == 400 && strstr(e.message, "image"));
    return 0;
}

static int set(ag_convert_options *o, unsigned *seen, const char *k, const char *v,
               ag_reply_error *e) {
    static const char *const names[] = {"hayao", "shinkai"};
    return ag_convert_option_set(o, seen, k, v, names, 2, 1024, e);
}

/* Issue 29: every API parameter of the steps' table (ag_step_options) is one the convert
 * route's parser knows: a value is taken or refused as a value, never as an unknown key. */
static int step_options_on_the_api(void) {
    int count, checked = 0;
    const ag_step_option *o = ag_step_options(&count);
    for (int i = 0; i < count; i++) {
        if (!o[i].query)
            continue;
        ag_convert_options opts;
        ag_reply_error e = {0};
        unsigned seen = 0;
        ag_convert_options_init(&opts, 1024);
        opts.step = o[i].commands & AG_CMD_FUSE ? AG_CONVERT_FUSE : AG_CONVERT_STYLE;
        const char *value = !strcmp(o[i].query, "model") || !strcmp(o[i].query, "face_model") ||
                                    !strcmp(o[i].query, "style")
                                ? "hayao"
                                : "1";
        int rc = set(&opts, &seen, o[i].query, value, &e);
        CHECK_MSG(rc == 0 || !strstr(e.message, "unknown"), "%s: %s", o[i].query, e.message);
        checked++;
    }
    CHECK(checked >= 5);
    return 0;
}

/* The API's verdict on query parameter `row` = `value` on the row's route: 0 taken, 400
 * refused (the message states the row's range), -1 otherwise. */
static int api_verdict(const ag_step_option *row, double value) {
    ag_convert_options opts;
    ag_reply_error e = {0};
    unsigned seen = 0;
    char text[32], range[64];
    ag_convert_options_init(&opts, 1024);
    opts.step = row->commands & AG_CMD_FUSE ? AG_CONVERT_FUSE : AG_CONVERT_STYLE;
    snprintf(text, sizeof text, row->type == AG_OPTION_INT ? "%.0f" : "%g", value);
    if (set(&opts, &seen, row->query, text, &e) == 0)
        return 0;
    snprintf(range, sizeof range, "from %g to %g", row->min, row->max);
    if (e.status == 400 && strstr(e.message, range))
        return 400;
    fprintf(stderr, "  %s=%s: %d %s (range %s)\n", row->query, text, e.status, e.message, range);
    return -1;
}

/* Issue 29: the API's ranges are the step table's: for every numeric row with a query
 * parameter, its min and max are taken and just past them is a 400 that states the range.
 * (A row with choices, as upscale's 0, 2 and 4, is step_option_choices_on_the_api's.) */
static int step_option_ranges_on_the_api(void) {
    int count, checked = 0;
    const ag_step_option *o = ag_step_options(&count);
    for (int i = 0; i < count; i++) {
        if (!o[i].query || o[i].choices ||
            (o[i].type != AG_OPTION_INT && o[i].type != AG_OPTION_FLOAT))
            continue;
        double past = o[i].type == AG_OPTION_INT ? 1 : 0.01;
        CHECK_MSG(api_verdict(&o[i], o[i].max + past) == 400, "%s: max + %g", o[i].query, past);
        if (o[i].min - past != o[i].def)
            CHECK_MSG(api_verdict(&o[i], o[i].min - past) == 400, "%s: min - %g", o[i].query, past);
        CHECK_MSG(api_verdict(&o[i], o[i].min) == 0 && api_verdict(&o[i], o[i].max) == 0,
                  "%s: the range's ends", o[i].query);
        checked++;
    }
    CHECK(checked >= 10);
    return 0;
}

/* Issue 29 item 2: for every row with a query parameter and a fixed set of values, each
 * value is taken on the row's route and any other is a 400 bad_option that names them all
 * ("mode must be normal, blend or overlay, not 'sharpest'"); upscale's values are the
 * server's upscalers (server.h's slots) and 0. */
static int step_option_choices_on_the_api(void) {
    int count, checked = 0;
    const ag_step_option *o = ag_step_options(&count);
    for (int i = 0; i < count; i++) {
        if (!o[i].query || !o[i].choices)
            continue;
        ag_convert_options opts;
        ag_reply_error e;
        unsigned seen;
        for (int k = 0; o[i].choices[k]; k++) {
            ag_convert_options_init(&opts, 1024);
            opts.step = o[i].commands & AG_CMD_FUSE ? AG_CONVERT_FUSE : AG_CONVERT_STYLE, seen = 0;
            CHECK_MSG(set(&opts, &seen, o[i].query, o[i].choices[k], &e) == 0, "%s=%s: %s",
                      o[i].query, o[i].choices[k], e.message);
        }
        ag_convert_options_init(&opts, 1024);
        opts.step = o[i].commands & AG_CMD_FUSE ? AG_CONVERT_FUSE : AG_CONVERT_STYLE, seen = 0;
        char start[64];
        snprintf(start, sizeof start, "%s must be ", o[i].query);
        CHECK(set(&opts, &seen, o[i].query, "sharpest", &e) == -1);
        CHECK_MSG(e.status == 400 && !strcmp(e.code, "bad_option") &&
                      !strncmp(e.message, start, strlen(start)) &&
                      strstr(e.message, ", not 'sharpest'"),
                  "%s: %d %s", o[i].query, e.status, e.message);
        for (int k = 0; o[i].choices[k]; k++)
            CHECK_MSG(strstr(e.message, o[i].choices[k]), "%s: %s", o[i].query, e.message);
        checked++;
    }
    CHECK(checked >= 4);
    const ag_step_option *up = ag_step_option_query("upscale");
    CHECK(up && up->choices && !strcmp(up->choices[0], "0"));
    for (int k = 1; up->choices[k]; k++)
        CHECK(ag_server_upscale_slot(atoi(up->choices[k])) >= 0);
    for (int slot = 0; slot < AG_SERVER_UPSCALES; slot++) {
        char factor[8];
        snprintf(factor, sizeof factor, "%d", ag_server_upscale_factor(slot));
        CHECK_MSG(ag_step_option_choice(up, factor) > 0, "upscale=%s: not in the row", factor);
    }
    return 0;
}

static int query_options(void) {
    ag_convert_options o;
    ag_reply_error e;
    unsigned seen = 0;
    ag_convert_options_init(&o, 1024);
    CHECK(o.model == 0 && o.max_side == 1024 && o.format == AG_FORMAT_PNG && o.quality == 90);
    CHECK(set(&o, &seen, "model", "shinkai", &e) == 0 && o.model == 1);
    CHECK(set(&o, &seen, "portrait", "1", &e) == 0 && o.portrait == 1);
    CHECK(set(&o, &seen, "side_by_side", "true", &e) == 0 && o.side_by_side == 1);
    CHECK(set(&o, &seen, "max_side", "512", &e) == 0 && o.max_side == 512);
    CHECK(set(&o, &seen, "format", "jpg", &e) == 0 && o.format == AG_FORMAT_JPEG);
    CHECK(set(&o, &seen, "quality", "75", &e) == 0 && o.quality == 75);
    /* every key only once */
    CHECK(set(&o, &seen, "quality", "75", &e) == -1 && e.status == 400);

    struct {
        const char *k, *v;
        int status;
    } bad[] = {{"model", "nope", 404},
               {"model", NULL, 404},
               {"portrait", "2", 400},
               {"portrait", NULL, 400},
               {"portrait", "", 400},
               {"side_by_side", "y", 400},
               {"max_side", "7", 400},
               {"max_side", "1025", 400},
               {"max_side", "-5", 400},
               {"max_side", "12a", 400},
               {"max_side", "99999999999", 400},
               {"format", "gif", 400},
               {"format", NULL, 400},
               {"quality", "0", 400},
               {"quality", "101", 400},
               {"quality", " 5", 400},
               {"bogus", "1", 400},
               {NULL, "1", 400},
               {"Model", "hayao", 400}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        unsigned s = 0;
        ag_convert_options_init(&o, 1024);
        CHECK_MSG(set(&o, &s, bad[i].k, bad[i].v, &e) == -1 && e.status == bad[i].status, "%s=%s",
                  bad[i].k ? bad[i].k : "(null)", bad[i].v ? bad[i].v : "(null)");
        CHECK(e.code && e.message[0]);
        /* a refused value leaves the option as it was (the fuzzer's model=ao clobbered it) */
        CHECK(o.model == 0 && o.face_model == -1);
    }
    /* Client text in messages is made printable and bounded. */
    unsigned s = 0;
    CHECK(set(&o, &s, "format",
              "\x01\"<script>\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", &e) == -1);
    CHECK(!strchr(e.message, '\x01') && !strchr(e.message, '"') && strstr(e.message, "..."));
    return 0;
}

/* #35 item 6: fuse's options go through the same parser as convert's: twice is refused on
 * either route, from the query or the form, and a refusal names where the key came from. */
static int fuse_options(void) {
    static const char *const names[] = {"hayao", "shinkai"};
    ag_convert_options o;
    ag_reply_error e;
    unsigned seen = 0;
    ag_convert_options_init(&o, 1024);
    o.step = AG_CONVERT_FUSE;
    CHECK(ag_option_set(&o, &seen, 0, "ratio", "0.1", names, 2, 1024, &e) == 0);
    CHECK(o.fusion.shape_ratio == 0.1f && o.fusion.texture_ratio == 0.1f);
    CHECK(ag_option_set(&o, &seen, 0, "ratio", "0.9", names, 2, 1024, &e) == -1);
    CHECK(e.status == 400 && !strcmp(e.message, "query parameter 'ratio' given twice"));
    CHECK(o.fusion.shape_ratio == 0.1f); /* the first one stands */
    seen = 0;
    CHECK(ag_option_set(&o, &seen, 1, "mode", "blend", names, 2, 1024, &e) == 0);
    CHECK(ag_option_set(&o, &seen, 1, "mode", "overlay", names, 2, 1024, &e) == -1);
    CHECK(e.status == 400 && !strcmp(e.message, "form field 'mode' given twice"));
    CHECK(ag_option_set(&o, &seen, 1, "ratoi", "0.5", names, 2, 1024, &e) == -1);
    CHECK(e.status == 400 && !strcmp(e.code, "unknown_option"));
    CHECK(strstr(e.message, "unknown form field 'ratoi' (known: format, quality, ratio,") != NULL);
    CHECK(strstr(e.message, "target_face, paint_occluders, enhance)") &&
          !strstr(e.message, "portrait"));
    CHECK(ag_option_set(&o, &seen, 1, "quality", "80", names, 2, 1024, &e) == 0 && o.quality == 80);
    CHECK(ag_option_set(&o, &seen, 1, "portrait", "1", names, 2, 1024, &e) == -1);
    CHECK(e.status == 400 && strstr(e.message, "'portrait' does not apply to /api/v1/fuse"));
    CHECK(ag_option_set(&o, &seen, 0, "model", "hayao", names, 2, 1024, &e) == -1);
    CHECK(strstr(e.message, "style=NAME") != NULL);
    /* and convert does not take fuse's keys */
    ag_convert_options_init(&o, 1024);
    seen = 0;
    CHECK(ag_convert_option_set(&o, &seen, "ratio", "0.5", names, 2, 1024, &e) == -1);
    CHECK(strstr(e.message, "unknown query parameter 'ratio' (known: model,") != NULL);
    CHECK(strstr(e.message, "upscale)") && !strstr(e.message, "smooth"));
    return 0;
}

static int command_line(void) {
    ag_server_config c;
    char *ok[] = {"serve", "--host",          "0.0.0.0", "--port",       "0",    "--workers",
                  "2",     "--threads",       "4",       "--queue",      "3",    "--max-upload-mb",
                  "5",     "--max-pixels",    "4M",      "--max-side",   "512",  "--cache-mb",
                  "8",     "--model",         "hayao",   "--model",      "x.pt", "--queue-timeout",
                  "0.5",   "--drain-seconds", "2",       "--log-format", "json", "--quiet",
                  NULL};
    CHECK(ag_config_parse(&c, (int)(sizeof ok / sizeof ok[0]) - 1, ok, 8) == 0);
    CHECK(!strcmp(c.host, "0.0.0.0") && c.port == 0 && c.workers == 2 && c.threads == 4);
    CHECK(c.threads_per_worker == 2 && c.engine.threads == 2);
    CHECK(c.queue == 3 && c.max_upload_bytes == 5u << 20 && c.max_pixels == 4000000);
    CHECK(c.max_side == 512 && c.cache_bytes == 8u << 20 && c.model_count == 2);
    CHECK(c.queue_timeout_s == 0.5 && c.drain_s == 2 && c.log_format == AG_LOG_JSON && c.quiet);

    char *defaults[] = {"serve", NULL};
    CHECK(ag_config_parse(&c, 1, defaults, 6) == 0);
    CHECK(c.workers == 1 && c.threads == 6 && c.threads_per_worker == 6 && c.queue == 16);
    CHECK(c.max_upload_bytes == 10u << 20 && c.max_pixels == 16777216 && c.max_side == 1024);
    /* No --model: every bundled style (server.c loads them, hayao first). */
    CHECK(c.cache_bytes == 0 && c.model_count == 0 && c.max_memory_bytes == 0);

    /* Usage errors print to stderr; silence them while checking. */
    fflush(stderr);
    FILE *saved = stderr;
    stderr = fopen("/dev/null", "w");
    char *bad[][4] = {
        {"serve", "--workers", "0", NULL},      {"serve", "--port", "70000", NULL},
        {"serve", "--queue", "x", NULL},        {"serve", "--max-pixels", "1", NULL},
        {"serve", "--bogus", NULL, NULL},       {"serve", "--workers", NULL, NULL},
        {"serve", "extra", NULL, NULL},         {"serve", "--workers", "9", NULL},
        {"serve", "--log-format", "xml", NULL}, {"serve", "--queue-timeout", "0", NULL}};
    int failures = 0;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int argc = 0;
        while (bad[i][argc])
            argc++;
        if (ag_config_parse(&c, argc, bad[i], 8) != -1)
            failures++;
    }
    char *twice[] = {"serve", "--model", "a", "--model", "a", NULL};
    failures += ag_config_parse(&c, 5, twice, 8) != -1;
    fclose(stderr);
    stderr = saved;
    CHECK(failures == 0);
    return 0;
}

static int head_of(const char *raw, ag_head_verdict *v) {
    static const ag_head_limits lim = {1024, 256, 8, 16};
    return ag_head_check(raw, strlen(raw), &lim, v);
}

static int request_heads(void) {
    ag_head_verdict v;
    const char *ok = "GET /api/v1/status?request_id=x HTTP/1.1\r\nHost: t\r\nX-A:  b c \r\n\r\n";
    CHECK(head_of(ok, &v) == 1 && v.head_bytes == strlen(ok));
    CHECK(!strcmp(v.method, "GET") && !strncmp(v.target, "/api/v1/status", 14));
    /* Every proper prefix is incomplete, never refused. */
    char buf[256];
    for (size_t n = 0; n < strlen(ok); n++) {
        memcpy(buf, ok, n);
        static const ag_head_limits lim = {1024, 256, 8, 16};
        CHECK(ag_head_check(buf, n, &lim, &v) == 0);
    }
    CHECK(head_of("\r\nPOST / HTTP/1.0\nHost: t\n\n", &v) == 1); /* bare LF, leading CRLF */
    CHECK(head_of("GET http://h/x HTTP/1.1\r\n\r\n", &v) == 1);
    static const struct {
        const char *raw;
        int status;
    } bad[] = {
        {"GARBAGE\r\n\r\n", 400},
        {"GET / HTTP/2.0\r\n\r\n", 505},
        {"GET / HTTP/1.1x\r\n\r\n", 400},
        {"GET  / HTTP/1.1\r\n\r\n", 400},
        {"G(T / HTTP/1.1\r\n\r\n", 400},
        {"GET /\x80 HTTP/1.1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nX-A : a\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\n: a\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nX-A: \x01\r\n\r\n", 400},
        {"GET /?a&b&c&d&e&f&g&h&i HTTP/1.1\r\n\r\n", 414},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(head_of(bad[i].raw, &v) == -1);
        CHECK(v.status == bad[i].status && v.code && v.message[0]);
    }
    /* A NUL (strlen cannot carry it) and the size limits. */
    CHECK(ag_head_check("GET / HTTP/1.1\r\nX: a\0b\r\n\r\n", 26,
                        &(ag_head_limits){1024, 256, 8, 16}, &v) == -1 &&
          v.status == 400);
    char big[2048];
    memset(big, 'a', sizeof big);
    memcpy(big, "GET /", 5);
    CHECK(ag_head_check(big, sizeof big, &(ag_head_limits){1024, 256, 8, 16}, &v) == -1 &&
          v.status == 414);
    int n = snprintf(big, sizeof big, "GET / HTTP/1.1\r\n");
    while (n < (int)sizeof big - 16)
        n += snprintf(big + n, sizeof big - (size_t)n, "X-H: 0123456789\r\n");
    CHECK(ag_head_check(big, (size_t)n, &(ag_head_limits){1024, 256, 8, 16}, &v) == -1 &&
          v.status == 431);
    return 0;
}

/* How a head says its body ends: the gate follows it to the next head, so it must read it
 * as libmicrohttpd does, and leave anything else (refused by http.c's framing check) as
 * unknown rather than guess. */
static int head_body_framing(void) {
    static const struct {
        const char *fields;
        int body;
        uint64_t length;
    } cases[] = {
        {"", AG_HEAD_BODY_NONE, 0},
        {"Content-Length: 42\r\n", AG_HEAD_BODY_LENGTH, 42},
        {"content-length:\t 7 \r\n", AG_HEAD_BODY_LENGTH, 7},
        {"Content-Length: 0\r\n", AG_HEAD_BODY_LENGTH, 0},
        {"Content-Length: 5\r\nContent-Length: 5\r\n", AG_HEAD_BODY_LENGTH, 5},
        {"Transfer-Encoding: chunked\r\n", AG_HEAD_BODY_CHUNKED, 0},
        {"transfer-encoding: CHUNKED \r\n", AG_HEAD_BODY_CHUNKED, 0},
        {"Content-Length: 5\r\nContent-Length: 6\r\n", AG_HEAD_BODY_UNKNOWN, 0},
        {"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", AG_HEAD_BODY_UNKNOWN, 0},
        {"Transfer-Encoding: gzip, chunked\r\n", AG_HEAD_BODY_UNKNOWN, 0},
        {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", AG_HEAD_BODY_UNKNOWN, 0},
        {"Transfer-Encoding: identity\r\n", AG_HEAD_BODY_UNKNOWN, 0},
        {"Content-Length: +5\r\n", AG_HEAD_BODY_UNKNOWN, 0},
        {"Content-Length: 5 5\r\n", AG_HEAD_BODY_UNKNOWN, 0},
        {"Content-Length: 1234567890123456789\r\n", AG_HEAD_BODY_UNKNOWN, 0},
        {"Content-Length-X: 5\r\n", AG_HEAD_BODY_NONE, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char raw[256];
        snprintf(raw, sizeof raw, "POST /api/v1/convert HTTP/1.1\r\nHost: t\r\n%s\r\n",
                 cases[i].fields);
        ag_head_verdict v;
        CHECK(head_of(raw, &v) == 1);
        CHECK(v.body == cases[i].body);
        CHECK(v.body != AG_HEAD_BODY_LENGTH || v.content_length == cases[i].length);
    }
    return 0;
}

/* --trusted-proxy and X-Forwarded-For: only the proxies' own hops are skipped, right to left;
 * a malformed hop leaves the proxy's address. */
/* #35 item 7: an IPv6 client is its /64 (--client-ipv6-prefix), so the 2^64 addresses one
 * host is given are one client for the fusion cache and the jobs' turns; IPv4 (also mapped
 * into IPv6) is each address. */
static int client_keys(void) {
    ag_server_config c;
    char *defaults[] = {"serve", NULL};
    CHECK(ag_config_parse(&c, 1, defaults, 8) == 0 && c.client_ipv6_prefix == 64);
    static const struct {
        const char *address;
        int bits;
        const char *want;
    } cases[] = {
        {"2001:db8:1:2:aaaa:bbbb:cccc:1", 64, "2001:db8:1:2::/64"},
        {"2001:db8:1:2::c", 64, "2001:db8:1:2::/64"}, /* the 12th address: the same client */
        {"2001:db8:1:3::1", 64, "2001:db8:1:3::/64"}, /* the next /64: another */
        {"2001:db8:1:2:aaaa::1", 56, "2001:db8:1::/56"},
        {"2001:db8:1:2:aaaa::1", 128, "2001:db8:1:2:aaaa::1"},
        {"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", 127,
         "2001:db8:ffff:ffff:ffff:ffff:ffff:fffe/127"},
        {"::ffff:203.0.113.7", 64, "::ffff:203.0.113.7"},
        {"203.0.113.7", 64, "203.0.113.7"},
        {"?", 64, "?"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[AG_CLIENT_BYTES];
        ag_client_key(cases[i].address, cases[i].bits, out);
        CHECK_MSG(!strcmp(out, cases[i].want), "'%s' /%d -> '%s', want '%s'", cases[i].address,
                  cases[i].bits, out, cases[i].want);
    }
    char *prefix[] = {"serve", "--client-ipv6-prefix", "48", NULL};
    CHECK(ag_config_parse(&c, 3, prefix, 8) == 0 && c.client_ipv6_prefix == 48);
    fflush(stderr);
    FILE *saved = stderr;
    stderr = fopen("/dev/null", "w");
    char *zero[] = {"serve", "--client-ipv6-prefix", "0", NULL};
    int rc = ag_config_parse(&c, 3, zero, 8);
    fclose(stderr);
    stderr = saved;
    CHECK(rc == -1);
    return 0;
}

/* #35 item 8: the settings not given come from the memory level; the limit is
 * --max-memory-mb, else the cgroup's (server/cgroup.c), else the RAM. */
static int memory_defaults(void) {
    ag_server_config c;
    char *args[] = {"serve", "--queue", "16", NULL};
    CHECK(ag_config_parse(&c, 3, args, 8) == 0);
    CHECK(ag_config_given(&c, "queue") && !ag_config_given(&c, "max-pixels"));
    ag_defaults_apply(&c, ag_defaults_levels() - 1);
    CHECK(c.queue == 16 && c.max_pixels < (size_t)4096 * 4096);
    CHECK(ag_fuse_max_pixels(&c) <= c.max_pixels && c.upscale_max_bytes == (size_t)32 << 20);
    char text[300];
    ag_defaults_given(&c, text, sizeof text);
    CHECK(!strcmp(text, "--queue"));
    ag_defaults_describe(&c, text, sizeof text);
    CHECK(strstr(text, "queue 16 (given), max-pixels 3.0M,") != NULL);
    /* the cgroup's limit: server/cgroup.c, the one reader (tests/test_cgroup.c) */
    size_t limit = ag_memory_limit(&c, text, sizeof text);
    CHECK(limit > 0 && (strstr(text, "RAM") || strstr(text, "cgroup")));
    c.max_memory_bytes = (size_t)1 << 30;
    CHECK(ag_memory_limit(&c, text, sizeof text) == (size_t)1 << 30 &&
          !strcmp(text, "--max-memory-mb"));
    return 0;
}

static int forwarded_clients(void) {
    ag_server_config c;
    char *args[] = {"serve", "--trusted-proxy", "10.0.0.1", "--trusted-proxy", "::1", NULL};
    CHECK(ag_config_parse(&c, 5, args, 8) == 0);
    CHECK(c.trusted_proxy_count == 2 && ag_trusted_proxy(&c, "10.0.0.1"));
    CHECK(ag_trusted_proxy(&c, "::1") && !ag_trusted_proxy(&c, "10.0.0.2"));
    static const struct {
        const char *xff, *want;
    } cases[] = {
        {"203.0.113.7", "203.0.113.7"},
        {"1.2.3.4, 203.0.113.7", "203.0.113.7"},  /* the client's own claim is not taken */
        {"203.0.113.7, 10.0.0.1", "203.0.113.7"}, /* a second trusted hop is skipped */
        {" 2001:DB8::0:1 ,::1", "2001:db8::1"},   /* IPv6, canonical */
        {"10.0.0.1", "10.0.0.1"},                 /* only proxies: the proxy */
        {"203.0.113.7, bogus", "10.0.0.1"},       /* malformed nearest hop */
        {"", "10.0.0.1"},
        {"203.0.113.7,", "10.0.0.1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[AG_CLIENT_BYTES] = "10.0.0.1";
        ag_forwarded_client(&c, cases[i].xff, out);
        CHECK_MSG(!strcmp(out, cases[i].want), "'%s' -> '%s', want '%s'", cases[i].xff, out,
                  cases[i].want);
    }
    fflush(stderr);
    FILE *saved = stderr;
    stderr = fopen("/dev/null", "w");
    char *bad[] = {"serve", "--trusted-proxy", "proxy.local", NULL};
    int rc = ag_config_parse(&c, 3, bad, 8);
    fclose(stderr);
    stderr = saved;
    CHECK(rc == -1);
    return 0;
}

TEST_MAIN(TEST(multipart_basic), TEST(multipart_preamble_and_case), TEST(multipart_malformed),
          TEST(multipart_header_bounds), TEST(multipart_mutations), TEST(content_types),
          TEST(signatures), TEST(upload_image), TEST(query_options), TEST(step_options_on_the_api),
          TEST(step_option_choices_on_the_api), TEST(step_option_ranges_on_the_api),
          TEST(fuse_options), TEST(command_line), TEST(request_heads), TEST(head_body_framing),
          TEST(forwarded_clients), TEST(client_keys), TEST(memory_defaults))
