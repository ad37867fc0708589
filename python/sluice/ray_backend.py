"""The ``ray`` executor backend: a pipeline stage runs on Ray actors, each hosting one sluice
engine (``sluice._native.ChainWorker``).

The native executor keeps order, bounds queues and handles shutdown; it calls
``RayPool.run(frame)`` from up to ``parallelism`` threads, each with one chunk in the wire
format (items as index ranges when actors can reopen the source, samples otherwise). A call
submits the frame to the least-loaded actor, waits for the reply frame through Ray's object
store and returns it; the executor restores sequence order. Actors rebuild the same stage
from the same init message and derive randomness from (seed, epoch, index, op), so output is
byte-identical to a local run wherever each chunk ran.

Fault tolerance is per chunk: a chunk whose actor dies (``ray.kill``, a lost node) is
resubmitted to a fresh actor. The executor receives exactly one reply per chunk, so no sample
is lost or duplicated.

Hybrid placement (Pecan's AutoPlacement): ``local_workers`` slots run chunks in this process
next to the actors, and with ``autoscale`` a controller adds or removes actors by measured
throughput. See ``docs/RAY.md`` for the cost model.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from . import _native

INSTALL_HINT = "Ray is not installed: pip install sluice[ray]"


def import_ray() -> Any:
    """``ray``, or an ImportError with the install hint."""
    try:
        import ray
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e
    return ray


class StageActor:
    """A Ray actor hosting one engine for one stage (wrapped by ``ray.remote`` on first use,
    so importing sluice never imports Ray)."""

    def __init__(self, init: str):
        self._worker = _native.ChainWorker(init)

    def run(self, frame: bytes) -> bytes:
        return self._worker.run(frame)

    def pid(self) -> int:
        return os.getpid()


_REMOTE_ACTOR: Any = None


def _actor_class(ray: Any) -> Any:
    global _REMOTE_ACTOR
    if _REMOTE_ACTOR is None:
        _REMOTE_ACTOR = ray.remote(StageActor)
    return _REMOTE_ACTOR


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

    @property
    def is_local(self) -> bool:
        return self.local is not None


@dataclass
class _Controller:
    """Adds or removes actors by measured throughput, with hysteresis: a change is kept
    only when the next window improves throughput by more than ``gain``; a window that
    loses more than ``loss`` undoes the last change (Pecan's AutoPlacement, simplified to
    one dimension: the number of remote actors)."""

    min_actors: int
    max_actors: int
    window_s: float
    gain: float = 0.05
    loss: float = 0.10
    last_rate: float | None = None
    last_change: int = 0  # +1 added an actor, -1 removed one, 0 none
    direction: int = +1
    stable_windows: int = 0
    t0: float = field(default_factory=time.monotonic)
    chunks: int = 0

    def observe(self, actors: int, now: float | None = None) -> tuple[int, str] | None:
        """Counts a finished chunk; at the end of a window returns (change, reason)."""
        self.chunks += 1
        now = time.monotonic() if now is None else now
        if now - self.t0 < self.window_s:
            return None
        rate = self.chunks / (now - self.t0)
        self.t0, self.chunks = now, 0
        prev, self.last_rate = self.last_rate, rate
        if prev is None:
            return self._try(self.direction, actors, rate, "first window")
        change = (rate - prev) / max(prev, 1e-9)
        if self.last_change and change < -self.loss:
            undo = -self.last_change
            self.direction = undo
            self.last_change = 0
            return (undo, f"{rate:.1f} chunks/s is {-change:.0%} worse: undo")
        if self.last_change and change > self.gain:
            return self._try(self.last_change, actors, rate, f"{change:+.0%} better: continue")
        self.last_change = 0
        self.stable_windows += 1
        # Re-probe now and then: the workload or the cluster may have changed.
        if self.stable_windows % 5 == 0:
            self.direction = -self.direction
            return self._try(self.direction, actors, rate, "probe")
        return None

    def _try(self, step: int, actors: int, rate: float, why: str) -> tuple[int, str] | None:
        target = actors + step
        if not self.min_actors <= target <= self.max_actors:
            self.last_change = 0
            return None
        self.last_change = step
        return (step, f"{rate:.1f} chunks/s, {why}")


class RayPool:
    """The workers of one stage on Ray (the ``Workers`` protocol of the native backend:
    ``parallelism``, ``run(frame) -> frame``, ``shutdown()``)."""

    def __init__(self, ctx: Any, init: str, workers: int, label: str):
        self._ray = import_ray()
        self._ctx = ctx
        self._init = init
        self.label = label
        self._lock = threading.Condition()
        self._closed = False
        self._slots: list[_Slot] = []  # serving now
        self._all: list[_Slot] = []  # every slot ever, for report()
        self._serial = 0
        self.events: list[str] = []
        self.retries = 0
        self.chunks = 0
        per = max(1, int(ctx.in_flight_per_actor))
        n = max(1, int(workers))
        self._per_actor = per
        for _ in range(n):
            self._slots.append(self._new_actor())
        for i in range(int(ctx.local_workers)):
            self._slots.append(_Slot(f"local-{i}", 1, local=_native.ChainWorker(init)))
            self._all.append(self._slots[-1])
        self._controller = None
        if ctx.autoscale:
            self._controller = _Controller(
                min_actors=max(1, ctx.min_actors),
                max_actors=max(n, ctx.max_actors or n),
                window_s=ctx.autoscale_window_s,
            )
        # The executor keeps this many chunks in flight: every slot's capacity, plus room
        # for the actors the controller may add.
        extra = (self._controller.max_actors - n) * per if self._controller else 0
        self.parallelism = sum(s.capacity for s in self._slots) + extra
        self._await_ready([s.handle for s in self._slots if s.handle is not None])
        self._log(f"start: {n} actors x {per} in flight, {ctx.local_workers} local workers")

    def _await_ready(self, handles: list) -> None:
        # An actor Ray cannot place (too few free CPUs) would leave its chunks waiting
        # forever: fail clearly instead. Building the stage in each actor also surfaces
        # errors (a UDF that does not unpickle there) before any data moves.
        ray = self._ray
        refs = [h.pid.remote() for h in handles]
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=self._ctx.actor_start_timeout_s)
        if pending:
            self.shutdown()
            free = ray.available_resources().get("CPU", 0.0)
            raise RuntimeError(
                f"stage {self.label}: only {len(ready)} of {len(refs)} Ray actors started within "
                f"{self._ctx.actor_start_timeout_s:.0f} s (each asks for {self._ctx.actor_cpus} CPU; "
                f"the cluster has {free:g} CPU free). Lower num_actors or actor_cpus."
            )
        try:
            ray.get(ready)
        except ray.exceptions.RayActorError as e:
            self.shutdown()
            cause = e.__cause__ or e
            raise RuntimeError(f"stage {self.label}: the Ray actors could not build the stage: {cause}") from e

    # Slots -------------------------------------------------------------------------------
    def _new_actor(self) -> _Slot:
        cls = _actor_class(self._ray)
        opts: dict[str, Any] = {"num_cpus": self._ctx.actor_cpus, "max_restarts": 0}
        if self._ctx.runtime_env:
            opts["runtime_env"] = self._ctx.runtime_env
        self._serial += 1
        handle = cls.options(**opts).remote(self._init)
        slot = _Slot(f"actor-{self._serial}", self._per_actor, handle=handle)
        self._all.append(slot)
        return slot

    def _log(self, msg: str) -> None:
        self.events.append(f"{time.strftime('%H:%M:%S')} {self.label}: {msg}")

    def _acquire(self) -> _Slot:
        with self._lock:
            while True:
                if self._closed:
                    raise RuntimeError(f"stage {self.label}: the Ray pool is shut down")
                free = [s for s in self._slots if not s.retiring and s.in_flight < s.capacity]
                if free:
                    # Least loaded relative to capacity; local first on ties (no transfer).
                    slot = min(free, key=lambda s: (s.in_flight / s.capacity, not s.is_local))
                    slot.in_flight += 1
                    return slot
                self._lock.wait(0.5)

    def _release(self, slot: _Slot, busy: float, ok: bool) -> None:
        with self._lock:
            slot.in_flight -= 1
            if ok:
                slot.done += 1
                slot.busy_s += busy
                self.chunks += 1
            if slot.retiring and slot.in_flight == 0 and slot.handle is not None:
                self._slots.remove(slot)
                self._ray.kill(slot.handle)
            self._lock.notify_all()

    def _replace(self, slot: _Slot, why: str) -> None:
        with self._lock:
            if slot in self._slots:
                self._slots.remove(slot)
                if not self._closed:
                    fresh = self._new_actor()
                    self._slots.append(fresh)
                    self._log(f"{slot.name} lost ({why}); replaced by {fresh.name}")
            self._lock.notify_all()

    def _autoscale(self) -> None:
        if self._controller is None:
            return
        with self._lock:
            actors = [s for s in self._slots if s.handle is not None and not s.retiring]
            decision = self._controller.observe(len(actors))
            if decision is None:
                return
            step, why = decision
            if step > 0:
                slot = self._new_actor()
                self._slots.append(slot)
                self._log(f"+1 actor -> {len(actors) + 1} ({why})")
            elif len(actors) > 1:
                victim = min(actors, key=lambda s: s.in_flight)
                victim.retiring = True
                if victim.in_flight == 0:
                    self._slots.remove(victim)
                    self._ray.kill(victim.handle)
                self._log(f"-1 actor -> {len(actors) - 1} ({why})")
            self._lock.notify_all()

    # The Workers protocol ----------------------------------------------------------------
    def run(self, frame: bytes) -> bytes:
        """Runs one request frame somewhere and returns its reply frame; a chunk whose actor
        dies is re-run on a fresh actor (up to ``max_retries`` times)."""
        ray = self._ray
        dead = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError)
        attempts = 0
        while True:
            slot = self._acquire()
            t = time.perf_counter()
            ok = False
            try:
                if slot.is_local:
                    out = slot.local.run(frame)
                else:
                    out = self._wait(slot.handle.run.remote(frame))
                ok = True
            except dead as e:
                attempts += 1
                self.retries += 1
                self._release(slot, 0.0, False)
                if self._closed:
                    raise RuntimeError(f"stage {self.label}: the Ray pool is shut down") from e
                if attempts > self._ctx.max_retries:
                    raise RuntimeError(
                        f"stage {self.label}: a chunk failed on {attempts} actors in a row "
                        f"(last: {type(e).__name__}: {e})"
                    ) from e
                self._replace(slot, type(e).__name__)
                continue
            except BaseException:
                self._release(slot, 0.0, False)
                raise
            self._release(slot, time.perf_counter() - t, ok)
            self._autoscale()
            return out

    def _wait(self, ref: Any) -> bytes:
        # Wait in short steps so a shut-down pool never leaves a thread blocked forever.
        ray = self._ray
        while True:
            ready, _ = ray.wait([ref], timeout=0.5)
            if ready:
                return ray.get(ready[0])
            if self._closed:
                try:
                    ray.cancel(ref)
                except Exception:  # already finished or the actor is gone
                    pass
                raise RuntimeError(f"stage {self.label}: the Ray pool is shut down")

    def shutdown(self) -> None:
        """Kills the stage's actors (called once when the stage ends)."""
        with self._lock:
            self._closed = True
            slots, self._slots = self._slots, []
            self._lock.notify_all()
        for s in slots:
            if s.handle is not None:
                try:
                    self._ray.kill(s.handle)
                except Exception:  # the cluster may already be gone at interpreter exit
                    pass
        self._log("shutdown")

    # Introspection -----------------------------------------------------------------------
    def actor_handles(self) -> list:
        """The live actors (tests kill one to check fault tolerance)."""
        with self._lock:
            return [s.handle for s in self._slots if s.handle is not None and not s.retiring]

    def report(self) -> dict:
        """Per-slot chunk counts and busy time, retries and placement events."""
        with self._lock:
            slots = [
                {"name": s.name, "local": s.is_local, "chunks": s.done, "busy_s": round(s.busy_s, 3)}
                for s in self._all
            ]
        return {
            "stage": self.label,
            "chunks": self.chunks,
            "retries": self.retries,
            "slots": slots,
            "events": list(self.events),
        }
