#!/usr/bin/python3
"""A Real-ESRGAN checkpoint whose stride-0 views declare far more than the file holds (issue
#35 item 5): an 82 KB file made the loader gather 924 MB over 6 s before the architecture
refused the shape. Now shapes are checked first and views gathered only after.

    /usr/bin/python3 tools/make_view_models.py tests/fixtures/views

writes expanded_conv.pth: an SRVGGNetCompact x2 of 64 features whose body.2 conv weight is
(64, 400000, 3, 3) (921.6 MB as float32) expanded from one float, and unused.pth: a valid
x2 network plus an unused 921.6 MB expanded tensor; and for the memory bound of an upscaler
whose own scale is above the asked one (item 4), srvgg_x8.pth and srvgg_x2.pth: tiny
SRVGGNetCompacts (8 features, one conv) of those scales. Needs Debian's python3-torch."""
import os
import sys

import torch

F = 64
HUGE = 400000


def tiny(scale):
    g = torch.Generator().manual_seed(8)

    def rand(*shape):
        return (torch.rand(*shape, generator=g) - 0.5) * 0.2

    return {"params": {"body.0.weight": rand(8, 3, 3, 3), "body.0.bias": rand(8),
                       "body.1.weight": torch.full((8,), 0.1), "body.2.weight": rand(8, 8, 3, 3),
                       "body.2.bias": rand(8), "body.3.weight": torch.full((8,), 0.1),
                       "body.4.weight": rand(3 * scale * scale, 8, 3, 3),
                       "body.4.bias": rand(3 * scale * scale)}}


def compact(extra=None, body2=None):
    g = torch.Generator().manual_seed(35)

    def rand(*shape):
        return (torch.rand(*shape, generator=g) - 0.5) * 0.1

    sd = {"body.0.weight": rand(F, 3, 3, 3), "body.0.bias": rand(F),
          "body.1.weight": torch.full((F,), 0.1),
          "body.2.weight": body2 if body2 is not None else rand(F, F, 3, 3),
          "body.2.bias": rand(F), "body.3.weight": torch.full((F,), 0.1),
          "body.4.weight": rand(12, F, 3, 3), "body.4.bias": rand(12)}
    if extra is not None:
        sd["junk"] = extra
    return {"params": sd}


if __name__ == "__main__":
    out = sys.argv[1]
    torch.save(compact(body2=torch.full((1,), 0.01).expand(F, HUGE, 3, 3)),
               os.path.join(out, "expanded_conv.pth"))
    torch.save(compact(extra=torch.full((1,), 0.01).expand(F, HUGE, 3, 3)),
               os.path.join(out, "unused.pth"))
    for scale in (2, 8):
        torch.save(tiny(scale), os.path.join(out, "srvgg_x%d.pth" % scale))
