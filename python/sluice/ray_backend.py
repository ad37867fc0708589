"""The ``ray`` executor backend: a pipeline stage runs on Ray actors, each hosting one sluice
engine (``sluice._native.ChainWorker``), and optionally on local workers next to them.

The native executor keeps order, bounds queues and handles shutdown; it calls
``RayPool.run(frame, items)`` from up to ``parallelism`` threads, each with one chunk in the
wire format (items as index ranges when actors can reopen the source, samples otherwise). A
call submits the frame to the least-loaded worker, waits for the reply through Ray's object
store and returns it; the executor restores sequence order. Actors rebuild the same stage
from the same init message and derive randomness from (seed, epoch, index, op), so output is
byte-identical to a local run wherever each chunk ran.

Replies are *split* (``ChainWorker.run_split``): a small frame plus the output tensors as
uint8 numpy arrays that own the engine's buffers. Ray pickles them with protocol 5, so the
arrays go into the object store out of band (one copy) and ``ray.get`` on this node maps
them (no copy); the native side copies each once, into its tensor. A framed reply would
copy the tensors four more times (into the frame, into ``bytes``, out of the store, into a
Rust buffer).

Fault tolerance is per chunk: a chunk whose actor dies (``ray.kill``, a crash, a lost node)
or whose reply is lost with its node before this process fetched it
(``ObjectLostError``: the reply sat in the dead node's object store) is resubmitted to a
fresh actor. The executor receives exactly one reply per chunk and every chunk computes the
same output wherever it runs, so no sample is lost or duplicated. A stage whose workers are
all gone and cannot be replaced (no node can host a new actor) fails with an error instead
of waiting for ever.

Hybrid placement (Pecan's AutoPlacement): ``local_workers`` slots run chunks in this process
next to the actors, and with ``autoscale`` a :class:`sluice.placement.AutoPlacement` moves
both counts by measured throughput and CPU prices. See ``docs/RAY.md``.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from . import _native
from .placement import AutoPlacement

logger = logging.getLogger("sluice")

INSTALL_HINT = "Ray is not installed: pip install sluice[ray]"


def import_ray() -> Any:
    """``ray``, or an ImportError with the install hint."""
    try:
        import ray
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e
    return ray


class _Api:
    """``ray.wait``/``get``/``kill``/``cancel`` without Ray's implicit ``ray.init()``.

    The public functions start a fresh local cluster when Ray is not initialised. A pool
    whose cluster was shut down while it ran (checked before each call, but the shutdown can
    land between the check and the call) would then wait for ever on a reference of the old
    cluster inside a new one. The functions underneath raise instead."""

    def __init__(self, ray: Any):
        inner = getattr(getattr(ray, "_private", None), "worker", None)
        for name in ("wait", "get", "kill", "cancel"):
            setattr(self, name, getattr(inner, name, None) or getattr(ray, name))


class StageActor:
    """A Ray actor hosting one engine for one stage (wrapped by ``ray.remote`` on first use,
    so importing sluice never imports Ray). ``split``: return ``(frame, [uint8 arrays])``
    (zero-copy through the object store) instead of one ``bytes`` frame."""

    def __init__(self, init: str, split: bool = True):
        self._worker = _native.ChainWorker(init)
        self._split = split

    def run(self, frame: bytes) -> Any:
        if self._split:
            return self._worker.run_split(frame)
        return self._worker.run(frame)

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        """The Ray node this actor runs on (tests remove it)."""
        import ray

        return ray.get_runtime_context().get_node_id()


_REMOTE_ACTOR: Any = None


def _actor_class(ray: Any) -> Any:
    global _REMOTE_ACTOR
    if _REMOTE_ACTOR is None:
        _REMOTE_ACTOR = ray.remote(StageActor)
    return _REMOTE_ACTOR


def _reply_bytes(out: Any) -> int:
    """Size of a reply: a frame, or a split reply (frame, [uint8 arrays])."""
    if isinstance(out, tuple):
        frame, arrays = out
        return len(frame) + sum(int(a.nbytes) for a in arrays)
    return len(out)


@dataclass
class _Slot:
    """One place chunks run: an actor (``handle``) or this process (``local``)."""

    name: str
    capacity: int
    handle: Any = None
    local: Any = None
    in_flight: int = 0
    done: int = 0
    retiring: bool = False
    busy_s: float = 0.0
    # Bytes of request frames sent to the actor and of its replies (0 for the local slot).
    sent: int = 0
    received: int = 0
    # An actor takes work once its engine is built (``ready`` resolved).
    ready: Any = None
    started: float = 0.0

    @property
    def is_local(self) -> bool:
        return self.local is not None

    @property
    def is_ready(self) -> bool:
        return self.ready is None


class RayPool:
    """The workers of one stage on Ray (the ``Workers`` protocol of the native backend:
    ``parallelism``, ``run(frame, items) -> reply``, ``shutdown()``)."""

    def __init__(self, ctx: Any, init: str, workers: int, label: str):
        self._ray = import_ray()
        self._api = _Api(self._ray)
        self._ctx = ctx
        self._init = init
        self.label = label
        self._lock = threading.Condition()
        self._closed = False
        self._slots: list[_Slot] = []  # serving now
        self._all: list[_Slot] = []  # every slot ever, for report()
        self._serial = 0
        self._local_serial = 0
        self._start_failures = 0  # actors in a row that died while starting
        self.events: list[str] = []
        self.retries = 0
        self.retry_causes: dict[str, int] = {}  # exception type -> chunks re-run for it
        self.chunks = 0
        self.samples = 0
        per = max(1, int(ctx.in_flight_per_actor))
        n = max(1, int(workers))
        self._per_actor = per
        for _ in range(n):
            self._slots.append(self._new_actor())
        for _ in range(int(ctx.local_workers)):
            self._slots.append(self._new_local())
        self.placement: AutoPlacement | None = None
        max_local = int(ctx.local_workers)
        max_actors = n
        if ctx.autoscale:
            max_local = max(max_local, int(ctx.max_local_workers if ctx.max_local_workers is not None else os.cpu_count() or 1))
            max_actors = max(n, int(ctx.max_actors or n))
            self.placement = AutoPlacement(
                local=int(ctx.local_workers),
                remote=n,
                min_local=0,
                max_local=max_local,
                min_remote=int(ctx.min_actors),
                max_remote=max_actors,
                local_cpu_price=float(ctx.local_cpu_price),
                remote_cpu_price=float(ctx.remote_cpu_price),
                actor_cpus=float(ctx.actor_cpus) or 1.0,
                target=ctx.target_throughput,
                slack=float(ctx.slack),
            )
        # The first window starts at the first reply: start-up is not the placement's rate.
        self._window_t0: float | None = None
        self._window_samples = 0
        self._serving = (0, 0)
        # The executor keeps this many chunks in flight: room for every worker the
        # placement may add (threads beyond the serving slots wait in _acquire).
        self.parallelism = max_local + max_actors * per
        self._await_ready([s for s in self._slots if s.handle is not None])
        self._log(f"start: {n} actors x {per} in flight, {ctx.local_workers} local workers")

    def _await_ready(self, slots: list[_Slot]) -> None:
        # An actor Ray cannot place (too few free CPUs) would leave its chunks waiting
        # forever: fail clearly instead. Building the stage in each actor also surfaces
        # errors (a UDF that does not unpickle there) before any data moves.
        ray = self._ray
        refs = [s.ready for s in slots]
        ready, pending = self._api.wait(refs, num_returns=len(refs), timeout=self._ctx.actor_start_timeout_s)
        if pending:
            self.shutdown()
            free = ray.available_resources().get("CPU", 0.0)
            raise RuntimeError(
                f"stage {self.label}: only {len(ready)} of {len(refs)} Ray actors started within "
                f"{self._ctx.actor_start_timeout_s:.0f} s (each asks for {self._ctx.actor_cpus} CPU; "
                f"the cluster has {free:g} CPU free). Lower num_actors or actor_cpus."
            )
        try:
            self._api.get(ready)
        except ray.exceptions.RayActorError as e:
            self.shutdown()
            cause = e.__cause__ or e
            raise RuntimeError(f"stage {self.label}: the Ray actors could not build the stage: {cause}") from e
        for s in slots:
            s.ready = None

    def _check_cluster(self) -> None:
        # Ray starts a fresh local cluster on the first API call after ray.shutdown(): a
        # pipeline outliving its cluster must fail instead of silently starting another.
        if not self._ray.is_initialized():
            raise RuntimeError(f"stage {self.label}: the Ray cluster was shut down while the pipeline ran")

    # Slots -------------------------------------------------------------------------------
    def _new_actor(self) -> _Slot:
        self._check_cluster()
        cls = _actor_class(self._ray)
        opts: dict[str, Any] = {"num_cpus": self._ctx.actor_cpus, "max_restarts": 0}
        if self._ctx.runtime_env:
            opts["runtime_env"] = self._ctx.runtime_env
        self._serial += 1
        handle = cls.options(**opts).remote(self._init, bool(self._ctx.zero_copy))
        slot = _Slot(f"actor-{self._serial}", self._per_actor, handle=handle)
        slot.ready, slot.started = handle.pid.remote(), time.monotonic()
        self._all.append(slot)
        return slot

    def _new_local(self) -> _Slot:
        self._local_serial += 1
        slot = _Slot(f"local-{self._local_serial}", 1, local=_native.ChainWorker(self._init))
        self._all.append(slot)
        return slot

    def _log(self, msg: str, level: int = logging.INFO) -> None:
        # Kept for stats() (the pool's story) and sent to the "sluice" logger.
        self.events.append(f"{time.strftime('%H:%M:%S')} {self.label}: {msg}")
        logger.log(level, "ray stage %s: %s", self.label, msg)

    def _poll_starting(self) -> None:
        """Marks started actors ready; drops those that fail or take too long to start."""
        ray = self._ray
        if not ray.is_initialized():
            return
        for s in [s for s in self._slots if not s.is_ready]:
            died = False
            done, _ = self._api.wait([s.ready], timeout=0)
            if done:
                try:
                    self._api.get(done[0])
                    s.ready = None
                    self._start_failures = 0
                    continue
                except ray.exceptions.RayError as e:
                    why = f"could not start ({type(e).__name__})"
                    died = isinstance(e, ray.exceptions.RayActorError)
            elif time.monotonic() - s.started > self._ctx.actor_start_timeout_s:
                why = f"did not start within {self._ctx.actor_start_timeout_s:.0f} s"
            else:
                continue
            self._slots.remove(s)
            self._kill(s)
            # An actor that died while starting was most likely placed on a node that was
            # going down (Ray had not noticed yet): start another, a bounded number of times.
            # One that cannot be placed at all (timeout) is not retried.
            if died and not self._closed and self._start_failures < max(1, self._ctx.max_retries):
                self._start_failures += 1
                fresh = self._new_actor()
                self._slots.append(fresh)
                self._log(f"{s.name} {why}; replaced by {fresh.name}", logging.WARNING)
            else:
                self._log(f"{s.name} {why}; dropped", logging.WARNING)

    def _acquire(self) -> _Slot:
        with self._lock:
            while True:
                if self._closed:
                    raise RuntimeError(f"stage {self.label}: the Ray pool is shut down")
                self._poll_starting()
                if not self._slots:
                    # Every actor died and none of their replacements could start: waiting
                    # would never end.
                    last = self.events[-1] if self.events else ""
                    raise RuntimeError(
                        f"stage {self.label}: no worker left to run chunks on (every actor was "
                        f"lost and none could be started again; last event: {last})"
                    )
                free = [s for s in self._slots if s.is_ready and not s.retiring and s.in_flight < s.capacity]
                if free:
                    # Least loaded relative to capacity; local first on ties (no transfer).
                    slot = min(free, key=lambda s: (s.in_flight / s.capacity, not s.is_local))
                    slot.in_flight += 1
                    return slot
                self._lock.wait(0.05 if any(not s.is_ready for s in self._slots) else 0.5)

    def _release(self, slot: _Slot, busy: float, items: int, ok: bool, moved: tuple[int, int] = (0, 0)) -> None:
        with self._lock:
            slot.in_flight -= 1
            if ok:
                slot.done += 1
                slot.busy_s += busy
                slot.sent += moved[0]
                slot.received += moved[1]
                self.chunks += 1
                self.samples += items
                self._window_samples += items
            if slot.retiring and slot.in_flight == 0:
                self._retire(slot)
            self._lock.notify_all()

    def _retire(self, slot: _Slot) -> None:
        if slot in self._slots:
            self._slots.remove(slot)
        self._kill(slot)

    def _kill(self, slot: _Slot) -> None:
        if slot.handle is not None and self._ray.is_initialized():
            try:
                self._api.kill(slot.handle)
            except Exception:  # the cluster may already be gone at interpreter exit
                pass

    def _replace(self, slot: _Slot, why: str) -> None:
        with self._lock:
            if slot in self._slots:
                self._slots.remove(slot)
                if not self._closed and self._ray.is_initialized():
                    fresh = self._new_actor()
                    self._slots.append(fresh)
                    self._log(f"{slot.name} lost ({why}); replaced by {fresh.name}", logging.WARNING)
            self._lock.notify_all()

    # Placement ---------------------------------------------------------------------------
    def _window(self) -> None:
        """At the end of a measurement window, asks the placement what to change."""
        if self.placement is None:
            return
        with self._lock:
            now = time.monotonic()
            # A window counts only once every worker is serving: an actor's start-up would
            # read as a slowdown of the placement that added it.
            if self._window_t0 is None or any(not s.is_ready for s in self._slots):
                self._window_t0, self._window_samples = now, 0
                return
            elapsed = now - self._window_t0
            if elapsed < self._ctx.autoscale_window_s:
                return
            rate = self._window_samples / elapsed
            self._window_t0, self._window_samples = now, 0
            decision = self.placement.observe(rate)
            if decision is None:
                return
            self._apply(decision.local, decision.remote)
            self._log(
                f"[{decision.state}] {decision.local:+d} local {decision.remote:+d} actors -> "
                f"{decision.local_workers} local + {decision.remote_actors} actors, "
                f"${decision.cost_per_hour:.3f}/h: {decision.reason}"
            )
            self._lock.notify_all()

    def _apply(self, local: int, remote: int) -> None:
        if remote > 0:
            self._slots.extend(self._new_actor() for _ in range(remote))
        for _ in range(-remote):
            actors = [s for s in self._slots if s.handle is not None and not s.retiring]
            if actors:
                self._retire_one(actors)
        if local > 0:
            self._slots.extend(self._new_local() for _ in range(local))
        for _ in range(-local):
            locals_ = [s for s in self._slots if s.is_local and not s.retiring]
            if locals_:
                self._retire_one(locals_)

    def _retire_one(self, slots: list[_Slot]) -> None:
        # The least busy one stops taking work and goes once its chunks are back.
        victim = min(slots, key=lambda s: s.in_flight)
        victim.retiring = True
        if victim.in_flight == 0:
            self._retire(victim)

    # The Workers protocol ----------------------------------------------------------------
    def run(self, frame: bytes, items: int = 0) -> Any:
        """Runs one request frame (``items`` samples) somewhere and returns its reply (a
        frame, or a split reply); a chunk whose actor dies is re-run on a fresh actor (up to
        ``max_retries`` times)."""
        ray = self._ray
        # The actor is gone (killed, crashed, its node lost), or its reply went with its
        # node's object store before it was fetched: either way the chunk runs again.
        dead = (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError, ray.exceptions.NodeDiedError)
        attempts = 0
        while True:
            slot = self._acquire()
            t = time.perf_counter()
            try:
                self._check_cluster()
                if slot.is_local:
                    out = slot.local.run_split(frame) if self._ctx.zero_copy else slot.local.run(frame)
                else:
                    out = self._wait(slot.handle.run.remote(frame))
            except dead as e:
                attempts += 1
                with self._lock:
                    self.retries += 1
                    cause = type(e).__name__
                    self.retry_causes[cause] = self.retry_causes.get(cause, 0) + 1
                self._release(slot, 0.0, 0, False)
                if self._closed:
                    raise RuntimeError(f"stage {self.label}: the Ray pool is shut down") from e
                if attempts > self._ctx.max_retries:
                    raise RuntimeError(
                        f"stage {self.label}: a chunk failed on {attempts} actors in a row "
                        f"(last: {type(e).__name__}: {e})"
                    ) from e
                logger.warning(
                    "ray stage %s: a chunk's actor failed (%s); re-running it (attempt %d of %d)",
                    self.label, cause, attempts + 1, self._ctx.max_retries + 1,
                )
                self._replace(slot, type(e).__name__)
                continue
            except BaseException:
                self._release(slot, 0.0, 0, False)
                raise
            moved = (0, 0) if slot.is_local else (len(frame), _reply_bytes(out))
            self._release(slot, time.perf_counter() - t, items, True, moved)
            self._window()
            return out

    def _wait(self, ref: Any) -> Any:
        # The reply arrives through a future Ray completes from its own thread; this thread
        # waits on the future in Python, in short steps, checking for a shut-down pool or
        # cluster in between. (Waiting inside ray.wait instead, a thread never came back if
        # ray.shutdown() ran meanwhile: Ray's timer stops with the cluster.)
        api = self._api
        future = ref.future()
        while True:
            self._check_cluster()
            try:
                return future.result(timeout=0.5)
            except concurrent.futures.TimeoutError:
                pass
            if self._closed:
                try:
                    api.cancel(ref)
                except Exception:  # already finished or the actor is gone
                    pass
                raise RuntimeError(f"stage {self.label}: the Ray pool is shut down")

    def _counts(self) -> tuple[int, int]:
        serving = [s for s in self._slots if not s.retiring]
        return sum(1 for s in serving if s.is_local), sum(1 for s in serving if not s.is_local)

    def shutdown(self) -> None:
        """Kills the stage's actors (called once when the stage ends)."""
        with self._lock:
            if not self._closed:
                self._serving = self._counts()
            self._closed = True
            slots, self._slots = self._slots, []
            self._lock.notify_all()
        for s in slots:
            self._kill(s)
        self._log("shutdown")

    # Introspection -----------------------------------------------------------------------
    def actor_handles(self) -> list:
        """The live actors (tests kill one to check fault tolerance)."""
        with self._lock:
            return [s.handle for s in self._slots if s.handle is not None and not s.retiring]

    def report(self) -> dict:
        """Per-slot chunk counts and busy time, retries (and their causes: the Ray exception
        each re-run chunk failed with), placement state and decisions, and events."""
        with self._lock:
            slots = [
                {"name": s.name, "local": s.is_local, "chunks": s.done, "busy_s": round(s.busy_s, 3),
                 "sent_bytes": s.sent, "received_bytes": s.received}
                for s in self._all
            ]
            # Workers serving now, or when the stage ended.
            local, remote = self._serving if self._closed else self._counts()
            placement: dict = {"local_workers": local, "remote_actors": remote}
            decisions: list[dict] = []
            if self.placement is not None:
                p = self.placement
                placement |= {"state": p.state, "cost_per_hour": round(p.cost_per_hour(), 4)}
                decisions = [d.as_dict() for d in p.decisions]
        return {
            "stage": self.label,
            "chunks": self.chunks,
            "samples": self.samples,
            "retries": self.retries,
            "retry_causes": dict(self.retry_causes),
            # What crossed to and from the actors (request frames, replies with their tensors).
            "sent_bytes": sum(s["sent_bytes"] for s in slots),
            "received_bytes": sum(s["received_bytes"] for s in slots),
            "slots": slots,
            "placement": placement,
            "decisions": decisions,
            "events": list(self.events),
        }
