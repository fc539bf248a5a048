#!/bin/sh
# Browser test of the web page (tests/browser/page_test.js): Debian's chromium driven by
# npm playwright-core uploads a photo through the page and checks the result. Needs
# /usr/bin/chromium (or $CHROMIUM) and node; installs playwright-core into
# tests/browser/node_modules from the lock file on first use. Skipped, with a message, only
# when chromium is not installed. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
export CHROMIUM

if [ ! -x "$CHROMIUM" ]; then
    echo "SKIP browser_test: $CHROMIUM is not installed (scripts/install-deps.sh --test installs it)"
    echo "0 passed, 0 failed"
    exit 0
fi
if ! command -v node >/dev/null 2>&1; then
    echo "FAIL browser_test: node is not installed (scripts/install-deps.sh --test)"
    echo "0 passed, 1 failed"
    exit 1
fi
if [ ! -d tests/browser/node_modules/playwright-core ]; then
    echo "installing playwright-core into tests/browser/node_modules (npm ci)"
    if ! (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error); then
        echo "FAIL browser_test: npm ci in tests/browser failed (is the npm registry reachable?)"
        echo "0 passed, 1 failed"
        exit 1
    fi
fi
exec node tests/browser/page_test.js "$@"
