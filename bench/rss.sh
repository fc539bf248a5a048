#!/usr/bin/env bash
# rss.sh - peak RSS of one whole `animegan convert` of a 512x512 photo, per precision, as
# /usr/bin/time -v reports it ("Maximum resident set size", kB; MB here is kB / 1000, as
# the issue measured), against the targets of issue 12 (fp32 <= 150 MB, int8 <= 100 MB;
# bf16 has none). `auto` is what `convert` runs by default (int8 on a VNNI CPU).
#
#   bench/rss.sh [--threads N] [--input FILE] [--precisions "fp32 int8 auto bf16"]
#
# Prints a Markdown table and writes it to bench/results/rss-<date>.md. A precision the
# engine rejects is skipped with a note. Exits 1 when a conversion fails otherwise, or when
# fp32 does not run at all; a missed target is reported, not an error.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
THREADS=2
INPUT=tests/data/astronaut.png
PRECISIONS="fp32 int8 auto bf16"
while [ $# -gt 0 ]; do
    case $1 in
    --threads) THREADS=${2:?}; shift ;;
    --input) INPUT=${2:?}; shift ;;
    --precisions) PRECISIONS=${2:?}; shift ;;
    -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "rss.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done

[ -x /usr/bin/time ] || { echo "rss.sh: /usr/bin/time is missing (apt-get install time)" >&2; exit 1; }
make -s "$BUILD/animegan" >&2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p bench/results
OUT=bench/results/rss-$(date +%Y-%m-%d-%H%M%S).md

target() { case $1 in fp32) echo 150 ;; int8) echo 100 ;; *) echo "" ;; esac; }

status=0
{
    echo "# Peak RSS of one \`animegan convert\` ($INPUT, $THREADS threads)"
    echo
    echo "$(date '+%Y-%m-%d %H:%M %Z'); animegan.c $(git rev-parse --short HEAD 2>/dev/null || echo '?'); /usr/bin/time -v, whole process."
    echo
    echo "| precision | peak RSS MB | target MB | met | wall (m:ss) |"
    echo "|---|---|---|---|---|"
} >"$OUT"
notes=""
for p in $PRECISIONS; do
    rc=0
    timeout -k 10 600 /usr/bin/time -v -o "$TMP/$p.time" "$BUILD/animegan" convert "$INPUT" \
        -o "$TMP/$p.png" --threads "$THREADS" --precision "$p" -q 2>"$TMP/$p.err" || rc=$?
    if [ "$rc" -ne 0 ]; then
        if grep -q "not available" "$TMP/$p.err" && [ "$p" != fp32 ]; then
            notes="$notes\nNote: $p skipped: $(tail -1 "$TMP/$p.err")"
        else
            notes="$notes\nFAILED: $p (exit $rc): $(tail -1 "$TMP/$p.err")"
            status=1
        fi
        continue
    fi
    kb=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$TMP/$p.time")
    wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$TMP/$p.time")
    mb=$(awk -v kb="$kb" 'BEGIN { printf "%.0f", kb / 1000 }')
    t=$(target "$p")
    met="-"
    [ -n "$t" ] && { [ "$mb" -le "$t" ] && met=yes || met=no; }
    echo "| $p | $mb | ${t:--} | $met | $wall |" >>"$OUT"
done
[ -n "$notes" ] && printf "%b\n" "$notes" >>"$OUT"
cat "$OUT"
echo "written to $OUT"
exit "$status"
