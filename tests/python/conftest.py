"""Shared fixtures of the Python package's tests (tests/python_test.sh runs them in a venv
where ./python was installed with pip, offline)."""

import os
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
CLI = os.path.join(BUILD, "animegan")
DATA = os.path.join(ROOT, "tests", "data")

# Small images keep the suite fast on a shared 2-core machine; 2 threads everywhere so the
# CLI and the package run the same plan.
THREADS = 2


def cli(*args):
    """Run the CLI; returns the CompletedProcess (stdout, stderr as text)."""
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=600)


def photo(name="chelsea.png", size=(64, 48)):
    """A test photo as a uint8 (H, W, 3) array, resized (PIL, bicubic) to `size` (w, h)."""
    from PIL import Image

    with Image.open(os.path.join(DATA, name)) as im:
        return np.asarray(im.convert("RGB").resize(size, Image.BICUBIC))


@pytest.fixture(scope="session")
def hayao():
    import animegan

    return animegan.Model("hayao", threads=THREADS)


@pytest.fixture
def small(tmp_path):
    """(path, array) of a 64x48 PNG photo."""
    from PIL import Image

    array = photo()
    path = tmp_path / "small.png"
    Image.fromarray(array).save(path)
    return str(path), array
