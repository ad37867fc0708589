"""Ray offload: per-sample overhead vs local for each reference workload (with and without
zero-copy results), local-only vs hybrid throughput, the transfer constants of the cost
model, and the model's predicted scaling for N remote nodes with its validation.

    PYTHONPATH=$PWD/python .venv/bin/python benchmarks/ray_overhead.py \\
        [--workloads noop,cv,nlp,asr] [--samples 2000] [--reps 3] [--out FILE]
    ... --quick        # smoke run: tiny inputs, one rep (checks the script, not speed)

Workloads (benchmarks/peers/sluice_native.py, data from ``make bench-setup`` under
``~/.cache/sluice-bench``): ``noop`` (``range`` + ``select``: the pure cost of a chunk's
round trip), ``cv`` (SimCLR augmentations → float32 224², batch 64), ``nlp`` (GPT-2 BPE,
truncate/pad 256, batch 128), ``asr`` (MP3 → 16 kHz → STFT → stretch → masks → mel → log).

Placements, interleaved (local, ray, ray-frames, hybrid, local, ...), medians reported:
``local`` 2 threads; ``ray`` 2 actors, replies split (tensors out of band through the object
store); ``ray-frames`` 2 actors, replies as one byte frame (the path before zero-copy);
``hybrid`` 1 local worker + 1 actor. On a 2-core machine the actors compete with the
consumer for the same cores, so Ray rates here are lower bounds.

Cost model section: the transfer constants (per-chunk round trip, actor and driver CPU per
chunk) measured on ``noop``, then for CV the optimizer's own prediction
(``OptimizerOptions(enable_offload=True)``) for N remote 8-CPU nodes with those constants
(float32 output at 10 Gb/s; uint8 output at 10 and 100 Gb/s), validated against runs
measured here: the optimizer's local plan, and every stage on 2 actors (``Plan.predict``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import psutil  # noqa: E402

import sluice  # noqa: E402
from peers import common as C  # noqa: E402
from peers import sluice_native as N  # noqa: E402
from sluice import OptimizerOptions  # noqa: E402


def workload(name: str, data: pathlib.Path, samples: int):
    """The pipeline and its chunk size on Ray (a chunk is one Ray task)."""
    if name == "noop":
        return sluice.range(samples).map(sluice.ops.select(["id"])).batch(256), 256
    build = {"cv": N._cv, "nlp": N._nlp, "asr": N._asr}[name]
    chunk = {"cv": 16, "nlp": 64, "asr": 8}[name]
    return build(sluice, data, samples, 0), chunk


def run(ds, ctx, chunk: int, samples: int, batch: int, plan=None) -> dict:
    """Steady state after the first batch (actor start-up reported apart): seconds, samples,
    output bytes, time to first batch, this process's CPU seconds, and the pool's report."""
    me = psutil.Process()
    t0 = time.perf_counter()
    if plan is not None:
        it = ds.iter(seed=0, plan=plan, progress=False)
    else:
        it = ds.iter(seed=0, num_threads=2, chunk_size=chunk, context=ctx, progress=False)
    n = nbytes = 0
    t1 = cpu1 = None
    for b in it:
        if t1 is None:
            t1, cpu1 = time.perf_counter(), me.cpu_times()
            continue
        n += len(next(iter(b.values())))
        nbytes += sum(getattr(v, "nbytes", 0) for v in b.values())
        if n + batch > samples:
            break
    t2, cpu2 = time.perf_counter(), me.cpu_times()
    stats = it.stats()
    it.close()
    pools = stats.data.get("remote", [])
    return {
        "seconds": t2 - t1,
        "samples": n,
        "bytes": nbytes,
        "first_batch_s": t1 - t0,
        "driver_cpu_s": (cpu2.user + cpu2.system) - (cpu1.user + cpu1.system),
        "chunks": sum(p["chunks"] for p in pools),
    }


def medians(rs: list[dict]) -> dict:
    out = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
    out["rate"] = out["samples"] / max(out["seconds"], 1e-9)
    return out


def transfer_constants(chunk: int, batches: int) -> dict:
    """The model's per-chunk terms, measured on ``noop`` (its op costs ~nothing): one actor
    with one chunk in flight, so each chunk's wall time is a full round trip."""
    import ray

    ds = sluice.range(1 << 20).repeat().map(sluice.ops.select(["id"])).batch(chunk)
    me = psutil.Process()

    def measure(ctx, threads):
        it = ds.iter(seed=0, num_threads=threads, chunk_size=chunk, context=ctx, progress=False)
        next(it)
        actors = []
        if ctx is not None:
            actors = [psutil.Process(p) for p in ray.get([h.pid.remote() for h in ctx.pools()[-1].actor_handles()])]
        cpu = lambda ps: sum(sum(p.cpu_times()[:2]) for p in ps)  # noqa: E731
        a0, c0, t0 = cpu(actors), cpu([me]), time.perf_counter()
        for _ in range(batches):
            next(it)
        t1, c1, a1 = time.perf_counter(), cpu([me]), cpu(actors)
        it.close()
        return t1 - t0, c1 - c0, a1 - a0

    _, local_cpu, _ = measure(None, 1)
    one = sluice.Context("auto", num_actors=1, actor_cpus=0, in_flight_per_actor=1)
    wall, driver_cpu, actor = measure(one, 1)
    return {
        "chunk": chunk,
        "offload_round_trip_s": wall / batches,
        "offload_actor_s_per_chunk": actor / batches,
        # This process's CPU per chunk beyond what the same pipeline costs locally.
        "offload_driver_s_per_chunk": max(driver_cpu - local_cpu, 0.0) / batches,
    }


NODE_CPUS = 8  # Pecan's workers: n2-standard-8


def model_section(data: pathlib.Path, samples: int, reps: int, measured: dict, constants: dict) -> dict:
    """The optimizer's prediction for CV on N remote 8-CPU nodes, and its validation."""
    base = OptimizerOptions(
        enable_offload=True,
        enable_fallback=False,  # the offload rule's own plan is what this section studies
        offload_round_trip_s=constants["offload_round_trip_s"],
        offload_actor_s_per_chunk=constants["offload_actor_s_per_chunk"],
        offload_driver_s_per_chunk=constants["offload_driver_s_per_chunk"],
    )
    ctx = sluice.Context("auto", actor_cpus=1)
    out: dict = {"constants": constants, "scaling": {}, "validation": {}}
    series = {
        "cv float32 out, 10 Gb/s": (workload("cv", data, samples)[0], 1.25e9),
        "cv uint8 out, 10 Gb/s": (N._cv(sluice, data, samples, 0, normalize=False), 1.25e9),
        "cv uint8 out, 100 Gb/s": (N._cv(sluice, data, samples, 0, normalize=False), 12.5e9),
    }
    profiles = {}
    for name, (ds, bandwidth) in series.items():
        profile = profiles.setdefault(id(ds), ds.profile(samples=min(samples, 100)))
        rows = out["scaling"][name] = {}
        for nodes in (1, 2, 4, 8, 16):
            o = dataclasses.replace(
                base, remote_cpus=float(NODE_CPUS * nodes), remote_shares_local_cores=False, offload_bandwidth=bandwidth
            )
            plan = ctx.optimize(ds, profile, o)
            ray_stages = [s for s in plan.stages if s.get("backend") == "ray"]
            rows[nodes] = {
                "predicted": plan.predicted_throughput,
                "bottleneck": plan.bottleneck,
                "actors": sum(s["workers"] for s in ray_stages),
                "offloaded": [s["label"] for s in ray_stages],
            }
    # Validation: the model's prediction for placements measured on this machine — the
    # optimizer's local plan (run here) and the 2-actor placement measured above as "ray"
    # (every stage on 2 actors sharing these 2 cores).
    ds, chunk = workload("cv", data, samples)
    profile = ds.profile(samples=min(samples, 100))
    local_plan = ds.optimize(profile, OptimizerOptions())
    local_run = medians([run(ds, None, chunk, samples, C.CV_BATCH, plan=local_plan) for _ in range(reps)])
    ray2 = sluice.Context("auto", num_actors=2, actor_cpus=0)
    here = dataclasses.replace(base, remote_cpus=2.0, remote_shares_local_cores=True, actor_cpus=0.0)
    explicit = ray2.explicit_plan(ds)
    cv = measured.get("cv", {})
    out["validation"] = {
        "local_plan_predicted": local_plan.predicted_throughput,
        "local_plan_measured": local_run["rate"],
        "ray2_predicted": explicit.predict(ds, profile, here)["throughput"],
        "ray2_measured": cv.get("ray", {}).get("rate"),
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="noop,cv,nlp,asr")
    ap.add_argument("--samples", type=int, default=2000, help="samples per timed run (noop: x100)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--data", default=str(C.default_data_dir()))
    ap.add_argument("--quick", action="store_true", help="smoke run: tiny inputs, one rep")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.quick:
        args.samples, args.reps = 200, 1
    data = pathlib.Path(args.data)

    import ray

    tmp = tempfile.mkdtemp(prefix="srb", dir="/tmp")
    os.environ["PYTHONPATH"] = str(ROOT / "python") + os.pathsep + os.environ.get("PYTHONPATH", "")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=300_000_000, _temp_dir=tmp, log_to_driver=False)
    placements = {
        "local": None,
        "ray": sluice.Context("auto", num_actors=2, actor_cpus=0),
        "ray-frames": sluice.Context("auto", num_actors=2, actor_cpus=0, zero_copy=False),
        "hybrid": sluice.Context("auto", num_actors=1, local_workers=1, actor_cpus=0),
    }
    results: dict = {"machine": {"cores": os.cpu_count()}, "workloads": {}}
    for name in [w for w in args.workloads.split(",") if w]:
        samples = args.samples * (100 if name == "noop" else 1)
        ds, chunk = workload(name, data, samples + 512)
        batch = {"noop": 256, **C.BATCH}[name]
        run(ds, placements["ray"], chunk, min(samples, 4 * batch), batch)  # warm-up: page cache, actor start
        runs: dict[str, list] = {p: [] for p in placements}
        for _ in range(args.reps):
            for pname, ctx in placements.items():
                runs[pname].append(run(ds, ctx, chunk, samples, batch))
        res = {p: medians(rs) for p, rs in runs.items()}
        loc = res["local"]
        for p in ("ray", "ray-frames", "hybrid"):
            # Wall time added per sample vs local, at the same worker count.
            res[p]["overhead_us_per_sample"] = (1 / res[p]["rate"] - 1 / loc["rate"]) * 1e6
        res["chunk"] = chunk
        res["out_bytes_per_sample"] = loc["bytes"] / max(loc["samples"], 1)
        results["workloads"][name] = res
        print(f"\n{name}: {loc['samples']} samples, chunk {chunk}, {res['out_bytes_per_sample'] / 1e3:.1f} KB/sample out, medians of {args.reps}")
        for p in placements:
            r = res[p]
            extra = f"  +{r['overhead_us_per_sample']:8.1f} us/sample vs local" if p != "local" else ""
            print(f"  {p:11s} {r['rate']:11.1f} samples/s  first batch {r['first_batch_s']:5.2f} s{extra}")

    constants = transfer_constants(chunk=64, batches=50 if args.quick else 2000)
    results["constants"] = constants
    print("\ntransfer constants (noop, 1 actor, 1 chunk in flight, chunk 64):")
    for k, v in constants.items():
        print(f"  {k:28s} {v * 1e3 if k != 'chunk' else v:.3f}{' ms' if k != 'chunk' else ''}")
    if "cv" in results["workloads"] or args.quick:
        m = model_section(data, min(args.samples, 400) if args.quick else args.samples, args.reps, results["workloads"], constants)
        results["model"] = m
        print(f"\ncost model on N remote {NODE_CPUS}-CPU nodes (the optimizer's offload rule):")
        for name, rows in m["scaling"].items():
            print(f"  {name}:")
            for nodes, r in rows.items():
                print(f"    N={nodes:2d}: {r['predicted']:9.0f} samples/s, {r['actors']:4d} actors, bound: {r['bottleneck']}")
        v = m["validation"]
        print("validation on this machine (predicted vs measured samples/s):")
        print(f"  optimized local plan      {v['local_plan_predicted']:9.0f} vs {v['local_plan_measured']:9.0f}")
        print(f"  every stage on 2 actors   {v['ray2_predicted']:9.0f} vs {v['ray2_measured'] or float('nan'):9.0f}")
    ray.shutdown()
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(results, indent=2, default=str))
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
