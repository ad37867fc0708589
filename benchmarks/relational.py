"""Relational-op benchmarks: sort and groupby-aggregate throughput, in memory and spilling to
local disk (a memory budget of a fraction of the data), against pandas on the same rows.

    .venv-bench/bin/python benchmarks/relational.py [--rows 1000000] [--rounds 5] [--threads 2]
    python benchmarks/relational.py --rows 20000 --rounds 1      # a quick smoke run

The input is a Parquet file of synthetic rows (an int key with ties, a string key, a float
value with missing values, a 40-byte text payload), written once under
``$SLUICE_BENCH_DATA/relational`` (default ``~/.cache/sluice-bench``). Every case reads that
file and produces the op's whole output (sluice: iterated to the end; pandas: ``read_table``,
``to_pandas``, then ``sort_values(kind="stable")`` / ``groupby().agg()``). Cases run
interleaved, round after round; the table gives medians, rows/s of input, and for sluice the
spill report (runs or partition files, MiB written). Writes benchmarks/results/relational.{json,md}.
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
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import checkout  # noqa: E402

checkout.use()

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import sluice  # noqa: E402
from sluice import agg  # noqa: E402

DATA = Path(os.environ.get("SLUICE_BENCH_DATA", Path.home() / ".cache" / "sluice-bench"))
WORK = DATA / "relational"


def build_input(rows: int) -> tuple[Path, int]:
    """The synthetic table as one Parquet file (row groups of 64k rows); its size in bytes."""
    path = WORK / f"rows-{rows}.parquet"
    if not path.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(0)
        value = rng.normal(size=rows)
        value[rng.random(rows) < 0.02] = np.nan
        table = pa.table(
            {
                "id": np.arange(rows, dtype=np.int64),
                "key": rng.integers(0, max(rows // 20, 1), size=rows),
                "label": pa.array([f"class-{i}" for i in rng.integers(0, 100, size=rows)]),
                "value": value,
                "text": pa.array([f"{i:040d}" for i in range(rows)]),
            }
        )
        pq.write_table(table, path, row_group_size=65536)
    return path, path.stat().st_size


def cases(path: Path, rows: int, threads: int, spill_budget: int) -> dict:
    """name -> fn returning (output rows, sluice spill report or None)."""
    src = str(path)

    def run(ds):
        n = 0
        with ds.iter(num_threads=threads, progress=False) as it:
            for _ in it:
                n += 1
            return n, it.stats().data.get("source")

    def sl_sort(budget=None):
        return run(sluice.read_parquet(src).sort(["key", "label"], memory_budget=budget))

    def sl_groupby(budget=None):
        ds = sluice.read_parquet(src, columns=["key", "label", "value"]).groupby("key").aggregate(
            agg.count(), agg.sum("value"), agg.mean("value"), agg.max("label"), memory_budget=budget
        )
        return run(ds)

    out = {
        "sort: sluice, in memory": lambda: sl_sort(),
        "sort: sluice, spilled": lambda: sl_sort(spill_budget),
        "groupby: sluice, in memory": lambda: sl_groupby(),
        "groupby: sluice, spilled": lambda: sl_groupby(spill_budget),
    }
    try:
        import pandas  # noqa: F401

        def pd_sort():
            df = pq.read_table(src).to_pandas()
            return len(df.sort_values(["key", "label"], kind="stable")), None

        def pd_groupby():
            df = pq.read_table(src, columns=["key", "label", "value"]).to_pandas()
            g = df.groupby("key", dropna=False).agg(n=("value", "size"), s=("value", "sum"),
                                                     m=("value", "mean"), top=("label", "max"))
            return len(g), None

        out["sort: pandas sort_values(kind='stable')"] = pd_sort
        out["groupby: pandas groupby().agg()"] = pd_groupby
    except ImportError:
        pass
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--spill-fraction", type=float, default=0.125,
                    help="memory budget of the spilled cases, as a fraction of the input's in-memory size")
    args = ap.parse_args()

    path, parquet_bytes = build_input(args.rows)
    # ~150 bytes per row in sluice's accounting (fields + per-field overhead).
    spill_budget = max(int(args.rows * 150 * args.spill_fraction), 1 << 16)
    table = cases(path, args.rows, args.threads, spill_budget)
    times: dict[str, list[float]] = {k: [] for k in table}
    results: dict[str, tuple] = {}
    names = list(table)
    for r in range(args.rounds):
        order = names[r % len(names):] + names[: r % len(names)]  # rotate: no fixed position
        for name in order:
            t0 = time.perf_counter()
            results[name] = table[name]()
            times[name].append(time.perf_counter() - t0)
            print(f"round {r}: {name}: {times[name][-1]:.3f} s", file=sys.stderr)

    rows = []
    for name in names:
        med = statistics.median(times[name])
        n_out, report = results[name]
        rows.append({
            "case": name, "median_s": med, "rows_in": args.rows, "rows_out": n_out,
            "rows_per_s": args.rows / med,
            "spill_files": report and report["spill_files"],
            "spill_mib": report and report["spill_bytes"] / 2**20,
            "merge_passes": report and report["merge_passes"],
        })
    outputs = {}
    for r in rows:  # every implementation of an op must agree on the output size
        outputs.setdefault(r["case"].split(":")[0], set()).add(r["rows_out"])
    bad = {op: n for op, n in outputs.items() if len(n) > 1}
    if bad:
        raise SystemExit(f"output sizes differ: {bad}")

    out = HERE / "results"
    out.mkdir(exist_ok=True)
    meta = {"rows": args.rows, "rounds": args.rounds, "threads": args.threads, "spill_budget": spill_budget,
            "parquet_bytes": parquet_bytes, "cpu_count": os.cpu_count(), "load_avg_at_end": os.getloadavg(),
            "command": " ".join([Path(sys.executable).name] + sys.argv)}
    (out / "relational.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = ["| case | median s | rows/s | spill files | spilled MiB | merge passes |", "|---|---|---|---|---|---|"]
    for r in rows:
        spill = "" if r["spill_files"] is None else f"{r['spill_files']} | {r['spill_mib']:.1f} | {r['merge_passes']}"
        lines.append(f"| {r['case']} | {r['median_s']:.3f} | {r['rows_per_s']:,.0f} | {spill or ' |  | '} |")
    (out / "relational.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
