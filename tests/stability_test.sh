#!/bin/sh
# tests/stability_test.sh - the stability suite of issue 5 against the real server:
#   1. the bad-input matrix and the fault tests (tests/stability/matrix.py);
#   2. a short soak: 300 mixed requests, RSS after warm-up within 2% or 4 MiB
#      (bench/soak.sh runs the long one);
#   3. a short run of every libFuzzer target (tests/stability/fuzz.sh, 10 s each;
#      STABILITY_FUZZ_SECONDS=0 skips);
#   4. the server under ASan + UBSan with the matrix and a short soak
#      (tests/stability/asan_server.sh; STABILITY_ASAN=0 skips);
#   5. the server under valgrind memcheck for a short load
#      (tests/stability/valgrind_server.sh, 1.5-7 minutes; STABILITY_VALGRIND=0 skips).
# Prints one PASS/FAIL line per test and "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
if ! command -v python3 >/dev/null 2>&1; then
    echo "FAIL stability: python3 is needed (scripts/install-deps.sh --test)"
    echo "0 passed, 1 failed"
    exit 1
fi
mkdir -p build/stability
passed=0
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

. tests/summary.sh

# part NAME COMMAND...: run a sub-suite, show its lines, add up its "N passed, N failed".
part() {
    name=$1
    shift
    start=$(date +%s)
    "$@" >"$log" 2>&1
    rc=$?
    grep -v -E '^[0-9]+ passed, [0-9]+ failed' "$log"
    add_summary "$name" "$log" "$rc"
    echo "   ($name: $(($(date +%s) - start)) s)"
}

part matrix python3 tests/stability/matrix.py

# Sanitizer builds (make SANITIZER=address test): RSS means nothing there.
check_rss=1
case "$(basename "$BUILD")" in address | undefined | thread | leak) check_rss=0 ;; esac
start=$(date +%s)
if python3 tests/stability/soak.py --requests 300 --warmup 100 --sizes 32,48,64,96 \
    --portrait-share 0 --bad-share 0.05 --check-rss "$check_rss" \
    --out build/stability/soak-short >"$log" 2>&1; then
    echo "PASS short_soak ($(($(date +%s) - start)) s)"
    passed=$((passed + 1))
else
    echo "FAIL short_soak ($(($(date +%s) - start)) s)"
    failed=$((failed + 1))
fi
grep -E '^(soak|  )' "$log" | sed 's/^/  /'

if [ "${STABILITY_FUZZ_SECONDS:-10}" -gt 0 ]; then
    part fuzz sh tests/stability/fuzz.sh "${STABILITY_FUZZ_SECONDS:-10}"
fi
if [ "${STABILITY_ASAN:-1}" != 0 ] && [ "$check_rss" = 1 ]; then
    part asan sh tests/stability/asan_server.sh
fi
if [ "${STABILITY_VALGRIND:-1}" != 0 ] && [ "$check_rss" = 1 ]; then
    part valgrind sh tests/stability/valgrind_server.sh
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
