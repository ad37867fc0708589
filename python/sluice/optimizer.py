"""The optimizer's Python face: ``Profile``, ``OptimizerOptions`` and ``Plan``.

``ds.profile()`` measures each op (CPU time per sample, bytes in/out, selectivity);
``ds.optimize(profile, OptimizerOptions(...))`` returns a ``Plan`` (stages, op order, variants,
parallelism, cache point, predicted throughput and bottleneck, and why); ``ds.iter(plan=plan)``
runs it and ``ds.iter(optimize=True)`` does all three. Profiles and plans are JSON files.

>>> import sluice
>>> ds = sluice.range(1000).map(lambda s: {"id": s["id"] * 2}).batch(100)
>>> plan = ds.optimize(ds.profile(samples=50))
>>> plan.predicted_throughput > 0
True
>>> sum(len(b["id"]) for b in ds.iter(plan=plan))
1000
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional

from . import _native

_DEFAULTS: dict = json.loads(_native.default_optimizer_options())


@dataclasses.dataclass
class OptimizerOptions:
    """What the optimizer may do (cedar's options, plus ``exact`` and a memory budget).

    ``exact=True`` allows only moves that keep outputs byte-identical; by default the reorder
    rule may also move a size-reducing op (crop) ahead of pixel-wise ones (colour jitter),
    which gives samples from the same distribution, not the same bytes.

    ``enable_offload=True`` with ``remote_cpus`` (a Ray ``Context`` sets it from the
    cluster) lets the offload rule move stages to Ray actors where its cost model predicts
    more throughput, or ``est_throughput`` at a lower cost.

    ``enable_fallback=True`` (the default) runs the default plan instead when the optimized
    one is not predicted at least 10% faster from the same profile; the plan's last
    decision says which was run and why.
    """

    enable_prefetch: bool = True
    est_throughput: Optional[float] = None
    available_local_cpus: Optional[int] = None
    enable_offload: bool = False
    #: What the offload rule plans for (a Ray ``Context`` fills these in: ``ctx.optimize``).
    remote_cpus: Optional[float] = None
    remote_shares_local_cores: bool = False
    actor_cpus: float = 1.0
    max_actors: Optional[int] = None
    #: $ per CPU-hour (local: None = already paid for; remote: None = Pecan's worker price).
    local_cpu_price: Optional[float] = None
    remote_cpu_price: Optional[float] = None
    #: Transfer costs of one chunk through Ray (measured defaults; docs/RAY.md).
    offload_round_trip_s: float = _DEFAULTS["offload_round_trip_s"]
    offload_actor_s_per_chunk: float = _DEFAULTS["offload_actor_s_per_chunk"]
    offload_driver_s_per_chunk: float = _DEFAULTS["offload_driver_s_per_chunk"]
    offload_bandwidth: float = _DEFAULTS["offload_bandwidth"]
    offload_item_bytes: float = _DEFAULTS["offload_item_bytes"]
    offload_in_flight: int = _DEFAULTS["offload_in_flight"]
    enable_reorder: bool = True
    enable_local_parallelism: bool = True
    enable_processes: bool = True
    enable_fusion: bool = True
    enable_caching: bool = True
    enable_controller: bool = False
    exact: bool = False
    memory_budget: int = 1 << 30
    #: Bytes of local disk a cache may fill beyond its memory (0: memory only).
    disk_budget: int = 0
    #: Keep the default plan unless the optimized one is predicted ≥ 10% faster.
    enable_fallback: bool = True

    @classmethod
    def baseline(cls) -> "OptimizerOptions":
        """Every rule off: each op its own stage, all inline (the ablation's start)."""
        return cls(
            enable_prefetch=False,
            enable_reorder=False,
            enable_local_parallelism=False,
            enable_processes=False,
            enable_fusion=False,
            enable_caching=False,
            enable_fallback=False,
        )

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))


class _JsonDoc:
    """A JSON document with save/load and a readable ``str``."""

    _text_fn: Any = None

    def __init__(self, text: str):
        self._json = text
        self.data: dict = json.loads(text)

    def to_json(self) -> str:
        return self._json

    def save(self, path: "str | os.PathLike[str]") -> None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(self._json)

    @classmethod
    def load(cls, path: "str | os.PathLike[str]") -> Any:
        """Reads a file ``save`` wrote; a damaged or foreign file raises ``ValueError``
        naming it, as the pipeline-file reader does for a special or oversized one."""
        name = os.fspath(path)
        text = _native.read_small_file(name, f"{cls.__name__.lower()} file")
        try:
            doc = cls(text)
            str(doc)  # validates (version, shape) with a clear error now rather than at use
        except Exception as e:  # whatever the parser found wrong, it is the file's content
            raise ValueError(f"{name}: not a valid {cls.__name__} file ({e})") from e
        return doc

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __str__(self) -> str:
        return type(self)._text_fn(self._json)

    __repr__ = __str__


class Profile(_JsonDoc):
    """Per-op measurements of a pipeline: ``profile.ops`` (list of dicts with ``name``,
    ``cpu_s``, ``items_in``, ``bytes_in``/``bytes_out``, ``parallel_efficiency``…),
    ``profile.machine`` (cores) and ``profile.data["output"]`` (what the last profiled op hands
    on: ``items``, ``fields`` and ``objects`` — strings/bytes the consumer makes Python objects
    of — summed over the items; the model prices converting outputs by them)."""

    _text_fn = staticmethod(_native.profile_text)

    @property
    def ops(self) -> list[dict]:
        return self.data["ops"]

    @property
    def machine(self) -> dict:
        return self.data["machine"]

    def cpu_per_sample(self, name: str) -> float:
        """CPU seconds per input item of the op called ``name``."""
        for o in [self.data["source"], *self.ops]:
            if o["name"] == name:
                return o["cpu_s"] / max(o["items_in"], 1)
        raise KeyError(name)


class Plan(_JsonDoc):
    """An optimized plan: ``str(plan)`` shows stages, variants, parallelism, the cache point,
    the predicted throughput and bottleneck and the decisions that led there."""

    _text_fn = staticmethod(_native.plan_text)

    @property
    def predicted_throughput(self) -> float:
        """Source samples per second the cost model expects (steady state)."""
        return float(self.data["prediction"]["throughput"])

    @property
    def bottleneck(self) -> str:
        return self.data["prediction"]["bottleneck"]

    @property
    def stages(self) -> list[dict]:
        return self.data["stages"]

    @property
    def decisions(self) -> list[str]:
        return self.data["decisions"]

    def predict(self, ds: Any, profile: Profile, options: Optional[OptimizerOptions] = None) -> dict:
        """What the cost model predicts for ``ds`` run with this plan, under ``options``'
        cluster and transfer terms (default: the plan's own options): throughput,
        bottleneck and per-stage capacity — to compare with a measured run.

        >>> import sluice
        >>> ds = sluice.range(1000).map(lambda s: s).batch(100)
        >>> profile = ds.profile(samples=50)
        >>> ds.optimize(profile).predict(ds, profile)["throughput"] > 0
        True
        """
        opts = options.to_json() if options is not None else json.dumps(self.data["options"])
        return json.loads(_native.predict(ds._native, profile.to_json(), self._json, opts))
