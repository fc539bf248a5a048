/*
 * options.c - the query parameters of POST /api/v1/convert, validated at the boundary before
 * any body is read: model, portrait, side_by_side, max_side, format, quality, paste_faces,
 * face_model. Unknown or
 * repeated parameters are refused (400) so a typo never silently falls back to a default.
 */
#include "server.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void ag_reply_error_set(ag_reply_error *err, int status, const char *code, const char *fmt, ...) {
    va_list ap;
    err->status = status;
    err->code = code;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
}

void ag_convert_options_init(ag_convert_options *opts, int server_max_side) {
    memset(opts, 0, sizeof *opts);
    opts->model = 0;
    opts->max_side = server_max_side;
    opts->format = AG_FORMAT_PNG;
    opts->quality = AG_DEFAULT_QUALITY;
    opts->face_model = -1;
    ag_fuse_options_init(&opts->fusion); /* POST /api/v1/fuse */
    opts->source_face = opts->target_face = 1;
    opts->style = -1;
}

/* A decimal integer with no sign (ag_parse_int64, the one parser), at most 9 digits. */
static int parse_uint(const char *s, int *out) {
    long long v;
    if (ag_parse_int64(s, 0, 999999999, &v) != AG_OK)
        return -1;
    *out = (int)v;
    return 0;
}

int ag_option_flag(const char *s, int *out) {
    if (s && (!strcmp(s, "1") || !strcmp(s, "true")))
        return *out = 1, 0;
    if (s && (!strcmp(s, "0") || !strcmp(s, "false")))
        return *out = 0, 0;
    return -1;
}

/* Quote a client-supplied value into a message: printable ASCII only, truncated. */
static const char *printable(const char *s, char *buf, size_t cap) {
    size_t j = 0;
    if (!s)
        s = "";
    for (size_t i = 0; s[i] && j + 4 < cap; i++)
        buf[j++] = (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"' && s[i] != '\\') ? s[i] : '?';
    if (s[0] && j + 4 >= cap) {
        buf[j++] = '.';
        buf[j++] = '.';
        buf[j++] = '.';
    }
    buf[j] = '\0';
    return buf;
}

enum {
    SEEN_MODEL = 1u << 0,
    SEEN_PORTRAIT = 1u << 1,
    SEEN_SIDE_BY_SIDE = 1u << 2,
    SEEN_MAX_SIDE = 1u << 3,
    SEEN_FORMAT = 1u << 4,
    SEEN_QUALITY = 1u << 5,
    SEEN_PASTE_FACES = 1u << 6,
    SEEN_FACE_MODEL = 1u << 7,
    SEEN_FACE = 1u << 8,
    SEEN_RESTORE = 1u << 9,
    SEEN_UPSCALE = 1u << 10,
};

int ag_option_model(const char *key, const char *value, const char *const *names, int name_count,
                    ag_reply_error *err) {
    for (int i = 0; i < name_count; i++)
        if (value && !strcmp(value, names[i]))
            return i;
    char vq[48];
    ag_reply_error_set(err, 404, "model_not_found",
                       "unknown %s '%s' (GET /api/v1/models lists them)", key,
                       printable(value, vq, sizeof vq));
    return -1;
}

int ag_convert_options_check(const ag_convert_options *o, ag_reply_error *err) {
    if (o->restore && (o->portrait || o->paste_faces || o->faces_only)) {
        ag_reply_error_set(err, 400, "bad_option",
                           "restore works on the whole photo: not with portrait or paste_faces");
        return -1;
    }
    if (o->restore_only && !o->restore) {
        ag_reply_error_set(err, 400, "bad_option", "/api/v1/restore needs restore=1 or more");
        return -1;
    }
    if (o->upscale && o->faces_only) {
        ag_reply_error_set(err, 400, "bad_option", "upscale applies to images, not to /faces");
        return -1;
    }
    if (o->upscale_only && !o->upscale) {
        ag_reply_error_set(err, 400, "bad_option", "/api/v1/upscale needs upscale=2 or 4");
        return -1;
    }
    if (o->upscale_only && (o->portrait || o->paste_faces)) {
        ag_reply_error_set(err, 400, "bad_option",
                           "/api/v1/upscale keeps the photo as it is: not with portrait or "
                           "paste_faces");
        return -1;
    }
    if (o->paste_faces && o->portrait) {
        ag_reply_error_set(err, 400, "bad_option",
                           "paste_faces keeps the whole photo: not with portrait");
        return -1;
    }
    if (o->face && o->portrait != 1) {
        ag_reply_error_set(err, 400, "bad_option", "face applies only with portrait=face");
        return -1;
    }
    if (o->face_model >= 0 && !o->paste_faces) {
        ag_reply_error_set(err, 400, "bad_option", "face_model applies only with paste_faces=1");
        return -1;
    }
    return 0;
}

int ag_convert_option_set(ag_convert_options *opts, unsigned *seen, const char *key,
                          const char *value, const char *const *names, int name_count,
                          int server_max_side, ag_reply_error *err) {
    static const struct {
        const char *key;
        unsigned bit;
    } keys[] = {{"model", SEEN_MODEL},
                {"portrait", SEEN_PORTRAIT},
                {"side_by_side", SEEN_SIDE_BY_SIDE},
                {"max_side", SEEN_MAX_SIDE},
                {"format", SEEN_FORMAT},
                {"quality", SEEN_QUALITY},
                {"paste_faces", SEEN_PASTE_FACES},
                {"face_model", SEEN_FACE_MODEL},
                {"face", SEEN_FACE},
                {"restore", SEEN_RESTORE},
                {"upscale", SEEN_UPSCALE}};
    char kq[48], vq[48];
    unsigned bit = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (key && !strcmp(key, keys[i].key))
            bit = keys[i].bit;
    if (!bit) {
        ag_reply_error_set(err, 400, "unknown_option",
                           "unknown query parameter '%s' (known: model, portrait, side_by_side, "
                           "max_side, format, quality, paste_faces, face_model, face, restore, "
                           "upscale)",
                           printable(key, kq, sizeof kq));
        return -1;
    }
    if (*seen & bit) {
        ag_reply_error_set(err, 400, "bad_option", "query parameter '%s' given twice", key);
        return -1;
    }
    *seen |= bit;
    printable(value, vq, sizeof vq);
    int v;
    switch (bit) {
    case SEEN_MODEL:
        v = ag_option_model("model", value, names, name_count, err);
        return v < 0 ? -1 : (opts->model = v, 0); /* a bad value keeps the option */
    case SEEN_PORTRAIT:
        if (ag_option_flag(value, &opts->portrait) == 0 || (value && !strcmp(value, "face")))
            return opts->portrait = opts->portrait || (value && !strcmp(value, "face")), 0;
        if (value && (!strcmp(value, "center") || !strcmp(value, "centre")))
            return opts->portrait = 2, 0;
        ag_reply_error_set(err, 400, "bad_option",
                           "portrait must be face (or 1), center or 0, not '%s'", vq);
        return -1;
    case SEEN_PASTE_FACES:
        if (ag_option_flag(value, &opts->paste_faces) == 0)
            return 0;
        ag_reply_error_set(err, 400, "bad_option", "paste_faces must be 0 or 1, not '%s'", vq);
        return -1;
    case SEEN_FACE:
        if (parse_uint(value, &v) == 0 && v >= 1 && v <= AG_FACE_MAX) {
            opts->face = v;
            return 0;
        }
        ag_reply_error_set(err, 400, "bad_option",
                           "face must be a whole number from 1 (the largest) to %d, not '%s'",
                           AG_FACE_MAX, vq);
        return -1;
    case SEEN_RESTORE:
        if (parse_uint(value, &v) == 0 && v <= AG_SERVER_MAX_RESTORERS) {
            opts->restore = v;
            return 0;
        }
        ag_reply_error_set(err, 400, "bad_option",
                           "restore must be 0 or the number of a --restore-model (1 = the "
                           "first), not '%s'",
                           vq);
        return -1;
    case SEEN_UPSCALE:
        if (parse_uint(value, &v) == 0 && (v == 0 || ag_server_upscale_slot(v) >= 0)) {
            opts->upscale = v;
            return 0;
        }
        ag_reply_error_set(err, 400, "bad_option", "upscale must be 0, 2 or 4, not '%s'", vq);
        return -1;
    case SEEN_FACE_MODEL:
        v = ag_option_model("face_model", value, names, name_count, err);
        return v < 0 ? -1 : (opts->face_model = v, 0);
    case SEEN_SIDE_BY_SIDE:
        if (ag_option_flag(value, &opts->side_by_side) == 0)
            return 0;
        ag_reply_error_set(err, 400, "bad_option", "side_by_side must be 0 or 1, not '%s'", vq);
        return -1;
    case SEEN_MAX_SIDE:
        if (parse_uint(value, &v) == 0 && v >= AG_MIN_SIDE && v <= server_max_side) {
            opts->max_side = v;
            return 0;
        }
        ag_reply_error_set(err, 400, "bad_option",
                           "max_side must be a whole number from %d to %d (the server's "
                           "--max-side), not '%s'",
                           AG_MIN_SIDE, server_max_side, vq);
        return -1;
    case SEEN_FORMAT:
        if (value && (v = ag_format_parse(value)) >= 0) {
            opts->format = (ag_format)v;
            return 0;
        }
        ag_reply_error_set(err, 400, "bad_option", "format must be png, jpeg or webp, not '%s'",
                           vq);
        return -1;
    case SEEN_QUALITY:
        if (parse_uint(value, &v) == 0 && v >= 1 && v <= 100) {
            opts->quality = v;
            return 0;
        }
        ag_reply_error_set(err, 400, "bad_option",
                           "quality must be a whole number from 1 to 100, not '%s'", vq);
        return -1;
    }
    return -1;
}
