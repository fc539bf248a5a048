/*
 * worker.c - the inference workers. Each is a thread that creates its own engines (one per
 * served model, on this thread, used only here), then takes jobs from the queue until it is
 * closed: cache lookup, probe the header (413 over --max-pixels before decoding), decode
 * (downscaled to max_side), stylize, encode, and hand the result back to MHD. Every image
 * buffer is released before the job is handed back, so a worker holds at most one
 * conversion's memory at a time; and only the engines of the models that conversion runs
 * keep their arenas (ag_worker_use_models), so serving every bundled style costs the
 * largest model's arena, not the sum (budget.c).
 */
#include "server.h"

#include <malloc.h>
#include <stdio.h>
#include <string.h>

/* Start-up rendezvous: ag_workers_start waits until every worker created its engines. */
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t init_cond = PTHREAD_COND_INITIALIZER;
static int init_done;

/* Map a library failure to an HTTP status and a stable error code. Past decoding the
 * image is known good (size and pixels checked), so a failure there is the server's: 5xx,
 * never a 4xx that blames the upload (a model that is not a style answered 415). */
static void job_error(ag_server *s, ag_request *r, const ag_error *err, const char *stage) {
    int status;
    const char *code;
    int server_side =
        !strcmp(stage, "stylize") || !strcmp(stage, "encode") || !strcmp(stage, "upscale");
    if (err->code == AG_E_CANCELLED) { /* stopped between two steps: the client left */
        ag_job_fail(s, r, 499, "client_gone", "the client closed the connection");
        return;
    }
    switch (server_side && err->code != AG_E_NOMEM ? AG_E_INTERNAL : err->code) {
    case AG_E_LIMIT: status = 413, code = "too_large"; break;
    case AG_E_FORMAT: status = 422, code = "undecodable_image"; break;
    case AG_E_UNSUPPORTED: status = 415, code = "unsupported_media_type"; break;
    case AG_E_ARG: status = 422, code = "unprocessable_image"; break;
    case AG_E_NOMEM: status = 503, code = "out_of_memory"; break;
    default: status = 500, code = "internal"; break;
    }
    char msg[AG_ERROR_MESSAGE_BYTES + 32];
    snprintf(msg, sizeof msg, "%s: %s", stage,
             err->message[0] ? err->message : ag_error_name(err->code));
    ag_job_fail(s, r, status, code, msg);
}

void ag_worker_use_models(ag_worker *w, int model, int face_model) {
    for (int i = 0; i < w->server->model_count; i++)
        if (i != model && i != face_model)
            ag_engine_release(w->engines[i]);
}

/* Faces of `in` with this worker's detector; timed and counted. */
static int find_faces(ag_worker *w, const ag_image *in, ag_face *faces, int *n, ag_error *err) {
    ag_server *s = w->server;
    uint64_t t0 = ag_now_us();
    ag_face_options fo = {.max_faces = 8}; /* as the CLI's --max-faces default */
    int found = 0;
    int rc = ag_faces_detect(w->faces, in, &fo, faces, AG_FACE_MAX, n, &found, err);
    ag_metrics_observe(&s->metrics.face_detect, ag_now_us() - t0);
    if (rc == AG_OK)
        atomic_fetch_add(&s->metrics.faces_detected, (uint_fast64_t)found);
    if (rc == AG_OK && found > *n)
        ag_log_event(s->config.log_format, "info", "%d faces found, the %d largest used", found,
                     *n);
    return rc;
}

/* POST /api/v1/faces: the JSON of `animegan faces --json`, in the pixels of the uploaded
 * (EXIF-oriented) image; detection runs on the copy decoded at max_side. */
static int faces_reply(ag_worker *w, ag_request *r, const ag_image *in, const ag_face *faces,
                       int n) {
    int w0 = r->in_width > r->in_height ? r->in_width : r->in_height;
    int w1 = in->width > in->height ? in->width : in->height;
    double k = w1 > 0 && w0 > w1 ? (double)w0 / w1 : 1.0;
    ag_text t;
    ag_text_init(&t, 64 * 1024);
    ag_text_printf(&t, "{\"image\": \"upload\", \"width\": %d, \"height\": %d, \"faces\": [",
                   (int)(in->width * k + 0.5), (int)(in->height * k + 0.5));
    for (int i = 0; i < n; i++) {
        const ag_face *f = &faces[i];
        ag_text_printf(&t,
                       "%s{\"score\": %.4f, \"box\": [%.2f, %.2f, %.2f, %.2f], \"keypoints\": [",
                       i ? ", " : "", (double)f->score, (double)f->box[0] * k,
                       (double)f->box[1] * k, (double)f->box[2] * k, (double)f->box[3] * k);
        for (int j = 0; j < 6; j++)
            ag_text_printf(&t, "%s[%.2f, %.2f]", j ? ", " : "", (double)f->keypoints[j][0] * k,
                           (double)f->keypoints[j][1] * k);
        ag_text_printf(&t, "], \"quad\": [");
        for (int j = 0; j < 4; j++)
            ag_text_printf(&t, "%s[%.2f, %.2f]", j ? ", " : "", (double)f->quad[j][0] * k,
                           (double)f->quad[j][1] * k);
        ag_text_printf(&t, "]}");
    }
    ag_text_printf(&t, "]}\n");
    size_t size = 0;
    char *body = ag_text_take(&t, &size);
    if (!body) {
        ag_job_fail(w->server, r, 503, "out_of_memory", "out of memory for the reply");
        return 0;
    }
    r->status = 200;
    r->content_type = "application/json";
    r->out = (uint8_t *)body;
    r->out_size = size;
    r->out_width = in->width, r->out_height = in->height;
    return 1;
}

/* The face modes of a decoded image: portrait=face (the largest face's crop, or the centre
 * crop when there is none: *fallback), paste_faces. `out` is set on success. */
static int face_convert(ag_worker *w, ag_request *r, const ag_image *in, ag_image *out,
                        int *fallback, ag_error *err) {
    ag_server *s = w->server;
    const ag_convert_options *o = &r->options;
    ag_face *faces = ag_malloc(sizeof *faces * AG_FACE_MAX);
    if (!faces) {
        err->code = AG_E_NOMEM;
        snprintf(err->message, sizeof err->message, "out of memory");
        return AG_E_NOMEM;
    }
    int n = 0, rc = find_faces(w, in, faces, &n, err);
    r->faces = n;
    ag_engine *engine = w->engines[o->model];
    if (rc == AG_OK && o->paste_faces) {
        ag_engine *fe = o->face_model >= 0 ? w->engines[o->face_model] : engine;
        rc = ag_stylize_paste_faces(engine, fe, in, faces, n, s->config.portrait_size, out, err);
    } else if (rc == AG_OK && n > 0) {
        ag_image crop = {0};
        int pick = o->face >= 1 && o->face <= n ? o->face - 1 : 0; /* the page's choice */
        rc = ag_face_align(in, &faces[pick], s->config.portrait_size, &crop, err);
        if (rc == AG_OK)
            rc = ag_stylize(engine, &crop, o->side_by_side, out, err);
        ag_image_fini(&crop);
    } else if (rc == AG_OK) {
        *fallback = 1;
    }
    ag_free(faces);
    return rc;
}

/* The engines' cancel hook (before each step and band): the work's between_steps. */
static int between_steps(void *user) {
    ag_worker *w = user;
    return w->between_steps ? w->between_steps(w->between_steps_user) : 0;
}

/* Every engine of w asks between_steps, so the work on it can stop (or yield) there. */
static void hook_engines(ag_worker *w) {
    for (int i = 0; i < w->server->model_count; i++)
        ag_engine_set_cancel(w->engines[i], between_steps, w);
    for (int i = 0; i < w->server->restorer_count; i++)
        ag_engine_set_cancel(w->restorers[i], between_steps, w);
    for (int i = 0; i < AG_SERVER_UPSCALES; i++)
        if (w->upscalers[i])
            ag_engine_set_cancel(w->upscalers[i], between_steps, w);
}

/* A photo's hook: stop when its client has closed the connection (a poll, ~1 us). */
static int request_abandoned(void *user) {
    return ag_request_client_gone(user);
}

/* ag_step_progress_fn: the steps of the worker's current stage, for /api/v1/status; between
 * two of them (faces, tiles) the work may stop or yield as between two engine steps. */
static int count_step(void *user, int done, int total) {
    ag_worker *w = user;
    atomic_store(&w->steps_total, total);
    atomic_store(&w->steps_done, done);
    atomic_store(&w->step_permille, 0);
    return done > 0 ? between_steps(w) : 0;
}

/* ag_engine_set_progress on the restorers and upscalers: how far the face or tile under
 * way is, so that one long face or tile is not a figure stuck at 0 for a minute. */
static int count_band(void *user, int done, int total) {
    ag_worker *w = user;
    atomic_store(&w->step_permille, total > 0 ? done * 1000 / total : 0);
    return 0;
}

/* The face modes (portrait=face, paste_faces) as the pipeline's stylisation. */
typedef struct face_step {
    ag_worker *w;
    ag_request *r;
    ag_decode_options *decode;
    int decode_failed; /* the centre crop's decode failed: a "decode" error */
} face_step;

/* ag_stylize_fn: face_convert, or with no face the centre crop, as portrait=center. */
static int stylize_faces(void *user, const ag_image *in, ag_image *out, ag_error *err) {
    face_step *f = user;
    ag_request *r = f->r;
    int fallback = 0;
    int rc = face_convert(f->w, r, in, out, &fallback, err);
    if (rc != AG_OK || !fallback)
        return rc;
    ag_image crop = {0};
    f->decode->portrait = 1;
    r->portrait_fallback = 1;
    if ((rc = ag_image_decode(r->image, r->image_size, "upload", f->decode, &crop, err)) != 0) {
        f->decode_failed = 1;
        return rc;
    }
    rc = ag_stylize(f->w->engines[r->options.model], &crop, r->options.side_by_side, out, err);
    ag_image_fini(&crop);
    return rc;
}

/* ag_pipeline's step_started: the status page counts each step's tiles from zero. */
static void step_started(void *user, ag_pipeline_step step) {
    if (step == AG_STEP_UPSCALE)
        count_step(user, 0, 0);
}

/* The upscale step of a pipeline: the worker's upscaler for `scale`, its window within
 * --upscale-max-mb. */
static void upscale_step(ag_worker *w, int scale, ag_pipeline *p) {
    p->upscaler = w->upscalers[ag_server_upscale_slot(scale)];
    p->upscale.scale = scale;
    p->upscale.max_bytes = w->server->config.upscale_max_bytes;
}

/* The request as a pipeline: restore=K, the style (or the face modes), upscale=N. */
static ag_pipeline request_pipeline(ag_worker *w, ag_request *r, face_step *faces) {
    const ag_convert_options *o = &r->options;
    ag_pipeline p;
    ag_pipeline_init(&p);
    if (o->restore) {
        p.restorer = w->restorers[o->restore - 1], p.detector = w->faces;
        p.restore.codeformer_fidelity = o->codeformer_fidelity;
    }
    if (o->step != AG_CONVERT_RESTORE && o->step != AG_CONVERT_UPSCALE) {
        p.style = w->engines[o->model];
        p.side_by_side = o->side_by_side;
    }
    if (p.style && w->faces && (o->portrait == 1 || o->paste_faces))
        p.stylize = stylize_faces, p.stylize_user = faces;
    if (o->upscale)
        upscale_step(w, o->upscale, &p);
    p.progress = count_step, p.progress_user = w;
    p.step_started = step_started;
    return p;
}

/* The metrics and headers of a run (also when a later step failed); X-Faces is the face
 * modes' count when they ran (face_convert's), else the restored faces'. */
static void count_run(ag_worker *w, ag_request *r, const ag_pipeline *p,
                      const ag_pipeline_result *res) {
    ag_server *s = w->server;
    if (r->options.restore && res->failed > AG_STEP_RESTORE) {
        atomic_fetch_add(&s->metrics.restorations, 1);
        atomic_fetch_add(&s->metrics.faces_restored, (uint_fast64_t)res->faces.restored);
        atomic_fetch_add(&s->metrics.faces_detected, (uint_fast64_t)res->faces.found);
        if (!p->stylize)
            r->faces = res->faces.restored;
    }
    if (r->options.upscale && res->failed == AG_STEP_COUNT)
        atomic_fetch_add(&s->metrics.upscaled, 1);
}

/* upscale=N: the result the request asks for, from the image's header (after max_side, a
 * portrait crop and side_by_side), against --max-output-pixels; 413 before any work. */
static int upscale_fits(ag_server *s, ag_request *r, int width, int height) {
    const ag_server_config *c = &s->config;
    const ag_convert_options *o = &r->options;
    double w = width, h = height, n = o->upscale;
    if (!s->upscalers[0]) {
        ag_job_fail(s, r, 503, "upscale_unavailable",
                    "this server has no upscaler (--upscale-model none)");
        return 0;
    }
    if (o->portrait) {
        w = h = c->portrait_size;
    } else if (o->max_side > 0 && (w > o->max_side || h > o->max_side)) {
        double f = (double)o->max_side / (w > h ? w : h);
        w = w * f, h = h * f;
    }
    double pixels = w * (o->side_by_side ? 2 : 1) * n * h * n;
    if (pixels <= (double)c->max_output_pixels)
        return 1;
    char msg[200];
    snprintf(msg, sizeof msg,
             "upscale=%d gives %.1f megapixels; the limit is %.1f (--max-output-pixels): ask "
             "for a smaller max_side or scale",
             o->upscale, pixels / 1e6, (double)c->max_output_pixels / 1e6);
    ag_job_fail(s, r, 413, "output_too_large", msg);
    return 0;
}

int ag_worker_upscale(ag_worker *w, int scale, ag_image *image, ag_error *err) {
    ag_pipeline p;
    ag_pipeline_init(&p);
    upscale_step(w, scale, &p);
    p.progress = count_step, p.progress_user = w;
    p.step_started = step_started;
    ag_image big;
    int rc = ag_pipeline_run(&p, image, &big, NULL, err);
    if (rc != AG_OK)
        return rc;
    *image = big;
    atomic_fetch_add(&w->server->metrics.upscaled, 1);
    return AG_OK;
}

int ag_restore_check(const ag_server *s, const ag_convert_options *o, int have_faces,
                     ag_reply_error *err) {
    if (!o->restore)
        return 0;
    if (o->restore > s->restorer_count) {
        ag_reply_error_set(err, s->restorer_count ? 400 : 503,
                           s->restorer_count ? "bad_option" : "restore_unavailable",
                           "restore=%d: this server has %d --restore-model file(s)", o->restore,
                           s->restorer_count);
        return -1;
    }
    const char *arch = ag_model_get_info(s->restorers[o->restore - 1])->architecture;
    if (o->codeformer_fidelity_given && strcmp(arch, "codeformer")) {
        ag_reply_error_set(err, 400, "bad_option",
                           "codeformer_fidelity applies only to a CodeFormer restorer: restore=%d "
                           "is %s",
                           o->restore, !strcmp(arch, "gpen") ? "GPEN" : "GFPGAN");
        return -1;
    }
    if (!have_faces) {
        ag_reply_error_set(err, 503, "faces_unavailable",
                           "the face models (face-detect, face-mesh) are not installed on this "
                           "server");
        return -1;
    }
    return 0;
}

/* Convert r's image; on any failure the job is finished here with an error. Returns 1 when
 * the caller still has to finish the job (success). */
static int convert(ag_worker *w, ag_request *r) {
    ag_server *s = w->server;
    const ag_server_config *c = &s->config;
    const ag_convert_options *o = &r->options;
    ag_error err = {0};
    ag_cache_key key;

    if (o->step == AG_CONVERT_FUSE)
        return ag_worker_fuse(w, r);
    /* Face results carry X-Faces and upscaled ones are large: neither is cached. */
    int face_mode = o->portrait == 1 || o->paste_faces || o->step == AG_CONVERT_FACES ||
                    o->restore || o->upscale;
    ag_reply_error refused;
    if (ag_restore_check(s, o, w->faces != NULL, &refused) != 0) {
        ag_job_fail(s, r, refused.status, refused.code, refused.message);
        return 0;
    }
    if ((o->paste_faces || o->step == AG_CONVERT_FACES) && !w->faces) {
        ag_job_fail(s, r, 503, "faces_unavailable",
                    "the face models (face-detect, face-mesh) are not installed on this server");
        return 0;
    }
    if (s->cache && !face_mode) {
        ag_cache_key_make(s->cache, r->image, r->image_size, s->model_names[o->model], o, &key);
        uint8_t *data = NULL;
        size_t size = 0;
        int rc = ag_cache_get(s->cache, &key, &data, &size, &r->out_width, &r->out_height);
        r->cache_hit = rc == 1;
        if (rc == 1) {
            r->status = 200;
            r->content_type = ag_format_mime(o->format);
            r->out = data;
            r->out_size = size;
            return 1;
        }
    }

    /* Work for a client that has left is wasted on everyone queued behind it. */
    if (ag_request_client_gone(r)) {
        ag_job_fail(s, r, 499, "client_gone", "the client closed the connection");
        return 0;
    }
    int width = 0, height = 0;
    if (ag_image_probe(r->image, r->image_size, &width, &height, &err) != 0) {
        job_error(s, r, &err, "probe");
        return 0;
    }
    r->in_width = width;
    r->in_height = height;
    if (width <= 0 || height <= 0 || (size_t)width * (size_t)height > c->max_pixels) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "the image is %dx%d = %.1f megapixels; the limit is %.1f (--max-pixels)", width,
                 height, (double)width * height / 1e6, (double)c->max_pixels / 1e6);
        ag_job_fail(s, r, 413, "too_many_pixels", msg);
        return 0;
    }
    if (o->upscale && !upscale_fits(s, r, width, height))
        return 0;

    ag_decode_options d = {0};
    d.max_side = o->max_side;
    d.portrait = o->portrait == 2 || (o->portrait == 1 && !w->faces);
    r->portrait_fallback = o->portrait == 1 && !w->faces;
    d.portrait_size = c->portrait_size;
    d.max_pixels = c->max_pixels;
    ag_image in = {0}, out = {0};
    if (ag_image_decode(r->image, r->image_size, "upload", &d, &in, &err) != 0) {
        job_error(s, r, &err, "decode");
        return 0;
    }
    if (ag_request_client_gone(r)) {
        ag_image_fini(&in);
        ag_job_fail(s, r, 499, "client_gone", "the client closed the connection");
        return 0;
    }
    int rc = AG_OK;
    ag_worker_use_models(w, o->model, o->paste_faces ? o->face_model : -1);
    if (w->faces && o->step == AG_CONVERT_FACES) {
        ag_face *faces = ag_malloc(sizeof *faces * AG_FACE_MAX);
        int n = 0;
        if (faces) {
            rc = find_faces(w, &in, faces, &n, &err);
        } else { /* said, not "faces: ok" from an empty error */
            rc = err.code = AG_E_NOMEM;
            snprintf(err.message, sizeof err.message, "out of memory for the face table");
        }
        r->faces = n;
        int ok = rc == AG_OK && faces_reply(w, r, &in, faces, n);
        ag_free(faces);
        ag_image_fini(&in);
        if (rc != AG_OK)
            job_error(s, r, &err, "faces");
        return ok;
    }
    face_step faces = {.w = w, .r = r, .decode = &d};
    ag_pipeline p = request_pipeline(w, r, &faces);
    ag_pipeline_result res;
    rc = ag_pipeline_run(&p, &in, &out, &res, &err);
    count_run(w, r, &p, &res);
    if (rc != 0) {
        job_error(s, r, &err,
                  res.failed == AG_STEP_UPSCALE ? "upscale"
                  : faces.decode_failed         ? "decode"
                                                : "stylize");
        return 0;
    }
    void *data = NULL;
    size_t size = 0;
    rc = ag_image_encode(&out, o->format, o->quality, &data, &size, &err);
    r->out_width = out.width;
    r->out_height = out.height;
    ag_image_fini(&out);
    if (rc != 0) {
        job_error(s, r, &err, "encode");
        return 0;
    }
    if (s->cache && !face_mode)
        ag_cache_put(s->cache, &key, data, size, r->out_width, r->out_height);
    r->status = 200;
    r->content_type = ag_format_mime(o->format);
    r->out = data;
    r->out_size = size;
    return 1;
}

size_t ag_worker_upscaler_arena_bytes(const ag_worker *w) {
    size_t arena = 0;
    for (int i = 0; i < AG_SERVER_UPSCALES; i++)
        if (w->upscalers[i] && (i == 0 || w->upscalers[i] != w->upscalers[0]))
            arena += ag_engine_arena_bytes(w->upscalers[i]);
    return arena;
}

static void set_current(ag_worker *w, const char *id, int keyed) {
    pthread_mutex_lock(&w->current_lock);
    snprintf(w->current_id, sizeof w->current_id, "%s", keyed ? id : "");
    count_step(w, 0, 0);
    pthread_mutex_unlock(&w->current_lock);
    ag_log_thread_request(id);
    atomic_store(&w->busy_since_us, id[0] ? ag_now_us() : 0);
}

static void run_job(ag_worker *w, ag_request *r, uint64_t deadline_us) {
    ag_server *s = w->server;
    uint64_t start = ag_now_us();
    r->queue_ms = (double)(start - r->enqueued_us) / 1000.0;
    ag_metrics_observe(&s->metrics.queue_wait, start - r->enqueued_us);
    if (start >= deadline_us) {
        atomic_fetch_add(&s->metrics.timed_out, 1);
        ag_job_fail(s, r, 504, "queue_timeout",
                    "the server was too busy to start this image in time; try again");
        return;
    }
    atomic_store(&r->state, AG_REQ_RUNNING);
    atomic_fetch_add(&s->busy_workers, 1);
    set_current(w, r->id, r->keyed);
    w->between_steps = request_abandoned, w->between_steps_user = r;

    int ok = convert(w, r);

    w->between_steps = NULL, w->between_steps_user = NULL;

    uint64_t end = ag_now_us();
    size_t arena = 0;
    for (int i = 0; i < s->model_count; i++)
        arena += ag_engine_arena_bytes(w->engines[i]);
    for (int i = 0; i < s->restorer_count; i++)
        arena += ag_engine_arena_bytes(w->restorers[i]);
    arena += ag_worker_upscaler_arena_bytes(w);
    atomic_store(&w->arena_bytes, arena);
    set_current(w, "", 0);
    atomic_fetch_sub(&s->busy_workers, 1);
    if (!ok)
        return; /* finished with an error inside convert */
    r->inference_ms = (double)(end - start) / 1000.0;
    if (r->cache_hit != 1) {
        ag_metrics_observe(&s->metrics.inference, end - start);
        /* Smoothed conversion time for Retry-After; a torn update only skews a hint. */
        uint64_t old = atomic_load(&s->inference_ewma_us);
        atomic_store(&s->inference_ewma_us, old ? (old * 4 + (end - start)) / 5 : end - start);
    }
    ag_job_finish(s, r);
}

/* r needs no upscaler: it may run while a frame's upscaling is between two steps. */
static int needs_no_upscaler(const void *item) {
    const ag_request *r = item;
    return r->options.upscale == 0;
}

int ag_worker_serve_waiting(ag_worker *w) {
    ag_server *s = w->server;
    int (*frame_hook)(void *) = w->between_steps;
    void *frame_user = w->between_steps_user;
    uint64_t busy_since = atomic_load(&w->busy_since_us), deadline;
    int served = 0;
    ag_request *r;
    /* An idle worker (waiting in the queue) takes them sooner, and the frame goes on. */
    while (atomic_load(&s->busy_workers) >= s->config.workers &&
           (r = ag_queue_pop_request_if(&s->queue, needs_no_upscaler, &deadline))) {
        atomic_fetch_sub(&s->busy_workers, 1); /* run_job counts this worker again */
        run_job(w, r, deadline);
        atomic_fetch_add(&s->busy_workers, 1);
        served++;
    }
    w->between_steps = frame_hook, w->between_steps_user = frame_user;
    atomic_store(&w->busy_since_us, busy_since);
    return served;
}

static void *worker_main(void *arg) {
    ag_worker *w = arg;
    ag_server *s = w->server;
    ag_error err = {0};
    int status = 0;
    for (int i = 0; i < s->model_count && status == 0; i++) {
        status = ag_engine_create(s->models[i], &s->config.engine, &w->engines[i], &err);
        if (status != 0)
            snprintf(w->init_error, sizeof w->init_error, "%s", err.message);
    }
    for (int i = 0; i < s->restorer_count && status == 0; i++) {
        ag_engine_options ro = s->config.engine;
        ro.precision = s->restore_precision;
        status = ag_engine_create(s->restorers[i], &ro, &w->restorers[i], &err);
        if (status != 0)
            snprintf(w->init_error, sizeof w->init_error, "%s", err.message);
        else
            ag_engine_set_progress(w->restorers[i], count_band, w);
    }
    for (int i = 0; i < AG_SERVER_UPSCALES && s->upscalers[i] && status == 0; i++) {
        ag_engine_options uo = ag_server_upscaler_engine(&s->config);
        if (i > 0 && s->upscalers[i] == s->upscalers[0])
            w->upscalers[i] = w->upscalers[0]; /* one file for both: one engine */
        else
            status = ag_engine_create(s->upscalers[i], &uo, &w->upscalers[i], &err);
        if (status != 0)
            snprintf(w->init_error, sizeof w->init_error, "%s", err.message);
        else
            ag_engine_set_progress(w->upscalers[i], count_band, w);
    }
    if (status == 0 && s->face_detect) {
        ag_engine_options fo = s->config.engine;
        fo.precision = AG_PRECISION_FP32; /* small networks: fp32, exact */
        status = ag_face_detector_create(s->face_detect, s->face_mesh, &fo, &w->faces, &err);
        if (status == 0 && s->face_embed)
            status = ag_face_embedder_create(s->face_embed, &fo, &w->embedder, &err);
        if (status != 0)
            snprintf(w->init_error, sizeof w->init_error, "%s", err.message);
    }
    if (status == 0)
        hook_engines(w);
    pthread_mutex_lock(&init_lock);
    w->init_status = status;
    init_done++;
    pthread_cond_broadcast(&init_cond);
    pthread_mutex_unlock(&init_lock);

    if (status == 0) {
        uint64_t deadline;
        void *item;
        int kind;
        while ((item = ag_queue_pop_kind(&s->queue, &deadline, &kind)) != NULL) {
            if (kind == AG_QUEUE_FRAME)
                ag_jobs_run_frame(w, item); /* one frame of a video job (jobs.c) */
            else
                run_job(w, item, deadline);
            /* Give the heap pages this request freed back to the kernel. Between requests
             * glibc keeps them resident in each thread's arena, and which ones depends on
             * the requests and sizes seen (each new size re-plans the engine: oneDNN
             * primitives made and freed); with int8's small arenas that was most of the
             * idle RSS's wander: +-1.5 MiB, up to +4 MiB after 300 requests. ~0.1 ms. */
            malloc_trim(0);
        }
    }
    for (int i = 0; i < s->model_count; i++) {
        ag_engine_destroy(w->engines[i]);
        w->engines[i] = NULL;
    }
    for (int i = 0; i < s->restorer_count; i++) {
        ag_engine_destroy(w->restorers[i]);
        w->restorers[i] = NULL;
    }
    /* One file serving both scales is one engine: destroyed once (the first slot is cleared
     * only after the loop, or the second would no longer match it and be freed again). */
    for (int i = 0; i < AG_SERVER_UPSCALES; i++)
        if (i == 0 || w->upscalers[i] != w->upscalers[0])
            ag_engine_destroy(w->upscalers[i]);
    memset(w->upscalers, 0, sizeof w->upscalers);
    ag_face_detector_destroy(w->faces);
    w->faces = NULL;
    ag_face_embedder_destroy(w->embedder);
    w->embedder = NULL;
    atomic_store(&w->arena_bytes, 0);
    return NULL;
}

int ag_workers_start(ag_server *s, ag_error *err) {
    int n = s->config.workers;
    s->workers = ag_calloc((size_t)n, sizeof *s->workers);
    if (!s->workers) {
        err->code = AG_E_NOMEM;
        snprintf(err->message, sizeof err->message, "out of memory for %d workers", n);
        return -1;
    }
    init_done = 0;
    for (int i = 0; i < n; i++) {
        s->workers[i].server = s;
        s->workers[i].index = i;
        pthread_mutex_init(&s->workers[i].current_lock, NULL);
    }
    int started = 0;
    for (int i = 0; i < n; i++) {
        ag_worker *w = &s->workers[i];
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            err->code = AG_E_NOMEM;
            snprintf(err->message, sizeof err->message, "cannot start worker thread %d", i);
            break;
        }
        w->started = 1;
        started++;
    }
    pthread_mutex_lock(&init_lock);
    while (init_done < started)
        pthread_cond_wait(&init_cond, &init_lock);
    pthread_mutex_unlock(&init_lock);
    int failed = started < n;
    for (int i = 0; i < started && !failed; i++) {
        if (s->workers[i].init_status != 0) {
            err->code = s->workers[i].init_status;
            snprintf(err->message, sizeof err->message, "worker %d: %.200s", i,
                     s->workers[i].init_error);
            failed = 1;
        }
    }
    if (failed) {
        ag_workers_stop(s);
        return -1;
    }
    return 0;
}

void ag_workers_stop(ag_server *s) {
    if (!s->workers)
        return;
    ag_queue_close(&s->queue);
    for (int i = 0; i < s->config.workers; i++) {
        ag_worker *w = &s->workers[i];
        if (w->started)
            pthread_join(w->thread, NULL);
        w->started = 0;
    }
}

void ag_workers_free(ag_server *s) {
    if (!s->workers)
        return;
    for (int i = 0; i < s->config.workers; i++)
        pthread_mutex_destroy(&s->workers[i].current_lock);
    ag_free(s->workers);
    s->workers = NULL;
}
