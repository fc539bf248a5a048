#!/usr/bin/python3
"""make_upscale_fixtures.py - the golden fixtures of the upscalers (tests/fixtures/upscale/):

  Real-ESRGAN: seeded random-weight checkpoints in the real files' key layouts and wrappers
  (torch.save of {"params_ema": state_dict} or {"params": ...}), reduced in width where the
  layout allows but with the real depth: realesr-animevideov3 (SRVGG, 16 convs, x4),
  realesr-general-x4v3 (32 convs, x4, "params"), RealESRGAN_x4plus (RRDB, 23 blocks),
  RealESRGAN_x4plus_anime_6B (6 blocks), RealESRGAN_x2plus (3 of its 23 blocks, the pixel-unshuffle input);
  each run by tools/realesrgan_reference.py (float64) on a crop of a test photo.
  UpscalerJS: the bundled models/esrgan-{slim,medium}-xN.safetensors' originals run by
  tools/tfjs_reference.py (float64) on a small crop.

Each expected result is an .agup file (little-endian): "AGUP", u32 version 1, u32 width,
height, scale of the input, char[64] the model file relative to the repository root
(NUL-padded), then the input RGB u8 (H, W, 3), the output in pixel units as float32
(sH, sW, 3), unclamped, and the output u8 (clamped, rounded). Deterministic (seeded; weights
are k/16 multiples of one scale per conv, so git stores them compactly). From the repository
root: /usr/bin/python3 tools/make_upscale_fixtures.py
"""

import os
import struct
import sys

import numpy as np
import torch
from PIL import Image

TOOLS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(TOOLS, "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "upscale")
sys.path.insert(0, TOOLS)
import realesrgan_reference as R  # noqa: E402
import tfjs_reference as T  # noqa: E402

# name, network, key, input (w, h), photo, crop origin
REALESRGAN = [
    ("animevideov3", lambda: R.SRVGG(8, 16, 4), "params_ema", (13, 11), "chelsea.png", (200, 60)),
    ("general-x4v3", lambda: R.SRVGG(8, 32, 4), "params", (12, 9), "coffee.png", (150, 100)),
    ("x4plus", lambda: R.RRDB(4, 23, 4, 4), "params_ema", (11, 9), "astronaut.png", (180, 90)),
    ("anime-6B", lambda: R.RRDB(8, 6, 4, 4), "params_ema", (10, 9), "chelsea.png", (260, 40)),
    ("x2plus", lambda: R.RRDB(4, 3, 4, 2), "params_ema", (14, 10), "coffee.png", (300, 120)),
]
# bundled model, input (w, h), photo, crop origin
UPSCALERJS = [
    ("esrgan-slim", 2, (17, 13), "astronaut.png", (200, 120)),
    ("esrgan-slim", 3, (11, 9), "chelsea.png", (220, 70)),
    ("esrgan-medium", 2, (15, 11), "coffee.png", (160, 140)),
    ("esrgan-medium", 4, (9, 8), "astronaut.png", (240, 200)),
]


def crop(photo, origin, size):
    img = np.asarray(Image.open(os.path.join(ROOT, "tests", "data", photo)).convert("RGB"))
    x, y = origin
    w, h = size
    return np.ascontiguousarray(img[y:y + h, x:x + w])


def seeded_weights(net, seed):
    """Every parameter k/16 x a per-tensor scale (k in -16..16), a PReLU slope in [0, 0.5]:
    outputs stay in a few units, like a trained network's."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in net.named_parameters():
            k = torch.randint(-16, 17, p.shape, generator=g).double() / 16
            if p.dim() == 4:
                scale = 1.0 / np.sqrt(p.shape[1] * p.shape[2] * p.shape[3])
            elif "body" in name and p.dim() == 1 and name.endswith("weight"):  # PReLU
                k = (k.abs() / 2)
                scale = 1.0
            else:
                scale = 0.1
            p.copy_((k * scale).float())


def write_agup(path, model_rel, scale, rgb, pix, out8):
    h, w, _ = rgb.shape
    assert pix.shape == (h * scale, w * scale, 3) and out8.shape == pix.shape
    head = b"AGUP" + struct.pack("<IIII", 1, w, h, scale) + model_rel.encode().ljust(64, b"\0")
    with open(path, "wb") as f:
        f.write(head)
        f.write(rgb.astype(np.uint8).tobytes())
        f.write(np.ascontiguousarray(pix, dtype="<f4").tobytes())
        f.write(np.ascontiguousarray(out8, dtype=np.uint8).tobytes())


def main():
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    for i, (name, make, key, size, photo, origin) in enumerate(REALESRGAN):
        net = make()
        seeded_weights(net, 20261201 + i)
        pth = os.path.join(OUT, name + ".pth")
        torch.save({key: net.state_dict()}, pth)
        rgb = crop(photo, origin, size)
        pix, out8 = R.upscale_u8(net, rgb)
        scale = out8.shape[0] // rgb.shape[0]
        rel = os.path.relpath(pth, ROOT)
        write_agup(os.path.join(OUT, name + ".agup"), rel, scale, rgb, pix, out8)
        print("%s: %s %d tensors, %dx%d x%d, output %.2f..%.2f"
              % (rel, key, len(net.state_dict()), size[0], size[1], scale, pix.min(), pix.max()))
    for family, scale, size, photo, origin in UPSCALERJS:
        model = T.load(os.path.join(T.UPSCALE_DIR, family, "x%d" % scale))
        rgb = crop(photo, origin, size)
        y = model.run(rgb.astype(np.float64))
        rel = "models/%s-x%d.safetensors" % (family, scale)
        out = os.path.join(OUT, "%s-x%d.agup" % (family, scale))
        write_agup(out, rel, scale, rgb, y.astype(np.float32), T.to_u8(y))
        print("%s: %dx%d x%d" % (os.path.relpath(out, ROOT), size[0], size[1], scale))


if __name__ == "__main__":
    main()
