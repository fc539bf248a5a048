#!/usr/bin/python3
"""upscale_torch.py - the PyTorch peer of bench/upscale.sh: time an upscaler network in
PyTorch eager mode on the CPU (float32, inference_mode, intra-op threads = --threads) on a
synthetic --size image and print one JSON object.

  upscale_torch.py --pth FILE.pth --size 512 --runs 3 --threads 2     Real-ESRGAN checkpoint
  upscale_torch.py --tfjs DIR --size 512 ...                          UpscalerJS model.json

--pth builds tools/realesrgan_reference.py's network (SRVGGNetCompact or RRDBNet, its
shape read from the state_dict as Real-ESRGAN's users name it) with the file's weights;
--tfjs runs the TF.js layers graph (tools/tfjs_reference.py's reader) with torch ops:
conv2d, relu, cat, add, nearest interpolate. The same networks and weights as our engine.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import realesrgan_reference as R  # noqa: E402
import tfjs_reference as T  # noqa: E402


def from_pth(path):
    ck = torch.load(path, map_location="cpu")
    sd = ck.get("params_ema", ck.get("params", ck))
    if "conv_first.weight" in sd:
        blocks = len({k.split(".")[1] for k in sd if k.startswith("body.")})
        inc = sd["conv_first.weight"].shape[1]
        net = R.RRDB(sd["conv_first.weight"].shape[0], blocks,
                     sd["body.0.rdb1.conv1.weight"].shape[0], {3: 4, 12: 2, 48: 1}[inc])
    else:
        last = max(int(k.split(".")[1]) for k in sd if k.startswith("body."))
        scale = int(round((sd["body.%d.weight" % last].shape[0] / 3) ** 0.5))
        net = R.SRVGG(sd["body.0.weight"].shape[0], last // 2 - 1, scale)
    net.load_state_dict(sd)
    return net.eval()


class TfjsNet(torch.nn.Module):
    def __init__(self, model_dir):
        super().__init__()
        self.m = T.load(model_dir)
        self.w = {k: torch.from_numpy(v.copy()) for k, v in self.m.weights.items()}
        for k, v in list(self.w.items()):
            if v.dim() == 4:  # HWIO -> OIHW
                self.w[k] = v.permute(3, 2, 0, 1).contiguous()

    def forward(self, x):
        vals = {self.m.inputs[0]: x}
        for cls, name, cfg, inbound in self.m.layers:
            a = [vals[i] for i in inbound]
            if cls == "InputLayer":
                continue
            if cls == "Conv2D":
                k = self.w[name + "/kernel"]
                y = F.conv2d(a[0], k, self.w.get(name + "/bias"), padding=k.shape[2] // 2)
                vals[name] = F.relu(y) if cfg.get("activation") == "relu" else y
            elif cls == "Activation":
                vals[name] = F.relu(a[0])
            elif cls == "Concatenate":
                vals[name] = torch.cat(a, 1)
            elif cls == "Add":
                vals[name] = sum(a[1:], a[0])
            elif cls == "UpSampling2D":
                vals[name] = F.interpolate(a[0], scale_factor=cfg["size"][0], mode="nearest")
        return vals[self.m.outputs[0]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pth")
    ap.add_argument("--tfjs")
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    net = from_pth(a.pth) if a.pth else TfjsNet(a.tfjs)
    g = torch.Generator().manual_seed(1)
    x = torch.rand(1, 3, a.size, a.size, generator=g)
    if a.tfjs:
        x = x * 255
    ms = []
    with torch.inference_mode():
        for i in range(a.warmup + a.runs):
            t = time.perf_counter()
            net(x)
            if i >= a.warmup:
                ms.append((time.perf_counter() - t) * 1000)
    print(json.dumps({"runtime": "pytorch", "model": a.pth or a.tfjs, "size": a.size,
                      "threads": a.threads, "ms_median": statistics.median(ms), "ms_min": min(ms),
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


if __name__ == "__main__":
    main()
