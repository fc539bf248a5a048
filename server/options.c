/*
 * options.c - the one parser of a request's options, for every route that takes them:
 * POST /api/v1/convert (and restore, upscale, faces, jobs) as query parameters, POST
 * /api/v1/fuse as query parameters or text fields of its form. One table says which keys
 * each route takes; an unknown key (named as what it was: a query parameter or a form
 * field), a key given twice, or convert's option on the fuse route is refused (400), so a
 * typo never silently falls back to a default, and the last of two never silently wins.
 */
#include "server.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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
    opts->codeformer_fidelity = 0.5f;
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

enum { ROUTE_CONVERT = 1, ROUTE_FUSE = 2 };

/* Every option of every route; an option's bit in `seen` is 1 << its index. */
enum {
    OPT_MODEL,
    OPT_PORTRAIT,
    OPT_SIDE_BY_SIDE,
    OPT_MAX_SIDE,
    OPT_FORMAT,
    OPT_QUALITY,
    OPT_PASTE_FACES,
    OPT_FACE_MODEL,
    OPT_FACE,
    OPT_RESTORE,
    OPT_CODEFORMER_FIDELITY,
    OPT_UPSCALE,
    OPT_RATIO,
    OPT_SHAPE_RATIO,
    OPT_TEXTURE_RATIO,
    OPT_SMOOTH,
    OPT_BRIGHTNESS,
    OPT_CONTRAST,
    OPT_SATURATION,
    OPT_MODE,
    OPT_STYLE,
    OPT_ANIME_TEMPLATE,
    OPT_SIZE,
    OPT_SOURCE_FACE,
    OPT_TARGET_FACE,
    OPT_PAINT_OCCLUDERS,
    OPT_ENHANCE,
};

/* Query parameter `key`'s number in its row's range (src/pipeline/options.c): 0, or -1 with
 * a 400 that states the range. */
static int parse_step_float(const char *key, const char *value, double *out, ag_reply_error *err) {
    const ag_step_option *row = ag_step_option_query(key);
    char *end, vq[48];
    double v = value ? strtod(value, &end) : 0;
    if (row && value && end != value && !*end && v >= row->min && v <= row->max)
        return *out = v, 0;
    ag_reply_error_set(err, 400, "bad_option", "%s must be a number from %g to %g, not '%s'", key,
                       row ? row->min : 0.0, row ? row->max : 0.0, printable(value, vq, sizeof vq));
    return -1;
}

/* Query parameter `key`'s value among its row's choices: the index, or -1 with a 400 that
 * names them (and `extra`, other values the route takes). */
static int parse_step_choice(const char *key, const char *value, const char *const *extra,
                             ag_reply_error *err) {
    const ag_step_option *row = ag_step_option_query(key);
    int i = row ? ag_step_option_choice(row, value) : -1;
    if (i >= 0)
        return i;
    char vq[48], message[sizeof err->message];
    if (row)
        ag_step_option_refusal(row, key, extra, printable(value, vq, sizeof vq), message,
                               sizeof message);
    else
        snprintf(message, sizeof message, "%s: not a choice of the step table", key);
    ag_reply_error_set(err, 400, "bad_option", "%s", message);
    return -1;
}

static const struct {
    const char *key;
    int routes;
} option_keys[] = {
    [OPT_MODEL] = {"model", ROUTE_CONVERT},
    [OPT_PORTRAIT] = {"portrait", ROUTE_CONVERT},
    [OPT_SIDE_BY_SIDE] = {"side_by_side", ROUTE_CONVERT},
    [OPT_MAX_SIDE] = {"max_side", ROUTE_CONVERT},
    [OPT_FORMAT] = {"format", ROUTE_CONVERT | ROUTE_FUSE},
    [OPT_QUALITY] = {"quality", ROUTE_CONVERT | ROUTE_FUSE},
    [OPT_PASTE_FACES] = {"paste_faces", ROUTE_CONVERT},
    [OPT_FACE_MODEL] = {"face_model", ROUTE_CONVERT},
    [OPT_FACE] = {"face", ROUTE_CONVERT},
    [OPT_RESTORE] = {"restore", ROUTE_CONVERT},
    [OPT_CODEFORMER_FIDELITY] = {"codeformer_fidelity", ROUTE_CONVERT},
    [OPT_UPSCALE] = {"upscale", ROUTE_CONVERT},
    [OPT_RATIO] = {"ratio", ROUTE_FUSE},
    [OPT_SHAPE_RATIO] = {"shape_ratio", ROUTE_FUSE},
    [OPT_TEXTURE_RATIO] = {"texture_ratio", ROUTE_FUSE},
    [OPT_SMOOTH] = {"smooth", ROUTE_FUSE},
    [OPT_BRIGHTNESS] = {"brightness", ROUTE_FUSE},
    [OPT_CONTRAST] = {"contrast", ROUTE_FUSE},
    [OPT_SATURATION] = {"saturation", ROUTE_FUSE},
    [OPT_MODE] = {"mode", ROUTE_FUSE},
    [OPT_STYLE] = {"style", ROUTE_FUSE},
    [OPT_ANIME_TEMPLATE] = {"anime_template", ROUTE_FUSE},
    [OPT_SIZE] = {"size", ROUTE_FUSE},
    [OPT_SOURCE_FACE] = {"source_face", ROUTE_FUSE},
    [OPT_TARGET_FACE] = {"target_face", ROUTE_FUSE},
    [OPT_PAINT_OCCLUDERS] = {"paint_occluders", ROUTE_FUSE},
    [OPT_ENHANCE] = {"enhance", ROUTE_FUSE},
};
#define OPTION_KEYS ((int)(sizeof option_keys / sizeof option_keys[0]))
_Static_assert(OPTION_KEYS <= 32, "`seen` holds one bit per option");

static int option_index(const char *key) {
    for (int i = 0; key && i < OPTION_KEYS; i++)
        if (!strcmp(key, option_keys[i].key))
            return i;
    return -1;
}

/* "unknown query parameter 'x' (known: ...)", the route's keys listed from the table. */
static void refuse_unknown(const char *key, const char *source, int route, ag_reply_error *err) {
    char known[320] = "", kq[48];
    size_t len = 0;
    for (int i = 0; i < OPTION_KEYS; i++)
        if ((option_keys[i].routes & route) && len < sizeof known)
            len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", len ? ", " : "",
                                    option_keys[i].key);
    ag_reply_error_set(err, 400, "unknown_option", "unknown %s '%s' (known: %s)", source,
                       printable(key, kq, sizeof kq), known);
}

/* Convert's option on the fuse route: refused, never silently ignored. The fusion's style is
 * style=NAME (the CLI's --style), not convert's model=. */
static void refuse_not_applied(const char *key, ag_reply_error *err) {
    if (!strcmp(key, "model"))
        ag_reply_error_set(err, 400, "bad_option",
                           "'model' does not apply to /api/v1/fuse: its style is style=NAME (the "
                           "CLI's --style)");
    else
        ag_reply_error_set(err, 400, "bad_option",
                           "'%s' does not apply to /api/v1/fuse (to stylise the fusion, "
                           "style=NAME)",
                           key);
}

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
    if (o->restore && (o->portrait || o->paste_faces || o->step == AG_CONVERT_FACES)) {
        ag_reply_error_set(err, 400, "bad_option",
                           "restore works on the whole photo: not with portrait or paste_faces");
        return -1;
    }
    if (o->step == AG_CONVERT_RESTORE && !o->restore) {
        ag_reply_error_set(err, 400, "bad_option", "/api/v1/restore needs restore=1 or more");
        return -1;
    }
    if (o->upscale && o->step == AG_CONVERT_FACES) {
        ag_reply_error_set(err, 400, "bad_option", "upscale applies to images, not to /faces");
        return -1;
    }
    if (o->step == AG_CONVERT_UPSCALE && !o->upscale) {
        ag_reply_error_set(err, 400, "bad_option", "/api/v1/upscale needs upscale=2 or 4");
        return -1;
    }
    if (o->step == AG_CONVERT_UPSCALE && (o->portrait || o->paste_faces)) {
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

/* One value of convert's option `key` (known to be one). */
static int convert_value(ag_convert_options *opts, const char *key, const char *value,
                         const char *const *names, int name_count, int server_max_side,
                         ag_reply_error *err) {
    char vq[48];
    printable(value, vq, sizeof vq);
    int v;
    switch (option_index(key)) {
    case OPT_MODEL:
        v = ag_option_model("model", value, names, name_count, err);
        return v < 0 ? -1 : (opts->model = v, 0); /* a bad value keeps the option */
    case OPT_PORTRAIT: {                          /* 1 face, 2 center or centre; also 0 and 1 */
        static const char *const flags[] = {"0", "1", NULL};
        if (ag_option_flag(value, &opts->portrait) == 0)
            return 0;
        v = parse_step_choice(key, value, flags, err);
        return v < 0 ? -1 : (opts->portrait = v == 0 ? 1 : 2, 0);
    }
    case OPT_PASTE_FACES:
        if (ag_option_flag(value, &opts->paste_faces) == 0)
            return 0;
        ag_reply_error_set(err, 400, "bad_option", "paste_faces must be 0 or 1, not '%s'", vq);
        return -1;
    case OPT_FACE:
        if (parse_uint(value, &v) == 0 && v >= 1 && v <= AG_FACE_MAX) {
            opts->face = v;
            return 0;
        }
        ag_reply_error_set(err, 400, "bad_option",
                           "face must be a whole number from 1 (the largest) to %d, not '%s'",
                           AG_FACE_MAX, vq);
        return -1;
    case OPT_RESTORE:
        if (parse_uint(value, &v) == 0 && v <= AG_SERVER_MAX_RESTORERS) {
            opts->restore = v;
            return 0;
        }
        ag_reply_error_set(err, 400, "bad_option",
                           "restore must be 0 or the number of a --restore-model (1 = the "
                           "first), not '%s'",
                           vq);
        return -1;
    case OPT_CODEFORMER_FIDELITY: {
        double w;
        if (parse_step_float(key, value, &w, err))
            return -1;
        opts->codeformer_fidelity = (float)w;
        opts->codeformer_fidelity_given = 1;
        return 0;
    }
    case OPT_UPSCALE: { /* the row's choices, as numbers ("02" is 2) */
        char number[16];
        int parsed = parse_uint(value, &v) == 0;
        v = parsed ? v : 0;
        if (parsed)
            snprintf(number, sizeof number, "%d", v);
        if (parse_step_choice(key, parsed ? number : value, NULL, err) < 0)
            return -1;
        opts->upscale = v;
        return 0;
    }
    case OPT_FACE_MODEL:
        v = ag_option_model("face_model", value, names, name_count, err);
        return v < 0 ? -1 : (opts->face_model = v, 0);
    case OPT_SIDE_BY_SIDE:
        if (ag_option_flag(value, &opts->side_by_side) == 0)
            return 0;
        ag_reply_error_set(err, 400, "bad_option", "side_by_side must be 0 or 1, not '%s'", vq);
        return -1;
    case OPT_MAX_SIDE:
        if (parse_uint(value, &v) == 0 && v >= AG_MIN_SIDE && v <= server_max_side) {
            opts->max_side = v;
            return 0;
        }
        ag_reply_error_set(err, 400, "bad_option",
                           "max_side must be a whole number from %d to %d (the server's "
                           "--max-side), not '%s'",
                           AG_MIN_SIDE, server_max_side, vq);
        return -1;
    case OPT_FORMAT:
        if (value && (v = ag_format_parse(value)) >= 0) {
            opts->format = (ag_format)v;
            return 0;
        }
        ag_reply_error_set(err, 400, "bad_option", "format must be png, jpeg or webp, not '%s'",
                           vq);
        return -1;
    case OPT_QUALITY:
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

/* The value of one fusion option (ag_option_set has checked the key and that it is not
 * given twice): 0 set, -1 bad value (err filled), 1 not a fusion key. */
static int fuse_value(ag_convert_options *o, const char *key, const char *value,
                      const char *const *names, int name_count, ag_reply_error *err) {
    static const char *const floats[] = {"ratio",      "shape_ratio", "texture_ratio", "smooth",
                                         "brightness", "contrast",    "saturation"};
    ag_fuse_options *f = &o->fusion;
    float *slots[] = {&f->shape_ratio, &f->shape_ratio, &f->texture_ratio, &f->smooth,
                      &f->brightness,  &f->contrast,    &f->saturation};
    if (!key)
        return 1;
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
        if (strcmp(key, floats[i]))
            continue;
        double v;
        if (parse_step_float(key, value, &v, err))
            return -1;
        *slots[i] = (float)v;
        if (i == 0)
            f->texture_ratio = (float)v;
        return 0;
    }
    if (!strcmp(key, "mode")) {
        int m = parse_step_choice(key, value, NULL, err);
        return m < 0 ? -1 : (f->mode = (ag_fuse_mode)m, 0);
    }
    if (!strcmp(key, "style")) { /* the CLI's --style; a loaded model, as convert's model= */
        int v = ag_option_model("style", value, names, name_count, err);
        return v < 0 ? -1 : (o->style = v, 0);
    }
    if (!strcmp(key, "anime_template")) { /* the CLI's --anime-template */
        if (ag_option_flag(value, &o->anime_template) == 0)
            return 0;
        ag_reply_error_set(err, 400, "bad_option", "anime_template must be 0 or 1");
        return -1;
    }
    if (!strcmp(key, "paint_occluders")) { /* the CLI's --paint-occluders */
        int paint;
        if (ag_option_flag(value, &paint) == 0)
            return f->keep_occluders = !paint, 0;
        ag_reply_error_set(err, 400, "bad_option", "paint_occluders must be 0 or 1");
        return -1;
    }
    if (!strcmp(key, "enhance")) { /* the CLI's --enhance */
        int e = parse_step_choice(key, value, NULL, err);
        return e < 0 ? -1 : (f->enhance = (ag_fuse_enhance)e, 0);
    }
    int *ints[3] = {&f->size, &o->source_face, &o->target_face};
    static const char *const int_keys[3] = {"size", "source_face", "target_face"};
    for (int i = 0; i < 3; i++) {
        if (strcmp(key, int_keys[i]))
            continue;
        const ag_step_option *row = ag_step_option_query(key);
        long long v;
        if (i == 0 && value && !strcmp(value, "original"))
            return f->size = 0, 0;
        if (!value || ag_parse_int64(value, (long long)row->min, (long long)row->max, &v) != 0) {
            ag_reply_error_set(err, 400, "bad_option", "%s must be a whole number from %g to %g%s",
                               key, row->min, row->max, i == 0 ? " (or original)" : "");
            return -1;
        }
        *ints[i] = (int)v;
        return 0;
    }
    return 1;
}

int ag_option_set(ag_convert_options *opts, unsigned *seen, int form_field, const char *key,
                  const char *value, const char *const *names, int name_count, int server_max_side,
                  ag_reply_error *err) {
    const char *source = form_field ? "form field" : "query parameter";
    int route = opts->step == AG_CONVERT_FUSE ? ROUTE_FUSE : ROUTE_CONVERT, i = option_index(key);
    if (i < 0) {
        refuse_unknown(key, source, route, err);
        return -1;
    }
    if (!(option_keys[i].routes & route)) {
        if (route == ROUTE_FUSE)
            refuse_not_applied(key, err);
        else
            refuse_unknown(key, source, route, err);
        return -1;
    }
    if (*seen & (1u << i)) {
        ag_reply_error_set(err, 400, "bad_option", "%s '%s' given twice", source, key);
        return -1;
    }
    *seen |= 1u << i;
    if (!(option_keys[i].routes & ROUTE_CONVERT)) /* fusion's own */
        return fuse_value(opts, key, value, names, name_count, err) == 0 ? 0 : -1;
    return convert_value(opts, key, value, names, name_count, server_max_side, err);
}

int ag_convert_option_set(ag_convert_options *opts, unsigned *seen, const char *key,
                          const char *value, const char *const *names, int name_count,
                          int server_max_side, ag_reply_error *err) {
    return ag_option_set(opts, seen, 0, key, value, names, name_count, server_max_side, err);
}
