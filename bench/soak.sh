#!/bin/sh
# bench/soak.sh - soak test of `animegan serve`: starts it on a free loopback port, sends
# --requests (default 10000) requests mixing photos, sizes, formats, models, options and body
# styles from workers+1 clients, samples the server's RSS every second, prints RSS after
# warm-up, maximum, at the end and the slope, and passes only if RSS after warm-up stays
# within 2% (or 4 MiB, whichever is larger). Draws bench/results/soak-<date>-<allocator>.png.
#
#   bench/soak.sh [--requests N] [--workers W] [--threads T] [--sizes 64,128,256]
#                 [--allocator asbuilt|glibc|jemalloc] [--bin PATH] [--out DIR]
#                 [other options of tests/stability/soak.py] [-- serve options]
#
# --allocator: asbuilt = the server's own malloc settings (mallopt at start-up); glibc = the
# same binary with mallopt() made a no-op (glibc's defaults); jemalloc = Debian's libjemalloc2
# by LD_PRELOAD. The driver is tests/stability/soak.py; docs/stability.md has the method.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
allocator=asbuilt
requests=10000
out=
pass=""
while [ $# -gt 0 ]; do
    case "$1" in
        --allocator) allocator=$2; shift 2 ;;
        --allocator=*) allocator=${1#*=}; shift ;;
        --requests) requests=$2; shift 2 ;;
        --requests=*) requests=${1#*=}; shift ;;
        --out) out=$2; shift 2 ;;
        -h|--help) sed -n '2,16p' "$0"; python3 tests/stability/soak.py --help; exit 0 ;;
        *) break ;;
    esac
done
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
[ -x "$BUILD/animegan" ] || { echo "soak: no $BUILD/animegan (run make)"; exit 1; }
mkdir -p build/stability bench/results
case "$allocator" in
    asbuilt) preload="" ;;
    glibc)
        ${CC:-cc} -shared -fPIC -O2 -o build/stability/mallopt_noop.so tests/stability/mallopt_noop.c
        preload=$PWD/build/stability/mallopt_noop.so ;;
    jemalloc)
        preload=$(ls /usr/lib/*/libjemalloc.so.2 2>/dev/null | head -n 1)
        [ -n "$preload" ] || { echo "soak: libjemalloc2 is not installed (scripts/install-deps.sh --all)"; exit 1; } ;;
    *) echo "soak: --allocator asbuilt, glibc or jemalloc"; exit 2 ;;
esac
stamp=$(date +%Y%m%d-%H%M%S)
[ -n "$out" ] || out=bench/results/soak-$stamp-$allocator
rc=0
python3 tests/stability/soak.py --requests "$requests" --out "$out" --label "$allocator" \
    --preload "$preload" --bin "$BUILD/animegan" "$@" || rc=$?
if [ -f "$out/plot.vars" ]; then
    if command -v gnuplot >/dev/null 2>&1; then
        gnuplot -e "dir='$out'; out='$out.png'" bench/soak_plot.gp && echo "plot: $out.png"
    else
        echo "soak: gnuplot is not installed: no plot (scripts/install-deps.sh --all)"
    fi
fi
exit $rc
