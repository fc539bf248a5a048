#!/bin/sh
# Every engine path's output on the suite's inputs, for a byte-for-byte comparison before and
# after an engine change (issue 29: "outputs bit-identical"):
#   tools/engine_outputs.sh BIN OUTDIR     writes OUTDIR/*.png (and a list of what failed)
#   cmp -s, or: diff -r BEFORE AFTER
# Each bundled generator in fp32, bf16 and int8 (those this CPU runs) and on the reference
# backend; the restore fixtures (GPEN, GFPGAN) in fp32, bf16 and int8; the upscalers (bundled
# ESRGANs and the Real-ESRGAN fixtures) in each precision; convert --restore-faces --upscale;
# the full-size GPEN-BFR-512 and GFPGAN v1.4 (seeded weights) in each precision when made.
set -u
cd "$(dirname "$0")/.."
BIN=$1
OUT=$2
mkdir -p "$OUT"
export ANIMEGAN_MODEL_PATH=$PWD/models
IMG=tests/data/astronaut.png
SMALL=$OUT/small.png
"$BIN" convert "$IMG" -o "$SMALL" --max-side 96 --model hayao --precision fp32 -q 2>/dev/null
run() { # NAME ARGS...
    name=$1
    shift
    "$BIN" "$@" -o "$OUT/$name.png" -q 2>"$OUT/$name.err" || echo "$name: failed" >>"$OUT/failed"
}
for m in hayao hayao-v3 shinkai-v3 cute-v3; do
    for p in fp32 bf16 int8; do
        run "convert_${m}_$p" convert "$IMG" --model "$m" --precision "$p" --max-side 256
    done
    run "convert_${m}_reference" convert "$IMG" --model "$m" --precision fp32 --backend reference \
        --max-side 64
done
for net in gpen64_zip gfpgan64_zip; do
    for p in fp32 bf16 int8; do
        run "restore_${net}_$p" restore "$IMG" --model "tests/fixtures/restore/$net.pt" \
            --precision "$p"
    done
done
for m in esrgan-slim esrgan-medium tests/fixtures/upscale/animevideov3.pth \
    tests/fixtures/upscale/general-x4v3.pth tests/fixtures/upscale/x2plus.pth; do
    for p in fp32 bf16 int8; do
        run "upscale_$(basename "$m" .pth)_$p" upscale "$SMALL" --model "$m" --precision "$p"
    done
done
# The full-size restorers when made (tools/make_restore_bench_models.py, as bench/restore.sh
# and bench/engine_ab.sh do): the fixtures' nets are too small for the Winograd kind.
FULL=${AG_BENCH_MODELS:-bench/results/restore-models}
for net in gpen_bfr_512.pt gfpgan_v1.4.pth; do
    [ -f "$FULL/$net" ] || continue
    for p in fp32 bf16 int8; do
        run "restore_full_${net%%.*}_$p" restore "$IMG" --model "$FULL/$net" --precision "$p"
    done
done
run convert_restore_upscale convert "$IMG" --max-side 256 \
    --restore-faces tests/fixtures/restore/gpen64_zip.pt --upscale 2 \
    --precision fp32
ls "$OUT"/*.png | wc -l
