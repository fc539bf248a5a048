#!/usr/bin/env python3
"""export_onnx.py - export the Hayao generator to ONNX for the ONNX Runtime peer of
bench/compare.sh.

Run with Debian's Python (PyTorch 1.13, numpy); needs no `onnx` package:
  /usr/bin/python3 bench/export_onnx.py --size 512 --output bench/results/hayao_512.onnx

The network is tools/reference_model.py's Generator loaded from models/hayao.safetensors
(eps 1e-12, TF-legacy "asymmetric" bilinear resize): the network and weights our engine runs.

The resize: the reference computes TF's legacy bilinear resize with index gathers, because
PyTorch has no such mode; traced, that would become Gather ops with constant index tensors,
which is not what an ONNX user would run. F.interpolate(align_corners=False) would export as
a Resize with coordinate_transformation_mode "half_pixel", a different function. So the two
resizes go through an autograd.Function whose ONNX symbolic emits Resize with mode "linear"
and coordinate_transformation_mode "asymmetric" (src = dst * in / out, clamped to the edge):
exactly TF legacy. The eager forward of that function is the reference's gather code, so the
traced shapes and the check output below are the reference's.

With --check PREFIX it also writes PREFIX.in.f32 and PREFIX.out.f32 (raw little-endian
float32, NCHW): a deterministic input and the PyTorch output, so bench/peers/ort_bench.js
--check PREFIX can show that ONNX Runtime computes the same function.
"""

import argparse
import json
import os
import sys
import warnings

import torch

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(BENCH, "peers"))
import reference_model as R  # noqa: E402
from torch_bench import synthetic_input  # noqa: E402


class ResizeAsymmetric(torch.autograd.Function):
    """TF legacy bilinear resize to a fixed (height, width): eager = the reference's code,
    ONNX = one Resize node in the mode that is the same function."""

    @staticmethod
    def forward(ctx, x, n, c, out_h, out_w):
        # The reference's gather code, with the input size as plain ints: under the ONNX
        # tracer x.shape holds tensors, which its numpy index maths cannot take.
        y0, y1, yf = R._axis_coords(int(x.shape[2]), out_h)
        x0, x1, xf = R._axis_coords(int(x.shape[3]), out_w)
        xf = xf.view(1, 1, 1, -1)
        yf = yf.view(1, 1, -1, 1)
        top_rows = x[:, :, y0, :]
        bot_rows = x[:, :, y1, :]
        top = top_rows[:, :, :, x0] + (top_rows[:, :, :, x1] - top_rows[:, :, :, x0]) * xf
        bot = bot_rows[:, :, :, x0] + (bot_rows[:, :, :, x1] - bot_rows[:, :, :, x0]) * xf
        return top + (bot - top) * yf

    @staticmethod
    def symbolic(g, x, n, c, out_h, out_w):
        # The input is fixed-size, so every shape here is a constant of the graph.
        empty = g.op("Constant", value_t=torch.tensor([], dtype=torch.float32))
        sizes = g.op("Constant", value_t=torch.tensor([n, c, out_h, out_w], dtype=torch.int64))
        return g.op("Resize", x, empty, empty, sizes, mode_s="linear",
                    coordinate_transformation_mode_s="asymmetric", nearest_mode_s="floor")


class ExportGenerator(R.Generator):
    """The reference Generator with its two resizes routed through ResizeAsymmetric; the
    layer list and state_dict are the parent's."""

    def forward(self, x):
        n, h, w = int(x.shape[0]), int(x.shape[2]), int(x.shape[3])
        out = self.block_a(x)
        half_h, half_w = int(out.shape[2]), int(out.shape[3])
        out = self.block_b(out)
        out = self.block_c(out)
        out = ResizeAsymmetric.apply(out, n, int(out.shape[1]), half_h, half_w)
        out = self.block_d(out)
        out = ResizeAsymmetric.apply(out, n, int(out.shape[1]), h, w)
        out = self.block_e(out)
        return self.out_layer(out)


def _fields(buf):
    """(field number, wire type, value) of one protobuf message; value is bytes for
    length-delimited fields, an int otherwise."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i:i + n], i + n
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            value, i = int.from_bytes(buf[i:i + n], "little"), i + n
        else:
            raise ValueError("protobuf wire type %d" % wire)
        yield field, wire, value


def _varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, i


def op_histogram(path):
    """{op_type: count} of an ONNX file's main graph (ModelProto.graph = 7,
    GraphProto.node = 1, NodeProto.op_type = 4), read without the onnx package."""
    with open(path, "rb") as f:
        model = f.read()
    ops = {}
    for field, _, graph in _fields(model):
        if field != 7:
            continue
        for gfield, _, node in _fields(graph):
            if gfield != 1:
                continue
            for nfield, _, value in _fields(node):
                if nfield == 4:
                    op = value.decode()
                    ops[op] = ops.get(op, 0) + 1
    return ops


def load(model_path):
    sd, meta = R.state_dict_from_safetensors(model_path)
    if meta.get("resize", "asymmetric") != "asymmetric":
        raise SystemExit("%s: resize mode %r, this exporter writes 'asymmetric' only"
                         % (model_path, meta.get("resize")))
    g = ExportGenerator(eps=float(meta.get("norm_eps", "1e-12")), resize_mode="asymmetric")
    g.load_state_dict(sd, strict=True)
    return g.eval()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "hayao.safetensors"))
    ap.add_argument("--size", type=int, default=512, help="side of the square input")
    ap.add_argument("--output")
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--check", metavar="PREFIX", help="also write PREFIX.in.f32/.out.f32")
    ap.add_argument("--ops", metavar="FILE", help="only print FILE's node histogram")
    a = ap.parse_args()
    if a.ops:
        print(json.dumps(op_histogram(a.ops), sort_keys=True))
        return

    if not a.output:
        ap.error("--output is required")
    # PyTorch 1.13 flags g.op() as deprecated for 1.14; it is the documented way in 1.13.
    warnings.filterwarnings("ignore", category=FutureWarning)
    # Constant folding skips the Slice ops of the reflection pads' index maths; ONNX Runtime
    # folds them at session creation (graphOptimizationLevel 'all'), so the warning is noise.
    warnings.filterwarnings("ignore", message="Constant folding - Only steps=1")
    # The graph is exported for one fixed size: sizes turned into Python ints are meant.
    warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
    torch.set_num_threads(2)
    g = load(a.model)
    x = torch.from_numpy(synthetic_input(a.size))
    tmp = a.output + ".tmp"
    with torch.no_grad():
        torch.onnx.export(g, (x,), tmp, opset_version=a.opset, input_names=["input"],
                          output_names=["output"], do_constant_folding=True)
    os.replace(tmp, a.output)

    if a.check:
        with torch.no_grad():
            y = g(x)  # the reference's own gather resize: the function ONNX must match
        x.numpy().astype("<f4").tofile(a.check + ".in.f32")
        y.numpy().astype("<f4").tofile(a.check + ".out.f32")
    ops = op_histogram(a.output)
    print("wrote %s (%d bytes, opset %d, 1x3x%dx%d, Resize linear/asymmetric); nodes: %s"
          % (a.output, os.path.getsize(a.output), a.opset, a.size, a.size,
             ", ".join("%s %d" % kv for kv in sorted(ops.items(), key=lambda kv: -kv[1]))))


if __name__ == "__main__":
    main()
