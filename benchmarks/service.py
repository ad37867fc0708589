"""The shared preprocessing service (issue 37, docs/design/SERVICE.md) on a 3-node Ray cluster
on this machine: a 0-CPU head for the job drivers, two worker nodes of 2 CPUs.

    PYTHONPATH=$PWD/python .venv/bin/python benchmarks/service.py \\
        [--workers 2] [--images 2000] [--min-seconds 5] \\
        [--cases sweep,fairness,scaling,costs,prefix] [--uint8] [--markdown]

The CV reference pipeline (benchmarks/peers/common.py) split into a deterministic prefix —
read + decode + resize(256) — and a random tail — random_resized_crop(224), flip, colour
jitter, normalize (``--uint8``: without normalize, 4× smaller replies) — batches of 64, chunks
of 16 images (one service call each). Every job is its own driver process (``sys.executable
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
import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from peers import common as C  # noqa: E402

DATA = C.default_data_dir()
CHUNK = 16
F32_SAMPLE = 3 * C.CV_SIZE * C.CV_SIZE * 4  # bytes of one normalised 224² reply sample
U8_SAMPLE = 3 * C.CV_SIZE * C.CV_SIZE


def pipeline(kind: str, n: int):
    """The job's pipeline: ``cv`` (n images, cycled if more than the data set has; float32
    CHW replies), ``cv-u8`` (the same without normalize: uint8 HWC replies, 4× smaller) or
    ``noop`` (``range(n)`` + a built-in select: a chunk's service round trip alone)."""
    import sluice
    import sluice.image as img

    if kind == "noop":
        return sluice.range(n).map(sluice.ops.select(["id"])).batch(256)
    files = [p for p, _ in C.image_files(DATA)]
    files = (files * math.ceil(n / len(files)))[:n]
    ds = (sluice.read_images(files, labels="parent_dir").shuffle()
          .map(img.decode()).map(img.resize(256))  # the deterministic prefix
          .map(img.random_resized_crop(C.CV_SIZE, scale=C.CV_SCALE, ratio=C.CV_RATIO))
          .map(img.horizontal_flip(p=C.CV_FLIP_P))
          .map(img.color_jitter(*C.CV_JITTER, p=C.CV_JITTER_P)))
    if kind == "cv":
        ds = ds.map(img.normalize(C.MEAN, C.STD))
    return ds.map(sluice.ops.select(["image", "label"])).batch(C.CV_BATCH)


# One job: connect, wait at the barrier, run `epochs` epochs (or until the stop file appears),
# print RESULT {...}. CPU spent hashing (the benchmark's own check) is measured apart.
DRIVER = r"""
import hashlib, json, os, resource, sys, time
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
P = json.loads(sys.argv[1])
sys.path.insert(0, P["bench"])
import numpy as np, ray, sluice
import service as bench
ray.init(address=P["address"], log_to_driver=False)
kw = {"num_actors": P["num_actors"]} if P["num_actors"] else {}
ctx = sluice.Context(service=P["service"], weight=P["weight"], in_flight_per_actor=P["in_flight"], **kw)
ds = bench.pipeline(P["kind"], P["n"])
key = "id" if P["kind"] == "noop" else "label"
open(P["ready"], "w").close()
while not os.path.exists(P["go"]):
    time.sleep(0.01)
t0, cpu0 = time.time(), cpu()
shas, hash_cpu, n, first, marks, chunks, stop = [], 0.0, 0, None, [], 0, False
for epoch in range(P["epochs"]):
    h = hashlib.sha256()
    it = ds.iter(seed=P["seed"], epoch=epoch, chunk_size=P["chunk"], context=ctx)
    for b in it:
        c = time.thread_time()
        for k in sorted(b):
            a = np.ascontiguousarray(b[k])
            h.update(f"{k}{a.dtype}{a.shape}".encode())
            h.update(a)
        hash_cpu += time.thread_time() - c
        n += len(b[key])
        now = time.time()
        first = first or (now, n)
        marks.append((round(now - t0, 3), n))
        if os.path.exists(P["stop"]):
            stop = True
            break
    chunks += sum(s["chunks"] for s in ctx.pools()[-1].report()["slots"])
    it.close()
    shas.append(h.hexdigest())
    if stop:
        break
t1 = time.time()
ctx.close()
rate = (n - first[1]) / max(t1 - first[0], 1e-9) if first else 0.0
print("RESULT " + json.dumps({"seed": P["seed"], "weight": P["weight"], "samples": n, "chunks": chunks,
      "rate": rate, "first_batch_s": first[0] - t0 if first else None, "t0": t0, "t1": t1,
      "sha256": hashlib.sha256("".join(shas).encode()).hexdigest(), "shas": shas, "cpu_setup": cpu0, "cpu_total": cpu(), "cpu_hash": hash_cpu,
      "marks": marks}), flush=True)
"""


# ---- the cluster and its CPU ---------------------------------------------------------------
@contextlib.contextmanager
def ray_cluster(store_bytes: int = 500_000_000):
    """A head with no CPUs (the drivers') and 2 worker nodes of 2 CPUs, with a private
    RAY_TMPDIR (as tests/python/ray_cluster.py); yields the GCS address."""
    import ray
    from ray import cluster_utils

    tmp = tempfile.mkdtemp(prefix="sb", dir="/tmp")
    os.makedirs(os.path.join(tmp, "ray"))
    os.environ["RAY_TMPDIR"] = tmp
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"), os.environ.get("PYTHONPATH")]))
    c = cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "object_store_memory": store_bytes, "include_dashboard": False})
    try:
        for _ in range(2):
            c.add_node(num_cpus=2, object_store_memory=store_bytes, wait=True)
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        c.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def kind_of(cmd: str) -> str:
    for needle, kind in (("gcs_server", "gcs"), ("raylet", "raylet"), ("ray::ServiceWorker", "service workers"),
                         ("ray::Dispatcher", "dispatcher"), ("ray::CacheShard", "cache shards")):
        if needle in cmd:
            return kind
    return "other ray workers" if cmd.startswith("ray::") else "agents, monitors"


class CpuMeter:
    """CPU seconds of the Ray session's processes (this process's descendants, drivers
    excluded: they report their own), sampled every 0.25 s so processes that exit still
    count up to their last sample. ``total()``: seconds since the meter started, by kind."""

    def __init__(self):
        import psutil

        self._psutil, self._me = psutil, psutil.Process()
        self.excluded: set[int] = set()
        self._base: dict[int, float] = {}
        self._last: dict[int, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self._sample(first=True)
        self._done = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _sample(self, first: bool = False) -> None:
        for p in self._me.children(recursive=True):
            if p.pid in self.excluded:
                continue
            try:
                t = p.cpu_times()
                kind = kind_of(" ".join(p.cmdline()))
            except self._psutil.Error:
                continue
            with self._lock:
                self._base.setdefault(p.pid, t.user + t.system if first else 0.0)
                self._last[p.pid] = (kind, t.user + t.system)

    def _run(self) -> None:
        while not self._done.wait(0.25):
            self._sample()

    def total(self) -> dict:
        self._sample()
        out: dict = {"all": 0.0}
        with self._lock:
            for pid, (kind, t) in self._last.items():
                d = t - self._base[pid]
                out[kind] = out.get(kind, 0.0) + d
                out["all"] += d
        return out

    def pids(self, kind: str) -> list[int]:
        """Live processes of this kind."""
        self._sample()
        with self._lock:
            pids = [pid for pid, (k, _) in self._last.items() if k == kind]
        return [p for p in pids if self._psutil.pid_exists(p) and self._psutil.Process(p).status() != "zombie"]

    def cpu(self, pid: int) -> float:
        t = self._psutil.Process(pid).cpu_times()
        return t.user + t.system


# ---- the service -----------------------------------------------------------------------------
def worker_handles(name: str) -> list:
    import ray

    prefix = f"svc:{name}:"
    return [ray.get_actor(a["name"], namespace="sluice") for a in ray.util.list_named_actors(all_namespaces=True)
            if a.get("namespace") == "sluice" and a["name"].startswith(prefix)]


def worker_reports(name: str, handles: list | None = None) -> list[dict]:
    """Each worker's own report (``report()``: per-job chunks, stream hits, busy seconds)."""
    import ray

    out = []
    for h in handles if handles is not None else worker_handles(name):
        with contextlib.suppress(Exception):
            out.append(json.loads(ray.get(h.report.remote(), timeout=10)))
    return out


class JobWatch:
    """Polls the workers' reports (every second) while jobs run: each (worker, job)'s last
    row (a job leaves the reports when it disconnects) and the stream counters' change
    (cumulative per worker: exact, from the first poll to a last one at ``stop()``)."""

    def __init__(self, name: str):
        self.name, self.jobs, self.first, self.last = name, {}, {}, {}
        self._handles = worker_handles(name)
        self._poll()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        for r in worker_reports(self.name, self._handles):
            self.first.setdefault(r["pid"], r["stream"])
            self.last[r["pid"]] = r["stream"]
            for job, row in r["jobs"].items():
                self.jobs[(r["pid"], int(job))] = row

    def _run(self) -> None:
        while not self._done.wait(1.0):
            self._poll()

    def stop(self) -> dict:
        self._done.set()
        self._thread.join()
        self._poll()
        per_job: dict = {}
        for (_, job), row in self.jobs.items():
            j = per_job.setdefault(job, {"chunks": 0, "stream_hits": 0, "busy_s": 0.0, "queue_wait_s": 0.0})
            for k in j:
                j[k] += row[k]
        stream = {k: sum(s[k] - self.first[pid][k] for pid, s in self.last.items())
                  for k in ("computed", "hits", "waits", "evicted")}
        return {"jobs": per_job, "stream": stream}


@contextlib.contextmanager
def service(name: str, **opts):
    import inspect

    from sluice import service as svc

    if "cache_bytes" in inspect.signature(svc.serve).parameters:
        opts.setdefault("cache_bytes", 0)  # no prefix cache unless a case asks for one
    svc.serve(name, **{"lease_s": 5.0, "window_s": 2.0, **opts})
    try:
        yield name
    finally:
        svc.stop(name)


def run_jobs(address: str, name: str, meter: CpuMeter, jobs: list[dict], during=None) -> dict:
    """Starts one driver per job, waits until all connected, lets them go at once; `during`
    (t_go, stop_file) runs meanwhile and may end the jobs by writing the stop file. CPU:
    the cluster's from spawn to go ("setup") and from go to the last exit ("run")."""
    d = tempfile.mkdtemp(prefix="jobs", dir=os.environ["RAY_TMPDIR"])
    base = {"address": address, "service": name, "bench": str(HERE), "go": f"{d}/go", "stop": f"{d}/stop", "kind": "cv",
            "n": 2000, "epochs": 1, "seed": 1, "weight": 1.0, "in_flight": 2, "num_actors": None, "chunk": CHUNK}
    cpu0 = meter.total()
    procs = []
    for i, job in enumerate(jobs):
        p = {**base, **job, "ready": f"{d}/ready{i}"}
        with open(f"{d}/stderr{i}", "w") as err:
            procs.append(subprocess.Popen([sys.executable, "-c", DRIVER, json.dumps(p)], stdout=subprocess.PIPE,
                                          stderr=err, text=True))
        meter.excluded.add(procs[-1].pid)
    deadline = time.monotonic() + 180
    while not all(os.path.exists(f"{d}/ready{i}") for i in range(len(jobs))):
        dead = [i for i, p in enumerate(procs) if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            for p in procs:
                p.kill()
            raise SystemExit(f"driver {dead} failed to start:\n" + Path(f"{d}/stderr{dead[0] if dead else 0}").read_text()[-3000:])
        time.sleep(0.05)
    cpu_go, t_go = meter.total(), time.time()
    Path(base["go"]).touch()
    extra = during(t_go, base["stop"]) if during else None
    results = []
    for i, p in enumerate(procs):
        out, _ = p.communicate(timeout=900)
        line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
        if p.returncode != 0 or line is None:
            raise SystemExit(f"driver {i} failed (rc {p.returncode}):\n" + Path(f"{d}/stderr{i}").read_text()[-3000:])
        results.append(json.loads(line[7:]))
    cpu_end = meter.total()
    run = {k: v - cpu_go.get(k, 0.0) for k, v in cpu_end.items()}
    drivers_run = sum(r["cpu_total"] - r["cpu_setup"] - r["cpu_hash"] for r in results)
    return {
        "jobs": results, "t_go": t_go, "wall_s": max(r["t1"] for r in results) - t_go, "extra": extra,
        "cluster_cpu_setup": cpu_go["all"] - cpu0["all"], "cluster_cpu_run": run,
        "drivers_cpu_setup": sum(r["cpu_setup"] for r in results),
        "drivers_cpu_hash": sum(r["cpu_hash"] for r in results),
        "drivers_cpu_run": drivers_run,
        "cpu_total": cpu_end["all"] - cpu0["all"] + sum(r["cpu_total"] for r in results),
        "cpu_work": run["all"] + drivers_run,
    }


def phase_summary(ph: dict, watch: dict | None = None) -> dict:
    s = {k: ph[k] for k in ("wall_s", "cpu_total", "cpu_work", "cluster_cpu_setup", "cluster_cpu_run",
                            "drivers_cpu_setup", "drivers_cpu_hash", "drivers_cpu_run")}
    s["jobs"] = [{k: j[k] for k in ("seed", "weight", "samples", "chunks", "rate", "first_batch_s", "sha256", "shas")}
                 for j in ph["jobs"]]
    if watch:
        s["service"] = watch
    return s


# ---- cases ------------------------------------------------------------------------------------
def cache_built() -> bool:
    import inspect

    from sluice import service as svc

    return "cache_bytes" in inspect.signature(svc.serve).parameters


def case_sweep(args, address, meter, prefix: bool, sweep: bool) -> dict:
    from sluice import service as svc

    out: dict = {}
    kind = "cv-u8" if args.uint8 else "cv"

    def phase(name: str, label: str, seeds: list[int], epochs: int) -> dict:
        watch = JobWatch(name)
        ph = run_jobs(address, name, meter, [{"n": args.images, "epochs": epochs, "seed": s, "kind": kind} for s in seeds])
        s = phase_summary(ph, watch.stop())
        print(f"{label}: {s['cpu_total']:.1f} CPU s in all, {s['cpu_work']:.1f} after go, "
              f"rates {[round(j['rate']) for j in s['jobs']]}, stream {s['service']['stream']}", flush=True)
        return s

    with service("sweep", min_workers=args.workers, max_workers=args.workers, worker_cpus=1.0):
        warm = run_jobs(address, "sweep", meter, [{"n": args.images, "kind": kind}])
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
        # jobs without it (3 x the 1-epoch baseline: no run shares anything without a cache).
        with service("prefix", min_workers=args.workers, max_workers=args.workers, worker_cpus=1.0,
                     cache_bytes=1 << 30, cache_shards=2):
            out["cached"] = c = phase("prefix", "4 seeds x 3 epochs, cache", [1, 2, 3, 4], 3 * epochs)
            out["cache"] = svc.status("prefix").get("cache")
        out["cached_cpu_ratio_total"] = c["cpu_total"] / (3 * ds["cpu_total"])
        out["cached_cpu_ratio_work"] = c["cpu_work"] / (3 * ds["cpu_work"])
        out["cached_identical_epoch0"] = sum(j["shas"][:epochs] == d["shas"] for j, d in zip(c["jobs"], ds["jobs"]))
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
            row(f"prefix cache ({w})", "4 seeds × 3 epochs with the cache: CPU / the same without (3 × the 1-epoch baseline)",
                f"{s['cached_cpu_ratio_total']:.2f}× all, {s['cached_cpu_ratio_work']:.2f}× after go", "≤ 0.6×",
                yes(s["cached_cpu_ratio_total"] <= 0.6))
            row(f"prefix cache ({w})", "epoch 0 byte-identical to the run without cache", f"{s['cached_identical_epoch0']}/4", "4/4",
                yes(s["cached_identical_epoch0"] == 4))
            pre = [p for p in (s.get("cache") or {}).get("prefixes", {}).values()]
            row(f"prefix cache ({w})", "records read / computed, stored, refused; bytes",
                "; ".join(f"{p['hits']} / {p['misses']}, {p['puts']}, {p['refused']}; {p['bytes'] / 1e6:.0f} MB" for p in pre) or "no prefix cached", "", "")
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
