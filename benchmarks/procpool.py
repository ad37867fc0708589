"""Process pool vs GIL-bound inline run of a Python-UDF-heavy pipeline.

Each sample costs ~1.5 ms of pure-Python work (holds the GIL), plus a small numpy image
whose noise comes from the op's rng. The same pipeline runs inline (default placement: the
UDF stage is GIL-bound) and with ``processes=N``; runs are interleaved and the median of
each is reported, with the ratio — end to end (including starting the worker processes) and
in steady state (samples after the first batch, the benchmark protocol's throughput). Outputs
are checked equal.

    .venv/bin/python benchmarks/procpool.py [--samples 2000] [--repeats 5] [--processes 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import sluice


def work(s: dict, rng: np.random.Generator) -> dict:
    # Pure-Python arithmetic: the kind of per-sample code threads cannot parallelise.
    acc = 0
    for i in range(12_000):
        acc = (acc * 31 + i) % 1_000_003
    img = np.full((32, 32, 3), acc % 251, dtype=np.uint8)
    img = img + rng.integers(0, 4, size=img.shape, dtype=np.uint8)
    return {"id": s["id"], "img": img, "acc": acc}


def pipeline(n: int) -> sluice.Dataset:
    return sluice.range(n).shuffle().map(work).batch(32)


def timed(ds: sluice.Dataset, **kw) -> tuple[float, float, list]:
    """(end-to-end seconds, steady-state samples/s after the first batch, batches)."""
    t0 = time.perf_counter()
    out, first = [], None
    for b in ds.iter(seed=1, progress=False, **kw):
        out.append(b)
        if first is None:
            first = time.perf_counter()
    end = time.perf_counter()
    after = sum(len(b["id"]) for b in out[1:])
    return end - t0, after / (end - first), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--processes", type=int, default=2)
    args = ap.parse_args()
    ds = pipeline(args.samples)
    timed(ds)  # warm caches
    inline, pooled = [], []
    ref = None
    for _ in range(args.repeats):
        *m, out = timed(ds)
        inline.append(m)
        ref = ref or out
        *m, out = timed(ds, processes=args.processes)
        pooled.append(m)
        assert all(a["img"].tobytes() == b["img"].tobytes() for a, b in zip(ref, out)), "outputs differ"
    ti, tp = (statistics.median(t for t, _ in runs) for runs in (inline, pooled))
    ri, rp = (statistics.median(r for _, r in runs) for runs in (inline, pooled))
    n = args.samples
    print(f"samples={n} repeats={args.repeats} (medians of interleaved runs)")
    print(f"{'':14s} {'end to end':>22s}   {'steady state':>14s}")
    print(f"inline:        {ti:7.3f} s {n / ti:8.1f} samples/s   {ri:8.1f} samples/s")
    print(f"processes={args.processes}:   {tp:7.3f} s {n / tp:8.1f} samples/s   {rp:8.1f} samples/s")
    print(f"speed-up: {ti / tp:.2f}x end to end, {rp / ri:.2f}x steady state")


if __name__ == "__main__":
    main()
