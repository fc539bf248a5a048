#!/usr/bin/env python3
"""Video jobs on Redis (--jobs-redis, server/jobs_redis*.c) end to end: its own redis-server
(a free loopback port, its own directory, append-only with fsync always), three instances
sharing one --jobs-dir, and nginx with contrib/nginx/animegan-cluster.conf in front. A job
posted and polled through nginx (every poll 200), kill -9 of the instance running a job (it
completes on another, every frame there), SIGTERM (handed back at once), DELETE through
another instance, a clip cut in segments run on several instances and joined into the file
a whole conversion writes (timestamps, audio bytes), kill -9 and DELETE of a job in
segments, Redis killed and restarted mid-queue (nothing lost, 503 + Retry-After meanwhile,
photos unaffected), --jobs-per-client across instances, a Redis that answers garbage or
drops the connection, and bad URLs refused in one line at start-up.
Prints "N passed, N failed"; `--figures` prints the figures of docs/cluster.md instead.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "server"))
import driver  # noqa: E402
from driver import Failure, Server, check  # noqa: E402

TMP = tempfile.mkdtemp(prefix="animegan-redis-")
CLIPS = os.path.join(TMP, "clips")
SPOOL = os.path.join(TMP, "spool")
ID = re.compile(r"^[0-9a-f]{32}$")
LEASE = "3"
SEGMENT_S = "2"  # --jobs-segment-seconds: segments.mp4 (6 s, a keyframe every 0.48 s) in 3
REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"


def clip(name):
    with open(os.path.join(CLIPS, name), "rb") as f:
        return f.read()


def ffprobe(path, *args):
    out = subprocess.run(["ffprobe", "-v", "error", *args, path], capture_output=True, text=True)
    return out.stdout.strip()


def frame_count(path):
    return int(ffprobe(path, "-select_streams", "v", "-count_frames", "-show_entries",
                       "stream=nb_read_frames", "-of", "csv=p=0") or 0)


class Redis:
    """redis-server on a free loopback port, append-only (fsync always) in its own dir."""

    def __init__(self):
        self.port = driver.free_port()
        self.dir = os.path.join(TMP, "redis")
        os.makedirs(self.dir, exist_ok=True)
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--appendonly", "yes", "--appendfsync", "always", "--save", "",
             "--logfile", os.path.join(self.dir, "log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise Failure("redis-server did not start")

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    @property
    def url(self):
        return "redis://127.0.0.1:%d" % self.port


GPEN64 = os.path.join(driver.ROOT, "tests", "fixtures", "restore", "gpen64_zip.pt")


def instance(redis_url, name, *extra):
    return Server("--threads", "1", "--model", "hayao", "--max-side", "256", "--jobs-dir", SPOOL,
                  "--jobs-redis", redis_url, "--instance-name", name, "--jobs-lease", LEASE,
                  "--max-video-mb", "2", "--max-jobs", "8", "--job-ttl", "600",
                  "--jobs-per-client", "4", "--queue", "4", "--jobs-segment-seconds", SEGMENT_S,
                  "--restore-model", GPEN64, *extra)


def cluster_nginx(servers):
    """nginx with contrib/nginx/animegan-cluster.conf, its upstream the given instances."""
    with open(os.path.join(driver.ROOT, "contrib", "nginx", "animegan-cluster.conf")) as f:
        conf = f.read()
    upstream = "".join("    server 127.0.0.1:%d max_fails=3 fail_timeout=10s;\n" % s.port
                       for s in servers)
    conf = re.sub(r"(    server 10\.0\.0\.\d+:8080[^\n]*\n)+", upstream, conf)
    check("10.0.0" not in conf, "the upstream of animegan-cluster.conf was not replaced")
    return driver.Nginx(os.path.join(TMP, "nginx"), conf)


def submit(s, body, query="", headers=None):
    h = {"Content-Type": "video/mp4"}
    h.update(headers or {})
    status, hdrs, payload = s.request("POST", "/api/v1/jobs" + query, body, h)
    return status, hdrs, json.loads(payload) if payload else {}


def job(s, job_id):
    status, _, payload = s.request("GET", "/api/v1/jobs/" + job_id)
    return status, json.loads(payload) if payload else {}


def poll(s, job_id, until, timeout=120, every=0.2, all_200=True):
    """Poll until until(doc) holds; every poll must answer 200 (unless all_200 is off)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        status, doc = job(s, job_id)
        if all_200:
            check(status == 200, "poll of %s: %d %s" % (job_id, status, doc))
        if status == 200 and until(doc):
            return doc
        time.sleep(every)
    raise Failure("job %s: still %s after %d s" % (job_id, doc, timeout))


def done(doc):
    return doc["state"] in ("done", "failed")


def result_path(job_id, ext="mp4"):
    return os.path.join(SPOOL, "%s.out.%s" % (job_id, ext))


def make_segment_clip(seconds=6, name="segments.mp4"):
    """A clip cut in segments: H.264 with a keyframe every 12 frames (0.48 s at 25 fps) and
    AAC sound (copied into MP4: the joined audio packets must be the source's bytes)."""
    path = os.path.join(CLIPS, name)
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    "testsrc2=size=128x96:rate=25:duration=%g" % seconds, "-f", "lavfi", "-i",
                    "sine=frequency=440:sample_rate=44100:duration=%g" % seconds,
                    "-c:v", "libx264", "-preset", "veryfast", "-g", "12", "-pix_fmt", "yuv420p",
                    "-c:a", "aac", "-b:a", "64k", path], check=True)
    return path


def packets(path, stream):
    """Every packet of the stream: (pts, dts, duration, flags, size, data hash) lines."""
    return ffprobe(path, "-select_streams", stream, "-show_entries",
                   "packet=pts,dts,duration,size,flags", "-show_data_hash", "MD5",
                   "-of", "csv=p=0").splitlines()


def timing(path):
    """The video's timestamps: pts of every frame (sorted), dts in decode order, the
    duration of each frame by pts, the stream's frame count and duration."""
    rows = [r.split(",") for r in packets(path, "v")]
    by_pts = sorted((int(r[0]), r[2]) for r in rows)  # MP4 packets may say N/A
    return {"pts": [p for p, _ in by_pts], "durations": [d for _, d in by_pts],
            "dts": [int(r[1]) for r in rows], "frames": frame_count(path),
            "duration": ffprobe(path, "-select_streams", "v", "-show_entries",
                                "stream=duration,time_base", "-of", "csv=p=0")}


def parts_started(job_id):
    """{part: [instances that started it, in time order]} from every instance's log (killed
    ones too)."""
    starts = []
    for s in STATE["servers"] + STATE.get("gone", []):
        for line in s.lines:
            m = re.search(r"job %s part (\w+) of \d+ started on (\w+)" % job_id, line)
            if m:
                starts.append((line.split()[0], m.group(1), m.group(2)))  # ts=... first
    out = {}
    for _, part, where in sorted(starts):
        out.setdefault(part, []).append(where)
    return out


TESTS = []
STATE = {}


def test(fn):
    TESTS.append(fn)
    return fn


def cluster():
    return STATE["redis"], STATE["servers"], STATE["nginx"]


def by_name(name):
    return next(s for s in STATE["servers"] if s.name == name)


def alive():
    return [s for s in STATE["servers"] if s.proc.poll() is None]


def start_cluster():
    redis = STATE["redis"] = Redis()
    servers = []
    for name in ("a", "b", "c"):
        s = instance(redis.url, name)
        s.name = name
        servers.append(s)
    STATE["servers"] = servers
    STATE["nginx"] = cluster_nginx(servers)


def replace(name):
    """Start instance `name` again (after a kill), on the same Redis and spool."""
    old = by_name(name)
    s = instance(STATE["redis"].url, name, "--port", str(old.port))  # nginx's upstream
    s.name = name
    STATE.setdefault("gone", []).append(old)
    STATE["servers"][STATE["servers"].index(old)] = s
    return s


# ---- start-up refusals ---------------------------------------------------------------------


def refused(*args):
    out = subprocess.run([driver.BIN, "serve", "--port", "0", "--threads", "1", "--model", "hayao", "--jobs-dir",
                          os.path.join(TMP, "refused"), *args], capture_output=True, text=True,
                         timeout=60)
    errors = [l for l in out.stderr.splitlines() if l.startswith("animegan:")]
    return out.returncode, errors


@test
def bad_urls_refused_in_one_line():
    for url, words in (("http://127.0.0.1:6379", "is not redis://"),
                       ("redis://127.0.0.1", "is not redis://"),
                       ("redis://127.0.0.1:99999", "is not redis://"),
                       ("redis://127.0.0.1:%d" % driver.free_port(), "cannot connect"),
                       ("redis://:wrong@127.0.0.1:%d" % STATE["redis"].port, "AUTH")):
        code, errors = refused("--jobs-redis", url)
        check(code != 0 and len(errors) == 1 and words in errors[0] and "--jobs-redis" in errors[0],
              "%s: exit %d, %s" % (url, code, errors))
    print("  5 bad URLs refused, one line each")


# ---- the cluster ----------------------------------------------------------------------------


@test
def posted_polled_downloaded_through_nginx():
    _, servers, nginx = cluster()
    front = nginx.front
    status, headers, doc = submit(front, clip("clip.mp4"), "?max_side=64")
    check(status == 202 and ID.match(doc.get("id", "")), "submit: %d %s" % (status, doc))
    check(headers.get("location") == "/api/v1/jobs/" + doc["id"], "Location %r" % headers)
    seen = set()

    def running_or_done(d):
        if d["state"] == "running":
            check(d.get("instance") in ("a", "b", "c"), "instance %r" % d.get("instance"))
            seen.add(d["instance"])
        return done(d)

    final = poll(front, doc["id"], running_or_done)
    check(final["state"] == "done" and final["frames_done"] == 50, str(final))
    status, _, payload = front.request("GET", final["result_url"])
    check(status == 200 and len(payload) > 1000, "result: %d %d bytes" % (status, len(payload)))
    path = os.path.join(TMP, "result.mp4")
    with open(path, "wb") as f:
        f.write(payload)
    check(frame_count(path) == 50, "frames %d" % frame_count(path))
    for s in servers:  # the same answer from each
        status, d = job(s, doc["id"])
        check(status == 200 and d["state"] == "done", "%s: %d %s" % (s.name, status, d))
    status, _, _ = front.request("DELETE", "/api/v1/jobs/" + doc["id"])
    check(status == 200 and not os.path.exists(result_path(doc["id"])), "DELETE %d" % status)
    print("  ran on %s; every poll 200; 50 frames; the same state from a, b and c" % sorted(seen))


@test
def fusion_jobs_refused_clearly():
    """A fusion job (issue 31: a `source` image part) is refused with 501 and the reason: the
    cluster's queue carries one input file. Nothing stays in the spool."""
    _, servers, _ = cluster()
    with open(os.path.join(driver.ROOT, "tests", "data", "faces", "obama.jpg"), "rb") as f:
        source = f.read()
    body, ctype = driver.multipart([("video", "clip.mp4", "video/mp4", clip("clip.mp4")),
                                    ("source", "obama.jpg", "image/jpeg", source)])
    status, _, doc = submit(servers[0], body, "?ratio=0.5", {"Content-Type": ctype})
    check(status == 501 and doc.get("error", {}).get("code") == "not_implemented",
          "%d %s" % (status, doc))
    check("--jobs-redis" in doc["error"]["message"], str(doc))
    check(not [n for n in os.listdir(SPOOL) if n.endswith((".source", ".in"))],
          str(os.listdir(SPOOL)))
    print("  " + doc["error"]["message"])


@test
def restore_jobs_carried():
    """restore=1 (issue 30) goes through the queue: the job's JSON from every instance says
    it, and the clip's 16 face frames come back restored (far from the same job without
    it), its 4 faceless frames as they were (the encoder's round trip)."""
    _, servers, nginx = cluster()
    paths = []
    for query in ("?max_side=128", "?max_side=128&restore=1"):
        status, _, doc = submit(nginx.front, clip("fuse_face.mp4"), query)
        check(status == 202, "%s: %d %s" % (query, status, doc))
        final = poll(nginx.front, doc["id"], done)
        check(final["state"] == "done", str(final))
        for s in servers:
            status, d = job(s, doc["id"])
            check(d.get("restore") == (1 if "restore" in query else None), "%s: %s" % (s.name, d))
        _, _, payload = nginx.front.request("GET", final["result_url"])
        paths.append(os.path.join(TMP, "restore%d.mp4" % len(paths)))
        with open(paths[-1], "wb") as f:
            f.write(payload)
        nginx.front.request("DELETE", "/api/v1/jobs/" + doc["id"])
    stats = os.path.join(TMP, "psnr.log")
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-i", paths[0], "-i", paths[1], "-lavfi",
                    "psnr=stats_file=" + stats, "-f", "null", "-"], check=True)
    with open(stats) as f:
        mse = [float(re.search(r"mse_avg:([0-9.]+)", l).group(1)) for l in f]
    check(len(mse) == 20 and max(mse[:4]) < 10 and min(mse[4:]) > 4 * max(max(mse[:4]), 1),
          "mse against the unrestored job: %s" % mse)
    print("  restore=1 carried; faceless frames' mse at most %.2f, face frames' at least %.2f"
          % (max(mse[:4]), min(mse[4:])))


def wait_running(front, job_id, frames=5):
    return poll(front, job_id, lambda d: d["state"] == "running" and d["frames_done"] >= frames
                and d.get("instance") not in (None, ""), timeout=120, every=0.1)


@test
def kill9_job_completes_elsewhere():
    _, _, nginx = cluster()
    front = nginx.front
    status, _, doc = submit(front, clip("long.mp4"), "?max_side=96")
    check(status == 202, "submit: %d %s" % (status, doc))
    running = wait_running(front, doc["id"])
    victim = by_name(running["instance"])
    victim.proc.kill()
    killed = time.time()
    again = poll(front, doc["id"], lambda d: d["state"] == "running" and
                 d.get("instance") not in ("", victim.name), timeout=60, every=0.1)
    took = time.time() - killed
    final = poll(front, doc["id"], done, timeout=180)
    check(final["state"] == "done" and final["frames_done"] == 200, str(final))
    check(frame_count(result_path(doc["id"])) == 200, "frames in the result")
    STATE["kill9_s"] = took
    print("  killed %s at frame %d; running again on %s %.1f s later (--jobs-lease %s); "
          "200 frames" % (victim.name, running["frames_done"], again["instance"], took, LEASE))
    replace(victim.name)
    front.request("DELETE", "/api/v1/jobs/" + doc["id"])


@test
def sigterm_hands_the_job_back():
    _, _, nginx = cluster()
    front = nginx.front
    status, _, doc = submit(front, clip("long.mp4"), "?max_side=96")
    check(status == 202, "submit: %d %s" % (status, doc))
    running = wait_running(front, doc["id"])
    victim = by_name(running["instance"])
    victim.proc.send_signal(signal.SIGTERM)
    stopped = time.time()
    again = poll(front, doc["id"], lambda d: d["state"] == "running" and
                 d.get("instance") not in ("", victim.name), timeout=30, every=0.1)
    took = time.time() - stopped
    check(took < float(LEASE), "taken again after %.1f s: not handed back" % took)
    check(victim.proc.wait(30) == 0, "exit %r" % victim.proc.returncode)
    final = poll(front, doc["id"], done, timeout=180)
    check(final["state"] == "done" and frame_count(result_path(doc["id"])) == 200, str(final))
    print("  SIGTERM to %s; running on %s %.1f s later" % (victim.name, again["instance"], took))
    replace(victim.name)
    front.request("DELETE", "/api/v1/jobs/" + doc["id"])


@test
def segments_joined_equal_a_single_run():
    _, _, nginx = cluster()
    src = os.path.join(CLIPS, "segments.mp4")
    status, _, doc = submit(nginx.front, clip("segments.mp4"), "?max_side=64")
    check(status == 202, "submit: %d %s" % (status, doc))
    seen = set()

    def segments_shown(d):
        if d["state"] == "running" and "segments" in d:
            check(d["segments"] == 3 and 0 <= d["segments_done"] <= 3, str(d))
            seen.add(d["segments_done"])
        return done(d)

    final = poll(nginx.front, doc["id"], segments_shown, timeout=300, every=0.1)
    check(final["state"] == "done" and final["frames_done"] == 150, str(final))
    check(seen, "the state never said \"segments\" while running")
    parts = parts_started(doc["id"])
    check(sorted(parts) == ["0", "1", "2", "join"], "parts %s" % parts)
    ran_on = {i for p in parts.values() for i in p}
    check(len(ran_on) >= 2, "every part ran on %s: nothing in parallel" % ran_on)
    # the same clip converted whole, by one process (the CLI: the same encoder settings)
    whole = os.path.join(TMP, "whole.mp4")
    out = subprocess.run([driver.BIN, "convert", src, "-o", whole, "--max-side", "64",
                          "--threads", "1", "-q"], capture_output=True, text=True, timeout=300)
    check(out.returncode == 0, "animegan convert: %s" % out.stderr)
    joined = result_path(doc["id"])
    a, b = timing(whole), timing(joined)
    check(a["frames"] == b["frames"] == 150, "frames %d whole, %d joined" %
          (a["frames"], b["frames"]))
    for key in ("pts", "dts", "durations", "duration"):
        check(a[key] == b[key], "%s differ: whole %s, joined %s" % (key, a[key], b[key]))
    audio_whole, audio_joined = packets(whole, "a"), packets(joined, "a")
    check(len(audio_whole) > 100 and audio_whole == audio_joined,
          "audio packets differ (%d whole, %d joined)" % (len(audio_whole), len(audio_joined)))
    left = [f for f in os.listdir(SPOOL) if f.startswith(doc["id"]) and ".out." not in f]
    check(not left, "files left: %s" % left)
    nginx.front.request("DELETE", "/api/v1/jobs/" + doc["id"])
    print("  3 segments on %s, joined: 150 frames; every pts, dts and duration and the %d "
          "audio packets (bytes) equal a whole conversion's" %
          (sorted(ran_on), len(audio_whole)))


def running_part(s, job_id):
    """The segment instance s started last and has not finished, or None."""
    running = None
    for line in s.lines:
        m = re.search(r"job %s part (\d+) (of \d+ started|done|failed)" % job_id, line)
        if m:
            running = m.group(1) if "started" in m.group(2) else None
    return running


def stop_in_a_segment(sig):
    """Submit segments.mp4, stop (sig) an instance in the middle of a segment; returns the
    job, the instance, the part it ran and when it was stopped."""
    _, _, nginx = cluster()
    status, _, doc = submit(nginx.front, clip("segments.mp4"), "?max_side=96")
    check(status == 202, "submit: %d %s" % (status, doc))
    deadline = time.time() + 120
    while True:
        check(time.time() < deadline, "no segment running: %s" % parts_started(doc["id"]))
        busy = [(s, running_part(s, doc["id"])) for s in alive()]
        busy = [(s, p) for s, p in busy if p is not None]
        if busy:
            victim, part = busy[0]
            victim.proc.send_signal(sig)
            return doc["id"], victim, part, time.time()
        time.sleep(0.02)


@test
def kill9_during_a_segment():
    _, _, nginx = cluster()
    job_id, victim, part, _ = stop_in_a_segment(signal.SIGKILL)
    victim.proc.wait(10)
    final = poll(nginx.front, job_id, done, timeout=180, all_200=False)
    check(final["state"] == "done" and final["frames_done"] == 150, str(final))
    check(frame_count(result_path(job_id)) == 150, "frames in the result")
    parts = parts_started(job_id)
    again = [p for p, where in parts.items() if len(where) > 1]
    check(again in ([part], []) and victim.name not in parts[part][1:],
          "killed %s in part %s; parts started %s" % (victim.name, part, parts))
    ran_again = len(again) == 1
    check(ran_again or running_part(victim, job_id) is None,
          "part %s neither finished nor ran again: %s" % (part, parts))
    print("  killed %s in part %s: only that part ran again (on %s); 150 frames" %
          (victim.name, part, parts[part][-1]))
    replace(victim.name)
    nginx.front.request("DELETE", "/api/v1/jobs/" + job_id)


@test
def sigterm_hands_a_segment_back():
    _, _, nginx = cluster()
    job_id, victim, part, stopped = stop_in_a_segment(signal.SIGTERM)
    deadline = time.time() + 30
    while len(parts_started(job_id).get(part, [])) < 2:
        check(time.time() < deadline, "part %s not taken again: %s" %
              (part, parts_started(job_id)))
        time.sleep(0.05)
    took = time.time() - stopped  # the next free runner: the others run their own segments
    check(victim.proc.wait(30) == 0, "exit %r" % victim.proc.returncode)
    check(any(re.search(r"job %s handed back" % job_id, l) for l in victim.lines),
          "%s did not hand part %s back" % (victim.name, part))
    final = poll(nginx.front, job_id, done, timeout=180, all_200=False)
    check(final["state"] == "done" and frame_count(result_path(job_id)) == 150, str(final))
    print("  SIGTERM to %s in part %s; the part running on %s %.1f s later; 150 frames" %
          (victim.name, part, parts_started(job_id)[part][-1], took))
    replace(victim.name)
    nginx.front.request("DELETE", "/api/v1/jobs/" + job_id)


@test
def delete_a_job_in_segments():
    _, _, nginx = cluster()
    status, _, doc = submit(nginx.front, clip("segments.mp4"), "?max_side=96")
    check(status == 202, "submit: %d %s" % (status, doc))
    deadline = time.time() + 120
    while not parts_started(doc["id"]):
        check(time.time() < deadline, "no segment started")
        time.sleep(0.05)
    status, _, payload = nginx.front.request("DELETE", "/api/v1/jobs/" + doc["id"])
    check(status == 202 and json.loads(payload)["state"] == "cancelling", "DELETE: %d %s" %
          (status, payload[:200]))
    deadline = time.time() + 30
    while job(nginx.front, doc["id"])[0] != 404:
        check(time.time() < deadline, "still there: %s" % (job(nginx.front, doc["id"]),))
        time.sleep(0.1)
    deadline = time.time() + 10  # parts still running elsewhere stop at their next renewal
    while [f for f in os.listdir(SPOOL) if doc["id"] in f] and time.time() < deadline:
        time.sleep(0.2)
    left = [f for f in os.listdir(SPOOL) if doc["id"] in f]
    check(not left, "files left: %s" % left)
    print("  DELETE with parts %s started: gone, no segment left" %
          sorted(parts_started(doc["id"])))


@test
def delete_through_another_instance():
    _, servers, nginx = cluster()
    status, _, doc = submit(nginx.front, clip("long.mp4"), "?max_side=96")
    check(status == 202, "submit: %d %s" % (status, doc))
    running = wait_running(nginx.front, doc["id"], frames=2)
    other = next(s for s in alive() if s.name != running["instance"])
    status, _, payload = other.request("DELETE", "/api/v1/jobs/" + doc["id"])
    d = json.loads(payload)
    check(status == 202 and d["state"] == "cancelling", "DELETE via %s: %d %s" %
          (other.name, status, d))
    deadline = time.time() + 20
    while job(other, doc["id"])[0] != 404:
        check(time.time() < deadline, "still there: %s" % (job(other, doc["id"]),))
        time.sleep(0.1)
    left = [f for f in os.listdir(SPOOL) if f.startswith(doc["id"])]
    check(not left, "files left: %s" % left)
    log = "\n".join(by_name(running["instance"]).lines)
    check(re.search(r"job %s cancelled" % doc["id"], log), "not cancelled where it ran")
    print("  running on %s, DELETE via %s: stopped there, files gone" %
          (running["instance"], other.name))


@test
def redis_restart_loses_nothing():
    redis, _, nginx = cluster()
    front = nginx.front
    ids = []
    for _ in range(4):
        status, _, doc = submit(front, clip("clip.mp4"), "?max_side=64")
        check(status == 202, "submit: %d %s" % (status, doc))
        ids.append(doc["id"])
    redis.kill()
    try:
        status, headers, payload = front.request("GET", "/api/v1/jobs/" + ids[-1])
        check(status == 503 and headers.get("retry-after") and b"jobs_unavailable" in payload,
              "with Redis down: %d %s %s" % (status, headers, payload[:200]))
        status, _, _ = front.request("POST", "/api/v1/convert?max_side=64", driver.CHELSEA,
                                     {"Content-Type": "image/png"})
        check(status == 200, "a photo with Redis down: %d" % status)
        time.sleep(1.5)
    finally:
        redis.start()
    for i in ids:
        final = poll(front, i, done, timeout=120, all_200=False)
        check(final["state"] == "done" and final["frames_done"] == 50, "%s: %s" % (i, final))
    for i in ids:
        front.request("DELETE", "/api/v1/jobs/" + i)
    print("  4 jobs queued, Redis killed (503 + Retry-After, photos 200), restarted: all done")


@test
def per_client_bound_across_instances():
    _, servers, _ = cluster()
    ids = []
    for s in alive()[:3] + alive()[:1]:  # four jobs over the instances: the bound is 4
        status, _, doc = submit(s, clip("long.mp4"), "?max_side=96")
        check(status == 202, "%s: %d %s" % (s.name, status, doc))
        ids.append(doc["id"])
    s = alive()[1]
    status, headers, payload = s.request("POST", "/api/v1/jobs?max_side=96", clip("long.mp4"),
                                         {"Content-Type": "video/mp4"})
    check(status == 429 and b"too_many_jobs" in payload and headers.get("retry-after"),
          "fifth job: %d %s" % (status, payload[:200]))
    for i in ids:
        s.request("DELETE", "/api/v1/jobs/" + i)
    status, _, doc = submit(s, clip("clip.mp4"), "?max_side=64")
    check(status == 202, "after the DELETEs: %d %s" % (status, doc))
    s.request("DELETE", "/api/v1/jobs/" + doc["id"])
    print("  --jobs-per-client 4: four jobs over three instances, the fifth 429")


@test
def metrics_of_the_queue():
    _, servers, _ = cluster()
    m = alive()[0].metrics()
    for name in ("animegan_jobs_stream_length", "animegan_jobs_stream_pending",
                 "animegan_jobs_stream_lag", 'animegan_jobs_cluster{state="done"}',
                 "animegan_jobs_reclaims_total", "animegan_jobs_redis_up"):
        check(name in m, "no %s" % name)
    check(m["animegan_jobs_redis_up"] == 1 and m["animegan_jobs_reclaims_total"] >= 1,
          "up %s, reclaims %s" % (m["animegan_jobs_redis_up"], m["animegan_jobs_reclaims_total"]))
    # every job of the tests above was deleted: no file left (partial results of the killed
    # run included) and no byte held in the cluster's spool count
    deadline = time.time() + 10
    while time.time() < deadline and (os.listdir(SPOOL) or
                                      alive()[0].metrics()["animegan_jobs_cluster_spool_bytes"]):
        time.sleep(0.2)
    m = alive()[0].metrics()
    check(not os.listdir(SPOOL) and m["animegan_jobs_cluster_spool_bytes"] == 0,
          "left: %s, %s bytes held" % (os.listdir(SPOOL), m["animegan_jobs_cluster_spool_bytes"]))


class Proxy:
    """A TCP proxy to Redis that can turn to answering garbage or hanging up mid-reply."""

    def __init__(self, port):
        self.target = port
        self.mode = "forward"
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        up = socket.create_connection(("127.0.0.1", self.target))
        try:
            while True:
                data = c.recv(65536)
                if not data:
                    return
                if self.mode == "garbage":
                    c.sendall(b"%9999999999999\r\n*-7\r\n$3\r\nab")
                    continue
                up.sendall(data)
                reply = up.recv(1 << 20)
                if self.mode == "cut":
                    c.sendall(reply[: max(1, len(reply) // 2)])
                    return
                c.sendall(reply)
        except OSError:
            pass
        finally:
            c.close()
            up.close()


@test
def garbage_and_dropped_replies_never_crash():
    redis, _, _ = cluster()
    proxy = Proxy(redis.port)
    s = instance("redis://127.0.0.1:%d" % proxy.port, "fuzzed")
    try:
        status, _, doc = submit(s, clip("clip.mp4"), "?max_side=64")
        check(status == 202, "submit: %d %s" % (status, doc))
        statuses = set()
        for mode in ("garbage", "cut", "garbage", "cut"):
            proxy.mode = mode
            for _ in range(5):
                statuses.add(job(s, doc["id"])[0])
                s.metrics()
                time.sleep(0.1)
            check(s.proc.poll() is None, "the instance died on %s replies" % mode)
        check(statuses <= {200, 503} and 503 in statuses, "statuses %s" % statuses)
        proxy.mode = "forward"
        time.sleep(1.2)  # the reconnect's back-off
        final = poll(s, doc["id"], done, timeout=120, all_200=False)
        check(final["state"] == "done", str(final))
        s.request("DELETE", "/api/v1/jobs/" + doc["id"])
        print("  garbage and half replies: %s, no crash; back to 200 and done" % sorted(statuses))
    finally:
        proxy.sock.close()
        s.stop()


def throughput(instances, threads, jobs=6):
    """Jobs a minute: `jobs` clips submitted at once to `instances` instances of `threads`."""
    redis = Redis()
    servers = [instance(redis.url, "f%d" % i, "--threads", str(threads), "--jobs-per-client",
                        "0") for i in range(instances)]
    try:
        body = clip("clip.mp4")
        t0 = time.time()
        ids = [submit(servers[0], body, "?max_side=128")[2]["id"] for _ in range(jobs)]
        for i in ids:
            check(poll(servers[0], i, done, timeout=600, every=0.1)["state"] == "done", i)
        took = time.time() - t0
        per = {}
        for s in servers:
            per[s.args[s.args.index("--instance-name") + 1]] = sum("done after" in l for l in s.lines)
        return jobs * 60.0 / took, took, per
    finally:
        for s in servers:
            s.stop()
        redis.kill()
        subprocess.run(["rm", "-rf", redis.dir, SPOOL])


def cpu_seconds(servers):
    """User + system CPU seconds each instance used so far (/proc/PID/stat)."""
    out = []
    for s in servers:
        with open("/proc/%d/stat" % s.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out.append((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
    return out


def one_long_job(instances, segment_s, body):
    """Seconds from submitting one long clip to its result, on `instances` instances of one
    thread each, cut every `segment_s` s (0: whole), and the CPU seconds they used."""
    redis = Redis()
    servers = [instance(redis.url, "s%d" % i, "--jobs-segment-seconds", str(segment_s))
               for i in range(instances)]
    try:
        t0, cpu0 = time.time(), cpu_seconds(servers)
        job_id = submit(servers[0], body, "?max_side=128")[2]["id"]
        final = poll(servers[0], job_id, done, timeout=900, every=0.1)
        check(final["state"] == "done", str(final))
        for s in servers:
            for line in s.lines:
                m = re.search(r"part (\w+) (done after [\d.]+ s)", line)
                if m:
                    print("    %s: part %s %s" % (s.args[s.args.index("--instance-name") + 1],
                                                 m.group(1), m.group(2)))
        return (time.time() - t0, final["frames_done"],
                [b - a for a, b in zip(cpu0, cpu_seconds(servers))])
    finally:
        for s in servers:
            s.stop()
        redis.kill()
        subprocess.run(["rm", "-rf", redis.dir, SPOOL])


def segment_figures():
    """One 20 s clip (500 frames, a keyframe every 0.48 s): whole on one instance, in 4
    segments on one, in 4 segments on two (one thread each)."""
    with open(make_segment_clip(20, "long20.mp4"), "rb") as f:
        body = f.read()
    base = None
    for n, seg in ((1, 0), (1, 5), (2, 5)):
        took, frames, cpu = one_long_job(n, seg, body)
        base = base or (took, sum(cpu))
        # With a core per instance the job would take its busiest instance's CPU time; this
        # session's share of the shared machine caps all its processes together.
        print("%d instance(s) x 1 thread, --jobs-segment-seconds %d: %d frames in %.1f s wall "
              "(%.2fx the whole run), CPU s per instance %s (busiest: %.2fx less than the "
              "whole run's %.1f); load average %.1f" %
              (n, seg, frames, took, base[0] / took, " + ".join("%.1f" % c for c in cpu),
               base[1] / max(cpu), base[1], os.getloadavg()[0]))
        sys.stdout.flush()


def figures():
    """docs/cluster.md's figures: throughput with 1, 2 and 3 instances on this machine's
    cores (threads split: 1 x 2, 2 x 1, 3 x 1), and one long clip in segments."""
    print("cores: %d" % os.cpu_count())
    segment_figures()
    for n, threads in ((1, 2), (2, 1), (3, 1)):
        rate, took, per = throughput(n, threads)
        print("%d instance(s) x %d thread(s): 6 jobs (clip.mp4, 50 frames, max_side=128) in "
              "%.1f s = %.1f jobs/min; jobs per instance %s" % (n, threads, took, rate, per))
        sys.stdout.flush()


def main():
    os.environ.setdefault("ANIMEGAN_MODEL_PATH", os.path.join(driver.ROOT, "models"))
    for tool, why in ((REDIS, "redis-server"), (driver.NGINX, "nginx")):
        if not os.access(tool, os.X_OK):
            print("FAIL redis_jobs: %s is needed (scripts/install-deps.sh --test)" % why)
            print("0 passed, 1 failed")
            return 1
    made = subprocess.run([os.path.join(driver.ROOT, "tools", "make_test_clips.sh"), CLIPS],
                          capture_output=True, text=True)
    if made.returncode != 0:
        print("FAIL clips: " + made.stderr)
        print("0 passed, 1 failed")
        return 1
    make_segment_clip()
    made = subprocess.run([os.path.join(driver.ROOT, "tools", "make_fuse_clips.sh"), CLIPS],
                          capture_output=True, text=True)
    if made.returncode != 0:
        print("FAIL fusion clips: " + made.stderr)
        print("0 passed, 1 failed")
        return 1
    want = sys.argv[1] if len(sys.argv) > 1 else ""
    if want == "--figures":
        figures()
        subprocess.run(["rm", "-rf", TMP])
        return 0
    passed = failed = 0
    try:
        start_cluster()
        passed, failed = driver.run_tests(TESTS, want)
    except Exception as e:
        print("FAIL cluster: %s" % e)
        failed += 1
    finally:
        if STATE.get("nginx"):
            STATE["nginx"].stop()
        for s in STATE.get("servers", []):
            if s.proc.poll() is None:
                code = s.stop()
                if code != 0:
                    print("FAIL instance %s exited %r" % (s.name, code))
                    failed += 1
        if STATE.get("redis"):
            STATE["redis"].kill()
        subprocess.run(["rm", "-rf", TMP])
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
