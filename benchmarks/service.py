"""The shared preprocessing service (issue 37, docs/design/SERVICE.md) on a 3-node Ray cluster
on this machine: a 0-CPU head for the job drivers, two worker nodes of 2 CPUs.

    PYTHONPATH=$PWD/python .venv/bin/python benchmarks/service.py \\
        [--workers 2] [--images 2000] [--min-seconds 5] \\
        [--cases sweep,fairness,scaling,costs,prefix] [--uint8] [--markdown]

The CV reference pipeline (benchmarks/peers/common.py) split into a deterministic prefix —
read + decode + resize(256) — and a random tail — random_resized_crop(224), flip, colour
jitter, normalize (``--uint8``: without normalize, 4× smaller replies) — batches of 64, chunks
of ``--chunk`` images (one service call each; 64, as RAY.md advises on a cluster: Ray's object
transfer costs per object as well as per byte, so 16-image replies cost the raylets ~40% more
per sample). Every job is its own driver process (``sys.executable
-c DRIVER``) that waits at a barrier, runs, and prints one JSON line: its samples/s after its
first batch, a SHA-256 per epoch over its batches and its own CPU (``getrusage``).

Cases: ``sweep`` — one job alone ("solo"), then 4 jobs with the same pipeline and seed at
once, on one service of ``--workers`` workers (1 CPU each): total CPU sweep/solo (target
≤ 1.3), each job's rate vs solo (≥ 0.9×), bytes identical, the stream window's counters.
``fairness`` — 1 worker, two backlogged jobs of weights 2 and 1: their shares (2:1 ± 10%)
from the workers' busy seconds, the dispatcher's rates and the drivers' consumption.
``scaling`` — 1..3 workers, one job that can use 3: seconds to the peak, and back to 1.
``costs`` — the per-chunk terms of SERVICE.md §4 (worker overhead on a noop stage,
dispatcher CPU per heartbeat and per worker poll, job CPU per chunk) and the 100-node /
50-job extrapolation. ``prefix`` — 4 jobs with different seeds, 1 epoch each, without a cache
(vs 4 × solo: the baseline); then, where the service has a prefix cache (``serve(cache_bytes=
...)``), the 4 seeds × 3 epochs with it (1 GiB) vs 3 × that baseline (target ≤ 0.6×) — else
"not measured". Every other case runs with ``cache_bytes=0``.

CPU is counted, not wall time: the Σ user+system seconds of every process of the Ray session
(the cluster's processes: descendants of this process other than the drivers, sampled every
0.25 s) plus what each driver reports. Wall rates on a 2-core machine shared with other work
are noisy; CPU seconds are the figure to compare. Results merge into
benchmarks/results/service.{json,md} (keyed by case and worker count).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from peers import common as C  # noqa: E402

from service_harness import (  # noqa: E402
    CpuMeter,
    F32_SAMPLE,
    JobWatch,
    U8_SAMPLE,
    cache_built,
    phase_summary,
    ray_cluster,
    run_jobs,
    service,
    worker_reports,
)


def case_sweep(args, address, meter, prefix: bool, sweep: bool) -> dict:
    from sluice import service as svc

    out: dict = {}
    kind = "cv-u8" if args.uint8 else "cv"

    def phase(name: str, label: str, seeds: list[int], epochs: int) -> dict:
        watch = JobWatch(name)
        jobs = [{"n": args.images, "epochs": epochs, "seed": s, "kind": kind, "chunk": args.chunk} for s in seeds]
        ph = run_jobs(address, name, meter, jobs)
        s = phase_summary(ph, watch.stop())
        print(f"{label}: {s['cpu_total']:.1f} CPU s in all, {s['cpu_work']:.1f} after go, "
              f"rates {[round(j['rate']) for j in s['jobs']]}, stream {s['service']['stream']}", flush=True)
        return s

    with service("sweep", min_workers=args.workers, max_workers=args.workers, worker_cpus=1.0):
        warm = run_jobs(address, "sweep", meter, [{"n": args.images, "kind": kind, "chunk": args.chunk}])
        w = warm["jobs"][0]
        per_epoch = w["samples"] / w["rate"] if w["rate"] else warm["wall_s"]  # rate: 0 with one batch
        out["epochs"] = epochs = max(1, math.ceil(args.min_seconds / per_epoch))
        print(f"warm-up: {warm['jobs'][0]['rate']:.0f} samples/s; {epochs} epoch(s) per job", flush=True)
        out["solo"] = solo = phase("sweep", "solo", [1], epochs)
        if sweep:
            out["sweep"] = sw = phase("sweep", "sweep", [1, 1, 1, 1], epochs)
            out["cpu_ratio_total"] = sw["cpu_total"] / solo["cpu_total"]
            out["cpu_ratio_work"] = sw["cpu_work"] / solo["cpu_work"]
            out["rate_vs_solo"] = [j["rate"] / max(solo["jobs"][0]["rate"], 1e-9) for j in sw["jobs"]]
            out["identical"] = sum(j["sha256"] == solo["jobs"][0]["sha256"] for j in sw["jobs"])
        if prefix:  # the prefix cache's baseline: 4 seeds, no cache
            out["seeds"] = ds = phase("sweep", "4 seeds", [1, 2, 3, 4], epochs)
            out["seeds_cpu_ratio_total"] = ds["cpu_total"] / (4 * solo["cpu_total"])
            out["seeds_cpu_ratio_work"] = ds["cpu_work"] / (4 * solo["cpu_work"])
    if prefix and cache_built():
        # 4 seeds x 3 epochs with the cache (1 GiB: the 2,000 resized images fit) vs the same
        # jobs without it (3 epochs of the baseline: no run shares anything without a cache).
        # The node tier in a directory of its own (the cluster's nodes share this machine's
        # disk, as one node's workers would), removed afterwards.
        with tempfile.TemporaryDirectory(prefix="sluice-bench-node-") as node_dir, \
                service("prefix", min_workers=args.workers, max_workers=args.workers, worker_cpus=1.0,
                        cache_bytes=1 << 30, cache_shards=2, node_cache_bytes=args.node_cache_bytes,
                        node_cache_dir=node_dir):
            out["cached"] = c = phase("prefix", "4 seeds x 3 epochs, cache", [1, 2, 3, 4], 3)
            st = svc.status("prefix")
            out["cache"] = st.get("cache")
            out["node_cache"] = [w.get("node_cache") for w in st.get("workers", [])]
        # Against 3 epochs of the baseline (run for `epochs` epochs, so its per-epoch CPU is
        # steady): the cache's first epoch pays in full, whatever the warm-up picked.
        out["cached_cpu_ratio_total"] = c["cpu_total"] / (3 / epochs * ds["cpu_total"])
        out["cached_cpu_ratio_work"] = c["cpu_work"] / (3 / epochs * ds["cpu_work"])
        same = min(3, epochs)
        out["cached_identical_epoch0"] = sum(j["shas"][:same] == d["shas"][:same] for j, d in zip(c["jobs"], ds["jobs"]))
    return out


def samples_between(job: dict, a: float, b: float) -> int:
    """Samples a driver consumed between absolute times a and b (from its batch marks)."""
    at = lambda t: max((n for dt, n in job["marks"] if job["t0"] + dt <= t), default=0)  # noqa: E731
    return at(b) - at(a)


def case_fairness(args, address, meter) -> dict:
    from sluice import service as svc

    seconds = max(12.0, 2 * args.min_seconds)
    with service("fair", min_workers=1, max_workers=1, worker_cpus=1.0):
        def busy() -> dict:
            (r,) = worker_reports("fair")
            return {row["weight"]: row["busy_s"] for row in r["jobs"].values()}

        def during(t_go: float, stop: str) -> dict:
            deadline = time.time() + 120
            while not (len(b := busy()) == 2 and min(b.values()) > 0.5):
                if time.time() > deadline:
                    raise SystemExit("both jobs were never served")
                time.sleep(0.2)
            time.sleep(2.0)
            b0, a, rates = busy(), time.time(), []
            while time.time() - a < seconds:
                time.sleep(1.0)
                rates.append({j["weight"]: j["rate"] for j in svc.status("fair")["jobs"]})
            b1, b = busy(), time.time()
            Path(stop).touch()
            return {"a": a, "b": b, "b0": b0, "b1": b1, "rates": rates}

        # One long epoch each (the images cycled): no epoch boundary inside the window.
        jobs = [{"n": 20 * args.images, "seed": 1, "weight": 2.0, "in_flight": 4},
                {"n": 20 * args.images, "seed": 2, "weight": 1.0, "in_flight": 4}]
        ph = run_jobs(address, "fair", meter, jobs, during)
    e = ph["extra"]
    busy_d = {w: e["b1"][w] - e["b0"][w] for w in (2.0, 1.0)}
    full = [r for r in e["rates"] if r.get(2.0) and r.get(1.0)]
    rate = {w: statistics.mean(r[w] for r in full) for w in (2.0, 1.0)} if full else {2.0: 0.0, 1.0: 1.0}
    consumed = {j["weight"]: samples_between(j, e["a"], e["b"]) / (e["b"] - e["a"]) for j in ph["jobs"]}
    out = {"window_s": e["b"] - e["a"], "busy_s": busy_d, "status_rate": rate, "consumed_rate": consumed,
           "ratio_busy": busy_d[2.0] / busy_d[1.0], "ratio_status": rate[2.0] / max(rate[1.0], 1e-9),
           "ratio_consumed": consumed[2.0] / max(consumed[1.0], 1e-9)}
    print(f"fairness: busy {out['ratio_busy']:.2f}, status rates {out['ratio_status']:.2f}, "
          f"consumed {out['ratio_consumed']:.2f} (target 2.0 ± 10%)", flush=True)
    return out


def case_scaling(args, address, meter) -> dict:
    from sluice import service as svc

    timeline: list = []

    def count() -> tuple[int, int]:
        st = svc.status("scale")
        return len(st["workers"]), len(st["starting"])

    with service("scale", min_workers=1, max_workers=3, worker_cpus=1.0, window_s=2.0):
        def during(t_go: float, stop: str) -> dict:
            peak, t_peak = 0, None
            while time.time() - t_go < 60:
                w, s = count()
                t = time.time() - t_go
                timeline.append((round(t, 1), w, s))
                if w > peak:
                    peak, t_peak = w, t
                if peak >= 3 and t - t_peak >= 5:
                    break
                time.sleep(0.5)
            Path(stop).touch()
            return {"peak": peak, "t_peak": t_peak}

        job = {"n": 20 * args.images, "num_actors": 3, "in_flight": 3}
        ph = run_jobs(address, "scale", meter, [job], during)
        t_go, t_end = ph["t_go"], ph["jobs"][0]["t1"]
        back = None
        while time.time() - t_end < 120:
            w, s = count()
            timeline.append((round(time.time() - t_go, 1), w, s))
            if w == 1 and not s:
                back = time.time() - t_end
                break
            time.sleep(0.5)
        decisions = svc.status("scale")["decisions"]
    e = ph["extra"]
    out = {"peak": e["peak"], "t_peak_s": e["t_peak"], "peak_within_30s": e["t_peak"] is not None and e["t_peak"] <= 30,
           "first_batch_s": ph["jobs"][0]["first_batch_s"], "job_end_s": t_end - t_go, "back_to_1_s": back,
           "timeline": [x for i, x in enumerate(timeline) if i == 0 or x[1:] != timeline[i - 1][1:]],
           "decisions": decisions[-12:]}
    print(f"scaling: peak {out['peak']} workers at {out['t_peak_s']:.1f}s, back to 1 in {back}s after the job", flush=True)
    return out


def case_costs(args, address, meter) -> dict:
    import ray

    out: dict = {}

    def idle_rate(pids: list[int], seconds: float) -> float:
        c0 = sum(meter.cpu(p) for p in pids)
        time.sleep(seconds)
        return (sum(meter.cpu(p) for p in pids) - c0) / seconds

    with service("costs", min_workers=1, max_workers=1, worker_cpus=1.0):
        time.sleep(1.0)
        meter.total()
        (disp,) = meter.pids("dispatcher")
        (report,) = worker_reports("costs")
        wpid = report["pid"]
        out["dispatcher_idle_cpu_per_s_1w"] = idle_rate([disp], 10.0)
        out["worker_idle_cpu_per_s"] = idle_rate([wpid], 3.0)
        # (a) + (c): a noop stage, chunks of 64.
        n = 64 * 2000
        w0 = meter.cpu(wpid)
        watch = JobWatch("costs")
        ph = run_jobs(address, "costs", meter, [{"kind": "noop", "n": n, "chunk": 64}])
        w1 = meter.cpu(wpid)
        rows = watch.stop()["jobs"]
        job = ph["jobs"][0]
        chunks = job["chunks"]
        wall = ph["wall_s"]
        out["noop"] = {"chunks": chunks, "wall_s": wall, "chunks_per_s": chunks / wall,
                       "worker_busy_per_chunk_s": sum(r["busy_s"] for r in rows.values()) / chunks,
                       "worker_cpu_per_chunk_s": (w1 - w0 - out["worker_idle_cpu_per_s"] * wall) / chunks,
                       "job_cpu_per_chunk_s": ph["drivers_cpu_run"] / chunks,
                       "session_cpu_per_chunk_s": ph["cpu_work"] / chunks}
        # (b): heartbeats straight at the dispatcher from a thread pool.
        handle = ray.get_actor("svc:costs", namespace="sluice")
        reg = ray.get(handle.register.remote({"label": "x", "weight": 1.0, "stage_keys": []}))
        calls, threads = 3000, 8

        def beat(i: int) -> float:
            t = time.perf_counter()
            ray.get(handle.heartbeat.remote(reg["job"], reg["generation"], i))
            return time.perf_counter() - t

        d0, me0, t0 = meter.cpu(disp), time.process_time(), time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            lat = sorted(pool.map(beat, range(calls)))
        dt, d1, me1 = time.perf_counter() - t0, meter.cpu(disp), time.process_time()
        ray.get(handle.unregister.remote(reg["job"], reg["generation"]))
        out["heartbeat"] = {"calls": calls, "threads": threads, "calls_per_s": calls / dt,
                            "dispatcher_cpu_per_call_s": (d1 - d0 - out["dispatcher_idle_cpu_per_s_1w"] * dt) / calls,
                            "caller_cpu_per_call_s": (me1 - me0) / calls,
                            "p50_ms": lat[len(lat) // 2] * 1e3, "p99_ms": lat[int(len(lat) * 0.99)] * 1e3}
    # The control loop asks each worker for its report every tick (0.5 s): its idle CPU with
    # 1 worker vs with many small ones (cpu_times ticks are 10 ms: long windows, many polls).
    many = 9
    with service("costsN", min_workers=many, max_workers=many, worker_cpus=0.25):
        time.sleep(2.0)
        (disp,) = meter.pids("dispatcher")
        out[f"dispatcher_idle_cpu_per_s_{many}w"] = idle_rate([disp], 10.0)
    polls = (many - 1) * 2
    out["dispatcher_cpu_per_worker_poll_s"] = max(0.0, (out[f"dispatcher_idle_cpu_per_s_{many}w"] - out["dispatcher_idle_cpu_per_s_1w"]) / polls)
    print(f"costs: {json.dumps(out)}", flush=True)
    return out


# ---- the scale-out estimate (SERVICE.md §4) ----------------------------------------------------
def extrapolate(costs: dict, sweep: dict | None) -> dict:
    nodes, cpus, jobs = 100, 32, 50
    hb = costs["heartbeat"]
    e: dict = {"nodes": nodes, "cpus_per_node": cpus, "jobs": jobs}
    e["dispatcher_hb_cpu_per_s"] = jobs * hb["dispatcher_cpu_per_call_s"]
    e["dispatcher_hb_capacity_per_s"] = 1.0 / max(hb["dispatcher_cpu_per_call_s"], 1e-9)
    poll = costs["dispatcher_cpu_per_worker_poll_s"]
    for label, workers in (("1cpu_workers", nodes * cpus), ("32cpu_workers", nodes)):
        e[f"dispatcher_poll_cpu_per_s_{label}"] = workers * 2 * poll  # 2 polls per worker per s
    e["dispatcher_cpu_per_chunk"] = 0.0
    if sweep and "solo" in sweep:
        solo = sweep["solo"]
        wcpu = solo["cluster_cpu_run"].get("service workers", 0.0)
        samples = solo["jobs"][0]["samples"]
        c = wcpu / samples  # worker CPU per CV sample
        e["cv_worker_cpu_per_sample_s"] = c
        e["cv_job_cpu_per_chunk_s"] = solo["drivers_cpu_run"] / solo["jobs"][0]["chunks"]
        node_rate = cpus / c
        e["node_samples_per_s"] = node_rate
        e["cluster_samples_per_s"] = nodes * node_rate
        e["cluster_chunks_per_s_k64"] = nodes * node_rate / 64
        e["node_egress_GBps_f32"] = node_rate * F32_SAMPLE / 1e9
        e["node_egress_GBps_u8"] = node_rate * U8_SAMPLE / 1e9
        e["worker_overhead_share_k64"] = costs["noop"]["worker_cpu_per_chunk_s"] / (64 * c)
        gb = samples * F32_SAMPLE / 1e9  # replies delivered to the job
        e["transfer_cpu_per_GB_s"] = solo["cluster_cpu_run"].get("raylet", 0.0) / gb  # both raylets
        e["job_cpu_per_GB_s"] = solo["drivers_cpu_run"] / gb
    return e


EXTRAPOLATION = [  # (key, what, format)
    ("dispatcher_hb_cpu_per_s", "dispatcher CPU for 50 jobs × 1 Hz heartbeats (cores)", "{:.3f}"),
    ("dispatcher_hb_capacity_per_s", "heartbeats/s one dispatcher core serves (1 / q_hb)", "{:,.0f}"),
    ("dispatcher_poll_cpu_per_s_1cpu_workers", "dispatcher CPU polling 3,200 1-CPU workers every 0.5 s (cores)", "{:.2f}"),
    ("dispatcher_poll_cpu_per_s_32cpu_workers", "… polling 100 32-CPU workers (cores)", "{:.3f}"),
    ("dispatcher_cpu_per_chunk", "dispatcher messages per chunk", "{:.0f}"),
    ("cv_worker_cpu_per_sample_s", "worker CPU per CV sample (s)", "{:.5f}"),
    ("node_samples_per_s", "samples/s per 32-CPU node", "{:,.0f}"),
    ("cluster_samples_per_s", "samples/s, 100 nodes", "{:,.0f}"),
    ("cluster_chunks_per_s_k64", "chunks/s at k = 64, 100 nodes", "{:,.0f}"),
    ("node_egress_GBps_f32", "egress per node, float32 224² replies (GB/s; 10 Gb/s = 1.25)", "{:.2f}"),
    ("node_egress_GBps_u8", "egress per node, uint8 replies (GB/s)", "{:.2f}"),
    ("transfer_cpu_per_GB_s", "raylets' CPU per GB moved between nodes (s)", "{:.2f}"),
    ("job_cpu_per_GB_s", "job's CPU per GB of replies received (s)", "{:.2f}"),
    ("worker_overhead_share_k64", "worker overhead a_s / a 64-sample CV chunk's CPU", "{:.1%}"),
]


# ---- output -------------------------------------------------------------------------------------
def yes(ok: bool) -> str:
    return "met" if ok else "**not met**"


def markdown(res: dict) -> str:
    lines = [f"{res['machine']['cpu']}, {res['machine']['cores']} cores; CPU = Σ process CPU of the Ray session.", "",
             "| case | figure | measured | target | |", "|---|---|---:|---|---|"]
    row = lambda *c: lines.append("| " + " | ".join(str(x) for x in c) + " |")  # noqa: E731
    for key in sorted(k for k in res if k.startswith("sweep@")):
        s, w = res[key], key.split("@")[1]
        solo = s["solo"]
        row(f"sweep ({w})", "solo job: samples/s; CPU s (all / after go)",
            f"{solo['jobs'][0]['rate']:.0f}; {solo['cpu_total']:.1f} / {solo['cpu_work']:.1f}", "", "")
        if "sweep" in s:
            sw = s["sweep"]
            row(f"sweep ({w})", "4 jobs, same seed: CPU / solo's, all", f"{s['cpu_ratio_total']:.2f}×", "≤ 1.3×", yes(s["cpu_ratio_total"] <= 1.3))
            row(f"sweep ({w})", "… after go (no driver start-up, no hashing)", f"{s['cpu_ratio_work']:.2f}×", "≤ 1.3×", yes(s["cpu_ratio_work"] <= 1.3))
            r = s["rate_vs_solo"]
            row(f"sweep ({w})", "each job's samples/s vs solo", f"{min(r):.2f}–{max(r):.2f}×", "≥ 0.9×", yes(min(r) >= 0.9))
            row(f"sweep ({w})", "batches byte-identical to solo", f"{s['identical']}/4", "4/4", yes(s["identical"] == 4))
            st = sw["service"]["stream"]
            answered = sum(j["chunks"] for j in sw["jobs"])
            row(f"sweep ({w})", "chunks answered / computed / read from the window",
                f"{answered} / {answered - st['hits']} / {st['hits']} ({st['waits']} reads waited for the "
                f"computation, {st['evicted']} evicted); solo: {solo['jobs'][0]['chunks']}", "", "")
        if "seeds" in s:
            row(f"prefix cache ({w})", "baseline: 4 seeds × 1 epoch, no cache / (4 × solo)",
                f"{s['seeds_cpu_ratio_total']:.2f}× all, {s['seeds_cpu_ratio_work']:.2f}× after go", "", "")
        if "cached" in s:
            row(f"prefix cache ({w})", "4 seeds × 3 epochs with the cache: CPU / the same without (3 epochs of the baseline)",
                f"{s['cached_cpu_ratio_total']:.2f}× all, {s['cached_cpu_ratio_work']:.2f}× after go", "≤ 0.6×",
                yes(s["cached_cpu_ratio_total"] <= 0.6))
            row(f"prefix cache ({w})", "epoch 0 byte-identical to the run without cache", f"{s['cached_identical_epoch0']}/4", "4/4",
                yes(s["cached_identical_epoch0"] == 4))
            pre = [p for p in (s.get("cache") or {}).get("prefixes", {}).values()]
            row(f"prefix cache ({w})", "records read / computed, stored, refused; bytes",
                "; ".join(f"{p['hits']} / {p['misses']}, {p['puts']}, {p['refused']}; {p['bytes'] / 1e6:.0f} MB" for p in pre)
                or ("none: every worker shares one node tier, the shards are left alone"
                    if (s.get("cache") or {}).get("tier_shared") else "no prefix cached"), "", "")
            tiers = [t for t in s.get("node_cache") or [] if t]
            row(f"prefix cache ({w})", "node tier: records read / not there, stored (all workers)",
                f"{sum(t['hits'] for t in tiers)} / {sum(t['misses'] for t in tiers)}, {sum(t['stored'] for t in tiers)}"
                if tiers else "off", "", "")
        elif "seeds" in s:
            row(f"prefix cache ({w})", "4 seeds × 3 epochs: CPU vs 4 per-job runs", "not measured: the prefix cache is not built yet", "≤ 0.6×", "—")
    if "fairness" in res:
        f = res["fairness"]
        for what, k in (("workers' busy s", "ratio_busy"), ("status() rates", "ratio_status"), ("drivers' consumption", "ratio_consumed")):
            row("fairness 2:1", what, f"{f[k]:.2f}", "1.8–2.2", yes(1.8 <= f[k] <= 2.2))
    if "scaling" in res:
        s = res["scaling"]
        row("scaling 1→3", "peak workers; s from job start", f"{s['peak']}; {s['t_peak_s']:.1f} s", "3 within 30 s", yes(s["peak"] == 3 and s["peak_within_30s"]))
        back = s["back_to_1_s"]
        row("scaling 3→1", "s after the job ended", f"{back:.1f} s" if back is not None else "never (120 s)", "", "")
    if "costs" in res:
        c = res["costs"]
        n, hb = c["noop"], c["heartbeat"]
        row("§4 a_s", "noop chunk (k=64): worker busy / worker CPU", f"{n['worker_busy_per_chunk_s'] * 1e3:.2f} / {n['worker_cpu_per_chunk_s'] * 1e3:.2f} ms", "", "")
        row("§4 h", "job CPU per chunk: noop / CV (k=16)",
            f"{n['job_cpu_per_chunk_s'] * 1e3:.2f} / " + (f"{res['extrapolation']['cv_job_cpu_per_chunk_s'] * 1e3:.2f} ms" if "cv_job_cpu_per_chunk_s" in res.get("extrapolation", {}) else "—"), "", "")
        row("§4 q_hb", "dispatcher CPU per heartbeat; p50 / p99", f"{hb['dispatcher_cpu_per_call_s'] * 1e3:.2f} ms; {hb['p50_ms']:.1f} / {hb['p99_ms']:.1f} ms", "p99 < 100 ms", yes(hb["p99_ms"] < 100))
        row("§4 q_poll", "dispatcher CPU per worker report poll", f"{c['dispatcher_cpu_per_worker_poll_s'] * 1e3:.2f} ms", "", "")
    lines += ["", "CPU seconds by process, from go to the last job's exit (drivers: without start-up and hashing):", "",
              "| run | phase | wall s | service workers | raylets | dispatcher, GCS, cache shards, other | drivers | all | drivers' start-up |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for key in sorted(k for k in res if k.startswith("sweep@")):
        for phase in ("solo", "sweep", "seeds", "cached"):
            if phase in res[key]:
                p = res[key][phase]
                c = p["cluster_cpu_run"]
                sw, rl = c.get("service workers", 0.0), c.get("raylet", 0.0)
                row(key, phase, f"{p['wall_s']:.1f}", f"{sw:.1f}", f"{rl:.1f}", f"{c['all'] - sw - rl:.1f}",
                    f"{p['drivers_cpu_run']:.1f}", f"{p['cpu_work']:.1f}", f"{p['drivers_cpu_setup']:.1f}")
    if "scaling" in res:
        lines += ["", "Scaling timeline (s after go: workers running, starting): " +
                  ", ".join(f"{t}: {w}+{s}" for t, w, s in res["scaling"]["timeline"])]
    if "extrapolation" in res:
        lines += ["", "| 100 nodes × 32 CPUs, 50 jobs (from the figures above) | |", "|---|---:|"]
        for key, what, fmt in EXTRAPOLATION:
            if key in res["extrapolation"]:
                row(what, fmt.format(res["extrapolation"][key]))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2, help="workers of the sweep's service (1 CPU each)")
    ap.add_argument("--images", type=int, default=2000, help="images per epoch")
    ap.add_argument("--min-seconds", type=float, default=5.0, help="a solo job runs at least this long")
    ap.add_argument("--cases", default="sweep,fairness,scaling,costs,prefix")
    ap.add_argument("--uint8", action="store_true", help="sweep/prefix: no normalize, uint8 replies")
    ap.add_argument("--chunk", type=int, default=64,
                    help="sweep/prefix: images per chunk (one service call each); 64 is RAY.md's advice for a cluster")
    ap.add_argument("--node-cache-bytes", type=int, default=None,
                    help="prefix: the cache's node tier (default: the service's; 0: the shards alone)")
    ap.add_argument("--markdown", action="store_true", help="print the Markdown table at the end")
    args = ap.parse_args()
    cases = set(args.cases.split(","))
    if unknown := cases - {"sweep", "fairness", "scaling", "costs", "prefix"}:
        ap.error(f"unknown cases {sorted(unknown)}")
    path = HERE / "results" / "service.json"
    res = json.loads(path.read_text()) if path.exists() else {}
    res["machine"] = {"cpu": C.cpu_model(), "cores": os.cpu_count()}
    res.setdefault("runs", []).append({"time": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "args": vars(args)})
    t = time.monotonic()
    with ray_cluster() as address:
        meter = CpuMeter()
        if cases & {"sweep", "prefix"}:
            res[f"sweep@{args.workers}w" + ("-u8" if args.uint8 else "")] = case_sweep(args, address, meter, "prefix" in cases, "sweep" in cases)
        if "fairness" in cases:
            res["fairness"] = case_fairness(args, address, meter)
        if "scaling" in cases:
            res["scaling"] = case_scaling(args, address, meter)
        if "costs" in cases:
            res["costs"] = case_costs(args, address, meter)
    if "costs" in res:
        sweep = res.get("sweep@1w") or next((v for k, v in res.items() if k.startswith("sweep@") and "u8" not in k), None)
        res["extrapolation"] = extrapolate(res["costs"], sweep)
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(res, indent=1))
    md = markdown(res)
    (HERE / "results" / "service.md").write_text(md + "\n")
    print(f"\n{time.monotonic() - t:.0f} s; wrote {path} and service.md")
    print(md if args.markdown else "\n".join(x.replace("|", " ") for x in md.splitlines() if "---" not in x))


if __name__ == "__main__":
    main()
