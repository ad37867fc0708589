"""Does `iter(optimize=True)` ever lose to the default plan? Two epochs of each pipeline on a
fresh Dataset each time (no plan reused from an earlier case), each epoch timed from `iter()`
to its last batch, for the default plan and for `optimize=True`, interleaved. The first
`optimize=True` epoch is the one that profiles (it runs the default plan timing its ops), so
what profiling costs counts against it; the second runs the plan made from those timings.
Also the steady rate of each first epoch after its first batch, the milliseconds making the
plan from the timings takes (`it.plan` after the first epoch: `run_profile` + `optimize()`),
and that plan against the default on one dataset, epoch for epoch (`plan_ab`).

    .venv/bin/python benchmarks/optimize_vs_default.py [--rounds 5] [--min-seconds 5]
        [--workloads cv,nlp,asr,cedar] [--samples 2000] [--timing-overhead PAIRS]

`--timing-overhead PAIRS` only measures what timing ops costs: epochs with and without
`time_ops` on one dataset, interleaved.

Pipelines: the CV, NLP and ASR reference workloads (benchmarks/peers/sluice_native.py) and
a cedar-like CV pipeline (cedar's CV-torch: crop 244, flip, colour jitter 0.1, 1-channel
grayscale, blur 11, normalize, batch 64), each over `--samples` source samples per epoch
(NLP: lines; the 480 clips repeat to make 2,000). Each round runs each case for epochs until
`--min-seconds` have passed; the table gives medians over rounds of samples per second.
Needs the benchmark data (benchmarks/datasets/build.py; ~/.cache/sluice-bench) and a sluice
build (imported from python/). Writes benchmarks/results/optimize_vs_default.{json,md}.
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
from peers import common as C  # noqa: E402
from peers import sluice_native as N  # noqa: E402

DATA = Path(os.environ.get("SLUICE_BENCH_DATA", Path.home() / ".cache" / "sluice-bench"))


def cedar(samples: int, seed: int):
    """cedar's CV-torch pipeline as sluice ops (every augmentation applied, as cedar's are)."""
    import sluice.image as img

    paths = [p for p, _ in C.cv_items(DATA, samples, seed)]
    return (sluice.read_images(paths, labels="parent_dir")
            .map(img.decode())
            .map(img.random_resized_crop(244, scale=C.CV_SCALE, ratio=C.CV_RATIO))
            .map(img.horizontal_flip(p=0.5))
            .map(img.color_jitter(0.1, 0.1, 0.1, 0.1, p=1.0))
            .map(img.grayscale(p=1.0, num_output_channels=1))
            .map(img.gaussian_blur(11, sigma=(0.1, 2.0), p=1.0))
            .map(img.normalize([0.5], [0.25]))
            .map(sluice.ops.select(["image", "label"]))
            .batch(64))


def nlp(samples: int, seed: int):
    """The NLP reference pipeline over the corpus's first `samples` lines (one epoch)."""
    with open(C.text_file(DATA), encoding="utf-8") as f:
        lines = [next(f).rstrip("\n") for _ in range(samples)]
    return N.nlp_ops(sluice, sluice.from_source([{"text": line} for line in lines]), DATA)


def build(workload: str, samples: int, seed: int):
    if workload == "cedar":
        return cedar(samples, seed)
    if workload == "nlp":
        return nlp(samples, seed)
    return {"cv": N._cv, "asr": N._asr}[workload](sluice, DATA, samples, seed)


def rows_of(batch) -> int:
    return len(next(iter(batch.values())))


def timed_epoch(ds, optimize: bool) -> dict:
    """One epoch: total seconds (profiling included), seconds to the first batch, rows, the
    rate after the first batch, and the iterator."""
    t0 = time.perf_counter()
    it = ds.iter(seed=0, optimize=optimize)
    first_rows = rows_of(next(it))
    first = time.perf_counter()
    rows = first_rows + sum(rows_of(b) for b in it)
    t1 = time.perf_counter()
    return {"seconds": t1 - t0, "first": first - t0, "rows": rows,
            "steady": (rows - first_rows) / max(t1 - first, 1e-9), "it": it}


def epoch(workload: str, samples: int, optimize: bool) -> dict:
    """Two epochs on a fresh dataset: the first (for `optimize=True`, the one timing its
    ops), the milliseconds the plan then takes to make, and the second (the plan run)."""
    ds = build(workload, samples, 0)
    one = timed_epoch(ds, optimize)
    t0 = time.perf_counter()
    plan = one.pop("it").plan
    planning = time.perf_counter() - t0
    two = timed_epoch(ds, optimize)
    two.pop("it")
    ran = "default"
    if plan is not None:
        last = plan.data["decisions"][-1] if plan.data["decisions"] else ""
        ran = "default (fallback)" if "ran the default plan" in last else "optimized"
    return {**one, "plan": ran, "planning_ms": planning * 1e3, "second": two}


def plan_ab(workload: str, samples: int, seconds: float) -> float:
    """Later epochs on one dataset: the plan its first `optimize=True` epoch made against the
    default plan, epoch for epoch interleaved for `seconds` each; the median ratio of their
    epoch times (default / plan: above 1, the plan is faster). Fresh datasets make the
    two-epoch figures noisy for short epochs (NLP's last 7 ms); this one is not."""
    ds = build(workload, samples, 0)
    it = ds.iter(seed=0, optimize=True)
    for _ in it:
        pass
    plan = it.plan
    ratios, spent = [], 0.0
    while spent < 2 * seconds or len(ratios) < 5:
        t = {}
        # Each goes first in every other pair: what the first run leaves (freed memory,
        # caches) does not favour either.
        for p in (None, plan) if len(ratios) % 2 == 0 else (plan, None):
            t0 = time.perf_counter()
            for _ in ds.iter(seed=0, plan=p):
                pass
            t[p is None] = time.perf_counter() - t0
        ratios.append(t[True] / t[False])
        spent += sum(t.values())
    return statistics.median(ratios)


def timing_overhead(workload: str, samples: int, pairs: int) -> tuple[float, float]:
    """Median milliseconds of one epoch untimed and with its ops timed (`time_ops`, what the
    first `optimize=True` epoch does), over `pairs` interleaved pairs on one dataset, each
    side first in every other pair."""
    ds = build(workload, samples, 0)

    def run(timed: bool) -> float:
        t0 = time.perf_counter()
        for _ in ds._native.iter(seed=0, time_ops=timed):
            pass
        return time.perf_counter() - t0

    for _ in range(10):  # warm: tokenizer caches, page cache
        run(False), run(True)
    times: dict = {False: [], True: []}
    for k in range(pairs):
        for timed in (False, True) if k % 2 == 0 else (True, False):
            times[timed].append(run(timed))
    return statistics.median(times[False]) * 1e3, statistics.median(times[True]) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-seconds", type=float, default=5.0)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--workloads", default="cv,nlp,asr,cedar")
    ap.add_argument("--timing-overhead", type=int, metavar="PAIRS", default=0,
                    help="only measure what timing ops costs an epoch, over PAIRS interleaved pairs")
    args = ap.parse_args()
    if args.timing_overhead:
        for w in args.workloads.split(","):
            plain, timed = timing_overhead(w, args.samples, args.timing_overhead)
            print(f"{w}: untimed {plain:.3f} ms, timed {timed:.3f} ms an epoch ({timed / plain - 1:+.1%})")
        return
    workloads = args.workloads.split(",")
    cases = [(w, o) for w in workloads for o in (False, True)]
    for w, o in cases:
        epoch(w, min(args.samples, 256), o)  # warm: page cache, tokenizer load, code paths
    runs: dict = {c: [] for c in cases}
    for r in range(args.rounds):
        for c in cases:
            t0, eps = time.perf_counter(), []
            while time.perf_counter() - t0 < args.min_seconds:
                eps.append(epoch(c[0], args.samples, c[1]))
            rate = sum(e["rows"] for e in eps) / sum(e["seconds"] for e in eps)
            second = sum(e["second"]["rows"] for e in eps) / sum(e["second"]["seconds"] for e in eps)
            runs[c].append({"rate": rate, "second": second, "epochs": len(eps), "plan": eps[-1]["plan"],
                            "first": statistics.median(e["first"] for e in eps),
                            "steady": statistics.median(e["steady"] for e in eps),
                            "planning_ms": statistics.median(e["planning_ms"] for e in eps)})
            print(f"round {r}: {c[0]:6s} optimize={c[1]!s:5s} {rate:10.1f}/s, second epoch {second:10.1f}/s"
                  f" over {len(eps)} pairs of epochs ({eps[-1]['plan']})", flush=True)

    cpu = C.cpu_model()
    rows = []
    lines = ["| pipeline | default samples/s (first epoch) | optimize=True samples/s (first epoch, profiling "
             "included) | ratio | plan made | second epoch ratio | first batch default / optimize (s) "
             "| steady ratio | making the plan (ms) | plan / default, same dataset |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    for w in workloads:
        d, o = runs[(w, False)], runs[(w, True)]
        dm, om = statistics.median(x["rate"] for x in d), statistics.median(x["rate"] for x in o)
        ratios = [b["rate"] / a["rate"] for a, b in zip(d, o)]
        seconds = [b["second"] / a["second"] for a, b in zip(d, o)]
        steady = statistics.median(b["steady"] / a["steady"] for a, b in zip(d, o))
        fd, fo = statistics.median(x["first"] for x in d), statistics.median(x["first"] for x in o)
        plan_ms = statistics.median(x["planning_ms"] for x in o)
        same = plan_ab(w, args.samples, args.min_seconds)
        rows.append({"workload": w, "default": dm, "optimize": om, "ratio": om / dm,
                     "ratios": ratios, "second_ratios": seconds, "plan": o[-1]["plan"], "first_default": fd,
                     "first_optimize": fo, "steady_ratio": steady, "planning_ms": plan_ms, "same_dataset_ratio": same,
                     "runs": {"default": d, "optimize": o}})
        lines.append(f"| {w} | {dm:,.0f} | {om:,.0f} | **{om / dm:.2f}** ({min(ratios):.2f}–{max(ratios):.2f}) "
                     f"| {o[-1]['plan']} | {statistics.median(seconds):.2f} ({min(seconds):.2f}–{max(seconds):.2f}) "
                     f"| {fd:.2f} / {fo:.2f} | {steady:.2f} | {plan_ms:.2f} | {same:.3f} |")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    meta = {"cpu": cpu, "cores": os.cpu_count(), "samples": args.samples, "rounds": args.rounds,
            "min_seconds": args.min_seconds, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    (out / "optimize_vs_default.json").write_text(json.dumps({**meta, "rows": rows}, indent=1))
    text = "\n".join(lines)
    (out / "optimize_vs_default.md").write_text(text + "\n")
    print(f"\n{meta}\n{text}")


if __name__ == "__main__":
    main()
