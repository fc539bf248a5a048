/*
 * mp4_check.c - the sample tables of an MP4/MOV, counted before libavformat reads them.
 *
 * libavformat's mov demuxer builds its whole index while opening the file: one entry per
 * sample (24 bytes, plus sizes and offsets), from counts the file only declares. A 2.7 KB
 * file whose stts says "85 M samples of duration 1" and whose stsz says "every sample is 1
 * byte" costs 2 GB before the first limit is looked at. So the box tree is walked first,
 * reading headers and counts only (mdat is skipped by a seek), and every track's declared
 * samples (stts total, stsz/stz2 count), chunks (stco/co64) and table entries (stsc, stss,
 * ctts, elst) are checked against a bound derived from limits->max_frames; fragments (trun)
 * count towards the file's total. The walk is linear in the number of boxes, which is
 * bounded too, and never allocates.
 *
 * The one table libavformat does not expand per sample: uncompressed audio whose stts is a
 * single entry of duration 1 with a constant sample size, which it indexes per chunk; then
 * only its chunks count.
 */
#include "video_internal.h"

#include "../util/util_internal.h"

#include <string.h>

#define MAX_DEPTH 8
#define MAX_BOXES (1 << 20)
#define MAX_TRACKS 64
/* Without a frame bound from the caller, still a bound: 4 M entries (~100 MB of index). */
#define DEFAULT_TABLE_BOUND ((int64_t)1 << 22)
/* Audio packets come more often than video frames (AAC at 48 kHz: 47/s; Opus down to 2.5
 * ms: 400/s), so other tracks get this many times the video bound. */
#define OTHER_TRACK_FACTOR 8

typedef struct track {
    char handler[5];
    uint64_t stts_samples, stts_entries, stts_first_delta;
    uint64_t stsz_samples, stsz_size;
    uint64_t chunks, entries; /* stco/co64; the largest of stsc, stss, ctts, elst */
} track;

typedef struct walk {
    ag_video_source *src;
    uint64_t size;
    int64_t bound; /* samples of a video track */
    uint64_t boxes, trun_samples;
    int tracks;
    track t;
    const char *label;
    ag_error *err;
} walk;

static int read_at(walk *w, uint64_t off, void *buf, size_t n) {
    ag_video_source *s = w->src;
    if (off > w->size || n > w->size - off)
        return -1;
    if (!s->file) {
        memcpy(buf, s->data + off, n);
        return 0;
    }
    if (fseeko(s->file, (off_t)off, SEEK_SET) != 0)
        return -1;
    return fread(buf, 1, n, s->file) == n ? 0 : -1;
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t be64(const uint8_t *p) {
    return (uint64_t)be32(p) << 32 | be32(p + 4);
}

static int is_container(const char *type) {
    static const char *const containers[] = {"moov", "trak", "mdia", "minf", "stbl",
                                             "edts", "moof", "traf", "mvex"};
    for (size_t i = 0; i < sizeof containers / sizeof containers[0]; i++)
        if (!memcmp(type, containers[i], 4))
            return 1;
    return 0;
}

static void keep_max(uint64_t *slot, uint64_t v) {
    if (v > *slot)
        *slot = v;
}

/* stts: the sum of its entries' sample counts (the entries must be in the file). */
static int read_stts(walk *w, uint64_t pos, uint64_t len) {
    uint8_t head[8];
    if (len < 8 || read_at(w, pos, head, 8) != 0)
        return 0; /* a damaged table is libavformat's to refuse; it cannot expand it */
    uint64_t declared = be32(head + 4), fit = (len - 8) / 8;
    uint64_t n = declared < fit ? declared : fit;
    w->t.stts_entries = n;
    uint8_t buf[4096];
    for (uint64_t i = 0; i < n;) {
        uint64_t k = n - i < sizeof buf / 8 ? n - i : sizeof buf / 8;
        if (read_at(w, pos + 8 + i * 8, buf, (size_t)k * 8) != 0)
            return 0;
        for (uint64_t e = 0; e < k; e++) {
            w->t.stts_samples += be32(buf + 8 * e);
            if (i + e == 0)
                w->t.stts_first_delta = be32(buf + 4);
        }
        i += k;
    }
    return 0;
}

/* The leaf boxes whose counts libavformat allocates from. */
static void read_leaf(walk *w, const char *type, uint64_t pos, uint64_t len) {
    uint8_t b[16] = {0};
    size_t want = len < sizeof b ? (size_t)len : sizeof b;
    if (want < 8 || read_at(w, pos, b, want) != 0)
        return;
    if (!memcmp(type, "hdlr", 4) && want >= 12)
        memcpy(w->t.handler, b + 8, 4);
    else if (!memcmp(type, "stts", 4))
        read_stts(w, pos, len);
    else if (!memcmp(type, "stsz", 4) && want >= 12)
        w->t.stsz_size = be32(b + 4), w->t.stsz_samples = be32(b + 8);
    else if (!memcmp(type, "stz2", 4) && want >= 12)
        w->t.stsz_samples = be32(b + 8);
    else if (!memcmp(type, "stco", 4) || !memcmp(type, "co64", 4))
        keep_max(&w->t.chunks, be32(b + 4));
    else if (!memcmp(type, "stsc", 4) || !memcmp(type, "stss", 4) || !memcmp(type, "ctts", 4) ||
             !memcmp(type, "elst", 4) || !memcmp(type, "stps", 4) || !memcmp(type, "sdtp", 4))
        keep_max(&w->t.entries, be32(b + 4));
    else if (!memcmp(type, "trun", 4))
        w->trun_samples += be32(b + 4);
}

static int refuse(walk *w, const char *what, uint64_t n, int64_t bound) {
    return ag_error_set(w->err, AG_E_LIMIT, "%s: %s declares %llu samples; the limit is %lld",
                        w->label, what, (unsigned long long)n, (long long)bound);
}

/* A track's tables against the bound, once its trak box is read. */
static int judge_track(walk *w) {
    const track *t = &w->t;
    int video = !memcmp(t->handler, "vide", 4);
    int64_t bound = video ? w->bound : w->bound * OTHER_TRACK_FACTOR;
    int per_chunk = !memcmp(t->handler, "soun", 4) && t->stts_entries == 1 &&
                    t->stts_first_delta == 1 && t->stsz_size != 0;
    uint64_t samples = t->stts_samples > t->stsz_samples ? t->stts_samples : t->stsz_samples;
    const char *what = video ? "its video track" : "a track";
    if (!per_chunk && samples > (uint64_t)bound)
        return refuse(w, what, samples, bound);
    if (t->chunks > (uint64_t)bound || t->entries > (uint64_t)bound)
        return ag_error_set(w->err, AG_E_LIMIT,
                            "%s: %s declares %llu table entries; the limit is %lld", w->label, what,
                            (unsigned long long)(t->chunks > t->entries ? t->chunks : t->entries),
                            (long long)bound);
    return 0;
}

static int walk_boxes(walk *w, uint64_t pos, uint64_t end, int depth) {
    while (end - pos >= 8) {
        uint8_t h[16];
        if (read_at(w, pos, h, 8) != 0)
            return 0;
        uint64_t size = be32(h), header = 8;
        char type[5] = {(char)h[4], (char)h[5], (char)h[6], (char)h[7], 0};
        if (size == 1) {
            if (end - pos < 16 || read_at(w, pos + 8, h + 8, 8) != 0)
                return 0;
            size = be64(h + 8);
            header = 16;
        } else if (size == 0) {
            size = end - pos; /* to the end of the enclosing box */
        }
        if (size < header)
            return 0; /* libavformat stops here too */
        if (size > end - pos)
            size = end - pos; /* a truncated box: what is there */
        if (++w->boxes > MAX_BOXES)
            return ag_error_set(w->err, AG_E_LIMIT, "%s: more than %d boxes", w->label, MAX_BOXES);
        uint64_t body = pos + header, len = size - header;
        if (is_container(type) && depth < MAX_DEPTH) {
            int trak = !strcmp(type, "trak");
            if (trak) {
                if (++w->tracks > MAX_TRACKS)
                    return ag_error_set(w->err, AG_E_LIMIT, "%s: more than %d tracks", w->label,
                                        MAX_TRACKS);
                memset(&w->t, 0, sizeof w->t);
            }
            int rc = walk_boxes(w, body, body + len, depth + 1);
            if (rc == 0 && trak)
                rc = judge_track(w);
            if (rc)
                return rc;
        } else if (depth > 0) {
            read_leaf(w, type, body, len);
        }
        pos += size;
    }
    return 0;
}

int ag_mp4_check(ag_video_source *src, int64_t size, const ag_video_limits *limits,
                 const char *label, ag_error *err) {
    if (size <= 0)
        return 0;
    walk w = {.src = src, .size = (uint64_t)size, .label = label, .err = err};
    w.bound = limits && limits->max_frames > 0 ? limits->max_frames : DEFAULT_TABLE_BOUND;
    int rc = walk_boxes(&w, 0, w.size, 0);
    /* Fragments: each trun's samples become index entries of their track. */
    int64_t total = w.bound * (OTHER_TRACK_FACTOR + 1);
    if (rc == 0 && w.trun_samples > (uint64_t)total)
        rc = refuse(&w, "its fragments", w.trun_samples, total);
    if (src->file)
        fseeko(src->file, 0, SEEK_SET);
    else
        src->pos = 0;
    return rc;
}
