"""Every class of bad input is an animegan.Error subclass with the library's message; the
interpreter keeps working (each test goes on to convert after the failure)."""

import os

import numpy as np
import pytest

import animegan
from conftest import DATA, photo


def still_works(model):
    assert model(photo()).shape == (48, 64, 3)


@pytest.mark.parametrize("bad, words", [
    (np.zeros((48, 64, 3), np.float32), "uint8"),
    (np.zeros((48, 64), np.uint8), "shape"),
    (np.zeros((48, 64, 2), np.uint8), "shape"),
    (np.zeros((48, 64, 5), np.uint8), "shape"),
    (np.zeros((0, 64, 3), np.uint8), "pixels"),
    (np.zeros((4, 4, 3), np.uint8), "at least 8"),
    (np.zeros((7, 500, 3), np.uint8), "at least 8"),
    (b"\x00" * 300, "numpy"),
    ("photo.png", "numpy"),
    (None, "numpy"),
])
def test_bad_images(hayao, bad, words):
    with pytest.raises(animegan.InputError) as info:
        hayao(bad)
    assert words in str(info.value)
    assert isinstance(info.value, ValueError)
    still_works(hayao)


def test_bad_buffer_straight_to_core(hayao):
    engine = hayao._pool.acquire()
    try:
        for bad in (b"abc", memoryview(b"\x00" * 48).cast("B", (4, 4, 3)), bytearray(10)):
            with pytest.raises(animegan.InputError):
                engine.stylize(bad)
        with pytest.raises(animegan.InputError, match="format"):
            engine.stylize(np.zeros((8, 8, 3), np.int16))
    finally:
        hayao._pool.release(engine)


@pytest.mark.parametrize("kwargs, words", [
    ({"portrait": "middle"}, "portrait"),
    ({"max_side": -1}, "max_side"),
    ({"portrait": "center", "size": 4}, "portrait_size"),
    ({"portrait": "face", "size": 4}, "size"),
    ({"portrait": "paste", "side_by_side": True}, "side_by_side"),
])
def test_bad_options(hayao, kwargs, words):
    with pytest.raises(animegan.InputError, match=words):
        hayao(photo(), **kwargs)
    still_works(hayao)


@pytest.mark.parametrize("kwargs, words", [
    ({"precision": "fp64"}, "precision"),
    ({"backend": "gpu"}, "backend"),
    ({"upsample": "nearest"}, "upsample"),
    ({"engines": 0}, "engines"),
    ({"threads": -1}, "threads"),
])
def test_bad_model_options(kwargs, words):
    with pytest.raises(animegan.InputError, match=words):
        animegan.Model("hayao", **kwargs)


def test_unknown_and_corrupt_models(tmp_path):
    with pytest.raises(animegan.ModelError, match="unknown model 'no-such-style'"):
        animegan.Model("no-such-style")
    with pytest.raises(animegan.ModelError):
        animegan.Model(str(tmp_path / "missing.safetensors"))
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\xff" * 64)
    with pytest.raises(animegan.ModelError, match="junk.safetensors") as info:
        animegan.Model(str(junk))
    assert info.value.code_name == "bad_format"
    truncated = tmp_path / "cut.safetensors"
    with open(os.path.join(animegan._MODELS, "hayao.safetensors"), "rb") as f:
        truncated.write_bytes(f.read(5000))
    with pytest.raises(animegan.ModelError):
        animegan.Model(str(truncated))
    pt = tmp_path / "fake.pt"
    pt.write_bytes(b"PK\x03\x04" + b"\x00" * 100)
    with pytest.raises(animegan.ModelError):
        animegan.Model(str(pt))


@pytest.mark.parametrize("name", ["wide_1040.onnx", "wide_1040.pth"])
def test_a_map_wider_than_the_kernels_is_refused(hayao, name):
    """#35: a 1040-channel conv wrote past the int8 kernels' stack arrays (a crash of the
    interpreter); it is refused at load, naming the node."""
    path = os.path.join(DATA, "..", "fixtures", "wide", name)
    with pytest.raises(animegan.ModelError, match="1040 channels; at most 1024"):
        animegan.Model(path, threads=1, precision="int8")
    still_works(hayao)


def test_a_face_network_is_not_a_style(hayao):
    model = animegan.Model("face-detect", threads=1)
    with pytest.raises(animegan.Error):
        model(photo())
    still_works(hayao)


def test_bad_files(hayao, tmp_path):
    with pytest.raises(animegan.FileError) as info:
        animegan.convert_file(tmp_path / "missing.png", tmp_path / "out.png", model=hayao)
    assert isinstance(info.value, OSError) and info.value.code_name == "io"
    for name in ("truncated.jpg",):
        with pytest.raises(animegan.InputError):
            animegan.convert_file(os.path.join(DATA, name), tmp_path / "out.png", model=hayao)
    text = tmp_path / "notes.png"
    text.write_text("not a picture")
    with pytest.raises(animegan.InputError):
        animegan.convert_file(text, tmp_path / "out.png", model=hayao)
    assert not (tmp_path / "out.png").exists()  # no partial output
    src = os.path.join(DATA, "chelsea.png")
    with pytest.raises(animegan.InputError, match="format"):
        animegan.convert_file(src, tmp_path / "out.bmp", model=hayao)
    with pytest.raises(animegan.InputError, match="quality"):
        animegan.convert_file(src, tmp_path / "out.jpg", model=hayao, quality=0, max_side=64)
    with pytest.raises(animegan.FileError):
        animegan.convert_file(src, tmp_path / "no" / "dir" / "out.png", model=hayao, max_side=64)
    assert os.listdir(tmp_path) == ["notes.png"]
    still_works(hayao)


def test_limit_is_an_input_error(hayao, tmp_path):
    src = os.path.join(DATA, "chelsea.png")
    with pytest.raises(animegan.InputError, match="limit"):
        animegan._core.decode_file(src, 0, 1000)


def test_error_classes():
    assert issubclass(animegan.InputError, animegan.Error)
    assert issubclass(animegan.OutOfMemoryError, MemoryError)
    assert issubclass(animegan.FileError, OSError)
    assert issubclass(animegan.ModelError, animegan.Error)
