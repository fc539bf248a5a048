#!/bin/sh
# Two `animegan serve` instances behind Debian's nginx (contrib/nginx/animegan.conf) on
# loopback: requests are served by both, and by the survivor when one drains and exits; and
# video jobs, each routed back to the instance that holds it by the port in its id. Both are
# also part of tests/server_test.sh and tests/video_jobs_test.sh; this runs only them.
set -u
cd "$(dirname "$0")/../.."
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
python3 tests/server/driver.py nginx_load_balancing
a=$?
python3 tests/video_jobs.py jobs_behind_nginx
b=$?
[ $a -eq 0 ] && [ $b -eq 0 ]
