"""Spill the input pipeline onto a Ray cluster: the element-wise stages (decode, augment, a
Python function) run on Ray actors, batching and order stay in the training process, and the
batches are byte-identical to a local run with the same seed.

    python examples/ray_job.py                          # a private single-node Ray on this machine
    python examples/ray_job.py --address auto --data /data/imagenet/train   # on a cluster's head
    ray job submit -- python examples/ray_job.py --address auto ...

`--optimize` lets the cost model decide which stages pay to move and how many actors they need.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

import numpy as np

import sluice
from sluice import image as I

HERE = Path(__file__).resolve().parent


def brightness(sample: dict) -> dict:
    # Any Python function travels too (cloudpickled once per actor).
    sample["brightness"] = np.float32(sample["image"].mean() / 255.0)
    return sample


def pipeline(root: str, size: int, batch: int) -> sluice.Dataset:
    return (
        sluice.read_images(root, labels="parent_dir")
        .shuffle(seed=0)
        .map(I.decode())
        .map(I.random_resized_crop(size))
        .map(I.horizontal_flip(0.5))
        .map(brightness)
        .map(I.normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)))
        .map(sluice.ops.select(["image", "label", "brightness"]))
        .batch(batch)
    )


def digest(batches) -> str:
    h = hashlib.sha256()
    for b in batches:
        for k in sorted(b):
            h.update(np.ascontiguousarray(b[k]).tobytes())
    return h.hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--address", default="local", help='"local", "auto" or "ray://host:10001"')
    ap.add_argument("--data", default=str(HERE / "fixtures" / "images"))
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--optimize", action="store_true")
    a = ap.parse_args(argv)
    ds = pipeline(a.data, a.size, a.batch)
    ctx = sluice.Context(a.address, num_actors=a.actors)
    try:
        on_ray = digest(ds.iter(seed=0, epoch=0, context=ctx, optimize=a.optimize))
        print(ds.stats())
        local = digest(ds.iter(seed=0, epoch=0))
        print(f"batches on Ray {on_ray}, locally {local}: {'identical' if on_ray == local else 'DIFFERENT'}")
    finally:
        ctx.close()
    return 0 if on_ray == local else 1


if __name__ == "__main__":
    raise SystemExit(main())
