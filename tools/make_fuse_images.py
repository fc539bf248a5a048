#!/usr/bin/env python3
"""make_fuse_images.py - the face-fusion test photos of tests/data/generated/fuse/, from the
public-domain tests/data/astronaut.png (numpy + PIL, deterministic). The suite has one real
face, so the source is that face with another shape and colour:

  source.jpg   astronaut.png with the face widened 1.3x and shortened to 0.8x about its centre
               (a Gaussian-weighted warp, identity far from the face), the eyes' region
               pulled apart a little more, warmer and darker skin; the whole then rotated 12
               degrees and scaled 1.25x on a 700x700 canvas, so the similarity alignment has
               work to do. Its landmarks, similarity-aligned, are not the target's shape.
  small.jpg    astronaut.png shrunk to 160x160 (the face's box under 64 px: refused)

Usage: /usr/bin/python3 tools/make_fuse_images.py
"""

import math
import os

import numpy as np
from PIL import Image

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(REPO_ROOT, "tests", "data", "astronaut.png")
OUT = os.path.join(REPO_ROOT, "tests", "data", "generated", "fuse")
CENTRE = (226.0, 125.0)  # between the eyes and the mouth of astronaut.png
RADIUS = 70.0            # the warp's Gaussian falloff


def bilinear(img, xs, ys):
    h, w = img.shape[:2]
    xs = np.clip(xs, 0, w - 1.001)
    ys = np.clip(ys, 0, h - 1.001)
    x0 = np.floor(xs).astype(int)
    y0 = np.floor(ys).astype(int)
    fx = (xs - x0)[..., None]
    fy = (ys - y0)[..., None]
    a = img[y0, x0] * (1 - fx) + img[y0, x0 + 1] * fx
    b = img[y0 + 1, x0] * (1 - fx) + img[y0 + 1, x0 + 1] * fx
    return a * (1 - fy) + b * fy


def reshape_face(img):
    h, w = img.shape[:2]
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64) + 0.5
    dx, dy = xs - CENTRE[0], ys - CENTRE[1]
    wgt = np.exp(-(dx * dx + dy * dy) / (2 * RADIUS * RADIUS))
    sx, sy = 1.3, 0.8
    src_x = xs + wgt * (CENTRE[0] + dx / sx - xs)
    src_y = ys + wgt * (CENTRE[1] + dy / sy - ys)
    return bilinear(img, src_x - 0.5, src_y - 0.5)


def main():
    os.makedirs(OUT, exist_ok=True)
    img = np.asarray(Image.open(SRC).convert("RGB")).astype(np.float64)
    face = reshape_face(img)
    face = face * np.array([1.0, 0.88, 0.75]) * 0.92  # warmer, darker
    # rotate 12 degrees and scale 1.25 about the face centre onto 700x700
    W = H = 700
    ang, s = math.radians(12.0), 1.25
    ys, xs = np.mgrid[0:H, 0:W].astype(np.float64) + 0.5
    cx, cy = W / 2, H / 2 - 60
    ux, uy = (xs - cx) / s, (ys - cy) / s
    src_x = CENTRE[0] + math.cos(ang) * ux + math.sin(ang) * uy
    src_y = CENTRE[1] - math.sin(ang) * ux + math.cos(ang) * uy
    out = bilinear(face, src_x - 0.5, src_y - 0.5)
    Image.fromarray(np.clip(out + 0.5, 0, 255).astype(np.uint8)).save(
        os.path.join(OUT, "source.jpg"), quality=92)
    small = Image.open(SRC).convert("RGB").resize((160, 160), Image.LANCZOS)
    small.save(os.path.join(OUT, "small.jpg"), quality=92)


if __name__ == "__main__":
    main()
