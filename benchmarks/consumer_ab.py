"""A/B of two sluice builds (each checkout's `python/` folder with its built extension) on the
same cases, interleaved in fresh processes: what the consumer pays per output, and the CV
reference pipeline.

    /root/.cache/bench-venv/bin/python benchmarks/consumer_ab.py --a ../base/python --b python \
        [--rounds 3] [--seconds 3] [--cases cv,rows,...]

Cases: an identity Python function over `range(300,000)` with per-sample outputs at
`num_threads=0` and `1`, the same `→ batch(256)` at `num_threads=0`, and Parquet rows as
dicts (the benchmark corpus, `formats.parquet_corpus`), `cv`: the CV reference pipeline
(float32 output, 2 threads) over the 2,000 benchmark photos, and `text`: `read_text` of a
500,000-line file it writes to `$TMPDIR` once (2 threads, one record read per line). Each run repeats its pass for
`--seconds`; medians over rounds of samples per second. Build both sides with the same
profile first (`make build`, or `MATURIN_PROFILE=release make build`); another commit's
release build: `benchmarks/build_at.sh COMMIT DIR`, then `--a DIR/python`.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CASE = r'''
import sys, time
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[4])
import sluice

def identity(s):
    return s

def one_pass(case):
    if case == "cv":
        from pathlib import Path
        from peers import sluice_native as N
        ds = N._cv(sluice, Path.home() / ".cache" / "sluice-bench", 2000, 0)
        return sum(len(b["label"]) for b in ds.iter(seed=0, num_threads=2, progress=False))
    if case == "text":
        import os
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "sluice-ab-lines.txt")
        if not os.path.exists(path):
            with open(path + ".part", "w") as f:
                for i in range(500_000):
                    f.write(f"line {i} of a text corpus, some words to read and hand over\n")
            os.replace(path + ".part", path)
        return sum(1 for _ in sluice.read_text(path).iter(num_threads=2, progress=False))
    if case == "rows":
        from formats import parquet_corpus
        ds = sluice.read_parquet(str(parquet_corpus()), columns=["text"])
        return sum(1 for _ in ds.iter(num_threads=2, progress=False))
    ds = sluice.range(300_000).map(identity)
    if case == "udf-batched-0t":
        return sum(len(b["id"]) for b in ds.batch(256).iter(num_threads=0, progress=False))
    threads = 0 if case == "udf-0t" else 1
    return sum(1 for _ in ds.iter(num_threads=threads, progress=False))

t0, n = time.perf_counter(), 0
while time.perf_counter() - t0 < float(sys.argv[3]):
    n += one_pass(sys.argv[2])
print(n / (time.perf_counter() - t0))
'''

CASES = ["udf-0t", "udf-1t", "udf-batched-0t", "rows", "cv", "text"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="the python/ folder of build A")
    ap.add_argument("--b", required=True, help="the python/ folder of build B")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    args = ap.parse_args()
    cases = args.cases.split(",")
    rates: dict = {}
    for r in range(args.rounds):
        for case in cases:
            sides = [("a", args.a), ("b", args.b)]
            for side, path in sides if r % 2 == 0 else sides[::-1]:
                out = subprocess.run(
                    [sys.executable, "-c", CASE, str(Path(path).resolve()), case, str(args.seconds), str(HERE)],
                    capture_output=True, text=True, timeout=600, check=True)
                rates.setdefault((case, side), []).append(float(out.stdout))
    print("| case | A samples/s | B samples/s | B / A |\n|---|---:|---:|---:|")
    for case in cases:
        a, b = (statistics.median(rates[(case, s)]) for s in "ab")
        print(f"| {case} | {a:,.0f} | {b:,.0f} | {b / a:.2f} |")


if __name__ == "__main__":
    main()
