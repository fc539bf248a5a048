#!/bin/sh
# Model files whose maps are wider than the kernels' per-channel arrays (#35, critical: a
# 1040-channel conv wrote the stack in the int8 passes and crashed the CLI, the service on its
# first request, and Python): each front end refuses them at load in one line, exit 1, no
# output file, and the service does not start. Fixtures: tools/make_wide_models.py.
# Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=$BUILD/animegan
export ANIMEGAN_MODEL_PATH=$PWD/models
FIX=tests/fixtures/wide
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { echo "PASS $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }

# refused NAME COMMAND...: exit 1, one line naming the 1040 channels, no output file.
refused() {
    name=$1
    shift
    "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    if [ "$rc" -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
        grep -q '1040 channels; at most 1024' "$tmp/err" && [ ! -e "$tmp/result.png" ]; then
        ok "$name"
    else
        bad "$name (exit $rc)"
        cat "$tmp/err"
    fi
}

for p in int8 auto fp32; do
    refused "convert_onnx_$p" "$BIN" convert tests/data/chelsea.png -m "$FIX/wide_1040.onnx" \
        -o "$tmp/result.png" --precision "$p"
    refused "upscale_pth_$p" "$BIN" upscale tests/data/chelsea.png -m "$FIX/wide_1040.pth" \
        -o "$tmp/result.png" --precision "$p"
done
refused convert_upscale_pth "$BIN" convert tests/data/chelsea.png --upscale 2 \
    --upscale-model "$FIX/wide_1040.pth" -o "$tmp/result.png"
refused serve_style timeout 60 "$BIN" serve --port 0 --model "$FIX/wide_1040.onnx"
refused serve_upscaler timeout 60 "$BIN" serve --port 0 --upscale-model "$FIX/wide_1040.pth"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
