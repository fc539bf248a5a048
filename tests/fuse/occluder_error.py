"""The occluder check of fuse_test.sh (issue 31): the mean over an occluder's pixels (its mask
eroded by 2 px) inside the fusion's region (where REGION, a fusion of the same pair, differs
from the target) of the smallest |OUT - TARGET| (max over RGB) within 3 px, which allows for
the warp moving the target's face and what lies on it. Prints it and the pixel count.

    occluder_error.py OUT TARGET MASK REGION
"""
import sys
import numpy as np
from PIL import Image, ImageFilter
out = np.asarray(Image.open(sys.argv[1]).convert("RGB")).astype(np.int32)
tgt = np.asarray(Image.open(sys.argv[2]).convert("RGB")).astype(np.int32)
m = np.asarray(Image.open(sys.argv[3]).filter(ImageFilter.MinFilter(5))) > 0
region = np.asarray(Image.open(sys.argv[4]).convert("RGB")).astype(np.int32)
m &= np.abs(region - tgt).max(2) > 0  # the fusion's region: the ratio-0.05 output changed there
r = 3
best = np.full(out.shape[:2], 1e9)
for dy in range(-r, r + 1):
    for dx in range(-r, r + 1):
        t = np.roll(np.roll(tgt, dy, 0), dx, 1)
        best = np.minimum(best, np.abs(out - t).max(2))
print("%.2f %d" % (best[m].mean(), m.sum()))
