#!/usr/bin/python3
"""upscale_arch_peer.py - the PyTorch side of bench/upscale_archs.sh: the upscaler
architectures at their released sizes, built with chaiNNer-org/spandrel's own classes (a
checkout given by --spandrel; tools/make_upscaler_arch_fixtures.py imports it the same way)
on seeded weights (the speed of a network does not depend on its weights).

  upscale_arch_peer.py --spandrel DIR --make ARCH --out FILE.pth [--onnx FILE.onnx --size S]
  upscale_arch_peer.py --spandrel DIR --bench FILE.pth --size S --runs R --threads T

--make writes the state_dict (the key layout spandrel and our loader read) and, with --onnx,
its ONNX export (opset 17, fixed S x S input, NCHW, for bench/peers/ort_bench.js). --bench
loads the file through spandrel's Architecture.load (its detection) and times eager PyTorch
(float32, inference_mode, intra-op threads = T) on a seeded S x S image; prints one JSON.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools")
sys.path.insert(0, TOOLS)
import make_upscaler_arch_fixtures as F  # noqa: E402

# the released configurations: 4x-UltraSharp/Remacri-like ESRGAN (old keys), SPAN (48
# features), RealPLKSR (its defaults), Compact (realesr-animevideov3's shape)
ARCHS = {
    "esrgan": lambda sp: sp.ESRGAN.ESRGAN(in_nc=3, out_nc=3, num_filters=64, num_blocks=23,
                                          scale=4),
    # the same network saved in Real-ESRGAN/BasicSR's keys (RealESRGAN_x4plus's layout)
    "esrgan_new": lambda sp: sp.ESRGAN.ESRGAN(in_nc=3, out_nc=3, num_filters=64, num_blocks=23,
                                              scale=4),
    "compact": lambda sp: sp.Compact.Compact(num_in_ch=3, num_out_ch=3, num_feat=64,
                                             num_conv=16, upscale=4),
    "span": lambda sp: sp.SPAN.SPAN(num_in_ch=3, num_out_ch=3, feature_channels=48, upscale=4),
    "realplksr": lambda sp: sp.PLKSR.RealPLKSR(dim=64, n_blocks=28, upscaling_factor=4),
}
LOADERS = ("ESRGANArch", "CompactArch", "SPANArch", "PLKSRArch")


def new_keys(sd):
    """An old-layout ESRGAN state_dict (model.N...) in BasicSR's RRDBNet keys, the names
    spandrel's _to_old_arch maps back: conv_first, body.N.rdbJ.convK, conv_body, conv_upK,
    conv_hr, conv_last."""
    ups = sorted({int(k.split(".")[1]) for k in sd if k.split(".")[1].isdigit()} - {0, 1})
    last, hr = ups[-1], ups[-2]
    out = {}
    for k, v in sd.items():
        p = k.split(".")
        if p[1] == "0":
            out["conv_first." + p[2]] = v
        elif p[1] == "1" and p[4].startswith("RDB"):  # model.1.sub.N.RDBj.convk.0.w
            out["body.%s.rdb%s.%s.%s" % (p[3], p[4][3:], p[5], p[7])] = v
        elif p[1] == "1":  # model.1.sub.<blocks>.w
            out["conv_body." + p[4]] = v
        elif int(p[1]) == last:
            out["conv_last." + p[2]] = v
        elif int(p[1]) == hr:
            out["conv_hr." + p[2]] = v
        else:
            out["conv_up%d.%s" % (int(p[1]) // 3, p[2])] = v
    return out


def load(sp, path):
    sd = torch.load(path, map_location="cpu")
    for mod, cls in zip((sp.ESRGAN, sp.Compact, sp.SPAN, sp.PLKSR), LOADERS):
        arch = getattr(mod, cls)()
        if arch.detect(sd):
            return arch.load(sd).model.eval()
    sys.exit("%s: no architecture detected" % path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spandrel", required=True)
    ap.add_argument("--make", choices=sorted(ARCHS))
    ap.add_argument("--out")
    ap.add_argument("--onnx")
    ap.add_argument("--bench")
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    F.GROWTH = 32  # the released RRDBNets' growth
    sp = F.import_spandrel(a.spandrel)
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    if a.make:
        net = ARCHS[a.make](sp)
        F.seeded_weights(net, 7)
        sd = net.state_dict()
        torch.save(new_keys(sd) if a.make == "esrgan_new" else sd, a.out)
        if a.onnx:
            model = load(sp, a.out)
            x = torch.rand(1, 3, a.size, a.size)
            torch.onnx.export(model, x, a.onnx, opset_version=17, input_names=["input"],
                              output_names=["output"])
        return
    net = load(sp, a.bench)
    x = torch.rand(1, 3, a.size, a.size, generator=torch.Generator().manual_seed(1))
    ms = []
    with torch.inference_mode():
        for i in range(a.warmup + a.runs):
            t = time.perf_counter()
            net(x)
            if i >= a.warmup:
                ms.append((time.perf_counter() - t) * 1000)
    print(json.dumps({"runtime": "pytorch", "version": torch.__version__, "model": a.bench,
                      "size": a.size, "threads": a.threads, "ms_median": statistics.median(ms),
                      "ms_min": min(ms),
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
