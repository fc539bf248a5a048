#!/bin/sh
# Face restoration from the command line (issue 19): `animegan restore` with the reduced
# GPEN and GFPGAN checkpoints of tests/fixtures/restore (tools/make_restore_fixtures.py):
# faces restored and pasted back (the rest of the photo untouched), a photo without faces
# written unchanged, --max-faces on many faces, --aligned, --fidelity, a directory batch,
# convert --restore-faces, clips, CodeFormer's --codeformer-fidelity (CLI and service), and the refusals (another network's state_dict, a pickled whole
# module, a truncated checkpoint, usage errors) with no output left behind.
# Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=$BUILD/animegan
export ANIMEGAN_MODEL_PATH=$PWD/models
FIX=tests/fixtures/restore
GPEN=$FIX/gpen64_zip.pt
GFPGAN=$FIX/gfpgan64_zip.pt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { echo "PASS $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }
PY=/usr/bin/python3

# changed IN OUT: prints the number of pixels that differ and their bounding box.
changed() {
    $PY - "$1" "$2" <<'PY'
import sys
from PIL import Image
a = Image.open(sys.argv[1]).convert("RGB"); b = Image.open(sys.argv[2]).convert("RGB")
assert a.size == b.size, (a.size, b.size)
w, h = a.size
pa, pb = a.load(), b.load()
xs = [x for y in range(h) for x in range(w) if pa[x, y] != pb[x, y]]
ys = [y for y in range(h) for x in range(w) if pa[x, y] != pb[x, y]]
print(len(xs), min(xs, default=-1), min(ys, default=-1), max(xs, default=-1), max(ys, default=-1))
PY
}

# GPEN on the astronaut: only the face region changes.
for net in gpen gfpgan; do
    model=$GPEN
    [ $net = gfpgan ] && model=$GFPGAN
    if "$BIN" restore tests/data/astronaut.png -o "$tmp/$net.png" --model "$model" -q \
        2>"$tmp/err"; then
        set -- $(changed tests/data/astronaut.png "$tmp/$net.png")
        # the face is around x 160-290, y 50-190 of the 512x512 photo
        if [ "$1" -gt 2000 ] && [ "$2" -ge 120 ] && [ "$3" -ge 20 ] && [ "$4" -le 330 ] &&
            [ "$5" -le 240 ]; then ok "restore_${net}_face_only"; else
            bad "restore_${net}_face_only"; echo "  changed: $*"; fi
    else bad "restore_${net}_face_only"; cat "$tmp/err"; fi
done

# No face: the photo is written unchanged, exit 0, and stderr says so.
if "$BIN" restore tests/data/coffee.png -o "$tmp/coffee.png" --model "$GPEN" 2>"$tmp/err" &&
    grep -q "no face found; written unchanged" "$tmp/err" &&
    [ "$(changed tests/data/coffee.png "$tmp/coffee.png" | cut -d' ' -f1)" = 0 ]; then
    ok restore_no_face_unchanged
else bad restore_no_face_unchanged; cat "$tmp/err"; fi

# Many faces: --max-faces bounds the work and says how many were left.
if "$BIN" restore tests/data/generated/faces/many.jpg -o "$tmp/many.png" --model "$GPEN" \
    --max-faces 2 2>"$tmp/err" && grep -q "the largest 2 restored (--max-faces)" "$tmp/err"; then
    ok restore_max_faces
else bad restore_max_faces; cat "$tmp/err"; fi

# --aligned: the output is the network's size; --fidelity 0 gives the resized input back.
if "$BIN" restore tests/fixtures/portrait_chelsea_320.png -o "$tmp/al.png" --model "$GPEN" \
    --aligned 2>"$tmp/err" &&
    [ "$($PY -c "from PIL import Image; print(Image.open('$tmp/al.png').size)")" = "(64, 64)" ]; then
    ok restore_aligned_size
else bad restore_aligned_size; cat "$tmp/err"; fi
if "$BIN" restore tests/fixtures/portrait_chelsea_320.png -o "$tmp/f0.png" --model "$GPEN" \
    --aligned --fidelity 0 2>/dev/null &&
    "$BIN" restore tests/fixtures/portrait_chelsea_320.png -o "$tmp/f1.png" --model "$GPEN" \
        --aligned --fidelity 1 2>/dev/null &&
    "$BIN" restore tests/fixtures/portrait_chelsea_320.png -o "$tmp/fh.png" --model "$GPEN" \
        --aligned --fidelity 0.5 2>/dev/null &&
    $PY - "$tmp" <<'PY'
import sys
from PIL import Image
d = sys.argv[1]
f0, f1, fh = (list(Image.open("%s/%s.png" % (d, n)).convert("RGB").getdata()) for n in ("f0", "f1", "fh"))
assert f0 != f1
# the half blend is the mean of the two, to rounding
worst = max(abs(h - (a + b) / 2) for p0, p1, ph in zip(f0, f1, fh) for a, b, h in zip(p0, p1, ph))
assert worst <= 1.0, worst
PY
then ok restore_fidelity_blend; else bad restore_fidelity_blend; fi

# A directory batch, GFPGAN's legacy-free zip and GPEN's g_ema legacy file.
mkdir "$tmp/in"
cp tests/data/astronaut.png tests/data/coffee.png "$tmp/in/"
if "$BIN" restore "$tmp/in" -o "$tmp/out/" --model "$FIX/gpen32_g_ema.pt" -q 2>"$tmp/err" &&
    [ -f "$tmp/out/astronaut.png" ] && [ -f "$tmp/out/coffee.png" ]; then
    ok restore_directory_g_ema
else bad restore_directory_g_ema; cat "$tmp/err"; fi

# convert --restore-faces: restored, then stylised (differs from the plain conversion).
if "$BIN" convert tests/data/astronaut.png -o "$tmp/plain.png" --max-side 256 -q 2>"$tmp/err" &&
    "$BIN" convert tests/data/astronaut.png -o "$tmp/rf.png" --max-side 256 -q \
        --restore-faces "$GPEN" 2>>"$tmp/err" &&
    [ "$(changed "$tmp/plain.png" "$tmp/rf.png" | cut -d' ' -f1)" -gt 100 ]; then
    ok convert_restore_faces
else bad convert_restore_faces; cat "$tmp/err"; fi

# Refusals: one line naming the file, exit 1, no output file.
refused() { # name, expected text, args...
    name=$1 text=$2
    shift 2
    rm -f "$tmp/r.png"
    "$BIN" restore tests/data/astronaut.png -o "$tmp/r.png" "$@" 2>"$tmp/err"
    rc=$?
    if [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q -- "$text" "$tmp/err" &&
        [ ! -e "$tmp/r.png" ]; then ok "$name"; else bad "$name"; echo "  rc $rc"; cat "$tmp/err"; fi
}
refused restore_other_network "fits neither GPEN nor GFPGAN" --model tests/fixtures/random_zip.pt
refused restore_whole_module "not a state_dict" --model tests/fixtures/pt/whole_module_zip.pt
head -c 100000 "$GPEN" >"$tmp/truncated.pt"
refused restore_truncated "truncated.pt" --model "$tmp/truncated.pt"
refused restore_missing_file "nope.pt" --model "$tmp/nope.pt"

# Usage errors: exit 2.
usage() { # name, expected text, args...
    name=$1 text=$2
    shift 2
    "$BIN" "$@" >/dev/null 2>"$tmp/err"
    rc=$?
    if [ $rc -eq 2 ] && grep -q -- "$text" "$tmp/err"; then ok "$name"; else
        bad "$name"; echo "  rc $rc"; cat "$tmp/err"; fi
}
usage restore_needs_model "missing --model" restore tests/data/astronaut.png -o "$tmp/u.png"
usage restore_fidelity_range "--fidelity: '1.5'" restore tests/data/astronaut.png -o "$tmp/u.png" \
    --model "$GPEN" --fidelity 1.5
usage restore_no_portrait "not combined with --portrait" restore tests/data/astronaut.png -o "$tmp/u.png" \
    --model "$GPEN" --portrait
usage convert_fidelity_alone "apply only to face restoration" convert tests/data/astronaut.png \
    -o "$tmp/u.png" --fidelity 0.5
"$BIN" restore --help | grep -q "GFPGANv1.4.pth" && ok restore_help || bad restore_help
# restore --upscale: the faces restored, then the whole photo upscaled (GPEN's demo).
if "$BIN" restore tests/data/astronaut.png -o "$tmp/up.png" --model "$GPEN" --upscale 2 \
    --upscale-model esrgan-slim -q -t 2 &&
    /usr/bin/python3 -c "from PIL import Image; import sys; \
sys.exit(Image.open(sys.argv[1]).size != (1024, 1024))" "$tmp/up.png"; then
    ok restore_upscale
else bad restore_upscale; fi
psnr() { # two images: their PSNR in dB (99 when equal)
    $PY - "$1" "$2" <<'PY'
import sys
import numpy as np
from PIL import Image
a, b = (np.asarray(Image.open(f).convert("RGB"), dtype=np.float64) for f in sys.argv[1:3])
mse = ((a - b) ** 2).mean()
print("%.1f" % (10 * np.log10(255 ** 2 / mse)) if mse else "99")
PY
}
# --precision bf16 (the modulated convs' products in bf16): within 38 dB of fp32 on the
# photo; where the CPU has no bf16 at all, refused in one line.
if "$BIN" restore tests/data/astronaut.png -o "$tmp/p32.png" --model "$GFPGAN" --precision fp32 \
    -q -t 2 && "$BIN" restore tests/data/astronaut.png -o "$tmp/p16.png" --model "$GFPGAN" \
    --precision bf16 -q -t 2 2>"$tmp/err"; then
    db=$(psnr "$tmp/p32.png" "$tmp/p16.png")
    echo "  bf16 against fp32: $db dB"
    if [ "${db%.*}" -ge 38 ] && ! cmp -s "$tmp/p32.png" "$tmp/p16.png"; then
        ok restore_bf16_close_to_fp32
    else bad restore_bf16_close_to_fp32; fi
elif grep -q "bf16 needs AVX-512" "$tmp/err" && [ "$(wc -l <"$tmp/err")" -eq 1 ]; then
    ok restore_bf16_close_to_fp32
else bad restore_bf16_close_to_fp32; cat "$tmp/err"; fi
# int8: the 3x3 modulated convs u8 x s8 (every other op fp32): 38 dB or more against fp32
# on the whole photo too; a CPU oneDNN has no int8 for says so in one line.
if "$BIN" restore tests/data/astronaut.png -o "$tmp/p8.png" --model "$GFPGAN" --precision int8 \
    -q -t 2 2>"$tmp/err"; then
    db=$(psnr "$tmp/p32.png" "$tmp/p8.png")
    echo "  int8 against fp32: $db dB"
    if [ "${db%.*}" -ge 38 ] && ! cmp -s "$tmp/p32.png" "$tmp/p8.png"; then
        ok restore_int8_close_to_fp32
    else bad restore_int8_close_to_fp32; fi
elif grep -q "int8" "$tmp/err" && [ "$(wc -l <"$tmp/err")" -eq 1 ]; then
    ok restore_int8_close_to_fp32
else bad restore_int8_close_to_fp32; cat "$tmp/err"; fi

# A clip (#30 item 2: video): `restore CLIP` and `convert CLIP --restore-faces` run the
# pipeline on every frame: the 4 faceless frames of tools/make_fuse_clips.sh's clip come out
# as they went in (within the re-encode), the 16 face frames' centres are restored (the
# random-weight GPEN changes them a lot), every frame and the sound kept.
sh tools/make_fuse_clips.sh "$tmp/clips" >/dev/null 2>&1
frames() { ffprobe -v error -count_frames -select_streams v:0 -show_entries \
    stream=nb_read_frames -of csv=p=0 "$1"; }
clip_changes() {
    for f in "$1" "$2"; do
        ffmpeg -nostdin -loglevel error -y -i "$f" -f rawvideo -pix_fmt rgb24 "$f.rgb"
    done
    $PY - "$1.rgb" "$2.rgb" <<'PY'
import sys
import numpy as np
a, b = (np.fromfile(p, np.uint8).reshape(-1, 256, 256, 3).astype(float) for p in sys.argv[1:])
d = np.abs(a - b)
print("%.1f %.1f" % (d[:4].mean(), d[4:, 64:192, 64:192].mean()))
PY
}
if "$BIN" restore "$tmp/clips/fuse_face.mp4" --model "$GPEN" -o "$tmp/rclip.mp4" -q \
    2>"$tmp/err" && [ "$(frames "$tmp/rclip.mp4")" = 20 ] &&
    ffprobe -v error -select_streams a -show_entries stream=codec_name -of csv=p=0 \
        "$tmp/rclip.mp4" | grep -q aac; then
    set -- $(clip_changes "$tmp/clips/fuse_face.mp4" "$tmp/rclip.mp4")
    if $PY -c "import sys; sys.exit(not ($1 < 4 and $2 > 20))"; then ok restore_clip; else
        bad restore_clip; echo "  faceless frames off by $1, face centres by $2"; fi
else bad restore_clip; cat "$tmp/err"; fi
if "$BIN" convert "$tmp/clips/fuse_face.mp4" --restore-faces "$GPEN" -o "$tmp/cclip.mp4" -q \
    2>"$tmp/err" && [ "$(frames "$tmp/cclip.mp4")" = 20 ]; then
    ok convert_clip_restore_faces
else bad convert_clip_restore_faces; cat "$tmp/err"; fi
if ! "$BIN" restore "$tmp/clips/fuse_face.mp4" --model "$GPEN" --codeformer-fidelity 0.3 \
    -o "$tmp/fclip.mp4" 2>"$tmp/err" && grep -q "applies only to a CodeFormer" "$tmp/err" &&
    [ ! -e "$tmp/fclip.mp4" ]; then
    ok restore_clip_codeformer_fidelity_gpen_refused
else bad restore_clip_codeformer_fidelity_gpen_refused; cat "$tmp/err"; fi

# The service: --restore-model, POST /api/v1/restore, restore=1 on convert, /metrics.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
"$BIN" serve --port 0 --restore-model "$GPEN" --threads 2 --quiet >"$tmp/serve.log" 2>&1 &
server=$!
port=
for _ in $(seq 1 100); do
    port=$(grep -o '127.0.0.1:[0-9]*' "$tmp/serve.log" | head -1 | cut -d: -f2)
    [ -n "$port" ] && break
    sleep 0.1
done
url=http://127.0.0.1:$port
post() { # path, image, output: prints the status and X-Faces
    curl -s -o "$3" -D "$tmp/headers" -w "%{http_code}" --max-time 120 \
        -H 'Content-Type: image/png' --data-binary "@$2" "$url$1"
    printf ' %s\n' "$(grep -i '^X-Faces:' "$tmp/headers" | tr -d '\r' | cut -d' ' -f2)"
}
if [ -n "$port" ] && [ "$(post /api/v1/restore tests/data/astronaut.png "$tmp/s1.png")" = "200 1" ] &&
    [ "$(changed tests/data/astronaut.png "$tmp/s1.png" | cut -d' ' -f1)" -gt 2000 ]; then
    ok serve_restore
else bad serve_restore; cat "$tmp/serve.log"; fi
if [ "$(post /api/v1/restore tests/data/coffee.png "$tmp/s2.png")" = "200 0" ] &&
    [ "$(changed tests/data/coffee.png "$tmp/s2.png" | cut -d' ' -f1)" = 0 ]; then
    ok serve_restore_no_face_unchanged
else bad serve_restore_no_face_unchanged; fi
if [ "$(post '/api/v1/convert?restore=1&max_side=256' tests/data/astronaut.png "$tmp/s3.png")" = "200 1" ]; then
    ok serve_convert_restore
else bad serve_convert_restore; fi
if [ "$(post '/api/v1/restore?restore=2' tests/data/astronaut.png "$tmp/s4.json" | cut -c1-3)" = 400 ] &&
    grep -q "has 1 --restore-model" "$tmp/s4.json"; then ok serve_restore_bad_index; else
    bad serve_restore_bad_index; cat "$tmp/s4.json"; fi
if curl -s --max-time 10 "$url/metrics" | grep -q '^animegan_restorations_total 3$' &&
    curl -s --max-time 10 "$url/metrics" | grep -q '^animegan_faces_restored_total 2$'; then
    ok serve_restore_metrics
else bad serve_restore_metrics; fi
# /api/v1/models and /status list the restorer (restore=1 is it), with its face size.
if curl -s --max-time 10 "$url/api/v1/models" | /usr/bin/python3 -c '
import json, sys
m = json.load(sys.stdin)
r = m["restorers"]
assert len(r) == 1 and r[0]["restore"] == 1 and r[0]["architecture"] == "gpen", r
assert r[0]["face_size"] == 64 and r[0]["weight_bytes"] > 0 and r[0]["gflop_per_face"] > 0, r
assert r[0]["precision"] in ("fp32", "bf16"), r
assert m["options"]["restore"] == {"min": 0, "max": 1}, m["options"]
' && curl -s --max-time 10 "$url/api/v1/status" | /usr/bin/python3 -c '
import json, sys
s = json.load(sys.stdin)
assert [r["name"] for r in s["restorers"]] == ["gpen64_zip.pt"], s["restorers"]
'; then ok serve_restorers_listed; else bad serve_restorers_listed; fi
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null

# fp32: the workers' engines share the model's Winograd weights (made at start-up, in the
# measured base): the service's face is the CLI's, byte for byte.
"$BIN" serve --port 0 --restore-model "$GPEN" --threads 2 --precision fp32 --quiet \
    >"$tmp/serve32.log" 2>&1 &
server=$!
port=
for _ in $(seq 1 100); do
    port=$(grep -o '127.0.0.1:[0-9]*' "$tmp/serve32.log" | head -1 | cut -d: -f2)
    [ -n "$port" ] && break
    sleep 0.1
done
url=http://127.0.0.1:$port
"$BIN" restore tests/data/astronaut.png -o "$tmp/c32.png" --model "$GPEN" --precision fp32 \
    -t 2 -q
if [ -n "$port" ] && [ "$(post /api/v1/restore tests/data/astronaut.png "$tmp/s32.png")" = "200 1" ] &&
    cmp -s "$tmp/c32.png" "$tmp/s32.png"; then
    ok serve_restore_fp32_as_cli
else bad serve_restore_fp32_as_cli; cat "$tmp/serve32.log"; fi
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null

# CodeFormer (the reduced upstream fixture, 512 px): the face restored, w reaching the
# network (--codeformer-fidelity 0 and 1 differ), the service's codeformer_fidelity= gives
# the CLI's face byte for byte, and out of range is refused (exit 2; 400).
CF=$FIX/up_codeformer.pt
if "$BIN" restore tests/data/astronaut.png -o "$tmp/cf.png" --model "$CF" -q -t 2 \
    --precision fp32 2>"$tmp/err" &&
    [ "$(changed tests/data/astronaut.png "$tmp/cf.png" | cut -d' ' -f1)" -gt 2000 ] &&
    "$BIN" restore tests/data/astronaut.png -o "$tmp/cf1.png" --model "$CF" -q -t 2 \
        --precision fp32 --codeformer-fidelity 1 2>>"$tmp/err" &&
    [ "$(changed "$tmp/cf.png" "$tmp/cf1.png" | cut -d' ' -f1)" -gt 100 ]; then
    ok restore_codeformer_fidelity
else bad restore_codeformer_fidelity; cat "$tmp/err"; fi
usage restore_codeformer_fidelity_range "--codeformer-fidelity: '2'" restore \
    tests/data/astronaut.png -o "$tmp/u.png" --model "$CF" --codeformer-fidelity 2
# A fidelity given to GPEN or GFPGAN would be ignored: refused in one line, exit 2, no output.
usage restore_codeformer_fidelity_gpen_refused \
    "^animegan: --codeformer-fidelity applies only to a CodeFormer checkpoint: .*gpen64_zip.pt is GPEN$" \
    restore tests/data/astronaut.png -o "$tmp/cfg.png" --model "$GPEN" --codeformer-fidelity 0.5
[ -e "$tmp/cfg.png" ] && bad restore_codeformer_fidelity_gpen_no_output
usage convert_codeformer_fidelity_gfpgan_refused "is GFPGAN$" convert tests/data/astronaut.png \
    -o "$tmp/cfg.png" --restore-faces "$FIX/gfpgan64_zip.pt" --codeformer-fidelity 1
"$BIN" serve --port 0 --restore-model "$CF" --restore-model "$GPEN" --threads 2 --precision fp32 \
    --quiet \
    >"$tmp/servecf.log" 2>&1 &
server=$!
port=
for _ in $(seq 1 100); do
    port=$(grep -o '127.0.0.1:[0-9]*' "$tmp/servecf.log" | head -1 | cut -d: -f2)
    [ -n "$port" ] && break
    sleep 0.1
done
url=http://127.0.0.1:$port
if [ -n "$port" ] &&
    [ "$(post '/api/v1/restore?codeformer_fidelity=1' tests/data/astronaut.png "$tmp/scf.png")" = "200 1" ] &&
    cmp -s "$tmp/cf1.png" "$tmp/scf.png"; then
    ok serve_codeformer_fidelity_as_cli
else bad serve_codeformer_fidelity_as_cli; cat "$tmp/servecf.log"; fi
if [ "$(post '/api/v1/restore?codeformer_fidelity=1.5' tests/data/astronaut.png "$tmp/scf.json" | cut -c1-3)" = 400 ] &&
    grep -q "codeformer_fidelity must be a number from 0 to 1" "$tmp/scf.json"; then
    ok serve_codeformer_fidelity_range
else bad serve_codeformer_fidelity_range; cat "$tmp/scf.json"; fi
if [ "$(post '/api/v1/restore?restore=2&codeformer_fidelity=0.5' tests/data/astronaut.png \
    "$tmp/scfg.json" | cut -c1-3)" = 400 ] &&
    grep -q '"codeformer_fidelity applies only to a CodeFormer restorer: restore=2 is GPEN"' \
        "$tmp/scfg.json" &&
    [ "$(post '/api/v1/restore?restore=2' tests/data/astronaut.png "$tmp/sg.png" | cut -c1-3)" = 200 ]
then
    ok serve_codeformer_fidelity_gpen_refused
else bad serve_codeformer_fidelity_gpen_refused; cat "$tmp/scfg.json"; fi
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
