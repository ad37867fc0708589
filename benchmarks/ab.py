"""A/B: the reference workloads through sluice built from two checkouts, interleaved.

For a change that should not move performance (a refactor) or one that should (a build
profile), this runs ``benchmarks/run.py`` of checkout A, then of checkout B, round after
round, each with only sluice's systems, and reports each (workload, system)'s median
throughput over the rounds for A and B and their ratio. Each checkout's runner imports the
sluice built in that checkout (``python/sluice/_native*.so`` — see README: the repository's
``python/`` folder is used when sluice is not installed in the venv), so build both the same
way first, and run this with a venv that does not have sluice installed (it refuses to
compare otherwise).

    python benchmarks/ab.py --a ../base --b . [--rounds 3] [--workloads cv,nlp,asr]
        [--systems sluice_native,sluice_udf] [--budget 8] [--markdown]

The runner's options after ``--`` are passed through (e.g. ``-- --workers 2``). A round
alternates which checkout goes first, so a drift of the machine's speed over the run
affects both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_once(checkout: Path, out: Path, args: argparse.Namespace, extra: list[str]) -> dict:
    """One runner invocation in `checkout`; returns {(workload, system): throughput}."""
    cmd = [
        sys.executable, str(checkout / "benchmarks" / "run.py"),
        "--workloads", args.workloads, "--systems", args.systems,
        "--repeats", "1", "--warmup", "0", "--budget", str(args.budget),
        "--out", str(out), *extra,
    ]
    proc = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise SystemExit(f"{checkout}: runner failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    got = {}
    for w in args.workloads.split(","):
        data = json.loads((out / f"{w}.json").read_text())
        # A venv with sluice installed makes every checkout's runner import that one build,
        # and the A/B would compare a build with itself (it happened: 1.00x for a change
        # worth 1.05x). Refuse rather than print a ratio of nothing.
        where = Path(data["meta"].get("sluice", {}).get("path") or "/").resolve()
        if checkout.resolve() not in where.parents:
            raise SystemExit(f"{checkout}: its runner imported sluice from {where}, not from the "
                             "checkout; run ab.py with a venv that does not have sluice installed")
        for r in data["runs"]:
            if r.get("status") == "ok" and not r.get("warmup"):
                got[(w, r["system"])] = r["throughput"]
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", type=Path, required=True, help="checkout A (the reference)")
    ap.add_argument("--b", type=Path, required=True, help="checkout B (the change)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workloads", default="cv,nlp,asr")
    ap.add_argument("--systems", default="sluice_native,sluice_udf")
    ap.add_argument("--budget", type=float, default=8.0, help="seconds of steady state per measurement (>= 5)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="per runner invocation")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    args, extra = ap.parse_known_args()
    extra = [x for x in extra if x != "--"]
    if args.budget < 5:
        ap.error("--budget must be at least 5 s (the performance protocol's window)")
    checkouts = {"A": args.a.resolve(), "B": args.b.resolve()}
    runs: dict[str, list[dict]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory(prefix="sluice-ab-") as tmp:
        for rnd in range(args.rounds):
            order = ["A", "B"] if rnd % 2 == 0 else ["B", "A"]
            for side in order:
                out = Path(tmp) / f"{side}{rnd}"
                got = run_once(checkouts[side], out, args, extra)
                runs[side].append(got)
                print(f"round {rnd + 1} {side}: " + ", ".join(f"{w}/{s} {v:,.1f}" for (w, s), v in sorted(got.items())),
                      file=sys.stderr, flush=True)
    keys = sorted(set().union(*runs["A"], *runs["B"]))
    rows = []
    for k in keys:
        a = [r[k] for r in runs["A"] if k in r]
        b = [r[k] for r in runs["B"] if k in r]
        if not a or not b:
            rows.append((k, None, None, None, len(a), len(b)))
            continue
        ma, mb = statistics.median(a), statistics.median(b)
        rows.append((k, ma, mb, mb / ma, len(a), len(b)))
    head = (f"A = {checkouts['A']}, B = {checkouts['B']}; {args.rounds} interleaved rounds, "
            f"{args.budget:g} s windows; CPU: {cpu_model()} ({os.cpu_count()} cores)")
    if args.markdown:
        print(head + "\n")
        print("| workload | system | A (median/s) | B (median/s) | B / A |")
        print("|---|---|---:|---:|---:|")
        for (w, s), ma, mb, ratio, na, nb in rows:
            if ratio is None:
                print(f"| {w} | {s} | failed ({na} ok) | failed ({nb} ok) | — |")
            else:
                print(f"| {w} | {s} | {ma:,.1f} | {mb:,.1f} | {ratio:.3f} |")
    else:
        print(head)
        for (w, s), ma, mb, ratio, na, nb in rows:
            print(f"{w:4s} {s:16s} A {ma or 0:12,.1f}  B {mb or 0:12,.1f}  B/A {ratio or 0:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
