/*
 * test_server_state.c - unit tests of the server's bounded state: the job queue (order,
 * expiry, cancel, close), the LRU result cache (SipHash vectors, eviction, byte bound, no
 * leaks), the text/JSON builder, the Prometheus rendering and the memory formula.
 */
#include "disc_face.h"
#include "test.h"

#include "../server/budget.c"
#include "../server/cache.c"
#include "../server/fuse_cache.c"
#include "../server/jobs_config.c"
#include "../server/json.c"
#include "../server/metrics.c"
#include "../server/queue.c"
#include "../src/face/face_internal.h" /* ag_face_oval */

#include <math.h>

/* fuse_cache.c's clock, stepped by the tests (main hooks it in). */
static uint64_t fake_now_us = 1000000;
static uint64_t fake_clock(void) {
    return fake_now_us;
}

static int fuse_cache_has(ag_fuse_cache *c, const char *client, const char *data, int *found) {
    static ag_face faces[AG_FUSE_CACHE_FACES];
    return ag_fuse_cache_get(c, client, data, strlen(data), 1, faces, found);
}

/* The fusion face cache: keyed by client and content; the per-client bound evicts that
 * client's least recently used entry, the total bound the oldest of all, the TTL what was
 * not used; faces beyond the kept ones are a miss; no allocation after creation. */
static int fuse_cache_bounds(void) {
    ag_metrics m = {0};
    ag_fuse_cache *c = NULL;
    ag_clock_hook(fake_clock);
    CHECK(ag_fuse_cache_create(0, 1, 1, &m, &c) == 0 && c == NULL); /* off */
    CHECK(ag_fuse_cache_create(3, 2, 10, &m, &c) == 0 && c);
    static ag_face faces[AG_FUSE_CACHE_FACES + 2];
    faces[0].score = 0.5f;
    int found = 0;
    size_t base = ag_allocated_bytes();
    ag_fuse_cache_put(c, "a", "photo1", 6, faces, 1);
    fake_now_us += 1000;
    ag_fuse_cache_put(c, "a", "photo2", 6, faces, 1);
    fake_now_us += 1000;
    CHECK(fuse_cache_has(c, "a", "photo1", &found) && found == 1); /* photo1 used last */
    CHECK(!fuse_cache_has(c, "b", "photo1", &found)); /* another client's entry: a miss */
    fake_now_us += 1000;
    ag_fuse_cache_put(c, "a", "photo3", 6, faces, 1); /* a's third: its LRU (photo2) goes */
    CHECK(!fuse_cache_has(c, "a", "photo2", &found));
    CHECK(fuse_cache_has(c, "a", "photo1", &found) && fuse_cache_has(c, "a", "photo3", &found));
    fake_now_us += 1000;
    ag_fuse_cache_put(c, "b", "photo9", 6, faces, 0); /* a free slot: no eviction */
    CHECK(m.fuse_cache_evictions == 1 && m.fuse_cache_entries == 3);
    fake_now_us += 1000;
    ag_fuse_cache_put(c, "c", "photo8", 6, faces, 1); /* full: the oldest of all goes */
    CHECK(m.fuse_cache_evictions == 2 && m.fuse_cache_entries == 3);
    CHECK(fuse_cache_has(c, "b", "photo9", &found) && found == 0); /* no face: known */
    CHECK(fuse_cache_has(c, "c", "photo8", &found));
    ag_fuse_cache_put(c, "c", "many", 4, faces, AG_FUSE_CACHE_FACES + 2);
    CHECK(ag_fuse_cache_get(c, "c", "many", 4, AG_FUSE_CACHE_FACES, faces, &found) == 1);
    CHECK(ag_fuse_cache_get(c, "c", "many", 4, AG_FUSE_CACHE_FACES + 1, faces, &found) == 0);
    fake_now_us += 11 * 1000000ull; /* past the TTL: everything is gone */
    CHECK(!fuse_cache_has(c, "c", "photo8", &found));
    CHECK(ag_allocated_bytes() == base);
    ag_fuse_cache_destroy(c);
    ag_clock_hook(NULL);
    return 0;
}

static int queue_fifo_and_bounds(void) {
    ag_queue q;
    int items[5] = {0, 1, 2, 3, 4};
    CHECK(ag_queue_init(&q, 3) == 0);
    CHECK(ag_queue_push(&q, &items[0], 100) == 0);
    CHECK(ag_queue_push(&q, &items[1], 200) == 0);
    CHECK(ag_queue_push(&q, &items[2], 300) == 0);
    CHECK(ag_queue_push(&q, &items[3], 400) == -1); /* full */
    CHECK(ag_queue_depth(&q) == 3);
    uint64_t d;
    CHECK(ag_queue_pop(&q, &d) == &items[0] && d == 100);
    CHECK(ag_queue_push(&q, &items[3], 400) == 0); /* wraps around the ring */
    CHECK(ag_queue_pop(&q, &d) == &items[1]);
    CHECK(ag_queue_pop(&q, &d) == &items[2]);
    CHECK(ag_queue_pop(&q, &d) == &items[3] && d == 400);
    CHECK(ag_queue_depth(&q) == 0);
    ag_queue_fini(&q);
    return 0;
}

static int match_int(const void *item, const void *arg) {
    return *(const int *)item == *(const int *)arg;
}

static int queue_expire_cancel_position(void) {
    ag_queue q;
    int items[6] = {0, 1, 2, 3, 4, 5};
    void *out[8];
    CHECK(ag_queue_init(&q, 6) == 0);
    uint64_t deadlines[6] = {50, 500, 20, 600, 10, 700};
    for (int i = 0; i < 6; i++)
        CHECK(ag_queue_push(&q, &items[i], deadlines[i]) == 0);
    int want = 3;
    CHECK(ag_queue_position(&q, match_int, &want) == 4);
    /* Expire those due by 100: 0, 2, 4, in queue order; the rest keep their order. */
    CHECK(ag_queue_take_expired(&q, 100, out, 8) == 3);
    CHECK(out[0] == &items[0] && out[1] == &items[2] && out[2] == &items[4]);
    CHECK(ag_queue_depth(&q) == 3);
    CHECK(ag_queue_position(&q, match_int, &want) == 2);
    want = 2;
    CHECK(ag_queue_position(&q, match_int, &want) == 0);
    /* take_all respects max and leaves the rest */
    CHECK(ag_queue_take_all(&q, out, 2) == 2);
    CHECK(out[0] == &items[1] && out[1] == &items[3]);
    uint64_t d;
    CHECK(ag_queue_pop(&q, &d) == &items[5]);
    ag_queue_close(&q);
    CHECK(ag_queue_pop(&q, &d) == NULL); /* closed and empty: does not block */
    CHECK(ag_queue_push(&q, &items[0], 1) == -1);
    ag_queue_fini(&q);
    ag_queue_fini(&q); /* idempotent */
    return 0;
}

static int is_odd(const void *item) {
    return *(const int *)item % 2;
}

/* A worker running a video frame takes the waiting photo at the head, and only that: not a
 * frame, not one the caller refuses (an upscale), not one behind those. */
static int queue_pop_request_if_head(void) {
    ag_queue q;
    int items[4] = {1, 2, 3, 5};
    uint64_t d = 0;
    CHECK(ag_queue_init(&q, 4) == 0);
    CHECK(ag_queue_pop_request_if(&q, is_odd, &d) == NULL); /* empty: does not block */
    CHECK(ag_queue_push(&q, &items[0], 100) == 0);
    CHECK(ag_queue_push(&q, &items[1], 200) == 0);
    CHECK(ag_queue_push_frame(&q, &items[2]) == 0);
    CHECK(ag_queue_push(&q, &items[3], 500) == 0);
    CHECK(ag_queue_pop_request_if(&q, is_odd, &d) == &items[0] && d == 100);
    CHECK(ag_queue_pop_request_if(&q, is_odd, &d) == NULL); /* 2 is refused... */
    CHECK(ag_queue_depth(&q) == 3);                         /* ...and stays, as 5 behind it */
    CHECK(ag_queue_pop(&q, &d) == &items[1]);
    CHECK(ag_queue_pop_request_if(&q, is_odd, &d) == NULL); /* a frame (odd) is no request */
    CHECK(ag_queue_pop(&q, &d) == &items[2]);
    CHECK(ag_queue_pop_request_if(&q, is_odd, &d) == &items[3] && d == 500);
    CHECK(ag_queue_depth(&q) == 0);
    ag_queue_fini(&q);
    return 0;
}

typedef struct popper {
    ag_queue *q;
    int got;
} popper;

static void *pop_all(void *arg) {
    popper *p = arg;
    uint64_t d;
    while (ag_queue_pop(p->q, &d))
        p->got++;
    return NULL;
}

static int queue_threads(void) {
    ag_queue q;
    CHECK(ag_queue_init(&q, 64) == 0);
    popper p[3] = {{&q, 0}, {&q, 0}, {&q, 0}};
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        CHECK(pthread_create(&t[i], NULL, pop_all, &p[i]) == 0);
    static int item;
    int pushed = 0;
    while (pushed < 10000)
        if (ag_queue_push(&q, &item, 0) == 0)
            pushed++;
    /* wait for the consumers to drain, then close */
    while (ag_queue_depth(&q) > 0)
        sched_yield();
    ag_queue_close(&q);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    CHECK(p[0].got + p[1].got + p[2].got == 10000);
    ag_queue_fini(&q);
    return 0;
}

static int siphash_vectors(void) {
    /* Reference vectors of SipHash-2-4 (Aumasson & Bernstein): key 00..0f, message 00..n-1. */
    uint8_t key[16], msg[64];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++)
        msg[i] = (uint8_t)i;
    CHECK(ag_siphash24(key, msg, 0) == 0x726fdb47dd0e0e31ULL);
    CHECK(ag_siphash24(key, msg, 1) == 0x74f839c593dc67fdULL);
    CHECK(ag_siphash24(key, msg, 8) == 0x93f5f5799a932462ULL);
    CHECK(ag_siphash24(key, msg, 15) == 0xa129ca6149be45e5ULL);
    CHECK(ag_siphash24(key, msg, 63) == 0x958a324ceb064572ULL);
    return 0;
}

static int cache_lru_and_bound(void) {
    size_t base = ag_allocated_bytes();
    ag_cache *c = NULL;
    CHECK(ag_cache_create(0, &c) == 0 && c == NULL); /* off */
    CHECK(ag_cache_create(64 * 1024, &c) == 0 && c != NULL);
    ag_convert_options o;
    ag_convert_options_init(&o, 1024);
    uint8_t in[4][100], out[10000];
    memset(out, 7, sizeof out);
    ag_cache_key k[4];
    for (int i = 0; i < 4; i++) {
        memset(in[i], i, sizeof in[i]);
        ag_cache_key_make(c, in[i], sizeof in[i], "hayao", &o, &k[i]);
    }
    uint8_t *data;
    size_t size;
    int w, h;
    CHECK(ag_cache_get(c, &k[0], &data, &size, &w, &h) == 0);
    /* four 10 000-byte entries fit in 64 KiB; a fifth evicts the least recently used */
    for (int i = 0; i < 4; i++)
        ag_cache_put(c, &k[i], out, sizeof out, 10 + i, 20);
    CHECK(ag_cache_get(c, &k[0], &data, &size, &w, &h) == 1); /* 0 is now most recent */
    CHECK(size == sizeof out && w == 10 && h == 20 && data[0] == 7);
    ag_free(data);
    ag_cache_stats st;
    ag_cache_get_stats(c, &st);
    CHECK(st.entries == 4 && st.bytes <= st.capacity_bytes);
    uint8_t extra_in[100] = {9};
    ag_cache_key extra;
    ag_cache_key_make(c, extra_in, sizeof extra_in, "hayao", &o, &extra);
    for (int i = 0; i < 3; i++) {
        ag_cache_key kk = extra;
        kk.hash[0] += (uint64_t)i;
        ag_cache_put(c, &kk, out, sizeof out, 1, 1);
    }
    ag_cache_get_stats(c, &st);
    CHECK(st.bytes <= st.capacity_bytes && st.evictions >= 1);
    CHECK(ag_cache_get(c, &k[1], &data, &size, &w, &h) == 0); /* LRU victim */
    CHECK(ag_cache_get(c, &k[0], &data, &size, &w, &h) == 1); /* recently used: kept */
    ag_free(data);
    /* An entry bigger than a quarter of the cache is not stored. */
    static uint8_t huge[20000];
    ag_cache_key hk = k[2];
    hk.hash[1] ^= 1;
    ag_cache_put(c, &hk, huge, sizeof huge, 1, 1);
    CHECK(ag_cache_get(c, &hk, &data, &size, &w, &h) == 0);
    /* Options are part of the key. */
    ag_cache_key a, b;
    ag_cache_key_make(c, in[0], sizeof in[0], "hayao", &o, &a);
    o.portrait = 1;
    ag_cache_key_make(c, in[0], sizeof in[0], "hayao", &o, &b);
    CHECK(a.hash[0] == b.hash[0] && a.hash[1] != b.hash[1]);
    ag_cache_key_make(c, in[0], sizeof in[0], "other", &o, &a);
    CHECK(a.hash[1] != b.hash[1]);
    ag_cache_get_stats(c, &st);
    CHECK(st.hits == 2 && st.misses == 3);
    ag_cache_destroy(c);
    ag_cache_destroy(NULL);
    CHECK(ag_allocated_bytes() == base);
    return 0;
}

static int text_builder(void) {
    size_t base = ag_allocated_bytes();
    ag_text t;
    ag_text_init(&t, 64);
    ag_text_json_string(&t, "a\"b\\c\n\x01");
    CHECK(!strcmp(t.data, "\"a\\\"b\\\\c\\n\\u0001\""));
    ag_text_printf(&t, "%d", 42);
    size_t n;
    char *s = ag_text_take(&t, &n);
    CHECK(s && n == strlen(s));
    ag_free(s);
    /* Over the maximum: failed, never truncated. */
    ag_text_init(&t, 16);
    ag_text_printf(&t, "%s", "0123456789abcdefghij");
    CHECK(t.failed && ag_text_take(&t, &n) == NULL);
    char buf[256];
    size_t len = ag_json_error(buf, sizeof buf, "bad_option", "say \"hi\"\n");
    CHECK(len == strlen(buf));
    CHECK(!strcmp(buf,
                  "{\"error\":{\"code\":\"bad_option\",\"message\":\"say \\\"hi\\\"\\u000a\"}}\n"));
    CHECK(ag_allocated_bytes() == base);
    return 0;
}

static int metrics_render(void) {
    static ag_metrics m; /* zeroed atomics */
    ag_metrics_count_request(&m, AG_ROUTE_CONVERT, 200, 1500000, 1000, 2000);
    ag_metrics_count_request(&m, AG_ROUTE_CONVERT, 503, 200, 0, 100);
    ag_metrics_count_request(&m, AG_ROUTE_HEALTHZ, 200, 100, 0, 10);
    ag_metrics_count_request(&m, AG_ROUTE_OTHER, 418, 100, 0, 10);
    ag_metrics_observe(&m.inference, 3000000);
    CHECK(ag_metrics_status_slot(200) == 0 && ag_metrics_status_slot(418) == AG_STATUS_SLOTS - 1);
    /* Every status the service answers has its own code label (202 was "other"). */
    const int answered[] = {200, 202, 304, 400, 404, 405, 408, 409, 410, 411, 413,
                            414, 415, 422, 431, 499, 500, 501, 503, 504, 505, 507};
    for (size_t i = 0; i < sizeof answered / sizeof answered[0]; i++)
        CHECK_MSG(ag_metrics_status_slot(answered[i]) != AG_STATUS_SLOTS - 1,
                  "status %d counted as code=\"other\"", answered[i]);
    const char *names[] = {"hayao"};
    ag_metrics_gauges g = {.queue_depth = 2,
                           .queue_capacity = 16,
                           .admitted = 3,
                           .admit_limit = 18,
                           .workers = 2,
                           .busy_workers = 1,
                           .rss_bytes = 123456789,
                           .arena_bytes = 42,
                           .memory_bound_bytes = 999,
                           .model_names = names,
                           .model_count = 1};
    char *buf = NULL;
    size_t size = 0;
    CHECK(ag_metrics_render(&m, &g, &buf, &size, 256 * 1024) == 0);
    CHECK(strlen(buf) == size);
    CHECK(strstr(buf, "animegan_http_requests_total{route=\"convert\",code=\"200\"} 1\n"));
    CHECK(strstr(buf, "animegan_http_requests_total{route=\"convert\",code=\"503\"} 1\n"));
    CHECK(strstr(buf, "animegan_http_requests_total{route=\"convert\",code=\"504\"} 0\n"));
    CHECK(strstr(buf, "animegan_http_requests_total{route=\"other\",code=\"other\"} 1\n"));
    /* 1.5 s falls in le=2.5, cumulative from there on */
    CHECK(strstr(buf,
                 "animegan_http_request_duration_seconds_bucket{route=\"convert\",le=\"1\"} 1\n"));
    CHECK(strstr(
        buf, "animegan_http_request_duration_seconds_bucket{route=\"convert\",le=\"2.5\"} 2\n"));
    CHECK(strstr(buf, "animegan_http_request_duration_seconds_count{route=\"convert\"} 2\n"));
    CHECK(strstr(buf, "animegan_inference_seconds_bucket{le=\"+Inf\"} 1\n"));
    CHECK(strstr(buf, "animegan_inference_seconds_sum 3.000000\n"));
    CHECK(strstr(buf, "animegan_queue_depth 2\n"));
    CHECK(strstr(buf, "animegan_process_resident_memory_bytes 123456789\n"));
    CHECK(strstr(buf, "animegan_http_received_bytes_total 1000\n"));
    CHECK(strstr(buf, "animegan_build_info{version=\"" AG_VERSION "\",model=\"hayao\"} 1\n"));
    ag_free(buf);
    /* A too small maximum fails cleanly. */
    CHECK(ag_metrics_render(&m, &g, &buf, &size, 1000) == -1 && buf == NULL);
    return 0;
}

/* /api/v1/faces, /fuse, /restore and /upscale: handled as convert, each its own series. */
static int routes_counted_apart(void) {
    static const struct {
        const char *url, *label;
        ag_convert_step step;
    } cases[] = {{"/api/v1/convert", "convert", AG_CONVERT_STYLE},
                 {"/api/v1/faces", "faces", AG_CONVERT_FACES},
                 {"/api/v1/fuse", "fuse", AG_CONVERT_FUSE},
                 {"/api/v1/restore", "restore", AG_CONVERT_RESTORE},
                 {"/api/v1/upscale", "upscale", AG_CONVERT_UPSCALE},
                 {"/api/v1/models", "models", AG_CONVERT_STYLE}};
    static ag_metrics m;
    memset(&m, 0, sizeof m);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ag_request r;
        memset(&r, 0, sizeof r);
        r.route = strcmp(cases[i].url, "/api/v1/models") ? AG_ROUTE_CONVERT : AG_ROUTE_MODELS;
        r.options.step = cases[i].step;
        CHECK_MSG(!strcmp(ag_route_name(ag_route_counted(&r)), cases[i].label), "%s counted as %s",
                  cases[i].url, ag_route_name(ag_route_counted(&r)));
        ag_metrics_count_request(&m, ag_route_counted(&r), 200, 1000, 10, 10);
    }
    ag_metrics_gauges g = {.workers = 1};
    char *buf = NULL, line[128];
    size_t size = 0;
    CHECK(ag_metrics_render(&m, &g, &buf, &size, 256 * 1024) == 0);
    int missing = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(line, sizeof line, "animegan_http_requests_total{route=\"%s\",code=\"200\"} 1\n",
                 cases[i].label);
        missing += !strstr(buf, line);
    }
    ag_free(buf);
    CHECK(missing == 0);
    return 0;
}

static int budget_formula(void) {
    ag_server_config c;
    ag_config_defaults(&c, 4);
    c.workers = 2;
    c.queue = 3;
    c.cache_bytes = 5 << 20;
    ag_budget b;
    ag_budget_compute(&b, &c, NULL, 0, 100 << 20);
    CHECK(b.workers == 2 && b.admitted == 5 && b.connections == 64);
    CHECK(b.total_bytes == b.base_bytes + b.runtime_bytes + 2 * b.worker_bytes +
                               5 * b.request_bytes + 64 * b.connection_bytes + b.cache_bytes);
    CHECK(b.request_bytes > c.max_upload_bytes);
    CHECK(b.decode_bytes >= c.max_pixels * 4);
    char text[512];
    ag_budget_format(&b, text, sizeof text);
    CHECK(strstr(text, "2 workers x") && strstr(text, "5 admitted x") && strstr(text, "cache 5.0"));
    /* Bigger settings never give a smaller bound. */
    ag_budget b2;
    c.max_side = 2048;
    ag_budget_compute(&b2, &c, NULL, 0, 100 << 20);
    CHECK(b2.total_bytes > b.total_bytes);
    return 0;
}

/* A fusion with style=NAME (server/fuse.c): the fused image up to --max-pixels, its copy
 * at --max-side, the engine's tensors; with anime_template the target held meanwhile. It
 * fits in convert's images at any setting (the worker term counts the larger). */
static int budget_fuse_style(void) {
    static const struct {
        size_t max_pixels;
        int max_side;
    } cases[] = {{(size_t)4096 * 4096, 1024},
                 {(size_t)4096 * 4096, 64},
                 {(size_t)64 * 64, 4096},
                 {(size_t)100000000, 512},
                 {(size_t)1024 * 1024, 1024}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ag_server_config c;
        ag_config_defaults(&c, 2);
        c.max_pixels = c.fuse_max_pixels = cases[i].max_pixels, c.max_side = cases[i].max_side;
        ag_budget b;
        ag_budget_compute(&b, &c, NULL, 0, 0);
        size_t side = (size_t)(c.max_side > c.portrait_size ? c.max_side : c.portrait_size);
        size_t px = side * side, image = c.max_pixels * 4;
        /* the steps, as fuse.c runs them */
        size_t steps[5] = {image + px * 4,            /* fused + its copy at S */
                           px * 4 + px * 24 + px * 4, /* copy + tensors + result */
                           px * 4 + px * 8,           /* result + encoder's copy */
                           image * 2 + px * 4,        /* template: target, source, copy */
                           image + px * 32};          /* template: target + its stylise */
        size_t most = 0;
        for (int k = 0; k < 5; k++)
            most = steps[k] > most ? steps[k] : most;
        CHECK(ag_budget_fuse_style_bytes(&c) == most);
        CHECK(b.worker_bytes - b.arena_bytes >= most);
        /* convert's own images (decode + tensors + encode) already cover it */
        CHECK(b.decode_bytes == c.max_pixels * 8 + px * 8);
    }
    return 0;
}

/* The fusion's term covers a real fusion at the largest images a small config allows
 * (--max-pixels 256^2): both inputs at the limit, RGBA, the target's face filling it (the
 * work window is the whole target), resized by size=255 (a second target of ~the limit),
 * the source's face over twice the target's (shrunk first), Poisson on. The allocator's
 * peak over the fusion, with the worker's inputs and faces array, is at most the term's
 * fusing step, and more than that step without its Poisson grids (or any larger buffer):
 * a term that left one out fails here. Runs first: the peak must be this test's. */
static int budget_fuse_covers_peak(void) {
    ag_server_config c;
    ag_config_defaults(&c, 2);
    c.max_pixels = (size_t)256 * 256;
    size_t before = ag_allocated_bytes(), peak_before = ag_allocated_peak_bytes();
    ag_face *faces = ag_malloc(sizeof *faces * (AG_FACE_MAX + 2));
    ag_image src = {256, 256, 4, ag_malloc((size_t)256 * 256 * 4)};
    ag_image tgt = {256, 256, 4, ag_malloc((size_t)256 * 256 * 4)};
    CHECK(faces && src.pixels && tgt.pixels);
    for (size_t i = 0; i < (size_t)256 * 256 * 4; i++)
        src.pixels[i] = (uint8_t)(i * 7 % 251), tgt.pixels[i] = (uint8_t)(i * 13 % 241);
    ag_face *sf = faces + AG_FACE_MAX, *tf = sf + 1;
    disc_face(sf, 128, 128, 240); /* 2.2x the target's: shrunk */
    disc_face(tf, 128, 128, 110);
    ag_fuse_options o;
    ag_fuse_options_init(&o);
    o.shape_ratio = o.texture_ratio = 1, o.size = 255, o.smooth = 0.5f;
    ag_image out;
    ag_error err = {0};
    ag_fuse_timing tm;
    CHECK_OK(ag_face_fuse(&src, sf, &tgt, tf, &o, &out, &tm, &err), &err);
    size_t peak = ag_allocated_peak_bytes();
    CHECK(peak > peak_before); /* this fusion's peak, not an earlier test's */
    size_t used = peak - before, side = 4096, px = c.max_pixels;
    size_t term = ag_budget_fuse_bytes(&c);
    size_t fusing = px * 4 * 2 + sizeof(ag_face) * (AG_FACE_MAX + 2) + 192 * 192 * 4 +
                    ag_face_fuse_bytes(px, px, side, AG_FUSE_WINDOW_PIXELS);
    size_t poisson = 2 * px * 4 + px + px / 3 + 16;
    printf("  fusion at 256^2 (window %d px, shrink %.2f, %d cycles): peak %zu bytes, term %zu "
           "(fusing %zu, its Poisson grids %zu)\n",
           tm.region_px, (double)tm.source_shrink, tm.cycles, used, term, fusing, poisson);
    CHECK(tm.region_px == 255 * 255 && tm.source_shrink < 1 && tm.cycles > 0);
    CHECK(used <= fusing && fusing <= term);
    CHECK(used > fusing - poisson); /* tight enough to miss no buffer */
    ag_image_fini(&out);
    ag_image_fini(&src);
    ag_image_fini(&tgt);
    ag_free(faces);
    CHECK(ag_allocated_bytes() == before);
    return 0;
}

/* The fusion's terms grow with --max-pixels: its worker term covers the style step and
 * raises the worker term (never lowers it) where it exceeds convert's images; its response
 * raises the per-request term (never lowers it) where it exceeds convert's. At the default
 * settings both are the larger. */
static int budget_fuse_monotonic(void) {
    static const size_t pixels[] = {4096, 65536, 1u << 20, (size_t)4096 * 4096, 100000000};
    size_t last = 0, last_response = 0, last_total = 0;
    for (size_t i = 0; i < sizeof pixels / sizeof pixels[0]; i++) {
        ag_server_config c;
        ag_config_defaults(&c, 2);
        c.max_pixels = c.fuse_max_pixels = pixels[i];
        size_t t = ag_budget_fuse_bytes(&c), r = ag_budget_fuse_response_bytes(&c);
        CHECK(t > last && t >= ag_budget_fuse_style_bytes(&c) && t >= c.max_pixels * 4 * 3);
        CHECK(r > last_response && r >= c.max_pixels * 4 + c.max_pixels * 4 / 100);
        last = t, last_response = r;
        ag_budget b;
        ag_budget_compute(&b, &c, NULL, 0, 0);
        ag_budget_add_faces(&b, 1000);
        size_t worker = b.worker_bytes, total = b.total_bytes, request = b.request_bytes;
        size_t images = worker - b.arena_bytes - b.face_bytes - b.upscale_bytes;
        size_t response = request - b.upload_bytes;
        ag_budget_add_fuse(&b, t, r);
        CHECK(b.worker_bytes - b.arena_bytes - b.face_bytes - b.upscale_bytes ==
              (t > images ? t : images));
        CHECK(b.request_bytes - b.upload_bytes == (r > response ? r : response));
        CHECK(b.total_bytes - total == (b.worker_bytes - worker) * (size_t)c.workers +
                                           (b.request_bytes - request) * (size_t)b.admitted);
        CHECK(b.total_bytes > last_total);
        last_total = b.total_bytes;
        size_t after = b.total_bytes;
        ag_budget_add_fuse(&b, t / 2, r / 2); /* smaller ones change nothing */
        CHECK(b.fuse_bytes == (t > images ? t - images : 0) && b.total_bytes == after);
        CHECK(b.total_bytes == b.base_bytes + b.runtime_bytes + b.worker_bytes * (size_t)c.workers +
                                   b.request_bytes * (size_t)b.admitted +
                                   b.connection_bytes * (size_t)b.connections + b.cache_bytes +
                                   b.video_bytes);
        char line[640];
        ag_budget_format(&b, line, sizeof line);
        if (pixels[i] == (size_t)4096 * 4096) {
            CHECK(b.fuse_bytes > 0 && r > response);
            printf("  default --max-pixels: fusion %.1f MiB, convert's images %.1f MiB; "
                   "response %.1f MiB, convert's %.1f MiB\n  %s\n",
                   t / 1048576.0, images / 1048576.0, r / 1048576.0, response / 1048576.0, line);
        }
    }
    return 0;
}

/* xorshift64: incompressible pixels, PNG's worst case (deflate stores them). */
static void noise(uint8_t *p, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        p[i] = (uint8_t)(seed >> 56);
    }
}

/* A fusion's response (server/fuse.c: the fused image at the target's size, PNG by default)
 * fits the per-request term once ag_budget_add_fuse counts it: noise images of --max-pixels
 * (RGBA and RGB, square and 64 px wide: one filter byte per 192 bytes), and a resized
 * fusion a pixel wide (size=4096 of a 64 x 262144 target), encoded. At --max-side 256 they
 * are well over convert's response, so a budget that left the fusion's response out fails
 * here. */
static int budget_fuse_response(void) {
    ag_server_config c;
    ag_config_defaults(&c, 2);
    c.max_pixels = c.fuse_max_pixels = (size_t)1024 * 1024, c.max_side = 256;
    ag_budget b;
    ag_budget_compute(&b, &c, NULL, 0, 0);
    ag_budget_add_faces(&b, 1000);
    size_t convert = b.request_bytes - b.upload_bytes;
    ag_budget_add_fuse(&b, ag_budget_fuse_bytes(&c), ag_budget_fuse_response_bytes(&c));
    size_t held = b.request_bytes - b.upload_bytes;
    static const struct {
        int w, h, bands;
    } shapes[] = {{1024, 1024, 4}, {1024, 1024, 3}, {64, 16384, 4}, {64, 16384, 3}, {1, 4096, 4}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        ag_image im = {shapes[i].w, shapes[i].h, shapes[i].bands, NULL};
        size_t raw = (size_t)im.width * im.height * im.bands;
        CHECK((size_t)im.width * im.height <= c.max_pixels);
        im.pixels = ag_malloc(raw);
        CHECK(im.pixels);
        noise(im.pixels, raw, 0x9e3779b97f4a7c15ull + i);
        void *data = NULL;
        size_t size = 0;
        ag_error err = {0};
        CHECK_OK(ag_image_encode(&im, AG_FORMAT_PNG, AG_DEFAULT_QUALITY, &data, &size, &err), &err);
        printf("  %dx%d x%d noise: PNG %zu bytes (raw %zu), response term %zu, convert's %zu\n",
               im.width, im.height, im.bands, size, raw, held, convert);
        CHECK(size > raw && size <= held);
        if (raw >= (size_t)3 << 20)
            CHECK(size > convert); /* the term convert's response alone would miss */
        ag_free(data);
        ag_image_fini(&im);
    }
    return 0;
}

/* The video jobs' term: the largest frames in flight, at upscale=N too when the server
 * has an upscaler (bounded by --max-output-pixels, side by side counted). */
static int jobs_budget_upscale(void) {
    ag_server_config c;
    ag_config_defaults(&c, 4);
    CHECK(ag_jobs_budget_bytes(&c) == 0); /* no --jobs-dir */
    c.jobs.dir = "/spool";
    c.jobs.max_pixels = (size_t)4096 * 2160;
    c.max_output_pixels = (size_t)2048 * 2048;
    size_t none = ag_jobs_budget_bytes(&c);
    c.upscale_model = "none";
    CHECK(ag_jobs_budget_bytes(&c) == none);
    ag_video_options o;
    ag_video_options_init(&o);
    o.side_by_side = 1;
    size_t rest = none - ag_video_frame_bytes(1024, 1024, &o);
    CHECK(rest == (size_t)4096 * 2160 * 3 / 2 * 18 + ((size_t)32 << 20));
    c.upscale_model = "esrgan-slim";
    size_t up = ag_jobs_budget_bytes(&c);
    /* 4.2 M output pixels: 1024^2 frames at upscale=2 are the largest (side by side they
     * fit 725^2, at upscale=4 512^2) */
    o.side_by_side = 0;
    o.out_scale = 2;
    printf("  jobs term %zu bytes, with an upscaler %zu\n", none, up);
    CHECK(up == rest + ag_video_frame_bytes(1024, 1024, &o) && up > none);
    /* a larger --max-output-pixels: upscale=4 of the whole 1024^2 frame */
    c.max_output_pixels = (size_t)1 << 30;
    o.side_by_side = 1;
    o.out_scale = 4;
    CHECK(ag_jobs_budget_bytes(&c) == rest + ag_video_frame_bytes(1024, 1024, &o));
    /* a tiny one: the frames fit no more than without upscaling */
    c.max_output_pixels = 64;
    CHECK(ag_jobs_budget_bytes(&c) == none);
    return 0;
}

/* The result's estimate (issue 33 item 7): a GIF by its frames and pixels (the measured
 * clip.mp4 case: 50 frames of 128x96 gave 632,502 bytes, 25 times the 25,105 byte upload),
 * a video codec at least its input again (N^2 with upscale=N), saturating on absurd sizes. */
static int jobs_result_estimate(void) {
    size_t gif = ag_jobs_result_bytes("gif", 50, 128, 96, 25105, 1);
    CHECK(gif == 50 * (128 * 96 + 1024) + (64 << 10));
    CHECK(gif > 632502 && gif < 2 * 632502);
    CHECK(ag_jobs_result_bytes("gif", 50, 256, 192, 25105, 2) > 3 * gif);
    size_t webp = ag_jobs_result_bytes("webp", 50, 128, 96, 25105, 1);
    CHECK(webp > 58978 && webp < gif / 2); /* the measured animated WebP: 58,978 bytes */
    /* a video codec: the input again (N^2 with upscale), whatever the frames */
    CHECK(ag_jobs_result_bytes("mp4", 50, 128, 96, 25105, 1) == 64 << 10); /* at least */
    CHECK(ag_jobs_result_bytes("mp4", 18000, 1024, 576, 200 << 20, 1) == (size_t)200 << 20);
    CHECK(ag_jobs_result_bytes("webm", 50, 128, 96, 10 << 20, 1) == (size_t)10 << 20);
    CHECK(ag_jobs_result_bytes("mp4", 50, 128, 96, 10 << 20, 4) == (size_t)160 << 20);
    CHECK(ag_jobs_result_bytes("mkv", 0, 128, 96, 0, 1) == 64 << 10);
    CHECK(ag_jobs_result_bytes("unknown", 50, 128, 96, 0, 1) ==
          ag_jobs_result_bytes("mp4", 50, 128, 96, 0, 1));
    CHECK(ag_jobs_result_bytes("gif", INT64_MAX, 16384, 16384, 0, 1) == SIZE_MAX / 2);
    return 0;
}

/* budget.c needs the config defaults: a copy-free stand-in of config.c's. */
void ag_config_defaults(ag_server_config *c, int cpu_count) {
    memset(c, 0, sizeof *c);
    c->workers = 1;
    c->threads = cpu_count;
    c->queue = 16;
    c->max_upload_bytes = (size_t)10 << 20;
    c->max_pixels = (size_t)4096 * 4096;
    c->max_side = 1024;
    c->portrait_size = 512;
    c->max_connections = 64;
    c->connection_memory_bytes = 64 * 1024;
}

void ag_convert_options_init(ag_convert_options *opts, int server_max_side) {
    memset(opts, 0, sizeof *opts);
    opts->max_side = server_max_side;
    opts->format = AG_FORMAT_PNG;
    opts->quality = AG_DEFAULT_QUALITY;
    opts->style = -1;
}

TEST_MAIN(TEST(budget_fuse_covers_peak), TEST(queue_fifo_and_bounds),
          TEST(queue_expire_cancel_position), TEST(queue_pop_request_if_head), TEST(queue_threads),
          TEST(siphash_vectors), TEST(cache_lru_and_bound), TEST(text_builder),
          TEST(metrics_render), TEST(routes_counted_apart), TEST(budget_formula),
          TEST(budget_fuse_style), TEST(budget_fuse_monotonic), TEST(budget_fuse_response),
          TEST(fuse_cache_bounds), TEST(jobs_budget_upscale), TEST(jobs_result_estimate))
