#!/usr/bin/env python3
"""face_convert.py - convert MediaPipe's two face networks (../shared/models/face, TFLite with
float16 weights) into the project's graph safetensors (docs/graph.md):

  face_detection_full_range.tflite -> models/face-detect.safetensors  (kind "detector")
  face_landmark.tflite             -> models/face-mesh.safetensors    (kind "landmarks")

Offline tool (Debian's Python 3 + numpy; the TFLite reader of tools/v3_formats.py). Every
TFLite op becomes one graph node, translated, never interpreted:

  CONV_2D, DEPTHWISE_CONV_2D  conv (groups = channels for depthwise), weights OHWI -> OIHW
                              (depthwise (1, KH, KW, C) -> (C, 1, KH, KW)), "pad" from SAME
                              or VALID: TFLite SAME puts the odd pixel of the total padding at
                              the bottom/right (pad_total = max((out-1)*stride + k - in, 0),
                              top = total // 2, bottom = total - top), so a stride-2 3x3 conv
                              on an even map pads [0, 1, 0, 1], not [1, 1, 1, 1]
  RELU, PRELU, ADD            relu, prelu (slope (1, 1, C) -> (C)), add
  MAX_POOL_2D                 max_pool (k, stride; SAME on the even maps here pads nothing)
  PAD                         pad_channels (only zero channels appended are accepted)
  RESIZE_BILINEAR             resize, mode half-pixel (half_pixel_centers), to the size of the
                              other operand of the ADD that consumes it (checked: 2x)
  RESHAPE                     dropped: the graph outputs are the convolution maps before it,
                              (48, 48, 16) + (48, 48, 1) for the detector, (1, 1, 1404) +
                              (1, 1, 1) for the mesh; src/face/ decodes them in C
  DEQUANTIZE                  the float16 weights, stored as F16 (exactly the file's values)

Anything else (another op, a fused activation, dilation, a depth multiplier) is refused.

Usage (from the repository root):
  /usr/bin/python3 tools/face_convert.py [--src DIR] [--outdir models] [--dump]
Deterministic: rerunning gives byte-identical files. The Apache-2.0 text is copied to
models/LICENSE-Apache-2.0.txt beside them.
"""

import argparse
import hashlib
import json
import os
import shutil
import sys

import numpy as np

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import v3_formats as F  # noqa: E402
from v3_convert import write_safetensors  # noqa: E402

REPO_ROOT = os.path.dirname(TOOLS)
SRC_DIR = "/work/shared/models/face"

F.TFL_OPS.update({2: "CONCATENATION", 4: "DEPTHWISE_CONV_2D", 17: "MAX_POOL_2D", 19: "RELU",
                  34: "PAD", 54: "PRELU"})

LICENSE = ("Apache License 2.0 (Google MediaPipe); full text in LICENSE-Apache-2.0.txt "
           "beside this file")

MODELS = {
    "detect": dict(file="face_detection_full_range.tflite", out="face-detect.safetensors",
                   kind="detector", outputs=["regressors", "scores"],
                   input="rgb x/127.5-1, 192x192 letterboxed",
                   output="regressors (48, 48, 16): box x, y, w, h + 6 keypoints (x, y) in "
                          "input pixels from the anchor centre; scores (48, 48, 1) logits",
                   origin="MediaPipe BlazeFace full range, face_detection_full_range.tflite of "
                          "npm @mediapipe/face_detection@0.4.1657300184"),
    "mesh": dict(file="face_landmark.tflite", out="face-mesh.safetensors", kind="landmarks",
                 outputs=["landmarks", "presence"], input="rgb x/255, 192x192 face crop",
                 output="landmarks (1, 1, 1404): 468 x (x, y, z) in crop pixels; presence "
                        "(1, 1, 1) logit",
                 origin="MediaPipe FaceMesh, face_landmark.tflite (bytes [2495952, 3737848) of "
                        "face_mesh_solution_packed_assets.data) of npm "
                        "@mediapipe/face_mesh@0.4.1657299874"),
}


def check(cond, msg):
    if not cond:
        raise SystemExit("face_convert: " + msg)


def same_pad(size, k, stride):
    """TFLite SAME: the extra pixel of an odd total goes to the bottom/right."""
    out = (size + stride - 1) // stride
    total = max((out - 1) * stride + k - size, 0)
    return total // 2, total - total // 2


def convert_graph(m, spec):
    """The TFLite subgraph -> (nodes, tensors, outputs) of docs/graph.md."""
    const = {}      # tensor index -> numpy array (DEQUANTIZE folded)
    for t in m.tensors:
        if t.data is not None:
            const[t.index] = t.data
    check(len(m.inputs) == 1 and m.tensors[m.inputs[0]].shape == (1, 192, 192, 3),
          "input is not 1x192x192x3")
    name = {m.inputs[0]: "input"}
    shape = {m.inputs[0]: (192, 192, 3)}
    nodes, tensors = [], {}
    consumers = {}
    for op in m.ops:
        for i in op.inputs:
            consumers.setdefault(i, []).append(op)
    producer = {op.outputs[0]: op for op in m.ops}
    out_alias = {}  # a RESHAPE's output tensor -> the node it reshapes
    for op in m.ops:
        where = "op%d (%s)" % (op.index, op.name)
        ins = [i for i in op.inputs if i >= 0]
        check(len(op.outputs) == 1, "%s: %d outputs" % (where, len(op.outputs)))
        out = op.outputs[0]
        oshape = m.tensors[out].shape
        if op.name == "DEQUANTIZE":
            check(ins[0] in const and const[ins[0]].dtype == np.float16,
                  "%s: not a float16 constant" % where)
            const[out] = const[ins[0]]
            continue
        if op.name == "RESHAPE":
            check(ins[0] in name, "%s: reshapes an unknown tensor" % where)
            out_alias[out] = name[ins[0]]
            continue
        check(ins[0] in name, "%s: input is not computed" % where)
        src = ins[0]
        nm = "t%d" % out
        node = {"name": nm, "in": [name[src]]}
        h, w, c = shape[src]
        if op.name in ("CONV_2D", "DEPTHWISE_CONV_2D"):
            wt, bias = const.get(ins[1]), const.get(ins[2]) if len(ins) > 2 else None
            check(wt is not None and bias is not None, "%s: weights or bias not constant" % where)
            padding, sw, sh = op.opt(0, "b"), op.opt(1, "i"), op.opt(2, "i")
            check(sw == sh, "%s: stride %dx%d" % (where, sh, sw))
            if op.name == "CONV_2D":
                act, dil = op.opt(3, "b"), (op.opt(4, "i", 1), op.opt(5, "i", 1))
                check(wt.shape[3] == c, "%s: %d input channels for %d" % (where, wt.shape[3], c))
                weight = np.transpose(wt, (0, 3, 1, 2))
                groups = 1
            else:
                check(op.opt(3, "i") == 1, "%s: depth multiplier" % where)
                act, dil = op.opt(4, "b"), (op.opt(5, "i", 1), op.opt(6, "i", 1))
                check(wt.shape[0] == 1 and wt.shape[3] == c, "%s: depthwise weights" % where)
                weight = np.transpose(wt, (3, 0, 1, 2))
                groups = c
            check(act == 0 and dil == (1, 1), "%s: fused activation or dilation" % where)
            k = weight.shape[2]
            check(weight.shape[3] == k, "%s: non-square kernel" % where)
            if padding == 0:  # SAME
                pt, pb = same_pad(h, k, sh)
                pl, pr = same_pad(w, k, sw)
            else:
                pt = pb = pl = pr = 0
            node.update(op="conv", weight=nm + ".weight", bias=nm + ".bias", stride=sh,
                        groups=groups, pad=[pt, pb, pl, pr], pad_mode="zero")
            tensors[nm + ".weight"] = np.ascontiguousarray(weight)
            tensors[nm + ".bias"] = np.ascontiguousarray(bias)
            oc = weight.shape[0]
            ho, wo = (h + pt + pb - k) // sh + 1, (w + pl + pr - k) // sw + 1
            check(oshape == (1, ho, wo, oc), "%s: shape %s, computed %s" % (where, oshape,
                                                                          (ho, wo, oc)))
        elif op.name == "RELU":
            node["op"] = "relu"
        elif op.name == "PRELU":
            slope = const.get(ins[1])
            check(slope is not None and slope.shape == (1, 1, c), "%s: slope" % where)
            node.update(op="prelu", slope=nm + ".slope")
            tensors[nm + ".slope"] = np.ascontiguousarray(slope.reshape(c))
        elif op.name == "ADD":
            check(op.opt(0, "b") == 0, "%s: fused activation" % where)
            check(len(ins) == 2 and ins[1] in name, "%s: operands" % where)
            check(shape[ins[1]] == shape[src], "%s: shapes differ" % where)
            node.update(op="add", **{"in": [name[src], name[ins[1]]]})
        elif op.name == "MAX_POOL_2D":
            padding, sw, sh = op.opt(0, "b"), op.opt(1, "i"), op.opt(2, "i")
            fw, fh, act = op.opt(3, "i"), op.opt(4, "i"), op.opt(5, "b")
            check(sw == sh and fw == fh and act == 0, "%s: options" % where)
            pt, pb = same_pad(h, fh, sh) if padding == 0 else (0, 0)
            pl, pr = same_pad(w, fw, sw) if padding == 0 else (0, 0)
            check(pt == pb == pl == pr == 0, "%s: a padded max pool" % where)
            node.update(op="max_pool", k=fh, stride=sh, pad=[0, 0, 0, 0])
        elif op.name == "PAD":
            p = const.get(ins[1])
            check(p is not None and p.shape == (4, 2), "%s: paddings" % where)
            check(np.all(p[:3] == 0) and p[3, 0] == 0, "%s: pads more than channels" % where)
            node.update(op="pad_channels", channels=int(c + p[3, 1]))
        elif op.name == "RESIZE_BILINEAR":
            check(op.opt(2, "B") == 0 and op.opt(3, "B") == 1,
                  "%s: not half-pixel centres" % where)
            size = const.get(ins[1])
            check(size is not None and list(size) == [2 * h, 2 * w], "%s: size" % where)
            users = consumers.get(out, [])
            check(len(users) == 1 and users[0].name == "ADD", "%s: not read by one ADD" % where)
            other = [i for i in users[0].inputs if i != out]
            check(len(other) == 1 and other[0] in name and shape[other[0]][:2] == (2 * h, 2 * w),
                  "%s: the ADD's other operand is not computed before it" % where)
            # The size comes from any earlier map of that size; the ADD's other operand is
            # RELU(1x1 conv(x)) here, which the engine fuses into the ADD's chain, so the
            # resize takes its size from x, the conv's input (a value the engine keeps).
            like = other[0]
            relu = producer.get(like)
            conv = producer.get(relu.inputs[0]) if relu is not None and relu.name == "RELU" \
                else None
            if conv is not None and conv.name == "CONV_2D" and \
                    shape[conv.inputs[0]][:2] == (2 * h, 2 * w):
                like = conv.inputs[0]
            node.update(op="resize", mode="half-pixel", **{"in": [name[src], name[like]]})
        else:
            raise SystemExit("face_convert: %s: unexpected operator" % where)
        if node["op"] != "conv":
            c2 = node.get("channels", c)
            hw = (2 * h, 2 * w) if node["op"] == "resize" else (h, w)
            if node["op"] == "max_pool":
                hw = (h // node["stride"], w // node["stride"])
            check(oshape == (1,) + hw + (c2,), "%s: shape %s" % (where, oshape))
            shape[out] = hw + (c2,)
        else:
            shape[out] = oshape[1:]
        name[out] = nm
        nodes.append(node)
    # The graph outputs: the file's, through any RESHAPE, renamed.
    outputs = []
    check(len(m.outputs) == 2, "%d outputs" % len(m.outputs))
    file_out = [out_alias.get(o, name.get(o)) for o in m.outputs]
    # Both files list the wide map first: (regressors, scores) and (landmarks, presence).
    widths = [tensors[nm + ".weight"].shape[0] for nm in file_out]
    check(widths in ([16, 1], [1404, 1]), "outputs of %s channels" % widths)
    for new, old in zip(spec["outputs"], file_out):
        for n in nodes:
            if n["name"] == old:
                n["name"] = new
                for k in ("weight", "bias"):
                    tensors[new + "." + k] = tensors.pop(old + "." + k)
                    n[k] = new + "." + k
            n["in"] = [new if i == old else i for i in n["in"]]
        outputs.append(new)
    return schedule(nodes, outputs), tensors, outputs


def schedule(nodes, outputs):
    """The nodes in a depth-first order from the outputs in which, at every ADD, the operand
    that is not a conv chain (a max pool, channel pad, resize, PReLU or another add) is
    computed before the conv chain. The engine fuses such an ADD into the chain of the conv
    operand as its residual, applied when that conv's step ends: the residual must exist by
    then, which the file's own order does not guarantee (its shortcut PAD comes after the
    conv)."""
    by_name = {n["name"]: n for n in nodes}

    def conv_chain(name):
        n = by_name.get(name)
        while n is not None and n["op"] == "relu":
            n = by_name.get(n["in"][0])
        return n is not None and n["op"] == "conv"

    order, done = [], {"input"}

    def visit(name):
        stack = [(name, False)]
        while stack:
            nm, expanded = stack.pop()
            if nm in done:
                continue
            n = by_name[nm]
            if expanded:
                done.add(nm)
                order.append(n)
                continue
            stack.append((nm, True))
            ins = list(n["in"])
            if n["op"] == "resize":
                ins = ins[::-1]   # the size source first, then the data
            if n["op"] == "add" and conv_chain(ins[0]) and not conv_chain(ins[1]):
                ins = ins[::-1]
            for i in reversed(ins):   # the stack pops the first operand first
                if i not in done:
                    stack.append((i, False))

    for o in outputs:
        visit(o)
    check(len(order) == len(nodes), "scheduling lost nodes")
    return order


def conv_flop(nodes, tensors):
    size = {"input": (192, 192, 3)}
    flop = 0
    for n in nodes:
        h, w, c = size[n["in"][0]]
        if n["op"] == "conv":
            wt = tensors[n["weight"]]
            p = n["pad"]
            ho = (h + p[0] + p[1] - wt.shape[2]) // n["stride"] + 1
            wo = (w + p[2] + p[3] - wt.shape[3]) // n["stride"] + 1
            flop += 2 * ho * wo * wt.shape[0] * wt.shape[1] * wt.shape[2] * wt.shape[3]
            size[n["name"]] = (ho, wo, wt.shape[0])
        elif n["op"] == "max_pool":
            size[n["name"]] = (h // n["stride"], w // n["stride"], c)
        elif n["op"] == "pad_channels":
            size[n["name"]] = (h, w, n["channels"])
        elif n["op"] == "resize":
            size[n["name"]] = size[n["in"][1]][:2] + (c,)
        else:
            size[n["name"]] = (h, w, c)
    return flop


def convert(key, src_dir, out_dir, dump=False):
    spec = MODELS[key]
    path = os.path.join(src_dir, spec["file"])
    with open(path, "rb") as f:
        buf = f.read()
    sha = hashlib.sha256(buf).hexdigest()
    m = F.TFLite(buf)
    nodes, tensors, outputs = convert_graph(m, spec)
    check(len(nodes) < 512, "too many nodes")
    metadata = {
        "format": "animegan",
        "architecture": "blazeface-full" if key == "detect" else "facemesh",
        "kind": spec["kind"],
        "input": spec["input"],
        "output": spec["output"],
        "weights": "F16, PyTorch layout, exactly the file's values",
        "license": LICENSE,
        "source": "%s; sha256 %s" % (spec["origin"], sha),
        "graph": json.dumps({"inputs": ["input"], "outputs": outputs, "nodes": nodes},
                            separators=(",", ":")),
    }
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, spec["out"])
    write_safetensors(out, tensors, metadata)
    params = sum(int(a.size) for a in tensors.values())
    if dump:
        for n in nodes:
            print("  %-12s %-12s %s" % (n["op"], n["name"], ",".join(n["in"])))
    print("wrote %s: %d nodes, %d tensors, %d parameters, %.3f GFLOP at 192x192"
          % (out, len(nodes), len(tensors), params, conv_flop(nodes, tensors) / 1e9))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", default=SRC_DIR)
    ap.add_argument("--outdir", default=os.path.join(REPO_ROOT, "models"))
    ap.add_argument("--dump", action="store_true")
    args = ap.parse_args()
    for key in ("detect", "mesh"):
        convert(key, args.src, args.outdir, args.dump)
    shutil.copyfile(os.path.join(args.src, "LICENSE-Apache-2.0.txt"),
                    os.path.join(args.outdir, "LICENSE-Apache-2.0.txt"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
