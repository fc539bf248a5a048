#!/bin/sh
# make_v3_test_models.sh - write the ONNX test models of the v3 fixtures into build/v3/ (run
# from the repository root; needs python3-onnx and python3-numpy, the Shinkai .pb
# (tests/fixtures/v3/AnimeGANv3_Shinkai_37.pb, a copy of the author's file) and
# tests/fixtures/onnx/AnimeGANv3_tiny_Cute.onnx):
#   build/v3/AnimeGANv3_Shinkai_37.onnx  full v3 in tf2onnx's vocabulary, from the .pb
#   build/v3/cute_p{1,2,3}.onnx          AnimeGANv3_tiny_Cute.onnx with perturbed weights
# Deterministic (byte-identical on every run); a file already up to date is not rewritten.
set -eu
SRC="${V3_SRC:-tests/fixtures/v3}"
PY=/usr/bin/python3
CUTE=tests/fixtures/onnx/AnimeGANv3_tiny_Cute.onnx
[ -f "$CUTE" ] || CUTE="$SRC/AnimeGANv3_tiny_Cute.onnx"
mkdir -p build/v3
if [ ! -f build/v3/AnimeGANv3_Shinkai_37.onnx ] ||
   [ tools/make_v3_onnx.py -nt build/v3/AnimeGANv3_Shinkai_37.onnx ]; then
    $PY tools/make_v3_onnx.py --input "$SRC/AnimeGANv3_Shinkai_37.pb" \
        --output build/v3/AnimeGANv3_Shinkai_37.onnx
fi
for seed in 1 2 3; do
    out=build/v3/cute_p$seed.onnx
    if [ ! -f "$out" ] || [ tools/perturb_onnx.py -nt "$out" ]; then
        $PY tools/perturb_onnx.py --seed $seed --input "$CUTE" \
            --output "$out"
    fi
done
