#!/bin/sh
# `make install` and `make uninstall` into a DESTDIR (issue 33): the installed binary, run
# from another directory with no ANIMEGAN_MODEL_PATH, finds the installed models and
# converts a photo; the units name the installed binary; the man pages are clean roff and
# list the options; uninstall leaves no file behind. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
SRC=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { echo "PASS $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }
unset ANIMEGAN_MODEL_PATH
root=$tmp/root
prefix=/opt/anime

if make -s BUILD="$BUILD" DESTDIR="$root" PREFIX=$prefix install >"$tmp/install.log" 2>&1; then
    ok make_install
else
    bad make_install
    tail -n 5 "$tmp/install.log"
fi

BIN=$root$prefix/bin/animegan
mkdir "$tmp/elsewhere"
cp tests/data/chelsea.png "$tmp/elsewhere/cat.png"
if (cd "$tmp/elsewhere" && "$BIN" convert cat.png -o cat-anime.png -q) 2>"$tmp/err" &&
    [ -s "$tmp/elsewhere/cat-anime.png" ] &&
    ! cmp -s "$tmp/elsewhere/cat-anime.png" "$tmp/elsewhere/cat.png"; then
    ok installed_binary_converts
else
    bad installed_binary_converts
    cat "$tmp/err"
fi
# every bundled style is found where the binary looks, not in the source tree
if (cd / && "$BIN" models) >"$tmp/models" 2>&1 && grep -q "file: *$root$prefix/bin/../share/animegan/models/hayao.safetensors" \
    "$tmp/models" && ! grep -q "$SRC/models" "$tmp/models"; then
    ok installed_models_found
else
    bad installed_models_found
    head -n 5 "$tmp/models"
fi

units_ok=1
for u in animegan.service animegan@.service; do
    grep -q "^ExecStart=$prefix/bin/animegan serve" "$root$prefix/lib/systemd/system/$u" ||
        units_ok=0
done
[ -f "$root$prefix/share/animegan/nginx/animegan.conf" ] || units_ok=0
[ $units_ok = 1 ] && ok units_and_nginx_installed || bad units_and_nginx_installed

man_ok=1
for page in "$root$prefix"/share/man/man1/*.1; do
    warnings=$(groff -man -ww -z "$page" 2>&1)
    [ -z "$warnings" ] || { man_ok=0; echo "$page: $warnings"; }
done
# the convert page lists what the command takes (its help, checked against its table)
man -l "$root$prefix/share/man/man1/animegan-convert.1" 2>/dev/null | col -b >"$tmp/convert.txt"
for option in --output --precision --restore-faces --upscale --crf; do
    grep -q -- "$option" "$tmp/convert.txt" || { man_ok=0; echo "no $option in the convert page"; }
done
[ "$(ls "$root$prefix"/share/man/man1 | wc -l)" -eq 9 ] || man_ok=0
[ $man_ok = 1 ] && ok man_pages || bad man_pages

make -s BUILD="$BUILD" DESTDIR="$root" PREFIX=$prefix uninstall >"$tmp/uninstall.log" 2>&1
left=$(find "$root" -type f | head -n 5)
if [ -z "$left" ]; then ok make_uninstall_removes_all; else
    bad make_uninstall_removes_all
    echo "$left"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
