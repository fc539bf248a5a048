/*
 * jobs_redis_runner.c - with --jobs-redis, this instance's runner is one consumer of the
 * stream's group: it takes an entry whose lease expired (XAUTOCLAIM: its instance died, or
 * handed it back at SIGTERM) before a new one (XREADGROUP), binds it to a job (the pick
 * script: clients take turns across the cluster) and converts the job as the local runner
 * does, frames through this instance's workers. The result is written under a name of its
 * own and renamed into place before the finish script records it; the input stays until
 * then, so that a run cut anywhere can be run again elsewhere.
 *
 * The lease thread renews the running job's lease every --jobs-lease / 3 (XCLAIM of its own
 * entry, which resets the entry's idle time), writes the progress, and reads the job's
 * cancel flag (DELETE on any instance). When the lease was taken over (this instance
 * stalled past it) the run stops and records nothing. While Redis is down the run goes on;
 * its finish is retried until Redis answers.
 *
 * A video longer than --jobs-segment-seconds is cut at keyframes by the runner that picks it
 * (split): its entry gives way to one entry per segment, which runners anywhere convert at
 * once into ID.segN (run_part), each under its own lease and reclaimed alone; the last one
 * queues the join, whose runner writes the result with the sound of the source
 * (ag_video_join) and finishes the job as a whole run does.
 */
#include "jobs_redis.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

static int stopping(ag_jobs *j) {
    pthread_mutex_lock(&j->lock);
    int s = j->stopping;
    pthread_mutex_unlock(&j->lock);
    return s;
}

/* Wait on cond for up to `seconds` unless the jobs are stopping. */
static void nap(ag_jobs *j, pthread_cond_t *cond, double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = ts.tv_nsec + (long long)(seconds * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    pthread_mutex_lock(&j->lock);
    if (!j->stopping)
        pthread_cond_timedwait(cond, &j->lock, &ts);
    pthread_mutex_unlock(&j->lock);
}

static long long lease_ms(const ag_jobs *j) {
    return (long long)(j->c->lease_s * 1000.0);
}

/* ---- taking an entry --------------------------------------------------------------------- */

static void copy_id(char *dst, size_t cap, const redisReply *r) {
    snprintf(dst, cap, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "");
}

/* An entry whose lease expired: 1 (in entry), 0 none, -1 Redis down. */
static int claim_expired(ag_jobs *j, char *entry, size_t cap) {
    ag_jobs_redis *R = j->redis;
    char idle[32];
    snprintf(idle, sizeof idle, "%lld", lease_ms(j));
    const char *argv[] = {"XAUTOCLAIM", STREAM,  GROUP, R->instance, idle,
                          "0-0",        "COUNT", "1",   "JUSTID"};
    redisReply *r = ag_rconn_argv(R, &R->runner, 9, argv, NULL);
    if (!r)
        return -1;
    int got = 0;
    if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 &&
        r->element[1]->type == REDIS_REPLY_ARRAY && r->element[1]->elements > 0) {
        copy_id(entry, cap, r->element[1]->element[0]);
        got = entry[0] != 0;
    }
    freeReplyObject(r);
    return got;
}

/* A new entry, waiting up to a second: 1, 0 none, -1 Redis down. */
static int read_new(ag_jobs *j, char *entry, size_t cap) {
    ag_jobs_redis *R = j->redis;
    const char *argv[] = {"XREADGROUP", "GROUP", GROUP,     R->instance, "COUNT", "1",
                          "BLOCK",      "1000",  "STREAMS", STREAM,      ">"};
    redisReply *r = ag_rconn_argv(R, &R->runner, 11, argv, NULL);
    if (!r)
        return -1;
    int got = 0;
    /* [[stream, [[id, [field, value]]]]] */
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1) {
        const redisReply *s = r->element[0];
        if (s->type == REDIS_REPLY_ARRAY && s->elements == 2 &&
            s->element[1]->type == REDIS_REPLY_ARRAY && s->element[1]->elements > 0) {
            const redisReply *e = s->element[1]->element[0];
            if (e->type == REDIS_REPLY_ARRAY && e->elements >= 1) {
                copy_id(entry, cap, e->element[0]);
                got = entry[0] != 0;
            }
        }
    }
    freeReplyObject(r);
    return got;
}

/* ---- one run ------------------------------------------------------------------------------- */

typedef struct run_paths {
    char in[4096], tmp[4096], out[4096];
} run_paths;

/* A run's own name for its partial result. */
static uint32_t run_token(void) {
    uint32_t token = 0;
    if (getrandom(&token, sizeof token, 0) != (ssize_t)sizeof token)
        token = (uint32_t)ag_now_us();
    return token;
}

static void paths_of(ag_jobs *j, const job *b, run_paths *p) {
    uint32_t token = run_token();
    ag_jobs_path(j, b, "in", p->in, sizeof p->in);
    ag_jobs_result_path(j, b, p->out, sizeof p->out);
    snprintf(p->tmp, sizeof p->tmp, "%s/%s.run%08x.%s", j->c->dir, b->id, token, b->ext);
}

/* Record the outcome; retried while Redis is down (the lease thread keeps the lease).
 * Returns "ok", "lost", "cancelled", or "" (stopping with Redis down: the lease expires and
 * another instance runs the job again). */
static const char *finish(ag_jobs *j, const char *entry, const job *b, const char *state,
                          const ag_video_result *res, size_t out_bytes) {
    ag_jobs_redis *R = j->redis;
    char frames[32], width[16], height[16], bytes[32];
    snprintf(frames, sizeof frames, "%lld", (long long)(res ? res->frames : b->frames_done));
    snprintf(width, sizeof width, "%d", res ? res->width : b->out_width);
    snprintf(height, sizeof height, "%d", res ? res->height : b->out_height);
    snprintf(bytes, sizeof bytes, "%zu", out_bytes);
    const char *argv[] = {entry,
                          b->id,
                          state,
                          "frames_done",
                          frames,
                          "width",
                          width,
                          "height",
                          height,
                          "bytes",
                          bytes,
                          "audio",
                          res ? res->audio_note : "",
                          "error_code",
                          b->error_code,
                          "error",
                          b->error,
                          "frames_total",
                          res ? frames : "0"};
    int argc = (int)(sizeof argv / sizeof argv[0]) - (res ? 0 : 2);
    for (;;) {
        redisReply *r = ag_jobs_redis_eval(j, &R->runner, JR_FINISH, argc, argv);
        if (r) {
            const char *what = r->type != REDIS_REPLY_STATUS && r->type != REDIS_REPLY_STRING
                                   ? "lost"
                               : !strcmp(r->str, "ok")        ? "ok"
                               : !strcmp(r->str, "cancelled") ? "cancelled"
                                                              : "lost";
            freeReplyObject(r);
            return what;
        }
        if (stopping(j))
            return "";
        nap(j, &R->lease_wake, 1.0);
    }
}

/* The job (or its part: "" for the whole job) back to the queue. */
static void hand_back(ag_jobs *j, const char *entry, const job *b, const char *part) {
    ag_jobs_redis *R = j->redis;
    char idle[32];
    snprintf(idle, sizeof idle, "%lld", lease_ms(j) + 3600000LL);
    const char *argv[] = {entry, b->id, idle, part};
    redisReply *r = ag_jobs_redis_eval(j, &R->runner, JR_HANDBACK, part[0] ? 4 : 3, argv);
    if (r)
        freeReplyObject(r);
    atomic_fetch_add(&R->handed_back, 1);
    ag_log_event(j->server->config.log_format, "info", "job %s handed back (stopping)", b->id);
}

/* Load the job the pick bound to the entry into j->redis_job; 0 or -1. */
static int load_job(ag_jobs *j, const char *id) {
    job b;
    const char *argv[] = {id};
    redisReply *r = ag_jobs_redis_eval(j, &j->redis->runner, JR_GET, 1, argv);
    int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0;
    if (ok)
        ag_jobs_redis_parse(r, 0, &b);
    if (r)
        freeReplyObject(r);
    if (!ok || !b.id[0] || !ag_jobs_valid_id(b.id, strlen(b.id)))
        return -1;
    pthread_mutex_lock(&j->lock);
    j->redis_job = b;
    pthread_mutex_unlock(&j->lock);
    return 0;
}

/* Files of the spool named PREFIX... or .PREFIX... (the encoder's hidden temporary) removed:
 * the partial results a killed run left (ID.runTOKEN.EXT, ID.segN.runTOKEN), or a job's
 * segments (ID.seg). */
static void remove_prefixed(ag_jobs *j, const char *what) {
    DIR *dir = opendir(j->c->dir);
    if (!dir)
        return;
    char prefix[AG_JOB_ID_MAX + 32], hidden[AG_JOB_ID_MAX + 32], path[4096];
    snprintf(prefix, sizeof prefix, "%s", what);
    snprintf(hidden, sizeof hidden, ".%s", what);
    struct dirent *e;
    while ((e = readdir(dir)) != NULL)
        if (!strncmp(e->d_name, prefix, strlen(prefix)) ||
            !strncmp(e->d_name, hidden, strlen(hidden))) {
            snprintf(path, sizeof path, "%s/%s", j->c->dir, e->d_name);
            unlink(path);
        }
    closedir(dir);
}

static void remove_partials(ag_jobs *j, const char *id) {
    char prefix[AG_JOB_ID_MAX + 8];
    snprintf(prefix, sizeof prefix, "%s.run", id);
    remove_prefixed(j, prefix);
}

/* A job's segment files, once it is done, failed or gone. */
static void remove_segments(ag_jobs *j, const char *id) {
    char prefix[AG_JOB_ID_MAX + 8];
    snprintf(prefix, sizeof prefix, "%s.seg", id);
    remove_prefixed(j, prefix);
}

/* ---- a job in segments ----------------------------------------------------------------------- */

/* The containers whose video can be cut and joined (not the animated images). */
static int segmentable(const char *ext) {
    static const char *const exts[] = {"mp4", "mov", "mkv", "webm"};
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++)
        if (!strcmp(ext, exts[i]))
            return 1;
    return 0;
}

/* A video longer than --jobs-segment-seconds: cut at keyframes, its entry replaced by one
 * per segment (the split script), which any instance takes. 1 when the job is no longer
 * this run's (split, or the entry was lost); 0 to run it whole here (short, not a video
 * container, unreadable: the run reports why, or Redis down). */
static int split(ag_jobs *j, const char *entry, const job *b, const char *in) {
    if (!(j->c->segment_s > 0) || !segmentable(b->ext))
        return 0;
    ag_video_options o;
    ag_jobs_video_options(j, b, 0, &o);
    int64_t cuts[AG_VIDEO_MAX_SEGMENTS + 1];
    int n = 1;
    ag_error err = {0};
    if (ag_video_plan_segments(in, j->c->segment_s, &o.limits, cuts, &n, &err) || n < 2)
        return 0;
    char list[(AG_VIDEO_MAX_SEGMENTS + 1) * 24] = "", parts[16], total[32];
    size_t used = 0;
    for (int i = 0; i <= n; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%lld", i ? "," : "",
                                 (long long)cuts[i]);
    snprintf(parts, sizeof parts, "%d", n);
    ag_video_info info = {0};
    int64_t frames = b->frames_total;
    if (frames <= 0 && ag_video_probe(in, &o.limits, &info, &err) == 0)
        frames = info.frames;
    snprintf(total, sizeof total, "%lld", (long long)frames);
    const char *argv[] = {entry, b->id, parts, list, total};
    redisReply *r = ag_jobs_redis_eval(j, &j->redis->runner, JR_SPLIT, 5, argv);
    if (!r)
        return 0;
    int done = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    freeReplyObject(r);
    if (done)
        ag_log_event(j->server->config.log_format, "info",
                     "job %s cut into %d segments (--jobs-segment-seconds %g)", b->id, n,
                     j->c->segment_s);
    return 1;
}

/* The job's cuts (the split wrote them): the number of segments, 0 when unreadable. */
static int load_cuts(ag_jobs *j, const char *id, int64_t cuts[AG_VIDEO_MAX_SEGMENTS + 1]) {
    char key[AG_JOB_ID_MAX + 32];
    snprintf(key, sizeof key, PREFIX "job:%s", id);
    const char *argv[] = {"HGET", key, "cuts"};
    redisReply *r = ag_rconn_argv(j->redis, &j->redis->runner, 3, argv, NULL);
    int n = 0;
    const char *p = r && r->type == REDIS_REPLY_STRING ? r->str : "";
    while (*p && n <= AG_VIDEO_MAX_SEGMENTS) {
        char *end = NULL;
        cuts[n++] = strtoll(p, &end, 10);
        if (end == p || (*end != ',' && *end != 0)) {
            n = 0;
            break;
        }
        p = *end ? end + 1 : end;
    }
    if (r)
        freeReplyObject(r);
    int ok = n >= 3 && *p == 0 && cuts[0] == INT64_MIN && cuts[n - 1] == INT64_MAX;
    return ok ? n - 1 : 0;
}

static void segment_path(ag_jobs *j, const char *id, int index, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s.seg%d", j->c->dir, id, index);
}

/* Convert segment `index`, or join them all (index -1), into tmp. */
static int convert_part(ag_jobs *j, const job *b, const run_paths *p, const int64_t *cuts,
                        int count, int index, ag_video_result *res, ag_error *err) {
    size_t in_bytes = ag_jobs_file_size(p->in); /* a whole run's bound: a part needs less */
    int64_t frames = b->frames_total > 0 ? b->frames_total : b->max_frames;
    size_t allowance =
        2 * ag_jobs_result_bytes(b->ext, frames, b->out_width, b->out_height, in_bytes, b->upscale);
    ag_video_options o;
    ag_jobs_video_options(j, b, allowance, &o);
    if (index >= 0) {
        ag_video_segment seg = {cuts[index], cuts[index + 1], p->out};
        o.segment = &seg;
        return ag_video_convert(NULL, p->in, p->tmp, &o, res, err);
    }
    enum { NAME_MAX_BYTES = 4096 };
    char *names = ag_malloc((size_t)count * NAME_MAX_BYTES);
    if (!names)
        return ag_jobs_set_error(err, AG_E_NOMEM, "out of memory");
    const char *paths[AG_VIDEO_MAX_SEGMENTS];
    for (int i = 0; i < count; i++) {
        segment_path(j, b->id, i, names + (size_t)i * NAME_MAX_BYTES, NAME_MAX_BYTES);
        paths[i] = names + (size_t)i * NAME_MAX_BYTES;
    }
    int rc = ag_video_join(p->in, paths, count, p->tmp, &o, res, err);
    ag_free(names);
    return rc;
}

/* What is left of a job that finished, failed or went: its input and segments. */
static void part_cleanup(ag_jobs *j, const job *b, const char *what, const run_paths *p) {
    if (!strcmp(what, "lost") || !what[0])
        return;
    unlink(p->in);
    remove_segments(j, b->id);
    if (!strcmp(what, "cancelled"))
        ag_jobs_remove_files(j, b);
}

/* One part of a job in segments: segment N ("0", "1", ...) or the join ("join"). */
static void run_part(ag_jobs *j, const char *entry, const char *id, const char *part) {
    ag_jobs_redis *R = j->redis;
    int64_t cuts[AG_VIDEO_MAX_SEGMENTS + 1];
    int count = load_cuts(j, id, cuts);
    int index = strcmp(part, "join") ? atoi(part) : -1;
    if (load_job(j, id) != 0 || count < 2 || index >= count)
        return; /* Redis went away: the entry stays ours until its lease expires */
    job *b = &j->redis_job;
    run_paths p;
    paths_of(j, b, &p);
    char prefix[AG_JOB_ID_MAX + 32];
    snprintf(prefix, sizeof prefix, "%s.seg%s.run", b->id, part);
    remove_prefixed(j, prefix); /* a killed run's partial segment or join */
    if (index < 0)
        remove_partials(j, b->id);
    if (index >= 0) /* the join's partial result is named as a whole run's (ID.runTOKEN.EXT) */
        snprintf(p.tmp, sizeof p.tmp, "%s/%s%08x", j->c->dir, prefix, run_token());
    char keep[4096]; /* where the run's file goes: the segment, or the result */
    snprintf(keep, sizeof keep, "%s", p.out);
    if (index >= 0)
        segment_path(j, b->id, index, keep, sizeof keep);
    pthread_mutex_lock(&j->lock);
    atomic_store(&b->cancel, 0);
    b->remove_when_stopped = 0;
    b->frames_done = 0;
    j->current = b;
    snprintf(R->entry, sizeof R->entry, "%s", entry);
    snprintf(R->part, sizeof R->part, "%s", part);
    R->lease_lost = 0;
    pthread_cond_broadcast(&R->lease_wake);
    pthread_mutex_unlock(&j->lock);
    ag_log_event(j->server->config.log_format, "info", "job %s part %s of %d started on %s", b->id,
                 part, count, R->instance);

    ag_video_result res;
    ag_error err = {0};
    uint64_t start = ag_now_us();
    int rc = convert_part(j, b, &p, cuts, count, index, &res, &err);
    double took = (double)(ag_now_us() - start) / 1e6;

    pthread_mutex_lock(&j->lock);
    j->current = NULL;
    int lost = R->lease_lost, cancel = b->remove_when_stopped, stop = j->stopping;
    R->entry[0] = 0;
    R->part[0] = 0;
    pthread_mutex_unlock(&j->lock);
    if (lost || (rc == AG_E_CANCELLED && stop && !cancel)) {
        unlink(p.tmp);
        if (!lost)
            hand_back(j, entry, b, part);
        return;
    }
    if (rc == 0 && rename(p.tmp, keep) != 0)
        rc = ag_jobs_set_error(&err, AG_E_IO, "cannot keep the result");
    /* A segment stays until the join: held in the spool's bound (the finish gives it back) */
    if (rc == 0 && index >= 0 &&
        ag_jobs_redis_hold(j, b->id, (long long)ag_jobs_file_size(keep), 0) == AG_JR_REFUSED) {
        unlink(keep);
        rc = ag_jobs_set_error(&err, AG_E_IO, "the shared spool is full (--jobs-quota-mb)");
    }
    if (rc != 0) {
        unlink(p.tmp);
        snprintf(b->error_code, sizeof b->error_code, "%s", ag_jobs_error_code(rc));
        snprintf(b->error, sizeof b->error, "%s", err.message);
    }
    const char *what;
    if (index >= 0 && rc == 0) {
        char frames[32];
        snprintf(frames, sizeof frames, "%lld", (long long)res.frames);
        const char *argv[] = {entry, b->id, part, frames};
        redisReply *r = ag_jobs_redis_eval(j, &R->runner, JR_PART_DONE, 4, argv);
        what = r && (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING) &&
                       !strcmp(r->str, "ok")
                   ? "segment"
               : r && (r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_STRING) &&
                       !strcmp(r->str, "cancelled")
                   ? "cancelled"
               : r ? "gone"
                   : "";
        if (r)
            freeReplyObject(r);
    } else {
        size_t bytes = rc == 0 ? ag_jobs_file_size(p.out) : 0;
        what = finish(j, entry, b, rc == 0 ? "done" : "failed", rc == 0 ? &res : NULL, bytes);
    }
    if (strcmp(what, "segment") != 0)
        part_cleanup(j, b, what, &p);
    int which = !strcmp(what, "cancelled") ? 2 : rc == 0 ? 0 : 1;
    if (!strcmp(what, "ok") || !strcmp(what, "cancelled")) {
        atomic_fetch_add(&j->finished[which], 1);
        ag_jobs_observe_duration(j, ag_jobs_now_unix() - b->started_unix);
    }
    static const char *const outcome[] = {"done", "failed", "cancelled"};
    ag_log_event(j->server->config.log_format, which == 0 ? "info" : "warn",
                 "job %s part %s %s after %.1f s (%lld frames; recorded: %s)%s%s", b->id, part,
                 outcome[which], took, (long long)(rc == 0 ? res.frames : 0),
                 what[0] ? what : "no, redis down", rc ? ": " : "", rc ? err.message : "");
}

static void run(ag_jobs *j, const char *entry, const char *id) {
    ag_jobs_redis *R = j->redis;
    if (load_job(j, id) != 0)
        return; /* Redis went away: the entry stays ours until its lease expires */
    job *b = &j->redis_job;
    if (b->attempts > 1)
        remove_partials(j, b->id);
    run_paths p;
    paths_of(j, b, &p);
    if (split(j, entry, b, p.in))
        return;
    size_t in_bytes = ag_jobs_file_size(p.in);
    int64_t frames = b->frames_total > 0 ? b->frames_total : b->max_frames;
    size_t allowance =
        2 * ag_jobs_result_bytes(b->ext, frames, b->out_width, b->out_height, in_bytes, b->upscale);
    ag_video_options o;
    ag_jobs_video_options(j, b, allowance, &o);
    pthread_mutex_lock(&j->lock);
    atomic_store(&b->cancel, 0);
    b->remove_when_stopped = 0;
    j->current = b;
    snprintf(R->entry, sizeof R->entry, "%s", entry);
    R->part[0] = 0;
    R->lease_lost = 0;
    pthread_cond_broadcast(&R->lease_wake);
    pthread_mutex_unlock(&j->lock);
    ag_log_event(j->server->config.log_format, "info", "job %s started on %s (run %d)", b->id,
                 R->instance, b->attempts);

    ag_video_result res;
    ag_error err = {0};
    uint64_t start = ag_now_us();
    int rc = ag_video_convert(NULL, p.in, p.tmp, &o, &res, &err);
    double took = (double)(ag_now_us() - start) / 1e6;

    pthread_mutex_lock(&j->lock);
    j->current = NULL;
    int lost = R->lease_lost, cancel = b->remove_when_stopped, stop = j->stopping;
    R->entry[0] = 0;
    pthread_mutex_unlock(&j->lock);
    if (lost) {
        unlink(p.tmp);
        atomic_fetch_add(&R->lost, 1);
        ag_log_event(j->server->config.log_format, "warn",
                     "job %s: another instance took it over (this one stalled past "
                     "--jobs-lease); its run here is dropped",
                     b->id);
        return;
    }
    if (rc == AG_E_CANCELLED && stop && !cancel) {
        unlink(p.tmp);
        hand_back(j, entry, b, "");
        return;
    }
    const char *state = rc == 0 ? "done" : "failed";
    size_t out_bytes = 0;
    if (rc == 0 && rename(p.tmp, p.out) != 0) {
        rc = ag_jobs_set_error(&err, AG_E_IO, "cannot keep the result");
        state = "failed";
    }
    if (rc == 0)
        out_bytes = ag_jobs_file_size(p.out);
    else {
        unlink(p.tmp);
        snprintf(b->error_code, sizeof b->error_code, "%s", ag_jobs_error_code(rc));
        snprintf(b->error, sizeof b->error, "%s", err.message);
    }
    const char *what = finish(j, entry, b, state, rc == 0 ? &res : NULL, out_bytes);
    if (!strcmp(what, "ok") || !strcmp(what, "cancelled"))
        unlink(p.in);
    if (!strcmp(what, "cancelled"))
        ag_jobs_remove_files(j, b);
    int which = !strcmp(what, "cancelled") ? 2 : rc == 0 ? 0 : 1;
    if (!strcmp(what, "ok") || !strcmp(what, "cancelled")) {
        atomic_fetch_add(&j->finished[which], 1);
        ag_jobs_observe_duration(j, took);
    }
    ag_log_event(j->server->config.log_format, which == 0 ? "info" : "warn",
                 "job %s %s after %.1f s (recorded: %s)%s%s", b->id,
                 which == 0   ? "done"
                 : which == 1 ? "failed"
                              : "cancelled",
                 took, what[0] ? what : "no, redis down", which == 1 ? ": " : "",
                 which == 1 ? err.message : "");
}

/* Bind the entry to a job and run it (or nothing: a cancelled job's entry, a job reclaimed
 * too often, which the script failed). */
static void take(ag_jobs *j, const char *entry, int reclaimed) {
    char limit[16];
    snprintf(limit, sizeof limit, "%d", j->c->max_reclaims);
    const char *argv[] = {entry, limit};
    redisReply *r = ag_jobs_redis_eval(j, &j->redis->runner, JR_PICK, 2, argv);
    char what[16] = "", id[AG_JOB_ID_MAX + 1] = "", part[16] = "";
    if (r && r->type == REDIS_REPLY_ARRAY && (r->elements == 2 || r->elements == 3)) {
        copy_id(what, sizeof what, r->element[0]);
        copy_id(id, sizeof id, r->element[1]);
        if (r->elements == 3)
            copy_id(part, sizeof part, r->element[2]);
    }
    if (r)
        freeReplyObject(r);
    if (!strcmp(what, "failed")) {
        job gone = {0};
        snprintf(gone.id, sizeof gone.id, "%s", id);
        char in[4096];
        ag_jobs_path(j, &gone, "in", in, sizeof in);
        unlink(in);
        remove_segments(j, id);
        ag_log_event(j->server->config.log_format, "warn",
                     "job %s failed: taken over more than --jobs-reclaims %d times", id,
                     j->c->max_reclaims);
    } else if (!strcmp(what, "run") && ag_jobs_valid_id(id, strlen(id))) {
        if (reclaimed)
            atomic_fetch_add(&j->redis->reclaimed, 1);
        run(j, entry, id);
    } else if (!strcmp(what, "cancelled") && ag_jobs_valid_id(id, strlen(id))) {
        job gone = {0};
        snprintf(gone.id, sizeof gone.id, "%s", id);
        snprintf(gone.ext, sizeof gone.ext, "%s", part);
        ag_jobs_remove_files(j, &gone);
        remove_segments(j, id);
        ag_log_event(j->server->config.log_format, "info", "job %s cancelled", id);
    } else if (!strcmp(what, "part") && ag_jobs_valid_id(id, strlen(id)) && part[0]) {
        if (reclaimed)
            atomic_fetch_add(&j->redis->reclaimed, 1);
        run_part(j, entry, id, part);
    }
}

/* ---- the threads ------------------------------------------------------------------------- */

/* Finished jobs past --job-ttl and uploads whose instance died: their files removed here,
 * once (the script hands each to one instance). */
static void sweep(ag_jobs *j) {
    char cutoff[32];
    snprintf(cutoff, sizeof cutoff, "%.3f", ag_jobs_now_unix() - j->c->ttl_s);
    const char *argv[] = {cutoff};
    redisReply *r = ag_jobs_redis_eval(j, &j->redis->runner, JR_EXPIRE, 1, argv);
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i + 1 < r->elements; i += 2) {
        job gone = {0};
        copy_id(gone.id, sizeof gone.id, r->element[i]);
        copy_id(gone.ext, sizeof gone.ext, r->element[i + 1]);
        if (ag_jobs_valid_id(gone.id, strlen(gone.id))) {
            ag_jobs_remove_files(j, &gone);
            remove_segments(j, gone.id);
        }
    }
    if (r)
        freeReplyObject(r);
}

/* The stream and its group, when Redis lost them (restarted without its append-only file:
 * the jobs are gone then, but new ones flow again). */
static void make_group(ag_jobs *j) {
    const char *argv[] = {"XGROUP", "CREATE", STREAM, GROUP, "0", "MKSTREAM"};
    redisReply *r = ag_rconn_argv(j->redis, &j->redis->runner, 6, argv, NULL);
    if (r)
        freeReplyObject(r);
}

static void *runner_main(void *arg) {
    ag_jobs *j = arg;
    ag_log_thread_request("");
    uint64_t next_sweep = 0;
    int was_down = 0;
    while (!stopping(j)) {
        if (ag_now_us() >= next_sweep) {
            sweep(j);
            next_sweep = ag_now_us() + 1000000;
        }
        char entry[64] = "";
        int reclaimed = 1, got = claim_expired(j, entry, sizeof entry);
        if (got == 0) {
            reclaimed = 0;
            got = read_new(j, entry, sizeof entry);
        }
        if (got < 0) {
            if (!was_down) {
                make_group(j);
                ag_log_event(j->server->config.log_format, "warn",
                             "jobs: redis %s:%d unreachable; retrying every second", j->redis->host,
                             j->redis->port);
            }
            was_down = 1;
            nap(j, &j->wake, 1.0);
            continue;
        }
        if (was_down)
            ag_log_event(j->server->config.log_format, "info", "jobs: redis reachable again");
        was_down = 0;
        if (got)
            take(j, entry, reclaimed);
    }
    return NULL;
}

/* One renewal of the running job's lease; its cancel flag and a lost lease applied. */
static void renew(ag_jobs *j) {
    ag_jobs_redis *R = j->redis;
    char entry[64], id[AG_JOB_ID_MAX + 1], done[32], total[32], part[16];
    pthread_mutex_lock(&j->lock);
    job *b = j->current;
    int have = b && R->entry[0] && !R->lease_lost;
    if (have) {
        snprintf(entry, sizeof entry, "%s", R->entry);
        snprintf(id, sizeof id, "%s", b->id);
        snprintf(done, sizeof done, "%lld", (long long)b->frames_done);
        snprintf(total, sizeof total, "%lld", (long long)b->frames_total);
        snprintf(part, sizeof part, "%s", R->part);
    }
    pthread_mutex_unlock(&j->lock);
    if (!have)
        return;
    const char *argv[] = {entry, id, done, total, part};
    redisReply *r = ag_jobs_redis_eval(j, &R->lease, JR_RENEW, part[0] ? 5 : 4, argv);
    if (!r)
        return; /* Redis down: the run goes on */
    int held = -1, cancel = 0;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
        r->element[0]->type == REDIS_REPLY_INTEGER) {
        held = (int)r->element[0]->integer;
        cancel = r->element[1]->type == REDIS_REPLY_STRING && !strcmp(r->element[1]->str, "1");
    }
    freeReplyObject(r);
    pthread_mutex_lock(&j->lock);
    if (j->current == b && !strcmp(R->entry, entry)) {
        if (held == 0 || held == 2) /* taken over, or the job failed elsewhere or went */
            R->lease_lost = 1;
        if (cancel)
            b->remove_when_stopped = 1;
        if (held == 0 || held == 2 || cancel)
            atomic_store(&b->cancel, 1);
    }
    pthread_mutex_unlock(&j->lock);
}

static void *lease_main(void *arg) {
    ag_jobs *j = arg;
    ag_log_thread_request("");
    double every = j->c->lease_s / 3.0;
    while (!stopping(j)) {
        renew(j);
        nap(j, &j->redis->lease_wake, every < 0.2 ? 0.2 : every);
    }
    return NULL;
}

int ag_jobs_redis_start(ag_jobs *j, ag_error *err) {
    j->redis->lease_started = pthread_create(&j->redis->lease_thread, NULL, lease_main, j) == 0;
    if (!j->redis->lease_started)
        return ag_jobs_set_error(err, AG_E_NOMEM, "cannot start the lease thread");
    j->runner_started = pthread_create(&j->runner, NULL, runner_main, j) == 0;
    return j->runner_started ? 0 : ag_jobs_set_error(err, AG_E_NOMEM, "cannot start the runner");
}

void ag_jobs_redis_stop(ag_jobs *j) {
    ag_jobs_redis *R = j->redis;
    if (!R || !R->lease_started)
        return;
    pthread_mutex_lock(&j->lock);
    pthread_cond_broadcast(&R->lease_wake);
    pthread_mutex_unlock(&j->lock);
    pthread_join(R->lease_thread, NULL);
    R->lease_started = 0;
}
