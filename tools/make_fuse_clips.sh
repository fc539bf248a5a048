#!/bin/sh
# tools/make_fuse_clips.sh DIR - the clips the video fusion tests use (tests/fuse_video_test.sh),
# written with Debian's ffmpeg at test time from the repository's public-domain faces
# (tests/data/LICENSES.md: White House photographs):
#
#   fuse_face.mp4   256x256, 25 fps, H.264 + AAC sine: 4 frames without a face (a pan over
#                   coffee.png), then 16 frames of tests/data/faces/biden.jpg moving slightly
#                   (a slow sway of up to 10 px) with temporal sensor noise, as a hand-held
#                   phone films a face
#   fuse_long.mp4   4x as long: the same 4 frames, then 76 of the face (flat memory)
set -eu
dir=${1:?usage: make_fuse_clips.sh DIR}
mkdir -p "$dir"
src=$(cd "$(dirname "$0")/.." && pwd)
ff() { ffmpeg -nostdin -hide_banner -loglevel error -y "$@"; }
side=256
# The face frames: the photo at 1.25x the side, a side x side window swaying inside it.
big=$((side * 5 / 4))
margin=$(((big - side) / 2))
amp=$((side / 25))
x264="-c:v libx264 -preset veryfast -pix_fmt yuv420p"

# clip NAME FACE_FRAMES
clip() {
    sway="crop=$side:$side:x='$margin+$amp*sin(2*PI*n/40)':y='$margin+($amp/2)*sin(2*PI*n/29)'"
    total=$((4 + $2))
    # shellcheck disable=SC2086 # $x264 is a list of options
    ff -loop 1 -framerate 25 -i "$src/tests/data/coffee.png" \
        -loop 1 -framerate 25 -i "$src/tests/data/faces/biden.jpg" \
        -f lavfi -i "sine=frequency=440:sample_rate=44100:duration=$((total / 25 + 1))" \
        -filter_complex "[0]scale=-2:$side,crop=$side:$side:x='n*2':y=0,setsar=1,trim=end_frame=4[a];
            [1]scale=$big:$big,$sway,noise=alls=5:allf=t,setsar=1,trim=end_frame=$2[b];
            [a][b]concat=n=2:v=1:a=0[v]" \
        -map '[v]' -map 2:a -frames:v "$total" $x264 -c:a aac -b:a 64k -shortest "$dir/$1"
}
clip fuse_face.mp4 16
clip fuse_long.mp4 76
