#!/usr/bin/python3
"""Writes tests/fixtures/restore/up_*: GPEN and GFPGAN checkpoints with seeded random weights,
made by the upstream repositories' own classes, and the outputs of the upstream forward passes
run on CPU. The upstream code is only run, never copied: pass the checkouts (fetched snapshots,
extracted anywhere, e.g. /tmp):

  /usr/bin/python3 tools/make_restore_upstream_fixtures.py GPEN_DIR GFPGAN_DIR

GPEN_DIR is yangxy/GPEN (face_model/gpen_model.py: FullGenerator; without CUDA its op/ falls
back to the native PyTorch upfirdn2d and fused_leaky_relu). GFPGAN_DIR is TencentARC/GFPGAN
(gfpgan/archs/gfpganv1_clean_arch.py: GFPGANv1Clean, plain PyTorch, run with
randomize_noise=False so the checkpoint's noise buffers are used). basicsr is not needed: the
three names the arch files import from it (ARCH_REGISTRY, default_init_weights,
get_root_logger) are stubbed, and every weight is drawn afresh after construction anyway.

Layouts: the real files' configurations with the channel counts narrowed and the style MLP
shortened so that each checkpoint is well under 1 MB (the full-size key layouts are tested
from tests/fixtures/restore/layout_*.txt):

  up_gpen_bfr256   FullGenerator(256, style 32, n_mlp 2, channel_multiplier 1, narrow 1/16):
                   GPEN-BFR-256's family (multiplier 1), channels 32 at 4..32, 16, 8, 4
  up_gpen_bfr512   FullGenerator(512, 32, 2, channel_multiplier 2, narrow 1/32) (BFR-512's)
  up_gpen1024      FullGenerator(1024, 32, 2, 2, narrow 1/16) (GPEN-BFR-1024's)
  up_gfpgan512     GFPGANv1Clean(512, num_style_feat 32, channel_multiplier 2, num_mlp 2,
                   input_is_latent, different_w, narrow 1/16, sft_half): the flags of
                   GFPGANv1.3 and v1.4, which share one architecture (only the weights differ)

Weights: upstream's own initialisation (seeded), then the parameters it leaves at zero or one
(biases, noise strengths, modulation biases) drawn too, so every path carries signal.

.agrf version 2 (little-endian): "AGRF", u32 2, u32 size S, u32 grid n (S % n == 0), char[64]
checkpoint path (relative to the repository root), u8 (n, n, 3) RGB input: the network's input
is its nearest-neighbour enlargement by S / n, f32 (n, n, 3) output and u8 (n, n, 3) output
(upstream's own 8-bit conversion: GPEN's FaceGAN.tensor2img truncates, basicsr's tensor2img
rounds) at the pixels (p(i), p(j)), p(i) = i (S - 1) / (n - 1) rounded down: a grid that
includes the first and last rows and columns, so the files stay small at 1024.
"""
import os
import struct
import sys
import types

import numpy as np
import torch
from PIL import Image

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "restore")
REL = "tests/fixtures/restore/"
GRID = 128


def stub_basicsr():
    """The three basicsr names the upstream arch files import, without basicsr."""
    class Registry:
        def register(self, obj=None):
            return obj if obj is not None else (lambda o: o)

    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        m.__path__ = []
        sys.modules[name] = m
        return m

    module("basicsr")
    module("basicsr.utils", get_root_logger=lambda *a, **k: __import__("logging").getLogger())
    module("basicsr.utils.registry", ARCH_REGISTRY=Registry())
    module("basicsr.archs")
    module("basicsr.archs.arch_util", default_init_weights=lambda *a, **k: None)


def import_gpen(gpen_dir):
    sys.path.insert(0, os.path.join(gpen_dir, "face_model"))
    import gpen_model
    return gpen_model.FullGenerator


def import_gfpgan(gfpgan_dir):
    stub_basicsr()
    pkg = types.ModuleType("gfpgan")  # the package without its __init__ (data, models, ...)
    pkg.__path__ = [os.path.join(gfpgan_dir, "gfpgan")]
    sys.modules["gfpgan"] = pkg
    archs = types.ModuleType("gfpgan.archs")
    archs.__path__ = [os.path.join(gfpgan_dir, "gfpgan", "archs")]
    sys.modules["gfpgan.archs"] = archs
    import importlib
    return importlib.import_module("gfpgan.archs.gfpganv1_clean_arch").GFPGANv1Clean


def randomize(net, seed):
    """Every parameter and noise buffer drawn: weights keep upstream's scale, biases and noise
    strengths small, modulation biases near one."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in list(net.named_parameters()) + list(net.named_buffers()):
            r = torch.randn(p.shape, generator=gen)
            if name.endswith(".kernel"):
                continue  # the FIR taps are fixed
            if "modulation.bias" in name:
                p.copy_(1 + 0.1 * r)
            elif name.endswith("bias") or name.endswith("noise.weight") or name.endswith(".weight") and p.dim() == 1:
                p.copy_(0.1 * r)
            elif "noises.noise" in name:
                p.copy_(r)
            else:  # keep the scale upstream's init chose for this tensor
                std = float(p.std()) if p.numel() > 1 and float(p.std()) > 0 else 1.0
                p.copy_(r * std)


def face_input(size):
    """The astronaut's face at GRID px, and its nearest enlargement to size (the input)."""
    img = Image.open(os.path.join(ROOT, "tests", "data", "astronaut.png")).convert("RGB")
    small = np.asarray(img.crop((150, 40, 300, 190)).resize((GRID, GRID), Image.BOX), np.uint8)
    k = size // GRID
    return small, small.repeat(k, 0).repeat(k, 1)


def write_fixture(name, ckpt, net, forward, size, to_u8):
    small, big = face_input(size)
    x = torch.from_numpy(big.astype(np.float32) / 255.0)
    x = ((x - 0.5) / 0.5).permute(2, 0, 1)[None]  # as GPEN's img2tensor / GFPGAN's normalize
    with torch.no_grad():
        y = forward(net, x)[0].permute(1, 2, 0).contiguous().numpy().astype(np.float32)
    y8 = to_u8(y)
    pos = [i * (size - 1) // (GRID - 1) for i in range(GRID)]
    ys, y8s = y[pos][:, pos], y8[pos][:, pos]
    with open(os.path.join(OUT, name + ".agrf"), "wb") as f:
        f.write(b"AGRF" + struct.pack("<III", 2, size, GRID) + (REL + ckpt).encode().ljust(64, b"\0"))
        f.write(small.tobytes() + np.ascontiguousarray(ys).tobytes() + np.ascontiguousarray(y8s).tobytes())
    print("%s: |y| max %.3f, std %.3f, u8 levels used %d" % (name, np.abs(y).max(), y.std(), len(np.unique(y8))))


def gpen_u8(y):
    """FaceGAN.tensor2img: clip(y * 0.5 + 0.5, 0, 1) * 255, truncated by astype(uint8)."""
    return (np.clip(y * 0.5 + 0.5, 0, 1) * 255.0).astype(np.uint8)


def basicsr_u8(y):
    """basicsr tensor2img(min_max=(-1, 1)): clamp, to [0, 1], * 255, rounded."""
    return np.round((np.clip(y, -1, 1) + 1) / 2 * 255.0).astype(np.uint8)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_restore_upstream_fixtures.py GPEN_DIR GFPGAN_DIR")
    torch.set_num_threads(2)
    FullGenerator = import_gpen(sys.argv[1])
    GFPGANv1Clean = import_gfpgan(sys.argv[2])
    gpen_fwd = lambda net, x: net(x)[0]  # noqa: E731
    for name, size, cm, narrow, seed in (("up_gpen_bfr256", 256, 1, 1 / 16, 30256),
                                         ("up_gpen_bfr512", 512, 2, 1 / 32, 30512),
                                         ("up_gpen1024", 1024, 2, 1 / 16, 31024)):
        torch.manual_seed(seed)
        net = FullGenerator(size, 32, 2, channel_multiplier=cm, narrow=narrow).eval()
        randomize(net, seed)
        torch.save(net.state_dict(), os.path.join(OUT, name + ".pt"))
        write_fixture(name, name + ".pt", net, gpen_fwd, size, gpen_u8)
    torch.manual_seed(30513)
    net = GFPGANv1Clean(512, num_style_feat=32, channel_multiplier=2, decoder_load_path=None,
                        fix_decoder=False, num_mlp=2, input_is_latent=True, different_w=True,
                        narrow=1 / 16, sft_half=True).eval()
    randomize(net, 30513)
    torch.save({"params_ema": net.state_dict()}, os.path.join(OUT, "up_gfpgan512.pt"))
    gfp_fwd = lambda net, x: net(x, return_rgb=False, randomize_noise=False)[0]  # noqa: E731
    write_fixture("up_gfpgan512", "up_gfpgan512.pt", net, gfp_fwd, 512, basicsr_u8)


if __name__ == "__main__":
    main()
