#!/bin/sh
# valgrind.sh - memcheck of the `animegan` executable ($BUILD/animegan, built beforehand by
# `make`): conversions on both backends and the failure paths (bad image, unknown or corrupt
# model, bad option), where leaks usually hide. Only definite and indirect leaks and memory
# errors fail a case: libvips, GLib and OpenMP keep caches and thread pools "still reachable"
# at exit by design. Images are downscaled with --max-side: under valgrind the oneDNN case
# costs about a minute even at 48x32 (JIT code generation), the reference backend about as
# much per 1500 pixels. Prints "N passed, N failed"; about 2-3 minutes in all.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
bin=$BUILD/animegan
if [ ! -x "$bin" ]; then
    echo "no $bin: run make first"
    echo "0 passed, 1 failed"
    exit 1
fi
if ! command -v valgrind >/dev/null 2>&1; then
    echo "valgrind is not installed"
    echo "0 passed, 1 failed"
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0

# VIPSHOME pointing at an empty prefix stops libvips loading its optional modules (HEIF, JXL,
# ImageMagick, ...): vips-jxl pulls in libhwy, whose start-up runs RDTSCP, an instruction
# valgrind 3.19 cannot execute. PNG, JPEG and WebP are built into libvips itself.
VIPSHOME=$tmp/no-vips-modules
export VIPSHOME

# check NAME EXPECTED_EXIT ARGS...: one run under memcheck. Exit 99 means valgrind found a
# leak or an error; any other unexpected status means the command itself misbehaved.
check() {
    name=$1
    expected=$2
    shift 2
    start=$(date +%s)
    valgrind --leak-check=full --show-leak-kinds=definite,indirect \
        --errors-for-leak-kinds=definite,indirect --error-exitcode=99 \
        --log-file="$tmp/$name.log" "$bin" "$@" >"$tmp/$name.out" 2>&1
    rc=$?
    took=$(($(date +%s) - start))
    if [ "$rc" -eq "$expected" ]; then
        echo "PASS $name (${took}s)"
        passed=$((passed + 1))
    else
        echo "FAIL $name: exit $rc, expected $expected (${took}s)"
        sed 's/^/  /' "$tmp/$name.out"
        grep -v '^==[0-9]*== *$' "$tmp/$name.log" | sed 's/^/  /' | head -n 150
        failed=$((failed + 1))
    fi
}

data=tests/data
# A safetensors header that lies about its length and breaks off, then image bytes.
printf '\100\000\000\000\000\000\000\000{"w": {"dtype": "F32", "shape": [99999' \
    >"$tmp/corrupt.safetensors"
head -c 2000 "$data/chelsea.png" >>"$tmp/corrupt.safetensors"

check convert_onednn 0 convert "$data/chelsea.png" -o "$tmp/out.png" --threads 1 --max-side 48
check convert_int8 0 convert "$data/chelsea.png" -o "$tmp/int8.png" --threads 1 --max-side 48 \
    --precision int8
check convert_int8_cute_v3 0 convert "$data/coffee.png" -o "$tmp/int8-cute.png" --threads 1 \
    --max-side 48 --precision int8 --model cute-v3
check convert_reference 0 convert "$data/coffee.png" -o "$tmp/out.jpg" --threads 1 \
    --backend reference --max-side 24
check batch_with_bad_file 1 convert "$data/truncated.jpg" "$data/chelsea.png" -o "$tmp/batch" \
    --backend reference --max-side 16 --side-by-side --format webp
check convert_v3_graph 0 convert "$data/chelsea.png" -o "$tmp/v3.png" --threads 1 \
    --model shinkai-v3 --max-side 32
check convert_onnx_reference 0 convert "$data/coffee.png" -o "$tmp/onnx.png" --threads 1 \
    --model tests/fixtures/onnx/AnimeGANv3_tiny_Cute.onnx --backend reference --max-side 32
head -c 30000 tests/fixtures/onnx/AnimeGANv3_tiny_Cute.onnx >"$tmp/cut.onnx"
check truncated_onnx 1 convert "$data/chelsea.png" -o "$tmp/x.png" --model "$tmp/cut.onnx"
check unknown_model 1 convert "$data/chelsea.png" -o "$tmp/x.png" --model nosuch
check corrupt_model 1 convert "$data/chelsea.png" -o "$tmp/x.png" --model "$tmp/corrupt.safetensors"
check bad_option 2 convert "$data/chelsea.png" -o "$tmp/x.png" --quality 0
check bench 0 bench --backend reference --size 16 --runs 1 --warmup 0 --threads 1
check models 0 models

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
