#!/usr/bin/python3
"""make_op_fixtures.py - golden fixtures of the StyleGAN-family and resampling ops
(docs/graph.md) from PyTorch, for tests/test_ops.c.

Each case is one small graph file, tests/fixtures/ops/<case>.safetensors: the graph JSON in
the metadata key `graph`, its seeded random weights, and two more tensors, `fixture.input`
(H, W, 3) and `fixture.output` (the graph's first output, NHWC), computed here by PyTorch
with the upstream semantics written out independently of the C code:

  - upfirdn2d as rosinality/stylegan2-pytorch's upfirdn2d_native (zero insertion, pad,
    the flipped kernel outer(k, k) / sum(k)^2 * gain, stride down);
  - modulated conv as its non-fused path (input * style, conv or conv_transpose2d stride 2
    with the weight transposed, then demodulation by rsqrt(sum (w * s)^2 + 1e-8));
  - EqualLinear / FusedLeakyReLU / PixelNorm / NoiseInjection (add, and GPEN's concat);
  - F.interpolate bilinear (align_corners False) by 0.5 and 2, nearest by 3,
    F.pixel_shuffle / pixel_unshuffle, torch.cat, GFPGAN's SFT on half the channels.

Run: python3 tools/make_op_fixtures.py [--out tests/fixtures/ops]
"""
import argparse
import json
import math
import os
import struct

import numpy as np
import torch
import torch.nn.functional as F

torch.set_grad_enabled(False)


class Case:
    def __init__(self, name, seed):
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.tensors = {}
        self.nodes = []

    def t(self, name, shape, scale=1.0, center=0.0):
        v = (center + scale * self.rng.standard_normal(shape)).astype(np.float32)
        self.tensors[name] = v
        return torch.from_numpy(v.copy())

    def node(self, op, name, inputs, **attrs):
        n = {"op": op, "name": name, "in": inputs}
        n.update(attrs)
        self.nodes.append(n)
        return name

    def save(self, out_dir, x_nchw, y_nchw):
        self.tensors["fixture.input"] = x_nchw[0].permute(1, 2, 0).numpy().astype(np.float32)
        self.tensors["fixture.output"] = y_nchw[0].permute(1, 2, 0).numpy().astype(np.float32)
        graph = {"inputs": ["input"], "outputs": [self.nodes[-1]["name"]], "nodes": self.nodes}
        header, blob = {}, b""
        for name in sorted(self.tensors):
            a = np.ascontiguousarray(self.tensors[name], dtype="<f4")
            header[name] = {"dtype": "F32", "shape": list(a.shape),
                            "data_offsets": [len(blob), len(blob) + a.nbytes]}
            blob += a.tobytes()
        header["__metadata__"] = {"format": "animegan", "architecture": "op-fixture", "kind": "op-fixture",
                                  "graph": json.dumps(graph, separators=(",", ":"))}
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(out_dir, self.name + ".safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + blob)
        print("%-10s in %s out %s, %d bytes" % (self.name, tuple(x_nchw.shape),
                                                 tuple(y_nchw.shape), 8 + len(text) + len(blob)))


def image(case, h, w):
    return torch.from_numpy(case.rng.uniform(-1, 1, (1, 3, h, w)).astype(np.float32))


def stem(case, x, c):
    """A 1x1 conv with bias from the image to c channels (the engine's maps start there)."""
    w = case.t("stem.w", (c, 3, 1, 1), 0.6)
    b = case.t("stem.b", (c,), 0.2)
    case.node("conv", "stem", ["input"], weight="stem.w", bias="stem.b")
    return F.conv2d(x, w, b)


def upfirdn2d(x, k, up=1, down=1, pad=(0, 0), gain=1.0):
    k = torch.tensor(k, dtype=torch.float64)
    k2 = torch.outer(k, k)
    k2 = (k2 / k2.sum() * gain).float()
    n, c, h, w = x.shape
    u = torch.zeros(n, c, h * up, w * up)
    u[:, :, ::up, ::up] = x
    u = F.pad(u, [pad[0], pad[1], pad[0], pad[1]])
    kf = torch.flip(k2, [0, 1]).view(1, 1, *k2.shape).repeat(c, 1, 1, 1)
    return F.conv2d(u, kf, groups=c)[:, :, ::down, ::down]


def fused_lrelu(x, bias, gain=math.sqrt(2)):
    shape = [1, -1] + [1] * (x.dim() - 2)
    return F.leaky_relu(x + bias.view(*shape), 0.2) * gain


def modconv(x, w, s, demod=True, up=False, pad=0):
    xs = x * s.view(1, -1, 1, 1)
    if up:
        out = F.conv_transpose2d(xs, w.transpose(0, 1), stride=2)
    else:
        out = F.conv2d(xs, w, padding=pad)
    if demod:
        d = ((w * s.view(1, -1, 1, 1)).square().sum((1, 2, 3)) + 1e-8).rsqrt()
        out = out * d.view(1, -1, 1, 1)
    return out


def case_style(out_dir):
    """GPEN's style path and a StyledConv: flatten + EqualLinear, PixelNorm, an EqualLinear
    with FusedLeakyReLU (lr_mul 0.01), the modulation (bias 1), modconv 3x3 demodulated,
    noise injection of a constant map, FusedLeakyReLU."""
    c = Case("style", 1901)
    x = image(c, 8, 9)
    C, S = 8, 16
    f = stem(c, x, C)
    w0 = c.t("fl.w", (S, C * 8 * 9))
    b0 = c.t("fl.b", (S,), 0.1)
    s0 = 1 / math.sqrt(C * 72)
    c.node("linear", "fl", ["stem"], weight="fl.w", bias="fl.b", weight_scale=s0)
    v = F.linear(f.flatten(1), w0 * s0, b0)
    c.node("pixel_norm", "pn", ["fl"])
    v = v * torch.rsqrt(v.square().mean(1, keepdim=True) + 1e-8)
    lr = 0.01
    w1 = c.t("m1.w", (S, S), 1 / lr)
    b1 = c.t("m1.b", (S,), 10.0)
    c.node("linear", "m1", ["pn"], weight="m1.w", weight_scale=lr / math.sqrt(S))
    c.node("bias_lrelu", "m1.a", ["m1"], bias="m1.b", bias_scale=lr)
    v = fused_lrelu(F.linear(v, w1 * (lr / math.sqrt(S))), b1 * lr)
    wm = c.t("mod.w", (C, S))
    bm = c.t("mod.b", (C,), 0.1, 1.0)
    c.node("linear", "mod", ["m1.a"], weight="mod.w", bias="mod.b", weight_scale=1 / math.sqrt(S))
    s = F.linear(v, wm / math.sqrt(S), bm)[0]
    wc = c.t("conv.w", (6, C, 3, 3))
    sc = 1 / math.sqrt(C * 9)
    c.node("modconv", "conv", ["stem", "mod"], weight="conv.w", pad=[1, 1, 1, 1], weight_scale=sc)
    y = modconv(f, wc * sc, s, pad=1)
    nw = c.t("noise.w", (1,), 0.5)
    nz = c.t("noise.map", (1, 1, 8, 9))
    c.node("noise", "noise", ["conv"], weight="noise.w", noise="noise.map")
    y = y + nw * nz
    ba = c.t("act.b", (6,), 0.2)
    c.node("bias_lrelu", "act", ["noise"], bias="act.b")
    c.save(out_dir, x, fused_lrelu(y, ba))


def case_winograd(out_dir):
    """A demodulated 3x3 modconv on a map the fp32 engine runs on Winograd F(4x4, 3x3):
    48 -> 32 channels (multiples of 16) at 40 x 34 (both sides >= 32; 40 rows are bands of
    16, the last moved up). The reference is computed in float64."""
    c = Case("winograd", 1907)
    x = image(c, 40, 34)
    C, OC = 48, 32
    f = stem(c, x, C)
    s = c.t("style", (1, C, 1, 1), 0.3, 1.0)
    c.node("const", "s", [], weight="style")
    wc = c.t("conv.w", (OC, C, 3, 3))
    c.node("modconv", "conv", ["stem", "s"], weight="conv.w", pad=[1, 1, 1, 1])
    y = modconv(f.double(), wc.double(), s.flatten().double(), pad=1)
    c.save(out_dir, x, y.float())


def case_upsample(out_dir):
    """StyleGAN2's upsampling StyledConv and ToRGB skip: modconv up 2 (conv_transpose2d
    stride 2) + Blur(pad (1, 1), gain 4); ToRGB = modconv 1x1 without demodulation + bias,
    plus the skip upsampled by upfirdn2d(up 2, pad (2, 1)) * 4."""
    c = Case("upsample", 1902)
    x = image(c, 8, 9)
    C = 6
    f = stem(c, x, C)
    s = c.t("style", (1, C, 1, 1), 0.3, 1.0)  # a constant style, through a const node
    c.node("const", "s", [], weight="style")
    wc = c.t("up.w", (4, C, 3, 3), 0.3)
    c.node("modconv", "up", ["stem", "s"], weight="up.w", up=2)
    y = modconv(f, wc, s.flatten(), up=True)
    c.node("upfirdn", "blur", ["up"], pad=[1, 1, 1, 1], gain=4)
    y = upfirdn2d(y, [1, 3, 3, 1], pad=(1, 1), gain=4)
    s2 = c.t("style2", (1, 4, 1, 1), 0.3, 1.0)
    c.node("const", "s2", [], weight="style2")
    wr = c.t("rgb.w", (3, 4, 1, 1), 0.5)
    br = c.t("rgb.b", (3,), 0.1)
    c.node("modconv", "rgb", ["blur", "s2"], weight="rgb.w", bias="rgb.b", demod=0)
    rgb = modconv(y, wr, s2.flatten(), demod=False) + br.view(1, -1, 1, 1)
    c.node("conv", "skip0", ["input"], weight="skip0.w")
    ws = c.t("skip0.w", (3, 3, 1, 1), 0.5)
    skip = F.conv2d(x, ws)
    c.node("upfirdn", "skip", ["skip0"], up=2, pad=[2, 1, 2, 1], gain=4)
    skip = upfirdn2d(skip, [1, 3, 3, 1], up=2, pad=(2, 1), gain=4)
    c.node("add", "out", ["rgb", "skip"])
    c.save(out_dir, x, rgb + skip)


def case_down(out_dir):
    """A transposed conv (stride 2, bias, crop 1) and the encoder's downsampling ConvLayer:
    Blur(pad (2, 2)) then a 3x3 stride-2 conv, a [1, 2, 1] FIR with down 2, and a
    depthwise conv."""
    c = Case("down", 1903)
    x = image(c, 9, 8)
    C = 5
    f = stem(c, x, C)
    wt = c.t("ct.w", (C, 4, 3, 3), 0.4)
    bt = c.t("ct.b", (4,), 0.1)
    c.node("conv_t", "ct", ["stem"], weight="ct.w", bias="ct.b", stride=2, pad=[1, 1, 1, 1])
    y = F.conv_transpose2d(f, wt, bt, stride=2, padding=1)
    c.node("upfirdn", "blur", ["ct"], pad=[2, 2, 2, 2])
    y = upfirdn2d(y, [1, 3, 3, 1], pad=(2, 2))
    wd = c.t("dn.w", (6, 4, 3, 3), 0.3)
    c.node("conv", "dn", ["blur"], weight="dn.w", stride=2, pad_mode="zero")
    y = F.conv2d(y, wd, stride=2)
    c.node("upfirdn", "fir", ["dn"], down=2, pad=[1, 1, 1, 1], fir=[1, 2, 1])
    y = upfirdn2d(y, [1, 2, 1], down=2, pad=(1, 1))
    wg = c.t("dw.w", (6, 1, 3, 3), 0.4)
    c.node("conv", "dw", ["fir"], weight="dw.w", groups=0, pad=[1, 1, 1, 1], pad_mode="zero")
    c.save(out_dir, x, F.conv2d(y, wg, padding=1, groups=6))


def case_combine(out_dir):
    """concat of three maps, a slice, GFPGAN's SFT on the second half of the channels, and
    GPEN's noise injection by concatenation (an encoder map as the noise)."""
    c = Case("combine", 1904)
    x = image(c, 8, 10)
    f = stem(c, x, 6)
    c.node("conv", "a", ["stem"], weight="a.w", pad=[1, 1, 1, 1], pad_mode="zero")
    a = F.conv2d(f, c.t("a.w", (4, 6, 3, 3), 0.3), padding=1)
    c.node("lrelu", "b", ["a"], alpha=0.2)
    b = F.leaky_relu(a, 0.2)
    c.node("concat", "cat", ["stem", "a", "b"])
    cat = torch.cat([f, a, b], 1)
    c.node("slice", "sl", ["cat"], c0=3, c1=11)
    sl = cat[:, 3:11]
    c.node("conv", "sc", ["b"], weight="sc.w")
    scale = F.conv2d(b, c.t("sc.w", (4, 4, 1, 1), 0.5))
    c.node("conv", "sh", ["b"], weight="sh.w")
    shift = F.conv2d(b, c.t("sh.w", (4, 4, 1, 1), 0.5))
    c.node("sft", "sft", ["sl", "sc", "sh"], c0=4)
    same, half = torch.split(sl, 4, 1)
    y = torch.cat([same, half * scale + shift], 1)
    nw = c.t("n.w", (1,), 0.5)
    c.node("noise", "n", ["sft", "a"], weight="n.w", concat=1)
    c.save(out_dir, x, torch.cat([y, nw * a], 1))


def case_resample(out_dir):
    """Bilinear by 0.5 (odd sides: PyTorch's scale, not in/out, maps the coordinates) and
    by 2, nearest by 3, pixel unshuffle and shuffle by 2."""
    c = Case("resample", 1905)
    x = image(c, 9, 11)
    f = stem(c, x, 4)
    c.node("resample", "half", ["stem"], down=2)
    y = F.interpolate(f, scale_factor=0.5, mode="bilinear", align_corners=False)
    c.node("resample", "dbl", ["half"], up=2)
    y = F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
    c.node("nearest", "near", ["dbl"], up=3)
    y = F.interpolate(y, scale_factor=3, mode="nearest")
    c.node("pixel_unshuffle", "un", ["near"], down=2)
    y = F.pixel_unshuffle(y, 2)
    c.node("conv", "mix", ["un"], weight="mix.w")
    y = F.conv2d(y, c.t("mix.w", (12, 16, 1, 1), 0.3))
    c.node("pixel_shuffle", "ps", ["mix"], up=2)
    c.save(out_dir, x, F.pixel_shuffle(y, 2))


def case_transformer(out_dir):
    """CodeFormer's ops: GroupNorm(8 groups), GELU, nn.LayerNorm per token, multi-head
    attention (8 heads of 4 over the 72 pixels) as F.scaled-dot-product with the q, k, v of
    1x1 convs, the top logit's codebook row (argmax + embedding), adaptive instance norm to
    another map's per-channel statistics (unbiased variance, CodeFormer's calc_mean_std)."""
    c = Case("transformer", 3001)
    H, W, C, N, D = 8, 9, 32, 24, 8
    x = image(c, H, W)
    f = stem(c, x, C)
    g, b = c.t("gn.g", (C,), 0.2, 1.0), c.t("gn.b", (C,), 0.2)
    c.node("group_norm", "gn", ["stem"], gamma="gn.g", beta="gn.b", groups=8, eps=1e-6)
    f = F.gelu(F.group_norm(f, 8, g, b, 1e-6))
    c.node("gelu", "act", ["gn"])
    lg, lb = c.t("ln.g", (C,), 0.2, 1.0), c.t("ln.b", (C,), 0.2)
    c.node("token_norm", "ln", ["act"], gamma="ln.g", beta="ln.b")
    t = F.layer_norm(f.permute(0, 2, 3, 1), (C,), lg, lb, 1e-5).permute(0, 3, 1, 2)
    qkv = []
    for name in ("q", "k", "v"):
        w, bb = c.t(name + ".w", (C, C, 1, 1), 0.5), c.t(name + ".b", (C,), 0.1)
        c.node("conv", name, ["ln"], weight=name + ".w", bias=name + ".b")
        qkv.append(F.conv2d(t, w, bb).flatten(2)[0].t().reshape(-1, 8, C // 8).transpose(0, 1))
    q, k, v = qkv
    a = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(C // 8), dim=-1) @ v  # (heads, T, d)
    c.node("attention", "attn", ["q", "k", "v"], heads=8)
    a = a.transpose(0, 1).reshape(H, W, C).permute(2, 0, 1)[None]
    wl = c.t("logit.w", (N, C, 1, 1), 0.5)
    c.node("conv", "logit", ["attn"], weight="logit.w")
    logits = F.conv2d(a, wl)
    cb = c.t("codebook", (N, D))
    c.node("codebook", "code", ["logit"], weight="codebook")
    idx = logits.argmax(1)[0]
    print("transformer: %d distinct codes of %d" % (len(torch.unique(idx)), N))
    z = F.embedding(idx, cb).permute(2, 0, 1)[None]
    ws, bs = c.t("style.w", (D, C, 1, 1), 0.5), c.t("style.b", (D,), 0.3)
    c.node("conv", "style", ["stem"], weight="style.w", bias="style.b")
    st = F.conv2d(stem_out(c, x, C), ws, bs)
    c.node("adain", "adain", ["code", "style"])

    def mean_std(t):
        return t.flatten(2).mean(2)[..., None, None], (t.flatten(2).var(2) + 1e-5).sqrt()[..., None, None]
    (mz, sz), (ms, ss) = mean_std(z), mean_std(st)
    c.save(out_dir, x, (z - mz) / sz * ss + ms)


def stem_out(case, x, c):
    """The stem's output again (its weights are already drawn)."""
    return F.conv2d(x, torch.from_numpy(case.tensors["stem.w"]), torch.from_numpy(case.tensors["stem.b"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                  "fixtures", "ops"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for case in (case_style, case_upsample, case_down, case_combine, case_resample,
                 case_winograd, case_transformer):
        case(args.out)


if __name__ == "__main__":
    main()
