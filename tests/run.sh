#!/bin/sh
# Runs the whole test suite: every build/tests/test_* binary and every tests/*_test.sh
# script. Each prints "N passed, N failed" as its last summary line; this adds them up,
# prints the total the same way and exits non-zero on any failure (or a crashed suite).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
passed=0
failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

run_suite() {
    echo "== $*"
    "$@" >"$log" 2>&1
    rc=$?
    cat "$log"
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "suite $* crashed or printed no summary (exit $rc)"
        failed=$((failed + 1))
        return
    fi
    p=${line%% passed*}
    f=${line#*passed, }
    f=${f%% failed*}
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "suite $* exited $rc with no failed test"
        failed=$((failed + 1))
    fi
}

for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] && run_suite "$t"
done
for s in tests/*_test.sh tests/valgrind.sh; do
    [ -f "$s" ] && run_suite sh "$s"
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
