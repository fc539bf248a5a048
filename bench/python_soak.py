#!/usr/bin/env python3
"""The Python package's soak (issue 18): N conversions of mixed sizes in one process, numpy
and PIL, RGB and RGBA, some side by side and some refused, with the service soak's rule
(docs/stability.md): after a warm-up that has seen every size, the RSS at each checkpoint and
the peak RSS (VmHWM, reset after the warm-up) stay within max(2 %, 4 MiB) of their
warm-up values. Prints one line per checkpoint and the verdict; exit status 1 on failure.

    PYTHONPATH=python python3 bench/python_soak.py [--count 2000] [--threads 2] [--model hayao]
"""

import argparse
import gc
import sys
import time

import numpy as np

import animegan

SIZES = [(64, 48), (128, 96), (256, 192), (96, 160), (200, 200), (48, 64), (160, 120),
         (256, 256)]  # (width, height), cycled: every size is in the warm-up
MIB = 1024 * 1024


def status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM := VmRSS


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--every", type=int, default=200, help="conversions between checkpoints")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default="hayao")
    args = ap.parse_args()
    from PIL import Image

    rng = np.random.default_rng(18)
    base = rng.integers(0, 256, (256, 256, 4), dtype=np.uint8)
    base = np.asarray(Image.fromarray(base).resize((256, 256)).convert("RGBA"))
    model = animegan.Model(args.model, threads=args.threads)
    start, refused, rows = time.time(), 0, []
    baseline = None
    for i in range(1, args.count + 1):
        w, h = SIZES[i % len(SIZES)]
        image = base[:h, :w, : 4 if i % 7 == 0 else 3]
        if i % 3 == 0:
            image = Image.fromarray(np.ascontiguousarray(image))
        try:
            out = model(image if i % 50 else image[:4] if i % 3 else base[:5, :5, :3],
                        side_by_side=i % 11 == 0)
            del out
        except animegan.InputError:
            refused += 1
        if i == args.warmup:
            gc.collect()
            reset_peak()
            baseline = status("VmRSS"), status("VmHWM")
            limit = max(0.02 * baseline[0], 4 * MIB)
            print(f"warm-up: {i} conversions; RSS {baseline[0] / MIB:.1f} MiB, peak "
                  f"{baseline[1] / MIB:.1f} MiB; limit +{limit / MIB:.1f} MiB", flush=True)
        elif baseline and i % args.every == 0:
            gc.collect()
            rss, hwm = status("VmRSS"), status("VmHWM")
            rows.append((i, rss, hwm))
            print(f"{i:6d} conversions  RSS {rss / MIB:7.1f} MiB ({(rss - baseline[0]) / MIB:+.1f})"
                  f"  peak {hwm / MIB:7.1f} MiB ({(hwm - baseline[1]) / MIB:+.1f})  "
                  f"library {animegan.memory()['allocated'] / MIB:.1f} MiB  "
                  f"{time.time() - start:.0f} s", flush=True)
    worst_rss = max(r[1] for r in rows) - baseline[0]
    worst_hwm = max(r[2] for r in rows) - baseline[1]
    x = np.array([r[0] for r in rows], float)
    y = np.array([r[1] for r in rows], float) / MIB
    slope = np.polyfit(x, y, 1)[0] * 1000 if len(rows) > 1 else 0.0
    ok = worst_rss <= limit and worst_hwm <= limit
    print(f"{args.count} conversions ({refused} refused as bad input) in "
          f"{time.time() - start:.0f} s: RSS at most {worst_rss / MIB:+.1f} MiB, peak at most "
          f"{worst_hwm / MIB:+.1f} MiB after warm-up (limit {limit / MIB:.1f}), slope "
          f"{slope:+.2f} MiB per 1,000: {'flat' if ok else 'GREW'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
