#!/usr/bin/python3
"""Writes full-size seeded random-weight restorers for the benchmarks (bench/restore.sh):
GPEN-BFR-512 and GFPGANv1.4 in the released files' exact key layouts (the layout functions
of tools/make_restore_fixtures.py). Random weights time exactly like trained ones.

  /usr/bin/python3 tools/make_restore_bench_models.py DIR [CODEFORMER_DIR]
writes DIR/gpen_bfr_512.pt (284 MB) and DIR/gfpgan_v1.4.pth (349 MB); existing files are kept.
With a sczhou/CodeFormer checkout, also DIR/codeformer.pth (377 MB): upstream's CodeFormer
class at the released configuration, its weights drawn as tools/make_codeformer_fixtures.py
draws them (the codes spread over the codebook).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_restore_fixtures as fx  # noqa: E402


def codeformer(path, cf_dir):
    import make_codeformer_fixtures as cfx
    _, cf = cfx.import_codeformer(cf_dir)
    torch.manual_seed(20515)
    net = cf.CodeFormer(dim_embd=512, n_head=8, n_layers=9, codebook_size=1024,
                        connect_list=["32", "64", "128", "256"]).eval()
    cfx.randomize(net, 20515)
    torch.save({"params_ema": net.state_dict()}, path + ".tmp")
    os.replace(path + ".tmp", path)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    gpen = os.path.join(out, "gpen_bfr_512.pt")
    if not os.path.exists(gpen):
        torch.save(fx.random_state(fx.gpen_layout(512, 512, 8, 2, 1), 20512, prescaled=False),
                   gpen + ".tmp")
        os.replace(gpen + ".tmp", gpen)
    gfp = os.path.join(out, "gfpgan_v1.4.pth")
    if not os.path.exists(gfp):
        sd = fx.random_state(fx.gfpgan_layout(512, 512, 8, 2, 1), 20514, prescaled=True)
        torch.save({"params_ema": sd}, gfp + ".tmp")
        os.replace(gfp + ".tmp", gfp)
    print(gpen)
    print(gfp)
    if len(sys.argv) == 3:
        cfp = os.path.join(out, "codeformer.pth")
        if not os.path.exists(cfp):
            codeformer(cfp, sys.argv[2])
        print(cfp)


if __name__ == "__main__":
    main()
