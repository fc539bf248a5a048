/*
 * jobs_redis.h - the video jobs' Redis mode (--jobs-redis): the queue, the jobs' states,
 * progress, leases and cancellation in Redis, the files in --jobs-dir shared by every
 * instance. Without --jobs-redis none of this runs (j->redis is NULL).
 *
 *   jobs_redis.c         the URL, the connections (reconnecting by themselves), the Lua
 *                        scripts every change of a job goes through (atomic in Redis), and
 *                        what the HTTP side asks: submit, load, delete, metrics
 *   jobs_redis_runner.c  the runner (a consumer of the stream's group) and the lease thread
 *
 * In Redis, under the prefix "animegan:" (docs/cluster.md):
 *   stream          one entry per submitted job, read by the group "runners" (one consumer
 *                   per instance); an entry pending at a consumer is its lease, renewed by
 *                   XCLAIM while the job runs, taken over by XAUTOCLAIM once it expired
 *   entries         stream entry -> the job it runs (clients take turns: an entry runs the
 *                   oldest job of the client served least recently, not necessarily its own),
 *                   or a part of a job cut in segments: "ID#N" (segment N), "ID#join"
 *   job:ID          the job's hash (state, options, progress, instance, attempts, cancel)
 *   q:CLIENT        a client's queued jobs; clients (zset): when each was last served
 *   finished (zset) finished jobs by time, for --job-ttl; states (hash) jobs by state;
 *   active (hash)   queued + running jobs by client (--jobs-per-client); reclaims; seq
 *   held (hash), spool   the spool's bytes by job and their sum (--jobs-quota-mb)
 */
#ifndef AG_JOBS_REDIS_H
#define AG_JOBS_REDIS_H

#include "jobs_internal.h"

#include <hiredis/hiredis.h>

/* The outcome of a call on the store. */
enum {
    AG_JR_DOWN = -1, /* Redis unreachable (or answering nonsense): 503, Retry-After */
    AG_JR_OK = 0,
    AG_JR_MISSING = 1, /* no such job */
    AG_JR_REFUSED = 2, /* a cluster bound (per-client jobs, spool) */
};

#define AG_JR_RETRY_AFTER_S 5
#define PREFIX "animegan:"
#define GROUP "runners"
#define STREAM PREFIX "stream"

/* One connection, its lock and when it may try to reconnect. */
typedef struct ag_rconn {
    redisContext *c;
    pthread_mutex_t lock;
    uint64_t retry_at_us;
    int command_ms; /* the command timeout */
} ag_rconn;

struct ag_jobs_redis {
    char host[256], password[256];
    int port, db;
    char instance[128];
    ag_log_format log_format;
    ag_rconn api;    /* the HTTP and intake threads, and /metrics */
    ag_rconn runner; /* the runner (blocking reads) */
    ag_rconn lease;  /* the lease thread */
    pthread_t lease_thread;
    int lease_started;
    pthread_cond_t lease_wake;
    /* the running job's entry (lock: ag_jobs.lock) */
    char entry[64];
    char part[16];  /* "" a whole job, else its segment ("0", "1", ...) or "join" */
    int lease_lost; /* another instance took the job over: its run stops, nothing recorded */
    atomic_uint_fast64_t reclaimed, handed_back, lost;
};

/* ---- jobs_redis.c ---- */
/* Parse --jobs-redis, connect, check and create the group; 0, or -1 with one line in err. */
int ag_jobs_redis_open(ag_jobs *j, ag_error *err);
void ag_jobs_redis_close(ag_jobs *j);
/* A command on k (reconnecting when due); NULL when Redis is down or the reply an error. */
redisReply *ag_rconn_argv(ag_jobs_redis *R, ag_rconn *k, int argc, const char **argv,
                          const size_t *lens);
/* Run one of the scripts (ag_jr_script) with its arguments after the common four. */
typedef enum {
    JR_SUBMIT,
    JR_PICK,
    JR_RENEW,
    JR_FINISH,
    JR_HANDBACK,
    JR_DELETE,
    JR_GET,
    JR_EXPIRE,
    JR_HOLD,
    JR_ADMIT,
    JR_SPLIT,
    JR_PART_DONE,
} ag_jr_script;
redisReply *ag_jobs_redis_eval(ag_jobs *j, ag_rconn *k, ag_jr_script which, int argc,
                               const char **argv);
/* Fill b from a job's HGETALL pairs (plus "ahead"). */
void ag_jobs_redis_parse(const redisReply *pairs, size_t from, job *b);
int ag_jobs_redis_submit(ag_jobs *j, job *b);
int ag_jobs_redis_load(ag_jobs *j, const char *id, size_t n, job *out);
/* DELETE: out gets the job as it was; *cancelling when it runs (it stops, then goes). */
int ag_jobs_redis_delete(ag_jobs *j, const char *id, size_t n, job *out, int *cancelling);
/* Before an upload: the client's jobs within --jobs-per-client and `bytes` of the spool
 * held for job `id` (AG_JR_REFUSED with which in *why: 1 per client, 2 spool). */
int ag_jobs_redis_admit(ag_jobs *j, const char *id, const char *client, size_t bytes, int *why);
/* Hold (delta > 0, within the quota) or give back (< 0) spool bytes of job id; "drop"
 * forgets the job's bytes. AG_JR_OK, AG_JR_REFUSED (full) or AG_JR_DOWN. */
int ag_jobs_redis_hold(ag_jobs *j, const char *id, long long delta, int drop);
void ag_jobs_redis_metrics(ag_jobs *j, ag_text *t);

/* ---- jobs_redis_runner.c ---- */
int ag_jobs_redis_start(ag_jobs *j, ag_error *err);
void ag_jobs_redis_stop(ag_jobs *j);

#endif
