#!/bin/sh
# tests/stability/fuzz.sh [seconds] - a short run of every libFuzzer target through
# fuzz/run.sh (`seconds` each, default 10): the model loaders (.pt zip/pickle,
# safetensors and ONNX), the image decode entry, the face path (fuzz/fuzz_face.c), the video
# probe/demux entry (fuzz/fuzz_video.c) and the server's request parsers (options,
# Content-Type, multipart). Prints one PASS/FAIL line per target with its executions from
# libFuzzer's final stats, and "N passed, N failed". Without clang + libFuzzer it says so and
# skips. A crash leaves build/fuzz/crash_*: docs/stability.md says how it becomes a
# regression test.
set -u
cd "$(dirname "$0")/../.."
seconds=${1:-10}
cc=${FUZZ_CC:-clang}
out=build/fuzz
mkdir -p "$out"
if ! command -v "$cc" >/dev/null 2>&1 ||
    ! printf 'int LLVMFuzzerTestOneInput(const char *d, long n){(void)d;(void)n;return 0;}' |
    "$cc" -x c -fsanitize=fuzzer -o "$out/.probe" - >/dev/null 2>&1; then
    echo "SKIP fuzz: $cc with libFuzzer is not installed (scripts/install-deps.sh --test:" \
        "clang, libclang-rt-14-dev)"
    echo "0 passed, 0 failed"
    exit 0
fi
rm -f "$out/.probe" "$out/pt.log" "$out/safetensors.log" "$out/onnx.log" "$out/image.log" \
    "$out/face.log" "$out/server.log" "$out/video.log"
[ -f build/libanimegan.a ] || make -s build/libanimegan.a >/dev/null 2>&1
# Known third-party leaks (each documented in docs/stability.md) would stop the image fuzzer
# at its first rediscovery; everything else still fails the run.
export LSAN_OPTIONS="suppressions=$PWD/tests/stability/known_leaks.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
fuzz/run.sh "$seconds" >"$out/run.log" 2>&1
rc=$?
passed=0
failed=0
for t in model_pt:pt model_safetensors:safetensors model_onnx:onnx image:image face:face \
    server:server video:video; do
    name=${t%%:*}
    f=$out/${t#*:}.log
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$f" 2>/dev/null | tail -n 1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$f" 2>/dev/null | tail -n 1)
    if [ -n "$execs" ] && ! grep -qE '^==[0-9]+==ERROR|^SUMMARY: |Test unit written' "$f"; then
        echo "PASS fuzz_$name: $execs executions in ${seconds}s, peak RSS ${rss} MB"
        passed=$((passed + 1))
    else
        echo "FAIL fuzz_$name:"
        if [ -f "$f" ]; then
            grep -E 'ERROR|SUMMARY|Test unit written|#0 |#1 |#2 ' "$f" | head -n 20 | sed 's/^/  /'
        else
            tail -n 20 "$out/run.log" | sed 's/^/  /'
        fi
        failed=$((failed + 1))
    fi
done
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
    echo "FAIL fuzz/run.sh exited $rc:"
    tail -n 20 "$out/run.log" | sed 's/^/  /'
    failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
