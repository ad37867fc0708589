"""Parquet into Python (issue 24, item 6).

Rows as dicts against pyarrow's `to_pylist()`, against reading them row by row
(`fuse_ops=False`), and against the floor of any reader: making the dicts in Python from
columns already decoded in memory. Functions over batches (`map_batches`, a `map` after
`batch`) with the batch's columns taken straight from the decoded row group against the row
path (`fuse_ops=False` lowers the read into its own stage, so every row becomes a sample
first) and a hand-written pyarrow loop.

    /root/.cache/bench-venv/bin/python benchmarks/parquet_rows.py [--rounds 3] [--min-seconds 5]
        [--copies 1]

Input: the benchmark text corpus as 4 Parquet files with 16k-row row groups
(`formats.parquet_corpus`, made if missing): 346,802 rows a pass, or with `--copies 10` each
file linked 10 times (3.5 M rows a pass, so what a pass costs to start and stop weighs a
tenth). Cases run interleaved, round
after round, each repeating its pass for at least --min-seconds; medians. Writes
benchmarks/results/parquet_rows.{json,md} (`parquet_rows_x10` with `--copies 10`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import checkout  # noqa: E402

checkout.use()
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import pyarrow.dataset as pads  # noqa: E402

import sluice  # noqa: E402
from formats import parquet_corpus  # noqa: E402
from peers import common as C  # noqa: E402

BATCH = 1024


def lengths(batch: dict) -> dict:
    """The function every batch case runs: one array out per batch."""
    return {"n": np.fromiter(map(len, batch["text"]), np.int64, len(batch["text"]))}


def cases(corpus: Path, threads: int) -> dict:
    path = str(corpus)

    def pa_rows():
        n = 0
        for batch in pads.dataset(path, format="parquet").to_batches(columns=["text"]):
            for row in batch.to_pylist():
                n += len(row["text"]) > 0
        return n

    def sl_rows(fuse: bool):
        def run():
            n = 0
            ds = sluice.read_parquet(path, columns=["text"])
            for s in ds.iter(num_threads=threads, fuse_ops=fuse, progress=False):
                n += len(s["text"]) > 0
            return n
        return run

    decoded = list(pads.dataset(path, format="parquet").to_batches(columns=["text"]))

    def floor():
        # What any reader's loop pays at least: a str and a dict per row, made from
        # columns already read and decoded, and the loop's own work.
        n = 0
        for batch in decoded:
            for text in batch.column(0).to_pylist():
                row = {"text": text}
                n += len(row["text"]) > 0
        return n

    def pa_batches():
        n = 0
        for batch in pads.dataset(path, format="parquet").to_batches(columns=["text"], batch_size=BATCH):
            n += len(lengths({"text": batch.column(0).to_pylist()})["n"])
        return n

    def sl_map_batches(fuse: bool):
        def run():
            ds = sluice.read_parquet(path, columns=["text"]).map_batches(lengths, BATCH).batch(BATCH)
            return sum(len(b["n"]) for b in ds.iter(num_threads=threads, fuse_ops=fuse, progress=False))
        return run

    def sl_batch_map(fuse: bool):
        def run():
            ds = sluice.read_parquet(path, columns=["text"]).batch(BATCH).map(lengths)
            return sum(len(b["n"]) for b in ds.iter(num_threads=threads, fuse_ops=fuse, progress=False))
        return run

    # name: (run, the pyarrow case doing the same work, the sluice case it is an A/B of)
    rows, per_batch = "pyarrow rows (to_pylist dicts)", "pyarrow: f per batch of column.to_pylist()"
    row_by_row = "sluice rows, read row by row (fuse_ops=False)"
    mb, bm = "sluice map_batches(f).batch(): rows first", "sluice batch().map(f): rows first"
    return {
        rows: (pa_rows, rows, None),
        "sluice rows (dicts)": (sl_rows(True), rows, row_by_row),
        row_by_row: (sl_rows(False), rows, None),
        "floor: dicts from decoded columns in memory": (floor, rows, None),
        per_batch: (pa_batches, per_batch, None),
        "sluice map_batches(f).batch(): columns": (sl_map_batches(True), per_batch, mb),
        mb: (sl_map_batches(False), per_batch, None),
        "sluice batch().map(f): columns": (sl_batch_map(True), per_batch, bm),
        bm: (sl_batch_map(False), per_batch, None),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--min-seconds", type=float, default=5.0)
    ap.add_argument("--copies", type=int, default=1, help="passes over the corpus linked this many times")
    args = ap.parse_args()
    table = cases(parquet_corpus(args.copies), args.threads)
    rates: dict[str, list[float]] = {k: [] for k in table}
    for r in range(args.rounds):
        for name, (run, _, _) in table.items():
            t0, n = time.perf_counter(), 0
            while n == 0 or time.perf_counter() - t0 < args.min_seconds:
                n += run()
            rates[name].append(n / (time.perf_counter() - t0))
            print(f"round {r}: {name:45s} {rates[name][-1]:12,.0f} rows/s", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in rates.items()}
    lines = [f"CPU: {C.cpu_model()}, {os.cpu_count()} cores; load at end {os.getloadavg()[0]:.2f}", "",
             "| case | rows/s | × pyarrow | × the same pipeline, rows first |", "|---|---:|---:|---:|"]
    for name, (_, peer, base) in table.items():
        own = f"{med[name] / med[base]:.2f}" if base else ""
        lines.append(f"| {name} | {med[name]:,.0f} | {med[name] / med[peer]:.2f} | {own} |")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    name = "parquet_rows" if args.copies == 1 else f"parquet_rows_x{args.copies}"
    (out / f"{name}.json").write_text(json.dumps({"args": vars(args), "rates": rates}, indent=1))
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
