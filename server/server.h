/*
 * server.h - `animegan serve`: the HTTP service over the public API (include/animegan.h).
 *
 * The data path of one conversion:
 *
 *   MHD polling thread                 worker thread (W of them)          MHD polling thread
 *   headers: route, options, admit --> queue (bounded) --> probe, decode, --> resume: queue the
 *   body: buffer (<= max upload)                           stylize, encode     response; the
 *   complete: pick image, suspend                          (own ag_engine)     completion callback
 *                                                                              releases the request
 *
 * Files, one concern each (as in redis): config.c (command line), options.c (query options),
 * upload.c (content types, multipart, image sniffing), queue.c (bounded job queue), worker.c
 * (engines and the conversion), cache.c (LRU result cache), metrics.c (Prometheus counters),
 * budget.c (the worst-case memory formula), log.c (one line per request), json.c (bounded JSON
 * writer), web.c (the embedded page), http.c (libmicrohttpd, routes, request lifecycle) and
 * server.c (start-up, signals, drain).
 *
 * Threads: one MHD polling thread (epoll) does all HTTP work, which is cheap (headers, memcpy
 * of the body, small JSON); W workers do everything image-shaped; the main thread waits for
 * signals and expires queued jobs. Shared counters are atomics; the queue and the cache have
 * their own mutexes; nothing else is shared.
 */
#ifndef AG_SERVER_H
#define AG_SERVER_H

#include "animegan.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* `animegan serve ...` (argv[0] is "serve"). Exit status 0 ok, 1 failed, 2 bad command line. */
int ag_server_main(int argc, char **argv);

/* The upscale=N of slot i (2, 4), and the slot of N (-1 when not offered). */
static inline int ag_server_upscale_factor(int slot) {
    return slot == 0 ? 2 : 4;
}
static inline int ag_server_upscale_slot(int n) {
    return n == 2 ? 0 : n == 4 ? 1 : -1;
}

enum { AG_SERVER_EXIT_OK = 0, AG_SERVER_EXIT_FAILED = 1, AG_SERVER_EXIT_USAGE = 2 };

#define AG_SERVER_MAX_MODELS 8
#define AG_SERVER_DEFAULT_MODEL "hayao" /* first of the bundled styles served by default */
#define AG_SERVER_MAX_RESTORERS 4       /* --restore-model: GPEN / GFPGAN checkpoints */
#define AG_SERVER_MAX_PROXIES 8         /* --trusted-proxy addresses */
#define AG_CLIENT_BYTES 48              /* a client's address as text (INET6_ADDRSTRLEN) */
#define AG_SERVER_UPSCALES 2            /* upscale=2 and upscale=4: AG_SERVER_UPSCALE[i] */
#define AG_SERVER_DEFAULT_UPSCALER "esrgan-slim"
#define AG_SERVER_MAX_UPSCALERS 4 /* --upscale-model, repeatable */
#define AG_REQUEST_ID_BYTES 40    /* up to 36 characters + NUL: fits a UUID or nginx $request_id */
#define AG_REQUEST_KEY_MIN 32     /* a client's id is a status key from this length on */

/* ---- configuration (config.c) ---------------------------------------------------------- */

typedef enum ag_log_format { AG_LOG_LOGFMT = 0, AG_LOG_JSON } ag_log_format;

/* Video jobs (jobs_*.c, jobs_internal.h): off unless dir is set. */
typedef struct ag_jobs_config {
    const char *dir;     /* --jobs-dir: the spool */
    size_t max_bytes;    /* --max-video-mb */
    double max_seconds;  /* --max-video-seconds, from the container header */
    size_t max_pixels;   /* --max-video-pixels: frame size, from the header (and --max-pixels) */
    int max_jobs;        /* --max-jobs: queued + running + finished, held at once */
    size_t quota_bytes;  /* --jobs-quota-mb: spool bytes */
    double ttl_s;        /* --job-ttl: finished jobs are removed after this */
    int max_frames;      /* --max-video-frames: declared or decoded, per job */
    size_t max_work_mpx; /* --max-job-megapixels: frames x output pixels / 1e6, per job */
    size_t max_result_bytes; /* --max-job-result-mb: a result's estimate, then its size */
    int per_client;          /* --jobs-per-client: queued + running jobs of one client; 0 none */
    /* Redis mode (jobs_redis*.c): the queue and the jobs' states in Redis, dir shared */
    const char *redis_url; /* --jobs-redis redis://[:PASSWORD@]HOST:PORT[/DB]; NULL off */
    const char *instance;  /* --instance-name: the consumer name (default HOST:PORT) */
    double lease_s;        /* --jobs-lease: a running job's lease, renewed while it runs */
    int max_reclaims;      /* --jobs-reclaims: times a job is taken over, then failed */
    double segment_s;      /* --jobs-segment-seconds: cut longer videos into segments; 0 off */
} ag_jobs_config;

void ag_jobs_config_defaults(ag_jobs_config *c);

typedef struct ag_server_config {
    const char *host;
    int port;       /* 0: any free port (printed at start-up) */
    int admin_port; /* health, readiness, metrics and status only; 0 any free, -1 none */
    const char *models[AG_SERVER_MAX_MODELS]; /* none given: every bundled style */
    int model_count;
    const char *restore_models[AG_SERVER_MAX_RESTORERS]; /* --restore-model, in order */
    int restore_model_count;
    /* --trusted-proxy: reverse proxies whose X-Forwarded-For names the client */
    char trusted_proxies[AG_SERVER_MAX_PROXIES][AG_CLIENT_BYTES];
    int trusted_proxy_count;
    int client_ipv6_prefix;    /* --client-ipv6-prefix: an IPv6 client is its /N (64) */
    const char *upscale_model; /* --upscale-model: upscale=2 and 4; "none" = off */
    /* --upscale-model given several times: each upscale=N takes the file of scale N, else the
     * smallest larger, else the largest (upscale_model is the first) */
    const char *upscale_models[AG_SERVER_MAX_UPSCALERS];
    int upscale_model_count;
    size_t upscale_max_bytes;  /* --upscale-max-mb: one tile window's memory, per worker */
    size_t max_output_pixels;  /* --max-output-pixels: what a request may ask for */
    int fuse_cache_entries;    /* --fuse-cache-entries: faces of fusion uploads; 0 = off */
    int fuse_cache_per_client; /* --fuse-cache-per-client */
    double fuse_cache_ttl_s;   /* --fuse-cache-ttl */
    int workers;
    int threads;             /* total compute threads; W x threads_per_worker <= threads */
    int threads_per_worker;  /* derived */
    int queue;               /* jobs admitted beyond the ones running */
    double queue_timeout_s;  /* waiting longer in the queue -> 504 */
    size_t max_upload_bytes; /* request body limit */
    size_t max_pixels;       /* image header limit (width x height) */
    int max_side;            /* downscale so the long side is at most this */
    int portrait_size;       /* face2paint crop size */
    size_t cache_bytes;      /* LRU result cache; 0 = off */
    size_t max_memory_bytes; /* refuse a memory bound above this; 0 = RAM or memory.max */
    size_t fuse_max_pixels;  /* --fuse-max-pixels: a fusion's images (at most max_pixels) */
    uint64_t given;          /* bit i: options[i] of config.c was on the command line */
    int max_connections;
    int timeout_s;                  /* idle connection timeout; also the whole upload's deadline */
    size_t min_upload_rate;         /* bytes/s an upload must average after its grace; 0 off */
    double drain_s;                 /* SIGTERM: finish admitted work within this */
    int http_nice;                  /* niceness of the HTTP thread (workers keep 0) */
    double stuck_s;                 /* /healthz fails when a worker is busy longer; 0 off */
    size_t connection_memory_bytes; /* MHD per-connection pool (headers + read buffer) */
    ag_engine_options engine;
    ag_log_format log_format;
    int quiet; /* no per-request lines (start-up and errors still print) */
    ag_jobs_config jobs;
} ag_server_config;

/* The upscalers' engine options: the server's, but fp32 for bf16 (their concat, pixel
 * shuffle and add_scaled run in fp32 or int8 only). */
static inline ag_engine_options ag_server_upscaler_engine(const ag_server_config *c) {
    ag_engine_options o = c->engine;
    if (o.precision == AG_PRECISION_BF16)
        o.precision = AG_PRECISION_FP32;
    return o;
}

void ag_config_defaults(ag_server_config *config, int cpu_count);
/*
 * Parse `serve` arguments into `config` (which holds pointers into argv). Returns 0 to run,
 * 1 when --help was printed, -1 on a usage error (message printed, with the help hint).
 */
int ag_config_parse(ag_server_config *config, int argc, char **argv, int cpu_count);
/* Whether --name was on the command line (a default may be derived only when it was not). */
int ag_config_given(const ag_server_config *config, const char *name);
/* The pixel limit of a fusion's images: --fuse-max-pixels, at most --max-pixels. */
static inline size_t ag_fuse_max_pixels(const ag_server_config *c) {
    return c->fuse_max_pixels < c->max_pixels ? c->fuse_max_pixels : c->max_pixels;
}

/* ---- defaults for the memory there is (defaults.c) ---- */
/* The memory the bound is held against: --max-memory-mb, else the cgroup's limit
 * (ag_cgroup_memory_limit) when below the RAM, else the RAM; `why` names which. */
size_t ag_memory_limit(const ag_server_config *c, char *why, size_t why_cap);
/* Levels of the derived defaults, from the largest (0: 8 GiB hosts and up) down. */
int ag_defaults_levels(void);
/* Set level `level` of the settings derived from memory (queue, max-pixels,
 * fuse-max-pixels, upscale-max-mb, max-output-pixels), each only when not given. */
void ag_defaults_apply(ag_server_config *c, int level);
/* "queue 4, max-pixels 8.4M, ..." of the derived settings now in c (given ones marked). */
void ag_defaults_describe(const ag_server_config *c, char *buf, size_t cap);
/* The given settings among the derived ones ("--queue 16, --max-pixels 16.7M"), or "". */
void ag_defaults_given(const ag_server_config *c, char *buf, size_t cap);
void ag_config_usage(void);

/* The lowest memory limit of this process's cgroups (v2 memory.max, v1
 * memory.limit_in_bytes, from /proc/self/cgroup's paths and their parents, and the mount
 * roots); 0 when none. `where` (where_cap bytes; 0: not asked) gets the file it is in, or
 * "". `root` prefixes every path: "" in service, a directory in tests (cgroup.c). */
size_t ag_cgroup_memory_limit(const char *root, char *where, size_t where_cap);

/* ---- per-request options (options.c) --------------------------------------------------- */

/* What a POST of the convert family runs in place of a style: its route's, from the route table
 * (http.c). A new route is one row there and its step's handler. */
typedef enum ag_convert_step {
    AG_CONVERT_STYLE,   /* POST /api/v1/convert (and every route outside the family) */
    AG_CONVERT_FACES,   /* POST /api/v1/faces: the detections as JSON, no conversion */
    AG_CONVERT_FUSE,    /* POST /api/v1/fuse (fuse.c): one queue slot per fusion */
    AG_CONVERT_RESTORE, /* POST /api/v1/restore: restoration only, no stylisation */
    AG_CONVERT_UPSCALE, /* POST /api/v1/upscale: upscaling only, no stylisation */
} ag_convert_step;

typedef struct ag_convert_options {
    ag_convert_step step; /* the route's */
    int model;            /* index into the loaded models */
    int portrait;         /* 0 none, 1 the face's aligned crop (centre when none), 2 centre */
    int paste_faces;      /* 0/1: the whole photo with the faces stylised as crops, pasted back */
    int face_model;       /* paste_faces: index of the faces' model; -1: `model` */
    int face;             /* portrait=face: which face, 1 = the largest (0: the largest) */
    int restore;          /* restore=K: restore faces first with --restore-model K (1 = the first);
                             0 none */
    float codeformer_fidelity;     /* a CodeFormer restorer's w, 0-1 (default 0.5) */
    int codeformer_fidelity_given; /* asked for: refused (400) with GPEN or GFPGAN */
    int upscale;                   /* upscale=N: the result N times larger (2 or 4); 0 none */
    int side_by_side;              /* 0/1 */
    int max_side;                  /* <= the server's --max-side */
    ag_format format;
    int quality; /* 1..100 */
    /* POST /api/v1/fuse (fuse.c): the fusion's options and which face of each image */
    ag_fuse_options fusion;
    int source_face, target_face; /* 1 = the largest */
    int style;          /* style=NAME: index of the model that stylises the fusion; -1 none */
    int anime_template; /* with style: the source is stylised first, then fused (the CLI's
                           --anime-template) */
} ag_convert_options;

#define AG_DEFAULT_QUALITY 90

/* Bounded message for a failed request: what the JSON error body carries. */
typedef struct ag_reply_error {
    int status;       /* HTTP status */
    const char *code; /* stable machine name ("bad_option", "queue_full", ...) */
    char message[320];
} ag_reply_error;

void ag_convert_options_init(ag_convert_options *opts, int server_max_side);
/*
 * Apply one option of a request (options.c, the one parser of every route): convert's keys,
 * or fuse's when opts->step is AG_CONVERT_FUSE. `form_field` says whether it came from the query
 * (0) or a form field (1), for the messages. `names` are the loaded model names. Returns 0, or
 * fills `err` (400 bad option, unknown query parameter or form field, given twice, convert's option
 * on fuse; 404 unknown model) and returns -1. `seen` is a bit set the caller zeroes per request
 * (duplicates are refused). ag_convert_option_set is ag_option_set from the query.
 */
int ag_option_set(ag_convert_options *opts, unsigned *seen, int form_field, const char *key,
                  const char *value, const char *const *names, int name_count, int server_max_side,
                  ag_reply_error *err);
int ag_convert_option_set(ag_convert_options *opts, unsigned *seen, const char *key,
                          const char *value, const char *const *names, int name_count,
                          int server_max_side, ag_reply_error *err);

/* Combinations the parameters refuse once all are read: 0, or -1 with `err` (400). */
int ag_convert_options_check(const ag_convert_options *opts, ag_reply_error *err);

void ag_reply_error_set(ag_reply_error *err, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- uploads (upload.c, multipart.c) --------------------------------------------------- */

typedef enum ag_body_kind {
    AG_BODY_RAW = 0,   /* image/... or application/octet-stream (or no Content-Type) */
    AG_BODY_MULTIPART, /* multipart/form-data; the file is field "image" */
} ag_body_kind;

#define AG_BOUNDARY_BYTES 72 /* RFC 2046: 1..70 characters */

/*
 * Classify a request Content-Type (NULL allowed). Returns 0 and sets *kind (and `boundary`
 * for multipart), or fills `err` with 415 (not an image type) or 400 (bad multipart header).
 */
int ag_upload_content_type(const char *content_type, ag_body_kind *kind,
                           char boundary[AG_BOUNDARY_BYTES], ag_reply_error *err);

typedef struct ag_multipart_part {
    const uint8_t *data; /* slice of the body */
    size_t size;
    char name[64];
    char filename[128];
    char content_type[96];
} ag_multipart_part;

/*
 * Find the part whose form field name is `field` in a complete multipart body. Returns 0
 * when found, 1 when the body is well formed but has no such field, 2 when the field is
 * there more than once, -1 when malformed (anywhere up to the closing delimiter).
 * Never allocates; every header line and the header block are bounded.
 */
int ag_multipart_find(const uint8_t *body, size_t size, const char *boundary, const char *field,
                      ag_multipart_part *out);
/* Call `each` on every part, in order, up to the closing delimiter: 0 when the body is well
 * formed and every call returned 0; the first nonzero return of `each`; -1 when malformed. */
int ag_multipart_walk(const uint8_t *body, size_t size, const char *boundary,
                      int (*each)(void *user, const ag_multipart_part *part), void *user);

/*
 * The image inside a complete body: the body itself (raw) or the "image" field (multipart),
 * checked to start like a format we decode. Returns 0 with `image` and `image_size` set, or fills
 * `err` (400 empty or missing field or malformed, 415 not an image).
 */
int ag_upload_image(const uint8_t *body, size_t size, ag_body_kind kind, const char *boundary,
                    const uint8_t **image, size_t *image_size, ag_reply_error *err);

/* The image format the first bytes look like ("jpeg", "png", ...), NULL when none we decode. */
const char *ag_upload_sniff(const uint8_t *data, size_t size);

/* ---- the request head, read strictly before libmicrohttpd (head.c, gate.c) ---------------- */

typedef struct ag_head_limits {
    size_t max_head;   /* request line + headers, bytes */
    size_t max_target; /* request target, bytes (longer: 414) */
    size_t max_args;   /* '?' and '&' in the target (more: 414) */
    int max_fields;    /* header lines (more: 431) */
} ag_head_limits;

/* How the end of a request's body is found (the gate follows it to the next head). */
enum {
    AG_HEAD_BODY_NONE,    /* no Content-Length, no Transfer-Encoding */
    AG_HEAD_BODY_LENGTH,  /* content_length bytes */
    AG_HEAD_BODY_CHUNKED, /* one plain "Transfer-Encoding: chunked" */
    AG_HEAD_BODY_UNKNOWN  /* anything else: http.c's framing check refuses it and closes */
};

typedef struct ag_head_verdict {
    int status;       /* when refused: 400, 414, 431, 505 */
    const char *code; /* "bad_request", "uri_too_long", ... */
    char message[120];
    size_t head_bytes; /* when complete */
    int body;          /* when complete: AG_HEAD_BODY_* */
    uint64_t content_length;
    char method[16]; /* what could be read of them, for the log */
    char target[96];
} ag_head_verdict;

/*
 * Judge the first n bytes a connection sent. Returns 1 when they hold a complete head that
 * is well formed (RFC 9112: request line, token names with the colon right after them, no
 * obs-fold, no bare CR, NUL or control characters; a bare LF ends a line) and within the
 * limits, 0 when more bytes are needed, -1 when it is refused (v says why and how).
 */
int ag_head_check(const char *buf, size_t n, const ag_head_limits *limits, ag_head_verdict *v);

/* ---- embedded web page (web.c, generated $(BUILD)/gen/web_assets.c) -------------------- */

typedef struct ag_web_asset {
    const char *path; /* "/", "/app.js", ... */
    const char *mime;
    const uint8_t *data;
    size_t size;
} ag_web_asset;

extern const ag_web_asset ag_web_assets[];
extern const int ag_web_asset_count;

/* The embedded asset for an exact request path, NULL otherwise (no file system access, so
 * no traversal: "/../x" is simply not in the table). */
const ag_web_asset *ag_web_find(const char *path);
/* Strong ETag of an asset ("\"<16 hex>\""), computed once. */
const char *ag_web_etag(const ag_web_asset *asset);

/* ---- the request: one owner for every buffer (http.c) ---------------------------------- */

struct MHD_Connection;

typedef enum ag_route {
    AG_ROUTE_PAGE = 0, /* the embedded web page and its assets */
    AG_ROUTE_CONVERT,
    AG_ROUTE_MODELS,
    AG_ROUTE_STATUS,
    AG_ROUTE_HEALTHZ,
    AG_ROUTE_READYZ,
    AG_ROUTE_METRICS,
    AG_ROUTE_JOBS,  /* /api/v1/jobs[/ID[/result]] (jobs_http.c) */
    AG_ROUTE_FACES, /* POST /api/v1/faces in the metrics and log; handled as CONVERT */
    AG_ROUTE_FUSE,  /* /api/v1/fuse, /restore and /upscale: the same, each its own series */
    AG_ROUTE_RESTORE,
    AG_ROUTE_UPSCALE,
    AG_ROUTE_OTHER, /* unknown paths (404) */
    AG_ROUTE_COUNT
} ag_route;

typedef enum ag_request_state {
    AG_REQ_HEADERS = 0, /* first call: headers only */
    AG_REQ_BODY,        /* receiving the upload */
    AG_REQ_QUEUED,      /* in the queue; the connection is suspended */
    AG_REQ_RUNNING,     /* a worker owns the job */
    AG_REQ_DONE,        /* result ready; resumed, waiting to be queued by MHD */
    AG_REQ_REPLIED,     /* response queued with MHD */
} ag_request_state;

/* Why an admitted request was cut short by the server (ag_http_watch). */
enum { AG_CUT_NONE = 0, AG_CUT_GONE, AG_CUT_DEADLINE, AG_CUT_SLOW };

typedef struct ag_request {
    /* Lifetime: one reference for the MHD connection (dropped in the completion callback)
     * plus one while a job is queued or running. The worker drops its reference before
     * resuming the connection, so the completion callback is the release point. */
    atomic_int refs;
    _Atomic int state; /* ag_request_state */
    struct MHD_Connection *connection;
    char id[AG_REQUEST_ID_BYTES];
    char client[AG_CLIENT_BYTES]; /* ag_request_client's, at its headers ("?": unknown) */
    int keyed; /* id may be looked up by /api/v1/status (ours, or a client's long one) */
    ag_route route;
    char method[8];
    uint64_t start_us;    /* headers received */
    uint64_t enqueued_us; /* body complete, job queued */
    uint64_t deadline_us; /* queue wait limit */
    size_t rss_start_bytes;
    int admitted; /* holds an admission slot (released at completion) */
    int fd;       /* the connection's socket (watched while admitted; MHD owns it) */
    int watched;  /* index + 1 in the server's watch table, 0 when not in it */
    /* Why the watcher (main thread) cut the connection, AG_CUT_*; read at completion. */
    atomic_int cut;
    _Atomic size_t received;  /* body bytes so far, for the watcher's rate check */
    uint64_t upload_limit_us; /* the upload's deadline after its headers; 0: --timeout */

    /* upload */
    ag_body_kind body_kind;
    char boundary[AG_BOUNDARY_BYTES];
    uint8_t *body; /* ag_malloc'ed, body_capacity bytes */
    size_t body_size, body_capacity;
    size_t declared_size; /* Content-Length, or SIZE_MAX when chunked */
    int body_too_large;   /* a chunked body went over the limit */
    int closed_by_us;     /* we closed the connection on purpose (status says why) */
    int close;            /* answer with Connection: close (a framing error) */
    void *video_upload;   /* POST /api/v1/jobs in progress (jobs_http.c), released at completion */
    const uint8_t *image; /* slice of body (fuse: the source) */
    size_t image_size;
    const uint8_t *image2; /* fuse: the target, a slice of body */
    size_t image2_size;
    const uint8_t *like_image; /* fuse: the optional `target_like` part, a slice of body */
    size_t like_image_size;
    int chosen_face;       /* fuse with target_like: the target face chosen (1-based), 0 none */
    float chosen_distance; /* its descriptor's distance to the target_like face's */
    ag_convert_options options;

    /* result, written by whoever owns the job, read by the MHD thread after resume */
    int status;
    const char *content_type;
    uint8_t *out; /* ag_malloc'ed response body (or NULL) */
    size_t out_size;
    const uint8_t *out_static; /* embedded bytes (web page), not freed */
    const ag_web_asset *asset; /* the page asset being served, for its headers */
    const char *error_code;    /* for the log line; NULL on success */
    int retry_after_s;
    double queue_ms, inference_ms, total_ms;
    int in_width, in_height, out_width, out_height;
    int cache_hit;         /* -1 cache off or not applicable, 0 miss, 1 hit */
    int faces;             /* faces found (X-Faces), -1 when not looked for */
    int portrait_fallback; /* portrait=face found none: the centre crop (X-Portrait) */
} ag_request;

/* ---- queue (queue.c) ------------------------------------------------------------------- */

typedef struct ag_queue_entry {
    void *item;
    uint64_t deadline_us;
    int kind; /* AG_QUEUE_REQUEST or AG_QUEUE_FRAME */
} ag_queue_entry;

enum { AG_QUEUE_REQUEST = 0, AG_QUEUE_FRAME = 1 };

typedef struct ag_queue {
    pthread_mutex_t lock;
    pthread_cond_t nonempty;
    ag_queue_entry *ring; /* capacity entries */
    int capacity, head, count;
    int closed;
} ag_queue;

int ag_queue_init(ag_queue *q, int capacity);
void ag_queue_fini(ag_queue *q);
/* Append; -1 when full or closed (admission makes "full" impossible for the server). */
int ag_queue_push(ag_queue *q, void *item, uint64_t deadline_us);
/* Block until an item is available (returns it) or the queue is closed and empty (NULL). */
void *ag_queue_pop(ag_queue *q, uint64_t *deadline_us);
/* The same, saying which kind the item is (kind may be NULL). */
void *ag_queue_pop_kind(ag_queue *q, uint64_t *deadline_us, int *kind);
/* A video job's frame (jobs_runner.c): never expires, never taken by take_all; the queue has one
 * slot more than admission when jobs are on, for the one frame a job has in flight. */
int ag_queue_push_frame(ag_queue *q, void *task);
/* Remove entries whose deadline is <= now_us (up to max); returns how many. */
int ag_queue_take_expired(ag_queue *q, uint64_t now_us, void **out, int max);
/* Remove every entry (up to max); returns how many. */
int ag_queue_take_all(ag_queue *q, void **out, int max);
/* Remove one item; 1 when it was there (a worker had not taken it yet), else 0. */
int ag_queue_remove(ag_queue *q, const void *item);
/* Without waiting: the head when it is a request and take(item) says yes, else NULL. */
void *ag_queue_pop_request_if(ag_queue *q, int (*take)(const void *item), uint64_t *deadline_us);
/* Wake the workers: pop returns NULL once the queue is empty. */
void ag_queue_close(ag_queue *q);
int ag_queue_depth(ag_queue *q);
/* 1-based position of the first item for which match(item, arg) is true; 0 when absent. */
int ag_queue_position(ag_queue *q, int (*match)(const void *item, const void *arg),
                      const void *arg);

/* ---- result cache (cache.c) ------------------------------------------------------------ */

typedef struct ag_cache ag_cache;

typedef struct ag_cache_key {
    uint64_t hash[2]; /* two keyed SipHash-2-4 values of the input bytes and options */
    size_t input_size;
} ag_cache_key;

typedef struct ag_cache_stats {
    uint64_t hits, misses, insertions, evictions;
    size_t bytes, capacity_bytes;
    int entries;
} ag_cache_stats;

/* A cache of at most capacity_bytes (entries + bookkeeping); NULL result when capacity is 0. */
int ag_cache_create(size_t capacity_bytes, ag_cache **out);
void ag_cache_destroy(ag_cache *cache);
void ag_cache_key_make(const ag_cache *cache, const void *data, size_t size, const char *model,
                       const ag_convert_options *opts, ag_cache_key *key);
/* On a hit: *data is a fresh ag_malloc'ed copy (the caller owns it). Returns 1 hit, 0 miss,
 * -1 when the copy could not be allocated (counted as a miss). */
int ag_cache_get(ag_cache *cache, const ag_cache_key *key, uint8_t **data, size_t *size, int *width,
                 int *height);
/* Insert a copy (evicting least recently used entries); too large entries are skipped. */
void ag_cache_put(ag_cache *cache, const ag_cache_key *key, const uint8_t *data, size_t size,
                  int width, int height);
void ag_cache_get_stats(ag_cache *cache, ag_cache_stats *stats);

/* Keyed 64-bit SipHash-2-4 (exposed for the unit test vectors). */
uint64_t ag_siphash24(const uint8_t key[16], const void *data, size_t size);

/* ---- metrics (metrics.c) --------------------------------------------------------------- */

#define AG_HIST_BUCKETS 14

typedef struct ag_histogram {
    atomic_uint_fast64_t buckets[AG_HIST_BUCKETS + 1]; /* last: +Inf */
    atomic_uint_fast64_t count;
    atomic_uint_fast64_t sum_us;
} ag_histogram;

/* HTTP statuses the service produces, for the per-status counters. */
#define AG_STATUS_SLOTS 23

typedef struct ag_metrics {
    atomic_uint_fast64_t requests[AG_ROUTE_COUNT][AG_STATUS_SLOTS];
    ag_histogram latency[AG_ROUTE_COUNT]; /* whole request, headers to completion */
    ag_histogram queue_wait;              /* convert: enqueue to a worker picking it up */
    ag_histogram inference;               /* convert: decode + stylize + encode on a worker */
    atomic_uint_fast64_t bytes_in, bytes_out;
    atomic_uint_fast64_t converted;       /* 200 responses of /api/v1/convert */
    atomic_uint_fast64_t faces_detected;  /* faces found by the detector, all routes */
    atomic_uint_fast64_t faces_restored;  /* faces restored (restore=K, /api/v1/restore) */
    atomic_uint_fast64_t restorations;    /* images that went through restoration */
    atomic_uint_fast64_t upscaled;        /* images and job frames upscaled (upscale=N) */
    atomic_uint_fast64_t fuse_cache_hits; /* /api/v1/fuse images whose faces were known */
    atomic_uint_fast64_t fuse_cache_misses;
    atomic_uint_fast64_t fuse_cache_evictions; /* over a bound, or past the TTL */
    atomic_int fuse_cache_entries;
    ag_histogram face_detect;                 /* detection + landmarks of one image */
    atomic_uint_fast64_t rejected_full;       /* 503 queue full */
    atomic_uint_fast64_t timed_out;           /* 504 */
    atomic_uint_fast64_t client_gone;         /* completed with an error (client closed early) */
    atomic_uint_fast64_t uploads_cut;         /* 408: past the deadline or under the rate */
    atomic_uint_fast64_t library_messages;    /* libvips/GLib warnings (logged or dropped) */
    atomic_int connections;                   /* open TCP connections */
    atomic_uint_fast64_t connections_opened;  /* in total */
    atomic_uint_fast64_t connections_evicted; /* idle ones closed to make room (gate.c) */
} ag_metrics;

/* ---- the faces of fusion uploads, per client (fuse_cache.c) ---------------------------- */

#define AG_FUSE_CACHE_FACES 8 /* faces kept per image: source_face / target_face up to it */
#define AG_FUSE_CLIENT_BYTES AG_CLIENT_BYTES
typedef struct ag_fuse_cache ag_fuse_cache;

/* NULL (off) when capacity is 0; -1 when out of memory. */
int ag_fuse_cache_create(int capacity, int per_client, double ttl_s, ag_metrics *metrics,
                         ag_fuse_cache **out);
void ag_fuse_cache_destroy(ag_fuse_cache *c);
/* Bytes the table of `capacity` entries holds (allocated once at start-up). */
size_t ag_fuse_cache_bytes(int capacity);
/* 1 when client's image `data` is known and its face `want` (1-based) kept, or known to be
 * missing: the kept faces into `faces` (AG_FUSE_CACHE_FACES room), *found the detector's
 * count. 0 otherwise. Counted in the metrics. */
int ag_fuse_cache_get(ag_fuse_cache *c, const char *client, const void *data, size_t size, int want,
                      ag_face *faces, int *found);
void ag_fuse_cache_put(ag_fuse_cache *c, const char *client, const void *data, size_t size,
                       const ag_face *faces, int found);

/* Gauges sampled when /metrics is rendered. */
typedef struct ag_text ag_text;

typedef struct ag_metrics_gauges {
    /* More series appended by their owner (the video jobs: ag_jobs_render_metrics). */
    void (*extra)(void *ctx, ag_text *t);
    void *extra_ctx;
    int queue_depth, queue_capacity, admitted, admit_limit, workers, busy_workers;
    int accepting, ready;
    size_t rss_bytes, peak_rss_bytes, allocated_bytes, allocated_peak_bytes, arena_bytes;
    size_t memory_bound_bytes, max_upload_bytes;
    double uptime_s;
    double longest_busy_s; /* the worker busiest on one job right now */
    ag_cache_stats cache;
    int cache_enabled;
    const char *const *model_names;
    int model_count;
} ag_metrics_gauges;

void ag_metrics_observe(ag_histogram *h, uint64_t us);
int ag_metrics_status_slot(int status);
void ag_metrics_count_request(ag_metrics *m, ag_route route, int status, uint64_t duration_us,
                              size_t bytes_in, size_t bytes_out);
/* Render the Prometheus text exposition into buf (ag_malloc'ed, grown as needed up to
 * max_bytes). Returns 0 or -1 when out of memory or over max_bytes. */
int ag_metrics_render(const ag_metrics *m, const ag_metrics_gauges *g, char **buf, size_t *size,
                      size_t max_bytes);
const char *ag_route_name(ag_route route);
/* The route a request is counted and logged under: CONVERT's endpoints (/faces, /fuse,
 * /restore, /upscale) each have their own. */
ag_route ag_route_counted(const ag_request *r);

/* ---- bounded text builder (json.c) ----------------------------------------------------- */

struct ag_text {
    char *data; /* ag_malloc'ed, NUL-terminated */
    size_t size, capacity, max;
    int failed; /* an append ran out of memory or past max: the text is unusable */
};

void ag_text_init(ag_text *t, size_t max);
void ag_text_fini(ag_text *t);
void ag_text_printf(ag_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ag_text_append(ag_text *t, const char *s, size_t n);
/* Append s as a JSON string literal (quotes included), escaping as RFC 8259 requires. */
void ag_text_json_string(ag_text *t, const char *s);
/* Hand the buffer to the caller (who ag_frees it); NULL when failed. */
char *ag_text_take(ag_text *t, size_t *size);
/* Format the error body {"error":{"code":...,"message":...}} into a fixed buffer. */
size_t ag_json_error(char *buf, size_t cap, const char *code, const char *message);

/* ---- worst-case memory (budget.c) ------------------------------------------------------ */

typedef struct ag_budget {
    size_t base_bytes;       /* RSS after start-up: code, libraries, weights, engines */
    size_t runtime_bytes;    /* allowance: thread stacks, allocator and libvips state */
    size_t worker_bytes;     /* one worker's conversion: arena + decode + images + encode */
    size_t arena_bytes;      /* part of worker_bytes: the arenas one worker keeps (budget.c) */
    size_t decode_bytes;     /* part of worker_bytes */
    size_t request_bytes;    /* one admitted request: upload + response */
    size_t connection_bytes; /* one connection's MHD memory pool */
    size_t cache_bytes;
    size_t video_bytes;   /* the job runner's frames and codec state (0 without --jobs-dir) */
    size_t face_bytes;    /* part of worker_bytes: detector engines and buffers, face crops */
    size_t upscale_bytes; /* part of worker_bytes: the tile window, the upscaled image */
    size_t fuse_bytes;    /* part of worker_bytes: a fusion's images beyond convert's */
    size_t upload_bytes;  /* part of request_bytes */
    int workers, admitted, connections;
    size_t total_bytes;
} ag_budget;

/* Add upscaling to a computed budget: per worker the tile window (--upscale-max-mb), what
 * ag_upscale holds for the largest result (ag_upscale_image_bytes: at the network's own
 * scale) and the encoder's copies, per admitted request its encoded response. */
void ag_budget_add_upscale(ag_budget *b, size_t window_bytes, size_t output_pixels,
                           size_t upscale_image_bytes);
/* Add the fusion face cache's table (ag_fuse_cache_bytes) to the cache term. */
void ag_budget_add_fuse_cache(ag_budget *b, size_t bytes);
/* Add one worker's face work (ag_budget_face_bytes) to a computed budget. */
void ag_budget_add_faces(ag_budget *b, size_t face_bytes_per_worker);
/* One worker's face work at the configured sizes: the two networks' arenas at 192, the
 * detector's buffers, the aligned crop and its stylised copy, the paste's footprint. */
size_t ag_budget_face_bytes(const ag_server_config *config, const ag_model *detect,
                            const ag_model *mesh);

/* One worker's images while POST /api/v1/fuse stylises (style=NAME), arenas excepted: the
 * fused image (up to --max-pixels) downscaled to --max-side, or with anime_template the
 * target held while the source is; never more than convert's decode + images (budget.c). */
size_t ag_budget_fuse_style_bytes(const ag_server_config *config);

/* One worker's images while POST /api/v1/fuse runs, arenas excepted (the detector's are in
 * the faces term): the larger of decoding the target with the source held, fusing (both
 * inputs, ag_face_fuse_bytes at --max-pixels: the output, the resized target, the shrunk
 * source, the work over the face's window and the Poisson grids), encoding, and
 * ag_budget_fuse_style_bytes. */
size_t ag_budget_fuse_bytes(const ag_server_config *config);
/* The largest encoded response of POST /api/v1/fuse: the fused image at --max-pixels, 4
 * bands, as PNG (raw + 1% + 64 KiB). */
size_t ag_budget_fuse_response_bytes(const ag_server_config *config);
/* Raise a computed budget's worker term to cover a fusion (ag_budget_fuse_bytes) where its
 * images exceed convert's (the excess is fuse_bytes), and the per-request term's response to
 * a fusion's (ag_budget_fuse_response_bytes) where that is larger. */
void ag_budget_add_fuse(ag_budget *b, size_t fuse_bytes, size_t response_bytes);

/* Per-worker arena bytes at the largest image for each model, from the engine options. */
void ag_budget_compute(ag_budget *b, const ag_server_config *config, const ag_model *const *models,
                       int model_count, size_t base_rss_bytes);
/* The base measured again (after the workers made their engines); the terms stay. */
void ag_budget_rebase(ag_budget *b, size_t base_rss_bytes);
/* One line: "N MB = base ... + W x (...) + ..." */
void ag_budget_format(const ag_budget *b, char *buf, size_t cap);

/* ---- per-request log line (log.c) ------------------------------------------------------ */

void ag_log_request(ag_log_format format, const ag_request *r, size_t bytes_in, size_t bytes_out,
                    size_t rss_bytes);
/* Start-up, shutdown and errors: "ts=... level=... msg=..." (or JSON) on stderr. */
void ag_log_event(ag_log_format format, const char *level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The request a thread works on, named in the library lines it logs ("" for none). */
void ag_log_thread_request(const char *id);
/* ag_image_set_log_handler's callback: libvips and GLib messages as log lines of their
 * own (source=VIPS), rate-limited, with the thread's request id; ctx counts them. */
typedef struct ag_log_library_ctx {
    ag_log_format format;
    atomic_uint_fast64_t *counter;
} ag_log_library_ctx;
void ag_log_library(void *ctx, const char *domain, const char *level, const char *message);

/* ---- workers (worker.c) ---------------------------------------------------------------- */

typedef struct ag_server ag_server;

typedef struct ag_worker {
    ag_server *server;
    int index;
    pthread_t thread;
    ag_engine *engines[AG_SERVER_MAX_MODELS];      /* created and used only on this thread */
    ag_face_detector *faces;                       /* likewise; NULL when faces are unavailable */
    ag_face_embedder *embedder;                    /* likewise; NULL without face-recognition */
    ag_engine *restorers[AG_SERVER_MAX_RESTORERS]; /* over the shared restoration models */
    ag_engine *upscalers[AG_SERVER_UPSCALES];      /* per upscale=N; the same when one model */
    atomic_size_t arena_bytes;                     /* sum over engines, published after each job */
    pthread_mutex_t current_lock;                  /* guards current_id */
    char current_id[AG_REQUEST_ID_BYTES];          /* request being converted, "" when idle */
    /* the current request's long stage (faces restored, tiles upscaled): /api/v1/status */
    atomic_int steps_done, steps_total;
    atomic_int step_permille;       /* of the step under way, by its network's steps (bands) */
    _Atomic uint64_t busy_since_us; /* start of the current job, 0 when idle */
    /* Asked between the steps of the work on this worker (its engines' steps and bands, tiles
     * upscaled, faces restored): nonzero stops the work with AG_E_CANCELLED (a photo whose
     * client left); a video frame's hook serves waiting photos there (jobs_runner.c). NULL:
     * none. Worker thread only. */
    int (*between_steps)(void *user);
    void *between_steps_user;
    int started;     /* thread created */
    int init_status; /* 0 ok, else AG_E_* from engine creation */
    char init_error[AG_ERROR_MESSAGE_BYTES];
} ag_worker;

/* Before running `model` (and `face_model`, -1 for none) on w: the worker's other engines
 * give back their arenas (ag_engine_release), so at most two are planned at once. */
void ag_worker_use_models(ag_worker *w, int model, int face_model);
/* upscale=N on w: *image (owned by the caller) replaced by itself `scale` (2 or 4) times
 * larger with w's upscaler, tile by tile within --upscale-max-mb, and counted in
 * animegan_upscaled_total. On failure *image is left as it was. Worker thread only. */
int ag_worker_upscale(ag_worker *w, int scale, ag_image *image, ag_error *err);
/* restore=K (and codeformer_fidelity=) against what the server has: 0, or -1 with `err`
 * (400 a K beyond the files, or a fidelity for a GPEN / GFPGAN file; 503 no restorer, or
 * no face models: have_faces 0). Photos (the worker) and video jobs (at submission). */
int ag_restore_check(const ag_server *s, const ag_convert_options *o, int have_faces,
                     ag_reply_error *err);
/* The arenas of w's upscaler engines (one when both scales share a file). */
size_t ag_worker_upscaler_arena_bytes(const ag_worker *w);
/* Between two steps of a video frame's upscaling on w, while every worker is busy: the
 * photos waiting at the queue's head that need no upscaler are converted now, on this
 * thread (the frame's upscaler is mid-image; the style engines, restorers and detector are
 * free, and the frame's images are the runner's, in the video term). Returns how many.
 * Worker thread only. */
int ag_worker_serve_waiting(ag_worker *w);

/* A boolean option's value: "1"/"true" or "0"/"false" into *out, 0; else -1 (options.c). */
int ag_option_flag(const char *value, int *out);
/* The index of model `value` among the loaded `names`, or -1 with a 404 model_not_found
 * naming the option `key` (convert's model= and face_model=, fuse's style=). */
int ag_option_model(const char *key, const char *value, const char *const *names, int name_count,
                    ag_reply_error *err);

/* ---- POST /api/v1/fuse (fuse.c) ---- */
/* r->image, r->image2 <- the `source` and `target` parts of the multipart body, and its
 * other parts as options (text fields, as query parameters would be; a key may not be
 * both); 0 or -1 with `err`. */
int ag_fuse_uploads(ag_server *s, ag_request *r, ag_reply_error *err);
/* The job on a worker: 1 done (r->out set; the caller finishes), 0 failed (already). */
int ag_worker_fuse(ag_worker *w, ag_request *r);

/* Start every worker and wait until each created its engines. 0 or -1 (message in err). */
int ag_workers_start(ag_server *s, ag_error *err);
/* Close the queue and join (each worker finishes its current job first). */
void ag_workers_stop(ag_server *s);
/* Free the worker table; only once the HTTP daemon, which reads it, has stopped. */
void ag_workers_free(ag_server *s);
/* Finish a job that never reached a worker (expired, cancelled): status + JSON error. */
void ag_job_fail(ag_server *s, ag_request *r, int status, const char *code, const char *message);
/* Hand a finished job back to MHD: drop the job reference and resume the connection. */
void ag_job_finish(ag_server *s, ag_request *r);

/* ---- video jobs (jobs_*.c) -------------------------------------------------------------- */

typedef struct ag_jobs ag_jobs;
typedef struct ag_frame_task ag_frame_task;

/* With --jobs-dir: create the spool, recover it (interrupted jobs failed, stale files
 * removed) and start the runner. 0, or -1 with err filled. No-op without --jobs-dir. */
int ag_jobs_start(ag_server *s, ag_error *err);
/* Stop the runner (a running job stops at its next frame); before the workers stop. */
void ag_jobs_stop(ag_server *s);
void ag_jobs_free(ag_server *s);
/* Every call of the access handler for AG_ROUTE_JOBS; returns an MHD_Result. */
int ag_jobs_request(ag_server *s, struct MHD_Connection *conn, const char *url, const char *method,
                    const char *upload_data, size_t *upload_data_size, ag_request *r);
/* Completion callback: an upload that did not become a job leaves no file or slot. */
void ag_jobs_request_done(ag_server *s, ag_request *r);
/* A worker's part: stylise one frame of a job with its engine, wake the runner. */
void ag_jobs_run_frame(ag_worker *w, ag_frame_task *task);
/* The budget's video term for this configuration (0 without --jobs-dir). */
size_t ag_jobs_budget_bytes(const ag_server_config *c);
/* The estimated size in bytes of a job's result: `frames` frames of out_width x out_height
 * in the format `ext` ("gif", "webp", "mp4", ...), from bytes per output pixel (a GIF is
 * 13-25 times an H.264 clip); for a video codec the input again (in_bytes, N^2
 * times with upscale=N). Saturates at SIZE_MAX / 2. */
size_t ag_jobs_result_bytes(const char *ext, int64_t frames, int out_width, int out_height,
                            size_t in_bytes, int upscale);
/* The job metrics (Prometheus text), appended by ag_metrics_render; jobs may be NULL. */
void ag_jobs_render_metrics(void *jobs, ag_text *t);

/* ---- the server (server.c, http.c) ----------------------------------------------------- */

struct ag_server {
    ag_server_config config;
    const ag_model *models[AG_SERVER_MAX_MODELS];
    const char *model_names[AG_SERVER_MAX_MODELS];
    int model_count;
    ag_model *face_detect, *face_mesh; /* the bundled face networks; NULL: faces unavailable */
    ag_model *face_embed; /* face-recognition (fuse's target_like); NULL: unavailable */
    ag_model *restorers[AG_SERVER_MAX_RESTORERS]; /* loaded once, shared by the workers */
    int restorer_count;
    ag_precision restore_precision; /* the restorers' (ag_restore_precision_resolve) */
    /* upscale=2, upscale=4: the upscaler of each (one file of its own scale serves both,
     * resized with Lanczos to N); NULL without --upscale-model. */
    ag_model *upscalers[AG_SERVER_UPSCALES];
    /* every file --upscale-model loaded (upscalers[] point into these), in order */
    ag_model *upscale_models[AG_SERVER_MAX_UPSCALERS * AG_SERVER_UPSCALES];
    int upscale_model_count;
    ag_fuse_cache *fuse_cache; /* NULL when --fuse-cache-entries 0 */

    ag_queue queue;
    ag_worker *workers;
    struct ag_jobs *jobs; /* NULL without --jobs-dir */
    ag_cache *cache;
    ag_metrics metrics;
    ag_budget budget;

    struct MHD_Daemon *daemon;
    struct ag_gate *gate;            /* the public listener's front door (gate.c) */
    struct MHD_Daemon *admin_daemon; /* --admin-port: its own connections, never exhausted by
                                        the public listener's clients */
    int listen_fd; /* after MHD_quiesce_daemon: ours to close once MHD has stopped */
    int port;
    int admin_port;
    uint64_t start_us;
    double start_unix_s;

    atomic_int admitted; /* convert requests holding a slot, headers to completion */
    int admit_limit;     /* queue + workers */
    atomic_int busy_workers;
    atomic_int accepting; /* 0 while draining */
    atomic_int ready;     /* workers up */
    atomic_uint_fast64_t next_id;
    uint32_t id_prefix;
    atomic_uint_fast64_t inference_ewma_us; /* for Retry-After */

    /* Admitted requests, watched by the main thread (ag_http_watch): capacity admit_limit. */
    pthread_mutex_t watch_lock;
    ag_request **watch; /* watch_cap: admission slots plus --max-jobs uploads */
    int watch_cap;
    ag_log_library_ctx library_log;
};

void ag_request_ref(ag_request *r);
void ag_request_unref(ag_request *r);

int ag_http_start(ag_server *s, ag_error *err);
/* Stop accepting new connections (keeps serving the open ones; what the listen backlog
 * holds is taken and answered 503 shutting_down). Returns how many connections have a
 * request under way. */
int ag_http_quiesce(ag_server *s);
void ag_http_stop(ag_server *s);
/*
 * Called by the main thread every few tens of ms: cut admitted requests whose client has
 * gone (FIN or reset: 499, also while queued, before any work), whose upload is past its
 * deadline (--timeout from the headers) or below --min-upload-rate (408). Cheap: at most
 * queue + workers entries, one poll() each.
 */
void ag_http_watch(ag_server *s);
/* Put a request under the watch (a video job's upload; admitted requests are added by
 * http.c); removed in the completion callback. */
void ag_http_watch_add(ag_server *s, ag_request *r);
/* Whether the client of a suspended request has closed its connection (workers ask before
 * decoding and before inference). */
int ag_request_client_gone(const ag_request *r);
/* The route of a request target (origin or absolute form, query ignored). */
#define AG_HEAD_PATH_BYTES 256
ag_route ag_http_route_of(const char *target);
/* A fresh request id: 32 hex digits of 128 random bits. */
void ag_http_new_request_id(ag_server *s, char id[AG_REQUEST_ID_BYTES]);
/* The gate's relay buffers per connection (in the memory bound's connection term): a whole
 * head of 16 KiB must fit the client's side to be judged. */
#define AG_GATE_MAX_HEAD (16 * 1024)
#define AG_GATE_IN_BYTES (AG_GATE_MAX_HEAD + 1)
#define AG_GATE_OUT_BYTES (32 * 1024)
/* Start the gate thread on listen_fd (gate.c): it owns every public connection and relays
 * its bytes to and from libmicrohttpd, judging each request's head on the way. */
int ag_gate_start(ag_server *s, int listen_fd, ag_error *err);
/* MHD completed a request on the connection whose MHD-side descriptor is fd (any thread):
 * the gate may judge that connection's next head. */
void ag_gate_request_done(ag_server *s, int fd);
/* Draining: take what the listen backlog holds and stop accepting. Returns how many
 * connections have a request under way (a head begun, in flight or being answered). */
int ag_gate_drain(ag_server *s);
/* Connections with a request under way now. */
int ag_gate_busy(ag_server *s);
/* The client's address of the connection whose MHD end is mhd_fd (a request's r->fd), as
 * text; 0, or -1 when unknown (the admin listener). */
int ag_gate_peer(ag_server *s, int mhd_fd, char *out, size_t cap);

/* The client a request comes from (client.c), read on the MHD thread at its headers: the
 * peer's address, or for a peer among --trusted-proxy the rightmost X-Forwarded-For entry
 * that is not itself a trusted proxy, as the key ag_client_key makes of it (an IPv6 client's
 * /--client-ipv6-prefix); "?" when unknown. */
void ag_request_client(ag_server *s, struct MHD_Connection *conn, int fd,
                       char out[AG_CLIENT_BYTES]);
/* address.c. Whether `text` (len bytes, blanks around ignored) is an IPv4 or IPv6 address;
 * its canonical form into out when it is. */
int ag_client_address(const char *text, size_t len, char out[AG_CLIENT_BYTES]);
/* The per-client key of canonical `address` into out: an IPv4 address as it is, an IPv6 one
 * as its /prefix_bits network ("2001:db8:1:2::/64"), since one host is given a whole /64 and
 * would otherwise be as many clients as it likes, as rate limiters key it. */
void ag_client_key(const char *address, int prefix_bits, char out[AG_CLIENT_BYTES]);
/* Whether `address` (canonical) is one of c's --trusted-proxy. */
int ag_trusted_proxy(const ag_server_config *c, const char *address);
/* *out (a trusted proxy's address) <- the rightmost entry of X-Forwarded-For `xff` that is
 * not a trusted proxy; unchanged when every entry is one, or at a malformed entry. */
void ag_forwarded_client(const ag_server_config *c, const char *xff, char out[AG_CLIENT_BYTES]);
/* Before MHD stops: from when this returns, the gate hands MHD no more connections (a
 * first head arriving then closes its connection, as MHD at its limit would); it still
 * relays what MHD writes on the ones it has. Safe when never started. */
void ag_gate_detach(ag_server *s);
/* Stop the thread and close what is left. Call after MHD has stopped. Safe when never
 * started. */
void ag_gate_stop(ag_server *s);
/* Seconds a client should wait before retrying when the queue is full. */
int ag_server_retry_after_s(ag_server *s);

#endif
