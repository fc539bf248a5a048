#!/usr/bin/env python3
"""convert_tflite.py - convert the AnimeGANv2 "Hayao" full-integer TFLite model into
models/hayao.safetensors, the bundled model of animegan.c.

Offline tool (Python 3 + numpy only). It reads the TFLite flatbuffer with the minimal reader
below, walks the graph in execution order, recognises every layer of the generator
(reflection pad -> conv -> LayerNorm -> LeakyReLU, the inverted-residual blocks, the two
bilinear resizes, the residual adds, the 1x1 output conv and tanh), checks each against the
architecture of bryandlee/animegan2-pytorch (model.py, class Generator) and stores the
weights under that state_dict's names:

  conv weights   "<conv>.weight"  I8  (OC, IC/groups, KH, KW)  raw int8 values of the file
                 "<conv>.scale"   F32 (OC)  per-output-channel scale, so that
                 w = float32(q) * scale[oc] (in float32) is exactly the dequantized weight
  conv biases    "<conv>.bias"    F32 (OC)  depthwise convs only (regular convs carry an
                 all-zero int32 bias in the file, which is checked and dropped)
  norm           "<norm>.weight", "<norm>.bias"  F32 (C)  LayerNorm gamma / beta

Usage (from the repository root):
  /usr/bin/python3 tools/convert_tflite.py [--input hayao_int8.tflite]
                                           [--output models/hayao.safetensors] [--dump]
The output is deterministic: rerunning it gives a byte-identical file.
"""

import argparse
import hashlib
import json
import os
import struct
import sys

import numpy as np

DEFAULT_INPUT = "/work/shared/models/animeganv2/hayao_int8.tflite"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUTPUT = os.path.join(REPO_ROOT, "models", "hayao.safetensors")

LICENSE = ("AnimeGANv2 weights (c) TachibanaYoshino: free for non-commercial use only "
           "(research, teaching, personal use); commercial use requires the author's "
           "permission.")
ORIGIN = ("AnimeGANv2 generator, style Hayao (TachibanaYoshino/AnimeGANv2, TensorFlow), "
          "converted to full-integer TFLite by the PINTO model zoo; file "
          "gl2animegan2/model/animeganv2_hayao_256x256_integer_quant.tflite of "
          "terryky/tflite_gles_app")


# ---- minimal flatbuffer reader ----------------------------------------------------------

class Table:
    """A flatbuffer table at byte `pos` of `buf`; fields are addressed by schema index."""

    def __init__(self, buf, pos):
        if pos < 0 or pos + 4 > len(buf):
            raise ValueError("table offset %d outside the file" % pos)
        self.buf = buf
        self.pos = pos
        self.vt = pos - struct.unpack_from("<i", buf, pos)[0]
        if self.vt < 0 or self.vt + 4 > len(buf):
            raise ValueError("vtable offset %d outside the file" % self.vt)
        self.vt_bytes = struct.unpack_from("<H", buf, self.vt)[0]

    def _field(self, index):
        slot = 4 + 2 * index
        if slot + 2 > self.vt_bytes:
            return 0
        return struct.unpack_from("<H", self.buf, self.vt + slot)[0]

    def scalar(self, index, fmt, default=0):
        off = self._field(index)
        if off == 0:
            return default
        return struct.unpack_from("<" + fmt, self.buf, self.pos + off)[0]

    def _indirect(self, index):
        off = self._field(index)
        if off == 0:
            return None
        p = self.pos + off
        return p + struct.unpack_from("<I", self.buf, p)[0]

    def table(self, index):
        p = self._indirect(index)
        return None if p is None else Table(self.buf, p)

    def vector(self, index, dtype):
        """Vector of scalars as a read-only numpy array (None when the field is absent)."""
        p = self._indirect(index)
        if p is None:
            return None
        n = struct.unpack_from("<I", self.buf, p)[0]
        dt = np.dtype(dtype).newbyteorder("<")
        if p + 4 + n * dt.itemsize > len(self.buf):
            raise ValueError("vector at %d overruns the file" % p)
        return np.frombuffer(self.buf, dtype=dt, count=n, offset=p + 4)

    def tables(self, index):
        p = self._indirect(index)
        if p is None:
            return []
        n = struct.unpack_from("<I", self.buf, p)[0]
        out = []
        for i in range(n):
            q = p + 4 + 4 * i
            out.append(Table(self.buf, q + struct.unpack_from("<I", self.buf, q)[0]))
        return out

    def string(self, index):
        p = self._indirect(index)
        if p is None:
            return None
        n = struct.unpack_from("<I", self.buf, p)[0]
        return bytes(self.buf[p + 4:p + 4 + n]).decode("utf-8")


# ---- the TFLite schema (v3) subset we need ----------------------------------------------

# BuiltinOperator
OP_NAMES = {0: "ADD", 3: "CONV_2D", 4: "DEPTHWISE_CONV_2D", 6: "DEQUANTIZE", 18: "MUL",
            23: "RESIZE_BILINEAR", 28: "TANH", 40: "MEAN", 41: "SUB", 76: "RSQRT",
            98: "LEAKY_RELU", 99: "SQUARED_DIFFERENCE", 100: "MIRROR_PAD", 114: "QUANTIZE"}
# TensorType
TYPES = {0: np.float32, 2: np.int32, 4: np.int64, 9: np.int8, 3: np.uint8}
TYPE_NAMES = {0: "float32", 2: "int32", 4: "int64", 9: "int8", 3: "uint8"}
PADDING_VALID = 1
MIRROR_REFLECT = 0


class Tensor:
    def __init__(self, index, t, buffers):
        self.index = index
        shape = t.vector(0, "i4")
        self.shape = tuple(int(x) for x in shape) if shape is not None else ()
        self.type = t.scalar(1, "b")
        self.name = t.string(3) or ""
        self.scale = self.zero_point = None
        self.quant_dim = 0
        q = t.table(4)
        if q is not None:
            self.scale = q.vector(2, "f4")
            self.zero_point = q.vector(3, "i8")
            self.quant_dim = q.scalar(6, "i")
        data = buffers[t.scalar(2, "I")].vector(0, "u1")
        self.data = None
        if data is not None and len(data) > 0:
            if self.type not in TYPES:
                raise ValueError("tensor %s: unsupported constant type %d" % (self.name, self.type))
            dt = np.dtype(TYPES[self.type]).newbyteorder("<")
            n = int(np.prod(self.shape)) if self.shape else 1
            if len(data) != n * dt.itemsize:
                raise ValueError("tensor %s: %d bytes for shape %s" % (self.name, len(data),
                                                                       self.shape))
            self.data = np.frombuffer(data.tobytes(), dtype=dt).reshape(self.shape)

    @property
    def const(self):
        return self.data is not None

    def describe(self):
        q = ""
        if self.scale is not None and len(self.scale):
            q = " q(scale[%d]=%.6g.., zp=%d, dim=%d)" % (len(self.scale), self.scale[0],
                                                         self.zero_point[0], self.quant_dim)
        return "t%d %s %s %s%s%s" % (self.index, TYPE_NAMES.get(self.type, self.type),
                                     list(self.shape), self.name, q,
                                     " const" if self.const else "")


class Op:
    def __init__(self, index, o, codes):
        self.index = index
        self.code = codes[o.scalar(0, "I")]
        self.name = OP_NAMES.get(self.code, "OP%d" % self.code)
        self.inputs = [int(x) for x in o.vector(1, "i4")]
        self.outputs = [int(x) for x in o.vector(2, "i4")]
        self.options_type = o.scalar(3, "B")
        self.options = o.table(4)


class Graph:
    def __init__(self, buf):
        if bytes(buf[4:8]) != b"TFL3":
            raise ValueError("not a TFLite v3 flatbuffer (identifier %r)" % bytes(buf[4:8]))
        model = Table(buf, struct.unpack_from("<I", buf, 0)[0])
        self.version = model.scalar(0, "I")
        codes = []
        for oc in model.tables(1):
            # builtin_code (int32, field 3) supersedes deprecated_builtin_code (int8, field 0)
            codes.append(max(oc.scalar(0, "b"), oc.scalar(3, "i")))
        subgraphs = model.tables(2)
        if len(subgraphs) != 1:
            raise ValueError("expected one subgraph, found %d" % len(subgraphs))
        sg = subgraphs[0]
        buffers = model.tables(4)
        self.tensors = [Tensor(i, t, buffers) for i, t in enumerate(sg.tables(0))]
        self.ops = [Op(i, o, codes) for i, o in enumerate(sg.tables(3))]
        self.inputs = [int(x) for x in sg.vector(1, "i4")]
        self.outputs = [int(x) for x in sg.vector(2, "i4")]
        self.producer = {}
        self.consumers = {}
        for op in self.ops:
            for t in op.outputs:
                self.producer[t] = op
            for t in op.inputs:
                if t >= 0:
                    self.consumers.setdefault(t, []).append(op)

    def t(self, i):
        return self.tensors[i]

    def source(self, i):
        """Tensor i with QUANTIZE / DEQUANTIZE producers skipped (they only change dtype)."""
        while i in self.producer and self.producer[i].name in ("QUANTIZE", "DEQUANTIZE"):
            i = self.producer[i].inputs[0]
        return i


def check(cond, msg):
    if not cond:
        raise SystemExit("convert_tflite: " + msg)


# ---- dequantization ---------------------------------------------------------------------

def per_tensor(t, what):
    check(t.scale is not None and len(t.scale) == 1, "%s %s: expected one scale" % (what, t.name))
    check(int(t.zero_point[0]) == 0, "%s %s: zero point %d" % (what, t.name, t.zero_point[0]))
    return np.float32(t.scale[0])


def dequant_per_tensor(t, what):
    return t.data.astype(np.float32) * per_tensor(t, what)


def dequant_bias(t, channels, what):
    check(t.type == 2 and t.shape == (channels,), "%s %s: expected int32 [%d]" % (what, t.name,
                                                                              channels))
    check(len(t.scale) == channels and not np.any(t.zero_point), "%s: bad quantization" % what)
    # |q| < 2^24 makes the int32 -> float32 conversion exact
    check(np.all(np.abs(t.data.astype(np.int64)) < (1 << 24)), "%s: bias beyond 2^24" % what)
    return t.data.astype(np.float32) * t.scale.astype(np.float32)


# ---- graph walk -------------------------------------------------------------------------

class Layer:
    """What the graph does around one convolution."""

    def __init__(self):
        self.conv = None          # the CONV_2D / DEPTHWISE_CONV_2D op
        self.depthwise = False
        self.weight_q = None      # int8 (OC, IC/groups, KH, KW)
        self.scale = None         # float32 (OC)
        self.bias = None          # float32 (OC) or None
        self.bias_all_zero = True
        self.stride = 1
        self.pad = (0, 0, 0, 0)   # top, bottom, left, right (reflection)
        self.resize = None        # dict of the RESIZE_BILINEAR in front, or None
        self.gamma = self.beta = None
        self.eps = None
        self.act = None           # "lrelu", "tanh" or None
        self.alpha = None
        self.residual_from = None  # index of the layer whose input is added after the norm
        self.out_tensor = None    # tensor index of the layer's final output
        self.in_tensor = None     # tensor index of the layer's input (before pad/resize)


def trace_input(g, layer, t):
    """Walk back from the conv input through MIRROR_PAD and RESIZE_BILINEAR."""
    t = g.source(t)
    op = g.producer.get(t)
    if op is not None and op.name == "MIRROR_PAD":
        check(op.options.scalar(0, "b") == MIRROR_REFLECT, "op%d: mirror pad is not REFLECT"
              % op.index)
        p = g.t(op.inputs[1]).data
        check(p is not None and p.shape == (4, 2), "op%d: paddings" % op.index)
        check(p[0, 0] == p[0, 1] == p[3, 0] == p[3, 1] == 0, "op%d: pads N or C" % op.index)
        layer.pad = (int(p[1, 0]), int(p[1, 1]), int(p[2, 0]), int(p[2, 1]))
        t = g.source(op.inputs[0])
        op = g.producer.get(t)
    if op is not None and op.name == "RESIZE_BILINEAR":
        o = op.options
        size = g.t(op.inputs[1]).data
        layer.resize = {"align_corners": bool(o.scalar(2, "B")),
                        "half_pixel_centers": bool(o.scalar(3, "B")),
                        "size": [int(x) for x in size],
                        "op": op.index}
        t = g.source(op.inputs[0])
    layer.in_tensor = t


def trace_norm(g, layer, start, end):
    """Recognise the decomposed LayerNorm between ops start..end (exclusive):
    mean = MEAN(x, [1,2,3]); var = MEAN(SQUARED_DIFFERENCE(x, mean)); r = RSQRT(var + eps);
    m = r * gamma; y = x * m + (beta - mean * m)."""
    ops = g.ops[start:end]
    means = [op for op in ops if op.name == "MEAN"]
    if not means:
        return None
    check(len(means) == 2, "layer at op%d: %d MEAN ops" % (start, len(means)))
    for op in means:
        axes = g.t(op.inputs[1]).data
        check(axes is not None and sorted(int(a) for a in axes.ravel()) == [1, 2, 3],
              "op%d: MEAN axes %s" % (op.index, axes))
        check(op.options.scalar(0, "B") == 1, "op%d: MEAN without keep_dims" % op.index)
    x = g.source(layer.conv.outputs[0])
    check(g.source(means[0].inputs[0]) == x, "op%d: mean is not over the conv output"
          % means[0].index)
    sqd = [op for op in ops if op.name == "SQUARED_DIFFERENCE"]
    check(len(sqd) == 1 and g.source(sqd[0].inputs[0]) == x and
          g.source(sqd[0].inputs[1]) == means[0].outputs[0], "op%d: variance" % start)
    check(g.source(means[1].inputs[0]) == sqd[0].outputs[0], "op%d: variance mean" % start)
    eps_add = [op for op in ops if op.name == "ADD" and g.source(op.inputs[0]) ==
               means[1].outputs[0]]
    check(len(eps_add) == 1, "op%d: eps ADD" % start)
    eps_t = g.t(eps_add[0].inputs[1])
    check(eps_t.const and eps_t.data.size == 1, "op%d: eps is not a constant" % start)
    layer.eps = float(dequant_per_tensor(eps_t, "eps").ravel()[0])
    rsq = [op for op in ops if op.name == "RSQRT"]
    check(len(rsq) == 1 and g.source(rsq[0].inputs[0]) == eps_add[0].outputs[0],
          "op%d: rsqrt" % start)
    muls = [op for op in ops if op.name == "MUL"]
    gmul = [op for op in muls if g.source(op.inputs[0]) == rsq[0].outputs[0]]
    check(len(gmul) == 1, "op%d: gamma MUL" % start)
    gamma_t = g.t(gmul[0].inputs[1])
    check(gamma_t.const and gamma_t.name.endswith("gamma"), "op%d: gamma %s" % (start,
                                                                              gamma_t.name))
    m = gmul[0].outputs[0]
    xm = [op for op in muls if g.source(op.inputs[0]) == x and g.source(op.inputs[1]) == m]
    mm = [op for op in muls if g.source(op.inputs[0]) == means[0].outputs[0] and
          g.source(op.inputs[1]) == m]
    check(len(xm) == 1 and len(mm) == 1, "op%d: norm MULs" % start)
    subs = [op for op in ops if op.name == "SUB"]
    check(len(subs) == 1 and g.source(subs[0].inputs[1]) == mm[0].outputs[0],
          "op%d: beta SUB" % start)
    beta_t = g.t(subs[0].inputs[0])
    check(beta_t.const and beta_t.name.endswith("beta"), "op%d: beta %s" % (start, beta_t.name))
    final = [op for op in ops if op.name == "ADD" and
             {g.source(op.inputs[0]), g.source(op.inputs[1])} ==
             {xm[0].outputs[0], subs[0].outputs[0]}]
    check(len(final) == 1, "op%d: norm output ADD" % start)
    oc = layer.weight_q.shape[0]
    check(gamma_t.shape == (oc,) and beta_t.shape == (oc,), "op%d: gamma/beta shape" % start)
    layer.gamma = dequant_per_tensor(gamma_t, "gamma")
    layer.beta = dequant_per_tensor(beta_t, "beta")
    return final[0].outputs[0]


def walk(g):
    conv_ops = [op for op in g.ops if op.name in ("CONV_2D", "DEPTHWISE_CONV_2D")]
    known = set(OP_NAMES.values())
    for op in g.ops:
        check(op.name in known, "op%d: unexpected operator %s" % (op.index, op.name))
    layers = []
    for k, op in enumerate(conv_ops):
        L = Layer()
        L.conv = op
        L.depthwise = op.name == "DEPTHWISE_CONV_2D"
        w = g.t(op.inputs[1])
        b = g.t(op.inputs[2]) if len(op.inputs) > 2 and op.inputs[2] >= 0 else None
        check(w.const and w.type == 9, "op%d: weights are not constant int8" % op.index)
        check(not np.any(w.zero_point), "op%d: weight zero point" % op.index)
        o = op.options
        check(o.scalar(0, "b") == PADDING_VALID, "op%d: padding is not VALID" % op.index)
        sw, sh = o.scalar(1, "i"), o.scalar(2, "i")
        check(sw == sh, "op%d: stride %dx%d" % (op.index, sh, sw))
        L.stride = sh
        if L.depthwise:
            check(o.scalar(3, "i") == 1, "op%d: depth multiplier" % op.index)
            check(o.scalar(4, "b") == 0, "op%d: fused activation" % op.index)
            check(o.scalar(5, "i", 1) == 1 and o.scalar(6, "i", 1) == 1, "op%d: dilation"
                  % op.index)
            check(w.quant_dim == 3, "op%d: depthwise scales not on dim 3" % op.index)
            # 1HWC -> (C, 1, KH, KW)
            L.weight_q = np.ascontiguousarray(np.transpose(w.data, (3, 0, 1, 2)))
        else:
            check(o.scalar(3, "b") == 0, "op%d: fused activation" % op.index)
            check(o.scalar(4, "i", 1) == 1 and o.scalar(5, "i", 1) == 1, "op%d: dilation"
                  % op.index)
            check(w.quant_dim == 0, "op%d: conv scales not on dim 0" % op.index)
            # OHWI -> OIHW
            L.weight_q = np.ascontiguousarray(np.transpose(w.data, (0, 3, 1, 2)))
        oc = L.weight_q.shape[0]
        check(len(w.scale) == oc, "op%d: %d scales for %d channels" % (op.index, len(w.scale), oc))
        L.scale = w.scale.astype(np.float32)
        if b is not None:
            check(b.const, "op%d: bias is not constant" % op.index)
            L.bias = dequant_bias(b, oc, "op%d bias" % op.index)
            L.bias_all_zero = not np.any(b.data)
        trace_input(g, L, op.inputs[0])
        end = conv_ops[k + 1].index if k + 1 < len(conv_ops) else len(g.ops)
        out = trace_norm(g, L, op.index + 1, end)
        if out is None:
            out = g.source(op.outputs[0])
        # residual add, then activation, in the ops up to the next conv
        for nxt in g.ops[op.index + 1:end]:
            srcs = [g.source(i) for i in nxt.inputs]
            if nxt.name == "ADD" and out in srcs and len(srcs) == 2:
                other = srcs[1 - srcs.index(out)]
                if g.t(other).const:
                    continue
                owners = [j for j, P in enumerate(layers) if P.in_tensor == other]
                check(len(owners) == 1, "op%d: residual source not found" % nxt.index)
                L.residual_from = owners[0]
                out = g.source(nxt.outputs[0])
            elif nxt.name == "LEAKY_RELU" and srcs == [out]:
                L.act = "lrelu"
                L.alpha = float(nxt.options.scalar(0, "f"))
                out = g.source(nxt.outputs[0])
            elif nxt.name == "TANH" and srcs == [out]:
                L.act = "tanh"
                out = g.source(nxt.outputs[0])
        L.out_tensor = out
        if layers:
            # the graph is a chain: this layer reads the previous layer's output
            check(L.in_tensor == layers[-1].out_tensor,
                  "op%d: input is not the previous layer's output" % op.index)
        layers.append(L)
    check(g.source(g.outputs[0]) == layers[-1].out_tensor, "graph output is not the last layer")
    return layers


# ---- the expected architecture (bryandlee/animegan2-pytorch, model.py) ------------------

def expected_layers():
    """List of dicts: name prefix, in, out, k, stride, groups, pad, norm name, act, residual."""
    L = []

    def cnl(prefix, cin, cout, k=3, s=1, groups=1):
        pad = (0, 1, 0, 1) if s == 2 else ((k - 1) // 2,) * 4
        L.append(dict(conv=prefix + ".1", norm=prefix + ".2", cin=cin, cout=cout, k=k, s=s,
                      groups=groups, pad=pad, act="lrelu", bias=groups > 1))

    def irb(prefix, cin, cout, ratio=2):
        bn = int(round(cin * ratio))
        cnl(prefix + ".layers.0", cin, bn, k=1)
        cnl(prefix + ".layers.1", bn, bn, groups=bn)
        L.append(dict(conv=prefix + ".layers.2", norm=prefix + ".layers.3", cin=bn, cout=cout,
                      k=1, s=1, groups=1, pad=(0, 0, 0, 0), act=None, bias=False,
                      residual=cin == cout))

    cnl("block_a.0", 3, 32, k=7)
    cnl("block_a.1", 32, 64, s=2)
    cnl("block_a.2", 64, 64)
    cnl("block_b.0", 64, 128, s=2)
    cnl("block_b.1", 128, 128)
    cnl("block_c.0", 128, 128)
    irb("block_c.1", 128, 256)
    irb("block_c.2", 256, 256)
    irb("block_c.3", 256, 256)
    irb("block_c.4", 256, 256)
    cnl("block_c.5", 256, 128)
    cnl("block_d.0", 128, 128)
    cnl("block_d.1", 128, 128)
    cnl("block_e.0", 128, 64)
    cnl("block_e.1", 64, 64)
    cnl("block_e.2", 64, 32, k=7)
    L.append(dict(conv="out_layer.0", norm=None, cin=32, cout=3, k=1, s=1, groups=1,
                  pad=(0, 0, 0, 0), act="tanh", bias=False))
    return L


def match(layers):
    """Check the graph against the expected architecture; returns the named tensors."""
    exp = expected_layers()
    check(len(layers) == len(exp), "%d convolutions, expected %d" % (len(layers), len(exp)))
    tensors = {}
    eps = set()
    resizes = []
    deviations = []
    for i, (L, e) in enumerate(zip(layers, exp)):
        where = "op%d (%s, %s)" % (L.conv.index, e["conv"], L.conv.name)
        oc, icg, kh, kw = L.weight_q.shape
        groups = oc if L.depthwise else 1
        cin = icg * groups
        check((oc, cin, kh, kw, L.stride, groups) ==
              (e["cout"], e["cin"], e["k"], e["k"], e["s"], e["groups"]),
              "%s: got OC=%d IC=%d K=%dx%d stride %d groups %d" % (where, oc, cin, kh, kw,
                                                                     L.stride, groups))
        check(L.pad == e["pad"], "%s: pads %s, expected %s" % (where, L.pad, e["pad"]))
        check(L.act == e["act"], "%s: activation %s, expected %s" % (where, L.act, e["act"]))
        if L.act == "lrelu":
            check(abs(L.alpha - 0.2) < 1e-6, "%s: LeakyReLU alpha %g" % (where, L.alpha))
        check((e["norm"] is None) == (L.gamma is None), "%s: norm presence" % where)
        want_res = i - 2 if e.get("residual") else None
        check(L.residual_from == want_res, "%s: residual from %s, expected %s"
              % (where, L.residual_from, want_res))
        if L.resize is not None:
            resizes.append((e["conv"], L.resize))
        if L.eps is not None:
            eps.add(L.eps)
        tensors[e["conv"] + ".weight"] = L.weight_q
        tensors[e["conv"] + ".scale"] = L.scale
        if L.bias is not None and (e["bias"] or not L.bias_all_zero):
            if not e["bias"]:
                deviations.append("%s has a nonzero bias (kept as %s.bias)" % (where, e["conv"]))
            tensors[e["conv"] + ".bias"] = L.bias
        if e["norm"] is not None:
            tensors[e["norm"] + ".weight"] = L.gamma
            tensors[e["norm"] + ".bias"] = L.beta
    check([r[0] for r in resizes] == ["block_d.0.1", "block_e.0.1"],
          "resizes in front of %s" % [r[0] for r in resizes])
    for name, r in resizes:
        check(not r["align_corners"] and not r["half_pixel_centers"],
              "%s: resize is not TF legacy asymmetric (%s)" % (name, r))
    check(len(eps) == 1, "LayerNorm eps differs between layers: %s" % sorted(eps))
    eps = eps.pop()
    check(abs(eps - 1e-12) <= 1e-12 * 1e-6, "LayerNorm eps %r, expected 1e-12" % eps)
    return tensors, eps, resizes, deviations


# ---- safetensors writer -----------------------------------------------------------------

ST_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.int8): "I8"}


def write_safetensors(path, tensors, metadata):
    """Deterministic layout: F32 tensors first, then I8, each group in name order, so every
    F32 tensor starts 4-byte aligned (the header is padded to a multiple of 8)."""
    names = sorted(tensors, key=lambda n: (tensors[n].dtype != np.float32, n))
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


# ---- main -------------------------------------------------------------------------------

def dump(g, layers):
    print("TFLite schema version %d: %d tensors, %d operators" % (g.version, len(g.tensors),
                                                                   len(g.ops)))
    counts = {}
    for op in g.ops:
        counts[op.name] = counts.get(op.name, 0) + 1
    print("operators: " + ", ".join("%s x%d" % kv for kv in sorted(counts.items())))
    for L, e in zip(layers, expected_layers()):
        oc, icg, kh, kw = L.weight_q.shape
        extra = []
        if L.resize:
            extra.append("resize->%s ac=%d hp=%d" % (L.resize["size"],
                                                     L.resize["align_corners"],
                                                     L.resize["half_pixel_centers"]))
        if L.pad != (0, 0, 0, 0):
            extra.append("pad(t,b,l,r)=%s" % (L.pad,))
        if L.bias is not None:
            extra.append("bias %s" % ("zero" if L.bias_all_zero else "nonzero"))
        if L.gamma is not None:
            extra.append("norm(eps=%.6g)" % L.eps)
        if L.residual_from is not None:
            extra.append("+input of layer %d" % L.residual_from)
        if L.act:
            extra.append(L.act)
        print("op%-4d %-17s %-22s w %s s%d  %s" % (L.conv.index, L.conv.name, e["conv"],
                                                   list(L.weight_q.shape), L.stride,
                                                   ", ".join(extra)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", default=DEFAULT_INPUT)
    ap.add_argument("--output", default=DEFAULT_OUTPUT)
    ap.add_argument("--dump", action="store_true", help="print the recognised layers")
    args = ap.parse_args()

    with open(args.input, "rb") as f:
        buf = f.read()
    sha = hashlib.sha256(buf).hexdigest()
    g = Graph(buf)
    layers = walk(g)
    tensors, eps, resizes, deviations = match(layers)
    if args.dump:
        dump(g, layers)
    for d in deviations:
        print("deviation from bryandlee: " + d)

    metadata = {
        "format": "animegan",
        "architecture": "animeganv2",
        "style": "Hayao",
        "norm_eps": "1e-12",
        "resize": "asymmetric",
        "input": "rgb x/127.5-1",
        "output": "(y+1)*127.5",
        "weights": "I8 conv weights: w = float32(q) * <conv>.scale[oc], computed in float32",
        "license": LICENSE,
        "source": "%s; sha256 %s" % (ORIGIN, sha),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    write_safetensors(args.output, tensors, metadata)
    params = sum(int(np.prod(a.shape)) for n, a in tensors.items() if not n.endswith(".scale"))
    print("wrote %s: %d tensors, %d parameters, eps %r, resizes %s" %
          (args.output, len(tensors), params, eps,
           [(n, r["size"]) for n, r in resizes]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
