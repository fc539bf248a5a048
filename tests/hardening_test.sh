#!/bin/sh
# The hardening tests of issue 11 (tests/stability/hardening.py): hostile images against
# the memory bound, cheap denial of service, HTTP framing, logs and privacy, each against
# the real server on loopback. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
if ! command -v python3 >/dev/null 2>&1; then
    echo "FAIL hardening: python3 is needed (scripts/install-deps.sh --test)"
    echo "0 passed, 1 failed"
    exit 1
fi
exec python3 tests/stability/hardening.py "$@"
