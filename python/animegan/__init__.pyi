"""Type stub of the animegan package (the engine of animegan.c)."""

from os import PathLike
from typing import Any, Literal, TypedDict, TypeVar, overload

import numpy as np
import numpy.typing as npt

Image = TypeVar("Image", npt.NDArray[np.uint8], Any)  # a numpy uint8 array or a PIL image
Portrait = Literal["face", "center", "centre", "paste"] | bool | None
Precision = Literal["auto", "fp32", "bf16", "int8"]
Format = Literal["png", "jpg", "jpeg", "webp"]

__version__: str

class Error(Exception):
    code: int
    code_name: str

class InputError(Error, ValueError): ...
class ModelError(Error, ValueError): ...
class FileError(Error, OSError): ...
class OutOfMemoryError(Error, MemoryError): ...

class ModelInfo(TypedDict):
    name: str
    path: str
    format: str
    architecture: str
    style: str
    kind: str
    license: str
    param_count: int
    weight_bytes: int
    min_side: int
    upsample: str

class Face(TypedDict):
    score: float
    box: tuple[float, float, float, float]
    keypoints: list[tuple[float, float]]
    quad: list[tuple[float, float]]
    presence: float
    landmarks: list[tuple[float, float]] | None

class Model:
    precision: str
    precision_note: str
    engines: int
    kind: Literal["generator", "restorer", "upscaler"]
    scale: int
    def __init__(
        self,
        name_or_path: str | PathLike[str] = "hayao",
        precision: Precision = "auto",
        threads: int = 0,
        backend: Literal["onednn", "reference"] = "onednn",
        upsample: Literal["asymmetric", "align-corners", "half-pixel"] | None = None,
        engines: int = 1,
        scale: int = 0,
    ) -> None: ...
    @property
    def info(self) -> ModelInfo: ...
    def restore(
        self,
        image: Image,
        fidelity: float = 1.0,
        max_faces: int = 8,
        aligned: bool = False,
        codeformer_fidelity: float = 0.5,
    ) -> tuple[Image, int]: ...
    def upscale(
        self, image: Image, scale: int | None = None, tile: int = 0, max_mb: int = 1024
    ) -> Image: ...
    @property
    def name(self) -> str: ...
    def __call__(
        self,
        image: Image,
        portrait: Portrait = None,
        side_by_side: bool = False,
        max_side: int = 1024,
        size: int = 512,
        max_faces: int = 0,
    ) -> Image: ...
    def arena_bytes(self) -> int: ...

def faces(
    image: npt.NDArray[np.uint8] | Any,
    min_score: float = 0.6,
    max_faces: int = 8,
    landmarks: bool = True,
    single_pass: bool = False,
) -> list[Face]: ...
def fuse(
    source: npt.NDArray[np.uint8] | Any,
    target: Image,
    source_face: int = 1,
    target_face: int = 1,
    shape_ratio: float = 0.7,
    texture_ratio: float = 0.7,
    mode: Literal["normal", "blend", "overlay"] = "normal",
    smooth: float = 0.0,
    brightness: float = 0.0,
    contrast: float = 0.0,
    saturation: float = 0.0,
    size: int = 0,
    enhance: Literal["auto", "none", "restore", "upscale"] = "auto",
    restore_model: Model | None = None,
    upscaler: Model | None = None,
    paint_occluders: bool = False,
    source_like: Image | None = None,
    target_like: Image | None = None,
) -> Image: ...
def convert_file(
    src: str | PathLike[str],
    dst: str | PathLike[str],
    model: str | PathLike[str] | Model = "hayao",
    precision: Precision = "auto",
    threads: int = 0,
    portrait: Portrait = None,
    side_by_side: bool = False,
    max_side: int = 1024,
    size: int = 512,
    quality: int = 90,
    format: Format | None = None,
    max_faces: int = 0,
) -> None: ...
def decode(data: bytes | bytearray | memoryview, max_side: int = 0,
           max_pixels: int = 0) -> npt.NDArray[np.uint8]: ...
def encode(image: npt.NDArray[np.uint8] | Any, format: Format = "png",
           quality: int = 90) -> bytes: ...
def bundled_models() -> list[str]: ...
def memory() -> dict[str, int]: ...
