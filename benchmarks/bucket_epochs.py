"""Epoch boundaries inside one run from a bucket: the CV reference pipeline over the 2,000
photos, `.repeat(EPOCHS)` as one iteration without the cache, from `benchmarks/s3_server.py`
on loopback (50 ms first byte, 1 % of object GETs stalled 2 s). Prints each run's largest
gaps between batches with the epoch and the batch within it where they fell, and the largest
gap past each epoch's first batches that is not in epoch 0. `bucket.py` runs every pass as a
new run of one epoch, so it cannot show what happens where one epoch hands over to the next.

    PYTHONPATH=<build>/python python benchmarks/bucket_epochs.py [--runs 3] [--epochs 3]

Needs the benchmark photos (~/.cache/sluice-bench, benchmarks/datasets/build.py).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bucket import BUCKET, bucket_root, cpu_line  # noqa: E402  (bucket puts sluice on the path)
from remote import DATA, KEYS, cv_pipeline  # noqa: E402
import s3_server  # noqa: E402
import sluice  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    root = bucket_root({"train": DATA / "images"})
    proc, endpoint = s3_server.start(root, "--delay-ms", "50", "--stall-fraction", "0.01", "--stall-s", "2")
    cpu, ncpu = cpu_line()
    print(f"{cpu}, {ncpu} CPUs; sluice from {sluice.__file__}")
    try:
        os.environ.update(KEYS)
        sluice.configure_storage(f"s3://{BUCKET}", endpoint=endpoint)
        for run in range(args.runs):
            ds = cv_pipeline(sluice.read_images(f"s3://{BUCKET}/train/", labels="parent_dir", cache_dir=False)
                             .shuffle(seed=run)).repeat(args.epochs)
            gaps, last, n = [], None, 0
            for _ in ds:
                now = time.perf_counter()
                if last is not None:
                    gaps.append((now - last, n))
                last, n = now, n + 1
            per = n // args.epochs
            top = sorted(gaps, reverse=True)[:8]
            later = max(g for g, i in gaps if i >= per)
            print(f"run {run}: {n} batches; largest gaps (ms, epoch, batch in it): "
                  f"{[(round(g * 1000), i // per, i % per) for g, i in top]}; "
                  f"largest in epochs 1+: {later * 1000:.0f} ms", flush=True)
    finally:
        proc.kill()


if __name__ == "__main__":
    main()
