/*
 * jobs.c - video as jobs: POST /api/v1/jobs spools the upload to --jobs-dir and answers 202;
 * one runner thread converts the queued jobs one at a time with ag_video_convert, sending
 * each frame through the same worker queue as photo requests (one frame in the queue at a
 * time, so a photo waits for at most one frame of a job); GET /api/v1/jobs/ID reports the
 * state and progress, GET .../result streams the video from the spool file, DELETE cancels
 * and removes.
 *
 * Bounds: --max-video-mb (from Content-Length, before reading), --max-video-seconds and
 * --max-pixels (from the container header, before a frame is decoded), --max-jobs slots
 * (queued + running + finished results kept), --jobs-quota-mb of spool bytes (an upload
 * reserves twice its size: itself and the result), --job-ttl for finished jobs. Job ids are
 * 128 random bits.
 *
 * The spool holds, per job: ID.json (its state, rewritten by temp file + rename at each
 * transition), ID.in (the video), ID.out.EXT (the result, itself written by temp + rename)
 * and, during an upload, ID.upload. At start-up, jobs that were queued or running are marked
 * failed ("interrupted"), their files and every temporary or orphan file removed: a kill -9
 * leaves nothing behind that the API does not account for.
 *
 * Threads: the MHD thread runs the request handlers (short: file writes of upload chunks,
 * one header probe at the end of an upload, small JSON); the runner thread converts and
 * sweeps expired jobs once a second; workers run frame tasks. The table is under one mutex.
 */
#include "server.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ID_HEX 32
#define STATE_JSON_MAX 4096

typedef enum job_state {
    JOB_FREE = 0,  /* slot unused */
    JOB_UPLOADING, /* reserved by an upload in progress; not visible */
    JOB_QUEUED,
    JOB_RUNNING,
    JOB_DONE,
    JOB_FAILED,
    JOB_CANCELLED,
} job_state;

static const char *const state_names[] = {"free", "uploading", "queued",   "running",
                                          "done", "failed",    "cancelled"};

typedef struct job {
    job_state state;
    char id[ID_HEX + 1];
    char ext[8]; /* "mp4", "webm", "mkv", "mov", "webp", "gif" */
    int model;
    int max_side;
    int side_by_side;
    uint64_t seq; /* FIFO order */
    double created_unix, finished_unix;
    uint64_t started_us, finished_us;
    int64_t frames_done, frames_total;
    size_t reserved_bytes; /* counted in spool_bytes until the files are measured */
    size_t file_bytes;     /* input + result on disk, once known */
    atomic_int cancel;
    int remove_when_stopped; /* DELETE during a run: the runner removes it */
    char error_code[32];
    char error[AG_ERROR_MESSAGE_BYTES];
    char audio_note[160];
} job;

/* A request's upload in progress (ag_request.video_upload). */
typedef struct upload {
    job *slot;
    int fd;
    size_t bytes;
    ag_body_kind kind;
    char boundary[AG_BOUNDARY_BYTES];
} upload;

/* One frame sent to a worker; lives on the runner's stack until `done`. */
typedef struct ag_frame_task {
    const ag_image *in;
    ag_image *out;
    int side_by_side, model, rc, done;
    ag_error err;
    pthread_mutex_t lock;
    pthread_cond_t cond;
} ag_frame_task;

#define DURATION_BUCKETS 10
static const double duration_le_s[DURATION_BUCKETS] = {1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600};

struct ag_jobs {
    ag_server *server;
    const ag_jobs_config *c;
    job *slots; /* c->max_jobs */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t runner;
    int runner_started, stopping;
    uint64_t next_seq;
    size_t spool_bytes;
    job *current; /* the running job, or NULL */
    /* metrics */
    atomic_uint_fast64_t frames_total, finished[3]; /* done, failed, cancelled */
    atomic_uint_fast64_t duration_buckets[DURATION_BUCKETS + 1], duration_count;
    _Atomic double duration_sum_s;
};

/* ---- small helpers -------------------------------------------------------------------------- */

static int set_error(ag_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int set_error(ag_error *err, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    err->code = code;
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return code;
}

static double now_unix(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void job_path(const ag_jobs *j, const job *b, const char *suffix, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s.%s", j->c->dir, b->id, suffix);
}

static void result_path(const ag_jobs *j, const job *b, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s.out.%s", j->c->dir, b->id, b->ext);
}

static size_t file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

static int valid_id(const char *s, size_t n) {
    if (n != ID_HEX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

static int new_id(char out[ID_HEX + 1]) {
    uint8_t bits[16];
    if (getrandom(bits, sizeof bits, 0) != (ssize_t)sizeof bits)
        return -1; /* an id must be a secret: no fallback */
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", bits[i]);
    return 0;
}

static int write_all(int fd, const void *data, size_t n) {
    const uint8_t *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Remove every file of a job (state, input, result, partial upload). */
static void remove_files(ag_jobs *j, const job *b) {
    char path[4096];
    static const char *const suffixes[] = {"json", "in", "upload"};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        job_path(j, b, suffixes[i], path, sizeof path);
        unlink(path);
    }
    result_path(j, b, path, sizeof path);
    unlink(path);
}

/* ---- the state file ------------------------------------------------------------------------ */

/* Write ID.json by temp file + rename; called with the lock held (small, local disk). */
static void save_state(ag_jobs *j, const job *b) {
    ag_text t;
    ag_text_init(&t, STATE_JSON_MAX);
    ag_text_printf(&t,
                   "{\"id\":\"%s\",\"state\":\"%s\",\"ext\":\"%s\",\"model\":%d,\"max_side\":%d,"
                   "\"side_by_side\":%d,\"created\":%.3f,\"finished\":%.3f,\"frames_done\":%lld,"
                   "\"frames_total\":%lld,\"error_code\":",
                   b->id, state_names[b->state], b->ext, b->model, b->max_side, b->side_by_side,
                   b->created_unix, b->finished_unix, (long long)b->frames_done,
                   (long long)b->frames_total);
    ag_text_json_string(&t, b->error_code);
    ag_text_append(&t, ",\"error\":", 9);
    ag_text_json_string(&t, b->error);
    ag_text_append(&t, "}\n", 2);
    size_t size = 0;
    char *text = ag_text_take(&t, &size);
    if (!text)
        return;
    char tmp[4096], path[4096];
    snprintf(tmp, sizeof tmp, "%s/.%s.json.XXXXXX", j->c->dir, b->id);
    job_path(j, b, "json", path, sizeof path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd >= 0) {
        int ok = write_all(fd, text, size) == 0 && fsync(fd) == 0;
        close(fd);
        if (!ok || rename(tmp, path) != 0)
            unlink(tmp);
    }
    ag_free(text);
}

static int state_from_name(const char *name) {
    for (int i = JOB_QUEUED; i <= JOB_CANCELLED; i++)
        if (!strcmp(name, state_names[i]))
            return i;
    return -1;
}

/* Read a state file of a previous run into a free slot; 0 when loaded. */
static int load_state(const char *path, job *b) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char buf[STATE_JSON_MAX + 1];
    ssize_t n = read(fd, buf, STATE_JSON_MAX);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    cJSON *root = cJSON_Parse(buf);
    if (!root)
        return -1;
    int rc = -1;
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
    const cJSON *state = cJSON_GetObjectItemCaseSensitive(root, "state");
    const cJSON *ext = cJSON_GetObjectItemCaseSensitive(root, "ext");
    if (cJSON_IsString(id) && valid_id(id->valuestring, strlen(id->valuestring)) &&
        cJSON_IsString(state) && state_from_name(state->valuestring) > 0 && cJSON_IsString(ext) &&
        strlen(ext->valuestring) < sizeof b->ext) {
        memset(b, 0, sizeof *b);
        snprintf(b->id, sizeof b->id, "%s", id->valuestring);
        snprintf(b->ext, sizeof b->ext, "%s", ext->valuestring);
        b->state = (job_state)state_from_name(state->valuestring);
        const cJSON *v;
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(root, "created")))
            b->created_unix = v->valuedouble;
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(root, "finished")))
            b->finished_unix = v->valuedouble;
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(root, "frames_done")))
            b->frames_done = (int64_t)v->valuedouble;
        if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(root, "frames_total")))
            b->frames_total = (int64_t)v->valuedouble;
        if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(root, "error_code")))
            snprintf(b->error_code, sizeof b->error_code, "%s", v->valuestring);
        if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(root, "error")))
            snprintf(b->error, sizeof b->error, "%s", v->valuestring);
        rc = 0;
    }
    cJSON_Delete(root);
    return rc;
}

static job *find_job(ag_jobs *j, const char *id, size_t n) {
    if (!valid_id(id, n))
        return NULL;
    for (int i = 0; i < j->c->max_jobs; i++)
        if (j->slots[i].state > JOB_UPLOADING && !strncmp(j->slots[i].id, id, n))
            return &j->slots[i];
    return NULL;
}

static job *free_slot(ag_jobs *j) {
    for (int i = 0; i < j->c->max_jobs; i++)
        if (j->slots[i].state == JOB_FREE)
            return &j->slots[i];
    return NULL;
}

static void release_slot(ag_jobs *j, job *b) {
    size_t held = b->reserved_bytes + b->file_bytes;
    j->spool_bytes = j->spool_bytes > held ? j->spool_bytes - held : 0;
    memset(b, 0, sizeof *b);
}

/* ---- crash recovery -------------------------------------------------------------------------- */

static int has_suffix(const char *name, const char *suffix) {
    size_t n = strlen(name), m = strlen(suffix);
    return n > m && !strcmp(name + n - m, suffix);
}

/* Load ID.json files; jobs that were queued or running did not survive: failed. */
static void recover(ag_jobs *j) {
    DIR *dir = opendir(j->c->dir);
    if (!dir)
        return;
    char path[4096];
    struct dirent *e;
    int interrupted = 0, kept = 0, removed = 0;
    while ((e = readdir(dir)) != NULL) {
        if (!has_suffix(e->d_name, ".json") || e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", j->c->dir, e->d_name);
        job *b = free_slot(j);
        job loaded;
        if (!b || load_state(path, &loaded) != 0 || strncmp(e->d_name, loaded.id, ID_HEX) != 0) {
            unlink(path);
            removed++;
            continue;
        }
        *b = loaded;
        b->seq = j->next_seq++;
        if (b->state == JOB_QUEUED || b->state == JOB_RUNNING) {
            b->state = JOB_FAILED;
            b->finished_unix = now_unix();
            snprintf(b->error_code, sizeof b->error_code, "interrupted");
            snprintf(b->error, sizeof b->error,
                     "the server stopped while this job was %s; submit it again",
                     loaded.state == JOB_QUEUED ? "queued" : "running");
            char in[4096], out[4096];
            job_path(j, b, "in", in, sizeof in);
            result_path(j, b, out, sizeof out);
            unlink(in);
            unlink(out);
            save_state(j, b);
            interrupted++;
        }
        if (b->state == JOB_DONE) {
            result_path(j, b, path, sizeof path);
            if (access(path, R_OK) != 0) {
                b->state = JOB_FAILED;
                snprintf(b->error_code, sizeof b->error_code, "result_lost");
                snprintf(b->error, sizeof b->error, "the result file is gone");
                save_state(j, b);
            }
        }
        char in[4096], out[4096];
        job_path(j, b, "in", in, sizeof in);
        result_path(j, b, out, sizeof out);
        b->file_bytes = file_size(in) + file_size(out);
        j->spool_bytes += b->file_bytes;
        kept++;
    }
    /* Everything else is a temporary or an orphan: uploads cut by the crash, temp files of
     * the muxer and of state writes, inputs and results whose state file is gone. */
    rewinddir(dir);
    while ((e = readdir(dir)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        int keep = 0;
        if (e->d_name[0] != '.' && strlen(e->d_name) > ID_HEX && e->d_name[ID_HEX] == '.') {
            job *b = find_job(j, e->d_name, ID_HEX);
            const char *rest = e->d_name + ID_HEX + 1;
            keep =
                b && (!strcmp(rest, "json") || (!strcmp(rest, "in") && b->state <= JOB_RUNNING) ||
                      (!strncmp(rest, "out.", 4) && b->state == JOB_DONE));
        }
        if (!keep) {
            snprintf(path, sizeof path, "%s/%s", j->c->dir, e->d_name);
            if (unlink(path) == 0)
                removed++;
        }
    }
    closedir(dir);
    ag_log_event(j->server->config.log_format, "info",
                 "jobs: %s: %d job(s) kept, %d interrupted job(s) marked failed, %d stale "
                 "file(s) removed",
                 j->c->dir, kept, interrupted, removed);
}

/* ---- frames through the workers ------------------------------------------------------------- */

/* ag_video_stylize_fn: one frame into the shared queue, wait for the worker. */
static int stylize_via_workers(void *user, const ag_image *in, int side_by_side, ag_image *out,
                               ag_error *err) {
    ag_jobs *j = user;
    ag_frame_task task = {.in = in, .out = out, .side_by_side = side_by_side};
    pthread_mutex_lock(&j->lock);
    task.model = j->current ? j->current->model : 0;
    pthread_mutex_unlock(&j->lock);
    pthread_mutex_init(&task.lock, NULL);
    pthread_cond_init(&task.cond, NULL);
    int rc;
    if (ag_queue_push_frame(&j->server->queue, &task) != 0) {
        rc = set_error(err, AG_E_CANCELLED, "the server is stopping");
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

void ag_jobs_run_frame(ag_worker *w, ag_frame_task *task) {
    ag_server *s = w->server;
    atomic_fetch_add(&s->busy_workers, 1);
    atomic_store(&w->busy_since_us, ag_now_us());
    ag_worker_use_models(w, task->model, -1); /* the budget's one arena (worker.c) */
    int rc =
        ag_stylize(w->engines[task->model], task->in, task->side_by_side, task->out, &task->err);
    size_t arena = 0;
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

/* ---- the runner --------------------------------------------------------------------------------
 */

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

static void observe_duration(ag_jobs *j, double seconds) {
    int i = 0;
    while (i < DURATION_BUCKETS && seconds > duration_le_s[i])
        i++;
    atomic_fetch_add(&j->duration_buckets[i], 1);
    atomic_fetch_add(&j->duration_count, 1);
    double old = atomic_load(&j->duration_sum_s);
    while (!atomic_compare_exchange_weak(&j->duration_sum_s, &old, old + seconds)) {
    }
}

static const char *error_code_of(int rc) {
    switch (rc) {
    case AG_E_LIMIT: return "too_large";
    case AG_E_FORMAT: return "undecodable_video";
    case AG_E_UNSUPPORTED: return "unsupported_media_type";
    case AG_E_NOMEM: return "out_of_memory";
    case AG_E_IO: return "spool_error";
    default: return "internal";
    }
}

static size_t video_pixels(const ag_server *s) {
    const ag_server_config *c = &s->config;
    return c->jobs.max_pixels < c->max_pixels ? c->jobs.max_pixels : c->max_pixels;
}

static void run_job(ag_jobs *j, job *b) {
    ag_server *s = j->server;
    char in[4096], out[4096];
    job_path(j, b, "in", in, sizeof in);
    result_path(j, b, out, sizeof out);
    ag_video_options o;
    ag_video_options_init(&o);
    o.limits.max_pixels = video_pixels(s);
    o.limits.max_seconds = j->c->max_seconds;
    o.max_side = b->max_side;
    o.side_by_side = b->side_by_side;
    o.progress = on_progress;
    o.progress_user = j;
    o.stylize = stylize_via_workers;
    o.stylize_user = j;
    ag_video_result res;
    ag_error err = {0};
    uint64_t start = ag_now_us();
    char id[ID_HEX + 1];
    memcpy(id, b->id, sizeof id); /* b may be released below */
    int rc = ag_video_convert(NULL, in, out, &o, &res, &err);
    double took = (double)(ag_now_us() - start) / 1e6;

    pthread_mutex_lock(&j->lock);
    unlink(in);
    j->current = NULL;
    b->finished_us = ag_now_us();
    b->finished_unix = now_unix();
    size_t held = b->reserved_bytes + b->file_bytes;
    j->spool_bytes = j->spool_bytes > held ? j->spool_bytes - held : 0;
    b->reserved_bytes = 0;
    b->file_bytes = rc == 0 ? file_size(out) : 0;
    j->spool_bytes += b->file_bytes;
    int which;
    if (rc == 0) {
        b->state = JOB_DONE;
        b->frames_done = b->frames_total = res.frames;
        snprintf(b->audio_note, sizeof b->audio_note, "%s", res.audio_note);
        which = 0;
    } else if (rc == AG_E_CANCELLED && j->stopping && !b->remove_when_stopped) {
        /* The server is stopping: what a restart reports for it anyway. */
        b->state = JOB_FAILED;
        snprintf(b->error_code, sizeof b->error_code, "interrupted");
        snprintf(b->error, sizeof b->error, "the server stopped during this job; submit it again");
        which = 1;
    } else if (rc == AG_E_CANCELLED) {
        b->state = JOB_CANCELLED;
        which = 2;
    } else {
        b->state = JOB_FAILED;
        snprintf(b->error_code, sizeof b->error_code, "%s", error_code_of(rc));
        snprintf(b->error, sizeof b->error, "%s", err.message);
        which = 1;
    }
    int remove = b->state == JOB_CANCELLED;
    if (remove) {
        remove_files(j, b);
        release_slot(j, b);
    } else {
        save_state(j, b);
    }
    pthread_mutex_unlock(&j->lock);
    atomic_fetch_add(&j->finished[which], 1);
    observe_duration(j, took);
    static const char *const outcome[] = {"done", "failed", "cancelled"};
    ag_log_event(s->config.log_format, rc == 0 ? "info" : "warn", "job %.8s %s after %.1f s%s%s",
                 id, outcome[which], took, rc && rc != AG_E_CANCELLED ? ": " : "",
                 rc && rc != AG_E_CANCELLED ? err.message : "");
}

/* Finished jobs past --job-ttl: files and slot removed. Lock held. */
static void expire(ag_jobs *j) {
    double now = now_unix();
    for (int i = 0; i < j->c->max_jobs; i++) {
        job *b = &j->slots[i];
        if (b->state >= JOB_DONE && now - b->finished_unix > j->c->ttl_s) {
            remove_files(j, b);
            release_slot(j, b);
        }
    }
}

static job *next_queued(ag_jobs *j) {
    job *best = NULL;
    for (int i = 0; i < j->c->max_jobs; i++) {
        job *b = &j->slots[i];
        if (b->state == JOB_QUEUED && (!best || b->seq < best->seq))
            best = b;
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
        save_state(j, b);
        pthread_mutex_unlock(&j->lock);
        run_job(j, b);
        pthread_mutex_lock(&j->lock);
    }
    pthread_mutex_unlock(&j->lock);
    return NULL;
}

/* ---- start / stop ------------------------------------------------------------------------------
 */

int ag_jobs_start(ag_server *s, ag_error *err) {
    const ag_jobs_config *c = &s->config.jobs;
    if (!c->dir)
        return 0;
    if (mkdir(c->dir, 0700) != 0 && errno != EEXIST)
        return set_error(err, AG_E_IO, "--jobs-dir %s: %s", c->dir, strerror(errno));
    if (access(c->dir, R_OK | W_OK | X_OK) != 0)
        return set_error(err, AG_E_IO, "--jobs-dir %s: %s", c->dir, strerror(errno));
    ag_jobs *j = ag_calloc(1, sizeof *j);
    if (!j || !(j->slots = ag_calloc((size_t)c->max_jobs, sizeof *j->slots))) {
        ag_free(j);
        return set_error(err, AG_E_NOMEM, "out of memory for %d jobs", c->max_jobs);
    }
    j->server = s;
    j->c = c;
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->wake, NULL);
    recover(j);
    if (pthread_create(&j->runner, NULL, runner_main, j) != 0) {
        ag_free(j->slots);
        ag_free(j);
        return set_error(err, AG_E_NOMEM, "cannot start the job runner");
    }
    j->runner_started = 1;
    s->jobs = j;
    return 0;
}

void ag_jobs_stop(ag_server *s) {
    ag_jobs *j = s->jobs;
    if (!j || !j->runner_started)
        return;
    pthread_mutex_lock(&j->lock);
    j->stopping = 1; /* the running job stops at its next frame and stays "cancelled"... */
    pthread_cond_broadcast(&j->wake);
    pthread_mutex_unlock(&j->lock);
    pthread_join(j->runner, NULL);
    j->runner_started = 0;
}

void ag_jobs_free(ag_server *s) {
    ag_jobs *j = s->jobs;
    if (!j)
        return;
    ag_jobs_stop(s);
    pthread_mutex_destroy(&j->lock);
    pthread_cond_destroy(&j->wake);
    ag_free(j->slots);
    ag_free(j);
    s->jobs = NULL;
}

/* ---- HTTP
 * ---------------------------------------------------------------------------------------- */

/* Queue a response made here (the body, if any, is ag_malloc'ed and owned by r). */
static int reply(struct MHD_Connection *conn, ag_request *r, int status, const char *content_type,
                 char *body, size_t size, const char *location) {
    ag_free(r->out);
    r->out = (uint8_t *)body;
    r->out_size = body ? size : 0;
    r->status = status;
    r->content_type = content_type;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(r->out_size, body, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "X-Request-Id", r->id);
    MHD_add_response_header(resp, "Content-Type", content_type);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    if (location && status != 405)
        MHD_add_response_header(resp, "Location", location);
    if (r->retry_after_s > 0) {
        char num[16];
        snprintf(num, sizeof num, "%d", r->retry_after_s);
        MHD_add_response_header(resp, "Retry-After", num);
    }
    if (status == 405)
        MHD_add_response_header(resp, "Allow", location ? location : "GET, DELETE");
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, resp);
    MHD_destroy_response(resp);
    atomic_store(&r->state, AG_REQ_REPLIED);
    return ret;
}

static int reply_error(struct MHD_Connection *conn, ag_request *r, int status, const char *code,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int reply_error(struct MHD_Connection *conn, ag_request *r, int status, const char *code,
                       const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t cap = 64 + 2 * strlen(code) + 6 * strlen(msg);
    char *buf = ag_malloc(cap);
    size_t n = buf ? ag_json_error(buf, cap, code, msg) : 0;
    r->error_code = code;
    return reply(conn, r, status, "application/json", buf, n, NULL);
}

static void job_json(ag_text *t, const ag_jobs *j, const job *b) {
    ag_text_printf(t, "{\"id\":\"%s\",\"state\":\"%s\",\"frames_done\":%lld,\"frames_total\":%lld",
                   b->id, state_names[b->state], (long long)b->frames_done,
                   (long long)b->frames_total);
    if (b->state == JOB_RUNNING && b->frames_done > 0) {
        double elapsed = (double)(ag_now_us() - b->started_us) / 1e6;
        double left = (double)(b->frames_total - b->frames_done) * elapsed / (double)b->frames_done;
        ag_text_printf(t, ",\"eta_s\":%.1f", left > 0 ? left : 0);
    }
    if (b->state == JOB_QUEUED) {
        int ahead = 0;
        for (int i = 0; i < j->c->max_jobs; i++)
            ahead += (j->slots[i].state == JOB_QUEUED && j->slots[i].seq < b->seq) ||
                     j->slots[i].state == JOB_RUNNING;
        ag_text_printf(t, ",\"jobs_ahead\":%d", ahead);
    }
    ag_text_printf(t, ",\"url\":\"/api/v1/jobs/%s\"", b->id);
    if (b->state == JOB_DONE) {
        ag_text_printf(t, ",\"result_url\":\"/api/v1/jobs/%s/result\",\"format\":\"%s\"", b->id,
                       b->ext);
        if (b->audio_note[0]) {
            ag_text_append(t, ",\"audio\":", 9);
            ag_text_json_string(t, b->audio_note);
        }
    }
    if (b->state == JOB_FAILED) {
        ag_text_append(t, ",\"error\":{\"code\":", 17);
        ag_text_json_string(t, b->error_code);
        ag_text_append(t, ",\"message\":", 11);
        ag_text_json_string(t, b->error);
        ag_text_append(t, "}", 1);
    }
    ag_text_append(t, "}\n", 2);
}

static int reply_job(struct MHD_Connection *conn, ag_request *r, ag_jobs *j, const job *b,
                     int status) {
    ag_text t;
    ag_text_init(&t, STATE_JSON_MAX);
    job_json(&t, j, b);
    size_t size = 0;
    char *body = ag_text_take(&t, &size);
    if (!body)
        return reply_error(conn, r, 503, "out_of_memory", "the server is out of memory");
    char location[64];
    snprintf(location, sizeof location, "/api/v1/jobs/%s", b->id);
    return reply(conn, r, status, "application/json", body, size, status == 202 ? location : NULL);
}

/* Options of POST /api/v1/jobs: model, max_side, side_by_side (as convert) and format. */
typedef struct job_options {
    ag_server *s;
    ag_convert_options convert;
    unsigned seen;
    char ext[8];
    int failed;
    ag_reply_error err;
} job_options;

static enum MHD_Result option_iter(void *cls, enum MHD_ValueKind kind, const char *key,
                                   const char *value) {
    (void)kind;
    job_options *o = cls;
    if (o->failed)
        return MHD_NO;
    if (!strcmp(key, "format")) {
        static const char *const formats[] = {"mp4", "webm", "mkv", "mov", "webp", "gif"};
        for (size_t i = 0; value && i < sizeof formats / sizeof formats[0]; i++)
            if (!strcmp(value, formats[i]))
                return snprintf(o->ext, sizeof o->ext, "%s", value), MHD_YES;
        ag_reply_error_set(&o->err, 400, "bad_option",
                           "format: '%.40s' is not mp4, webm, mkv, mov, webp or gif",
                           value ? value : "");
        o->failed = 1;
        return MHD_NO;
    }
    if (!strcmp(key, "portrait") || !strcmp(key, "quality")) {
        ag_reply_error_set(&o->err, 400, "bad_option", "%s applies to photos, not video", key);
        o->failed = 1;
        return MHD_NO;
    }
    ag_server *s = o->s;
    if (ag_convert_option_set(&o->convert, &o->seen, key, value, s->model_names, s->model_count,
                              s->config.max_side, &o->err) != 0) {
        o->failed = 1;
        return MHD_NO;
    }
    return MHD_YES;
}

static int raw_type_ok(const char *ct) {
    if (!ct || !ct[0])
        return 1;
    return !strncasecmp(ct, "video/", 6) || !strncasecmp(ct, "application/octet-stream", 24) ||
           !strncasecmp(ct, "image/gif", 9) || !strncasecmp(ct, "image/webp", 10);
}

static int create_headers(ag_jobs *j, struct MHD_Connection *conn, ag_request *r) {
    ag_server *s = j->server;
    job_options o = {.s = s};
    snprintf(o.ext, sizeof o.ext, "mp4");
    ag_convert_options_init(&o.convert, s->config.max_side);
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, option_iter, &o);
    if (o.failed)
        return reply_error(conn, r, o.err.status, o.err.code, "%s", o.err.message);
    if (!atomic_load(&s->accepting))
        return r->retry_after_s = 5,
               reply_error(conn, r, 503, "shutting_down", "the server is shutting down");
    upload u = {.fd = -1};
    const char *ct = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type");
    if (ct && !strncasecmp(ct, "multipart/", 10)) {
        ag_reply_error e;
        if (ag_upload_content_type(ct, &u.kind, u.boundary, &e) != 0)
            return reply_error(conn, r, e.status, e.code, "%s", e.message);
    } else if (!raw_type_ok(ct)) {
        return reply_error(conn, r, 415, "unsupported_media_type",
                           "Content-Type '%.60s' is not a video: send the bytes as video/*, "
                           "image/gif, image/webp or "
                           "application/octet-stream, or as multipart/form-data field 'video'",
                           ct);
    }
    const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
    const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Transfer-Encoding");
    size_t declared = 0;
    if (!te && cl) {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(cl, &end, 10);
        if (!cl[0] || *end || errno || cl[0] == '-' || cl[0] == '+')
            return reply_error(conn, r, 400, "bad_request", "malformed Content-Length");
        declared = (size_t)v;
        if (v > j->c->max_bytes)
            return reply_error(conn, r, 413, "too_large",
                               "the video is %.1f MiB; the limit is %zu MiB (--max-video-mb)",
                               (double)v / 1048576.0, j->c->max_bytes >> 20);
        if (declared == 0)
            return reply_error(conn, r, 400, "bad_request",
                               "the request has no video (empty body)");
    } else if (!te) {
        return reply_error(conn, r, 411, "length_required",
                           "send the video with a Content-Length (or chunked)");
    }
    size_t reserve = 2 * (declared ? declared : j->c->max_bytes);
    pthread_mutex_lock(&j->lock);
    job *b = free_slot(j);
    int quota = b && j->spool_bytes + reserve > j->c->quota_bytes;
    if (b && !quota) {
        memset(b, 0, sizeof *b);
        b->state = JOB_UPLOADING;
        b->reserved_bytes = reserve;
        j->spool_bytes += reserve;
    }
    pthread_mutex_unlock(&j->lock);
    if (!b)
        return r->retry_after_s = 60,
               reply_error(conn, r, 503, "too_many_jobs",
                           "%d jobs are held (queued, running or finished and not yet "
                           "expired); the limit is --max-jobs",
                           j->c->max_jobs);
    if (quota)
        return r->retry_after_s = 60,
               reply_error(conn, r, 507, "spool_full",
                           "the job spool is full (--jobs-quota-mb %zu); try again later",
                           j->c->quota_bytes >> 20);
    upload *up = ag_malloc(sizeof *up);
    char path[4096];
    if (!up || new_id(b->id) != 0) {
        ag_free(up);
        pthread_mutex_lock(&j->lock);
        release_slot(j, b);
        pthread_mutex_unlock(&j->lock);
        return reply_error(conn, r, 503, "out_of_memory", "cannot start the upload");
    }
    *up = u;
    up->slot = b;
    snprintf(b->ext, sizeof b->ext, "%s", o.ext);
    b->model = o.convert.model;
    b->max_side = o.convert.max_side;
    b->side_by_side = o.convert.side_by_side;
    job_path(j, b, "upload", path, sizeof path);
    up->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    r->video_upload = up;
    if (up->fd < 0)
        return reply_error(conn, r, 500, "spool_error", "cannot create the spool file: %s",
                           strerror(errno));
    atomic_store(&r->state, AG_REQ_BODY);
    return MHD_YES;
}

/* The upload is complete: the video itself into ID.in, checked from its header. */
static int create_complete(ag_jobs *j, struct MHD_Connection *conn, ag_request *r) {
    ag_server *s = j->server;
    upload *up = r->video_upload;
    job *b = up->slot;
    char upath[4096], inpath[4096];
    job_path(j, b, "upload", upath, sizeof upath);
    job_path(j, b, "in", inpath, sizeof inpath);
    if (fsync(up->fd) != 0 || close(up->fd) != 0) {
        up->fd = -1;
        return reply_error(conn, r, 500, "spool_error", "cannot write the spool file");
    }
    up->fd = -1;
    if (up->bytes == 0)
        return reply_error(conn, r, 400, "bad_request", "the request has no video (empty body)");
    if (up->kind == AG_BODY_MULTIPART) {
        int fd = open(upath, O_RDONLY | O_CLOEXEC);
        void *map = fd >= 0 ? mmap(NULL, up->bytes, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
        if (fd >= 0)
            close(fd);
        if (map == MAP_FAILED)
            return reply_error(conn, r, 500, "spool_error", "cannot read the spool file");
        ag_multipart_part part;
        int found = ag_multipart_find(map, up->bytes, up->boundary, "video", &part);
        if (found == 1)
            found = ag_multipart_find(map, up->bytes, up->boundary, "image", &part);
        int ok = -1;
        if (found == 0 && part.size > 0) {
            int out = open(inpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            ok = out >= 0 && write_all(out, part.data, part.size) == 0 && fsync(out) == 0 ? 0 : -1;
            if (out >= 0)
                close(out);
        }
        munmap(map, up->bytes);
        unlink(upath);
        if (found != 0 || part.size == 0)
            return reply_error(conn, r, 400, "bad_request",
                               found == 1   ? "the form has no field 'video'"
                               : found == 2 ? "the field 'video' is there more than once"
                                            : "malformed multipart body");
        if (ok != 0)
            return reply_error(conn, r, 500, "spool_error", "cannot write the spool file");
    } else if (rename(upath, inpath) != 0) {
        return reply_error(conn, r, 500, "spool_error", "cannot keep the upload");
    }
    /* The header only: size, duration, codec; refused before any frame is decoded. */
    ag_video_limits limits = {.max_pixels = video_pixels(s), .max_seconds = j->c->max_seconds};
    ag_video_info info;
    ag_error err = {0};
    if (ag_video_probe(inpath, &limits, &info, &err) != 0) {
        unlink(inpath);
        const char *at = strchr(err.message, ':');
        const char *msg =
            at && !strncmp(err.message, j->c->dir, strlen(j->c->dir)) ? at + 2 : err.message;
        int status = err.code == AG_E_LIMIT ? 413 : err.code == AG_E_UNSUPPORTED ? 415 : 422;
        const char *code = err.code == AG_E_LIMIT         ? "too_large"
                           : err.code == AG_E_UNSUPPORTED ? "unsupported_media_type"
                                                          : "undecodable_video";
        return reply_error(conn, r, status, code, "%s", msg);
    }
    pthread_mutex_lock(&j->lock);
    b->frames_total = info.frames;
    b->created_unix = now_unix();
    b->seq = j->next_seq++;
    b->state = JOB_QUEUED;
    /* The reservation now: the input as it is, plus an allowance for the result. */
    size_t in_bytes = file_size(inpath);
    j->spool_bytes -= b->reserved_bytes;
    b->reserved_bytes = in_bytes;
    b->file_bytes = in_bytes;
    j->spool_bytes += b->reserved_bytes + b->file_bytes;
    save_state(j, b);
    pthread_cond_broadcast(&j->wake);
    int rc = reply_job(conn, r, j, b, 202);
    pthread_mutex_unlock(&j->lock);
    ag_free(up);
    r->video_upload = NULL;
    return rc;
}

static int upload_chunk(ag_jobs *j, ag_request *r, const char *data, size_t n) {
    upload *up = r->video_upload;
    if (up->fd < 0)
        return MHD_NO;
    if (n > j->c->max_bytes - up->bytes) {
        r->status = 413;
        r->error_code = "too_large_closed";
        r->closed_by_us = 1;
        return MHD_NO;
    }
    if (write_all(up->fd, data, n) != 0) {
        r->status = 507;
        r->error_code = "spool_write_failed";
        r->closed_by_us = 1;
        return MHD_NO;
    }
    up->bytes += n;
    atomic_store(&r->received, up->bytes);
    return MHD_YES;
}

void ag_jobs_request_done(ag_server *s, ag_request *r) {
    upload *up = r->video_upload;
    if (!up)
        return;
    ag_jobs *j = s->jobs;
    r->video_upload = NULL;
    if (up->fd >= 0)
        close(up->fd);
    char path[4096];
    pthread_mutex_lock(&j->lock);
    job_path(j, up->slot, "upload", path, sizeof path);
    unlink(path);
    job_path(j, up->slot, "in", path, sizeof path);
    unlink(path);
    release_slot(j, up->slot);
    pthread_mutex_unlock(&j->lock);
    ag_free(up);
}

static int get_result(ag_jobs *j, struct MHD_Connection *conn, ag_request *r, job *b) {
    if (b->state != JOB_DONE)
        return reply_error(conn, r, 409, "not_ready",
                           "the job is %s; the result comes when it is done",
                           state_names[b->state]);
    char path[4096];
    result_path(j, b, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0)
            close(fd);
        return reply_error(conn, r, 410, "gone", "the result is no longer there");
    }
    /* MHD reads the file as it sends and closes the fd when the response is destroyed; the
     * open fd keeps the bytes even if the job expires meanwhile. */
    struct MHD_Response *resp = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
    if (!resp) {
        close(fd);
        return MHD_NO;
    }
    const char *mime = !strcmp(b->ext, "webm")   ? "video/webm"
                       : !strcmp(b->ext, "mkv")  ? "video/x-matroska"
                       : !strcmp(b->ext, "mov")  ? "video/quicktime"
                       : !strcmp(b->ext, "webp") ? "image/webp"
                       : !strcmp(b->ext, "gif")  ? "image/gif"
                                                 : "video/mp4";
    char disp[64];
    snprintf(disp, sizeof disp, "attachment; filename=\"anime.%s\"", b->ext);
    MHD_add_response_header(resp, "X-Request-Id", r->id);
    MHD_add_response_header(resp, "Content-Type", mime);
    MHD_add_response_header(resp, "Content-Disposition", disp);
    MHD_add_response_header(resp, "Cache-Control", "no-store");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    r->status = 200;
    r->content_type = mime;
    r->out_size = (size_t)st.st_size;
    enum MHD_Result ret = MHD_queue_response(conn, 200, resp);
    MHD_destroy_response(resp);
    atomic_store(&r->state, AG_REQ_REPLIED);
    return ret;
}

static int delete_job(ag_jobs *j, struct MHD_Connection *conn, ag_request *r, job *b) {
    job copy = *b;
    if (b->state == JOB_RUNNING) {
        atomic_store(&b->cancel, 1);
        b->remove_when_stopped = 1;
        copy.state = JOB_CANCELLED;
    } else {
        if (b->state == JOB_QUEUED) {
            copy.state = JOB_CANCELLED;
            atomic_fetch_add(&j->finished[2], 1);
        }
        remove_files(j, b);
        release_slot(j, b);
    }
    return reply_job(conn, r, j, &copy, 200);
}

int ag_jobs_request(ag_server *s, struct MHD_Connection *conn, const char *url, const char *method,
                    const char *upload_data, size_t *upload_data_size, ag_request *r) {
    ag_jobs *j = s->jobs;
    int state = atomic_load(&r->state);
    if (state == AG_REQ_BODY) {
        if (*upload_data_size) {
            size_t n = *upload_data_size;
            *upload_data_size = 0;
            return upload_chunk(j, r, upload_data, n);
        }
        return create_complete(j, conn, r);
    }
    if (state != AG_REQ_HEADERS)
        return MHD_YES;
    if (!j)
        return reply_error(conn, r, 404, "jobs_disabled",
                           "video jobs are off on this server (start it with --jobs-dir)");
    const char *rest = url + strlen("/api/v1/jobs");
    if (rest[0] == 0 || !strcmp(rest, "/")) {
        if (!strcmp(method, "POST"))
            return create_headers(j, conn, r);
        if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
            return reply(conn, r, 405, "application/json", NULL, 0, "GET, POST");
        if (*upload_data_size) {
            *upload_data_size = 0;
            return MHD_YES;
        }
        /* What the page needs to know before offering video: the limits. */
        char *body = ag_malloc(256);
        int n = body ? snprintf(body, 256,
                                "{\"max_video_bytes\":%zu,\"max_video_seconds\":%.0f,"
                                "\"max_jobs\":%d,\"formats\":[\"mp4\",\"webm\",\"mkv\",\"mov\","
                                "\"webp\",\"gif\"]}\n",
                                j->c->max_bytes, j->c->max_seconds, j->c->max_jobs)
                     : 0;
        return reply(conn, r, 200, "application/json", body, (size_t)n, NULL);
    }
    /* GET/DELETE on one job: answered once the (empty) request is complete. */
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    const char *id = rest + 1;
    size_t id_len = strcspn(id, "/");
    const char *sub = id + id_len;
    int is_result = !strcmp(sub, "/result");
    if (sub[0] && !is_result)
        return reply_error(conn, r, 404, "not_found", "no such path");
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    int del = !strcmp(method, "DELETE") && !is_result;
    if (!get && !del)
        return reply(conn, r, 405, "application/json", NULL, 0, is_result ? "GET" : "GET, DELETE");
    pthread_mutex_lock(&j->lock);
    job *b = find_job(j, id, id_len);
    int rc;
    if (!b)
        rc = reply_error(conn, r, 404, "no_such_job",
                         "no job with this id (unknown, expired after --job-ttl, or deleted)");
    else if (del)
        rc = delete_job(j, conn, r, b);
    else if (is_result)
        rc = get_result(j, conn, r, b);
    else
        rc = reply_job(conn, r, j, b, 200);
    pthread_mutex_unlock(&j->lock);
    return rc;
}

/* ---- metrics
 * ------------------------------------------------------------------------------------- */

void ag_jobs_render_metrics(void *jobs, ag_text *t) {
    ag_jobs *j = jobs;
    if (!j)
        return;
    int counts[JOB_CANCELLED + 1] = {0};
    pthread_mutex_lock(&j->lock);
    for (int i = 0; i < j->c->max_jobs; i++)
        counts[j->slots[i].state]++;
    size_t spool = j->spool_bytes;
    pthread_mutex_unlock(&j->lock);
    ag_text_printf(t,
                   "# HELP animegan_jobs Video jobs held, by state.\n# TYPE animegan_jobs gauge\n");
    for (int s = JOB_UPLOADING; s <= JOB_CANCELLED; s++)
        ag_text_printf(t, "animegan_jobs{state=\"%s\"} %d\n", state_names[s], counts[s]);
    ag_text_printf(t, "# HELP animegan_jobs_finished_total Video jobs finished, by outcome.\n"
                      "# TYPE animegan_jobs_finished_total counter\n");
    static const char *const outcomes[] = {"done", "failed", "cancelled"};
    for (int i = 0; i < 3; i++)
        ag_text_printf(t, "animegan_jobs_finished_total{state=\"%s\"} %llu\n", outcomes[i],
                       (unsigned long long)atomic_load(&j->finished[i]));
    ag_text_printf(t,
                   "# HELP animegan_video_frames_total Video frames stylised.\n"
                   "# TYPE animegan_video_frames_total counter\nanimegan_video_frames_total %llu\n",
                   (unsigned long long)atomic_load(&j->frames_total));
    ag_text_printf(t, "# HELP animegan_job_duration_seconds Time a job took to convert.\n"
                      "# TYPE animegan_job_duration_seconds histogram\n");
    uint64_t cumulative = 0;
    for (int i = 0; i < DURATION_BUCKETS; i++) {
        cumulative += atomic_load(&j->duration_buckets[i]);
        ag_text_printf(t, "animegan_job_duration_seconds_bucket{le=\"%g\"} %llu\n",
                       duration_le_s[i], (unsigned long long)cumulative);
    }
    cumulative += atomic_load(&j->duration_buckets[DURATION_BUCKETS]);
    ag_text_printf(t,
                   "animegan_job_duration_seconds_bucket{le=\"+Inf\"} %llu\n"
                   "animegan_job_duration_seconds_sum %.3f\n"
                   "animegan_job_duration_seconds_count %llu\n",
                   (unsigned long long)cumulative, atomic_load(&j->duration_sum_s),
                   (unsigned long long)atomic_load(&j->duration_count));
    ag_text_printf(t,
                   "# HELP animegan_jobs_spool_bytes Bytes of the job spool, files and "
                   "reservations.\n# TYPE animegan_jobs_spool_bytes gauge\n"
                   "animegan_jobs_spool_bytes %zu\n"
                   "# HELP animegan_jobs_spool_quota_bytes The spool bound (--jobs-quota-mb).\n"
                   "# TYPE animegan_jobs_spool_quota_bytes gauge\n"
                   "animegan_jobs_spool_quota_bytes %zu\n",
                   spool, j->c->quota_bytes);
}
