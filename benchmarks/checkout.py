"""Which sluice a benchmark imports: the one PYTHONPATH or the venv gives, else this
checkout's `python/` (its last build).

Inserting `python/` ahead of everything, as the scripts once did, overrode PYTHONPATH: an A/B
run as `PYTHONPATH=<build A>/python python benchmarks/bucket.py` measured the checkout's
build, not A's (docs/BENCHMARKS.md, "Where the p99 comes from, and a hedge that stalls
too": which build a benchmark measured).

    import checkout; checkout.use()
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PYTHON = Path(__file__).resolve().parent.parent / "python"


def use() -> None:
    """Puts this checkout's `python/` first on sys.path unless a sluice is importable already."""
    if importlib.util.find_spec("sluice") is None:
        sys.path.insert(0, str(PYTHON))
