#!/usr/bin/python3
"""realesrgan_reference.py - the project's own PyTorch implementations of Real-ESRGAN's two
networks, written from reading xinntao/Real-ESRGAN (realesrgan/archs/srvgg_arch.py) and
XPixelGroup/BasicSR (basicsr/archs/rrdbnet_arch.py, arch_util.pixel_unshuffle); the golden
oracle of tests/upscale_test.sh (through tools/make_upscale_fixtures.py). Offline tool:
Debian's python3-torch. Never used at run time.

  SRVGG(num_feat, num_conv, scale, act)   realesr-animevideov3 (64, 16, 4), general-x4v3 (64, 32, 4):
      body.0 conv 3->F, body.1 PReLU(F); then num_conv x (conv F->F, PReLU); a last conv
      F -> 3*s*s; pixel shuffle by s; plus the input upsampled by s, nearest.
  RRDB(num_feat, num_block, num_grow, scale)   RealESRGAN_x4plus (64, 23, 32, 4), _anime_6B
      (64, 6, 32, 4), x2plus (64, 23, 32, 2: pixel-unshuffle of the input by 2 first):
      conv_first; num_block x RRDB (three dense blocks of five convs, conv_i reading the
      concatenation of the block input and every earlier conv's output, LeakyReLU 0.2 after
      conv1-4; each block's x5 * 0.2 + x, and the RRDB's out * 0.2 + x); conv_body; + the
      conv_first features; twice (nearest x2, conv, LeakyReLU 0.2); conv_hr, LeakyReLU, conv_last.

The state_dict keys are the originals' (body.N.weight / conv_first.weight,
body.N.rdbK.convJ.weight, ...), so a checkpoint saved from these loads in the originals and
back. Images go in as RGB in [0, 1] and come out unclamped (Real-ESRGAN's inference clamps
to [0, 1], then x 255 and rounds).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class SRVGG(nn.Module):
    def __init__(self, num_feat=64, num_conv=16, scale=4, act="prelu", in_ch=3, out_ch=3):
        super().__init__()
        self.scale = scale
        layers = [nn.Conv2d(in_ch, num_feat, 3, padding=1), self._act(act, num_feat)]
        for _ in range(num_conv):
            layers += [nn.Conv2d(num_feat, num_feat, 3, padding=1), self._act(act, num_feat)]
        layers.append(nn.Conv2d(num_feat, out_ch * scale * scale, 3, padding=1))
        self.body = nn.ModuleList(layers)

    @staticmethod
    def _act(kind, n):
        if kind == "prelu":
            return nn.PReLU(n)
        if kind == "relu":
            return nn.ReLU()
        if kind == "leakyrelu":
            return nn.LeakyReLU(0.1)
        raise ValueError(kind)

    def forward(self, x):
        y = x
        for layer in self.body:
            y = layer(y)
        y = F.pixel_shuffle(y, self.scale)
        return y + F.interpolate(x, scale_factor=self.scale, mode="nearest")


class DenseBlock(nn.Module):
    def __init__(self, nf, gc):
        super().__init__()
        for j in range(1, 6):
            setattr(self, "conv%d" % j,
                    nn.Conv2d(nf + (j - 1) * gc, nf if j == 5 else gc, 3, padding=1))

    def forward(self, x):
        feats = [x]
        for j in range(1, 5):
            conv = getattr(self, "conv%d" % j)
            feats.append(F.leaky_relu(conv(torch.cat(feats, 1)), 0.2))
        return self.conv5(torch.cat(feats, 1)) * 0.2 + x


class RRDBBlock(nn.Module):
    def __init__(self, nf, gc):
        super().__init__()
        self.rdb1, self.rdb2, self.rdb3 = DenseBlock(nf, gc), DenseBlock(nf, gc), DenseBlock(nf, gc)

    def forward(self, x):
        return self.rdb3(self.rdb2(self.rdb1(x))) * 0.2 + x


class RRDB(nn.Module):
    def __init__(self, num_feat=64, num_block=23, num_grow=32, scale=4, in_ch=3, out_ch=3):
        super().__init__()
        if scale not in (1, 2, 4):
            raise ValueError("RRDBNet scales are 1, 2 and 4")
        self.unshuffle = {4: 1, 2: 2, 1: 4}[scale]
        nf = num_feat
        self.conv_first = nn.Conv2d(in_ch * self.unshuffle ** 2, nf, 3, padding=1)
        self.body = nn.Sequential(*[RRDBBlock(nf, num_grow) for _ in range(num_block)])
        self.conv_body = nn.Conv2d(nf, nf, 3, padding=1)
        self.conv_up1 = nn.Conv2d(nf, nf, 3, padding=1)
        self.conv_up2 = nn.Conv2d(nf, nf, 3, padding=1)
        self.conv_hr = nn.Conv2d(nf, nf, 3, padding=1)
        self.conv_last = nn.Conv2d(nf, out_ch, 3, padding=1)

    def forward(self, x):
        if self.unshuffle > 1:
            x = F.pixel_unshuffle(x, self.unshuffle)
        feat = self.conv_first(x)
        feat = feat + self.conv_body(self.body(feat))
        for conv in (self.conv_up1, self.conv_up2):
            feat = F.leaky_relu(conv(F.interpolate(feat, scale_factor=2, mode="nearest")), 0.2)
        return self.conv_last(F.leaky_relu(self.conv_hr(feat), 0.2))


def upscale_u8(net, rgb_u8):
    """(H, W, 3) uint8 -> (float32 output in pixel units, uint8), as Real-ESRGAN's inference
    maps them: x / 255 in, clamp(y, 0, 1) * 255 rounded out."""
    x = torch.from_numpy(rgb_u8).double().div(255).permute(2, 0, 1)[None]
    with torch.no_grad():
        y = net.double()(x)[0].permute(1, 2, 0)
    pix = (y * 255).float().numpy()
    out8 = (y.clamp(0, 1) * 255).round().byte().numpy()
    return pix, out8
