/*
 * fuse.c - POST /api/v1/fuse: a multipart body with a `source` and a `target` image, the
 * source's face fused into the target (ag_face_fuse). It rides the convert route: the same
 * admission slot, queue and worker (one queue slot per fusion), the same upload bound; each
 * image's header is checked against --max-pixels before either is decoded, and both faces
 * are found before any fusing, so a request with no face in one of them (422 naming which)
 * costs two detections and no more. Options are query parameters or text fields of the
 * multipart body (a browser form posts them so), never both for one key, each once; convert's
 * options that a fusion does not apply (model, portrait, restore, ...) are refused, not
 * ignored (options.c, the one parser of both routes).
 * style=NAME (the CLI's --style) stylises the fusion with that model as convert would (at
 * most --max-side), anime_template=1 the source before fusing (--anime-template).
 * An optional `target_like` image part (the CLI's --target-like) picks the target face most
 * like its largest face (src/face/identify.c; among the target's 8 largest): decoded, described and
 * freed before the source and target are decoded, so a worker holds no more than without it; the
 * choice is answered in X-Target-Face and X-Target-Distance.
 */
#include "server.h"

#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The `field` part of a multipart body, sniffed to be an image. */
static int upload_field(const ag_request *r, const char *field, const uint8_t **data, size_t *size,
                        ag_reply_error *err) {
    ag_multipart_part part;
    int rc = ag_multipart_find(r->body, r->body_size, r->boundary, field, &part);
    if (rc) {
        ag_reply_error_set(err, 400, "bad_request",
                           rc < 0    ? "malformed multipart/form-data body"
                           : rc == 2 ? "the multipart body has the field '%s' twice"
                                     : "the multipart body has no field '%s' (fuse needs "
                                       "'source' and 'target')",
                           field);
        return -1;
    }
    if (!part.size || !ag_upload_sniff(part.data, part.size)) {
        ag_reply_error_set(err, 415, "unsupported_media_type",
                           "the '%s' field is not a JPEG, PNG, WebP, GIF, TIFF or HEIF image",
                           field);
        return -1;
    }
    *data = part.data, *size = part.size;
    return 0;
}

/* The text fields of a fuse body: each an option, as its query parameter would be. */
typedef struct field_walk {
    ag_server *s;
    ag_request *r;
    unsigned seen; /* ag_option_set's, for the form fields (the query has its own) */
    ag_reply_error *err;
} field_walk;

#define FIELD_VALUE_BYTES 64

static int option_field(void *user, const ag_multipart_part *part) {
    field_walk *w = user;
    if (!strcmp(part->name, "source") || !strcmp(part->name, "target") ||
        !strcmp(part->name, "target_like"))
        return 0;
    char value[FIELD_VALUE_BYTES];
    if (part->size >= sizeof value || memchr(part->data, '\0', part->size) ||
        memchr(part->data, '\r', part->size) || memchr(part->data, '\n', part->size)) {
        ag_reply_error_set(w->err, 400, "bad_option",
                           "the form field '%s' is not a short one-line value", part->name);
        return -1;
    }
    if (MHD_lookup_connection_value(w->r->connection, MHD_GET_ARGUMENT_KIND, part->name)) {
        ag_reply_error_set(w->err, 400, "bad_option",
                           "'%s' is both a query parameter and a form field", part->name);
        return -1;
    }
    memcpy(value, part->data, part->size);
    value[part->size] = '\0';
    return ag_option_set(&w->r->options, &w->seen, 1, part->name, value, w->s->model_names,
                         w->s->model_count, w->s->config.max_side, w->err);
}

int ag_fuse_uploads(ag_server *s, ag_request *r, ag_reply_error *err) {
    if (r->body_kind != AG_BODY_MULTIPART) {
        ag_reply_error_set(err, 400, "bad_request",
                           "fuse takes multipart/form-data with 'source' and 'target' images");
        return -1;
    }
    if (upload_field(r, "source", &r->image, &r->image_size, err) ||
        upload_field(r, "target", &r->image2, &r->image2_size, err))
        return -1;
    ag_multipart_part like; /* optional: absent (1) is fine, twice or not an image is not */
    if (ag_multipart_find(r->body, r->body_size, r->boundary, "target_like", &like) != 1 &&
        upload_field(r, "target_like", &r->like_image, &r->like_image_size, err))
        return -1;
    field_walk w = {s, r, 0, err};
    if (ag_multipart_walk(r->body, r->body_size, r->boundary, option_field, &w) != 0)
        return -1; /* the body parsed once already: the error is the field's */
    if (r->like_image && r->options.target_face != 1) {
        ag_reply_error_set(err, 400, "bad_option",
                           "target_like and target_face both choose the target face");
        return -1;
    }
    if (r->options.anime_template && r->options.style < 0) {
        ag_reply_error_set(err, 400, "bad_option", "anime_template applies only with style");
        return -1;
    }
    return ag_convert_options_check(&r->options, err);
}

/* One upload's header against the pixel limit; fails the job otherwise. */
static int check_header(ag_server *s, ag_request *r, const uint8_t *data, size_t size,
                        const char *which) {
    ag_error err = {0};
    int w = 0, h = 0;
    char msg[AG_ERROR_MESSAGE_BYTES + 64];
    if (ag_image_probe(data, size, &w, &h, &err) != 0) {
        snprintf(msg, sizeof msg, "the %s image: %s", which, err.message);
        ag_job_fail(s, r, 422, "undecodable_image", msg);
        return -1;
    }
    if (w > 0 && h > 0 &&
        (w < 64 || h < 64)) { /* so no side is over fuse_max_pixels / 64 (budget.c) */
        snprintf(msg, sizeof msg,
                 "the %s image is %dx%d: a fusion needs a face of at least 64 px, so an image "
                 "of at least 64 px a side",
                 which, w, h);
        ag_job_fail(s, r, 422, "bad_face", msg);
        return -1;
    }
    size_t limit = ag_fuse_max_pixels(&s->config);
    if (w <= 0 || h <= 0 || (size_t)w * (size_t)h > limit) {
        snprintf(msg, sizeof msg,
                 "the %s image is %dx%d = %.1f megapixels; a fusion's limit is %.1f "
                 "(--fuse-max-pixels)",
                 which, w, h, (double)w * h / 1e6, (double)limit / 1e6);
        ag_job_fail(s, r, 413, "too_many_pixels", msg);
        return -1;
    }
    return 0;
}

static int decode(ag_server *s, ag_request *r, const uint8_t *data, size_t size, const char *which,
                  ag_image *out) {
    ag_error err = {0};
    ag_decode_options d = {.max_pixels = ag_fuse_max_pixels(&s->config)};
    if (ag_image_decode(data, size, which, &d, out, &err) == 0)
        return 0;
    char msg[AG_ERROR_MESSAGE_BYTES + 64];
    snprintf(msg, sizeof msg, "the %s image: %s", which, err.message);
    ag_job_fail(s, r, 422, "undecodable_image", msg);
    return -1;
}

/* The faces of one upload: the client's cached ones (fuse_cache.c), else detected and kept. */
static int faces_of(ag_worker *w, ag_request *r, const ag_image *im, const uint8_t *data,
                    size_t size, int n, ag_face *faces, int *count, ag_error *err) {
    ag_server *s = w->server;
    const char *client = r->client;
    if (ag_fuse_cache_get(s->fuse_cache, client, data, size, n, faces, count))
        return AG_OK;
    ag_face_options fo = {.max_faces = AG_FACE_MAX};
    uint64_t t0 = ag_now_us();
    int rc = ag_faces_detect(w->faces, im, &fo, faces, AG_FACE_MAX, count, NULL, err);
    ag_metrics_observe(&s->metrics.face_detect, ag_now_us() - t0);
    if (rc == AG_OK) {
        atomic_fetch_add(&s->metrics.faces_detected, (uint_fast64_t)*count);
        ag_fuse_cache_put(s->fuse_cache, client, data, size, faces, *count);
    }
    return rc;
}

/* The target_like part's largest face as a descriptor (decoded, described, freed); a 422
 * when it has none, a 503 when this server has no face-recognition model. */
static int describe_like(ag_worker *w, ag_request *r, float *like) {
    ag_server *s = w->server;
    if (!w->embedder) {
        ag_job_fail(s, r, 503, "identity_unavailable",
                    "target_like needs the face-recognition model, not installed on this server");
        return -1;
    }
    ag_image im = {0};
    ag_error err = {0};
    if (check_header(s, r, r->like_image, r->like_image_size, "target_like") ||
        decode(s, r, r->like_image, r->like_image_size, "target_like", &im))
        return -1;
    int rc = ag_face_describe(w->faces, w->embedder, &im, "the target_like image", like, &err);
    ag_image_fini(&im);
    if (rc)
        ag_job_fail(s, r,
                    rc == AG_E_ARG     ? 422
                    : rc == AG_E_NOMEM ? 503
                                       : 500,
                    rc == AG_E_ARG ? "no_face" : "internal", err.message);
    return rc ? -1 : 0;
}

/* The n-th face of `im` (1 = largest), or (like: a descriptor) the one most like it, into
 * *out; a 422 naming the image when there is none. */
static int pick_face(ag_worker *w, ag_request *r, const ag_image *im, const uint8_t *data,
                     size_t size, const char *which, int n, const float *like, ag_face *faces,
                     ag_face *out) {
    ag_server *s = w->server;
    ag_error err = {0};
    int count = 0;
    int rc = faces_of(w, r, im, data, size, n, faces, &count, &err);
    if (rc == AG_OK && like && count > 0) { /* among the faces a cache entry keeps */
        int kept = count < AG_FUSE_CACHE_FACES ? count : AG_FUSE_CACHE_FACES;
        rc = ag_face_most_like(w->embedder, im, faces, kept, like, &r->chosen_distance, &err);
        n = r->chosen_face = rc + 1;
        rc = rc < 0 ? rc : AG_OK;
    }
    char msg[AG_ERROR_MESSAGE_BYTES + 64];
    if (rc) {
        snprintf(msg, sizeof msg, "faces of the %s image: %s", which, err.message);
        ag_job_fail(s, r, rc == AG_E_NOMEM ? 503 : 500, "internal", msg);
        return -1;
    }
    if (count == 0 || n > count || !faces[n - 1].has_landmarks) {
        if (count == 0)
            snprintf(msg, sizeof msg, "no face found in the %s image", which);
        else if (n > count)
            snprintf(msg, sizeof msg, "%s_face=%d, but the %s image has %d face%s", which, n, which,
                     count, count == 1 ? "" : "s");
        else
            snprintf(msg, sizeof msg, "the %s face has no landmarks", which);
        ag_job_fail(s, r, 422, count == 0 ? "no_face" : "bad_face", msg);
        return -1;
    }
    *out = faces[n - 1];
    return 0;
}

/* *im (owned) replaced by itself downscaled as convert decodes an upload (ag_image_shape at
 * `max_side`, Lanczos) and stylised with `engine`; k[2] the downscale in x and y (1 when none).
 * The larger image is freed before the engine runs, so a worker holds what convert does:
 * at most the image, its downscaled copy, then the engine's tensors and result. */
static int stylize_image(ag_engine *engine, int max_side, ag_image *im, double k[2],
                         ag_error *err) {
    ag_image shaped = {0}, styled = {0};
    k[0] = k[1] = 1.0;
    if (im->width > max_side || im->height > max_side) {
        ag_decode_options d = {.max_side = max_side};
        int rc = ag_image_shape(im, &d, "fusion", &shaped, err);
        if (rc != AG_OK)
            return rc;
        k[0] = (double)shaped.width / im->width, k[1] = (double)shaped.height / im->height;
        ag_image_fini(im);
        *im = shaped;
    }
    int rc = ag_stylize(engine, im, 0, &styled, err);
    if (rc != AG_OK)
        return rc;
    ag_image_fini(im);
    *im = styled;
    return AG_OK;
}

/* A face's coordinates in an image resized by k[0] x k[1] (pixel i spans [i, i + 1)). */
static void scale_face(ag_face *f, const double k[2]) {
    float x = (float)k[0], y = (float)k[1];
    f->box[0] *= x, f->box[2] *= x, f->box[1] *= y, f->box[3] *= y;
    for (int i = 0; i < 6; i++)
        f->keypoints[i][0] *= x, f->keypoints[i][1] *= y;
    for (int i = 0; i < 4; i++)
        f->quad[i][0] *= x, f->quad[i][1] *= y;
    for (int i = 0; i < AG_FACE_LANDMARKS; i++)
        f->landmarks[i][0] *= x, f->landmarks[i][1] *= y;
}

static void fail_stylize(ag_server *s, ag_request *r, const ag_error *err) {
    char msg[AG_ERROR_MESSAGE_BYTES + 32];
    snprintf(msg, sizeof msg, "stylize: %s", err->message[0] ? err->message : "failed");
    ag_job_fail(s, r, err->code == AG_E_NOMEM ? 503 : 500,
                err->code == AG_E_NOMEM ? "out_of_memory" : "internal", msg);
}

/* enhance=: a source face smaller than the target's is sharpened with the worker's first
 * restorer (--restore-model) when it has one, else its upscaler nearest the factor
 * (upscale=2 or 4); 0 set, -1 when the one asked for is not loaded (400). */
static int enhance_engines(ag_worker *w, ag_request *r, const ag_face *sf, const ag_face *tf,
                           ag_fuse_options *fo) {
    double factor;
    ag_face_fuse_wants_enhance(sf, tf, fo, &factor);
    if (w->server->restorer_count > 0)
        fo->restorer = w->restorers[0];
    fo->upscaler = w->upscalers[factor <= 2 && w->upscalers[0] ? 0 : AG_SERVER_UPSCALES - 1];
    if ((fo->enhance != AG_FUSE_ENHANCE_RESTORE || fo->restorer) &&
        (fo->enhance != AG_FUSE_ENHANCE_UPSCALE || fo->upscaler))
        return 0;
    ag_job_fail(w->server, r, 400, "bad_option",
                fo->enhance == AG_FUSE_ENHANCE_RESTORE
                    ? "enhance=restore: this server has no face restorer (--restore-model)"
                    : "enhance=upscale: this server has no upscaler (--upscale-model)");
    return -1;
}

int ag_worker_fuse(ag_worker *w, ag_request *r) {
    ag_server *s = w->server;
    const ag_convert_options *o = &r->options;
    if (!w->faces) {
        ag_job_fail(s, r, 503, "faces_unavailable",
                    "the face models (face-detect, face-mesh) are not installed on this server");
        return 0;
    }
    ag_image src = {0}, tgt = {0}, out = {0};
    ag_face *faces = ag_malloc(sizeof *faces * (AG_FACE_MAX + 2));
    int ok = 0;
    if (!faces) {
        ag_job_fail(s, r, 503, "out_of_memory", "out of memory");
        return 0;
    }
    ag_face *sf = faces + AG_FACE_MAX, *tf = sf + 1;
    float like[AG_FACE_DESCRIPTOR];
    /* Both headers first: neither image is decoded when the other is over the limit. */
    ag_error err = {0};
    if ((r->like_image && describe_like(w, r, like)) ||
        check_header(s, r, r->image, r->image_size, "source") ||
        check_header(s, r, r->image2, r->image2_size, "target") ||
        decode(s, r, r->image, r->image_size, "source", &src) ||
        decode(s, r, r->image2, r->image2_size, "target", &tgt))
        goto done;
    r->in_width = tgt.width, r->in_height = tgt.height;
    int longest = tgt.width > tgt.height ? tgt.width : tgt.height, side = o->fusion.size;
    double k = side ? (double)side / longest : 1.0;
    /* the resized target's size as ag_face_fuse rounds it: within --fuse-max-pixels
     * (budget.c) */
    if (fmax(1, round(tgt.width * k)) * fmax(1, round(tgt.height * k)) >
        (double)ag_fuse_max_pixels(&s->config)) {
        ag_job_fail(s, r, 413, "too_many_pixels",
                    "size: the output would be over the --fuse-max-pixels limit");
        goto done;
    }
    if (ag_request_client_gone(r)) {
        ag_job_fail(s, r, 499, "client_gone", "the client closed the connection");
        goto done;
    }
    if (pick_face(w, r, &src, r->image, r->image_size, "source", o->source_face, NULL, faces, sf) ||
        pick_face(w, r, &tgt, r->image2, r->image2_size, "target", o->target_face,
                  r->like_image ? like : NULL, faces, tf))
        goto done;
    r->faces = 2;
    /* style=NAME: only that model's engine keeps its arena (convert's rule). With
     * anime_template the source is stylised before fusing, as the CLI does, but downscaled
     * to --max-side first like a convert upload (its face's coordinates with it). */
    ag_engine *style = o->style >= 0 ? w->engines[o->style] : NULL;
    if (style)
        ag_worker_use_models(w, o->style, -1);
    if (style && o->anime_template) {
        double shrink[2];
        if (stylize_image(style, s->config.max_side, &src, shrink, &err) != AG_OK) {
            fail_stylize(s, r, &err);
            goto done;
        }
        scale_face(sf, shrink);
    }
    ag_fuse_options fo = o->fusion;
    if (enhance_engines(w, r, sf, tf, &fo))
        goto done;
    /* The one pipeline's fuse step (the CLI's and the video jobs' too), the faces chosen. */
    ag_pipeline p;
    ag_pipeline_init(&p);
    p.fuse_source = &src, p.fuse_source_face = sf, p.fuse_target = tf, p.fuse = fo;
    if (ag_pipeline_apply(&p, &tgt, &out, NULL, &err) != 0) {
        ag_job_fail(s, r,
                    err.code == AG_E_ARG     ? 422
                    : err.code == AG_E_NOMEM ? 503
                                             : 500,
                    err.code == AG_E_ARG ? "bad_face" : "internal", err.message);
        goto done;
    }
    /* Both inputs freed before the fusion is stylised (budget.c's
     * ag_budget_fuse_style_bytes) or encoded (ag_budget_fuse_bytes). */
    ag_image_fini(&src);
    ag_image_fini(&tgt);
    if (style && !o->anime_template) {
        double shrink[2];
        if (stylize_image(style, s->config.max_side, &out, shrink, &err) != AG_OK) {
            fail_stylize(s, r, &err);
            goto done;
        }
    }
    void *data = NULL;
    size_t size = 0;
    if (ag_image_encode(&out, o->format, o->quality, &data, &size, &err) != 0) {
        ag_job_fail(s, r, 500, "internal", err.message);
        goto done;
    }
    r->out_width = out.width, r->out_height = out.height;
    r->status = 200;
    r->content_type = ag_format_mime(o->format);
    r->out = data;
    r->out_size = size;
    ok = 1;
done:
    ag_image_fini(&out);
    ag_image_fini(&tgt);
    ag_image_fini(&src);
    ag_free(faces);
    return ok;
}
