# tests/summary.sh - sourced by tests/run.sh and tests/stability_test.sh.
#
# add_summary NAME LOG RC: add the last "N passed, N failed" line of LOG to $passed and
# $failed. A suite that printed no such line (it crashed), or exited non-zero while
# reporting no failed test, counts as one failure.
add_summary() {
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$2" | tail -n 1)
    if [ -z "$line" ]; then
        echo "FAIL $1: crashed or printed no summary (exit $3)"
        failed=$((failed + 1))
        return
    fi
    p=${line%% passed*}
    f=${line#*passed, }
    f=${f%% failed*}
    passed=$((passed + p))
    failed=$((failed + f))
    if [ "$3" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $1: exit $3 with no failed test"
        failed=$((failed + 1))
    fi
}
