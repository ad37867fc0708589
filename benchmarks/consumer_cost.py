"""What handing outputs to Python costs the consumer thread: the figures behind the cost
model's `CONSUMER` terms (crates/sluice-optimizer/src/model.rs).

In-memory samples (int64 tensors of 256 elements, optional strings) are batched on two
threads and kept 32 outputs ahead (`prefetch(32)`), so the consumer never waits and its
thread CPU per output is the conversion plus the loop: the dict, a numpy array per tensor
field (and freeing the one before), a Python object per string.

Usage: PYTHONPATH=python python benchmarks/consumer_cost.py [--seconds 2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import sluice

CASES = [  # (tensor fields, string fields, batch size)
    (0, 0, 128),
    (1, 0, 128),
    (2, 0, 128),
    (1, 0, 32),
    (0, 1, 128),
    (1, 1, 128),
    (1, 2, 128),
    (1, 1, 32),
]


def consumer_us(tensors: int, strings: int, batch: int, seconds: float) -> tuple[float, float]:
    """Consumer thread CPU µs per output, and samples/s."""
    items = [{**{f"ids{j}": np.arange(256, dtype=np.int64) for j in range(tensors)},
              **{f"text{k}": f"a line of text {i}" for k in range(strings)}} for i in range(20000)]
    ds = sluice.from_items(items).repeat().batch(batch).prefetch(32)
    it = iter(ds.iter(seed=0, num_threads=2, progress=False))
    for _ in range(400):
        next(it)
    n, t0, c0 = 0, time.perf_counter(), time.thread_time()
    while time.perf_counter() - t0 < seconds:
        next(it)
        n += 1
    dt = time.perf_counter() - t0
    return (time.thread_time() - c0) / n * 1e6, n * batch / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    print("| tensor fields (2 KB/row) | string fields | rows/output | consumer CPU µs/output | samples/s |")
    print("|---:|---:|---:|---:|---:|")
    for t, s, b in CASES:
        us, rate = consumer_us(t, s, b, args.seconds)
        print(f"| {t} | {s} | {b} | {us:.2f} | {rate:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
