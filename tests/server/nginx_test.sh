#!/bin/sh
# Two `animegan serve` instances behind Debian's nginx (contrib/nginx/animegan.conf) on
# loopback: requests are served by both, and by the survivor when one drains and exits.
# Also part of tests/server_test.sh; this runs only that test.
set -u
cd "$(dirname "$0")/../.."
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
exec python3 tests/server/driver.py nginx_load_balancing
