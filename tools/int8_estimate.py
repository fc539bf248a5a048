#!/usr/bin/env python3
"""int8_estimate.py - what `--precision int8` would reach in quality, before building it.

Offline tool; run with Debian's Python (PyTorch 1.13, numpy, PIL):
  /usr/bin/python3 tools/int8_estimate.py [--size 256]

The bundled model's weights are int8 already (per output channel, tools/convert_tflite.py),
so an int8 engine changes only the activations: every convolution's input would be
quantised to 8 bits before the VNNI convolution. This runs the PyTorch reference
(tools/reference_model.py) with that quantisation simulated at each Conv2d input, and
prints the PSNR of the 8-bit output against the fp32 reference on the photos
tests/test_precision.c uses, for three schemes a oneDNN int8 path could take:

  s8 per tensor, dynamic   scale = max|x| / 127 of this image's tensor (needs one pass over
                           the tensor before the conv, or min/max kept by the norm pass)
  u8 + zero point, dynamic scale = (max - min) / 255, zero point = round(-min / scale)
  s8 per tensor, static    scale fixed per layer from calibration images (the other photos
                           of tests/data, not the ones measured), clipped when exceeded

and, as a check that the simulation predicts the real engine, bf16 (weights and conv
inputs rounded to bf16), which the C engine measures at ~54 dB in test_precision.
"""

import argparse
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
from PIL import Image

TOOLS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(TOOLS, "..")
sys.path.insert(0, TOOLS)
import reference_model as R  # noqa: E402

MEASURED = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg"]
CALIBRATION = ["bryandlee_inputs_1.jpg", "bryandlee_inputs_2.jpg", "bryandlee_inputs_3.jpg"]


def load(name, size):
    with Image.open(os.path.join(ROOT, "tests", "data", name)) as im:
        im = im.convert("RGB")
        scale = size / max(im.size)
        if scale < 1:
            im = im.resize((max(1, round(im.size[0] * scale)), max(1, round(im.size[1] * scale))),
                           Image.LANCZOS)
        return np.array(im, dtype=np.uint8)


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def fake_s8(x, scale):
    return torch.clamp(torch.round(x / scale), -127, 127) * scale


def fake_u8(x):
    lo, hi = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
    scale = (hi - lo) / 255 if hi > lo else 1.0
    zero = round(-lo / scale)
    return (torch.clamp(torch.round(x / scale) + zero, 0, 255) - zero) * scale


def to_bf16(x):
    return x.to(torch.bfloat16).to(torch.float32)


class Quantiser:
    """Forward pre-hooks on every Conv2d that replace its input by the simulated one."""

    def __init__(self, model):
        self.model, self.mode, self.static, self.seen = model, None, {}, {}
        self.convs = R.conv_layers(model)
        for name, conv in self.convs:
            conv.register_forward_pre_hook(self.hook(name))

    def hook(self, name):
        def f(module, inputs):
            x = inputs[0]
            if self.mode == "calibrate":
                self.seen[name] = max(self.seen.get(name, 0.0), float(x.abs().max()))
                return None
            if self.mode == "s8-dynamic":
                return (fake_s8(x, max(float(x.abs().max()), 1e-12) / 127),)
            if self.mode == "u8-zero-point":
                return (fake_u8(x),)
            if self.mode == "s8-static":
                return (fake_s8(x, self.static[name] / 127),)
            if self.mode == "bf16":
                return (to_bf16(x),)
            return None
        return f


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=256, help="longest side (test_precision: 256)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    model = R.load_safetensors_generator(os.path.join(ROOT, "models", "hayao.safetensors"))
    q = Quantiser(model)

    q.mode = "calibrate"
    for name in CALIBRATION:
        R.run_u8(model, load(name, args.size))
    q.static = dict(q.seen)

    fp32_weights = {n: c.weight.detach().clone() for n, c in q.convs}
    modes = ["s8-dynamic", "u8-zero-point", "s8-static", "bf16"]
    print("PSNR of the 8-bit output against fp32 (dB), longest side %d:" % args.size)
    print("%-14s %s" % ("photo", " ".join("%13s" % m for m in modes)))
    worst = {m: float("inf") for m in modes}
    for name in MEASURED:
        rgb = load(name, args.size)
        q.mode = None
        _, ref = R.run_u8(model, rgb)
        row = []
        for mode in modes:
            q.mode = mode
            if mode == "bf16":
                for n, c in q.convs:
                    c.weight.data = to_bf16(fp32_weights[n])
            _, out = R.run_u8(model, rgb)
            if mode == "bf16":
                for n, c in q.convs:
                    c.weight.data = fp32_weights[n].clone()
            db = psnr(ref, out)
            worst[mode] = min(worst[mode], db)
            row.append(db)
        print("%-14s %s" % (name, " ".join("%13.1f" % v for v in row)))
    print("%-14s %s" % ("worst", " ".join("%13.1f" % worst[m] for m in modes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
