#!/usr/bin/env python3
"""make_v3_gallery.py - the style gallery of docs/gallery.md: every test photo in every
bundled style, to choose the default model.

Offline tool (Debian's Python 3, numpy, PyTorch, PIL). Each photo of tests/data/ is reduced
(Lanczos) to a long side of 512 and cropped to sides that are multiples of 16, then converted
by the C engine, `build/animegan convert --model M` (fp32), for hayao (v2), hayao-v3,
shinkai-v3 and cute-v3 (`--torch` uses the PyTorch reference of tools/v3_reference.py for
the v3 styles instead: equal within 1 level).
Every panel is reduced to 256 px on its long side and the row (photo, then the four styles)
written as one JPEG (quality 85) to docs/gallery/<photo>.jpg. It also prints, per photo,
what the hayao-v3 LADE eps changes (the file's 0 against the 1e-5 we use).

  make build/animegan && /usr/bin/python3 tools/make_v3_gallery.py [--torch]
"""

import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from PIL import Image

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import v3_reference as R  # noqa: E402

ROOT = os.path.dirname(TOOLS)
DATA = os.path.join(ROOT, "tests", "data")
OUT = os.path.join(ROOT, "docs", "gallery")
PHOTOS = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "bryandlee_inputs_1.jpg",
          "bryandlee_inputs_2.jpg", "bryandlee_inputs_3.jpg"]
STYLES = ["hayao", "hayao-v3", "shinkai-v3", "cute-v3"]
PANEL = 256


def prepare(path):
    with Image.open(path) as im:
        im = im.convert("RGB")
        w, h = im.size
        s = 512.0 / max(w, h)
        nw, nh = max(16, round(w * s)), max(16, round(h * s))
        im = im.resize((nw, nh), Image.LANCZOS)
        cw, ch = nw - nw % 16, nh - nh % 16
        x, y = (nw - cw) // 2, (nh - ch) // 2
        im = im.crop((x, y, x + cw, y + ch))
        # no ICC profile: the engine must see the pixels the photo panel shows (libvips
        # would convert a tagged PNG to sRGB; rocket.jpg's profile moves it by ~4 levels)
        im.info.pop("icc_profile", None)
        return im


def run_v3(model, rgb):
    x = (np.asarray(rgb, np.float32) / np.float32(127.5) - 1)[None]
    y = R.run_torch(model, x)[0]
    return y, Image.fromarray(np.clip(np.rint((y + 1) * 127.5), 0, 255).astype(np.uint8))


def panel(im):
    w, h = im.size
    s = PANEL / max(w, h)
    return im.resize((round(w * s), round(h * s)), Image.LANCZOS)


def main():
    use_torch = "--torch" in sys.argv[1:]
    torch.set_num_threads(2)
    os.makedirs(OUT, exist_ok=True)
    models = {k: R.load_generator(os.path.join(ROOT, "models", k + ".safetensors"))
              for k in STYLES if k.endswith("-v3")}
    hayao_eps0 = R.load_generator(os.path.join(ROOT, "models", "hayao-v3.safetensors"),
                                  eps=0.0, att_eps=0.0)
    binary = os.path.join(ROOT, "build", "animegan")
    with tempfile.TemporaryDirectory() as d:
        for photo in PHOTOS:
            rgb = prepare(os.path.join(DATA, photo))
            src = os.path.join(d, "in.png")
            rgb.save(src)
            panels = [panel(rgb)]
            for k in STYLES:
                if k == "hayao" or not use_torch:
                    dst = os.path.join(d, "out.png")
                    subprocess.run([binary, "convert", src, "-o", dst, "--model", k,
                                    "--threads", "2"], check=True, stdout=subprocess.DEVNULL)
                    with Image.open(dst) as im:
                        panels.append(panel(im.convert("RGB")))
                else:
                    panels.append(panel(run_v3(models[k], rgb)[1]))
                if k == "hayao-v3":   # the file's eps 0 against our 1e-5, in PyTorch
                    y, _ = run_v3(models[k], rgb)
                    y0, _ = run_v3(hayao_eps0, rgb)
                    d8 = np.abs(np.rint((y0 + 1) * 127.5) - np.rint((y + 1) * 127.5))
                    print("%s %dx%d hayao-v3 eps 0 vs 1e-5: max abs %.4f, mean %.2g, "
                          "8-bit: max %d levels, %.2f%% of values differ" %
                          (photo, rgb.size[0], rgb.size[1], np.abs(y0 - y).max(),
                           np.abs(y0 - y).mean(), d8.max(), 100.0 * (d8 > 0).mean()))
            gap = 4
            width = sum(p.size[0] for p in panels) + gap * (len(panels) - 1)
            height = max(p.size[1] for p in panels)
            row = Image.new("RGB", (width, height), (255, 255, 255))
            x = 0
            for p in panels:
                row.paste(p, (x, 0))
                x += p.size[0] + gap
            name = os.path.splitext(photo)[0] + ".jpg"
            row.save(os.path.join(OUT, name), quality=85, optimize=True)
            print("docs/gallery/%s %dx%d, %d bytes" % (name, width, height,
                                                       os.path.getsize(os.path.join(OUT, name))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
