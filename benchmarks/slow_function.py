"""A slow Python function: how long until the first output, and how long a script that ends
right after it takes to exit (docs/RELIABILITY.md, "Hangs, signals and limits").

Each case runs in a fresh interpreter: ``range(1000).map(f)`` with ``f`` sleeping DELAY
seconds, one output taken, then the script ends with the iterator still open.

    PYTHONPATH=python .venv/bin/python benchmarks/slow_function.py [--delays 0.5,2]
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import time

CHILD = """
import sys, time, sluice
delay, opts = float(sys.argv[1]), sys.argv[2]
def f(s):
    time.sleep(delay)
    return s
kw = {"processes": int(opts[1:])} if opts.startswith("p") else {"num_threads": int(opts[1:])}
t0 = time.monotonic()
it = sluice.range(1000).map(f).iter(**kw)
next(it)
print(time.monotonic() - t0, flush=True)
"""


def cpu_model() -> str:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delays", default="0.5,2")
    ap.add_argument("--placements", default="t8,p2", help="tN: num_threads=N, pN: processes=N")
    args = ap.parse_args()
    print(f"CPU: {cpu_model()}")
    print("| function | placement | first output (s) | exit after it (s) |")
    print("|---|---|---:|---:|")
    for delay in args.delays.split(","):
        for where in args.placements.split(","):
            p = subprocess.Popen([sys.executable, "-c", CHILD, delay, where], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            line = p.stdout.readline()
            t_line = time.monotonic()
            try:
                p.wait(timeout=600)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            exit_s = time.monotonic() - t_line
            label = f"processes={where[1:]}" if where.startswith("p") else f"num_threads={where[1:]}"
            if p.returncode != 0 or not line:
                print(f"| sleep {delay} s | {label} | failed: {p.stderr.read().strip()[-200:]} | |")
                continue
            print(f"| sleep {delay} s | {label} | {float(line):.1f} | {exit_s:.1f} |")


if __name__ == "__main__":
    main()
