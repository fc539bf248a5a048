#!/bin/sh
# Runs the whole test suite: every build/tests/test_* binary and every tests/*_test.sh
# script (QUICK=1: the binaries only, for `make check`). Each prints "N passed, N failed" as its last summary line; this adds them up,
# prints the total the same way and exits non-zero on any failure (or a crashed suite).
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
passed=0
failed=0
log=$(mktemp)
times=$(mktemp)
trap 'rm -f "$log" "$times"' EXIT

. tests/summary.sh

# Each suite's wall time goes to $times; the slowest are listed at the end (the whole
# suite must stay well under CI's 30 minutes).
run_suite() {
    echo "== $*"
    start=$(date +%s)
    "$@" >"$log" 2>&1
    rc=$?
    cat "$log"
    echo "$(($(date +%s) - start)) s  $*" >>"$times"
    add_summary "$*" "$log" "$rc"
}

# QUICK=1 leaves out the slowest binaries that are neither unit, golden nor CLI tests (face
# pipeline, ONNX import, precision modes: about 56 s of CPU of the ~156 s); make test runs them.
SLOW_BINARIES="test_face test_onnx test_precision"
for t in "$BUILD"/tests/test_*; do
    case " $SLOW_BINARIES " in *" ${t##*/} "*) [ "${QUICK:-0}" = 1 ] && continue ;; esac
    [ -x "$t" ] && run_suite "$t"
done
# QUICK=1 (make check): the C test binaries only.
if [ "${QUICK:-0}" != 1 ]; then
    for s in tests/*_test.sh tests/valgrind.sh; do
        # minutes and root: its own target, make test-container
        [ "$s" = tests/container_test.sh ] && continue
        [ -f "$s" ] && run_suite sh "$s"
    done
fi

echo "== wall time per suite, slowest first (s)"
sort -rn "$times" | head -n 12
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
