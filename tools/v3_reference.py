#!/usr/bin/env python3
"""v3_reference.py - independent references for the AnimeGANv3 models (offline; Debian's
Python 3, numpy, PyTorch 1.13; python3-onnx only for reading the .onnx file).

(a) Interpreters of the ORIGINAL files, in numpy (float32), op by op as the files state them:
      run_graphdef(nodes, x)  the frozen .pb (TF ops: MirrorPad, Conv2D, Mean, Sqrt, RealDiv,
                              Shape / StridedSlice / Pack size chains, ResizeBilinear, Softmax...)
      run_tflite(model, x)    the fp16 .tflite (float16 weights dequantised to float32).
    The TFLite file was exported for a fixed 512x512 input; to run it at other sizes (multiples
    of 8) its shape constants are re-derived: a RESIZE_BILINEAR size becomes 2 x its input's
    size (what the .pb computes), a RESHAPE target equal to a tensor's static shape becomes
    that tensor's run-time shape, and one with a leading 1 x 1 gets -1 for the pixels.
    `eps=` replaces the file's LADE epsilon (0 in the fp16 file) and the attention's 1e-9
    (also 0 there) when given.
(b) A hand-written PyTorch generator of both architectures (V3Full, V3Tiny) taking its
    weights from our safetensors by name (models/*-v3.safetensors, tools/v3_convert.py),
    with the resize-to-skip rule: each upsample targets the size of the skip tensor it is
    added to, so it runs at any size for which every convolution has an input (full: sides
    >= 8; tiny: sides >= 16, since below that its fourth stride-2 conv has a 1-pixel input
    padded to 2 rows for a 3x3 kernel). A reflect pad of a 1-pixel-wide map (full v3 at sides
    8..15, at H/8) repeats the pixel (TF and PyTorch refuse such a pad).

  /usr/bin/python3 tools/v3_reference.py [--check] [--sizes 64x64,48x32]
prints the max abs error between (a) and (b) for hayao-v3 and shinkai-v3, the eps effect, and
ONNX Runtime on the original .onnx against (b) for cute-v3 (sizes multiples of 16 for it).
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as Fn

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import v3_formats as VF  # noqa: E402
from reference_model import read_safetensors, resize_asymmetric  # noqa: E402

ROOT = os.path.dirname(TOOLS)
SRC = "/work/shared/models/animeganv3"
FILES = {"hayao": "AnimeGANv3_Hayao_36_QUANTIZED_fp16.tflite",
         "shinkai": "AnimeGANv3_Shinkai_37.pb", "cute": "AnimeGANv3_tiny_Cute.onnx"}


# ---- (a) numpy kernels --------------------------------------------------------------------

def np_conv_valid(x, w_hwio, stride, bias=None):
    """x (1, H, W, C) float32, w (KH, KW, C, O); VALID padding; sum over taps in float32."""
    _, H, W, C = x.shape
    KH, KW, _, O = w_hwio.shape
    HO = (H - KH) // stride + 1
    WO = (W - KW) // stride + 1
    out = np.zeros((HO * WO, O), np.float32)
    for i in range(KH):
        for j in range(KW):
            patch = x[0, i:i + stride * (HO - 1) + 1:stride, j:j + stride * (WO - 1) + 1:stride, :]
            out += np.ascontiguousarray(patch).reshape(-1, C) @ w_hwio[i, j]
    if bias is not None:
        out += bias
    return out.reshape(1, HO, WO, O)


def np_mirror_pad(x, p):
    """TF MirrorPad REFLECT (paddings [4, 2]); a pad wider than the map is an error in TF."""
    p = [(int(a), int(b)) for a, b in p]
    for ax, (a, b) in enumerate(p):
        if max(a, b) >= x.shape[ax] and max(a, b) > 0:
            raise ValueError("reflect pad %s of a %d-wide axis" % ((a, b), x.shape[ax]))
    return np.pad(x, p, mode="reflect")


def np_resize_tf_legacy(x, oh, ow):
    """TF ResizeBilinear, align_corners = half_pixel_centers = False, float32 maths:
    src = dst * (in / out), top = tl + (tr - tl) * xf, out = top + (bottom - top) * yf."""
    _, ih, iw, _ = x.shape

    def axis(n_in, n_out):
        scale = np.float32(n_in) / np.float32(n_out)
        src = np.arange(n_out, dtype=np.float32) * scale
        lo = np.floor(src).astype(np.int64)
        hi = np.minimum(lo + 1, n_in - 1)
        return lo, hi, (src - lo.astype(np.float32)).astype(np.float32)

    y0, y1, yf = axis(ih, oh)
    x0, x1, xf = axis(iw, ow)
    xf = xf[None, None, :, None]
    yf = yf[None, :, None, None]
    t = x[:, y0]
    b = x[:, y1]
    top = t[:, :, x0] + (t[:, :, x1] - t[:, :, x0]) * xf
    bot = b[:, :, x0] + (b[:, :, x1] - b[:, :, x0]) * xf
    return (top + (bot - top) * yf).astype(np.float32)


def np_softmax_last(x, beta=1.0):
    z = (x - x.max(axis=-1, keepdims=True)) * np.float32(beta)
    e = np.exp(z)
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def np_lrelu(x, a):
    return np.where(x >= 0, x, x * np.float32(a)).astype(np.float32)


# ---- (a) the .pb interpreter --------------------------------------------------------------

def run_graphdef(nodes, x, eps=None):
    """Evaluate the frozen GraphDef on x (1, H, W, 3) float32. eps replaces the LADE
    epsilons (the AddV2 constants added to a variance) when given."""
    byname = {n.name: n for n in nodes}
    vals = {}

    def ref(s):
        return s[:-2] if s.endswith(":0") else s

    def ev(name):
        if name in vals:
            return vals[name]
        n = byname[name]
        i = [ev(ref(s)) for s in n.input]
        op = n.op
        if op == "Placeholder":
            v = x
        elif op == "Const":
            v = n.a("value")
            if v.dtype == np.float16:
                v = v.astype(np.float32)
        elif op in ("Identity", "StopGradient"):
            v = i[0]
        elif op == "MirrorPad":
            assert n.a("mode") == b"REFLECT"
            v = np_mirror_pad(i[0], i[1])
        elif op == "Conv2D":
            assert n.a("padding") == b"VALID"
            v = np_conv_valid(i[0], i[1].astype(np.float32), int(n.a("strides")[1]))
        elif op == "Mean":
            v = i[0].mean(axis=tuple(int(a) for a in np.ravel(i[1])),
                          keepdims=bool(n.a("keep_dims")), dtype=np.float64).astype(np.float32)
        elif op == "Sum":
            v = i[0].sum(axis=tuple(int(a) for a in np.ravel(i[1])),
                         keepdims=bool(n.a("keep_dims")), dtype=np.float64).astype(np.float32)
        elif op == "SquaredDifference":
            v = np.square(i[0] - i[1])
        elif op in ("AddV2", "Add"):
            a, b = i
            if eps is not None and "/moments" in n.input[0] and "/variance" in n.input[0]:
                b = np.float32(eps) + 0 * b
            v = a + b
        elif op == "Sub":
            v = i[0] - i[1]
        elif op == "Mul":
            v = i[0] * i[1]
        elif op == "RealDiv":
            v = i[0] / i[1]
        elif op == "Sqrt":
            v = np.sqrt(i[0])
        elif op == "Rsqrt":
            v = np.float32(1) / np.sqrt(i[0])
        elif op == "LeakyRelu":
            v = np_lrelu(i[0], n.a("alpha"))
        elif op == "Tanh":
            v = np.tanh(i[0])
        elif op == "Shape":
            v = np.array(i[0].shape, np.int32)
        elif op == "StridedSlice":
            assert n.a("shrink_axis_mask") == 1 and i[1].size == 1
            v = i[0][int(i[1][0])]
        elif op == "Pack":
            v = np.stack([np.asarray(a) for a in i], axis=n.a("axis", 0))
        elif op == "ConcatV2":
            v = np.concatenate([np.atleast_1d(a) for a in i[:-1]], axis=int(i[-1]))
        elif op == "Range":
            v = np.arange(int(i[0]), int(i[1]), int(i[2]), dtype=np.int32)
        elif op == "ResizeBilinear":
            assert not n.a("align_corners") and not n.a("half_pixel_centers")
            v = np_resize_tf_legacy(i[0], int(i[1][0]), int(i[1][1]))
        elif op == "Reshape":
            v = i[0].reshape([int(s) for s in i[1]])
        elif op == "ExpandDims":
            v = np.expand_dims(i[0], int(np.ravel(i[1])[0]))
        elif op == "Squeeze":
            v = np.squeeze(i[0], axis=tuple(n.a("squeeze_dims")))
        elif op == "Transpose":
            v = np.transpose(i[0], [int(p) for p in i[1]])
        elif op == "Softmax":
            v = np_softmax_last(i[0])
        else:
            raise ValueError("GraphDef op %s not supported" % op)
        if isinstance(v, np.ndarray) and v.dtype == np.float64:
            v = v.astype(np.float32)
        vals[name] = v
        return v

    used = set()
    for n in nodes:
        used.update(ref(s) for s in n.input)
    outs = [n.name for n in nodes if n.name not in used and n.op not in ("Const",)]
    assert len(outs) == 1, outs
    sys.setrecursionlimit(10000)
    return ev(outs[0])


# ---- (a) the .tflite interpreter ----------------------------------------------------------

def run_tflite(m, x, eps=None, att_eps=None):
    """Evaluate the TFLite subgraph on x (1, H, W, 3). eps / att_eps replace the file's LADE
    and attention epsilons (both 0 in the fp16 file) when given."""
    T = m.tensors
    vals = {}
    runtime_shape = {}   # static shape (tuple) -> run-time shape, latest tensor wins
    for t in T:
        if t.data is not None:
            vals[t.index] = t.data.astype(np.float32) if t.data.dtype == np.float16 else t.data
    vals[m.inputs[0]] = x
    eps_add = set()
    att_add = set()
    prod = {}
    for op in m.ops:
        for o in op.outputs:
            prod[o] = op
    for op in m.ops:
        if op.name == "ADD":
            p = prod.get(op.inputs[0])
            if p is not None and p.name == "MEAN":
                eps_add.add(op.index)
            if p is not None and p.name == "SUM":
                att_add.add(op.index)
    for op in m.ops:
        i = [vals[k] for k in op.inputs if k >= 0]
        nm = op.name
        if nm == "DEQUANTIZE":
            v = i[0].astype(np.float32)
        elif nm == "MIRROR_PAD":
            v = np_mirror_pad(i[0], i[1])
        elif nm == "CONV_2D":
            w = np.transpose(i[1], (1, 2, 3, 0))  # OHWI -> HWIO
            v = np_conv_valid(i[0], w, op.opt(2, "i"), i[2] if len(i) > 2 else None)
        elif nm in ("MEAN", "SUM"):
            axes = tuple(int(a) for a in np.ravel(i[1]))
            f = np.mean if nm == "MEAN" else np.sum
            v = f(i[0], axis=axes, keepdims=bool(op.opt(0, "B")),
                  dtype=np.float64).astype(np.float32)
        elif nm == "SQUARED_DIFFERENCE":
            v = np.square(i[0] - i[1])
        elif nm == "ADD":
            a, b = i
            if op.index in eps_add and eps is not None:
                b = np.float32(eps)
            if op.index in att_add and att_eps is not None:
                b = np.float32(att_eps)
            v = a + b
        elif nm == "SUB":
            v = i[0] - i[1]
        elif nm == "MUL":
            v = i[0] * i[1]
        elif nm == "DIV":
            v = i[0] / i[1]
        elif nm == "SQRT":
            v = np.sqrt(i[0])
        elif nm == "RSQRT":
            v = np.float32(1) / np.sqrt(i[0])
        elif nm == "LEAKY_RELU":
            v = np_lrelu(i[0], op.opt(0, "f"))
        elif nm == "TANH":
            v = np.tanh(i[0])
        elif nm == "RESIZE_BILINEAR":
            assert not op.opt(2, "B") and not op.opt(3, "B")
            _, h, w, _ = i[0].shape
            v = np_resize_tf_legacy(i[0], 2 * h, 2 * w)   # the .pb's size: 2 x the input
        elif nm == "RESHAPE":
            tgt = tuple(int(s) for s in i[1])
            if tgt in runtime_shape:          # a tensor's static shape: its run-time shape
                tgt = runtime_shape[tgt]
            elif len(tgt) == 4 and tgt[:2] == (1, 1):
                tgt = (1, 1, -1, tgt[3])        # (1, 1, pixels, C)
            elif len(tgt) == 3 and tgt[0] == 1:
                tgt = (1, -1, tgt[2])           # (1, pixels, C)
            else:
                raise ValueError("op%d: reshape to %s" % (op.index, tgt))
            v = i[0].reshape(tgt)
        elif nm == "TRANSPOSE":
            v = np.transpose(i[0], [int(p) for p in i[1]])
        elif nm == "SOFTMAX":
            v = np_softmax_last(i[0], op.opt(0, "f"))
        else:
            raise ValueError("TFLite op %s not supported" % nm)
        o = op.outputs[0]
        vals[o] = v
        if len(T[o].shape) == 4 and T[o].shape not in runtime_shape and nm not in ("RESHAPE",):
            runtime_shape[T[o].shape] = v.shape
    return vals[m.outputs[0]]


# ---- (b) the hand-written PyTorch generators ----------------------------------------------

def reflect_index(n, before, after):
    """Source indices of a reflect pad (PyTorch ReflectionPad2d); a 1-wide axis repeats."""
    idx = []
    for i in range(-before, n + after):
        if n == 1:
            idx.append(0)
            continue
        if i < 0:
            i = -i
        if i >= n:
            i = 2 * (n - 1) - i
        if not 0 <= i < n:
            raise ValueError("reflect pad %d/%d of a %d-wide axis" % (before, after, n))
        idx.append(i)
    return torch.tensor(idx, dtype=torch.long)


def reflect_pad(x, pad):
    t, b, l, r = pad
    if not any(pad):
        return x
    _, _, h, w = x.shape
    x = x.index_select(2, reflect_index(h, t, b))
    return x.index_select(3, reflect_index(w, l, r))


def conv(x, w, stride=1, pad=(0, 0, 0, 0), bias=None):
    return Fn.conv2d(reflect_pad(x, pad), w, bias, stride=stride)


def lade(x, w, eps):
    """LADE: y = w.x (1x1) for its statistics; population variance over H, W."""
    y = Fn.conv2d(x, w)
    mx = x.mean(dim=(2, 3), keepdim=True)
    vx = ((x - mx) ** 2).mean(dim=(2, 3), keepdim=True)
    my = y.mean(dim=(2, 3), keepdim=True)
    vy = ((y - my) ** 2).mean(dim=(2, 3), keepdim=True)
    return (x - mx) / torch.sqrt(vx + eps) * torch.sqrt(vy + eps) + my


def lrelu(x):
    return Fn.leaky_relu(x, 0.2)


def up_to(x, like):
    return resize_asymmetric(x, like.shape[-2:])


def stride2_pad(k, s):
    return (1, 0, 1, 0) if s == 2 else ((k - 1) // 2,) * 4


def load_weights(path):
    tensors, meta = read_safetensors(path)
    w = {k: torch.from_numpy(np.ascontiguousarray(v.astype(np.float32))) for k, v in
         tensors.items()}
    return w, meta


class V3Full(torch.nn.Module):
    """AnimeGANv3 generator (the author's net/generator.py "main" branch at inference)."""

    ENC = [("enc0", 7, 1), ("enc1", 3, 2), ("enc2", 3, 1), ("enc3", 3, 2), ("enc4", 3, 1),
           ("enc5", 3, 2), ("enc6", 3, 1)]

    def __init__(self, weights, eps=1e-5, att_eps=1e-9):
        super().__init__()
        self.w = weights
        self.eps = eps
        self.att_eps = att_eps

    def block(self, name, x, k=3, s=1):
        x = conv(x, self.w[name + ".weight"], s, stride2_pad(k, s))
        return lrelu(lade(x, self.w[name + ".lade.weight"], self.eps))

    def attention(self, x):
        w = self.w
        b, c, h, wd = x.shape
        q = Fn.conv2d(x, w["att.conv.weight"])
        t = q.flatten(2).transpose(1, 2)                   # (B, N, C)
        s = t @ w["att.memory"]                             # (B, N, K)
        s = torch.softmax(s, dim=1)                         # over the N positions
        s = s / (self.att_eps + s.sum(dim=2, keepdim=True))
        o = s @ w["att.memory"].t()                         # (B, N, C)
        o = o.transpose(1, 2).reshape(b, c, h, wd)
        o = Fn.conv2d(o, w["att.proj.weight"])
        if "att.bn.scale" in w:
            o = o * w["att.bn.scale"].view(1, -1, 1, 1)
        if "att.bn.shift" in w:
            o = o + w["att.bn.shift"].view(1, -1, 1, 1)
        return lrelu(o + x)

    def forward(self, x):
        e = {}
        for name, k, s in self.ENC:
            x = self.block(name, x, k, s)
            e[name] = x
        x = self.attention(x)
        for i, skip in enumerate(("enc4", "enc2", "enc0")):
            x = self.block("dec%d" % (2 * i), up_to(x, e[skip])) + e[skip]
            x = self.block("dec%d" % (2 * i + 1), x)
        return torch.tanh(conv(x, self.w["out.conv.weight"], 1, (3, 3, 3, 3)))


class V3Tiny(torch.nn.Module):
    """AnimeGANv3 tiny generator (BatchNorm folded into the conv biases)."""

    ENC = [("enc0", 7, 1), ("enc1", 3, 2), ("enc2", 3, 1), ("enc3", 3, 2), ("enc4", 3, 1),
           ("enc5", 3, 2), ("enc6", 3, 1), ("enc7", 3, 2), ("enc8", 3, 1)]

    def __init__(self, weights, eps=1e-5):
        super().__init__()
        self.w = weights
        self.eps = eps

    def cb(self, name, x, k=3, s=1, act=True):
        x = conv(x, self.w[name + ".weight"], s, stride2_pad(k, s), self.w.get(name + ".bias"))
        return lrelu(x) if act else x

    def forward(self, x):
        e = {}
        for name, k, s in self.ENC:
            x = self.cb(name, x, k, s)
            e[name] = x
        for r in range(2):
            y = self.cb("res%d.0" % r, x, 1)
            y = self.cb("res%d.1" % r, y)
            y = self.cb("res%d.2" % r, y, 1, act=False)
            x = lrelu(y + x)
        d = 0
        for i, skip in enumerate(("enc6", "enc4", "enc2", "enc0")):
            x = self.cb("dec%d" % d, up_to(x, e[skip])) + e[skip]
            if i < 3:
                x = self.cb("dec%d" % (d + 1), x)
                x = self.cb("dec%d" % (d + 2), x)
                d += 3
        x = conv(x, self.w["dec10.weight"], 1, (1, 1, 1, 1))
        x = lrelu(lade(x, self.w["dec10.lade.weight"], self.eps))
        return torch.tanh(conv(x, self.w["out.conv.weight"], 1, (3, 3, 3, 3)))


def load_generator(path, eps=1e-5, att_eps=1e-9):
    w, meta = load_weights(path)
    if meta.get("architecture") == "animeganv3-tiny":
        return V3Tiny(w, eps).eval()
    if meta.get("architecture") == "animeganv3":
        return V3Full(w, eps, att_eps).eval()
    raise ValueError("%s: architecture %r" % (path, meta.get("architecture")))


def run_torch(model, x_nhwc):
    """x (1, H, W, 3) float32 in [-1, 1] -> y (1, H, W, 3) float32."""
    with torch.no_grad():
        y = model(torch.from_numpy(np.ascontiguousarray(x_nhwc)).permute(0, 3, 1, 2))
    return y.permute(0, 2, 3, 1).contiguous().numpy()


# ---- the original-file references ---------------------------------------------------------

def original(key, src=SRC):
    path = os.path.join(src, FILES[key])
    with open(path, "rb") as f:
        buf = f.read()
    if key == "shinkai":
        nodes = VF.read_graphdef(buf)
        return lambda x, eps=None: run_graphdef(nodes, x, eps)
    if key == "hayao":
        m = VF.TFLite(buf)
        return lambda x, eps=None, att_eps=None: run_tflite(m, x, eps, att_eps)
    raise ValueError(key)


def run_ort(onnx_path, inputs):
    """ONNX Runtime (tools/v3_ort.js, onnxruntime-node from bench/node_modules) on a list of
    (1, H, W, 3) float32 inputs -> outputs; one node process per call."""
    with tempfile.TemporaryDirectory() as d:
        jobs = []
        for k, x in enumerate(inputs):
            _, h, w, _ = x.shape
            fi, fo = os.path.join(d, "in%d.f32" % k), os.path.join(d, "out%d.f32" % k)
            x.astype("<f4").tofile(fi)
            jobs.append("%s %d %d %s" % (fi, h, w, fo))
        with open(os.path.join(d, "jobs.txt"), "w") as f:
            f.write("\n".join(jobs) + "\n")
        subprocess.run(["node", os.path.join(TOOLS, "v3_ort.js"), onnx_path,
                        os.path.join(d, "jobs.txt")], check=True)
        return [np.fromfile(os.path.join(d, "out%d.f32" % k), "<f4").reshape(x.shape)
                for k, x in enumerate(inputs)]


def test_input(h, w, seed=1):
    """A smooth pseudo-photo in [-1, 1] (so statistics are image-like), fixed seed."""
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    x = np.stack([np.sin(xx / 7.0 + 1), np.cos(yy / 5.0), np.sin((xx + yy) / 11.0)], -1)
    x = 0.7 * x + 0.2 * rng.uniform(-1, 1, (h, w, 3))
    return np.clip(x, -1, 1).astype(np.float32)[None]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="64x64,48x32,96x80")  # W x H
    ap.add_argument("--models", default="shinkai,hayao,cute")
    args = ap.parse_args()
    torch.set_num_threads(2)
    for key in args.models.split(","):
        path = os.path.join(ROOT, "models", "%s-v3.safetensors" % key)
        if key == "cute":
            xs = []
            for sz in args.sizes.split(","):
                w, h = (int(v) for v in sz.split("x"))
                xs.append(test_input(h, w))
            ys = run_ort(os.path.join(SRC, FILES[key]), xs)
            g = load_generator(path)
            for sz, x, y in zip(args.sizes.split(","), xs, ys):
                print("cute %s: ONNX Runtime on the .onnx vs PyTorch: max abs %.3g"
                      % (sz, np.abs(y - run_torch(g, x)).max()))
            continue
        ref = original(key)
        for sz in args.sizes.split(","):
            w, h = (int(v) for v in sz.split("x"))
            x = test_input(h, w)
            if key == "hayao":
                y_file = ref(x)                           # the file as it is: eps 0
                y_t0 = run_torch(load_generator(path, eps=0.0, att_eps=0.0), x)
                y_fix = ref(x, eps=1e-5, att_eps=1e-9)
                y_t = run_torch(load_generator(path), x)
                print("hayao %s: file (eps 0) vs PyTorch eps 0: max abs %.3g; eps 1e-5: "
                      "interpreter vs PyTorch %.3g; eps 0 vs 1e-5: max abs %.3g mean %.3g, "
                      "8-bit levels max %d"
                      % (sz, np.abs(y_file - y_t0).max(), np.abs(y_fix - y_t).max(),
                         np.abs(y_t0 - y_t).max(), np.abs(y_t0 - y_t).mean(),
                         np.abs(np.rint((y_t0 + 1) * 127.5) - np.rint((y_t + 1) * 127.5)).max()))
            else:
                y_file = ref(x)
                y_t = run_torch(load_generator(path), x)
                print("%s %s: .pb interpreter vs PyTorch: max abs %.3g" %
                      (key, sz, np.abs(y_file - y_t).max()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
