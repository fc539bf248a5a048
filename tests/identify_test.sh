#!/bin/sh
# Which face by who it is (issue 31 item 6): `animegan fuse --target-like / --source-like PHOTO`
# on real photos (tests/data/faces/identity/, tools/make_identity_images.py): the result is
# byte for byte the one of --target-face N / --source-face N with N the face of that person
# (told by where it stands: rally.jpg has Biden left of Obama, group.jpg Biden, Collins, Obama
# in thirds); a PHOTO without a face and a double choice are refused in one line; then the
# service's `target_like` part (and its X-Target-Face header). Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
BIN=$BUILD/animegan
export ANIMEGAN_MODEL_PATH=$PWD/models
F=tests/data/faces
I=$F/identity
tmp=$(mktemp -d)
server_pid=
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { echo "PASS $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }

# The 1-based index (largest first, as --target-face counts) of the face of IMAGE whose box
# centre lies in [LO, HI) of the width.
face_at() {
    "$BIN" faces --json --max-faces 64 -t 1 "$1" | /usr/bin/python3 -c "
import json, sys
o = json.loads(sys.stdin.readline())
hits = [i + 1 for i, f in enumerate(o['faces'])
        if $2 <= (f['box'][0] + f['box'][2]) / 2 / o['width'] < $3]
assert len(hits) == 1, hits
print(hits[0])"
}

# like NAME WHICH IMAGE LO HI ARGS...: fuse ARGS with --WHICH-like equals --WHICH-face N.
like() {
    name=$1 which=$2 image=$3 lo=$4 hi=$5
    shift 5
    n=$(face_at "$image" "$lo" "$hi") || { bad "$name"; return; }
    if "$BIN" fuse "$@" -t 1 -o "$tmp/like.png" 2>"$tmp/err" &&
        "$BIN" fuse $(echo "$@" | sed "s#--$which-like [^ ]*#--$which-face $n#") \
            -t 1 -o "$tmp/face.png" 2>/dev/null &&
        cmp -s "$tmp/like.png" "$tmp/face.png" && grep -q "$which face $n of" "$tmp/err"; then
        ok "$name"
        sed 's/^/  /' "$tmp/err"
    else
        bad "$name"
        cat "$tmp/err"
    fi
}

like target_like_rally_obama target $I/rally.jpg 0.5 1 \
    -s $I/obama_speech.jpg -T $I/rally.jpg --target-like $F/obama.jpg
like target_like_group_obama target $I/group.jpg 0.667 1 \
    -s $F/biden.jpg -T $I/group.jpg --target-like $F/obama.jpg
like source_like_rally_biden source $I/rally.jpg 0 0.5 \
    -s $I/rally.jpg --source-like $I/biden_standing.jpg -T $F/obama.jpg

# A PHOTO with no face: one line naming the option and the file, exit 1, nothing written.
"$BIN" fuse -s $F/obama.jpg -T $I/rally.jpg --target-like tests/data/coffee.png \
    -o "$tmp/none.png" 2>"$tmp/err"
rc=$?
if [ $rc -eq 1 ] && [ ! -e "$tmp/none.png" ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
    grep -qx "animegan: --target-like tests/data/coffee.png: no face found to compare faces with" \
        "$tmp/err"; then
    ok like_photo_without_face
else
    bad like_photo_without_face
    echo "  exit $rc"
    cat "$tmp/err"
fi

# Two answers to one question: a usage error.
"$BIN" fuse -s $F/obama.jpg -T $I/rally.jpg --target-like $F/obama.jpg --target-face 2 \
    -o "$tmp/x.png" 2>"$tmp/err"
rc=$?
[ $rc -eq 2 ] && grep -q "both choose the target face" "$tmp/err" && ok like_and_face_refused ||
    { bad like_and_face_refused; cat "$tmp/err"; }

# The service: a `target_like` part picks the face as --target-like does (the same bytes as
# target_face=N, the choice in X-Target-Face), a target_like without a face is a 422 naming
# it, target_like with target_face a 400.
n=$(face_at $I/rally.jpg 0.5 1)
"$BIN" serve --port 0 --workers 1 --threads 1 >"$tmp/serve.log" 2>&1 &
server_pid=$!
port=
for _ in $(seq 1 100); do
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\)\/.*/\1/p' "$tmp/serve.log" | head -n 1)
    [ -n "$port" ] && break
    sleep 0.2
done
if [ -z "$port" ]; then
    bad api_server_start
    cat "$tmp/serve.log"
else
    /usr/bin/python3 - "$port" "$n" >"$tmp/api.log" 2>&1 <<'PY'
import json, sys, urllib.error, urllib.request
port, n = sys.argv[1], int(sys.argv[2])
F, I = "tests/data/faces/", "tests/data/faces/identity/"
def post(query, fields):
    b = b"identifyboundary"
    body = b""
    for name, path in fields:
        body += b"--" + b + b"\r\nContent-Disposition: form-data; name=\"" + name.encode() + \
            b"\"; filename=\"x\"\r\nContent-Type: application/octet-stream\r\n\r\n" + \
            open(path, "rb").read() + b"\r\n"
    body += b"--" + b + b"--\r\n"
    req = urllib.request.Request("http://127.0.0.1:%s/api/v1/fuse%s" % (port, query), data=body,
                                 method="POST",
                                 headers={"Content-Type": "multipart/form-data; boundary=" + b.decode()})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()
def check(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else " (%s)" % (detail,)))
pair = [("source", I + "obama_speech.jpg"), ("target", I + "rally.jpg")]
st, h, like = post("", pair + [("target_like", F + "obama.jpg")])
st2, _, by_n = post("?target_face=%d" % n, pair)
check("api_target_like_picks", st == st2 == 200 and like == by_n and
      h["X-Target-Face"] == str(n) and float(h["X-Target-Distance"]) < 0.6,
      "%s %s %s %s" % (st, st2, h.get("X-Target-Face"), h.get("X-Target-Distance")))
st, h, body = post("", pair + [("target_like", "tests/data/coffee.png")])
check("api_target_like_no_face_422", st == 422 and
      json.loads(body)["error"]["message"] == "the target_like image: no face found to compare faces with",
      "%s %s" % (st, body[:200]))
st, h, body = post("", pair + [("target_like", "tests/data/generated/huge_header.png")])
check("api_target_like_huge_413", st == 413 and b"target_like" in body, "%s %s" % (st, body[:200]))
st, h, body = post("", pair + [("target_like", "tests/data/truncated.jpg")])
check("api_target_like_undecodable_422", st == 422 and b"target_like" in body,
      "%s %s" % (st, body[:200]))
st, h, body = post("", pair + [("target_like", F + "obama.jpg"), ("target_like", F + "biden.jpg")])
check("api_target_like_twice_400", st == 400 and b"'target_like' twice" in body, "%s %s" % (st, body[:200]))
st, h, body = post("?target_face=2", pair + [("target_like", F + "obama.jpg")])
check("api_target_like_and_face_400", st == 400 and b"both choose the target face" in body,
      "%s %s" % (st, body[:200]))
PY
    while read -r line; do
        case $line in
        PASS*) ok "${line#PASS }" ;;
        FAIL*) bad "${line#FAIL }" ;;
        *) echo "  $line" ;;
        esac
    done <"$tmp/api.log"
    kill "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
    server_pid=
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
