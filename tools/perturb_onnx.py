#!/usr/bin/env python3
"""perturb_onnx.py - write a variant of an ONNX model whose weights are perturbed with a seed:
the "same generator, another style" test input for the ONNX importer (issue 8).

Offline tool (Debian's Python 3, numpy, python3-onnx). Every float32 initializer with at
least 16 elements (convolution weights and biases, LADE weights) is multiplied elementwise
by (1 + scale * n), n ~ N(0, 1) from numpy's RandomState(seed), in name order; scalars and
small constants (epsilons, shapes, pads, axes) and the graph are unchanged.

  /usr/bin/python3 tools/perturb_onnx.py --seed 1 [--scale 0.1]
      [--input tests/fixtures/onnx/AnimeGANv3_tiny_Cute.onnx]
      [--output build/v3/cute_p1.onnx]
The output is deterministic: the same seed gives a byte-identical file.
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_INPUT = os.path.join(ROOT, "tests", "fixtures", "onnx", "AnimeGANv3_tiny_Cute.onnx")


def perturb(model, seed, scale):
    rng = np.random.RandomState(seed)
    inits = sorted(model.graph.initializer, key=lambda t: t.name)
    changed = 0
    for t in inits:
        a = numpy_helper.to_array(t)
        if a.dtype != np.float32 or a.size < 16:
            continue
        n = rng.standard_normal(a.shape).astype(np.float32)
        b = (a * (np.float32(1) + np.float32(scale) * n)).astype(np.float32)
        t.CopyFrom(numpy_helper.from_array(b, t.name))
        changed += 1
    return changed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--input", default=DEFAULT_INPUT)
    ap.add_argument("--output")
    args = ap.parse_args()
    out = args.output or os.path.join(ROOT, "build", "v3", "cute_p%d.onnx" % args.seed)
    m = onnx.load(args.input)
    n = perturb(m, args.seed, args.scale)
    m.doc_string = "perturbed by tools/perturb_onnx.py --seed %d --scale %g" % (args.seed,
                                                                               args.scale)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    onnx.save(m, tmp)
    os.replace(tmp, out)
    print("wrote %s: %d initializers perturbed (seed %d, scale %g)" % (out, n, args.seed,
                                                                      args.scale))
    return 0


if __name__ == "__main__":
    sys.exit(main())
