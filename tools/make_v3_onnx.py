#!/usr/bin/env python3
"""make_v3_onnx.py - build a full-AnimeGANv3 .onnx from the Shinkai frozen GraphDef, op by op
in the vocabulary tf2onnx emits, since no full-v3 .onnx is in ../shared/models/animeganv3.

Offline tool (Debian's Python 3, numpy, python3-onnx). The GraphDef is read by
tools/v3_formats.py (no TensorFlow); every TF node is translated on its own, as tf2onnx does
after its transpose optimiser, mimicking the layout of AnimeGANv3_tiny_Cute.onnx:

  input `AnimeGANv3_input:0` NHWC [1, H, W, 3] -> Pad reflect (NHWC) -> Transpose to NCHW;
  feature maps NCHW from there on; MirrorPad -> Pad reflect; Conv2D -> Conv (OIHW);
  Mean over H, W -> GlobalAveragePool; SquaredDifference -> Sub + Mul(d, d); Sqrt, Add, Sub;
  RealDiv of a map by a per-channel statistic -> Transpose to NHWC, Reshape [1, 1, 1, C] of
  the statistic, Div; the Mul that follows in NHWC too, then Transpose back before the Add
  of the mean (the LADE pattern of the tiny file); LeakyRelu; Shape -> Shape + Gather
  [0, 2, 3, 1] (the NHWC shape of an NCHW map) + Cast; StridedSlice -> Slice + Squeeze;
  Pack -> Unsqueeze + Concat; ResizeBilinear -> Resize (linear, asymmetric) with sizes =
  Concat(Slice(Shape(x), 0:2), Cast(size)); Reshape / Transpose / Softmax (axis -1) /
  Sum -> ReduceSum; conv1d (ExpandDims + Conv2D + Squeeze of a [1, C, K] kernel) -> MatMul;
  the BatchNorm's constants folded to Mul / Add per channel; Tanh; Transpose to NHWC;
  output `generator_1/main/out_layer:0`. Equal nodes and equal constants are merged, as
  tf2onnx's optimiser does. Opset 15, float32 weights as in the .pb.

Usage:
  /usr/bin/python3 tools/make_v3_onnx.py [--input AnimeGANv3_Shinkai_37.pb]
                                         [--output build/v3/AnimeGANv3_Shinkai_37.onnx]
                                         [--check]
The output is deterministic (a rerun gives a byte-identical file).
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import v3_formats as VF  # noqa: E402

ROOT = os.path.dirname(TOOLS)
DEFAULT_INPUT = "/work/shared/models/animeganv3/AnimeGANv3_Shinkai_37.pb"
DEFAULT_OUTPUT = os.path.join(ROOT, "build", "v3", "AnimeGANv3_Shinkai_37.onnx")
NHWC_TO_NCHW = [0, 3, 1, 2]
NCHW_TO_NHWC = [0, 2, 3, 1]


def fail(msg):
    raise SystemExit("make_v3_onnx: " + msg)


class V:
    """A translated TF tensor: kind const (value) | map (4-D image tensor, layout) | stat
    (per-channel (1, C, 1, 1) NCHW statistic) | tensor (any other float tensor, TF order) |
    int (an int32 shape tensor, TF order)."""

    def __init__(self, kind, name=None, value=None, layout=None, channels=None):
        self.kind = kind
        self.name = name
        self.value = value
        self.layout = layout
        self.channels = channels


class Builder:
    def __init__(self, nodes):
        self.tf = {n.name: n for n in nodes}
        self.order = [n.name for n in nodes]
        self.v = {}
        self.nodes = []
        self.inits = []
        self.init_names = set()
        self.counter = 0

    def uniq(self, base):
        self.counter += 1
        return "%s__%d" % (base, self.counter)

    def init(self, base, value):
        name = base
        if name in self.init_names:
            name = self.uniq(base)
        self.init_names.add(name)
        self.inits.append(numpy_helper.from_array(np.array(value, order="C"), name))
        return name

    def node(self, op, ins, base, **attrs):
        out = base + ":0"
        if any(out in n.output for n in self.nodes):
            out = self.uniq(base) + ":0"
        self.nodes.append(helper.make_node(op, ins, [out], name=out[:-2], **attrs))
        return out

    def as_input(self, v, base):
        if v.kind == "const":
            if v.name is None:
                v.name = self.init(base, v.value)
            return v.name
        return v.name

    def to_layout(self, v, layout, base):
        if v.kind != "map" or v.layout == layout:
            return v.name
        perm = NCHW_TO_NHWC if layout == "nhwc" else NHWC_TO_NCHW
        return self.node("Transpose", [v.name], base + "__tr", perm=perm)

    def stat_nhwc(self, v, base):
        return self.node("Reshape", [v.name, self.init(base + "/new_shape",
                                                       np.array([1, 1, 1, v.channels],
                                                                np.int64))], base + "__rs")

    def ref(self, s):
        if s.startswith("^"):
            fail("control input %s" % s)
        return s[:-2] if s.endswith(":0") else s

    def get(self, name):
        if name not in self.v:
            self.translate(self.tf[name])
        return self.v[name]

    # -- translation of one TF node ------------------------------------------------------------
    def translate(self, n):
        ins = [self.get(self.ref(s)) for s in n.input]
        op = n.op
        out = None
        if op == "Placeholder":
            out = V("map", "AnimeGANv3_input:0", layout="nhwc", channels=3)
        elif op == "Const":
            out = V("const", value=n.a("value"))
        elif op in ("Identity", "StopGradient"):
            out = ins[0]
        elif all(i.kind == "const" for i in ins) and op in ("AddV2", "Sub", "Mul", "Rsqrt",
                                                            "Transpose", "ExpandDims",
                                                            "Range", "ConcatV2", "Pack"):
            out = V("const", value=self.fold(op, [i.value for i in ins], n))
        elif op == "MirrorPad":
            x, p = ins
            p = p.value.astype(np.int64)
            if x.layout == "nchw":
                p = p[NHWC_TO_NCHW]
            pads = np.concatenate([p[:, 0], p[:, 1]]).astype(np.int64)
            out = V("map", self.node("Pad", [x.name, self.init(n.name + "/pads", pads)],
                                     n.name, mode="reflect"), layout=x.layout,
                    channels=x.channels)
        elif op == "Conv2D":
            out = self.conv(n, ins)
        elif op == "Mean":
            x, axes = ins
            axes = sorted(int(a) for a in np.ravel(axes.value))
            if x.kind != "map" or axes != [1, 2] or not n.a("keep_dims"):
                fail("%s: Mean over %s" % (n.name, axes))
            src = self.to_layout(x, "nchw", n.name)
            out = V("stat", self.node("GlobalAveragePool", [src], n.name), channels=x.channels)
        elif op == "SquaredDifference":
            a, b = ins
            if a.kind != "map" or b.kind != "stat" or a.layout != "nchw":
                fail("%s: SquaredDifference operands" % n.name)
            d = self.node("Sub", [a.name, b.name], n.name)
            out = V("map", self.node("Mul", [d, d], n.name + "__sq"), layout="nchw",
                    channels=a.channels)
        elif op in ("AddV2", "Sub", "Mul", "RealDiv"):
            out = self.binary(n, ins)
        elif op in ("Sqrt", "Tanh"):
            x = ins[0]
            out = V(x.kind, self.node(op, [x.name], n.name), layout=x.layout,
                    channels=x.channels)
        elif op == "LeakyRelu":
            x = ins[0]
            src = self.to_layout(x, "nchw", n.name) if x.kind == "map" else x.name
            out = V(x.kind, self.node("LeakyRelu", [src], n.name, alpha=float(n.a("alpha"))),
                    layout="nchw" if x.kind == "map" else None, channels=x.channels)
        elif op == "Shape":
            x = ins[0]
            s = self.node("Shape", [x.name], n.name + "__shape")
            if x.kind == "map" and x.layout == "nchw":
                s = self.node("Gather", [s, self.init(n.name + "/perm",
                                                      np.array(NCHW_TO_NHWC, np.int64))],
                              n.name)
            out = V("int", self.node("Cast", [s], n.name + "__cast", to=TensorProto.INT32))
        elif op == "StridedSlice":
            x, b, e, s = ins
            if (n.a("shrink_axis_mask") != 1 or n.a("begin_mask") or n.a("end_mask") or
                    int(s.value[0]) != 1 or x.kind != "int"):
                fail("%s: strided slice" % n.name)
            ax = self.init(n.name + "/axes", np.array([0], np.int64))
            sl = self.node("Slice", [x.name, self.init(n.name + "/starts", b.value.astype(
                np.int64)), self.init(n.name + "/ends", e.value.astype(np.int64)), ax], n.name)
            out = V("int", self.node("Squeeze", [sl, ax], n.name + "__squeeze"))
        elif op == "Pack":
            parts = []
            for k, x in enumerate(ins):
                if x.kind == "const":
                    parts.append(self.init(n.name + "/c%d" % k,
                                           np.atleast_1d(x.value).astype(np.int32)))
                else:
                    parts.append(self.node("Unsqueeze", [x.name, self.init(
                        n.name + "/axes", np.array([0], np.int64))], n.name + "__unsq%d" % k))
            out = V("int", self.node("Concat", parts, n.name, axis=0))
        elif op == "ResizeBilinear":
            x, size = ins
            if n.a("align_corners") or n.a("half_pixel_centers") or x.layout != "nchw":
                fail("%s: resize mode" % n.name)
            sh = self.node("Shape", [x.name], n.name + "__shape")
            nc = self.node("Slice", [sh, self.init(n.name + "/starts", np.array([0], np.int64)),
                                     self.init(n.name + "/ends", np.array([2], np.int64))],
                           n.name + "__nc")
            hw = self.node("Cast", [size.name], n.name + "__size", to=TensorProto.INT64)
            sizes = self.node("Concat", [nc, hw], n.name + "__sizes", axis=0)
            empty = self.init(n.name + "/roi", np.zeros(0, np.float32))
            out = V("map", self.node("Resize", [x.name, empty, empty, sizes], n.name,
                                     coordinate_transformation_mode="asymmetric",
                                     mode="linear", nearest_mode="floor", exclude_outside=0),
                    layout="nchw", channels=x.channels)
        elif op == "Reshape":
            x, shape = ins
            src = self.to_layout(x, "nhwc", n.name) if x.kind == "map" else x.name
            sh = self.node("Cast", [shape.name], n.name + "__shape", to=TensorProto.INT64)
            r = self.node("Reshape", [src, sh], n.name)
            if self.tf[self.ref(n.input[1])].a("N") == 4:  # back to an image: (1, H, W, C)
                out = V("map", r, layout="nhwc", channels=128)
            else:
                out = V("tensor", r)
        elif op == "ExpandDims":
            x, d = ins
            if x.kind != "tensor":
                fail("%s: ExpandDims of %s" % (n.name, x.kind))
            out = V("tensor", x.name, value=("expanded", int(np.ravel(d.value)[0])))
        elif op == "Squeeze":
            x = ins[0]
            if x.kind != "tensor" or x.value != ("squeezable",):
                fail("%s: Squeeze" % n.name)
            out = V("tensor", x.name)
        elif op == "Transpose":
            x, perm = ins
            if x.kind != "tensor":
                fail("%s: Transpose of %s" % (n.name, x.kind))
            out = V("tensor", self.node("Transpose", [x.name], n.name,
                                        perm=[int(p) for p in perm.value]))
        elif op == "Softmax":
            out = V("tensor", self.node("Softmax", [ins[0].name], n.name, axis=-1))
        elif op == "Sum":
            x, axes = ins
            out = V("tensor", self.node("ReduceSum", [x.name, self.init(
                n.name + "/axes", np.ravel(axes.value).astype(np.int64))], n.name,
                keepdims=1 if n.a("keep_dims") else 0))
        else:
            fail("%s: TF op %s not translated" % (n.name, op))
        self.v[n.name] = out

    def fold(self, op, vals, n):
        if op == "AddV2":
            return vals[0] + vals[1]
        if op == "Sub":
            return vals[0] - vals[1]
        if op == "Mul":
            return vals[0] * vals[1]
        if op == "Rsqrt":
            return (np.float32(1) / np.sqrt(vals[0])).astype(np.float32)
        if op == "Transpose":
            return np.transpose(vals[0], [int(p) for p in vals[1]])
        if op == "ExpandDims":
            return np.expand_dims(vals[0], int(np.ravel(vals[1])[0]))
        if op == "Range":
            return np.arange(int(vals[0]), int(vals[1]), int(vals[2]), dtype=np.int32)
        if op == "ConcatV2":
            return np.concatenate([np.atleast_1d(v) for v in vals[:-1]], axis=int(vals[-1]))
        if op == "Pack":
            return np.stack(vals, axis=n.a("axis", 0))
        fail("%s: fold %s" % (n.name, op))

    def conv(self, n, ins):
        x, w = ins
        if w.kind != "const" or n.a("padding") != b"VALID":
            fail("%s: conv weights / padding" % n.name)
        st = [int(s) for s in n.a("strides")]
        if x.kind == "tensor":
            # conv1d: ExpandDims(x (1, N, C), 1) * ExpandDims(kernel (1, C, K), 0) -> MatMul
            if x.value != ("expanded", 1) or w.value.shape[:2] != (1, 1) or st != [1, 1, 1, 1]:
                fail("%s: conv1d form" % n.name)
            kern = w.value[0, 0]
            y = self.node("MatMul", [x.name, self.init(n.name + "/kernel", kern)], n.name)
            return V("tensor", y, value=("squeezable",))
        wt = np.ascontiguousarray(np.transpose(w.value, (3, 2, 0, 1)))
        src = self.to_layout(x, "nchw", n.name)
        return V("map", self.node("Conv", [src, self.init(n.name + "/weights", wt)], n.name,
                                  dilations=[1, 1], strides=st[1:3], group=1,
                                  kernel_shape=list(wt.shape[2:])),
                 layout="nchw", channels=int(wt.shape[0]))

    def binary(self, n, ins):
        op = {"AddV2": "Add", "Sub": "Sub", "Mul": "Mul", "RealDiv": "Div"}[n.op]
        a, b = ins
        kinds = (a.kind, b.kind)
        if kinds == ("int", "const") or kinds == ("const", "int"):
            return V("int", self.node(op, [self.as_input(a, n.name + "/x"),
                                           self.as_input(b, n.name + "/y")], n.name))
        if "tensor" in kinds:   # the attention's (1, N, K) maths
            return V("tensor", self.node(op, [self.as_input(a, n.name + "/x"),
                                              self.as_input(b, n.name + "/y")], n.name))
        if kinds in (("stat", "const"), ("const", "stat")):   # variance + eps
            s = a if a.kind == "stat" else b
            c = b if a.kind == "stat" else a
            cv = np.asarray(c.value, np.float32).reshape(1, 1, 1, 1)
            ins2 = [s.name, self.init(n.name + "/y", cv)]
            if a.kind == "const":
                ins2 = ins2[::-1]
            return V("stat", self.node(op, ins2, n.name), channels=s.channels)
        if "map" in kinds and "const" in kinds:     # BatchNorm: x * scale + shift
            x = a if a.kind == "map" else b
            c = b if a.kind == "map" else a
            src = self.to_layout(x, "nchw", n.name)
            cv = np.asarray(c.value, np.float32).reshape(1, -1, 1, 1)
            return V("map", self.node(op, [src, self.init(n.name + "/y", cv)], n.name),
                     layout="nchw", channels=x.channels)
        if kinds == ("map", "stat"):
            if op == "Div" or (op == "Mul" and a.layout == "nhwc"):
                # tf2onnx's LADE: NHWC map, statistic reshaped to [1, 1, 1, C]
                src = self.to_layout(a, "nhwc", n.name)
                return V("map", self.node(op, [src, self.stat_nhwc(b, n.name)], n.name),
                         layout="nhwc", channels=a.channels)
            src = self.to_layout(a, "nchw", n.name)
            return V("map", self.node(op, [src, b.name], n.name), layout="nchw",
                     channels=a.channels)
        if kinds == ("map", "map"):
            return V("map", self.node(op, [self.to_layout(a, "nchw", n.name),
                                           self.to_layout(b, "nchw", n.name + "_b")], n.name),
                     layout="nchw", channels=a.channels)
        fail("%s: %s of %s" % (n.name, n.op, kinds))

    def dedup(self, final):
        """Merge equal initializers and equal nodes (same op, inputs, attributes), as
        tf2onnx's optimiser does; the graph output keeps its name."""
        rename = {}
        by_value = {}
        inits = []
        for t in self.inits:
            key = (t.data_type, tuple(t.dims), t.raw_data or t.SerializeToString())
            if key in by_value:
                rename[t.name] = by_value[key]
            else:
                by_value[key] = t.name
                inits.append(t)
        seen = {}
        nodes = []
        for n in self.nodes:
            ins = [rename.get(i, i) for i in n.input]
            del n.input[:]
            n.input.extend(ins)
            key = (n.op_type, tuple(ins), tuple(a.SerializeToString() for a in n.attribute))
            if key in seen and n.output[0] != final:
                rename[n.output[0]] = seen[key]
                continue
            seen[key] = n.output[0]
            nodes.append(n)
        self.nodes = nodes
        self.inits = inits

    def build(self, out_tf):
        y = self.get(out_tf)
        if y.kind != "map":
            fail("output is not an image")
        final = self.node("Transpose", [y.name], out_tf, perm=NCHW_TO_NHWC) \
            if y.layout == "nchw" else y.name
        self.dedup(final)
        x = helper.make_tensor_value_info("AnimeGANv3_input:0", TensorProto.FLOAT,
                                          [1, "unk__h", "unk__w", 3])
        o = helper.make_tensor_value_info(final, TensorProto.FLOAT,
                                          [1, "unk__oh", "unk__ow", 3])
        g = helper.make_graph(self.nodes, "tf2onnx", [x], [o], initializer=self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)],
                              producer_name="animegan.c tools/make_v3_onnx.py",
                              producer_version="1")
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", default=DEFAULT_INPUT)
    ap.add_argument("--output", default=DEFAULT_OUTPUT)
    ap.add_argument("--check", action="store_true",
                    help="run the result in ONNX Runtime against the .pb interpreter of "
                         "tools/v3_reference.py (needs PyTorch and onnxruntime-node)")
    args = ap.parse_args()
    with open(args.input, "rb") as f:
        nodes = VF.read_graphdef(f.read())
    used = set()
    for n in nodes:
        used.update(s[:-2] if s.endswith(":0") else s for s in n.input)
    outs = [n.name for n in nodes if n.name not in used and n.op != "Const"]
    if outs != ["generator_1/main/out_layer"]:
        fail("outputs %s" % outs)
    sys.setrecursionlimit(10000)
    m = Builder(nodes).build(outs[0])
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    tmp = args.output + ".tmp"
    onnx.save(m, tmp)
    os.replace(tmp, args.output)
    ops = {}
    for n in m.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    print("wrote %s: %d nodes (%s), %d initializers, %d bytes" %
          (args.output, len(m.graph.node), ", ".join("%s x%d" % kv for kv in sorted(ops.items())),
           len(m.graph.initializer), os.path.getsize(args.output)))
    if args.check:
        import v3_reference as R
        sizes = [(64, 64), (32, 48), (80, 96)]
        xs = [R.test_input(h, w) for h, w in sizes]
        ys = R.run_ort(args.output, xs)
        for (h, w), x, y in zip(sizes, xs, ys):
            print("%dx%d: ONNX Runtime on it vs the .pb interpreter: max abs %.3g"
                  % (w, h, np.abs(y - R.run_graphdef(nodes, x)).max()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
