/*
 * server.c - `animegan serve`: start-up (models, workers, memory bound, HTTP), the main
 * thread's loop (signals and queue expiry), and the drain on SIGTERM/SIGINT:
 *
 *   stop accepting (readyz 503, listening socket shut) -> wait for admitted requests to
 *   complete, up to --drain-seconds -> fail what is still queued with 503 -> join the
 *   workers (each finishes its current image) -> let MHD flush -> stop MHD -> exit 0.
 *
 * A second signal skips the rest of the wait. Exit 1 only when start-up fails.
 *
 * ag_server_main is load (models, faces, precision; settings of the process) -> start
 * (queue, cache, the memory bound checked against the machine, workers, jobs, HTTP) ->
 * run (the loop above, then the drain) -> teardown (whatever stage was reached).
 */
#include "server.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Entries of oneDNN's primitive cache (see server_load). */
#define AG_SERVER_ONEDNN_CACHE "64"

static int signal_pipe[2] = {-1, -1};
static volatile sig_atomic_t signal_count;

static void on_signal(int sig) {
    int saved = errno;
    signal_count++;
    unsigned char b = (unsigned char)sig;
    if (signal_pipe[1] >= 0 && write(signal_pipe[1], &b, 1) < 0) {
        /* the pipe is full: a wake-up is already pending */
    }
    errno = saved;
}

/* A handler (not a blocked mask + sigwait): libvips may have started threads before us with
 * the default disposition, and a process-directed signal can land on any of them. */
static int install_signals(void) {
    if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
        return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0)
        return -1;
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

static void restore_signals(void) {
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    for (int i = 0; i < 2; i++) {
        if (signal_pipe[i] >= 0)
            close(signal_pipe[i]);
        signal_pipe[i] = -1;
    }
}

/* Wait up to timeout_ms for a signal; returns 1 when one arrived. */
static int wait_signal(int timeout_ms) {
    struct pollfd p = {.fd = signal_pipe[0], .events = POLLIN};
    int rc = poll(&p, 1, timeout_ms);
    if (rc > 0) {
        unsigned char buf[16];
        while (read(signal_pipe[0], buf, sizeof buf) > 0) {
        }
        return 1;
    }
    return 0;
}

/* Fail queued jobs whose wait is over (504): done here so the client hears back on time
 * even when every worker is busy with a long image. */
static void expire_queue(ag_server *s) {
    void *expired[64];
    int n;
    while ((n = ag_queue_take_expired(&s->queue, ag_now_us(), expired, 64)) > 0) {
        for (int i = 0; i < n; i++) {
            ag_request *r = expired[i];
            r->queue_ms = (double)(ag_now_us() - r->enqueued_us) / 1000.0;
            atomic_fetch_add(&s->metrics.timed_out, 1);
            ag_job_fail(s, r, 504, "queue_timeout",
                        "the server was too busy to start this image in time; try again");
        }
        if (n < 64)
            break;
    }
}

static void cancel_queue(ag_server *s) {
    void *left[64];
    int n;
    while ((n = ag_queue_take_all(&s->queue, left, 64)) > 0)
        for (int i = 0; i < n; i++)
            ag_job_fail(s, left[i], 503, "shutting_down", "the server is shutting down; try again");
}

/* Wait until no convert request is admitted, a deadline passes or (when `interruptible`) a
 * signal arrives. Returns 1 when everything completed. */
static int wait_idle(ag_server *s, uint64_t deadline_us, int interruptible) {
    while (atomic_load(&s->admitted) > 0) {
        if (ag_now_us() >= deadline_us)
            return 0;
        if (wait_signal(20) && interruptible)
            return 0;
        expire_queue(s);
        ag_http_watch(s);
    }
    return 1;
}

/* Wait, at most until `deadline_us` or a signal, until no connection has a request under
 * way (idle kept-alive ones are not waited for). */
static void wait_connections_answered(ag_server *s, uint64_t deadline_us) {
    while (ag_gate_busy(s) > 0 && ag_now_us() < deadline_us)
        if (wait_signal(20))
            return;
}

static void drain(ag_server *s) {
    const ag_server_config *c = &s->config;
    ag_log_format lf = c->log_format;
    atomic_store(&s->accepting, 0);
    uint64_t quiesced_us = ag_now_us();
    int busy = ag_http_quiesce(s);
    ag_log_event(lf, "info",
                 "draining: %d admitted request(s), %d connection(s) with a request under way "
                 "(the listen backlog's included), up to %g s",
                 atomic_load(&s->admitted), busy, c->drain_s);
    uint64_t deadline = quiesced_us + (uint64_t)(c->drain_s * 1e6);
    if (!wait_idle(s, deadline, 1)) {
        ag_log_event(lf, "warn", "drain: %d request(s) still admitted; failing the queued ones",
                     atomic_load(&s->admitted));
        cancel_queue(s);
    }
    /* A running video job stops at its next frame (recorded as interrupted), then the
     * workers finish the image they hold; the queue is closed and empty. */
    ag_jobs_stop(s);
    ag_workers_stop(s);
    cancel_queue(s);
    /* Responses prepared by the workers still have to be sent. */
    wait_idle(s, ag_now_us() + 5000000, 0);
    /* Connections taken from the backlog get their 503 (each closes after its answer); a
     * client slow to finish its head is not waited for past the bound. */
    wait_connections_answered(s, quiesced_us + 2000000);
    ag_http_stop(s);
}

/* The HTTP thread refuses floods of clients (503) and moves bytes; inference is the
 * product. The workers exist by now and keep niceness 0; MHD's thread, created next by
 * this thread, inherits the higher value, so under CPU contention the scheduler gives
 * inference the cores and refusals wait (measured with one worker and 64 clients that
 * ignore Retry-After: -16% of its throughput at equal priority, -2 to -4% at niceness 10;
 * docs/stability.md). This thread only waits for signals afterwards. Linux niceness is
 * per thread. */
static void lower_http_priority(int nice_value, ag_log_format lf) {
    if (nice_value > 0 && setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice_value) != 0)
        ag_log_event(lf, "warn", "cannot set --http-nice %d: %s", nice_value, strerror(errno));
}

static int model_error(ag_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int model_error(ag_error *err, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return err->code = code;
}

/* Serve one more model, `m` (taken: destroyed on failure). Only styles: a network of
 * another kind would answer every request with an error. Names stay unique (they are what
 * clients choose by). */
static int add_loaded(ag_server *s, ag_model *m, ag_error *err) {
    const ag_model_info *info = ag_model_get_info(m);
    int rc = AG_OK;
    if (info->role != AG_MODEL_GENERATOR)
        rc = model_error(err, AG_E_ARG, "%s is a %s network, not a style: it cannot be served",
                         info->path, info->kind);
    for (int j = 0; rc == AG_OK && j < s->model_count; j++)
        if (!strcmp(s->model_names[j], info->name))
            rc = model_error(err, AG_E_ARG, "two models are named '%s'; rename one file",
                             s->model_names[j]);
    if (rc == AG_OK && s->model_count >= AG_SERVER_MAX_MODELS)
        rc = model_error(err, AG_E_LIMIT, "more than %d models to serve (at %s)",
                         AG_SERVER_MAX_MODELS, info->path);
    if (rc) {
        ag_model_destroy(m);
        return rc;
    }
    s->models[s->model_count] = m;
    s->model_names[s->model_count++] = info->name;
    return AG_OK;
}

static int add_model(ag_server *s, const char *name_or_path, ag_error *err) {
    ag_model *m = NULL;
    if (ag_model_load(name_or_path, &m, err) != 0)
        return err->code;
    return add_loaded(s, m, err);
}

static int compare_paths(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Load `path` and serve it when it is a style (other kinds are skipped). */
static int add_if_style(ag_server *s, const char *path, int *served, ag_error *err) {
    ag_model *m = NULL;
    if (ag_model_load(path, &m, err) != 0)
        return err->code;
    if (ag_model_get_info(m)->role != AG_MODEL_GENERATOR) {
        ag_model_destroy(m);
        return AG_OK;
    }
    int rc = add_loaded(s, m, err);
    *served += rc == AG_OK;
    return rc;
}

/* --model NAME|FILE|DIRECTORY: a directory serves every .onnx and .safetensors style in it
 * (face networks and other kinds are skipped), in name order. */
static int load_model_arg(ag_server *s, const char *arg, ag_error *err) {
    struct stat st;
    if (stat(arg, &st) != 0 || !S_ISDIR(st.st_mode))
        return add_model(s, arg, err);
    DIR *dir = opendir(arg);
    if (!dir)
        return model_error(err, AG_E_IO, "%s: %s", arg, strerror(errno));
    char *files[64];
    int count = 0, served = 0, rc = AG_OK;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL && count < 64) {
        size_t len = strlen(e->d_name);
        int onnx = len > 5 && !strcasecmp(e->d_name + len - 5, ".onnx");
        int safetensors = len > 12 && !strcmp(e->d_name + len - 12, ".safetensors");
        if ((onnx || safetensors) && asprintf(&files[count], "%s/%s", arg, e->d_name) > 0)
            count++;
    }
    closedir(dir);
    qsort(files, (size_t)count, sizeof files[0], compare_paths);
    for (int i = 0; i < count; i++) {
        if (rc == AG_OK)
            rc = add_if_style(s, files[i], &served, err);
        free(files[i]);
    }
    if (rc == AG_OK && !served)
        rc = model_error(err, AG_E_NOTFOUND, "%s: no .onnx or .safetensors style in it", arg);
    return rc;
}

/* No --model: every bundled style, the README's default one (hayao) first, then by name. */
static int load_bundled(ag_server *s, ag_error *err) {
    const char *names[16];
    int count = ag_model_list_bundled(names, 16), served = 0, rc = AG_OK;
    if (count > 16)
        count = 16;
    for (int i = 0; i < count; i++)
        if (!strcmp(names[i], AG_SERVER_DEFAULT_MODEL))
            rc = add_if_style(s, names[i], &served, err);
    for (int i = 0; rc == AG_OK && i < count; i++)
        if (strcmp(names[i], AG_SERVER_DEFAULT_MODEL))
            rc = add_if_style(s, names[i], &served, err);
    if (rc == AG_OK && !served)
        rc = add_model(s, AG_SERVER_DEFAULT_MODEL, err); /* says where it was looked for */
    return rc;
}

/* ---- start-up checks -------------------------------------------------------------------- */

/* Descriptors the service can hold at once: per public connection the client's socket and
 * the gate's pair to MHD (3), the admin listener's 16 connections, and a reserve for the
 * listeners, pipes, the spool, model and library files. */
static int fd_limit_check(const ag_server_config *c, ag_log_format lf) {
    rlim_t need = (rlim_t)c->max_connections * 3 + 16 + 128;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur >= need)
        return 0;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
        fprintf(stderr,
                "animegan: --max-connections %d needs %llu file descriptors, the limit is %llu "
                "(ulimit -n, LimitNOFILE=); raise it or lower --max-connections\n",
                c->max_connections, (unsigned long long)need, (unsigned long long)rl.rlim_max);
        return -1;
    }
    rlim_t old = rl.rlim_cur;
    rl.rlim_cur = need;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        fprintf(stderr, "animegan: cannot raise the file descriptor limit from %llu to %llu: %s\n",
                (unsigned long long)old, (unsigned long long)need, strerror(errno));
        return -1;
    }
    ag_log_event(lf, "info", "file descriptor limit raised from %llu to %llu for %d connections",
                 (unsigned long long)old, (unsigned long long)need, c->max_connections);
    return 0;
}

/* A bound above the memory there is can never be kept: refuse it with the formula (a model
 * whose arena is absurd, or settings too large for the machine), naming the settings given
 * that the defaults would otherwise have lowered. */
static int memory_bound_check(const ag_server *s, const char *formula) {
    char why[600], given[200];
    size_t limit = ag_memory_limit(&s->config, why, sizeof why);
    if (s->budget.total_bytes <= limit)
        return 0;
    ag_defaults_given(&s->config, given, sizeof given);
    fprintf(stderr,
            "animegan: the memory bound is above the %.1f MiB of %s: %s; %s%s%sserve fewer or "
            "smaller models, lower --workers, or raise --max-memory-mb\n",
            (double)limit / (1 << 20), why, formula, given[0] ? "lower what was given (" : "",
            given, given[0] ? ") or leave it to the defaults, " : "");
    return -1;
}

/* ---- load, start, run, teardown --------------------------------------------------------- */

/* An upscaler's window must fit --upscale-max-mb: checked on a small image at start-up so a
 * request never finds out. The engine is also prepared there: an fp32 upscaler's Winograd
 * weights are the model's, shared by the workers' engines, and made now they are in the
 * measured base (as make_shared_weights does for the restorers). */
static int check_upscale_window(ag_server *s, ag_error *err) {
    for (int i = 0; i < AG_SERVER_UPSCALES; i++) {
        ag_engine *e = NULL;
        ag_engine_options eo = ag_server_upscaler_engine(&s->config);
        ag_upscale_options uo;
        ag_upscale_options_init(&uo);
        uo.max_bytes = s->config.upscale_max_bytes;
        ag_upscale_plan plan;
        int rc = ag_engine_create(s->upscalers[i], &eo, &e, err);
        if (rc == AG_OK)
            rc = ag_upscale_plan_for(e, 64, 64, &uo, &plan, err);
        if (rc == AG_OK)
            rc = ag_engine_prepare(e, 64, 64, err);
        ag_engine_destroy(e);
        if (rc != AG_OK)
            return rc;
    }
    return 0;
}

/* How well a model of scale `have` serves upscale=`want` (lower is better): its own scale,
 * else the smallest larger (downsized with Lanczos), else the largest. */
static int upscale_rank(int have, int want) {
    return have == want ? 0 : have > want ? have : 2 * AG_UPSCALE_MAX_SCALE - have;
}

/* m, or the loaded model of the same file (then m is destroyed). The list holds every
 * name's file for each upscale=N: it cannot fill. */
static ag_model *keep_upscaler(ag_server *s, ag_model *m) {
    for (int j = 0; j < s->upscale_model_count; j++)
        if (!strcmp(ag_model_get_info(s->upscale_models[j])->path, ag_model_get_info(m)->path)) {
            ag_model_destroy(m);
            return s->upscale_models[j];
        }
    s->upscale_models[s->upscale_model_count++] = m;
    return m;
}

/* upscale=2 and upscale=4 from --upscale-model (repeatable): for each, every name's file for
 * that scale (a bundled family's x2 and x4 files, a user's file its own) is loaded and the
 * best ranked serves it; each file is loaded once. */
static int load_upscalers(ag_server *s, ag_error *err) {
    const ag_server_config *c = &s->config;
    const char *one[1] = {c->upscale_model};
    const char *const *names = c->upscale_model_count ? c->upscale_models : one;
    int count = c->upscale_model_count ? c->upscale_model_count : 1;
    if (!names[0] || !strcmp(names[0], "none"))
        return 0;
    for (int i = 0; i < AG_SERVER_UPSCALES; i++) {
        int want = ag_server_upscale_factor(i);
        for (int n = 0; n < count; n++) {
            ag_model *m = NULL;
            int rc = ag_upscaler_load(names[n], want, &m, err);
            if (rc != AG_OK)
                return rc;
            m = keep_upscaler(s, m);
            const ag_model *best = s->upscalers[i];
            if (!best || upscale_rank(ag_model_get_info(m)->scale, want) <
                             upscale_rank(ag_model_get_info(best)->scale, want))
                s->upscalers[i] = m;
        }
    }
    return check_upscale_window(s, err);
}

/* An fp32 restorer's Winograd weights are the model's, shared by the workers' engines:
 * a throw-away engine planned at the face size makes them now, in the measured base. */
static int make_shared_weights(ag_server *s, const ag_model *restorer, ag_error *err) {
    ag_engine_options ro = s->config.engine;
    ro.precision = s->restore_precision;
    if (ro.precision != AG_PRECISION_FP32 || ro.backend != AG_BACKEND_ONEDNN)
        return AG_OK;
    ag_engine *e;
    int side = ag_model_get_info(restorer)->min_side;
    int rc = ag_engine_create(restorer, &ro, &e, err);
    if (rc == AG_OK)
        rc = ag_engine_prepare(e, side, side, err);
    ag_engine_destroy(e);
    return rc;
}

/* Process settings, signals, the library log, the models and the face networks. */
static int server_load(ag_server *s) {
    const ag_server_config *c = &s->config;
    ag_log_format lf = c->log_format;
    ag_error err = {0};
    /* Large buffers (uploads, images, arenas) come from mmap and go back to the kernel when
     * freed, so RSS returns to its base after each request instead of staying at the
     * high-water mark in the heap. A fixed threshold matters: glibc's default one rises after
     * the first large free and RSS then crept +50 MiB in 1,400 soak requests; with these
     * settings it stays flat (docs/stability.md, "Allocator"). Few arenas bound the heaps. */
    mallopt(M_MMAP_THRESHOLD, 256 * 1024);
    mallopt(M_TRIM_THRESHOLD, 1024 * 1024);
    mallopt(M_ARENA_MAX, 2 + c->workers);

    /* oneDNN keeps up to 1024 compiled primitives (default) keyed by shape, and every new
     * image size adds a layer's worth: over months of photos of all sizes that is growth
     * no formula bounds. Keep a few sizes' worth unless the operator chose otherwise. Set
     * before the first engine is created, which is when oneDNN reads it. */
    setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", AG_SERVER_ONEDNN_CACHE, 0);

    if (install_signals() != 0) {
        fprintf(stderr, "animegan: cannot install signal handlers: %s\n", strerror(errno));
        return -1;
    }
    if (fd_limit_check(c, lf) != 0)
        return -1;
    /* libvips' and GLib's warnings become log lines of ours (they were 21,227 of 26,058
     * lines of one attacked server's log, none of them logfmt or JSON). */
    s->library_log.format = lf;
    s->library_log.counter = &s->metrics.library_messages;
    ag_image_set_log_handler(ag_log_library, &s->library_log);
    uint32_t prefix = 0;
    if (getrandom(&prefix, sizeof prefix, 0) != (ssize_t)sizeof prefix)
        prefix = (uint32_t)time(NULL) ^ (uint32_t)getpid();
    s->id_prefix = prefix;

    int rc = c->model_count ? AG_OK : load_bundled(s, &err);
    for (int i = 0; rc == AG_OK && i < c->model_count; i++)
        rc = load_model_arg(s, c->models[i], &err);
    if (rc != AG_OK) {
        fprintf(stderr, "animegan: %s\n", err.message[0] ? err.message : "cannot load model");
        return -1;
    }
    ag_precision_choice restore_precision;
    if (c->restore_model_count &&
        ag_restore_precision_resolve(c->engine.precision, NULL, &restore_precision) != 0) {
        fprintf(stderr, "animegan: --restore-model: %s\n", restore_precision.note);
        return -1;
    }
    s->restore_precision = c->restore_model_count ? restore_precision.precision : AG_PRECISION_FP32;
    for (int i = 0; i < c->restore_model_count; i++) {
        /* What the workers' engines share (bf16 weights, then the only ones) is made now,
         * in the measured base. */
        if (ag_restore_model_load(c->restore_models[i], &s->restorers[i], &err) != 0 ||
            ag_model_prepare_precision(s->restorers[i], s->restore_precision, 1, &err) != 0 ||
            make_shared_weights(s, s->restorers[i], &err) != 0) {
            fprintf(stderr, "animegan: %s\n", err.message);
            return -1;
        }
        s->restorer_count = i + 1;
    }
    if (load_upscalers(s, &err) != 0) {
        fprintf(stderr, "animegan: --upscale-model: %s\n", err.message);
        return -1;
    }
    /* The face networks: optional (portrait=face then falls back to the centre crop). */
    if (ag_face_models_load(&s->face_detect, &s->face_mesh, &err) != 0)
        ag_log_event(lf, "warn", "faces unavailable (portrait=face crops the centre): %s",
                     err.message);
    else if (ag_face_embed_model_load(&s->face_embed, &err) != 0)
        ag_log_event(lf, "warn", "fuse's target_like unavailable: %s", err.message);
    ag_precision_choice precision; /* auto, or the emulated-bf16 warning: issue 12 */
    if (ag_precision_resolve(c->engine.precision, c->engine.backend, NULL, &precision) != 0) {
        fprintf(stderr, "animegan: %s\n", precision.note);
        return -1;
    }
    s->config.engine.precision = precision.precision;
    if (precision.emulated)
        ag_log_event(lf, "warn", "%s", precision.note);
    return 0;
}

/* The worst-case memory bound: the styles, and per worker the face networks and each
 * restorer's arena and prepared weights at its face size with two crops (the restorers'
 * weights and their bf16 copies, made once before this, are in the measured base). */
static void budget_compute(ag_server *s) {
    const ag_server_config *c = &s->config;
    ag_budget_compute(&s->budget, c, s->models, s->model_count, ag_process_rss_bytes());
    size_t faces = ag_budget_face_bytes(c, s->face_detect, s->face_mesh);
    if (s->face_embed) /* the embedder's arena at 150x150, its crop and input (0.3 MB) */
        faces += ag_engine_arena_bytes_for(s->face_embed, &c->engine, 150, 150) + 1024 * 1024;
    for (int i = 0; i < s->restorer_count; i++) {
        const ag_model_info *ri = ag_model_get_info(s->restorers[i]);
        ag_engine_options ro = c->engine;
        ro.precision = s->restore_precision;
        size_t side = (size_t)ri->min_side;
        faces += ag_engine_arena_bytes_for(s->restorers[i], &ro, ri->min_side, ri->min_side) +
                 ag_engine_prepared_bytes_for(s->restorers[i], &ro, ri->min_side, ri->min_side) +
                 2 * side * side * 4;
    }
    ag_budget_add_faces(&s->budget, faces);
    if (s->face_detect) /* POST /api/v1/fuse runs only with the face models (503) */
        ag_budget_add_fuse(&s->budget, ag_budget_fuse_bytes(c), ag_budget_fuse_response_bytes(c));
    if (s->upscalers[0]) {
        size_t image = 0; /* the largest upscale=N's result at its network's scale */
        for (int i = 0; i < AG_SERVER_UPSCALES; i++) {
            size_t b = ag_upscale_image_bytes(s->upscalers[i], ag_server_upscale_factor(i),
                                              c->max_output_pixels, 4);
            image = b > image ? b : image;
        }
        ag_budget_add_upscale(&s->budget, c->upscale_max_bytes, c->max_output_pixels, image);
    }
    if (c->fuse_cache_entries)
        ag_budget_add_fuse_cache(&s->budget, ag_fuse_cache_bytes(c->fuse_cache_entries));
}

/* The settings not given, from the first level of defaults.c whose bound fits 90% of the
 * memory limit (the rest is for what the workers' start adds to the measured base); logged
 * with the limit and where it came from. */
static int fit_defaults(ag_server *s) {
    char why[600], chosen[300];
    size_t limit = ag_memory_limit(&s->config, why, sizeof why);
    int n = ag_defaults_levels(), level = 0;
    for (; level < n; level++) {
        ag_defaults_apply(&s->config, level);
        budget_compute(s);
        if (s->budget.total_bytes <= limit / 10 * 9)
            break;
    }
    level = level < n ? level : n - 1;
    ag_defaults_describe(&s->config, chosen, sizeof chosen);
    ag_log_event(s->config.log_format, "info",
                 "settings for %.0f MiB (%s): level %d of %d (0 = 8 GiB and up): %s",
                 (double)limit / (1 << 20), why, level, n - 1, chosen);
    return 0;
}

/* The queue, the cache, the workers, the jobs, the memory bound (checked) and HTTP. */
static int server_start(ag_server *s) {
    const ag_server_config *c = &s->config;
    ag_log_format lf = c->log_format;
    ag_error err = {0};
    if (fit_defaults(s) != 0)
        return -1;
    s->admit_limit = c->queue + c->workers;
    /* One more slot with jobs on: the runner's frame in flight (jobs_runner.c). */
    if (ag_queue_init(&s->queue, s->admit_limit + (c->jobs.dir ? 1 : 0)) != 0) {
        fputs("animegan: out of memory\n", stderr);
        return -1;
    }
    if (ag_cache_create(c->cache_bytes, &s->cache) != 0 ||
        ag_fuse_cache_create(c->fuse_cache_entries, c->fuse_cache_per_client, c->fuse_cache_ttl_s,
                             &s->metrics, &s->fuse_cache) != 0) {
        fputs("animegan: out of memory for the cache\n", stderr);
        return -1;
    }
    /* The bound first: an absurd one (a model's arena of petabytes) is refused before any
     * worker tries to plan it. Its base is measured again once the workers exist (their
     * engines and the job runner are part of it). */
    budget_compute(s);
    char formula[640];
    ag_budget_format(&s->budget, formula, sizeof formula);
    if (memory_bound_check(s, formula) != 0)
        return -1;
    if (ag_workers_start(s, &err) != 0) {
        fprintf(stderr, "animegan: %s\n", err.message);
        return -1;
    }
    if (ag_jobs_start(s, &err) != 0) {
        fprintf(stderr, "animegan: %s\n", err.message);
        ag_workers_stop(s);
        return -1;
    }
    ag_budget_rebase(&s->budget, ag_process_rss_bytes());
    ag_budget_format(&s->budget, formula, sizeof formula);
    if (memory_bound_check(s, formula) != 0) {
        ag_jobs_stop(s);
        ag_workers_stop(s);
        return -1;
    }

    lower_http_priority(c->http_nice, lf);
    if (ag_http_start(s, &err) != 0) {
        fprintf(stderr, "animegan: %s\n", err.message);
        ag_jobs_stop(s);
        ag_workers_stop(s);
        return -1;
    }
    atomic_store(&s->accepting, 1);
    atomic_store(&s->ready, 1);
    if (s->admin_daemon)
        ag_log_event(lf, "info",
                     "admin listener (health, readiness, metrics, status) on %s port %d", c->host,
                     s->admin_port);
    char models[256] = "";
    for (int i = 0; i < s->model_count; i++)
        snprintf(models + strlen(models), sizeof models - strlen(models), "%s%s", i ? "," : "",
                 s->model_names[i]);
    /* Before "listening on": whoever waits for that line has the bound already. */
    ag_log_event(lf, "info", "memory bound %s", formula);
    const char *shown = c->host;
    int v6 = strchr(shown, ':') != NULL;
    ag_log_event(lf, "info",
                 "listening on http://%s%s%s:%d/ models=%s workers=%d threads_per_worker=%d "
                 "queue=%d max_upload_mb=%zu max_side=%d cache_mb=%zu precision=%s isa=%s "
                 "onednn_isa=%s cpu=\"%s\"",
                 v6 ? "[" : "", shown, v6 ? "]" : "", s->port, models, c->workers,
                 c->threads_per_worker, c->queue, c->max_upload_bytes >> 20, c->max_side,
                 c->cache_bytes >> 20, ag_precision_name(c->engine.precision),
                 ag_isa_name(ag_cpu_get_info()->isa), ag_cpu_get_info()->onednn_isa,
                 ag_cpu_get_info()->model);
    return 0;
}

/* Serve until a signal, then drain. */
static void server_run(ag_server *s) {
    ag_log_format lf = s->config.log_format;
    while (!wait_signal(50)) {
        expire_queue(s);
        ag_http_watch(s);
    }
    ag_log_event(lf, "info", "signal received: stopping");
    drain(s);
    ag_log_event(lf, "info", "stopped: served %llu image(s)",
                 (unsigned long long)atomic_load(&s->metrics.converted));
}

/* Release everything, whatever stage start-up reached. */
static void server_teardown(ag_server *s) {
    ag_http_stop(s);
    ag_jobs_free(s);
    ag_workers_free(s);
    ag_cache_destroy(s->cache);
    ag_fuse_cache_destroy(s->fuse_cache);
    ag_queue_fini(&s->queue);
    for (int i = 0; i < s->model_count; i++)
        ag_model_destroy((ag_model *)s->models[i]);
    ag_model_destroy(s->face_embed);
    ag_model_destroy(s->face_mesh);
    ag_model_destroy(s->face_detect);
    for (int i = 0; i < s->restorer_count; i++)
        ag_model_destroy(s->restorers[i]);
    for (int i = 0; i < s->upscale_model_count; i++)
        ag_model_destroy(s->upscale_models[i]);
    s->upscale_model_count = 0;
    memset(s->upscalers, 0, sizeof s->upscalers);
    restore_signals();
    ag_image_set_log_handler(NULL, NULL);
    ag_free(s);
}

int ag_server_main(int argc, char **argv) {
    ag_server *s = ag_calloc(1, sizeof *s);
    if (!s) {
        fputs("animegan: out of memory\n", stderr);
        return AG_SERVER_EXIT_FAILED;
    }
    int rc = ag_config_parse(&s->config, argc, argv, ag_cpu_count());
    if (rc != 0) {
        ag_free(s);
        return rc > 0 ? AG_SERVER_EXIT_OK : AG_SERVER_EXIT_USAGE;
    }
    s->start_us = ag_now_us();
    s->listen_fd = -1;
    int ok = server_load(s) == 0 && server_start(s) == 0;
    if (ok)
        server_run(s);
    server_teardown(s);
    return ok ? AG_SERVER_EXIT_OK : AG_SERVER_EXIT_FAILED;
}
