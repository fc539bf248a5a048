#!/usr/bin/env bash
# upscale_cpu_ab.sh - single-thread CPU seconds per run of `animegan bench` for two builds,
# interleaved: CPU(1 + N runs) - CPU(1 run), over N, so loading, planning and the warm-up
# cancel. CPU time, not wall time: on a shared machine the wall clock measures the load.
#
#   bench/upscale_cpu_ab.sh BEFORE_BINARY AFTER_BINARY MODEL PRECISION SIZE N ROUNDS
set -euo pipefail
[ $# -eq 7 ] || { sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
before=$1 after=$2 model=$3 prec=$4 size=$5 n=$6 rounds=$7
t=$(mktemp)
trap 'rm -f "$t"' EXIT
cpu() {
    /usr/bin/time -f '%U %S' -o "$t" "$1" bench --model "$model" --size "$size" --runs "$2" \
        --warmup 1 --threads 1 --precision "$prec" >/dev/null
    awk '{print $1 + $2}' "$t"
}
for r in $(seq "$rounds"); do
    for side in before after; do
        bin=$before
        [ "$side" = before ] || bin=$after
        one=$(cpu "$bin" 1)
        many=$(cpu "$bin" $((n + 1)))
        echo "$side $(basename "$model") $prec ${size}px round $r: $(echo "$many $one $n" |
            awk '{printf "%.3f", ($1 - $2) / $3}') s CPU per run"
    done
done
