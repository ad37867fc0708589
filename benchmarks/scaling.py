#!/usr/bin/env python3
"""Throughput against worker count (1, 2, ...) for each reference workload.

    python benchmarks/scaling.py [--workloads cv,nlp,asr] [--systems sluice_native,torch_dataloader]
                                 [--workers 1,2] [--repeats 3] [--samples cv=N,...] [--out DIR]

Same protocol as run.py (a fresh process per measurement, the process tree's memory sampled,
rounds interleaved, medians): every (system, workers) pair is one column of the round. Writes
<out>/scaling.{md,json,png}: samples/s per worker count, and the speed-up over one worker.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import run as R  # noqa: E402
from peers import SYSTEMS, load  # noqa: E402
from peers import common as C  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default="cv,nlp,asr")
    ap.add_argument("--systems", default="sluice_native,torch_dataloader")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--samples", default=None)
    ap.add_argument("--budget", type=float, default=30.0)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--data", type=Path, default=C.default_data_dir())
    ap.add_argument("--out", type=Path, default=HERE / "results")
    a = ap.parse_args(argv)
    workers = [int(x) for x in a.workers.split(",")]
    systems = [s for s in a.systems.split(",") if s]
    for s in systems:
        if s not in SYSTEMS:
            ap.error(f"unknown system {s!r}")
    samples = R.parse_samples(a.samples, a.quick)
    data = a.data.expanduser().resolve()
    sluice_from = R.sluice_location()
    out = a.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    command = " ".join([os.path.relpath(sys.executable), os.path.relpath(__file__)] + (argv or sys.argv[1:]))
    results: dict = {}
    for w in [x for x in a.workloads.split(",") if x]:
        cols = [(s, n) for s in systems if w in load(s).WORKLOADS for n in workers]
        got: dict = {c: [] for c in cols}
        for rnd in range(a.repeats):
            for s, n in cols:
                spec = {"system": s, "workload": w, "samples": samples[w], "data": str(data),
                        "seed": 0, "workers": n, "budget": a.budget, "blas_threads": 1,
                        "sluice": sluice_from, "sluice_path": sluice_from.get("pythonpath")}
                r = R.measure(spec, out / "logs" / f"{stamp}-scaling-{w}-{s}-w{n}-{rnd}", a.budget + 120)
                if r["status"] == "ok":
                    got[(s, n)].append(r["throughput"])
                    print(f"  {w} {s:18s} workers={n}: {r['throughput']:10.1f} {R.UNIT[w]}", flush=True)
                else:
                    print(f"  {w} {s:18s} workers={n}: {r['status']}: {(r.get('error') or '')[:200]}", flush=True)
        results[w] = {f"{s}@{n}": (statistics.median(v) if v else None) for (s, n), v in got.items()}
    lines = [f"Command: `{command}` ({R.machine_info()['cores']} cores; medians of {a.repeats} "
             "interleaved rounds)", "", "| workload | system | " + " | ".join(f"{n} worker(s)" for n in workers)
             + f" | speed-up {workers[0]}→{workers[-1]} |", "|---|---|" + "---:|" * (len(workers) + 1)]
    for w, r in results.items():
        for s in systems:
            vals = [r.get(f"{s}@{n}") for n in workers]
            if all(v is None for v in vals):
                continue
            speed = (vals[-1] / vals[0]) if vals[0] and vals[-1] else None
            lines.append(f"| {w} | {s} | " + " | ".join(R.fmt(v, ",.0f") for v in vals)
                         + f" | {R.fmt(speed, '.2f')}× |")
    (out / "scaling.md").write_text("\n".join(lines) + "\n")
    (out / "scaling.json").write_text(json.dumps({"command": command, "results": results}, indent=2))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, len(results), figsize=(4 * len(results), 3.2), squeeze=False)
        for ax, (w, r) in zip(axes[0], results.items()):
            for s in systems:
                ys = [r.get(f"{s}@{n}") for n in workers]
                if any(y is not None for y in ys):
                    ax.plot(workers, [y or 0 for y in ys], marker="o", label=s)
            ax.set_title(w)
            ax.set_xlabel("workers")
            ax.set_ylabel(R.UNIT[w])
            ax.set_xticks(workers)
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "scaling.png", dpi=110)
    except Exception as e:  # noqa: BLE001 - the table matters more than the plot
        print(f"(plot failed: {e})")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
