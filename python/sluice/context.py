"""``sluice.Context``: where a pipeline runs (cedar's CedarContext).

Without a Ray address everything runs in this process. With one, ``ds.iter(context=ctx)``
runs the pipeline's element-wise stages (read + decode + augment chains, Python UDFs
included) on Ray actors; batching, ordering and checkpoints stay here, and the batches are
byte-identical to a local run with the same seed.

>>> import sluice
>>> ctx = sluice.Context()            # local: the default
>>> ctx.remote
False
>>> [b["id"].tolist() for b in sluice.range(4).batch(2).iter(context=ctx)]
[[0, 1], [2, 3]]
"""

from __future__ import annotations

import json
from typing import Any, Callable

from . import _native
from .ray_backend import RayPool, import_ray


class Context:
    """Where to run a pipeline.

    ``ray_address``: ``None`` (local), ``"auto"`` (the cluster this machine belongs to, or the
    one this process already joined), ``"ray://host:10001"`` (Ray Client), or ``"local"``
    (start a private single-node Ray). If Ray is already initialised in this process, that
    connection is used.

    ``num_actors``: actors per offloaded stage (default: the cluster's CPUs / ``actor_cpus``).
    ``actor_cpus``: CPUs Ray reserves per actor. ``in_flight_per_actor``: chunks queued per
    actor so transfers overlap compute. ``local_workers``: slots in this process serving the
    same stage next to the actors (hybrid placement). ``autoscale``: a controller adds or
    removes actors between ``min_actors`` and ``max_actors`` by measured throughput.
    ``max_retries``: how often a chunk is re-run after its actor died before the run fails.
    ``actor_start_timeout_s``: how long to wait for actors to start (too few free CPUs fails
    clearly instead of waiting forever). ``runtime_env``: Ray's, for the actors (e.g. to ship
    the sluice wheel to nodes); ``init_kwargs``: passed to ``ray.init``.

    >>> ctx = Context("auto", num_actors=4, local_workers=1)
    >>> ctx
    Context(ray_address='auto', num_actors=4, local_workers=1)
    """

    def __init__(
        self,
        ray_address: str | None = None,
        *,
        num_actors: int | None = None,
        actor_cpus: float = 1.0,
        in_flight_per_actor: int = 2,
        local_workers: int = 0,
        autoscale: bool = False,
        min_actors: int = 1,
        max_actors: int | None = None,
        autoscale_window_s: float = 2.0,
        max_retries: int = 3,
        actor_start_timeout_s: float = 60.0,
        runtime_env: dict | None = None,
        init_kwargs: dict | None = None,
    ):
        if ray_address is not None and not isinstance(ray_address, str):
            raise TypeError(f"ray_address must be a str or None, got {type(ray_address).__name__}")
        for name, v, lo in (
            ("num_actors", num_actors, 1),
            ("in_flight_per_actor", in_flight_per_actor, 1),
            ("local_workers", local_workers, 0),
            ("min_actors", min_actors, 1),
            ("max_actors", max_actors, 1),
            ("max_retries", max_retries, 0),
        ):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < lo):
                raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
        if actor_cpus < 0:
            raise ValueError(f"actor_cpus must be >= 0, got {actor_cpus}")
        self.ray_address = ray_address
        self.num_actors = num_actors
        self.actor_cpus = actor_cpus
        self.in_flight_per_actor = in_flight_per_actor
        self.local_workers = local_workers
        self.autoscale = autoscale
        self.min_actors = min_actors
        self.max_actors = max_actors
        self.autoscale_window_s = autoscale_window_s
        self.max_retries = max_retries
        self.actor_start_timeout_s = actor_start_timeout_s
        self.runtime_env = runtime_env
        self.init_kwargs = dict(init_kwargs or {})
        self._pools: list[RayPool] = []

    @property
    def remote(self) -> bool:
        """Whether stages run on Ray."""
        return self.ray_address is not None

    def __repr__(self) -> str:
        shown = {"ray_address": self.ray_address}
        if self.num_actors is not None:
            shown["num_actors"] = self.num_actors
        if self.local_workers:
            shown["local_workers"] = self.local_workers
        if self.autoscale:
            shown["autoscale"] = True
        return "Context(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"

    # Pickles without its live pools (a Context travels to Ray Train workers with a split).
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_pools"] = []
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    # Running -------------------------------------------------------------------------------
    def connect(self) -> Any:
        """Joins the Ray cluster (once per process) and returns the ``ray`` module; clear
        errors when Ray is missing or the cluster cannot be reached."""
        ray = import_ray()
        if ray.is_initialized():
            return ray
        address = None if self.ray_address == "local" else self.ray_address
        kwargs = {"include_dashboard": False, "log_to_driver": False, **self.init_kwargs}
        try:
            ray.init(address=address, **kwargs)
        except ConnectionError as e:
            raise ConnectionError(
                f"cannot reach the Ray cluster at {self.ray_address!r}: {e}. Start one with "
                "`ray start --head` (or `ray up cluster.yaml`), or use "
                "Context(ray_address=None) to run locally."
            ) from e
        return ray

    def actors(self) -> int:
        """Actors per offloaded stage."""
        if self.num_actors is not None:
            return self.num_actors
        ray = self.connect()
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        return max(1, int(cpus // self.actor_cpus) if self.actor_cpus else int(cpus))

    def _pool(self, init: str, workers: int, label: str) -> RayPool:
        # Called by the native "ray" backend when a stage starts.
        pool = RayPool(self, init, workers, label)
        self._pools.append(pool)
        del self._pools[:-16]  # the recent runs' pools, for stats(); old ones are shut down
        return pool

    def pools(self) -> list[RayPool]:
        """The Ray pools of this context's recent stages (the running ones last)."""
        return list(self._pools)

    def starter(self, native_ds: Any) -> Callable[..., Any]:
        """How ``Dataset.iter`` starts ``native_ds`` in this context: a callable taking
        (seed, num_threads, chunk_size, plan_json, processes, fuse_ops) like the native ``iter``."""
        if not self.remote:
            return native_ds.iter

        def start(
            seed: int,
            num_threads: int | None,
            chunk_size: int | None,
            plan_json: str | None = None,
            processes: int | None = None,
            fuse_ops: bool = True,
        ) -> Any:
            if processes is not None:
                raise ValueError(
                    "iter(processes=...) and a Ray context do not combine: with a Ray address, "
                    "Python stages already run in Ray's worker processes"
                )
            self.connect()
            return _native.iter_offloaded(
                native_ds, seed, num_threads, chunk_size, "ray", self._pool, self.actors(), plan_json, fuse_ops
            )

        return start

    def offload_plan(self, ds: Any, seed: int = 0, num_threads: int | None = None) -> dict:
        """The plan ``ds.iter(context=self)`` runs: which stage goes to Ray and why."""
        text = _native.offload_plan(ds._native, seed, num_threads, None, "ray", self.actors())
        return json.loads(text)

    def add_stats(self, data: dict, text: str) -> tuple[dict, str]:
        """Adds the Ray pools' figures (chunks per actor, retries, placement decisions)."""
        if not self._pools:
            return data, text
        reports = [p.report() for p in self._pools]
        data = {**data, "remote": reports}
        lines = [text, "", "ray:"]
        for r in reports:
            slots = ", ".join(f"{s['name']}={s['chunks']}" for s in r["slots"])
            lines.append(f"  {r['stage']}: {r['chunks']} chunks, {r['retries']} retries [{slots}]")
            lines.extend(f"    {e}" for e in r["events"])
        return data, "\n".join(lines)
