#!/usr/bin/env bash
# restore.sh - the face restorers against ONNX Runtime and PyTorch on this machine,
# interleaved in one run.
#
#   bench/restore.sh [--rounds N] [--runs R] [--threads T] [--models DIR] [--no-rss]
#                    [--codeformer CODEFORMER_DIR] [--gpen GPEN_DIR] [--gfpgan GFPGAN_DIR]
#                    [--face PHOTO] [--nets "gpen gfpgan codeformer"]
#
# Networks: GPEN-BFR-512 and GFPGANv1.4 (and, with a sczhou/CodeFormer checkout, CodeFormer)
# at full size with seeded random weights in the released files' exact key layouts
# (tools/make_restore_bench_models.py writes them into --models DIR, default
# bench/results/restore-models, once; the speed of a network does not depend on its
# weights). Each round runs, in turn: our engine (`animegan bench --model M`, one face) in
# fp32 and in the default precision (auto: bf16 products where they are native and faster,
# else fp32 again, then not repeated), PyTorch 1.13 eager on the same network and weights
# (bench/peers/restore_torch.py: upstream's own classes for CodeFormer, and for GPEN / GFPGAN
# when --gpen / --gfpgan name their checkouts, else tools/gpen_reference.py and
# tools/gfpgan_reference.py), ONNX Runtime (bench/peers/ort_bench.js, npm's onnxruntime-node)
# on the network exported with torch.onnx.export from the upstream code
# (bench/export_restore_onnx.py, once into --models DIR; needs the network's checkout; its
# output checked against PyTorch's first) and the FMA peak loop (bench/fma_peak.c, AVX2 and
# AVX-512 where the CPU has it; the higher is the peak), all on --threads cores. Then the
# peak RSS of one `animegan restore --aligned` of a 512x512 face per network and precision,
# and bf16 and int8 against fp32 on a real face: --face PHOTO (default
# ../shared/testdata/faces/obama.jpg) downscaled 4x and saved as JPEG quality 35, restored
# whole (PSNR over the face's changed pixels and over the photo). Prints a table; raw lines
# go to bench/results/restore-<date>/. --nets runs only those networks.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
PY=/usr/bin/python3
ROUNDS=3 RUNS=3 THREADS=2 RSS=1 MODELS=bench/results/restore-models CODEFORMER= GPEN_DIR=
GFPGAN_DIR= FACE=../shared/testdata/faces/obama.jpg ONLY=

die() { echo "restore.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) ROUNDS=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --models) MODELS=$2; shift ;;
    --no-rss) RSS=0 ;;
    --codeformer) CODEFORMER=$(cd "$2" && pwd); shift ;;
    --gpen) GPEN_DIR=$(cd "$2" && pwd); shift ;;
    --gfpgan) GFPGAN_DIR=$(cd "$2" && pwd); shift ;;
    --face) FACE=$2; shift ;;
    --nets) ONLY=$2; shift ;;
    -h | --help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1'" ;;
    esac
    shift
done

export FACE
[ -x "$BUILD/animegan" ] || die "build first: make -j2"
$PY -c 'import torch' 2>/dev/null || die "needs Debian's python3-torch (scripts/install-deps.sh --all)"
OUT=bench/results/restore-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$OUT" "$BUILD/bench"
$PY tools/make_restore_bench_models.py "$MODELS" $CODEFORMER >/dev/null
GPEN=$MODELS/gpen_bfr_512.pt GFPGAN=$MODELS/gfpgan_v1.4.pth CF=$MODELS/codeformer.pth
NETS="gpen gfpgan"
[ -n "$CODEFORMER" ] && NETS="gpen gfpgan codeformer"
[ -n "$ONLY" ] && NETS=$ONLY
model_of() { case $1 in gpen) echo "$GPEN" ;; gfpgan) echo "$GFPGAN" ;; *) echo "$CF" ;; esac; }
upstream_of() { case $1 in gpen) echo "$GPEN_DIR" ;; gfpgan) echo "$GFPGAN_DIR" ;; *) echo "$CODEFORMER" ;; esac; }
ORT=bench/node_modules/onnxruntime-node/package.json
if [ ! -f "$ORT" ] && command -v npm >/dev/null; then
    (cd bench && npm ci --ignore-scripts --no-audit --no-fund >/dev/null 2>&1) || true
fi
# The ONNX Runtime peer: each network with an upstream checkout exported once, checked once.
for net in $NETS; do
    up=$(upstream_of $net)
    [ -n "$up" ] && [ -f "$ORT" ] || continue
    [ -f "$MODELS/$net.onnx" ] ||
        $PY bench/export_restore_onnx.py --net $net --pth "$(model_of $net)" --upstream "$up" \
            --output "$MODELS/$net.onnx" --check "$MODELS/$net" >/dev/null
    node bench/peers/ort_bench.js --model "$MODELS/$net.onnx" --runs 1 --warmup 0 \
        --threads "$THREADS" --check "$MODELS/$net" >"$OUT/ortcheck-$net.json"
done

. bench/fma_peaks.sh

for r in $(seq "$ROUNDS"); do
    for net in $NETS; do
        m=$(model_of $net)
        "$BUILD/animegan" bench --model "$m" --runs "$RUNS" --threads "$THREADS" \
            --precision fp32 >>"$OUT/ours-$net.jsonl"
        "$BUILD/animegan" bench --model "$m" --runs "$RUNS" --threads "$THREADS" \
            --precision auto >"$OUT/auto.json"
        grep -q '"precision": "fp32"' "$OUT/auto.json" || cat "$OUT/auto.json" >>"$OUT/ours-$net.jsonl"
        peer=()
        [ "$net" = codeformer ] && peer=(--codeformer "$CODEFORMER")
        [ "$net" != codeformer ] && [ -n "$(upstream_of $net)" ] && peer=(--upstream "$(upstream_of $net)")
        $PY bench/peers/restore_torch.py --pth "$m" --runs "$RUNS" --threads "$THREADS" \
            "${peer[@]+"${peer[@]}"}" >>"$OUT/torch-$net.jsonl"
        [ -f "$OUT/ortcheck-$net.json" ] &&
            node bench/peers/ort_bench.js --model "$MODELS/$net.onnx" --runs "$RUNS" \
                --threads "$THREADS" >>"$OUT/ort-$net.jsonl"
    done
    for isa in $peaks; do
        "$BUILD/bench/fma_peak_$isa" --threads "$THREADS" --seconds 2 >>"$OUT/peak.jsonl"
    done
done

if [ "$RSS" = 1 ]; then
    $PY - "$OUT/face512.png" <<'PY'
import sys
from PIL import Image
Image.open("tests/data/astronaut.png").convert("RGB").resize((512, 512), Image.LANCZOS).save(sys.argv[1])
PY
    for net in $NETS; do
        m=$(model_of $net)
        for p in fp32 auto; do
            /usr/bin/time -v "$BUILD/animegan" restore "$OUT/face512.png" -o "$OUT/$net-$p.png" \
                --model "$m" --aligned --threads "$THREADS" --precision $p -q \
                2>"$OUT/rss-$net-$p.txt" ||
                die "restore with $m failed: $(tail -1 "$OUT/rss-$net-$p.txt")"
        done
        $PY - "$OUT/$net-fp32.png" "$OUT/$net-auto.png" >"$OUT/psnr-$net.txt" <<'PY'
import sys
import numpy as np
from PIL import Image
a, b = (np.asarray(Image.open(f), dtype=np.float64) for f in sys.argv[1:3])
mse = ((a - b) ** 2).mean()
print("%.1f" % (10 * np.log10(255 ** 2 / mse)) if mse else "inf")
PY
        rm -f "$OUT/$net-fp32.png" "$OUT/$net-auto.png"
    done
fi

# bf16 and int8 against fp32 on a real face, downscaled and recompressed as old photos are.
if [ -f "$FACE" ]; then
    $PY - "$FACE" "$OUT/face_small.jpg" <<'PY'
import sys
from PIL import Image
im = Image.open(sys.argv[1]).convert("RGB")
im.resize((im.width // 4, im.height // 4), Image.LANCZOS).save(sys.argv[2], quality=35)
PY
    for net in $NETS; do
        for p in fp32 bf16 int8; do
            "$BUILD/animegan" restore "$OUT/face_small.jpg" -o "$OUT/real-$net-$p.png" \
                --model "$(model_of $net)" --threads "$THREADS" --precision $p -q \
                2>"$OUT/real-$net-$p.err" || rm -f "$OUT/real-$net-$p.png"
        done
        [ -f "$OUT/real-$net-fp32.png" ] || { echo "real face, $net: $(tail -1 "$OUT/real-$net-fp32.err")"; continue; }
        $PY - "$OUT/face_small.jpg" "$OUT/real-$net" >"$OUT/realdb-$net.txt" <<'PY'
import os, sys
import numpy as np
from PIL import Image
src = np.asarray(Image.open(sys.argv[1]).convert("RGB"), dtype=np.float64)
ref = np.asarray(Image.open(sys.argv[2] + "-fp32.png"), dtype=np.float64)
face = (ref != src).any(axis=2)  # the pixels restoration changed
def db(a, b):
    mse = ((a - b) ** 2).mean()
    return 10 * np.log10(255 ** 2 / mse) if mse else float("inf")
for p in ("bf16", "int8"):
    if os.path.exists(sys.argv[2] + "-%s.png" % p):
        out = np.asarray(Image.open(sys.argv[2] + "-%s.png" % p), dtype=np.float64)
        print("%s %.1f %.1f %d" % (p, db(out[face], ref[face]), db(out, ref), face.sum()))
PY
    done
fi

$PY - "$OUT" <<'PY'
import glob, json, os, re, sys
out = sys.argv[1]
def rows(f):
    return [json.loads(l) for l in open(os.path.join(out, f)) if l.strip()]
peak_rows = rows("peak.jsonl")
peak = max(r["gflops"] for r in peak_rows)
cpu = rows(os.path.basename(sorted(glob.glob(os.path.join(out, "ours-*.jsonl")))[0]))[0]["cpu"]
print("CPU: %s; FMA peak %.0f GFLOP/s on %d threads (%s)" % (
    cpu, peak, peak_rows[0]["threads"], max(peak_rows, key=lambda r: r["gflops"])["isa"]))
print("| network 512x512, one face | runtime | ms (best round median) | GFLOP/s | % of fp32 FMA peak | vs ONNX Runtime | vs PyTorch | peak RSS of one restore | PSNR vs fp32 |")
print("|---|---|---|---|---|---|---|---|---|")
def read(path, pattern):
    if not os.path.exists(path):
        return ""
    m = re.search(pattern, open(path).read())
    return m.group(1) if m else ""
for net, name in (("gpen", "GPEN-BFR-512"), ("gfpgan", "GFPGANv1.4"), ("codeformer", "CodeFormer")):
    if not os.path.exists(os.path.join(out, "ours-%s.jsonl" % net)):
        continue
    ours = rows("ours-%s.jsonl" % net)
    torch_rows = rows("torch-%s.jsonl" % net)
    torch_ms = min(r["ms_median"] for r in torch_rows)
    ort = rows("ort-%s.jsonl" % net) if os.path.exists(os.path.join(out, "ort-%s.jsonl" % net)) else []
    ort_ms = min(r["ms_median"] for r in ort) if ort else None
    vs_ort = lambda ms: "%.2fx" % (ort_ms / ms) if ort_ms else ""
    first = True
    for precision in ("fp32", "bf16"):
        mine = [r for r in ours if r["precision"] == precision]
        if not mine:
            continue
        best = min(mine, key=lambda r: r["ms_median"])
        p = "fp32" if precision == "fp32" else "auto"
        kb = read(os.path.join(out, "rss-%s-%s.txt" % (net, p)), r"Maximum resident set size \(kbytes\): (\d+)")
        rss = "%d MB" % (int(kb) // 1000) if kb else ""
        db = read(os.path.join(out, "psnr-%s.txt" % net), r"(\S+)") if precision != "fp32" else ""
        ms = best["ms_median"]
        gflops = best["gflop"] / ms * 1e3
        label = "animegan %s%s" % (precision, " (default)" if precision != "fp32" else "")
        print("| %s | %s | %.0f | %.0f | %.0f%% | %s | %.2fx | %s | %s |" % (
            name if first else "", label, ms, gflops, 100 * gflops / peak, vs_ort(ms),
            torch_ms / ms, rss, db + " dB" if db else ""))
        first = False
        flop = best["gflop"]
    if ort_ms:
        check = rows("ortcheck-%s.json" % net)[0].get("check_max_abs")
        print("| | ONNX Runtime %s fp32 (torch.onnx.export of upstream; max abs vs PyTorch %s) | %.0f | %.0f | %.0f%% | 1.00x | %.2fx | | |" % (
            ort[0]["version"], check, ort_ms, flop / ort_ms * 1e3, 100 * flop / ort_ms * 1e3 / peak,
            torch_ms / ort_ms))
    print("| | PyTorch 1.13 eager fp32 (%s) | %.0f | %.0f | %.0f%% | %s | 1.00x | | |" % (
        "upstream code" if torch_rows[0].get("upstream") else "tools/ reference", torch_ms,
        flop / torch_ms * 1e3, 100 * flop / torch_ms * 1e3 / peak, vs_ort(torch_ms)))
for f in sorted(glob.glob(os.path.join(out, "realdb-*.txt"))):
    for line in open(f):
        p, face_db, photo_db, px = line.split()
        print("real face (%s, 4x smaller, JPEG q35), %s: %s vs fp32: %s dB over the %s restored pixels, %s dB over the photo" % (
            os.path.basename(os.environ.get("FACE", "face")), f.split("realdb-")[1][:-4], p, face_db, px, photo_db))
PY
