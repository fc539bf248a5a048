#!/usr/bin/env bash
# compare.sh - animegan.c against its peers on this machine, interleaved in one run.
#
#   bench/compare.sh [--rounds N] [--runs R] [--size S] [--threads T] [--timeout SEC]
#                    [--model M] [--precisions "fp32 bf16 int8 auto"] [--no-avx2]
#                    [--no-install]
#   bench/compare.sh --scaling [--sizes "256 512 1024 2048"] [same options]
#   bench/compare.sh --restore | --upscale [--rounds N] [--runs R] [--threads T]
#
# Each round runs, in an order rotated from round to round: our engine (`animegan bench
# --model M`, once per available precision, `auto` included), the same again as an
# AVX2-only server runs it (ANIMEGAN_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2; on a CPU above AVX2,
# unless --no-avx2), PyTorch 1.13 eager (bench/peers/torch_bench.py, F.interpolate), ONNX
# Runtime (bench/peers/ort_bench.js on the graph bench/export_onnx.py writes) and the FMA
# peak loop (bench/fma_peak.c, AVX-512 and AVX2). M is any model `animegan` accepts (a
# bundled name or a file); the peers run it when the PyTorch reference can load it (a v2
# .safetensors file), else they are skipped with a note. Every runtime gets the same size,
# --threads and R timed runs
# after one warm-up, in its own process under /usr/bin/time -v (whole-process peak RSS) and
# timeout. bench/report.py turns the raw outputs (bench/results/run-*/) into the table,
# printed and written to bench/results/compare-<date>.md.
#
# --scaling times our engine alone at each of --sizes, to show time and arena per pixel.
# --restore and --upscale give the rows of the face restorers (GPEN-512, GFPGAN-512 per
# face) and the upscalers (realesr-animevideov3 x4, esrgan-medium x2) against PyTorch, by
# bench/restore.sh and bench/upscale.sh, with the same interleaving and FMA peak.
# Exits non-zero when a runtime fails in every round (a precision our engine rejects is
# skipped with a note instead). Method and caveats: docs/benchmarks.md.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
PY=/usr/bin/python3
ROUNDS=5 RUNS=5 SIZE=512 THREADS=2 TIMEOUT=900 INSTALL=1 SCALING=0 AVX2=1 SUITE=""
MODEL=hayao
PRECISIONS="fp32 bf16 int8 auto"
# How an AVX2-only server runs: our passes' AVX2 variant and oneDNN held at AVX2.
AVX2_ENV="ANIMEGAN_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2"
SIZES="256 512 1024 2048"

die() { echo "compare.sh: $*" >&2; exit 1; }
usage() { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
posint() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1 wants a positive integer, got '$2'"; }

while [ $# -gt 0 ]; do
    case $1 in
    --rounds) posint "$1" "${2:-}"; ROUNDS=$2; shift ;;
    --runs) posint "$1" "${2:-}"; RUNS=$2; shift ;;
    --size) posint "$1" "${2:-}"; SIZE=$2; shift ;;
    --threads) posint "$1" "${2:-}"; THREADS=$2; shift ;;
    --timeout) posint "$1" "${2:-}"; TIMEOUT=$2; shift ;;
    --precisions) PRECISIONS=${2:-}; shift ;;
    --model) [ -n "${2:-}" ] || die "--model wants a model name or file"; MODEL=$2; shift ;;
    --no-avx2) AVX2=0 ;;
    --sizes) SIZES=${2:-}; shift ;;
    --scaling) SCALING=1 ;;
    --restore | --upscale) SUITE=${1#--} ;;
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
    # The peak of the widest FMA this CPU has; the AVX2 one for the AVX2-only rows.
    local wide="-mavx512f -mfma"
    grep -qw avx512f /proc/cpuinfo || wide="-DFMA_AVX2 -mavx2 -mfma"
    if [ ! -x "$BUILD/bench/fma_peak" ] || [ bench/fma_peak.c -nt "$BUILD/bench/fma_peak" ]; then
        # shellcheck disable=SC2086 # flag list
        cc -O2 -Wall -Wextra $wide -pthread bench/fma_peak.c -o "$BUILD/bench/fma_peak" ||
            die "cannot build bench/fma_peak.c"
    fi
    if [ ! -x "$BUILD/bench/fma_peak_avx2" ] || [ bench/fma_peak.c -nt "$BUILD/bench/fma_peak_avx2" ]; then
        cc -O2 -Wall -Wextra -DFMA_AVX2 -mavx2 -mfma -pthread bench/fma_peak.c \
            -o "$BUILD/bench/fma_peak_avx2" || die "cannot build bench/fma_peak.c for AVX2"
    fi
}

# The model file the peers load: --model as a path, or a bundled name's file; "" if none.
model_file() {
    if [ -f "$MODEL" ]; then
        echo "$MODEL"
    elif [ -f "models/$MODEL.safetensors" ]; then
        echo "models/$MODEL.safetensors"
    fi
}
MODEL_TAG=$(basename "$MODEL")
MODEL_TAG=${MODEL_TAG%.*}

# The ONNX graph and the check tensors for one size, rebuilt when an input is newer.
export_onnx() {
    local s=$1 onnx=bench/results/${MODEL_TAG}_$1.onnx
    local dep
    for dep in "$MODEL_FILE" bench/export_onnx.py tools/reference_model.py; do
        if [ ! -f "$onnx" ] || [ "$dep" -nt "$onnx" ]; then
            echo "exporting the generator to $onnx" >&2
            timeout -k 10 "$TIMEOUT" $PY bench/export_onnx.py --model "$MODEL_FILE" --size "$s" \
                --output "$onnx" --check "bench/results/${MODEL_TAG}_$s" >&2 ||
                die "ONNX export failed"
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
    [ "$rc" -eq 0 ] || summary="FAILED (exit $rc$([ "$rc" -ne 124 ] || echo ", timeout ${TIMEOUT}s"), see $base.err)"
    printf '  round %s  %-20s %s\n' "$round" "$name" "$summary" >&2
}

# probe DIR LABEL ENV... : the precisions our engine accepts under ENV, probed on a tiny
# image, into PROBED ("precision=resolved" words); notes for the others. An auto that
# resolves to a precision already probed under the same ENV is noted, not run twice, except
# on the native rows (the auto row is what a user gets by default).
probe() {
    local dir=$1 label=$2 p out json resolved
    shift 2
    PROBED=""
    for p in $PRECISIONS; do
        json=$(env "$@" timeout -k 10 120 "$BUILD/animegan" bench --size 64 --runs 1 --warmup 0 \
            --threads "$THREADS" --precision "$p" --model "$MODEL" 2>"$dir/probe.err") || {
            echo "animegan $label$p skipped: $(tail -1 "$dir/probe.err")" | tee -a "$dir/notes.txt" >&2
            continue
        }
        resolved=$(echo "$json" | $PY -c 'import json,sys; print(json.loads(sys.stdin.read())["precision"])')
        if [ "$p" = auto ] && [ -n "$label" ] && [[ " $PROBED " == *" $resolved="* ]]; then
            echo "animegan ${label}auto = $resolved here: the ${label}$resolved row" | tee -a "$dir/notes.txt" >&2
            continue
        fi
        PROBED="$PROBED $p=$resolved"
        out=$(grep -m1 -i 'warning' "$dir/probe.err" || true)
        [ -z "$out" ] || echo "animegan $label$p: ${out#animegan: }" | tee -a "$dir/notes.txt" >&2
    done
    rm -f "$dir/probe.err"
}

probe_precisions() {
    : >"$1/notes.txt"
    probe "$1" ""
    OK_PRECISIONS=""
    for w in $PROBED; do OK_PRECISIONS="$OK_PRECISIONS ${w%%=*}"; done
    AVX2_PRECISIONS=""
    if [ "$AVX2" -eq 1 ] && grep -qw avx512f /proc/cpuinfo; then
        # shellcheck disable=SC2086 # the variable assignments are words for env
        probe "$1" "avx2-" $AVX2_ENV
        for w in $PROBED; do AVX2_PRECISIONS="$AVX2_PRECISIONS ${w%%=*}"; done
    fi
}

# AnimeGANv3: ONNX Runtime runs the original .onnx of the same network (the author's tiny
# Cute file; for the full network, the .onnx tools/make_v3_onnx.py builds from the Shinkai
# .pb: hayao-v3 has the same architecture and cost), or the .onnx given as --model.
v3_onnx() {
    case "$MODEL" in
    *.onnx) echo "$MODEL" ;;
    cute-v3) echo tests/fixtures/onnx/AnimeGANv3_tiny_Cute.onnx ;;
    hayao-v3 | shinkai-v3) sh tools/make_v3_test_models.sh >&2 && echo build/v3/AnimeGANv3_Shinkai_37.onnx ;;
    esac
}

# The peers run the model when the PyTorch reference loads it (v2 safetensors).
probe_peers() {
    MODEL_FILE=$(model_file)
    PEERS=0
    V3_ONNX=$(v3_onnx)
    if [ -n "$V3_ONNX" ]; then
        echo "peers: ONNX Runtime on $V3_ONNX (no PyTorch peer for AnimeGANv3)" | tee -a "$1/notes.txt" >&2
    elif [ -z "$MODEL_FILE" ]; then
        echo "peers skipped: no model file for '$MODEL' (a bundled name or a path)" | tee -a "$1/notes.txt" >&2
    elif ! timeout -k 10 300 $PY bench/peers/torch_bench.py --model "$MODEL_FILE" --size 64 \
        --runs 1 --warmup 0 --threads "$THREADS" >/dev/null 2>"$1/peer-probe.err"; then
        echo "peers skipped: the PyTorch reference cannot run $MODEL_FILE: $(tail -1 "$1/peer-probe.err")" |
            tee -a "$1/notes.txt" >&2
    else
        PEERS=1
    fi
    rm -f "$1/peer-probe.err"
}

write_meta() {
    {
        echo "date=$(date '+%Y-%m-%d %H:%M %Z')"
        echo "cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores"
        # "isa: avx512 (best avx512), onednn avx512_core_bf16" and the flags, from our engine
        echo "isa=$("$BUILD/animegan" --version 2>/dev/null | sed -n 's/^isa: //p')"
        echo "cpu_flags=$("$BUILD/animegan" --version 2>/dev/null | sed -n 's/^cpu flags: //p')"
        echo "auto=$("$BUILD/animegan" --version 2>/dev/null | sed -n 's/^precision auto: //p')"
        echo "model=$MODEL"
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
[ -z "$SUITE" ] || exec bench/"$SUITE".sh --rounds "$ROUNDS" --runs "$RUNS" --threads "$THREADS"
STAMP=$(date +%Y-%m-%d-%H%M%S)
DIR=bench/results/run-$STAMP
mkdir -p "$DIR"
write_meta "$DIR"
probe_precisions "$DIR"
[ -n "$OK_PRECISIONS" ] || die "our engine runs none of: $PRECISIONS"
echo "avx2_precisions=$AVX2_PRECISIONS" >>"$DIR/meta.txt"

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
                    --runs "$runs" --warmup 1 --threads "$THREADS" --precision "$p" \
                    --model "$MODEL"
            done
        done
    done
    echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$DIR/meta.txt"
    exec $PY bench/report.py scaling "$DIR" --out "bench/results/scaling-$STAMP.md"
fi

probe_peers "$DIR"
[ "$PEERS" -eq 1 ] && export_onnx "$SIZE"
# Model names and paths go into command lines split on blanks: refuse what would split.
[[ $MODEL != *[[:space:]]* ]] || die "--model: no blanks in the name or path, please"
names=() cmds=()
ours="bench --size $SIZE --runs $RUNS --warmup 1 --threads $THREADS --model $MODEL --precision"
for p in $OK_PRECISIONS; do
    names+=("animegan-$p")
    cmds+=("$BUILD/animegan $ours $p")
done
for p in $AVX2_PRECISIONS; do
    names+=("animegan-avx2-$p")
    cmds+=("env $AVX2_ENV $BUILD/animegan $ours $p")
done
if [ -n "$V3_ONNX" ]; then
    names+=(onnxruntime)
    cmds+=("node bench/peers/ort_bench.js --model $V3_ONNX --layout nhwc --size $SIZE --runs $RUNS --warmup 1 --threads $THREADS")
fi
if [ "$PEERS" -eq 1 ]; then
    names+=(pytorch onnxruntime)
    cmds+=("$PY bench/peers/torch_bench.py --model $MODEL_FILE --size $SIZE --runs $RUNS --warmup 1 --threads $THREADS")
    cmds+=("node bench/peers/ort_bench.js --model bench/results/${MODEL_TAG}_$SIZE.onnx --size $SIZE --runs $RUNS --warmup 1 --threads $THREADS --check bench/results/${MODEL_TAG}_$SIZE")
fi
names+=(fma-peak)
cmds+=("$BUILD/bench/fma_peak --threads $THREADS --seconds 0.5")
if [ -n "$AVX2_PRECISIONS" ]; then
    names+=(fma-peak-avx2)
    cmds+=("$BUILD/bench/fma_peak_avx2 --threads $THREADS --seconds 0.5")
fi

echo "peers=$PEERS" >>"$DIR/meta.txt"
echo "ort_peer=$([ -n "$V3_ONNX" ] && echo 1 || echo 0)" >>"$DIR/meta.txt"
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
