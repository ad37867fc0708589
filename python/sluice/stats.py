"""Statistics of an iteration as data: ``Stats`` (``ds.stats()``, ``it.stats()``).

``str(stats)`` is the table; ``stats.to_dict()`` is everything as JSON-able data;
``stats.series`` is the run over time (per interval: outputs and samples per second, the CPU
cores the process used, its resident memory, and per stage its throughput, how busy its
threads were and its mean queue depth), recorded in a fixed-size ring at a bounded cost;
``stats.to_pandas()`` gives the stages (or, with ``"series"``, the time series) as a
DataFrame when pandas is installed.

>>> import sluice
>>> ds = sluice.range(1000).batch(10)
>>> _ = list(ds)
>>> st = ds.stats()
>>> st.to_dict()["consumer"]["outputs"], [s["name"] for s in st.stages][:1]
(100, ['source: range'])
>>> sorted(st.series)
['cpu_cores', 'outputs_per_s', 'rss_bytes', 'samples_per_s', 'stages', 't_s']
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import _native
    from .context import Context


def _rates(points: list[dict]) -> dict:
    """Per-interval figures from cumulative points: each value covers (t[i-1], t[i]]."""
    out: dict = {"t_s": [], "outputs_per_s": [], "samples_per_s": [], "cpu_cores": [], "rss_bytes": [], "stages": []}
    for a, b in zip(points, points[1:]):
        dt = b["t_s"] - a["t_s"]
        if dt <= 0:
            continue
        out["t_s"].append(b["t_s"])
        out["outputs_per_s"].append((b["outputs"] - a["outputs"]) / dt)
        out["samples_per_s"].append((b["samples"] - a["samples"]) / dt)
        cpu = None if a["cpu_s"] is None or b["cpu_s"] is None else (b["cpu_s"] - a["cpu_s"]) / dt
        out["cpu_cores"].append(cpu)
        out["rss_bytes"].append(b["rss_bytes"])
        rows = []
        for sa, sb in zip(a["stages"], b["stages"]):
            occ_n = sb["occ_n"] - sa["occ_n"]
            rows.append({
                "throughput": (sb["out"] - sa["out"]) / dt,
                "busy": (sb["busy_s"] - sa["busy_s"]) / (dt * max(sb["threads"], 1)),
                "queue": (sb["occ_sum"] - sa["occ_sum"]) / occ_n if occ_n > 0 else None,
            })
        out["stages"].append(rows)
    return out


class Stats:
    """Per-stage and consumer statistics of an iteration (see the module). ``print(stats)``
    shows a table; ``stats.stages`` and ``stats.consumer`` hold the figures (samples in/out,
    busy/wait seconds, throughput, queue occupancy, batch delay P50/P95/max)."""

    def __init__(self, data: dict, text: str):
        self.data = data
        self._text = text

    @staticmethod
    def of(handle: "_native.Stats", context: "Context | None" = None) -> "Stats":
        import json

        data, text = json.loads(handle.stats_json()), handle.stats_text()
        if context is not None:
            data, text = context.add_stats(data, text)
        return Stats(data, text)

    @property
    def stages(self) -> list[dict]:
        return self.data["stages"]

    @property
    def consumer(self) -> dict:
        return self.data["consumer"]

    @property
    def series(self) -> dict:
        """The run over time, one entry per sampling interval: ``t_s`` (end of the
        interval, seconds since the start), ``outputs_per_s``, ``samples_per_s``,
        ``cpu_cores`` (CPU seconds the process used per second), ``rss_bytes``, and
        ``stages``: per stage name, lists of ``throughput`` (outputs/s), ``busy`` (fraction
        of its threads' time spent working) and ``queue`` (mean chunks waiting in its output
        queue; None when nobody looked)."""
        raw = _rates(self.data.get("series", []))
        names = [s["name"] for s in self.stages]
        stages = {
            name: {k: [row[i][k] for row in raw["stages"]] for k in ("throughput", "busy", "queue")}
            for i, name in enumerate(names)
        }
        return {**{k: v for k, v in raw.items() if k != "stages"}, "stages": stages}

    def to_dict(self) -> dict:
        """Everything as JSON-able data (a copy): ``stages``, ``consumer``, ``elapsed_s``,
        the raw cumulative ``series`` points, the controller's decisions, ``remote`` (Ray)."""
        return copy.deepcopy(self.data)

    def to_pandas(self, what: str = "stages") -> Any:
        """A ``pandas.DataFrame``: ``"stages"`` (one row per stage, indexed by name) or
        ``"series"`` (one row per interval and stage: ``t_s``, ``stage``, ``throughput``,
        ``busy``, ``queue``, with the process's ``cpu_cores`` and ``rss_bytes``)."""
        try:
            import pandas as pd
        except ImportError as e:  # pragma: no cover - pandas is in the test deps
            raise ImportError("to_pandas needs pandas: pip install pandas") from e
        if what == "stages":
            return pd.DataFrame(self.stages).set_index("name")
        if what == "series":
            ser = self.series
            rows = [
                {"t_s": t, "stage": name, "throughput": st["throughput"][i], "busy": st["busy"][i],
                 "queue": st["queue"][i], "cpu_cores": ser["cpu_cores"][i], "rss_bytes": ser["rss_bytes"][i]}
                for i, t in enumerate(ser["t_s"])
                for name, st in ser["stages"].items()
            ]
            return pd.DataFrame(rows, columns=["t_s", "stage", "throughput", "busy", "queue", "cpu_cores", "rss_bytes"])
        raise ValueError(f"to_pandas: what must be 'stages' or 'series', got {what!r}")

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __str__(self) -> str:
        return self._text

    __repr__ = __str__
