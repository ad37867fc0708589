"""What recording the statistics over time costs: the CV, NLP and ASR reference pipelines
(``benchmarks/peers/sluice_native.py``) with the series on (the default) and off
(``SLUICE_STATS_SERIES=0``), each run in its own process, rounds interleaved, samples/s over a
window of at least ``--seconds`` after the first batches; medians and the on/off ratio. Then
the cost per output where it shows most: ``range(3_000_000)`` unbatched, one engine thread,
nanoseconds per output on and off (``--per-output-rounds``).

    .venv/bin/python benchmarks/stats_overhead.py [--data ~/.cache/sluice-bench] [--rounds 3]
        [--seconds 8] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(workload: str, data: Path, seconds: float) -> dict:
    import sluice

    sys.path.insert(0, str(HERE))
    from peers import common as C
    from peers import sluice_native

    make = {"cv": sluice_native._cv, "nlp": sluice_native._nlp, "asr": sluice_native._asr}[workload]
    it = iter(make(sluice, data, None, 0).repeat() if workload != "nlp" else make(sluice, data, None, 0))
    for _ in range(3):  # start-up does not count
        next(it)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        n += C.batch_len(next(it))
    return {"samples_per_s": n / (time.perf_counter() - t0)}


PER_OUTPUT = r"""
import time, sluice
it = sluice.range(3_000_000).iter(num_threads=1)
next(it)
t, n = time.perf_counter(), 0
for _ in it:
    n += 1
print((time.perf_counter() - t) / n * 1e9)
"""


def per_output(rounds: int) -> dict:
    res: dict = {"on": [], "off": []}
    for _ in range(rounds):
        for mode in ("on", "off"):
            env = {**os.environ, "SLUICE_STATS_SERIES": "1" if mode == "on" else "0"}
            out = subprocess.run([sys.executable, "-c", PER_OUTPUT], capture_output=True, text=True, env=env, timeout=600)
            res[mode].append(float(out.stdout.strip()))
    return {k: statistics.median(v) for k, v in res.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path.home() / ".cache" / "sluice-bench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--workloads", default="cv,nlp,asr")
    ap.add_argument("--per-output-rounds", type=int, default=5)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child, a.data, a.seconds)))
        return 0
    results: dict = {}
    for r in range(a.rounds):
        for w in a.workloads.split(","):
            for mode in ("on", "off"):
                env = {**os.environ, "SLUICE_STATS_SERIES": "1" if mode == "on" else "0"}
                cmd = [sys.executable, __file__, "--child", w, "--data", str(a.data), "--seconds", str(a.seconds)]
                out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=a.seconds * 10 + 300)
                if out.returncode:
                    sys.stderr.write(out.stderr)
                    return 1
                rate = json.loads(out.stdout.strip().splitlines()[-1])["samples_per_s"]
                results.setdefault(w, {}).setdefault(mode, []).append(rate)
                print(f"round {r + 1} {w} series {mode}: {rate:,.1f} samples/s", file=sys.stderr)
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    if a.markdown:
        print(f"Series recording on vs off, {os.cpu_count()} cores ({cpu}), medians of {a.rounds} interleaved "
              f"rounds, ≥ {a.seconds:.0f} s each:\n")
        print("| workload | series on, samples/s | off, samples/s | on / off |")
        print("|---|---:|---:|---:|")
    for w, m in results.items():
        on, off = statistics.median(m["on"]), statistics.median(m["off"])
        if a.markdown:
            print(f"| {w.upper()} | {on:,.1f} | {off:,.1f} | {on / off:.3f} |")
        else:
            print(json.dumps({"workload": w, "on": on, "off": off, "ratio": on / off}))
    if a.per_output_rounds:
        ns = per_output(a.per_output_rounds)
        line = (f"Per output (range, unbatched, 1 thread, medians of {a.per_output_rounds}): "
                f"{ns['on']:.0f} ns on, {ns['off']:.0f} ns off: {ns['on'] - ns['off']:+.0f} ns per output.")
        print(("\n" + line) if a.markdown else json.dumps({"per_output_ns": ns}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
