#!/usr/bin/python3
"""tfjs_reference.py - an independent numpy interpreter of a TensorFlow.js layers model
(model.json + its .bin shards), for the golden fixtures of the bundled upscalers.

It reads the Keras topology as the file states it (Conv2D "same"/"valid", Activation relu /
linear, Concatenate on the channel axis, Add, UpSampling2D nearest) and evaluates it in
float64, NHWC, straight from the HWIO kernels: nothing is shared with the converter
(tools/convert_upscalerjs.py) or the C engine. A layer or attribute it does not know is an
error. Offline tool: Debian's python3 + numpy (+ PIL for the command line).

  tfjs_reference.py MODEL_DIR IN.png OUT.png   run one model on an image ([0, 255] in and out)
  tfjs_reference.py --check                    the slim models against UpscalerJS's own results
                                               in ../shared/models/upscale/esrgan-slim/assets/

As a module: load(model_dir) -> Model; Model.run(x) with x (H, W, 3) float64 in [0, 255].
"""

import json
import os
import sys

import numpy as np

SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared")
UPSCALE_DIR = os.environ.get("AG_UPSCALE_SRC", os.path.join(SHARED, "models", "upscale"))

KNOWN = {"InputLayer", "Conv2D", "Activation", "Concatenate", "Add", "UpSampling2D"}


class Model:
    def __init__(self, layers, weights, inputs, outputs):
        self.layers = layers  # in file order: (class, name, config, inbound names)
        self.weights = weights  # name -> ndarray, as the manifest shapes it
        self.inputs = inputs
        self.outputs = outputs

    def run(self, x):
        vals = {self.inputs[0]: np.asarray(x, dtype=np.float64)}
        for cls, name, cfg, inbound in self.layers:
            if cls == "InputLayer":
                continue
            args = [vals[i] for i in inbound]
            vals[name] = apply(cls, name, cfg, args, self.weights)
        return vals[self.outputs[0]]


def conv2d(x, kernel, bias, padding, strides, dilation):
    if tuple(strides) != (1, 1) or tuple(dilation) != (1, 1):
        raise ValueError("only stride 1, dilation 1 convolutions")
    kh, kw, ic, oc = kernel.shape
    if x.shape[2] != ic:
        raise ValueError("conv input has %d channels, kernel %d" % (x.shape[2], ic))
    if padding == "same":  # stride 1: (k - 1) / 2 zeros each side, the extra one after
        pt, pl = (kh - 1) // 2, (kw - 1) // 2
        x = np.pad(x, ((pt, kh - 1 - pt), (pl, kw - 1 - pl), (0, 0)))
    elif padding != "valid":
        raise ValueError("padding %r" % padding)
    h, w = x.shape[0] - kh + 1, x.shape[1] - kw + 1
    out = np.zeros((h, w, oc))
    k = kernel.astype(np.float64)
    for dy in range(kh):
        for dx in range(kw):
            out += x[dy:dy + h, dx:dx + w, :] @ k[dy, dx]
    if bias is not None:
        out += bias.astype(np.float64)
    return out


def activation(x, kind):
    if kind == "linear":
        return x
    if kind == "relu":
        return np.maximum(x, 0)
    raise ValueError("activation %r" % kind)


def apply(cls, name, cfg, args, weights):
    if cls == "Conv2D":
        bias = weights.get(name + "/bias") if cfg.get("use_bias", True) else None
        y = conv2d(args[0], weights[name + "/kernel"], bias, cfg["padding"], cfg["strides"],
                   cfg.get("dilation_rate", [1, 1]))
        return activation(y, cfg.get("activation", "linear"))
    if cls == "Activation":
        return activation(args[0], cfg["activation"])
    if cls == "Concatenate":
        if cfg.get("axis", -1) not in (3, -1):
            raise ValueError("%s: concatenation on axis %r" % (name, cfg.get("axis")))
        return np.concatenate(args, axis=2)
    if cls == "Add":
        return sum(args[1:], args[0])
    if cls == "UpSampling2D":
        if cfg.get("interpolation", "nearest") != "nearest":
            raise ValueError("%s: interpolation %r" % (name, cfg["interpolation"]))
        sy, sx = cfg["size"]
        return np.repeat(np.repeat(args[0], sy, axis=0), sx, axis=1)
    raise ValueError("layer %s (%s) is not supported" % (name, cls))


def load(model_dir):
    with open(os.path.join(model_dir, "model.json")) as f:
        j = json.load(f)
    topo = j["modelTopology"]
    cfg = topo.get("model_config", topo)["config"]
    layers = []
    for L in cfg["layers"]:
        if L["class_name"] not in KNOWN:
            raise ValueError("layer %s (%s) is not supported" % (L["name"], L["class_name"]))
        nodes = L.get("inbound_nodes") or []
        if len(nodes) > 1:
            raise ValueError("layer %s is shared" % L["name"])
        inbound = [i[0] for i in nodes[0]] if nodes else []
        layers.append((L["class_name"], L["name"], L["config"], inbound))
    weights = {}
    for group in j["weightsManifest"]:
        raw = b"".join(open(os.path.join(model_dir, p), "rb").read() for p in group["paths"])
        off = 0
        for w in group["weights"]:
            if w["dtype"] != "float32" or "quantization" in w:
                raise ValueError("weight %s is not plain float32" % w["name"])
            n = int(np.prod(w["shape"])) if w["shape"] else 1
            weights[w["name"]] = np.frombuffer(raw, "<f4", n, off).reshape(w["shape"])
            off += 4 * n
        if off != len(raw):
            raise ValueError("weights group %r: %d bytes left over" % (group["paths"], len(raw) - off))
    return Model(layers, weights, [i[0] for i in cfg["input_layers"]],
                 [o[0] for o in cfg["output_layers"]])


def to_u8(y):
    return np.clip(np.rint(y), 0, 255).astype(np.uint8)


def read_rgb(path):
    from PIL import Image
    return np.asarray(Image.open(path).convert("RGB"), dtype=np.float64)


def check():
    """The slim models' results on UpscalerJS's fixture against the package's own samples.
    UpscalerJS ran them in float32 (the package's samples were made with TF.js), this in
    float64: rounding may differ by one level, never more (measured: max 1, PSNR > 93 dB)."""
    assets = os.path.join(UPSCALE_DIR, "esrgan-slim", "assets")
    x = read_rgb(os.path.join(assets, "fixture.png"))
    for s in (2, 3, 4):
        m = load(os.path.join(UPSCALE_DIR, "esrgan-slim", "x%d" % s))
        y = to_u8(m.run(x)).astype(np.int32)
        ref = read_rgb(os.path.join(assets, "samples", "%dx" % s, "result.png")).astype(np.int32)
        if y.shape != ref.shape:
            raise SystemExit("x%d: shape %s, UpscalerJS's %s" % (s, y.shape, ref.shape))
        d = np.abs(y - ref)
        mse = float(np.mean(d.astype(np.float64) ** 2))
        psnr = 10 * np.log10(255 ** 2 / mse) if mse else float("inf")
        print("esrgan-slim x%d vs UpscalerJS: max %d levels, mean %.4f, %.2f%% > 1, PSNR %.1f dB"
              % (s, d.max(), d.mean(), 100.0 * np.mean(d > 1), psnr))
        if d.max() > 1:
            raise SystemExit("x%d: %d levels from UpscalerJS's result (at most 1 allowed)"
                             % (s, d.max()))
    return 0


def main(argv):
    if argv[1:] == ["--check"]:
        return check()
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    from PIL import Image
    m = load(argv[1])
    Image.fromarray(to_u8(m.run(read_rgb(argv[2])))).save(argv[3])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
