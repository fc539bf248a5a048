#!/usr/bin/python3
"""Make the face-fusion test photos with occluders (issue 31), from the public-domain faces.

    /usr/bin/python3 tools/make_fuse_occluders.py FACES_DIR tests/data/faces

FACES_DIR holds obama.jpg and biden.jpg (../shared/testdata/faces). Writes, in the output
directory:
  biden.jpg, obama.jpg        the portraits, downscaled (600 and 520 px) so tests run fast
  biden_hand.png              biden.jpg with a real hand over the cheek: Obama's hand cut
                              from obama.jpg (his crossed arms; the skin told from the navy
                              suit by colour), turned so the fingers reach into the face
  obama_hair.png              obama.jpg with strands of real hair across the forehead and a
                              cheek: Biden's grey side hair cut from biden.jpg along curved,
                              tapering strand shapes
  *_mask.png                  the occluder of each (255 where it covers the face at least half)
Deterministic: same inputs, same bytes.
"""
import math
import os
import sys

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def portraits(faces):
    biden = Image.open(os.path.join(faces, "biden.jpg")).convert("RGB").resize((600, 600), Image.LANCZOS)
    obama = Image.open(os.path.join(faces, "obama.jpg")).convert("RGB")
    obama = obama.crop((130, 0, 780, 650)).resize((520, 520), Image.LANCZOS)
    return biden, obama


def hand(faces):
    """Obama's hand (RGB) and its alpha, pointing right, from obama.jpg."""
    im = Image.open(os.path.join(faces, "obama.jpg")).convert("RGB").crop((540, 740, 790, 940))
    a = np.asarray(im).astype(np.int32)
    skin = (a[..., 0] > 70) & (a[..., 0] > a[..., 2] + 5)
    m = Image.fromarray((skin * 255).astype(np.uint8))
    m = m.filter(ImageFilter.MaxFilter(5)).filter(ImageFilter.MinFilter(5))  # close the creases
    m = m.filter(ImageFilter.MinFilter(3)).filter(ImageFilter.MaxFilter(3))  # drop specks
    return im, m.filter(ImageFilter.GaussianBlur(0.8))


def lay(base, layer, alpha, pos):
    out = base.copy()
    out.paste(layer, pos, alpha)
    full = Image.new("L", base.size, 0)
    full.paste(alpha, pos)
    mask = full.point(lambda v: 255 if v >= 128 else 0)
    return out, mask


def strand_polygon(p0, p1, p2, width, steps=40):
    """A tapering strand along the quadratic Bezier p0 -> p2 (control p1)."""
    left, right = [], []
    for i in range(steps + 1):
        t = i / steps
        x = (1 - t) ** 2 * p0[0] + 2 * (1 - t) * t * p1[0] + t * t * p2[0]
        y = (1 - t) ** 2 * p0[1] + 2 * (1 - t) * t * p1[1] + t * t * p2[1]
        dx = 2 * (1 - t) * (p1[0] - p0[0]) + 2 * t * (p2[0] - p1[0])
        dy = 2 * (1 - t) * (p1[1] - p0[1]) + 2 * t * (p2[1] - p1[1])
        n = math.hypot(dx, dy) or 1
        half = width * (1 - 0.8 * t) / 2
        left.append((x - dy / n * half, y + dx / n * half))
        right.append((x + dy / n * half, y - dx / n * half))
    return left + right[::-1]


def hair(faces, size):
    """Biden's grey hair (RGB, the size of the target) and strand alpha over Obama's face."""
    tex = Image.open(os.path.join(faces, "biden.jpg")).convert("RGB").crop((385, 180, 445, 370))
    tex = tex.resize((tex.size[0] * size[1] // tex.size[1], size[1]), Image.LANCZOS)
    layer = Image.new("RGB", size)
    for x in range(0, size[0], tex.size[0]):  # side hair, tiled, every other one mirrored
        t = tex if (x // tex.size[0]) % 2 == 0 else tex.transpose(Image.FLIP_LEFT_RIGHT)
        layer.paste(t, (x, 0))
    a = Image.new("L", size, 0)
    d = ImageDraw.Draw(a)
    strands = [  # bangs from above the hairline across the forehead, one over a cheek
        ((250, 30), (230, 110), (180, 170), 60),
        ((290, 30), (300, 100), (250, 175), 50),
        ((330, 40), (350, 110), (330, 170), 46),
        ((230, 40), (190, 160), (205, 300), 34),
    ]
    for p0, p1, p2, wdt in strands:
        d.polygon(strand_polygon(p0, p1, p2, wdt), fill=255)
    return layer, a.filter(ImageFilter.GaussianBlur(0.8))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    faces, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    biden, obama = portraits(faces)
    biden.save(os.path.join(out, "biden.jpg"), quality=92)
    obama.save(os.path.join(out, "obama.jpg"), quality=92)
    biden = Image.open(os.path.join(out, "biden.jpg")).convert("RGB")  # what the tests read
    obama = Image.open(os.path.join(out, "obama.jpg")).convert("RGB")
    h, ha = hand(faces)
    h, ha = h.rotate(-25, Image.BICUBIC, expand=True), ha.rotate(-25, Image.BICUBIC, expand=True)
    h, ha = h.resize((h.size[0] * 3 // 4, h.size[1] * 3 // 4), Image.LANCZOS), ha.resize(
        (ha.size[0] * 3 // 4, ha.size[1] * 3 // 4), Image.LANCZOS)
    im, mask = lay(biden, h, ha, (95, 195))
    im.save(os.path.join(out, "biden_hand.png"))
    mask.save(os.path.join(out, "biden_hand_mask.png"))
    layer, a = hair(faces, obama.size)
    im, mask = lay(obama, layer, a, (0, 0))
    im.save(os.path.join(out, "obama_hair.png"))
    mask.save(os.path.join(out, "obama_hair_mask.png"))


if __name__ == "__main__":
    main()
