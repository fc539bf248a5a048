/*
 * jobs_runner.c - the runner thread: converts the queued jobs one at a time with
 * ag_video_convert, sending each frame through the same worker queue as photo requests (one
 * frame in the queue at a time, so a photo waits for at most one frame of a job, and while
 * a frame is upscaled the worker serves the photos between its steps), and
 * sweeps expired jobs once a second. Clients take turns: the next job is the oldest of the
 * client whose last job started longest ago (or never), so one uploader's ten jobs do not
 * keep another's one waiting behind them all. Also starting and stopping the runner and intake
 * threads.
 *
 * A job's run is bounded: its frames (the smaller of --max-video-frames and what
 * --max-job-megapixels allows at its output size), its seconds (every stream), its output
 * bytes (its share of the spool), and it stops at the next packet or frame once DELETE or
 * a shutdown asks, whatever the decoder is reading (sound after the picture included).
 */
#include "jobs_internal.h"
#include "jobs_redis.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const double ag_job_duration_le_s[AG_JOB_DURATION_BUCKETS] = {1,   5,   15,  30,   60,
                                                              120, 300, 600, 1800, 3600};

/* ---- frames through the workers ------------------------------------------------------------- */

/* ag_video_stylize_fn: one frame into the shared queue, wait for the worker. */
static int stylize_via_workers(void *user, const ag_image *in, int side_by_side, ag_image *out,
                               ag_error *err) {
    ag_jobs *j = user;
    ag_frame_task task = {.in = in, .out = out, .side_by_side = side_by_side, .upscale = 1};
    pthread_mutex_lock(&j->lock);
    task.model = j->current ? j->current->model : 0;
    task.upscale = j->current ? j->current->upscale : 1;
    task.restore = j->current ? j->current->restore : 0;
    task.codeformer_fidelity = j->current ? j->current->codeformer_fidelity : 0.5f;
    task.fusion = j->fusion;
    pthread_mutex_unlock(&j->lock);
    pthread_mutex_init(&task.lock, NULL);
    pthread_cond_init(&task.cond, NULL);
    int rc;
    if (ag_queue_push_frame(&j->server->queue, &task) != 0) {
        rc = ag_jobs_set_error(err, AG_E_CANCELLED, "the server is stopping");
    } else {
        pthread_mutex_lock(&task.lock);
        while (!task.done)
            pthread_cond_wait(&task.cond, &task.lock);
        pthread_mutex_unlock(&task.lock);
        rc = task.rc;
        if (rc)
            *err = task.err;
    }
    pthread_cond_destroy(&task.cond);
    pthread_mutex_destroy(&task.lock);
    return rc;
}

/* The worker's hook while it runs a frame (between the engines' steps and bands, and
 * between tiles): the frame stops when its job is cancelled or the server stops; while it
 * is upscaled, the photos waiting meanwhile are converted there and then, so a photo waits
 * for one step of an upscaled frame rather than all of it (an upscaled frame costs many
 * stylised ones; its style step is one stylised frame, which a photo may wait for). */
typedef struct frame_hook {
    ag_worker *w;
    int upscaling;
} frame_hook;

static int run_cancelled(void *user);

static int frame_between_steps(void *user) {
    frame_hook *h = user;
    int cancel = run_cancelled(h->w->server->jobs);
    if (!cancel && h->upscaling)
        ag_worker_serve_waiting(h->w);
    return cancel;
}

/* A fusion job's source, on its first frame's worker: decoded, its source_face-th face. */
static int analyse_source(ag_worker *w, ag_job_fusion *fu, ag_error *err) {
    ag_server *s = w->server;
    char path[4096];
    ag_jobs_path(s->jobs, fu->b, "source", path, sizeof path);
    ag_decode_options d = {.max_pixels = ag_fuse_max_pixels(&s->config)};
    ag_error e = {0};
    int rc = ag_image_decode_file(path, &d, &fu->source, &e);
    if (rc != AG_OK)
        return ag_jobs_set_error(err, rc, "the source image: %s", e.message);
    if (!w->faces)
        return ag_jobs_set_error(err, AG_E_UNSUPPORTED, "this worker has no face detector");
    ag_face *faces = ag_malloc(sizeof *faces * AG_FACE_MAX);
    if (!faces)
        return ag_jobs_set_error(err, AG_E_NOMEM, "out of memory for the source's faces");
    ag_face_options fo = {.max_faces = AG_FACE_MAX};
    int count = 0, n = fu->b->source_face > 0 ? fu->b->source_face : 1;
    rc = ag_faces_detect(w->faces, &fu->source, &fo, faces, AG_FACE_MAX, &count, NULL, err);
    if (rc == AG_OK && (count < n || !faces[n - 1].has_landmarks))
        rc = ag_jobs_set_error(err, AG_E_ARG, "the source image has %s face %d (of %d found)",
                               count < n ? "no" : "no landmarks for", n, count);
    if (rc == AG_OK)
        fu->face = faces[n - 1], fu->analysed = 1;
    ag_free(faces);
    return rc;
}

/* restore=K on the frame's pipeline: the worker's K-th restorer over the faces its detector
 * finds (the job was checked at submission; a --jobs-redis job may run on an instance with
 * fewer files or no face models: the frame fails, naming why). */
static int restore_step(ag_worker *w, const ag_frame_task *task, ag_pipeline *p, ag_error *err) {
    const ag_server *s = w->server;
    if (!task->restore)
        return AG_OK;
    if (task->restore > s->restorer_count || !w->faces)
        return ag_jobs_set_error(
            err, AG_E_UNSUPPORTED, "restore=%d: this instance has %d --restore-model file(s)%s",
            task->restore, s->restorer_count, w->faces ? "" : " and no face models");
    p->restorer = w->restorers[task->restore - 1], p->detector = w->faces;
    p->restore.codeformer_fidelity = task->codeformer_fidelity;
    return AG_OK;
}

/* The frame's pipeline run; restored faces counted as a photo's (animegan_restorations_total
 * counts the frames). */
static int run_pipeline(ag_worker *w, ag_frame_task *task, const ag_pipeline *p) {
    ag_pipeline_result res;
    int rc = ag_pipeline_apply(p, task->in, task->out, &res, &task->err);
    if (p->restorer && res.failed > AG_STEP_RESTORE) {
        ag_metrics *m = &w->server->metrics;
        atomic_fetch_add(&m->restorations, 1);
        atomic_fetch_add(&m->faces_restored, (uint_fast64_t)res.faces.restored);
        atomic_fetch_add(&m->faces_detected, (uint_fast64_t)res.faces.found);
    }
    return rc;
}

/* A job's frame without fusion: restore=K (when asked), then the style. */
static int stylize_frame(ag_worker *w, ag_frame_task *task) {
    if (!task->restore)
        return ag_stylize(w->engines[task->model], task->in, task->side_by_side, task->out,
                          &task->err);
    ag_pipeline p;
    ag_pipeline_init(&p);
    int rc = restore_step(w, task, &p, &task->err);
    if (rc != AG_OK)
        return rc;
    p.style = w->engines[task->model], p.side_by_side = task->side_by_side;
    return run_pipeline(w, task, &p);
}

/* A fusion job's frame: the pipeline's fuse step (the face followed over the frames),
 * restore=K when asked, then the style when model= was given. */
static int fuse_frame(ag_worker *w, ag_frame_task *task) {
    ag_job_fusion *fu = task->fusion;
    if (!fu->analysed && analyse_source(w, fu, &task->err) != AG_OK)
        return task->err.code ? task->err.code : AG_E_ARG;
    ag_pipeline p;
    ag_pipeline_init(&p);
    p.fuse_source = &fu->source, p.fuse_source_face = &fu->face, p.fuse_track = fu->track;
    p.fuse = fu->b->fuse, p.fuse.size = 0, p.detector = w->faces;
    p.style = fu->b->fuse_style ? w->engines[task->model] : NULL;
    p.side_by_side = task->side_by_side;
    int rc = restore_step(w, task, &p, &task->err);
    if (rc != AG_OK)
        return rc;
    fu->embedder = w->embedder;
    return run_pipeline(w, task, &p);
}

/* The frame's steps on the worker: restore=K and the style, then upscale=N as convert does
 * it (the worker's upscaler, its window within --upscale-max-mb, animegan_upscaled_total). The
 * stylised frame is handed over to the upscaled one and freed there: task->out is the one
 * image the runner owns, whatever the outcome (empty on failure). */
static int frame_steps(ag_worker *w, ag_frame_task *task) {
    frame_hook hook = {.w = w};
    w->between_steps = frame_between_steps, w->between_steps_user = &hook;
    int rc = task->fusion ? fuse_frame(w, task) : stylize_frame(w, task);
    if (rc != AG_OK || task->upscale <= 1)
        return rc;
    ag_error err = {0};
    hook.upscaling = 1;
    rc = ag_worker_upscale(w, task->upscale, task->out, &err);
    if (rc != AG_OK) {
        ag_image_fini(task->out);
        ag_jobs_set_error(&task->err, rc, "upscale: %s",
                          err.message[0] ? err.message : ag_error_name(rc));
    }
    return rc;
}

void ag_jobs_run_frame(ag_worker *w, ag_frame_task *task) {
    ag_server *s = w->server;
    atomic_fetch_add(&s->busy_workers, 1);
    atomic_store(&w->busy_since_us, ag_now_us());
    ag_worker_use_models(w, task->model, -1); /* the budget's one arena (worker.c) */
    int rc = frame_steps(w, task);
    w->between_steps = NULL, w->between_steps_user = NULL;
    size_t arena = ag_worker_upscaler_arena_bytes(w);
    for (int i = 0; i < s->model_count; i++)
        arena += ag_engine_arena_bytes(w->engines[i]);
    atomic_store(&w->arena_bytes, arena);
    atomic_store(&w->busy_since_us, 0);
    atomic_fetch_sub(&s->busy_workers, 1);
    pthread_mutex_lock(&task->lock);
    task->rc = rc;
    task->done = 1;
    pthread_cond_signal(&task->cond);
    pthread_mutex_unlock(&task->lock);
}

/* ---- the runner ---------------------------------------------------------------------------- */

static int on_progress(void *user, int64_t done, int64_t total) {
    ag_jobs *j = user;
    pthread_mutex_lock(&j->lock);
    job *b = j->current;
    int cancel = !b || atomic_load(&b->cancel) || j->stopping;
    if (b) {
        b->frames_done = done;
        b->frames_total = total;
    }
    pthread_mutex_unlock(&j->lock);
    atomic_fetch_add(&j->frames_total, 1);
    return cancel;
}

/* Polled by the video reader between packets (its own thread), and by the worker between
 * the steps of the job's frame. */
static int run_cancelled(void *user) {
    ag_jobs *j = user;
    pthread_mutex_lock(&j->lock);
    int cancel = !j->current || atomic_load(&j->current->cancel) || j->stopping;
    pthread_mutex_unlock(&j->lock);
    return cancel;
}

void ag_jobs_observe_duration(ag_jobs *j, double seconds) {
    int i = 0;
    while (i < AG_JOB_DURATION_BUCKETS && seconds > ag_job_duration_le_s[i])
        i++;
    atomic_fetch_add(&j->duration_buckets[i], 1);
    atomic_fetch_add(&j->duration_count, 1);
    double old = atomic_load(&j->duration_sum_s);
    while (!atomic_compare_exchange_weak(&j->duration_sum_s, &old, old + seconds)) {
    }
}

const char *ag_jobs_error_code(int rc) {
    switch (rc) {
    case AG_E_LIMIT: return "too_large";
    case AG_E_FORMAT: return "undecodable_video";
    case AG_E_UNSUPPORTED: return "unsupported_media_type";
    case AG_E_NOMEM: return "out_of_memory";
    case AG_E_IO: return "spool_error";
    default: return "internal";
    }
}

/* The result's share of the spool: its reservation (the estimate, ag_jobs_result_bytes)
 * and, while the quota has room, as much again; the extra is held during the run and given
 * back once the result is measured. Lock held. */
static size_t output_allowance(ag_jobs *j, const job *b) {
    size_t free_bytes = j->c->quota_bytes > j->spool_bytes ? j->c->quota_bytes - j->spool_bytes : 0;
    size_t more = free_bytes < b->reserved_bytes ? free_bytes : b->reserved_bytes;
    return b->reserved_bytes + more;
}

/* What the run ended as; the job's fields set, lock held. Returns 0 done, 1 failed, 2
 * cancelled (the finished[] index). */
static int record_outcome(ag_jobs *j, job *b, int rc, const ag_video_result *res,
                          const ag_error *err, const char *out) {
    if (b->remove_when_stopped) {
        /* DELETE during the run: cancelled, whatever the run returned (a result that was
         * finished meanwhile goes with the rest). */
        b->state = JOB_CANCELLED;
        return 2;
    }
    if (rc == 0) {
        b->state = JOB_DONE;
        b->file_bytes = ag_jobs_file_size(out);
        b->frames_done = b->frames_total = res->frames;
        b->out_width = res->width;
        b->out_height = res->height;
        snprintf(b->audio_note, sizeof b->audio_note, "%s", res->audio_note);
        return 0;
    }
    b->state = JOB_FAILED;
    if (rc == AG_E_CANCELLED && j->stopping) {
        /* The server is stopping: what a restart reports for it anyway. */
        snprintf(b->error_code, sizeof b->error_code, "interrupted");
        snprintf(b->error, sizeof b->error, "the server stopped during this job; submit it again");
    } else {
        snprintf(b->error_code, sizeof b->error_code, "%s", ag_jobs_error_code(rc));
        snprintf(b->error, sizeof b->error, "%s", err->message);
    }
    return 1;
}

void ag_jobs_video_options(ag_jobs *j, const job *b, size_t allowance, ag_video_options *o) {
    ag_video_options_init(o);
    o->limits.max_pixels = ag_jobs_video_pixels(j->server);
    o->limits.max_seconds = j->c->max_seconds;
    o->limits.max_frames = b->max_frames;
    o->max_side = b->max_side;
    o->side_by_side = b->side_by_side;
    o->out_scale = b->upscale; /* the worker upscales each stylised frame (frame_steps) */
    o->progress = on_progress;
    o->progress_user = j;
    o->stylize = stylize_via_workers;
    o->stylize_user = j;
    o->cancelled = run_cancelled;
    o->cancelled_user = j;
    /* --max-job-result-mb bounds the result whatever the spool would allow */
    o->max_output_bytes = allowance < j->c->max_result_bytes ? allowance : j->c->max_result_bytes;
    o->private_output = 1;
}

/* The track's identity on the frame's worker: its face-recognition descriptor. */
static int embed_face(void *user, const ag_image *frame, const ag_face *face, float *vec,
                      int *dim) {
    ag_job_fusion *fu = user;
    ag_error err = {0};
    *dim = AG_FACE_DESCRIPTOR;
    return fu->embedder ? ag_face_embed(fu->embedder, frame, face, vec, &err) : AG_E_UNSUPPORTED;
}

/* A fusion job's state for its run (the track of its target face, by identity when the
 * server has the face-recognition model), before the frames. */
static int fusion_start(ag_jobs *j, ag_job_fusion *fu, ag_error *err) {
    ag_face_track_options to;
    ag_face_track_options_init(&to);
    to.face = fu->b->target_face > 0 ? fu->b->target_face : 1;
    if (j->server->face_embed)
        to.embed = embed_face, to.embed_user = fu, to.min_similarity = 0.9f;
    int rc = ag_face_track_create(&to, &fu->track, err);
    pthread_mutex_lock(&j->lock);
    j->fusion = rc == AG_OK ? fu : NULL;
    pthread_mutex_unlock(&j->lock);
    return rc;
}

/* Lock held: the fusion's state and its source file released. */
static void fusion_end(ag_jobs *j, ag_job_fusion *fu) {
    if (!fu->b->fusion)
        return;
    char path[4096];
    ag_jobs_path(j, fu->b, "source", path, sizeof path);
    unlink(path);
    j->fusion = NULL;
    ag_face_track_destroy(fu->track);
    ag_image_fini(&fu->source);
}

static void run_job(ag_jobs *j, job *b, size_t allowance) {
    ag_server *s = j->server;
    char in[4096], out[4096];
    ag_jobs_path(j, b, "in", in, sizeof in);
    ag_jobs_result_path(j, b, out, sizeof out);
    ag_video_options o;
    ag_jobs_video_options(j, b, allowance, &o);
    ag_video_result res;
    ag_error err = {0};
    uint64_t start = ag_now_us();
    char id[AG_JOB_ID_MAX + 1];
    memcpy(id, b->id, sizeof id); /* b may be released below */
    ag_job_fusion fusion = {.b = b};
    int rc = b->fusion ? fusion_start(j, &fusion, &err) : AG_OK;
    if (rc == AG_OK)
        rc = ag_video_convert(NULL, in, out, &o, &res, &err);
    double took = (double)(ag_now_us() - start) / 1e6;

    pthread_mutex_lock(&j->lock);
    unlink(in);
    fusion_end(j, &fusion);
    j->current = NULL;
    b->finished_us = ag_now_us();
    b->finished_unix = ag_jobs_now_unix();
    size_t held = allowance + b->file_bytes;
    j->spool_bytes = j->spool_bytes > held ? j->spool_bytes - held : 0;
    b->reserved_bytes = 0;
    b->file_bytes = 0;
    int which = record_outcome(j, b, rc, &res, &err, out);
    j->spool_bytes += b->file_bytes;
    if (b->state == JOB_CANCELLED) {
        ag_jobs_remove_files(j, b);
        ag_jobs_release_slot(j, b);
    } else {
        ag_jobs_save_state(j, b);
    }
    pthread_mutex_unlock(&j->lock);
    atomic_fetch_add(&j->finished[which], 1);
    ag_jobs_observe_duration(j, took);
    static const char *const outcome[] = {"done", "failed", "cancelled"};
    ag_log_event(s->config.log_format, which == 0 ? "info" : "warn", "job %s %s after %.1f s%s%s",
                 id, outcome[which], took, which == 1 ? ": " : "", which == 1 ? err.message : "");
}

/* Finished jobs past --job-ttl: files and slot removed. Lock held. */
static void expire(ag_jobs *j) {
    double now = ag_jobs_now_unix();
    for (int i = 0; i < j->c->max_jobs; i++) {
        job *b = &j->slots[i];
        if (b->state >= JOB_DONE && now - b->finished_unix > j->c->ttl_s) {
            ag_jobs_remove_files(j, b);
            ag_jobs_release_slot(j, b);
        }
    }
}

/* When b's client last had a job started (0: never, while the table remembers). */
static uint64_t client_last_start(const ag_jobs *j, const job *b) {
    uint64_t last = 0;
    for (int i = 0; i < j->c->max_jobs; i++) {
        const job *o = &j->slots[i];
        if (o->state >= JOB_RUNNING && o->started_us > last && !strcmp(o->client, b->client))
            last = o->started_us;
    }
    return last;
}

/* 1 when queued job a runs before b: its client was served less recently, then the older. */
static int runs_before(const job *a, uint64_t a_key, const job *b, uint64_t b_key) {
    return a_key < b_key || (a_key == b_key && a->seq < b->seq);
}

int ag_jobs_ahead(const ag_jobs *j, const job *b) {
    int ahead = 0;
    uint64_t key = client_last_start(j, b);
    for (int i = 0; i < j->c->max_jobs; i++) {
        const job *o = &j->slots[i];
        ahead += o->state == JOB_RUNNING || (o->state == JOB_QUEUED && o != b &&
                                             runs_before(o, client_last_start(j, o), b, key));
    }
    return ahead;
}

/* The next job: of the client served least recently, its oldest (clients take turns).
 * Lock held. */
static job *next_queued(ag_jobs *j) {
    job *best = NULL;
    uint64_t best_key = 0;
    for (int i = 0; i < j->c->max_jobs; i++) {
        job *b = &j->slots[i];
        if (b->state != JOB_QUEUED)
            continue;
        uint64_t key = client_last_start(j, b);
        if (!best || runs_before(b, key, best, best_key)) {
            best = b;
            best_key = key;
        }
    }
    return best;
}

static void *runner_main(void *arg) {
    ag_jobs *j = arg;
    ag_log_thread_request("");
    pthread_mutex_lock(&j->lock);
    while (!j->stopping) {
        expire(j);
        job *b = next_queued(j);
        if (!b) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&j->wake, &j->lock, &ts);
            continue;
        }
        b->state = JOB_RUNNING;
        b->started_us = ag_now_us();
        j->current = b;
        size_t allowance = output_allowance(j, b);
        j->spool_bytes += allowance - b->reserved_bytes; /* held until the result is measured */
        b->reserved_bytes = 0;
        ag_jobs_save_state(j, b);
        pthread_mutex_unlock(&j->lock);
        run_job(j, b, allowance);
        pthread_mutex_lock(&j->lock);
    }
    pthread_mutex_unlock(&j->lock);
    return NULL;
}

/* ---- start / stop ---------------------------------------------------------------------------- */

int ag_jobs_start(ag_server *s, ag_error *err) {
    const ag_jobs_config *c = &s->config.jobs;
    if (!c->dir)
        return 0;
    if (mkdir(c->dir, 0700) != 0 && errno != EEXIST)
        return ag_jobs_set_error(err, AG_E_IO, "--jobs-dir %s: %s", c->dir, strerror(errno));
    if (access(c->dir, R_OK | W_OK | X_OK) != 0)
        return ag_jobs_set_error(err, AG_E_IO, "--jobs-dir %s: %s", c->dir, strerror(errno));
    ag_jobs *j = ag_calloc(1, sizeof *j);
    if (!j || !(j->slots = ag_calloc((size_t)c->max_jobs, sizeof *j->slots))) {
        ag_free(j);
        return ag_jobs_set_error(err, AG_E_NOMEM, "out of memory for %d jobs", c->max_jobs);
    }
    j->server = s;
    j->c = c;
    j->intake_tail = &j->intake_head;
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->wake, NULL);
    pthread_cond_init(&j->intake_wake, NULL);
    s->jobs = j;
    if (c->redis_url) { /* the spool is shared: no recovery here, Redis holds the states */
        if (ag_jobs_redis_open(j, err) != 0 || ag_jobs_redis_start(j, err) != 0) {
            ag_jobs_free(s);
            return err->code;
        }
    } else {
        ag_jobs_recover(j);
        j->runner_started = pthread_create(&j->runner, NULL, runner_main, j) == 0;
    }
    j->intake_started =
        j->runner_started && pthread_create(&j->intake, NULL, ag_jobs_intake_main, j) == 0;
    if (!j->intake_started) {
        ag_jobs_free(s);
        return ag_jobs_set_error(err, AG_E_NOMEM, "cannot start the job runner");
    }
    return 0;
}

void ag_jobs_stop(ag_server *s) {
    ag_jobs *j = s->jobs;
    if (!j)
        return;
    pthread_mutex_lock(&j->lock);
    j->stopping = 1; /* the running job stops at its next frame or packet: "interrupted" */
    pthread_cond_broadcast(&j->wake);
    pthread_cond_broadcast(&j->intake_wake);
    pthread_mutex_unlock(&j->lock);
    if (j->intake_started)
        pthread_join(j->intake, NULL); /* answers the uploads it still holds: 503 */
    if (j->runner_started)
        pthread_join(j->runner, NULL); /* with --jobs-redis its job is handed back */
    ag_jobs_redis_stop(j);
    j->intake_started = j->runner_started = 0;
}

void ag_jobs_free(ag_server *s) {
    ag_jobs *j = s->jobs;
    if (!j)
        return;
    ag_jobs_stop(s);
    ag_jobs_redis_close(j);
    pthread_mutex_destroy(&j->lock);
    pthread_cond_destroy(&j->wake);
    pthread_cond_destroy(&j->intake_wake);
    ag_free(j->slots);
    ag_free(j);
    s->jobs = NULL;
}
