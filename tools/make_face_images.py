#!/usr/bin/env python3
"""make_face_images.py - the synthetic face images of tests/data/generated/faces/, with known
answers, from the public-domain tests/data/astronaut.png (numpy + PIL, deterministic):

  scaled.jpg     three copies at 0.6x, 1x and 1.5x on a 1400x800 canvas
  rotated.jpg    copies rotated -30, +30 and +15 degrees (about the face)
  mirrored.jpg   a mirrored copy beside a plain one, both tilted
  border.jpg     one copy whose face is 10 px from the right edge, one from the top
  cut.jpg        a face cut in half by the left edge (bad input: any answer, no crash)
  many.jpg       50 copies in a 10 x 5 grid on 2000x1000 (the --max-faces cap)
  grey.png       astronaut.png in grey, one band

Each copy is the whole photo mapped by a similarity (scale, rotation, mirror, translation),
cut out by a feathered disc around the face and laid on a seeded noise canvas.
answers.txt: one line per copy, `file a b c d e f`, the forward map canvas = (a x + b y + c,
d x + e y + f) of astronaut.png pixel coordinates (a b d e negative-determinant when
mirrored). tests/test_face.c maps the quad it finds on astronaut.png through it.

Usage: /usr/bin/python3 tools/make_face_images.py
"""

import math
import os

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO_ROOT, "tests", "data", "generated", "faces")
FACE_CENTRE = (226.0, 112.0)   # near the astronaut's quad centre (eyes and mouth)
DISC = 150.0                   # radius of the cut-out around it, source pixels


def canvas(w, h, seed):
    rng = np.random.default_rng(seed)
    base = rng.integers(60, 200, size=(h // 16 + 1, w // 16 + 1, 3)).astype(np.uint8)
    img = Image.fromarray(base).resize((w, h), Image.BICUBIC)
    return img.filter(ImageFilter.GaussianBlur(3))


def place(dst, src, scale, angle_deg, centre, mirror=False, disc=DISC):
    """Paste a similarity copy of src with FACE_CENTRE at `centre`; returns the forward map."""
    th = math.radians(angle_deg)
    c, s = math.cos(th) * scale, math.sin(th) * scale
    mx = -1.0 if mirror else 1.0
    # canvas = R S M (p - face) + centre, with M = diag(mx, 1); y down, so a positive angle
    # turns clockwise on screen.
    a, b, d, e = c * mx, -s, s * mx, c
    cx = centre[0] - (a * FACE_CENTRE[0] + b * FACE_CENTRE[1])
    cy = centre[1] - (d * FACE_CENTRE[0] + e * FACE_CENTRE[1])
    det = a * e - b * d
    ia, ib, id_, ie = e / det, -b / det, -d / det, a / det
    inv = (ia, ib, -(ia * cx + ib * cy), id_, ie, -(id_ * cx + ie * cy))
    w, h = dst.size
    rgba = src.convert("RGBA")
    warped = rgba.transform((w, h), Image.AFFINE, inv, resample=Image.BICUBIC)
    mask = Image.new("L", (w, h), 0)
    r = disc * scale
    ImageDraw.Draw(mask).ellipse([centre[0] - r, centre[1] - r, centre[0] + r, centre[1] + r],
                                 fill=255)
    mask = mask.filter(ImageFilter.GaussianBlur(max(2.0, r / 12)))
    alpha = np.minimum(np.asarray(mask, np.uint16), np.asarray(warped)[:, :, 3]).astype(np.uint8)
    dst.paste(warped.convert("RGB"), (0, 0), Image.fromarray(alpha))
    return (a, b, cx, d, e, cy)


def main():
    os.makedirs(OUT, exist_ok=True)
    src = Image.open(os.path.join(REPO_ROOT, "tests", "data", "astronaut.png")).convert("RGB")
    answers = []

    def save(img, name, maps):
        path = os.path.join(OUT, name)
        if name.endswith(".png"):
            img.save(path, optimize=True)
        else:
            img.save(path, quality=90)
        for m in maps:
            answers.append("%s %s" % (name, " ".join("%.6f" % v for v in m)))

    img = canvas(1400, 800, 1)
    maps = [place(img, src, 0.6, 0, (200, 250)), place(img, src, 1.0, 0, (600, 350)),
            place(img, src, 1.5, 0, (1080, 420))]
    save(img, "scaled.jpg", maps)

    img = canvas(1200, 700, 2)
    maps = [place(img, src, 1.0, -30, (220, 300)), place(img, src, 1.0, 30, (600, 380)),
            place(img, src, 0.8, 15, (980, 320))]
    save(img, "rotated.jpg", maps)

    img = canvas(900, 500, 3)
    maps = [place(img, src, 0.9, 10, (250, 250), mirror=True),
            place(img, src, 0.9, -10, (650, 250))]
    save(img, "mirrored.jpg", maps)

    # Faces near the border: the face's half-width is about 55 source pixels.
    img = canvas(800, 600, 4)
    maps = [place(img, src, 0.8, 0, (800 - 10 - 55 * 0.8, 330)),
            place(img, src, 0.8, 0, (300, 10 + 65 * 0.8))]
    save(img, "border.jpg", maps)

    img = canvas(600, 400, 5)
    place(img, src, 1.0, 0, (20, 200))
    save(img, "cut.jpg", [])

    img = canvas(2000, 1000, 6)
    for i in range(50):
        place(img, src, 1.0, (i * 37) % 21 - 10, (100 + 200 * (i % 10), 100 + 200 * (i // 10)),
              disc=95)
    save(img, "many.jpg", [])

    save(Image.fromarray(np.asarray(src.convert("L"))), "grey.png", [])  # no ICC profile

    with open(os.path.join(OUT, "answers.txt"), "w") as f:
        f.write("# tools/make_face_images.py: file, then the forward map a b c d e f of "
                "astronaut.png into it\n")
        f.write("\n".join(answers) + "\n")
    print("wrote %s: %d copies with answers" % (OUT, len(answers)))


if __name__ == "__main__":
    main()
