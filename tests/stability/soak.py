#!/usr/bin/env python3
"""Soak of `animegan serve`: many requests of mixed photos, sizes, formats, models, options
and body styles, with the server's RSS sampled every second. Run through bench/soak.sh, or
tests/stability_test.sh (a short run).

Phases:
  1. warm-up: the first --warmup requests of the mix, then a "max pass" (each model at the
     largest size on every worker at once, so every engine's arena is at its largest);
     wait idle -> the baseline: idle RSS and the peak RSS so far (VmHWM).
  2. the rest of the --requests, workers + 1 clients at a time, in --checkpoints equal
     parts; after each part the same max pass and an idle reading (RSS, VmHWM), the last of
     which is the end.

It passes when at no checkpoint the peak (VmHWM) or the idle RSS has grown past the baseline
by more than 2% of the baseline peak or 4 MiB, whichever is larger, no request got an
unexpected status, the server exits 0 on SIGTERM and its stderr has no sanitizer report.
VmHWM is the kernel's own high-water mark, so a spike between two samples still counts.
The slope is the least-squares fit of the checkpoints' idle RSS against requests served, in
MiB per 1000 requests (that of every sample is printed too, but the sampled RSS swings with
the size of the image each engine last planned its arena for).

Uses the server helpers of tests/server/driver.py. Standard library only.
"""

import argparse
import glob
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
import driver as d  # noqa: E402  (Server, multipart, png_size, ...)

DATA = os.path.join(ROOT, "tests", "data")
GEN = os.path.join(DATA, "generated")
MIB = 1048576.0

# Inputs that convert: the photos and the special images of tests/data/generated.
PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "bryandlee_inputs_1.jpg",
          "bryandlee_inputs_2.jpg", "bryandlee_inputs_3.jpg"]
SPECIAL = ["anim.gif", "anim.webp", "cmyk.jpg", "cmyk_icc.jpg", "grey.png", "grey16.png",
           "grey_alpha.png", "orient6.jpg", "palette.png", "rgb.tif", "rgb16.png", "rgba.png",
           "rgb.heic", "rgb.avif", "size_8x8.png"]
# Inputs that must fail, with their status: error paths are where leaks hide.
BAD = [("generated/truncated.png", "image/png", "", 422),
       ("truncated.jpg", "image/jpeg", "", 422),
       ("generated/huge_header.png", "image/png", "", 413),
       ("generated/size_1x1.png", "image/png", "", 422),
       ("generated/thin_10000x8.png", "image/png", "", 422),
       (None, "application/octet-stream", "", 415),  # random bytes
       ("chelsea.png", "image/png", "model=no-such-model", 404),
       ("chelsea.png", "image/png", "quality=0", 400)]
SANITIZER_REPORT = re.compile(r"AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|"
                              r"runtime error:|Sanitizer CHECK failed")
MIME = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}
MAGIC = {"png": b"\x89PNG", "jpeg": b"\xff\xd8\xff", "webp": b"RIFF"}


def read(path):
    with open(os.path.join(DATA, path), "rb") as f:
        return f.read()


def ctype_of(name):
    ext = name.rsplit(".", 1)[-1].lower()
    return {"jpg": "image/jpeg", "tif": "image/tiff", "heic": "image/heif",
            "avif": "image/avif"}.get(ext, "image/" + ext)


def proc_status(pid):
    """(VmRSS, VmHWM) in bytes, or (0, 0) once the process is gone."""
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line[:5]] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out.get("VmRSS", 0), out.get("VmHWM", 0)


class Soak:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.done = 0
        self.errors = []
        self.requests = []  # (t_end, latency_s, status, model, max_side, format, phase)
        self.samples = []  # (t, rss, hwm, done, phase)
        self.phase = "start"
        self.t0 = time.time()
        self.stop_sampling = threading.Event()
        self.server = None
        self.alive_at_failure = None  # whether the server still ran when the run failed

    # ---- the server ----------------------------------------------------------------------

    def start(self):
        a = self.args
        env_saved = dict(os.environ)
        for kv in a.env:
            k, _, v = kv.partition("=")
            os.environ[k] = v
        if a.preload:
            os.environ["LD_PRELOAD"] = a.preload
        try:
            models = []
            for m in a.models.split(","):
                models += ["--model", m]
            self.server = d.Server("--workers", str(a.workers), "--threads", str(a.threads),
                                   "--queue", str(a.queue), "--max-side", str(max(a.sizes)),
                                   *models, *a.server_args)
        finally:
            os.environ.clear()
            os.environ.update(env_saved)
        self.pid = self.server.pid
        _, doc = self.server.get_json("/api/v1/models")
        self.model_names = [m["name"] for m in doc["models"]]
        self.sampler = threading.Thread(target=self.sample, daemon=True)
        self.sampler.start()

    def sample(self):
        while not self.stop_sampling.is_set():
            rss, hwm = proc_status(self.pid)
            with self.lock:
                self.samples.append((time.time() - self.t0, rss, hwm, self.done, self.phase))
            self.stop_sampling.wait(self.args.sample_s)

    def wait_idle(self):
        d.check(self.server.wait_idle(600), "admitted requests did not drain")
        time.sleep(1.0)  # let freed memory go back (trim, munmap) before reading RSS
        return proc_status(self.pid)

    # ---- the mix -------------------------------------------------------------------------

    def load_inputs(self):
        self.good = [(n, read(n), ctype_of(n)) for n in PHOTOS]
        self.good += [(n, read(os.path.join("generated", n)), ctype_of(n)) for n in SPECIAL]
        # WebP photos: the server's own side-by-side output holds the photo on its left.
        for n in ("chelsea.png", "coffee.png"):
            status, _, body = self.server.convert(read(n), query="?max_side=%d&format=webp"
                                                  "&side_by_side=1&quality=85" % max(self.args.sizes))
            d.check(status == 200 and body[:4] == b"RIFF", "webp input from %s: %d" % (n, status))
            self.good.append((n.replace(".png", "_sbs.webp"), body, "image/webp"))
        self.bad = []
        for path, ctype, query, status in BAD:
            blob = read(path) if path else random.Random(7).randbytes(4096)
            self.bad.append((path or "random-bytes", blob, ctype, query, status))

    def plan(self, i):
        """Request i of the mix, the same for a given --seed."""
        rng = random.Random(self.args.seed * 1000003 + i)
        a = self.args
        # The first requests go through every input once (every decoder, every error path
        # warms up before the baseline); then the choice is random.
        ngood, nbad = len(self.good), len(self.bad)
        if (i >= ngood and i < ngood + nbad) or (i >= ngood + nbad and rng.random() < a.bad_share):
            name, blob, ctype, query, status = self.bad[i - ngood] if i < ngood + nbad \
                else rng.choice(self.bad)
            return dict(name=name, blob=blob, ctype=ctype, query=query, want=status,
                        model="-", max_side=0, format="-", multipart=rng.random() < 0.5)
        name, blob, ctype = self.good[i] if i < ngood else rng.choice(self.good)
        model = self.model_names[0] if rng.random() < 0.7 else rng.choice(self.model_names)
        fmt = rng.choice(("png", "jpeg", "webp"))
        side = rng.choice(a.sizes)
        q = ["model=" + model, "max_side=%d" % side, "format=" + fmt]
        if fmt != "png":
            q.append("quality=%d" % rng.randint(40, 95))
        if rng.random() < a.restore_share:
            q.append("restore=1")  # the faces through the --restore-model first
            if rng.random() < 0.5:  # a CodeFormer's w (other restorers ignore it)
                q.append("codeformer_fidelity=%.2f" % rng.random())
        elif rng.random() < a.portrait_share:
            q.append("portrait=1")  # always 512 x 512 (the face2paint size): slow
        elif rng.random() < 0.15:
            q.append("side_by_side=1")
        return dict(name=name, blob=blob, ctype=ctype, query="&".join(q), want=200,
                    model=model, max_side=side, format=fmt, multipart=rng.random() < 0.5)

    def send(self, p):
        blob, ctype = p["blob"], p["ctype"]
        if p["multipart"]:
            blob, ctype = d.multipart([("image", p["name"].rsplit("/", 1)[-1], p["ctype"],
                                        p["blob"])])
        t = time.time()
        try:
            status, h, body = self.server.convert(blob, query="?" + p["query"] if p["query"]
                                                  else "", ctype=ctype, timeout=300)
        except Exception as e:  # connection refused or reset: always an error here
            status, h, body = -1, {}, repr(e).encode()
        end = time.time()
        bad = None
        if status != p["want"]:
            bad = "%s ?%s: status %d, wanted %d: %r" % (p["name"], p["query"], status,
                                                         p["want"], body[:160])
        elif status == 200 and (h.get("content-type") != MIME[p["format"]]
                                or not body.startswith(MAGIC[p["format"]])):
            bad = "%s ?%s: not a %s: %r" % (p["name"], p["query"], p["format"], body[:16])
        with self.lock:
            self.done += 1
            self.requests.append((end - self.t0, end - t, status, p["model"], p["max_side"],
                                  p["format"], self.phase, p["name"].rsplit("/", 1)[-1],
                                  "multipart" if p["multipart"] else "raw", p["query"] or "-"))
            if bad:
                self.errors.append(bad)
        return status

    def run_range(self, first, last):
        nxt = [first]

        def client():
            while True:
                with self.lock:
                    i = nxt[0]
                    if i >= last or len(self.errors) > 20:
                        return
                    nxt[0] += 1
                self.send(self.plan(i))
                if self.args.progress and i % self.args.progress == 0:
                    rss, _ = proc_status(self.pid)
                    print("  %6d requests  %6.0f s  RSS %.1f MiB" % (
                        i, time.time() - self.t0, rss / MIB), flush=True)

        threads = [threading.Thread(target=client) for _ in range(self.args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def max_pass(self):
        """Each model at the largest size on every worker at once (the arena envelope)."""
        side = max(self.args.sizes)
        big = read("bryandlee_inputs_1.jpg")
        shape = "max_side=%d" % side
        if self.args.portrait_share > 0 and side < 512:
            shape = "portrait=1"  # 512 x 512: the largest image the mix has
        for model in self.model_names:
            plans = [dict(name="bryandlee_inputs_1.jpg", blob=big, ctype="image/jpeg",
                          query="model=%s&%s&side_by_side=1&format=png" % (model, shape),
                          want=200, model=model, max_side=side, format="png", multipart=False)
                     for _ in range(self.args.workers)]
            d.in_threads(self.send, [(p,) for p in plans])
        # Restoration works at the photo's own size before max_side: every photo, on every
        # worker at once (its faces, crops and restorer arena).
        for name in PHOTOS if self.args.restore_share > 0 else []:
            plans = [dict(name=name, blob=read(name), ctype=ctype_of(name),
                          query="restore=1&max_side=%d&format=png" % side, want=200,
                          model=self.model_names[0], max_side=side, format="png",
                          multipart=False) for _ in range(self.args.workers)]
            d.in_threads(self.send, [(p,) for p in plans])

    # ---- the run -------------------------------------------------------------------------

    def run(self):
        a = self.args
        self.start()
        try:
            self.load_inputs()
            try:  # reset VmHWM: the baseline peak is that of serving, not of start-up
                with open("/proc/%d/clear_refs" % self.pid, "w") as f:
                    f.write("5")
            except OSError:
                pass
            self.phase = "warmup"
            self.run_range(0, a.warmup)
            # Twice: how the workers' largest images overlap in time varies from pass to
            # pass, and the baseline peak is that of the envelope, not of one ordering.
            self.max_pass()
            self.max_pass()
            self.base_idle, self.base_hwm = self.wait_idle()
            self.t_base = time.time() - self.t0
            print("warm-up: %d requests; idle RSS %.1f MiB, peak (VmHWM) %.1f MiB" % (
                a.warmup, self.base_idle / MIB, self.base_hwm / MIB), flush=True)
            self.checkpoints = [(self.t_base, self.done, self.base_idle, self.base_hwm)]
            k = max(1, a.checkpoints)
            for j in range(1, k + 1):
                self.phase = "main"
                self.run_range(a.warmup + (a.requests - a.warmup) * (j - 1) // k,
                               a.warmup + (a.requests - a.warmup) * j // k)
                self.phase = "checkpoint" if j < k else "end"
                self.max_pass()
                idle, hwm = self.wait_idle()
                self.checkpoints.append((time.time() - self.t0, self.done, idle, hwm))
            self.end_idle, self.end_hwm = idle, hwm
            self.t_end = time.time() - self.t0
        except BaseException:
            self.alive_at_failure = self.server.proc.poll() is None
            self.t_failure = time.time() - self.t0
            raise
        finally:
            self.stop_sampling.set()
            self.sampler.join()
            self.exit_code = self.server.stop(signal.SIGTERM, 120)

    def print_failure(self):
        """Why it failed, small: the phase, the first request errors, how the server ended
        and its last stderr lines (all indented, so tests/stability_test.sh shows them), and
        its whole log in OUT/server.log."""
        if self.server is None:
            return
        if self.alive_at_failure is not None:
            print("  failed in phase %s after %d requests, %.1f s; the server was %s then" % (
                self.phase, self.done, self.t_failure,
                "running" if self.alive_at_failure else "gone"))
        for e in self.errors[:5]:
            print("  error: " + e)
        print("  " + self.server.exit_report(40, "    "))
        os.makedirs(self.args.out, exist_ok=True)
        with open(os.path.join(self.args.out, "server.log"), "w") as f:
            f.write("\n".join(self.server.lines) + "\n")

    def report(self):
        a = self.args
        main = [(s[3], s[1]) for s in self.samples if s[4] == "main"]
        slope = lsq_slope(main) * 1000 / MIB
        # The sampled RSS swings with the image size each engine last planned its arena for;
        # at a checkpoint every engine has just run the largest image and the server is idle,
        # so the checkpoints compare like with like: their slope is where creep shows.
        cp_slope = lsq_slope([(c[1], c[2]) for c in self.checkpoints]) * 1000 / MIB
        after = [s[1] for s in self.samples if s[4] != "warmup"]
        max_rss = max(after) if after else 0
        tol = max(0.02 * self.base_hwm, 4 * MIB)
        growth_hwm = max(c[3] for c in self.checkpoints) - self.base_hwm
        growth_idle = max(c[2] for c in self.checkpoints) - self.base_idle
        statuses = {}
        for r in self.requests:
            statuses[r[2]] = statuses.get(r[2], 0) + 1
        lat = sorted(r[1] for r in self.requests if r[2] == 200)

        def pct(p):
            return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else 0

        rss_ok = not a.check_rss or (growth_hwm <= tol and growth_idle <= tol)
        sanitizer = [l for l in self.server.lines if SANITIZER_REPORT.search(l)]
        ok = not self.errors and rss_ok and self.exit_code == 0 and not sanitizer
        for line in sanitizer[:5]:
            self.errors.append("sanitizer: " + line)
        summary = dict(
            date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), requests=self.done,
            warmup=a.warmup, workers=a.workers, threads=a.threads, clients=a.clients,
            sizes=a.sizes, models=self.model_names, allocator=a.label,
            seconds=round(self.t_end, 1), statuses={str(k): v for k, v in statuses.items()},
            idle_rss_after_warmup_mib=round(self.base_idle / MIB, 1),
            peak_rss_after_warmup_mib=round(self.base_hwm / MIB, 1),
            max_sampled_rss_mib=round(max_rss / MIB, 1),
            peak_rss_end_mib=round(self.end_hwm / MIB, 1),
            idle_rss_end_mib=round(self.end_idle / MIB, 1),
            growth_peak_mib=round(growth_hwm / MIB, 2), growth_idle_mib=round(growth_idle / MIB, 2),
            tolerance_mib=round(tol / MIB, 2), slope_mib_per_1000=round(slope, 3),
            checkpoint_slope_mib_per_1000=round(cp_slope, 3),
            checkpoints=[dict(requests=c[1], idle_rss_mib=round(c[2] / MIB, 1),
                              peak_rss_mib=round(c[3] / MIB, 1)) for c in self.checkpoints],
            latency_p50_s=round(pct(0.5), 3), latency_p99_s=round(pct(0.99), 3),
            server_exit=self.exit_code, errors=self.errors[:20], passed=ok)
        out = a.out
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "rss.dat"), "w") as f:
            f.write("# t_s rss_mib hwm_mib requests phase\n")
            for t, rss, hwm, n, ph in self.samples:
                f.write("%.2f %.2f %.2f %d %s\n" % (t, rss / MIB, hwm / MIB, n, ph))
        with open(os.path.join(out, "requests.dat"), "w") as f:
            f.write("# t_end_s latency_s status model max_side format phase input body query\n")
            for r in self.requests:
                f.write("%.3f %.4f %d %s %d %s %s %s %s %s\n" % r)
        with open(os.path.join(out, "server.log"), "w") as f:
            f.write("\n".join(self.server.lines) + "\n")
        with open(os.path.join(out, "checkpoints.dat"), "w") as f:
            f.write("# t_s requests idle_rss_mib peak_rss_mib\n")
            for t, n, idle, hwm in self.checkpoints:
                f.write("%.2f %d %.2f %.2f\n" % (t, n, idle / MIB, hwm / MIB))
        with open(os.path.join(out, "plot.vars"), "w") as f:  # for bench/soak_plot.gp
            f.write("warm_t = %.2f\nbase_hwm = %.2f\nbase_idle = %.2f\ntol = %.2f\n"
                    "label = \"%d requests, %s, %d workers, %s\"\n" % (
                        self.t_base, self.base_hwm / MIB, self.base_idle / MIB, tol / MIB,
                        self.done, a.label, a.workers, "passed" if ok else "FAILED"))
        with open(os.path.join(out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
        print("soak: %d requests in %.0f s (%s), statuses %s" % (
            self.done, self.t_end, a.label, summary["statuses"]))
        print("  RSS idle after warm-up  %8.1f MiB   peak after warm-up %8.1f MiB" % (
            self.base_idle / MIB, self.base_hwm / MIB))
        print("  RSS max sampled after   %8.1f MiB" % (max_rss / MIB))
        print("  RSS idle at the end     %8.1f MiB   peak at the end    %8.1f MiB" % (
            self.end_idle / MIB, self.end_hwm / MIB))
        print("  largest growth at a checkpoint: peak %+.2f MiB, idle %+.2f MiB (tolerance "
              "%.2f MiB)" % (growth_hwm / MIB, growth_idle / MIB, tol / MIB))
        print("  idle RSS at the %d checkpoints: %s MiB" % (
            len(self.checkpoints), " ".join("%.1f" % (c[2] / MIB) for c in self.checkpoints)))
        print("  slope: %+.3f MiB per 1000 requests (checkpoints), %+.3f (all samples)" % (
            cp_slope, slope))
        print("  latency of 200s: p50 %.3f s, p99 %.3f s; server exit %r" % (
            pct(0.5), pct(0.99), self.exit_code))
        for e in self.errors[:10]:
            print("  error: " + e)
        if self.exit_code != 0 or self.errors:
            print("  " + self.server.exit_report(40, "    "))
        print("  data in %s" % out)
        return ok


def lsq_slope(points):
    """Least-squares slope of y over x."""
    n = len(points)
    if n < 3:
        return 0.0
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx > 0 else 0.0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=10000)
    p.add_argument("--warmup", type=int, default=None,
                   help="requests before the baseline (default: 10%%, 50 to 500)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=None, help="default: one per worker")
    p.add_argument("--queue", type=int, default=16)
    p.add_argument("--clients", type=int, default=None, help="default: workers + 1")
    p.add_argument("--sizes", default="64,96,128,192,256", help="max_side values to mix")
    p.add_argument("--models", default="hayao,tests/fixtures/random_zip.pt")
    p.add_argument("--bad-share", type=float, default=0.03, help="share of bad inputs")
    p.add_argument("--portrait-share", type=float, default=0.03,
                   help="share of portrait=1 requests (512 x 512 whatever the size)")
    p.add_argument("--restore-share", type=float, default=0.0,
                   help="share of requests with restore=1 (give -- --restore-model FILE)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--bin", default=os.path.join(ROOT, os.environ.get("BUILD", "build"),
                                                 "animegan"))
    p.add_argument("--allocator", default="asbuilt", choices=("asbuilt", "glibc", "jemalloc"),
                   help="asbuilt: the server's own mallopt settings; glibc: mallopt() made a "
                   "no-op (glibc defaults); jemalloc: Debian's libjemalloc2 by LD_PRELOAD")
    p.add_argument("--preload", default="", help="more LD_PRELOAD for the server")
    p.add_argument("--env", action="append", default=[], help="K=V for the server, repeatable")
    p.add_argument("--label", default=None, help="default: the allocator")
    p.add_argument("--checkpoints", type=int, default=10,
                   help="after warm-up, stop this many times for a max pass and an idle reading")
    p.add_argument("--sample-s", type=float, default=1.0)
    p.add_argument("--check-rss", type=int, default=1,
                   help="0: report RSS but do not judge it (sanitizer builds)")
    p.add_argument("--progress", type=int, default=0, help="print a line every N requests")
    p.add_argument("--out", default=None, help="results directory (default "
                   "bench/results/soak-DATE-ALLOCATOR; the plot is OUT.png)")
    p.add_argument("server_args", nargs="*", help="more `animegan serve` options (after --)")
    a = p.parse_args()
    a.sizes = [int(s) for s in a.sizes.split(",")]
    a.threads = a.threads or a.workers
    a.clients = a.clients or a.workers + 1
    if a.warmup is None:
        a.warmup = min(500, max(50, a.requests // 10))
    a.warmup = min(a.warmup, a.requests)
    a.models = ",".join(m if "/" not in m or os.path.isabs(m) else os.path.join(ROOT, m)
                        for m in a.models.split(","))
    a.label = a.label or a.allocator
    if a.out is None:
        a.out = os.path.join(ROOT, "bench", "results", "soak-%s-%s" % (
            time.strftime("%Y%m%d-%H%M%S"), a.allocator))
    preload = [a.preload] if a.preload else []
    if a.allocator == "glibc":
        preload.append(build_mallopt_noop())
    elif a.allocator == "jemalloc":
        found = sorted(glob.glob("/usr/lib/*/libjemalloc.so.2"))
        if not found:
            print("soak: libjemalloc2 is not installed (scripts/install-deps.sh --all)")
            return 1
        preload.append(found[0])
    a.preload = " ".join(preload)
    d.BIN = os.path.abspath(a.bin)
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        os.environ.pop(var, None)
    s = Soak(a)
    try:
        s.run()
    except Exception as e:  # a check, or a connection refused or reset by a server gone
        print("soak: FAILED: %s" % (e if isinstance(e, d.Failure) else repr(e)))
        s.print_failure()
        return 1
    ok = s.report()
    plot(a.out)
    return 0 if ok else 1


def build_mallopt_noop():
    out = os.path.join(ROOT, "build", "stability", "mallopt_noop.so")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    subprocess.run([os.environ.get("CC", "cc"), "-shared", "-fPIC", "-O2", "-o", out,
                    os.path.join(ROOT, "tests", "stability", "mallopt_noop.c")], check=True)
    return out


def plot(out):
    """RSS and latency over time: OUT.png, by bench/soak_plot.gp (gnuplot from Debian)."""
    if not shutil.which("gnuplot"):
        print("soak: gnuplot is not installed: no plot (scripts/install-deps.sh --all)")
        return
    p = subprocess.run(["gnuplot", "-e", "dir='%s'; out='%s.png'" % (out, out),
                        os.path.join(ROOT, "bench", "soak_plot.gp")], capture_output=True)
    if p.returncode == 0:
        print("  plot: %s.png" % out)
    else:
        print("soak: gnuplot failed: %s" % p.stderr.decode()[-500:])


if __name__ == "__main__":
    sys.exit(main())
