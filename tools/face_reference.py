#!/usr/bin/env python3
"""face_reference.py - the Python reference of the face pipeline (src/face/), offline, numpy:

  run_tflite(m, x)   an interpreter of our own for the two MediaPipe TFLite files, op by op
                     from the flatbuffer (CONV_2D, DEPTHWISE_CONV_2D with TFLite SAME/VALID
                     padding, RELU, PRELU, ADD, MAX_POOL_2D, PAD, RESIZE_BILINEAR with
                     half-pixel centres, RESHAPE, DEQUANTIZE of the float16 weights), in
                     float64: the oracle of the engine's converted graphs
  warp(...)          the resampler of src/face/warp.c: integer box shrink + a Keys cubic
                     (a = -0.5; the mesh's crop: bilinear) widened by the remaining scale,
                     reflected or letterboxed
  detect / mesh / ffhq_quad / ffhq_fill / align
                     the same recipes as detect.c, mesh.c, align.c and fill.c

Writes tests/fixtures/face/ (with --fixtures):
  detect_<photo>.agff   the letterboxed 192x192 input (u8) and the detector's raw outputs
  mesh_<photo>.agff     the 192x192 face crop (u8) and the mesh's raw outputs
  portrait_astronaut.png + portrait_astronaut.txt
                        the aligned 512 crop of astronaut.png from this file's own pipeline,
                        and its quad, for test_face.c (within 2 levels)

.agff, little-endian: "AGFF", u32 version 1, u32 kind (0 detector, 1 mesh), u32 side (192),
u8 input[side][side][3], u32 outputs, then per output u32 count and f32 values[count].

Usage: /usr/bin/python3 tools/face_reference.py --fixtures
       /usr/bin/python3 tools/face_reference.py IMAGE...      (prints what it finds)
"""

import argparse
import math
import os
import struct
import sys

import numpy as np
from PIL import Image

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
import v3_formats as F  # noqa: E402

REPO_ROOT = os.path.dirname(TOOLS)
SRC_DIR = "/work/shared/models/face"
F.TFL_OPS.update({2: "CONCATENATION", 4: "DEPTHWISE_CONV_2D", 17: "MAX_POOL_2D", 19: "RELU",
                  34: "PAD", 54: "PRELU"})


# ---- the TFLite interpreter ---------------------------------------------------------------

def same_pad(size, k, stride):
    out = (size + stride - 1) // stride
    total = max((out - 1) * stride + k - size, 0)
    return total // 2, total - total // 2   # TFLite: the odd pixel at the bottom/right


def conv2d(x, w, b, stride, padding, depthwise):
    """x (H, W, C) float64; w OHWI (conv) or (1, KH, KW, C) (depthwise)."""
    h, wd, c = x.shape
    k = w.shape[1]
    if padding == 0:
        pt, pb = same_pad(h, k, stride)
        pl, pr = same_pad(wd, k, stride)
    else:
        pt = pb = pl = pr = 0
    xp = np.pad(x, ((pt, pb), (pl, pr), (0, 0)))
    ho = (h + pt + pb - k) // stride + 1
    wo = (wd + pl + pr - k) // stride + 1
    if depthwise:
        out = np.zeros((ho, wo, c))
        for ky in range(k):
            for kx in range(k):
                out += xp[ky:ky + stride * (ho - 1) + 1:stride,
                          kx:kx + stride * (wo - 1) + 1:stride, :] * w[0, ky, kx, :]
        return out + b
    cols = np.empty((ho, wo, k, k, c))
    for ky in range(k):
        for kx in range(k):
            cols[:, :, ky, kx, :] = xp[ky:ky + stride * (ho - 1) + 1:stride,
                                       kx:kx + stride * (wo - 1) + 1:stride, :]
    return (cols.reshape(ho * wo, -1) @ w.reshape(w.shape[0], -1).T).reshape(ho, wo, -1) + b


def resize_half_pixel(x, oh, ow):
    """TFLite RESIZE_BILINEAR, half_pixel_centers: src = (dst + 0.5) * scale - 0.5, the low
    index clamped at 0 and the high one at size - 1."""
    h, w, _ = x.shape

    def axis(o, n):
        s = (np.arange(o) + 0.5) * (n / o) - 0.5
        i0 = np.floor(s)
        f = s - i0
        lo = np.clip(i0, 0, n - 1).astype(int)
        hi = np.clip(i0 + 1, 0, n - 1).astype(int)
        return lo, hi, f

    y0, y1, fy = axis(oh, h)
    x0, x1, fx = axis(ow, w)
    top = x[y0][:, x0] * (1 - fx)[None, :, None] + x[y0][:, x1] * fx[None, :, None]
    bot = x[y1][:, x0] * (1 - fx)[None, :, None] + x[y1][:, x1] * fx[None, :, None]
    return top * (1 - fy)[:, None, None] + bot * fy[:, None, None]


def load_tflite(name):
    with open(os.path.join(SRC_DIR, name), "rb") as f:
        return F.TFLite(f.read())


def run_tflite(m, x):
    """x (192, 192, 3) float -> list of the file's outputs, flattened, float64."""
    vals = {m.inputs[0]: np.asarray(x, np.float64)}
    for t in m.tensors:
        if t.data is not None:
            vals[t.index] = t.data
    for op in m.ops:
        ins = [vals.get(i) for i in op.inputs if i >= 0]
        o = op.outputs[0]
        if op.name == "DEQUANTIZE":
            vals[o] = ins[0].astype(np.float64)
        elif op.name == "CONV_2D":
            vals[o] = conv2d(ins[0], ins[1], ins[2], op.opt(2, "i"), op.opt(0, "b"), False)
        elif op.name == "DEPTHWISE_CONV_2D":
            vals[o] = conv2d(ins[0], ins[1], ins[2], op.opt(2, "i"), op.opt(0, "b"), True)
        elif op.name == "RELU":
            vals[o] = np.maximum(ins[0], 0)
        elif op.name == "PRELU":
            a = ins[1].astype(np.float64).reshape(-1)
            vals[o] = np.where(ins[0] < 0, ins[0] * a, ins[0])
        elif op.name == "ADD":
            vals[o] = ins[0] + ins[1]
        elif op.name == "MAX_POOL_2D":
            x0 = ins[0]
            s, k = op.opt(2, "i"), op.opt(4, "i")
            h, w, c = x0.shape
            ho, wo = h // s, w // s
            assert k == s and h % s == 0 and w % s == 0
            vals[o] = x0.reshape(ho, s, wo, s, c).max(axis=(1, 3))
        elif op.name == "PAD":
            p = ins[1]
            vals[o] = np.pad(ins[0], [tuple(r) for r in p[1:]])
        elif op.name == "RESIZE_BILINEAR":
            oh, ow = [int(v) for v in ins[1]]
            vals[o] = resize_half_pixel(ins[0], oh, ow)
        elif op.name == "RESHAPE":
            vals[o] = ins[0]
        else:
            raise SystemExit("face_reference: op %s" % op.name)
    return [np.asarray(vals[o]).reshape(-1) for o in m.outputs]


# ---- the resampler of src/face/warp.c ----------------------------------------------------

def box_shrink(img, f):
    """u8 (H, W, C) -> u8 (ceil(H/f), ceil(W/f), C): the mean of each f x f block (edge blocks
    over the pixels they have), rounded half up in integers."""
    h, w, c = img.shape
    ho, wo = -(-h // f), -(-w // f)
    pad = np.zeros((ho * f, wo * f, c), np.int64)
    cnt = np.zeros((ho * f, wo * f, 1), np.int64)
    pad[:h, :w] = img
    cnt[:h, :w] = 1
    s = pad.reshape(ho, f, wo, f, c).sum(axis=(1, 3))
    n = cnt.reshape(ho, f, wo, f, 1).sum(axis=(1, 3))
    return ((2 * s + n) // (2 * n)).astype(np.uint8)


def cubic(t):
    t = np.abs(t)
    a = -0.5
    return np.where(t < 1, ((a + 2) * t - (a + 3)) * t * t + 1,
                    np.where(t < 2, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0))


def reflect(i, n):
    if n == 1:
        return np.zeros_like(i)
    p = 2 * (n - 1)
    i = np.mod(i, p)
    return np.where(i >= n, p - i, i)


def tent(t):
    return np.maximum(0.0, 1.0 - np.abs(t))


def warp(img, A, ow, oh, letterbox=False, linear=False):
    """img u8 (H, W, C); A 2x3: src = A @ (x + 0.5, y + 0.5, 1), pixel centres at +0.5.
    Returns float64 (oh, ow, C). Shrinking by s = sqrt|det|: a box shrink by f = floor(s)
    when s >= 2, then the cubic (with linear, the tent: bilinear) widened by
    r = max(1, s / f). Taps outside the image are reflected (np.pad 'reflect': -1 -> 1), or,
    with letterbox, clamped, and a pixel whose centre falls outside the image is 0."""
    A = np.asarray(A, np.float64)
    s = math.sqrt(abs(A[0, 0] * A[1, 1] - A[0, 1] * A[1, 0]))
    f = int(math.floor(s)) if s >= 2 else 1
    h, w, c = img.shape
    src = img
    if f > 1:
        src = box_shrink(img, f)
        A = A / f
    sh, sw = src.shape[:2]
    r = max(1.0, s / f)
    X, Y = np.meshgrid(np.arange(ow) + 0.5, np.arange(oh) + 0.5)
    u = A[0, 0] * X + A[0, 1] * Y + A[0, 2] - 0.5   # in pixel-index units
    v = A[1, 0] * X + A[1, 1] * Y + A[1, 2] - 0.5
    kernel, support = (tent, 1) if linear else (cubic, 2)
    n = int(math.ceil(support * r)) * 2   # taps per axis, covering |d| < support r
    ju = np.floor(u).astype(np.int64) - n // 2 + 1
    jv = np.floor(v).astype(np.int64) - n // 2 + 1
    srcf = src.astype(np.float64)
    acc = np.zeros((oh, ow, c))
    wsum_u = np.zeros((oh, ow))
    wsum_v = np.zeros((oh, ow))
    wus = [kernel((u - (ju + i)) / r) for i in range(n)]
    wvs = [kernel((v - (jv + i)) / r) for i in range(n)]
    for i in range(n):
        wsum_u += wus[i]
        wsum_v += wvs[i]
    for a in range(n):
        yy = jv + a
        yy = np.clip(yy, 0, sh - 1) if letterbox else reflect(yy, sh)
        for b in range(n):
            xx = ju + b
            xx = np.clip(xx, 0, sw - 1) if letterbox else reflect(xx, sw)
            acc += srcf[yy, xx] * (wvs[a] * wus[b])[:, :, None]
    out = acc / (wsum_u * wsum_v)[:, :, None]
    if letterbox:
        inside = (u + 0.5 >= 0) & (u + 0.5 < sw * 1.0) & (v + 0.5 >= 0) & (v + 0.5 < sh * 1.0)
        # the box-shrunk image covers ceil(H/f) blocks; the letterbox edge is the image's own
        inside &= (u + 0.5 < w / f) & (v + 0.5 < h / f)
        out = np.where(inside[:, :, None], out, 0.0)
    return out


def to_u8(x):
    return np.floor(np.clip(x, 0, 255) + 0.5).astype(np.uint8)


# ---- the pipeline -------------------------------------------------------------------------

SIDE = 192
EYE_L = [33, 160, 158, 133, 153, 144]    # image-left eye (the subject's right)
EYE_R = [362, 385, 387, 263, 373, 380]
MOUTH = [61, 291]


def letterbox_matrix(w, h):
    """dst (192) -> src: scale = 192 / long side, centred."""
    scale = SIDE / max(w, h)
    ox, oy = (SIDE - w * scale) / 2, (SIDE - h * scale) / 2
    return np.array([[1 / scale, 0, -ox / scale], [0, 1 / scale, -oy / scale]]), scale, ox, oy


def iou(a, b):
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    u = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / u if u > 0 else 0.0


def decode(reg, logits, min_score=0.6):
    """Anchors 48x48, stride 4, centre (x + 0.5) / 48, unit size: -> list of (score, 16
    values in letterbox pixels: x0 y0 x1 y1 then 6 keypoints)."""
    reg = reg.reshape(48 * 48, 16)
    logits = np.clip(logits.reshape(-1), -100, 100)
    scores = 1 / (1 + np.exp(-logits))
    out = []
    for i in np.nonzero(scores >= min_score)[0]:
        ax, ay = (i % 48 + 0.5) * 4, (i // 48 + 0.5) * 4
        r = reg[i]
        cx, cy, bw, bh = r[0] + ax, r[1] + ay, r[2], r[3]
        v = [cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2]
        for k in range(6):
            v += [r[4 + 2 * k] + ax, r[5 + 2 * k] + ay]
        out.append((float(scores[i]), np.array(v)))
    return out


def weighted_nms(dets, thresh=0.3):
    dets = sorted(dets, key=lambda d: -d[0])
    out = []
    while dets:
        best = dets[0]
        group = [d for d in dets if iou(best[1], d[1]) > thresh]
        rest = [d for d in dets if iou(best[1], d[1]) <= thresh]
        wsum = sum(d[0] for d in group)
        v = sum(d[0] * d[1] for d in group) / wsum
        out.append((best[0], v))
        dets = rest
    return out


def detect(img, m_det, min_score=0.6):
    h, w = img.shape[:2]
    A, scale, ox, oy = letterbox_matrix(w, h)
    inp = to_u8(warp(img, A, SIDE, SIDE, letterbox=True))
    reg, logit = run_tflite(m_det, inp / 127.5 - 1.0)
    faces = []
    for score, v in weighted_nms(decode(reg, logit, min_score)):
        pts = v.reshape(-1, 2)
        pts = (pts - [ox, oy]) / scale
        faces.append((score, pts))   # pts[0:2] box corners, pts[2:8] keypoints
    faces.sort(key=lambda f: -(f[1][1, 0] - f[1][0, 0]) * (f[1][1, 1] - f[1][0, 1]))
    return faces, inp


def roi_matrix(pts):
    """The mesh crop: centre of the box, side 1.5 x its long side, rotated by keypoint 0 -> 1."""
    (x0, y0), (x1, y1) = pts[0], pts[1]
    c = np.array([(x0 + x1) / 2, (y0 + y1) / 2])
    side = 1.5 * max(x1 - x0, y1 - y0)
    e0, e1 = pts[2], pts[3]
    th = math.atan2(e1[1] - e0[1], e1[0] - e0[0])
    ux = np.array([math.cos(th), math.sin(th)]) * side / SIDE
    uy = np.array([-math.sin(th), math.cos(th)]) * side / SIDE
    org = c - SIDE / 2 * ux - SIDE / 2 * uy
    return np.array([[ux[0], uy[0], org[0]], [ux[1], uy[1], org[1]]])


def mesh(img, pts, m_mesh):
    A = roi_matrix(pts)
    inp = to_u8(warp(img, A, SIDE, SIDE, linear=True))
    lm, presence = run_tflite(m_mesh, inp / 255.0)
    lm = lm.reshape(468, 3)
    xy = lm[:, :2] @ A[:, :2].T + A[:, 2]
    return xy, float(presence[0]), inp


def ffhq_quad(xy, expand=1.3):
    el = xy[EYE_L].mean(axis=0)
    er = xy[EYE_R].mean(axis=0)
    mouth = (xy[MOUTH[0]] + xy[MOUTH[1]]) / 2
    eye_avg = (el + er) / 2
    e2e = er - el
    e2m = mouth - eye_avg
    x = e2e - np.array([-e2m[1], e2m[0]])
    x /= np.hypot(*x)
    x *= max(np.hypot(*e2e) * 2.0, np.hypot(*e2m) * 1.8) * expand
    y = np.array([-x[1], x[0]])
    c = eye_avg + e2m * 0.1
    return np.array([c - x - y, c - x + y, c + x + y, c + x - y])


def box_radii(sigma):
    """Three box radii whose cascade approximates a Gaussian of sigma (Kovesi)."""
    wl = int(math.floor(math.sqrt(12 * sigma * sigma / 3 + 1)))
    wl -= wl % 2 == 0
    m = int(round((12 * sigma * sigma - 3 * wl * wl - 12 * wl - 9) / (-4 * wl - 4)))
    return [((wl if i < m else wl + 2) - 1) // 2 for i in range(3)]


def box_blur(a, r, axis):
    """A (2r+1) box along axis, scipy.ndimage's 'reflect' border (d c b a | a b c d)."""
    if r == 0:
        return a
    n = a.shape[axis]
    idx = np.arange(-r, n + r)
    idx = np.mod(idx, 2 * n)
    idx = np.where(idx >= n, 2 * n - 1 - idx, idx)
    ext = np.take(a, idx, axis=axis)
    c = np.cumsum(ext, axis=axis, dtype=np.float64)
    c = np.concatenate([np.zeros_like(np.take(c, [0], axis=axis)), c], axis=axis)
    hi = np.take(c, np.arange(2 * r + 1, n + 2 * r + 1), axis=axis)
    lo = np.take(c, np.arange(0, n), axis=axis)
    return (hi - lo) / (2 * r + 1)


def ffhq_fill(img, f, quad):
    """src/face/fill.c: NVlabs' recreate_aligned_images padding, in the pixels of the image
    box-shrunk by f (the warp's own shrink), its Gaussian as three box blurs per axis.
    Returns (padded u8 image, origin) or (None, None) when the quad stays inside."""
    q = math.hypot(*(quad[3] - quad[0])) / f
    sq = quad / f
    h0, w0 = -(-img.shape[0] // f), -(-img.shape[1] // f)
    border = max(int(np.rint(q * 0.1)), 3)
    bx0, by0 = int(np.floor(sq[:, 0].min())), int(np.floor(sq[:, 1].min()))
    bx1, by1 = int(np.ceil(sq[:, 0].max())), int(np.ceil(sq[:, 1].max()))
    cx0, cy0 = max(bx0 - border, 0), max(by0 - border, 0)
    cx1, cy1 = min(bx1 + border, w0), min(by1 + border, h0)
    cw, ch = cx1 - cx0, cy1 - cy0
    pad = [max(-(bx0 - cx0) + border, 0), max(-(by0 - cy0) + border, 0),
           max((bx1 - cx0) - cw + border, 0), max((by1 - cy0) - ch + border, 0)]
    if max(pad) <= border - 4:
        return None, None
    pad = [max(p, int(np.rint(q * 0.3)), 1) for p in pad]
    small = box_shrink(img, f) if f > 1 else img
    crop = small[cy0:cy1, cx0:cx1].astype(np.float64)
    a = np.pad(crop, ((pad[1], pad[3]), (pad[0], pad[2]), (0, 0)), "reflect")
    h, w, _ = a.shape
    y, x, _ = np.ogrid[:h, :w, :1]
    mask = np.maximum(1.0 - np.minimum(x / pad[0], (w - 1 - x) / pad[2]),
                      1.0 - np.minimum(y / pad[1], (h - 1 - y) / pad[3]))
    blur = a
    for r in box_radii(q * 0.02):
        blur = box_blur(blur, r, 1)
    for r in box_radii(q * 0.02):
        blur = box_blur(blur, r, 0)
    a = a + (blur - a) * np.clip(mask * 3.0 + 1.0, 0.0, 1.0)
    a = a + (np.median(a, axis=(0, 1)) - a) * np.clip(mask, 0.0, 1.0)
    return np.clip(np.rint(a), 0, 255).astype(np.uint8), (cx0 - pad[0], cy0 - pad[1])


def align(img, quad, size=512):
    tl, bl, tr = quad[0], quad[1], quad[3]
    A = np.array([[(tr - tl)[0] / size, (bl - tl)[0] / size, tl[0]],
                  [(tr - tl)[1] / size, (bl - tl)[1] / size, tl[1]]])
    s = math.sqrt(abs(A[0, 0] * A[1, 1] - A[0, 1] * A[1, 0]))
    f = int(math.floor(s)) if s >= 2 else 1
    padded, origin = ffhq_fill(img, f, quad)
    if padded is not None:
        A = A / f
        A[:, 2] -= origin
        img = padded
    return to_u8(warp(img, A, size, size))


def load_rgb(path):
    return np.asarray(Image.open(path).convert("RGB"))


# ---- fixtures -----------------------------------------------------------------------------

def write_agff(path, kind, inp, outs):
    with open(path, "wb") as f:
        f.write(b"AGFF" + struct.pack("<III", 1, kind, SIDE))
        f.write(np.ascontiguousarray(inp, np.uint8).tobytes())
        f.write(struct.pack("<I", len(outs)))
        for o in outs:
            o = np.asarray(o, "<f4").reshape(-1)
            f.write(struct.pack("<I", o.size))
            f.write(o.tobytes())


def fixtures():
    out_dir = os.path.join(REPO_ROOT, "tests", "fixtures", "face")
    os.makedirs(out_dir, exist_ok=True)
    m_det = load_tflite("face_detection_full_range.tflite")
    m_mesh = load_tflite("face_landmark.tflite")
    data = os.path.join(REPO_ROOT, "tests", "data")
    for photo in ("astronaut", "chelsea"):
        img = load_rgb(os.path.join(data, photo + ".png"))
        faces, inp = detect(img, m_det)
        reg, logit = run_tflite(m_det, inp / 127.5 - 1.0)
        write_agff(os.path.join(out_dir, "detect_%s.agff" % photo), 0, inp, [reg, logit])
        print("detect_%s.agff: %d faces %s" % (photo, len(faces),
                                               [round(f[0], 3) for f in faces]))
        if photo == "astronaut":
            xy, presence, minp = mesh(img, faces[0][1], m_mesh)
            lm, pr = run_tflite(m_mesh, minp / 255.0)
            write_agff(os.path.join(out_dir, "mesh_%s.agff" % photo), 1, minp, [lm, pr])
            quad = ffhq_quad(xy)
            crop = align(img, quad)
            Image.fromarray(crop).save(os.path.join(out_dir, "portrait_astronaut.png"))
            with open(os.path.join(out_dir, "portrait_astronaut.txt"), "w") as f:
                f.write("# face_reference.py: FFHQ quad (TL, BL, BR, TR) of astronaut.png, "
                        "presence logit %.4f\n" % presence)
                f.write(" ".join("%.4f" % v for v in quad.reshape(-1)) + "\n")
            print("mesh_astronaut.agff: presence %.3f, quad %s" % (presence, quad.round(2)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixtures", action="store_true")
    ap.add_argument("images", nargs="*")
    args = ap.parse_args()
    if args.fixtures:
        fixtures()
    m_det = load_tflite("face_detection_full_range.tflite") if args.images else None
    for path in args.images:
        img = load_rgb(path)
        faces, _ = detect(img, m_det)
        print(path, len(faces))
        for s, pts in faces:
            print("  %.3f box %s kp %s" % (s, pts[:2].round(1).tolist(),
                                         pts[2:].round(1).tolist()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
