#!/bin/sh
# End-to-end tests of `animegan serve` (tests/server/driver.py): the real binary on
# loopback, every endpoint and status code, both body styles, a burst over the queue, the
# memory bound, client-gone and graceful shutdown. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
# The service is on loopback: never send test traffic through a proxy.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
if ! command -v python3 >/dev/null 2>&1; then
    echo "FAIL server_test: python3 is needed (scripts/install-deps.sh --test)"
    echo "0 passed, 1 failed"
    exit 1
fi
exec python3 tests/server/driver.py "$@"
