#!/bin/sh
# tests/stability/asan_server.sh - `animegan serve` built with AddressSanitizer +
# UndefinedBehaviorSanitizer (`make SANITIZER=address`, build/address/animegan) under the
# whole bad-input matrix and the fault tests (tests/stability/matrix.py), then a short soak
# of mixed requests. Any sanitizer report aborts the server (-fno-sanitize-recover, and
# halt_on_error) or makes it exit non-zero at shutdown (LeakSanitizer), and the drivers scan
# the server's stderr for reports. RSS limits are not judged: ASan's quarantine and shadow
# memory make RSS meaningless. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
requests=${ASAN_SOAK_REQUESTS:-120}
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:${ASAN_OPTIONS:-}"
# tests/lsan.supp (third-party caches that live until exit) plus the known third-party leaks
# that a bad upload reaches (tests/stability/known_leaks.supp, each in docs/stability.md).
mkdir -p build/stability
cat tests/lsan.supp tests/stability/known_leaks.supp >build/stability/lsan.supp
export LSAN_OPTIONS="suppressions=$PWD/build/stability/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
log=build/stability/asan-build.log
mkdir -p build/stability
if ! make -s SANITIZER=address build/address/animegan >"$log" 2>&1; then
    cat "$log"
    echo "FAIL asan build"
    echo "0 passed, 1 failed"
    exit 1
fi
passed=0
failed=0
out=build/stability/asan-matrix.log
BUILD=build/address python3 tests/stability/matrix.py >"$out" 2>&1
rc=$?
sed 's/^PASS /PASS asan /; s/^FAIL /FAIL asan /' "$out" | grep -v -E '^[0-9]+ passed'
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1)
if [ -n "$line" ]; then
    passed=$((passed + ${line%% passed*}))
    f=${line#*passed, }
    failed=$((failed + ${f%% failed*}))
fi
[ "$rc" -ne 0 ] && [ -z "$line" ] && failed=$((failed + 1))
if BUILD=build/address python3 tests/stability/soak.py --bin build/address/animegan \
    --requests "$requests" --warmup 30 --sizes 32,48,64 --portrait-share 0 --check-rss 0 \
    --out build/stability/asan-soak >build/stability/asan-soak.log 2>&1; then
    echo "PASS asan soak: $(grep '^soak:' build/stability/asan-soak.log)"
    passed=$((passed + 1))
else
    echo "FAIL asan soak:"
    tail -n 30 build/stability/asan-soak.log | sed 's/^/  /'
    grep -B2 -A30 -E 'Sanitizer|runtime error' build/stability/asan-soak/server.log 2>/dev/null |
        head -n 60 | sed 's/^/  /'
    failed=$((failed + 1))
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
