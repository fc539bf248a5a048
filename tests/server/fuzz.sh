#!/bin/sh
# tests/server/fuzz.sh [seconds] - build the server parsers' libFuzzer target
# (tests/server/fuzz_server.c: Content-Type, multipart, signatures, query options) with
# clang + ASan + UBSan into build/fuzz/ and run it for `seconds` (default 20) on one thread,
# seeded with valid requests. Needs build/libanimegan.a (for ag_format_parse). A crash leaves
# build/fuzz/crash_server_*: fix it and add the input to tests/test_server_parsers.c.
set -eu
cd "$(dirname "$0")/../.."
seconds=${1:-20}
out=build/fuzz
cc=${FUZZ_CC:-clang}
mkdir -p "$out/seeds_server" "$out/corpus_server"

# shellcheck disable=SC2046 # word splitting of pkg-config output is intended
$cc -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -Wall -Wextra -Werror -Iinclude -Iserver -o "$out/fuzz_server" tests/server/fuzz_server.c \
    build/libanimegan.a $(pkg-config --libs vips libpng libjpeg libwebp libzip libcjson) -ldnnl -lm -fopenmp -pthread

b=XyZ
printf '\0multipart/form-data; boundary=%s\n--%s\r\nContent-Disposition: form-data; name="image"; filename="a.png"\r\nContent-Type: image/png\r\n\r\n\211PNG\r\n\032\n\r\n--%s--\r\n' \
    $b $b $b >"$out/seeds_server/multipart"
printf '\0image/jpeg\n\377\330\377\340' >"$out/seeds_server/raw"
printf '\2GET /api/v1/status?request_id=x HTTP/1.1\r\nHost: t\r\nX-A: b\r\n\r\n' \
    >"$out/seeds_server/head"
printf '\1model=hayao&portrait=1&side_by_side=0&max_side=512&format=webp&quality=80' \
    >"$out/seeds_server/options"
printf '%s\n' '"multipart/form-data"' '"boundary="' '"Content-Disposition"' '"form-data"' \
    '"name=\"image\""' '"filename="' '"Content-Type"' '"image/png"' '"\x0d\x0a"' '"--"' \
    '"model="' '"portrait="' '"max_side="' '"format="' '"quality="' '"side_by_side="' \
    '"RIFF"' '"WEBP"' '"ftypheic"' >"$out/server.dict"

echo "== fuzz_server for ${seconds}s"
status=0
"$out/fuzz_server" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -dict="$out/server.dict" -print_final_stats=1 -artifact_prefix="$out/crash_server_" \
    "$out/corpus_server" "$out/seeds_server" 2>"$out/server.log" || status=1
grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$out/server.log" || true
grep -E 'ERROR|SUMMARY|Test unit written' "$out/server.log" || true
exit $status
