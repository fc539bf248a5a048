/*
 * jobs_internal.h - what the video jobs' files share: the job table, its lock and states.
 *
 *   jobs_http.c    POST/GET/DELETE /api/v1/jobs..., the query options' table, metrics
 *                  (the MHD thread: headers, upload chunks to the spool file, small JSON)
 *   jobs_intake.c  a complete upload made a job, on its own thread: fsync, the multipart
 *                  copy, the container probe and the work bound, then the answer (202 or
 *                  the refusal) and the connection resumed
 *   jobs_runner.c  the runner thread: one job at a time (clients in turn), frames through
 *                  the workers' queue, TTL expiry; start and stop of both threads
 *   jobs_spool.c   the spool directory: ids, paths, state files, recovery at start-up
 *   jobs_config.c  the options' defaults and the memory budget's term (no threads)
 *
 * One mutex (ag_jobs.lock) guards the table, the spool byte count and the intake list.
 */
#ifndef AG_JOBS_INTERNAL_H
#define AG_JOBS_INTERNAL_H

#include "server.h"

#include <pthread.h>
#include <stdatomic.h>

/* "<port>-" then 128 random bits in hex: the port names the instance that holds the job,
 * which is what a balancer in front of several instances routes by (contrib/nginx). */
#define AG_JOB_SECRET_HEX 32
#define AG_JOB_ID_MAX (6 + AG_JOB_SECRET_HEX)
#define AG_JOB_STATE_JSON_MAX 4096
#define AG_JOB_CLIENT_MAX 48
/* The widest frames the video encoders take (src/video/video.c refuses wider ones before
 * decoding; the intake says so at submission). */
#define AG_JOB_MAX_OUT_SIDE 16384

typedef enum job_state {
    JOB_FREE = 0,  /* slot unused */
    JOB_UPLOADING, /* reserved by an upload in progress or in intake; not visible */
    JOB_QUEUED,
    JOB_RUNNING,
    JOB_DONE,
    JOB_FAILED,
    JOB_CANCELLED,
} job_state;

extern const char *const ag_job_state_names[];

typedef struct job {
    job_state state;
    char id[AG_JOB_ID_MAX + 1];
    char ext[8];                    /* "mp4", "webm", "mkv", "mov", "webp", "gif" */
    char client[AG_JOB_CLIENT_MAX]; /* the uploader's address: the runner takes clients in turn */
    int model;
    int max_side;
    int side_by_side;
    int upscale;               /* upscale=N: the frames N times larger (2, 4); 1 none */
    int restore;               /* restore=K: each frame's faces restored first; 0 none */
    float codeformer_fidelity; /* a CodeFormer restorer's w (restore=K) */
    int out_width, out_height; /* the result's frames (after max_side, side_by_side, upscale) */
    uint64_t seq;              /* FIFO order */
    double created_unix, finished_unix;
    uint64_t started_us, finished_us;
    int64_t frames_done, frames_total;
    int64_t max_frames;    /* the run's frame bound: --max-video-frames and the work bound */
    size_t reserved_bytes; /* counted in spool_bytes until the files are measured */
    size_t file_bytes;     /* input + result on disk, once known */
    atomic_int cancel;
    int remove_when_stopped; /* DELETE during a run: "cancelling", removed once stopped */
    char error_code[32];
    char error[AG_ERROR_MESSAGE_BYTES];
    char audio_note[160];
    /* --jobs-redis: the instance running it, jobs ahead of it, when it started, runs */
    char instance[128];
    int ahead, attempts;
    int segments, segments_left; /* a job cut in segments (--jobs-segment-seconds); 0 whole */
    double started_unix;
    /* A fusion job (its body has a `source` image, kept as ID.source): the source's face
     * fused into the target_face-th face of every frame, followed by a face track; stylised
     * only when model= was given (fuse_style). fuse_given: fusion options in the query. */
    int fusion, fuse_given, fuse_style;
    ag_fuse_options fuse;
    int source_face, target_face;
} job;

/* A fusion job's state while it runs (jobs_runner.c): the source decoded and its face found
 * on the first frame's worker (which has a detector), the track over the frames. Bounded:
 * one source image (at most --fuse-max-pixels) and a track's fixed state. */
typedef struct ag_job_fusion {
    const job *b;
    ag_image source;
    ag_face face;
    int analysed;
    ag_face_track *track;
    ag_face_embedder *embedder; /* the frame's worker's (the track's identity), or NULL */
} ag_job_fusion;

/* A request's upload in progress (ag_request.video_upload), owned by the request: released
 * in its completion callback (ag_jobs_request_done). */
typedef struct ag_job_upload {
    job *slot; /* NULL once it became a job (the table owns the slot then) */
    int fd;
    size_t bytes;
    ag_body_kind kind;
    char boundary[AG_BOUNDARY_BYTES];
    char location[64 + AG_JOB_ID_MAX]; /* of the 202 */
    ag_request *request;
    struct ag_job_upload *next; /* the intake list */
} ag_job_upload;

/* One frame sent to a worker; lives on the runner's stack until `done`. */
struct ag_frame_task {
    const ag_image *in;
    ag_image *out;
    int side_by_side, model, upscale, rc, done; /* upscale: 1 none, else the worker's N */
    int restore;               /* restore=K: the worker's K-th restorer first; 0 none */
    float codeformer_fidelity; /* its w when it is a CodeFormer */
    ag_job_fusion *fusion;     /* a fusion job's frame: NULL otherwise */
    ag_error err;
    pthread_mutex_t lock;
    pthread_cond_t cond;
};

#define AG_JOB_DURATION_BUCKETS 10
extern const double ag_job_duration_le_s[AG_JOB_DURATION_BUCKETS]; /* seconds */

typedef struct ag_jobs_redis ag_jobs_redis;

struct ag_jobs {
    ag_server *server;
    ag_jobs_redis *redis; /* --jobs-redis (jobs_redis.h), else NULL */
    job redis_job;        /* the job this instance runs with --jobs-redis */
    const ag_jobs_config *c;
    job *slots; /* c->max_jobs */
    pthread_mutex_t lock;
    pthread_cond_t wake, intake_wake;
    pthread_t runner, intake;
    int runner_started, intake_started, stopping;
    ag_job_upload *intake_head, **intake_tail; /* complete uploads, at most max_jobs */
    uint64_t next_seq;
    size_t spool_bytes;
    job *current;          /* the running job, or NULL */
    ag_job_fusion *fusion; /* the running job's fusion, or NULL */
    /* metrics */
    atomic_uint_fast64_t frames_total, finished[3]; /* done, failed, cancelled */
    atomic_uint_fast64_t duration_buckets[AG_JOB_DURATION_BUCKETS + 1], duration_count;
    _Atomic double duration_sum_s;
};

/* The result's bytes against the input's, for the spool's reservations: an upscaled video
 * has N^2 times the pixels (1 when not upscaled). */
static inline size_t ag_jobs_result_factor(int upscale) {
    return upscale > 1 ? (size_t)upscale * (size_t)upscale : 1;
}

/* ---- jobs_spool.c ---- */
int ag_jobs_set_error(ag_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
double ag_jobs_now_unix(void);
void ag_jobs_path(const ag_jobs *j, const job *b, const char *suffix, char *buf, size_t cap);
void ag_jobs_result_path(const ag_jobs *j, const job *b, char *buf, size_t cap);
size_t ag_jobs_file_size(const char *path);
int ag_jobs_valid_id(const char *s, size_t n);
int ag_jobs_new_id(const ag_jobs *j, char out[AG_JOB_ID_MAX + 1]);
int ag_jobs_write_all(int fd, const void *data, size_t n);
void ag_jobs_remove_files(ag_jobs *j, const job *b);
void ag_jobs_save_state(ag_jobs *j, const job *b); /* lock held */
job *ag_jobs_find(ag_jobs *j, const char *id, size_t n);
job *ag_jobs_free_slot(ag_jobs *j);
void ag_jobs_release_slot(ag_jobs *j, job *b);
void ag_jobs_recover(ag_jobs *j);

/* ---- jobs_intake.c ---- */
/* Hand a complete upload to the intake thread (the connection is suspended by the caller). */
void ag_jobs_intake_push(ag_jobs *j, ag_job_upload *up);
void *ag_jobs_intake_main(void *arg);
/* The frame bound of a run and the one of the job's work (--max-job-megapixels). */
size_t ag_jobs_video_pixels(const ag_server *s);
int64_t ag_jobs_max_frames(const ag_jobs_config *c);

/* ---- jobs_runner.c ---- */
/* A run's options for job b: its bounds, the frames through the workers, progress and
 * cancellation through j->current (set it to b first), output within `allowance` bytes. */
void ag_jobs_video_options(ag_jobs *j, const job *b, size_t allowance, ag_video_options *o);
const char *ag_jobs_error_code(int rc);
void ag_jobs_observe_duration(ag_jobs *j, double seconds);
/* Jobs that run before queued job b (the running one, and the queued ones by turn). */
int ag_jobs_ahead(const ag_jobs *j, const job *b);

/* ---- jobs_http.c ---- */
/* The JSON of a job (state, progress, urls), as GET /api/v1/jobs/ID answers. */
void ag_jobs_json(ag_text *t, const ag_jobs *j, const job *b);
/* Prepare (not queue) a JSON error / a job's JSON in r, as the intake thread does. */
void ag_jobs_prepare_error(ag_request *r, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
int ag_jobs_prepare_job(ag_request *r, const ag_jobs *j, const job *b, int status);

#endif
