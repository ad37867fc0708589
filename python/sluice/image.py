"""Built-in image ops (Rust, GIL-free). Images are HWC ``uint8`` arrays (``[h, w, 1]`` or
``[h, w, 3]``) until ``normalize`` or ``to_tensor``, which give float32 CHW; a size is
``(height, width)`` or an int (a square for crops, the shorter side for ``resize``) —
torchvision's conventions. Random ops draw from the per-sample generator of (seed, epoch,
sample index, op), so results do not depend on threads.

Every op reads ``field`` and writes ``out`` (default: ``field``, in place). Ops that make an
image whose size their arguments set (``resize``, ``center_crop``, ``random_resized_crop``,
``normalize``, ``to_tensor``) check it against ``max_pixels`` (height × width, default
89,478,485 — Pillow's limit, as ``decode``): arguments that alone exceed it raise
``ValueError`` when the op is made; a sample whose output would exceed it fails with a
``PipelineError`` naming the sample and the op, before anything is allocated. A bad argument
raises ``ValueError`` or ``TypeError`` naming the op, the argument and the value.

>>> import sluice, sluice.image as I
>>> ds = (sluice.read_images("examples/fixtures/images")
...       .map(I.decode()).map(I.random_resized_crop(64)).map(I.horizontal_flip())
...       .map(I.normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))).batch(4))
>>> next(iter(ds))["image"].shape
(4, 3, 64, 64)
"""

from __future__ import annotations

import numbers
from typing import Any, Optional, Sequence, Union

from . import _spec
from ._native import Op

Size = Union[int, Sequence[int]]


def _op(name: str, **params: Any) -> Op:
    return _spec.op(f"image.{name}", params)


def _pair(v: Any) -> Any:
    """A number ``v`` as the range ``(v, v)``; anything else as given."""
    if isinstance(v, numbers.Real) and not isinstance(v, bool):
        return [v, v]
    return v


def decode(mode: str = "RGB", *, field: str = "bytes", out: str = "image", max_pixels: Optional[int] = None) -> Op:
    """Decodes JPEG (baseline/progressive, gray, CMYK, EXIF orientation), PNG (8/16-bit),
    WebP, GIF (first frame), BMP or TIFF bytes into an HWC uint8 image, as Pillow's
    ``convert(mode)`` does; ``mode`` is "RGB" or "L". Images above ``max_pixels``
    (decompression-bomb limit) are rejected from their header, before allocation."""
    return _op("decode", mode=mode, field=field, out=out, max_pixels=max_pixels)


def resize(size: Size, interpolation: str = "bilinear", antialias: bool = True, *, field: str = "image",
           out: Optional[str] = None, max_pixels: Optional[int] = None) -> Op:
    """Resizes like torchvision/Pillow (an int sets the shorter side). ``resize(n)`` with
    ``n * n > max_pixels`` is refused when made; an image whose aspect makes the longer side
    exceed the limit fails its sample."""
    return _op("resize", size=size, interpolation=interpolation, antialias=antialias, field=field,
               out=out, max_pixels=max_pixels)


def center_crop(size: Size, *, field: str = "image", out: Optional[str] = None,
                max_pixels: Optional[int] = None) -> Op:
    """Crops the center like torchvision: a crop larger than the image zero-pads it,
    ``(crop - side) // 2`` before and the rest (the odd pixel) after; a smaller crop starts at
    ``int(round((side - crop) / 2))``."""
    return _op("center_crop", size=size, field=field, out=out, max_pixels=max_pixels)


def random_resized_crop(
    size: Size,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3 / 4, 4 / 3),
    interpolation: str = "bilinear",
    *,
    field: str = "image",
    out: Optional[str] = None,
    max_pixels: Optional[int] = None,
) -> Op:
    """torchvision's RandomResizedCrop: 10 attempts at a random area/aspect, then a center
    crop; the crop is resized reading only its own pixels, exactly as crop then resize."""
    return _op("random_resized_crop", size=size, scale=_pair(scale), ratio=_pair(ratio),
               interpolation=interpolation, field=field, out=out, max_pixels=max_pixels)


def horizontal_flip(p: float = 0.5, *, field: str = "image", out: Optional[str] = None) -> Op:
    """Flips left-right with probability ``p``."""
    return _op("horizontal_flip", p=p, field=field, out=out)


def color_jitter(brightness: float = 0.0, contrast: float = 0.0, saturation: float = 0.0, hue: float = 0.0,
                 p: float = 1.0, *, field: str = "image", out: Optional[str] = None) -> Op:
    """torchvision's ColorJitter (random factors, random order), applied with probability ``p``."""
    return _op("color_jitter", brightness=brightness, contrast=contrast, saturation=saturation, hue=hue, p=p,
               field=field, out=out)


def grayscale(p: float = 1.0, num_output_channels: int = 1, *, field: str = "image",
              out: Optional[str] = None) -> Op:
    """Converts to grayscale (ITU-R 601-2 luma) with probability ``p``; 3 output channels keep
    the shape of RGB images (RandomGrayscale)."""
    return _op("grayscale", p=p, num_output_channels=num_output_channels, field=field, out=out)


def gaussian_blur(kernel_size: Size, sigma: Union[float, Sequence[float]] = (0.1, 2.0), p: float = 1.0,
                  *, field: str = "image", out: Optional[str] = None) -> Op:
    """torchvision's GaussianBlur: ``kernel_size`` is an odd int or ``(kx, ky)`` — (width,
    height), torchvision's order, not the ``(height, width)`` of sizes; ``sigma`` is the range
    ``(min, max)`` one standard deviation is drawn from, uniformly, and used for both axes (a
    number: fixed); reflect padding; applied with probability ``p``."""
    return _op("gaussian_blur", kernel_size=kernel_size, sigma=_pair(sigma), p=p, field=field, out=out)


def normalize(mean: Sequence[float], std: Sequence[float], *, field: str = "image", out: Optional[str] = None,
              max_pixels: Optional[int] = None) -> Op:
    """(x / 255 - mean) / std as float32 CHW; ``mean``/``std`` have one value per channel."""
    return _op("normalize", mean=mean, std=std, field=field, out=out, max_pixels=max_pixels)


def to_tensor(*, field: str = "image", out: Optional[str] = None, max_pixels: Optional[int] = None) -> Op:
    """x / 255 as float32 CHW."""
    return _op("to_tensor", field=field, out=out, max_pixels=max_pixels)
