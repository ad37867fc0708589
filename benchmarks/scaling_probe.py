#!/usr/bin/env python3
"""What a machine's cores give when they are all busy, against which `scaling.py`'s curves
are read (issue 39, item 5): a many-core VM's vCPUs may be hyperthread siblings or share a
memory channel, and then no program scales to them.

    python benchmarks/scaling_probe.py [--procs 1,2,4,8,12,16] [--seconds 2] [--cv DATA_DIR]

For each count N it runs N processes at once, each for ``--seconds``:
* ``hash``: SHA-256 over a 1 MiB buffer (compute-bound, in L2): the cores' own ceiling;
* ``copy``: numpy copies of a 64 MiB buffer (past every cache): the memory's ceiling;
and prints the total against N × the one-process figure. With ``--cv``, the CV reference
pipeline (``peers/sluice_native``) at ``--cv-threads`` (default: half and all of the largest
count) for 5 s each, with its stats table: which stage is busy, and how long the consumer waited.
"""
from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from peers.common import cpu_isa, cpu_model  # noqa: E402


def _hash(seconds: float, start, out) -> None:
    buf = os.urandom(1 << 20)
    start.wait()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        hashlib.sha256(buf).digest()
        n += 1
    out.put(n / (time.perf_counter() - t0))  # MiB/s


def _copy(seconds: float, start, out) -> None:
    import numpy as np

    src = np.ones(64 << 20, np.uint8)
    dst = np.empty_like(src)
    start.wait()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        np.copyto(dst, src)
        n += 1
    out.put(n * 64 * 2 / (time.perf_counter() - t0))  # MiB/s read + written


def ceiling(kind, procs: int, seconds: float) -> float:
    ctx = mp.get_context("fork")
    start, out = ctx.Barrier(procs + 1), ctx.Queue()
    ps = [ctx.Process(target=kind, args=(seconds, start, out)) for _ in range(procs)]
    for p in ps:
        p.start()
    start.wait()
    total = sum(out.get(timeout=seconds + 60) for _ in ps)
    for p in ps:
        p.join()
    return total


def cv_stats(data: Path, threads: int, seconds: float) -> str:
    import sluice
    from peers import sluice_native

    it = sluice_native._cv(sluice, data, 10 ** 6, 0).iter(seed=0, num_threads=threads)
    n, t0 = 0, time.perf_counter()
    for b in it:
        n += len(b["label"])
        if time.perf_counter() - t0 >= seconds:
            break
    rate = n / (time.perf_counter() - t0)
    table = str(it.stats())
    it.close()
    return f"CV, {threads} threads: {rate:,.0f} images/s\n{table}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", default="1,2,4,8,12,16")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--cv", type=Path, default=None, help="a benchmark data folder with images/")
    ap.add_argument("--cv-threads", default=None, help="the CV runs' thread counts (default: half and all)")
    a = ap.parse_args()
    counts = [int(x) for x in a.procs.split(",")]
    print(f"{cpu_model()}, {cpu_isa()}, {os.cpu_count()} CPUs; N processes at once, {a.seconds:g} s each")
    print("| probe | " + " | ".join(f"N={n}" for n in counts) + " |")
    print("|---|" + "---:|" * len(counts))
    for name, kind in (("hash (MiB/s; × one process)", _hash), ("copy (MiB/s; × one process)", _copy)):
        got = [ceiling(kind, n, a.seconds) for n in counts]
        print(f"| {name} | " + " | ".join(f"{g:,.0f} ({g / got[0]:.1f}×)" for g in got) + " |", flush=True)
    if a.cv:
        top = max(counts)
        for t in [int(x) for x in a.cv_threads.split(",")] if a.cv_threads else (top // 2, top):
            print(cv_stats(a.cv, t, 5.0), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
