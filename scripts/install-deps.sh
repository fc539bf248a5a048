#!/bin/sh
# Install the Debian packages animegan.c needs to build, run and test. Idempotent: runs
# apt-get (after apt-get update) only when a package is missing. Needs root or sudo.
set -eu

BUILD_PKGS="build-essential pkg-config libdnnl-dev libvips-dev libpng-dev libjpeg62-turbo-dev libwebp-dev libexif-dev libmicrohttpd-dev libzip-dev libcjson-dev libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev libavfilter-dev libhiredis-dev"
TEST_PKGS="valgrind systemd clang clang-format libclang-rt-14-dev curl python3 python3-numpy python3-onnx chromium nginx time ffmpeg python3-dev python3-venv python3-pip python3-setuptools python3-wheel python3-pytest python3-pil python3-flask redis-server"
TOOLS_PKGS="gnuplot-nox wrk libjemalloc2"
# make test-container: podman builds and runs contrib/container/Containerfile from a Debian
# base made by mmdebstrap; runc for hosts whose cgroups crun refuses (v1 and v2 at once).
CONTAINER_PKGS="podman runc mmdebstrap"

pkgs="$BUILD_PKGS"
case "${1:-}" in
    --test) pkgs="$BUILD_PKGS $TEST_PKGS" ;;
    --all) pkgs="$BUILD_PKGS $TEST_PKGS $TOOLS_PKGS python3-torch python3-numpy python3-pil" ;;
    --container) pkgs="$BUILD_PKGS $TEST_PKGS $CONTAINER_PKGS" ;;
esac

missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# Node.js comes with the machine image here (npm from Debian conflicts with it); install
# Debian's only when there is none.
if [ "$pkgs" != "$BUILD_PKGS" ] && ! command -v npm >/dev/null 2>&1; then
    missing="$missing nodejs npm"
fi
[ -z "$missing" ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "installing:$missing"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
