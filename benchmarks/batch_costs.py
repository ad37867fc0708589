"""What a batch costs the two threads at the end of a pipeline: the batch stage collating it
and the consumer converting it for Python — the figures behind the cost model's
`COLLATE_FIELD_S`, `COPY_BYTES_PER_S` and `CONSUMER` terms (crates/sluice-optimizer/src/model.rs).

In-memory rows (read cold: each data set is larger than a core's caches) are batched on a
thread of their own and kept 32 outputs ahead (`prefetch(32)`), so neither thread waits for
the other: the batch thread's CPU per sample (from /proc/self/task) is the stacking, the
consumer thread's CPU per output is the conversion plus the loop.

Usage: PYTHONPATH=python python benchmarks/batch_costs.py [--seconds 2]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import sluice

CASES = [  # (tensor fields, row shape, dtype, string fields, rows in the data set, batch size)
    (0, (), np.int64, 0, 20000, 128),  # empty outputs: the per-output part
    (1, (256,), np.int64, 0, 20000, 128),  # NLP: 2 KB token rows
    (1, (256,), np.int64, 1, 20000, 128),  # ... and the line's text
    (1, (256,), np.int64, 2, 20000, 128),
    (2, (256,), np.int64, 0, 20000, 128),
    (1, (256,), np.int64, 0, 20000, 32),
    (1, (256,), np.int64, 1, 20000, 32),
    (1, (32,), np.int64, 0, 20000, 128),  # 256 B rows: the per-sample part
    (1, (32,), np.int64, 2, 20000, 128),  # ... and per field
    (1, (80, 300), np.float32, 0, 400, 16),  # ASR: 96 KB mel spectrograms
    (1, (224, 224, 3), np.float32, 0, 256, 64),  # CV: 602 KB images
]


def thread_cpu(name: str) -> float:
    """CPU seconds of this process's threads called `name` (the main thread: "python")."""
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


def measure(tensors, shape, dtype, strings, n, batch, seconds) -> tuple[float, float, float]:
    """Batch thread CPU µs per sample, consumer CPU µs per output, samples/s."""
    rng = np.random.default_rng(0)

    def row(i: int) -> dict:
        out = {f"text{k}": f"a line of text {i}" for k in range(strings)}
        for j in range(tensors):
            out[f"x{j}"] = (rng.integers(0, 50000, shape) if dtype == np.int64
                            else rng.random(shape).astype(dtype))
        return out

    ds = sluice.from_items([row(i) for i in range(n)]).repeat().batch(batch).prefetch(32)
    it = iter(ds.iter(seed=0, num_threads=2, progress=False))
    for _ in range(max(2 * n // batch, 400)):
        next(it)
    outputs, t0 = 0, time.perf_counter()
    b0, c0 = thread_cpu("sluice-stage-2"), time.thread_time()
    while time.perf_counter() - t0 < seconds:
        next(it)
        outputs += 1
    dt = time.perf_counter() - t0
    c1, b1 = time.thread_time(), thread_cpu("sluice-stage-2")
    samples = outputs * batch
    return (b1 - b0) / samples * 1e6, (c1 - c0) / outputs * 1e6, samples / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    print("| tensor fields | row | bytes/row | string fields | rows/batch | batch thread CPU µs/sample "
          "| consumer CPU µs/output | samples/s |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for tensors, shape, dtype, strings, n, batch in CASES:
        collate, consumer, rate = measure(tensors, shape, dtype, strings, n, batch, args.seconds)
        nbytes = tensors * int(np.prod(shape)) * np.dtype(dtype).itemsize
        row = f"{np.dtype(dtype).name}{list(shape)}" if tensors else "—"
        print(f"| {tensors} | {row} | {nbytes:,} | {strings} | {batch} | {collate:.3f} | {consumer:.2f} "
              f"| {rate:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
