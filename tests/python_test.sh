#!/bin/sh
# The Python package (python/, issue 18): installed offline into a fresh venv that sees
# Debian's numpy, PIL, pytest and Flask (--system-site-packages), exactly as the README says,
# then pytest tests/python against it (and the CLI of the same build). Prints
# "N passed, N failed"; a skip (the Gradio example where Gradio is absent) is neither, and
# is named on its own line.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
PYTHON=${PYTHON:-/usr/bin/python3}
venv=$BUILD/python-venv
log=$BUILD/python-install.log
mkdir -p "$BUILD"

fail() {
    echo "FAIL python: $1"
    [ -f "$log" ] && tail -n 30 "$log"
    echo "0 passed, 1 failed"
    exit 1
}

[ -f "$BUILD/libanimegan.a" ] || fail "$BUILD/libanimegan.a missing: run make"
for module in numpy PIL pytest; do
    "$PYTHON" -c "import $module" 2>/dev/null || fail "$PYTHON lacks $module (scripts/install-deps.sh --test)"
done
# A fresh venv and a fresh build (setuptools' python/build/ could hold an older object).
rm -rf "$venv" python/build python/animegan.egg-info
"$PYTHON" -m venv --system-site-packages "$venv" >"$log" 2>&1 || fail "cannot make a venv"
# Offline: no index, no build isolation (setuptools and numpy from Debian).
ANIMEGAN_BUILD=$BUILD "$venv/bin/pip" install --no-build-isolation --no-index ./python \
    >>"$log" 2>&1 || fail "pip install ./python failed"
# The installed package, not the source tree's: run from outside python/.
"$venv/bin/python" -c "import animegan, sys; assert '/site-packages/' in animegan.__file__, animegan.__file__" \
    >>"$log" 2>&1 || fail "the venv does not import the installed package"

out=$BUILD/python-pytest.log
"$venv/bin/python" -m pytest -p no:cacheprovider -q -rfEs tests/python >"$out" 2>&1
rc=$?
cat "$out"
last=$(grep -E '^[=]* ?[0-9]+ (passed|failed|skipped|error)' "$out" | tail -n 1)
count() { echo "$last" | grep -oE "[0-9]+ $1" | grep -oE '[0-9]+' || echo 0; }
passed=$(count passed)
skipped=$(count skipped)
[ "$skipped" -gt 0 ] && echo "$skipped skipped (named above: not counted as passed)"
failed=$(($(count failed) + $(count error)))
[ "$rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1 # pytest crashed or collected nothing
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
