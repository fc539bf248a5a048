#!/bin/sh
# tools/make_test_clips.sh DIR - writes the small clips the video tests use into DIR, with
# Debian's ffmpeg (at test time: nothing binary is kept in the repository). Every clip is
# tiny (128x96 or less, 2-3 s) so a conversion takes seconds on one core.
#
#   clip.mp4        H.264 + AAC sine, 25 fps, 2 s, a pan over tests/data/chelsea.png
#   vfr.mkv         H.264 + Opus, variable frame rate (75 frames: 25 fps, then 12.5, then 50)
#   rotated.mp4     H.264 coded 128x96 with a 90-degree display matrix (a phone held upright)
#   bt709_full.mp4  H.264 full range, BT.709 matrix and tags, 10 frames
#   pcm.mov         H.264 + PCM audio (cannot be copied into MP4: re-encoded to AAC)
#   long.mp4        H.264, 25 fps, 8 s, for interrupting
#   anim.gif        an animated GIF, 10 frames
#   anim.webp       an animated WebP (lossless, ffmpeg's libwebp_anim), 25 frames of a pan
#                   lasting 40, 80 and 20 ms, played 3 times
#   anim_vfr.gif    the same frames as an animated GIF (4, 8 and 2 cs), repeated 2 times
#   bad/truncated.webp, bad/huge.webp (canvas patched to 50000x50000)
#   bad/empty.mp4, bad/truncated.mp4, bad/audio_only.mp4, bad/huge.mkv (header says
#   50000x50000), bad/ten_hours.mkv (header says 10 h), bad/unknown_codec.mkv, bad/jpeg.mp4
set -eu
dir=${1:?usage: make_test_clips.sh DIR}
mkdir -p "$dir/bad"
src=$(cd "$(dirname "$0")/.." && pwd)
ff() { ffmpeg -nostdin -hide_banner -loglevel error -y "$@"; }
sine() { echo "sine=frequency=440:sample_rate=44100:duration=$1"; }
x264="-c:v libx264 -preset veryfast -pix_fmt yuv420p"
# A camera panning over a photo: natural content, as a phone would film it.
pan_src=$src/tests/data/chelsea.png
pan="scale=192:-2,crop=128:96:x='t*25':y='10+t*5'"

# shellcheck disable=SC2086 # $x264 is a list of options
ff -loop 1 -framerate 25 -i "$pan_src" -f lavfi -i "$(sine 2)" -vf "$pan" -t 2 \
    $x264 -c:a aac -b:a 64k -shortest "$dir/clip.mp4"
# Variable frame rate: timestamps rewritten by setpts, kept as they are by -fps_mode passthrough.
# shellcheck disable=SC2086
ff -f lavfi -i "testsrc2=size=128x96:rate=50:duration=2.5" -f lavfi -i "$(sine 2.5)" \
    -vf "select='if(lt(n,40),not(mod(n,2)),if(lt(n,80),not(mod(n,4)),1))'" \
    -fps_mode passthrough $x264 -c:a libopus -b:a 48k "$dir/vfr.mkv"
# FFmpeg 5.1 cannot write a display matrix, so the video track header's identity matrix
# is patched to a 90-degree one (what a phone writes when held upright).
# shellcheck disable=SC2086
ff -loop 1 -framerate 25 -i "$pan_src" -f lavfi -i "$(sine 2)" -vf "$pan" -t 2 \
    $x264 -c:a aac -shortest "$dir/rotated.mp4"
python3 - "$dir/rotated.mp4" <<'EOF'
import struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
identity = struct.pack(">9I", 0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)
rotate90 = struct.pack(">9I", 0, 0x10000, 0, 0xFFFF0000, 0, 0, 0, 0, 0x40000000)
tkhd = data.index(b"tkhd")  # the first track is the video
at = data.index(identity, tkhd)
data[at:at + len(identity)] = rotate90
open(path, "wb").write(bytes(data))
EOF
# Full range, BT.709 matrix (what many phones write): tags and pixels must survive.
ff -loop 1 -framerate 25 -i "$pan_src" -vf "$pan,scale=out_range=full:out_color_matrix=bt709" \
    -t 0.4 -c:v libx264 -preset veryfast -pix_fmt yuvj420p -colorspace bt709 \
    -color_primaries bt709 -color_trc bt709 -color_range pc "$dir/bt709_full.mp4"
# shellcheck disable=SC2086
ff -f lavfi -i "testsrc2=size=96x64:rate=25:duration=2" -f lavfi -i "$(sine 2)" \
    $x264 -c:a pcm_s16le -shortest "$dir/pcm.mov"
# shellcheck disable=SC2086
ff -f lavfi -i "testsrc2=size=128x96:rate=25:duration=8" -f lavfi -i "$(sine 8)" \
    $x264 -c:a aac -shortest "$dir/long.mp4"
ff -f lavfi -i "testsrc2=size=96x64:rate=10:duration=1" -vf "split[a][b];[a]palettegen[p];[b][p]paletteuse" \
    "$dir/anim.gif"
# Animations with variable frame durations: a pan at 50 fps (one pixel a frame, so no two
# frames are alike and no encoder merges them) thinned to 40, 80, then 20 ms frames.
ff -loop 1 -framerate 50 -t 1 -i "$pan_src" -vf "scale=192:-2,crop=128:96:x='t*50':y='10+t*5',\
select='if(lt(n,20),not(mod(n,2)),if(lt(n,40),not(mod(n,4)),1))'" -fps_mode passthrough \
    -c:v ffv1 "$dir/pan_vfr.mkv"
ff -i "$dir/pan_vfr.mkv" -fps_mode passthrough -c:v libwebp_anim -lossless 1 -loop 3 "$dir/anim.webp"
ff -i "$dir/pan_vfr.mkv" -vf "split[a][b];[a]palettegen[p];[b][p]paletteuse" -fps_mode passthrough \
    -loop 2 "$dir/anim_vfr.gif"
rm -f "$dir/pan_vfr.mkv"

# ---- bad inputs --------------------------------------------------------------------------
: >"$dir/bad/empty.mp4"
size=$(wc -c <"$dir/clip.mp4")
head -c $((size / 3)) "$dir/clip.mp4" >"$dir/bad/truncated.mp4"
ff -f lavfi -i "$(sine 2)" -c:a aac "$dir/bad/audio_only.mp4"
cp "$src/tests/data/rocket.jpg" "$dir/bad/jpeg.mp4"
# One 320x256 frame whose Matroska header is then patched: PixelWidth 320 and PixelHeight
# 256 (two-byte EBML values) become 50000, the Duration float becomes 10 hours, the codec
# id an unknown one of the same length.
# shellcheck disable=SC2086
ff -f lavfi -i "testsrc2=size=320x256:rate=25:duration=1" $x264 "$dir/bad/base.mkv"
python3 - "$dir/bad" <<'EOF'
import struct, sys
d = sys.argv[1]
base = open(d + "/base.mkv", "rb").read()

def patch(data, old, new):
    assert data.count(old) == 1, old
    return data.replace(old, new)

huge = patch(base, b"\xb0\x82\x01\x40", b"\xb0\x82\xc3\x50")
huge = patch(huge, b"\xba\x82\x01\x00", b"\xba\x82\xc3\x50")
open(d + "/huge.mkv", "wb").write(huge)
i = base.index(b"\x44\x89\x88")
long_ = base[:i + 3] + struct.pack(">d", 10 * 3600 * 1000.0) + base[i + 11:]
open(d + "/ten_hours.mkv", "wb").write(long_)
open(d + "/unknown_codec.mkv", "wb").write(patch(base, b"V_MPEG4/ISO/AVC", b"V_MPEG4/ISO/XYZ"))
EOF
rm -f "$dir/bad/base.mkv"
size=$(wc -c <"$dir/anim.webp")
head -c $((size / 2)) "$dir/anim.webp" >"$dir/bad/truncated.webp"
# The VP8X chunk's canvas (24-bit width-1 and height-1 at bytes 24 and 27) says 50000x50000.
python3 - "$dir" <<'EOF'
import sys
d = sys.argv[1]
data = bytearray(open(d + "/anim.webp", "rb").read())
assert data[12:16] == b"VP8X"
data[24:27] = (50000 - 1).to_bytes(3, "little")
data[27:30] = (50000 - 1).to_bytes(3, "little")
open(d + "/bad/huge.webp", "wb").write(bytes(data))
EOF
