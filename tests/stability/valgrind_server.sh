#!/bin/sh
# tests/stability/valgrind_server.sh - `animegan serve` under valgrind memcheck for a short
# load: conversions in both body styles and three output formats, then the error paths
# (undecodable, too many pixels, empty, bad option, unknown model, not an image, malformed
# and duplicate multipart, body over the limit, a client gone mid-upload, a slow client timed
# out), then SIGTERM. Passes when the server answers each as expected, exits 0 and memcheck
# reports no error and no definite or indirect leak (libvips, GLib and OpenMP keep caches
# "still reachable" by design, as in tests/valgrind.sh).
#
# Slow: oneDNN's JIT under valgrind costs up to a minute per new image shape, so every
# conversion is the same 32 x 21 shape. 1.5-7 minutes; part of tests/stability_test.sh.
# Prints "N passed, N failed".
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
bin=$PWD/$BUILD/animegan
if [ ! -x "$bin" ] || ! command -v valgrind >/dev/null 2>&1; then
    echo "FAIL valgrind_server: needs $bin (make) and valgrind (scripts/install-deps.sh --test)"
    echo "0 passed, 1 failed"
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# libvips loads its modules from $VIPSHOME/lib/vips-modules-8.x or, on Debian, from the
# multiarch path; vips-jxl pulls in libhwy, whose start-up runs an instruction valgrind 3.19
# cannot execute (SIGILL). Keep only the HEIF module.
moddir=$(ls -d /usr/lib/*/vips-modules-* 2>/dev/null | head -n 1)
if [ -n "$moddir" ]; then
    sub=$(basename "$(dirname "$moddir")")/$(basename "$moddir")
    mkdir -p "$tmp/vipshome/$sub"
    [ -f "$moddir/vips-heif.so" ] && ln -s "$moddir/vips-heif.so" "$tmp/vipshome/$sub/"
fi
cat >"$tmp/animegan" <<WRAP
#!/bin/sh
export VIPSHOME=$tmp/vipshome VIPS_NOVECTOR=1
exec valgrind --fair-sched=yes --leak-check=full --show-leak-kinds=definite,indirect \\
    --errors-for-leak-kinds=definite,indirect --error-exitcode=99 \\
    --log-file=$tmp/memcheck.%p.log "$bin" "\$@"
WRAP
chmod +x "$tmp/animegan"
export VALGRIND_BIN="$tmp/animegan" VALGRIND_TMP="$tmp"
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
python3 - <<'PY'
import glob, os, re, signal, socket, subprocess, sys, time
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "server"))
import driver as d
d.BIN = os.environ["VALGRIND_BIN"]
passed = failed = 0

def case(name, fn):
    global passed, failed
    t0 = time.time()
    try:
        fn()
        print("PASS %s (%.0f s)" % (name, time.time() - t0))
        passed += 1
    except Exception as e:
        print("FAIL %s: %s" % (name, e))
        failed += 1
    sys.stdout.flush()

t0 = time.time()
s = d.Server("--workers", "1", "--threads", "1", "--queue", "4", "--max-side", "64",
             "--max-upload-mb", "1", "--timeout", "20")
print("started under memcheck in %.0f s" % (time.time() - t0))

def thread_stacks():
    """Every thread's state and stack, from valgrind's gdbserver: what a stuck worker waits on."""
    try:
        out = subprocess.run(["vgdb", "--pid=%d" % s.proc.pid, "v.info", "scheduler"],
                             capture_output=True, text=True, timeout=60).stdout
    except Exception as e:
        out = "vgdb failed: %s" % e
    return "\n  ".join(l for l in out.splitlines() if l.strip())

def convert(want, image=d.CHELSEA, query="?max_side=32", ctype="image/png", **kw):
    # 14-17 s each here; a conversion still running after 5 minutes is stuck, not slow.
    try:
        status, h, body = s.convert(image, query=query, ctype=ctype, timeout=300, **kw)
    except socket.timeout:
        raise Exception("no answer in 300 s; the server's threads:\n  " + thread_stacks())
    d.check(status == want, "status %d, wanted %d: %r" % (status, want, body[:120]))
    return body

case("convert_raw_png", lambda: d.check(d.png_size(convert(200)) == (32, 21), "size"))
body, ctype = d.multipart([("image", "c.png", "image/png", d.CHELSEA)])
case("convert_multipart_webp", lambda: convert(200, body, "?max_side=32&format=webp", ctype))
case("convert_jpeg_quality", lambda: convert(200, query="?max_side=32&format=jpeg&quality=50"))
case("undecodable_422", lambda: convert(422, d.TRUNCATED, ctype="image/jpeg"))
with open(os.path.join(d.DATA, "generated", "huge_header.png"), "rb") as f:
    huge = f.read()
case("too_many_pixels_413", lambda: convert(413, huge))
case("empty_400", lambda: convert(400, b""))
case("bad_option_400", lambda: convert(400, query="?max_side=abc"))
case("unknown_model_404", lambda: convert(404, query="?model=nope"))
case("not_an_image_415", lambda: convert(415, b"hello" * 100, ctype="text/plain"))
case("malformed_multipart_400",
     lambda: convert(400, b"--b\r\nnonsense", ctype="multipart/form-data; boundary=b"))
two, ctype2 = d.multipart([("image", "a.png", "image/png", d.CHELSEA),
                           ("image", "b.png", "image/png", d.CHELSEA)])
case("two_image_fields_400", lambda: convert(400, two, ctype=ctype2))

def over_limit():
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=120)
    sock.sendall(b"POST /api/v1/convert HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
                 b"Content-Length: 5000000\r\n\r\n")
    reply = sock.recv(100)
    sock.close()
    d.check(reply.startswith(b"HTTP/1.1 413"), "got %r" % reply[:40])
case("body_over_limit_413", over_limit)

def client_gone():
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=120)
    sock.sendall(b"POST /api/v1/convert?max_side=32 HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"image/png\r\nContent-Length: %d\r\nX-Request-Id: vg-gone\r\n\r\n"
                 % len(d.CHELSEA) + d.CHELSEA[:3000])
    time.sleep(2)
    sock.close()
    d.check(s.log_for("vg-gone", wait=120), "no log line for the client that left")
case("client_gone_mid_upload", client_gone)

def slow_client():
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=120)
    sock.sendall(b"POST /api/v1/convert?max_side=32 HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"image/png\r\nContent-Length: %d\r\nX-Request-Id: vg-slow\r\n\r\n"
                 % len(d.CHELSEA) + d.CHELSEA[:100])
    e = s.log_for("vg-slow", wait=180)  # closed after --timeout 20
    sock.close()
    d.check(e and e[0]["status"] in ("408", "499"), "slow client: %r" % e)
case("slow_client_timed_out", slow_client)
case("serves_after_all_that", lambda: convert(200))

s.proc.send_signal(signal.SIGTERM)
stuck = ""
try:
    s.proc.wait(300)
except subprocess.TimeoutExpired:
    stuck = "\n  still running 300 s after SIGTERM; its threads:\n  " + thread_stacks()
code = s.stop(timeout=5)
logs = glob.glob(os.path.join(os.environ["VALGRIND_TMP"], "memcheck.*.log"))
text = "".join(open(p).read() for p in logs)
summary = re.findall(r"ERROR SUMMARY: (\d+) errors", text)
def clean():
    d.check(code == 0, "exit %r (99: memcheck found errors or leaks)%s" % (code, stuck))
    d.check(summary and all(n == "0" for n in summary), "ERROR SUMMARY %r" % summary)
    for k in ("definitely lost", "indirectly lost"):
        m = re.search(k + r": ([\d,]+) bytes", text)
        d.check(m is None or m.group(1) == "0", "%s: %s bytes" % (k, m.group(1) if m else "?"))
case("memcheck_clean_exit", clean)
if failed:
    print("\n".join("  " + l for l in text.splitlines()
                    if not re.match(r"==\d+== *$", l))[-12000:])
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
PY
