"""Where a pass of Parquet rows goes (issue 24, item 6): sluice's `read_parquet` iterated as
dicts, pass after pass, with for each pass the rate, the share of the time the loop's thread
was on a CPU (`time.thread_time()` over the wall time: below 100% it waited for rows or for a
core) and its CPU per row, the whole process's CPU per row (user + system, `getrusage`), the time to the first
row and the time from the last row to the end of the iteration.

    /root/.cache/bench-venv/bin/python benchmarks/parquet_rows_profile.py [--copies 10]
        [--passes 5] [--row-by-row]

Input: the benchmark corpus (`formats.parquet_corpus`; `--copies 10`: 3.5 M rows a pass).
`--row-by-row` iterates with `fuse_ops=False` (a sample per row). Prints the medians over
the passes after a first, warm-up pass (which counts the rows); needs a sluice build (imported from python/).
"""
from __future__ import annotations

import argparse
import itertools
import resource
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import checkout  # noqa: E402

checkout.use()
sys.path.insert(0, str(HERE))

import sluice  # noqa: E402
from formats import parquet_corpus  # noqa: E402
from peers import common as C  # noqa: E402


def one_pass(ds, fuse: bool, total: int) -> dict:
    """One pass of `total` rows. The first and the last row are taken on their own, so the
    clock is read around them and not once per row."""
    r0, wall, cpu = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), time.thread_time()
    it = iter(ds.iter(fuse_ops=fuse))
    rows = len(next(it)["text"]) > 0
    first = time.perf_counter()
    for s in itertools.islice(it, total - 2):
        rows += len(s["text"]) > 0
    rows += len(next(it)["text"]) > 0
    last = time.perf_counter()
    assert next(it, None) is None
    end = time.perf_counter()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    process = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    seconds, loop_cpu = end - wall, time.thread_time() - cpu
    return {
        "rows/s": total / seconds,
        "loop thread on CPU": loop_cpu / seconds,
        "loop CPU ns/row": loop_cpu / total * 1e9,
        "process CPU ns/row": process / total * 1e9,
        "first row ms": (first - wall) * 1e3,
        "stop ms": (end - last) * 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=1)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--row-by-row", action="store_true", help="fuse_ops=False: a sample per row")
    args = ap.parse_args()
    ds = sluice.read_parquet(str(parquet_corpus(args.copies)), columns=["text"])
    fuse = not args.row_by_row
    total = sum(1 for _ in ds.iter(fuse_ops=fuse))  # also the warm-up pass
    runs = [one_pass(ds, fuse, total) for _ in range(args.passes)]
    print(f"CPU: {C.cpu_model()}; copies {args.copies}, {'row by row' if args.row_by_row else 'a batch at a time'}")
    for key in runs[0]:
        med = statistics.median(r[key] for r in runs)
        shown = f"{med:.0%}" if key == "loop thread on CPU" else f"{med:,.2f}" if key.endswith("ms") else f"{med:,.0f}"
        print(f"  {key:20s} {shown}")


if __name__ == "__main__":
    main()
