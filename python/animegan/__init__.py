"""animegan: photo-to-anime (AnimeGANv2/v3) on the CPU, the animegan.c engine in Python.

A Gradio or Flask app swaps its PyTorch model call for two lines::

    model = animegan.Model("hayao")          # once: loads the weights
    anime = model(photo)                     # numpy uint8 (H, W, 3|4) or a PIL image

The call releases the GIL while it runs. Memory is the C library's: weights loaded once per
file and shared by every Model over it, and one activation arena per engine, planned for the
image size and reused while the size stays the same (nothing grows with the number of calls).

Threads: a Model owns a pool of at most `engines` engines (default 1). A call takes an idle
engine, or makes one while fewer than `engines` exist, or waits (GIL released) for one to be
returned. So at most `engines` conversions of one Model run at once, and at most `engines`
arenas exist; with the default, calls from several threads run one after another.

Errors are animegan.Error subclasses with the library's one-line message: InputError (bad
image or option; also a ValueError), ModelError (bad or unknown model file), FileError (a file
that cannot be read or written; also an OSError), OutOfMemoryError (also a MemoryError).
"""

import os
import threading
import weakref

import numpy as np

# The models the package carries (copied from the repository's models/ at build) come after
# the directories the user names: set before the library first reads the search path.
_MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
if os.path.isdir(_MODELS):
    _path = os.environ.get("ANIMEGAN_MODEL_PATH", "")
    if _MODELS not in _path.split(":"):
        os.environ["ANIMEGAN_MODEL_PATH"] = f"{_path}:{_MODELS}" if _path else _MODELS

from . import _core  # noqa: E402
from ._core import Error, FileError, InputError, ModelError, OutOfMemoryError

__all__ = [
    "Model", "faces", "fuse", "convert_file", "bundled_models", "Error", "InputError", "ModelError",
    "FileError", "OutOfMemoryError", "memory", "decode", "encode",
]
__version__ = "0.1.0"


# ---- weights, shared per file ------------------------------------------------------------------


class _Weights:
    """One loaded model file (a Python object so that the cache can hold it weakly)."""

    __slots__ = ("core", "info", "__weakref__")

    def __init__(self, core):
        self.core = core
        self.info = core.info()


_weights_lock = threading.Lock()
_weights_cache = weakref.WeakValueDictionary()  # key -> _Weights, alive while a Model holds it


def _file_key(path):
    st = os.stat(path)
    return ("file", os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _looks_like_path(name):
    return "/" in name or name.lower().endswith((".pt", ".pth", ".safetensors", ".onnx"))


def _shared_weights(name_or_path, scale=0):
    """The weights of a name or file, loaded once while any Model uses them (`scale`: the
    file of a bundled upscaler family, 'esrgan-slim' at 2, say)."""
    name_or_path = os.fspath(name_or_path)
    if not isinstance(name_or_path, str) or not name_or_path:
        raise ModelError("model: expected a bundled name or a file path")
    with _weights_lock:
        key = None
        if _looks_like_path(name_or_path) and os.path.exists(name_or_path):
            key = _file_key(name_or_path)
        elif not _looks_like_path(name_or_path):
            key = ("name", name_or_path, scale)
        hit = _weights_cache.get(key) if key else None
        if hit is not None:
            return hit
        weights = _Weights(_core.Weights(name_or_path, scale))
        # A bundled name and the path of its file are the same weights.
        try:
            file_key = _file_key(weights.info["path"])
        except OSError:
            file_key = None
        if file_key is not None:
            hit = _weights_cache.get(file_key)
            if hit is not None:
                weights = hit
            _weights_cache[file_key] = weights
        if key is not None:
            _weights_cache[key] = weights
        return weights


# ---- engines, pooled per Model -----------------------------------------------------------------


class _EnginePool:
    """At most `limit` engines over one set of weights; callers wait for an idle one."""

    def __init__(self, weights, options, limit):
        self._weights = weights
        self._options = options
        self._limit = limit
        self._idle = []
        self._created = 0
        self._cond = threading.Condition()
        self._first = self._make()  # options are checked now, not at the first call
        self._idle.append(self._first)

    def _make(self):
        engine = _core.Engine(self._weights.core, **self._options)
        self._created += 1
        return engine

    def acquire(self):
        with self._cond:
            while not self._idle and self._created >= self._limit:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._created += 1  # reserved; made outside the lock
        try:
            return _core.Engine(self._weights.core, **self._options)
        except BaseException:
            with self._cond:
                self._created -= 1
                self._cond.notify()
            raise

    def release(self, engine):
        with self._cond:
            self._idle.append(engine)
            self._cond.notify()

    def arena_bytes(self):
        with self._cond:
            return sum(e.arena_bytes for e in self._idle)


# ---- images in and out ---------------------------------------------------------------------


def _as_pixels(image):
    """(array, kind) of an input: a C-contiguous uint8 (H, W, 3|4) array, no copy when the
    layout allows; kind says how to return the result ("numpy" or a PIL mode)."""
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8:
            raise InputError(f"image: expected uint8 pixels, got {image.dtype}")
        if image.ndim != 3 or image.shape[2] not in (3, 4):
            raise InputError(f"image: expected shape (height, width, 3 or 4), got {image.shape}")
        return np.ascontiguousarray(image), "numpy"
    if hasattr(image, "mode") and hasattr(image, "getbands"):  # a PIL image
        if image.mode not in ("RGB", "RGBA"):
            has_alpha = "A" in image.getbands() or "transparency" in image.info
            image = image.convert("RGBA" if has_alpha else "RGB")
        return np.asarray(image), image.mode
    raise InputError(f"image: expected a numpy uint8 array or a PIL image, got "
                     f"{type(image).__name__}")


def _result(pixels, kind):
    array = np.asarray(pixels)  # a view of the library's buffer, which it keeps alive
    if kind == "numpy":
        return array
    from PIL import Image

    return Image.fromarray(array, "RGBA" if array.shape[2] == 4 else "RGB")


def _check_portrait(portrait):
    if portrait is True:
        return "face"
    if portrait is False:
        return None
    if portrait is not None and portrait != "paste":  # the step table's choices, and these
        _core.choice("portrait", portrait, ("paste", "None"))
    return portrait


# ---- the model -----------------------------------------------------------------------------


class Model:
    """A style, face restorer or upscaler, loaded once, callable on images.

    Model(name_or_path='hayao', precision='auto', threads=0, backend='onednn',
          upsample=None, engines=1, scale=0)

    name_or_path: a bundled name ('hayao', 'hayao-v3', 'shinkai-v3', 'cute-v3', ...: see
        bundled_models()) or a .safetensors, PyTorch .pt or .onnx file (a style, as
        `animegan convert -m`); a GPEN, GFPGAN or CodeFormer checkpoint (a restorer, as
        `animegan restore --model`); a bundled upscaler family ('esrgan-slim', 'esrgan-medium': its file
        of `scale`) or an upscaler's .pth or .safetensors (ESRGAN/RRDBNet in any key layout,
        Compact, SPAN, RealPLKSR: as `animegan upscale --model`).
        `info['kind']` says which: 'generator', 'restorer' or 'upscaler'; calling the Model
        stylises, restores (Model.restore) or upscales (Model.upscale).
    precision: 'fp32', 'bf16', 'int8' or 'auto' (the fastest native on this CPU that meets
        its quality bar; `precision` says what it resolved to).
    threads: worker threads of each engine, 0 = every core this process may use.
    engines: how many calls may run at once (each has its own arena); more callers wait.
    scale: upscalers: the bundled family's file of that scale (default 4) and the default
        scale of a call.
    """

    def __init__(self, name_or_path="hayao", precision="auto", threads=0, backend="onednn",
                 upsample=None, engines=1, scale=0):
        if not isinstance(engines, int) or engines < 1 or engines > 64:
            raise InputError("engines: must be 1 to 64")
        if not isinstance(threads, int) or threads < 0 or threads > 4096:
            raise InputError("threads: must be 0 to 4096")
        _, _, lo, hi, default, _ = next(r for r in _core.step_options() if r[0] == "scale")
        if not isinstance(scale, int) or not (scale == default or lo <= scale <= hi):
            raise InputError(f"scale: must be {lo:g} to {hi:g} (0: the network's own)")
        self._weights = _shared_weights(name_or_path, scale)
        self.kind = self._weights.info["kind"]
        self.scale = scale
        options = {"precision": precision, "threads": threads, "backend": backend,
                   "upsample": upsample}
        self._pool = _EnginePool(self._weights, options, engines)
        self.precision = self._pool._first.precision
        self.precision_note = self._pool._first.precision_note
        self.engines = engines

    @property
    def info(self):
        """The model's description: name, path, format, architecture, style, kind, licence,
        param_count, weight_bytes, min_side, upsample."""
        return dict(self._weights.info)

    @property
    def name(self):
        return self._weights.info["name"]

    def __repr__(self):
        return f"animegan.Model({self.name!r}, precision={self.precision!r})"

    def __call__(self, image, portrait=None, side_by_side=False, max_side=1024, size=512,
                 max_faces=0):
        """Stylise `image`: a numpy uint8 (H, W, 3 or 4) array or a PIL image; returns the same
        kind, same size and bands (alpha copied back), unless:

        portrait: None (the whole image), 'center' (face2paint: the centre square resized to
            `size`), 'face' (the FFHQ-aligned crop of the largest face, the centre square
            when there is none) or 'paste' (the whole image, each face also stylised as an
            aligned `size` crop and pasted back).
        side_by_side: the input and the result next to each other (twice the width).
        max_side: downscale (Lanczos, as the CLI) when the long side exceeds it; 0 = never.
        max_faces: faces used by 'paste', largest first (0: 8).

        A numpy result is a view of the library's buffer (no copy). A restorer's Model
        restores (`restore`), an upscaler's upscales (`upscale`), with their defaults."""
        if self.kind == "restorer":
            return self.restore(image)[0]
        if self.kind == "upscaler":
            return self.upscale(image)
        pixels, kind = _as_pixels(image)
        portrait = _check_portrait(portrait)
        detector = _detector() if portrait in ("face", "paste") else None
        engine = self._pool.acquire()
        try:
            if detector is None:
                out = engine.stylize(pixels, bool(side_by_side), max_side, portrait, size)
            else:
                with _detector_lock:
                    out = engine.stylize(pixels, bool(side_by_side), max_side, portrait, size,
                                         detector=detector, max_faces=max_faces)
        finally:
            self._pool.release(engine)
        return _result(out, kind)

    def restore(self, image, fidelity=1.0, max_faces=8, aligned=False, codeformer_fidelity=None):
        """A restorer's Model: the faces of `image` restored and pasted back, as `animegan
        restore`; returns (image, faces restored). fidelity: 0-1, the restored face's weight
        against the original (GPEN's alpha). aligned: `image` is an aligned face crop,
        resized to the network's size and restored whole (the result is that size).
        codeformer_fidelity: 0-1, a CodeFormer's w (lower restores more; default 0.5); given to
        a GPEN or GFPGAN Model, InputError (a ValueError)."""
        if self.kind != "restorer":
            raise InputError(f"restore: {self.name} is a {self.kind}, not a restorer")
        arch = self._weights.info["architecture"]
        if codeformer_fidelity is None:
            codeformer_fidelity = 0.5
        elif arch != "codeformer":
            raise InputError("codeformer_fidelity applies only to a CodeFormer checkpoint: "
                             f"{self.name} is {'GPEN' if arch == 'gpen' else 'GFPGAN'}")
        pixels, kind = _as_pixels(image)
        detector = None if aligned else _detector()
        engine = self._pool.acquire()
        try:
            if aligned:
                out, n = engine.restore(pixels, None, float(fidelity), max_faces, True,
                                        float(codeformer_fidelity))
            else:  # the detector is one per process: held for the whole restoration
                with _detector_lock:
                    out, n = engine.restore(pixels, detector, float(fidelity), max_faces, False,
                                            float(codeformer_fidelity))
        finally:
            self._pool.release(engine)
        return _result(out, kind), n

    def upscale(self, image, scale=None, tile=0, max_mb=1024):
        """An upscaler's Model: `image` upscaled `scale` times (default: the Model's scale,
        else the network's own; another than the network's resizes its result with
        Lanczos3), tile by tile within max_mb of window memory, as `animegan upscale`."""
        if self.kind != "upscaler":
            raise InputError(f"upscale: {self.name} is a {self.kind}, not an upscaler")
        pixels, kind = _as_pixels(image)
        engine = self._pool.acquire()
        try:
            out = engine.upscale(pixels, self.scale if scale is None else scale, tile, max_mb)
        finally:
            self._pool.release(engine)
        return _result(out, kind)

    def arena_bytes(self):
        """Bytes of the arenas of the idle engines (each planned for its last image size)."""
        return self._pool.arena_bytes()


# ---- faces ---------------------------------------------------------------------------------

_detector_lock = threading.Lock()  # one detector, one caller at a time (it is fast: ~ms)
_detector_object = None


def _detector():
    global _detector_object
    with _detector_lock:
        if _detector_object is None:
            _detector_object = _core.Detector()
        return _detector_object


def faces(image, min_score=0.6, max_faces=8, landmarks=True, single_pass=False):
    """The faces the bundled detector finds in `image` (numpy or PIL), largest first, as
    dicts: score, box (x0, y0, x1, y1), keypoints (6 (x, y): right eye, left eye, nose tip,
    mouth centre, right ear, left ear), quad (the FFHQ crop's 4 corners), presence, and
    landmarks (468 (x, y), or None when FaceMesh did not confirm the face). Coordinates are
    pixels of `image`."""
    pixels, _ = _as_pixels(image)
    detector = _detector()
    with _detector_lock:
        return detector.detect(pixels, min_score, max_faces, landmarks, single_pass)


_fuse_upscaler_model = None
_fuse_upscaler_lock = threading.Lock()


def _fuse_upscaler():
    """The bundled upscaler that sharpens a small source face (loaded at the first need)."""
    global _fuse_upscaler_model
    with _fuse_upscaler_lock:
        if _fuse_upscaler_model is None:
            _fuse_upscaler_model = Model("esrgan-slim", scale=4)
        return _fuse_upscaler_model


def fuse(source, target, source_face=1, target_face=1, shape_ratio=0.7, texture_ratio=0.7,
         mode="normal", smooth=0.0, brightness=0.0, contrast=0.0, saturation=0.0, size=0,
         enhance="auto", restore_model=None, upscaler=None, paint_occluders=False,
         source_like=None, target_like=None):
    """`animegan fuse`: face `source_face` of `source` (1 = the largest) fused into face
    `target_face` of `target` (numpy or PIL; the result is `target`'s kind). shape_ratio and
    texture_ratio 0-1 (0: the target's), mode 'normal' (seamless), 'blend' or 'overlay';
    smooth 0-1; brightness, contrast, saturation -1..1; size: the output's long side (0: the
    target's own). enhance: a source face smaller than the target's is sharpened first,
    'auto' (with `restore_model`, a restorer's Model, when given, else `upscaler`, an
    upscaler's Model, default the bundled esrgan-slim), 'none', 'restore' or 'upscale'.
    paint_occluders: paint the face over what covers the target's (hair, a hand; by default
    kept). Pixels away from the face are the target's, bit for bit. Stylise the result with
    a Model to get `animegan fuse --style`. target_like (source_like): a photo
    (numpy or PIL) of a person: the face of `target` (`source`) most like its largest face
    (dlib's face descriptor, the bundled face-recognition), instead of target_face
    (source_face); `animegan fuse --target-like`."""
    _core.choice("enhance", enhance)  # the step table's choices (InputError before any work)
    if enhance == "restore" and restore_model is None:
        raise InputError("enhance='restore' needs restore_model (a restorer's Model)")
    for name, m, want in (("restore_model", restore_model, "restorer"),
                          ("upscaler", upscaler, "upscaler")):
        if m is not None and (not isinstance(m, Model) or m.kind != want):
            raise InputError(f"{name}: expected a {want}'s Model")
    if restore_model is None and upscaler is None and enhance in ("auto", "upscale"):
        upscaler = _fuse_upscaler()
    s, _ = _as_pixels(source)
    t, kind = _as_pixels(target)
    likes = [None if p is None else _as_pixels(p)[0] for p in (source_like, target_like)]
    detector = _detector()
    pools = [m._pool for m in (restore_model, upscaler) if m is not None]
    engines = [p.acquire() for p in pools]
    try:
        r = engines[0] if restore_model is not None else None
        u = engines[-1] if upscaler is not None else None
        with _detector_lock:
            out = detector.fuse(s, t, source_face, target_face, shape_ratio, texture_ratio, mode,
                                smooth, brightness, contrast, saturation, size, enhance, r, u,
                                bool(paint_occluders), likes[0], likes[1])
    finally:
        for p, e in zip(pools, engines):
            p.release(e)
    return _result(out, kind)


# ---- files, as the CLI ---------------------------------------------------------------------


def convert_file(src, dst, model="hayao", precision="auto", threads=0, portrait=None,
                 side_by_side=False, max_side=1024, size=512, quality=90, format=None,
                 max_faces=0):
    """`animegan convert SRC -o DST` in-process, with the same defaults and the same bytes:
    decode (EXIF orientation, sRGB, --max-side), stylise, save to a temporary file and
    rename (a failure leaves no DST). `model` is a name, a path or a Model; the format is
    DST's extension unless `format` ('png', 'jpg', 'webp') says."""
    if not isinstance(model, Model):
        model = Model(model, precision=precision, threads=threads)
    portrait = _check_portrait(portrait)
    src, dst = os.fspath(src), os.fspath(dst)
    if os.path.exists(dst) and os.path.exists(src) and os.path.samefile(src, dst):
        raise InputError(f"{src}: writing {dst} would overwrite the input")
    # The centre crop is the decode's own (from the file); the face modes see the photo at
    # up to 4096 px; otherwise max_side applies at decode, as in cli/convert.c.
    centre = portrait in ("center", "centre")
    if portrait == "face":
        max_side = 4096 if max_side and max_side < 4096 else max_side
    pixels = _core.decode_file(src, max_side, 0, centre, size)
    out = model(np.asarray(pixels), portrait=None if centre else portrait,
                side_by_side=side_by_side, max_side=max_side, size=size, max_faces=max_faces)
    _core.save_file(out, dst, format, quality)


def decode(data, max_side=0, max_pixels=0):
    """Decode image bytes (JPEG, PNG, WebP, TIFF, GIF's first frame, HEIF) as the CLI and the
    service do: EXIF orientation applied, 8-bit sRGB, alpha kept; max_side downscales,
    max_pixels refuses a larger header before decoding (InputError). Returns a numpy view of
    the library's buffer. For untrusted uploads: the decoder's sizes are bounded."""
    return np.asarray(_core.decode(data, max_side, max_pixels))


def encode(image, format="png", quality=90):
    """Encode a numpy uint8 (H, W, 3|4) array or PIL image to PNG, JPEG or WebP bytes."""
    pixels, _ = _as_pixels(image)
    return _core.encode(pixels, format, quality)


def bundled_models():
    """Names of the bundled models found on the model search path."""
    return _core.bundled_models()


def memory():
    """Memory figures of the process: allocated (live bytes the library holds through its
    allocator), allocated_peak, rss and rss_peak (bytes)."""
    live, peak = _core.allocated_bytes()
    rss, rss_peak = _core.rss_bytes()
    return {"allocated": live, "allocated_peak": peak, "rss": rss, "rss_peak": rss_peak}
