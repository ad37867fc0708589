"""The shared service's Ray actors: the dispatcher (detached, named ``svc:NAME``) and its
workers. Both only carry calls: a worker's scheduling is ``sluice._native.ServiceHost``'s
(stages keyed by content, weighted fair queueing, the sweep's shared stream), the
dispatcher's state and decisions ``sluice._native.ServiceRegistry``'s (jobs and leases,
which worker a job attaches to, how many workers the pool needs). See ``docs/SERVICE.md``.

Workers are the dispatcher's children, not detached: they die with it (Ray's owner
fate-sharing), so a restarted dispatcher starts from nothing and no orphan keeps CPUs.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from typing import Any

from . import _native

log = logging.getLogger("sluice")

NAMESPACE = "sluice"
# Chunks a worker accepts at once: each waits in the fair queue on its own thread (the wait
# is native, without the GIL), so this bounds threads, not the work done at once (`slots`).
WORKER_CONCURRENCY = 64


def dispatcher_name(name: str) -> str:
    return f"svc:{name}"


class ServiceWorker:
    """One worker of the pool: hosts the stages of the jobs attached to it."""

    def __init__(self, slots: int, window_bytes: int):
        self._host = _native.ServiceHost(slots, window_bytes)

    def attach(self, job: int, weight: float, init: str) -> str:
        return self._host.attach(job, weight, init)

    def run(self, job: int, key: str, frame: bytes) -> Any:
        return self._host.run(job, key, frame)

    def detach(self, job: int, key: str) -> bool:
        return self._host.detach(job, key)

    def forget(self, job: int) -> int:
        return self._host.forget(job)

    def report(self) -> str:
        """The host's report as JSON, with where this worker runs."""
        import ray

        report = self._host.report()
        report["node"] = ray.get_runtime_context().get_node_id()
        report["pid"] = os.getpid()
        return json.dumps(report)

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


class Dispatcher:
    """The service's control point: jobs register, heartbeat and lease workers here; chunks
    never pass through it (a job calls its workers directly). A loop every ``tick_s`` reads
    the workers' reports, expires jobs that stopped heartbeating (their workers forget them),
    replaces dead workers and, every ``window_s``, applies the registry's scaling decision.

    Its state is soft: restarted by Ray (``max_restarts=-1``), it comes back with a new
    ``generation`` and no jobs; jobs notice on their next call and register again."""

    def __init__(self, name: str, options: dict):
        import ray

        self._ray = ray
        self._name = name
        self._opts = dict(options)
        self.generation = uuid.uuid4().hex[:12]
        self._registry = _native.ServiceRegistry(
            min_workers=int(options["min_workers"]),
            max_workers=int(options["max_workers"]),
            worker_cpus=float(options["worker_cpus"]),
            lease_s=float(options["lease_s"]),
            window_s=float(options["window_s"]),
        )
        self._metrics: tuple[str, int] | None = None
        if options.get("metrics_port") is not None:
            self._metrics = tuple(self._registry.serve_metrics(int(options["metrics_port"])))
        self._lock = threading.RLock()
        self._workers: dict[str, Any] = {}  # registered: id -> handle
        self._starting: dict[str, Any] = {}  # id -> (handle, ping ref)
        self._serial = 0
        self._t0 = time.monotonic()
        self._closed = threading.Event()
        self._events: list[str] = []
        self._start(int(options["min_workers"]))
        self._last_scale = self._now()
        threading.Thread(target=self._loop, name="sluice-dispatcher", daemon=True).start()

    def _now(self) -> float:
        return time.monotonic() - self._t0

    def _event(self, text: str) -> None:
        self._events.append(f"t={self._now():.1f}s {text}")
        del self._events[:-50]
        log.info("service %s: %s", self._name, text)

    # Workers ------------------------------------------------------------------------------
    def _start(self, n: int) -> None:
        cls = self._ray.remote(ServiceWorker)
        cpus = float(self._opts["worker_cpus"])
        for _ in range(n):
            self._serial += 1
            wid = f"w{self._serial}"
            handle = cls.options(
                name=f"{dispatcher_name(self._name)}:{self.generation}:{wid}",
                namespace=NAMESPACE,
                num_cpus=cpus,
                max_restarts=0,
                max_concurrency=WORKER_CONCURRENCY,
                **({"runtime_env": self._opts["runtime_env"]} if self._opts.get("runtime_env") else {}),
            ).remote(max(1, int(round(cpus))), int(self._opts["window_bytes"]))
            self._starting[wid] = (handle, handle.report.remote())
        if n:
            self._event(f"starting {n} worker(s)")

    def _retire(self, ids: list[str]) -> None:
        for wid in ids:
            handle = self._workers.pop(wid, None)
            self._registry.remove_worker(wid)
            if handle is not None:
                self._ray.kill(handle)
        if ids:
            self._event(f"retired {', '.join(ids)}")

    def _poll(self) -> None:
        """Reads every worker's report: started ones join, dead ones are dropped."""
        ray = self._ray
        with self._lock:
            starting = dict(self._starting)
            reports = {wid: h.report.remote() for wid, h in self._workers.items()}
        refs = {**{w: r for w, (_, r) in starting.items()}, **reports}
        if refs:
            ray.wait(list(refs.values()), num_returns=len(refs), timeout=2.0)
        now = self._now()
        with self._lock:
            for wid, ref in refs.items():
                try:
                    (text,) = ray.get([ref], timeout=0)
                except ray.exceptions.GetTimeoutError:
                    continue  # busy starting, or slow to answer: next tick
                except ray.exceptions.RayError as e:
                    self._starting.pop(wid, None)
                    if self._workers.pop(wid, None) is not None:
                        self._registry.remove_worker(wid)
                    self._event(f"worker {wid} lost ({type(e).__name__})")
                    continue
                if wid in starting:
                    handle, _ = self._starting.pop(wid)
                    self._workers[wid] = handle
                    self._registry.add_worker(now, wid, json.loads(text).get("node", ""))
                self._registry.worker_beat(now, wid, text)
            for job in self._registry.expire(now):
                self._event(f"job {job} expired (no heartbeat)")
                for handle in self._workers.values():
                    handle.forget.remote(job)
            if now - self._last_scale >= float(self._opts["window_s"]):
                self._last_scale = now
                kind, arg = self._registry.scale(now)
                if kind == "start":
                    self._start(int(arg))
                elif kind == "retire":
                    self._retire(list(arg))
                # Dead workers are replaced up to the minimum at once, not a window later.
                missing = int(self._opts["min_workers"]) - len(self._workers) - len(self._starting)
                if missing > 0:
                    self._start(missing)

    def _loop(self) -> None:
        while not self._closed.wait(float(self._opts["tick_s"])):
            try:
                self._poll()
            except Exception as e:  # a transient Ray error must not stop the control loop
                log.warning("service %s: control loop: %s", self._name, e)

    # Calls from jobs ----------------------------------------------------------------------
    def ready(self, workers: int, timeout_s: float) -> dict:
        """Waits until ``workers`` workers joined (or the timeout); the generation and count."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if len(self._workers) >= workers:
                    break
            time.sleep(0.05)
        with self._lock:
            return {"generation": self.generation, "workers": len(self._workers)}

    def register(self, info: dict) -> dict:
        with self._lock:
            job = self._registry.register(
                self._now(), str(info.get("label", "")), float(info["weight"]), list(info.get("stage_keys", []))
            )
            self._event(f"job {job} ({info.get('label', '')}) connected, weight {info['weight']}")
            return {"job": job, "generation": self.generation, "workers": len(self._workers)}

    def heartbeat(self, job: int, generation: str, samples: int) -> dict:
        """``known``: False when this job is not registered here (expired, or another
        generation: the dispatcher restarted)."""
        with self._lock:
            if generation != self.generation:
                return {"generation": self.generation, "known": False}
            try:
                self._registry.heartbeat(self._now(), job, int(samples), False)
            except ValueError:
                return {"generation": self.generation, "known": False}
            return {"generation": self.generation, "known": True, "workers": len(self._workers)}

    def lease(self, job: int, generation: str, avoid: list[str]) -> dict:
        """A worker for one of ``job``'s pool slots: ``{"worker": id, "handle": ...}``,
        ``{"wait": True}`` while none has started, or ``{"known": False}``."""
        with self._lock:
            if generation != self.generation:
                return {"known": False, "generation": self.generation}
            try:
                wid = self._registry.lease(job, [a for a in avoid if a in self._workers])
            except ValueError:
                return {"known": False, "generation": self.generation}
            if wid is None or wid not in self._workers:
                return {"wait": True}
            return {"worker": wid, "handle": self._workers[wid]}

    def release(self, job: int, generation: str, worker: str) -> None:
        with self._lock:
            if generation == self.generation:
                self._registry.release(job, worker)

    def unregister(self, job: int, generation: str) -> None:
        with self._lock:
            if generation != self.generation or not self._registry.unregister(job):
                return
            self._event(f"job {job} disconnected")
            for handle in self._workers.values():
                handle.forget.remote(job)

    def status(self) -> dict:
        with self._lock:
            out = self._registry.status(self._now())
            out.update(
                name=self._name,
                generation=self.generation,
                metrics_address=self._metrics,
                starting=sorted(self._starting),
                events=list(self._events),
            )
            return out

    def close(self) -> None:
        """Stops the loop and the workers (``sluice service stop`` then kills this actor)."""
        self._closed.set()
        with self._lock:
            for handle in list(self._workers.values()) + [h for h, _ in self._starting.values()]:
                try:
                    self._ray.kill(handle)
                except Exception:
                    pass
            self._workers.clear()
            self._starting.clear()
