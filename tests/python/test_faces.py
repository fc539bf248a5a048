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


def test_fuse_equals_cli(tmp_path):
    src = os.path.join(DATA, "generated", "fuse", "source.jpg")
    dst = os.path.join(DATA, "astronaut.png")
    want = tmp_path / "cli.png"
    run = cli("fuse", "--source", src, "--target", dst, "-o", str(want), "--size", "384",
              "--mode", "blend", "-t", "2")
    assert run.returncode == 0, run.stderr
    source = animegan.decode(open(src, "rb").read())
    with Image.open(dst) as im:
        target = im.convert("RGB")
    got = animegan.fuse(source, target, size=384, mode="blend")
    assert isinstance(got, Image.Image) and got.size == (384, 384)
    with Image.open(want) as im:
        assert np.array_equal(np.asarray(got), np.asarray(im))


def test_fuse_errors():
    import pytest

    face = animegan.decode(open(os.path.join(DATA, "astronaut.png"), "rb").read())
    blank = np.zeros((64, 64, 3), np.uint8)
    with pytest.raises(animegan.InputError, match="source: face 1 asked, 0 found"):
        animegan.fuse(blank, face)
    with pytest.raises(animegan.InputError, match="target: face 2 asked, 1 found"):
        animegan.fuse(face, face, target_face=2)
    with pytest.raises(animegan.InputError, match="mode"):
        animegan.fuse(face, face, mode="mix")
    with pytest.raises(animegan.InputError):
        animegan.fuse(face, face, shape_ratio=2.0)


def test_fuse_enhance_and_occluders():
    """Issue 31: enhance= sharpens a small source first (the bundled upscaler by default),
    paint_occluders= paints over what covers the target's face; bad values are refused."""
    import pytest

    faces = os.path.join(DATA, "faces")
    small = animegan.decode(open(os.path.join(faces, "obama_small.png"), "rb").read())
    target = animegan.decode(open(os.path.join(faces, "biden.jpg"), "rb").read())
    plain = animegan.fuse(small, target, enhance="none")
    sharp = animegan.fuse(small, target, enhance="upscale")
    assert plain.shape == sharp.shape == target.shape
    assert not np.array_equal(plain, sharp)
    hair = animegan.decode(open(os.path.join(faces, "obama_hair.png"), "rb").read())
    kept = animegan.fuse(target, hair, enhance="none")
    painted = animegan.fuse(target, hair, enhance="none", paint_occluders=True)
    assert not np.array_equal(kept, painted)
    with pytest.raises(animegan.InputError, match="enhance"):
        animegan.fuse(small, target, enhance="sharpest")
    with pytest.raises(animegan.InputError, match="restore_model"):
        animegan.fuse(small, target, enhance="restore")
