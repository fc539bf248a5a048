#!/usr/bin/env python3
"""The bad-input matrix and the fault tests of `animegan serve` (issue 5), against the real
binary on loopback. Every bad-input case checks the status (and error code) and then that
the server serves the next request normally: a small conversion gives 200 with the right
size, the admission slots are all given back, the process is alive.

Faults: kill -9 under load then a restart on the same port; SIGTERM under load drains;
missing or corrupt model files at start-up.

Reuses the helpers of tests/server/driver.py (Server, multipart, error_shape, ...). Prints
"PASS name" / "FAIL name" and "N passed, N failed"; exits non-zero on failure.

    python3 tests/stability/matrix.py [filter]      (BUILD picks $BUILD/animegan)
"""

import ctypes
import http.client
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zlib

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
import driver as d  # noqa: E402
from driver import check, error_shape  # noqa: E402

GEN = os.path.join(d.DATA, "generated")
MIB = 1048576.0


def gen(name):
    with open(os.path.join(GEN, name), "rb") as f:
        return f.read()


def vm(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def reset_peak(pid):
    """Reset VmHWM to the current RSS (Linux >= 4.0), so a later VmHWM is this case's peak."""
    try:
        with open("/proc/%d/clear_refs" % pid, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def read_until_closed(sock):
    """Everything the server sends until it closes the connection; closes the socket."""
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return data
            data += chunk
    finally:
        sock.close()


# ---- images made at test time ------------------------------------------------------------

def png_chunk(kind, body):
    return (struct.pack(">I", len(body)) + kind + body
            + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))


def png_claiming(width, height):
    """A PNG whose IHDR claims width x height, with one tiny IDAT: refused from the header."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr)
            + png_chunk(b"IDAT", zlib.compress(b"\0" * 64)) + png_chunk(b"IEND", b""))


def jpeg_with_huge_exif(base):
    """`base` with 16 APP1 segments (about 1 MiB) after SOI: the first a 64 KiB EXIF block whose
    IFD has 5400 entries pointing far outside it (one an out-of-range orientation), the
    others large XMP-like blobs."""
    check(base[:2] == b"\xff\xd8", "base is not a JPEG")
    n = 5400
    ifd = struct.pack(">H", n)
    for i in range(n):
        if i == 0:
            ifd += struct.pack(">HHIHH", 0x0112, 3, 1, 9, 0)  # Orientation = 9 (invalid)
        else:
            ifd += struct.pack(">HHII", 0x9000 + i % 4096, 2, 0xFFFFFFFF, 0xFFFFFFF0)
    tiff = b"MM\x00\x2a" + struct.pack(">I", 8) + ifd + struct.pack(">I", 0xFFFFFFFF)
    exif = b"Exif\x00\x00" + tiff
    check(len(exif) + 2 <= 65535, "EXIF segment too long")
    segs = b"\xff\xe1" + struct.pack(">H", len(exif) + 2) + exif
    rng = random.Random(5)
    for _ in range(15):
        blob = b"http://ns.adobe.com/xap/1.0/\x00" + rng.randbytes(65000)
        segs += b"\xff\xe1" + struct.pack(">H", len(blob) + 2) + blob
    return base[:2] + segs + base[2:]


# ---- the test harness --------------------------------------------------------------------

ALL = []  # every server started, for the sanitizer scan at the end
SANITIZER_REPORT = re.compile(r"AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|"
                              r"runtime error:|Sanitizer CHECK failed")


class Server(d.Server):
    def __init__(self, *args):
        super().__init__(*args)
        ALL.append(self)


TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


SERVERS = {}


def server():
    """The matrix's server: small limits so each case is cheap."""
    s = SERVERS.get("m")
    if s is None or s.proc.poll() is not None:
        s = SERVERS["m"] = Server("--workers", "1", "--threads", "2", "--queue", "2",
                                    "--max-upload-mb", "2", "--max-side", "256")
    return s


def serves_normally(s, what):
    """After a bad input: slots back, the process alive, a conversion served correctly."""
    check(s.proc.poll() is None, "server died after %s" % what)
    check(s.wait_idle(60), "admission slots not given back after %s" % what)
    status, h, body = s.convert(d.CHELSEA, query="?max_side=32")
    check(status == 200 and d.png_size(body) == (32, 21),
          "the request after %s gave %d %r" % (what, status, body[:80]))
    status, doc = s.get_json("/readyz")
    check(status == 200, "not ready after %s" % what)


def expect(s, what, status_want, code=None, **kw):
    status, h, body = s.convert(**kw)
    check(status == status_want, "%s: status %d, wanted %d: %r" % (what, status, status_want,
                                                                    body[:200]))
    if status_want != 200:
        error_shape(body, code)
    return h, body


# ---- bad input ---------------------------------------------------------------------------

@test
def empty_body():
    s = server()
    expect(s, "empty raw body", 400, "bad_request", image=b"", ctype="image/png")
    body, ctype = d.multipart([("image", "a.png", "image/png", b"")])
    expect(s, "empty multipart part", 400, "bad_request", image=body, ctype=ctype)
    serves_normally(s, "an empty body")


@test
def truncated_jpeg_and_png():
    s = server()
    for name, blob, ctype in (("truncated.jpg", d.TRUNCATED, "image/jpeg"),
                              ("truncated.png", gen("truncated.png"), "image/png"),
                              ("rocket.jpg cut in half", d.ROCKET[:len(d.ROCKET) // 2], "image/jpeg"),
                              ("chelsea.png cut in half", d.CHELSEA[:len(d.CHELSEA) // 2],
                               "image/png"),
                              ("PNG signature only", d.CHELSEA[:8], "image/png")):
        expect(s, name, 422, "undecodable_image", image=blob, ctype=ctype)
        serves_normally(s, name)


@test
def png_header_50000x50000():
    s = server()
    for w, h in ((50000, 50000), (2**31 - 1, 2**31 - 1), (0xFFFFFFFF, 1)):
        blob = png_claiming(w, h)
        s.wait_idle()
        rss0 = vm(s.pid, "VmRSS")
        peak_reset = reset_peak(s.pid)
        t0 = time.time()
        status, _, body = s.convert(blob, ctype="image/png")
        took = time.time() - t0
        grew = vm(s.pid, "VmHWM") - rss0
        what = "PNG claiming %dx%d" % (w, h)
        # Over 2^31 the PNG is invalid; libpng refuses it while reading the header.
        check(status in ((413,) if w == 50000 else (413, 422)), "%s: %d %r" % (what, status, body))
        if w == 50000:
            check("50000x50000" in error_shape(body, "too_many_pixels")["message"], what)
        check(took < 2.0, "%s took %.2f s" % (what, took))
        if peak_reset and not d.SANITIZED:
            check(grew < 4 * MIB, "%s: peak RSS grew by %.1f MiB" % (what, grew / MIB))
        serves_normally(s, what)


@test
def wrong_content_type():
    s = server()
    for ctype in ("text/plain", "application/json", "application/x-www-form-urlencoded",
                  "text/html; charset=utf-8", "video/mp4"):
        expect(s, "PNG as " + ctype, 415, "unsupported_media_type", image=d.CHELSEA, ctype=ctype)
    # An image type that is not the image's own is fine: the bytes decide.
    expect(s, "PNG as image/jpeg", 200, image=d.CHELSEA, ctype="image/jpeg", query="?max_side=32")
    # Not an image at all, whatever the label says.
    expect(s, "text as image/png", 415, "unsupported_media_type", image=b"hello, world" * 10,
           ctype="image/png")
    serves_normally(s, "a wrong Content-Type")


@test
def pixel_formats():
    """16-bit, CMYK, grey, palette and alpha images: converted to an 8-bit RGB result."""
    s = server()
    for name in ("rgb16.png", "grey16.png", "cmyk.jpg", "cmyk_icc.jpg", "grey.png",
                 "palette.png", "rgba.png", "grey_alpha.png", "rgb.tif", "orient6.jpg"):
        h, body = expect(s, name, 200, image=gen(name), ctype="application/octet-stream",
                         query="?max_side=64")
        w, hh, channels, _ = d.png_decode(body)
        check(channels in (3, 4) and max(w, hh) <= 64 and min(w, hh) >= 8,
              "%s: result %dx%dx%d" % (name, w, hh, channels))
    serves_normally(s, "pixel formats")


@test
def animated_gif_and_webp():
    s = server()
    for name, ctype in (("anim.gif", "image/gif"), ("anim.webp", "image/webp")):
        h, body = expect(s, name, 200, image=gen(name), ctype=ctype, query="?max_side=64")
        w, hh, _, _ = d.png_decode(body)
        check(min(w, hh) >= 8, "%s: %dx%d (first frame expected)" % (name, w, hh))
        serves_normally(s, name)


@test
def tiny_and_thin_images():
    s = server()
    for name, want in (("size_1x1.png", 422), ("size_7x7.png", 422), ("size_8x8.png", 200),
                       ("thin_10000x8.png", 422)):
        h, body = expect(s, name, want, None if want == 200 else "unprocessable_image",
                         image=gen(name), ctype="image/png")
        if want == 200:
            check(d.png_size(body) == (8, 8), "8x8 gave %r" % (d.png_size(body),))
        else:
            check("at least 8 pixels" in error_shape(body)["message"], name)
        serves_normally(s, name)


@test
def huge_exif_block():
    s = server()
    blob = jpeg_with_huge_exif(d.ROCKET)
    check(len(blob) > 1024 * 1024, "EXIF test image is only %d bytes" % len(blob))
    t0 = time.time()
    h, body = expect(s, "JPEG with 1 MiB of APP1", 200, image=blob, ctype="image/jpeg",
                     query="?max_side=64")
    check(max(d.png_size(body)) == 64, "size %r" % (d.png_size(body),))
    check(time.time() - t0 < 30, "huge EXIF took %.1f s" % (time.time() - t0))
    serves_normally(s, "a huge EXIF block")


@test
def malformed_multipart():
    s = server()
    png = gen("rgb.tif")  # any small image
    b = "matrixBoundary42"
    part = ('--%s\r\nContent-Disposition: form-data; name="image"; filename="a.tif"\r\n'
            "Content-Type: image/tiff\r\n\r\n" % b).encode()
    cases = (
        ("no boundary parameter", part + png + ("\r\n--%s--\r\n" % b).encode(),
         "multipart/form-data", 400),
        ("empty boundary", part + png, "multipart/form-data; boundary=", 400),
        ("unterminated part", part + png, "multipart/form-data; boundary=" + b, 400),
        ("headers never end", part[:-4], "multipart/form-data; boundary=" + b, 400),
        ("boundary not in the body", d.multipart([("image", "a.tif", "image/tiff", png)])[0],
         "multipart/form-data; boundary=" + b, 400),
        ("two files in field image", d.multipart([("image", "a.tif", "image/tiff", png),
                                                  ("image", "b.png", "image/png", d.CHELSEA)])[0],
         d.multipart([])[1], 400),
        ("no field image", d.multipart([("file", "a.tif", "image/tiff", png)])[0],
         d.multipart([])[1], 400),
    )
    for what, body, ctype, want in cases:
        expect(s, what, want, "bad_request", image=body, ctype=ctype)
        serves_normally(s, "multipart: " + what)
    # Two files in different fields: the one named image is converted.
    body, ctype = d.multipart([("other", "b.png", "image/png", d.CHELSEA),
                               ("image", "a.tif", "image/tiff", png)])
    expect(s, "image plus another file", 200, image=body, ctype=ctype, query="?max_side=32")


# Inputs the fuzzers found, replayed end to end: file in tests/stability/data -> status.
FUZZ_FINDINGS = {
    # fuzz_image, 2026-11-30: a corrupt AV1 payload in an AVIF. libheif 1.15's dav1d decoder
    # leaks 40 bytes per decode of it (upstream strukturag/libheif#1753; not our allocation).
    "avif_dav1d_leak.avif": 422,
}


@test
def fuzz_findings():
    s = server()
    for name, want in sorted(FUZZ_FINDINGS.items()):
        with open(os.path.join(ROOT, "tests", "stability", "data", name), "rb") as f:
            blob = f.read()
        expect(s, name, want, None, image=blob, ctype="application/octet-stream")
        serves_normally(s, name)


@test
def body_over_the_limit_unread():
    s = server()  # --max-upload-mb 2
    for length in (2 * 1024 * 1024 + 1, 50 * 1024 * 1024, 2**62):
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        t0 = time.time()
        sock.sendall(b"POST /api/v1/convert HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
                     b"Content-Length: %d\r\nX-Request-Id: over-%d\r\n\r\n" % (length, length)
                     + d.CHELSEA[:1000])
        reply = b""
        try:
            while b"\r\n\r\n" not in reply:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                reply += chunk
        finally:
            sock.close()
        took = time.time() - t0
        check(reply.startswith(b"HTTP/1.1 413"), "Content-Length %d gave %r" % (length, reply[:60]))
        check(took < 2.0, "the 413 took %.2f s" % took)
        entries = s.log_for("over-%d" % length)
        check(entries and int(entries[0]["bytes_in"]) <= 1000, "body was read: %r" % entries)
    serves_normally(s, "a body over the limit")


@test
def slow_client_times_out_and_frees_its_slot():
    """Clients that send headers and part of the body, then nothing: each holds an admission
    slot until --timeout closes it; then the slots are free again."""
    s = Server("--workers", "1", "--threads", "2", "--queue", "1", "--timeout", "2")
    try:
        slow = []
        for i in range(2):  # queue 1 + 1 worker = 2 slots
            sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
            sock.sendall(b"POST /api/v1/convert?max_side=32 HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Type: image/png\r\nContent-Length: %d\r\n"
                         b"X-Request-Id: slow-%d\r\n\r\n" % (len(d.CHELSEA), i) + d.CHELSEA[:100])
            slow.append(sock)
        check(s.wait_admitted(2, 10), "slow clients not admitted")
        # A tiny body: a large one could still be in flight when the 503 closes the socket.
        status, h, body = s.convert(gen("size_8x8.png"), query="?max_side=32")
        check(status == 503 and "retry-after" in h, "with every slot held: %d" % status)
        error_shape(body, "queue_full")
        t0 = time.time()
        for sock in slow:
            sock.settimeout(10)
            try:
                got = sock.recv(100)
            except OSError:
                got = b""
            check(not got or got.startswith(b"HTTP/1.1 408"), "slow client got %r" % got[:40])
            sock.close()
        took = time.time() - t0
        check(took < 6, "slow clients held on for %.1f s (timeout 2)" % took)
        check(s.wait_idle(10), "slots not freed after the timeout")
        for i in range(2):
            e = s.log_for("slow-%d" % i)
            check(e and e[0]["status"] in ("408", "499"), "slow-%d logged %r" % (i, e))
        m = s.metrics()
        check(m["animegan_inflight_requests"] == 0, "in-flight gauge not back to 0")
        serves_normally(s, "slow clients")
    finally:
        check(s.stop() == 0, "server exit")


@test
def static_paths_never_leave_the_page():
    s = server()
    for path in ("/../../../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/..%2f..%2fetc%2fpasswd",
                 "/%252e%252e/etc/passwd", "/.%2e/server/http.c", "/..\\..\\etc\\passwd",
                 "/app.js/../../Makefile", "/style.css%00.js", "/web/../Makefile",
                 "/favicon.svg/..", "/" + "../" * 200 + "etc/passwd"):
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        sock.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        reply = read_until_closed(sock)
        check(re.match(rb"HTTP/1.1 (400|404)", reply), "%s gave %r" % (path, reply[:40]))
        check(b"root:" not in reply and b"#include" not in reply and b"CFLAGS" not in reply,
              "%s leaked a file" % path)
    serves_normally(s, "'..' paths")


@test
def unknown_model():
    s = server()
    for model in ("nope", "", "../hayao", "hayao.safetensors", "HAYAO", "x" * 300,
                  "%2e%2e%2fmodels%2fhayao"):
        expect(s, "model=" + model[:20], 404, "model_not_found", query="?model=" + model)
    serves_normally(s, "an unknown model")


@test
def option_values():
    s = server()  # --max-side 256
    bad = ["max_side=0", "max_side=7", "max_side=257", "max_side=-1", "max_side=99999999999999999999",
           "quality=0", "quality=101", "quality=-5", "portrait=2", "portrait=-1",
           "side_by_side=2", "format=bmp", "format=", "max_side=abc", "max_side=12abc",
           "max_side=1e3", "max_side=0x10", "max_side=", "max_side=%2012", "max_side=12%00",
           "quality=NaN", "quality=90.5", "portrait=on", "portrait=01", "side_by_side=yes",
           "portrait=1&portrait=1", "unknown=1", "max_side=" + "9" * 5000]
    for q in bad:
        expect(s, q[:40], 400, None, query="?" + q)
    # The edges of the ranges are accepted.
    for q in ("max_side=8", "max_side=256", "quality=1", "quality=100&format=jpeg", "portrait=0"):
        expect(s, q, 200, image=d.ASTRONAUT,  # square: 8 x 8 at max_side=8
               query="?" + q + ("" if "max_side" in q else "&max_side=16"))
    serves_normally(s, "bad option values")


# ---- faults ------------------------------------------------------------------------------

def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Load:
    """`clients` threads converting in a loop until stopped; records every outcome."""

    def __init__(self, s, clients, query="?max_side=128"):
        self.s, self.query = s, query
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.results = []  # (t_sent, t_done, status or exception name, X-Request-Id)
        self.threads = [threading.Thread(target=self.run) for _ in range(clients)]
        for t in self.threads:
            t.start()

    def run(self):
        while not self.stop.is_set():
            c = http.client.HTTPConnection("127.0.0.1", self.s.port, timeout=120)
            sent = request_id = None
            try:
                c.connect()
                c.request("POST", "/api/v1/convert" + self.query, d.CHELSEA,
                          {"Content-Type": "image/png"})
                sent = time.time()
                r = c.getresponse()
                r.read()
                outcome, request_id = r.status, r.getheader("X-Request-Id")
            except OSError as e:
                outcome = type(e).__name__
                if sent is None:
                    time.sleep(0.05)  # refused: do not spin
            finally:
                c.close()
            with self.lock:
                self.results.append((sent, time.time(), outcome, request_id))

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(180)


@test
def kill_9_under_load_then_restart():
    port = free_port()
    args = ("--port", str(port), "--workers", "2", "--threads", "2", "--queue", "4")
    a = Server(*args)
    a.args = list(args)
    status, _, reference = a.convert(query="?max_side=128")
    check(status == 200, "reference conversion")
    models_before = a.get_json("/api/v1/models")[1]
    load = Load(a, 4)
    check(a.wait_admitted(2, 30), "no load")
    time.sleep(1.0)
    os.kill(a.pid, signal.SIGKILL)
    a.proc.wait(10)
    load.finish()
    check(a.proc.returncode == -signal.SIGKILL, "exit %r" % a.proc.returncode)
    t0 = time.time()
    b = Server(*args)  # the same port, at once
    try:
        deadline = time.time() + 60
        while b.request("GET", "/readyz")[0] != 200:
            check(time.time() < deadline, "not ready after the restart")
            time.sleep(0.05)
        ready_s = time.time() - t0
        check(b.get_json("/api/v1/models")[1] == models_before, "models differ after restart")
        status, _, again = b.convert(query="?max_side=128")
        check(status == 200 and again == reference, "a conversion differs after the restart")
        load2 = Load(b, 3)
        time.sleep(2.0)
        load2.finish()
        outcomes = [r[2] for r in load2.results]
        check(outcomes and set(outcomes) == {200}, "after the restart: %r" % outcomes)
        print("  killed with %d requests in flight; ready again in %.2f s on the same port; "
              "%d conversions after" % (sum(1 for r in load.results if r[2] != 200), ready_s,
                                        len(outcomes)))
    finally:
        check(b.stop() == 0, "restarted server exit")
        b.kill()


@test
def sigterm_under_load_drains():
    s = Server("--workers", "2", "--threads", "2", "--queue", "4")
    try:
        load = Load(s, 5)  # more clients than workers: some wait in the queue
        deadline = time.time() + 60
        while len([r for r in load.results if r[2] == 200]) < 3:
            check(time.time() < deadline, "load made no progress")
            time.sleep(0.1)
        check(s.wait_admitted(3, 30), "not loaded")
        t_sig = time.time()
        s.proc.send_signal(signal.SIGTERM)
        code = s.proc.wait(90)
        drained_s = time.time() - t_sig
        load.finish()
        s.reader.join(10)  # every log line is read
        # On a bad exit, the server's last lines: a sanitizer's report says why.
        check(code == 0, "exit status %r; %s" % (code, s.exit_report()))
        inflight = [r for r in load.results if r[0] is not None and r[0] < t_sig and r[1] > t_sig]
        check(inflight, "nothing was in flight at SIGTERM")
        # A request the client had written before the signal may still sit unread in the
        # socket: the server never admitted it, so it is refused from its headers (503,
        # never decoded). Every request the server had admitted must complete.
        log = {e.get("id"): e for e in s.log()}
        for r in inflight:
            if r[2] != 200:
                e = log.get(r[3], {})
                check(r[2] == 503 and e.get("error") == "shutting_down" and "in_px" not in e,
                      "an in-flight request got %r (log: %r)" % (r[2], e))
        draining = [l for l in s.lines if "draining:" in l]
        check(draining, "no 'draining' line")
        admitted = int(re.search(r"draining: (\d+) admitted", draining[0]).group(1))
        completed = sum(1 for r in load.results if r[2] == 200 and r[1] > t_sig)
        check(completed >= admitted, "%d admitted at SIGTERM, %d completed" % (admitted, completed))
        check(not any("still admitted" in l for l in s.lines), "the drain gave up")
        after = [r[2] for r in load.results if r[0] is not None and r[0] >= t_sig]
        check(set(after) <= {200, 503}, "requests sent after SIGTERM got %r" % after)
        check(any("stopped" in l for l in s.lines), "no 'stopped' line")
        print("  SIGTERM with %d admitted: %d completed, exit 0 after %.1f s"
              % (admitted, completed, drained_s))
    finally:
        s.kill()


def freeze_thread(tid):
    """Stop one thread (not its process) with PTRACE_SEIZE + PTRACE_INTERRUPT; returns a
    function that lets it run again, or None where ptrace is not permitted."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    seize, interrupt, detach = 0x4206, 0x4207, 17
    if libc.ptrace(seize, tid, None, None) != 0:
        return None
    check(libc.ptrace(interrupt, tid, None, None) == 0, "PTRACE_INTERRUPT failed")
    os.waitpid(tid, 0x40000000)  # __WALL: a thread, not a child process
    return lambda: libc.ptrace(detach, tid, None, None)


@test
def sigterm_answers_the_listen_backlog():
    """A connection the kernel completed but the HTTP thread had not accepted at SIGTERM
    gets 503 shutting_down, not a reset after its request was sent."""
    s = Server("--workers", "1", "--threads", "1")
    try:
        tids = s.threads("MHD-single")
        check(len(tids) == 1, "no single HTTP thread: %r" % tids)
        resume = freeze_thread(int(tids[0]))
        if resume is None:
            print("  SKIP: ptrace is not permitted here (needed to hold the HTTP thread)")
            return
        try:
            c = socket.create_connection(("127.0.0.1", s.port), timeout=30)
            head = ("POST /api/v1/convert?max_side=64 HTTP/1.1\r\nHost: t\r\n"
                    "Content-Type: image/png\r\nContent-Length: %d\r\n\r\n" % len(d.CHELSEA))
            c.sendall(head.encode() + d.CHELSEA)  # into the listen backlog
            s.proc.send_signal(signal.SIGTERM)
            deadline = time.time() + 10
            while not any("draining:" in l for l in s.lines):
                check(time.time() < deadline, "no 'draining' line")
                time.sleep(0.02)
        finally:
            resume()
        answer = read_until_closed(c)
        check(answer.startswith(b"HTTP/1.1 503"), "answer %r" % answer[:200])
        check(b'"shutting_down"' in answer, "answer %r" % answer[-200:])
        check(s.proc.wait(30) == 0, "exit status")
        line = [l for l in s.lines if "draining:" in l][0]
        check("1 connection(s) with a request under way" in line, line)
        print("  " + line.split("msg=")[-1])
    finally:
        s.kill()


@test
def first_heads_while_the_http_side_stops():
    """Kept-alive connections whose first head comes in while the drain stops MHD: the gate
    must not hand them to MHD then (MHD_add_connection on a daemon being stopped, or on the
    NULL left after it, was a SEGV, 8 rounds in 10 here; under ASan an abort, exit -6, as CI
    saw once in sigterm_under_load_drains). A head begun before SIGTERM keeps the drain
    waiting its 2 s bound for answers, so MHD stops at a known time: the first heads of 200
    idle connections are sent 0.2 ms apart around it."""
    for round_ in range(3):
        s = Server("--workers", "1", "--threads", "1", "--model", "hayao",
                   "--max-connections", "208")
        socks = []
        try:
            socks = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(200)]
            hold = socket.create_connection(("127.0.0.1", s.port))
            socks.append(hold)
            hold.sendall(b"GET /healthz HTTP/1.1\r\n")  # under way until the bound
            time.sleep(0.2)
            s.proc.send_signal(signal.SIGTERM)
            deadline = time.time() + 30
            while not any("draining:" in l for l in s.lines):
                check(time.time() < deadline, "no 'draining' line")
                time.sleep(0.0005)
            t_quiesced = time.time()  # the bound counts from just before that line
            while time.time() < t_quiesced + 1.99:
                time.sleep(0.0005)
            sent = 0
            for c in socks[:200]:
                if s.proc.poll() is not None:
                    break
                try:
                    c.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
                except OSError:
                    pass  # closed by the stopping server
                sent += 1
                t = time.time()
                while time.time() < t + 0.0002:
                    pass
            code = s.proc.wait(60)
            check(code == 0, "round %d, %d first heads sent around MHD's stop: exit status %r; %s"
                  % (round_ + 1, sent, code, s.exit_report()))
        finally:
            for c in socks:
                c.close()
            s.kill()
    print("  3 drains with first heads arriving as MHD stopped: exit 0")


@test
def bad_model_file_at_startup():
    tmp = tempfile.mkdtemp(prefix="animegan-models-")
    try:
        with open(os.path.join(ROOT, "models", "hayao.safetensors"), "rb") as f:
            hayao = f.read()
        with open(os.path.join(ROOT, "tests", "fixtures", "random_zip.pt"), "rb") as f:
            pt = f.read()
        files = {"truncated.safetensors": hayao[:100000], "empty.safetensors": b"",
                 "garbage.safetensors": random.Random(3).randbytes(100000),
                 "header_only.safetensors": hayao[:8 + struct.unpack("<Q", hayao[:8])[0]],
                 "truncated.pt": pt[:1000000], "text.pt": b"not a zip file\n" * 100,
                 "flipped.safetensors": hayao[:200] + bytes(b ^ 0xFF for b in hayao[200:4000])
                 + hayao[4000:]}
        cases = [("missing", os.path.join(tmp, "no-such-file.safetensors"))]
        for name, blob in files.items():
            path = os.path.join(tmp, name)
            with open(path, "wb") as f:
                f.write(blob)
            cases.append((name, path))
        cases.append(("directory", tmp))
        for name, path in cases:
            t0 = time.time()
            p = subprocess.run([d.BIN, "serve", "--port", "0", "--model", path],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
            err = p.stderr.decode("utf-8", "replace")
            check(p.returncode == 1, "%s: exit %d: %s" % (name, p.returncode, err[-300:]))
            check("listening" not in err, "%s: it started listening" % name)
            lines = [l for l in err.splitlines() if l.strip()]
            check(lines and os.path.basename(path) in lines[-1] if lines else False,
                  "%s: the message does not name the file: %r" % (name, err[-300:]))
            check(time.time() - t0 < 60, "%s: took %.1f s" % (name, time.time() - t0))
            print("  %-24s exit 1: %s" % (name, lines[-1][:110]))
    finally:
        subprocess.run(["rm", "-rf", tmp])


def main():
    want = sys.argv[1] if len(sys.argv) > 1 else None
    if not os.access(d.BIN, os.X_OK):
        print("FAIL build: %s is missing (run make)" % d.BIN)
        print("0 passed, 1 failed")
        return 1
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        os.environ.pop(var, None)
    passed = failed = 0
    for fn in TESTS:
        if want and want not in fn.__name__:
            continue
        t0 = time.time()
        try:
            fn()
            print("PASS %s (%.1f s)" % (fn.__name__, time.time() - t0))
            passed += 1
        except Exception as e:
            print("FAIL %s: %s" % (fn.__name__, e))
            if not isinstance(e, d.Failure):
                traceback.print_exc()
            failed += 1
        sys.stdout.flush()
    for s in SERVERS.values():
        code = s.stop()
        if code != 0:
            print("FAIL matrix server exited %r" % code)
            failed += 1
    # Under `make SANITIZER=address` a report ends the server; name it here.
    for s in ALL:
        s.kill()
        reports = [l for l in s.lines if SANITIZER_REPORT.search(l)]
        if reports:
            print("FAIL sanitizer report from serve %s:" % " ".join(s.args))
            for line in s.lines[max(0, s.lines.index(reports[0]) - 2):][:60]:
                print("  " + line)
            failed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
