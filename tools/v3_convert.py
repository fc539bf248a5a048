#!/usr/bin/env python3
"""v3_convert.py - convert the AnimeGANv3 model files of ../shared/models/animeganv3/ into the
project's graph safetensors (docs/graph.md: metadata key `graph`, weights in PyTorch layout).

Offline tool (Debian's Python 3 + numpy; python3-onnx for the .onnx file). The three inputs:

  hayao    AnimeGANv3_Hayao_36_QUANTIZED_fp16.tflite  -> models/hayao-v3.safetensors  (F16)
  shinkai  AnimeGANv3_Shinkai_37.pb (frozen GraphDef) -> models/shinkai-v3.safetensors (F32)
  cute     AnimeGANv3_tiny_Cute.onnx (tf2onnx)        -> models/cute-v3.safetensors    (F32)

Each file is read into a small normalised op graph (constants folded, shape arithmetic kept
symbolic), then the generator is recognised from that graph by matching every layer
backwards from the output: reflect pad + conv (the pad folded into the conv's `pad`), LADE
from its decomposed moments (MEAN / SQUARED_DIFFERENCE / SQRT or RSQRT / DIV or MUL / ADD),
LeakyReLU, the external-attention block (reshapes, conv1d = matmul, transposes around the
softmax, the 1e-9 sum normalisation, the second conv1d with the transposed memory, the
BatchNorm as constants), the bilinear x2 resizes (whose size must be 2 x the resized map's
own size: the graph records them as `resize` to the skip tensor they are added to), the skip
adds, the output conv and tanh; for the tiny network BatchNorm folded into conv biases, the
two residual bottlenecks and the one LADE. Shapes, strides, pads, channel counts and
constants are checked against the architecture; anything else is refused with a message.

Usage (from the repository root):
  /usr/bin/python3 tools/v3_convert.py [--model hayao|shinkai|cute|all] [--dump]
      [--src DIR] [--outdir models] [--input FILE]
The output is deterministic: rerunning it gives byte-identical files.
"""

import argparse
import hashlib
import json
import os
import struct
import sys

import numpy as np

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import v3_formats as F  # noqa: E402

REPO_ROOT = os.path.dirname(TOOLS)
SRC_DIR = "/work/shared/models/animeganv3"

LICENSE = ("AnimeGANv3 weights (c) TachibanaYoshino: free for non-commercial use only "
           "(research, teaching, personal use); commercial use requires the author's "
           "permission.")

MODELS = {
    "hayao": dict(file="AnimeGANv3_Hayao_36_QUANTIZED_fp16.tflite", out="hayao-v3.safetensors",
                  style="Hayao", arch="animeganv3",
                  origin="AnimeGANv3 generator, style Hayao (TachibanaYoshino/AnimeGANv3), "
                         "exported by its author as TFLite with float16 weights; file "
                         "AnimeGANv3_Hayao_36_QUANTIZED_fp16.tflite of tuanmjnh/AnimeGANv3_Video"),
    "shinkai": dict(file="AnimeGANv3_Shinkai_37.pb", out="shinkai-v3.safetensors",
                    style="Shinkai", arch="animeganv3",
                    origin="AnimeGANv3 generator, style Shinkai (TachibanaYoshino/AnimeGANv3), "
                           "frozen TensorFlow GraphDef exported by its author; file "
                           "AnimeGANv3_Shinkai_37.pb of tuanmjnh/AnimeGANv3_Video"),
    "cute": dict(file="AnimeGANv3_tiny_Cute.onnx", out="cute-v3.safetensors",
                 style="Cute", arch="animeganv3-tiny",
                 origin="AnimeGANv3 tiny generator, style Cute (TachibanaYoshino/AnimeGANv3), "
                        "ONNX (tf2onnx 1.15.1, opset 15) exported by its author; file "
                        "AnimeGANv3_tiny_Cute.onnx of tuanmjnh/AnimeGANv3_Video (identical to "
                        "michalblaha/AnimeGANv3 deploy/)"),
}

LADE_EPS = 1e-5          # what the networks were trained with (the .pb and .onnx store it)
ATTENTION_EPS = 1e-9     # the sum normalisation of the external attention (the .pb stores it)


def check(cond, msg):
    if not cond:
        raise SystemExit("v3_convert: " + msg)


# ---- the normalised graph -----------------------------------------------------------------
#
# Node ops (NHWC graphs from .pb / .tflite): input, const (value), sym (value: list of
# symbolic ints), pad (paddings [4,2], mode), conv (w OIHW in the file's dtype, stride, bias),
# mean / sum (axes, keep), sqdiff, sub, add, mul, div, sqrt, rsqrt, lrelu (alpha),
# resize (size: const or sym, align_corners, half_pixel), reshape (shape: const or sym or
# None for ExpandDims / Squeeze), transpose (perm), softmax (beta), tanh.
# Symbolic ints: ("dim", tensor, axis) and ("mul", k, term).

class Node:
    def __init__(self, op, ins=(), **attrs):
        self.op = op
        self.ins = list(ins)
        self.attrs = attrs
        self.shape = attrs.pop("shape", None)   # static shape where the file gives it

    def __getitem__(self, k):
        return self.attrs[k]


class NGraph:
    def __init__(self):
        self.nodes = {}
        self.input = None
        self.output = None
        self.file_ops = {}     # op type of the file -> count, for --dump

    def n(self, name):
        check(name in self.nodes, "tensor %s has no producer" % name)
        return self.nodes[name]

    def const(self, name):
        n = self.n(name)
        return n["value"] if n.op == "const" else None


def fold(op, vals, attrs):
    """Constant folding of the ops whose inputs are all constant (float32 like TF)."""
    if op == "add":
        return (vals[0] + vals[1]).astype(np.result_type(vals[0], vals[1]))
    if op == "sub":
        return vals[0] - vals[1]
    if op == "mul":
        return vals[0] * vals[1]
    if op == "rsqrt":
        return (np.float32(1) / np.sqrt(vals[0])).astype(vals[0].dtype)
    if op == "sqrt":
        return np.sqrt(vals[0])
    if op == "transpose":
        return np.transpose(vals[0], [int(p) for p in vals[1]])
    if op == "expand":
        return np.expand_dims(vals[0], int(np.asarray(vals[1]).ravel()[0]))
    if op == "range":
        return np.arange(int(vals[0]), int(vals[1]), int(vals[2]), dtype=np.int32)
    if op == "pack":
        return np.stack([np.asarray(v) for v in vals], axis=attrs.get("axis", 0))
    if op == "concat":
        axis = int(np.asarray(vals[-1]).ravel()[0])
        return np.concatenate([np.atleast_1d(v) for v in vals[:-1]], axis=axis)
    return None


def sym_list(g, name):
    """A 1-D int tensor as a python list of ints / symbolic terms, or None."""
    n = g.n(name)
    if n.op == "const":
        return [int(x) for x in np.asarray(n["value"]).ravel()]
    if n.op == "sym":
        return list(n["value"])
    return None


# ---- .pb -> normalised graph --------------------------------------------------------------

def pb_graph(buf):
    nodes = F.read_graphdef(buf)
    g = NGraph()
    alias = {}

    def ref(x):
        check(not x.startswith("^"), "control dependency %s" % x)
        if x.endswith(":0"):
            x = x[:-2]
        check(":" not in x, "multi-output reference %s" % x)
        while x in alias:
            x = alias[x]
        return x

    for nd in nodes:
        g.file_ops[nd.op] = g.file_ops.get(nd.op, 0) + 1
        ins = [ref(x) for x in nd.input]
        op = nd.op
        T = nd.a("T")
        if op not in ("Const", "Placeholder", "Shape") and T is not None:
            check(T in (1, 3), "%s: dtype %d" % (nd.name, T))
        if op == "Placeholder":
            check(g.input is None, "two placeholders")
            check(nd.a("dtype") == 1, "input is not float32")
            g.input = nd.name
            g.nodes[nd.name] = Node("input")
            continue
        if op == "Const":
            g.nodes[nd.name] = Node("const", value=nd.a("value"))
            continue
        if op in ("Identity", "StopGradient"):
            alias[nd.name] = ins[0]
            continue
        simple = {"AddV2": "add", "Add": "add", "Sub": "sub", "Mul": "mul", "RealDiv": "div",
                  "Sqrt": "sqrt", "Rsqrt": "rsqrt", "SquaredDifference": "sqdiff",
                  "Tanh": "tanh", "Softmax": "softmax", "Transpose": "transpose",
                  "Range": "range", "ConcatV2": "concat", "Pack": "pack",
                  "ExpandDims": "expand"}
        if op in simple:
            nop = simple[op]
            vals = [g.const(x) for x in ins]
            if all(v is not None for v in vals):
                v = fold(nop, vals, {"axis": nd.a("axis", 0)})
                check(v is not None, "%s: cannot fold %s" % (nd.name, op))
                g.nodes[nd.name] = Node("const", value=v)
                continue
            if nop in ("pack", "mul") and all(g.n(x).op in ("const", "sym") for x in ins):
                if nop == "mul":
                    a, b = ins
                    k, t = (a, b) if g.n(a).op == "const" else (b, a)
                    tv = sym_list(g, t)
                    check(len(tv) == 1, "%s: symbolic mul" % nd.name)
                    g.nodes[nd.name] = Node("sym", value=[("mul", int(g.const(k).ravel()[0]),
                                                           tv[0])])
                else:
                    check(nd.a("axis", 0) == 0, "%s: pack axis" % nd.name)
                    out = []
                    for x in ins:
                        v = sym_list(g, x)
                        check(v is not None and len(v) == 1, "%s: pack input" % nd.name)
                        out += v
                    g.nodes[nd.name] = Node("sym", value=out)
                continue
            if nop == "transpose":
                g.nodes[nd.name] = Node("transpose", [ins[0]],
                                        perm=[int(p) for p in g.const(ins[1])])
            elif nop == "expand":
                g.nodes[nd.name] = Node("reshape", [ins[0]], kind="expand",
                                        axis=int(g.const(ins[1]).ravel()[0]))
            elif nop == "softmax":
                g.nodes[nd.name] = Node("softmax", ins, beta=1.0)
            else:
                check(nop in ("add", "sub", "mul", "div", "sqrt", "rsqrt", "sqdiff", "tanh"),
                      "%s: %s on a non-constant" % (nd.name, op))
                g.nodes[nd.name] = Node(nop, ins)
            continue
        if op == "Shape":
            g.nodes[nd.name] = Node("sym", value=[("dim", ins[0], i) for i in range(4)])
            continue
        if op == "StridedSlice":
            base = sym_list(g, ins[0])
            b, e, s = (g.const(x) for x in ins[1:4])
            check(base is not None and b is not None and e is not None and s is not None,
                  "%s: strided slice of a tensor" % nd.name)
            check(nd.a("shrink_axis_mask") == 1 and int(s[0]) == 1 and int(e[0]) == int(b[0]) + 1
                  and not nd.a("begin_mask") and not nd.a("end_mask") and
                  not nd.a("ellipsis_mask") and not nd.a("new_axis_mask"),
                  "%s: strided slice other than one element" % nd.name)
            g.nodes[nd.name] = Node("sym", value=[base[int(b[0])]])
            continue
        if op == "MirrorPad":
            mode = nd.a("mode")
            check(mode == b"REFLECT", "%s: mirror pad mode %s" % (nd.name, mode))
            p = g.const(ins[1])
            check(p is not None and p.shape == (4, 2), "%s: paddings" % nd.name)
            g.nodes[nd.name] = Node("pad", [ins[0]], paddings=p.astype(np.int64), mode="reflect")
            continue
        if op == "Conv2D":
            check(nd.a("padding") == b"VALID", "%s: padding %s" % (nd.name, nd.a("padding")))
            check(nd.a("data_format", b"NHWC") == b"NHWC", "%s: data format" % nd.name)
            st = nd.a("strides")
            check(st[0] == 1 and st[3] == 1 and st[1] == st[2], "%s: strides %s" % (nd.name, st))
            check(list(nd.a("dilations", [1, 1, 1, 1])) == [1, 1, 1, 1], "%s: dilation" % nd.name)
            w = g.const(ins[1])
            check(w is not None and w.ndim == 4, "%s: weights are not a constant" % nd.name)
            g.nodes[nd.name] = Node("conv", [ins[0]], w=np.ascontiguousarray(
                np.transpose(w, (3, 2, 0, 1))), stride=int(st[1]), bias=None)
            continue
        if op in ("Mean", "Sum"):
            axes = g.const(ins[1])
            check(axes is not None, "%s: reduction axes" % nd.name)
            g.nodes[nd.name] = Node(op.lower(), [ins[0]], axes=sorted(int(a) for a in
                                                                     np.ravel(axes)),
                                    keep=bool(nd.a("keep_dims")))
            continue
        if op == "LeakyRelu":
            g.nodes[nd.name] = Node("lrelu", ins, alpha=float(nd.a("alpha")))
            continue
        if op == "ResizeBilinear":
            size = sym_list(g, ins[1])
            check(size is not None, "%s: size" % nd.name)
            g.nodes[nd.name] = Node("resize", [ins[0]], size=size,
                                    align_corners=bool(nd.a("align_corners")),
                                    half_pixel=bool(nd.a("half_pixel_centers")))
            continue
        if op == "Reshape":
            g.nodes[nd.name] = Node("reshape", [ins[0]], kind="reshape",
                                    target=sym_list(g, ins[1]))
            continue
        if op == "Squeeze":
            g.nodes[nd.name] = Node("reshape", ins, kind="squeeze",
                                    axis=list(nd.a("squeeze_dims")))
            continue
        raise SystemExit("v3_convert: %s: unexpected op %s" % (nd.name, op))
    check(g.input is not None, "no input placeholder")
    # the output: the one non-constant node nobody reads
    used = set()
    for n in g.nodes.values():
        used.update(n.ins)
        if n.op == "sym":
            for t in n["value"]:
                while isinstance(t, tuple):
                    if t[0] == "dim":
                        used.add(t[1])
                        break
                    t = t[2]
    outs = [k for k, n in g.nodes.items() if k not in used and n.op not in ("const", "sym")]
    check(len(outs) == 1, "graph outputs %s" % outs)
    g.output = outs[0]
    return g


# ---- .tflite -> normalised graph ----------------------------------------------------------

def tflite_graph(buf):
    m = F.TFLite(buf)
    g = NGraph()
    name = lambda i: "t%d" % i  # noqa: E731
    for t in m.tensors:
        if t.data is not None:
            g.nodes[name(t.index)] = Node("const", value=t.data, shape=t.shape)
    check(len(m.inputs) == 1 and len(m.outputs) == 1, "inputs/outputs %s %s" % (m.inputs,
                                                                               m.outputs))
    check(m.tensors[m.inputs[0]].type == 0, "input is not float32")
    g.input = name(m.inputs[0])
    g.nodes[g.input] = Node("input", shape=m.tensors[m.inputs[0]].shape)
    g.output = name(m.outputs[0])
    for op in m.ops:
        g.file_ops[op.name] = g.file_ops.get(op.name, 0) + 1
        check(len(op.outputs) == 1, "op%d: %d outputs" % (op.index, len(op.outputs)))
        out = name(op.outputs[0])
        shape = m.tensors[op.outputs[0]].shape
        ins = [name(i) for i in op.inputs if i >= 0]
        where = "op%d (%s)" % (op.index, op.name)
        if op.name == "DEQUANTIZE":
            v = g.const(ins[0])
            check(v is not None and v.dtype == np.float16, "%s: not a float16 constant" % where)
            g.nodes[out] = Node("const", value=v, shape=shape)  # kept float16: exact
            continue
        if op.name in ("ADD", "SUB", "MUL", "DIV"):
            check(op.opt(0, "b") == 0, "%s: fused activation" % where)
            nop = op.name.lower()
            vals = [g.const(x) for x in ins]
            if all(v is not None for v in vals):
                g.nodes[out] = Node("const", value=fold(nop, vals, {}), shape=shape)
            else:
                g.nodes[out] = Node(nop, ins, shape=shape)
        elif op.name in ("SQRT", "RSQRT", "TANH", "SQUARED_DIFFERENCE"):
            nop = {"SQRT": "sqrt", "RSQRT": "rsqrt", "TANH": "tanh",
                   "SQUARED_DIFFERENCE": "sqdiff"}[op.name]
            g.nodes[out] = Node(nop, ins, shape=shape)
        elif op.name == "CONV_2D":
            check(op.opt(0, "b") == 1, "%s: padding is not VALID" % where)
            sw, sh = op.opt(1, "i"), op.opt(2, "i")
            check(sw == sh, "%s: stride %dx%d" % (where, sh, sw))
            check(op.opt(3, "b") == 0, "%s: fused activation" % where)
            check(op.opt(4, "i", 1) == 1 and op.opt(5, "i", 1) == 1, "%s: dilation" % where)
            w = g.const(ins[1])
            check(w is not None and w.ndim == 4, "%s: weights" % where)
            bias = g.const(ins[2]) if len(ins) > 2 else None
            check(len(ins) < 3 or bias is not None, "%s: bias is not constant" % where)
            g.nodes[out] = Node("conv", [ins[0]], w=np.ascontiguousarray(
                np.transpose(w, (0, 3, 1, 2))), stride=sh, bias=bias, shape=shape)
        elif op.name == "MIRROR_PAD":
            check(op.opt(0, "b") == 0, "%s: mirror pad is not REFLECT" % where)
            p = g.const(ins[1])
            check(p is not None and p.shape == (4, 2), "%s: paddings" % where)
            g.nodes[out] = Node("pad", [ins[0]], paddings=p.astype(np.int64), mode="reflect",
                                shape=shape)
        elif op.name in ("MEAN", "SUM"):
            axes = g.const(ins[1])
            check(axes is not None, "%s: axes" % where)
            g.nodes[out] = Node(op.name.lower(), [ins[0]],
                                axes=sorted(int(a) for a in np.ravel(axes)),
                                keep=bool(op.opt(0, "B")), shape=shape)
        elif op.name == "LEAKY_RELU":
            g.nodes[out] = Node("lrelu", ins, alpha=float(op.opt(0, "f")), shape=shape)
        elif op.name == "RESIZE_BILINEAR":
            size = g.const(ins[1])
            check(size is not None, "%s: size" % where)
            g.nodes[out] = Node("resize", [ins[0]], size=[int(s) for s in size],
                                align_corners=bool(op.opt(2, "B")),
                                half_pixel=bool(op.opt(3, "B")), shape=shape)
        elif op.name == "RESHAPE":
            tgt = g.const(ins[1]) if len(ins) > 1 else None
            g.nodes[out] = Node("reshape", [ins[0]], kind="reshape",
                                target=None if tgt is None else [int(x) for x in tgt],
                                shape=shape)
        elif op.name == "TRANSPOSE":
            g.nodes[out] = Node("transpose", [ins[0]], perm=[int(p) for p in g.const(ins[1])],
                                shape=shape)
        elif op.name == "SOFTMAX":
            g.nodes[out] = Node("softmax", ins, beta=float(op.opt(0, "f")), shape=shape)
        else:
            raise SystemExit("v3_convert: %s: unexpected operator" % where)
    return g


# ---- matching the full AnimeGANv3 generator (NHWC graphs) ---------------------------------

class Conv:
    """One convolution as the project graph stores it."""

    def __init__(self, w, stride, pad, src, bias=None):
        self.w = w              # OIHW, the file's dtype
        self.stride = stride
        self.pad = pad          # (top, bottom, left, right), reflect
        self.src = src          # normalised-graph tensor the (padded) conv reads
        self.bias = bias        # None or float32 (OC)


class Block:
    def __init__(self, conv, lade_w=None, eps=None, act=True):
        self.conv = conv
        self.lade_w = lade_w
        self.eps = eps          # (eps of x, eps of y) as stored in the file
        self.act = act
        self.out = None         # normalised-graph tensor of the block's output


class FullMatcher:
    def __init__(self, g):
        self.g = g
        self.deviations = []
        self.file_eps = set()      # LADE eps values as stored
        self.att_eps = None

    def op(self, name, *ops):
        n = self.g.n(name)
        check(n.op in ops, "%s: expected %s, found %s" % (name, "/".join(ops), n.op))
        return n

    def split_const(self, n, what):
        """(non-constant input, constant value) of a binary op with one constant operand."""
        a, b = n.ins
        va, vb = self.g.const(a), self.g.const(b)
        check((va is None) != (vb is None), "%s: expected one constant operand" % what)
        return (b, va) if va is not None else (a, vb)

    def conv(self, name):
        n = self.op(name, "conv")
        src = n.ins[0]
        pad = (0, 0, 0, 0)
        p = self.g.n(src)
        if p.op == "pad":
            pp = p["paddings"]
            check(pp[0, 0] == pp[0, 1] == pp[3, 0] == pp[3, 1] == 0, "%s: pads N or C" % src)
            check(p["mode"] == "reflect", "%s: pad mode" % src)
            pad = (int(pp[1, 0]), int(pp[1, 1]), int(pp[2, 0]), int(pp[2, 1]))
            src = p.ins[0]
        bias = n["bias"]
        if bias is not None:
            check(not np.any(bias), "%s: nonzero conv bias" % name)
        return Conv(n["w"], n["stride"], pad, src)

    def moments(self, mean_name, var_name):
        """mean = MEAN(z, [1,2]); var = MEAN(SQDIFF(z, mean), [1,2]) -> z."""
        m = self.op(mean_name, "mean")
        v = self.op(var_name, "mean")
        for k in (m, v):
            check(k["axes"] == [1, 2] and k["keep"], "%s: moments axes %s" % (mean_name,
                                                                              k["axes"]))
        sq = self.op(v.ins[0], "sqdiff")
        check(sq.ins[0] == m.ins[0] and sq.ins[1] == mean_name,
              "%s: variance is not of the mean's input" % var_name)
        return m.ins[0]

    def std(self, name):
        """sqrt(var(z) + eps) (or rsqrt) -> (z, mean node, eps)."""
        s = self.op(name, "sqrt", "rsqrt")
        a = self.op(s.ins[0], "add")
        var, eps = self.split_const(a, s.ins[0])
        check(eps.size == 1, "%s: eps is not a scalar" % name)
        v = self.op(var, "mean")
        sq = self.op(v.ins[0], "sqdiff")
        z = self.moments(sq.ins[1], var)
        return z, sq.ins[1], float(np.float32(eps.ravel()[0])), s.op

    def lade(self, name):
        """LADE(x) = (x - mean x) / sqrt(var x + eps) * sqrt(var y + eps) + mean y, y = 1x1 conv
        of x -> (x, weight, (eps x, eps y))."""
        out = self.op(name, "add")
        a, b = out.ins
        if self.g.n(a).op == "mean":
            a, b = b, a
        mean_y = b
        self.op(mean_y, "mean")
        mul = self.op(a, "mul")
        p, q = mul.ins
        if self.g.n(p).op == "sqrt" and self.g.n(q).op in ("div", "mul"):
            p, q = q, p
        y, mean_y2, eps_y, kind = self.std(q)
        check(kind == "sqrt" and mean_y2 == mean_y, "%s: scale of y" % name)
        norm = self.op(p, "div", "mul")
        sub = self.op(norm.ins[0], "sub")
        x, mean_x, eps_x, kind = self.std(norm.ins[1])
        check((norm.op, kind) in (("div", "sqrt"), ("mul", "rsqrt")), "%s: normalisation %s/%s"
              % (name, norm.op, kind))
        check(sub.ins == [x, mean_x], "%s: x - mean(x)" % name)
        yc = self.conv(y)
        check(yc.src == x and yc.pad == (0, 0, 0, 0) and yc.stride == 1 and
              yc.w.shape[2:] == (1, 1), "%s: y is not a 1x1 conv of x" % name)
        self.file_eps.update([eps_x, eps_y])
        return x, yc.w, (eps_x, eps_y)

    def block(self, name):
        n = self.op(name, "lrelu")
        check(abs(n["alpha"] - 0.2) < 1e-6, "%s: LeakyReLU alpha %g" % (name, n["alpha"]))
        x, lw, eps = self.lade(n.ins[0])
        c = self.conv(x)
        b = Block(c, lw, eps)
        b.out = name
        return b

    def strip_reshapes(self, name):
        while self.g.n(name).op == "reshape":
            name = self.g.n(name).ins[0]
        return name

    def resize_x2(self, name):
        """A TF-legacy bilinear resize whose size is twice its input's -> input."""
        r = self.op(name, "resize")
        check(not r["align_corners"] and not r["half_pixel"],
              "%s: resize is not TF legacy (align_corners/half_pixel_centers set)" % name)
        x = r.ins[0]
        size = r["size"]
        xs = self.g.n(x).shape
        if xs is not None and all(isinstance(s, int) for s in size):
            check(list(size) == [2 * xs[1], 2 * xs[2]], "%s: size %s for input %s"
                  % (name, size, xs))
        else:
            check(size == [("mul", 2, ("dim", x, 1)), ("mul", 2, ("dim", x, 2))],
                  "%s: size is not 2 x the input's: %s" % (name, size))
        return x

    def stage(self, name):
        """block(add(block(resize x2(prev)), skip)) -> (prev, skip, first block, second)."""
        b2 = self.block(name)
        add = self.op(b2.conv.src, "add")
        for u, v in (add.ins, add.ins[::-1]):
            if self.g.n(u).op != "lrelu":
                continue
            b1 = self.block(u)
            if self.g.n(b1.conv.src).op == "resize":
                return self.resize_x2(b1.conv.src), v, b1, b2
        raise SystemExit("v3_convert: %s: no resized block before the skip add" % name)

    def attention(self, name):
        """lrelu(add(BN(conv1x1(EA(conv1x1(x)))), x)) -> dict."""
        n = self.op(name, "lrelu")
        check(abs(n["alpha"] - 0.2) < 1e-6, "%s: alpha" % name)
        add = self.op(n.ins[0], "add")
        res = None
        for u, v in (add.ins, add.ins[::-1]):
            if self.g.n(u).op in ("conv", "add") and self.g.n(v).op == "lrelu":
                res, x = u, v
                break
        check(res is not None, "%s: attention residual add" % name)
        scale = shift = None
        if self.g.n(res).op == "add":  # inference BatchNorm, constants folded: x * s + t
            bn = self.g.n(res)
            mul, shift = self.split_const(bn, res)
            mn = self.op(mul, "mul")
            res, scale = self.split_const(mn, mul)
            check(scale.shape == (128,) and shift.shape == (128,), "%s: BatchNorm shape" % res)
        proj = self.conv(res)
        check(proj.pad == (0, 0, 0, 0) and proj.w.shape == (128, 128, 1, 1), "%s: projection"
              % res)
        # back to (H, W, 128): the attention input's spatial shape
        r = self.op(proj.src, "reshape")
        tgt = r["target"]
        xs = self.g.n(x).shape
        check(tgt == [("dim", x, 0), ("dim", x, 1), ("dim", x, 2), 128] or
              (xs is not None and tgt == list(xs)), "%s: reshape target %s" % (proj.src, tgt))
        mv = self.conv(self.strip_reshapes(proj.src))
        div = self.op(self.strip_reshapes(mv.src), "div")
        t1 = div.ins[0]
        e = self.op(div.ins[1], "add")
        s, eps = self.split_const(e, div.ins[1])
        sm = self.op(s, "sum")
        check(sm.ins[0] == t1 and sm["axes"] == [2] and sm["keep"], "%s: slot sum" % s)
        self.att_eps = float(np.float32(eps.ravel()[0]))
        tr1 = self.op(t1, "transpose")
        check(tr1["perm"] == [0, 2, 1], "%s: perm %s" % (t1, tr1["perm"]))
        so = self.op(tr1.ins[0], "softmax")
        check(so["beta"] == 1.0, "%s: softmax beta" % tr1.ins[0])
        tr0 = self.op(so.ins[0], "transpose")
        check(tr0["perm"] == [0, 2, 1], "%s: perm %s" % (so.ins[0], tr0["perm"]))
        mk = self.conv(self.strip_reshapes(tr0.ins[0]))
        q = self.conv(self.strip_reshapes(mk.src))
        check(q.src == x and q.pad == (0, 0, 0, 0) and q.w.shape == (128, 128, 1, 1),
              "attention input is not the encoder output")
        for c in (mk, mv, q):
            check(c.stride == 1 and c.pad == (0, 0, 0, 0), "attention conv stride/pad")
        check(mk.w.shape == (128, 128, 1, 1) and mv.w.shape == (128, 128, 1, 1),
              "memory shapes %s %s" % (mk.w.shape, mv.w.shape))
        memory = mk.w[:, :, 0, 0].T          # (C, K): slots = x . memory
        check(np.array_equal(mv.w[:, :, 0, 0], memory),
              "the second conv1d is not the first one's memory transposed")
        return dict(x=x, q=q.w, memory=np.ascontiguousarray(memory), proj=proj.w, scale=scale,
                    shift=shift)

    def run(self):
        g = self.g
        t = self.op(g.output, "tanh")
        outc = self.conv(t.ins[0])
        stages = []
        cur = outc.src
        for _ in range(3):
            prev, skip, b1, b2 = self.stage(cur)
            stages.append((skip, b1, b2))
            cur = prev
        stages.reverse()
        att = self.attention(cur)
        enc = []
        cur = att["x"]
        while cur != g.input:
            b = self.block(cur)
            enc.append(b)
            cur = b.conv.src
        enc.reverse()
        return enc, att, stages, outc


# expected full architecture: (name, in, out, k, stride)
FULL_ENC = [("enc0", 3, 32, 7, 1), ("enc1", 32, 32, 3, 2), ("enc2", 32, 64, 3, 1),
            ("enc3", 64, 64, 3, 2), ("enc4", 64, 128, 3, 1), ("enc5", 128, 128, 3, 2),
            ("enc6", 128, 128, 3, 1)]
FULL_DEC = [("dec0", 128, 128, "enc4"), ("dec1", 128, 128, None),
            ("dec2", 128, 64, "enc2"), ("dec3", 64, 64, None),
            ("dec4", 64, 32, "enc0"), ("dec5", 32, 32, None)]


def expected_pad(k, s):
    if s == 2:
        return (1, 0, 1, 0)
    return ((k - 1) // 2,) * 4


class Emitter:
    """Builds the docs/graph.md node list and the tensor dict."""

    def __init__(self, dtype):
        self.nodes = []
        self.tensors = {}
        self.dtype = dtype

    def t(self, name, a, dtype=None):
        check(name not in self.tensors, "tensor %s twice" % name)
        self.tensors[name] = np.ascontiguousarray(a, dtype=dtype or self.dtype)
        return name

    def conv(self, name, src, c, bias=None):
        n = {"op": "conv", "name": name, "in": [src], "weight": self.t(name + ".weight", c.w),
             "stride": c.stride, "groups": 1, "pad": list(c.pad),
             "pad_mode": "reflect" if any(c.pad) else "zero"}
        if bias is not None:
            n["bias"] = self.t(name + ".bias", bias)
        self.nodes.append(n)
        return name

    def add(self, **n):
        self.nodes.append(n)
        return n["name"]


def check_conv(c, name, cin, cout, k, s):
    check(c.w.shape == (cout, cin, k, k), "%s: weight %s, expected %s" % (name, c.w.shape,
                                                                       (cout, cin, k, k)))
    check(c.stride == s, "%s: stride %d, expected %d" % (name, c.stride, s))
    check(c.pad == expected_pad(k, s), "%s: pads %s, expected %s" % (name, c.pad,
                                                                    expected_pad(k, s)))


def convert_full(g, dtype):
    m = FullMatcher(g)
    enc, att, stages, outc = m.run()
    # the epsilons as stored: 1e-5 / 1e-9, or 0 where float16 export flushed them
    ok_eps = {float(np.float32(LADE_EPS)), 0.0}
    check(m.file_eps <= ok_eps and len(m.file_eps) == 1,
          "LADE eps %s, expected 1e-5 (or 0 in an fp16 file)" % sorted(m.file_eps))
    check(m.att_eps in (float(np.float32(ATTENTION_EPS)), 0.0),
          "attention eps %r, expected 1e-9" % m.att_eps)
    check(len(enc) == len(FULL_ENC), "%d encoder blocks, expected %d" % (len(enc),
                                                                        len(FULL_ENC)))
    E = Emitter(dtype)
    names = {}
    src = "input"

    def block(name, b, src):
        E.conv(name, src, b.conv)
        E.add(op="lade", name=name + ".norm", **{"in": [name]},
              weight=E.t(name + ".lade.weight", b.lade_w), eps=LADE_EPS)
        return E.add(op="lrelu", name=name + ".act", **{"in": [name + ".norm"]}, alpha=0.2)

    for b, (name, cin, cout, k, s) in zip(enc, FULL_ENC):
        check_conv(b.conv, name, cin, cout, k, s)
        check(b.lade_w.shape == (cout, cout, 1, 1), "%s: LADE weight" % name)
        src = block(name, b, src)
        names[b.out] = src
        names[name] = src
    # attention
    check(names.get(att["x"]) == "enc6.act", "attention input")
    E.add(op="conv", name="att.conv", **{"in": ["enc6.act"]},
          weight=E.t("att.conv.weight", att["q"]), stride=1, groups=1, pad=[0, 0, 0, 0],
          pad_mode="zero")
    E.t("att.memory", att["memory"])
    E.add(op="matmul", name="att.slots", **{"in": ["att.conv"]}, weight="att.memory")
    E.add(op="softmax", name="att.softmax", **{"in": ["att.slots"]}, axis="spatial")
    E.add(op="sum_normalize", name="att.norm", **{"in": ["att.softmax"]}, eps=ATTENTION_EPS)
    E.add(op="matmul", name="att.back", **{"in": ["att.norm"]}, weight="att.memory",
          transpose=1)
    E.add(op="conv", name="att.proj", **{"in": ["att.back"]},
          weight=E.t("att.proj.weight", att["proj"]), stride=1, groups=1, pad=[0, 0, 0, 0],
          pad_mode="zero")
    last = "att.proj"
    if att["scale"] is not None:
        an = {"op": "affine", "name": "att.bn", "in": ["att.proj"],
              "scale": E.t("att.bn.scale", att["scale"], np.float32)}
        if np.any(att["shift"]):
            an["shift"] = E.t("att.bn.shift", att["shift"], np.float32)
        E.add(**an)
        last = "att.bn"
    E.add(op="add", name="att.add", **{"in": [last, "enc6.act"]})
    src = E.add(op="lrelu", name="att.act", **{"in": ["att.add"]}, alpha=0.2)
    # decoder
    for si, (skip, b1, b2) in enumerate(stages):
        (n1, ci1, co1, skipname), (n2, ci2, co2, _) = FULL_DEC[2 * si], FULL_DEC[2 * si + 1]
        check(names.get(skip) == skipname + ".act", "stage %d: skip is %s, expected %s"
              % (si, skip, skipname))
        check_conv(b1.conv, n1, ci1, co1, 3, 1)
        check_conv(b2.conv, n2, ci2, co2, 3, 1)
        up = E.add(op="resize", name="up%d" % si, **{"in": [src, skipname + ".act"]},
                   mode="asymmetric")
        a = block(n1, b1, up)
        s = E.add(op="add", name="skip%d" % si, **{"in": [a, skipname + ".act"]})
        src = block(n2, b2, s)
    check_conv(outc, "out.conv", 32, 3, 7, 1)
    E.conv("out.conv", src, outc)
    E.add(op="tanh", name="out", **{"in": ["out.conv"]})
    eps_note = sorted(m.file_eps)
    info = dict(file_lade_eps=eps_note, file_attention_eps=m.att_eps,
                bn=None if att["scale"] is None else (float(att["scale"][0]),
                                                      float(np.abs(att["shift"]).max())))
    return E, info


# ---- the tiny generator (tf2onnx ONNX, NCHW inside) ---------------------------------------

def onnx_graph(path):
    nodes, inits, model = F.read_onnx(path)
    g = NGraph()
    opset = {o.domain: o.version for o in model.opset_import}
    check(opset.get("", 0) in range(11, 19), "opset %s" % opset)
    check(len(model.graph.input) == 1 and len(model.graph.output) == 1, "one input / output")
    g.input = model.graph.input[0].name
    g.output = model.graph.output[0].name
    g.nodes[g.input] = Node("input")
    for k, v in inits.items():
        g.nodes[k] = Node("const", value=v)
    for op, nm, ins, outs, attrs in nodes:
        g.file_ops[op] = g.file_ops.get(op, 0) + 1
        check(len(outs) == 1, "%s: %d outputs" % (nm, len(outs)))
        g.nodes[outs[0]] = Node("onnx:" + op, ins, name=nm, **attrs)
    return g


class TinyMatcher:
    def __init__(self, g):
        self.g = g
        self.file_eps = set()

    def op(self, name, *ops):
        n = self.g.n(name)
        check(n.op in ["onnx:" + o for o in ops], "%s: expected %s, found %s"
              % (name, "/".join(ops), n.op))
        return n

    def const(self, name, what):
        v = self.g.const(name)
        check(v is not None, "%s: %s is not a constant" % (what, name))
        return v

    def conv(self, name, bias):
        """Conv (optionally after a reflect Pad, NCHW, or after Transpose(NHWC Pad(input)))."""
        n = self.op(name, "Conv")
        check(n.attrs.get("group", 1) == 1 and list(n.attrs.get("dilations", [1, 1])) == [1, 1],
              "%s: groups / dilation" % name)
        check(n.attrs.get("auto_pad", "NOTSET") == "NOTSET" and
              not any(n.attrs.get("pads", [0, 0, 0, 0])), "%s: conv pads" % name)
        st = list(n.attrs.get("strides", [1, 1]))
        check(st[0] == st[1], "%s: strides %s" % (name, st))
        w = self.const(n.ins[1], name)
        b = self.const(n.ins[2], name) if len(n.ins) > 2 and n.ins[2] else None
        check((b is not None) == bias, "%s: bias presence" % name)
        src = n.ins[0]
        pad = (0, 0, 0, 0)
        nhwc = False
        p = self.g.n(src)
        if p.op == "onnx:Transpose":
            check(list(p["perm"]) == [0, 3, 1, 2], "%s: perm" % src)
            src = p.ins[0]
            p = self.g.n(src)
            nhwc = True
        if p.op == "onnx:Pad":
            check(p.attrs.get("mode") == "reflect", "%s: pad mode %s" % (src, p.attrs.get("mode")))
            pp = [int(x) for x in self.const(p.ins[1], src)]
            check(len(p.ins) < 3 or not p.ins[2] or not np.any(self.g.const(p.ins[2])),
                  "%s: pad value" % src)
            if nhwc:  # n h w c order
                check(pp[0] == pp[3] == pp[4] == pp[7] == 0, "%s: pads %s" % (src, pp))
                pad = (pp[1], pp[5], pp[2], pp[6])
            else:
                check(pp[0] == pp[1] == pp[4] == pp[5] == 0, "%s: pads %s" % (src, pp))
                pad = (pp[2], pp[6], pp[3], pp[7])
            src = p.ins[0]
        check(nhwc == (src == self.g.input), "%s: layout of the conv input" % name)
        return Conv(w, st[0], pad, src, bias=b)

    def lrelu(self, name):
        n = self.op(name, "LeakyRelu")
        check(abs(n["alpha"] - 0.2) < 1e-6, "%s: alpha %g" % (name, n["alpha"]))
        return n.ins[0]

    def block(self, name):
        """LeakyRelu(Conv + bias)."""
        c = self.conv(self.lrelu(name), True)
        c.out = name
        return c

    def sym(self, name):
        """The size chains: Shape / Gather / Cast / Slice / Squeeze / Unsqueeze / Mul / Concat."""
        g = self.g
        n = g.n(name)
        if n.op == "const":
            return [int(x) for x in np.ravel(n["value"])]
        if n.op == "onnx:Shape":
            return [("dim", n.ins[0], i) for i in range(4)]
        if n.op == "onnx:Gather":
            base = self.sym(n.ins[0])
            idx = self.const(n.ins[1], name)
            check(n.attrs.get("axis", 0) == 0 and idx.ndim == 1, "%s: gather" % name)
            return [base[int(i)] for i in idx]
        if n.op == "onnx:Cast":
            return self.sym(n.ins[0])
        if n.op == "onnx:Slice":
            base = self.sym(n.ins[0])
            st = self.const(n.ins[1], name)
            en = self.const(n.ins[2], name)
            ax = self.const(n.ins[3], name) if len(n.ins) > 3 else np.zeros(1, np.int64)
            check(len(n.ins) < 5 and list(ax) == [0] and len(st) == len(en) == 1,
                  "%s: slice" % name)
            return base[int(st[0]):int(en[0])]
        if n.op in ("onnx:Squeeze", "onnx:Unsqueeze"):
            v = self.sym(n.ins[0])
            ax = self.const(n.ins[1], name) if len(n.ins) > 1 else np.zeros(1)
            check(list(ax) == [0] and len(v) == 1, "%s: squeeze" % name)
            return v
        if n.op == "onnx:Mul":
            a, b = self.sym(n.ins[0]), self.sym(n.ins[1])
            check(len(a) == 1 and len(b) == 1 and isinstance(a[0], int), "%s: mul" % name)
            return [("mul", a[0], b[0])]
        if n.op == "onnx:Concat":
            check(n["axis"] == 0, "%s: concat axis" % name)
            out = []
            for x in n.ins:
                out += self.sym(x)
            return out
        raise SystemExit("v3_convert: %s: %s in a size computation" % (name, n.op))

    def resize_x2(self, name):
        n = self.op(name, "Resize")
        a = n.attrs
        check(a.get("mode") == "linear" and
              a.get("coordinate_transformation_mode") == "asymmetric" and
              a.get("exclude_outside", 0) == 0, "%s: resize mode %s" % (name, a))
        check(len(n.ins) == 4, "%s: resize without sizes" % name)
        for i in (1, 2):
            check(not n.ins[i] or self.g.const(n.ins[i]) is not None and
                  self.g.const(n.ins[i]).size == 0, "%s: roi / scales" % name)
        x = n.ins[0]
        size = self.sym(n.ins[3])
        check(size == [("dim", x, 0), ("dim", x, 1), ("mul", 2, ("dim", x, 2)),
                       ("mul", 2, ("dim", x, 3))], "%s: sizes %s" % (name, size))
        return x

    def gap(self, name):
        n = self.op(name, "GlobalAveragePool", "ReduceMean")
        if n.op == "onnx:ReduceMean":
            check(list(n["axes"]) == [2, 3] and n.attrs.get("keepdims", 1) == 1, "%s" % name)
        return n.ins[0]

    def std(self, name):
        """Sqrt(GAP(d * d) + eps), d = x - GAP(x) -> (d, eps)."""
        s = self.op(name, "Sqrt")
        a = self.op(s.ins[0], "Add")
        u, v = a.ins
        if self.g.const(u) is not None:
            u, v = v, u
        eps = self.const(v, name)
        check(eps.size == 1, "%s: eps" % name)
        m = self.op(self.gap(u), "Mul")
        check(m.ins[0] == m.ins[1], "%s: square" % name)
        self.file_eps.add(float(eps.ravel()[0]))
        return m.ins[0], float(eps.ravel()[0])

    def centred(self, name):
        """Sub(z, GAP(z)) -> (z, the GAP node)."""
        s = self.op(name, "Sub")
        check(self.gap(s.ins[1]) == s.ins[0], "%s: z - mean(z)" % name)
        return s.ins[0], s.ins[1]

    def per_channel(self, name, c):
        """Reshape(v, [1, 1, 1, C]) of an (1, C, 1, 1) statistic (NHWC broadcast)."""
        r = self.op(name, "Reshape")
        check([int(x) for x in self.const(r.ins[1], name)] == [1, 1, 1, c], "%s: shape" % name)
        return r.ins[0]

    def lade(self, name, c):
        out = self.op(name, "Add")
        a, b = out.ins
        if self.g.n(a).op != "onnx:Transpose":
            a, b = b, a
        tr = self.op(a, "Transpose")
        check(list(tr["perm"]) == [0, 3, 1, 2], "%s: perm" % a)
        mul = self.op(tr.ins[0], "Mul")
        div = self.op(mul.ins[0], "Div")
        dy, _ = self.std(self.per_channel(mul.ins[1], c))
        y, mean_y = self.centred(dy)
        check(mean_y == b, "%s: + mean(y)" % name)
        t2 = self.op(div.ins[0], "Transpose")
        check(list(t2["perm"]) == [0, 2, 3, 1], "%s: perm" % div.ins[0])
        dx, _ = self.std(self.per_channel(div.ins[1], c))
        check(dx == t2.ins[0], "%s: numerator is not x - mean(x)" % name)
        x, _ = self.centred(dx)
        yc = self.conv(y, False)
        check(yc.src == x and yc.pad == (0, 0, 0, 0) and yc.stride == 1 and
              yc.w.shape == (c, c, 1, 1), "%s: y is not a 1x1 conv of x" % name)
        return x, yc.w

    def residual(self, name):
        """LeakyRelu(Add(Conv1x1(block(block(x))), x)) -> (x, [c0, c1, c2])."""
        a = self.op(self.lrelu(name), "Add")
        for u, v in (a.ins, a.ins[::-1]):
            if self.g.n(u).op == "onnx:Conv":
                c2 = self.conv(u, False)
                c1 = self.block(c2.src)
                c0 = self.block(c1.src)
                check(c0.src == v, "%s: residual source" % name)
                return v, [c0, c1, c2]
        raise SystemExit("v3_convert: %s: residual block" % name)

    def stage(self, name, last=False):
        """block(block(add(block(resize x2(prev)), skip))), or for the last stage
        LeakyRelu(LADE(Conv(add(block(resize(prev)), skip)))) -> (prev, skip, convs, lade w)."""
        if last:
            x, lw = self.lade(self.lrelu(name), 16)
            c3 = self.conv(x, False)
            tail = [c3]
            addn = c3.src
        else:
            c3 = self.block(name)
            c2 = self.block(c3.src)
            tail = [c2, c3]
            addn = c2.src
            lw = None
        a = self.op(addn, "Add")
        for u, v in (a.ins, a.ins[::-1]):
            if self.g.n(u).op == "onnx:LeakyRelu":
                c1 = self.block(u)
                if self.g.n(c1.src).op == "onnx:Resize":
                    return self.resize_x2(c1.src), v, [c1] + tail, lw
        raise SystemExit("v3_convert: %s: no resized block before the skip add" % name)

    def run(self):
        g = self.g
        t = self.op(g.output, "Transpose")
        check(list(t["perm"]) == [0, 2, 3, 1], "output transpose")
        th = self.op(t.ins[0], "Tanh")
        outc = self.conv(th.ins[0], False)
        cur = outc.src
        stages = []
        prev, skip, convs, lw = self.stage(cur, last=True)
        stages.append((skip, convs, lw))
        cur = prev
        for _ in range(3):
            prev, skip, convs, lw = self.stage(cur)
            stages.append((skip, convs, lw))
            cur = prev
        stages.reverse()
        res = []
        for _ in range(2):
            cur, convs = self.residual(cur)
            res.append(convs)
        res.reverse()
        enc = []
        while cur != g.input:
            c = self.block(cur)
            enc.append(c)
            cur = c.src
        enc.reverse()
        return enc, res, stages, outc


TINY_ENC = [("enc0", 3, 16, 7, 1), ("enc1", 16, 16, 3, 2), ("enc2", 16, 16, 3, 1),
            ("enc3", 16, 32, 3, 2), ("enc4", 32, 32, 3, 1), ("enc5", 32, 64, 3, 2),
            ("enc6", 64, 64, 3, 1), ("enc7", 64, 128, 3, 2), ("enc8", 128, 128, 3, 1)]
TINY_RES = [(128, 64, 1), (64, 64, 3), (64, 128, 1)]
# per stage: skip, then (name, in, out) of its convolutions
TINY_DEC = [("enc6", [("dec0", 128, 64), ("dec1", 64, 64), ("dec2", 64, 64)]),
            ("enc4", [("dec3", 64, 32), ("dec4", 32, 32), ("dec5", 32, 32)]),
            ("enc2", [("dec6", 32, 16), ("dec7", 16, 16), ("dec8", 16, 16)]),
            ("enc0", [("dec9", 16, 16), ("dec10", 16, 16)])]


def convert_tiny(g):
    m = TinyMatcher(g)
    enc, res, stages, outc = m.run()
    check(m.file_eps == {float(np.float32(LADE_EPS))}, "LADE eps %s, expected 1e-5"
          % sorted(m.file_eps))
    check(len(enc) == len(TINY_ENC), "%d encoder convs, expected %d" % (len(enc), len(TINY_ENC)))
    E = Emitter(np.float32)
    names = {}
    src = "input"

    def cblock(name, c, src, cin, cout, k=3, s=1, act=True):
        check_conv(c, name, cin, cout, k, s)
        E.conv(name, src, c, bias=c.bias)
        if not act:
            return name
        return E.add(op="lrelu", name=name + ".act", **{"in": [name]}, alpha=0.2)

    for c, (name, cin, cout, k, s) in zip(enc, TINY_ENC):
        src = cblock(name, c, src, cin, cout, k, s)
        names[c.out] = src
    for r, convs in enumerate(res):
        inp = src
        for j, (c, (cin, cout, k)) in enumerate(zip(convs, TINY_RES)):
            src = cblock("res%d.%d" % (r, j), c, src, cin, cout, k, 1, act=j < 2)
        E.add(op="add", name="res%d.add" % r, **{"in": [src, inp]})
        src = E.add(op="lrelu", name="res%d.act" % r, **{"in": ["res%d.add" % r]}, alpha=0.2)
    for si, ((skip, convs, lw), (skipname, spec)) in enumerate(zip(stages, TINY_DEC)):
        check(names.get(skip) == skipname + ".act", "stage %d: skip %s, expected %s"
              % (si, skip, skipname))
        check(len(convs) == len(spec), "stage %d: %d convs" % (si, len(convs)))
        up = E.add(op="resize", name="up%d" % si, **{"in": [src, skipname + ".act"]},
                   mode="asymmetric")
        name, cin, cout = spec[0]
        a = cblock(name, convs[0], up, cin, cout)
        src = E.add(op="add", name="skip%d" % si, **{"in": [a, skipname + ".act"]})
        for j, (c, (name, cin, cout)) in enumerate(zip(convs[1:], spec[1:])):
            if lw is not None and j == len(spec) - 2:
                check_conv(c, name, cin, cout, 3, 1)
                check(c.bias is None, "%s: bias before LADE" % name)
                E.conv(name, src, c)
                E.add(op="lade", name=name + ".norm", **{"in": [name]},
                      weight=E.t(name + ".lade.weight", lw), eps=LADE_EPS)
                src = E.add(op="lrelu", name=name + ".act", **{"in": [name + ".norm"]},
                            alpha=0.2)
            else:
                src = cblock(name, c, src, cin, cout)
    check_conv(outc, "out.conv", 16, 3, 7, 1)
    check(outc.bias is None, "output conv bias")
    E.conv("out.conv", src, outc)
    E.add(op="tanh", name="out", **{"in": ["out.conv"]})
    return E, dict(file_lade_eps=sorted(m.file_eps))


# ---- safetensors writer -----------------------------------------------------------------

ST_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}


def write_safetensors(path, tensors, metadata):
    """Deterministic layout: F32 tensors first, then F16, each group in name order."""
    order = {"F32": 0, "F16": 1}
    names = sorted(tensors, key=lambda n: (order[ST_DTYPES[tensors[n].dtype]], n))
    header = {}
    blobs = []
    offset = 0
    for n in names:
        a = np.ascontiguousarray(tensors[n])
        raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[n] = {"dtype": ST_DTYPES[a.dtype], "shape": list(a.shape),
                     "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    header["__metadata__"] = metadata
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-(8 + len(text))) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
    os.replace(tmp, path)


def graph_json(nodes):
    return json.dumps({"inputs": ["input"], "outputs": ["out"], "nodes": nodes},
                      separators=(",", ":"))


def validate(nodes, tensors):
    """Every input defined before use, names unique, every named tensor present."""
    seen = {"input"}
    used_t = set()
    for n in nodes:
        check(n["name"] not in seen, "node %s twice" % n["name"])
        for i in n["in"]:
            check(i in seen, "node %s reads %s before it is defined" % (n["name"], i))
        for k in ("weight", "bias", "scale", "shift"):
            if k in n:
                check(n[k] in tensors, "node %s: tensor %s missing" % (n["name"], n[k]))
                used_t.add(n[k])
        seen.add(n["name"])
    check(used_t == set(tensors), "unused tensors %s" % sorted(set(tensors) - used_t))
    check(nodes[-1]["name"] == "out" and nodes[-1]["op"] == "tanh", "last node")
    check(len(nodes) <= 512, "too many nodes")


def conv_flop(nodes, tensors, h, w):
    """Multiply-adds x 2 of the convolutions and matmuls at an h x w input (multiples of the
    side multiple), for the report."""
    size = {"input": (h, w, 3)}
    flop = 0
    for n in nodes:
        x = size[n["in"][0]]
        if n["op"] == "conv":
            oc, icg, k, _ = tensors[n["weight"]].shape
            t, b, l, r = n["pad"]
            ho = (x[0] + t + b - k) // n["stride"] + 1
            wo = (x[1] + l + r - k) // n["stride"] + 1
            flop += 2 * ho * wo * oc * icg * k * k
            size[n["name"]] = (ho, wo, oc)
        elif n["op"] == "matmul":
            c, mm = tensors[n["weight"]].shape
            flop += 2 * x[0] * x[1] * c * mm
            size[n["name"]] = (x[0], x[1], mm if not n.get("transpose") else c)
        elif n["op"] == "lade":
            c = x[2]
            flop += 2 * x[0] * x[1] * c * c
            size[n["name"]] = x
        elif n["op"] == "resize":
            like = size[n["in"][1]]
            size[n["name"]] = (like[0], like[1], x[2])
        else:
            size[n["name"]] = x
    return flop


def convert(key, src_dir, out_dir, dump=False, path=None):
    spec = MODELS[key]
    path = path or os.path.join(src_dir, spec["file"])
    with open(path, "rb") as f:
        buf = f.read()
    sha = hashlib.sha256(buf).hexdigest()
    try:
        if key == "hayao":
            g = tflite_graph(buf)
            E, info = convert_full(g, np.float16)
        elif key == "shinkai":
            g = pb_graph(buf)
            E, info = convert_full(g, np.float32)
        else:
            g = onnx_graph(path)
            E, info = convert_tiny(g)
    except (F.FormatError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            struct.error, UnicodeDecodeError) as e:
        raise SystemExit("v3_convert: %s: not a readable %s file (%s: %s)"
                         % (path, os.path.splitext(spec["file"])[1], type(e).__name__, e))
    validate(E.nodes, E.tensors)
    side = 16 if spec["arch"] == "animeganv3-tiny" else 8
    params = sum(int(a.size) for a in E.tensors.values())
    dtypes = sorted({ST_DTYPES[a.dtype] for a in E.tensors.values()})
    metadata = {
        "format": "animegan",
        "architecture": spec["arch"],
        "style": spec["style"],
        "side_multiple": str(side),
        "min_side": "16" if side == 16 else "8",
        "norm_eps": "1e-5",
        "resize": "asymmetric",
        "input": "rgb x/127.5-1",
        "output": "(y+1)*127.5",
        "weights": "%s, PyTorch layout, exactly the file's values" % "/".join(dtypes),
        "license": LICENSE,
        "source": "%s; sha256 %s" % (spec["origin"], sha),
        "graph": graph_json(E.nodes),
    }
    out = os.path.join(out_dir, spec["out"])
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(out, E.tensors, metadata)
    if dump:
        print("file ops: " + ", ".join("%s x%d" % kv for kv in sorted(g.file_ops.items())))
        for n in E.nodes:
            extra = {k: v for k, v in n.items() if k not in ("op", "name", "in")}
            shp = {k: list(E.tensors[v].shape) for k, v in extra.items()
                   if isinstance(v, str) and v in E.tensors}
            print("  %-13s %-14s %-28s %s %s" % (n["op"], n["name"], ",".join(n["in"]),
                                               shp, {k: v for k, v in extra.items()
                                                     if k not in shp}))
    print("wrote %s: %d nodes, %d tensors (%s), %d parameters, %.1f GFLOP at 512x512; %s"
          % (out, len(E.nodes), len(E.tensors), "/".join(dtypes), params,
             conv_flop(E.nodes, E.tensors, 512, 512) / 1e9, info))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="all", choices=["all"] + sorted(MODELS))
    ap.add_argument("--src", default=SRC_DIR)
    ap.add_argument("--outdir", default=os.path.join(REPO_ROOT, "models"))
    ap.add_argument("--dump", action="store_true", help="print the graph written")
    ap.add_argument("--input", help="another file of the same kind as --model's")
    args = ap.parse_args()
    keys = sorted(MODELS) if args.model == "all" else [args.model]
    if args.input and len(keys) != 1:
        raise SystemExit("v3_convert: --input needs --model")
    for k in keys:
        convert(k, args.src, args.outdir, args.dump, args.input)
    return 0


if __name__ == "__main__":
    sys.exit(main())
