#!/bin/sh
# `animegan upscale` and `convert --upscale` from the command line (issue 20): sizes and
# bands of the results (RGB, RGBA, grey, 16-bit, palette inputs), a Real-ESRGAN checkpoint,
# tiled = untiled through the CLI, and bad input: a generator or another network's
# checkpoint, --scale 0, options of the other command; no output file left behind.
# Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=$BUILD/animegan
export ANIMEGAN_MODEL_PATH=$PWD/models
GEN=tests/data/generated
FIX=tests/fixtures/upscale
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { echo "PASS $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }
# "WxHxBANDS" of a PNG, by PIL.
shape() {
    /usr/bin/python3 -c "from PIL import Image; import sys; i = Image.open(sys.argv[1]); \
print('%dx%dx%d' % (i.size + (len(i.getbands()),)))" "$1"
}
# The maximum difference of two images, in levels.
diff_levels() {
    /usr/bin/python3 -c "import sys, numpy as np; from PIL import Image; \
a, b = (np.asarray(Image.open(p), dtype=int) for p in sys.argv[1:]); \
print(abs(a - b).max() if a.shape == b.shape else 999)" "$1" "$2"
}
# A crop of a test photo, w x h.
crop() {
    /usr/bin/python3 -c "from PIL import Image; import sys; \
Image.open('tests/data/'+sys.argv[1]).convert('RGB').crop((100, 80, 100+int(sys.argv[2]), \
80+int(sys.argv[3]))).save(sys.argv[4])" "$1" "$2" "$3" "$4"
}
crop chelsea.png 57 41 "$tmp/small.png"

# The bundled family at each scale; the default model and scale (medium x4).
for s in 2 3 4 8; do
    if "$BIN" upscale "$tmp/small.png" -o "$tmp/s$s.png" --model esrgan-slim --scale "$s" -q &&
        [ "$(shape "$tmp/s$s.png")" = "$((57 * s))x$((41 * s))x3" ]; then
        ok "slim_x$s"
    else bad "slim_x$s"; fi
done
if "$BIN" upscale "$tmp/small.png" -o "$tmp/default.png" -q &&
    [ "$(shape "$tmp/default.png")" = "228x164x3" ]; then
    ok default_medium_x4
else bad default_medium_x4; fi

# Inputs as convert takes them: alpha kept, grey and palette as RGB, 16-bit reduced.
for f in grey.png grey_alpha.png grey16.png palette.png rgba.png; do
    [ -f "$GEN/$f" ] || continue
    want_bands=3
    case $f in *alpha* | rgba*) want_bands=4 ;; esac
    if "$BIN" upscale "$GEN/$f" -o "$tmp/$f" --model esrgan-slim --scale 2 -q &&
        shape "$tmp/$f" | grep -q "x$want_bands\$"; then
        ok "input_$f"
    else bad "input_$f"; fi
done

# A Real-ESRGAN checkpoint: its own scale, and --scale resizing its result.
if "$BIN" upscale "$tmp/small.png" -o "$tmp/rv.png" --model "$FIX/animevideov3.pth" -q &&
    [ "$(shape "$tmp/rv.png")" = "228x164x3" ] &&
    "$BIN" upscale "$tmp/small.png" -o "$tmp/rv2.png" --model "$FIX/animevideov3.pth" \
        --scale 2 -q && [ "$(shape "$tmp/rv2.png")" = "114x82x3" ]; then
    ok realesrgan_pth
else bad realesrgan_pth; fi

# Tiled (--tile 16, several tiles) = untiled, through the whole CLI path. In fp32 the
# windows see the same context, so the result is the same to a level; int8 quantises each
# window with its own zero point (auto picks int8 on VNNI CPUs), which moves a level or two.
tiled() { # precision, allowed levels
    "$BIN" upscale "$tmp/small.png" -o "$tmp/u_$1.png" --model esrgan-slim --scale 2 \
        --precision "$1" -q &&
        "$BIN" upscale "$tmp/small.png" -o "$tmp/t_$1.png" --model esrgan-slim --scale 2 \
            --tile 16 --precision "$1" -q &&
        levels=$(diff_levels "$tmp/t_$1.png" "$tmp/u_$1.png") && echo "  $1: $levels levels" &&
        [ "$levels" -le "$2" ]
}
if tiled fp32 1; then ok tiled_cli_fp32; else bad tiled_cli_fp32; fi
if tiled int8 3; then ok tiled_cli_int8; else bad tiled_cli_int8; fi

# convert --upscale: the anime result, upscaled.
if "$BIN" convert "$tmp/small.png" -o "$tmp/anime2.png" --model cute-v3 --upscale 2 \
    --upscale-model esrgan-slim -q && [ "$(shape "$tmp/anime2.png")" = "114x82x3" ]; then
    ok convert_upscale
else bad convert_upscale; fi

# Bad input: one line, exit status, no output file.
refused() { # name, status, pattern, args...
    name=$1 want=$2 pattern=$3
    shift 3
    "$BIN" "$@" >"$tmp/out" 2>"$tmp/err"
    st=$?
    if [ "$st" -eq "$want" ] && grep -q "$pattern" "$tmp/err" && [ ! -e "$tmp/bad.png" ]; then
        ok "$name"
    else
        bad "$name"
        cat "$tmp/err"
    fi
}
refused generator 1 "generator, not an upscaler" upscale "$tmp/small.png" -o "$tmp/bad.png" \
    --model hayao
refused v2_checkpoint 1 "not an upscaler" upscale "$tmp/small.png" -o "$tmp/bad.png" \
    --model tests/fixtures/random_zip.pt
refused scale_0 2 "out of range" upscale "$tmp/small.png" -o "$tmp/bad.png" --scale 0
refused upscale_0 2 "out of range" convert "$tmp/small.png" -o "$tmp/bad.png" --upscale 0
refused scale_on_convert 2 "convert takes" convert "$tmp/small.png" -o "$tmp/bad.png" --scale 2
refused tile_alone 2 "only with --upscale" convert "$tmp/small.png" -o "$tmp/bad.png" --tile 64
refused portrait_on_upscale 2 "convert's" upscale "$tmp/small.png" -o "$tmp/bad.png" --portrait
# (esrgan-medium x8 fits 16 MB since its upsampled maps are never planned: a wide context
# does not)
refused tiny_budget 1 "no room" upscale "$tmp/small.png" -o "$tmp/bad.png" --max-mb 16 \
    --model esrgan-medium --scale 8 --tile-pad 128

# The service: upscale=N on convert, POST /api/v1/upscale, --max-output-pixels (413 before
# any work), the upscalers in /models and /status, the memory bound's upscale term.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
port_of() { # log file: the port the server printed, once it listens
    for _ in $(seq 1 150); do
        p=$(grep -o '127.0.0.1:[0-9]*' "$1" | head -1 | cut -d: -f2)
        [ -n "$p" ] && break
        sleep 0.1
    done
    echo "$p"
}
post() { # url, image, output: prints the status
    curl -s -o "$3" -w "%{http_code}" --max-time 120 -H 'Content-Type: image/png' \
        --data-binary "@$2" "$1"
}
metric() { curl -s --max-time 10 "$1/metrics" | sed -n "s/^$2 //p"; }
"$BIN" serve --port 0 --threads 2 --max-output-pixels 200000 >"$tmp/serve.log" 2>&1 &
server=$!
port=$(port_of "$tmp/serve.log")
url=http://127.0.0.1:$port
"$BIN" upscale "$tmp/small.png" -o "$tmp/cli2.png" --model esrgan-slim --scale 2 --threads 2 \
    --max-mb 128 -q
if [ -n "$port" ] && [ "$(post "$url/api/v1/upscale" "$tmp/small.png" "$tmp/s2.png")" = 200 ] &&
    [ "$(shape "$tmp/s2.png")" = 114x82x3 ] && [ "$(diff_levels "$tmp/s2.png" "$tmp/cli2.png")" = 0 ]; then
    ok serve_upscale_equals_cli
else bad serve_upscale_equals_cli; cat "$tmp/serve.log"; fi
post "$url/api/v1/convert?max_side=48" "$tmp/small.png" "$tmp/s1.png" >/dev/null
want=$(shape "$tmp/s1.png" | awk -Fx '{ print $1 * 4 "x" $2 * 4 "x" $3 }')
if [ "$(post "$url/api/v1/convert?upscale=4&max_side=48" "$tmp/small.png" "$tmp/s4.png")" = 200 ] &&
    [ "$(shape "$tmp/s4.png")" = "$want" ]; then
    ok serve_convert_upscale_4
else bad serve_convert_upscale_4; echo "  $(shape "$tmp/s4.png"), want $want"; fi
if [ "$(post "$url/api/v1/convert?upscale=3" "$tmp/small.png" "$tmp/e3.json")" = 400 ] &&
    grep -q '"bad_option"' "$tmp/e3.json"; then
    ok serve_upscale_3_refused
else bad serve_upscale_3_refused; cat "$tmp/e3.json"; fi
before=$(metric "$url" animegan_upscaled_total)
crop chelsea.png 240 200 "$tmp/mid.png" # x4: 960 x 800 = 768,000 pixels > 200,000
if [ "$(post "$url/api/v1/upscale?upscale=4" "$tmp/mid.png" "$tmp/e4.json")" = 413 ] &&
    grep -q '"output_too_large".*max-output-pixels' "$tmp/e4.json" &&
    [ "$(metric "$url" animegan_upscaled_total)" = "$before" ] && [ "$before" = 2 ]; then
    ok serve_max_output_pixels_413
else bad serve_max_output_pixels_413; cat "$tmp/e4.json"; echo " upscaled $before"; fi
if curl -s --max-time 10 "$url/api/v1/models" | /usr/bin/python3 -c '
import json, sys
m = json.load(sys.stdin)
u = m["upscalers"]
assert [(x["upscale"], x["name"], x["model_scale"]) for x in u] == \
    [(2, "esrgan-slim-x2", 2), (4, "esrgan-slim-x4", 4)], u
assert m["options"]["upscale"] == [0, 2, 4] and m["options"]["max_output_pixels"] == 200000
' && curl -s --max-time 10 "$url/api/v1/status" | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert len(s["upscalers"]) == 2 and s["limits"]["max_output_pixels"] == 200000, s["upscalers"]
' && grep -q 'memory bound .* + upscale [1-9][0-9.]*)' "$tmp/serve.log"; then
    ok serve_upscalers_listed
else bad serve_upscalers_listed; fi
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null
"$BIN" serve --port 0 --threads 2 --upscale-model none >"$tmp/none.log" 2>&1 &
server=$!
port=$(port_of "$tmp/none.log")
if [ "$(post "http://127.0.0.1:$port/api/v1/upscale" "$tmp/small.png" "$tmp/e5.json")" = 503 ] &&
    grep -q '"upscale_unavailable"' "$tmp/e5.json" && grep -q '+ upscale 0.0)' "$tmp/none.log"; then
    ok serve_upscale_off
else bad serve_upscale_off; cat "$tmp/e5.json" "$tmp/none.log"; fi
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null

# --upscale-model repeated: each upscale=N takes the file of scale N, else the smallest
# larger; /models lists every file with its scale; the memory bound counts an x8 network's
# result at x8 (ag_upscale_image_bytes).
A=tests/fixtures/upscale/arch
upscale_term() { sed -n 's/.* + upscale \([0-9.]*\)).*/\1/p' "$1" | head -1; }
"$BIN" serve --port 0 --threads 2 --upscale-model "$A/rrdb-old-x8.safetensors" >"$tmp/x8.log" 2>&1 &
server=$!
port=$(port_of "$tmp/x8.log")
x8_term=$(upscale_term "$tmp/x8.log")
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null
"$BIN" serve --port 0 --threads 2 --upscale-model "$A/compact-x2.safetensors" \
    --upscale-model "$A/rrdb-old-x8.safetensors" --upscale-model "$A/span-x4.safetensors" \
    >"$tmp/multi.log" 2>&1 &
server=$!
port=$(port_of "$tmp/multi.log")
url=http://127.0.0.1:$port
if [ -n "$port" ] && curl -s --max-time 10 "$url/api/v1/models" | /usr/bin/python3 -c '
import json, sys
m = json.load(sys.stdin)
assert [(x["upscale"], x["name"]) for x in m["upscalers"]] == \
    [(2, "compact-x2"), (4, "span-x4")], m["upscalers"]
assert [(x["name"], x["scale"], x["serves"]) for x in m["upscale_models"]] == \
    [("compact-x2", 2, [2]), ("rrdb-old-x8", 8, []), ("span-x4", 4, [4])], m["upscale_models"]
' && [ "$(post "$url/api/v1/upscale?upscale=4" "$tmp/small.png" "$tmp/m4.png")" = 200 ] &&
    [ "$(shape "$tmp/m4.png")" = 228x164x3 ]; then
    ok serve_upscale_models_repeated
else bad serve_upscale_models_repeated; cat "$tmp/multi.log"; fi
multi_term=$(upscale_term "$tmp/multi.log")
if /usr/bin/python3 -c "import sys; a, b = map(float, sys.argv[1:]); assert a > 2 * b, (a, b)" \
    "$x8_term" "$multi_term"; then
    ok serve_bound_counts_network_scale
else bad serve_bound_counts_network_scale; echo "  x8 alone $x8_term, x2+x4 $multi_term"; fi
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null

# Files of scale 1 and 8 (issue 34 item 4): /models lists their own scales and what each
# serves (x8 serves upscale=2 and 4, resized down; x1 alone serves both, resized up); a
# request runs; the memory bound's upscale term counts the network's own scale:
# window + the result at the network's scale + its resized copy + alpha + 2 encoder copies,
# at 4 bytes a pixel: W + 80 P with the x8 file (its result 16 P at upscale=2), W + 17 P with
# the x1 file alone (P / 4 at upscale=2).
serve_scales() { # log, upscale-model files...
    log=$1
    shift
    for f in "$@"; do set -- "$@" --upscale-model "$f"; shift; done
    "$BIN" serve --port 0 --threads 2 --max-output-pixels 1000000 --upscale-max-mb 64 "$@" \
        >"$log" 2>&1 &
    server=$!
    port=$(port_of "$log")
    url=http://127.0.0.1:$port
}
term_is() { # log, k: the logged upscale term is 64 MiB + k P bytes, within its 0.1 rounding
    /usr/bin/python3 -c "import sys; a, k = float(sys.argv[1] or -1), int(sys.argv[2]); \
b = 64 + k * 1e6 / 2**20; assert abs(a - b) <= 0.051, (a, b)" "$(upscale_term "$1")" "$2"
}
serve_scales "$tmp/x18.log" "$A/rrdb-old-x1.pth" "$A/rrdb-old-x8.safetensors"
if [ -n "$port" ] && curl -s --max-time 10 "$url/api/v1/models" | /usr/bin/python3 -c '
import json, sys
m = json.load(sys.stdin)
assert [(x["upscale"], x["name"], x["model_scale"]) for x in m["upscalers"]] == \
    [(2, "rrdb-old-x8", 8), (4, "rrdb-old-x8", 8)], m["upscalers"]
assert [(x["name"], x["scale"], x["serves"]) for x in m["upscale_models"]] == \
    [("rrdb-old-x1", 1, []), ("rrdb-old-x8", 8, [2, 4])], m["upscale_models"]
' && [ "$(post "$url/api/v1/upscale?upscale=2" "$tmp/small.png" "$tmp/x8_2.png")" = 200 ] &&
    [ "$(shape "$tmp/x8_2.png")" = 114x82x3 ] &&
    [ "$(post "$url/api/v1/upscale?upscale=4" "$tmp/small.png" "$tmp/x8_4.png")" = 200 ] &&
    [ "$(shape "$tmp/x8_4.png")" = 228x164x3 ] &&
    term_is "$tmp/x18.log" 80; then
    ok serve_x1_x8_files
else bad serve_x1_x8_files; cat "$tmp/x18.log"; fi
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null
serve_scales "$tmp/x1.log" "$A/rrdb-old-x1.pth"
if [ -n "$port" ] && curl -s --max-time 10 "$url/api/v1/models" | /usr/bin/python3 -c '
import json, sys
m = json.load(sys.stdin)
assert [(x["name"], x["scale"], x["serves"]) for x in m["upscale_models"]] == \
    [("rrdb-old-x1", 1, [2, 4])], m["upscale_models"]
' && [ "$(post "$url/api/v1/upscale?upscale=2" "$tmp/small.png" "$tmp/x1_2.png")" = 200 ] &&
    [ "$(shape "$tmp/x1_2.png")" = 114x82x3 ] &&
    term_is "$tmp/x1.log" 17; then
    ok serve_x1_file
else bad serve_x1_file; cat "$tmp/x1.log"; fi
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
