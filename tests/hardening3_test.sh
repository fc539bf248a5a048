#!/bin/sh
# The hardening tests of issue 35, items 2-9 (tests/stability/hardening3.py): hostile model
# views, option parsing, per-client keys, the bound of an upscaler's own scale, log noise,
# the defaults a small host gets, abandoned work and upscaling video jobs, each against the
# real CLI or server on loopback. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
if ! command -v python3 >/dev/null 2>&1; then
    echo "FAIL hardening3: python3 is needed (scripts/install-deps.sh --test)"
    echo "0 passed, 1 failed"
    exit 1
fi
exec python3 tests/stability/hardening3.py "$@"
