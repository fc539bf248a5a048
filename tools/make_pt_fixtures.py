#!/usr/bin/python3
"""Writes the small PyTorch files tests/test_model_files.c reads, into tests/fixtures/pt/.

Run with Debian's PyTorch (python3-torch): /usr/bin/python3 tools/make_pt_fixtures.py
Every tensor value is a simple formula the C test recomputes; keep the two in step.

  state_{zip,legacy}.pt       the reference state_dict (see reference_state below) in both
                              layouts: float32/16, bfloat16, float64, int8, a transposed
                              view, two tensors sharing a storage at offsets, an expanded
                              (stride 0) tensor, a 0-dim and an empty tensor
  state_proto4_zip.pt         the same with pickle protocol 4 (FRAME, STACK_GLOBAL, MEMOIZE)
  state_deflate_zip.pt        the zip one re-packed with deflate compression
  module_prefix_{zip,legacy}.pt  nn.DataParallel(...).state_dict(): "module." keys, _metadata
  params_zip.pt               state_dict(keep_vars=True): nn.Parameter values
  whole_module_{zip,legacy}.pt   torch.save(model): must be refused
  checkpoint_zip.pt           {"epoch": 3, "state_dict": ...}: must be refused
  long_zip.pt                 an int64 tensor: must be refused
  evil_reduce_{zip,legacy}.pt a pickle calling os.system: must be refused, never run
  bigendian_zip.pt            byteorder record "big": must be refused
  truncated_{zip,legacy}.pt   the first half of state_*.pt
"""
import collections
import io
import os
import pickle
import struct
import sys
import zipfile

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "pt")


class Tiny(torch.nn.Module):
    """A conv and a GroupNorm(1): the layer kinds of the AnimeGANv2 generator."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 3, 1, bias=True)
        self.norm = torch.nn.GroupNorm(1, 3)
        with torch.no_grad():
            self.conv.weight.copy_(torch.arange(6, dtype=torch.float32).reshape(3, 2, 1, 1) / 4)
            self.conv.bias.copy_(torch.tensor([1.0, 2.0, 3.0]))
            self.norm.weight.copy_(torch.tensor([0.5, 1.5, 2.5]))
            self.norm.bias.copy_(torch.tensor([-1.0, 0.0, 1.0]))

    def forward(self, x):
        return self.norm(self.conv(x))


def reference_state():
    sd = collections.OrderedDict()
    sd["conv.weight"] = torch.arange(12, dtype=torch.float32).reshape(2, 3, 1, 2) * 0.5 - 1
    sd["conv.bias"] = torch.tensor([0.25, -0.75])
    sd["half"] = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float16)
    sd["bf16"] = torch.tensor([1.5, -3.0], dtype=torch.bfloat16)
    sd["f64"] = torch.tensor([0.1, 2.0], dtype=torch.float64)
    sd["i8"] = torch.tensor([-128, 0, 127], dtype=torch.int8)
    base = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    sd["transposed"] = base.t()  # (3, 2), stride (1, 3): value [i][j] = 3 * j + i
    shared = torch.arange(10, dtype=torch.float32) + 100
    sd["shared_a"] = shared[2:6]  # offset 2: 102..105
    sd["shared_b"] = shared[6:].view(2, 2)  # offset 6: 106..109
    sd["expanded"] = torch.tensor([7.0, 8.0]).expand(3, 2)  # stride (0, 1)
    sd["scalar"] = torch.tensor(3.5)
    sd["empty"] = torch.zeros(0, 3)
    assert not sd["transposed"].is_contiguous() and sd["shared_b"].storage_offset() == 6
    return sd


def save(obj, name, **kwargs):
    torch.save(obj, os.path.join(OUT, name), **kwargs)


def save_both(obj, stem):
    save(obj, stem + "_zip.pt")
    save(obj, stem + "_legacy.pt", _use_new_zipfile_serialization=False)


def read(name):
    with open(os.path.join(OUT, name), "rb") as f:
        return f.read()


def write(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def repack(src, dst, compression=zipfile.ZIP_STORED, extra=None):
    """Copies a torch zip, optionally recompressing it or adding records."""
    with zipfile.ZipFile(os.path.join(OUT, src)) as zin, zipfile.ZipFile(
        os.path.join(OUT, dst), "w", compression
    ) as zout:
        prefix = zin.namelist()[0].split("/")[0]
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))
        for name, data in (extra or {}).items():
            zout.writestr(prefix + "/" + name, data)


class Evil:
    """Pickles as a call to os.system: a loader that executes pickles would run it."""

    def __reduce__(self):
        return (os.system, ("echo animegan-fixture-was-executed >&2",))


def evil_pickle():
    return pickle.dumps(collections.OrderedDict(x=Evil()), protocol=2)


def write_evil():
    with zipfile.ZipFile(os.path.join(OUT, "evil_reduce_zip.pt"), "w") as z:
        z.writestr("evil_reduce_zip/data.pkl", evil_pickle())
        z.writestr("evil_reduce_zip/version", "3\n")
    legacy = io.BytesIO()
    for header in (0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True}):
        pickle.dump(header, legacy, protocol=2)
    legacy.write(evil_pickle())
    pickle.dump([], legacy, protocol=2)
    write("evil_reduce_legacy.pt", legacy.getvalue())


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    save_both(reference_state(), "state")
    save(reference_state(), "state_proto4_zip.pt", pickle_protocol=4)
    repack("state_zip.pt", "state_deflate_zip.pt", zipfile.ZIP_DEFLATED)
    repack("state_zip.pt", "bigendian_zip.pt", extra={"byteorder": "big"})

    model = Tiny()
    save_both(torch.nn.DataParallel(model).state_dict(), "module_prefix")
    save(model.state_dict(keep_vars=True), "params_zip.pt")
    save_both(model, "whole_module")
    save({"epoch": 3, "state_dict": model.state_dict()}, "checkpoint_zip.pt")
    save(collections.OrderedDict(steps=torch.tensor([1, 2])), "long_zip.pt")
    write_evil()

    for layout in ("zip", "legacy"):
        data = read("state_%s.pt" % layout)
        write("truncated_%s.pt" % layout, data[: len(data) // 2])

    # Check the files load back as written (the evil ones are never unpickled here).
    for name in sorted(os.listdir(OUT)):
        if name.startswith("state_") and name != "state_deflate_zip.pt":
            loaded = torch.load(os.path.join(OUT, name))
            for key, value in reference_state().items():
                assert torch.equal(loaded[key], value), (name, key)
    print("wrote", len(os.listdir(OUT)), "files to", os.path.normpath(OUT), file=sys.stderr)


if __name__ == "__main__":
    main()
