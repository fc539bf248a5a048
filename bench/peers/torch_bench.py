#!/usr/bin/env python3
"""torch_bench.py - the PyTorch peer of bench/compare.sh: time the Hayao generator in
PyTorch eager mode on the CPU and print one JSON object.

  /usr/bin/python3 bench/peers/torch_bench.py --size 512 --runs 5 --threads 2

The network is tools/reference_model.py's Generator (bryandlee/animegan2-pytorch's layers)
loaded from --model (models/hayao.safetensors) with the file's eps (1e-12): the same layers
and weights as our engine, run the way a PyTorch user runs it. Its two upsamplings are
--resize:
  align-corners (default)  F.interpolate(mode="bilinear", align_corners=True), PyTorch's
                           native kernel, as bryandlee's model.py calls it. Its sampling
                           coordinates differ slightly from the TF-legacy resize the Hayao
                           weights were trained with (src = dst * (in-1)/(out-1) instead of
                           dst * in/out), which changes the picture a little and the cost not
                           at all: it is the fair peer for speed.
  asymmetric               the fixtures' exact TF-legacy resize, done with index gathers in
                           Python (tools/reference_model.py); ~0.7 s of extra time at 512x512,
                           a cost no PyTorch user pays.
  model                    whatever the model file says (asymmetric for hayao).
Float32, torch.inference_mode, intra-op threads = --threads, inter-op threads 1, --warmup
untimed runs first. peak_rss_mb is this process's maximum resident set (getrusage), which
includes importing torch.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def synthetic_input(size):
    """(1, 3, size, size) float32 in [-1, 1]: smooth waves plus fixed-seed noise, so no op
    sees a constant input and every runtime gets the same tensor."""
    y = np.arange(size, dtype=np.float32).reshape(1, size, 1)
    x = np.arange(size, dtype=np.float32).reshape(1, 1, size)
    c = np.arange(3, dtype=np.float32).reshape(3, 1, 1)
    wave = np.sin(0.05 * x + 2.0 * c) * np.cos(0.03 * y)
    noise = np.random.default_rng(20240531).uniform(-0.5, 0.5, (3, size, size))
    v = 0.7 * wave + 0.3 * noise.astype(np.float32)
    return np.ascontiguousarray(v.astype(np.float32)[None])


def main():
    ap = argparse.ArgumentParser(description="PyTorch eager timing of the Hayao generator")
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "hayao.safetensors"))
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--resize", choices=("align-corners", "asymmetric", "model"),
                    default="align-corners",
                    help="the upsampling (default: F.interpolate align_corners=True)")
    a = ap.parse_args()

    import torch  # after argument parsing, so --help is quick
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import reference_model as R

    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    t0 = time.perf_counter()
    g = R.load_safetensors_generator(a.model,
                                     resize_mode=None if a.resize == "model" else a.resize)
    load_ms = (time.perf_counter() - t0) * 1e3
    x = torch.from_numpy(synthetic_input(a.size))

    ms = []
    with torch.inference_mode():
        for i in range(a.warmup + a.runs):
            t0 = time.perf_counter()
            y = g(x)
            dt = (time.perf_counter() - t0) * 1e3
            if i >= a.warmup:
                ms.append(dt)
    if not torch.isfinite(y).all():
        print("torch_bench: non-finite output", file=sys.stderr)
        return 1
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({
        "runtime": "pytorch", "version": torch.__version__, "size": a.size,
        "precision": "fp32", "resize": g.resize_mode,
        "resize_impl": "F.interpolate" if g.resize_mode != "asymmetric" else "index gathers",
        "threads": a.threads, "runs": a.runs, "warmup": a.warmup,
        "load_ms": round(load_ms, 3), "ms": [round(v, 3) for v in ms],
        "ms_median": round(statistics.median(ms), 3), "ms_min": round(min(ms), 3),
        "peak_rss_mb": round(rss_kb / 1024.0, 1),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
