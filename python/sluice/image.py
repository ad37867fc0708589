"""Built-in image ops (Rust, GIL-free). Images are HWC ``uint8`` arrays until ``normalize`` or
``to_tensor``, which give float32 CHW; a size is ``(height, width)`` or an int (a square for
crops, the shorter side for ``resize``) — torchvision's conventions. Random ops draw from the
per-sample generator of (seed, epoch, sample index, op), so results do not depend on threads.

>>> import sluice, sluice.image as I
>>> ds = (sluice.read_images("examples/fixtures/images")
...       .map(I.decode()).map(I.random_resized_crop(64)).map(I.horizontal_flip())
...       .map(I.normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))).batch(4))
>>> next(iter(ds))["image"].shape
(4, 3, 64, 64)
"""

from __future__ import annotations

import json
from typing import Any, Sequence, Union

from ._native import Op

Size = Union[int, Sequence[int]]


def _op(name: str, **params: Any) -> Op:
    return Op(json.dumps({"op": f"image.{name}", **{k: v for k, v in params.items() if v is not None}}))


def _size(size: Size) -> Any:
    if isinstance(size, int):
        return size
    h, w = size
    return [int(h), int(w)]


def _pair(v: Union[float, Sequence[float]]) -> list:
    if isinstance(v, (int, float)):
        return [float(v), float(v)]
    lo, hi = v
    return [float(lo), float(hi)]


def decode(mode: str = "RGB", *, field: str = "bytes", out: str = "image", max_pixels: int | None = None) -> Op:
    """Decodes JPEG (baseline/progressive, gray, CMYK, EXIF orientation) or PNG (8/16-bit)
    bytes into an HWC uint8 image; ``mode`` is "RGB" or "L". Images above ``max_pixels``
    (decompression-bomb limit) are rejected before allocation."""
    return _op("decode", mode=mode, field=field, out=out, max_pixels=max_pixels)


def resize(size: Size, interpolation: str = "bilinear", antialias: bool = True, *, field: str = "image") -> Op:
    """Resizes like torchvision/Pillow (an int sets the shorter side)."""
    return _op("resize", size=_size(size), interpolation=interpolation, antialias=antialias, field=field)


def center_crop(size: Size, *, field: str = "image") -> Op:
    """Crops the center (zero-pads when the image is smaller)."""
    return _op("center_crop", size=_size(size), field=field)


def random_resized_crop(
    size: Size,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3 / 4, 4 / 3),
    interpolation: str = "bilinear",
    *,
    field: str = "image",
) -> Op:
    """torchvision's RandomResizedCrop: 10 attempts at a random area/aspect, then a center crop."""
    return _op("random_resized_crop", size=_size(size), scale=_pair(scale), ratio=_pair(ratio),
               interpolation=interpolation, field=field)


def horizontal_flip(p: float = 0.5, *, field: str = "image") -> Op:
    """Flips left-right with probability ``p``."""
    return _op("horizontal_flip", p=float(p), field=field)


def color_jitter(brightness: float = 0.0, contrast: float = 0.0, saturation: float = 0.0, hue: float = 0.0,
                 p: float = 1.0, *, field: str = "image") -> Op:
    """torchvision's ColorJitter (random factors, random order), applied with probability ``p``."""
    return _op("color_jitter", brightness=float(brightness), contrast=float(contrast),
               saturation=float(saturation), hue=float(hue), p=float(p), field=field)


def grayscale(p: float = 1.0, num_output_channels: int = 1, *, field: str = "image") -> Op:
    """Converts to grayscale (ITU-R 601-2 luma) with probability ``p``; 3 output channels keep
    the shape of RGB images (RandomGrayscale)."""
    return _op("grayscale", p=float(p), num_output_channels=int(num_output_channels), field=field)


def gaussian_blur(kernel_size: Size, sigma: Union[float, Sequence[float]] = (0.1, 2.0), p: float = 1.0,
                  *, field: str = "image") -> Op:
    """torchvision's GaussianBlur: sigma uniform in ``sigma``, reflect padding; probability ``p``."""
    return _op("gaussian_blur", kernel_size=_size(kernel_size), sigma=_pair(sigma), p=float(p), field=field)


def normalize(mean: Sequence[float], std: Sequence[float], *, field: str = "image", out: str | None = None) -> Op:
    """(x / 255 - mean) / std as float32 CHW."""
    return _op("normalize", mean=[float(m) for m in mean], std=[float(s) for s in std], field=field, out=out)


def to_tensor(*, field: str = "image", out: str | None = None) -> Op:
    """x / 255 as float32 CHW."""
    return _op("to_tensor", field=field, out=out)
