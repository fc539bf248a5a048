#!/bin/sh
# bench/soak.sh - soak test of `animegan serve` (driver: tests/stability/soak.py). Starts the
# server on a free loopback port, sends --requests (default 10000) requests that mix photos,
# sizes, formats, models, options and body styles from workers+1 clients, samples the
# server's RSS every second, prints RSS after warm-up, maximum, at the end and the slope, and
# passes only if RSS after warm-up stays within 2% (or 4 MiB, whichever is larger). Draws
# bench/results/soak-<date>-<allocator>.png with gnuplot (bench/soak_plot.gp).
#
#   bench/soak.sh [--requests N] [--workers W] [--threads T] [--sizes 64,96,128,192,256]
#                 [--allocator asbuilt|glibc|jemalloc] [--progress 500] [--out DIR] ...
#   bench/soak.sh --help      every option
#
# --allocator compares malloc behaviour on the same binary: asbuilt = the server's own
# settings (mallopt at start-up), glibc = mallopt() made a no-op by LD_PRELOAD (glibc's
# defaults), jemalloc = Debian's libjemalloc2 by LD_PRELOAD. Method: docs/stability.md.
set -eu
cd "$(dirname "$0")/.."
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
BUILD=${BUILD:-build}
export BUILD
[ -x "$BUILD/animegan" ] || { echo "soak: no $BUILD/animegan (run make)"; exit 1; }
exec python3 tests/stability/soak.py "$@"
