"""The package gives `animegan convert`'s output bit for bit, for each bundled style."""

import os

import numpy as np
import pytest
from PIL import Image

import animegan
from conftest import DATA, THREADS, cli, photo


def styles():
    """The bundled generators (bundled_models() also lists the face networks)."""
    names = []
    for name in animegan.bundled_models():
        if animegan.Model(name, threads=1).info["kind"] == "generator":
            names.append(name)
    return names


STYLES = styles()


def test_every_bundled_style_found():
    assert {"hayao", "hayao-v3", "shinkai-v3", "cute-v3"} <= set(STYLES)


def read(path):
    with Image.open(path) as im:
        return np.asarray(im)


@pytest.mark.parametrize("style", STYLES)
def test_convert_file_and_call_equal_cli(style, small, tmp_path):
    src, array = small
    want, got = tmp_path / "cli.png", tmp_path / "py.png"
    run = cli("convert", src, "-o", str(want), "-m", style, "-t", str(THREADS), "-q")
    assert run.returncode == 0, run.stderr
    model = animegan.Model(style, threads=THREADS)
    animegan.convert_file(src, got, model=model)
    assert got.read_bytes() == want.read_bytes()
    # The call on the array (the PNG's own pixels) gives the same pixels.
    assert np.array_equal(model(array), read(want))


def test_jpeg_resized_and_quality_equal_cli(hayao, tmp_path):
    src = os.path.join(DATA, "rocket.jpg")
    want, got = tmp_path / "cli.jpg", tmp_path / "py.jpg"
    run = cli("convert", src, "-o", str(want), "--max-side", "72", "--quality", "80",
              "-t", str(THREADS), "-q")
    assert run.returncode == 0, run.stderr
    animegan.convert_file(src, got, model=hayao, max_side=72, quality=80)
    assert got.read_bytes() == want.read_bytes()


def test_array_downscale_equals_cli_on_png(hayao, tmp_path):
    """max_side on an array resamples as the decode of a lossless file of it does."""
    array = photo(size=(150, 100))
    src, want = tmp_path / "big.png", tmp_path / "cli.png"
    Image.fromarray(array).save(src)
    run = cli("convert", str(src), "-o", str(want), "--max-side", "60", "-t", str(THREADS), "-q")
    assert run.returncode == 0, run.stderr
    out = hayao(array, max_side=60)
    assert out.shape == (40, 60, 3)
    assert np.array_equal(out, read(want))


@pytest.mark.parametrize("mode", ["center", "face"])
def test_portrait_equals_cli(hayao, mode, tmp_path):
    src = os.path.join(DATA, "astronaut.png")
    want, got = tmp_path / "cli.png", tmp_path / "py.png"
    run = cli("convert", src, "-o", str(want), f"--portrait={mode}", "--size", "64",
              "-t", str(THREADS), "-q")
    assert run.returncode == 0, run.stderr
    animegan.convert_file(src, got, model=hayao, portrait=mode, size=64)
    assert got.read_bytes() == want.read_bytes()


def test_side_by_side_equals_cli(hayao, small, tmp_path):
    src, array = small
    want, got = tmp_path / "cli.webp", tmp_path / "py.webp"
    run = cli("convert", src, "-o", str(want), "--side-by-side", "-t", str(THREADS), "-q")
    assert run.returncode == 0, run.stderr
    animegan.convert_file(src, got, model=hayao, side_by_side=True)
    assert got.read_bytes() == want.read_bytes()
    assert hayao(array, side_by_side=True).shape == (48, 128, 3)
