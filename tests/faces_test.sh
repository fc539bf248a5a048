#!/bin/sh
# The face modes from the command line (issue 9): `animegan faces --json` on the synthetic
# images of tests/data/generated/faces (tools/make_face_images.py) and the photos,
# `convert --portrait` (face-aware, =center, the no-face fallback), --all-faces,
# --paste-faces and their usage errors. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=$BUILD/animegan
export ANIMEGAN_MODEL_PATH=$PWD/models
GEN=tests/data/generated/faces
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { echo "PASS $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }

# faces --json: one valid JSON line per image, the right count, sorted by area.
if "$BIN" faces --json tests/data/astronaut.png tests/data/coffee.png $GEN/scaled.jpg \
    $GEN/rotated.jpg $GEN/mirrored.jpg $GEN/border.jpg >"$tmp/faces.json" 2>"$tmp/err" &&
    /usr/bin/python3 - "$tmp/faces.json" <<'PY'
import json, sys
want = {"astronaut.png": 1, "coffee.png": 0, "scaled.jpg": 3, "rotated.jpg": 3,
        "mirrored.jpg": 2, "border.jpg": 2}
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == len(want), lines
for line in lines:
    o = json.loads(line)
    name = o["image"].rsplit("/", 1)[-1]
    assert len(o["faces"]) == want[name], (name, len(o["faces"]))
    assert o["width"] > 0 and o["height"] > 0
    areas = [(f["box"][2] - f["box"][0]) * (f["box"][3] - f["box"][1]) for f in o["faces"]]
    assert areas == sorted(areas, reverse=True), name
    for f in o["faces"]:
        assert 0.6 <= f["score"] <= 1 and len(f["keypoints"]) == 6 and len(f["quad"]) == 4
PY
then ok faces_json; else bad faces_json; cat "$tmp/err"; fi

# --max-faces caps, with a line on stderr.
if "$BIN" faces --json --max-faces 3 $GEN/many.jpg >"$tmp/many.json" 2>"$tmp/err" &&
    /usr/bin/python3 -c "import json,sys; assert len(json.load(open(sys.argv[1]))['faces']) == 3" \
        "$tmp/many.json" && grep -q "kept (--max-faces)" "$tmp/err"; then
    ok faces_max_faces
else bad faces_max_faces; fi

size_of() { /usr/bin/python3 -c "from PIL import Image; import sys; print('%dx%d' % Image.open(sys.argv[1]).size)" "$1"; }

# --portrait: the face's aligned crop at --size; =center; the fallback says so.
"$BIN" convert tests/data/astronaut.png -o "$tmp/p.png" --portrait --size 128 -q 2>"$tmp/err" &&
    [ "$(size_of "$tmp/p.png")" = 128x128 ] && [ ! -s "$tmp/err" ] && ok portrait_face || bad portrait_face
"$BIN" convert tests/data/astronaut.png -o "$tmp/c.png" --portrait=center --size 96 -q &&
    [ "$(size_of "$tmp/c.png")" = 96x96 ] && ok portrait_center || bad portrait_center
"$BIN" convert tests/data/coffee.png -o "$tmp/n.png" --portrait --size 64 -q 2>"$tmp/err" &&
    [ "$(size_of "$tmp/n.png")" = 64x64 ] && grep -q "no face found; used the centre crop" "$tmp/err" &&
    ok portrait_fallback || bad portrait_fallback

# --all-faces: NAME.face1.png, NAME.face2.png.
"$BIN" convert $GEN/mirrored.jpg -o "$tmp/m.png" --portrait --all-faces --size 64 -q &&
    [ -f "$tmp/m.face1.png" ] && [ -f "$tmp/m.face2.png" ] && [ ! -f "$tmp/m.face3.png" ] &&
    ok all_faces || bad all_faces

# --paste-faces: the whole photo, at its own (--max-side) size.
"$BIN" convert $GEN/mirrored.jpg -o "$tmp/paste.png" --paste-faces --size 96 --max-side 300 -q &&
    [ "$(size_of "$tmp/paste.png")" = 300x167 ] && ok paste_faces || bad paste_faces

# Usage errors exit 2.
usage() {
    "$BIN" convert tests/data/astronaut.png -o "$tmp/u.png" "$@" >/dev/null 2>&1
    [ $? -eq 2 ]
}
usage --all-faces && usage --portrait=sideways && usage --paste-faces --portrait &&
    usage --face-model hayao && usage --portrait --max-faces 0 && ok usage_errors || bad usage_errors

# The service: POST /api/v1/faces, portrait=face|center, paste_faces, X-Faces, X-Portrait,
# the refusals, the metrics.

"$BIN" serve --port 0 --workers 1 --threads 2 --queue 4 >"$tmp/serve.log" 2>&1 &
server=$!
for _ in $(seq 1 100); do
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\)\/.*/\1/p' "$tmp/serve.log" | head -n 1)
    [ -n "$port" ] && break
    sleep 0.2
done
if [ -z "$port" ]; then
    bad server_start
    cat "$tmp/serve.log"
else
    if /usr/bin/python3 - "$port" "$GEN" <<'PY'
import json, sys, urllib.request, urllib.error, io
from PIL import Image
port, gen = sys.argv[1], sys.argv[2]
base = "http://127.0.0.1:%s" % port
def post(path, file, ctype="image/jpeg"):
    req = urllib.request.Request(base + path, data=open(file, "rb").read(),
                                 headers={"Content-Type": ctype}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
fails = []
def check(name, cond):
    print(("PASS " if cond else "FAIL ") + name)
    if not cond:
        fails.append(name)
st, h, body = post("/api/v1/faces", gen + "/mirrored.jpg")
o = json.loads(body) if st == 200 else {}
check("api_faces", st == 200 and len(o.get("faces", [])) == 2 and h.get("X-Faces") == "2"
      and o["width"] == 900 and o["height"] == 500)
st, h, body = post("/api/v1/faces?max_side=450", gen + "/mirrored.jpg")
o2 = json.loads(body) if st == 200 else {}
check("api_faces_original_pixels", st == 200 and o2["width"] == 900 and len(o2["faces"]) == 2
      and all(min(abs(f["box"][0] - g["box"][0]) for g in o["faces"]) < 8 for f in o2["faces"]))
st, h, body = post("/api/v1/faces", "tests/data/coffee.png", "image/png")
check("api_faces_none", st == 200 and json.loads(body)["faces"] == [] and h.get("X-Faces") == "0")
st, h, body = post("/api/v1/convert?portrait=face&max_side=256", "tests/data/astronaut.png",
                   "image/png")
check("portrait_face", st == 200 and Image.open(io.BytesIO(body)).size == (512, 512) and
      h.get("X-Faces") == "1" and "X-Portrait" not in h)
st, h, body = post("/api/v1/convert?portrait=1&max_side=128", "tests/data/coffee.png", "image/png")
check("portrait_fallback", st == 200 and Image.open(io.BytesIO(body)).size == (512, 512) and
      h.get("X-Faces") == "0" and h.get("X-Portrait") == "center")
st, h, body = post("/api/v1/convert?portrait=center&max_side=128", "tests/data/astronaut.png",
                   "image/png")
check("portrait_center", st == 200 and "X-Faces" not in h)
st, h, body = post("/api/v1/convert?paste_faces=1&max_side=300", gen + "/mirrored.jpg")
check("paste_faces", st == 200 and Image.open(io.BytesIO(body)).size == (300, 167) and
      h.get("X-Faces") == "2")
bad = [post(q, "tests/data/coffee.png", "image/png")[0] for q in (
    "/api/v1/convert?paste_faces=1&portrait=1", "/api/v1/convert?face_model=hayao",
    "/api/v1/convert?portrait=sideways", "/api/v1/convert?paste_faces=2",
    "/api/v1/convert?paste_faces=1&face_model=nope")]
check("refusals", bad == [400, 400, 400, 400, 404])
m = urllib.request.urlopen(base + "/metrics").read().decode()
found = [l for l in m.splitlines() if l.startswith("animegan_faces_detected_total ")]
check("metrics", found and int(found[0].split()[1]) >= 6 and
      "animegan_face_detect_seconds_count" in m)
# /api/v1/faces is its own route: its 3 answers above, and the 4 conversions under convert.
series = dict(l.rsplit(" ", 1) for l in m.splitlines() if l and not l.startswith("#"))
check("metrics_faces_route",
      series.get('animegan_http_requests_total{route="faces",code="200"}') == "3" and
      series.get('animegan_http_requests_total{route="convert",code="200"}') == "4" and
      series.get('animegan_http_request_duration_seconds_count{route="faces"}') == "3" and
      series.get("animegan_images_converted_total") == "4")
sys.exit(1 if fails else 0)
PY
    then ok server_faces; else bad server_faces; fi
    kill "$server"
    wait "$server" 2>/dev/null
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
