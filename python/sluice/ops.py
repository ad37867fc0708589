"""Generic built-in ops (GIL-free, Rust). Each returns an op for ``Dataset.map``.

>>> import sluice
>>> sluice.range(3).map(sluice.ops.rename("id", "n")).take(1)
[{'n': 0}]
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from ._native import Op


def _op(name: str, **params: Any) -> Op:
    return Op(json.dumps({"op": name, **params}))


def noop() -> Op:
    """Passes samples through unchanged (useful to measure engine overhead)."""
    return _op("noop")


def select(fields: Sequence[str]) -> Op:
    """Keeps only ``fields``, in that order."""
    return _op("select", fields=list(fields))


def drop(fields: Sequence[str]) -> Op:
    """Removes ``fields``."""
    return _op("drop", fields=list(fields))


def rename(old: str, new: str) -> Op:
    """Renames field ``old`` to ``new``."""
    return _op("rename", **{"from": old, "to": new})
