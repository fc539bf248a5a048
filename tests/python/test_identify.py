"""fuse's target_like / source_like (issue 31 item 6): the face of that person, as the CLI's
--target-like picks it, bit for bit; a like photo without a face and a double choice refused."""

import os

import numpy as np
import pytest

import animegan
from conftest import DATA, cli

FACES = os.path.join(DATA, "faces")
IDENT = os.path.join(FACES, "identity")


def load(path):
    return animegan.decode(open(path, "rb").read())


def test_target_like_equals_cli(tmp_path):
    src, dst = os.path.join(IDENT, "obama_speech.jpg"), os.path.join(IDENT, "rally.jpg")
    like = os.path.join(FACES, "obama.jpg")
    want = tmp_path / "cli.png"
    run = cli("fuse", "-s", src, "-T", dst, "--target-like", like, "-o", str(want), "-t", "2")
    assert run.returncode == 0, run.stderr
    got = animegan.fuse(load(src), load(dst), target_like=load(like))
    from PIL import Image

    with Image.open(want) as im:
        assert np.array_equal(np.asarray(got), np.asarray(im))
    # Biden's face is the other one: another result.
    other = animegan.fuse(load(src), load(dst), target_like=load(os.path.join(FACES, "biden.jpg")))
    assert not np.array_equal(np.asarray(got), np.asarray(other))


def test_like_errors():
    face = load(os.path.join(DATA, "astronaut.png"))
    blank = np.zeros((64, 64, 3), np.uint8)
    with pytest.raises(animegan.InputError, match="target_like: no face found"):
        animegan.fuse(face, face, target_like=blank)
    with pytest.raises(animegan.InputError, match="both choose the face"):
        animegan.fuse(face, face, target_face=2, target_like=face)
