"""Generic built-in ops (GIL-free, Rust). Each returns an op for ``Dataset.map``. They work
on field names, not on one field's value, so they take no ``field=``/``out=`` (``rename`` is
the field-to-field case).

>>> import sluice
>>> sluice.range(3).map(sluice.ops.rename("id", "n")).take(1)
[{'n': 0}]
"""

from __future__ import annotations

from typing import Any, Sequence

from . import _spec
from ._native import Op


def _op(name: str, **params: Any) -> Op:
    return _spec.op(name, params)


def _fields(fields: Any) -> Any:
    # A lone str (or a non-iterable) is a bad argument for the engine to name, not a list.
    if isinstance(fields, str) or not hasattr(fields, "__iter__"):
        return fields
    return list(fields)


def noop() -> Op:
    """Passes samples through unchanged (useful to measure engine overhead)."""
    return _op("noop")


def select(fields: Sequence[str]) -> Op:
    """Keeps only ``fields``, in that order."""
    return _op("select", fields=_fields(fields))


def drop(fields: Sequence[str]) -> Op:
    """Removes ``fields``."""
    return _op("drop", fields=_fields(fields))


def rename(old: str, new: str) -> Op:
    """Renames field ``old`` to ``new``."""
    return _op("rename", **{"from": old, "to": new})
