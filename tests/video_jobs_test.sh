#!/bin/sh
# The video jobs API of `animegan serve` end to end (tests/video_jobs.py): submit, poll,
# download, bad inputs, cancel, --max-jobs, quota, TTL, photo fairness, kill -9 and restart,
# upscale=N (sizes, refusals at submission, recovery), restore=K (faces restored, refusals,
# the price).
# Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export BUILD
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
for tool in python3 ffmpeg ffprobe; do
    command -v $tool >/dev/null 2>&1 || {
        echo "FAIL video_jobs_test: $tool is needed (scripts/install-deps.sh --test)"
        echo "0 passed, 1 failed"
        exit 1
    }
done
exec python3 tests/video_jobs.py "$@"
