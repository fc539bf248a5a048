#!/usr/bin/env python3
"""make_fixtures.py - write the golden fixtures the C tests compare against.

Offline tool; run from anywhere with Debian's Python (PyTorch 1.13, numpy, PIL):
  /usr/bin/python3 tools/make_fixtures.py
It reads models/hayao.safetensors (written by tools/convert_tflite.py) and the photos in
tests/data/, and writes into tests/fixtures/:

  random_zip.pt, random_legacy.pt  one random-weight Generator (fixed seed, low-entropy
                                   weights so git compresses them), as a torch.save state_dict
                                   in the zip and in the legacy format
  *.agfx                           golden inputs and outputs (format below)
  astronaut_hayao.png              tests/data/astronaut.png through the Hayao reference

The network is tools/reference_model.py (bryandlee's Generator with an eps and a resize
mode), run in float32 on the CPU with 2 threads. Everything is deterministic: a rerun gives
byte-identical files.

.agfx, little-endian:
  char magic[4] "AGFX"; u32 version (1); u32 width; u32 height;
  char model[64]   NUL-padded path relative to the repository root
  char resize[16]  NUL-padded "asymmetric" / "align-corners" / "half-pixel"
  f32 eps          GroupNorm / LayerNorm epsilon
  u8  input[H*W*3]    RGB, row-major HWC; the network input is float32(u8) / 127.5 - 1
  f32 output[H*W*3]   the generator's tanh output in [-1, 1], HWC
  u8  output8[H*W*3]  clip(rint((y + 1) * 127.5), 0, 255)
"""

import io
import math
import os
import pickle
import struct
import sys

import numpy as np
import torch
from PIL import Image

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import reference_model as R  # noqa: E402

ROOT = os.path.dirname(TOOLS)
DATA = os.path.join(ROOT, "tests", "data")
OUT = os.path.join(ROOT, "tests", "fixtures")

HAYAO = "models/hayao.safetensors"
RANDOM_PT = "tests/fixtures/random_zip.pt"
RANDOM_SEED = 20240531

# name, model, resize mode, width, height, photo, crop x, crop y, area-downscale factor
FIXTURES = [
    ("hayao_64x64", "hayao", "asymmetric", 64, 64, "astronaut.png", 0, 0, 8),
    ("hayao_72x48", "hayao", "asymmetric", 72, 48, "chelsea.png", 80, 40, 4),
    ("hayao_37x29", "hayao", "asymmetric", 37, 29, "coffee.png", 100, 50, 8),
    ("hayao_50x38", "hayao", "asymmetric", 50, 38, "rocket.jpg", 60, 100, 6),
    ("hayao_8x8", "hayao", "asymmetric", 8, 8, "astronaut.png", 150, 40, 24),
    ("hayao_13x9", "hayao", "asymmetric", 13, 9, "chelsea.png", 100, 60, 16),
    ("hayao_ac_40x32", "hayao", "align-corners", 40, 32, "coffee.png", 100, 40, 10),
    ("hayao_hp_40x32", "hayao", "half-pixel", 40, 32, "coffee.png", 100, 40, 10),
    ("random_40x32", "random", "align-corners", 40, 32, "astronaut.png", 96, 64, 8),
    ("random_37x29", "random", "align-corners", 37, 29, "rocket.jpg", 180, 300, 1),
    ("random_8x8", "random", "align-corners", 8, 8, "chelsea.png", 150, 80, 16),
]


def load_photo(name):
    with Image.open(os.path.join(DATA, name)) as im:
        return np.array(im.convert("RGB"), dtype=np.uint8)


def crop_downscale(rgb, x, y, w, h, f):
    """Crop (f*w) x (f*h) at (x, y) and box-average f x f blocks (area downscale)."""
    c = rgb[y:y + h * f, x:x + w * f].astype(np.float64)
    if c.shape[:2] != (h * f, w * f):
        raise SystemExit("crop %dx%d at (%d,%d) outside the photo" % (w * f, h * f, x, y))
    c = c.reshape(h, f, w, f, 3).mean(axis=(1, 3))
    return np.clip(np.rint(c), 0, 255).astype(np.uint8)


def random_generator():
    """Random weights with few distinct values: conv weight = k/8 / sqrt(fan_in) with k in
    -8..8; norm gamma = 1 + k/16, beta and conv biases = k/16 with k in -4..4."""
    torch.manual_seed(RANDOM_SEED)
    g = R.Generator(eps=1e-5, resize_mode="align-corners")
    with torch.no_grad():
        for name, p in g.named_parameters():
            if p.ndim == 4:
                fan_in = p.shape[1] * p.shape[2] * p.shape[3]
                k = torch.randint(-8, 9, p.shape).float() / 8
                p.copy_(k * np.float32(1 / math.sqrt(fan_in)))
            elif name.endswith(".weight"):  # GroupNorm gamma
                p.copy_(1 + torch.randint(-4, 5, p.shape).float() / 16)
            else:  # GroupNorm beta, depthwise conv bias
                p.copy_(torch.randint(-4, 5, p.shape).float() / 16)
    return g.eval()


class _StableKeysPickle:
    """pickle_module for torch.save's legacy format that makes the file deterministic.

    torch 1.13's _legacy_save names each storage str(storage._cdata), a memory address, and
    writes the storages in the sorted order of those names, so two runs differ. This module
    renames the storages "0", "1", ... in the order the pickler meets them; the caller then
    rewrites the key list and reorders the data blocks (save_legacy_stable)."""

    __name__ = "stable_keys_pickle"  # torch.save checks pickle_module.__name__

    def __init__(self):
        self.ids = {}           # address key -> stable key
        self.address_order = None
        self.keys_pos = None

    def dump(self, obj, f, protocol=2):
        if isinstance(obj, list) and self.ids and set(obj) == set(self.ids):
            # the sorted list of storage keys: remember it, rewritten later
            self.address_order = list(obj)
            self.keys_pos = f.tell()
            return
        pickle.dump(obj, f, protocol=protocol)

    def Pickler(self, f, protocol=2):  # noqa: N802 (mirrors the pickle module's API)
        outer = self

        class StablePickler(pickle.Pickler):
            def __setattr__(self, name, value):
                if name == "persistent_id":
                    inner = value

                    def value(obj):
                        pid = inner(obj)
                        if pid is not None and pid[0] == "storage":
                            assert pid[5] is None, "storage views are not expected"
                            key = outer.ids.setdefault(pid[2], str(len(outer.ids)))
                            pid = pid[:2] + (key,) + pid[3:]
                        return pid
                super().__setattr__(name, value)

        return StablePickler(f, protocol=protocol)


def save_legacy_stable(state_dict, path):
    """torch.save(..., _use_new_zipfile_serialization=False) with deterministic bytes."""
    mod = _StableKeysPickle()
    buf = io.BytesIO()
    torch.save(state_dict, buf, pickle_module=mod, _use_new_zipfile_serialization=False)
    raw = buf.getvalue()
    head, data = raw[:mod.keys_pos], raw[mod.keys_pos:]
    # data: per storage (address order) an int64 element count and the float32 elements
    blocks = {}
    pos = 0
    for key in mod.address_order:
        (numel,) = struct.unpack_from("<q", data, pos)
        size = 8 + 4 * numel
        blocks[mod.ids[key]] = data[pos:pos + size]
        pos += size
    assert pos == len(data)
    keys = sorted(blocks)  # sorted like torch sorts its keys
    with open(path, "wb") as f:
        f.write(head)
        pickle.dump(keys, f, protocol=2)
        for k in keys:
            f.write(blocks[k])


def write_agfx(path, model_path, mode, eps, rgb, y, out8):
    h, w, _ = rgb.shape
    assert y.shape == rgb.shape and out8.shape == rgb.shape
    head = b"AGFX" + struct.pack("<III", 1, w, h)
    head += model_path.encode().ljust(64, b"\0") + mode.encode().ljust(16, b"\0")
    head += struct.pack("<f", eps)
    with open(path, "wb") as f:
        f.write(head)
        f.write(np.ascontiguousarray(rgb, dtype=np.uint8).tobytes())
        f.write(np.ascontiguousarray(y, dtype="<f4").tobytes())
        f.write(np.ascontiguousarray(out8, dtype=np.uint8).tobytes())


def main():
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)

    rnd = random_generator()
    sd = rnd.state_dict()
    torch.save(sd, os.path.join(OUT, "random_zip.pt"))
    save_legacy_stable(sd, os.path.join(OUT, "random_legacy.pt"))
    # check both files load back to the same weights
    for fn in ("random_zip.pt", "random_legacy.pt"):
        back = torch.load(os.path.join(OUT, fn))
        assert list(back.keys()) == list(sd.keys()), fn
        assert all(torch.equal(back[k], sd[k]) for k in sd), fn

    models = {}
    for mode in R.RESIZE_MODES:
        models[("hayao", mode)] = R.load_safetensors_generator(os.path.join(ROOT, HAYAO),
                                                               eps=1e-12, resize_mode=mode)
    models[("random", "align-corners")] = rnd
    paths = {"hayao": HAYAO, "random": RANDOM_PT}
    eps = {"hayao": 1e-12, "random": 1e-5}

    photos = {}
    for name, model, mode, w, h, photo, x, y, f in FIXTURES:
        if photo not in photos:
            photos[photo] = load_photo(photo)
        rgb = crop_downscale(photos[photo], x, y, w, h, f)
        out, out8 = R.run_u8(models[(model, mode)], rgb)
        path = os.path.join(OUT, name + ".agfx")
        write_agfx(path, paths[model], mode, eps[model], rgb, out, out8)
        print("%-24s %5d bytes  %-13s y in [%.3f, %.3f]" % (name + ".agfx", os.path.getsize(path),
                                                         mode, out.min(), out.max()))

    out, out8 = R.run_u8(models[("hayao", "asymmetric")], photos["astronaut.png"])
    Image.fromarray(out8, "RGB").save(os.path.join(OUT, "astronaut_hayao.png"))
    print("astronaut_hayao.png      y in [%.3f, %.3f]" % (out.min(), out.max()))

    flop = R.flop(models[("hayao", "asymmetric")], 512, 512)
    print("convolution FLOP of one 512x512 pass: %d (%.1f GFLOP)" % (flop, flop / 1e9))
    return 0


if __name__ == "__main__":
    sys.exit(main())
