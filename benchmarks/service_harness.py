"""The harness of benchmarks/service.py: the CV pipeline split into a deterministic prefix and
a random tail, the job driver every job runs as (its own process), a 3-node
``ray.cluster_utils.Cluster`` on this machine, the CPU meter over the Ray session's processes,
and running a phase of jobs against a service. See benchmarks/service.py for the cases."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
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
# print RESULT {...}. CPU spent hashing (the benchmark's own check) is measured apart. The check
# is a CRC-32 over each epoch's batches in order (names, dtypes, shapes and bytes), not SHA-256:
# every job hashes its 1.2 GB of float32 per epoch, which at SHA-256's 2 GB/s took ~0.6 s of CPU
# per job-epoch from the same 2 cores the service runs on (4 jobs at once: a third of the
# sweep's CPU); zlib's CRC-32 runs at ~7 GB/s here. It detects any accidental change of bytes or
# order with odds of 2^-32 against, which is what the comparison with a solo run needs.
DRIVER = r"""
import hashlib, json, os, resource, sys, time, zlib
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
P = json.loads(sys.argv[1])
sys.path.insert(0, P["bench"])
import numpy as np, ray, sluice
import service_harness as bench
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
    crc = 0
    it = ds.iter(seed=P["seed"], epoch=epoch, chunk_size=P["chunk"], context=ctx)
    for b in it:
        c = time.thread_time()
        for k in sorted(b):
            a = np.ascontiguousarray(b[k])
            crc = zlib.crc32(f"{k}{a.dtype}{a.shape}".encode(), crc)
            crc = zlib.crc32(a, crc)
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
    shas.append(f"{crc:08x}")
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
    # The nodes and drivers import the sluice this process does (a `PYTHONPATH=<build>/python`
    # of an A/B included), not whatever the checkout's python/ holds.
    import sluice

    here = str(Path(sluice.__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
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
