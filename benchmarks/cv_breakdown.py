"""Where the CV reference pipeline's time goes: each op's CPU per image (the profiler, one
thread, ops unfused), and the pipeline's rate on 2 threads with float32 output, with uint8
output (`normalize` left to the accelerator: 4× fewer bytes per batch) and decoding only.

    /root/.cache/bench-venv/bin/python benchmarks/cv_breakdown.py [--rounds 3] [--min-seconds 5]

``--loop SECONDS`` only runs the float32 reference pipeline for that long (2 threads) and prints
its rate: the process to put under a profiler, e.g.
``perf record -o /tmp/cv.data python benchmarks/cv_breakdown.py --loop 12`` then
``perf report -i /tmp/cv.data --no-children --sort symbol`` (docs/BENCHMARKS.md, "CV: decoding
less").

``--busy SECONDS`` runs the float32 pipeline (2 threads) twice and prints, over
at least SECONDS of steady state after the first batch, the rate, the cores the process kept
busy (``getrusage``), each of its threads' CPU (``/proc/self/task``), and the decoding stage's
time waiting for work: what says whether the cores sit idle and which thread waits.

Needs the benchmark images (benchmarks/datasets/build.py) and a sluice build (imported from
python/). Cases run interleaved, round after round, each for at least --min-seconds; medians.
Writes benchmarks/results/cv_breakdown.{json,md}.
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

import sluice  # noqa: E402
import sluice.image as img  # noqa: E402
from peers import common as C  # noqa: E402
from peers import sluice_native as N  # noqa: E402

DATA = Path(os.environ.get("SLUICE_BENCH_DATA", Path.home() / ".cache" / "sluice-bench"))


def cases() -> dict:
    paths = [p for p, _ in C.cv_items(DATA, 2000, 0)]
    return {
        "float32 (reference)": (lambda: N._cv(sluice, DATA, 2000, 0), "label"),
        "uint8 (no normalize)": (lambda: N._cv(sluice, DATA, 2000, 0, normalize=False), "label"),
        "decode only": (lambda: sluice.read_images(paths, labels="parent_dir").map(img.decode())
                        .map(sluice.ops.select(["label"])).batch(64), "label"),
    }


def rate(make, field: str, min_seconds: float) -> float:
    """Images per second after each epoch's first batch, epochs until `min_seconds`."""
    n, seconds, t0 = 0, 0.0, time.perf_counter()
    while time.perf_counter() - t0 < min_seconds:
        it = iter(make().iter(seed=0, num_threads=2))
        next(it)
        t1 = time.perf_counter()
        n += sum(len(b[field]) for b in it)
        seconds += time.perf_counter() - t1
    return n / seconds


def busy(min_seconds: float) -> None:
    """Cores busy and per-thread CPU of the reference pipeline in steady state (``--busy``)."""
    import resource

    tck = os.sysconf("SC_CLK_TCK")

    def threads() -> dict:
        out = {}
        for tid in os.listdir("/proc/self/task"):
            try:
                stat = Path(f"/proc/self/task/{tid}/stat").read_text()
            except OSError:
                continue
            f = stat[stat.rindex(")") + 2:].split()
            out[tid] = (stat[stat.index("(") + 1:stat.rindex(")")], (int(f[11]) + int(f[12])) / tck)
        return out

    for rep in range(2):
        ds = N._cv(sluice, DATA, 100_000, 0)  # longer than any window: the threads are alive at its end
        it = iter(ds.iter(seed=rep, num_threads=2))
        next(it)
        r0, t0, th0, n = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), threads(), 0
        for b in it:
            n += len(b["label"])
            if time.perf_counter() - t0 >= min_seconds:
                break
        r1, dt, th1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - t0, threads()
        cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
        per = sorted(((name, (c - th0.get(tid, (name, 0.0))[1]) / dt) for tid, (name, c) in th1.items()),
                     key=lambda x: -x[1])
        print(f"run {rep}: {n / dt:,.0f} img/s, {cpu / dt:.2f} cores busy, {cpu / n * 1e6:.0f} µs CPU per image")
        print("  threads (cores): " + ", ".join(f"{name} {c:.2f}" for name, c in per if c >= 0.005))
        del it
        stage = ds.stats().stages[1]
        print(f"  {stage['name'][:40]}: busy {stage['busy_s']:.2f} s, waiting for work {stage['wait_in_s']:.2f} s "
              f"(of {stage['busy_s'] + stage['wait_in_s'] + stage['wait_out_s']:.2f} thread-seconds)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-seconds", type=float, default=5.0)
    ap.add_argument("--loop", type=float, default=0.0, help="only run the reference pipeline this many seconds")
    ap.add_argument("--busy", type=float, default=0.0, help="cores busy and per-thread CPU over this many seconds")
    args = ap.parse_args()
    if args.busy > 0:
        busy(args.busy)
        return
    if args.loop > 0:
        print(f"float32 (reference): {rate(cases()['float32 (reference)'][0], 'label', args.loop):.0f} img/s")
        return
    prof = N._cv(sluice, DATA, 2000, 0).profile(samples=400, seconds=30)
    ops = [(o["name"], o["cpu_s"] / max(o["items_in"], 1) * 1e6) for o in [prof.data["source"]] + prof.data["ops"]]
    runs: dict = {k: [] for k in cases()}
    for r in range(args.rounds):
        for name, (make, field) in cases().items():
            runs[name].append(rate(make, field, args.min_seconds))
            print(f"round {r}: {name:22s} {runs[name][-1]:8.0f} img/s", flush=True)
    total = sum(us for _, us in ops)
    lines = ["| step | CPU µs per image | share |", "|---|---:|---:|"]
    lines += [f"| {n} | {us:.0f} | {us / total:.0%} |" for n, us in ops]
    lines += [f"| all | {total:.0f} | |", "", "| 2 threads | images/s | × decode only |", "|---|---:|---:|"]
    dec = statistics.median(runs["decode only"])
    for name, vals in runs.items():
        lines.append(f"| {name} | {statistics.median(vals):,.0f} | {statistics.median(vals) / dec:.2f} |")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "cv_breakdown.json").write_text(json.dumps({"ops_us": ops, "runs": runs}, indent=1))
    (out / "cv_breakdown.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
