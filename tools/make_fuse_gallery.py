"""The fusion gallery of docs/fusion.md (issue 31): public-domain faces of tests/data/faces/
fused by the C command (build/animegan fuse, defaults but the ratio), each row the source,
the target, ratios 0.3, 0.7 and 1, every panel the target's face region cropped and reduced
to 240 px high. Run from the repository root after `make build/animegan`:

    /usr/bin/python3 tools/make_fuse_gallery.py
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

FACES = "tests/data/faces"
OUT = "docs/gallery/fusion"
# A light from one side (issue 31 item 5): the RGB times exp(k tanh((cx - x) / w)), as
# test_fuse_quality's test_lighting (there cx and w from the landmarks; here the face's
# centre and width read off the photo): (centre x, face width, k).
LIGHTS = {"obama_lit_left.png": ("obama.jpg", 262, 250, 0.2),
          "biden_lit_right.png": ("biden.jpg", 300, 270, -0.2)}
ROWS = [  # name, source, target, crop of the target (x0, y0, x1, y1), extra options
    ("obama_into_biden", "obama.jpg", "biden.jpg", (150, 30, 450, 390), []),
    ("biden_into_obama", "biden.jpg", "obama.jpg", (140, 20, 400, 330), []),
    ("biden_into_obama_hair", "biden.jpg", "obama_hair.png", (140, 20, 400, 330), []),
    ("obama_into_biden_hand", "obama.jpg", "biden_hand.png", (80, 30, 450, 390), []),
    ("obama_small_into_biden_none", "obama_small.png", "biden.jpg", (190, 110, 410, 400),
     ["--enhance", "none"]),
    ("obama_small_into_biden", "obama_small.png", "biden.jpg", (190, 110, 410, 400), []),
    ("obama_turned_into_biden", "obama_turned.jpg", "biden.jpg", (150, 30, 450, 390), []),
    ("obama_lit_left_into_biden_lit_right", "obama_lit_left.png", "biden_lit_right.png",
     (150, 30, 450, 390), []),
]
RATIOS = ["0.3", "0.7", "1"]
HEIGHT = 240


def panel(path, crop=None):
    im = Image.open(path).convert("RGB")
    if crop:
        im = im.crop(crop)
    return im.resize((round(im.width * HEIGHT / im.height), HEIGHT), Image.LANCZOS)


def light(src, dst, cx, width, k):
    im = np.asarray(Image.open(src).convert("RGB"), dtype=np.float64)
    x = np.arange(im.shape[1]) + 0.5
    gain = np.exp(k * np.tanh((cx - x) / (0.15 * width)))
    Image.fromarray(np.clip(im * gain[None, :, None] + 0.5, 0, 255).astype(np.uint8)).save(dst)


def main():
    os.makedirs(OUT, exist_ok=True)
    env = dict(os.environ, ANIMEGAN_MODEL_PATH=os.path.abspath("models"))
    with tempfile.TemporaryDirectory() as tmp:
        for name, (src, cx, width, k) in LIGHTS.items():
            light(os.path.join(FACES, src), os.path.join(tmp, name), cx, width, k)
        for name, source, target, crop, extra in ROWS:
            s, t = (os.path.join(tmp if f in LIGHTS else FACES, f) for f in (source, target))
            panels = [panel(s), panel(t, crop)]
            for r in RATIOS:
                out = os.path.join(tmp, "%s_%s.png" % (name, r))
                subprocess.run(["build/animegan", "fuse", "-s", s, "-T", t, "-o", out, "-r", r] +
                               extra, check=True, env=env)
                panels.append(panel(out, crop))
            row = Image.new("RGB", (sum(p.width for p in panels) + 4 * (len(panels) - 1), HEIGHT),
                            "white")
            x = 0
            for p in panels:
                row.paste(p, (x, 0))
                x += p.width + 4
            row.save(os.path.join(OUT, name + ".jpg"), quality=88)
            print(name, row.size, file=sys.stderr)


if __name__ == "__main__":
    main()
