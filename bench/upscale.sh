#!/usr/bin/env bash
# upscale.sh - the upscalers against PyTorch on this machine, interleaved in one run.
#
#   bench/upscale.sh [--rounds N] [--runs R] [--size S] [--threads T] [--rss-only] [--no-rss]
#
# Networks: realesr-animevideov3 x4 (SRVGGNetCompact, 64 features, 16 convs; seeded random
# weights at the real size, written by tools/realesrgan_reference.py: the speed of a network
# does not depend on its weights) and the bundled esrgan-medium x2 (UpscalerJS RDN). Each
# round runs, in turn: our engine (`animegan bench --model M`, precisions auto and fp32, one
# whole-image pass), PyTorch 1.13 eager on the same network and weights
# (bench/peers/upscale_torch.py) and the FMA peak loop (bench/fma_peak.c, built for AVX2 and,
# where the CPU has it, AVX-512: the peak is the faster; bench/fma_peaks.sh), all on
# --threads cores at --size x --size with R timed runs after a warm-up. Then the peak RSS
# of `animegan upscale` on a 4000x3000 photo x4 (esrgan-slim, default --max-mb), under
# /usr/bin/time -v. Prints a table; raw lines go to bench/results/upscale-<date>/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
PY=/usr/bin/python3
# The original TF.js files (the PyTorch peer of esrgan-medium reads them).
UPSCALE_SRC=${AG_UPSCALE_SRC:-$ROOT/../shared/models/upscale}
ROUNDS=3 RUNS=3 SIZE=512 THREADS=2 RSS=1 BENCH=1

die() { echo "upscale.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) ROUNDS=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    --size) SIZE=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --rss-only) BENCH=0 ;;
    --no-rss) RSS=0 ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1'" ;;
    esac
    shift
done

[ -x "$BUILD/animegan" ] || die "build first: make -j2"
OUT=bench/results/upscale-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$OUT" "$BUILD/bench"
export ANIMEGAN_MODEL_PATH=$ROOT/models
ANIME=$OUT/animevideov3-random.pth
$PY - "$ANIME" <<'PY'
import sys, torch
sys.path.insert(0, "tools")
import realesrgan_reference as R
torch.manual_seed(7)
net = R.SRVGG(64, 16, 4)
torch.save({"params": net.state_dict()}, sys.argv[1])
PY
. bench/fma_peaks.sh

if [ "$BENCH" = 1 ]; then
    for r in $(seq "$ROUNDS"); do
        for p in auto fp32; do
            "$BUILD/animegan" bench --model "$ANIME" --size "$SIZE" --runs "$RUNS" \
                --threads "$THREADS" --precision "$p" >>"$OUT/ours-anime-$p.jsonl"
            "$BUILD/animegan" bench --model esrgan-medium-x2 --size "$SIZE" --runs "$RUNS" \
                --threads "$THREADS" --precision "$p" >>"$OUT/ours-medium-$p.jsonl"
        done
        $PY bench/peers/upscale_torch.py --pth "$ANIME" --size "$SIZE" --runs "$RUNS" \
            --threads "$THREADS" >>"$OUT/torch-anime.jsonl"
        $PY bench/peers/upscale_torch.py --tfjs "$UPSCALE_SRC/esrgan-medium/x2" \
            --size "$SIZE" --runs "$RUNS" --threads "$THREADS" >>"$OUT/torch-medium.jsonl"
        for isa in $peaks; do
            "$BUILD/bench/fma_peak_$isa" --threads "$THREADS" --seconds 2 >>"$OUT/peak.jsonl"
        done
    done
    $PY - "$OUT" "$SIZE" <<'PY'
import json, sys, glob, os
out, size = sys.argv[1], int(sys.argv[2])
def rows(f):
    return [json.loads(l) for l in open(os.path.join(out, f)) if l.strip()]
peak_rows = rows("peak.jsonl")
peak = max(r["gflops"] for r in peak_rows)
print("CPU: %s; FMA peak %.0f GFLOP/s on %d threads (%s)" % (
    rows("ours-anime-fp32.jsonl")[0]["cpu"], peak, peak_rows[0]["threads"],
    max(peak_rows, key=lambda r: r["gflops"])["isa"]))
print("| network %dx%d | runtime | ms (best round median) | GFLOP/s | %% of FMA peak %.0f | MP/s out | vs PyTorch |" % (size, size, peak))
print("|---|---|---|---|---|---|---|")
for net, scale in (("anime", 4), ("medium", 2)):
    torch_ms = min(r["ms_median"] for r in rows("torch-%s.jsonl" % net))
    for p in ("auto", "fp32"):
        rs = rows("ours-%s-%s.jsonl" % (net, p))
        best = min(rs, key=lambda r: r["ms_median"])
        ms = best["ms_median"]
        mp = size * size * scale * scale / ms / 1e3
        print("| %s x%d | animegan %s (%s) | %.0f | %.0f | %.0f%% | %.2f | %.2fx |" % (
            "realesr-animevideov3" if net == "anime" else "esrgan-medium", scale, p,
            best["precision"], ms, best["gflop"] / ms * 1e3, 100 * best["gflop"] / ms * 1e3 / peak,
            mp, torch_ms / ms))
    print("| | PyTorch 1.13 eager | %.0f | | | %.2f | 1.00x |" % (torch_ms, size * size * scale * scale / torch_ms / 1e3))
PY
fi

if [ "$RSS" = 1 ]; then
    $PY - "$OUT/photo-4000x3000.png" <<'PY'
import sys
from PIL import Image
Image.open("tests/data/astronaut.png").convert("RGB").resize((4000, 3000), Image.LANCZOS).save(sys.argv[1])
PY
    /usr/bin/time -v "$BUILD/animegan" upscale "$OUT/photo-4000x3000.png" -o "$OUT/x4.png" \
        --model esrgan-slim --scale 4 --threads "$THREADS" -q 2>"$OUT/rss.txt" || die "upscale failed"
    kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$OUT/rss.txt")
    wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$OUT/rss.txt")
    echo "4000x3000 -> 16000x12000 (esrgan-slim x4, default --max-mb): peak RSS $((kb / 1000)) MB, wall $wall"
    rm -f "$OUT/x4.png" "$OUT/photo-4000x3000.png"
fi
