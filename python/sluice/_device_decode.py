"""Images decoded on the consumer's device (issue 40, item 3). For a consumer that says it
decodes on its GPU (``Dataset.iter(device_decode=True)``, set by
``iter_torch_batches(decode_on_device=...)``), the planner's "decode on device" rule leaves a
``decode`` + ``random_resized_crop`` (+ ``horizontal_flip``) as their draws: the decoded field
holds, per image, ``MAGIC``, the crop box and flip the host ops would have drawn (10
little-endian int64: top, left, height, width, out height, out width, flip, interpolation
(0 bilinear, 1 bicubic), channels, EXIF orientation) and the encoded image
(``sluice_ops::image::MAGIC``). Here the batch is decoded with nvJPEG
(torchvision's ``decode_jpeg(device="cuda")``, in one batched call), each image cropped,
resized (antialiased, as the host's kernels) and flipped on the device, and stacked as uint8
``[batch, H, W, C]`` — what the host path's batch is, ready for ``normalize=``. Images that
are not JPEGs are decoded on the host and moved. On the CPU device the same code decodes with
libjpeg-turbo (what the tests check it with). Where nvImageCodec is installed
(``pip install nvidia-nvimgcodec-cu13[nvjpeg]``, ``-cu12`` for CUDA 12) it decodes instead of torchvision: its nvjpeg
extension uses the hardware JPEG decoder of an A100/H100/H200, and torchvision's image
decoding is deprecated since 0.29."""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np
import torch

#: What a device-bound image starts with, then its draws (``sluice_ops::image::MAGIC``).
MAGIC = b"sluice-draws-v1\0"
HEADER = len(MAGIC) + 8 * 10
#: The draws, in order (``sluice_ops::image::DRAWS``).
TOP, LEFT, HEIGHT, WIDTH, OUT_H, OUT_W, FLIP, INTERP, CHANNELS, ORIENTATION = range(10)


def upright(img: torch.Tensor, orientation: int) -> torch.Tensor:
    """``img`` ([C, H, W]) turned as its EXIF ``orientation`` says (nvJPEG does not): 2 mirror,
    3 half turn, 4 upside down, 5 transpose, 6 quarter turn clockwise, 7 transverse, 8 quarter
    turn counter-clockwise."""
    if orientation >= 5:
        img = img.transpose(-1, -2)
    flips = {2: (-1,), 3: (-1, -2), 4: (-2,), 6: (-1,), 7: (-1, -2), 8: (-2,)}.get(orientation, ())
    return img.flip(flips) if flips else img


def split_encoded(batch: dict) -> dict[str, tuple[list, np.ndarray]]:
    """Takes the fields the engine left encoded out of ``batch``: {field: (encoded images,
    draws ``[batch, 10]``)}."""
    fields = [k for k, v in batch.items()
              if isinstance(v, list) and v and all(isinstance(b, bytes) and b[:len(MAGIC)] == MAGIC for b in v)]
    out = {}
    for k in fields:
        records = batch.pop(k)
        draws = np.stack([np.frombuffer(r, "<i8", 10, len(MAGIC)) for r in records])
        out[k] = ([memoryview(r)[HEADER:] for r in records], draws)
    return out


def _decoder() -> Any:
    try:
        from torchvision.io import ImageReadMode, decode_image, decode_jpeg
    except ImportError as e:
        raise ImportError("decoding on the device needs torchvision (pip install torchvision)") from e
    return ImageReadMode, decode_image, decode_jpeg


def decode_batch(encoded: list, draws: np.ndarray, device: torch.device) -> torch.Tensor:
    """``encoded`` images cropped, resized and flipped as ``draws`` say, on ``device``: uint8
    ``[batch, H, W, C]`` (a channels-last view of ``[batch, C, H, W]``)."""
    ImageReadMode, decode_image, decode_jpeg = _decoder()
    if len(encoded) != len(draws) or draws.ndim != 2 or draws.shape[1] != 10:
        raise ValueError(f"decode on device: {len(encoded)} images and draws of shape {draws.shape}")
    mode = ImageReadMode.GRAY if int(draws[0, CHANNELS]) == 1 else ImageReadMode.RGB
    with warnings.catch_warnings():
        # The decoders only read the bytes (torch warns that they are not writable).
        warnings.simplefilter("ignore", UserWarning)
        data = [torch.frombuffer(b, dtype=torch.uint8) for b in encoded]
    jpegs = [i for i, b in enumerate(encoded) if bytes(b[:3]) == b"\xff\xd8\xff"]
    images: list[Any] = [None] * len(encoded)
    if jpegs:
        decoded = _decode_jpegs(decode_jpeg, [data[i] for i in jpegs], mode, device)
        for i, img in zip(jpegs, decoded):
            images[i] = None if img is None else upright(img, int(draws[i, ORIENTATION]))
    for i, img in enumerate(images):
        if img is None:
            # Not a JPEG (or one nvJPEG refused): decoded on the host, upright as the host's.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                images[i] = decode_image(data[i], mode=mode, apply_exif_orientation=True).to(device)
    for img, d in zip(images, draws.tolist()):
        top, left, h, w = d[TOP], d[LEFT], d[HEIGHT], d[WIDTH]
        if top + h > img.shape[1] or left + w > img.shape[2]:
            raise ValueError(f"decode on device: a {h}x{w} crop at ({top}, {left}) of a "
                             f"{img.shape[1]}x{img.shape[2]} image (its size differs from its header's)")
    return resize_crops(images, draws).permute(0, 2, 3, 1)


#: Crop pixels (times channels) one batched resize takes at most: the crops are padded to the
#: largest of their group, so a batch with one huge photo splits instead of padding every
#: crop to its size (2**26 float32: 256 MB).
GROUP_ELEMENTS = 1 << 26


def resize_crops(images: list, draws: np.ndarray) -> torch.Tensor:
    """Each image's crop resized (antialiased, as torch's ``interpolate(antialias=True)``) and
    flipped as its draws say: uint8 ``[batch, C, out_h, out_w]``.

    One resize per image is six launches and a Python round per image (256 of them a
    batch, on the thread that also feeds the training step). Here a group of crops, padded to
    its largest, is resized by two batched matrix products, ``Wy @ crop @ Wx^T``: row ``o``
    of ``Wx`` holds the weights torch's antialiased filter gives the crop's columns for output
    column ``o`` (reversed for a flipped image), zero outside the crop, so the crop's offset
    and the flip cost nothing. Same weights as ``interpolate``, summed in another order: the
    rounded pixels agree within a level. The products are dense (a 500² crop to 224²: ~0.5
    GFLOP, a few ms a batch on a GPU); on a CPU device, which stands in for the GPU in tests,
    they cost more than resizing each crop would."""
    out_h, out_w = int(draws[0, OUT_H]), int(draws[0, OUT_W])
    if (draws[:, OUT_H] != out_h).any() or (draws[:, OUT_W] != out_w).any():
        raise ValueError(f"decode on device: crops of different output sizes in one batch: {draws[:, OUT_H:OUT_W + 1].tolist()}")
    channels, device = images[0].shape[0], images[0].device
    out = torch.empty(len(images), channels, out_h, out_w, dtype=torch.uint8, device=device)
    order = np.argsort(draws[:, HEIGHT] * draws[:, WIDTH], kind="stable")
    start = 0
    while start < len(order):
        end, span_h, span_w = start, 0, 0
        while end < len(order):
            d = draws[order[end]]
            h, w = max(span_h, int(d[HEIGHT])), max(span_w, int(d[WIDTH]))
            if end > start and (end - start + 1) * channels * h * w > GROUP_ELEMENTS:
                break
            span_h, span_w, end = h, w, end + 1
        group = order[start:end]
        crops = torch.zeros(len(group), channels, span_h, span_w, dtype=torch.float32, device=device)
        for slot, i in enumerate(group.tolist()):
            top, left, h, w = (int(v) for v in draws[i, [TOP, LEFT, HEIGHT, WIDTH]])
            crops[slot, :, :h, :w] = images[i][:, top:top + h, left:left + w]
        d = draws[group]
        bicubic = torch.as_tensor(d[:, INTERP] != 0, device=device)
        wy = _aa_weights(torch.as_tensor(d[:, HEIGHT], device=device), out_h, span_h, bicubic, None)
        wx = _aa_weights(torch.as_tensor(d[:, WIDTH], device=device), out_w, span_w, bicubic,
                         torch.as_tensor(d[:, FLIP] != 0, device=device))
        resized = wy[:, None] @ (crops @ wx.transpose(1, 2)[:, None])
        out[torch.as_tensor(group, device=device)] = resized.round_().clamp_(0, 255).to(torch.uint8)
        start = end
    return out


def _aa_weights(size: torch.Tensor, out: int, span: int, bicubic: torch.Tensor, flip: "torch.Tensor | None") -> torch.Tensor:
    """``[n, out, span]`` float32: per crop of ``size`` pixels (of ``span`` padded), the weights
    of torch's antialiased linear or cubic (a = -0.5) filter, as ``_compute_weights_aa``
    (aten's UpSampleKernel) makes them: for output ``o``, centre ``scale·(o + 0.5)``, support
    ``interp_size/2 · max(scale, 1)``, the taps from ``trunc(centre - support + 0.5)`` to
    ``trunc(centre + support + 0.5)`` within the crop, normalised to sum 1."""
    f64 = torch.float64
    size = size.to(f64)[:, None, None]
    scale = size / out
    half = torch.where(bicubic, 2.0, 1.0).to(f64)[:, None, None]
    support = half * scale.clamp(min=1.0)
    invscale = torch.where(scale >= 1.0, 1.0 / scale, torch.ones_like(scale))
    center = scale * (torch.arange(out, dtype=f64, device=size.device)[None, :, None] + 0.5)
    lo = torch.trunc(center - support + 0.5).clamp(min=0)
    hi = torch.minimum(torch.trunc(center + support + 0.5), size)
    j = torch.arange(span, dtype=f64, device=size.device)[None, None, :]
    x = ((j - center + 0.5) * invscale).abs()
    linear = (1.0 - x).clamp(min=0.0)
    a = -0.5
    cubic = torch.where(x < 1.0, ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0,
                        torch.where(x < 2.0, (((x - 5.0) * x + 8.0) * x - 4.0) * a, torch.zeros_like(x)))
    w = torch.where(bicubic[:, None, None], cubic, linear) * ((j >= lo) & (j < hi))
    total = w.sum(-1, keepdim=True)
    w = torch.where(total != 0, w / total, w)
    if flip is not None:
        w = torch.where(flip[:, None, None], w.flip(1), w)
    return w.to(torch.float32)


def _decode_jpegs(decode_jpeg: Any, data: list, mode: Any, device: torch.device) -> list:
    """The JPEGs decoded on ``device`` as stored (nvJPEG ignores EXIF, so the CPU decode is
    asked to as well and both are turned upright after): with nvImageCodec where it is
    installed (its nvjpeg extension drives the GPU's hardware JPEG decoder), else in one
    batched torchvision call; a batch that is refused (a CMYK or progressive oddity) is decoded
    one by one, and an image that still fails is left ``None`` for the host decoder."""
    if device.type == "cuda":
        out = _nvimgcodec_decode(data, mode, device)
        if out is not None:
            return out
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return list(decode_jpeg(data, mode=mode, device=device))
    except RuntimeError:
        out = []
        for d in data:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    out.append(decode_jpeg(d, mode=mode, device=device))
            except RuntimeError:
                out.append(None)
        return out


#: nvImageCodec decoders by (device index, gray); False once it failed (torchvision decodes).
_NVIMGCODEC: dict = {}


def _nvimgcodec_decode(data: list, mode: Any, device: torch.device) -> "list | None":
    """``data`` decoded with nvImageCodec into [C, H, W] uint8 tensors on ``device`` (``None``
    for an image it could not decode); ``None`` when nvImageCodec is not installed or fails."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    gray = getattr(mode, "name", "") == "GRAY"
    entry = _NVIMGCODEC.get((index, gray))
    if entry is False:
        return None
    try:
        if entry is None:
            from nvidia import nvimgcodec

            spec = nvimgcodec.ColorSpec
            # sRGB is `SRGB` in 0.5 and later (the first releases called it `RGB`).
            rgb = spec.SRGB if hasattr(spec, "SRGB") else spec.RGB
            params = nvimgcodec.DecodeParams(apply_exif_orientation=False, color_spec=spec.GRAY if gray else rgb)
            # 0.9 decodes code streams, made over the batch's own bytes (a numpy view, no
            # copy); earlier releases took a copy of them as `bytes`.
            stream_of = getattr(nvimgcodec, "CodeStream", bytes)
            entry = _NVIMGCODEC[index, gray] = (nvimgcodec.Decoder(device_id=index), params, stream_of)
        decoder, params, stream_of = entry
        blobs = [stream_of(d.numpy()) for d in data]
        try:
            # Ordered on the stream the copies and crops run on (the consumer's side stream).
            images = decoder.decode(blobs, params=params, cuda_stream=torch.cuda.current_stream(device).cuda_stream)
        except TypeError:
            # A version without the argument decodes on its own stream: wait for it.
            images = decoder.decode(blobs, params=params)
            torch.cuda.synchronize(device)
        out = []
        for img in images:
            if img is None:
                out.append(None)
                continue
            t = torch.as_tensor(img, device=device)  # HWC, through __cuda_array_interface__
            out.append((t[..., None] if t.ndim == 2 else t).permute(2, 0, 1))
        return out
    except Exception as e:  # noqa: BLE001 - not installed, or an API it does not have: torchvision decodes
        if not isinstance(e, ImportError):
            warnings.warn(f"decode on device: nvImageCodec failed ({e!r}); decoding with torchvision",
                          stacklevel=2)
        _NVIMGCODEC[index, gray] = False
        return None


@functools.lru_cache(maxsize=None)
def available(device: torch.device) -> bool:
    """Whether ``device`` decodes JPEGs here: a CUDA device with torchvision's nvJPEG (one tiny
    image decoded to check, once per device), or the CPU with torchvision."""
    try:
        _, _, decode_jpeg = _decoder()
        from torchvision.io import encode_jpeg
    except ImportError:
        return False
    if device.type != "cuda":
        return True
    try:
        probe = encode_jpeg(torch.zeros(3, 16, 16, dtype=torch.uint8))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return tuple(decode_jpeg(probe, device=device).shape) == (3, 16, 16)
    except RuntimeError:
        return False
