"""What handing chunks between threads costs, and why chunks carry ~1 ms of work.

The NLP pipeline of ``optimizer.py`` runs inline on one core and as its +fusion plan on two
threads (source → two workers → batch → consumer), with the source's chunks capped at the
sizes that carry ~250 µs and ~1 ms of work at the profiled CPU per line, interleaved. For
each it prints lines/s and the process's CPU µs per line (all threads): what the two-thread
plan spends beyond the inline one is the price of its hand-offs. The engine sizes chunks to
~1 ms of downstream CPU (``CHUNK_WORK_NS`` in crates/sluice-core/src/exec/source.rs).

Usage: python benchmarks/chunk_cost.py [--rounds 3] [--seconds 3] [--work-us 250,1000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import optimizer as O  # noqa: E402
from sluice import OptimizerOptions  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--work-us", default="250,1000", help="chunk sizes as µs of work per chunk")
    ap.add_argument("--data", default=str(O.C.default_data_dir()))
    args = ap.parse_args()
    build, n = O.WORKLOADS["nlp"]
    ds = build(Path(args.data), n)
    O.warm_up(ds, n)
    prof = ds.profile(samples=n, seconds=30)
    cpu_us = sum(o["cpu_s"] / max(o["items_in"], 1) for o in prof.data["ops"]) * 1e6
    opts = OptimizerOptions.baseline()
    inline = ds.optimize(prof, OptimizerOptions(**vars(opts)))
    for k in ("enable_local_parallelism", "enable_reorder", "enable_fusion"):
        setattr(opts, k, True)
    fused = ds.optimize(prof, OptimizerOptions(**vars(opts)))
    runs = [("inline, 1 core", inline, None)]
    for w in (float(x) for x in args.work_us.split(",")):
        cap = max(1, round(w / cpu_us))
        runs.append((f"+fusion, 2 threads, chunks of {cap} (~{w:g} µs)", fused, cap))
    got: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in runs}
    for _ in range(args.rounds):
        for name, plan, cap in runs:
            got[name].append(O.measure(ds, plan, n, args.seconds, chunk_size=cap))
    print(f"NLP, {cpu_us:.1f} µs of op CPU per line (profile); medians of {args.rounds} interleaved rounds\n")
    print("| run | lines/s | CPU µs/line | × inline CPU |")
    print("|---|---:|---:|---:|")
    base = statistics.median(c for _, c in got[runs[0][0]])
    for name, _, _ in runs:
        rate = statistics.median(r for r, _ in got[name])
        cpu = statistics.median(c for _, c in got[name])
        print(f"| {name} | {rate:,.0f} | {cpu:.2f} | {cpu / base:.2f} |")


if __name__ == "__main__":
    main()
