#!/usr/bin/python3
"""Writes tests/fixtures/restore/: seeded random-weight GPEN and GFPGAN checkpoints of reduced
size in the real files' key layouts, their golden outputs through tools/gpen_reference.py and
tools/gfpgan_reference.py, the key layouts of the released files at full size, and the bad
checkpoints the loader must refuse.

Run with Debian's PyTorch: /usr/bin/python3 tools/make_restore_fixtures.py
Deterministic: a rerun gives byte-identical files (legacy storages keyed "0", "1", ...).

  gpen64_zip.pt       FullGenerator size 64, style 32, n_mlp 2, channel_multiplier 1,
                      narrow 1/32 (channels 16 at 4..32, 8 at 64): plain state_dict, zip
  gpen32_g_ema.pt     size 32, style 16, n_mlp 3, channel_multiplier 2, narrow 1/64
                      (channels 8): {"g": ..., "g_ema": ...} as GPEN's trainer saves, legacy
  gfpgan64_zip.pt     GFPGANv1Clean size 64, style 16, n_mlp 2, channel_multiplier 1,
                      narrow 1/32 (decoder 16 at 4..32, 8 at 64; U-Net half), sft_half,
                      different_w: {"params_ema": ...}, zip
  *.agrf              golden output of each on a face crop (format below)
  layout_*.txt        "name d0 d1 ..." per tensor of GPEN-BFR-256/512, GPEN 1024/2048 and
                      GFPGANv1.3/1.4 at full size, from the same layout functions
The bad checkpoints (truncated, a tensor missing or of the wrong shape) are made from these
by tests/test_restore.c at test time.

.agrf (little-endian): "AGRF", u32 version 1, u32 size S, char[64] checkpoint path (NUL
padded, relative to the repository root), u8 input (S, S, 3) RGB, f32 output (S, S, 3)
in [-1, 1] unclamped, u8 output (S, S, 3) = round((clamp(y) + 1) * 127.5).
"""
import collections
import os
import struct
import sys

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gfpgan_reference  # noqa: E402
import gpen_reference  # noqa: E402
import make_pt_fixtures  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "restore")


def channel_table(ch_mult, narrow):
    base = {4: 512, 8: 512, 16: 512, 32: 512, 64: 256 * ch_mult, 128: 128 * ch_mult,
            256: 64 * ch_mult, 512: 32 * ch_mult, 1024: 16 * ch_mult, 2048: 8 * ch_mult}
    return {r: int(c * narrow) for r, c in base.items()}


def gpen_layout(size, style_dim, n_mlp, ch_mult, narrow):
    """name -> shape of FullGenerator's state_dict, in module order."""
    ch = channel_table(ch_mult, narrow)
    L = size.bit_length() - 1
    t = collections.OrderedDict()
    g = "generator."
    for i in range(1, n_mlp + 1):
        t[g + "style.%d.weight" % i] = (style_dim, style_dim)
        t[g + "style.%d.bias" % i] = (style_dim,)

    def modconv(p, ic, oc, k, blur):
        t[p + ".weight"] = (1, oc, ic, k, k)
        t[p + ".modulation.weight"] = (ic, style_dim)
        t[p + ".modulation.bias"] = (ic,)
        if blur:
            t[p + ".blur.kernel"] = (4, 4)

    def styled(p, ic, oc, up):
        modconv(p + ".conv", ic, oc, 3, up)
        t[p + ".noise.weight"] = (1,)
        t[p + ".activate.bias"] = (2 * oc,)

    def rgb(p, ic, up):
        if up:
            t[p + ".upsample.kernel"] = (4, 4)
        modconv(p + ".conv", ic, 3, 1, False)
        t[p + ".bias"] = (1, 3, 1, 1)

    t[g + "input.input"] = (1, ch[4], 4, 4)
    styled(g + "conv1", ch[4], ch[4], False)
    rgb(g + "to_rgb1", 2 * ch[4], False)
    cin = ch[4]
    for i in range(3, L + 1):
        c = ch[2 ** i]
        styled(g + "convs.%d" % (2 * (i - 3)), 2 * cin, c, True)
        styled(g + "convs.%d" % (2 * (i - 3) + 1), 2 * c, c, False)
        cin = c
    for i in range(3, L + 1):
        rgb(g + "to_rgbs.%d" % (i - 3), 2 * ch[2 ** i], True)
    t["ecd0.0.0.weight"] = (ch[size], 3, 1, 1)
    t["ecd0.0.1.bias"] = (ch[size],)
    cin = ch[size]
    for n, i in enumerate(range(L, 2, -1), start=1):
        c = ch[2 ** (i - 1)]
        t["ecd%d.0.0.kernel" % n] = (4, 4)
        t["ecd%d.0.1.weight" % n] = (c, cin, 3, 3)
        t["ecd%d.0.2.bias" % n] = (c,)
        cin = c
    t["final_linear.0.weight"] = (style_dim, ch[4] * 16)
    t["final_linear.0.bias"] = (style_dim,)
    return t


def gfpgan_layout(size, style_dim, n_mlp, ch_mult, narrow):
    ch = channel_table(ch_mult, narrow)
    un = channel_table(ch_mult, narrow * 0.5)
    L = size.bit_length() - 1
    t = collections.OrderedDict()

    def conv(p, ic, oc, k, bias=True):
        t[p + ".weight"] = (oc, ic, k, k)
        if bias:
            t[p + ".bias"] = (oc,)

    def res(p, ic, oc):
        conv(p + ".conv1", ic, ic, 3)
        conv(p + ".conv2", ic, oc, 3)
        conv(p + ".skip", ic, oc, 1, bias=False)

    conv("conv_body_first", 3, un[size], 1)
    cin = un[size]
    for n, i in enumerate(range(L, 2, -1)):
        res("conv_body_down.%d" % n, cin, un[2 ** (i - 1)])
        cin = un[2 ** (i - 1)]
    conv("final_conv", cin, un[4], 3)
    cin = un[4]
    for n, i in enumerate(range(3, L + 1)):
        res("conv_body_up.%d" % n, cin, un[2 ** i])
        cin = un[2 ** i]
    for n, i in enumerate(range(3, L + 1)):
        conv("toRGB.%d" % n, un[2 ** i], 3, 1)
    t["final_linear.weight"] = ((2 * L - 2) * style_dim, un[4] * 16)
    t["final_linear.bias"] = ((2 * L - 2) * style_dim,)
    d = "stylegan_decoder."
    for i in range(n_mlp):
        t[d + "style_mlp.%d.weight" % (2 * i + 1)] = (style_dim, style_dim)
        t[d + "style_mlp.%d.bias" % (2 * i + 1)] = (style_dim,)
    t[d + "constant_input.weight"] = (1, ch[4], 4, 4)

    def modconv(p, ic, oc, k):
        t[p + ".modulated_conv.weight"] = (1, oc, ic, k, k)
        t[p + ".modulated_conv.modulation.weight"] = (ic, style_dim)
        t[p + ".modulated_conv.modulation.bias"] = (ic,)

    def sconv(p, ic, oc):
        t[p + ".weight"] = (1,)
        t[p + ".bias"] = (1, oc, 1, 1)
        modconv(p, ic, oc, 3)

    def rgb(p, ic):
        t[p + ".bias"] = (1, 3, 1, 1)
        modconv(p, ic, 3, 1)

    sconv(d + "style_conv1", ch[4], ch[4])
    rgb(d + "to_rgb1", ch[4])
    cin = ch[4]
    for i in range(3, L + 1):
        sconv(d + "style_convs.%d" % (2 * (i - 3)), cin, ch[2 ** i])
        sconv(d + "style_convs.%d" % (2 * (i - 3) + 1), ch[2 ** i], ch[2 ** i])
        cin = ch[2 ** i]
    for i in range(3, L + 1):
        rgb(d + "to_rgbs.%d" % (i - 3), ch[2 ** i])
    for i in range(2 * (L - 2) + 1):
        r = 2 ** ((i + 5) // 2)
        t[d + "noises.noise%d" % i] = (1, 1, r, r)
    for kind in ("condition_scale", "condition_shift"):
        for n, i in enumerate(range(3, L + 1)):
            c = un[2 ** i]
            conv("%s.%d.0" % (kind, n), c, c, 3)
            conv("%s.%d.2" % (kind, n), c, c, 3)  # sft_half: as many as the U-Net's
    return t


def blur_buffer(name):
    """The registered FIR kernels: Blur / Upsample scale by factor^2, Downsample's do not."""
    return gpen_reference.blur_kernel(4.0 if ("upsample" in name or ".conv.blur" in name) else 1.0)


def random_state(layout, seed, prescaled):
    """Weights of few distinct values (k/8 steps), biases small, modulation biases near 1."""
    gen = torch.Generator().manual_seed(seed)
    sd = collections.OrderedDict()
    for name, shape in layout.items():
        q = torch.randint(-8, 9, shape, generator=gen).float() / 8
        if name.endswith(".kernel"):
            v = blur_buffer(name)
        elif "modulation.bias" in name:
            v = 1 + q / 4
        elif name.endswith("bias") or name.endswith("noise.weight") or name.endswith(".weight") and shape == (1,):
            v = q / 4
        elif "noises.noise" in name or name.endswith("input.input") or "constant_input" in name:
            v = q * 2
        else:
            v = q * 2
            if prescaled and len(shape) >= 2:  # GFPGAN stores weights divided by sqrt(fan_in)
                fan_in = int(np.prod(shape[1:] if len(shape) < 5 else shape[2:]))
                v = q * 1.5 / np.sqrt(fan_in)
        sd[name] = v.contiguous()
    return sd


def save(obj, path, legacy=False):
    if legacy:  # make_pt_fixtures' reproducible legacy writer, into our folder
        make_pt_fixtures.OUT = os.path.dirname(path)
        make_pt_fixtures.save_legacy(obj, os.path.basename(path))
    else:
        torch.save(obj, path)


def face_crop(size):
    img = Image.open(os.path.join(ROOT, "tests", "data", "astronaut.png")).convert("RGB")
    # The astronaut's face, roughly the FFHQ framing.
    return img.crop((150, 40, 300, 190)).resize((size, size), Image.BOX)


def write_golden(path, ckpt_rel, sd, forward, size):
    inp = np.asarray(face_crop(size), np.uint8)
    x = torch.from_numpy(inp.astype(np.float32) / 127.5 - 1).permute(2, 0, 1)[None]
    with torch.no_grad():
        y = forward(sd, x)[0].permute(1, 2, 0).contiguous().numpy().astype(np.float32)
    y8 = np.round((np.clip(y, -1, 1) + 1) * 127.5).astype(np.uint8)
    with open(path, "wb") as f:
        f.write(b"AGRF" + struct.pack("<II", 1, size) + ckpt_rel.encode().ljust(64, b"\0"))
        f.write(inp.tobytes() + y.tobytes() + y8.tobytes())
    return float(np.abs(y).max()), float(y.std())


def write_layout(path, layout):
    with open(path, "w") as f:
        for name, shape in layout.items():
            f.write(name + " " + " ".join(str(d) for d in shape) + "\n")


def main():
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    rel = "tests/fixtures/restore/"
    gpen64 = random_state(gpen_layout(64, 32, 2, 1, 1 / 32), 19064, prescaled=False)
    gpen32 = random_state(gpen_layout(32, 16, 3, 2, 1 / 64), 19032, prescaled=False)
    gfp64 = random_state(gfpgan_layout(64, 16, 2, 1, 1 / 32), 19164, prescaled=True)
    save(gpen64, os.path.join(OUT, "gpen64_zip.pt"))
    save({"g": gpen32, "g_ema": gpen32}, os.path.join(OUT, "gpen32_g_ema.pt"), legacy=True)
    save({"params_ema": gfp64}, os.path.join(OUT, "gfpgan64_zip.pt"))
    for name, sd, fwd, size in (("gpen64", gpen64, gpen_reference.gpen_forward, 64),
                                ("gpen32", gpen32, gpen_reference.gpen_forward, 32),
                                ("gfpgan64", gfp64, gfpgan_reference.gfpgan_forward, 64)):
        ckpt = {"gpen64": "gpen64_zip.pt", "gpen32": "gpen32_g_ema.pt", "gfpgan64": "gfpgan64_zip.pt"}[name]
        peak, std = write_golden(os.path.join(OUT, name + ".agrf"), rel + ckpt, sd, fwd, size)
        print("%s: |y| max %.3f, std %.3f" % (name, peak, std))
    write_layout(os.path.join(OUT, "layout_gpen_bfr_256.txt"), gpen_layout(256, 512, 8, 1, 0.5))
    write_layout(os.path.join(OUT, "layout_gpen_bfr_512.txt"), gpen_layout(512, 512, 8, 2, 1))
    write_layout(os.path.join(OUT, "layout_gpen_1024.txt"), gpen_layout(1024, 512, 8, 2, 1))
    write_layout(os.path.join(OUT, "layout_gpen_2048.txt"), gpen_layout(2048, 512, 8, 2, 1))
    write_layout(os.path.join(OUT, "layout_gfpgan_v1.4.txt"), gfpgan_layout(512, 512, 8, 2, 1))


if __name__ == "__main__":
    main()
