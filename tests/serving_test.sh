#!/bin/sh
# Hardening 2, models and serving (issue 17: findings 8, 9, 10, 12; tests/stability/serving.py):
# non-style models and absurd memory bounds refused at start-up, the descriptor limit,
# every bundled style served, the tiny network at any side from 8. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
if ! command -v python3 >/dev/null 2>&1; then
    echo "FAIL serving: python3 is needed (scripts/install-deps.sh --test)"
    echo "0 passed, 1 failed"
    exit 1
fi
exec python3 tests/stability/serving.py "$@"
