#!/bin/sh
# tests/stability/fuzz.sh [seconds] - runs every libFuzzer target for `seconds` each (default
# 10): the model loaders (.pt and safetensors, via fuzz/run.sh), the server's request parsers
# (options, Content-Type, multipart; tests/server/fuzz.sh) and the image entry
# (fuzz/fuzz_image.c, built here). Corpora grow across runs under build/fuzz/. Prints one
# PASS/FAIL line per target with its executions and "N passed, N failed". A crash leaves
# build/fuzz/crash_*: turn it into a regression test (docs/stability.md says where).
set -u
cd "$(dirname "$0")/../.."
seconds=${1:-10}
cc=${FUZZ_CC:-clang}
out=build/fuzz
mkdir -p "$out"
passed=0
failed=0

if ! command -v "$cc" >/dev/null 2>&1 ||
    ! printf 'int LLVMFuzzerTestOneInput(const char *d, long n){(void)d;(void)n;return 0;}' |
    "$cc" -x c -fsanitize=fuzzer -o "$out/.probe" - >/dev/null 2>&1; then
    echo "SKIP fuzz: $cc with libFuzzer is not installed (scripts/install-deps.sh --test:" \
        "clang, libclang-rt-14-dev)"
    echo "0 passed, 0 failed"
    exit 0
fi
rm -f "$out/.probe"

# report NAME LOG STATUS: one line per target from libFuzzer's final stats.
report() {
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$2" | tail -n 1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$2" | tail -n 1)
    if [ "$3" -eq 0 ] && [ -n "$execs" ]; then
        echo "PASS fuzz_$1: ${execs} executions in ${seconds}s, peak RSS ${rss} MB"
        passed=$((passed + 1))
    else
        echo "FAIL fuzz_$1 (exit $3):"
        grep -E 'ERROR|SUMMARY|Test unit written|error:' "$2" | head -n 20 | sed 's/^/  /'
        failed=$((failed + 1))
    fi
}

# The model loaders: fuzz/run.sh builds and runs both, logs in build/fuzz/{pt,safetensors}.log.
fuzz/run.sh "$seconds" >"$out/models-run.log" 2>&1
rc=$?
for t in pt safetensors; do
    if [ -f "$out/$t.log" ]; then
        # fuzz/run.sh fails as a whole: blame the target whose log shows the crash.
        trc=0
        grep -qE '^==[0-9]+==ERROR|^SUMMARY|Test unit written' "$out/$t.log" && trc=1
        [ "$rc" -ne 0 ] && ! grep -q '^stat::number_of_executed_units' "$out/$t.log" && trc=1
        report "model_$t" "$out/$t.log" "$trc"
    else
        report "model_$t" "$out/models-run.log" 1
    fi
done

# The server's request parsers (needs build/libanimegan.a).
if [ -f build/libanimegan.a ]; then
    tests/server/fuzz.sh "$seconds" >"$out/server-run.log" 2>&1
    rc=$?
    cat "$out/server-run.log" >>"$out/server.log" 2>/dev/null
    report server "$out/server.log" "$rc"
else
    echo "FAIL fuzz_server: build/libanimegan.a is missing (run make)"
    failed=$((failed + 1))
fi

# The image entry: probe + decode through libvips, 512x512 cap, one thread.
# shellcheck disable=SC2046 # word splitting of pkg-config output is intended
if $cc -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
    -fno-sanitize-recover=all -Wall -Wextra -Werror -Iinclude $(pkg-config --cflags vips) \
    -o "$out/fuzz_image" fuzz/fuzz_image.c src/image/[a-z]*.c src/util/[a-z]*.c \
    $(pkg-config --libs vips) -lm >"$out/image-build.log" 2>&1; then
    mkdir -p "$out/corpus_image" "$out/seeds_image"
    cp tests/data/generated/* tests/data/truncated.jpg "$out/seeds_image/"
    printf '%s\n' '"\x89PNG\x0d\x0a\x1a\x0a"' '"IHDR"' '"IDAT"' '"IEND"' '"\xff\xd8\xff"' \
        '"\xff\xe1"' '"Exif\x00\x00"' '"RIFF"' '"WEBP"' '"VP8 "' '"VP8L"' '"GIF89a"' \
        '"II*\x00"' '"MM\x00*"' '"ftypheic"' '"ftypavif"' >"$out/image.dict"
    # Sanitizers and libvips: ASan's leak check would report GLib's and libvips' caches,
    # which live until exit by design; the harness checks our own allocator count instead.
    ASAN_OPTIONS=detect_leaks=0 VIPS_WARNING=0 "$out/fuzz_image" -max_total_time="$seconds" \
        -max_len=65536 -timeout=20 -rss_limit_mb=2048 -dict="$out/image.dict" \
        -print_final_stats=1 -artifact_prefix="$out/crash_image_" \
        "$out/corpus_image" "$out/seeds_image" >"$out/image.log" 2>&1
    report image "$out/image.log" $?
else
    echo "FAIL fuzz_image: does not build:"
    sed 's/^/  /' "$out/image-build.log" | head -n 20
    failed=$((failed + 1))
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
