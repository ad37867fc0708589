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
    """One worker of the pool: hosts the stages of the jobs attached to it. A stage with a
    deterministic prefix worth caching reads its records from its node's tier and the cache
    shards first and sends the shards the ones it computed (without waiting: a lost put is a
    later miss) — unless every worker shares its tier (``share_tier``): the tier then holds
    all any of them made, and the shards would only hold copies."""

    def __init__(self, slots: int, window_bytes: int, shards: list | None = None, node_cache: tuple | None = None):
        self._host = _native.ServiceHost(slots, window_bytes, node_cache)
        self._shards = list(shards or [])
        self._tier_shared = False
        self._tier_told = -1

    def set_shards(self, shards: list) -> None:
        self._shards = list(shards)

    def share_tier(self, shared: bool, told: int) -> None:
        """Whether every worker of the service reads and writes this worker's node tier, as
        the dispatcher's ``told``-th word on it says (calls may run out of order on the
        actor's threads: an older word is ignored)."""
        if told > self._tier_told:
            self._tier_told, self._tier_shared = told, bool(shared)

    def attach(self, job: int, weight: float, init: str) -> str:
        return self._host.attach(job, weight, init)

    def check(self, init: str) -> None:
        """Builds the stage once, attached to no job: raises what keeps it from running here."""
        _native.ChainWorker(init)

    def run(self, job: int, key: str, frame: bytes) -> Any:
        """The chunk's split reply ``(frame, [uint8 arrays])``, or — when several jobs of a
        stream read it — a reference to it in Ray's object store, put there once."""
        # A shared tier holds every record: the shards would only hold copies (none asked or filled).
        shards = [] if self._tier_shared else self._shards
        plan = self._host.prefix_plan(job, key, frame, len(shards)) if self._shards else None
        if plan is None:
            return self._host.run(job, key, frame)
        prefix, groups = plan
        t0 = time.perf_counter()
        cached = _fetch(shards, prefix, groups)
        reply, puts, compute_s = self._host.run_cached(
            job, key, frame, cached, time.perf_counter() - t0, len(shards)
        )
        for shard, records in zip(shards, puts):
            if records:
                shard.put_many.remote(prefix, compute_s, records)
        return reply

    def detach(self, job: int, key: str) -> bool:
        return self._host.detach(job, key)

    def forget(self, job: int) -> int:
        return self._host.forget(job)

    def report(self) -> str:
        """The host's report as JSON, with where this worker runs."""
        import ray

        report = self._host.report()
        if report.get("node_cache"):
            report["node_cache"]["shared"] = self._tier_shared  # what the dispatcher last said
        report["node"] = ray.get_runtime_context().get_node_id()
        report["pid"] = os.getpid()
        return json.dumps(report)

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


def _fetch(shards: list, prefix: str, groups: list[list[int]]) -> list[tuple]:
    """The shards' answers for these source indices: per shard asked, ``(indices, records
    end to end as a uint8 array, each one's length or -1)``. A shard that fails counts as
    misses."""
    import ray

    calls = [(idxs, shard.get_many.remote(prefix, idxs)) for shard, idxs in zip(shards, groups) if idxs]
    found = []
    for idxs, ref in calls:
        try:
            joined, lengths = ray.get(ref, timeout=30)
        except ray.exceptions.RayError:
            continue
        found.append((idxs, joined, lengths))
    return found


def _cache_status(reports: list[dict]) -> dict:
    """The shards' reports summed per prefix (for ``status()``)."""
    prefixes: dict[str, dict] = {}
    for r in reports:
        for key, p in r.get("prefixes", {}).items():
            total = prefixes.setdefault(key, {})
            for k, v in p.items():
                total[k] = total.get(k, 0) + v
    return {
        "shards": len(reports),
        "budget": sum(r["budget"] for r in reports),
        "bytes": sum(r["bytes"] for r in reports),
        "prefixes": prefixes,
    }


class CacheShard:
    """One shard of the prefix cache (``sluice._native.PrefixCache``): records in this
    process's memory, owned by no job, gone with the shard (then they are misses)."""

    def __init__(self, budget: int):
        self._cache = _native.PrefixCache(budget)

    def get_many(self, prefix: str, indices: list[int]) -> tuple:
        return self._cache.get_many(time.monotonic(), prefix, indices)

    def put_many(self, prefix: str, compute_s: float, records: list) -> int:
        return self._cache.put_many(time.monotonic(), prefix, compute_s, records)

    def report(self) -> dict:
        return self._cache.report(time.monotonic())


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
        self._serial = 0  # workers started
        self._shard_serial = 0  # cache shards started
        self._t0 = time.monotonic()
        self._closed = threading.Event()
        self._events: list[str] = []
        self._shards: list[Any] = []
        self._cache_reports: list[dict] = []
        self._tiers: dict[str, str | None] = {}  # worker id -> its node tier's identity
        self._tier_shared = False
        self._tier_told = 0  # how many times the workers were told
        self._start_shards()
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
            ).remote(max(1, int(round(cpus))), int(self._opts["window_bytes"]), self._shards, self._node_cache())
            self._starting[wid] = (handle, handle.report.remote())
        if n:
            self._event(f"starting {n} worker(s)")

    def _node_cache(self) -> tuple | None:
        """The workers' node tier of the prefix cache: ``(service, dir, bytes)``; none when the
        cache is off."""
        if not self._shards or self._opts.get("node_cache_bytes") == 0:
            return None
        return (self._name, self._opts.get("node_cache_dir"), self._opts.get("node_cache_bytes"))

    def _start_shards(self) -> None:
        """The prefix cache's shards (``cache_bytes`` split over ``cache_shards``), spread
        over the nodes; none when the cache is off."""
        n, budget = int(self._opts.get("cache_shards", 0)), int(self._opts.get("cache_bytes", 0))
        if n > 0 and budget > 0:
            self._shards = [self._new_shard() for _ in range(n)]

    def _new_shard(self) -> Any:
        self._shard_serial += 1
        return (
            self._ray.remote(CacheShard)
            .options(
                name=f"{dispatcher_name(self._name)}:{self.generation}:c{self._shard_serial}",
                namespace=NAMESPACE,
                num_cpus=0,
                max_restarts=0,
                max_concurrency=16,
                scheduling_strategy="SPREAD",
            )
            .remote(int(self._opts["cache_bytes"]) // int(self._opts["cache_shards"]))
        )

    def _poll_cache(self) -> None:
        """The shards' reports; a lost shard is replaced (its records are misses now) and the
        workers told."""
        if not self._shards:
            return
        ray = self._ray
        reports, lost = [], False
        for i, shard in enumerate(list(self._shards)):
            try:
                reports.append(ray.get(shard.report.remote(), timeout=5))
            except (ray.exceptions.GetTimeoutError, ray.exceptions.ActorUnavailableError):
                continue
            except ray.exceptions.RayError:
                self._shards[i] = self._new_shard()
                self._event(f"cache shard {i} lost; replaced (its records are gone)")
                lost = True
        self._cache_reports = reports
        if lost:
            with self._lock:
                for handle in self._workers.values():
                    handle.set_shards.remote(self._shards)

    def _share_tier(self) -> None:
        """Tells the workers whether they all share one node tier (one machine's nodes, a
        shared disk): then every record one of them made is in it, and storing copies in the
        shards is a transfer nobody reads. A worker joining with a tier of its own turns the
        shards back on. Called with the lock held."""
        tiers = {self._tiers.get(wid) for wid in self._workers}
        shared = bool(self._shards) and bool(self._workers) and len(tiers) == 1 and None not in tiers
        if shared != self._tier_shared:
            self._tier_shared, self._tier_told = shared, self._tier_told + 1
            self._event("every worker shares one node tier: the shards are left alone" if shared
                        else "the workers' node tiers differ: the shards are used")
            for handle in self._workers.values():
                handle.share_tier.remote(shared, self._tier_told)

    def _retire(self, ids: list[str]) -> None:
        for wid in ids:
            handle = self._workers.pop(wid, None)
            self._tiers.pop(wid, None)
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
                except (ray.exceptions.GetTimeoutError, ray.exceptions.ActorUnavailableError):
                    continue  # busy starting, slow to answer, or briefly unreachable: next tick
                except ray.exceptions.RayError as e:
                    self._starting.pop(wid, None)
                    self._tiers.pop(wid, None)
                    if self._workers.pop(wid, None) is not None:
                        self._registry.remove_worker(wid)
                    self._event(f"worker {wid} lost ({type(e).__name__})")
                    continue
                report = json.loads(text)
                if wid in starting:
                    handle, _ = self._starting.pop(wid)
                    self._workers[wid] = handle
                    self._registry.add_worker(now, wid, report.get("node", ""))
                    handle.share_tier.remote(self._tier_shared, self._tier_told)
                self._tiers[wid] = (report.get("node_cache") or {}).get("tier")
                self._registry.worker_beat(now, wid, text)
            self._share_tier()
            for job in self._registry.expire(now):
                self._event(f"job {job} expired (no heartbeat)")
                for handle in self._workers.values():
                    handle.forget.remote(job)
            if now - self._last_scale >= float(self._opts["window_s"]):
                self._last_scale = now
                kind, arg = self._registry.scale(now, len(self._starting))
                if kind == "start":
                    self._start(int(arg))
                elif kind == "retire":
                    self._retire(list(arg))

    def _loop(self) -> None:
        while not self._closed.wait(float(self._opts["tick_s"])):
            try:
                self._poll()
                self._poll_cache()
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
                cache={**_cache_status(self._cache_reports), "tier_shared": self._tier_shared},
                starting=sorted(self._starting),
                events=list(self._events),
            )
            return out

    def close(self) -> None:
        """Stops the loop and the workers (``sluice service stop`` then kills this actor)."""
        self._closed.set()
        with self._lock:
            for handle in list(self._workers.values()) + [h for h, _ in self._starting.values()] + self._shards:
                try:
                    self._ray.kill(handle)
                except Exception:
                    pass
            self._workers.clear()
            self._starting.clear()
