#!/usr/bin/env bash
# restore.sh - the face restorers against PyTorch on this machine, interleaved in one run.
#
#   bench/restore.sh [--rounds N] [--runs R] [--threads T] [--models DIR] [--no-rss]
#                    [--codeformer CODEFORMER_DIR]
#
# Networks: GPEN-BFR-512 and GFPGANv1.4 (and, with a sczhou/CodeFormer checkout, CodeFormer:
# its PyTorch peer is upstream's own class) at full size with seeded random weights in the
# released files' exact key layouts (tools/make_restore_bench_models.py writes them into
# --models DIR, default bench/results/restore-models, once: 633 MB; the speed of a network
# does not depend on its weights). Each round runs, in turn: our engine (`animegan bench
# --model M`, one face) in fp32 and in the default precision (auto: bf16 products where
# they are native and faster, else fp32 again, then not repeated), PyTorch 1.13 eager on the same
# network and weights (bench/peers/restore_torch.py over tools/gpen_reference.py and
# tools/gfpgan_reference.py) and the FMA peak loop (bench/fma_peak.c, built for AVX2 and for
# AVX-512 when the CPU has it; the higher is the peak), all on --threads cores. Then the peak
# RSS of one `animegan restore --aligned` of a 512x512 face per network and precision, under
# /usr/bin/time -v, and the default precision's PSNR against fp32 on that face. Prints a
# table; raw lines go to bench/results/restore-<date>/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
PY=/usr/bin/python3
ROUNDS=3 RUNS=3 THREADS=2 RSS=1 MODELS=bench/results/restore-models CODEFORMER=

die() { echo "restore.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) ROUNDS=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --models) MODELS=$2; shift ;;
    --no-rss) RSS=0 ;;
    --codeformer) CODEFORMER=$(cd "$2" && pwd); shift ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1'" ;;
    esac
    shift
done

[ -x "$BUILD/animegan" ] || die "build first: make -j2"
$PY -c 'import torch' 2>/dev/null || die "needs Debian's python3-torch (scripts/install-deps.sh --all)"
OUT=bench/results/restore-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$OUT" "$BUILD/bench"
$PY tools/make_restore_bench_models.py "$MODELS" $CODEFORMER >/dev/null
GPEN=$MODELS/gpen_bfr_512.pt GFPGAN=$MODELS/gfpgan_v1.4.pth CF=$MODELS/codeformer.pth
NETS="gpen gfpgan"
[ -n "$CODEFORMER" ] && NETS="gpen gfpgan codeformer"
model_of() { case $1 in gpen) echo "$GPEN" ;; gfpgan) echo "$GFPGAN" ;; *) echo "$CF" ;; esac; }

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
        $PY bench/peers/restore_torch.py --pth "$m" --runs "$RUNS" --threads "$THREADS" \
            "${peer[@]+"${peer[@]}"}" >>"$OUT/torch-$net.jsonl"
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

$PY - "$OUT" <<'PY'
import glob, json, os, re, sys
out = sys.argv[1]
def rows(f):
    return [json.loads(l) for l in open(os.path.join(out, f)) if l.strip()]
peak_rows = rows("peak.jsonl")
peak = max(r["gflops"] for r in peak_rows)
cpu = rows("ours-gpen.jsonl")[0]["cpu"]
print("CPU: %s; FMA peak %.0f GFLOP/s on %d threads (%s)" % (
    cpu, peak, peak_rows[0]["threads"], max(peak_rows, key=lambda r: r["gflops"])["isa"]))
print("| network 512x512, one face | runtime | ms (best round median) | GFLOP/s | % of fp32 FMA peak | vs PyTorch | peak RSS of one restore | PSNR vs fp32 |")
print("|---|---|---|---|---|---|---|---|")
def read(path, pattern):
    if not os.path.exists(path):
        return ""
    m = re.search(pattern, open(path).read())
    return m.group(1) if m else ""
for net, name in (("gpen", "GPEN-BFR-512"), ("gfpgan", "GFPGANv1.4"), ("codeformer", "CodeFormer")):
    if not os.path.exists(os.path.join(out, "ours-%s.jsonl" % net)):
        continue
    ours = rows("ours-%s.jsonl" % net)
    torch_ms = min(r["ms_median"] for r in rows("torch-%s.jsonl" % net))
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
        print("| %s | %s | %.0f | %.0f | %.0f%% | %.2fx | %s | %s |" % (
            name if first else "", label, ms, gflops, 100 * gflops / peak, torch_ms / ms, rss,
            db + " dB" if db else ""))
        first = False
        flop = best["gflop"]
    print("| | PyTorch 1.13 eager fp32 | %.0f | %.0f | %.0f%% | 1.00x | | |" % (
        torch_ms, flop / torch_ms * 1e3, 100 * flop / torch_ms * 1e3 / peak))
PY
