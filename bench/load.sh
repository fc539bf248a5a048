#!/bin/sh
# bench/load.sh - load test of `animegan serve` on /api/v1/convert with wrk (Debian) and
# bench/load.lua: for each concurrency (default 1 2 8 64) it runs wrk for --duration seconds
# and reports throughput (200s per second), latency p50/p99 as wrk sees it (every response)
# and as the server logs it for the 200s, the share of 503s and any other status or socket
# error. Then it compares the throughput at concurrency >= workers with what the
# single-image latency predicts (workers / mean latency at concurrency 1): within 10% passes.
#
#   bench/load.sh [--workers 2] [--threads 2] [--queue 16] [--duration 30]
#                 [--concurrency "1 2 8 64"] [--image tests/data/rocket.jpg]
#                 [--query "max_side=256"] [--bin build/animegan] [--wrk-nice 19]
#
# Writes bench/results/load-<date>.md (the table) next to the raw wrk and server output.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
bin=$BUILD/animegan
workers=2
threads=
queue=16
duration=30
levels="1 2 8 64"
image=tests/data/rocket.jpg
query="max_side=256"
# wrk runs on the same cores as the server; at a low priority it behaves like clients on
# other machines instead of taking CPU from inference (--wrk-nice 0 to compete evenly).
wrk_nice=19
while [ $# -gt 0 ]; do
    case "$1" in
        --workers) workers=$2 ;;
        --threads) threads=$2 ;;
        --queue) queue=$2 ;;
        --duration) duration=$2 ;;
        --concurrency) levels=$2 ;;
        --image) image=$2 ;;
        --query) query=$2 ;;
        --bin) bin=$2 ;;
        --wrk-nice) wrk_nice=$2 ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "load: unknown option $1 (--help)"; exit 2 ;;
    esac
    shift 2
done
threads=${threads:-$workers}
command -v wrk >/dev/null 2>&1 || { echo "load: wrk is not installed (scripts/install-deps.sh --all)"; exit 1; }
[ -x "$bin" ] || { echo "load: no $bin (run make)"; exit 1; }
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
export ANIMEGAN_MODEL_PATH=${ANIMEGAN_MODEL_PATH:-$PWD/models}

stamp=$(date +%Y%m%d-%H%M%S)
out=bench/results/load-$stamp
mkdir -p "$out"

# Calibration, outside the server: one single-thread inference alone, then `workers` of them
# at once. On a machine of its own the second is as fast as the first; on a shared one it
# says how many cores the workers really get (their speed-up, ideally `workers`).
side=$(printf '%s' "$query" | sed -n 's/.*max_side=\([0-9]*\).*/\1/p')
side=${side:-256}
bench_ms() {
    "$bin" bench --size "$side" --threads 1 --runs 4 --warmup 1 2>/dev/null |
        sed -n 's/.*"ms_median": *\([0-9.]*\).*/\1/p'
}
alone=$(bench_ms)
for i in $(seq 1 "$workers"); do bench_ms >"$out/calibrate-$i.txt" & done
wait
together=$(cat "$out"/calibrate-*.txt | awk '{s += $1; n++} END {if (n) printf "%.1f", s / n}')
speedup=$(awk -v a="$alone" -v t="$together" -v w="$workers" \
    'BEGIN {if (a > 0 && t > 0) printf "%.2f", w * a / t; else print 0}')
echo "calibration: ${side}px single-thread inference ${alone} ms alone, ${together} ms with" \
    "$workers at once: speed-up $speedup of $workers"
# More connections than the largest level, so the kernel backlog never decides for us.
maxc=0
for c in $levels; do [ "$c" -gt "$maxc" ] && maxc=$c; done
"$bin" serve --port 0 --workers "$workers" --threads "$threads" --queue "$queue" \
    --max-connections $((maxc + 8)) --timeout 120 --queue-timeout 120 2>"$out/server.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT INT TERM
port=
for _ in $(seq 1 600); do
    port=$(sed -n 's|.*listening on http://[^ ]*:\([0-9][0-9]*\)/.*|\1|p' "$out/server.log")
    [ -n "$port" ] && break
    kill -0 $pid 2>/dev/null || { cat "$out/server.log"; exit 1; }
    sleep 0.1
done
[ -n "$port" ] || { echo "load: the server did not start"; exit 1; }
url=http://127.0.0.1:$port
case "$image" in
    *.png) ctype=image/png ;; *.jpg|*.jpeg) ctype=image/jpeg ;; *.webp) ctype=image/webp ;;
    *) ctype=application/octet-stream ;;
esac
export LOAD_IMAGE=$PWD/$image LOAD_CTYPE=$ctype LOAD_PATH="/api/v1/convert?$query"
# Warm-up: each worker plans its arena for this size.
for _ in $(seq 1 $((workers * 2))); do
    curl -s --noproxy '*' -o /dev/null -H "Content-Type: $ctype" --data-binary "@$image" \
        "$url$LOAD_PATH"
done
echo "load: $bin serve --workers $workers --threads $threads --queue $queue; $image ?$query;" \
    "${duration}s per level on $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
# utime + stime of a process, in clock ticks (fields 14 and 15 of /proc/PID/stat).
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
for c in $levels; do
    t=$c
    [ "$t" -gt 2 ] && t=2
    before=$(wc -l <"$out/server.log")
    cpu0=$(cpu_ticks $pid)
    # wrk shares the machine: its CPU time is measured too (GNU time when installed).
    if [ -x /usr/bin/time ]; then
        /usr/bin/time -f "LOAD wrk_cpu_s=%U %S" -a -o "$out/wrk-c$c.txt" \
            nice -n "$wrk_nice" wrk -t "$t" -c "$c" -d "${duration}s" --timeout 120s \
            -s bench/load.lua "$url" >"$out/wrk-c$c.out" 2>&1
        cat "$out/wrk-c$c.out" >>"$out/wrk-c$c.txt"
    else
        nice -n "$wrk_nice" wrk -t "$t" -c "$c" -d "${duration}s" --timeout 120s \
            -s bench/load.lua "$url" >"$out/wrk-c$c.txt" 2>&1
    fi
    echo "LOAD server_cpu_ticks=$(($(cpu_ticks $pid) - cpu0)) hz=$(getconf CLK_TCK)" \
        >>"$out/wrk-c$c.txt"
    sleep 1 # the last responses' log lines
    tail -n +"$((before + 1))" "$out/server.log" >"$out/server-c$c.log"
done
kill -TERM $pid
wait $pid || true
trap - EXIT INT TERM

python3 - "$out" "$workers" "$levels" "$image" "$query" "$duration" "$speedup" "$alone" \
    "$together" <<'PY'
import os, re, sys
out, workers, levels, image, query, duration, speedup, alone, together = sys.argv[1:10]
workers, speedup = int(workers), float(speedup)
rows, ok = [], True
def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")
for c in levels.split():
    text = open(os.path.join(out, "wrk-c%s.txt" % c)).read()
    m = re.search(r"LOAD responses=(\d+) duration_s=([\d.]+) mean_ms=([\d.]+) p50_ms=([\d.]+) "
                  r"p99_ms=([\d.]+) max_ms=([\d.]+) connect_errors=(\d+) read_errors=(\d+) "
                  r"write_errors=(\d+) timeouts=(\d+)", text)
    if not m:
        print(text); sys.exit(1)
    n, dur, mean, p50, p99, mx = int(m[1]), float(m[2]), float(m[3]), float(m[4]), float(m[5]), float(m[6])
    sock = sum(int(m[i]) for i in range(7, 11))
    st = {int(a): int(b) for a, b in re.findall(r"LOAD status=(\d+) count=(\d+)", text)}
    lat = []
    for line in open(os.path.join(out, "server-c%s.log" % c)):
        if "route=convert" in line and " status=200 " in line:
            lat.append(float(re.search(r"total_ms=([\d.]+)", line)[1]))
    m2 = re.search(r"LOAD wrk_cpu_s=([\d.]+) ([\d.]+)", text)
    wrk_cpu = float(m2[1]) + float(m2[2]) if m2 else float("nan")
    m3 = re.search(r"LOAD server_cpu_ticks=(\d+) hz=(\d+)", text)
    srv_cpu = int(m3[1]) / int(m3[2]) if m3 else float("nan")
    ok200 = st.get(200, 0)
    other = n - ok200 - st.get(503, 0)
    rows.append(dict(c=int(c), n=n, rps=ok200 / dur, p50=p50, p99=p99, sp50=pct(lat, .5),
                     sp99=pct(lat, .99), share503=st.get(503, 0) / n if n else 0, other=other,
                     sock=sock, mean=mean, statuses=st, srv_cpu=srv_cpu / dur,
                     wrk_cpu=wrk_cpu / dur))
base = rows[0] if rows and rows[0]["c"] == 1 else None
lines = ["| concurrency | responses | 200/s | p50 ms | p99 ms | p50 ms (200s, server) | "
         "p99 ms (200s, server) | 503 share | other errors | predicted 200/s | vs predicted "
         "| vs calibrated | server CPU | wrk CPU |",
         "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
for r in rows:
    pred, vs, vcal = "", "", ""
    if base and r["c"] >= workers:
        p = workers * 1000.0 / base["mean"]
        pred = "%.2f" % p
        vs = "%+.0f%%" % (100 * (r["rps"] / p - 1))
        if speedup > 0:
            vcal = "%+.0f%%" % (100 * (r["rps"] / (p * speedup / workers) - 1))
        if r["rps"] < 0.9 * p:
            ok = False
    if r["other"] or r["sock"]:
        ok = False
    lines.append("| %d | %d | %.2f | %.0f | %.0f | %.0f | %.0f | %.1f%% | %d | %s | %s | %s "
                 "| %.0f%% | %.0f%% |" % (
        r["c"], r["n"], r["rps"], r["p50"], r["p99"], r["sp50"], r["sp99"], 100 * r["share503"],
        r["other"] + r["sock"], pred, vs, vcal, 100 * r["srv_cpu"], 100 * r["wrk_cpu"]))
table = "\n".join(lines)
note = ("\nPrediction: %d workers / mean latency at concurrency 1 (%.0f ms). \"vs calibrated\" "
        "scales it by the speed-up %d single-thread inferences at once really got outside the "
        "server (%.2f of %d: %s ms alone, %s ms together). p50/p99 are wrk's (all responses, "
        "503s included); the server columns are the 200s' total_ms from its log. CPU is "
        "user + system time over the run's wall time (200%% = both cores).\n"
        % (workers, base["mean"], workers, speedup, workers, alone, together)) if base else ""
with open(out + ".md", "w") as f:
    f.write("# bench/load.sh %s, %s ?%s, %ss per level\n\n%s\n%s" % (
        os.path.basename(out), image, query, duration, table, note))
print(table + note)
print("load: %s (%s.md)" % ("PASS" if ok else "FAIL: throughput under 90% of the prediction "
                            "or errors other than 503", out))
sys.exit(0 if ok else 1)
PY
