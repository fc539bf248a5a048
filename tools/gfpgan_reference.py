#!/usr/bin/python3
"""GFPGAN's GFPGANv1Clean (TencentARC/GFPGAN, gfpgan/archs/gfpganv1_clean_arch.py) as plain
functions over a state_dict: the independent reference src/model/gfpgan.c is tested against.

Written from the paper (GFP-GAN, CVPR 2021) and the upstream module tree, whose key names it
reads; no upstream code. NCHW, float32, batch 1, CPU. Configuration as GFPGANv1.3 / v1.4 ship
it (GFPGANer: input_is_latent, different_w, sft_half), each inferred from shapes (gfpgan_arch).

For a size S = 2^L face (input and output in [-1, 1], RGB), U = U-Net channels (half the
decoder's), bilinear = F.interpolate(align_corners=False):
  encoder: lrelu(conv_body_first 1x1), then L-2 ResBlocks down (conv3 lrelu, bilinear / 2,
           conv3 lrelu; + 1x1 skip of the bilinear / 2 input), lrelu(final_conv 3x3) at 4x4.
  style:   final_linear over the flattened (C, H, W) 4x4 map: one latent w per decoder
           layer (different_w: (2L - 2) x D outputs); the style MLP is not used
           (input_is_latent), although its weights are in the file.
  U-Net up: for each size 8..S: feat += skip of that size; ResBlock up (bilinear x 2);
           scale and shift = conv3 lrelu conv3 of it (the SFT conditions).
  decoder: StyleGAN2 (clean): StyleConv = modulated conv (weights stored pre-scaled;
           upsampling convs take the bilinear x 2 input) * sqrt(2) + noise.weight * the stored
           noise buffer (noises.noise{i}, so the output is deterministic; upstream draws new
           noise per call) + bias, lrelu 0.2; after each size's upsampling conv, SFT on the
           second half of the channels: x * scale + shift; ToRGB skips bilinear x 2.
lrelu is leaky_relu(0.2) throughout. No final tanh: the output is clamped to [-1, 1].

Usage as a tool: gfpgan_reference.py CHECKPOINT INPUT.png OUTPUT.png
"""
import math
import re
import sys

import torch
import torch.nn.functional as F

SQRT2 = math.sqrt(2.0)


def lrelu(x):
    return F.leaky_relu(x, 0.2)


def conv(sd, p, x, pad=None):
    w = sd[p + ".weight"]
    return F.conv2d(x, w, sd.get(p + ".bias"), padding=w.shape[2] // 2 if pad is None else pad)


def bilinear(x, factor):
    return F.interpolate(x, scale_factor=factor, mode="bilinear", align_corners=False)


def res_block(sd, p, x, factor):
    y = lrelu(conv(sd, p + ".conv1", x))
    y = lrelu(conv(sd, p + ".conv2", bilinear(y, factor)))
    return y + conv(sd, p + ".skip", bilinear(x, factor))


def modulated_conv(sd, p, x, w_style, demodulate=True, up=False):
    weight = sd[p + ".weight"][0]  # (OC, IC, K, K), stored already divided by sqrt(fan_in)
    oc, ic, kh, _ = weight.shape
    s = F.linear(w_style, sd[p + ".modulation.weight"], sd[p + ".modulation.bias"])
    wt = weight * s.view(1, ic, 1, 1)
    if demodulate:
        wt = wt * torch.rsqrt(wt.pow(2).sum((1, 2, 3)) + 1e-8).view(oc, 1, 1, 1)
    if up:
        x = bilinear(x, 2)
    return F.conv2d(x, wt, padding=kh // 2)


def style_conv(sd, p, x, w_style, noise, up=False):
    y = modulated_conv(sd, p + ".modulated_conv", x, w_style, up=up) * SQRT2
    y = y + sd[p + ".weight"] * noise + sd[p + ".bias"]
    return lrelu(y)


def to_rgb(sd, p, x, w_style, skip):
    y = modulated_conv(sd, p + ".modulated_conv", x, w_style, demodulate=False) + sd[p + ".bias"]
    return y if skip is None else y + bilinear(skip, 2)


def count(sd, pattern):
    return len([k for k in sd if re.fullmatch(pattern, k)])


def gfpgan_arch(sd):
    n_down = count(sd, r"conv_body_down\.\d+\.conv1\.weight")
    d = "stylegan_decoder."
    style_dim = sd[d + "style_conv1.modulated_conv.modulation.weight"].shape[1]
    n_latent = sd["final_linear.weight"].shape[0] // style_dim
    c_dec = sd[d + "style_convs.0.modulated_conv.weight"].shape[1]
    c_sft = sd["condition_scale.0.2.weight"].shape[0]
    return {"size": 2 ** (n_down + 2), "style_dim": style_dim, "n_latent": n_latent,
            "sft_half": c_sft * 2 == c_dec}


def gfpgan_forward(sd, x):
    a = gfpgan_arch(sd)
    log_size = int(math.log2(a["size"]))
    feat = lrelu(conv(sd, "conv_body_first", x))
    skips = []
    for i in range(log_size - 2):
        feat = res_block(sd, "conv_body_down.%d" % i, feat, 0.5)
        skips.insert(0, feat)
    feat = lrelu(conv(sd, "final_conv", feat))
    latent = F.linear(feat.reshape(1, -1), sd["final_linear.weight"], sd["final_linear.bias"])
    assert a["n_latent"] == 2 * log_size - 2, "only different_w files (every release)"
    latent = latent.view(-1, a["style_dim"])  # (2L - 2, D)
    conditions = []
    for i in range(log_size - 2):
        feat = res_block(sd, "conv_body_up.%d" % i, feat + skips[i], 2)
        conditions.append(conv(sd, "condition_scale.%d.2" % i, lrelu(conv(sd, "condition_scale.%d.0" % i, feat))))
        conditions.append(conv(sd, "condition_shift.%d.2" % i, lrelu(conv(sd, "condition_shift.%d.0" % i, feat))))
    d = "stylegan_decoder."
    noise = [sd[d + "noises.noise%d" % i] for i in range(2 * (log_size - 2) + 1)]
    out = style_conv(sd, d + "style_conv1", sd[d + "constant_input.weight"], latent[0:1], noise[0])
    skip = to_rgb(sd, d + "to_rgb1", out, latent[1:2], None)
    for j in range(log_size - 2):
        i = 2 * j + 1
        out = style_conv(sd, d + "style_convs.%d" % (2 * j), out, latent[i : i + 1], noise[i], up=True)
        scale, shift = conditions[2 * j], conditions[2 * j + 1]
        if a["sft_half"]:
            half = out.shape[1] // 2
            out = torch.cat([out[:, :half], out[:, half:] * scale + shift], 1)
        else:
            out = out * scale + shift
        out = style_conv(sd, d + "style_convs.%d" % (2 * j + 1), out, latent[i + 1 : i + 2], noise[i + 1])
        skip = to_rgb(sd, d + "to_rgbs.%d" % j, out, latent[i + 2 : i + 3], skip)
    return skip


def main(argv):
    import numpy as np
    from PIL import Image

    from gpen_reference import load_state_dict

    sd = load_state_dict(argv[1])
    size = gfpgan_arch(sd)["size"]
    img = Image.open(argv[2]).convert("RGB").resize((size, size), Image.BICUBIC)
    x = torch.from_numpy(np.asarray(img, np.float32) / 127.5 - 1).permute(2, 0, 1)[None]
    with torch.no_grad():
        y = gfpgan_forward(sd, x)[0].clamp(-1, 1)
    out = ((y.permute(1, 2, 0).numpy() + 1) * 127.5).round().astype(np.uint8)
    Image.fromarray(out).save(argv[3])


if __name__ == "__main__":
    main(sys.argv)
