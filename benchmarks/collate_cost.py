"""What collating costs the batch stage's thread: the figures behind the cost model's
`COLLATE` terms (crates/sluice-optimizer/src/model.rs).

In-memory samples (the rows of a cached or in-memory dataset, read cold: the data set is
larger than a core's caches) are batched on their own thread and kept 32 outputs ahead so
the consumer never holds the batch stage back; the batch thread's CPU time (from
/proc/self/task) per sample is the stacking: per-sample work plus copying the bytes.

Usage: PYTHONPATH=python python benchmarks/collate_cost.py [--seconds 2]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import sluice

CASES = [  # (row shape, dtype, rows in the data set, batch size, extra string fields)
    ((256,), np.int64, 20000, 128, 0),  # NLP: 2 KB token rows
    ((256,), np.int64, 20000, 128, 1),  # ... and the line's text
    ((32,), np.int64, 20000, 128, 0),  # 256 B rows: the per-sample part
    ((32,), np.int64, 20000, 128, 2),  # ... and per field
    ((80, 300), np.float32, 400, 16, 0),  # ASR: 96 KB mel spectrograms
    ((224, 224, 3), np.float32, 256, 64, 0),  # CV: 602 KB images
]


def thread_cpu(name: str) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for tid in os.listdir("/proc/self/task"):
        try:
            if open(f"/proc/self/task/{tid}/comm").read().strip() != name:
                continue
            f = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
            total += (int(f[11]) + int(f[12])) / tick
        except FileNotFoundError:
            pass
    return total


def collate_us(shape, dtype, n: int, batch: int, strings: int, seconds: float) -> tuple[float, float]:
    """Batch thread CPU µs per sample and samples/s."""
    rng = np.random.default_rng(0)
    items = [{"x": rng.random(shape).astype(dtype) if dtype != np.int64 else rng.integers(0, 50000, shape),
              **{f"text{k}": f"line {i}" for k in range(strings)}}
             for i in range(n)]
    ds = sluice.from_items(items).repeat().batch(batch).prefetch(32)
    it = iter(ds.iter(seed=0, num_threads=2, progress=False))
    for _ in range(max(2 * n // batch, 20)):
        next(it)
    done, t0, c0 = 0, time.perf_counter(), thread_cpu("sluice-stage-2")
    while time.perf_counter() - t0 < seconds:
        next(it)
        done += batch
    dt = time.perf_counter() - t0
    return (thread_cpu("sluice-stage-2") - c0) / done * 1e6, done / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    print("| row | bytes/row | string fields | batch | batch thread CPU µs/sample | samples/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for shape, dtype, n, batch, strings in CASES:
        us, rate = collate_us(shape, dtype, n, batch, strings, args.seconds)
        nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        print(f"| {np.dtype(dtype).name}{list(shape)} | {nbytes:,} | {strings} | {batch} | {us:.3f} | "
              f"{rate:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
