#!/bin/sh
# Progress of one long photo on a terminal (issue 33 item 9): `animegan upscale` of one file
# under script(1)'s pseudo-terminal draws the bar with its tiles ("tile N/M") and ends with
# the summary line; on a pipe it prints nothing. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=$PWD/$BUILD/animegan
export ANIMEGAN_MODEL_PATH=$PWD/models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { echo "PASS $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }

cmd="$BIN upscale tests/data/chelsea.png -o $tmp/up.png --max-side 64 --tile 16 --model esrgan-slim"
script -qec "$cmd" /dev/null >"$tmp/tty.txt" 2>&1
tr '\r' '\n' <"$tmp/tty.txt" >"$tmp/lines.txt"
if grep -q "tile 12/12" "$tmp/lines.txt" && grep -q "tile 1/12" "$tmp/lines.txt" &&
    grep -q "^.*upscaled 1 of 1 images in" "$tmp/lines.txt" && [ -s "$tmp/up.png" ]; then
    ok one_photo_tiles_on_a_terminal
else
    bad one_photo_tiles_on_a_terminal
    tail -n 5 "$tmp/lines.txt"
fi

rm -f "$tmp/up.png"
if $cmd >"$tmp/pipe.txt" 2>&1 && [ ! -s "$tmp/pipe.txt" ] && [ -s "$tmp/up.png" ]; then
    ok nothing_on_a_pipe
else
    bad nothing_on_a_pipe
    cat "$tmp/pipe.txt"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
