#!/usr/bin/python3
"""Writes the small PyTorch files tests/test_model_files.c reads, into tests/fixtures/pt/.

Run with Debian's PyTorch (python3-torch): /usr/bin/python3 tools/make_pt_fixtures.py
Every tensor value is a simple formula the C test recomputes; keep the two in step.

  state_{zip,legacy}.pt       the reference state_dict (see reference_state below) in both
                              layouts: float32/16, bfloat16, float64, int8, a transposed
                              view, two tensors sharing a storage at offsets, an expanded
                              (stride 0) tensor, a 0-dim and an empty tensor
  state_proto4_{zip,legacy}.pt  the same with pickle protocol 4 (FRAME, STACK_GLOBAL, MEMOIZE)
  state_deflate_zip.pt        the zip one re-packed with deflate compression
  module_prefix_{zip,legacy}.pt  nn.DataParallel(...).state_dict(): "module." keys, _metadata
  params_zip.pt               state_dict(keep_vars=True): nn.Parameter values
  whole_module_{zip,legacy}.pt   torch.save(model): must be refused
  checkpoint_zip.pt           {"epoch": 3, "state_dict": ...}: must be refused
  long_zip.pt                 an int64 tensor: must be refused
  evil_reduce_{zip,legacy}.pt a pickle calling os.system: must be refused, never run
  bigendian_zip.pt            byteorder record "big": must be refused
  truncated_{zip,legacy}.pt   the first half of state_*.pt
  crc_zip.pt                  state_zip.pt with one storage byte flipped: must fail its CRC
  tiny.safetensors            a safetensors file of five dtypes and metadata (also a fuzz seed)
"""
import collections
import io
import json
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


class _StableKeys:
    """pickle_module for torch.save's legacy layout that makes the file reproducible.

    torch 1.13 names each storage str(storage._cdata), a memory address, and writes the
    storages sorted by that name. This renames them "0", "1", ... in pickling order; the key
    list is held back and save_legacy writes it and the data blocks in that order."""

    __name__ = "stable_keys_pickle"  # torch.save reads pickle_module.__name__

    def __init__(self):
        self.keys = {}  # address key -> (stable key, element size)
        self.address_order = None
        self.keys_pos = None

    def dump(self, obj, f, protocol=2):
        if isinstance(obj, list) and self.keys and set(obj) == set(self.keys):
            self.address_order, self.keys_pos = obj, f.tell()
            return
        pickle.dump(obj, f, protocol=protocol)

    def Pickler(self, f, protocol=2):  # noqa: N802 (the pickle module's name)
        outer = self

        class StablePickler(pickle.Pickler):
            def __setattr__(self, name, value):
                if name == "persistent_id":
                    inner = value

                    def value(obj):
                        pid = inner(obj)
                        if pid is not None and pid[0] == "storage":
                            entry = (str(len(outer.keys)), obj.element_size())
                            key = outer.keys.setdefault(pid[2], entry)[0]
                            pid = pid[:2] + (key,) + pid[3:]
                        return pid

                super().__setattr__(name, value)

        return StablePickler(f, protocol=protocol)


def save_legacy(obj, name, protocol=2):
    """torch.save(obj, _use_new_zipfile_serialization=False) with reproducible bytes."""
    mod = _StableKeys()
    buf = io.BytesIO()
    torch.save(
        obj, buf, pickle_module=mod, pickle_protocol=protocol, _use_new_zipfile_serialization=False
    )
    raw = buf.getvalue()
    pos, blocks = mod.keys_pos, {}
    for address in mod.address_order:  # a u64 element count, then the elements
        key, elem_size = mod.keys[address]
        (count,) = struct.unpack_from("<Q", raw, pos)
        blocks[key] = raw[pos : pos + 8 + count * elem_size]
        pos += len(blocks[key])
    assert pos == len(raw)
    order = [str(i) for i in range(len(blocks))]
    keys = pickle.dumps(order, protocol=protocol)
    write(name, raw[: mod.keys_pos] + keys + b"".join(blocks[k] for k in order))


def save_both(obj, stem):
    save(obj, stem + "_zip.pt")
    save_legacy(obj, stem + "_legacy.pt")


def zip_add(z, name, data):
    """A member with a fixed date, for reproducible archives."""
    z.writestr(zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0)), data, z.compression)


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
            zip_add(zout, info.filename, zin.read(info.filename))
        for name, data in (extra or {}).items():
            zip_add(zout, prefix + "/" + name, data)


class Evil:
    """Pickles as a call to os.system: a loader that executes pickles would run it."""

    def __reduce__(self):
        return (os.system, ("echo animegan-fixture-was-executed >&2",))


def evil_pickle():
    return pickle.dumps(collections.OrderedDict(x=Evil()), protocol=2)


def write_evil():
    with zipfile.ZipFile(os.path.join(OUT, "evil_reduce_zip.pt"), "w") as z:
        zip_add(z, "evil_reduce_zip/data.pkl", evil_pickle())
        zip_add(z, "evil_reduce_zip/version", "3\n")
    legacy = io.BytesIO()
    for header in (0x1950A86A20F9469CFC6C, 1001, {"protocol_version": 1001, "little_endian": True}):
        pickle.dump(header, legacy, protocol=2)
    legacy.write(evil_pickle())
    pickle.dump([], legacy, protocol=2)
    write("evil_reduce_legacy.pt", legacy.getvalue())


def write_safetensors(name, tensors, metadata):
    """The safetensors layout by hand: u64 header length, JSON header, data."""
    header, data = {"__metadata__": metadata}, b""
    for key, (dtype, shape, raw) in tensors.items():
        header[key] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the format pads the header to 8 bytes with spaces
    write(name, struct.pack("<Q", len(text)) + text + data)


def tiny_safetensors():
    as_bytes = lambda t: t.contiguous().view(torch.uint8).numpy().tobytes()
    write_safetensors(
        "tiny.safetensors",
        {
            "block.0.weight": ("F32", [2, 3], as_bytes(torch.arange(6, dtype=torch.float32) - 2)),
            "half": ("F16", [3], as_bytes(torch.tensor([1.0, -2.0, 0.5], dtype=torch.float16))),
            "bf16": ("BF16", [2], as_bytes(torch.tensor([1.5, -3.0], dtype=torch.bfloat16))),
            "f64": ("F64", [1], as_bytes(torch.tensor([0.1], dtype=torch.float64))),
            "i8": ("I8", [1, 1, 1, 2], as_bytes(torch.tensor([-5, 7], dtype=torch.int8))),
        },
        {"format": "pt", "style": "Test"},
    )


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    save_both(reference_state(), "state")
    save(reference_state(), "state_proto4_zip.pt", pickle_protocol=4)
    save_legacy(reference_state(), "state_proto4_legacy.pt", protocol=4)
    repack("state_zip.pt", "state_deflate_zip.pt", zipfile.ZIP_DEFLATED)
    repack("state_zip.pt", "bigendian_zip.pt", extra={"byteorder": "big"})

    model = Tiny()
    save_both(torch.nn.DataParallel(model).state_dict(), "module_prefix")
    save(model.state_dict(keep_vars=True), "params_zip.pt")
    save_both(model, "whole_module")
    save({"epoch": 3, "state_dict": model.state_dict()}, "checkpoint_zip.pt")
    save(collections.OrderedDict(steps=torch.tensor([1, 2])), "long_zip.pt")
    write_evil()
    tiny_safetensors()

    data = bytearray(read("state_zip.pt"))
    with zipfile.ZipFile(os.path.join(OUT, "state_zip.pt")) as z:
        info = z.getinfo("state_zip/data/0")
    name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
    data[info.header_offset + 30 + name_len + extra_len] ^= 1  # first byte of the storage
    write("crc_zip.pt", bytes(data))

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
