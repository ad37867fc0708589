"""The ``ray`` executor backend's calls into Ray: a pipeline stage runs on Ray actors, each
hosting one sluice engine (``sluice._native.ChainWorker``), and optionally on local workers
next to them.

Every scheduling decision is Rust's (``sluice_remote::actor_pool``): which worker takes a
chunk, waiting for actors to start, re-running a chunk whose actor or reply was lost on a
fresh actor, replacing actors, Pecan's AutoPlacement windows, the report. The native pool
(``sluice._native.ActorPool``, made by :func:`ray_pool`) calls :class:`RayShim` for what
only Ray can do, and nothing here decides anything.

Chunks travel in the wire format (items as index ranges when actors can reopen the source,
samples otherwise). Actors rebuild the same stage from the same init message and derive
randomness from (seed, epoch, index, op), so output is byte-identical to a local run
wherever each chunk ran. Replies are *split* (``ChainWorker.run_split``): a small frame plus
the output tensors as uint8 numpy arrays that own the engine's buffers. Ray pickles them with
protocol 5, so the arrays go into the object store out of band (one copy) and a fetch on this
node maps them (no copy); the native side copies each once, into its tensor. See
``docs/RAY.md``.
"""

from __future__ import annotations

import os
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


class _Api:
    """``ray.kill``/``cancel`` without Ray's implicit ``ray.init()``.

    The public functions start a fresh local cluster when Ray is not initialised. A pool
    whose cluster was shut down while it ran (checked before each call, but the shutdown can
    land between the check and the call) would then act on the old cluster's actors inside a
    new one. The functions underneath raise instead."""

    def __init__(self, ray: Any):
        inner = getattr(getattr(ray, "_private", None), "worker", None)
        for name in ("kill", "cancel"):
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


class RayShim:
    """The Ray calls of one stage's native pool, and no decision.

    A call's reply is read from its future (``ObjectRef.future()``), which Ray completes from
    its own thread; ``done`` (a native callable) is hung on it so the pool waits without the
    GIL, in short steps, checking for a shut-down pool or cluster in between."""

    def __init__(self, ctx: Any):
        ray = self._ray = import_ray()
        self._api = _Api(ray)
        errors = ray.exceptions
        # The actor is gone (killed, crashed, its node lost), or its reply went with its
        # node's object store before it was fetched: the chunk can run again elsewhere.
        self._lost = (errors.RayActorError, errors.ObjectLostError, errors.NodeDiedError)
        self._options: dict[str, Any] = {"num_cpus": ctx.actor_cpus, "max_restarts": 0}
        if ctx.runtime_env:
            self._options["runtime_env"] = ctx.runtime_env
        self._split = bool(ctx.zero_copy)

    @staticmethod
    def _call(ref: Any, done: Any) -> tuple[Any, Any]:
        future = ref.future()
        future.add_done_callback(done)
        return ref, future

    def start(self, init: str, done: Any) -> tuple[Any, Any]:
        """A new actor for the stage, and the future that resolves once it is built."""
        handle = _actor_class(self._ray).options(**self._options).remote(init, self._split)
        return handle, self._call(handle.pid.remote(), done)[1]

    def submit(self, handle: Any, frame: bytes, done: Any) -> tuple[Any, Any]:
        """Sends a request frame: its object reference and future."""
        return self._call(handle.run.remote(frame), done)

    def result(self, future: Any) -> tuple[bool, Any]:
        """A finished call's ``(True, reply)``, or ``(False, (lost, cause, message, error))``
        for a Ray error (``lost``: the actor or its reply was lost)."""
        try:
            return True, future.result(timeout=0)
        except self._ray.exceptions.RayError as e:
            return False, (isinstance(e, self._lost), type(e).__name__, str(e.__cause__ or e), e)

    def cancel(self, ref: Any) -> None:
        try:
            self._api.cancel(ref)
        except Exception:  # already finished or the actor is gone
            pass

    def kill(self, handle: Any) -> None:
        if self._ray.is_initialized():
            try:
                self._api.kill(handle)
            except Exception:  # the cluster may already be gone at interpreter exit
                pass

    def affinity(self, handle: Any) -> str | None:
        """A name other jobs see for the actor's worker: none, a per-job actor is its own."""
        return None

    def alive(self) -> bool:
        """Ray starts a fresh local cluster on the first API call after ``ray.shutdown()``: a
        pipeline outliving its cluster must fail instead of silently starting another."""
        return self._ray.is_initialized()

    def free_cpus(self) -> float:
        return float(self._ray.available_resources().get("CPU", 0.0))


def ray_pool(ctx: Any, init: str, workers: int, label: str, shim: Any = None) -> Any:
    """A stage's pool on ``ctx``'s Ray (``sluice._native.ActorPool``, started by the run
    that asked for it: the factory of the native ``ray`` backend). ``shim``: another runtime
    for its actors (a shared service's, which sizes its own pool: no autoscaling here)."""
    return _native.ActorPool(
        shim or RayShim(ctx),
        int(workers),
        label,
        in_flight_per_actor=int(ctx.in_flight_per_actor),
        local_workers=int(ctx.local_workers),
        max_retries=int(ctx.max_retries),
        actor_start_timeout_s=float(ctx.actor_start_timeout_s),
        actor_cpus=float(ctx.actor_cpus),
        autoscale=bool(ctx.autoscale) and shim is None,
        autoscale_window_s=float(ctx.autoscale_window_s),
        min_actors=int(ctx.min_actors),
        max_actors=ctx.max_actors,
        max_local_workers=ctx.max_local_workers,
        local_cpu_price=float(ctx.local_cpu_price),
        remote_cpu_price=float(ctx.remote_cpu_price),
        target_throughput=ctx.target_throughput,
        slack=float(ctx.slack),
    )
