"""No leak of arrays or models (reference counts, tracemalloc, the library's own count), and
weights shared between Models of the same file."""

import gc
import os
import sys
import tracemalloc

import numpy as np
from PIL import Image

import animegan
from conftest import photo


def test_weights_shared_between_models_of_the_same_file():
    a = animegan.Model("hayao-v3", threads=1)
    before = animegan.memory()["allocated"]
    b = animegan.Model("hayao-v3", threads=1, precision="fp32")
    by_path = animegan.Model(a.info["path"], threads=1)
    grew = animegan.memory()["allocated"] - before
    assert a._weights is b._weights is by_path._weights
    assert grew < a.info["weight_bytes"] / 4, grew  # two engines (unplanned), no weights
    other = animegan.Model("shinkai-v3", threads=1)
    assert other._weights is not a._weights


def test_weights_freed_with_the_last_model():
    gc.collect()
    base = animegan.memory()["allocated"]
    model = animegan.Model("cute-v3", threads=1)
    model(photo())
    loaded = animegan.memory()["allocated"]
    assert loaded - base > model.info["weight_bytes"] / 2
    del model
    gc.collect()
    assert animegan.memory()["allocated"] <= base + 4096


def test_reference_counts_stay(hayao):
    array = photo()
    pil = Image.fromarray(array)
    hayao(array)
    counts = sys.getrefcount(array), sys.getrefcount(pil), sys.getrefcount(hayao)
    for _ in range(5):
        hayao(array)
        hayao(pil)
        try:
            hayao(np.zeros((4, 4, 3), np.uint8))
        except animegan.InputError:
            pass
    assert (sys.getrefcount(array), sys.getrefcount(pil), sys.getrefcount(hayao)) == counts


def test_results_are_freed_with_their_last_view(hayao):
    array = photo()
    gc.collect()
    base = animegan.memory()["allocated"]
    out = hayao(array)
    view = out[10:20]
    assert animegan.memory()["allocated"] >= base + out.nbytes
    del out
    assert view.base is not None and view.sum() >= 0  # still readable through the view
    del view
    gc.collect()
    assert animegan.memory()["allocated"] == base


def test_tracemalloc_flat(hayao, tmp_path):
    src = tmp_path / "in.png"
    Image.fromarray(photo()).save(src)
    array = photo()

    def round_():
        hayao(array)
        hayao(Image.fromarray(array))
        animegan.faces(array, landmarks=False)
        animegan.convert_file(src, tmp_path / "out.png", model=hayao)
        try:
            hayao(array[:4])
        except animegan.InputError:
            pass

    for _ in range(2):
        round_()
    gc.collect()
    tracemalloc.start()
    first = tracemalloc.take_snapshot()
    for _ in range(8):
        round_()
    gc.collect()
    growth = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(first, "filename"))
    tracemalloc.stop()
    assert growth < 16 * 1024, growth
    os.remove(tmp_path / "out.png")
