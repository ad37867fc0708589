"""Checkpoint size and save/restore time mid-epoch (issue: reproducible and resumable).

A 1M-sample pipeline — two sources mixed 70/30, globally shuffled, sharded over 2 ranks,
mapped, batched — is run to the middle of rank 0's epoch. We measure the checkpoint's JSON
size and the time to save it, then the time from `load_state_dict` to the next batch, against
a fast-forward resume: a fresh iterator that replays and discards the batches already
delivered (what torchdata's StatefulDataLoader does for pipelines without their own state).
The replay's cost grows with the work per sample, so the script runs it with the built-in
no-op map and with a Python map doing a few µs of work (its cost is measured and printed).

Usage: python benchmarks/state_resume.py [--n 1000000] [--out results.json]
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


def busy(s):
    # A few µs of Python work per sample (measured and reported below).
    x = 0
    for i in range(150):
        x += i * i
    return {"id": s["id"], "x": x}


def busy_us() -> float:
    t0 = time.perf_counter()
    for i in range(20000):
        busy({"id": i})
    return (time.perf_counter() - t0) / 20000 * 1e6


def pipeline(n: int, python_map: bool) -> sluice.Dataset:
    a = sluice.range(int(n * 0.7))
    b = sluice.range(n - int(n * 0.7))
    ds = sluice.mix([a, b], [0.7, 0.3], seed=1).shuffle(seed=2).shard(0, 2)
    ds = ds.map(busy) if python_map else ds.map(sluice.ops.noop())
    return ds.batch(256)


def measure(n: int, python_map: bool, rounds: int) -> dict:
    ds = pipeline(n, python_map)
    per_rank = ds._native.source_len() // 2 if hasattr(ds._native, "source_len") else n // 2
    k = per_rank // 2 // 256  # batches to the middle of rank 0's epoch
    it = ds.iter(seed=0, progress=False)
    for _ in range(k):
        next(it)
    save = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        state = it.state_dict()
        save.append(time.perf_counter() - t0)
    text = json.dumps(state)
    want = next(it)["id"].tolist()
    it.close()
    restore, forward = [], []
    for _ in range(rounds):
        t0 = time.perf_counter()
        r = ds.iter(seed=0, progress=False)
        r.load_state_dict(json.loads(text))
        got = next(r)["id"].tolist()
        restore.append(time.perf_counter() - t0)
        r.close()
        assert got == want
        t0 = time.perf_counter()
        f = ds.iter(seed=0, progress=False)
        for _ in range(k):
            next(f)
        got = next(f)["id"].tolist()
        forward.append(time.perf_counter() - t0)
        f.close()
        assert got == want
    return {
        "map": f"python ({busy_us():.1f} us/sample)" if python_map else "built-in noop",
        "batches_before_checkpoint": k,
        "samples_before_checkpoint": k * 256,
        "state_bytes": len(text),
        "save_ms": statistics.median(save) * 1e3,
        "restore_to_next_batch_s": statistics.median(restore),
        "fast_forward_to_next_batch_s": statistics.median(forward),
        "speedup": statistics.median(forward) / statistics.median(restore),
        "state": state,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    res = {
        "command": "python " + " ".join(sys.argv),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "runs": [measure(a.n, False, a.rounds), measure(a.n, True, max(1, a.rounds // 3))],
    }
    for r in res["runs"]:
        print(
            f"{r['map']:<24} state {r['state_bytes']} B, save {r['save_ms']:.2f} ms, "
            f"restore {r['restore_to_next_batch_s']:.3f} s vs fast-forward "
            f"{r['fast_forward_to_next_batch_s']:.2f} s ({r['speedup']:.0f}x) after "
            f"{r['samples_before_checkpoint']:,} samples"
        )
    print(json.dumps(res["runs"][0]["state"]))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
