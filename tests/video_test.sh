#!/bin/sh
# video_test.sh - `animegan convert` on video: clips made at test time by
# tools/make_test_clips.sh, results checked with ffprobe/ffmpeg. Timing (frame count, every
# timestamp, duration, variable frame rate), sound (copied packets byte-identical, re-encoded
# where the container needs it), pictures (frame k of the output against `animegan convert`
# of frame k of the input: PSNR >= 34 dB), rotation, --start/--duration, --side-by-side,
# --max-side, animated GIF and WebP inputs to .mp4/.gif/.webp (frames, durations, play count,
# pictures), bad inputs (one line, exit 1, nothing written), Ctrl-C
# (exit 130, nothing written), flat memory over a 4x longer clip, and the bad inputs plus
# one conversion under ASan and valgrind. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
bin=$PWD/$BUILD/animegan
# The bundled model, wherever the binary is (build/address/animegan has no ../models).
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
# check NAME CONDITION-COMMAND...: pass when the command succeeds.
check() {
    name=$1
    shift
    if "$@"; then pass "$name"; else fail "$name"; fi
}

for tool in ffmpeg ffprobe python3; do
    command -v $tool >/dev/null 2>&1 || {
        echo "FAIL $tool is not installed (scripts/install-deps.sh --test)"
        echo "0 passed, 1 failed"
        exit 1
    }
done
if ! tools/make_test_clips.sh "$tmp/clips" >"$tmp/clips.log" 2>&1; then
    cat "$tmp/clips.log"
    echo "0 passed, 1 failed"
    exit 1
fi
c=$tmp/clips
out=$tmp/out
mkdir -p "$out"
conv() { "$bin" convert "$@" --threads 2 -q; }

probe() { ffprobe -v error "$@"; }
pts_list() {
    probe -select_streams v -show_entries frame=pts_time -of csv=p=0 "$1" | cut -d, -f1 | grep .
}
# Timestamps from the first frame on: Matroska shifts a whole file so that no packet is
# negative (Opus pre-skip), so only the offsets between frames survive a remux.
relative_pts() { pts_list "$1" | awk 'NR == 1 { t0 = $1 } { printf "%.6f\n", $1 - t0 }'; }
frame_count() { probe -select_streams v -count_frames -show_entries stream=nb_read_frames -of csv=p=0 "$1"; }
audio_hashes() { probe -select_streams a -show_data_hash md5 -show_entries packet=data_hash -of csv=p=0 "$1"; }
audio_codec() { probe -select_streams a -show_entries stream=codec_name -of csv=p=0 "$1"; }
video_codec() { probe -select_streams v -show_entries stream=codec_name -of csv=p=0 "$1"; }
size_of() { probe -select_streams v -show_entries stream=width,height -of csv=s=x:p=0 "$1"; }
duration_of() { probe -show_entries format=duration -of csv=p=0 "$1"; }
stream_duration() { probe -select_streams "$2" -show_entries stream=duration -of csv=p=0 "$1"; }
# near A B TOLERANCE: |A - B| <= TOLERANCE
near() { python3 -c "import sys; sys.exit(abs(float('$1') - float('$2')) > $3)"; }
at_least() { python3 -c "import sys; sys.exit(not float('$1') >= $2)"; }

# ---- timing and sound ----------------------------------------------------------------------
# same_timing NAME IN OUT: frame count, every frame's timestamp and the duration (where the
# container stores one per stream) are equal; mp4 -> mp4 also keeps the absolute times.
same_timing() {
    relative_pts "$2" >"$tmp/in.pts"
    relative_pts "$3" >"$tmp/out.pts"
    d_in=$(stream_duration "$2" v)
    d_out=$(stream_duration "$3" v)
    if [ "$(frame_count "$2")" != "$(frame_count "$3")" ]; then
        fail "$1 frame count" "$(frame_count "$2") in, $(frame_count "$3") out"
    elif ! cmp -s "$tmp/in.pts" "$tmp/out.pts"; then
        fail "$1 timestamps" "$(diff "$tmp/in.pts" "$tmp/out.pts" | head -n 6 | tr '\n' ' ')"
    elif [ "$d_in" != N/A ] && [ "$d_out" != N/A ] && ! near "$d_in" "$d_out" 0.001; then
        fail "$1 duration" "$d_in in, $d_out out"
    else
        pass "$1 timing ($(wc -l <"$tmp/in.pts") frames, timestamps equal)"
    fi
}
same_audio() {
    audio_hashes "$2" >"$tmp/in.audio"
    audio_hashes "$3" >"$tmp/out.audio"
    if [ -s "$tmp/in.audio" ] && cmp -s "$tmp/in.audio" "$tmp/out.audio"; then
        pass "$1 audio packets byte-identical ($(wc -l <"$tmp/in.audio") packets)"
    else
        fail "$1 audio packets" "$(wc -l <"$tmp/in.audio") in, $(wc -l <"$tmp/out.audio") out"
    fi
}

if conv "$c/clip.mp4" -o "$out/clip.mp4" 2>"$tmp/err"; then
    same_timing mp4 "$c/clip.mp4" "$out/clip.mp4"
    check "mp4 absolute timestamps" test "$(pts_list "$c/clip.mp4" | md5sum)" = \
        "$(pts_list "$out/clip.mp4" | md5sum)"
    same_audio mp4 "$c/clip.mp4" "$out/clip.mp4"
    check "mp4 is H.264 yuv420p" test "$(probe -select_streams v -show_entries \
        stream=codec_name,pix_fmt -of csv=p=0 "$out/clip.mp4")" = "h264,yuv420p"
else
    fail "convert clip.mp4" "$(cat "$tmp/err")"
fi
if conv "$c/vfr.mkv" -o "$out/vfr.mkv" 2>"$tmp/err" &&
    conv "$c/vfr.mkv" -o "$out/vfr.mp4" 2>>"$tmp/err"; then
    same_timing "vfr mkv" "$c/vfr.mkv" "$out/vfr.mkv"
    same_timing "vfr mkv->mp4" "$c/vfr.mkv" "$out/vfr.mp4"
    same_audio "vfr opus" "$c/vfr.mkv" "$out/vfr.mkv"
    check "vfr stays variable" python3 -c "
import sys
t = [float(x) for x in open('$tmp/in.pts') if x.strip()]
steps = sorted({round(b - a, 3) for a, b in zip(t, t[1:])})
sys.exit(steps != [0.02, 0.04, 0.08])"
else
    fail "convert vfr.mkv" "$(cat "$tmp/err")"
fi

# Audio the container cannot take: re-encoded, and the CLI says so in its one line.
if "$bin" convert "$c/pcm.mov" -o "$out/pcm.mp4" --threads 2 2>"$tmp/err"; then
    check "pcm->mp4 audio re-encoded to aac" test "$(audio_codec "$out/pcm.mp4")" = aac
    check "pcm->mp4 audio length kept" near "$(stream_duration "$out/pcm.mp4" a)" 2.0 0.05
    check "pcm->mp4 says re-encoded" grep -q "pcm_s16le re-encoded to AAC" "$tmp/err"
    same_timing "pcm mov->mp4" "$c/pcm.mov" "$out/pcm.mp4"
else
    fail "convert pcm.mov" "$(cat "$tmp/err")"
fi
if conv "$c/clip.mp4" -o "$out/clip.webm" 2>"$tmp/err"; then
    check "webm is vp9 + opus" test "$(video_codec "$out/clip.webm"),$(audio_codec "$out/clip.webm")" = vp9,opus
    check "webm audio length kept" near "$(duration_of "$out/clip.webm")" 2.0 0.05
    check "webm frame count" test "$(frame_count "$out/clip.webm")" = 50
else
    fail "convert clip.webm" "$(cat "$tmp/err")"
fi

# ---- pictures ---------------------------------------------------------------------------------
# frame_png FILE K PNG: frame K (from 0) of FILE as a PNG: ffmpeg applies the rotation as
# players do; an animated .webp, which ffmpeg cannot read, goes through tools/webp_frames
# (composited).
wf=$PWD/$BUILD/tools/webp_frames
frame_png() {
    case $1 in
    *.webp) "$wf" "$1" "$2" "$3.ppm" >/dev/null && ffmpeg -nostdin -v error -y -i "$3.ppm" "$3" ;;
    *) ffmpeg -nostdin -v error -y -i "$1" -vf "select=eq(n\\,$2)" -fps_mode passthrough \
        -frames:v 1 "$3" ;;
    esac
}
# frame_psnr NAME INPUT OUTPUT K: frame K of OUTPUT against the photo conversion of frame K of
# INPUT, >= 34 dB (the codec's own loss: 35-44 dB, down to 34.997 on the gif's frame 22 in
# fp32 on an AVX2-only EPYC).
frame_psnr() {
    local name=$1 input=$2 output=$3 k=$4
    frame_png "$input" "$k" "$tmp/in_$k.png" && conv "$tmp/in_$k.png" -o "$tmp/ref_$k.png" &&
        frame_png "$output" "$k" "$tmp/out_$k.png" || {
        fail "$name frame $k" "extraction failed"
        return
    }
    db=$(ffmpeg -nostdin -hide_banner -i "$tmp/out_$k.png" -i "$tmp/ref_$k.png" \
        -lavfi psnr -f null - 2>&1 | sed -n 's/.*PSNR.* average:\([0-9.inf]*\).*/\1/p')
    if [ -n "$db" ] && { [ "$db" = inf ] || at_least "$db" 34; }; then
        pass "$name frame $k PSNR $db dB >= 34"
    else
        fail "$name frame $k" "PSNR '${db}' dB < 34"
    fi
}
if [ -f "$out/clip.mp4" ]; then
    for k in 0 17 49; do frame_psnr mp4 "$c/clip.mp4" "$out/clip.mp4" $k; done
fi
if conv "$c/rotated.mp4" -o "$out/rotated.mp4" 2>"$tmp/err"; then
    check "rotation applied (96x128)" test "$(size_of "$out/rotated.mp4")" = 96x128
    frame_psnr rotated "$c/rotated.mp4" "$out/rotated.mp4" 30
else
    fail "convert rotated.mp4" "$(cat "$tmp/err")"
fi

colour_tags() {
    probe -select_streams v -show_entries \
        stream=color_range,color_space,color_primaries,color_transfer -of csv=p=0 "$1"
}
if conv "$c/bt709_full.mp4" -o "$out/bt709_full.mp4" 2>"$tmp/err"; then
    check "colour range and matrix tags kept ($(colour_tags "$c/bt709_full.mp4"))" \
        test "$(colour_tags "$c/bt709_full.mp4")" = "$(colour_tags "$out/bt709_full.mp4")"
    frame_psnr "full-range bt709" "$c/bt709_full.mp4" "$out/bt709_full.mp4" 5
else
    fail "convert bt709_full.mp4" "$(cat "$tmp/err")"
fi

# ---- options ---------------------------------------------------------------------------------
if conv "$c/clip.mp4" -o "$out/part.mp4" --start 0.4 --duration 1 2>"$tmp/err"; then
    check "--start/--duration frames" test "$(frame_count "$out/part.mp4")" = 25
    check "--start/--duration starts at 0" test "$(pts_list "$out/part.mp4" | head -n 1)" = 0.000000
    check "--start/--duration audio length" near "$(stream_duration "$out/part.mp4" a)" 1.0 0.05
else
    fail "convert --start" "$(cat "$tmp/err")"
fi
if conv "$c/clip.mp4" -o "$out/sbs.mkv" --side-by-side --max-side 64 --crf 23 \
    --preset veryfast --duration 0.4 2>"$tmp/err"; then
    check "--side-by-side --max-side 64" test "$(size_of "$out/sbs.mkv")" = 128x48
    check "--duration 0.4 frames" test "$(frame_count "$out/sbs.mkv")" = 10
else
    fail "convert --side-by-side" "$(cat "$tmp/err")"
fi
if conv "$c/anim.gif" -o "$out/anim.mp4" 2>"$tmp/err"; then
    check "animated gif -> mp4 frames" test "$(frame_count "$out/anim.mp4")" = 10
else
    fail "convert anim.gif" "$(cat "$tmp/err")"
fi
# --upscale on video and animations (issue 20): frame by frame, streamed; sizes scaled,
# timing and sound kept; `animegan upscale` takes them without a style.
if conv "$c/clip.mp4" -o "$out/up2.mp4" --upscale 2 --upscale-model esrgan-slim \
    --duration 0.4 2>"$tmp/err"; then
    check "convert --upscale 2: 256x192 frames" test "$(size_of "$out/up2.mp4")" = 256x192
    check "convert --upscale 2: frames" test "$(frame_count "$out/up2.mp4")" = 10
    check "convert --upscale 2: sound kept" test "$(audio_codec "$out/up2.mp4")" = aac
else
    fail "convert --upscale 2 on video" "$(cat "$tmp/err")"
fi
if "$bin" upscale "$c/anim.gif" -o "$out/up.gif" --model esrgan-slim --scale 3 --threads 2 -q \
    2>"$tmp/err"; then
    check "upscale anim.gif x3: size" test "$(size_of "$out/up.gif")" = \
        "$(size_of "$c/anim.gif" | awk -Fx '{print $1 * 3 "x" $2 * 3}')"
    check "upscale anim.gif x3: frames" test "$(frame_count "$out/up.gif")" = \
        "$(frame_count "$c/anim.gif")"
else
    fail "upscale anim.gif" "$(cat "$tmp/err")"
fi
check "gif -> png keeps the first frame" conv "$c/anim.gif" -o "$out/anim.png"
# An animated WebP output: its frames (ANMF chunks; identical neighbours may be merged) last
# as long as the GIF's, and our own decoder reads it back.
if conv "$c/anim.gif" -o "$out/anim.webp" 2>"$tmp/err"; then
    check "gif -> animated webp: 1 s in frames" python3 -c "
import struct, sys
d = open('$out/anim.webp', 'rb').read()
i, frames, ms = 12, 0, 0
while i + 8 <= len(d):
    tag, size = d[i:i + 4], struct.unpack('<I', d[i + 4:i + 8])[0]
    if tag == b'ANMF':
        frames += 1
        ms += int.from_bytes(d[i + 20:i + 23], 'little')
    i += 8 + size + (size & 1)
sys.exit(not (d[8:12] == b'WEBP' and 2 <= frames <= 10 and ms == 1000))"
    check "animated webp decodes" conv "$out/anim.webp" -o "$out/anim_webp.png"
else
    fail "convert anim.gif -> webp" "$(cat "$tmp/err")"
fi

# ---- animations: animated WebP and GIF in, .mp4 / .gif / .webp out ----------------------------
# Both inputs hold the same 25 frames of a pan lasting 40, 80 and 20 ms. Each output must
# have the same frames with the same durations (ms; GIF counts centiseconds, and all of
# these are whole ones), the input's play count where the format has one, and frame k
# within 34 dB PSNR of `animegan convert` of frame k (H.264 at CRF 18, WebP at quality 85 and
# GIF's 256-colour palette made for each frame reach 35-44 dB on these frames).
# durations FILE: one line per frame, its duration in ms, in presentation order. The last
# frame ends where the stream does (MP4 keeps per-sample durations in decode order only).
durations() {
    case $1 in
    *.webp) "$wf" "$1" | tail -n +2 ;;
    *) end=$(probe -select_streams v -show_entries stream=start_time,duration -of csv=p=0 "$1" |
        awk -F, '{ print $1 + $2 }')
        probe -select_streams v -show_entries packet=pts_time -of csv=p=0 "$1" | sort -g |
            awk -v end="$end" '{ t[NR] = $1 } END {
                for (i = 1; i <= NR; i++) printf "%d\n", ((i < NR ? t[i + 1] : end) - t[i]) * 1000 + 0.5 }' ;;
    esac
}
# plays FILE: how many times the animation plays (0 = forever), as WebP counts.
plays() {
    case $1 in
    *.webp) "$wf" "$1" | sed -n 's/^loop //p' ;;
    *) python3 -c "
d = open('$1', 'rb').read()
i = d.find(b'NETSCAPE2.0')
n = d[i + 13] | d[i + 14] << 8 if i >= 0 else -1
print(1 if n < 0 else 0 if n == 0 else n + 1)" ;;
    esac
}
for in in anim.webp anim_vfr.gif; do
    durations "$c/$in" >"$tmp/anim_in.ms"
    for ext in mp4 gif webp; do
        label="${in##*.} -> $ext"
        o=$out/anim_${in%%.*}_${in##*.}.$ext
        if ! conv "$c/$in" -o "$o" 2>"$tmp/err"; then
            fail "convert $label" "$(cat "$tmp/err")"
            continue
        fi
        durations "$o" >"$tmp/anim_out.ms"
        if [ "$(wc -l <"$tmp/anim_in.ms")" -ne 25 ]; then
            fail "$label input frames" "$(wc -l <"$tmp/anim_in.ms") in $in"
        elif cmp -s "$tmp/anim_in.ms" "$tmp/anim_out.ms"; then
            pass "$label: 25 frames, durations equal ($(sort -un "$tmp/anim_in.ms" | tr '\n' ' ')ms)"
        else
            fail "$label durations" "$(tr '\n' ' ' <"$tmp/anim_in.ms") in, $(tr '\n' ' ' <"$tmp/anim_out.ms") out"
        fi
        [ "$ext" != mp4 ] && check "$label plays $(plays "$c/$in") times" \
            test "$(plays "$o")" = "$(plays "$c/$in")"
        for k in 3 12 22; do frame_psnr "$label" "$c/$in" "$o" $k; done
    done
done
if conv "$c/anim.webp" -o "$out/anim_first.png" 2>"$tmp/err"; then
    check "animated webp -> png: the first frame" test "$(size_of "$out/anim_first.png")" = 128x96
else
    fail "animated webp -> png" "$(cat "$tmp/err")"
fi

# ---- bad inputs: one line, exit 1, no output -------------------------------------------------
# bad NAME EXPECTED-EXIT MESSAGE-FRAGMENT ARGS...
bad() {
    name=$1 want=$2 text=$3
    shift 3
    mkdir -p "$tmp/bad" && rm -rf "$tmp/bad"/* "$tmp/bad"/.[!.]* 2>/dev/null
    "$bin" convert "$@" --threads 2 -q >"$tmp/bad.out" 2>"$tmp/bad.err"
    rc=$?
    lines=$(wc -l <"$tmp/bad.err")
    left=$(ls -A "$tmp/bad")
    if [ "$rc" -ne "$want" ]; then
        fail "$name" "exit $rc, expected $want: $(cat "$tmp/bad.err")"
    elif [ "$want" -eq 1 ] && [ "$lines" -ne 1 ]; then
        fail "$name" "$lines lines on stderr: $(cat "$tmp/bad.err")"
    elif ! grep -q -- "$text" "$tmp/bad.err"; then
        fail "$name" "no '$text' in: $(cat "$tmp/bad.err")"
    elif [ -n "$left" ]; then
        fail "$name" "left files: $left"
    else
        pass "$name: $(head -n 1 "$tmp/bad.err")"
    fi
}
bad "empty file" 1 "empty file" "$c/bad/empty.mp4" -o "$tmp/bad/x.mp4"
bad "truncated" 1 "truncated.mp4: not a readable mov" "$c/bad/truncated.mp4" -o "$tmp/bad/x.mp4"
bad "audio only" 1 "no video stream" "$c/bad/audio_only.mp4" -o "$tmp/bad/x.mp4"
bad "50000x50000 header" 1 "50000x50000" "$c/bad/huge.mkv" -o "$tmp/bad/x.mp4"
bad "unknown codec" 1 "unknown video codec" "$c/bad/unknown_codec.mkv" -o "$tmp/bad/x.mp4"
bad "jpeg named .mp4" 1 "a JPEG image, not a video" "$c/bad/jpeg.mp4" -o "$tmp/bad/x.mp4"
bad "video to .png" 1 "is a video" "$c/clip.mp4" -o "$tmp/bad/x.png"
bad "unwritable output" 1 "cannot create a file" "$c/clip.mp4" -o "$tmp/nodir/x.mp4"
bad "--crf out of range" 2 "crf" "$c/clip.mp4" -o "$tmp/bad/x.mp4" --crf 99
bad "--start not a time" 2 "not a time" "$c/clip.mp4" -o "$tmp/bad/x.mp4" --start 1:xx
bad "--crf on a photo" 2 "apply to video" tests/data/rocket.jpg -o "$tmp/bad/x.png" --crf 20
bad "--start past the end" 1 "no video frame" "$c/clip.mp4" -o "$tmp/bad/x.mp4" --start 10
bad "truncated animated webp" 1 "truncated or damaged animated WebP" "$c/bad/truncated.webp" \
    -o "$tmp/bad/x.mp4"
bad "truncated animated webp -> gif" 1 "truncated" "$c/bad/truncated.webp" -o "$tmp/bad/x.gif"
bad "webp canvas 50000x50000" 1 "50000x50000" "$c/bad/huge.webp" -o "$tmp/bad/x.gif"
bad "webp canvas 50000x50000 -> mp4" 1 "50000x50000" "$c/bad/huge.webp" -o "$tmp/bad/x.mp4"
bad "webp more frames than --max-frames" 1 "more than 10 frames; the limit is 10" "$c/anim.webp" \
    -o "$tmp/bad/x.webp" --max-frames 10
bad "gif more frames than --max-frames" 1 "the limit is 10" "$c/anim_vfr.gif" -o "$tmp/bad/x.gif" \
    --max-frames 10
# a truncated file whose index survived: the damage is found while reading
head -c 40000 "$c/long.mp4" >"$tmp/cut.mp4"
ffmpeg -nostdin -v error -y -i "$c/long.mp4" -c copy -movflags +faststart "$tmp/fast.mp4"
head -c 60000 "$tmp/fast.mp4" >"$tmp/cut_fast.mp4"
bad "truncated after the index" 1 "truncated or damaged" "$tmp/cut_fast.mp4" -o "$tmp/bad/x.mp4"

# ---- Ctrl-C: exit 130, no partial file ---------------------------------------------------------
# A clip long enough at any speed (long.mp4 took under 3 s on an AMX Xeon); the signal goes
# once the conversion's temporary file exists, so the run is surely under way.
mkdir -p "$tmp/int"
ffmpeg -nostdin -v error -f lavfi -i "testsrc2=size=320x240:rate=25:duration=60" -c:v libx264 \
    -preset ultrafast "$tmp/minute.mp4"
"$bin" convert "$tmp/minute.mp4" -o "$tmp/int/x.mp4" --threads 1 -q 2>"$tmp/int.err" &
pid=$!
for _ in $(seq 1 300); do
    [ -n "$(ls -A "$tmp/int")" ] && break
    sleep 0.05
done
sleep 0.2
kill -INT $pid
wait $pid
rc=$?
if [ "$rc" -eq 130 ] && [ -z "$(ls -A "$tmp/int")" ] && grep -q interrupted "$tmp/int.err"; then
    pass "Ctrl-C: exit 130, nothing left"
else
    fail "Ctrl-C" "exit $rc, left '$(ls -A "$tmp/int")': $(cat "$tmp/int.err")"
fi

# ---- memory stays flat with the length of the clip -------------------------------------------
# Peak RSS of a 2 s and an 8 s clip at the same frame size: the longer one may not hold more.
if command -v /usr/bin/time >/dev/null 2>&1; then
    /usr/bin/time -f %M -o "$tmp/rss_short" "$bin" convert "$c/clip.mp4" -o "$out/short.mp4" \
        --max-side 64 --threads 2 -q 2>/dev/null
    /usr/bin/time -f %M -o "$tmp/rss_long" "$bin" convert "$c/long.mp4" -o "$out/long.mp4" \
        --max-side 64 --threads 2 -q 2>/dev/null
    short=$(tail -n 1 "$tmp/rss_short")
    long=$(tail -n 1 "$tmp/rss_long")
    if [ -n "$short" ] && [ -n "$long" ] && [ "$long" -le $((short + 4096)) ]; then
        pass "flat memory: peak RSS ${short} KiB for 2 s, ${long} KiB for 8 s"
    else
        fail "flat memory" "peak RSS ${short} KiB for 2 s, ${long} KiB for 8 s"
    fi
fi

# ---- sanitizers ----------------------------------------------------------------------------------
# The ASan build exists once tests/asan_test.sh (run before this suite) has made it.
asan=$PWD/build/address/animegan
if [ -x "$asan" ]; then
    ok=1
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
    export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
    export ANIMEGAN_MODEL_PATH="$PWD/models"
    for f in "$c/clip.mp4" "$c/vfr.mkv" "$c/pcm.mov" "$c/rotated.mp4"; do
        "$asan" convert "$f" -o "$tmp/asan.webm" --duration 0.3 --max-side 48 --threads 2 -q \
            >"$tmp/asan.log" 2>&1 || { ok=0 && fail "asan convert $(basename "$f")" "$(tail -n 20 "$tmp/asan.log")"; }
    done
    for pair in anim.webp:gif anim_vfr.gif:webp anim.webp:mp4; do
        "$asan" convert "$c/${pair%:*}" -o "$tmp/asan.${pair#*:}" --duration 0.3 --max-side 48 \
            --threads 2 -q >"$tmp/asan.log" 2>&1 || { ok=0 && fail "asan convert $pair" "$(tail -n 20 "$tmp/asan.log")"; }
    done
    for f in "$c"/bad/empty.mp4 "$c"/bad/truncated.mp4 "$c"/bad/audio_only.mp4 "$c"/bad/huge.mkv \
        "$c"/bad/unknown_codec.mkv "$c"/bad/jpeg.mp4 "$tmp/cut_fast.mp4" "$c"/bad/truncated.webp \
        "$c"/bad/huge.webp; do
        "$asan" convert "$f" -o "$tmp/asan.mp4" --threads 2 -q >"$tmp/asan.log" 2>&1
        rc=$?
        [ "$rc" -eq 1 ] || { ok=0 && fail "asan $(basename "$f")" "exit $rc: $(tail -n 20 "$tmp/asan.log")"; }
    done
    [ "$ok" -eq 1 ] && pass "ASan + UBSan: conversions and bad inputs clean"
    unset ASAN_OPTIONS LSAN_OPTIONS
else
    echo "SKIP asan (no build/address/animegan: run tests/asan_test.sh first)"
fi
# FFmpeg's libavcodec pulls in libjxl and libhwy, whose load-time timer probe runs RDTSCP;
# valgrind 3.19 raises SIGILL on it on some CPUs (seen on an AMD Turin VM). ffprobe loads
# the same libraries: where it cannot run under valgrind, neither can any video conversion.
vg_ffmpeg=1
if command -v valgrind >/dev/null 2>&1 && command -v ffprobe >/dev/null 2>&1; then
    valgrind -q ffprobe -version >/dev/null 2>&1
    [ $? -eq 132 ] && vg_ffmpeg=0
fi
if command -v valgrind >/dev/null 2>&1 && [ "$vg_ffmpeg" -eq 0 ]; then
    echo "SKIP valgrind: $(valgrind --version) dies (SIGILL) loading FFmpeg's libraries on" \
        "this CPU ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)); ASan above covers the path"
elif command -v valgrind >/dev/null 2>&1; then
    VIPSHOME=$tmp/no-vips-modules valgrind --leak-check=full --show-leak-kinds=definite,indirect \
        --errors-for-leak-kinds=definite,indirect --error-exitcode=99 --log-file="$tmp/vg.log" \
        "$bin" convert "$c/clip.mp4" -o "$tmp/vg.mp4" --duration 0.12 --max-side 16 \
        --backend reference --threads 1 -q >"$tmp/vg.out" 2>&1
    rc1=$?
    VIPSHOME=$tmp/no-vips-modules valgrind --leak-check=full --show-leak-kinds=definite,indirect \
        --errors-for-leak-kinds=definite,indirect --error-exitcode=99 --log-file="$tmp/vg2.log" \
        "$bin" convert "$c/bad/truncated.mp4" -o "$tmp/vg2.mp4" --max-side 16 --backend reference \
        --threads 1 -q >"$tmp/vg2.out" 2>&1
    rc2=$?
    if [ "$rc1" -eq 0 ] && [ "$rc2" -eq 1 ]; then
        pass "valgrind: a conversion and a truncated input clean"
    else
        fail "valgrind" "exit $rc1 and $rc2: $(cat "$tmp/vg.out" "$tmp/vg2.out"; grep -A30 'definitely\|Invalid' "$tmp/vg.log" "$tmp/vg2.log" | head -n 60)"
    fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
