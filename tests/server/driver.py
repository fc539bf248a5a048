#!/usr/bin/env python3
"""End-to-end tests of `animegan serve`: the real binary on loopback, real requests.

Standard library only (http.client, json, socket, subprocess, threading, zlib), so it runs
on any Python 3.8+. Prints one "PASS name" / "FAIL name" line per test and a final
"N passed, N failed"; exits non-zero on any failure. Run one test with a name filter:

    python3 tests/server/driver.py [filter]

Environment: BUILD (default build) picks the binary, $BUILD/animegan.
"""

import http.client
import json
import os
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
BUILD = os.environ.get("BUILD", "build")
BIN = os.path.join(ROOT, BUILD, "animegan")
DATA = os.path.join(ROOT, "tests", "data")
# `make SANITIZER=address` builds into build/address: ASan's quarantine and shadow memory
# make RSS meaningless there, so RSS checks are skipped (allocator counts still hold).
SANITIZED = os.path.basename(BUILD.rstrip("/")) in ("address", "undefined", "thread", "leak")
# The bundled model, wherever the binary is (build/address/animegan has no ../models).
os.environ.setdefault("ANIMEGAN_MODEL_PATH", os.path.join(ROOT, "models"))


def data(name):
    with open(os.path.join(DATA, name), "rb") as f:
        return f.read()


CHELSEA = data("chelsea.png")  # 451 x 300 RGB
ASTRONAUT = data("astronaut.png")  # 512 x 512
ROCKET = data("rocket.jpg")
TRUNCATED = data("truncated.jpg")


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


# ---- a PNG decoder (8-bit RGB/RGBA/grey, non-interlaced: what the server writes) -----------


def png_decode(blob):
    check(blob[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG")
    pos, idat, width = 8, [], None
    while pos < len(blob):
        (length,) = struct.unpack(">I", blob[pos : pos + 4])
        kind = blob[pos + 4 : pos + 8]
        body = blob[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            check(depth == 8 and interlace == 0, "unsupported PNG layout")
            channels = {0: 1, 2: 3, 4: 2, 6: 4}[color]
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    out = bytearray(height * stride)
    prev = bytearray(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - channels] if x >= channels else 0
            b = prev[x]
            c = prev[x - channels] if x >= channels else 0
            if ftype == 1:
                line[x] = (line[x] + a) & 255
            elif ftype == 2:
                line[x] = (line[x] + b) & 255
            elif ftype == 3:
                line[x] = (line[x] + ((a + b) >> 1)) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[x] = (line[x] + pred) & 255
        out[y * stride : (y + 1) * stride] = line
        prev = line
    return width, height, channels, bytes(out)


def png_size(blob):
    check(blob[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG: %r" % blob[:40])
    return struct.unpack(">II", blob[16:24])


# ---- the server under test ---------------------------------------------------------------

LOGFMT = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


def parse_logfmt(line):
    out = {}
    for k, v in LOGFMT.findall(line):
        if v.startswith('"'):
            v = v[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        out[k] = v
    return out


class Server:
    def __init__(self, *args):
        self.args = ["--port", "0", *args]
        self.proc = subprocess.Popen(
            [BIN, "serve", *self.args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines = []
        self.lock = threading.Lock()
        self.port = None
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        # a full-size restorer loads in minutes on a loaded machine: AG_START_TIMEOUT_S
        deadline = time.time() + float(os.environ.get("AG_START_TIMEOUT_S", "120"))
        while time.time() < deadline and self.port is None and self.proc.poll() is None:
            time.sleep(0.05)
        if self.port is None:
            self.proc.kill()
            raise Failure("server did not start: " + "\n".join(self.lines[-10:]))

    def _read(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            with self.lock:
                self.lines.append(line)
            m = re.search(r"listening on http://\S+:(\d+)/", line)
            if m:
                self.port = int(m.group(1))

    @property
    def pid(self):
        return self.proc.pid

    def conn(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=120):
        c = self.conn(timeout)
        try:
            try:
                c.request(method, path, body=body, headers=headers or {})
            except (BrokenPipeError, ConnectionResetError):
                # Refused from the headers (503, 413), the server answered and closed before
                # the whole body was sent: read that early answer, as HTTP clients do.
                pass
            r = c.getresponse()
            payload = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, payload
        finally:
            c.close()

    def get_json(self, path):
        status, headers, body = self.request("GET", path)
        check(headers.get("content-type", "").startswith("application/json"), path + " not JSON")
        return status, json.loads(body)

    def convert(self, image=CHELSEA, query="", ctype="image/png", headers=None, timeout=120):
        h = {"Content-Type": ctype}
        h.update(headers or {})
        return self.request("POST", "/api/v1/convert" + query, image, h, timeout)

    def status(self):
        return self.get_json("/api/v1/status")[1]

    def metrics(self):
        status, _, body = self.request("GET", "/metrics")
        check(status == 200, "/metrics status %d" % status)
        out = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def rss_bytes(self):
        try:
            with open("/proc/%d/status" % self.pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def log(self):
        with self.lock:
            return [parse_logfmt(l) for l in self.lines if " id=" in l]

    def log_for(self, request_id, wait=5.0):
        deadline = time.time() + wait
        while time.time() < deadline:
            hits = [l for l in self.log() if l.get("id") == request_id]
            if hits:
                return hits
            time.sleep(0.05)
        return []

    def wait_admitted(self, n, wait=30.0):
        deadline = time.time() + wait
        while time.time() < deadline:
            if self.status()["inflight"]["admitted"] >= n:
                return True
            time.sleep(0.02)
        return False

    def wait_idle(self, wait=60.0):
        deadline = time.time() + wait
        while time.time() < deadline:
            if self.status()["inflight"]["admitted"] == 0:
                return True
            time.sleep(0.05)
        return False

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        finally:
            self.reader.join(5)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def threads(self, comm, wait=10.0):
        """Ids of the server's threads named comm, waiting up to `wait` s for one: MHD's
        thread names itself once it runs, which under CPU contention can be well after the
        "listening on" line (it was still "animegan" then in 3 of 6 runs with 4 busy loops
        on 2 cores)."""
        deadline = time.time() + wait
        while True:
            found = []
            for tid in os.listdir("/proc/%d/task" % self.pid):
                try:
                    with open("/proc/%d/task/%s/comm" % (self.pid, tid)) as f:
                        if f.read().strip() == comm:
                            found.append(int(tid))
                except OSError:
                    pass  # the thread ended meanwhile
            if found or time.time() >= deadline or self.proc.poll() is not None:
                return found
            time.sleep(0.02)

    def exit_report(self, lines=40, indent="    "):
        """How the server ended and its last stderr lines, for a failure message: the
        exit status or the signal that ended it (or that it still runs), then up to `lines`
        lines, each indented (a sanitizer's report or the last log lines say why)."""
        code = self.proc.poll()
        if code is None:
            how = "still running (pid %d)" % self.pid
        elif code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = "signal %d" % -code
            how = "killed by %s (exit %d)" % (name, code)
        else:
            how = "exited %d" % code
        with self.lock:
            tail = self.lines[-lines:] if lines > 0 else []
            total = len(self.lines)
        head = "the server %s; its last %d of %d stderr lines:" % (how, len(tail), total)
        return "\n".join([head] + [indent + l for l in tail])


def in_threads(fn, args_list):
    """Run fn(*args) for each args concurrently; returns results (or exceptions) in order."""
    results = [None] * len(args_list)

    def run(i, args):
        try:
            results[i] = fn(*args)
        except Exception as e:  # reported by the caller
            results[i] = e

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(args_list)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    return results


def error_shape(body, code=None):
    """Errors are {"error": {"code": "...", "message": "..."}} and nothing else."""
    doc = json.loads(body)
    check(set(doc) == {"error"}, "error body keys: %r" % doc)
    check(set(doc["error"]) == {"code", "message"}, "error keys: %r" % doc)
    check(isinstance(doc["error"]["code"], str) and doc["error"]["message"], "error fields")
    if code:
        check(doc["error"]["code"] == code, "code %r, wanted %r" % (doc["error"]["code"], code))
    return doc["error"]


def multipart(fields, boundary="----animegan-test-7MA4YWxkTrZu0gW"):
    parts = []
    for name, filename, ctype, payload in fields:
        head = 'Content-Disposition: form-data; name="%s"' % name
        if filename:
            head += '; filename="%s"' % filename
        head += "\r\n"
        if ctype:
            head += "Content-Type: %s\r\n" % ctype
        parts.append(b"--" + boundary.encode() + b"\r\n" + head.encode() + b"\r\n" + payload + b"\r\n")
    body = b"".join(parts) + b"--" + boundary.encode() + b"--\r\n"
    return body, "multipart/form-data; boundary=" + boundary


# ---- tests -------------------------------------------------------------------------------

TESTS = []


def test(fn):
    TESTS.append(fn)
    return fn


SERVERS = {}


def shared(name, *args):
    """Servers reused by several tests (start-up loads the model and creates engines)."""
    if name not in SERVERS or SERVERS[name].proc.poll() is not None:
        SERVERS[name] = Server(*args)
    return SERVERS[name]


def main_server():
    return shared("main", "--workers", "2", "--threads", "2", "--queue", "4",
                  "--max-upload-mb", "2")


@test
def usage_errors():
    for args, code in ((["--help"], 0), (["--workers", "0"], 2), (["--bogus"], 2),
                       (["--workers", "3", "--threads", "2"], 2), (["--max-side", "abc"], 2),
                       (["--model", "no-such-model", "--port", "0"], 1)):
        p = subprocess.run([BIN, "serve", *args], stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=60)
        check(p.returncode == code, "serve %s exited %d, wanted %d: %s" %
              (" ".join(args), p.returncode, code, p.stderr[-300:]))


@test
def startup_prints_memory_formula():
    s = main_server()
    lines = "\n".join(s.lines)
    check("memory bound" in lines and "workers x" in lines and "admitted x" in lines,
          "no memory formula at start-up")
    st = s.status()
    b = st["memory"]["bound"]
    total = (b["base_bytes"] + b["runtime_bytes"] + b["workers"] * b["per_worker_bytes"]
             + b["admitted"] * b["per_request_bytes"]
             + b["connections"] * b["per_connection_bytes"] + b["cache_bytes"])
    check(total == st["memory"]["bound_bytes"], "bound terms do not add up")
    check(b["arena_bytes"] > 0, "arena term is zero")
    check(st["memory"]["formula"].startswith("%.1f MiB" % (total / 1048576)), "formula text")


@test
def http_thread_yields_to_workers():
    """The HTTP thread runs at --http-nice (10 by default), the workers at 0."""
    def niceness(s):
        out = {}
        for tid in os.listdir("/proc/%d/task" % s.pid):
            with open("/proc/%d/task/%s/comm" % (s.pid, tid)) as f:
                comm = f.read().strip()
            with open("/proc/%d/task/%s/stat" % (s.pid, tid)) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            out.setdefault(comm, set()).add(int(fields[16]))  # field 19: nice
        return out
    m = main_server()
    m.threads("MHD-single")
    n = niceness(m)
    check(n.get("MHD-single") == {10}, "HTTP thread niceness %r, wanted 10" % n)
    check(0 in n.get("animegan", set()), "no worker at niceness 0: %r" % n)
    s = Server("--workers", "1", "--threads", "1", "--http-nice", "0")
    try:
        s.threads("MHD-single")
        check(niceness(s).get("MHD-single") == {0}, "--http-nice 0 not applied")
    finally:
        s.stop()


@test
def healthz_fails_while_a_worker_is_stuck():
    """--stuck-seconds: /healthz 503 while a worker is on one image longer; 200 after."""
    s = Server("--workers", "1", "--threads", "1", "--stuck-seconds", "0.3")
    try:
        photo = data("rocket.jpg")
        done = []
        worker = threading.Thread(target=lambda: done.append(
            s.convert(photo, query="?max_side=1024", ctype="image/jpeg", timeout=300)[0]))
        worker.start()
        seen = None
        while worker.is_alive() and seen is None:
            status, _, body = s.request("GET", "/healthz")
            if status == 503:
                seen = json.loads(body)
            time.sleep(0.05)
        worker.join()
        check(done == [200], "conversion: %r" % done)
        check(seen and seen["error"]["code"] == "worker_stuck", "no 503 while busy: %r" % seen)
        status, _, _ = s.request("GET", "/healthz")
        check(status == 200, "healthz %d after the conversion" % status)
        st = s.status()
        check(st["longest_busy_s"] == 0, "longest_busy_s %r when idle" % st["longest_busy_s"])
        status, _, body = s.request("GET", "/metrics")
        check(b"animegan_worker_longest_busy_seconds 0" in body, "gauge missing")
    finally:
        s.stop()


@test
def page_and_assets():
    s = main_server()
    status, h, body = s.request("GET", "/")
    check(status == 200 and h["content-type"].startswith("text/html"), "GET / %d" % status)
    check(b"/app.js" in body and b"/style.css" in body, "page does not load its assets")
    csp = h.get("content-security-policy", "")
    check("default-src 'self'" in csp and "connect-src 'self'" in csp, "CSP: %r" % csp)
    etag = h.get("etag")
    check(etag, "no ETag")
    status, _, _ = s.request("GET", "/", headers={"If-None-Match": etag})
    check(status == 304, "If-None-Match gave %d" % status)
    for path, ctype in (("/app.js", "text/javascript"), ("/style.css", "text/css"),
                        ("/favicon.svg", "image/svg+xml")):
        status, h, asset = s.request("GET", path)
        check(status == 200 and h["content-type"].startswith(ctype), path)
        # No external URLs anywhere in the page (the SVG namespace is an identifier).
        text = asset.decode().replace("http://www.w3.org/2000/svg", "")
        check(not re.search(r"https?://", text), "%s references an external URL" % path)
    check(not re.search(rb"https?://", body), "index.html references an external URL")


@test
def static_paths_do_not_traverse():
    s = main_server()
    for path in ("/../etc/passwd", "/%2e%2e/etc/passwd", "/..%2fetc%2fpasswd", "/index.html",
                 "/web/index.html", "/server/web/app.js", "//etc/passwd", "/app.js/..",
                 "/./app.js", "/api/v1/convert/../../etc/passwd"):
        status, h, body = s.request("GET", path)
        check(status == 404, "%s gave %d" % (path, status))
        error_shape(body, "not_found")


@test
def health_ready_models_status():
    s = main_server()
    status, doc = s.get_json("/healthz")
    check(status == 200 and doc["status"] == "ok", "healthz")
    status, doc = s.get_json("/readyz")
    check(status == 200 and doc["status"] == "ready", "readyz")
    status, doc = s.get_json("/api/v1/models")
    check(status == 200 and doc["default"] == "hayao", "models default")
    # no --model: every bundled style, the default first (issue 17, finding 10)
    check([m["name"] for m in doc["models"]] == ["hayao", "cute-v3", "hayao-v3", "shinkai-v3"],
          "models list %r" % [m["name"] for m in doc["models"]])
    check(doc["models"][0]["param_count"] > 0, "model info")
    st = s.status()
    for key in ("uptime_s", "busy_workers", "queue", "inflight", "served", "memory", "limits"):
        check(key in st, "status lacks " + key)
    check(st["queue"]["capacity"] == 4 and st["workers"] == 2, "status config")
    check(st["memory"]["rss_bytes"] > 0, "status rss")
    status, _, body = s.request("POST", "/healthz", b"x")
    check(status == 405, "POST /healthz gave %d" % status)
    error_shape(body, "method_not_allowed")
    status, h, body = s.request("GET", "/api/v1/convert")
    check(status == 405 and h.get("allow") == "POST", "GET convert gave %d" % status)


@test
def metrics_exposition():
    s = main_server()
    s.convert(query="?max_side=64")
    status, h, body = s.request("GET", "/metrics")
    check(status == 200 and h["content-type"].startswith("text/plain; version=0.0.4"),
          "metrics content type")
    text = body.decode()
    sample = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"'
                        r'(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})? -?[0-9.eE+-]+$|^.* [+-]Inf$')
    typed = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        check(sample.match(line), "bad sample line: " + line)
        name = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        check(name in typed or base in typed, "no TYPE for " + name)
    for name in ("animegan_http_requests_total", "animegan_http_request_duration_seconds_bucket",
                 "animegan_inference_seconds_bucket", "animegan_queue_wait_seconds_bucket",
                 "animegan_queue_depth", "animegan_inflight_requests",
                 "animegan_http_received_bytes_total", "animegan_http_sent_bytes_total",
                 "animegan_process_resident_memory_bytes", "animegan_engine_arena_bytes",
                 "animegan_cache_hits_total", "animegan_cache_misses_total",
                 "animegan_allocated_bytes", "animegan_memory_bound_bytes",
                 "animegan_workers_busy", "animegan_http_connections"):
        check(re.search(r"^%s[ {]" % name, text, re.M), "missing metric " + name)
    m = s.metrics()
    check(m['animegan_http_requests_total{route="convert",code="200"}'] >= 1, "convert count")
    check(m["animegan_engine_arena_bytes"] > 0, "arena bytes")
    check(m["animegan_http_received_bytes_total"] >= len(CHELSEA), "bytes in")


@test
def grafana_dashboard_uses_real_metrics():
    s = main_server()
    with open(os.path.join(ROOT, "contrib", "grafana", "animegan-dashboard.json")) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    check(len(exprs) > 10, "dashboard has few queries")
    _, _, body = s.request("GET", "/metrics")
    exposed = set(re.findall(r"^# TYPE (\S+) ", body.decode(), re.M))
    used = set(re.findall(r"\b(animegan_[a-z_]+)", " ".join(exprs)))
    missing = {m for m in used if re.sub(r"_(bucket|sum|count)$", "", m) not in exposed}
    check(not missing, "dashboard queries unknown metrics: %r" % sorted(missing))


@test
def convert_raw_and_multipart():
    s = main_server()
    status, h, raw = s.convert(headers={"X-Request-Id": "raw-test-1"})
    check(status == 200, "raw convert gave %d %r" % (status, raw[:200]))
    check(h["content-type"] == "image/png", "content type " + h["content-type"])
    check(h["x-request-id"] == "raw-test-1", "request id not echoed")
    check(float(h["x-queue-ms"]) >= 0 and float(h["x-inference-ms"]) > 0, "timing headers")
    check(png_size(raw) == (451, 300), "size %r" % (png_size(raw),))
    body, ctype = multipart([("note", None, None, b"hello"),
                             ("image", "chelsea.png", "image/png", CHELSEA)])
    status, h, mp = s.convert(body, ctype=ctype)
    check(status == 200, "multipart convert gave %d %r" % (status, mp[:200]))
    check(mp == raw, "multipart and raw results differ")
    status, h, oct_ = s.convert(ctype="application/octet-stream", query="?max_side=64")
    check(status == 200 and png_size(oct_) == (64, 43), "octet-stream convert")
    # chunked request body (no Content-Length)
    c = s.conn()
    c.putrequest("POST", "/api/v1/convert?max_side=64")
    c.putheader("Content-Type", "image/png")
    c.putheader("Transfer-Encoding", "chunked")
    c.endheaders()
    for i in range(0, len(CHELSEA), 65536):
        piece = CHELSEA[i : i + 65536]
        c.send(b"%x\r\n%s\r\n" % (len(piece), piece))
    c.send(b"0\r\n\r\n")
    r = c.getresponse()
    chunked = r.read()
    c.close()
    check(r.status == 200 and png_size(chunked) == (64, 43), "chunked upload gave %d" % r.status)
    entries = s.log_for("raw-test-1")
    check(len(entries) == 1, "one log line per request, got %d" % len(entries))
    e = entries[0]
    for key in ("id", "method", "route", "status", "bytes_in", "bytes_out", "queue_ms",
                "inference_ms", "rss_mb", "rss_delta_kb"):
        check(key in e, "log line lacks " + key)
    check(e["status"] == "200" and int(e["bytes_in"]) == len(CHELSEA)
          and int(e["bytes_out"]) == len(raw), "log line values %r" % e)


def curl(*args):
    """Run Debian's curl (never through a proxy); returns (HTTP status, body bytes)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "body")
        p = subprocess.run(["curl", "-sS", "--noproxy", "*", "-o", out, "-w", "%{http_code}",
                            *args], capture_output=True, timeout=300)
        check(p.returncode == 0, "curl failed: %s" % p.stderr.decode()[-300:])
        with open(out, "rb") as f:
            return int(p.stdout), f.read()


@test
def convert_equals_cli():
    """A photo converted with curl (both body styles) equals `animegan convert`, pixel for pixel."""
    s = main_server()  # 1 thread per worker
    photo = os.path.join(DATA, "chelsea.png")
    url = "http://127.0.0.1:%d/api/v1/convert" % s.port
    status, multipart_png = curl("-F", "image=@" + photo, url)
    check(status == 200, "curl -F gave %d" % status)
    status, raw_png = curl("-H", "Content-Type: image/png", "--data-binary", "@" + photo, url)
    check(status == 200, "curl --data-binary gave %d" % status)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cli.png")
        p = subprocess.run([BIN, "convert", photo, "-o", out, "--threads", "1", "-q"],
                           capture_output=True, timeout=300)
        check(p.returncode == 0, "animegan convert failed: %s" % p.stderr[-300:])
        with open(out, "rb") as f:
            cli = f.read()
    want = png_decode(cli)
    for name, served in (("multipart", multipart_png), ("raw", raw_png)):
        got = png_decode(served)
        check(got[:3] == want[:3], "%s: geometry %r vs %r" % (name, got[:3], want[:3]))
        diff = sum(1 for x, y in zip(got[3], want[3]) if x != y)
        check(diff == 0, "%s: %d of %d samples differ from animegan convert"
              % (name, diff, len(want[3])))


@test
def convert_options():
    s = main_server()
    status, h, body = s.convert(query="?format=jpeg&quality=80&max_side=96")
    check(status == 200 and h["content-type"] == "image/jpeg" and body[:3] == b"\xff\xd8\xff",
          "jpeg output")
    status, h, body = s.convert(query="?format=webp&max_side=96")
    check(status == 200 and h["content-type"] == "image/webp" and body[8:12] == b"WEBP",
          "webp output")
    status, h, body = s.convert(query="?side_by_side=1&max_side=96")
    check(status == 200 and png_size(body) == (192, 64), "side by side %r" % (png_size(body),))
    status, h, body = s.convert(query="?portrait=1&max_side=96")
    check(status == 200 and png_size(body)[0] == png_size(body)[1], "portrait is square %r"
          % (png_size(body),))
    status, h, body = s.convert(ROCKET, ctype="image/jpeg", query="?max_side=100&model=hayao")
    check(status == 200 and max(png_size(body)) == 100, "jpeg input")


@test
def every_model_converts_like_the_cli():
    """Every bundled style and a directory of .onnx files (the author's tiny Cute file),
    served together: /api/v1/models lists them, and each converts exactly as the CLI."""
    onnx = os.path.join(ROOT, "tests", "fixtures", "onnx", "AnimeGANv3_tiny_Cute.onnx")
    with tempfile.TemporaryDirectory() as tmp:
        os.symlink(onnx, os.path.join(tmp, "AnimeGANv3_tiny_Cute.onnx"))
        with open(os.path.join(tmp, "notes.txt"), "w") as f:
            f.write("not a model")
        s = Server("--workers", "1", "--threads", "2", "--model", "hayao", "--model", "hayao-v3",
                   "--model", "shinkai-v3", "--model", "cute-v3", "--model", tmp)
        try:
            status, _, body = s.request("GET", "/api/v1/models")
            models = json.loads(body)["models"]
            names = [m["name"] for m in models]
            check(names == ["hayao", "hayao-v3", "shinkai-v3", "cute-v3", "AnimeGANv3_tiny_Cute"],
                  "models %r" % names)
            check(all("architecture" in m and m["side_multiple"] in (4, 8, 16) and
                      m["min_side"] >= 8 for m in models), "model fields %r" % models)
            photo = os.path.join(DATA, "chelsea.png")
            with open(photo, "rb") as f:
                png = f.read()
            for name in names:
                status, _, served = s.convert(png, query="?model=%s&max_side=64" % name)
                check(status == 200, "%s gave %d: %r" % (name, status, served[:200]))
                out = os.path.join(tmp, name + ".png")
                model = onnx if name.startswith("AnimeGANv3_") else name
                p = subprocess.run([BIN, "convert", photo, "-o", out, "--model", model,
                                    "--max-side", "64", "--threads", "2", "-q"],
                                   capture_output=True, timeout=300)
                check(p.returncode == 0, "convert --model %s: %s" % (model, p.stderr[-300:]))
                with open(out, "rb") as f:
                    want = png_decode(f.read())
                got = png_decode(served)
                check(got == want, "%s: the service differs from animegan convert" % name)
        finally:
            s.stop()


@test
def errors_400():
    s = main_server()
    for query in ("?portrait=2", "?side_by_side=yes", "?quality=0", "?quality=101",
                  "?max_side=abc", "?max_side=4", "?max_side=5000", "?format=gif",
                  "?foo=1", "?portrait=1&portrait=0", "?portrait"):
        status, h, body = s.convert(query=query)
        check(status == 400, "%s gave %d" % (query, status))
        error_shape(body)
        check("x-request-id" in h, "error without X-Request-Id")
    status, _, body = s.convert(b"", ctype="image/png")
    check(status == 400, "empty body gave %d" % status)
    error_shape(body, "bad_request")
    body, ctype = multipart([("photo", "x.png", "image/png", CHELSEA)])
    status, _, out = s.convert(body, ctype=ctype)
    check(status == 400 and "image" in error_shape(out)["message"], "missing field gave %d" % status)
    status, _, out = s.convert(b"--xyz\r\nnonsense", ctype="multipart/form-data; boundary=xyz")
    check(status == 400, "malformed multipart gave %d" % status)
    status, _, out = s.convert(CHELSEA, ctype="multipart/form-data")
    check(status == 400, "multipart without boundary gave %d" % status)


@test
def errors_404_415_422():
    s = main_server()
    status, _, body = s.convert(query="?model=nope")
    check(status == 404, "unknown model gave %d" % status)
    error_shape(body, "model_not_found")
    status, _, body = s.request("GET", "/nope")
    check(status == 404, "unknown path gave %d" % status)
    error_shape(body, "not_found")
    for payload, ctype in ((CHELSEA, "text/plain"), (b"hello world", "application/octet-stream"),
                           (b'{"a": 1}', "application/json"), (b"GIF", "image/gif")):
        status, _, body = s.convert(payload, ctype=ctype)
        check(status == 415, "%s %r gave %d" % (ctype, payload[:10], status))
        error_shape(body, "unsupported_media_type")
    body, ctype = multipart([("image", "x.txt", "text/plain", b"just text")])
    status, _, out = s.convert(body, ctype=ctype)
    check(status == 415, "multipart text part gave %d" % status)
    status, _, body = s.convert(TRUNCATED, ctype="image/jpeg")
    check(status == 422, "truncated JPEG gave %d: %r" % (status, body[:200]))
    error_shape(body, "undecodable_image")
    status, _, body = s.convert(CHELSEA[:2000], ctype="image/png")
    check(status == 422, "truncated PNG gave %d" % status)


@test
def error_413_body_refused_unread():
    s = main_server()  # --max-upload-mb 2
    big = os.urandom(3 * 1024 * 1024)
    t0 = time.time()
    with tempfile.NamedTemporaryFile(suffix=".jpg") as f:
        f.write(big)
        f.flush()
        # curl sends "Expect: 100-continue" with a large body: the 413 comes instead of the
        # 100, and the body is never sent.
        status, body = curl("-H", "Content-Type: image/jpeg", "-H", "X-Request-Id: big-1",
                            "--data-binary", "@" + f.name,
                            "http://127.0.0.1:%d/api/v1/convert" % s.port)
    check(status == 413, "oversized body gave %d" % status)
    error_shape(body, "too_large")
    entries = s.log_for("big-1")
    check(entries and entries[0]["bytes_in"] == "0", "body was read: %r" % entries)
    # Without Expect, over a raw socket: the 413 answers the headers alone. (A client that
    # pushes the body anyway may see the connection reset before it reads the 413: the
    # server closes without reading it, as it must.)
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    sock.sendall(b"POST /api/v1/convert HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
                 b"Content-Length: %d\r\nX-Request-Id: big-2\r\n\r\n" % len(big))
    reply = sock.recv(65536)
    sock.close()
    check(reply.startswith(b"HTTP/1.1 413"), "raw oversized gave %r" % reply[:40])
    # A chunked body that grows past the limit: the connection is closed, not read to the end.
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    sock.sendall(b"POST /api/v1/convert HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
                 b"Transfer-Encoding: chunked\r\nX-Request-Id: big-3\r\n\r\n")
    sent, closed = 0, False
    try:
        for _ in range(200):
            piece = b"\0" * 65536
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            sent += len(piece)
    except OSError:
        closed = True
    sock.close()
    check(closed and sent < 8 * 1024 * 1024, "chunked overflow not cut off (sent %d)" % sent)
    entries = s.log_for("big-3")
    check(entries and entries[0]["status"] == "413", "chunked overflow log %r" % entries)
    check(time.time() - t0 < 30, "413 paths were slow")


@test
def error_413_pixels():
    s = shared("pixels", "--workers", "1", "--max-pixels", "100000")
    status, _, body = s.convert()  # 451 x 300 = 135300 pixels
    check(status == 413, "too many pixels gave %d" % status)
    err = error_shape(body, "too_many_pixels")
    check("451x300" in err["message"], err["message"])
    status, _, body = s.convert(query="?max_side=64")
    check(status == 413, "max_side does not lift the pixel limit (%d)" % status)


@test
def burst_503_and_memory_bound():
    s = shared("burst", "--workers", "1", "--queue", "2", "--max-side", "512",
               "--max-upload-mb", "2")
    bound = s.status()["memory"]["bound_bytes"]
    peak = [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], s.rss_bytes())
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        results = in_threads(lambda i: s.convert(ASTRONAUT, query="?max_side=256"),
                             [(i,) for i in range(12)])
    finally:
        stop.set()
        sampler.join()
    codes = []
    for r in results:
        check(not isinstance(r, Exception), "request failed: %r" % (r,))
        codes.append(r[0])
        if r[0] == 503:
            check(int(r[1].get("retry-after", "0")) >= 1, "503 without Retry-After")
            error_shape(r[2], "queue_full")
    check(codes.count(200) >= 3, "codes %r" % codes)
    check(codes.count(503) >= 1, "no 503 in a burst of 12 over a queue of 2: %r" % codes)
    check(set(codes) <= {200, 503}, "unexpected statuses %r" % codes)
    check(s.proc.poll() is None, "server died")
    check(s.wait_idle(), "admitted requests did not drain")
    if SANITIZED:
        print("  (sanitizer build: RSS against the bound not checked)")
    else:
        check(peak[0] > 0 and peak[0] < bound, "RSS %.1f MiB over the bound %.1f MiB"
              % (peak[0] / 1048576, bound / 1048576))
    print("  burst: %r; peak RSS %.1f MiB, bound %.1f MiB" %
          ({c: codes.count(c) for c in set(codes)}, peak[0] / 1048576, bound / 1048576))
    m = s.metrics()
    check(m["animegan_rejected_queue_full_total"] == codes.count(503), "503 counter")


@test
def queue_timeout_504_and_request_state():
    # fp32 on one thread: the first conversion must outlast the queue timeout (int8 made a
    # small photo fast enough to finish first on a quiet machine).
    s = shared("slow", "--workers", "1", "--threads", "1", "--queue", "4", "--queue-timeout",
               "0.5", "--precision", "fp32")
    results = {}

    def send(name, delay):
        time.sleep(delay)
        results[name] = s.convert(ASTRONAUT, headers={"X-Request-Id": name})  # about 2 s

    # Ids of 32 characters or more are status keys (shorter client ids are not).
    first, second = "first-" + "1" * 26, "second-" + "2" * 25
    threads = [threading.Thread(target=send, args=(n, d)) for n, d in ((first, 0), (second, 0.1))]
    for t in threads:
        t.start()
    seen = set()
    deadline = time.time() + 5
    while time.time() < deadline and len(seen) < 2:
        st = s.get_json("/api/v1/status?request_id=" + first)[1]
        if st["request"]["state"] == "working":
            seen.add("working")
        st = s.get_json("/api/v1/status?request_id=" + second)[1]
        if st["request"]["state"] == "queued" and st["request"]["position"] == 1:
            seen.add("queued")
        time.sleep(0.02)
    for t in threads:
        t.join(300)
    check(seen == {"working", "queued"}, "request states seen: %r" % seen)
    check(results[first][0] == 200, "first gave %d" % results[first][0])
    status, h, body = results[second]
    check(status == 504, "queued past the timeout gave %d" % status)
    error_shape(body, "queue_timeout")
    check(float(h["x-queue-ms"]) >= 500, "X-Queue-Ms %s" % h.get("x-queue-ms"))


@test
def cache_hits():
    s = shared("cache", "--workers", "1", "--cache-mb", "16")
    status, h1, a = s.convert(query="?max_side=128")
    status2, h2, b = s.convert(query="?max_side=128")
    check(status == 200 and status2 == 200, "cache converts")
    # No X-Cache header: it would tell anyone that someone else converted this photo.
    check("x-cache" not in h1 and "x-cache" not in h2, "X-Cache header sent")
    check(a == b, "cached bytes differ")
    status, h3, c = s.convert(query="?max_side=128&format=jpeg")
    m = s.metrics()
    check(m["animegan_cache_hits_total"] == 1 and m["animegan_cache_misses_total"] == 2,
          "cache counters %r %r" % (m["animegan_cache_hits_total"], m["animegan_cache_misses_total"]))
    check(0 < m["animegan_cache_bytes"] <= m["animegan_cache_capacity_bytes"], "cache bytes")


def live_bytes(s):
    """Library heap minus the engines' arenas (which follow the last image size)."""
    m = s.metrics()
    return m["animegan_allocated_bytes"] - m["animegan_engine_arena_bytes"]


@test
def client_gone_releases_everything():
    s = shared("leak", "--workers", "1")
    s.convert(query="?max_side=128")  # warm: arena planned for this size
    s.wait_idle()
    before = live_bytes(s)
    # 1. gone while uploading
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(b"POST /api/v1/convert?max_side=128 HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: image/png\r\nContent-Length: %d\r\nX-Request-Id: gone-1\r\n\r\n"
                 % len(CHELSEA) + CHELSEA[:5000])
    time.sleep(0.2)
    sock.close()
    # 2. gone while queued or running
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(b"POST /api/v1/convert?max_side=128 HTTP/1.1\r\nHost: x\r\n"
                 b"Content-Type: image/png\r\nContent-Length: %d\r\nX-Request-Id: gone-2\r\n\r\n"
                 % len(CHELSEA) + CHELSEA)
    sock.close()
    e1 = s.log_for("gone-1")
    check(len(e1) == 1 and e1[0]["status"] == "499", "gone while uploading: %r" % e1)
    e2 = s.log_for("gone-2", wait=60)
    check(len(e2) == 1, "gone while queued: %r" % e2)
    # 3. errors on every path, then a success at the same size
    s.convert(TRUNCATED, ctype="image/jpeg")
    s.convert(b"hello", ctype="application/octet-stream")
    s.convert(query="?portrait=7")
    check(s.wait_idle(), "admission slots not given back")
    s.convert(query="?max_side=128")
    s.wait_idle()
    after = live_bytes(s)
    check(after == before, "live bytes %d -> %d: a request leaked" % (before, after))


@test
def rss_flat_over_many_requests():
    """The seeds' failure: memory that grows with every request. Here it must not."""
    s = shared("leak", "--workers", "1")
    for _ in range(3):
        s.convert(query="?max_side=128")
    s.wait_idle()
    rss0, live0 = s.rss_bytes(), live_bytes(s)
    for i in range(12):
        status, _, _ = s.convert(ROCKET if i % 2 else CHELSEA, ctype="image/jpeg" if i % 2 else
                                 "image/png", query="?max_side=128")
        check(status == 200, "conversion %d gave %d" % (i, status))
    s.wait_idle()
    for _ in range(2):  # end on the warm-up's image size, so the arena is the same
        s.convert(query="?max_side=128")
    s.wait_idle()
    rss1, live1 = s.rss_bytes(), live_bytes(s)
    print("  RSS %.1f -> %.1f MiB over 14 conversions; live heap %d -> %d bytes"
          % (rss0 / 1048576, rss1 / 1048576, live0, live1))
    check(live1 == live0, "library heap grew by %d bytes" % (live1 - live0))
    if SANITIZED:
        print("  (sanitizer build: RSS growth not checked)")
    else:
        check(rss1 - rss0 < 8 * 1048576, "RSS grew by %.1f MiB" % ((rss1 - rss0) / 1048576))


@test
def rss_returns_after_many_image_sizes():
    """Photos come in every size; per-size state (oneDNN primitives, arenas) must not pile up."""
    s = shared("leak", "--workers", "1")
    for _ in range(2):
        s.convert(query="?max_side=64")
    s.wait_idle()
    rss0 = s.rss_bytes()
    for side in range(72, 330, 8):  # 33 distinct shapes
        status, _, _ = s.convert(query="?max_side=%d" % side)
        check(status == 200, "max_side=%d gave %d" % (side, status))
    peak = s.rss_bytes()
    for _ in range(2):
        s.convert(query="?max_side=64")
    s.wait_idle()
    rss1 = s.rss_bytes()
    print("  RSS %.1f MiB, %.1f after 33 sizes, %.1f back at the first size"
          % (rss0 / 1048576, peak / 1048576, rss1 / 1048576))
    if SANITIZED:
        print("  (sanitizer build: RSS growth not checked)")
    else:
        check(rss1 - rss0 < 16 * 1048576, "RSS kept %.1f MiB after 33 image sizes"
              % ((rss1 - rss0) / 1048576))


@test
def connection_limit_and_slow_client():
    s = shared("limits", "--workers", "1", "--max-connections", "4", "--timeout", "2")
    # Over the limit with every connection idle, a new one closes the one idle longest and
    # is served at once (gate.c).
    held = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(4)]
    time.sleep(0.3)
    extra = socket.create_connection(("127.0.0.1", s.port), timeout=5)
    extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    got = extra.recv(100)
    extra.close()
    check(got.startswith(b"HTTP/1.1 200"), "new connection at the limit not served: %r" % got)
    held[0].settimeout(2)
    check(held[0].recv(100) == b"", "the oldest idle connection was not the one closed")
    for sock in held:
        sock.close()
    # Over the limit with every connection busy (uploads under way, each within its 2 s),
    # the new one waits in the kernel's backlog (no server memory) and is served once a
    # place frees up.
    head = (b"POST /api/v1/convert HTTP/1.1\r\nHost: x\r\nContent-Type: image/png\r\n"
            b"Content-Length: %d\r\n\r\n" % len(CHELSEA))
    uploads = []
    for _ in range(4):
        u = socket.create_connection(("127.0.0.1", s.port))
        u.sendall(head + CHELSEA[:100])
        uploads.append(u)
    time.sleep(0.3)
    extra = socket.create_connection(("127.0.0.1", s.port), timeout=0.5)
    extra.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        got = extra.recv(100)
    except socket.timeout:
        got = None
    check(got is None, "connection over the limit of busy ones was served at once: %r" % got)
    uploads[0].sendall(CHELSEA[100:])
    uploads[0].settimeout(60)
    check(uploads[0].recv(100).startswith(b"HTTP/1.1 200"), "upload not converted")
    uploads.pop(0).close()
    extra.settimeout(5)
    got = extra.recv(100)
    extra.close()
    check(got.startswith(b"HTTP/1.1 200"), "queued connection not served: %r" % got[:40])
    for u in uploads:
        u.close()
    time.sleep(0.3)
    held = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(2)]
    # Slow clients (half a request, or nothing at all) are closed after --timeout.
    held[0].sendall(b"GET /healthz HTTP/1.1\r\n")
    time.sleep(3.5)
    for sock in held:
        sock.settimeout(1)
        try:
            check(sock.recv(100) == b"", "idle connection still open after --timeout")
        except socket.timeout:
            raise Failure("idle connection still open after --timeout")
        sock.close()
    status, _, _ = s.request("GET", "/healthz")
    check(status == 200, "healthz after the limit test gave %d" % status)


@test
def json_log_format():
    s = shared("jsonlog", "--workers", "1", "--log-format", "json")
    s.request("GET", "/healthz", headers={"X-Request-Id": "json-1"})
    s.convert(query="?max_side=64", headers={"X-Request-Id": "json-2"})
    time.sleep(0.2)
    docs = []
    for line in s.lines:
        docs.append(json.loads(line))  # every line, start-up included, is JSON
    ids = {d.get("id"): d for d in docs}
    check("json-1" in ids and "json-2" in ids, "request lines missing")
    d = ids["json-2"]
    check(d["status"] == 200 and d["route"] == "convert" and d["inference_ms"] > 0, repr(d))


@test
def graceful_shutdown_completes_inflight():
    # fp32 on one thread: the three photos must outlast the 0.3 s before /readyz is asked
    # (with int8, the default, they were done and the server gone by then).
    s = Server("--workers", "1", "--threads", "1", "--queue", "4", "--precision", "fp32")
    try:
        keep = s.conn()
        keep.request("GET", "/healthz")
        keep.getresponse().read()
        results = {}

        def send(i):
            results[i] = s.convert(query="?max_side=256", headers={"X-Request-Id": "drain-%d" % i})

        threads = [threading.Thread(target=send, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        check(s.wait_admitted(3), "requests not admitted")
        s.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        keep.request("GET", "/readyz")
        r = keep.getresponse()
        r.read()
        check(r.status == 503, "readyz while draining gave %d" % r.status)
        refused = False
        try:
            status, _, _ = s.request("GET", "/healthz", timeout=3)
        except OSError:
            refused = True
        check(refused, "new connections still accepted while draining")
        for t in threads:
            t.join(120)
        code = s.proc.wait(60)
        check(code == 0, "exit status %r" % code)
        for i in range(3):
            check(results[i][0] == 200, "in-flight request %d gave %d" % (i, results[i][0]))
        check(any("stopped" in l for l in s.lines), "no 'stopped' line")
    finally:
        s.kill()


@test
def drain_timeout_fails_queued_and_exits_0():
    # fp32 on one thread: three photos take longer than the 0.5 s drain (int8 is close).
    s = Server("--workers", "1", "--threads", "1", "--queue", "4", "--drain-seconds", "0.5",
               "--precision", "fp32")
    try:
        results = {}

        def send(i):
            results[i] = s.convert(headers={"X-Request-Id": "late-%d" % i})

        threads = [threading.Thread(target=send, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        check(s.wait_admitted(3), "requests not admitted")
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(120)
        code = s.proc.wait(60)
        check(code == 0, "exit status %r" % code)
        codes = sorted(r[0] for r in results.values())
        check(codes.count(200) >= 1 and codes.count(503) >= 1 and set(codes) <= {200, 503},
              "codes %r" % codes)
        for r in results.values():
            if r[0] == 503:
                error_shape(r[2], "shutting_down")
        check(time.time() - t0 < 30, "drain took %.1f s" % (time.time() - t0))
    finally:
        s.kill()


NGINX = os.environ.get("NGINX", "/usr/sbin/nginx")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Nginx:
    """nginx in `folder` serving one site, `site` (a contrib/nginx config's text), its
    "listen 80;" moved to a free loopback port; `front` is a Server for that port."""

    def __init__(self, folder, site):
        os.makedirs(folder, exist_ok=True)
        self.port = free_port()
        check("listen 80;" in site, "the nginx site has no \"listen 80;\"")
        with open(os.path.join(folder, "animegan.conf"), "w") as f:
            f.write(site.replace("listen 80;", "listen 127.0.0.1:%d;" % self.port))
        with open(os.path.join(folder, "nginx.conf"), "w") as f:
            f.write("daemon off;\nmaster_process off;\nworker_processes 1;\n"
                    "pid %(t)s/nginx.pid;\nerror_log %(t)s/error.log warn;\n"
                    "events { worker_connections 256; }\n"
                    "http {\n access_log %(t)s/access.log;\n"
                    " client_body_temp_path %(t)s/body;\n proxy_temp_path %(t)s/proxy;\n"
                    " fastcgi_temp_path %(t)s/fastcgi;\n uwsgi_temp_path %(t)s/uwsgi;\n"
                    " scgi_temp_path %(t)s/scgi;\n include %(t)s/animegan.conf;\n}\n"
                    % {"t": folder})
        self.proc = subprocess.Popen(
            [NGINX, "-p", folder, "-c", os.path.join(folder, "nginx.conf"),
             "-e", os.path.join(folder, "error.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.front = Server.__new__(Server)
        self.front.port = self.port
        deadline = time.time() + 10
        while True:
            try:
                if self.front.request("GET", "/healthz", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            check(time.time() < deadline and self.proc.poll() is None,
                  "nginx did not start: %s" % (self.proc.stderr.read()
                                              if self.proc.poll() is not None else b"timeout"))
            time.sleep(0.1)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def run_tests(tests, want):
    """Runs the tests whose names contain `want` (every one for ""), a PASS or FAIL line
    each; returns (passed, failed)."""
    passed = failed = 0
    for fn in tests:
        if want and want not in fn.__name__:
            continue
        t0 = time.time()
        try:
            fn()
            print("PASS %s (%.1f s)" % (fn.__name__, time.time() - t0))
            passed += 1
        except Exception as e:
            print("FAIL %s: %s" % (fn.__name__, e))
            if not isinstance(e, Failure):
                traceback.print_exc()
            failed += 1
        sys.stdout.flush()
    return passed, failed


@test
def nginx_load_balancing():
    """contrib/nginx/animegan.conf in front of two instances, on loopback."""
    if not os.access(NGINX, os.X_OK):
        print("  SKIP: %s is not installed (apt-get install nginx-light, or "
              "scripts/install-deps.sh --all)" % NGINX)
        return
    a = Server("--workers", "1", "--threads", "1", "--queue", "2")
    b = Server("--workers", "1", "--threads", "1", "--queue", "2")
    tmp = tempfile.mkdtemp(prefix="animegan-nginx-")
    nginx = None
    try:
        with open(os.path.join(ROOT, "contrib", "nginx", "animegan.conf")) as f:
            conf = f.read()
        check("127.0.0.1:8081" in conf and "127.0.0.1:8082" in conf and "listen 80;" in conf,
              "contrib/nginx/animegan.conf changed shape")
        conf = (conf.replace("127.0.0.1:8081", "127.0.0.1:%d" % a.port)
                .replace("127.0.0.1:8082", "127.0.0.1:%d" % b.port))
        nginx = Nginx(tmp, conf)
        front = nginx.front
        upstreams = {}
        for i in range(8):
            status, h, body = front.convert(query="?max_side=48")
            check(status == 200 and png_size(body) == (48, 32), "through nginx: %d" % status)
            check(re.fullmatch(r"[0-9a-f]{32}", h.get("x-request-id", "")),
                  "nginx's $request_id not passed through: %r" % h.get("x-request-id"))
            upstreams[h["x-upstream"]] = upstreams.get(h["x-upstream"], 0) + 1
        check(len(upstreams) == 2, "only one instance served: %r" % upstreams)
        served = [a.metrics()["animegan_images_converted_total"],
                  b.metrics()["animegan_images_converted_total"]]
        check(all(n >= 1 for n in served) and sum(served) == 8, "per-instance counts %r" % served)
        status, _, _ = front.request("GET", "/metrics")
        check(status == 404, "/metrics is exposed through the balancer")
        # One instance drains and exits: the other takes all the traffic.
        check(a.stop() == 0, "instance a did not exit cleanly")
        for i in range(3):
            status, h, body = front.convert(query="?max_side=48")
            check(status == 200 and h["x-upstream"].endswith(":%d" % b.port),
                  "after stopping one instance: %d via %s" % (status, h.get("x-upstream")))
        print("  nginx: %d requests over %d instances %r, then all via the survivor"
              % (sum(served), len(upstreams), served))
    finally:
        if nginx:
            nginx.stop()
        a.kill()
        b.kill()
        subprocess.run(["rm", "-rf", tmp])


def main():
    want = sys.argv[1] if len(sys.argv) > 1 else None
    if not os.access(BIN, os.X_OK):
        print("FAIL build: %s is missing (run make)" % BIN)
        print("0 passed, 1 failed")
        return 1
    passed, failed = run_tests(TESTS, want)
    for s in SERVERS.values():
        code = s.stop()
        if code != 0:
            print("FAIL shared server %s exited %r" % (" ".join(s.args), code))
            failed += 1
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
