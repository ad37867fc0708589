"""The ingest checker (Ray AIR's DummyTrainer): can this pipeline keep a training loop fed?

>>> import sluice
>>> report = sluice.check_ingest(sluice.range(1000).batch(100), epochs=2, consumer_delay=0.0, verbose=False)
>>> report["batches"], report["epochs"]
(20, 2)
"""

from __future__ import annotations

import resource
import sys
import time
from typing import Any

import numpy as np

from .dataset import Dataset


def _nbytes(batch: Any) -> int:
    if isinstance(batch, np.ndarray):
        return batch.nbytes
    if isinstance(batch, (bytes, bytearray, str)):
        return len(batch)
    if isinstance(batch, dict):
        return sum(_nbytes(v) for v in batch.values())
    if isinstance(batch, (list, tuple)):
        return sum(_nbytes(v) for v in batch)
    return 8


def _rows(batch: Any) -> int:
    if isinstance(batch, dict) and batch:
        v = next(iter(batch.values()))
        if isinstance(v, np.ndarray) and v.ndim > 0:
            return int(v.shape[0])
        if isinstance(v, list):
            return len(v)
    return 1


def check_ingest(
    ds: Dataset,
    epochs: int = 1,
    batches: int | None = None,
    consumer_delay: float = 0.0,
    *,
    seed: int = 0,
    num_threads: int | None = None,
    verbose: bool = True,
) -> dict:
    """Reads ``epochs`` passes over ``ds`` (epochs 0, 1, …, each reshuffled; or ``batches``
    outputs per epoch) like a training
    loop that spends ``consumer_delay`` seconds per batch, and reports how long the loop waited
    for each batch (P50/P95/max), epochs and batches read, bytes read, throughput (MiB/s and
    samples/s) and peak memory. A P95 delay near zero means the loader keeps up."""
    if epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {epochs}")
    if batches is not None and batches < 1:
        raise ValueError(f"batches must be >= 1, got {batches}")
    if consumer_delay < 0:
        raise ValueError(f"consumer_delay must be >= 0, got {consumer_delay}")
    delays: list[float] = []
    nbytes = rows = 0
    t0 = time.perf_counter()
    for epoch in range(epochs):
        it = ds.iter(seed=seed, epoch=epoch, num_threads=num_threads, progress=False)
        try:
            n = 0
            while batches is None or n < batches:
                t = time.perf_counter()
                try:
                    batch = next(it)
                except StopIteration:
                    break
                delays.append(time.perf_counter() - t)
                nbytes += _nbytes(batch)
                rows += _rows(batch)
                n += 1
                if consumer_delay:
                    time.sleep(consumer_delay)
        finally:
            it.close()
    elapsed = time.perf_counter() - t0
    d = np.array(delays or [0.0]) * 1e3
    # ru_maxrss is KiB on Linux.
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    report = {
        "epochs": epochs,
        "batches": len(delays),
        "samples": rows,
        "bytes": nbytes,
        "seconds": elapsed,
        "throughput_mib_s": nbytes / 2**20 / elapsed,
        "throughput_samples_s": rows / elapsed,
        "delay_p50_ms": float(np.percentile(d, 50)),
        "delay_p95_ms": float(np.percentile(d, 95)),
        "delay_max_ms": float(d.max()),
        "peak_memory_mib": peak_mib,
    }
    if verbose:
        print(
            f"ingest: {report['epochs']} epochs, {report['batches']} batches, {rows} samples, "
            f"{nbytes / 2**20:.1f} MiB in {elapsed:.2f} s\n"
            f"  throughput {report['throughput_mib_s']:.1f} MiB/s, {report['throughput_samples_s']:,.0f} samples/s\n"
            f"  batch delay P50 {report['delay_p50_ms']:.3f} ms, P95 {report['delay_p95_ms']:.3f} ms, "
            f"max {report['delay_max_ms']:.3f} ms; peak memory {peak_mib:.0f} MiB",
            file=sys.stdout,
        )
    return report
