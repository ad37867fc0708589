"""One self-contained HTML file about a run: ``ds.report(path)``, ``it.report(path)``.

The page needs no network when viewed: the plots are inline SVG, with a few lines of inline
script that only check the page. It shows the pipeline as a diagram (logical ops → the
physical stages that run them, with their placement, fused ops and cache points), every
stage's figures, per-stage throughput, busy share and queue depth over time, CPU cores used
against those available, memory over time, the batch-delay histogram with P50/P95/max, skips
and the error that ended the run by op, the optimizer's plan (predicted against measured
throughput per stage, the bottleneck and each rule's decision), and, for Ray runs, each
actor's work and the retries. The page is drawn in Rust (``sluice::report``, which the
``sluice report`` command of the Rust CLI uses too); this module forwards to it.

>>> import sluice, tempfile, os
>>> ds = sluice.range(500).map(lambda s: s).batch(10)
>>> _ = list(ds)
>>> path = os.path.join(tempfile.mkdtemp(), "report.html")
>>> ds.report(path) == path and "<svg" in open(path).read()
True
"""

from __future__ import annotations

import json
import os
from typing import Any

from . import _native


def render(data: dict, logical_plan: str, plan: dict | None = None, title: str = "sluice pipeline report") -> str:
    """The report page of one run's statistics (``Stats.to_dict()``)."""
    plan_json = None if plan is None else json.dumps(plan)
    return _native.render_report(json.dumps(data), logical_plan, plan_json, title)


def write(path: Any, data: dict, logical_plan: str, plan: dict | None) -> str:
    """Writes the page to ``path`` (atomically) and returns the path."""
    path = os.fspath(path)
    _native.write_report(path, render(data, logical_plan, plan))
    return path
