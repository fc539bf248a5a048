/*
 * config.c - the `animegan serve` command line. Every option is one row of `options[]`
 * (name, type, range, default, help), from which the parser, `--help` and the option table
 * of docs/api.md (`animegan serve --options-markdown`, spliced in by
 * tools/update_api_options.sh; a test checks they agree) all come. Numbers go through the
 * one strict parser (ag_parse_int64); ranges are stated in the message. Every bound the
 * service has is set here and is safe by default.
 */
#include "server.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ag_config_defaults(ag_server_config *c, int cpu_count) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->upscale_model = AG_SERVER_DEFAULT_UPSCALER;
    c->upscale_max_bytes = (size_t)128 << 20;
    /* 4.2 M: a 1024 px result upscaled 2x, a 512 px one 4x. Every admitted request reserves
     * a response this large in the memory bound, so the default keeps a cheap server's
     * bound small; raise it for 4K results. */
    c->max_output_pixels = (size_t)2048 * 2048;
    c->fuse_cache_entries = 256;
    c->fuse_cache_per_client = 8;
    c->fuse_cache_ttl_s = 600;
    c->port = 8080;
    c->admin_port = -1;
    c->workers = 1;
    c->threads = cpu_count > 0 ? cpu_count : 1;
    c->queue = 16;
    c->queue_timeout_s = 30;
    c->max_upload_bytes = (size_t)10 << 20;
    c->max_pixels = (size_t)4096 * 4096; /* 16.7 M */
    c->fuse_max_pixels = c->max_pixels;
    c->max_side = 1024;
    c->portrait_size = 512;
    c->cache_bytes = 0;
    c->max_connections = 64;
    c->timeout_s = 30;
    c->min_upload_rate = 16 * 1024;
    c->drain_s = 30;
    c->http_nice = 10;
    c->stuck_s = 600;
    c->client_ipv6_prefix = 64;
    /* MHD's default. MHD mmaps a pool larger than 32 KiB for every connection and munmaps it
     * at close, and each munmap flushes the TLB of every core running a server thread: under
     * a flood of refused clients that interrupted inference thousands of times a second. At
     * 32 KiB the pool comes from malloc. Headers fit easily; bodies stream through it into
     * the request. */
    c->connection_memory_bytes = 32 * 1024;
    c->engine.backend = AG_BACKEND_ONEDNN;
    c->engine.precision = AG_PRECISION_AUTO;
    c->engine.threads = 0;
    c->engine.resize = AG_RESIZE_DEFAULT;
    c->log_format = AG_LOG_LOGFMT;
    ag_jobs_config_defaults(&c->jobs);
}

/* ---- the table ------------------------------------------------------------------------- */

typedef enum opt_kind {
    K_STRING,  /* const char *, not empty */
    K_MODEL,   /* appended to models[] */
    K_RESTORE, /* appended to restore_models[] */
    K_UPSCALE, /* appended to upscale_models[]; the first is upscale_model too */
    K_PROXY,   /* an IP address appended to trusted_proxies[] */
    K_INT,     /* int in [min, max] */
    K_SCALED,  /* size_t: a whole number in [min, max] times `scale` bytes */
    K_SECONDS, /* double in [min, max] */
    K_PIXELS,  /* size_t: "16777216", "16.7M", "4096K" in [min, max] */
    K_CHOICE,  /* an enum stored as int: names[] or parse() */
    K_FLAG,    /* int set to 1, no value */
} opt_kind;

typedef struct opt_def {
    const char *name, *arg;
    opt_kind kind;
    double min, max;
    size_t scale;
    size_t offset;     /* into ag_server_config */
    const char *names; /* K_CHOICE: "a|b|c" in enum order, or NULL to use parse */
    int (*parse)(const char *text);
    const char *shown_default; /* NULL: no default to show */
    const char *help;
} opt_def;

#define AT(field) offsetof(ag_server_config, field)

static int parse_precision(const char *text) {
    return ag_precision_parse(text);
}
static int parse_resize(const char *text) {
    return ag_resize_mode_parse(text);
}

static const opt_def options[] = {
    {"host", "ADDR", K_STRING, 0, 0, 0, AT(host), NULL, NULL, "127.0.0.1",
     "address to listen on (IPv4 or IPv6, or a name)"},
    {"port", "N", K_INT, 0, 65535, 0, AT(port), NULL, NULL, "8080",
     "TCP port; 0 picks a free one (printed in the \"listening on\" line)"},
    {"admin-port", "N", K_INT, 0, 65535, 0, AT(admin_port), NULL, NULL, "none",
     "a second listener on --host for /healthz, /readyz, /metrics and /api/v1/status only, with "
     "its own 16 connections, so probes get through even while uploads hold every public one; "
     "0 picks a free port. Keep it off the public network"},
    {"model", "NAME|PATH", K_MODEL, 0, 0, 0, 0, NULL, NULL, "every bundled style",
     "model to serve, repeatable (a directory: every style in it); the first is the default. "
     "Without it every bundled style is served, hayao first. Loaded once at start-up"},
    {"trusted-proxy", "ADDR", K_PROXY, 0, 0, 0, 0, NULL, NULL, "none",
     "a reverse proxy (IPv4 or IPv6 address) whose X-Forwarded-For names the client, for the "
     "per-client bounds (fusion face cache, video job turns); repeatable, at most 8. Others' "
     "X-Forwarded-For is ignored"},
    {"client-ipv6-prefix", "N", K_INT, 1, 128, 0, AT(client_ipv6_prefix), NULL, NULL, "64",
     "an IPv6 client is its /N network for the per-client bounds (fusion face cache, video job "
     "turns), since one host is given a whole /64; 128 = each address"},
    {"restore-model", "FILE", K_RESTORE, 0, 0, 0, 0, NULL, NULL, "none",
     "a GPEN, GFPGAN or CodeFormer checkpoint for face restoration (POST /api/v1/restore, "
     "restore=K on convert and video jobs: K counts these from 1), repeatable; loaded once, shared "
     "by the "
     "workers"},
    {"upscale-model", "NAME|FILE", K_UPSCALE, 0, 0, 0, 0, NULL, NULL, AG_SERVER_DEFAULT_UPSCALER,
     "upscaler for upscale=2 and upscale=4 (convert, restore, POST /api/v1/upscale, video jobs): "
     "a bundled family (esrgan-slim, esrgan-medium: its x2 and x4 files) or a user's file "
     "(RRDBNet/ESRGAN, Compact, SPAN, RealPLKSR; .pth or .safetensors); repeatable, at most 4: "
     "each upscale=N takes the file of scale N, else the smallest larger, else the largest, "
     "resized with Lanczos to N; loaded once at start-up; none = off"},
    {"upscale-max-mb", "N", K_SCALED, 16, 65536, 1 << 20, AT(upscale_max_bytes), NULL, NULL,
     "128, less on a small host",
     "memory of one upscaling tile window per worker (arena and buffers) in MiB: images are "
     "upscaled tile by tile, so this bounds upscaling whatever the image size"},
    {"max-output-pixels", "N", K_PIXELS, 64, 1e10, 0, AT(max_output_pixels), NULL, NULL,
     "4.2M, less on a small host",
     "largest upscaled result a request (or a video job's frame) may ask for, width x height "
     "after max_side, side_by_side and upscale (K/M suffixes); 413 before any work"},
    {"workers", "N", K_INT, 1, 256, 0, AT(workers), NULL, NULL, "1",
     "inference workers; each has its own engine and activation arena"},
    {"threads", "N", K_INT, 0, 4096, 0, AT(threads), NULL, NULL, "every core",
     "compute threads in all, split between the workers (W x threads per worker <= N); 0 = every "
     "core"},
    {"queue", "N", K_INT, 0, 4096, 0, AT(queue), NULL, NULL, "16, less on a small host",
     "convert requests admitted beyond the ones running; more get 503"},
    {"queue-timeout", "S", K_SECONDS, 0.001, 3600, 0, AT(queue_timeout_s), NULL, NULL, "30",
     "longest wait in the queue before 504"},
    {"max-upload-mb", "N", K_SCALED, 1, 1024, 1 << 20, AT(max_upload_bytes), NULL, NULL, "10",
     "largest request body in MiB; refused with 413 before it is read"},
    {"max-pixels", "N", K_PIXELS, 64, 1e9, 0, AT(max_pixels), NULL, NULL,
     "16.7M, less on a small host",
     "largest image, width x height from its header (K/M suffixes); 413 before decoding, as is "
     "an image whose decoder would hold more than N x 4 bytes"},
    {"max-side", "N", K_INT, AG_MIN_SIDE, 8192, 0, AT(max_side), NULL, NULL, "1024",
     "downscale (Lanczos) so the long side is at most N"},
    {"max-memory-mb", "N", K_SCALED, 0, 16 << 20, 1 << 20, AT(max_memory_bytes), NULL, NULL,
     "the RAM",
     "the memory the worst-case bound (printed at start-up) is held against: the settings "
     "not given (queue, max-pixels, fuse-max-pixels, upscale-max-mb, max-output-pixels) are "
     "derived to fit it, and the service refuses to start when the given ones cannot; 0 = the "
     "cgroup's memory limit, else the machine's RAM"},
    {"fuse-max-pixels", "N", K_PIXELS, 4096, 1e9, 0, AT(fuse_max_pixels), NULL, NULL,
     "16.7M, less on a small host",
     "largest source or target image of POST /api/v1/fuse, width x height (K/M suffixes), at "
     "most --max-pixels; 413 before decoding. A fusion's memory grows with it"},
    {"cache-mb", "N", K_SCALED, 0, 65536, 1 << 20, AT(cache_bytes), NULL, NULL, "0",
     "LRU cache of results in MiB, bounded in bytes; 0 = off"},
    {"fuse-cache-entries", "N", K_INT, 0, 65536, 0, AT(fuse_cache_entries), NULL, NULL, "256",
     "faces of POST /api/v1/fuse uploads kept (client address + content hash), so the page's "
     "ratio slider only re-blends; about 30 KiB each, allocated at start-up; 0 = off"},
    {"fuse-cache-per-client", "N", K_INT, 1, 65536, 0, AT(fuse_cache_per_client), NULL, NULL, "8",
     "of those, per client address (its own least recently used goes first)"},
    {"fuse-cache-ttl", "S", K_SECONDS, 1, 86400, 0, AT(fuse_cache_ttl_s), NULL, NULL, "600",
     "seconds an unused fusion face entry is kept"},
    {"max-connections", "N", K_INT, 1, 65536, 0, AT(max_connections), NULL, NULL, "64",
     "open connections at most; a new one closes the one idle longest, and waits in the "
     "kernel's listen backlog only when none is idle"},
    {"timeout", "S", K_INT, 1, 3600, 0, AT(timeout_s), NULL, NULL, "30",
     "close a connection idle for S seconds; an upload must also be complete S seconds after "
     "its headers (408 in the log)"},
    {"min-upload-rate", "N", K_SCALED, 0, 1 << 20, 1024, AT(min_upload_rate), NULL, NULL, "16",
     "KiB/s an upload must average once it is 5 s old, or it is closed (408); 0 = no minimum"},
    {"drain-seconds", "S", K_SECONDS, 0, 3600, 0, AT(drain_s), NULL, NULL, "30",
     "on SIGTERM/SIGINT, finish admitted work within S"},
    {"http-nice", "N", K_INT, 0, 19, 0, AT(http_nice), NULL, NULL, "10",
     "scheduling niceness of the HTTP thread, above the workers' (0), so under CPU contention "
     "inference wins and refusals wait"},
    {"stuck-seconds", "S", K_SECONDS, 0, 86400, 0, AT(stuck_s), NULL, NULL, "600",
     "/healthz answers 503 while a worker has been on one image longer than S, for a supervisor "
     "to restart; 0 = never"},
    {"backend", "B", K_CHOICE, 0, 0, 0, AT(engine.backend), "onednn|reference", NULL, "onednn",
     "onednn or reference (plain C loops, the test oracle)"},
    {"precision", "P", K_CHOICE, 0, 0, 0, AT(engine.precision), NULL, parse_precision, "auto",
     "fp32, bf16, int8 or auto"},
    {"upsample", "MODE", K_CHOICE, 0, 0, 0, AT(engine.resize), NULL, parse_resize, "the model's",
     "asymmetric, align-corners or half-pixel"},
    {"log-format", "F", K_CHOICE, 0, 0, 0, AT(log_format), "logfmt|json", NULL, "logfmt",
     "one line per request on stderr, as logfmt or json"},
    {"quiet", NULL, K_FLAG, 0, 0, 0, AT(quiet), NULL, NULL, NULL, "no per-request lines"},
    /* video jobs (server/jobs_*.c): POST /api/v1/jobs is off unless --jobs-dir is given */
    {"jobs-dir", "DIR", K_STRING, 0, 0, 0, AT(jobs.dir), NULL, NULL, "none: jobs off",
     "spool directory for video jobs (uploads, results, job states), created 0700; at start-up "
     "jobs a crash interrupted are marked failed and stale files removed"},
    {"max-video-mb", "N", K_SCALED, 1, 65536, 1 << 20, AT(jobs.max_bytes), NULL, NULL, "200",
     "largest video upload in MiB; refused with 413 before it is read"},
    {"max-video-seconds", "S", K_SECONDS, 1, 86400, 0, AT(jobs.max_seconds), NULL, NULL, "600",
     "longest video, from its container header; 413 before a frame is decoded"},
    {"max-video-pixels", "N", K_PIXELS, 64, 1e9, 0, AT(jobs.max_pixels), NULL, NULL, "8.8M",
     "largest video frame, width x height from the container header (K/M suffixes; --max-pixels "
     "too); 413 before a frame is decoded. The decoder's 18 frames of this size are in the "
     "memory bound"},
    {"max-jobs", "N", K_INT, 1, 4096, 0, AT(jobs.max_jobs), NULL, NULL, "16",
     "video jobs held at once: queued, running, or finished and not yet expired; more get 503"},
    {"jobs-quota-mb", "N", K_SCALED, 1, 1 << 24, 1 << 20, AT(jobs.quota_bytes), NULL, NULL, "2048",
     "spool bytes at most; an upload reserves twice its size (itself and the result; 1 + N^2 "
     "times with upscale=N), then itself and its result's estimate (--max-job-result-mb) from "
     "the header; more get 507"},
    {"job-ttl", "S", K_SECONDS, 1, 2592000, 0, AT(jobs.ttl_s), NULL, NULL, "3600",
     "finished jobs and their results are removed S seconds after they finish"},
    {"max-video-frames", "N", K_INT, 1, 1e9, 0, AT(jobs.max_frames), NULL, NULL, "36000",
     "most frames of a video job, from its header (MP4 sample tables, WebP frames) and as "
     "decoded; 413 before a frame is decoded"},
    {"max-job-megapixels", "N", K_SCALED, 0, 1e9, 1, AT(jobs.max_work_mpx), NULL, NULL, "20000",
     "most work per video job, in millions of pixels of its style: frames x pixels (after "
     "max_side), with upscale=N the upscaler's FLOPs counted in the style's (at least the "
     "output pixels); 413 from the header; 0 = no bound"},
    {"max-job-result-mb", "N", K_SCALED, 1, 1 << 24, 1 << 20, AT(jobs.max_result_bytes), NULL, NULL,
     "1024",
     "largest result of a video job in MiB, estimated at submission from its frames, their "
     "output size and the format (a GIF takes about 1 byte a pixel a frame, 13 to 25 times an "
     "MP4): 413 above it; the run fails past it"},
    {"jobs-per-client", "N", K_INT, 0, 4096, 0, AT(jobs.per_client), NULL, NULL, "0",
     "video jobs one client may have queued or running (with --jobs-redis, across every "
     "instance); more get 429; 0 = no bound"},
    {"jobs-redis", "URL", K_STRING, 0, 0, 0, AT(jobs.redis_url), NULL, NULL, "none",
     "redis://[:PASSWORD@]HOST:PORT[/DB]: the job queue and states in Redis, shared by every "
     "instance started with the same URL and the same --jobs-dir (shared storage); "
     "docs/cluster.md"},
    {"instance-name", "NAME", K_STRING, 0, 0, 0, AT(jobs.instance), NULL, NULL, "HOST:PORT",
     "this instance's name in the Redis queue and in a job's state; unique per instance"},
    {"jobs-lease", "S", K_SECONDS, 1, 3600, 0, AT(jobs.lease_s), NULL, NULL, "30",
     "with --jobs-redis: a running job's lease, renewed while it runs; another instance takes "
     "over a job whose lease expired (its instance died)"},
    {"jobs-reclaims", "N", K_INT, 0, 100, 0, AT(jobs.max_reclaims), NULL, NULL, "3",
     "with --jobs-redis: times a job is taken over after its instance died, then failed"},
    {"jobs-segment-seconds", "S", K_SECONDS, 0, 86400, 0, AT(jobs.segment_s), NULL, NULL, "60",
     "with --jobs-redis: a video longer than this is cut at keyframes into segments that "
     "several instances convert at once, then joined; 0 = never cut"},
};

enum { OPTION_COUNT = sizeof options / sizeof options[0] };
_Static_assert(OPTION_COUNT <= 64, "ag_server_config.given holds one bit per option");

int ag_config_given(const ag_server_config *c, const char *name) {
    for (int i = 0; i < OPTION_COUNT; i++)
        if (!strcmp(options[i].name, name))
            return (c->given >> i) & 1;
    return 0;
}

_Static_assert(sizeof(ag_backend) == sizeof(int) && sizeof(ag_precision) == sizeof(int) &&
                   sizeof(ag_resize_mode) == sizeof(int) && sizeof(ag_log_format) == sizeof(int),
               "K_CHOICE stores enums as int");

/* ---- help and docs, from the table ------------------------------------------------------ */

/* Print `text` wrapped to 80 columns, every line but the first indented to `indent`. */
static void print_wrapped(FILE *f, const char *text, int column, int indent) {
    const char *p = text;
    while (*p) {
        const char *word = p;
        while (*p && *p != ' ')
            p++;
        int len = (int)(p - word);
        if (column + 1 + len > 80 && column > indent) {
            fprintf(f, "\n%*s", indent, "");
            column = indent;
        } else if (column > indent) {
            fputc(' ', f);
            column++;
        }
        fwrite(word, 1, (size_t)len, f);
        column += len;
        while (*p == ' ')
            p++;
    }
    fputc('\n', f);
}

void ag_config_usage(void) {
    fputs("Usage: animegan serve [options]\n"
          "Serve the photo-to-anime API and web page over HTTP.\n\n",
          stdout);
    for (int i = 0; i < OPTION_COUNT; i++) {
        const opt_def *o = &options[i];
        char left[64];
        int n = snprintf(left, sizeof left, "  --%s%s%s", o->name, o->arg ? " " : "",
                         o->arg ? o->arg : "");
        char help[512];
        snprintf(help, sizeof help, "%s%s%s%s", o->help, o->shown_default ? " (default " : "",
                 o->shown_default ? o->shown_default : "", o->shown_default ? ")" : "");
        if (n >= 24)
            printf("%s\n%24s", left, "");
        else
            printf("%-24s", left);
        print_wrapped(stdout, help, 24, 24);
    }
    fputs("  -h, --help            this help\n"
          "  --options-markdown    the option table of docs/api.md, from the same table\n"
          "\n"
          "At start-up the worst-case memory is printed as a formula of these settings.\n"
          "API: POST /api/v1/convert, GET /api/v1/models, /api/v1/status, /healthz, /readyz,\n"
          "/metrics; the web page is at /.\n",
          stdout);
}

/* The option table of docs/api.md. */
static void print_markdown(void) {
    fputs("| option | default | meaning |\n|---|---|---|\n", stdout);
    for (int i = 0; i < OPTION_COUNT; i++) {
        const opt_def *o = &options[i];
        printf("| `--%s%s", o->name, o->arg ? " " : "");
        for (const char *a = o->arg ? o->arg : ""; *a; a++)
            fputs(*a == '|' ? "\\|" : (char[]){*a, 0}, stdout);
        printf("` | %s%s%s | %s |\n", o->shown_default ? "`" : "",
               o->shown_default ? o->shown_default : "", o->shown_default ? "`" : "", o->help);
    }
}

/* ---- the parser, from the table ----------------------------------------------------------- */

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("animegan: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\nTry 'animegan serve --help'\n", stderr);
    return -1;
}

static int parse_whole(const opt_def *o, const char *text, long long *out) {
    int rc = ag_parse_int64(text, (long long)o->min, (long long)o->max, out);
    if (rc == AG_E_ARG)
        return usage_error("--%s: '%s' is not a whole number", o->name, text);
    if (rc != AG_OK)
        return usage_error("--%s: %s is out of range (%lld to %lld)", o->name, text,
                           (long long)o->min, (long long)o->max);
    return 0;
}

static int parse_seconds(const opt_def *o, const char *text, double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (!text[0] || text[0] == ' ' || text[0] == '+' || *end || errno == ERANGE || !isfinite(v))
        return usage_error("--%s: '%s' is not a number of seconds", o->name, text);
    if (v < o->min || v > o->max)
        return usage_error("--%s: %s is out of range (%g to %g)", o->name, text, o->min, o->max);
    *out = v;
    return 0;
}

/* "16777216", "16.7M", "4096K" -> pixels. */
static int parse_pixels(const opt_def *o, const char *text, size_t *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    double scale = 1;
    if (end && (*end == 'M' || *end == 'm'))
        scale = 1e6, end++;
    else if (end && (*end == 'K' || *end == 'k'))
        scale = 1e3, end++;
    if (!text[0] || text[0] == ' ' || text[0] == '+' || *end || errno == ERANGE || !isfinite(v))
        return usage_error("--%s: '%s' is not a pixel count (e.g. 16777216 or 16.7M)", o->name,
                           text);
    v *= scale;
    if (v < o->min || v > o->max)
        return usage_error("--%s: %s is out of range (64 to 1000M)", o->name, text);
    *out = (size_t)v;
    return 0;
}

static int parse_choice(const opt_def *o, const char *text, int *out) {
    int v = -1;
    if (o->parse) {
        v = o->parse(text);
    } else {
        int i = 0;
        for (const char *p = o->names; *p; i++) {
            size_t n = strcspn(p, "|");
            if (strlen(text) == n && !strncmp(p, text, n)) {
                v = i;
                break;
            }
            p += n + (p[n] == '|');
        }
    }
    if (v < 0 && o->names) {
        char list[128];
        size_t j = 0;
        for (const char *p = o->names; *p && j + 3 < sizeof list; p++)
            j += (size_t)snprintf(list + j, sizeof list - j, *p == '|' ? ", " : "%c", *p);
        return usage_error("--%s: '%s' is not one of %s", o->name, text, list);
    }
    if (v < 0)
        return usage_error("--%s: '%s' is not %s", o->name, text, o->help);
    *out = v;
    return 0;
}

static int apply(ag_server_config *c, const opt_def *o, const char *arg) {
    char *field = (char *)c + o->offset;
    long long v;
    switch (o->kind) {
    case K_STRING:
        if (!arg[0])
            return usage_error("--%s: empty value", o->name);
        *(const char **)(void *)field = arg;
        return 0;
    case K_MODEL:
        if (!arg[0])
            return usage_error("--model: empty name");
        if (c->model_count == AG_SERVER_MAX_MODELS)
            return usage_error("--model: at most %d models", AG_SERVER_MAX_MODELS);
        c->models[c->model_count++] = arg;
        return 0;
    case K_PROXY:
        if (c->trusted_proxy_count == AG_SERVER_MAX_PROXIES)
            return usage_error("--trusted-proxy: at most %d", AG_SERVER_MAX_PROXIES);
        if (!ag_client_address(arg, strlen(arg), c->trusted_proxies[c->trusted_proxy_count]))
            return usage_error("--trusted-proxy: '%s' is not an IPv4 or IPv6 address", arg);
        c->trusted_proxy_count++;
        return 0;
    case K_RESTORE:
        if (!arg[0])
            return usage_error("--restore-model: empty file name");
        if (c->restore_model_count == AG_SERVER_MAX_RESTORERS)
            return usage_error("--restore-model: at most %d", AG_SERVER_MAX_RESTORERS);
        c->restore_models[c->restore_model_count++] = arg;
        return 0;
    case K_UPSCALE:
        if (!arg[0])
            return usage_error("--upscale-model: empty name");
        if (c->upscale_model_count == AG_SERVER_MAX_UPSCALERS)
            return usage_error("--upscale-model: at most %d", AG_SERVER_MAX_UPSCALERS);
        if (c->upscale_model_count == 0)
            c->upscale_model = arg;
        c->upscale_models[c->upscale_model_count++] = arg;
        return 0;
    case K_INT:
        if (parse_whole(o, arg, &v))
            return -1;
        *(int *)(void *)field = (int)v;
        return 0;
    case K_SCALED:
        if (parse_whole(o, arg, &v))
            return -1;
        *(size_t *)(void *)field = (size_t)v * o->scale;
        return 0;
    case K_SECONDS: return parse_seconds(o, arg, (double *)(void *)field);
    case K_PIXELS: return parse_pixels(o, arg, (size_t *)(void *)field);
    case K_CHOICE: return parse_choice(o, arg, (int *)(void *)field);
    case K_FLAG: *(int *)(void *)field = 1; return 0;
    }
    return -1;
}

enum { OPT_HELP = 'h', OPT_MARKDOWN = 255, OPT_TABLE = 256 };

int ag_config_parse(ag_server_config *c, int argc, char **argv, int cpu_count) {
    struct option longopts[OPTION_COUNT + 3];
    for (int i = 0; i < OPTION_COUNT; i++)
        longopts[i] = (struct option){options[i].name,
                                      options[i].kind == K_FLAG ? no_argument : required_argument,
                                      NULL, OPT_TABLE + i};
    longopts[OPTION_COUNT] = (struct option){"help", no_argument, NULL, OPT_HELP};
    longopts[OPTION_COUNT + 1] =
        (struct option){"options-markdown", no_argument, NULL, OPT_MARKDOWN};
    longopts[OPTION_COUNT + 2] = (struct option){NULL, 0, NULL, 0};
    int threads_given = 0;

    ag_config_defaults(c, cpu_count);
    optind = 1;
    opterr = 0;
    for (;;) {
        int prev = optind;
        int opt = getopt_long(argc, argv, ":h", longopts, NULL);
        if (opt == -1)
            break;
        if (opt == OPT_HELP) {
            ag_config_usage();
            return 1;
        }
        if (opt == OPT_MARKDOWN) {
            print_markdown();
            return 1;
        }
        if (opt == ':')
            return usage_error("option '%s' needs a value", argv[prev]);
        if (opt < OPT_TABLE || opt >= OPT_TABLE + OPTION_COUNT)
            return usage_error("unknown or malformed option '%s'", argv[prev]);
        const opt_def *o = &options[opt - OPT_TABLE];
        if (apply(c, o, optarg) != 0)
            return -1;
        c->given |= (uint64_t)1 << (opt - OPT_TABLE);
        if (!strcmp(o->name, "threads")) {
            /* 0 keeps the default: every core. */
            threads_given = c->threads > 0;
            if (!threads_given)
                c->threads = cpu_count > 0 ? cpu_count : 1;
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    for (int i = 0; i < c->model_count; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(c->models[i], c->models[j]) == 0)
                return usage_error("--model: '%s' given twice", c->models[i]);
    if (c->workers > c->threads) {
        if (threads_given)
            return usage_error("--workers %d needs at least as many --threads (got %d)", c->workers,
                               c->threads);
        /* Default threads = cores: more workers than cores would oversubscribe. */
        return usage_error("--workers %d is more than the %d cores (give --threads to force)",
                           c->workers, c->threads);
    }
    c->threads_per_worker = c->threads / c->workers;
    c->engine.threads = c->threads_per_worker;
    return 0;
}
