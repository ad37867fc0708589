"""One preprocessing service, many training jobs: sluice as a shared service on Ray.

``sluice.serve("NAME")`` (or ``sluice serve --name NAME``) starts a long-lived service on a
Ray cluster: a detached, named dispatcher and a pool of worker actors. A training job uses it
with ``sluice.Context(service="NAME")``: the same pipeline code as a local or per-job Ray
run, its element-wise stages computed on the shared workers, its batches byte-identical to a
local run, exactly once, resumable with ``state_dict()``.

- Jobs share the workers in weighted fair order (``Context(service=..., weight=2.0)``), and a
  job that stops consuming gives its share back at once.
- Jobs that send the same chunks (a sweep: same pipeline, same seed) compute each chunk once
  and read it at their own pace from a bounded window.
- The pool grows when the connected jobs keep the workers busy and want more (new workers
  are Ray resource requests, so Ray's autoscaler adds nodes) and shrinks when they do not.
- A worker or node lost costs time, not data: the job re-sends the chunk to another worker.
  A restarted dispatcher is rejoined transparently (``reconnect=True``) or fails the job with
  :class:`ServiceLost` (``reconnect=False``), which resumes from its last ``state_dict()``.

>>> import sluice
>>> ctx = sluice.Context(service="imagenet-prep", weight=2.0)
>>> ctx
Context(ray_address='auto', service='imagenet-prep', weight=2.0)

See ``docs/SERVICE.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import weakref
from typing import Any

from . import _native
from ._service_actors import NAMESPACE, Dispatcher, dispatcher_name
from .ray_backend import RayShim, import_ray, ray_pool

__all__ = ["ServiceError", "ServiceLost", "serve", "status", "stop", "services"]


class ServiceError(RuntimeError):
    """A job cannot use the service: it does not exist, or the job's stage cannot run on its
    workers (the message names the stage and what failed)."""


class ServiceLost(RuntimeError):
    """The service restarted or went away under a running job that may not reconnect."""


def _ray(address: str | None) -> Any:
    ray = import_ray()
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, namespace=NAMESPACE)
    return ray


def _named(ray: Any) -> list[str]:
    """Names of the live actors in the service namespace (a GCS call: no dashboard needed)."""
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a.get("namespace") == NAMESPACE]


def services(address: str | None = None) -> list[str]:
    """Names of the services running on the cluster."""
    ray = _ray(address)
    return sorted(n[4:] for n in _named(ray) if n.startswith("svc:") and n.count(":") == 1)


def serve(
    name: str,
    *,
    address: str | None = "auto",
    min_workers: int = 1,
    max_workers: int = 8,
    worker_cpus: float = 1.0,
    window_bytes: int = 256 << 20,
    lease_s: float = 5.0,
    window_s: float = 2.0,
    tick_s: float = 0.5,
    runtime_env: dict | None = None,
    metrics_port: int | None = None,
    cache_bytes: int = 512 << 20,
    cache_shards: int = 2,
    node_cache_bytes: int | None = None,
    node_cache_dir: str | None = None,
    ready_timeout_s: float = 60.0,
) -> dict:
    """Starts the service ``name`` on the Ray cluster at ``address`` (``None``/``"auto"``:
    this process's or the local cluster) and waits for ``min_workers`` workers; returns
    ``{"generation", "workers"}``. Starting a name that runs already returns the running one.

    ``worker_cpus``: CPUs per worker (its compute slots). ``window_bytes``: replies each
    shared stream keeps for slower jobs of a sweep. ``lease_s``: a job silent this long is
    dropped and its queued chunks released. ``window_s``: how often the pool is resized.
    ``metrics_port``: serve the service's figures (jobs' rates, shares, queue waits, stream
    hits; workers' utilisation) in the Prometheus text format on 127.0.0.1 of the
    dispatcher's node (0: a free port; ``status()["metrics_address"]`` says which).
    ``cache_bytes``: memory for the prefix cache, split over ``cache_shards`` actors spread
    over the nodes (0: no cache). A stage's deterministic prefix — the read and the ops
    before the first random one — is computed once per item and reused by every job and
    epoch reading the same source with the same prefix ops, when reading a record back is
    cheaper than computing it; over budget, the prefix worth least per byte gives way.
    ``node_cache_bytes``: the prefix cache's tier on each node's disk, in front of the shards
    (``None``: a quarter of the free disk space; 0: none) — every record a worker computes or
    fetches is kept there, and the node's workers read it back with no Ray call (a page-cache
    copy instead of a shard's answer through the object store). ``node_cache_dir``: where
    (default: ``services/<name>`` in the object cache's directory, ``$SLUICE_CACHE_DIR`` or
    ``~/.cache/sluice/objects``), a path local to each node."""
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"a service name is a non-empty string without ':', got {name!r}")
    if not (isinstance(min_workers, int) and isinstance(max_workers, int) and 0 <= min_workers <= max_workers and max_workers >= 1):
        raise ValueError(f"need 0 <= min_workers <= max_workers and max_workers >= 1, got {min_workers}, {max_workers}")
    for what, n in (("cache_bytes", cache_bytes), ("cache_shards", cache_shards), ("node_cache_bytes", node_cache_bytes)):
        if n is None and what == "node_cache_bytes":
            continue
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"{what} must be an int >= 0, got {n!r}")
    if node_cache_dir is not None and not isinstance(node_cache_dir, (str, os.PathLike)):
        raise ValueError(f"node_cache_dir must be a path, got {node_cache_dir!r}")
    for what, v in (("worker_cpus", worker_cpus), ("lease_s", lease_s), ("window_s", window_s), ("tick_s", tick_s)):
        if not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{what} must be a number > 0, got {v!r}")
    ray = _ray(address)
    options = dict(
        min_workers=min_workers,
        max_workers=max_workers,
        worker_cpus=float(worker_cpus),
        window_bytes=int(window_bytes),
        lease_s=float(lease_s),
        window_s=float(window_s),
        tick_s=float(tick_s),
        runtime_env=runtime_env,
        metrics_port=metrics_port,
        cache_bytes=int(cache_bytes),
        cache_shards=int(cache_shards),
        node_cache_bytes=node_cache_bytes,
        node_cache_dir=None if node_cache_dir is None else os.fspath(node_cache_dir),
    )
    dispatcher = (
        ray.remote(Dispatcher)
        .options(
            name=dispatcher_name(name),
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            max_restarts=-1,
            num_cpus=0,
            max_concurrency=256,
        )
        .remote(name, options)
    )
    # Waiting here also makes sure the detached actor exists before this driver may exit.
    return ray.get(dispatcher.ready.remote(min_workers, ready_timeout_s), timeout=ready_timeout_s + 30)


def _dispatcher(ray: Any, name: str) -> Any:
    try:
        return ray.get_actor(dispatcher_name(name), namespace=NAMESPACE)
    except ValueError:
        running = services()
        raise ServiceError(
            f"no sluice service named {name!r} on this Ray cluster "
            + (f"(running: {', '.join(running)})" if running else "(none is running)")
            + f"; start one with `sluice serve --name {name}`"
        ) from None


def status(name: str, address: str | None = "auto") -> dict:
    """The service's jobs (weight, rate, share, queue wait), workers (node, utilisation,
    queue), totals and recent decisions."""
    ray = _ray(address)
    return ray.get(_dispatcher(ray, name).status.remote(), timeout=30)


def stop(name: str, address: str | None = "auto", timeout_s: float = 10.0) -> list[str]:
    """Stops the service and its workers; returns the names of its actors still alive after
    ``timeout_s`` (none, normally)."""
    ray = _ray(address)
    dispatcher = _dispatcher(ray, name)
    try:
        ray.get(dispatcher.close.remote(), timeout=timeout_s)
    except Exception:
        pass
    ray.kill(dispatcher, no_restart=True)
    prefix = dispatcher_name(name)
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [n for n in _named(ray) if n == prefix or n.startswith(prefix + ":")]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


# The job's side ---------------------------------------------------------------------------
class Connection:
    """One job's registration with a service: its id, the dispatcher's generation, and a
    heartbeat thread (every ``beat_s``) that keeps the lease and notices a restarted
    dispatcher — re-registering with ``reconnect``, else marking the connection lost."""

    def __init__(self, ctx: Any, label: str, stage_key: str):
        self._ray = ctx.connect()
        self.name = ctx.service
        self.weight = float(ctx.weight)
        self.reconnect = bool(ctx.reconnect)
        self._label, self._stage_key = label, stage_key
        self._dispatcher = _dispatcher(self._ray, self.name)
        self._ctx = weakref.ref(ctx)
        self._lock = threading.Lock()
        self.lost: str | None = None
        self.job, self.generation = 0, ""
        self._register()
        self._closed = threading.Event()
        threading.Thread(target=self._beat, name="sluice-service-heartbeat", daemon=True).start()

    def _call(self, method: str, *args: Any, timeout: float = 30.0) -> Any:
        # Ray's calls start a fresh local cluster when none is up: never from here.
        if not self._ray.is_initialized():
            raise ServiceLost(f"Ray was shut down under the job using service {self.name!r}")
        errors = self._ray.exceptions
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._ray.get(getattr(self._dispatcher, method).remote(*args), timeout=timeout)
            except errors.ActorUnavailableError:
                # Ray is restarting the dispatcher: ask the new one.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
            except errors.RayActorError as e:
                raise ServiceLost(f"service {self.name!r} is gone ({type(e).__name__}); restart it and resume from your last state_dict()") from e

    def _register(self) -> None:
        info = {"label": self._label, "weight": self.weight, "stage_keys": [self._stage_key]}
        reply = self._call("register", info)
        self.job, self.generation = int(reply["job"]), str(reply["generation"])

    def _rejoin(self, job: int, generation: str) -> None:
        """The dispatcher did not know ``job`` (its lease expired, or the dispatcher
        restarted as ``generation``): register again, unless another thread already did or
        this job may not reconnect to a restarted service."""
        with self._lock:
            if self.lost:
                raise ServiceLost(self.lost)
            if job != self.job:
                return
            if generation != self.generation and not self.reconnect:
                self.lost = (
                    f"service {self.name!r} restarted (generation {self.generation} -> "
                    f"{generation}); resume from your last state_dict(), or use "
                    "Context(reconnect=True)"
                )
                raise ServiceLost(self.lost)
            self._register()

    def _beat(self) -> None:
        while not self._closed.wait(1.0):
            ctx = self._ctx()
            if ctx is None or not self._ray.is_initialized():
                break
            samples = sum(int(p.report()["samples"]) for p in ctx.pools())
            del ctx
            job = self.job
            try:
                reply = self._call("heartbeat", job, self.generation, samples, timeout=10.0)
                if not reply["known"]:
                    self._rejoin(job, reply["generation"])
            except ServiceLost as e:
                self.lost = self.lost or str(e)
            except Exception:  # a slow or restarting dispatcher: try again next beat
                pass
        self.close()

    def lease(self, avoid: list[str], timeout_s: float) -> tuple[str, Any]:
        """A worker for one pool slot (waits while the service starts its workers)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.lost:
                raise ServiceLost(self.lost)
            job = self.job
            reply = self._call("lease", job, self.generation, avoid)
            if reply.get("worker"):
                return reply["worker"], reply["handle"]
            if reply.get("known") is False:
                self._rejoin(job, reply["generation"])
                continue
            if time.monotonic() > deadline:
                raise ServiceError(f"service {self.name!r} has no worker running after {timeout_s:.0f}s")
            time.sleep(0.1)

    def release(self, worker: str) -> None:
        try:
            self._dispatcher.release.remote(self.job, self.generation, worker)
        except Exception:
            pass

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            if self._ray.is_initialized():
                self._dispatcher.unregister.remote(self.job, self.generation)
        except Exception:  # at interpreter exit the cluster may be gone
            pass


class _Leased:
    """A pool slot's worker: the shared actor and this stage's key on it."""

    def __init__(self, worker: str, actor: Any, key: str):
        self.worker, self.actor, self.key = worker, actor, key

    def node_id(self) -> Any:  # tests look up where a slot's worker runs
        return self.actor.node_id


class ServiceShim(RayShim):
    """The Ray calls of one stage's native pool on a shared service: "start an actor" leases
    a shared worker and attaches the stage to it, "kill" detaches (a shared worker is never
    killed by a job), a chunk goes to the worker directly. Scheduling, retries and ordering
    stay the native pool's, as with per-job actors."""

    def __init__(self, ctx: Any, conn: Connection, key: str, init: str):
        super().__init__(ctx)
        # The init the key was made from (its local files pinned), not the native pool's.
        self._conn, self._key, self._init = conn, key, init
        self._timeout = float(ctx.actor_start_timeout_s)
        self._held: list[str] = []
        # The worker dropped this job's stage (its lease expired): attach again elsewhere.
        self._lost = (*self._lost, _native.StageDetached)

    def start(self, init: str, done: Any) -> tuple[Any, Any]:
        worker, actor = self._conn.lease(self._held, self._timeout)
        self._held.append(worker)
        ref = actor.attach.remote(self._conn.job, self._conn.weight, self._init)
        return _Leased(worker, actor, self._key), self._call(ref, done)[1]

    def submit(self, handle: Any, frame: bytes, done: Any) -> tuple[Any, Any]:
        return self._call(handle.actor.run.remote(self._conn.job, handle.key, frame), done)

    def result(self, future: Any) -> tuple[bool, Any]:
        ok, value = super().result(future)
        if ok and isinstance(value, self._ray.ObjectRef):
            # A reply shared by the jobs of a stream: fetched once per host, mapped here.
            try:
                value = self._ray.get(value, timeout=self._timeout)
            except self._ray.exceptions.RayError as e:
                return False, (isinstance(e, self._lost), type(e).__name__, str(e), e)
        if not ok and not value[0] and isinstance(getattr(value[3], "cause", None), _native.StageDetached):
            value = (True, *value[1:])
        return ok, value

    def kill(self, handle: Any) -> None:
        if handle.worker in self._held:
            self._held.remove(handle.worker)
        if self._ray.is_initialized():
            try:
                handle.actor.detach.remote(self._conn.job, handle.key)
            except Exception:
                pass
            self._conn.release(handle.worker)

    def affinity(self, handle: Any) -> str | None:
        # The same name in every job's pool: a sweep's chunks meet on one worker.
        return f"{self._conn.generation}:{handle.worker}"

    def alive(self) -> bool:
        return self._ray.is_initialized()

    def free_cpus(self) -> float:
        return 0.0  # the service sizes its own pool


def connect_stage(ctx: Any, init: str, label: str) -> tuple[Connection, str]:
    """The context's connection (made on its first stage) and the stage's key, after the
    stage was built on one worker (and dropped: the pool attaches it where it runs): a stage
    that cannot run there fails here, before any data moves, naming the stage and the
    cause."""
    key = _native.stage_key(init)
    conn = ctx._service_conn
    if conn is None or conn.lost or conn._closed.is_set():
        conn = ctx._service_conn = Connection(ctx, label, key)
    worker, actor = conn.lease([], float(ctx.actor_start_timeout_s))
    ray = conn._ray
    try:
        ray.get(actor.check.remote(init), timeout=float(ctx.actor_start_timeout_s))
    except ray.exceptions.RayTaskError as e:
        cause = getattr(e, "cause", None) or e
        raise ServiceError(f"stage {label} cannot run on service {conn.name!r}: {type(cause).__name__}: {cause}") from None
    finally:
        conn.release(worker)
    return conn, key


def job_stats(conn: Connection, data: dict, text: str) -> tuple[dict, str]:
    """``it.stats()``'s ``service`` entry: this job as the dispatcher sees it, and the
    workers it ran on."""
    try:
        st = conn._call("status", timeout=10.0)
    except Exception as e:  # the stats must not fail because the service is restarting
        return {**data, "service": {"name": conn.name, "error": str(e)}}, text
    job = next((j for j in st["jobs"] if j["id"] == conn.job), None)
    workers = [w for w in st["workers"] if job and w["id"] in job["lease_workers"]]
    entry = {"name": conn.name, "generation": conn.generation, "job": job, "workers": workers}
    line = f"service {conn.name}: job {conn.job}"
    if job:
        line += (
            f", weight {job['weight']}, share {job['share']:.2f} of {len(st['workers'])} worker(s), "
            f"{job['chunks']} chunks ({job['stream_hits']} from a shared stream), "
            f"queue wait {job['queue_wait_s']:.2f}s"
        )
    return {**data, "service": entry}, f"{text}\n\n{line}"


def service_workers(ctx: Any) -> int:
    """Slots for a stage's pool on the service: one per worker it runs now."""
    ray = ctx.connect()
    got = ray.get(_dispatcher(ray, ctx.service).ready.remote(0, 0.0), timeout=30)
    return max(1, int(got["workers"]))


def service_pool(ctx: Any, init: str, workers: int, label: str) -> Any:
    """A stage's native pool over the service's shared workers. The stage's local files are
    pinned first: the service outlives this job, and a job that starts after a file changed
    must not share a stage (its stream, its prefix records) built over the old one."""
    init = _native.pin_local_files(init)
    conn, key = connect_stage(ctx, init, label)
    return ray_pool(ctx, init, max(1, int(workers)), label, shim=ServiceShim(ctx, conn, key, init))


# `sluice serve` / `sluice service status|stop` --------------------------------------------
def main(argv: list[str]) -> int:
    """The ``serve`` and ``service`` commands of the ``sluice`` CLI (they need Ray, so they
    run here rather than in the Rust CLI)."""
    p = argparse.ArgumentParser(prog="sluice")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="start a shared service on a Ray cluster")
    s.add_argument("--name", required=True)
    s.add_argument("--address", default="auto")
    s.add_argument("--min-workers", type=int, default=1)
    s.add_argument("--max-workers", type=int, default=8)
    s.add_argument("--worker-cpus", type=float, default=1.0)
    s.add_argument("--cache-bytes", type=int, default=512 << 20, help="the prefix cache's shards, in bytes (0: no cache)")
    s.add_argument("--node-cache-bytes", type=int, default=None, help="its tier on each node's disk (default: a quarter of the free space; 0: none)")
    s.add_argument("--node-cache-dir", default=None, help="where on each node")
    svc = sub.add_parser("service", help="status or stop of a running service")
    svc.add_argument("action", choices=["status", "stop", "list"])
    svc.add_argument("name", nargs="?")
    svc.add_argument("--address", default="auto")
    svc.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    try:
        if a.command == "serve":
            got = serve(
                a.name, address=a.address, min_workers=a.min_workers, max_workers=a.max_workers, worker_cpus=a.worker_cpus,
                cache_bytes=a.cache_bytes, node_cache_bytes=a.node_cache_bytes, node_cache_dir=a.node_cache_dir,
            )
            print(f"service {a.name!r} running: {got['workers']} worker(s), generation {got['generation']}")
            return 0
        if a.action == "list":
            print("\n".join(services(a.address)))
            return 0
        if not a.name:
            p.error(f"service {a.action} needs a NAME")
        if a.action == "stop":
            left = stop(a.name, a.address)
            print(f"service {a.name!r} stopped" + (f"; still alive: {', '.join(left)}" if left else ""))
            return 1 if left else 0
        st = status(a.name, a.address)
        print(json.dumps(st, indent=2) if a.json else format_status(st))
        return 0
    except ServiceError as e:
        print(f"error: {e}")
        return 2


def format_status(st: dict) -> str:
    """``sluice service status``'s text."""
    lines = [f"service {st['name']} (generation {st['generation']})"]
    jobs = st.get("jobs", [])
    lines.append(f"jobs: {len(jobs)}")
    for j in jobs:
        lines.append(
            f"  job {j['id']} {j['label']}: weight {j['weight']}, {j['rate']:.1f} samples/s, "
            f"share {j['share']:.2f}, queue wait {j['queue_wait_s']:.2f}s, {j['leases']} slot(s)"
        )
    workers = st.get("workers", [])
    lines.append(f"workers: {len(workers)}" + (f" (+{len(st['starting'])} starting)" if st.get("starting") else ""))
    for w in workers:
        node = w.get("node_cache") or {}
        tier = f"; node cache {node['hits']} hit(s), {node['stored']} stored" if node else ""
        lines.append(f"  {w['id']} on {str(w['node'])[:12]}: utilisation {w['utilization']:.2f}, {w['queued']} queued, {w['leases']} slot(s){tier}")
    cache = st.get("cache") or {}
    if cache.get("shards"):
        lines.append(f"prefix cache: {cache['shards']} shard(s), {cache['bytes'] / 1e6:.0f} of {cache['budget'] / 1e6:.0f} MB")
    for e in st.get("events", [])[-10:]:
        lines.append(f"  {e}")
    for d in st.get("decisions", [])[-5:]:
        lines.append(f"  {d}")
    return "\n".join(lines)
