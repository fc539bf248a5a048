"""reference_model.py - the PyTorch reference of the AnimeGANv2 generator, shared by the
offline tools (tools/make_fixtures.py). Not linked into anything; run with /usr/bin/python3
(Debian's PyTorch and numpy).

The layer structure and state_dict names are those of bryandlee/animegan2-pytorch's
Generator (model.py). Two semantics parameters make it cover both weight families:

  eps     GroupNorm(1) epsilon: 1e-12 for the TF-converted Hayao model (its LayerNorm),
          1e-5 for bryandlee's PyTorch .pt weights.
  resize  the bilinear upsampling in front of blocks D and E:
          "asymmetric"    TF legacy (align_corners=False, half_pixel_centers=False):
                          scale = float32(in) / float32(out), src = float32(dst) * scale,
                          y0 = floor(src), y1 = min(y0 + 1, in - 1), frac = src - y0,
                          all in float32 as TF computes it; PyTorch has no such mode.
          "align-corners" F.interpolate(align_corners=True)
          "half-pixel"    F.interpolate(align_corners=False) with an explicit size
Resize targets: after block C to block A's output size, after block D to the input size.
"""

import json
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

RESIZE_MODES = ("asymmetric", "align-corners", "half-pixel")


# ---- network ----------------------------------------------------------------------------

class ConvNormLReLU(nn.Sequential):
    def __init__(self, in_ch, out_ch, kernel_size=3, stride=1, padding=1, groups=1, bias=False,
                 eps=1e-5):
        super().__init__(
            nn.ReflectionPad2d(padding),
            nn.Conv2d(in_ch, out_ch, kernel_size=kernel_size, stride=stride, padding=0,
                      groups=groups, bias=bias),
            nn.GroupNorm(num_groups=1, num_channels=out_ch, affine=True, eps=eps),
            nn.LeakyReLU(0.2, inplace=True))


class InvertedResBlock(nn.Module):
    def __init__(self, in_ch, out_ch, expansion_ratio=2, eps=1e-5):
        super().__init__()
        self.use_res_connect = in_ch == out_ch
        bottleneck = int(round(in_ch * expansion_ratio))
        self.layers = nn.Sequential(
            ConvNormLReLU(in_ch, bottleneck, kernel_size=1, padding=0, eps=eps),
            ConvNormLReLU(bottleneck, bottleneck, groups=bottleneck, bias=True, eps=eps),
            nn.Conv2d(bottleneck, out_ch, kernel_size=1, padding=0, bias=False),
            nn.GroupNorm(num_groups=1, num_channels=out_ch, affine=True, eps=eps))

    def forward(self, x):
        out = self.layers(x)
        if self.use_res_connect:
            out = x + out
        return out


def _axis_coords(in_size, out_size):
    """TF legacy bilinear source indices and weights along one axis (float32 maths)."""
    scale = np.float32(in_size) / np.float32(out_size)
    src = np.arange(out_size, dtype=np.float32) * scale
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    i1 = np.minimum(i0 + 1, in_size - 1)
    frac = (src - i0.astype(np.float32)).astype(np.float32)
    return torch.from_numpy(i0), torch.from_numpy(i1), torch.from_numpy(frac)


def resize_asymmetric(x, size):
    """x (N, C, H, W) -> (N, C, size[0], size[1]), TF ResizeBilinear legacy mode, computed
    like TF's kernel: top = tl + (tr - tl) * xf, bottom = bl + (br - bl) * xf,
    out = top + (bottom - top) * yf."""
    _, _, ih, iw = x.shape
    y0, y1, yf = _axis_coords(ih, size[0])
    x0, x1, xf = _axis_coords(iw, size[1])
    xf = xf.view(1, 1, 1, -1)
    yf = yf.view(1, 1, -1, 1)
    top_rows = x[:, :, y0, :]
    bot_rows = x[:, :, y1, :]
    top = top_rows[:, :, :, x0] + (top_rows[:, :, :, x1] - top_rows[:, :, :, x0]) * xf
    bot = bot_rows[:, :, :, x0] + (bot_rows[:, :, :, x1] - bot_rows[:, :, :, x0]) * xf
    return top + (bot - top) * yf


def resize(x, size, mode):
    size = (int(size[0]), int(size[1]))
    if mode == "asymmetric":
        return resize_asymmetric(x, size)
    if mode == "align-corners":
        return F.interpolate(x, size, mode="bilinear", align_corners=True)
    if mode == "half-pixel":
        return F.interpolate(x, size, mode="bilinear", align_corners=False)
    raise ValueError("unknown resize mode %r" % mode)


class Generator(nn.Module):
    def __init__(self, eps=1e-5, resize_mode="align-corners"):
        super().__init__()
        if resize_mode not in RESIZE_MODES:
            raise ValueError("unknown resize mode %r" % resize_mode)
        self.eps = eps
        self.resize_mode = resize_mode
        c = lambda *a, **k: ConvNormLReLU(*a, eps=eps, **k)  # noqa: E731
        self.block_a = nn.Sequential(
            c(3, 32, kernel_size=7, padding=3),
            c(32, 64, stride=2, padding=(0, 1, 0, 1)),
            c(64, 64))
        self.block_b = nn.Sequential(
            c(64, 128, stride=2, padding=(0, 1, 0, 1)),
            c(128, 128))
        self.block_c = nn.Sequential(
            c(128, 128),
            InvertedResBlock(128, 256, 2, eps=eps),
            InvertedResBlock(256, 256, 2, eps=eps),
            InvertedResBlock(256, 256, 2, eps=eps),
            InvertedResBlock(256, 256, 2, eps=eps),
            c(256, 128))
        self.block_d = nn.Sequential(
            c(128, 128),
            c(128, 128))
        self.block_e = nn.Sequential(
            c(128, 64),
            c(64, 64),
            c(64, 32, kernel_size=7, padding=3))
        self.out_layer = nn.Sequential(
            nn.Conv2d(32, 3, kernel_size=1, stride=1, padding=0, bias=False),
            nn.Tanh())

    def forward(self, x):
        out = self.block_a(x)
        half_size = out.shape[-2:]
        out = self.block_b(out)
        out = self.block_c(out)
        out = resize(out, half_size, self.resize_mode)
        out = self.block_d(out)
        out = resize(out, x.shape[-2:], self.resize_mode)
        out = self.block_e(out)
        return self.out_layer(out)


def conv_layers(model):
    """(name, nn.Conv2d) of every convolution, in execution order."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Conv2d)]


def flop(model, width, height):
    """Convolution FLOP (multiply-add = 2) of one pass at width x height."""
    sizes = {}

    def hook(name):
        def f(mod, inp, out):
            sizes[name] = out.shape
        return f

    handles = [m.register_forward_hook(hook(n)) for n, m in conv_layers(model)]
    with torch.no_grad():
        model(torch.zeros(1, 3, height, width))
    for h in handles:
        h.remove()
    total = 0
    for n, m in conv_layers(model):
        _, oc, oh, ow = sizes[n]
        kh, kw = m.kernel_size
        total += 2 * oh * ow * oc * (m.in_channels // m.groups) * kh * kw
    return total


# ---- running it on 8-bit images ---------------------------------------------------------

def run_u8(model, rgb_u8):
    """rgb_u8 (H, W, 3) uint8 -> (y (H, W, 3) float32 tanh output, out8 (H, W, 3) uint8).
    Input x = float32(u8) / 127.5 - 1; out8 = clip(rint((y + 1) * 127.5), 0, 255)."""
    x = torch.from_numpy(np.array(rgb_u8, dtype=np.uint8, copy=True)).float() / 127.5 - 1
    x = x.permute(2, 0, 1).unsqueeze(0).contiguous()
    with torch.no_grad():
        y = model(x)
    y = y[0].permute(1, 2, 0).contiguous().numpy().astype(np.float32)
    out8 = np.clip(np.rint((y + np.float32(1)) * np.float32(127.5)), 0, 255).astype(np.uint8)
    return y, out8


# ---- safetensors ------------------------------------------------------------------------

_ST_DTYPES = {"F32": np.float32, "I8": np.int8, "F16": np.float16, "F64": np.float64,
              "I32": np.int32, "I64": np.int64, "U8": np.uint8}


def read_safetensors(path):
    """Returns ({name: numpy array}, metadata dict)."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack_from("<Q", buf, 0)
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, e in header.items():
        dt = np.dtype(_ST_DTYPES[e["dtype"]]).newbyteorder("<")
        a, b = e["data_offsets"]
        arr = np.frombuffer(buf[base + a:base + b], dtype=dt).reshape(e["shape"])
        out[name] = arr.astype(dt.newbyteorder("="))
    return out, meta


def state_dict_from_safetensors(path):
    """A float32 state_dict: I8 "<conv>.weight" times "<conv>.scale" (per output channel),
    computed in float32; F32 tensors as they are."""
    tensors, meta = read_safetensors(path)
    sd = {}
    for name, a in tensors.items():
        if name.endswith(".scale"):
            continue
        if a.dtype == np.int8:
            scale = tensors[name[:-len(".weight")] + ".scale"].astype(np.float32)
            a = a.astype(np.float32) * scale.reshape((-1,) + (1,) * (a.ndim - 1))
        sd[name] = torch.from_numpy(np.ascontiguousarray(a.astype(np.float32)))
    return sd, meta


def load_safetensors_generator(path, eps=None, resize_mode=None):
    """Generator with the file's weights; eps and resize default to the file's metadata."""
    sd, meta = state_dict_from_safetensors(path)
    if eps is None:
        eps = float(meta.get("norm_eps", "1e-5"))
    if resize_mode is None:
        resize_mode = meta.get("resize", "align-corners")
    g = Generator(eps=eps, resize_mode=resize_mode)
    g.load_state_dict(sd, strict=True)
    return g.eval()
