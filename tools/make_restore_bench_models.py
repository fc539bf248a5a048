#!/usr/bin/python3
"""Writes full-size seeded random-weight restorers for the benchmarks (bench/restore.sh):
GPEN-BFR-512 and GFPGANv1.4 in the released files' exact key layouts (the layout functions
of tools/make_restore_fixtures.py). Random weights time exactly like trained ones.

  /usr/bin/python3 tools/make_restore_bench_models.py DIR
writes DIR/gpen_bfr_512.pt (284 MB) and DIR/gfpgan_v1.4.pth (349 MB); existing files are kept.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_restore_fixtures as fx  # noqa: E402


def main():
    if len(sys.argv) != 2:
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


if __name__ == "__main__":
    main()
