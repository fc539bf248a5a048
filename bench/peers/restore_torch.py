#!/usr/bin/python3
"""restore_torch.py - the PyTorch peer of bench/restore.sh: one face through GPEN, GFPGAN or
CodeFormer in PyTorch eager mode on the CPU (float32, inference_mode, intra-op threads =
--threads), on a synthetic aligned face at the network's size; prints one JSON object.

  restore_torch.py --pth GPEN-BFR-512.pt --runs 3 --threads 2
  restore_torch.py --pth codeformer.pth --codeformer CODEFORMER_DIR

CodeFormer runs upstream's own class (sczhou/CodeFormer checkout, loaded as
tools/make_codeformer_fixtures.py does), w = 0.5, adain=True as inference_codeformer.py.

With --upstream DIR (the network's yangxy/GPEN or TencentARC/GFPGAN checkout) GPEN and
GFPGAN run upstream's own classes too (bench/export_restore_onnx.py's load_network: the same
modules ONNX Runtime's peer was exported from). Without it, tools/gpen_reference.py /
tools/gfpgan_reference.py, the project's PyTorch implementation of the upstream
architectures (F.conv2d with the modulated weight, conv_transpose2d, upfirdn2d as a
depthwise conv: upstream's CPU path), with the file's weights.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import gfpgan_reference  # noqa: E402
import gpen_reference  # noqa: E402


def codeformer_forward(sd, cf_dir):
    import make_codeformer_fixtures as cfx
    _, cf = cfx.import_codeformer(cf_dir)
    net = cf.CodeFormer(dim_embd=512, n_head=8, n_layers=9, codebook_size=1024,
                        connect_list=["32", "64", "128", "256"]).eval()
    net.load_state_dict(sd)
    return lambda _sd, x: net(x, w=0.5, adain=True)[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pth", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--codeformer", default=None, help="a sczhou/CodeFormer checkout")
    ap.add_argument("--upstream", default=None, help="GPEN's or GFPGAN's upstream checkout")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    ck = torch.load(a.pth, map_location="cpu")
    if a.upstream and not a.codeformer:
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        import export_restore_onnx as ex
        kind = "gfpgan" if "params_ema" in ck or "params" in ck else "gpen"
        net, fwd = ex.load_network(kind, a.pth, a.upstream)
        forward, size, sd = (lambda _sd, x: fwd(net, x)), 512, None
    elif a.codeformer:
        forward, size = codeformer_forward(ck["params_ema"], a.codeformer), 512
        sd = None
    elif "params_ema" in ck or "params" in ck:
        sd = ck.get("params_ema", ck.get("params"))
        forward, size = gfpgan_reference.gfpgan_forward, gfpgan_reference.gfpgan_arch(sd)["size"]
    else:
        sd = ck.get("g_ema", ck)
        forward, size = gpen_reference.gpen_forward, gpen_reference.gpen_arch(sd)["size"]
    x = torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(1)) * 2 - 1
    ms = []
    with torch.inference_mode():
        for i in range(a.warmup + a.runs):
            t = time.perf_counter()
            forward(sd, x)
            if i >= a.warmup:
                ms.append((time.perf_counter() - t) * 1000)
    print(json.dumps({"runtime": "pytorch", "model": a.pth, "size": size, "threads": a.threads,
                      "upstream": bool(a.upstream or a.codeformer),
                      "ms_median": statistics.median(ms), "ms_min": min(ms),
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
