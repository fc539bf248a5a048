#!/usr/bin/env bash
# compare.sh - animegan.c against its peers on this machine, interleaved in one run.
#
#   bench/compare.sh [--rounds N] [--runs R] [--size S] [--threads T] [--timeout SEC]
#                    [--precisions "fp32 bf16 int8"] [--no-install]
#   bench/compare.sh --scaling [--sizes "256 512 1024 2048"] [same options]
#
# Each round runs, in an order rotated from round to round: our engine (`animegan bench`,
# once per available precision), PyTorch 1.13 eager (bench/peers/torch_bench.py), ONNX
# Runtime (bench/peers/ort_bench.js on the graph bench/export_onnx.py writes) and the FMA
# peak loop (bench/fma_peak.c). Every runtime gets the same size, --threads and R timed runs
# after one warm-up, in its own process under /usr/bin/time -v (whole-process peak RSS) and
# timeout. bench/report.py turns the raw outputs (bench/results/run-*/) into the table,
# printed and written to bench/results/compare-<date>.md.
#
# --scaling times our engine alone at each of --sizes, to show time and arena per pixel.
# Exits non-zero when a runtime fails in every round (a precision our engine rejects is
# skipped with a note instead). Method and caveats: docs/benchmarks.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
PY=/usr/bin/python3
ROUNDS=5 RUNS=5 SIZE=512 THREADS=2 TIMEOUT=900 INSTALL=1 SCALING=0
PRECISIONS="fp32 bf16 int8"
SIZES="256 512 1024 2048"

die() { echo "compare.sh: $*" >&2; exit 1; }
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
posint() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1 wants a positive integer, got '$2'"; }

while [ $# -gt 0 ]; do
    case $1 in
    --rounds) posint "$1" "${2:-}"; ROUNDS=$2; shift ;;
    --runs) posint "$1" "${2:-}"; RUNS=$2; shift ;;
    --size) posint "$1" "${2:-}"; SIZE=$2; shift ;;
    --threads) posint "$1" "${2:-}"; THREADS=$2; shift ;;
    --timeout) posint "$1" "${2:-}"; TIMEOUT=$2; shift ;;
    --precisions) PRECISIONS=${2:-}; shift ;;
    --sizes) SIZES=${2:-}; shift ;;
    --scaling) SCALING=1 ;;
    --no-install) INSTALL=0 ;;
    -h | --help) usage 0 ;;
    *) echo "compare.sh: unknown option '$1'" >&2; usage 2 ;;
    esac
    shift
done

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# ---- what it needs (each step does nothing when already there) ------------------------------
install_deps() {
    if [ ! -x /usr/bin/time ]; then
        as_root apt-get update -q && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q time
    fi
    if ! $PY -c 'import torch, numpy' 2>/dev/null; then
        if [ -x scripts/install-deps.sh ]; then
            scripts/install-deps.sh --all
        else
            as_root apt-get update -q
            DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q python3-torch python3-numpy
        fi
    fi
    command -v node >/dev/null || die "node is missing (scripts/install-deps.sh --all installs it)"
    if [ ! -f bench/node_modules/onnxruntime-node/package.json ]; then
        # --ignore-scripts: the package's install script downloads GPU libraries and fails
        # here; the CPU runtime is bundled in the package itself.
        (cd bench && { npm ci --ignore-scripts --no-audit --no-fund ||
            npm install --ignore-scripts --no-audit --no-fund; })
    fi
}

build() {
    make -s "$BUILD/animegan" >&2 || die "make $BUILD/animegan failed"
    mkdir -p "$BUILD/bench"
    if [ ! -x "$BUILD/bench/fma_peak" ] || [ bench/fma_peak.c -nt "$BUILD/bench/fma_peak" ]; then
        cc -O2 -Wall -Wextra -mavx512f -mfma -pthread bench/fma_peak.c -o "$BUILD/bench/fma_peak" ||
            die "cannot build bench/fma_peak.c"
    fi
}

# The ONNX graph and the check tensors for one size, rebuilt when an input is newer.
export_onnx() {
    local s=$1 onnx=bench/results/hayao_$1.onnx
    local dep
    for dep in models/hayao.safetensors bench/export_onnx.py tools/reference_model.py; do
        if [ ! -f "$onnx" ] || [ "$dep" -nt "$onnx" ]; then
            echo "exporting the generator to $onnx" >&2
            timeout -k 10 "$TIMEOUT" $PY bench/export_onnx.py --size "$s" --output "$onnx" \
                --check "bench/results/hayao_$s" >&2 || die "ONNX export failed"
            return
        fi
    done
}

# run_one DIR NAME ROUND CMD... : NAME.rROUND.{json,time,err} in DIR; prints a progress line.
run_one() {
    local dir=$1 name=$2 round=$3
    shift 3
    local base=$dir/$name.r$round rc=0
    timeout -k 10 "$TIMEOUT" /usr/bin/time -v -o "$base.time" "$@" >"$base.json" 2>"$base.err" || rc=$?
    echo "$rc" >"$base.rc"
    local summary
    summary=$($PY -c 'import json,sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print("%.1f GFLOP/s" % d["gflops"] if "ms_median" not in d else "%.1f ms median" % d["ms_median"])' \
        "$base.json" 2>/dev/null) || summary="FAILED (exit $rc, see $base.err)"
    [ "$rc" -eq 0 ] || summary="FAILED (exit $rc$([ "$rc" -eq 124 ] && echo ", timeout ${TIMEOUT}s"), see $base.err)"
    printf '  round %s  %-20s %s\n' "$round" "$name" "$summary" >&2
}

# Precisions our engine accepts, probed on a tiny image; notes for the others.
probe_precisions() {
    local p out
    OK_PRECISIONS=""
    : >"$1/notes.txt"
    for p in $PRECISIONS; do
        if out=$(timeout -k 10 120 "$BUILD/animegan" bench --size 64 --runs 1 --warmup 0 \
            --threads "$THREADS" --precision "$p" 2>&1 >/dev/null); then
            OK_PRECISIONS="$OK_PRECISIONS $p"
        else
            echo "animegan $p skipped: $(echo "$out" | tail -1)" | tee -a "$1/notes.txt" >&2
        fi
    done
}

write_meta() {
    {
        echo "date=$(date '+%Y-%m-%d %H:%M %Z')"
        echo "cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores"
        echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- src cli 2>/dev/null || echo ' + uncommitted changes')"
        echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)"
        echo "size=$SIZE"
        echo "threads=$THREADS"
        echo "rounds=$ROUNDS"
        echo "runs=$RUNS"
    } >"$1/meta.txt"
}

[ "$INSTALL" -eq 1 ] && install_deps
[ -x /usr/bin/time ] || die "/usr/bin/time is missing (apt-get install time)"
build
STAMP=$(date +%Y-%m-%d-%H%M%S)
DIR=bench/results/run-$STAMP
mkdir -p "$DIR"
write_meta "$DIR"
probe_precisions "$DIR"
[ -n "$OK_PRECISIONS" ] || die "our engine runs none of: $PRECISIONS"

if [ "$SCALING" -eq 1 ]; then
    echo "scaling: our engine at $SIZES, precisions$OK_PRECISIONS, $ROUNDS rounds -> $DIR" >&2
    read -r -a sizes <<<"$SIZES"
    n=${#sizes[@]}
    for ((r = 1; r <= ROUNDS; r++)); do
        for ((i = 0; i < n; i++)); do
            s=${sizes[$(((i + r - 1) % n))]}
            # Fewer timed runs at large sizes: about R runs' worth of 512x512 pixels, >= 2.
            runs=$(((RUNS * 512 * 512 + s * s - 1) / (s * s)))
            [ "$runs" -gt "$RUNS" ] && runs=$RUNS
            [ "$runs" -lt 2 ] && runs=2
            for p in $OK_PRECISIONS; do
                run_one "$DIR" "animegan-$p-$s" "$r" "$BUILD/animegan" bench --size "$s" \
                    --runs "$runs" --warmup 1 --threads "$THREADS" --precision "$p"
            done
        done
    done
    echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$DIR/meta.txt"
    exec $PY bench/report.py scaling "$DIR" --out "bench/results/scaling-$STAMP.md"
fi

export_onnx "$SIZE"
names=() cmds=()
for p in $OK_PRECISIONS; do
    names+=("animegan-$p")
    cmds+=("$BUILD/animegan bench --size $SIZE --runs $RUNS --warmup 1 --threads $THREADS --precision $p")
done
names+=(pytorch onnxruntime fma-peak)
cmds+=("$PY bench/peers/torch_bench.py --size $SIZE --runs $RUNS --warmup 1 --threads $THREADS")
cmds+=("node bench/peers/ort_bench.js --model bench/results/hayao_$SIZE.onnx --size $SIZE --runs $RUNS --warmup 1 --threads $THREADS --check bench/results/hayao_$SIZE")
cmds+=("$BUILD/bench/fma_peak --threads $THREADS --seconds 0.5")

echo "compare: ${names[*]} at ${SIZE}x$SIZE, $THREADS threads, $ROUNDS rounds x $RUNS runs -> $DIR" >&2
n=${#names[@]}
for ((r = 1; r <= ROUNDS; r++)); do
    for ((i = 0; i < n; i++)); do
        k=$(((i + r - 1) % n)) # rotate, so no runtime always follows the same one
        # shellcheck disable=SC2086 # the command lines above are word lists
        run_one "$DIR" "${names[$k]}" "$r" ${cmds[$k]}
    done
done
echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$DIR/meta.txt"
exec $PY bench/report.py compare "$DIR" --out "bench/results/compare-$STAMP.md"
