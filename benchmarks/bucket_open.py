"""Opening a dataset in a bucket: the time `sluice.read_parquet("s3://.../corpus40/")` takes to
return (listing, each file's size and version, each footer) over bucket.py's 40-file Parquet
corpus, served by benchmarks/s3_server.py on loopback with bucket.py's defaults (50 ms before
each response's first byte, 1 % of object GETs stalled 2 s more), through the object cache:

    nocache   cache_dir=False
    cold      a fresh empty cache_dir for every open (each open starts the files' downloads)
    warm      a cache_dir an earlier open and read filled
    capped    cache_limit = a quarter of the corpus's bytes, one cache_dir for every open

Every open is followed by reading the dataset through (its time is given too, for scale: it
is not the figure here). A last row times `to_arrow()` of the dataset without the cache, open
included: its scan decodes row groups on a few threads, each waiting for its bytes unless they
were asked for ahead. Prints the median and largest open, how many took over a second (a
stalled request nobody hedged holds an open its 2 s), and the read. The first open of the
warm and capped kinds fills their cache and is left out.

    PYTHONPATH=$PWD/python .venv/bin/python benchmarks/bucket_open.py [--opens 15] [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bucket import BUCKET, bucket_root, dataset_bytes, start_server  # noqa: E402
from formats import parquet_corpus  # noqa: E402
from remote import DATA, KEYS  # noqa: E402  (this puts python/ on the path)

import sluice  # noqa: E402

KINDS = ("nocache", "cold", "warm", "capped")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--opens", type=int, default=15, help="timed opens per kind")
    ap.add_argument("--delay-ms", type=float, default=50.0)
    ap.add_argument("--stall-fraction", type=float, default=0.01)
    ap.add_argument("--stall-s", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", type=Path, default=DATA / "bucket-open-work", help="cache folders and the server's log")
    args = ap.parse_args()

    print(f"sluice from {sluice.__file__}", flush=True)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    local = parquet_corpus(copies=10)
    root = bucket_root({"train": DATA / "images", "corpus40": local})
    proc, endpoint = start_server(root, args, args.work / "server.jsonl")
    rows = []
    try:
        os.environ.update(KEYS)
        sluice.configure_storage(f"s3://{BUCKET}", endpoint=endpoint)
        size = dataset_bytes(local)
        for kind in KINDS:
            opens, reads = [], []
            for n in range(args.opens + (kind in ("warm", "capped"))):
                where = args.work / kind / (f"{n:03d}" if kind == "cold" else "cache")
                cache = {"cache_dir": False} if kind == "nocache" else {"cache_dir": str(where)}
                if kind == "capped":
                    cache["cache_limit"] = size // 4
                t0 = time.perf_counter()
                ds = sluice.read_parquet(f"s3://{BUCKET}/corpus40/", **cache).batch(1024)
                t1 = time.perf_counter()
                for _ in ds:
                    pass
                t2 = time.perf_counter()
                del ds
                if n or kind in ("nocache", "cold"):
                    opens.append(t1 - t0)
                    reads.append(t2 - t1)
            rows.append((kind, statistics.median(opens), max(opens), sum(o > 1 for o in opens), len(opens),
                         statistics.median(reads)))
            print(f"{kind:8s} open: median {rows[-1][1] * 1000:.0f} ms, max {rows[-1][2] * 1000:.0f} ms; "
                  f"read {rows[-1][5] * 1000:.0f} ms", flush=True)
        arrow = []
        for _ in range(max(args.opens // 3, 1)):
            t0 = time.perf_counter()
            table = sluice.read_parquet(f"s3://{BUCKET}/corpus40/", cache_dir=False).to_arrow()
            arrow.append(time.perf_counter() - t0)
        print(f"to_arrow: median {statistics.median(arrow) * 1000:.0f} ms ({table.num_rows} rows)", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(args.work, ignore_errors=True)
    print("\n| cache | open, median | open, largest | opens over 1 s | reading it after, median |")
    print("|---|---:|---:|---:|---:|")
    for kind, med, top, slow, n, read in rows:
        print(f"| {kind} | {med * 1000:.0f} ms | {top * 1000:.0f} ms | {slow} of {n} | {read * 1000:.0f} ms |")
    print(f"\n`to_arrow()` without the cache, open included: median {statistics.median(arrow) * 1000:.0f} ms "
          f"over {len(arrow)} runs ({table.num_rows:,} rows).")


if __name__ == "__main__":
    main()
