"""`make demo`: the CV training-input pipeline on the committed fixture photos.

Reads JPEGs with labels from their folders, decodes and augments them (SimCLR-style, the CV
reference workload), batches 64 images as float32 [64, 3, 224, 224] + int64 labels, and
prints throughput and the per-stage stats report.
"""

from __future__ import annotations

import pathlib
import sys
import time

import numpy as np

import sluice

HERE = pathlib.Path(__file__).resolve().parent
IMAGES = HERE / "fixtures" / "images"


def pipeline(epochs: int) -> sluice.Dataset:
    ds = sluice.read_images(str(IMAGES), labels="parent_dir").repeat(epochs).shuffle(seed=0)
    try:
        from sluice import image as I  # built-in GIL-free ops
    except ImportError:  # pragma: no cover - before the image ops landed
        I = None
    if I is not None:
        return (
            ds.map(I.decode())
            .map(I.random_resized_crop(224, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)))
            .map(I.horizontal_flip(0.5))
            .map(I.color_jitter(0.4, 0.4, 0.4, 0.1, p=0.8))
            .map(I.grayscale(p=0.2, num_output_channels=3))
            .map(I.gaussian_blur(23, sigma=(0.1, 2.0), p=0.5))
            .map(I.normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)))
            .map(sluice.ops.select(["image", "label"]))
            .batch(64)
        )
    from PIL import Image
    import io

    mean = np.array([0.485, 0.456, 0.406], np.float32)[:, None, None]
    std = np.array([0.229, 0.224, 0.225], np.float32)[:, None, None]

    def decode_crop_normalize(s, rng):
        im = Image.open(io.BytesIO(s["bytes"])).convert("RGB").resize((224, 224))
        x = np.asarray(im, np.float32).transpose(2, 0, 1) / 255.0
        if rng.random() < 0.5:
            x = x[:, :, ::-1]
        return {"image": np.ascontiguousarray((x - mean) / std), "label": s["label"]}

    return ds.map(decode_crop_normalize).batch(64)


def main() -> int:
    epochs = 30
    ds = pipeline(epochs)
    print(ds.explain())
    t0 = time.perf_counter()
    it = ds.iter(seed=0)
    first = next(it)
    t_first = time.perf_counter() - t0
    n = len(first["label"])
    for batch in it:
        n += len(batch["label"])
    dt = time.perf_counter() - t0
    print(f"\nbatch: image {first['image'].dtype}{list(first['image'].shape)}, label {first['label'].dtype}{list(first['label'].shape)}")
    print(f"{n} images in {dt:.2f} s = {n / dt:,.0f} images/s; first batch after {t_first:.3f} s\n")
    print(ds.stats())
    return 0


if __name__ == "__main__":
    sys.exit(main())
