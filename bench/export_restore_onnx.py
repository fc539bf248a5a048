#!/usr/bin/python3
"""export_restore_onnx.py - a face restorer exported to ONNX with torch.onnx.export from the
upstream code (the path FaceFusion users take), for the ONNX Runtime peer of bench/restore.sh.

  /usr/bin/python3 bench/export_restore_onnx.py --net gpen --pth GPEN-BFR-512.pt \
      --upstream GPEN_DIR --output gpen.onnx [--check PREFIX]

--net gpen: yangxy/GPEN's FullGenerator (face_model/gpen_model.py; without CUDA its op/ falls
back to the native PyTorch upfirdn2d and fused_leaky_relu), 512, style 512, 8 MLP layers,
channel multiplier 2 (GPEN-BFR-512's). --net gfpgan: TencentARC/GFPGAN's GFPGANv1Clean as
GFPGANer builds v1.4 (randomize_noise=False: the stored noise). --net codeformer:
sczhou/CodeFormer's CodeFormer at the released configuration, w = 0.5, adain=True as
inference_codeformer.py. The upstream modules are imported as the fixture tools do
(tools/make_restore_upstream_fixtures.py, tools/make_codeformer_fixtures.py): nothing
upstream is copied here.

With --check PREFIX it also writes PREFIX.in.f32 and PREFIX.out.f32 (raw float32, NCHW): the
input bench/peers/restore_torch.py times and PyTorch's output, so bench/peers/ort_bench.js
--check PREFIX shows ONNX Runtime computes the same function. Opset 14 (MultiheadAttention's
and GroupNorm's exports need no newer one).
"""

import argparse
import os
import sys
import warnings

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import make_restore_upstream_fixtures as up  # noqa: E402


class Wrapped(torch.nn.Module):
    """The network's first output (the restored face) from one input, as FaceFusion's."""

    def __init__(self, net, forward):
        super().__init__()
        self.net, self.forward_fn = net, forward

    def forward(self, x):
        return self.forward_fn(self.net, x)


def conv_any_kernel(g, input, weight, bias, stride, padding, dilation, transposed,
                    output_padding, groups, *rest):
    """aten::_convolution for ONNX when the kernel's shape is not known at export (GPEN's
    modulated weight, reshaped from traced sizes): Conv / ConvTranspose without the optional
    kernel_shape attribute (ONNX takes it from W); otherwise torch's own export."""
    from torch.onnx import symbolic_helper as sh
    from torch.onnx import symbolic_opset9 as o9
    sizes = sh._get_tensor_sizes(weight)
    if sizes and None not in sizes[2:]:
        return o9._convolution(g, input, weight, bias, stride, padding, dilation, transposed,
                               output_padding, groups, *rest)
    pads = sh._get_const(padding, "is", "padding")
    kw = {"strides_i": sh._get_const(stride, "is", "stride"), "pads_i": pads + pads,
          "dilations_i": sh._get_const(dilation, "is", "dilation"),
          "group_i": sh._get_const(groups, "i", "groups")}
    args = [input, weight] + ([] if sh._is_none(bias) else [bias])
    if sh._get_const(transposed, "i", "transposed"):
        kw["output_padding_i"] = sh._get_const(output_padding, "is", "output_padding")
        return g.op("ConvTranspose", *args, **kw)
    return g.op("Conv", *args, **kw)


class SizeKeyedDict(torch.nn.ModuleDict):
    """CodeFormer looks its fuse blocks up by str(x.shape[-1]); traced, that is 'tensor(32)'."""

    def __getitem__(self, key):
        return super().__getitem__(key[7:-1] if key.startswith("tensor(") else key)


def load_network(net_kind, pth, upstream):
    """The upstream module with the file's weights and its forward: (module, forward)."""
    ck = torch.load(pth, map_location="cpu")
    if net_kind == "gpen":
        net = up.import_gpen(upstream)(512, 512, 8, channel_multiplier=2).eval()
        net.load_state_dict(ck.get("g_ema", ck))
        return net, lambda n, x: n(x)[0]
    if net_kind == "gfpgan":
        net = up.import_gfpgan(upstream)(
            512, num_style_feat=512, channel_multiplier=2, decoder_load_path=None,
            fix_decoder=False, num_mlp=8, input_is_latent=True, different_w=True,
            narrow=1, sft_half=True).eval()
        net.load_state_dict(ck["params_ema"])
        return net, lambda n, x: n(x, return_rgb=False, randomize_noise=False)[0]
    import make_codeformer_fixtures as cfx
    _, cf = cfx.import_codeformer(upstream)
    net = cf.CodeFormer(dim_embd=512, n_head=8, n_layers=9, codebook_size=1024,
                        connect_list=["32", "64", "128", "256"]).eval()
    net.load_state_dict(ck["params_ema"])
    net.fuse_convs_dict = SizeKeyedDict(dict(net.fuse_convs_dict.items()))
    return net, lambda n, x: n(x, w=0.5, adain=True)[0]


def face_input(size):
    """restore_torch.py's input: uniform [-1, 1), seed 1."""
    return torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(1)) * 2 - 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--net", required=True, choices=("gpen", "gfpgan", "codeformer"))
    ap.add_argument("--pth", required=True)
    ap.add_argument("--upstream", required=True, help="the network's upstream checkout")
    ap.add_argument("--output", required=True)
    ap.add_argument("--check", default=None)
    a = ap.parse_args()
    torch.set_num_threads(2)
    torch.onnx.register_custom_op_symbolic("aten::_convolution", conv_any_kernel, 14)
    net, forward = load_network(a.net, a.pth, a.upstream)
    model = Wrapped(net, forward).eval()
    x = face_input(512)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, x, a.output + ".tmp", input_names=["input"],
                          output_names=["output"], opset_version=14, do_constant_folding=True)
        os.replace(a.output + ".tmp", a.output)
        if a.check:
            x.numpy().astype("<f4").tofile(a.check + ".in.f32")
            model(x).numpy().astype("<f4").tofile(a.check + ".out.f32")
    print(a.output)


if __name__ == "__main__":
    main()
