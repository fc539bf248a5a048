/*
 * config.c - the `animegan serve` command line: defaults, strict parsing of every option
 * (whole numbers only, ranges stated in the message), and the derived values (threads per
 * worker). Every bound the service has is set here and is safe by default.
 */
#include "server.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ag_config_defaults(ag_server_config *c, int cpu_count) {
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->admin_port = -1;
    c->workers = 1;
    c->threads = cpu_count > 0 ? cpu_count : 1;
    c->queue = 16;
    c->queue_timeout_s = 30;
    c->max_upload_bytes = (size_t)10 << 20;
    c->max_pixels = (size_t)4096 * 4096; /* 16.7 M */
    c->max_side = 1024;
    c->portrait_size = 512;
    c->cache_bytes = 0;
    c->max_connections = 64;
    c->timeout_s = 30;
    c->min_upload_rate = 16 * 1024;
    c->drain_s = 30;
    c->http_nice = 10;
    c->stuck_s = 600;
    /* MHD's default. MHD mmaps a pool larger than 32 KiB for every connection and munmaps it
     * at close, and each munmap flushes the TLB of every core running a server thread: under
     * a flood of refused clients that interrupted inference thousands of times a second. At
     * 32 KiB the pool comes from malloc. Headers fit easily; bodies stream through it into
     * the request. */
    c->connection_memory_bytes = 32 * 1024;
    c->engine.backend = AG_BACKEND_ONEDNN;
    c->engine.precision = AG_PRECISION_FP32;
    c->engine.threads = 0;
    c->engine.resize = AG_RESIZE_DEFAULT;
    c->log_format = AG_LOG_LOGFMT;
}

void ag_config_usage(void) {
    fputs(
        "Usage: animegan serve [options]\n"
        "Serve the photo-to-anime API and web page over HTTP.\n"
        "\n"
        "  --host ADDR           address to listen on (default 127.0.0.1)\n"
        "  --port N              TCP port, 0 = any free port (default 8080)\n"
        "  --admin-port N        a second listener on --host for /healthz, /readyz, /metrics\n"
        "                        and /api/v1/status only, with its own 16 connections, so\n"
        "                        probes get through when clients hold every public one;\n"
        "                        0 = any free port (default: none)\n"
        "  --model NAME|PATH     model to serve; repeatable; the first is the default\n"
        "                        (default hayao)\n"
        "  --workers N           inference workers, each with its own engine (default 1)\n"
        "  --threads N           compute threads in all, split between the workers\n"
        "                        (default: every core)\n"
        "  --queue N             requests admitted beyond the running ones; more get 503\n"
        "                        (default 16)\n"
        "  --queue-timeout S     longest wait in the queue before 504 (default 30)\n"
        "  --max-upload-mb N     largest request body in MiB, refused with 413 before it\n"
        "                        is read (default 10)\n"
        "  --max-pixels N        largest image (width x height, from its header; K/M\n"
        "                        suffixes) (default 16.7M)\n"
        "  --max-side N          downscale so the long side is at most N (default 1024)\n"
        "  --cache-mb N          LRU cache of results in MiB, 0 = off (default 0)\n"
        "  --max-connections N   open connections at most (default 64)\n"
        "  --timeout S           close a connection idle for S seconds; an upload must\n"
        "                        also be complete S seconds after its headers (default 30)\n"
        "  --min-upload-rate N   KiB/s an upload must average after its first 5 s, or it\n"
        "                        is closed (408); 0 = no minimum (default 16)\n"
        "  --drain-seconds S     on SIGTERM/SIGINT, finish admitted work within S (default 30)\n"
        "  --http-nice N         scheduling niceness of the HTTP thread, 0-19, above the\n"
        "                        workers' so inference wins the CPU (default 10)\n"
        "  --stuck-seconds S     /healthz answers 503 while a worker has been on one image\n"
        "                        longer than S, for a supervisor to restart (default 600;\n"
        "                        0 = never)\n"
        "  --backend B           onednn or reference (default onednn)\n"
        "  --precision P         fp32, bf16, int8 or auto (default fp32)\n"
        "  --upsample MODE       asymmetric, align-corners or half-pixel (default: the model's)\n"
        "  --log-format F        logfmt or json, one line per request on stderr (default logfmt)\n"
        "  --quiet               no per-request lines\n"
        "  -h, --help            this help\n"
        "\n"
        "At start-up the worst-case memory is printed as a formula of these settings.\n"
        "API: POST /api/v1/convert, GET /api/v1/models, /api/v1/status, /healthz, /readyz,\n"
        "/metrics; the web page is at /.\n",
        stdout);
}

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

/* A whole number in [min, max], by the one parser every front end uses. */
static int parse_ll(const char *option, const char *text, long long min, long long max,
                    long long *out) {
    int rc = ag_parse_int64(text, min, max, out);
    if (rc == AG_E_ARG)
        return usage_error("--%s: '%s' is not a whole number", option, text);
    if (rc != AG_OK)
        return usage_error("--%s: %s is out of range (%lld to %lld)", option, text, min, max);
    return 0;
}

static int parse_int(const char *option, const char *text, int min, int max, int *out) {
    long long v;
    if (parse_ll(option, text, min, max, &v))
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_seconds(const char *option, const char *text, double min, double max,
                         double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (!text[0] || text[0] == ' ' || *end || errno == ERANGE || !isfinite(v))
        return usage_error("--%s: '%s' is not a number of seconds", option, text);
    if (v < min || v > max)
        return usage_error("--%s: %s is out of range (%g to %g)", option, text, min, max);
    *out = v;
    return 0;
}

/* "16777216", "16.7M", "4096K" -> pixels. */
static int parse_pixels(const char *text, size_t *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    double scale = 1;
    if (end && (*end == 'M' || *end == 'm'))
        scale = 1e6, end++;
    else if (end && (*end == 'K' || *end == 'k'))
        scale = 1e3, end++;
    if (!text[0] || text[0] == ' ' || *end || errno == ERANGE || !isfinite(v))
        return usage_error("--max-pixels: '%s' is not a pixel count (e.g. 16777216 or 16.7M)",
                           text);
    v *= scale;
    if (v < 64 || v > 1e9)
        return usage_error("--max-pixels: %s is out of range (64 to 1000M)", text);
    *out = (size_t)v;
    return 0;
}

static int lookup(const char *text, const char *const *names, int count) {
    for (int i = 0; i < count; i++)
        if (strcmp(text, names[i]) == 0)
            return i;
    return -1;
}

enum {
    OPT_HOST = 256,
    OPT_PORT,
    OPT_ADMIN_PORT,
    OPT_MODEL,
    OPT_WORKERS,
    OPT_THREADS,
    OPT_QUEUE,
    OPT_QUEUE_TIMEOUT,
    OPT_MAX_UPLOAD,
    OPT_MAX_PIXELS,
    OPT_MAX_SIDE,
    OPT_CACHE,
    OPT_MAX_CONN,
    OPT_TIMEOUT,
    OPT_MIN_RATE,
    OPT_DRAIN,
    OPT_HTTP_NICE,
    OPT_STUCK,
    OPT_BACKEND,
    OPT_PRECISION,
    OPT_UPSAMPLE,
    OPT_LOG_FORMAT,
    OPT_QUIET,
};

int ag_config_parse(ag_server_config *c, int argc, char **argv, int cpu_count) {
    static const struct option longopts[] = {
        {"host", required_argument, NULL, OPT_HOST},
        {"port", required_argument, NULL, OPT_PORT},
        {"admin-port", required_argument, NULL, OPT_ADMIN_PORT},
        {"model", required_argument, NULL, OPT_MODEL},
        {"workers", required_argument, NULL, OPT_WORKERS},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"queue", required_argument, NULL, OPT_QUEUE},
        {"queue-timeout", required_argument, NULL, OPT_QUEUE_TIMEOUT},
        {"max-upload-mb", required_argument, NULL, OPT_MAX_UPLOAD},
        {"max-pixels", required_argument, NULL, OPT_MAX_PIXELS},
        {"max-side", required_argument, NULL, OPT_MAX_SIDE},
        {"cache-mb", required_argument, NULL, OPT_CACHE},
        {"max-connections", required_argument, NULL, OPT_MAX_CONN},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"min-upload-rate", required_argument, NULL, OPT_MIN_RATE},
        {"drain-seconds", required_argument, NULL, OPT_DRAIN},
        {"http-nice", required_argument, NULL, OPT_HTTP_NICE},
        {"stuck-seconds", required_argument, NULL, OPT_STUCK},
        {"backend", required_argument, NULL, OPT_BACKEND},
        {"precision", required_argument, NULL, OPT_PRECISION},
        {"upsample", required_argument, NULL, OPT_UPSAMPLE},
        {"log-format", required_argument, NULL, OPT_LOG_FORMAT},
        {"quiet", no_argument, NULL, OPT_QUIET},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    static const char *const backends[] = {"onednn", "reference"};
    static const char *const log_formats[] = {"logfmt", "json"};
    int threads_given = 0;
    long long v;
    double d;
    int i;

    ag_config_defaults(c, cpu_count);
    optind = 1;
    opterr = 0;
    for (;;) {
        int prev = optind;
        int opt = getopt_long(argc, argv, ":h", longopts, NULL);
        if (opt == -1)
            break;
        const char *arg = optarg;
        switch (opt) {
        case 'h': ag_config_usage(); return 1;
        case OPT_HOST:
            if (!arg[0])
                return usage_error("--host: empty address");
            c->host = arg;
            break;
        case OPT_PORT:
            if (parse_int("port", arg, 0, 65535, &c->port))
                return -1;
            break;
        case OPT_ADMIN_PORT:
            if (parse_int("admin-port", arg, 0, 65535, &c->admin_port))
                return -1;
            break;
        case OPT_MODEL:
            if (!arg[0])
                return usage_error("--model: empty name");
            if (c->model_count == AG_SERVER_MAX_MODELS)
                return usage_error("--model: at most %d models", AG_SERVER_MAX_MODELS);
            c->models[c->model_count++] = arg;
            break;
        case OPT_WORKERS:
            if (parse_int("workers", arg, 1, 256, &c->workers))
                return -1;
            break;
        case OPT_THREADS:
            if (parse_int("threads", arg, 0, 4096, &c->threads))
                return -1;
            threads_given = c->threads > 0;
            if (!threads_given)
                c->threads = cpu_count > 0 ? cpu_count : 1;
            break;
        case OPT_QUEUE:
            if (parse_int("queue", arg, 0, 4096, &c->queue))
                return -1;
            break;
        case OPT_QUEUE_TIMEOUT:
            if (parse_seconds("queue-timeout", arg, 0.001, 3600, &c->queue_timeout_s))
                return -1;
            break;
        case OPT_MAX_UPLOAD:
            if (parse_ll("max-upload-mb", arg, 1, 1024, &v))
                return -1;
            c->max_upload_bytes = (size_t)v << 20;
            break;
        case OPT_MAX_PIXELS:
            if (parse_pixels(arg, &c->max_pixels))
                return -1;
            break;
        case OPT_MAX_SIDE:
            if (parse_int("max-side", arg, AG_MIN_SIDE, 8192, &c->max_side))
                return -1;
            break;
        case OPT_CACHE:
            if (parse_ll("cache-mb", arg, 0, 65536, &v))
                return -1;
            c->cache_bytes = (size_t)v << 20;
            break;
        case OPT_MAX_CONN:
            if (parse_int("max-connections", arg, 1, 65536, &c->max_connections))
                return -1;
            break;
        case OPT_TIMEOUT:
            if (parse_int("timeout", arg, 1, 3600, &c->timeout_s))
                return -1;
            break;
        case OPT_MIN_RATE:
            if (parse_ll("min-upload-rate", arg, 0, 1 << 20, &v))
                return -1;
            c->min_upload_rate = (size_t)v * 1024;
            break;
        case OPT_DRAIN:
            if (parse_seconds("drain-seconds", arg, 0, 3600, &d))
                return -1;
            c->drain_s = d;
            break;
        case OPT_HTTP_NICE:
            if (parse_int("http-nice", arg, 0, 19, &c->http_nice))
                return -1;
            break;
        case OPT_STUCK:
            if (parse_seconds("stuck-seconds", arg, 0, 86400, &c->stuck_s))
                return -1;
            break;
        case OPT_BACKEND:
            if ((i = lookup(arg, backends, 2)) < 0)
                return usage_error("--backend: '%s' is not onednn or reference", arg);
            c->engine.backend = (ag_backend)i;
            break;
        case OPT_PRECISION:
            if ((i = ag_precision_parse(arg)) < 0)
                return usage_error("--precision: '%s' is not fp32, bf16, int8 or auto", arg);
            c->engine.precision = (ag_precision)i;
            break;
        case OPT_UPSAMPLE:
            if ((i = ag_resize_mode_parse(arg)) < 0)
                return usage_error(
                    "--upsample: '%s' is not asymmetric, align-corners or half-pixel", arg);
            c->engine.resize = (ag_resize_mode)i;
            break;
        case OPT_LOG_FORMAT:
            if ((i = lookup(arg, log_formats, 2)) < 0)
                return usage_error("--log-format: '%s' is not logfmt or json", arg);
            c->log_format = (ag_log_format)i;
            break;
        case OPT_QUIET: c->quiet = 1; break;
        case ':': return usage_error("option '%s' needs a value", argv[prev]);
        default: return usage_error("unknown or malformed option '%s'", argv[prev]);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (c->model_count == 0)
        c->models[c->model_count++] = "hayao";
    for (i = 0; i < c->model_count; i++)
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
