"""animegan.faces() returns the detector's faces as `animegan faces --json` prints them."""

import json
import os

import numpy as np
from PIL import Image

import animegan
from conftest import DATA, cli


def test_faces_equal_cli():
    path = os.path.join(DATA, "astronaut.png")
    run = cli("faces", "--json", path)
    assert run.returncode == 0, run.stderr
    want = json.loads(run.stdout.splitlines()[0])["faces"]
    with Image.open(path) as im:
        got = animegan.faces(np.asarray(im.convert("RGB")))
    assert len(got) == len(want) >= 1
    for g, w in zip(got, want):
        assert abs(g["score"] - w["score"]) < 1e-3
        assert np.allclose(g["box"], w["box"], atol=1e-2)
        assert np.allclose(g["keypoints"], w["keypoints"], atol=1e-2)
        assert np.allclose(g["quad"], w["quad"], atol=1e-2)
    face = got[0]
    assert set(face) == {"score", "box", "keypoints", "quad", "presence", "landmarks"}
    assert len(face["landmarks"]) == 468 and face["presence"] >= 0.5


def test_faces_options_and_no_face():
    with Image.open(os.path.join(DATA, "astronaut.png")) as im:
        pil = im.convert("RGB")
    quick = animegan.faces(pil, landmarks=False, single_pass=True)
    assert quick and quick[0]["landmarks"] is None
    assert animegan.faces(np.zeros((64, 64, 3), np.uint8)) == []
    assert animegan.faces(np.zeros((1, 1, 3), np.uint8)) == []
