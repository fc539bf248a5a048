/*
 * test_segments.c - one clip over several workers (src/video/segments.c): the cuts at
 * keyframes, segments converted apart and joined into the file a whole conversion writes
 * (every frame's timestamp, every decode timestamp, the audio packets' bytes, compared with
 * ffprobe), and the join refusing segments out of order, cut short or made for another
 * encoder. The clip is made with Debian's ffmpeg (4 s, 25 fps, a keyframe every 12 frames,
 * AAC sound); frames go through an identity "stylise", so no model is needed.
 */
#include "animegan.h"
#include "test.h"

#include <stdint.h>
#include <unistd.h>

static char dir[64];
static char clip[128];

static int identity(void *user, const ag_image *in, int side_by_side, ag_image *out,
                    ag_error *err) {
    (void)user, (void)side_by_side, (void)err;
    size_t bytes = (size_t)in->width * in->height * 3;
    *out = *in;
    out->pixels = ag_malloc(bytes);
    if (!out->pixels)
        return AG_E_NOMEM;
    memcpy(out->pixels, in->pixels, bytes);
    return 0;
}

static void options(ag_video_options *o) {
    ag_video_options_init(o);
    o->stylize = identity;
    o->max_side = 96;
}

static int make_clip(void) {
    if (clip[0])
        return 0;
    snprintf(dir, sizeof dir, "/tmp/ag-segments-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(clip, sizeof clip, "%s/clip.mp4", dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "ffmpeg -nostdin -loglevel error -y -f lavfi -i testsrc2=size=96x64:rate=25:duration=4"
             " -f lavfi -i sine=frequency=440:sample_rate=44100:duration=4 -c:v libx264"
             " -preset veryfast -g 12 -pix_fmt yuv420p -c:a aac -b:a 64k %s",
             clip);
    return system(cmd) == 0 ? 0 : -1;
}

/* ffprobe's text for `entries` of `path` (stream `sel`), or "" when it fails. */
static void probe(const char *path, const char *sel, const char *entries, char *out, size_t cap) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "ffprobe -v error -select_streams %s -show_entries %s -show_data_hash MD5 "
             "-of default=nw=1 %s | grep -v '^\\[\\|side_data'",
             sel, entries, path);
    out[0] = 0;
    FILE *f = popen(cmd, "r");
    if (!f)
        return;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    pclose(f);
}

/* Cut, convert each segment into dir/NAME.segN, join into dir/joined.EXT. */
static int in_segments(const char *ext, double seconds, int *count, ag_video_result *res,
                       ag_error *err) {
    int64_t cuts[AG_VIDEO_MAX_SEGMENTS + 1];
    int rc = ag_video_plan_segments(clip, seconds, NULL, cuts, count, err);
    if (rc)
        return rc;
    char joined[128], names[AG_VIDEO_MAX_SEGMENTS][128];
    const char *paths[AG_VIDEO_MAX_SEGMENTS];
    snprintf(joined, sizeof joined, "%s/joined.%s", dir, ext);
    ag_video_options o;
    options(&o);
    for (int i = 0; i < *count && rc == 0; i++) {
        ag_video_segment seg = {cuts[i], cuts[i + 1], joined};
        o.segment = &seg;
        snprintf(names[i], sizeof names[i], "%s/%s.seg%d", dir, ext, i);
        paths[i] = names[i];
        rc = ag_video_convert(NULL, clip, names[i], &o, res, err);
    }
    o.segment = NULL;
    return rc ? rc : ag_video_join(clip, paths, *count, joined, &o, res, err);
}

static int test_cuts_at_keyframes(void) {
    CHECK(make_clip() == 0);
    int64_t cuts[AG_VIDEO_MAX_SEGMENTS + 1];
    int count = 0;
    ag_error err = {0};
    /* keyframes every 0.48 s (time base 1/12800): the first at least 1 s after the last cut */
    CHECK_OK(ag_video_plan_segments(clip, 1.0, NULL, cuts, &count, &err), &err);
    CHECK_MSG(count == 3 && cuts[0] == INT64_MIN && cuts[1] == 18432 && cuts[2] == 36864 &&
                  cuts[3] == INT64_MAX,
              "%d segments, cuts %lld %lld", count, (long long)cuts[1], (long long)cuts[2]);
    CHECK_OK(ag_video_plan_segments(clip, 4.0, NULL, cuts, &count, &err), &err);
    CHECK(count == 1 && cuts[1] == INT64_MAX); /* no longer than 4 s */
    CHECK_OK(ag_video_plan_segments(clip, 0, NULL, cuts, &count, &err), &err);
    CHECK(count == 1);
    /* 1.5 s: cuts at 1.92 and 3.84 s; the 0.16 s tail stays with the segment before */
    CHECK_OK(ag_video_plan_segments(clip, 1.5, NULL, cuts, &count, &err), &err);
    CHECK_MSG(count == 2 && cuts[1] == 24576, "%d segments, cut %lld", count, (long long)cuts[1]);
    /* MPEG-TS has no index to seek a segment's keyframe exactly by: converted whole */
    char ts[160], cmd[512];
    snprintf(ts, sizeof ts, "%s/clip.ts", dir);
    snprintf(cmd, sizeof cmd, "ffmpeg -nostdin -loglevel error -y -i %s -c copy %s", clip, ts);
    CHECK(system(cmd) == 0);
    CHECK_OK(ag_video_plan_segments(ts, 1.0, NULL, cuts, &count, &err), &err);
    CHECK(count == 1);
    return 0;
}

/* Whole and joined: the same frames, timestamps, durations and audio packets. */
static int joined_equals_whole(const char *ext) {
    CHECK(make_clip() == 0);
    char whole[128], joined[128];
    snprintf(whole, sizeof whole, "%s/whole.%s", dir, ext);
    snprintf(joined, sizeof joined, "%s/joined.%s", dir, ext);
    ag_video_options o;
    options(&o);
    ag_video_result a, b;
    ag_error err = {0};
    CHECK_OK(ag_video_convert(NULL, clip, whole, &o, &a, &err), &err);
    int count = 0;
    CHECK_OK(in_segments(ext, 1.0, &count, &b, &err), &err);
    CHECK(count == 3);
    CHECK_MSG(a.frames == 100 && b.frames == a.frames && b.duration_s == a.duration_s,
              "frames %lld / %lld, %.3f / %.3f s", (long long)a.frames, (long long)b.frames,
              a.duration_s, b.duration_s);
    CHECK_MSG(!strcmp(a.audio_note, b.audio_note), "%s / %s", a.audio_note, b.audio_note);
    static char x[1 << 16], y[1 << 16];
    static const char *const probes[][2] = {
        {"v", "frame=pts"},  /* every frame, in presentation order */
        {"v", "packet=dts"}, /* decode order */
        {"v", "stream=duration,nb_frames:stream_tags=DURATION"}, /* its length */
        {"a", "packet=pts,dts,duration,size,flags"},             /* and the bytes (the hash) */
    };
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        probe(whole, probes[i][0], probes[i][1], x, sizeof x);
        probe(joined, probes[i][0], probes[i][1], y, sizeof y);
        CHECK_MSG(strlen(x) > 10 && !strcmp(x, y), "%s %s differ: %.200s / %.200s", ext,
                  probes[i][1], x, y);
    }
    return 0;
}

static int test_mp4_joined_equals_whole(void) {
    return joined_equals_whole("mp4"); /* AAC copied */
}

static int test_webm_joined_equals_whole(void) {
    return joined_equals_whole("webm"); /* VP9; AAC re-encoded to Opus once, in the join */
}

static int join_refused(const char *const *paths, int count, const char *what) {
    char out[128];
    snprintf(out, sizeof out, "%s/refused.mp4", dir);
    ag_video_options o;
    options(&o);
    ag_error err = {0};
    int rc = ag_video_join(clip, paths, count, out, &o, NULL, &err);
    CHECK_MSG(rc == AG_E_FORMAT && strstr(err.message, what), "%d %s", rc, err.message);
    CHECK(access(out, F_OK) != 0); /* no file on failure */
    return 0;
}

static int test_join_refuses_bad_segments(void) {
    CHECK(make_clip() == 0);
    int count = 0;
    ag_video_result res;
    ag_error err = {0};
    CHECK_OK(in_segments("mp4", 1.0, &count, &res, &err), &err);
    CHECK_OK(in_segments("webm", 1.0, &count, &res, &err), &err);
    char s[4][128];
    for (int i = 0; i < 3; i++)
        snprintf(s[i], sizeof s[i], "%s/mp4.seg%d", dir, i);
    const char *swapped[] = {s[0], s[2], s[1]};
    CHECK(join_refused(swapped, 3, "do not follow") == 0);
    snprintf(s[3], sizeof s[3], "%s/webm.seg1", dir);
    const char *vp9[] = {s[0], s[3], s[2]};
    CHECK(join_refused(vp9, 3, "other settings") == 0);
    char cut[512];
    snprintf(cut, sizeof cut, "cp %s %s/short.seg && truncate -s -100 %s/short.seg", s[1], dir,
             dir);
    CHECK(system(cut) == 0);
    snprintf(s[3], sizeof s[3], "%s/short.seg", dir);
    const char *truncated[] = {s[0], s[3], s[2]};
    CHECK(join_refused(truncated, 3, "cut short") == 0);
    const char *not_a_segment[] = {clip};
    CHECK(join_refused(not_a_segment, 1, "not a segment file") == 0);
    return 0;
}

static int test_animations_are_not_cut(void) {
    CHECK(make_clip() == 0);
    ag_video_options o;
    options(&o);
    ag_video_segment seg = {INT64_MIN, 18432, "out.gif"};
    o.segment = &seg;
    char out[128];
    snprintf(out, sizeof out, "%s/x.seg", dir);
    ag_error err = {0};
    CHECK(ag_video_convert(NULL, clip, out, &o, NULL, &err) == AG_E_ARG);
    const char *paths[] = {out};
    snprintf(out, sizeof out, "%s/x.webp", dir);
    o.segment = NULL;
    CHECK(ag_video_join(clip, paths, 1, out, &o, NULL, &err) == AG_E_ARG);
    return 0;
}

int main(int argc, char **argv) {
    static const test_case tests[] = {
        TEST(test_cuts_at_keyframes),        TEST(test_mp4_joined_equals_whole),
        TEST(test_webm_joined_equals_whole), TEST(test_join_refuses_bad_segments),
        TEST(test_animations_are_not_cut),
    };
    int rc = test_run_all(tests, (int)(sizeof tests / sizeof tests[0]), argc, argv);
    if (dir[0]) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0)
            rc = 1;
    }
    return rc;
}
