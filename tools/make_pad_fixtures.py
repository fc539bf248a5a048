#!/usr/bin/env python3
"""make_pad_fixtures.py - golden fixtures (.agfx) for images smaller than a network's own
minimum side (cute-v3, the tiny AnimeGANv3: 16), which ag_stylize reflect-pads, centred, to
that minimum and crops back (src/stylize.c).

The reference: numpy's np.pad(mode="reflect") of the 8-bit input to 16 on each short side,
centred (the extra pixel of an odd pad goes after), the hand-written PyTorch generator of
tools/v3_reference.py with the bundled weights, and the crop. Written to
tests/fixtures/v3/pad/; test_golden runs ag_stylize on each input (both backends) and
allows 1 level. Offline, Debian's Python 3; from the repository root:

  /usr/bin/python3 tools/make_pad_fixtures.py

Deterministic: a rerun gives byte-identical files.
"""

import os
import sys

import numpy as np
import torch

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import make_fixtures as MF  # noqa: E402
import make_v3_fixtures as V3  # noqa: E402
import v3_reference as R  # noqa: E402

ROOT = os.path.dirname(TOOLS)
OUT = os.path.join(ROOT, "tests", "fixtures", "v3", "pad")
MODEL = "models/cute-v3.safetensors"
MIN_SIDE = 16

# name, width, height, photo, crop x, crop y, area-downscale factor
FIXTURES = [
    ("cute-v3_8x8", 8, 8, "astronaut.png", 150, 40, 24),
    ("cute-v3_13x9", 13, 9, "chelsea.png", 100, 60, 16),
    ("cute-v3_40x8", 40, 8, "coffee.png", 40, 100, 8),
]


def padded_reference(model, rgb):
    h, w, _ = rgb.shape
    ph, pw = max(h, MIN_SIDE), max(w, MIN_SIDE)
    y0, x0 = (ph - h) // 2, (pw - w) // 2
    big = np.pad(rgb, ((y0, ph - h - y0), (x0, pw - w - x0), (0, 0)), mode="reflect")
    y = R.run_torch(model, V3.to_x(big))[0].astype(np.float32)
    return y[y0:y0 + h, x0:x0 + w]


def main():
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    model = R.load_generator(os.path.join(ROOT, MODEL))
    for name, w, h, photo, x, y, f in FIXTURES:
        rgb = MF.crop_downscale(MF.load_photo(photo), x, y, w, h, f)
        yr = padded_reference(model, rgb)
        path = os.path.join(OUT, name + ".agfx")
        MF.write_agfx(path, MODEL, "asymmetric", V3.EPS, rgb, yr, V3.out8(yr))
        print("%-20s %5d bytes  y in [%.3f, %.3f]" % (name + ".agfx", os.path.getsize(path),
                                                     yr.min(), yr.max()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
