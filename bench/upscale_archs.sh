#!/usr/bin/env bash
# upscale_archs.sh - each upscaler architecture users download, against PyTorch running the
# upstream code and ONNX Runtime running its ONNX export, interleaved in one run.
#
#   bench/upscale_archs.sh --spandrel DIR [--archs "esrgan esrgan_new compact span realplksr"]
#                          [--rounds N] [--runs R] [--size S] [--threads T]
#                          [--megapixel "ARCHS"] [--megapixel-only] [--models OUTDIR]
#                          [--omp-wait active|passive]
#
# DIR is a checkout of github.com/chaiNNer-org/spandrel (fetched outside the repository).
# Networks at their released sizes, x4, seeded weights (bench/peers/upscale_arch_peer.py):
# ESRGAN old keys 64 features 23 blocks growth 32 (4x-UltraSharp's shape; esrgan_new: the
# same network in Real-ESRGAN/BasicSR's keys, RealESRGAN_x4plus's layout), Compact 64
# features 16 convs (realesr-animevideov3's), SPAN 48 features, RealPLKSR 64 dim 28 blocks
# 17x17. Each round runs, per architecture in turn: our engine (`animegan bench`, precisions
# auto and fp32), PyTorch eager on spandrel's class, onnxruntime-node on the ONNX export
# (bench/peers/ort_bench.js; `npm ci --ignore-scripts` in bench/), then the FMA peak loop
# (bench/fma_peaks.sh); all on --threads cores at S x S (default 256: a 1-megapixel input of
# the large networks takes minutes per run on 2 cores) with R timed runs after a warm-up.
# Prints a table (best round's median per row; MP/s of input and of output); raw lines go
# to bench/results/upscale-archs-<date>/. --megapixel (default: every arch; "" for none)
# then runs `animegan upscale` once per arch on a 1024x1024 photo (1.05 megapixels in, PNG
# in and out, tiled within the default --max-mb 1024, default precision, x4: the usual scale
# of these files) and prints megapixels per second in and out, wall and CPU time (on a
# shared machine the CPU seconds / 2 approximate the wall time of two free cores) and peak
# RSS; --megapixel-only skips the rounds. --models takes the networks (and their ONNX exports,
# made at the same --size) from an earlier run's directory instead of making them again.
# --omp-wait exports OMP_WAIT_POLICY for every runtime (ours, PyTorch; ONNX Runtime has its own
# pool): passive lets a waiting thread sleep, which a loaded machine needs (docs/upscale.md).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
PY=/usr/bin/python3
ARCHS="esrgan esrgan_new compact span realplksr" ROUNDS=2 RUNS=2 SIZE=256 THREADS=2 SPANDREL=
MP_ARCHS=default MP_ONLY=0 MODELS= OMP_WAIT=

die() { echo "upscale_archs.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
    case $1 in
    --spandrel) SPANDREL=$2; shift ;;
    --archs) ARCHS=$2; shift ;;
    --rounds) ROUNDS=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    --size) SIZE=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --megapixel) MP_ARCHS=$2; shift ;;
    --megapixel-only) MP_ONLY=1 ;;
    --models) MODELS=$2; shift ;;
    --omp-wait) OMP_WAIT=$2; shift ;;
    -h | --help) sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1'" ;;
    esac
    shift
done
[ "$MP_ARCHS" != default ] || MP_ARCHS=$ARCHS
case $OMP_WAIT in
'') ;;
active | passive) export OMP_WAIT_POLICY=$OMP_WAIT ;;
*) die "--omp-wait takes active or passive" ;;
esac
[ -n "$SPANDREL" ] || die "--spandrel DIR (a chaiNNer-org/spandrel checkout) is required"
[ -x "$BUILD/animegan" ] || die "build first: make -j2"
[ "$MP_ONLY" = 1 ] || [ -f bench/node_modules/onnxruntime-node/package.json ] ||
    (cd bench && npm ci --ignore-scripts --no-audit --no-fund) || die "npm ci in bench/ failed"
OUT=bench/results/upscale-archs-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$OUT" "$BUILD/bench"
peer() { $PY bench/peers/upscale_arch_peer.py --spandrel "$SPANDREL" "$@"; }
[ "$MP_ONLY" = 0 ] || ROUNDS=0 ARCHS=$MP_ARCHS
# esrgan_new is esrgan's network in other keys: spandrel loads both into the same module and
# exports the same ONNX graph, so its PyTorch and ONNX Runtime rows are esrgan's (when both run).
peer_of() { case " $ARCHS " in *" esrgan "*) [ "$1" = esrgan_new ] && echo esrgan && return ;; esac; echo "$1"; }
for a in $ARCHS; do
    if [ -n "$MODELS" ]; then # an earlier run's files (the same seeds; ONNX at the same --size)
        cp "$MODELS/$a.pth" "$OUT/"
        [ ! -f "$MODELS/$a.onnx" ] || cp "$MODELS/$a.onnx" "$OUT/"
    elif [ "$ROUNDS" -gt 0 ] && [ "$(peer_of "$a")" != "$a" ]; then
        peer --make "$a" --out "$OUT/$a.pth"
    elif [ "$ROUNDS" -gt 0 ]; then
        peer --make "$a" --out "$OUT/$a.pth" --onnx "$OUT/$a.onnx" --size "$SIZE" 2>/dev/null
    else peer --make "$a" --out "$OUT/$a.pth"; fi
done
[ "$ROUNDS" = 0 ] || . bench/fma_peaks.sh
for r in $(seq "$ROUNDS"); do
    for a in $ARCHS; do
        for p in auto fp32; do
            "$BUILD/animegan" bench --model "$OUT/$a.pth" --size "$SIZE" --runs "$RUNS" \
                --threads "$THREADS" --precision "$p" >>"$OUT/ours-$a-$p.jsonl"
        done
        [ "$(peer_of "$a")" = "$a" ] || continue
        peer --bench "$OUT/$a.pth" --size "$SIZE" --runs "$RUNS" --threads "$THREADS" \
            >>"$OUT/torch-$a.jsonl"
        node bench/peers/ort_bench.js --model "$OUT/$a.onnx" --size "$SIZE" --runs "$RUNS" \
            --threads "$THREADS" >>"$OUT/ort-$a.jsonl"
    done
    for isa in $peaks; do
        "$BUILD/bench/fma_peak_$isa" --threads "$THREADS" --seconds 2 >>"$OUT/peak.jsonl"
    done
done
uptime >"$OUT/load.txt"

# One megapixel through the whole command, per architecture.
if [ -n "$MP_ARCHS" ]; then
    $PY -c "from PIL import Image; import sys; \
Image.open('tests/data/astronaut.png').convert('RGB').resize((1024, 1024), Image.LANCZOS) \
.save(sys.argv[1])" "$OUT/mp.png"
    for a in $MP_ARCHS; do
        t0=$(date +%s.%N)
        /usr/bin/time -f '%M %U %S' -o "$OUT/mp-$a.time" "$BUILD/animegan" upscale \
            "$OUT/mp.png" -o "$OUT/mp-$a-out.png" --model "$OUT/$a.pth" --threads "$THREADS" -q
        t1=$(date +%s.%N)
        read -r rss user sys <"$OUT/mp-$a.time"
        echo "{\"arch\": \"$a\", \"seconds\": $(echo "$t1 - $t0" | awk '{print $1 - $3}'), \
\"cpu_seconds\": $(echo "$user + $sys" | awk '{print $1 + $3}'), \"rss_kb\": $rss}" \
            >>"$OUT/megapixel.jsonl"
        rm -f "$OUT/mp-$a-out.png"
    done
    uptime >>"$OUT/load.txt"
fi

if [ "$ROUNDS" -gt 0 ]; then
$PY - "$OUT" "$SIZE" "$ARCHS" <<'PY'
import json, os, sys
out, size, archs = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
names = {"esrgan": "ESRGAN/RRDBNet 64f 23b (old keys)",
         "esrgan_new": "ESRGAN/RRDBNet 64f 23b (BasicSR keys)", "compact": "Compact 64f 16c", "span": "SPAN 48f",
         "realplksr": "RealPLKSR 64d 28b 17x17"}
def rows(f):
    return [json.loads(l) for l in open(os.path.join(out, f)) if l.strip()]
peak_rows = rows("peak.jsonl")
peak = max(r["gflops"] for r in peak_rows)
print("CPU: %s; FMA peak %.0f GFLOP/s on %d threads; %s" % (
    rows("ours-%s-fp32.jsonl" % archs[0])[0]["cpu"], peak, peak_rows[0]["threads"],
    open(os.path.join(out, "load.txt")).read().strip()))
print("| network x4, %dx%d in | runtime | ms | GFLOP/s | %% of peak | MP/s in | MP/s out | vs PyTorch | vs ONNX Runtime |" % (size, size))
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
mp_in = size * size / 1e6
for a in archs:
    pa = "esrgan" if a == "esrgan_new" and "esrgan" in archs else a  # its peers' rows
    t = min(r["ms_median"] for r in rows("torch-%s.jsonl" % pa))
    o = min(r["ms_median"] for r in rows("ort-%s.jsonl" % pa))
    for p in ("auto", "fp32"):
        best = min(rows("ours-%s-%s.jsonl" % (a, p)), key=lambda r: r["ms_median"])
        ms, gf = best["ms_median"], best["gflop"] / best["ms_median"] * 1e3
        print("| %s | animegan %s (%s) | %.0f | %.0f | %.0f%% | %.3f | %.2f | %.2fx | %.2fx |" % (
            names.get(a, a) if p == "auto" else "", p, best["precision"], ms, gf,
            100 * gf / peak, mp_in / ms * 1e3, 16 * mp_in / ms * 1e3, t / ms, o / ms))
    if pa != a:
        print("| | PyTorch, ONNX Runtime: the rows above (the same network) | | | | | | | |")
        continue
    for label, ms in (("PyTorch %s eager" % rows("torch-%s.jsonl" % a)[0]["version"], t),
                      ("ONNX Runtime (node)", o)):
        print("| | %s | %.0f | | | %.3f | %.2f | %.2fx | %.2fx |" % (
            label, ms, mp_in / ms * 1e3, 16 * mp_in / ms * 1e3, t / ms, o / ms))
PY
fi
if [ -s "$OUT/megapixel.jsonl" ]; then
    $PY - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
names = {"esrgan": "ESRGAN/RRDBNet 64f 23b (old keys)",
         "esrgan_new": "ESRGAN/RRDBNet 64f 23b (BasicSR keys)", "compact": "Compact 64f 16c", "span": "SPAN 48f",
         "realplksr": "RealPLKSR 64d 28b 17x17"}
print("\n1024x1024 in (1.05 MP), x4, `animegan upscale` PNG to PNG, default precision; %s"
      % open(os.path.join(out, "load.txt")).read().strip().replace("\n", "; "))
print("| network x4 | wall s | MP/s in | MP/s out | CPU s | MP/s in per 2 CPU s | peak RSS MB |")
print("|---|---:|---:|---:|---:|---:|---:|")
mp = 1024 * 1024 / 1e6
for l in open(os.path.join(out, "megapixel.jsonl")):
    r = json.loads(l)
    s, cpu = r["seconds"], r["cpu_seconds"]
    print("| %s | %.1f | %.3f | %.2f | %.1f | %.3f | %.0f |" % (
        names.get(r["arch"], r["arch"]), s, mp / s, 16 * mp / s, cpu, 2 * mp / cpu,
        r["rss_kb"] / 1024))
PY
fi
