"""The other kinds a Model loads: restorers (GPEN / GFPGAN checkpoints) and upscalers (the
bundled ESRGAN families, Real-ESRGAN files), each equal to its CLI command bit for bit."""

import os

import numpy as np
import pytest
from PIL import Image

import animegan

from conftest import DATA, ROOT, THREADS, cli

GPEN = os.path.join(ROOT, "tests", "fixtures", "restore", "gpen64_zip.pt")
GFPGAN = os.path.join(ROOT, "tests", "fixtures", "restore", "gfpgan64_zip.pt")
CODEFORMER = os.path.join(ROOT, "tests", "fixtures", "restore", "up_codeformer.pt")


def load(path):
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


@pytest.mark.parametrize("checkpoint", [GPEN, GFPGAN])
def test_restore_equals_cli(tmp_path, checkpoint):
    out = tmp_path / "restored.png"
    photo = os.path.join(DATA, "astronaut.png")
    r = cli("restore", photo, "-o", str(out), "--model", checkpoint, "-t", str(THREADS), "-q")
    assert r.returncode == 0, r.stderr
    model = animegan.Model(checkpoint, threads=THREADS)
    assert model.kind == "restorer" and model.precision in ("fp32", "bf16")  # auto: as the CLI
    restored, n = model.restore(load(photo))
    assert n == 1
    assert np.array_equal(np.asarray(restored), load(out))
    assert np.array_equal(np.asarray(model(load(photo))), load(out))  # the call restores


def test_restore_aligned_and_fidelity(tmp_path):
    model = animegan.Model(GPEN, threads=THREADS)
    crop = load(os.path.join(DATA, "astronaut.png"))[100:300, 150:350]
    out, n = model.restore(crop, aligned=True)
    assert np.asarray(out).shape == (64, 64, 3) and n == 1
    same, _ = model.restore(load(os.path.join(DATA, "coffee.png")))  # no face: unchanged
    assert np.array_equal(np.asarray(same), load(os.path.join(DATA, "coffee.png")))
    with pytest.raises(animegan.InputError):
        model.restore(crop, fidelity=1.5)


def test_restore_codeformer_fidelity_equals_cli(tmp_path):
    out = tmp_path / "restored.png"
    photo = os.path.join(DATA, "astronaut.png")
    r = cli("restore", photo, "-o", str(out), "--model", CODEFORMER, "-t", str(THREADS), "-q",
            "--precision", "fp32", "--codeformer-fidelity", "0.8")
    assert r.returncode == 0, r.stderr
    model = animegan.Model(CODEFORMER, threads=THREADS, precision="fp32")
    restored, n = model.restore(load(photo), codeformer_fidelity=0.8)
    assert n == 1 and np.array_equal(np.asarray(restored), load(out))
    other, _ = model.restore(load(photo), codeformer_fidelity=0.0)
    assert not np.array_equal(np.asarray(other), load(out))  # w reaches the network
    with pytest.raises(animegan.InputError):
        model.restore(load(photo), codeformer_fidelity=1.5)


@pytest.mark.parametrize("checkpoint,network", [(GPEN, "GPEN"), (GFPGAN, "GFPGAN")])
def test_restore_codeformer_fidelity_refused_by_others(checkpoint, network):
    model = animegan.Model(checkpoint, threads=THREADS)
    crop = load(os.path.join(DATA, "astronaut.png"))[100:300, 150:350]
    with pytest.raises(ValueError, match="codeformer_fidelity applies only to a CodeFormer "
                       f"checkpoint: .* is {network}"):
        model.restore(crop, aligned=True, codeformer_fidelity=0.5)  # the default, but asked for
    model.restore(crop, aligned=True)  # not asked for: fine


def test_upscale_equals_cli(tmp_path, small):
    path, array = small
    out = tmp_path / "big.png"
    r = cli("upscale", path, "-o", str(out), "--model", "esrgan-slim", "--scale", "2", "-t",
            str(THREADS), "-q")
    assert r.returncode == 0, r.stderr
    model = animegan.Model("esrgan-slim", scale=2, threads=THREADS)
    assert model.kind == "upscaler" and model.info["name"] == "esrgan-slim-x2"
    big = model(array)
    assert np.asarray(big).shape == (96, 128, 3)
    assert np.array_equal(np.asarray(big), load(out))
    pil = model.upscale(Image.fromarray(array), scale=3)  # x2 network, Lanczos to x3
    assert isinstance(pil, Image.Image) and pil.size == (192, 144)


def test_kind_errors(small):
    _, array = small
    with pytest.raises(animegan.InputError, match="fp32"):
        animegan.Model(GPEN, precision="int8")
    with pytest.raises(animegan.InputError, match="not a restorer"):
        animegan.Model("hayao", threads=THREADS).restore(array)
    with pytest.raises(animegan.InputError, match="not an upscaler"):
        animegan.Model(GPEN, threads=THREADS).upscale(array)
    with pytest.raises(animegan.InputError):
        animegan.Model("esrgan-slim", scale=2).upscale(array, scale=99)
