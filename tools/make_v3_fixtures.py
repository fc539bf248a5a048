#!/usr/bin/env python3
"""make_v3_fixtures.py - golden fixtures (.agfx) for the AnimeGANv3 models, from references
independent of the engine:

  file    the ORIGINAL file run by tools/v3_reference.py's numpy interpreters: the .pb
          (shinkai-v3) or the fp16 .tflite (hayao-v3, with the LADE eps set to 1e-5 and the
          attention eps to 1e-9 in place of the file's 0), at sizes that are multiples of 8
  ort     ONNX Runtime (onnxruntime-node, tools/v3_ort.js) on an .onnx file: the original
          AnimeGANv3_tiny_Cute.onnx (cute-v3), its three perturbed variants
          (tools/perturb_onnx.py, seeds 1-3) and the full-v3 .onnx built from the Shinkai .pb
          (tools/make_v3_onnx.py), at multiples of 16 / 8
  torch   the hand-written PyTorch generator of tools/v3_reference.py with our safetensors
          weights and the resize-to-skip rule, at odd and non-multiple sizes (where the
          originals cannot run)

Every fixture is also computed with the other reference available and the difference is
printed (and must stay below 1e-4). Offline; Debian's Python 3 (numpy, PyTorch, PIL,
python3-onnx), node with bench/node_modules/onnxruntime-node. From the repository root:

  /usr/bin/python3 tools/make_v3_fixtures.py

It first writes the test models to build/v3/ (tools/make_v3_test_models.sh; they are made
again at test time, byte-identical) and then tests/fixtures/v3/*.agfx. Deterministic: a rerun
gives byte-identical files. Input photos as in tools/make_fixtures.py (crop, area downscale).
Fixtures at sides where some map is 1 pixel wide go to tests/fixtures/v3/1px/.
"""

import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import make_fixtures as MF  # noqa: E402
import v3_convert as VC  # noqa: E402
import v3_reference as R  # noqa: E402

ROOT = os.path.dirname(TOOLS)
OUT = os.path.join(ROOT, "tests", "fixtures", "v3")
SRC = R.SRC
EPS = 1e-5

MODEL = {"hayao": "models/hayao-v3.safetensors", "shinkai": "models/shinkai-v3.safetensors",
         "cute": "models/cute-v3.safetensors",
         "cute_p1": "build/v3/cute_p1.onnx", "cute_p2": "build/v3/cute_p2.onnx",
         "cute_p3": "build/v3/cute_p3.onnx",
         "shinkai_onnx": "build/v3/AnimeGANv3_Shinkai_37.onnx",
         "cute_onnx": "tests/fixtures/onnx/AnimeGANv3_tiny_Cute.onnx"}
ONNX = {"cute": os.path.join(SRC, "AnimeGANv3_tiny_Cute.onnx"),
        "cute_onnx": os.path.join(ROOT, "tests", "fixtures", "onnx", "AnimeGANv3_tiny_Cute.onnx"),
        "cute_p1": os.path.join(ROOT, MODEL["cute_p1"]),
        "cute_p2": os.path.join(ROOT, MODEL["cute_p2"]),
        "cute_p3": os.path.join(ROOT, MODEL["cute_p3"]),
        "shinkai_onnx": os.path.join(ROOT, MODEL["shinkai_onnx"])}

# name, model, reference, width, height, photo, crop x, crop y, area-downscale factor
FIXTURES = [
    ("hayao-v3_64x64", "hayao", "file", 64, 64, "astronaut.png", 0, 0, 8),
    ("hayao-v3_48x32", "hayao", "file", 48, 32, "chelsea.png", 60, 20, 6),
    ("hayao-v3_37x29", "hayao", "torch", 37, 29, "coffee.png", 100, 50, 8),
    ("hayao-v3_19x17", "hayao", "torch", 19, 17, "chelsea.png", 150, 60, 10),
    ("shinkai-v3_64x64", "shinkai", "file", 64, 64, "coffee.png", 100, 40, 4),
    ("shinkai-v3_48x32", "shinkai", "file", 48, 32, "rocket.jpg", 60, 100, 6),
    ("shinkai-v3_37x29", "shinkai", "torch", 37, 29, "astronaut.png", 96, 64, 8),
    ("shinkai-v3_23x16", "shinkai", "torch", 23, 16, "chelsea.png", 120, 60, 8),
    ("cute-v3_64x64", "cute", "ort", 64, 64, "chelsea.png", 80, 40, 4),
    ("cute-v3_48x32", "cute", "ort", 48, 32, "astronaut.png", 100, 100, 6),
    ("cute-v3_37x33", "cute", "torch", 37, 33, "rocket.jpg", 100, 200, 6),
    ("cute-v3_33x32", "cute", "torch", 33, 32, "coffee.png", 200, 100, 6),
    ("cute-onnx_32x32", "cute_onnx", "ort", 32, 32, "astronaut.png", 180, 60, 6),
    ("cute-p1_48x32", "cute_p1", "ort", 48, 32, "chelsea.png", 60, 20, 6),
    ("cute-p2_48x32", "cute_p2", "ort", 48, 32, "coffee.png", 100, 50, 6),
    ("cute-p3_32x48", "cute_p3", "ort", 32, 48, "rocket.jpg", 60, 100, 6),
    ("shinkai-v3-onnx_64x64", "shinkai_onnx", "ort", 64, 64, "astronaut.png", 0, 0, 8),
    # sides where a map is 1 pixel wide (full v3: 8..15, tiny: 16..31): reflect pads of it
    # repeat the pixel; no original runtime runs these (tests/fixtures/README.md)
    ("1px/hayao-v3_13x9", "hayao", "torch", 13, 9, "chelsea.png", 100, 60, 16),
    ("1px/hayao-v3_8x8", "hayao", "torch", 8, 8, "astronaut.png", 150, 40, 24),
    ("1px/shinkai-v3_13x9", "shinkai", "torch", 13, 9, "coffee.png", 100, 50, 16),
    ("1px/shinkai-v3_8x8", "shinkai", "torch", 8, 8, "chelsea.png", 150, 80, 16),
    ("1px/cute-v3_19x17", "cute", "torch", 19, 17, "coffee.png", 100, 40, 10),
    ("1px/cute-v3_16x16", "cute", "torch", 16, 16, "astronaut.png", 150, 40, 12),
]

TOLERANCE = 1e-4   # between the two references of one fixture


def to_x(rgb):
    return (rgb.astype(np.float32) / np.float32(127.5) - np.float32(1))[None]


def out8(y):
    return np.clip(np.rint((y + np.float32(1)) * np.float32(127.5)), 0, 255).astype(np.uint8)


def torch_model(key, tmpdir):
    if key in ("hayao", "shinkai", "cute"):
        return R.load_generator(os.path.join(ROOT, MODEL[key]))
    if key == "cute_onnx":
        return R.load_generator(os.path.join(ROOT, MODEL["cute"]))
    if key == "shinkai_onnx":
        return R.load_generator(os.path.join(ROOT, MODEL["shinkai"]))
    # a perturbed tiny .onnx: convert it like the bundled one, then the PyTorch generator
    E, _ = VC.convert_tiny(VC.onnx_graph(ONNX[key]))
    VC.validate(E.nodes, E.tensors)
    path = os.path.join(tmpdir, key + ".safetensors")
    VC.write_safetensors(path, E.tensors, {"architecture": "animeganv3-tiny"})
    return R.load_generator(path)


def main():
    torch.set_num_threads(2)
    subprocess.run(["sh", os.path.join(TOOLS, "make_v3_test_models.sh")], check=True, cwd=ROOT)
    os.makedirs(os.path.join(OUT, "1px"), exist_ok=True)
    photos = {}
    inputs = {}
    for name, key, ref, w, h, photo, x, y, f in FIXTURES:
        if photo not in photos:
            photos[photo] = MF.load_photo(photo)
        inputs[name] = MF.crop_downscale(photos[photo], x, y, w, h, f)
    # the ORT runs, batched per model
    ort = {}
    for key in sorted({k for _, k, r, *_ in FIXTURES if r == "ort"}):
        names = [n for n, k, r, *_ in FIXTURES if k == key and r == "ort"]
        for n, yv in zip(names, R.run_ort(ONNX[key], [to_x(inputs[n]) for n in names])):
            ort[n] = yv
    files = {k: R.original(k) for k in ("hayao", "shinkai")}
    worst = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        models = {}
        for name, key, ref, w, h, photo, x, y, f in FIXTURES:
            if key not in models:
                models[key] = torch_model(key, tmpdir)
            xin = to_x(inputs[name])
            yt = R.run_torch(models[key], xin)
            other = None
            if ref == "file":
                if key == "hayao":
                    yr = files[key](xin, eps=EPS, att_eps=1e-9)
                else:
                    yr = files[key](xin)
                other = yt
            elif ref == "ort":
                yr = ort[name]
                other = yt
            else:
                yr = yt
                other = ort.get(name)
            err = None if other is None else float(np.abs(yr - other).max())
            if err is not None:
                assert err < TOLERANCE, (name, err)
                label = "%s vs %s" % (ref, "torch" if ref != "torch" else "ort")
                worst[label] = max(worst.get(label, 0.0), err)
            yr = yr[0].astype(np.float32)
            path = os.path.join(OUT, name + ".agfx")
            MF.write_agfx(path, MODEL[key], "asymmetric", EPS, inputs[name], yr, out8(yr))
            print("%-26s %6d bytes  ref %-5s y in [%.3f, %.3f]  %s" % (
                name + ".agfx", os.path.getsize(path), ref, yr.min(), yr.max(),
                "" if err is None else "max abs vs the other reference %.2g" % err))
    for k, v in sorted(worst.items()):
        print("worst %s: %.3g" % (k, v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
