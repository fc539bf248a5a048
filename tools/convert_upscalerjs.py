#!/usr/bin/python3
"""convert_upscalerjs.py - UpscalerJS's ESRGAN Slim and Medium (TensorFlow.js layers models,
MIT) -> the project's graph safetensors (docs/graph.md), one file per scale:

  ../shared/models/upscale/esrgan-slim/x2/model.json   -> models/esrgan-slim-x2.safetensors
  ...                                                     (slim and medium, x2 x3 x4 x8)

The Keras topology of each model.json is translated layer by layer (never assumed): Conv2D
"same" -> conv with zero pads (k - 1) / 2, "valid" -> conv unpadded, a fused activation or
an Activation layer -> relu, Concatenate on channels -> concat, Add -> add, UpSampling2D
nearest -> nearest (up N). Kernels go from TF's HWIO to PyTorch's OIHW; values are exactly the
.bin's float32. The network takes RGB in [0, 255] and gives RGB in [0, 255] (UpscalerJS's
rdn model definition; tools/tfjs_reference.py --check confirms it against the package's
samples); the metadata says so. Deterministic: rerunning gives byte-identical files.

  convert_upscalerjs.py [--src DIR] [--out models/]
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tfjs_reference as T  # noqa: E402  (only its file reader: load())

LICENSE = ("MIT (UpscalerJS, Copyright (c) 2022 Kevin Scott; see models/LICENSE-MIT-upscalerjs.txt)")
PACKAGES = {"esrgan-slim": "@upscalerjs/esrgan-slim@1.0.0",
            "esrgan-medium": "@upscalerjs/esrgan-medium@1.0.0"}
SCALES = (2, 3, 4, 8)


class Emit:
    def __init__(self):
        self.nodes = []
        self.tensors = {}
        self.rename = {}  # Keras layer name -> node name

    def src(self, name):
        return self.rename.get(name, name)

    def node(self, op, name, ins, **attrs):
        n = {"op": op, "name": name, "in": [self.src(i) for i in ins]}
        n.update(attrs)
        self.nodes.append(n)
        self.rename[name] = name
        return name


MAX_SRC = 8  # inputs of one graph node (AG_NODE_MAX_SRC)


def concat(E, name, inbound):
    """Medium's global feature fusion concatenates 10 maps: more than a node takes, so the
    first ones are gathered in groups first (the channel order is unchanged)."""
    ins = list(inbound)
    j = 0
    while len(ins) > MAX_SRC:
        part = E.node("concat", "%s.%d" % (name, j), ins[:MAX_SRC])
        ins = [part] + ins[MAX_SRC:]
        j += 1
    E.node("concat", name, ins)


def conv_pads(cfg, k):
    if cfg["padding"] == "valid":
        return [0, 0, 0, 0]
    if cfg["padding"] != "same" or k % 2 != 1:
        raise SystemExit("conv padding %r with kernel %d" % (cfg["padding"], k))
    p = (k - 1) // 2
    return [p, p, p, p]


def translate(model):
    E = Emit()
    for cls, name, cfg, inbound in model.layers:
        if cls == "InputLayer":
            E.rename[name] = "input"
            continue
        if cls == "Conv2D":
            kernel = model.weights[name + "/kernel"]
            kh, kw, ic, oc = kernel.shape
            if kh != kw or cfg["strides"] != [1, 1] or cfg.get("dilation_rate", [1, 1]) != [1, 1]:
                raise SystemExit("%s: only square stride-1 convolutions" % name)
            E.tensors[name + ".weight"] = np.ascontiguousarray(kernel.transpose(3, 2, 0, 1))
            attrs = dict(weight=name + ".weight", stride=1, groups=1, pad=conv_pads(cfg, kh),
                         pad_mode="zero")
            if cfg.get("use_bias", True):
                E.tensors[name + ".bias"] = np.ascontiguousarray(model.weights[name + "/bias"])
                attrs["bias"] = name + ".bias"
            act = cfg.get("activation", "linear")
            if act == "linear":
                E.node("conv", name, inbound, **attrs)
            elif act == "relu":
                E.node("conv", name + ".conv", inbound, **attrs)
                E.node("relu", name, [name + ".conv"])
            else:
                raise SystemExit("%s: activation %r" % (name, act))
        elif cls == "Activation":
            if cfg["activation"] != "relu":
                raise SystemExit("%s: activation %r" % (name, cfg["activation"]))
            E.node("relu", name, inbound)
        elif cls == "Concatenate":
            if cfg.get("axis", -1) not in (3, -1):
                raise SystemExit("%s: concatenation on axis %r" % (name, cfg.get("axis")))
            concat(E, name, inbound)
        elif cls == "Add":
            prev = inbound[0]
            for j, other in enumerate(inbound[1:]):
                last = j == len(inbound) - 2
                prev = E.node("add", name if last else "%s.%d" % (name, j), [prev, other])
        elif cls == "UpSampling2D":
            sy, sx = cfg["size"]
            if sy != sx or cfg.get("interpolation", "nearest") != "nearest":
                raise SystemExit("%s: only square nearest upsampling" % name)
            E.node("nearest", name, inbound, up=sy)
        else:
            raise SystemExit("%s: layer %s is not supported" % (name, cls))
    outputs = [E.src(o) for o in model.outputs]
    return E, outputs


def write_safetensors(path, tensors, metadata):
    """F32 tensors in name order; header padded with spaces to a multiple of 8 bytes."""
    header, blobs, offset = {}, [], 0
    for n in sorted(tensors):
        raw = np.ascontiguousarray(tensors[n], dtype="<f4").tobytes()
        header[n] = {"dtype": "F32", "shape": list(tensors[n].shape),
                     "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = metadata
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-(8 + len(text))) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def convert(src, family, scale, out_dir):
    model_dir = os.path.join(src, family, "x%d" % scale)
    model = T.load(model_dir)
    E, outputs = translate(model)
    up = [n for n in E.nodes if n["op"] == "nearest"]
    if len(up) != 1 or up[0]["up"] != scale:
        raise SystemExit("%s: expected one x%d upsampling" % (model_dir, scale))
    sha = hashlib.sha256()
    for f in ("model.json", "group1-shard1of1.bin"):
        sha.update(open(os.path.join(model_dir, f), "rb").read())
    metadata = {
        "format": "animegan",
        "architecture": "rdn",
        "kind": "upscaler",
        "style": "%s x%d" % (family, scale),
        "scale": str(scale),
        "side_multiple": "1",
        "input": "rgb x (0-255)",
        "output": "rgb y (0-255), clipped and rounded",
        "weights": "F32, PyTorch layout, exactly the file's values",
        "license": LICENSE,
        "source": "%s x%d (npm, unpacked); sha256 of model.json + shard %s"
                  % (PACKAGES[family], scale, sha.hexdigest()),
        "graph": json.dumps({"inputs": ["input"], "outputs": outputs, "nodes": E.nodes},
                            separators=(",", ":")),
    }
    out = os.path.join(out_dir, "%s-x%d.safetensors" % (family, scale))
    write_safetensors(out, E.tensors, metadata)
    params = sum(int(a.size) for a in E.tensors.values())
    print("%s: %d nodes, %d parameters" % (out, len(E.nodes), params))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", default=T.UPSCALE_DIR)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "models"))
    ap.add_argument("--only", help="family-xN, e.g. esrgan-slim-x2")
    a = ap.parse_args()
    for family in PACKAGES:
        for s in SCALES:
            if a.only and a.only != "%s-x%d" % (family, s):
                continue
            convert(a.src, family, s, a.out)


if __name__ == "__main__":
    main()
