#!/usr/bin/python3
"""Make the face-identity test photos (issue 31 item 6, tests/test_face_identify.c) from the
public-domain faces.

    /usr/bin/python3 tools/make_identity_images.py FACES_DIR ASTRONAUT tests/data/faces/identity

FACES_DIR is ../shared/testdata/faces, ASTRONAUT tests/data/astronaut.png. Writes, downscaled so
the tests run fast (each a different photo from tests/data/faces/obama.jpg and biden.jpg, the
references):
  obama_speech.jpg     Obama at a lectern, mouth open (obama_speech.jpg, head and shoulders)
  obama_standing.jpg   Obama in the Oval Office (obama_standing.jpg, head and shoulders)
  biden_standing.jpg   Biden full length (biden_standing.jpg, head and shoulders)
  obama_mirrored.jpg   tests/data/faces/obama.jpg's source mirrored, recropped, recompressed (q 40)
  obama_tilted.jpg     the same crop (not mirrored) turned 30 degrees
  rally.jpg            Biden (left) and Obama (right) waving on a stage, 1000 px wide
  group.jpg            three real faces pasted side by side: Biden (from biden_standing.jpg),
                       Eileen Collins (astronaut.png), Obama (from obama_standing.jpg)
Deterministic: same inputs, same bytes.
"""
import os
import sys

from PIL import Image, ImageOps

# (file, crop box (x0, y0, x1, y1) in the original, output width)
CROPS = {
    "obama_speech.jpg": ("obama_speech.jpg", (40, 140, 590, 750), 300),
    "obama_standing.jpg": ("obama_standing.jpg", (500, 170, 1090, 760), 300),
    "biden_standing.jpg": ("biden_standing.jpg", (280, 90, 900, 710), 300),
}


def crop(faces, name, box, width):
    im = Image.open(os.path.join(faces, name)).convert("RGB").crop(box)
    return im.resize((width, round(width * im.height / im.width)), Image.LANCZOS)


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    faces, astronaut, out = sys.argv[1:]
    os.makedirs(out, exist_ok=True)
    tiles = {}
    for name, (src, box, width) in CROPS.items():
        tiles[name] = crop(faces, src, box, width)
        tiles[name].save(os.path.join(out, name), quality=90)
    mirrored = ImageOps.mirror(crop(faces, "obama.jpg", (160, 20, 820, 680), 280))
    mirrored.save(os.path.join(out, "obama_mirrored.jpg"), quality=40)
    tilted = crop(faces, "obama.jpg", (160, 20, 820, 680), 280).rotate(
        30, resample=Image.BICUBIC, expand=True, fillcolor=(128, 128, 128))
    tilted.save(os.path.join(out, "obama_tilted.jpg"), quality=90)
    rally = Image.open(os.path.join(faces, "rally.jpg")).convert("RGB")
    rally.resize((1000, round(1000 * rally.height / rally.width)), Image.LANCZOS).save(
        os.path.join(out, "rally.jpg"), quality=88)
    collins = Image.open(astronaut).convert("RGB").crop((120, 0, 400, 280)).resize((300, 300),
                                                                                  Image.LANCZOS)
    row = [tiles["biden_standing.jpg"], collins, tiles["obama_standing.jpg"]]
    group = Image.new("RGB", (sum(t.width for t in row), max(t.height for t in row)), (40, 40, 40))
    x = 0
    for t in row:
        group.paste(t, (x, 0))
        x += t.width
    group.save(os.path.join(out, "group.jpg"), quality=90)
    return 0


if __name__ == "__main__":
    sys.exit(main())
