#!/usr/bin/env bash
# engine_ab.sh - two builds of animegan on the workloads of bench/compare.sh, bench/restore.sh
# and bench/upscale.sh, interleaved in one run (issue 29: "before and after, within noise").
#
#   bench/engine_ab.sh BEFORE_BIN AFTER_BIN [--rounds N] [--runs R] [--warmup W] [--threads T]
#                      [--style-size S] [--upscale-size S]
#
# Workloads (`animegan bench`, whole network, no decoding): hayao (AnimeGANv2) at 512 px (S) in
# fp32 and in the default precision (compare.sh's row); GPEN-BFR-512, one face, fp32 and
# default (restore.sh's, the full-size network with seeded weights from
# tools/make_restore_bench_models.py); realesr-animevideov3 x4 and esrgan-medium x2 at 256
# px (S), default precision (upscale.sh's, seeded full-size weights as it makes them). Each
# round runs every workload on both binaries, the order of the two swapped from round to
# round; prints the median of the rounds' medians per binary and the after/before ratio.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY=/usr/bin/python3
[ $# -ge 2 ] || { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
A=$1 B=$2
shift 2
ROUNDS=3 RUNS=3 WARMUP=1 THREADS=2 STYLE_SIZE=512 UPSCALE_SIZE=256
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) ROUNDS=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --warmup) WARMUP=$2; shift ;;
    --style-size) STYLE_SIZE=$2; shift ;;
    --upscale-size) UPSCALE_SIZE=$2; shift ;;
    *) echo "engine_ab.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done
OUT=bench/results/engine-ab-$(date -u +%Y%m%d-%H%M%S)
MODELS=${AG_BENCH_MODELS:-bench/results/restore-models}
mkdir -p "$OUT" "$MODELS"
export ANIMEGAN_MODEL_PATH=$ROOT/models
$PY tools/make_restore_bench_models.py "$MODELS" >/dev/null
ANIME=$MODELS/animevideov3-random.pth
[ -f "$ANIME" ] || $PY - "$ANIME" <<'PY'
import sys, torch
sys.path.insert(0, "tools")
import realesrgan_reference as R
torch.manual_seed(7)
net = R.SRVGG(64, 16, 4)
torch.save({"params": net.state_dict()}, sys.argv[1])
PY

# name|model|size|precision
WORKLOADS="hayao-fp32|hayao|$STYLE_SIZE|fp32
hayao-auto|hayao|$STYLE_SIZE|auto
gpen512-fp32|$MODELS/gpen_bfr_512.pt|512|fp32
gpen512-auto|$MODELS/gpen_bfr_512.pt|512|auto
animevideov3-x4|$ANIME|$UPSCALE_SIZE|auto
esrgan-medium-x2|esrgan-medium-x2|$UPSCALE_SIZE|auto"

bench() { # BIN TAG NAME MODEL SIZE PRECISION
    "$1" bench --model "$4" --size "$5" --precision "$6" --runs "$RUNS" --warmup "$WARMUP" \
        --threads "$THREADS" >>"$OUT/$3-$2.jsonl"
}
for r in $(seq "$ROUNDS"); do
    echo "$WORKLOADS" | while IFS='|' read -r name model size precision; do
        if [ $((r % 2)) = 1 ]; then
            bench "$A" before "$name" "$model" "$size" "$precision"
            bench "$B" after "$name" "$model" "$size" "$precision"
        else
            bench "$B" after "$name" "$model" "$size" "$precision"
            bench "$A" before "$name" "$model" "$size" "$precision"
        fi
    done
done
$PY - "$OUT" <<'PY' | tee "$OUT/table.md"
import json, statistics, sys, glob, os
out = sys.argv[1]
def med(name, tag):
    rows = [json.loads(l) for l in open(f"{out}/{name}-{tag}.jsonl") if l.strip()]
    return statistics.median(r["ms_median"] for r in rows), [r["ms_median"] for r in rows]
names = sorted({os.path.basename(f).rsplit("-", 1)[0] for f in glob.glob(f"{out}/*.jsonl")})
print("| workload | before ms (rounds) | after ms (rounds) | after / before |")
print("|---|---|---|---|")
for n in names:
    b, br = med(n, "before")
    a, ar = med(n, "after")
    fmt = lambda v: " ".join(f"{x:.0f}" for x in v)
    print(f"| {n} | {b:.1f} ({fmt(br)}) | {a:.1f} ({fmt(ar)}) | {a / b:.3f} |")
PY
