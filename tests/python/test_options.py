"""Issue 29: the keyword arguments take the ranges of the step table (src/pipeline/options.c,
read here through _core.step_options): for every numeric row with a keyword, just past
its range is an InputError that states the range, and its ends are taken."""

import os

import numpy as np
import pytest

import animegan
from animegan import _core

from conftest import ROOT, THREADS

CONVERT, RESTORE, UPSCALE, FUSE = 1, 2, 4, 8
CODEFORMER = os.path.join(ROOT, "tests", "fixtures", "restore", "up_codeformer.pt")
ROWS = [r for r in _core.step_options() if r[1] in ("int", "float")]


@pytest.fixture(scope="module")
def calls():
    """command bit -> f(keyword, value): the call that takes the row's keyword."""
    restorer = animegan.Model(CODEFORMER, threads=THREADS, precision="fp32")
    upscaler = animegan.Model("esrgan-slim", scale=2, threads=THREADS)
    stylizer = animegan.Model("hayao", threads=THREADS)
    crop = np.full((64, 64, 3), 128, np.uint8)
    blank = np.zeros((16, 16, 3), np.uint8)  # no face: a fusion in range stops at detection
    return {
        CONVERT: lambda k, v: stylizer(blank, portrait="face", **{k: v}),
        RESTORE: lambda k, v: restorer.restore(crop, aligned=True, **{k: v}),
        UPSCALE: lambda k, v: upscaler.upscale(blank, **{k: v}),
        FUSE: lambda k, v: animegan.fuse(blank, blank, **{k: v}),
        "stylize": lambda k, v: stylizer(blank, **{k: v}),  # convert's own portrait=
    }


def verdict(call, keyword, value, message):
    """'refused' (the range's InputError), else 'taken' (another error is not the range's)."""
    try:
        call(keyword, value)
    except animegan.InputError as e:
        if str(e) == message:
            return "refused"
    except animegan.Error:
        pass
    return "taken"


def test_rows_exist():
    keywords = {r[0] for r in ROWS}
    assert {"fidelity", "codeformer_fidelity", "max_faces", "tile", "max_mb", "shape_ratio",
            "brightness", "source_face"} <= keywords


@pytest.mark.parametrize("row", ROWS, ids=[f"{r[0]}-{r[5]}" for r in ROWS])
def test_keyword_range_is_the_rows(calls, row):
    keyword, kind, lo, hi, default, commands = row
    number = int if kind == "int" else float
    past = 1 if kind == "int" else 0.01
    message = f"{keyword}: must be {lo:g} to {hi:g}"
    # the call of the first command of the row that Python has the keyword on
    command = next(c for c in (UPSCALE, FUSE, RESTORE, CONVERT) if commands & c)
    call = calls[command]
    assert verdict(call, keyword, number(hi + past), message) == "refused", (keyword, hi + past)
    if lo - past != default:
        assert verdict(call, keyword, number(lo - past), message) == "refused", (keyword, lo)
    ends = [lo] if command == CONVERT else [lo, hi]  # convert: no 8192 px portrait here
    for value in ends:
        assert verdict(call, keyword, number(value), message) == "taken", (keyword, value)


def test_model_scale_is_the_rows():
    _, _, lo, hi, default, _ = next(r for r in ROWS if r[0] == "scale")
    for past in (int(hi) + 1, int(lo) - 2):
        with pytest.raises(animegan.InputError, match=f"scale: must be {lo:g} to {hi:g}"):
            animegan.Model("esrgan-slim", scale=past)


CHOICE_ROWS = _core.choice_rows()


def test_choice_rows_exist():
    assert {r[0] for r in CHOICE_ROWS} >= {"mode", "enhance", "portrait"}


def choice_verdict(call, keyword, value, choices):
    """'refused' (the row's one refusal, naming every choice), else 'taken'."""
    try:
        call(keyword, value)
    except animegan.InputError as e:
        listed = all(c in str(e) for c in choices)
        if str(e).startswith(f"{keyword} must be ") and listed and f"not '{value}'" in str(e):
            return "refused"
    except animegan.Error:
        pass
    return "taken"


@pytest.mark.parametrize("row", CHOICE_ROWS, ids=[r[0] for r in CHOICE_ROWS])
def test_choices_are_the_rows(calls, row):
    """Issue 29: each choice of the row is taken, a value outside them is refused with the
    message that names them, before any work."""
    keyword, choices, commands = row
    call = calls[FUSE] if commands & FUSE else calls["stylize"]
    for value in choices:
        assert choice_verdict(call, keyword, value, choices) == "taken", value
    assert choice_verdict(call, keyword, "sharpest", choices) == "refused"
    with pytest.raises(animegan.InputError, match=f"^{keyword} must be .*, not 'x'$"):
        _core.choice(keyword, "x")
    assert [_core.choice(keyword, c) for c in choices] == list(range(len(choices)))
