#!/usr/bin/python3
"""Writes tests/fixtures/restore/up_codeformer*: a CodeFormer checkpoint with seeded random
weights, made by the upstream classes of sczhou/CodeFormer, and the outputs of its forward pass
run on CPU at fidelity w = 0, 0.5 and 1 (with adain=True, as inference_codeformer.py calls it),
plus the key layout of the released codeformer.pth (shapes only). The upstream code is only
run, never copied:

  /usr/bin/python3 tools/make_codeformer_fixtures.py CODEFORMER_DIR

CODEFORMER_DIR is a sczhou/CodeFormer checkout (basicsr/archs/codeformer_arch.py and
vqgan_arch.py, plain PyTorch). Its basicsr package is not imported as a whole (its __init__
pulls in cv2, torchvision, the data and training code): the two arch files are loaded under
stubbed package names, with get_root_logger and ARCH_REGISTRY stubbed.

The reduced configuration. The released network (dim_embd 512, 8 heads, 9 layers, codebook
1024; VQGAN nf 64, ch_mult [1, 2, 2, 4, 4, 8]) holds about 94 M parameters (377 MB). Here:
CodeFormer(dim_embd=64, n_head=8, n_layers=2, codebook_size=1024) over a VQAutoEncoder of
nf 32, ch_mult [1, 1, 1, 1, 1, 1] (VQAutoEncoder's own arguments; CodeFormer.__init__ fixes
them, so they are passed through a wrapper of VQAutoEncoder.__init__, and the fuse blocks are
rebuilt with upstream's Fuse_sft_block at the generator's channels at each resolution). 32 is
the smallest width upstream's GroupNorm(32 groups) accepts. The image stays 512 x 512 (the
16 x 16 latent is hard-coded upstream). Everything else (heads, codebook, emb_dim 256, the
attention blocks at 16, the four fuse resolutions) is as released.

Weights: upstream's initialisation (seeded), then every tensor drawn afresh at a scale that
keeps activations in range, the codebook and the logit head at a scale that spreads the
chosen codes (the count of distinct codes is printed and checked).

Files: up_codeformer.pt ({"params_ema": ...}, as released), up_codeformer_w{0,05,1}.agrf
(version 2 .agrf, see make_restore_upstream_fixtures.py), up_codeformer_codes.bin (256 u32:
the code chosen at each latent position, row-major), layout_codeformer.txt ("name d0 d1 ..."
of the full-size network, in state_dict order).
"""
import importlib
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_restore_upstream_fixtures as up  # noqa: E402

OUT = up.OUT
FEAT_EMB_GAIN = 20.0
NF, CH_MULT = 32, [1, 1, 1, 1, 1, 1]


def import_codeformer(cf_dir):
    up.stub_basicsr()
    archs = sys.modules["basicsr.archs"]
    archs.__path__ = [os.path.join(cf_dir, "basicsr", "archs")]
    vq = importlib.import_module("basicsr.archs.vqgan_arch")
    cf = importlib.import_module("basicsr.archs.codeformer_arch")
    return vq, cf


def reduced_codeformer(vq, cf):
    full_init = vq.VQAutoEncoder.__init__

    def small_init(self, img_size, nf, ch_mult, *args, **kw):
        full_init(self, img_size, NF, CH_MULT, *args, **kw)

    vq.VQAutoEncoder.__init__ = small_init
    try:
        net = cf.CodeFormer(dim_embd=64, n_head=8, n_layers=2, codebook_size=1024)
    finally:
        vq.VQAutoEncoder.__init__ = full_init
    res = 512
    for i, m in enumerate(CH_MULT):  # the generator's channels at each resolution
        net.channels[str(res)] = NF * m
        res //= 2
    net.channels["16"] = NF * CH_MULT[-1]
    net.fuse_convs_dict = torch.nn.ModuleDict(
        {s: cf.Fuse_sft_block(net.channels[s], net.channels[s]) for s in net.connect_list})
    return net


def randomize(net, seed):
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in net.named_parameters():
            r = torch.randn(p.shape, generator=gen)
            if name.endswith("bias"):
                p.copy_(0.05 * r)
            elif "norm" in name and p.dim() == 1:  # GroupNorm / LayerNorm scales
                p.copy_(1 + 0.1 * r)
            elif name == "position_emb":
                p.copy_(r)
            elif name == "feat_emb.weight":  # tokens differ in direction, not only in size
                p.copy_(r * FEAT_EMB_GAIN / np.sqrt(p.shape[1]))
            elif name == "quantize.embedding.weight":
                p.copy_(r)  # codes far apart
            elif p.dim() >= 2:  # conv / linear: unit gain (fan-in scaled)
                fan_in = int(np.prod(p.shape[1:]))
                p.copy_(r / np.sqrt(fan_in))
            else:
                p.copy_(0.1 * r)
        net.generator.blocks[-1].weight.mul_(4)  # the RGB out: a spread of levels, not grey


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_codeformer_fixtures.py CODEFORMER_DIR")
    torch.set_num_threads(2)
    vq, cf = import_codeformer(sys.argv[1])
    full = cf.CodeFormer(dim_embd=512, n_head=8, n_layers=9, codebook_size=1024,
                         connect_list=["32", "64", "128", "256"])
    with open(os.path.join(OUT, "layout_codeformer.txt"), "w") as f:
        for name, t in full.state_dict().items():
            f.write(name + " " + " ".join(str(d) for d in t.shape) + "\n")
    print("full size: %.1f M parameters" % (sum(p.numel() for p in full.parameters()) / 1e6))
    del full
    torch.manual_seed(33512)
    net = reduced_codeformer(vq, cf).eval()
    randomize(net, 33512)
    torch.save({"params_ema": net.state_dict()}, os.path.join(OUT, "up_codeformer.pt"))
    print("reduced: %.2f M parameters" % (sum(p.numel() for p in net.parameters()) / 1e6))
    codes = None
    for w, tag in ((0.0, "w0"), (0.5, "w05"), (1.0, "w1")):
        def forward(net, x, w=w):
            nonlocal codes
            out, logits, _ = net(x, w=w, adain=True)
            codes = logits[0].argmax(dim=1)
            return out
        up.write_fixture("up_codeformer_" + tag, "up_codeformer.pt", net, forward, 512,
                         up.basicsr_u8)
    codes = codes.numpy().astype(np.uint32)
    with open(os.path.join(OUT, "up_codeformer_codes.bin"), "wb") as f:
        f.write(codes.tobytes())
    print("codes: %d distinct of 1024 over 256 positions" % len(np.unique(codes)))


if __name__ == "__main__":
    main()
