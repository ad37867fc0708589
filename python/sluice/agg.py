"""Aggregates for ``Dataset.groupby(key).aggregate(...)`` and ``Dataset.aggregate(...)``.

Each function returns an ``Agg``; passed positionally it names its output column like Ray
Data does (``count()``, ``sum(x)``, ``mean(x)``), passed by keyword it takes that name.
pandas-style ``name=("x", "sum")`` tuples are accepted too.

Missing values (``None``, NaN) are skipped, as in pandas: ``count("x")`` counts present
values, ``count()`` counts rows; ``sum``/``mean``/``min``/``max`` over no present value give
``None``. ``sum`` of ints is an int (an error if it overflows int64), of floats a float
computed exactly and rounded once (like ``math.fsum``), so it does not depend on how rows
were split across memory and disk. ``min``/``max`` work on any comparable kind (numbers, str,
bytes, bool) and keep the first of equal values.

>>> import sluice
>>> from sluice import agg
>>> ds = sluice.from_items([{"k": i % 2, "x": float(i)} for i in range(6)])
>>> ds.groupby("k").aggregate(agg.count(), total=agg.sum("x"), top=("x", "max")).take(2)
[{'k': 0, 'count()': 3, 'total': 6.0, 'top': 4.0}, {'k': 1, 'count()': 3, 'total': 9.0, 'top': 5.0}]
"""

from __future__ import annotations

import builtins
from typing import Any, NamedTuple

FUNCTIONS = ("count", "sum", "mean", "min", "max")


class Agg(NamedTuple):
    """One aggregate: ``func`` over ``field`` (``None``: rows, for ``count``)."""

    func: str
    field: str | None = None
    name: str | None = None

    def output_name(self) -> str:
        """The column name: ``name``, else ``func(field)`` as in Ray Data."""
        return self.name or f"{self.func}({self.field or ''})"


def _field(func: str, field: Any) -> str:
    if not isinstance(field, str):
        raise TypeError(f"agg.{func} needs a field name (str), got {type(field).__name__}")
    return field


def count(field: str | None = None, *, name: str | None = None) -> Agg:
    """Rows per group, or present (non-missing) values of ``field``."""
    return Agg("count", None if field is None else _field("count", field), name)


def sum(field: str, *, name: str | None = None) -> Agg:  # noqa: A001 - Ray/pandas name
    """Sum of ``field`` (numbers or bools)."""
    return Agg("sum", _field("sum", field), name)


def mean(field: str, *, name: str | None = None) -> Agg:
    """Mean of ``field`` (a float)."""
    return Agg("mean", _field("mean", field), name)


def min(field: str, *, name: str | None = None) -> Agg:  # noqa: A001
    """Smallest value of ``field``."""
    return Agg("min", _field("min", field), name)


def max(field: str, *, name: str | None = None) -> Agg:  # noqa: A001
    """Largest value of ``field``."""
    return Agg("max", _field("max", field), name)


def normalize(positional: tuple, named: dict) -> list[tuple[str, str, str | None]]:
    """``(name, func, field)`` triples from ``aggregate(*aggs, **named)`` arguments."""
    out: list[tuple[str, str, str | None]] = []
    for a in positional:
        if not isinstance(a, Agg):
            raise TypeError(
                f"aggregate: positional arguments must be sluice.agg objects, got {type(a).__name__}; "
                "use name=(field, func) for tuples"
            )
        out.append((a.output_name(), a.func, a.field))
    for name, spec in named.items():
        if isinstance(spec, Agg):
            out.append((name, spec.func, spec.field))
            continue
        if not (isinstance(spec, tuple) and builtins.len(spec) == 2):
            raise TypeError(f"aggregate: {name}= must be a sluice.agg object or a (field, func) tuple")
        field, func = spec
        if func not in FUNCTIONS:
            raise ValueError(f"aggregate: unknown function {func!r} for {name}= (use one of {', '.join(FUNCTIONS)})")
        if field is not None and not isinstance(field, str):
            raise TypeError(f"aggregate: the field of {name}= must be a str")
        out.append((name, func, field))
    if not out:
        raise ValueError("aggregate needs at least one aggregate")
    return out
