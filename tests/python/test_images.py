"""numpy and PIL in and out, alpha, layouts, and no copy of the result."""

import numpy as np
import pytest
from PIL import Image

import animegan
from conftest import photo


def test_numpy_result_is_a_view_of_the_library_buffer(hayao):
    out = hayao(photo())
    assert out.dtype == np.uint8 and out.shape == (48, 64, 3)
    assert not out.flags.owndata  # wraps the library's pixels, no copy
    assert out.flags.c_contiguous and out.flags.writeable
    assert type(out.base.obj).__name__ == "Pixels"


def test_pil_in_pil_out_same_pixels_as_numpy(hayao):
    array = photo()
    want = hayao(array)
    out = hayao(Image.fromarray(array))
    assert isinstance(out, Image.Image) and out.mode == "RGB" and out.size == (64, 48)
    assert np.array_equal(np.asarray(out), want)


def test_alpha_is_copied_back(hayao):
    array = photo()
    alpha = np.tile(np.arange(64, dtype=np.uint8) * 4, (48, 1))
    rgba = np.dstack([array, alpha])
    out = hayao(rgba)
    assert out.shape == (48, 64, 4)
    assert np.array_equal(out[..., 3], alpha)
    assert np.array_equal(out[..., :3], hayao(array))  # colour from the RGB bands alone
    pil = hayao(Image.fromarray(rgba, "RGBA"))
    assert pil.mode == "RGBA" and np.array_equal(np.asarray(pil), out)


def test_other_pil_modes_are_converted(hayao):
    array = photo()
    grey = Image.fromarray(array).convert("L")
    out = hayao(grey)
    assert out.mode == "RGB"
    assert np.array_equal(np.asarray(out), hayao(np.asarray(grey.convert("RGB"))))
    la = Image.fromarray(array).convert("LA")
    assert hayao(la).mode == "RGBA"
    assert hayao(Image.fromarray(array).convert("P")).mode == "RGB"


def test_non_contiguous_input_gives_the_contiguous_result(hayao):
    array = photo()
    bgr = np.ascontiguousarray(array[..., ::-1])
    view = bgr[..., ::-1]  # negative strides: copied once, then the same pixels
    assert not view.flags.c_contiguous
    assert np.array_equal(hayao(view), hayao(array))
    big = photo(size=(128, 96))
    assert np.array_equal(hayao(big[::2, ::2]), hayao(np.ascontiguousarray(big[::2, ::2])))


def test_input_is_not_modified(hayao):
    array = photo()
    before = array.copy()
    readonly = array.copy()
    readonly.flags.writeable = False
    hayao(array)
    hayao(readonly)
    assert np.array_equal(array, before)


def test_centre_portrait_size(hayao):
    out = hayao(photo(size=(96, 64)), portrait="center", size=32)
    assert out.shape == (32, 32, 3)


def test_engine_used_directly_from_core(hayao):
    """The C types are usable alone (what Model composes): Pixels in, Pixels out."""
    pixels = animegan._core.Engine(hayao._weights.core, threads=2).stylize(photo())
    assert pixels.shape == (48, 64, 3)
    assert np.array_equal(np.asarray(pixels), hayao(photo()))


@pytest.mark.parametrize("name", ["hayao-v3"])
def test_v3_runs_odd_sizes(name):
    model = animegan.Model(name, threads=2)
    assert model(photo(size=(37, 29))).shape == (29, 37, 3)


def test_decode_and_encode_bytes():
    import os

    from conftest import DATA

    path = os.path.join(DATA, "rocket.jpg")
    with open(path, "rb") as f:
        data = f.read()
    array = animegan.decode(data, max_side=80)
    assert max(array.shape[:2]) == 80
    assert np.array_equal(array, np.asarray(animegan._core.decode_file(path, 80)))
    png = animegan.encode(array)
    assert np.array_equal(animegan.decode(png), array)  # lossless round trip
    assert animegan.encode(Image.fromarray(array), "jpg", 50)[:2] == b"\xff\xd8"
    with pytest.raises(animegan.InputError, match="format"):
        animegan.encode(array, "gif")
    with pytest.raises(animegan.InputError):
        animegan.decode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
