#!/usr/bin/env python3
"""The Python call against the same model in PyTorch from Python (issue 18): one uint8 photo
in, one uint8 picture out, 512x512 by default, each side in its own process so that the peak
RSS is its own. Prints one line per side and the ratio.

    build/python-venv/bin/python bench/python_bench.py [--size 512] [--threads 2]   (after tests/python_test.sh)
        [--runs 1] [--precision fp32]

animegan: animegan.Model("hayao", precision, threads)(image), after one untimed call (which
plans the arena). PyTorch 1.13 eager: tools/reference_model.py's Generator loaded from the
same models/hayao.safetensors (bench/peers/torch_bench.py's peer: F.interpolate
align_corners=True), with the uint8 -> [-1, 1] tensor -> uint8 steps a PyTorch app has,
torch.inference_mode, intra-op threads = --threads, after one untimed call.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "hayao.safetensors")


def photo(size):
    rng = np.random.default_rng(18)
    y, x = np.mgrid[0:size, 0:size].astype(np.float32)
    wave = np.stack([np.sin(0.05 * x + c) * np.cos(0.03 * y) for c in (0, 2, 4)], -1)
    return np.clip(127.5 + 90 * wave + rng.normal(0, 20, wave.shape), 0, 255).astype(np.uint8)


def timed(fn, image, runs):
    fn(image)  # untimed: plans / warms up
    ms = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn(image)
        ms.append((time.perf_counter() - t0) * 1e3)
    assert out.shape == image.shape and out.dtype == np.uint8
    return min(ms)


def run_animegan(a):
    import animegan

    t0 = time.perf_counter()
    model = animegan.Model(MODEL, precision=a.precision, threads=a.threads)
    load_ms = (time.perf_counter() - t0) * 1e3
    ms = timed(lambda im: model(im, max_side=0), photo(a.size), a.runs)
    return {"runtime": f"animegan (Python, {model.precision})", "ms": ms, "load_ms": load_ms}


def run_torch(a):
    import torch

    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import reference_model as R

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    t0 = time.perf_counter()
    g = R.load_safetensors_generator(MODEL, resize_mode="align-corners")
    load_ms = (time.perf_counter() - t0) * 1e3

    def call(image):
        with torch.inference_mode():
            x = torch.from_numpy(image).permute(2, 0, 1)[None].float() / 127.5 - 1
            y = g(x)[0].permute(1, 2, 0)
            return ((y.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).numpy()

    ms = timed(call, photo(a.size), a.runs)
    return {"runtime": f"PyTorch {torch.__version__} eager (fp32)", "ms": ms, "load_ms": load_ms}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--worker", choices=("animegan", "torch"))
    a = ap.parse_args()
    if a.worker:
        result = (run_animegan if a.worker == "animegan" else run_torch)(a)
        result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(result))
        return 0
    rows = []
    for worker in ("animegan", "torch"):
        args = [sys.executable, __file__, "--worker", worker, "--size", str(a.size),
                "--threads", str(a.threads), "--runs", str(a.runs), "--precision", a.precision]
        out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
        rows.append(json.loads(out.splitlines()[-1]))
    print(f"{a.size}x{a.size}, {a.threads} threads, best of {a.runs} after one untimed call, "
          f"uint8 in and out; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs:")
    for r in rows:
        print(f"  {r['runtime']:32s} {r['ms']:8.0f} ms   load {r['load_ms']:6.0f} ms   "
              f"peak RSS {r['peak_rss_mb']:6.0f} MB")
    print(f"  PyTorch / animegan: {rows[1]['ms'] / rows[0]['ms']:.2f}x time, "
          f"{rows[1]['peak_rss_mb'] / rows[0]['peak_rss_mb']:.2f}x peak RSS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
