"""Optimizer ablation (cedar-style) and cost-model accuracy, per workload.

For each workload the same pipeline runs under plans made with more and more rules on:
baseline (every op its own stage, all inline in the consumer: one core) → +parallelism →
+reorder → +fusion → +caching → +controller. Each configuration is measured in steady state
— the first epoch is skipped (a cache is warm, threads and the consumer are past start-up),
then samples are counted for ``--seconds`` — and compared with the throughput the cost model
predicted for that plan.

The profile the plans are made from covers the whole epoch, is the per-step median of three
profiles, and is taken after one unmeasured pass over the data, in the state the measured
epochs run in: the tokenizer's word cache, for one, is warm from the
second epoch on, and a profile of a cold tokenizer over-states its cost (``--cold-profile``
shows by how much). The predictions are then judged with the median of those three and one
more profile per round (``Plan.predict``; the plans stay those made first): the machine's
speed drifts by ±20% over tens of seconds, so op costs and measured rates are sampled over
the same minutes.

The pipelines are written the way a user might (augmentations before the crop), so AutoOrder
has work to do; the data are the benchmark datasets (``benchmarks/datasets/build.py``).

Usage: python benchmarks/optimizer.py [--workloads cv,nlp,asr] [--rounds 3] [--seconds 4]
       [--cold-profile] [--profile-only] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sluice  # noqa: E402
import sluice.audio as A  # noqa: E402
import sluice.image as I  # noqa: E402
import sluice.text as T  # noqa: E402
from peers import common as C  # noqa: E402
from sluice import OptimizerOptions  # noqa: E402



def cv(data: Path, n: int):
    paths = [p for p, _ in C.image_files(data)][:n]
    return (
        sluice.read_images(paths, labels="parent_dir")
        .shuffle(seed=0)
        .repeat()
        .map(I.decode())
        .map(I.color_jitter(*C.CV_JITTER, p=C.CV_JITTER_P))
        .map(I.gaussian_blur(C.CV_BLUR_KERNEL, sigma=C.CV_BLUR_SIGMA, p=C.CV_BLUR_P))
        .map(I.random_resized_crop(C.CV_SIZE, scale=C.CV_SCALE, ratio=C.CV_RATIO))
        .map(I.horizontal_flip(C.CV_FLIP_P))
        .map(I.normalize(C.MEAN, C.STD))
        .batch(C.CV_BATCH)
    )


def nlp(data: Path, n: int):
    lines = C.text_file(data).read_text(encoding="utf-8").splitlines()[:n]
    return (
        sluice.from_items([{"text": line} for line in lines])
        .repeat()
        .map(T.tokenize(str(C.tokenizer_file(data)), add_special_tokens=False))
        .map(T.truncate(C.NLP_LEN - 2))
        .map(T.add_tokens(bos=C.NLP_BOS, eos=C.NLP_EOS))
        .map(T.pad(C.NLP_LEN, pad_id=C.NLP_PAD))
        .batch(C.NLP_BATCH)
    )


def asr(data: Path, n: int):
    return (
        sluice.read_files(C.audio_files(data)[:n])
        .repeat()
        .map(A.decode(C.ASR_RATE))
        .map(A.spectrogram(C.ASR_NFFT, C.ASR_HOP, power=2.0, out="features"))
        .map(A.time_stretch(C.ASR_STRETCH, field="features"))
        .map(A.time_mask(C.ASR_TIME_MASK, field="features"))
        .map(A.freq_mask(C.ASR_FREQ_MASK, field="features"))
        .map(A.mel(C.ASR_MELS, C.ASR_RATE, field="features"))
        .map(A.log(C.ASR_LOG_EPS, field="features"))
        .batch(C.ASR_BATCH)
    )


WORKLOADS = {"cv": (cv, 256), "nlp": (nlp, 20000), "asr": (asr, 160)}

STEPS = [
    ("baseline", {}),
    ("+parallelism", {"enable_local_parallelism": True}),
    ("+reorder", {"enable_reorder": True}),
    ("+fusion", {"enable_fusion": True}),
    ("+caching", {"enable_caching": True, "enable_prefetch": True}),
    ("+controller", {"enable_controller": True}),
]


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(ds, plan, n: int, seconds: float, chunk_size: int | None = None) -> tuple[float, float]:
    """Samples/s over `seconds` after the first epoch (which warms caches and threads up),
    and the process's CPU µs per sample over the same window (all threads). `chunk_size`
    caps the source's chunks (they still start at the plan's size)."""
    seen = 0
    t0 = None
    for b in ds.iter(seed=0, plan=plan, progress=False, chunk_size=chunk_size):
        seen += len(next(iter(b.values())))
        if t0 is None:
            if seen >= n:
                t0, base, c0 = time.perf_counter(), seen, cpu_s()
        elif time.perf_counter() - t0 >= seconds:
            break
    done = seen - base
    return done / (time.perf_counter() - t0), (cpu_s() - c0) / done * 1e6


def warm_up(ds, n: int) -> None:
    """One pass over the data in the consumer thread (every op sees every sample once)."""
    seen = 0
    for b in ds.iter(seed=0, num_threads=1, progress=False):
        seen += len(next(iter(b.values())))
        if seen >= n:
            break


def median_profile(profiles: list) -> sluice.Profile:
    """Per step, the median CPU and wall time of several profiles (the machine's speed
    drifts by ±15% over seconds; a single short profile can land in a slow or fast spell)."""
    doc = json.loads(profiles[0].to_json())
    for key in ("cpu_s", "wall_s", "parallel_efficiency"):
        doc["source"][key] = statistics.median(p.data["source"][key] for p in profiles)
        for i, op in enumerate(doc["ops"]):
            op[key] = statistics.median(p.data["ops"][i][key] for p in profiles)
    return sluice.Profile(json.dumps(doc))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="cv,nlp,asr")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0, help="measured window per configuration")
    ap.add_argument("--profile-samples", type=int, default=0,
                    help="samples to profile (default: the whole epoch, so the profile is no "
                         "noisier than the measurement)")
    ap.add_argument("--cold-profile", action="store_true",
                    help="profile before the warm-up pass (a cold tokenizer cache, first file reads)")
    ap.add_argument("--profile-only", action="store_true",
                    help="print each op's CPU per item and parallel efficiency, measure no plans")
    ap.add_argument("--data", default=str(C.default_data_dir()))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    data = Path(args.data)
    results = {"machine": {"cores": os.cpu_count(), "python": platform.python_version()}, "workloads": {}}
    for w in args.workloads.split(","):
        build, n = WORKLOADS[w]
        ds = build(data, n)
        n = min(n, ds._native.source_len() or n)
        if not args.cold_profile:
            warm_up(ds, n)
        def profile():
            return ds.profile(samples=args.profile_samples or n, seconds=30)

        profiles = [profile() for _ in range(3)]
        prof = median_profile(profiles)
        # What the model prices: each op's CPU per item and how it scales over the cores.
        ops = {o["name"]: {"cpu_us": round(o["cpu_s"] / max(o["items_in"], 1) * 1e6, 2),
                           "parallel_efficiency": round(o["parallel_efficiency"], 2)}
               for o in prof.data["ops"]}
        print(f"{w} profile (median of 3): {json.dumps(ops)}", file=sys.stderr)
        if args.profile_only:
            results["workloads"][w] = {"profile": prof.data}
            continue
        opts = OptimizerOptions.baseline()
        plans = []
        for name, change in STEPS:
            for k, v in change.items():
                setattr(opts, k, v)
            plans.append((name, ds.optimize(prof, OptimizerOptions(**vars(opts)))))
        measured: dict[str, list[float]] = {name: [] for name, _ in plans}
        cpu: dict[str, list[float]] = {name: [] for name, _ in plans}
        for r in range(args.rounds):  # interleaved: A B C ... A B C ...
            # A profile per round too: the machine's speed drifts by ±20% over tens of
            # seconds, so the op costs the predictions are judged with are sampled over the
            # same minutes as the rates they are compared to (the plans stay those made above).
            profiles.append(profile())
            for name, plan in plans:
                rate, us = measure(ds, plan, n, args.seconds)
                measured[name].append(rate)
                cpu[name].append(us)
                print(f"{w} round {r} {name}: {rate:.1f}/s, {us:.2f} CPU µs/sample", file=sys.stderr)
        judged = median_profile(profiles)
        rows = []
        for name, plan in plans:
            m = statistics.median(measured[name])
            p = plan.predict(ds, judged)["throughput"]
            c = statistics.median(cpu[name])
            rows.append({"step": name, "measured": m, "predicted": p, "error": p / m - 1,
                         "predicted_when_planned": plan.predicted_throughput,
                         "cpu_us_per_sample": c, "cores_busy": m * c / 1e6,
                         "bottleneck": plan.bottleneck, "stages": [s["label"] + f" [{s.get('variant')}"
                         + (f"={s.get('threads') or s.get('workers')}" if s.get("variant") != "inline" else "") + "]"
                         for s in plan.stages]})
        results["workloads"][w] = {"samples_per_epoch": n, "steps": rows, "profile": judged.data}
        base = rows[0]["measured"]
        print(f"\n### {w} ({n} samples/epoch; {args.seconds:g} s after the first epoch; "
              f"profile of {prof.data['samples']} samples, {'cold' if args.cold_profile else 'warm'}; "
              f"predictions from the median of {len(profiles)} profiles spread over the rounds)\n")
        print("| plan | samples/s | × baseline | predicted | model error | bottleneck | CPU µs/sample | cores busy |")
        print("|---|---:|---:|---:|---:|---|---:|---:|")
        for r in rows:
            print(f"| {r['step']} | {r['measured']:.1f} | {r['measured'] / base:.2f} | {r['predicted']:.1f} "
                  f"| {100 * r['error']:+.0f}% | {r['bottleneck']} | {r['cpu_us_per_sample']:.2f} "
                  f"| {r['cores_busy']:.2f} |")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
