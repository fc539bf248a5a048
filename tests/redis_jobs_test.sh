#!/bin/sh
# Video jobs on Redis (--jobs-redis) end to end (tests/redis_jobs.py): its own redis-server,
# three instances sharing one --jobs-dir behind nginx (contrib/nginx/animegan-cluster.conf);
# kill -9, SIGTERM, DELETE elsewhere, a Redis restart, the per-client bound, garbage
# replies, bad URLs. Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
for tool in python3 ffmpeg ffprobe redis-server; do
    command -v $tool >/dev/null 2>&1 || {
        echo "FAIL redis_jobs_test: $tool is needed (scripts/install-deps.sh --test)"
        echo "0 passed, 1 failed"
        exit 1
    }
done
exec python3 tests/redis_jobs.py "$@"
