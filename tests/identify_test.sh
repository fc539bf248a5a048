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
    "$BIN" faces --json --max-faces 64 "$1" | /usr/bin/python3 -c "
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
    if "$BIN" fuse "$@" -o "$tmp/like.png" 2>"$tmp/err" &&
        "$BIN" fuse $(echo "$@" | sed "s#--$which-like [^ ]*#--$which-face $n#") \
            -o "$tmp/face.png" 2>/dev/null &&
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

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
