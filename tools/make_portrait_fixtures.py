#!/usr/bin/env python3
"""make_portrait_fixtures.py - PIL references for enlarging portrait crops (src/image/enlarge.c).

Offline tool; run with Debian's Python (python3-pil):
  /usr/bin/python3 tools/make_portrait_fixtures.py
face2paint, which portrait mode follows, crops the centre square and resizes it with PIL's
Image.LANCZOS; when the square is smaller than the output size that enlarges. Writes into
tests/fixtures/ (deterministic, byte-identical on a rerun):

  portrait_chelsea_320.png   tests/data/chelsea.png (451x300): its 300x300 square -> 320x320
  portrait_small.png         chelsea reduced 10x by box averaging (45x30): a small input
  portrait_small_150.png     portrait_small.png: its 30x30 square -> 150x150
"""

import os
import sys

from PIL import Image

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures")


def face2paint_resize(img, size):
    """bryandlee's face2paint without the model: centre square, then LANCZOS to size."""
    w, h = img.size
    s = min(w, h)
    img = img.crop(((w - s) // 2, (h - s) // 2, (w + s) // 2, (h + s) // 2))
    return img.resize((size, size), Image.LANCZOS)


def main():
    with Image.open(os.path.join(ROOT, "tests", "data", "chelsea.png")) as im:
        chelsea = im.convert("RGB")
    small = chelsea.crop((0, 0, 450, 300)).reduce(10)
    outputs = {
        "portrait_chelsea_320.png": face2paint_resize(chelsea, 320),
        "portrait_small.png": small,
        "portrait_small_150.png": face2paint_resize(small, 150),
    }
    for name, img in outputs.items():
        path = os.path.join(OUT, name)
        img.save(path, optimize=True)
        print("%-26s %dx%d %6d bytes" % (name, img.size[0], img.size[1], os.path.getsize(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
