#!/bin/sh
# The unit tests again, built with AddressSanitizer + UndefinedBehaviorSanitizer (any
# report aborts the test: -fno-sanitize-recover). Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
# OpenMP's and oneDNN's thread pools live until exit by design: only our leaks count,
# and those the tests catch through ag_allocated_bytes(); LSan stays on for the rest.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:${ASAN_OPTIONS:-}"
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# build/address/animegan looks for bundled models in build/models: point it at the real ones.
export ANIMEGAN_MODEL_PATH="$PWD/models"
# BUILD may be set by tests/run.sh for the normal build: this suite has its own directory.
BUILD=build/address
export BUILD
if ! make -s SANITIZER=address BUILD=$BUILD all >/tmp/animegan-asan-build.log 2>&1; then
    cat /tmp/animegan-asan-build.log
    echo "0 passed, 1 failed"
    exit 1
fi
# Cases the sanitizer run leaves out (tests/test.h AG_TEST_SKIP), each reached under the
# sanitizers by a smaller case of the same code: timings (test_speed), measurements over
# many runs or frames (int8 PSNR over photos, the track's jitter), CodeFormer's 512 px
# goldens (its ops run here in test_ops' per-op fixtures; the network itself took 300 s
# under ASan) and hayao's full-size golden (its small fixtures stay). The plain run
# (tests/run.sh) has every case.
export AG_TEST_SKIP="test_speed test_int8_psnr_photos test_smoothing_lowers_jitter \
test_upstream_codeformer test_upstream_codeformer_w0_w1 test_golden_hayao"
passed=0
failed=0
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    # The CLI and server tests run the asan binary of animegan itself.
    if "$t" >/tmp/animegan-asan-$name.log 2>&1; then
        echo "PASS asan $name"
        passed=$((passed + 1))
    else
        echo "FAIL asan $name"
        tail -n 40 /tmp/animegan-asan-$name.log
        failed=$((failed + 1))
    fi
done
[ "$passed" -gt 0 ] || { echo "no sanitizer test binaries were built"; failed=$((failed + 1)); }
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
