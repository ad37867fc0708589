"""Does `iter(optimize=True)` ever lose to the default plan? One epoch of each pipeline, timed
from `iter()` to its last batch — so the optimizer's profiling and planning count against it
— for the default plan and for `optimize=True`, interleaved, on a fresh Dataset each time
(no plan reused from an earlier epoch). Also the steady rate of each after its first batch,
and the milliseconds the profile and `optimize()` take before an optimized run starts.

    .venv/bin/python benchmarks/optimize_vs_default.py [--rounds 5] [--min-seconds 5]
        [--workloads cv,nlp,asr,cedar] [--samples 2000]

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
sys.path.insert(0, str(HERE.parent / "python"))
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


def epoch(workload: str, samples: int, optimize: bool) -> dict:
    """One epoch on a fresh dataset: total seconds (profiling included), seconds to the first
    batch, rows, the rate after the first batch, and which plan ran."""
    ds = build(workload, samples, 0)
    t0 = time.perf_counter()
    it = ds.iter(seed=0, optimize=optimize)
    first_rows = rows_of(next(it))
    first = time.perf_counter()
    rows = first_rows + sum(rows_of(b) for b in it)
    t1 = time.perf_counter()
    plan = "default"
    if it.plan is not None:
        last = it.plan.data["decisions"][-1] if it.plan.data["decisions"] else ""
        plan = "default (fallback)" if "ran the default plan" in last else "optimized"
    return {"seconds": t1 - t0, "first": first - t0, "rows": rows, "plan": plan,
            "steady": (rows - first_rows) / max(t1 - first, 1e-9)}


def planning_ms(workload: str, samples: int, reps: int = 20) -> tuple[float, float]:
    """Median milliseconds of what `iter(optimize=True)` does before it starts: the profile
    (`profile(epoch_share=0.01)`, as `Dataset._optimized_plan` takes it) and `optimize()`."""
    from sluice.optimizer import OptimizerOptions

    prof, plan = [], []
    for _ in range(reps + 1):  # the first is a warm-up
        ds = build(workload, samples, 0)
        t0 = time.perf_counter()
        p = ds.profile(samples=100, seconds=5.0, seed=0, epoch_share=0.01)
        t1 = time.perf_counter()
        ds.optimize(p, OptimizerOptions(), 0)
        prof.append(t1 - t0)
        plan.append(time.perf_counter() - t1)
    return statistics.median(prof[1:]) * 1e3, statistics.median(plan[1:]) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--min-seconds", type=float, default=5.0)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--workloads", default="cv,nlp,asr,cedar")
    args = ap.parse_args()
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
            runs[c].append({"rate": rate, "epochs": len(eps), "plan": eps[-1]["plan"],
                            "first": statistics.median(e["first"] for e in eps),
                            "steady": statistics.median(e["steady"] for e in eps)})
            print(f"round {r}: {c[0]:6s} optimize={c[1]!s:5s} {rate:10.1f}/s over {len(eps)} epochs"
                  f" ({eps[-1]['plan']})", flush=True)

    cpu = C.cpu_model()
    rows = []
    lines = ["| pipeline | default samples/s (epoch) | optimize=True samples/s (epoch, profiling included) "
             "| ratio | plan run | first batch default / optimize (s) | steady ratio "
             "| profile / optimize() (ms) |",
             "|---|---:|---:|---:|---|---:|---:|---:|"]
    for w in workloads:
        d, o = runs[(w, False)], runs[(w, True)]
        dm, om = statistics.median(x["rate"] for x in d), statistics.median(x["rate"] for x in o)
        ratios = [b["rate"] / a["rate"] for a, b in zip(d, o)]
        steady = statistics.median(b["steady"] / a["steady"] for a, b in zip(d, o))
        fd, fo = statistics.median(x["first"] for x in d), statistics.median(x["first"] for x in o)
        prof_ms, plan_ms = planning_ms(w, args.samples)
        rows.append({"workload": w, "default": dm, "optimize": om, "ratio": om / dm,
                     "ratios": ratios, "plan": o[-1]["plan"], "first_default": fd,
                     "first_optimize": fo, "steady_ratio": steady, "profile_ms": prof_ms,
                     "optimize_ms": plan_ms, "runs": {"default": d, "optimize": o}})
        lines.append(f"| {w} | {dm:,.0f} | {om:,.0f} | **{om / dm:.2f}** ({min(ratios):.2f}–{max(ratios):.2f}) "
                     f"| {o[-1]['plan']} | {fd:.2f} / {fo:.2f} | {steady:.2f} | {prof_ms:.2f} / {plan_ms:.2f} |")
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
