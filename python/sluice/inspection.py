"""Looking at a dataset: ``len(ds)``, ``ds.count()``, ``ds.schema()``, ``ds.show()``,
``ds.columns`` and ``ds.class_names``. What the plan knows is answered without running
anything; the rest runs as little of the pipeline as it needs.

>>> import sluice
>>> ds = sluice.range(10).batch(4)
>>> len(ds), ds.columns
(3, ['id'])
>>> ds.filter(lambda b: True).count()
3
"""

from __future__ import annotations

import sys
from typing import Any, Iterator, NamedTuple, TextIO

import numpy as np

from ._args import _int


class Field(NamedTuple):
    """One field of a ``Schema``: its name and, when an output was looked at, its Python
    type name (``int``, ``str``, ``bytes``, ``ndarray``, ``list``, ...) and, for arrays,
    the numpy ``dtype`` and ``shape`` (a batch's arrays include the batch dimension)."""

    name: str
    type: str | None = None
    dtype: np.dtype | None = None
    shape: tuple | None = None

    def describe(self) -> str:
        """``ndarray[uint8, (224, 224, 3)]``, ``int``, or ``?`` when the type is unknown."""
        if self.type is None:
            return "?"
        if self.dtype is not None:
            return f"{self.type}[{self.dtype}, {self.shape}]"
        return self.type


class Schema:
    """The fields of a dataset's outputs. ``known_from`` says where they come from:
    ``"plan"`` (field names the pipeline's steps declare; nothing ran, types unknown) or
    ``"first output"`` (names and types of the first output, which was computed).

    >>> import sluice, numpy as np
    >>> s = sluice.from_items([{"x": np.zeros((2, 3), np.float32), "y": "a"}]).schema()
    >>> s.names, s["x"].dtype, s["x"].shape, s.known_from
    (['x', 'y'], dtype('float32'), (2, 3), 'first output')
    """

    def __init__(self, fields: list[Field], known_from: str):
        self.fields = tuple(fields)
        self.known_from = known_from

    @property
    def names(self) -> list[str]:
        return [f.name for f in self.fields]

    def __getitem__(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"no field {name!r}; the fields are {self.names}")

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def __iter__(self) -> Iterator[Field]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schema) and (self.fields, self.known_from) == (other.fields, other.known_from)

    def __str__(self) -> str:
        width = max((len(f.name) for f in self.fields), default=0)
        lines = [f"schema (from the {self.known_from}):"]
        lines += [f"  {f.name:<{width}}  {f.describe()}" for f in self.fields]
        return "\n".join(lines)

    def __repr__(self) -> str:
        inner = ", ".join(f"{f.name}: {f.describe()}" for f in self.fields)
        return f"Schema({inner}; from the {self.known_from})"


def _field(name: str, value: Any) -> Field:
    if isinstance(value, np.ndarray):
        return Field(name, "ndarray", value.dtype, tuple(value.shape))
    return Field(name, "None" if value is None else type(value).__name__)


def _brief(value: Any, depth: int = 0) -> str:
    """A short, readable form of one field's value: arrays by dtype and shape (and their
    values when there are at most 8), long text and bytes cut, long lists by length."""
    if isinstance(value, np.ndarray):
        head = f"ndarray({value.dtype}, {tuple(value.shape)})"
        return f"{head} {value.tolist()}" if value.size <= 8 else head
    if isinstance(value, (bytes, bytearray)):
        return repr(bytes(value)) if len(value) <= 24 else f"<{len(value)} bytes>"
    if isinstance(value, str):
        return repr(value) if len(value) <= 60 else repr(value[:57]) + f"… ({len(value)} chars)"
    if isinstance(value, (list, tuple)):
        if len(value) > 8 or depth > 1:
            return f"<{type(value).__name__} of {len(value)}>"
        return "[" + ", ".join(_brief(v, depth + 1) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_brief(v, depth + 1)}" for k, v in value.items()) + "}"
    return repr(value)


_TORCH_HINT = (
    "For torch's DataLoader, pass ds.to_torch(): DataLoader(ds.to_torch(), batch_size=None) "
    "(it shards across num_workers and DDP ranks)"
)


def _from_torch() -> bool:
    # Whether len() was asked by torch (DataLoader's sampler), to point at to_torch().
    frame = sys._getframe(2)
    return str(frame.f_globals.get("__name__", "")).startswith("torch.")


class InspectMixin:
    """``Dataset`` methods and properties that describe a dataset (see the module)."""

    _native: Any

    def __len__(self) -> int:
        """The number of outputs (batches after ``batch()``) when the plan knows it without
        running: sources with a length, then maps, ``shuffle``, ``shard`` (per epoch),
        ``repeat(n)``, ``batch`` (rounded up, down with ``drop_last``) and ``take``. After a
        ``filter``, ``flat_map``, ``map(on_error="skip")``, ``map_batches`` or ``pack``, on a
        stream, or repeated forever, ``TypeError`` says why: ``count()`` runs and counts."""
        try:
            return self._native.length()
        except TypeError as e:
            if _from_torch():
                raise TypeError(f"{e}. {_TORCH_HINT}") from None
            raise

    def __getitem__(self, index: Any) -> Any:
        # torch's DataLoader takes an object with __len__ for a map-style dataset and indexes it.
        raise TypeError(
            "a sluice Dataset is a pipeline, not an indexable container: iterate it "
            f"(for batch in ds), or take(n) for a look. {_TORCH_HINT}"
        )

    def report(self, path: Any, batches: int | None = None, **iter_kwargs: Any) -> str:
        """Writes one self-contained HTML page about this dataset's latest iteration to
        ``path`` and returns it (see ``sluice.report``): the pipeline diagram, per-stage
        figures and plots over time, CPU and memory, the batch-delay histogram, skips and
        errors by op, the optimizer's plan. ``batches=N`` first runs N outputs of epoch 0
        (with ``iter_kwargs``) and reports on that run. Before any iteration, and without
        ``batches``, it is a ``ValueError``."""
        if batches is not None:
            it = self.iter(epoch=0, **iter_kwargs)  # type: ignore[attr-defined]
            try:
                for _ in range(_int("batches", batches, 1)):
                    next(it)
            except StopIteration:
                pass
            finally:
                it.close()
        stats = self.stats()  # type: ignore[attr-defined]
        if stats is None:
            raise ValueError("report: this dataset has not run yet; iterate it first, or pass batches=N")
        from . import report

        plan = getattr(self, "_last_plan", None)
        return report.write(path, stats.to_dict(), self._native.logical_plan(), plan.data if plan is not None else None)

    def __bool__(self) -> bool:
        # A dataset is a pipeline, not a container: truthy even when empty or unsized.
        return True

    def count(self, seed: int = 0, num_threads: int | None = None, *, processes: int | None = None) -> int:
        """The number of outputs — batches after ``batch()``, samples before. ``len(ds)``
        when the plan knows it (nothing runs); otherwise the pipeline runs once (``seed``,
        ``num_threads`` and ``processes`` as in ``iter``) and its outputs are counted
        without being converted to Python objects. A pipeline that repeats forever raises
        ``ValueError``."""
        return self._native.count(
            _int("seed", seed, 0),
            _int("num_threads", num_threads, 0, allow_none=True),
            _int("processes", processes, 1, allow_none=True),
        )

    @property
    def columns(self) -> list[str]:
        """The field names of the outputs: from the plan when it knows them (nothing runs),
        otherwise from the first output (``schema()``), e.g. after a Python function."""
        names = self._native.field_names()
        return list(names) if names is not None else self.schema().names

    def schema(self, *, run: bool = True, seed: int = 0) -> "Schema":
        """The outputs' fields. By default the first output is computed (``seed`` as in
        ``iter``) and each field described by its type, and for arrays dtype and shape:
        ``known_from == "first output"`` (an empty dataset falls back to the plan's names).
        ``run=False`` never runs: the field names the plan knows, types unknown
        (``known_from == "plan"``); ``TypeError`` where only running can tell (after a
        Python function or ``map_batches``)."""
        names = self._native.field_names()
        if not run:
            if names is None:
                raise TypeError(
                    "the fields are not known without running the pipeline (a Python function "
                    "or map_batches decides them); schema() looks at the first output"
                )
            return Schema([Field(n) for n in names], "plan")
        first = self.limit(1).iter(seed=_int("seed", seed, 0), progress=False)  # type: ignore[attr-defined]
        with first as it:
            outputs = list(it)
        if outputs:
            return Schema([_field(k, v) for k, v in outputs[0].items()], "first output")
        if names is None:
            raise ValueError("the dataset has no outputs and its plan does not name its fields")
        return Schema([Field(n) for n in names], "plan")

    def show(self, n: int = 5, *, file: TextIO | None = None) -> None:
        """Prints the first ``n`` outputs, one per line, readably: arrays by dtype and shape
        (with their values when there are at most 8), long text and bytes cut short.

        >>> import sluice, numpy as np
        >>> sluice.from_items([{"img": np.zeros((4, 4, 3), np.uint8), "label": 1}]).show()
        {'img': ndarray(uint8, (4, 4, 3)), 'label': 1}
        """
        out = sys.stdout if file is None else file
        rows = self.take(_int("n", n, 0))  # type: ignore[attr-defined]
        for row in rows:
            print(_brief(row), file=out)
        if not rows:
            print("(no outputs)", file=out)

    @property
    def class_names(self) -> list[str] | None:
        """The names the integer ``label`` field indexes: for ``read_images(...,
        labels="parent_dir")`` the sorted parent-directory names (like torchvision
        ImageFolder's ``classes``), kept through every later step (map, shuffle, batch, ...).
        ``None`` for sources that assign no labels."""
        return self._native.class_names()
