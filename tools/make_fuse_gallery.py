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

from PIL import Image

FACES = "tests/data/faces"
OUT = "docs/gallery/fusion"
ROWS = [  # name, source, target, crop of the target (x0, y0, x1, y1)
    ("obama_into_biden", "obama.jpg", "biden.jpg", (150, 30, 450, 390)),
    ("biden_into_obama", "biden.jpg", "obama.jpg", (140, 20, 400, 330)),
    ("biden_into_obama_hair", "biden.jpg", "obama_hair.png", (140, 20, 400, 330)),
    ("obama_into_biden_hand", "obama.jpg", "biden_hand.png", (80, 30, 450, 390)),
]
RATIOS = ["0.3", "0.7", "1"]
HEIGHT = 240


def panel(path, crop=None):
    im = Image.open(path).convert("RGB")
    if crop:
        im = im.crop(crop)
    return im.resize((round(im.width * HEIGHT / im.height), HEIGHT), Image.LANCZOS)


def main():
    os.makedirs(OUT, exist_ok=True)
    env = dict(os.environ, ANIMEGAN_MODEL_PATH=os.path.abspath("models"))
    with tempfile.TemporaryDirectory() as tmp:
        for name, source, target, crop in ROWS:
            s, t = os.path.join(FACES, source), os.path.join(FACES, target)
            panels = [panel(s), panel(t, crop)]
            for r in RATIOS:
                out = os.path.join(tmp, "%s_%s.png" % (name, r))
                subprocess.run(["build/animegan", "fuse", "-s", s, "-T", t, "-o", out, "-r", r],
                               check=True, env=env)
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
