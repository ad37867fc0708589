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

import dataclasses
import socket
from typing import Any, Callable
from urllib.parse import urlsplit

from . import _native
from .placement import DEFAULT_REMOTE_CPU_PRICE
from .ray_backend import import_ray, ray_pool


class Context:
    """Where to run a pipeline.

    ``ray_address``: ``None`` (local), ``"auto"`` (the cluster this machine belongs to, or the
    one this process already joined), ``"ray://host:10001"`` (Ray Client), or ``"local"``
    (start a private single-node Ray). If Ray is already initialised in this process, that
    connection is used.

    ``num_actors``: actors per stage when every element-wise stage goes to Ray (``ds.iter(
    context=ctx)`` without a plan; default: the cluster's CPUs / ``actor_cpus``). With an
    optimizer plan (``optimize=True``, or ``ctx.optimize(ds)``), the offload rule's cost model
    decides which stages go and with how many actors (up to ``max_actors``).
    ``actor_cpus``: CPUs Ray reserves per actor. ``in_flight_per_actor``: chunks queued per
    actor so transfers overlap compute. ``local_workers``: engines in this process serving
    the same stage next to the actors (hybrid placement).

    ``autoscale``: Pecan's AutoPlacement (``sluice.placement``) moves the number of actors
    (``min_actors``..``max_actors``) and of local workers (0..``max_local_workers``, default
    the cores) every ``autoscale_window_s`` by measured throughput, minimising
    ``local_cpu_price`` / ``remote_cpu_price`` ($ per CPU-hour; local CPUs are free by
    default, as the training host is paid for anyway) while keeping the rate — or
    ``target_throughput`` (samples/s) within ``slack``. Decisions are in ``it.stats()``.

    ``max_retries``: how often a chunk is re-run after its actor died or its reply was lost
    with its node before the run fails (and how many actors dying while starting are replaced
    in a row).
    ``actor_start_timeout_s``: how long to wait for actors to start (too few free CPUs fails
    clearly instead of waiting forever). ``connect_timeout_s``: how long an address may take
    to answer before ``ConnectionError``. ``zero_copy``: actors return tensors out of band
    through the object store (``False``: as one byte frame, for comparison).
    ``remote_cpus``: CPUs the cost model may plan for (default: the cluster's).
    ``runtime_env``: Ray's, for the actors (e.g. to ship the sluice wheel to nodes);
    ``init_kwargs``: passed to ``ray.init``.

    ``service``: the name of a shared sluice service on the cluster (``sluice.serve``,
    ``sluice serve --name NAME``): the stages run on its workers, shared with other jobs in
    the ratio of their ``weight``; a sweep's jobs with the same pipeline and seed compute
    each chunk once. ``reconnect``: rejoin a restarted service transparently (else the run
    fails with ``sluice.service.ServiceLost``). ``ray_address`` defaults to ``"auto"`` then.
    See ``docs/SERVICE.md``.

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
        max_local_workers: int | None = None,
        autoscale_window_s: float = 2.0,
        local_cpu_price: float = 0.0,
        remote_cpu_price: float = DEFAULT_REMOTE_CPU_PRICE,
        target_throughput: float | None = None,
        slack: float = 0.05,
        max_retries: int = 3,
        actor_start_timeout_s: float = 60.0,
        connect_timeout_s: float = 10.0,
        zero_copy: bool = True,
        remote_cpus: float | None = None,
        runtime_env: dict | None = None,
        init_kwargs: dict | None = None,
        service: str | None = None,
        weight: float = 1.0,
        reconnect: bool = True,
    ):
        if service is not None:
            if not isinstance(service, str) or not service or ":" in service:
                raise ValueError(f"service must be a non-empty name without ':', got {service!r}")
            if ray_address is None:
                ray_address = "auto"
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not (0 < weight < float("inf")):
            raise ValueError(f"weight must be a positive number, got {weight!r}")
        if ray_address is not None and not isinstance(ray_address, str):
            raise TypeError(f"ray_address must be a str or None, got {type(ray_address).__name__}")
        for name, v, lo in (
            ("num_actors", num_actors, 1),
            ("in_flight_per_actor", in_flight_per_actor, 1),
            ("local_workers", local_workers, 0),
            ("min_actors", min_actors, 0),
            ("max_actors", max_actors, 1),
            ("max_local_workers", max_local_workers, 0),
            ("max_retries", max_retries, 0),
        ):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < lo):
                raise ValueError(f"{name} must be an int >= {lo}, got {v!r}")
        for name, f in (
            ("actor_cpus", actor_cpus),
            ("local_cpu_price", local_cpu_price),
            ("remote_cpu_price", remote_cpu_price),
            ("slack", slack),
            ("remote_cpus", remote_cpus),
            ("target_throughput", target_throughput),
        ):
            if f is not None and (not isinstance(f, (int, float)) or f < 0):
                raise ValueError(f"{name} must be a number >= 0, got {f!r}")
        for name, f in (("autoscale_window_s", autoscale_window_s), ("connect_timeout_s", connect_timeout_s)):
            if not isinstance(f, (int, float)) or f <= 0:
                raise ValueError(f"{name} must be a number > 0, got {f!r}")
        self.ray_address = ray_address
        self.num_actors = num_actors
        self.actor_cpus = actor_cpus
        self.in_flight_per_actor = in_flight_per_actor
        self.local_workers = local_workers
        self.autoscale = autoscale
        self.min_actors = min_actors
        self.max_actors = max_actors
        self.max_local_workers = max_local_workers
        self.autoscale_window_s = autoscale_window_s
        self.local_cpu_price = local_cpu_price
        self.remote_cpu_price = remote_cpu_price
        self.target_throughput = target_throughput
        self.slack = slack
        self.max_retries = max_retries
        self.actor_start_timeout_s = actor_start_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.zero_copy = zero_copy
        self.remote_cpus = remote_cpus
        self.runtime_env = runtime_env
        self.init_kwargs = dict(init_kwargs or {})
        self.service = service
        self.weight = float(weight)
        self.reconnect = bool(reconnect)
        self._pools: list[Any] = []  # sluice._native.ActorPool
        self._service_conn: Any = None  # sluice.service.Connection, made on the first stage

    @property
    def remote(self) -> bool:
        """Whether stages run on Ray."""
        return self.ray_address is not None

    def __repr__(self) -> str:
        shown: dict[str, Any] = {"ray_address": self.ray_address}
        if self.service is not None:
            shown["service"] = self.service
            if self.weight != 1.0:
                shown["weight"] = self.weight
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
        state["_service_conn"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def close(self) -> None:
        """Leaves the service (if any): its workers drop this job's stages at once rather
        than when the lease runs out."""
        if self._service_conn is not None:
            self._service_conn.close()
            self._service_conn = None

    # Running -------------------------------------------------------------------------------
    def connect(self) -> Any:
        """Joins the Ray cluster (once per process) and returns the ``ray`` module; clear
        errors when Ray is missing or the cluster cannot be reached."""
        ray = import_ray()
        self._check_reachable()
        if ray.is_initialized():
            return ray
        address = None if self.ray_address == "local" else self.ray_address
        kwargs = {"include_dashboard": False, "log_to_driver": False, **self.init_kwargs}
        try:
            ray.init(address=address, **kwargs)
        except ConnectionError as e:
            raise ConnectionError(self._unreachable(str(e))) from e
        return ray

    def _unreachable(self, why: str) -> str:
        return (
            f"cannot reach the Ray cluster at {self.ray_address!r}: {why}. Start one with "
            "`ray start --head` (or `ray up cluster.yaml`), or use "
            "Context(ray_address=None) to run locally."
        )

    def _check_reachable(self) -> None:
        # Ray's own connection attempts retry for a long time; an explicit host:port that
        # refuses or does not answer fails here within connect_timeout_s instead.
        addr = self.ray_address
        if addr in (None, "auto", "local") or getattr(self, "_reachable", False):
            return
        parts = urlsplit(addr if "://" in addr else f"ray-gcs://{addr}")
        try:
            host, port = parts.hostname, parts.port
        except ValueError as e:
            raise ValueError(f"ray_address {addr!r} is not host:port or ray://host:port ({e})") from None
        if not host or not port:
            return  # Ray resolves other forms itself
        try:
            socket.create_connection((host, port), timeout=self.connect_timeout_s).close()
        except OSError as e:
            raise ConnectionError(self._unreachable(f"{type(e).__name__}: {e}")) from None
        self._reachable = True

    def remote_resources(self) -> tuple[float, bool]:
        """CPUs the cluster offers for offloading, and whether they are this machine's own
        cores (a single-node Ray): other nodes' CPUs if there are any, else this node's."""
        if self.remote_cpus is not None:
            return float(self.remote_cpus), False
        ray = self.connect()
        try:
            client = bool(ray.util.client.ray.is_connected())
        except Exception:  # older Ray without the client module
            client = False
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        cpus = lambda ns: float(sum(n.get("Resources", {}).get("CPU", 0.0) for n in ns))  # noqa: E731
        if client:
            return cpus(nodes), False  # the driver runs outside the cluster
        here = ray.get_runtime_context().get_node_id()
        others = [n for n in nodes if n.get("NodeID") != here]
        if cpus(others) > 0:
            return cpus(others), False
        return cpus(nodes), True

    def optimizer_options(self, options: Any = None) -> Any:
        """``options`` (default: ``OptimizerOptions(enable_offload=True)``) with what the
        offload rule needs from this context filled in where unset: the cluster's CPUs,
        the actor size and count limit, the chunks in flight and the CPU prices."""
        from .optimizer import OptimizerOptions

        o = options if options is not None else OptimizerOptions(enable_offload=True)
        if not self.remote:
            return o
        fill: dict[str, Any] = {"actor_cpus": float(self.actor_cpus), "offload_in_flight": int(self.in_flight_per_actor)}
        if o.remote_cpus is None:
            fill["remote_cpus"], fill["remote_shares_local_cores"] = self.remote_resources()
        if o.max_actors is None and self.max_actors is not None:
            fill["max_actors"] = self.max_actors
        if o.local_cpu_price is None:
            fill["local_cpu_price"] = float(self.local_cpu_price)
        if o.remote_cpu_price is None:
            fill["remote_cpu_price"] = float(self.remote_cpu_price)
        return dataclasses.replace(o, **fill)

    def optimize(self, ds: Any, profile: Any = None, options: Any = None, seed: int = 0) -> Any:
        """The optimizer's ``Plan`` for ``ds`` on this context: the offload rule picks which
        stages run on Ray and with how many actors (``profile`` is taken if None)."""
        return ds.optimize(profile, self.optimizer_options(options), seed, context=self)

    def actors(self) -> int:
        """Actors per offloaded stage."""
        if self.num_actors is not None:
            return self.num_actors
        if self.service is not None:
            from .service import service_workers

            return service_workers(self)
        ray = self.connect()
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        return max(1, int(cpus // self.actor_cpus) if self.actor_cpus else int(cpus))

    def _pool(self, init: str, workers: int, label: str) -> Any:
        # Called by the native "ray" backend when a stage starts; it then starts the pool.
        if self.service is not None:
            from .service import service_pool

            pool = service_pool(self, init, workers, label)
        else:
            pool = ray_pool(self, init, workers, label)
        self._pools.append(pool)
        del self._pools[:-16]  # the recent runs' pools, for stats(); old ones are shut down
        return pool

    def pools(self) -> list[Any]:
        """The Ray pools (``sluice._native.ActorPool``: ``report()``, ``actor_handles()``) of
        this context's recent stages that started (the running ones last)."""
        return [p for p in self._pools if p.started]

    def starter(self, native_ds: Any) -> Callable[..., Any]:
        """How ``Dataset.iter`` starts ``native_ds`` in this context: the native ``iter``,
        on Ray with this context's pools and actors when the context is remote."""
        if not self.remote:
            return native_ds.iter

        def start(*args: Any, **kwargs: Any) -> Any:
            self.connect()
            return native_ds.iter(*args, ray_factory=self._pool, actors=self.actors(), **kwargs)

        return start

    def offload_plan(self, ds: Any, profile: Any = None, options: Any = None, seed: int = 0) -> Any:
        """Which stages go to Ray and why, by the cost model: ``ctx.optimize(ds)``'s plan
        (its ``decisions`` say what moved, with how many actors, and what stayed).
        ``explicit_plan`` is what ``ds.iter(context=ctx)`` runs without a plan."""
        return self.optimize(ds, profile, options, seed)

    def explicit_plan(self, ds: Any, seed: int = 0, num_threads: int | None = None) -> Any:
        """The plan ``ds.iter(context=self)`` runs without an optimizer plan: every
        element-wise stage that can travel on Ray with ``num_actors`` actors."""
        from .optimizer import Plan

        return Plan(_native.offload_plan(ds._native, self.actors(), seed, num_threads))

    def add_stats(self, data: dict, text: str) -> tuple[dict, str]:
        """Adds the Ray pools' figures (chunks per actor, retries, placement decisions) and,
        on a service, the service's side of this job (its share of the workers, queue wait,
        chunks read from a sweep's shared stream)."""
        pools = self.pools()
        if not pools:
            return data, text
        if self._service_conn is not None:
            from .service import job_stats

            data, text = job_stats(self._service_conn, data, text)
        reports = [p.report() for p in pools]
        data = {**data, "remote": reports}
        lines = [text, "", "ray:"]
        for r in reports:
            slots = ", ".join(f"{s['name']}={s['chunks']}" for s in r["slots"])
            where = r["placement"]
            lines.append(
                f"  {r['stage']}: {r['chunks']} chunks, {r['retries']} retries, now "
                f"{where['local_workers']} local + {where['remote_actors']} actors"
                + (f" ({where['state']}, ${where['cost_per_hour']:.3f}/h)" if "state" in where else "")
                + f" [{slots}]"
            )
            lines.extend(f"    {e}" for e in r["events"])
        return data, "\n".join(lines)
