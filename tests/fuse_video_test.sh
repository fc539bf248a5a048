#!/bin/sh
# fuse_video_test.sh - `animegan fuse --target clip.mp4 -o out.mp4` (issue 31 item 7) on a
# clip of real faces made at test time (tools/make_fuse_clips.sh: 4 frames without a face,
# then a face swaying under sensor noise, AAC sound): frame count and every timestamp kept,
# the sound's packets byte-identical, the frames without the face bit-identical to the
# video path's round trip (the same clip fused at ratio 0, both lossless: --crf 0) while
# every face frame changed, the picture near the input's, bad command lines (one line,
# exit 2), and peak RSS of a 4x longer clip within 5%. The landmarks' jitter is measured by
# build/tests/test_fuse_video. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
bin=$PWD/$BUILD/animegan
ANIMEGAN_MODEL_PATH=${ANIMEGAN_MODEL_PATH:-$PWD/models}
export ANIMEGAN_MODEL_PATH
passed=0
failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass() {
    echo "PASS $1"
    passed=$((passed + 1))
}
fail() {
    echo "FAIL $1${2:+: $2}"
    failed=$((failed + 1))
}
for tool in ffmpeg ffprobe; do
    command -v $tool >/dev/null 2>&1 || {
        echo "FAIL $tool is not installed (scripts/install-deps.sh --test)"
        echo "0 passed, 1 failed"
        exit 1
    }
done
if ! tools/make_fuse_clips.sh "$tmp/clips" >"$tmp/clips.log" 2>&1; then
    cat "$tmp/clips.log"
    echo "0 passed, 1 failed"
    exit 1
fi
c=$tmp/clips
src=tests/data/faces/obama.jpg
fuse() { "$bin" fuse --source "$src" --threads 2 "$@"; }
probe() { ffprobe -v error "$@"; }
pts_list() { probe -select_streams v -show_entries frame=pts_time -of csv=p=0 "$1" | cut -d, -f1 | grep .; }
frame_count() { probe -select_streams v -count_frames -show_entries stream=nb_read_frames -of csv=p=0 "$1"; }
audio_hashes() { probe -select_streams a -show_data_hash md5 -show_entries packet=data_hash -of csv=p=0 "$1"; }
# The decoded frames' hashes, one a line.
frame_hashes() { ffmpeg -nostdin -loglevel error -i "$1" -map 0:v -f framemd5 - | grep -v '^#' | awk -F, '{ print $NF }'; }

# ---- the clip fused, and at ratio 0 (the video path's round trip) ---------------------------
if /usr/bin/time -f %M -o "$tmp/rss_short" "$bin" fuse --source "$src" --threads 2 \
    --target "$c/fuse_face.mp4" -o "$tmp/fused.mp4" --crf 0 2>"$tmp/err" &&
    fuse --target "$c/fuse_face.mp4" -o "$tmp/round.mp4" --crf 0 --ratio 0 2>>"$tmp/err"; then
    pass "fuse a clip (exit 0)"
else
    fail "fuse a clip" "$(tail -n 2 "$tmp/err")"
fi
n_in=$(frame_count "$c/fuse_face.mp4")
n_out=$(frame_count "$tmp/fused.mp4")
if [ "$n_in" = "$n_out" ] && [ "$(pts_list "$c/fuse_face.mp4")" = "$(pts_list "$tmp/fused.mp4")" ]; then
    pass "timing kept ($n_out frames, every timestamp equal)"
else
    fail "timing" "$n_in frames in, $n_out out"
fi
audio_hashes "$c/fuse_face.mp4" >"$tmp/in.audio"
audio_hashes "$tmp/fused.mp4" >"$tmp/out.audio"
if [ -s "$tmp/in.audio" ] && cmp -s "$tmp/in.audio" "$tmp/out.audio"; then
    pass "audio packets byte-identical ($(wc -l <"$tmp/in.audio") packets)"
else
    fail "audio packets" "$(wc -l <"$tmp/in.audio") in, $(wc -l <"$tmp/out.audio") out"
fi
frame_hashes "$tmp/fused.mp4" >"$tmp/fused.md5"
frame_hashes "$tmp/round.mp4" >"$tmp/round.md5"
same=$(paste "$tmp/fused.md5" "$tmp/round.md5" | head -n 4 | awk '$1 == $2' | wc -l)
changed=$(paste "$tmp/fused.md5" "$tmp/round.md5" | tail -n +5 | awk '$1 != $2' | wc -l)
if [ "$same" -eq 4 ] && [ "$changed" -eq $((n_in - 4)) ]; then
    pass "the 4 frames without a face bit-identical to the round trip, all $changed face frames fused"
else
    fail "pass-through" "$same of 4 faceless frames identical, $changed of $((n_in - 4)) face frames changed"
fi
# The round trip against the input (lossy H.264 decoded, RGB, lossless back): near.
psnr=$(ffmpeg -nostdin -hide_banner -i "$tmp/round.mp4" -i "$c/fuse_face.mp4" \
    -lavfi psnr -f null - 2>&1 | sed -n 's/.*average:\([0-9.inf]*\).*/\1/p')
if [ -n "$psnr" ] && awk -v p="$psnr" 'BEGIN { exit !(p == "inf" || p >= 40) }'; then
    pass "the round trip against the input: $psnr dB"
else
    fail "round trip" "PSNR '$psnr'"
fi

# ---- bad command lines: one line and the usual hint, exit 2 ---------------------------------
bad() {
    fuse "$@" >/dev/null 2>"$tmp/bad"
    rc=$?
    if [ $rc -eq 2 ] && head -n 1 "$tmp/bad" | grep -q '^animegan: ' && ! [ -e "$tmp/never.mp4" ]; then
        pass "refused: $(head -n 1 "$tmp/bad")"
    else
        fail "bad command line $*" "exit $rc: $(cat "$tmp/bad")"
    fi
}
bad --target "$c/fuse_face.mp4" -o "$tmp/never.mp4" --bench
bad --target tests/data/faces/biden.jpg -o "$tmp/never.png" --crf 20

# ---- memory: a 4x longer clip, the same peak ------------------------------------------------
/usr/bin/time -f %M -o "$tmp/rss_long" "$bin" fuse --source "$src" --threads 2 \
    --target "$c/fuse_long.mp4" -o "$tmp/long.mp4" --crf 0 2>/dev/null
short=$(tail -n 1 "$tmp/rss_short")
long=$(tail -n 1 "$tmp/rss_long")
if [ -n "$short" ] && [ -n "$long" ] && [ "$long" -le $((short + short / 20)) ]; then
    pass "flat memory: peak RSS $short KiB for $n_in frames, $long KiB for 4x as many"
else
    fail "flat memory" "peak RSS $short KiB for $n_in frames, $long KiB for 4x as many"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
