#!/usr/bin/python3
"""make_upscaler_arch_fixtures.py SPANDREL_DIR - golden fixtures of the upscaler architectures
people download (tests/fixtures/upscale/arch/), run by chaiNNer-org/spandrel's own code.

SPANDREL_DIR is a checkout of github.com/chaiNNer-org/spandrel (the libs/spandrel/spandrel
package is imported from it; nothing of it is copied here). For each case a network is built
with spandrel's class at a reduced size (few blocks and features), given seeded weights, saved
in the case's key layout and file format (.pth zip or legacy, optionally inside "params_ema"
or "params", or .safetensors written here), then loaded back through spandrel's Architecture
.load (its layout detection and key conversion) and run in float64 eval mode on a photo crop.

RRDBNet's growth channels are fixed at 32 in spandrel's class; the fixtures use 4 (B.RRDB is
wrapped to pass gc=4), as files with other growths exist and the layout does not change.

Each expected result is an .agup file, as tools/make_upscale_fixtures.py writes them:
"AGUP", u32 version 1, u32 width, height, scale, char[64] model file relative to the
repository root, the input RGB u8 (H, W, 3), the output in pixel units as float32 (sH, sW, 3)
unclamped, and the output u8 (clamped to [0, 1], x 255, rounded). Deterministic (seeded;
weights are k/16 multiples of one scale per tensor). From the repository root:
  /usr/bin/python3 tools/make_upscaler_arch_fixtures.py /tmp/spandrel
"""

import json
import os
import struct
import sys
import types
from collections import OrderedDict

import numpy as np
import torch
from PIL import Image

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "upscale", "arch")
GROWTH = 4


def import_spandrel(checkout):
    """spandrel's architectures without its package __init__ (which imports every
    architecture and the safetensors package)."""
    pkg = types.ModuleType("spandrel")
    pkg.__path__ = [os.path.join(checkout, "libs", "spandrel", "spandrel")]
    sys.modules["spandrel"] = pkg
    from spandrel.architectures.__arch_helpers import block as B
    rrdb = B.RRDB
    B.RRDB = lambda *a, **k: rrdb(*a, **dict(k, gc=GROWTH))
    from spandrel.architectures import Compact, ESRGAN, PLKSR, SPAN
    return types.SimpleNamespace(ESRGAN=ESRGAN, Compact=Compact, SPAN=SPAN, PLKSR=PLKSR)


def seeded_weights(net, seed):
    """Every parameter k/16 x a per-tensor scale (k in -16..16): conv weights 1/sqrt(fan-in),
    the rest 0.1, PReLU slopes |k|/32; outputs stay within a few units."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in net.named_parameters():
            k = torch.randint(-16, 17, p.shape, generator=g).double() / 16
            if p.dim() == 4:
                scale = 1.0 / np.sqrt(p.shape[1] * p.shape[2] * p.shape[3])
            elif p.dim() == 1 and name.endswith("weight") and "norm" not in name:
                k, scale = k.abs() / 2, 1.0  # PReLU slopes
            else:
                scale = 0.1
            p.copy_((k * scale).float())


# ---- RRDBNet key layouts (from the old layout spandrel's class uses) -------------------------

def rrdb_rename(sd, layout, blocks, ups):
    """The old-layout state_dict `sd` in `layout`: "old", "new" (Real-ESRGAN) or "bsrgan"."""
    if layout == "old":
        return OrderedDict(sd)
    names = {"new": ("conv_first", "body.%d.rdb%d.conv%d", "conv_body", "conv_up%d", "conv_hr"),
             "bsrgan": ("conv_first", "RRDB_trunk.%d.RDB%d.conv%d", "trunk_conv", "upconv%d",
                        "HRconv")}[layout]
    first, block, body, up, hr = names
    out = OrderedDict()
    for key, v in sd.items():
        part, kind = key.rsplit(".", 1)
        f = part.split(".")
        if part == "model.0":
            new = first
        elif part == "model.1.sub.%d" % blocks:
            new = body
        elif part.startswith("model.1.sub."):
            new = block % (int(f[3]), int(f[4][3:]), int(f[5][4:]))
        elif int(f[1]) == 3 * ups + 2:
            new = hr
        elif int(f[1]) == 3 * ups + 4:
            new = "conv_last"
        else:
            new = up % (int(f[1]) // 3)
        out[new + "." + kind] = v
    return out


# ---- files --------------------------------------------------------------------------------

def write_safetensors(path, sd):
    header, blobs, offset = {}, [], 0
    for name, t in sd.items():
        data = t.detach().contiguous().float().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def save(path, sd, wrap, legacy):
    sd = OrderedDict((k, v.detach().clone()) for k, v in sd.items())
    if path.endswith(".safetensors"):
        write_safetensors(path, sd)
    else:
        torch.save({wrap: sd} if wrap else sd, path,
                   _use_new_zipfile_serialization=not legacy)


def crop(photo, origin, size):
    img = np.asarray(Image.open(os.path.join(ROOT, "tests", "data", photo)).convert("RGB"))
    (x, y), (w, h) = origin, size
    return np.ascontiguousarray(img[y:y + h, x:x + w])


def run(net, rgb):
    x = torch.from_numpy(rgb).double().div(255).permute(2, 0, 1)[None]
    with torch.no_grad():
        y = net.double().eval()(x)[0].permute(1, 2, 0)
    return (y * 255).float().numpy(), (y.clamp(0, 1) * 255).round().byte().numpy()


def write_agup(path, model_rel, scale, rgb, pix, out8):
    h, w, _ = rgb.shape
    assert pix.shape == (h * scale, w * scale, 3) and out8.shape == pix.shape, pix.shape
    head = b"AGUP" + struct.pack("<IIII", 1, w, h, scale) + model_rel.encode().ljust(64, b"\0")
    with open(path, "wb") as f:
        f.write(head + rgb.astype(np.uint8).tobytes())
        f.write(np.ascontiguousarray(pix, dtype="<f4").tobytes())
        f.write(np.ascontiguousarray(out8, dtype=np.uint8).tobytes())


# ---- the cases ----------------------------------------------------------------------------

def rrdb(sp, feat, blocks, scale, shuffle, layout):
    """spandrel's RRDBNet (its `scale` counts the unshuffled input's upsampling)."""
    ups = {1: 0, 2: 1, 4: 2, 8: 3}[scale * (shuffle or 1)]
    net = sp.ESRGAN.ESRGAN(in_nc=3 * (shuffle or 1) ** 2, out_nc=3, num_filters=feat,
                           num_blocks=blocks, scale=scale * (shuffle or 1),
                           shuffle_factor=shuffle)
    return net, lambda sd: rrdb_rename(sd, layout, blocks, ups), sp.ESRGAN.ESRGANArch()


def compact(sp, feat, convs, scale):
    net = sp.Compact.Compact(num_in_ch=3, num_out_ch=3, num_feat=feat, num_conv=convs,
                             upscale=scale)
    return net, OrderedDict, sp.Compact.CompactArch()


def span(sp, feat, scale, norm):
    """With its input normalisation ((x - mean) * 255) the first conv's weights are divided
    by 255, as trained ones are small, so the outputs stay in a few units."""
    net = sp.SPAN.SPAN(num_in_ch=3, num_out_ch=3, feature_channels=feat, upscale=scale, norm=norm)

    def layout(sd):
        sd = OrderedDict(sd)
        for key in ("conv_1.conv.0.weight", "conv_1.sk.weight") if norm else ():
            sd[key] = sd[key] / 255
        return sd
    return net, layout, sp.SPAN.SPANArch()


def plksr(sp, dim, blocks, scale, kernel, use_ea, layer_norm=False, dysample=False):
    net = sp.PLKSR.RealPLKSR(dim=dim, n_blocks=blocks, upscaling_factor=scale,
                             kernel_size=kernel, split_ratio=0.25, use_ea=use_ea,
                             layer_norm=layer_norm, dysample=dysample)
    return net, OrderedDict, sp.PLKSR.PLKSRArch()


# name, network, file, wrapper, legacy pickle, input size, photo, crop origin
CASES = [
    ("rrdb-old-x4", lambda sp: rrdb(sp, 4, 2, 4, None, "old"), ".pth", None, False,
     (11, 9), "astronaut.png", (180, 90)),
    ("rrdb-old-x1", lambda sp: rrdb(sp, 4, 1, 1, None, "old"), ".pth", None, True,
     (13, 10), "chelsea.png", (220, 60)),
    ("rrdb-old-x2", lambda sp: rrdb(sp, 6, 1, 2, None, "old"), ".pth", None, False,
     (12, 9), "coffee.png", (150, 100)),
    ("rrdb-old-x8", lambda sp: rrdb(sp, 4, 1, 8, None, "old"), ".safetensors", None, False,
     (8, 8), "astronaut.png", (240, 200)),
    ("rrdb-bsrgan-x4", lambda sp: rrdb(sp, 4, 1, 4, None, "bsrgan"), ".pth", None, False,
     (10, 9), "chelsea.png", (260, 40)),
    ("rrdb-new-x2", lambda sp: rrdb(sp, 4, 1, 2, 2, "new"), ".safetensors", None, False,
     (14, 10), "coffee.png", (300, 120)),
    ("rrdb-new-x1", lambda sp: rrdb(sp, 4, 1, 1, 4, "new"), ".pth", "params", False,
     (16, 12), "astronaut.png", (200, 120)),
    ("rrdb-new-x4", lambda sp: rrdb(sp, 4, 1, 4, None, "new"), ".pth", "params_ema", False,
     (11, 9), "coffee.png", (160, 140)),
    ("rrdb-new-x4", None, ".safetensors", None, False, None, None, None),
    ("compact-x1", lambda sp: compact(sp, 8, 4, 1), ".pth", "params", False,
     (15, 11), "chelsea.png", (200, 60)),
    ("compact-x2", lambda sp: compact(sp, 8, 4, 2), ".safetensors", None, False,
     (13, 9), "astronaut.png", (150, 100)),
    ("span-x4", lambda sp: span(sp, 4, 4, True), ".safetensors", None, False,
     (11, 9), "chelsea.png", (230, 80)),
    ("span-x2", lambda sp: span(sp, 4, 2, False), ".pth", "params_ema", False,
     (13, 10), "coffee.png", (180, 110)),
    ("realplksr-x4", lambda sp: plksr(sp, 8, 2, 4, 17, True), ".safetensors", None, False,
     (23, 19), "astronaut.png", (170, 110)),
    ("realplksr-x2", lambda sp: plksr(sp, 8, 1, 2, 13, False), ".pth", "params_ema", False,
     (21, 17), "chelsea.png", (210, 70)),
    ("realplksr-ln-x4", lambda sp: plksr(sp, 8, 1, 4, 9, True, True), ".safetensors", None, False,
     (12, 10), "coffee.png", (120, 90)),
    # DySample (to_img.*): 4 groups and the end conv at x4, 3 groups at x3, no end conv at x1
    ("realplksr-dys-x4", lambda sp: plksr(sp, 8, 1, 4, 9, True, True, True), ".safetensors",
     None, False, (13, 11), "astronaut.png", (190, 130)),
    ("realplksr-dys-x3", lambda sp: plksr(sp, 8, 1, 3, 7, False, False, True), ".pth",
     "params_ema", False, (12, 9), "chelsea.png", (240, 50)),
    ("realplksr-dys-x1", lambda sp: plksr(sp, 8, 1, 1, 7, True, True, True), ".pth", None,
     False, (17, 13), "coffee.png", (140, 60)),
]


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sp = import_spandrel(sys.argv[1])
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    last_sd = None
    for i, (name, make, ext, wrap, legacy, size, photo, origin) in enumerate(CASES):
        path = os.path.join(OUT, name + ext)
        rel = os.path.relpath(path, ROOT)
        if make is None:  # the previous case's weights in another format, same expected output
            save(path, last_sd, wrap, legacy)
            print("%s: the same weights" % rel)
            continue
        net, layout, arch = make(sp)
        seeded_weights(net, 20261206 + i)
        sd = layout(net.state_dict())
        save(path, sd, wrap, legacy)
        last_sd = sd
        desc = arch.load(OrderedDict((k, v.clone()) for k, v in sd.items()))
        rgb = crop(photo, origin, size)
        pix, out8 = run(desc.model, rgb)
        write_agup(os.path.join(OUT, name + ".agup"), rel, desc.scale, rgb, pix, out8)
        print("%s: %s, %d tensors, %dx%d x%d, output %.1f..%.1f, %d bytes"
              % (rel, " ".join(desc.tags), len(sd), size[0], size[1], desc.scale, pix.min(),
                 pix.max(), os.path.getsize(path)))


if __name__ == "__main__":
    main()
