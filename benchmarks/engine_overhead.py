"""Engine overhead (issue: Foundation, item 10).

Measures, interleaved over several rounds (medians):
  * built-in no-op map: samples/s of range(N) -> map(noop) -> batch(256) on 1 and 2 threads,
    and the per-sample cost per built-in op (difference between 2 and 1 no-op maps);
  * a Python identity UDF through sluice vs plain Python doing the same work: a generator
    yielding ``identity({"id": i})`` (per-sample outputs) and a loop stacking the results into
    numpy batches of 256 (batched outputs); the bare call loop is reported too. sluice runs
    on its background threads (num_threads=1) and in the iterating thread (num_threads=0);
  * time to first batch;
  * torch DataLoader over the same range (only if torch is importable: the bench venv).

Usage: python benchmarks/engine_overhead.py [--n 2000000] [--rounds 5] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import sluice


def identity(s):
    return s


def t_builtin(n, threads, maps=1):
    ds = sluice.range(n)
    for _ in range(maps):
        ds = ds.map(sluice.ops.noop())
    ds = ds.batch(256)
    t0 = time.perf_counter()
    rows = 0
    for b in ds.iter(num_threads=threads, progress=False):
        rows += len(b["id"])
    assert rows == n
    return n / (time.perf_counter() - t0)


def t_udf(n, threads):
    ds = sluice.range(n).map(identity)
    t0 = time.perf_counter()
    c = 0
    for _ in ds.iter(num_threads=threads, progress=False, ):
        c += 1
    assert c == n
    return n / (time.perf_counter() - t0)


def t_udf_batched(n, threads):
    ds = sluice.range(n).map(identity).batch(256)
    t0 = time.perf_counter()
    rows = 0
    for b in ds.iter(num_threads=threads, progress=False, ):
        rows += len(b["id"])
    assert rows == n
    return n / (time.perf_counter() - t0)


def t_loop(n):
    t0 = time.perf_counter()
    c = 0
    for i in range(n):
        identity({"id": i})
        c += 1
    return n / (time.perf_counter() - t0)


def t_generator(n):
    def gen():
        for i in range(n):
            yield identity({"id": i})

    t0 = time.perf_counter()
    c = 0
    for _ in gen():
        c += 1
    return n / (time.perf_counter() - t0)


def t_batched_loop(n):
    import numpy as np

    t0 = time.perf_counter()
    rows, buf = 0, []
    for i in range(n):
        buf.append(identity({"id": i}))
        if len(buf) == 256 or i == n - 1:
            b = {k: np.array([s[k] for s in buf]) for k in buf[0]}
            rows += len(b["id"])
            buf = []
    assert rows == n
    return n / (time.perf_counter() - t0)


def t_first_batch():
    t0 = time.perf_counter()
    it = sluice.range(10**9).map(sluice.ops.noop()).batch(256).iter(progress=False)
    next(it)
    dt = time.perf_counter() - t0
    it.close()
    return dt


def t_torch(n, workers):
    import torch
    from torch.utils.data import DataLoader, Dataset

    class R(Dataset):
        def __len__(self):
            return n

        def __getitem__(self, i):
            return {"id": i}

    dl = DataLoader(R(), batch_size=256, num_workers=workers)
    t0 = time.perf_counter()
    rows = sum(len(b["id"]) for b in dl)
    assert rows == n
    return n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2_000_000)
    ap.add_argument("--udf-n", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args()
    try:
        import torch  # noqa: F401

        have_torch = True
    except ImportError:
        have_torch = False
    runs = {
        "builtin_noop_1t": lambda: t_builtin(a.n, 1),
        "builtin_noop_2t": lambda: t_builtin(a.n, 2),
        "builtin_2noops_1t": lambda: t_builtin(a.n, 1, maps=2),
        "udf_identity_1t": lambda: t_udf(a.udf_n, 1),
        "udf_identity_2t": lambda: t_udf(a.udf_n, 2),
        "udf_identity_batched_1t": lambda: t_udf_batched(a.udf_n, 1),
        # num_threads=0: every stage in the iterating thread (DataLoader(num_workers=0)).
        "udf_identity_0t": lambda: t_udf(a.udf_n, 0),
        "udf_identity_batched_0t": lambda: t_udf_batched(a.udf_n, 0),
        "python_loop": lambda: t_loop(a.udf_n),
        "python_generator": lambda: t_generator(a.udf_n),
        "python_batched_loop": lambda: t_batched_loop(a.udf_n),
        "first_batch_s": t_first_batch,
    }
    if have_torch:
        runs["torch_dataloader_w0"] = lambda: t_torch(a.n // 4, 0)
        runs["torch_dataloader_w2"] = lambda: t_torch(a.n // 4, 2)
    res = {k: [] for k in runs}
    for k, f in runs.items():  # warm-up
        f()
    for _ in range(a.rounds):
        for k, f in runs.items():
            res[k].append(f())
    med = {k: statistics.median(v) for k, v in res.items()}
    per_op_us = max(1e6 / med["builtin_2noops_1t"] - 1e6 / med["builtin_noop_1t"], 0.0)
    out = {
        "command": "python " + " ".join(sys.argv),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "medians": med,
        "per_builtin_op_us": per_op_us,
        "per_sample_pipeline_us_1t": 1e6 / med["builtin_noop_1t"],
        "udf_vs_loop_slowdown_1t": med["python_loop"] / med["udf_identity_1t"],
        "udf_vs_loop_slowdown_2t": med["python_loop"] / med["udf_identity_2t"],
        "udf_batched_vs_loop_slowdown_1t": med["python_loop"] / med["udf_identity_batched_1t"],
        # The target's comparison: plain Python producing the same outputs.
        "udf_vs_generator_slowdown_1t": med["python_generator"] / med["udf_identity_1t"],
        "udf_batched_vs_batched_loop_slowdown_1t": med["python_batched_loop"]
        / med["udf_identity_batched_1t"],
        "udf_vs_generator_slowdown_0t": med["python_generator"] / med["udf_identity_0t"],
        "udf_batched_vs_batched_loop_slowdown_0t": med["python_batched_loop"]
        / med["udf_identity_batched_0t"],
    }
    print(json.dumps(out, indent=2))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
