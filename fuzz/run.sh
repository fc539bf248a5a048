#!/bin/sh
# fuzz/run.sh [seconds] - builds the libFuzzer targets (model file parsers, image decode, video
# probe/demux, the face path, the server's request parsers) with clang
# (ASan + UBSan) into build/fuzz/ and runs each for `seconds` (default 20) on one thread,
# seeded from tests/fixtures/pt/, tests/fixtures/onnx/, tests/fixtures/upscale/arch/ (the
# upscalers' .safetensors) and models/*.safetensors. The corpus
# grows across runs in build/fuzz/corpus_*. A crash leaves build/fuzz/crash_*: fix it, then
# copy the input to tests/fixtures/pt/fuzz_<what>.pt (or .safetensors) so test_model_files
# replays it, or to tests/fixtures/onnx/fuzz_<what>.onnx for test_onnx.
set -eu
cd "$(dirname "$0")/.."
seconds=${1:-20}
out=build/fuzz
cc=${FUZZ_CC:-clang}
mkdir -p "$out"

# Gathered tensors are capped lower than in the library so no input spends seconds copying.
flags="-std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=all -Wall -Wextra -Werror -Iinclude
       -DAG_PT_MAX_BYTES=((size_t)64<<20) $(pkg-config --cflags libzip libcjson)"
# The parsers and the graph checks are instrumented; the op table's kernels (which the
# descriptors name but the loaders never run) come from build/libanimegan.a.
src="src/model/tensor_set.c src/model/safetensors.c src/model/pickle.c src/model/pytorch.c
     src/model/onnx_pb.c src/model/onnx_import.c src/model/onnx_patterns.c src/model/onnx_ops.c
     src/graph/graph.c src/graph/op_table.c
     src/util/alloc.c src/util/util.c"
libs="build/libanimegan.a $(pkg-config --libs libzip libcjson) -ldnnl -lm -fopenmp -pthread"

# Tokens that let mutations reach past the first check.
printf '%s\n' '"storage"' '"FloatStorage"' '"HalfStorage"' '"torch"' '"torch._utils"' \
    '"_rebuild_tensor_v2"' '"_rebuild_parameter"' '"collections"' '"OrderedDict"' '"cpu"' \
    '"data.pkl"' '"/data/"' '"\x80\x02"' '"\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"' >"$out/pt.dict"
# ONNX: op types and attribute names of the supported set.
printf '%s\n' '"Conv"' '"Pad"' '"reflect"' '"LeakyRelu"' '"Add"' '"Mul"' '"Sub"' '"Div"' \
    '"Sqrt"' '"GlobalAveragePool"' '"ReduceMean"' '"ReduceSum"' '"MatMul"' '"Softmax"' \
    '"Resize"' '"linear"' '"asymmetric"' '"Transpose"' '"Reshape"' '"Shape"' '"Gather"' \
    '"Slice"' '"Concat"' '"Unsqueeze"' '"Squeeze"' '"Cast"' '"Tanh"' '"perm"' '"pads"' \
    '"strides"' '"alpha"' '"axis"' '"mode"' '"keepdims"' '"PRelu"' '"Clip"' '"Sigmoid"' \
    '"Relu"' '"Reciprocal"' '"InstanceNormalization"' '"BatchNormalization"' '"Constant"' \
    '"Identity"' '"half_pixel"' '"align_corners"' '"epsilon"' '"group"' '"value"' \
    '"coordinate_transformation_mode"' >"$out/onnx.dict"
printf '%s\n' '"dtype"' '"shape"' '"data_offsets"' '"__metadata__"' '"F32"' '"F16"' \
    '"BF16"' '"F64"' '"I8"' '"I64"' >"$out/safetensors.dict"

status=0
for target in pt safetensors onnx; do
    # shellcheck disable=SC2086 # word splitting of the flag lists is intended
    $cc $flags -o "$out/fuzz_model_$target" "fuzz/fuzz_model_$target.c" $src $libs
    corpus="$out/corpus_$target"
    seeds="$out/seeds_$target"
    mkdir -p "$corpus" "$seeds"
    if [ "$target" = pt ]; then
        cp tests/fixtures/pt/*.pt "$seeds/"
    elif [ "$target" = onnx ]; then
        # The small graphs only: the 2.4 MB Cute file is past -max_len.
        for f in tests/fixtures/onnx/*.onnx; do
            [ "$(wc -c <"$f")" -le 65536 ] && cp "$f" "$seeds/"
        done
    else
        cp tests/fixtures/pt/*.safetensors tests/fixtures/upscale/arch/*.safetensors "$seeds/"
        for f in models/*.safetensors; do [ -f "$f" ] && cp "$f" "$seeds/"; done
    fi
    echo "== fuzz_model_$target for ${seconds}s"
    "$out/fuzz_model_$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
        -rss_limit_mb=2048 -dict="$out/$target.dict" -print_final_stats=1 \
        -artifact_prefix="$out/crash_${target}_" "$corpus" "$seeds" 2>"$out/$target.log" ||
        status=1
    grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$out/$target.log" || true
    grep -E 'ERROR|SUMMARY|Test unit written' "$out/$target.log" || true
done

# The image decode entry point (probe + decode, capped at 512x512 pixels), seeded with the
# test photos and the special images.
# shellcheck disable=SC2046 # word splitting of pkg-config output is intended
$cc $flags $(pkg-config --cflags vips libpng libjpeg libwebp libwebpdemux libexif) -o "$out/fuzz_image" fuzz/fuzz_image.c src/image/*.c \
    src/util/alloc.c src/util/util.c $(pkg-config --libs vips libpng libjpeg libwebp libwebpdemux libexif) -lm
mkdir -p "$out/corpus_image"
echo "== fuzz_image for ${seconds}s"
"$out/fuzz_image" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$out/crash_image_" "$out/corpus_image" tests/data \
    tests/data/generated 2>"$out/image.log" || status=1
grep -E '^stat::number_of_executed_units|ERROR|SUMMARY' "$out/image.log" || true

# The video entry (container probe + demux, animated WebP parse + decode), seeded with the
# test clips, a small animated WebP (the clips' one is larger than -max_len) and issue 17's
# bombs (tools/make_video_bombs.py: MP4 sample tables declaring 85 M samples, a WebP of 500
# empty frames; the hour-of-sound files are over -max_len).
# shellcheck disable=SC2046 # word splitting of pkg-config output is intended
$cc $flags $(pkg-config --cflags libavformat libavcodec libavutil libwebpdemux) \
    -o "$out/fuzz_video" fuzz/fuzz_video.c src/video/input.c src/video/libav.c \
    src/video/webp_input.c src/video/mp4_check.c src/util/alloc.c src/util/util.c \
    $(pkg-config --libs libavformat libavcodec libavutil libwebpdemux) -lm
mkdir -p "$out/corpus_video" "$out/seeds_video"
tools/make_test_clips.sh "$out/seeds_video" >/dev/null 2>&1 || status=1
ffmpeg -nostdin -loglevel error -y -f lavfi -i "testsrc2=size=16x16:rate=10:duration=0.4" \
    -c:v libwebp_anim -quality 10 "$out/seeds_video/small_anim.webp" || status=1
python3 tools/make_video_bombs.py "$out/seeds_video/clip.mp4" "$out/bombs_video" 500 \
    >/dev/null 2>&1 || status=1
cp "$out/bombs_video/samples_85m.mp4" "$out/bombs_video/frames_70k.webp" "$out/seeds_video/" ||
    status=1
echo "== fuzz_video for ${seconds}s"
"$out/fuzz_video" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$out/crash_video_" "$out/corpus_video" \
    "$out/seeds_video" "$out/seeds_video/bad" 2>"$out/video.log" || status=1
grep -E '^stat::number_of_executed_units|ERROR|SUMMARY' "$out/video.log" || true

# The face path without the networks (decode, NMS, quads, warp, aligned crop and its fill):
# src/face/ instrumented, the rest (engine, models) from build/libanimegan.a.
# -Wno-pass-failed: the warp's `omp simd` loops stay scalar at -O1 with the sanitizers.
# shellcheck disable=SC2046 # word splitting of pkg-config output is intended
$cc $flags -Wno-pass-failed $(pkg-config --cflags vips) -o "$out/fuzz_face" fuzz/fuzz_face.c src/face/*.c \
    build/libanimegan.a \
    $(pkg-config --libs vips libpng libjpeg libwebp libwebpdemux libwebpmux libexif libzip libcjson \
        libavformat libavcodec libavutil libswscale libswresample) -ldnnl -lm -fopenmp -pthread
mkdir -p "$out/corpus_face"
echo "== fuzz_face for ${seconds}s"
"$out/fuzz_face" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$out/crash_face_" "$out/corpus_face" \
    2>"$out/face.log" || status=1
grep -E '^stat::number_of_executed_units|ERROR|SUMMARY' "$out/face.log" || true

# The server's request parsers (Content-Type, multipart, options).
tests/server/fuzz.sh "$seconds" || status=1
exit $status
