#!/usr/bin/python3
"""convert_face_recognition.py - dlib's face recognition ResNet (the 128-d descriptor, CC0 weights
by Davis King), as face-api ships it for TensorFlow.js, -> models/face-recognition.safetensors,
a graph file of docs/graph.md (kind "embedding").

Source: the npm package @vladmandic/face-api@1.7.15 (MIT code; `npm pack @vladmandic/face-api`),
model/face_recognition_model-weights_manifest.json + face_recognition_model.bin. The manifest
is a plain weights list (no topology): the network is face-api's FaceRecognitionNet
(src/faceRecognitionNet/*.ts), written out here node by node:

  conv32_down           conv 7x7 stride 2 VALID -> scale -> relu; max_pool 3 stride 2 VALID
  residual (xN)         conv 3x3 SAME -> scale -> relu -> conv 3x3 SAME -> scale; + x; relu
  residualDown          conv 3x3 stride 2 VALID -> scale -> relu -> conv 3x3 SAME -> scale;
                        zero row and column appended when it is smaller than the 2x2 average
                        pool of x; + that pool (zero channels appended to match); relu
  head                  mean over H, W (the last map is 2x2 at the 150 px input); x fc

Translation: each "scale" (weights, biases: an inference BatchNorm) is folded into the
convolution before it (w * s, b * s + t), TF's HWIO kernels become OIHW; the 2x2 average pools
and the final mean are depthwise 2x2 stride 2 convolutions of 0.25, the appended zero row and
column a depthwise 1x1 convolution of 1 with pad [0, 1, 0, 1], the zero channels pad_channels,
fc the linear op. The quantized tensors (uint8 with scale and min, most of them) are read as
TF.js's decodeWeights reads them (q * scale + min in double, stored as float32), folded in
float64 and stored as F16 (11 MB instead of 22; tests/test_face_identify.c states what that
costs against TF.js). Input: the aligned 150x150 RGB crop, (x - [122.782, 117.001, 104.298])
/ 255 (src/face/identify.c); output "descriptor" (1, 1, 128). Deterministic.

  /usr/bin/python3 tools/convert_face_recognition.py --src /tmp/package/model [--out models]
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
from v3_convert import write_safetensors  # noqa: E402

REPO_ROOT = os.path.dirname(TOOLS)
SIDE = 150
MEAN_RGB = [122.782, 117.001, 104.298]
LICENSE = ("CC0 1.0 (public domain; dlib_face_recognition_resnet_model_v1 by Davis King, "
           "github.com/davisking/dlib-models); converted for TF.js by face-api (MIT); see "
           "models/README.md and LICENSE-CC0-dlib-models.txt beside this file")
ORIGIN = ("face_recognition_model.bin of npm @vladmandic/face-api@1.7.15 (the dlib ResNet "
          "descriptor as face-api.js converted it)")
RESIDUALS = [("conv32_1", 0), ("conv32_2", 0), ("conv32_3", 0),
             ("conv64_down", 1), ("conv64_1", 0), ("conv64_2", 0), ("conv64_3", 0),
             ("conv128_down", 1), ("conv128_1", 0), ("conv128_2", 0),
             ("conv256_down", 1), ("conv256_1", 0), ("conv256_2", 0), ("conv256_down_out", 1)]


def check(cond, msg):
    if not cond:
        raise SystemExit("convert_face_recognition: " + msg)


def read_weights(src):
    """name -> float32 array, as TF.js decodeWeights gives them."""
    with open(os.path.join(src, "face_recognition_model-weights_manifest.json")) as f:
        manifest = json.load(f)
    check(len(manifest) == 1 and manifest[0]["paths"] == ["face_recognition_model.bin"],
          "unexpected manifest groups")
    path = os.path.join(src, "face_recognition_model.bin")
    with open(path, "rb") as f:
        buf = f.read()
    out, offset = {}, 0
    for spec in manifest[0]["weights"]:
        check(spec["dtype"] == "float32", "%s: dtype %s" % (spec["name"], spec["dtype"]))
        count = int(np.prod(spec["shape"]))
        q = spec.get("quantization")
        if q:
            check(q["dtype"] == "uint8", "%s: quantized as %s" % (spec["name"], q["dtype"]))
            raw = np.frombuffer(buf, np.uint8, count, offset).astype(np.float64)
            value = (raw * q["scale"] + q["min"]).astype(np.float32)
            offset += count
        else:
            value = np.frombuffer(buf, "<f4", count, offset).astype(np.float32)
            offset += 4 * count
        out[spec["name"]] = value.reshape(spec["shape"])
    check(offset == len(buf), "%d bytes read of %d" % (offset, len(buf)))
    return out, hashlib.sha256(buf).hexdigest()


class Graph:
    def __init__(self, weights):
        self.w = weights
        self.nodes, self.tensors, self.used = [], {}, set()
        self.shape = {"input": (SIDE, SIDE, 3)}

    def take(self, name):
        check(name in self.w, "no tensor " + name)
        self.used.add(name)
        return self.w[name].astype(np.float64)

    def add(self, node, shape):
        self.nodes.append(node)
        self.shape[node["name"]] = shape
        return node["name"]

    def conv_scale(self, x, prefix, stride, same):
        """conv + bias, then the scale layer folded in."""
        f = self.take(prefix + "/conv/filters")  # (KH, KW, IC, OC)
        b = self.take(prefix + "/conv/bias")
        s, t = self.take(prefix + "/scale/weights"), self.take(prefix + "/scale/biases")
        k, ic, oc = f.shape[0], f.shape[2], f.shape[3]
        h, w, c = self.shape[x]
        check(c == ic and f.shape[1] == k, "%s: kernel %s on %d channels" % (prefix, f.shape, c))
        p = (k - 1) // 2 if same else 0
        check(not same or stride == 1, "%s: SAME with stride %d" % (prefix, stride))
        self.tensors[prefix + ".weight"] = np.transpose(f * s, (3, 2, 0, 1))
        self.tensors[prefix + ".bias"] = b * s + t
        ho, wo = (h + 2 * p - k) // stride + 1, (w + 2 * p - k) // stride + 1
        return self.add({"op": "conv", "name": prefix, "in": [x], "weight": prefix + ".weight",
                         "bias": prefix + ".bias", "stride": stride, "groups": 1,
                         "pad": [p, p, p, p], "pad_mode": "zero"}, (ho, wo, oc))

    def depthwise(self, x, name, k, stride, value, pad):
        h, w, c = self.shape[x]
        self.tensors[name + ".weight"] = np.full((c, 1, k, k), value, np.float64)
        ho = (h + pad[0] + pad[1] - k) // stride + 1
        wo = (w + pad[2] + pad[3] - k) // stride + 1
        return self.add({"op": "conv", "name": name, "in": [x], "weight": name + ".weight",
                         "stride": stride, "groups": c, "pad": pad, "pad_mode": "zero"},
                        (ho, wo, c))

    def relu(self, x, name):
        return self.add({"op": "relu", "name": name, "in": [x]}, self.shape[x])

    def add_relu(self, a, b, name):
        check(self.shape[a] == self.shape[b], "%s: %s + %s" % (name, self.shape[a], self.shape[b]))
        s = self.add({"op": "add", "name": name + ".add", "in": [a, b]}, self.shape[a])
        return self.relu(s, name + ".relu")

    def residual(self, x, prefix, down):
        y = self.conv_scale(x, prefix + "/conv1", 2 if down else 1, same=not down)
        y = self.relu(y, prefix + "/conv1.relu")
        y = self.conv_scale(y, prefix + "/conv2", 1, same=True)
        if not down:
            return self.add_relu(y, x, prefix)
        pooled = self.depthwise(x, prefix + ".pool", 2, 2, 0.25, [0, 0, 0, 0])
        ph, pw, pc = self.shape[pooled]
        h, w, c = self.shape[y]
        if (h, w) != (ph, pw):
            check((h + 1, w + 1) == (ph, pw), "%s: %dx%d against a pool of %dx%d"
                  % (prefix, h, w, ph, pw))
            y = self.depthwise(y, prefix + ".grow", 1, 1, 1.0, [0, 1, 0, 1])
        if pc != c:
            check(pc < c, "%s: pool has more channels" % prefix)
            pooled = self.add({"op": "pad_channels", "name": prefix + ".pool.pad",
                               "in": [pooled], "channels": c}, (ph, pw, c))
        return self.add_relu(y, pooled, prefix)

    def build(self):
        x = self.conv_scale("input", "conv32_down", 2, same=False)
        x = self.relu(x, "conv32_down.relu")
        h, w, c = self.shape[x]
        x = self.add({"op": "max_pool", "name": "pool", "in": [x], "k": 3, "stride": 2,
                      "pad": [0, 0, 0, 0]}, ((h - 3) // 2 + 1, (w - 3) // 2 + 1, c))
        for prefix, down in RESIDUALS:
            x = self.residual(x, prefix, down)
        h, w, c = self.shape[x]
        check((h, w) == (2, 2), "last map %dx%d, not 2x2" % (h, w))
        x = self.depthwise(x, "mean", 2, 2, 0.25, [0, 0, 0, 0])
        fc = self.take("fc")  # (256, 128): descriptor = mean x fc
        check(fc.shape == (c, 128), "fc %s" % (fc.shape,))
        self.tensors["fc.weight"] = fc.T
        self.add({"op": "linear", "name": "descriptor", "in": [x], "weight": "fc.weight"},
                 (1, 1, 128))
        check(self.used == set(self.w), "unused tensors: %s" % sorted(set(self.w) - self.used))


def flop(g):
    total = 0
    for n in g.nodes:
        if n["op"] in ("conv", "linear"):
            wt = g.tensors[n["weight"]]
            ho, wo, _ = g.shape[n["name"]]
            total += 2 * ho * wo * wt.size
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", required=True, help="face-api's model/ folder")
    ap.add_argument("--out", default=os.path.join(REPO_ROOT, "models"))
    args = ap.parse_args()
    weights, sha = read_weights(args.src)
    g = Graph(weights)
    g.build()
    tensors = {k: v.astype(np.float16) for k, v in g.tensors.items()}
    check(all(np.isfinite(v).all() for v in tensors.values()), "a weight overflows F16")
    metadata = {
        "format": "animegan",
        "architecture": "dlib-resnet-descriptor",
        "kind": "embedding",
        "input": "RGB (x - %s) / 255, the aligned 150x150 face crop" % MEAN_RGB,
        "output": "descriptor (1, 1, 128): faces of one person lie within 0.6 (euclidean)",
        "weights": "F16, PyTorch layout, the scale layers folded into the convolutions",
        "license": LICENSE,
        "source": "%s; sha256 %s" % (ORIGIN, sha),
        "graph": json.dumps({"inputs": ["input"], "outputs": ["descriptor"], "nodes": g.nodes},
                            separators=(",", ":")),
    }
    os.makedirs(args.out, exist_ok=True)
    out = os.path.join(args.out, "face-recognition.safetensors")
    write_safetensors(out, tensors, metadata)
    params = sum(int(a.size) for a in tensors.values())
    print("wrote %s: %d nodes, %d parameters, %.3f GFLOP at %dx%d; source sha256 %s"
          % (out, len(g.nodes), params, flop(g) / 1e9, SIDE, SIDE, sha))
    return 0


if __name__ == "__main__":
    sys.exit(main())
