#!/usr/bin/env bash
# restore.sh - the face restorers against PyTorch on this machine, interleaved in one run.
#
#   bench/restore.sh [--rounds N] [--runs R] [--threads T] [--models DIR] [--no-rss]
#
# Networks: GPEN-BFR-512 and GFPGANv1.4 at full size with seeded random weights in the
# released files' exact key layouts (tools/make_restore_bench_models.py writes them into
# --models DIR, default bench/results/restore-models, once: 633 MB; the speed of a network
# does not depend on its weights). Each round runs, in turn: our engine (`animegan bench
# --model M`, fp32, the restorer's only precision, one face), PyTorch 1.13 eager on the same
# network and weights (bench/peers/restore_torch.py over tools/gpen_reference.py and
# tools/gfpgan_reference.py) and the FMA peak loop (bench/fma_peak.c, built for AVX2 and for
# AVX-512 when the CPU has it; the higher is the peak), all on --threads cores. Then the peak
# RSS of one `animegan restore --aligned` of a 512x512 face per network, under
# /usr/bin/time -v. Prints a table; raw lines go to bench/results/restore-<date>/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
PY=/usr/bin/python3
ROUNDS=3 RUNS=3 THREADS=2 RSS=1 MODELS=bench/results/restore-models

die() { echo "restore.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) ROUNDS=$2; shift ;;
    --runs) RUNS=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --models) MODELS=$2; shift ;;
    --no-rss) RSS=0 ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1'" ;;
    esac
    shift
done

[ -x "$BUILD/animegan" ] || die "build first: make -j2"
$PY -c 'import torch' 2>/dev/null || die "needs Debian's python3-torch (scripts/install-deps.sh --all)"
OUT=bench/results/restore-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$OUT" "$BUILD/bench"
$PY tools/make_restore_bench_models.py "$MODELS" >/dev/null
GPEN=$MODELS/gpen_bfr_512.pt GFPGAN=$MODELS/gfpgan_v1.4.pth

peaks="avx2"
cc -O2 -DFMA_AVX2 -mavx2 -mfma -pthread bench/fma_peak.c -o "$BUILD/bench/fma_peak_avx2" ||
    die "cannot build bench/fma_peak.c"
if grep -qw avx512f /proc/cpuinfo; then
    cc -O2 -mavx512f -mfma -pthread bench/fma_peak.c -o "$BUILD/bench/fma_peak_avx512"
    peaks="avx2 avx512"
fi

for r in $(seq "$ROUNDS"); do
    for net in gpen gfpgan; do
        m=$GPEN; [ "$net" = gfpgan ] && m=$GFPGAN
        "$BUILD/animegan" bench --model "$m" --runs "$RUNS" --threads "$THREADS" \
            >>"$OUT/ours-$net.jsonl"
        $PY bench/peers/restore_torch.py --pth "$m" --runs "$RUNS" --threads "$THREADS" \
            >>"$OUT/torch-$net.jsonl"
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
    for net in gpen gfpgan; do
        m=$GPEN; [ "$net" = gfpgan ] && m=$GFPGAN
        /usr/bin/time -v "$BUILD/animegan" restore "$OUT/face512.png" -o "$OUT/$net.png" \
            --model "$m" --aligned --threads "$THREADS" -q 2>"$OUT/rss-$net.txt" ||
            die "restore with $m failed: $(tail -1 "$OUT/rss-$net.txt")"
        rm -f "$OUT/$net.png"
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
print("| network 512x512, one face | runtime | ms (best round median) | GFLOP/s | % of FMA peak | vs PyTorch | peak RSS of one restore |")
print("|---|---|---|---|---|---|---|")
for net, name in (("gpen", "GPEN-BFR-512"), ("gfpgan", "GFPGANv1.4")):
    best = min(rows("ours-%s.jsonl" % net), key=lambda r: r["ms_median"])
    torch_ms = min(r["ms_median"] for r in rows("torch-%s.jsonl" % net))
    rss = ""
    path = os.path.join(out, "rss-%s.txt" % net)
    if os.path.exists(path):
        kb = re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(path).read())
        rss = "%d MB" % (int(kb.group(1)) // 1000) if kb else ""
    ms = best["ms_median"]
    gflops = best["gflop"] / ms * 1e3
    print("| %s | animegan fp32 | %.0f | %.0f | %.0f%% | %.2fx | %s |" % (
        name, ms, gflops, 100 * gflops / peak, torch_ms / ms, rss))
    print("| | PyTorch 1.13 eager | %.0f | %.0f | %.0f%% | 1.00x | |" % (
        torch_ms, best["gflop"] / torch_ms * 1e3, 100 * best["gflop"] / torch_ms * 1e3 / peak))
PY
