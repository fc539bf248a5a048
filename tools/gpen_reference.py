#!/usr/bin/python3
"""GPEN's FullGenerator (yangxy/GPEN, face_model/gpen_model.py) as plain functions over a
state_dict: the independent reference src/model/gpen.c is tested against.

Written from the paper (GAN Prior Embedded Network, CVPR 2021), StyleGAN2's definitions
(rosinality/stylegan2-pytorch) and the upstream module tree, whose state_dict key names it
reads; no upstream code. NCHW, float32, batch 1, CPU. The architecture is inferred from the
tensors' names and shapes (gpen_arch), as the C loader does, never from a file name.

The network, for a size S = 2^L face (input and output in [-1, 1], RGB):
  encoder: ecd0 = 1x1 EqualConv 3 -> C[S] + FusedLeakyReLU; ecd1..ecd(L-2) = blur [1,3,3,1]
           (pad 2,2) + 3x3 EqualConv stride 2 + FusedLeakyReLU, down to 4x4; flattened
           (C, H, W order) -> EqualLinear + FusedLeakyReLU -> the style code z (D).
  mapping: w = MLP(pixel_norm(z)): n_mlp EqualLinear (lr_mul 0.01) + FusedLeakyReLU.
  decoder: StyleGAN2 with every layer's "noise" being the encoder feature of its size,
           concatenated (NoiseInjection isconcat): [x, noise.weight * feature], so each
           StyledConv outputs 2 * C channels, FusedLeakyReLU over all of them; ToRGB skips
           upsampled by upfirdn2d (up 2, [1,3,3,1] * 4, pad 2,1); no final tanh.
FusedLeakyReLU(x, b) = leaky_relu(x + b, 0.2) * sqrt(2). EqualConv / EqualLinear scale the
weight by 1 / sqrt(fan_in) (times lr_mul, and the bias by lr_mul).

Usage as a tool: gpen_reference.py CHECKPOINT INPUT.png OUTPUT.png [--key g_ema]
"""
import math
import re
import sys

import torch
import torch.nn.functional as F

SQRT2 = math.sqrt(2.0)
LR_MLP = 0.01  # upstream's lr_mlp default, used by every released GPEN; not in the file
BLUR = (1.0, 3.0, 3.0, 1.0)


def blur_kernel(gain=1.0):
    k = torch.tensor(BLUR, dtype=torch.float32)
    k = k[None, :] * k[:, None]
    return k / k.sum() * gain


def upfirdn2d(x, k, up=1, down=1, pad=(0, 0)):
    """Upsample by zero insertion, pad (negative crops), FIR filter (true convolution),
    downsample: StyleGAN2's upfirdn2d, per channel, same pads on both axes."""
    n, c, h, w = x.shape
    if up > 1:
        z = x.new_zeros(n, c, h * up, w * up)
        z[:, :, ::up, ::up] = x
        x = z
    p0, p1 = pad
    x = F.pad(x, (max(p0, 0), max(p1, 0), max(p0, 0), max(p1, 0)))
    x = x[:, :, max(-p0, 0) : x.shape[2] - max(-p1, 0), max(-p0, 0) : x.shape[3] - max(-p1, 0)]
    kk = torch.flip(k, (0, 1))[None, None].repeat(c, 1, 1, 1)
    x = F.conv2d(x, kk, groups=c)
    return x[:, :, ::down, ::down]


def fused_lrelu(x, bias):
    shape = (1, -1) + (1,) * (x.dim() - 2)
    return F.leaky_relu(x + bias.view(shape), 0.2) * SQRT2


def equal_linear(sd, p, x, act, lr_mul=1.0):
    w = sd[p + ".weight"]
    y = F.linear(x, w * (lr_mul / math.sqrt(w.shape[1])))
    b = sd[p + ".bias"] * lr_mul
    return fused_lrelu(y, b) if act else y + b


def modulated_conv(sd, p, x, w_style, demodulate=True, up=False):
    """StyleGAN2's modulated conv (batch 1): scale input channels by the style, demodulate
    each output channel, then conv; `up` is a transposed conv stride 2 then blur."""
    weight = sd[p + ".weight"][0]  # (OC, IC, K, K)
    oc, ic, kh, _ = weight.shape
    s = equal_linear(sd, p + ".modulation", w_style, act=False)  # (1, IC)
    wt = weight * (1.0 / math.sqrt(ic * kh * kh)) * s.view(1, ic, 1, 1)
    if demodulate:
        wt = wt * torch.rsqrt(wt.pow(2).sum((1, 2, 3)) + 1e-8).view(oc, 1, 1, 1)
    if up:
        y = F.conv_transpose2d(x, wt.transpose(0, 1), stride=2)
        return upfirdn2d(y, blur_kernel(4.0), pad=(1, 1))
    return F.conv2d(x, wt, padding=kh // 2)


def styled_conv(sd, p, x, w_style, feature, up=False):
    y = modulated_conv(sd, p + ".conv", x, w_style, up=up)
    y = torch.cat([y, sd[p + ".noise.weight"] * feature], 1)
    return fused_lrelu(y, sd[p + ".activate.bias"])


def to_rgb(sd, p, x, w_style, skip):
    y = modulated_conv(sd, p + ".conv", x, w_style, demodulate=False) + sd[p + ".bias"]
    if skip is not None:
        y = y + upfirdn2d(skip, blur_kernel(4.0), up=2, pad=(2, 1))
    return y


def gpen_arch(sd):
    """size, style_dim, n_mlp and the channels per resolution, from names and shapes."""
    n_enc = len([k for k in sd if re.fullmatch(r"ecd\d+\.0\.\d\.weight", k)])
    size = 2 ** (n_enc + 1)
    mlp = sorted(int(m.group(1)) for k in sd for m in [re.fullmatch(r"generator\.style\.(\d+)\.weight", k)] if m)
    channels = {4: sd["generator.input.input"].shape[1]}
    for j in range(len([k for k in sd if re.fullmatch(r"generator\.to_rgbs\.\d+\.bias", k)])):
        channels[2 ** (j + 3)] = sd["generator.convs.%d.conv.weight" % (2 * j)].shape[1]
    return {"size": size, "style_dim": sd["final_linear.0.weight"].shape[0],
            "n_mlp": len(mlp), "channels": channels}


def gpen_forward(sd, x):
    """x: (1, 3, S, S) in [-1, 1] -> the restored face (1, 3, S, S), unclamped."""
    a = gpen_arch(sd)
    log_size = int(math.log2(a["size"]))
    feats = []
    h = fused_lrelu(F.conv2d(x, sd["ecd0.0.0.weight"] / math.sqrt(3.0)), sd["ecd0.0.1.bias"])
    feats.append(h)
    for i in range(1, log_size - 1):
        w = sd["ecd%d.0.1.weight" % i]
        h = upfirdn2d(h, blur_kernel(), pad=(2, 2))
        h = F.conv2d(h, w / math.sqrt(w.shape[1] * 9), stride=2)
        h = fused_lrelu(h, sd["ecd%d.0.2.bias" % i])
        feats.append(h)
    z = equal_linear(sd, "final_linear.0", h.reshape(1, -1), act=True)
    # mapping network
    w_style = z * torch.rsqrt(torch.mean(z * z, dim=1, keepdim=True) + 1e-8)
    for i in range(1, a["n_mlp"] + 1):
        w_style = equal_linear(sd, "generator.style.%d" % i, w_style, act=True, lr_mul=LR_MLP)
    by_size = {f.shape[2]: f for f in feats}
    g = "generator."
    out = styled_conv(sd, g + "conv1", sd[g + "input.input"], w_style, by_size[4])
    skip = to_rgb(sd, g + "to_rgb1", out, w_style, None)
    for j in range(log_size - 2):
        feat = by_size[2 ** (j + 3)]
        out = styled_conv(sd, g + "convs.%d" % (2 * j), out, w_style, feat, up=True)
        out = styled_conv(sd, g + "convs.%d" % (2 * j + 1), out, w_style, feat)
        skip = to_rgb(sd, g + "to_rgbs.%d" % j, out, w_style, skip)
    return skip


def load_state_dict(path, key=None):
    sd = torch.load(path, map_location="cpu")
    for k in ([key] if key else ["params_ema", "params", "g_ema"]):
        if k in sd and isinstance(sd[k], dict):
            return {n: t.float() for n, t in sd[k].items()}
    return {n: t.float() for n, t in sd.items()}


def main(argv):
    import numpy as np
    from PIL import Image

    key = argv[argv.index("--key") + 1] if "--key" in argv else None
    sd = load_state_dict(argv[1], key)
    size = gpen_arch(sd)["size"]
    img = Image.open(argv[2]).convert("RGB").resize((size, size), Image.BICUBIC)
    x = torch.from_numpy(np.asarray(img, np.float32) / 127.5 - 1).permute(2, 0, 1)[None]
    with torch.no_grad():
        y = gpen_forward(sd, x)[0].clamp(-1, 1)
    out = ((y.permute(1, 2, 0).numpy() + 1) * 127.5).round().astype(np.uint8)
    Image.fromarray(out).save(argv[3])


if __name__ == "__main__":
    main(sys.argv)
