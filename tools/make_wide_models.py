#!/usr/bin/python3
"""Models with a 1040-channel map (issue #35): the kernels keep per-channel values in arrays
of AG_MAP_MAX_CHANNELS = 1024 on the stack, so these must be refused at load, in one line.

    /usr/bin/python3 tools/make_wide_models.py tests/fixtures/wide

writes wide_1040.pth (a Real-ESRGAN SRVGGNetCompact checkpoint; stride-0 views keep it at
11 KB, as the red team's 19 KB file) and wide_1040.onnx (a style: conv 3 -> 1040 -> 3, tanh).
Needs Debian's python3-torch and python3-onnx."""
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper
import torch

F = 1040


def compact(path):
    def flat(*shape, v=0.01):
        return torch.full((1,), v).expand(*shape)

    sd = {"body.0.weight": flat(F, 3, 3, 3), "body.0.bias": torch.linspace(-1, 1, F),
          "body.1.weight": flat(F, v=0.1), "body.2.weight": flat(F, F, 3, 3, v=0.001),
          "body.2.bias": torch.linspace(-2, 2, F), "body.3.weight": flat(F, v=0.1),
          "body.4.weight": flat(12, F, 3, 3, v=0.001), "body.4.bias": torch.zeros(12)}
    torch.save({"params": sd}, path)


def style(path):
    rng = np.random.default_rng(35)
    w1 = numpy_helper.from_array((rng.standard_normal((F, 3, 1, 1)) * 0.3).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(np.linspace(-1, 1, F).astype(np.float32), "b1")
    w2 = numpy_helper.from_array((rng.standard_normal((3, F, 1, 1)) * 0.03).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["input", "w1", "b1"], ["wide"]),
             helper.make_node("Conv", ["wide", "w2"], ["narrow"]),
             helper.make_node("Tanh", ["narrow"], ["output"])]
    image = [1, 3, "h", "w"]
    graph = helper.make_graph(nodes, "wide", [helper.make_tensor_value_info(
        "input", onnx.TensorProto.FLOAT, image)], [helper.make_tensor_value_info(
            "output", onnx.TensorProto.FLOAT, image)], [w1, b1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)


if __name__ == "__main__":
    out = sys.argv[1]
    compact(os.path.join(out, "wide_1040.pth"))
    style(os.path.join(out, "wide_1040.onnx"))
