"""Pickling datasets and iterators by their recipe.

A native dataset cannot be pickled (it holds Rust objects: sources, ops, Python closures
behind a Rust pointer). What can travel is *how it was made*: the source and each
transformation with its arguments. A source that can be reopened (``read_*``, ``range``)
travels as its spec JSON — the form worker processes and Ray actors reopen it from, with the
file list as it was expanded, taken when the recipe is pickled — and is reopened by the engine
(``_native.open_source``);
``from_items`` and ``mix`` travel as their calls. Built-in ops pickle as their serde JSON
(``Op(spec)``), Python UDFs by cloudpickle, nested datasets (``mix``) by their own recipes.
Unpickling replays the steps through the public API, so the copy is built by the same
checking constructors and gets the same fingerprint — a checkpoint taken from the original
loads into the copy.

An iterator pickles as (its dataset's recipe, the ``iter(...)`` arguments, ``state_dict()``):
the copy continues right after the last output the original delivered.

>>> import pickle, sluice
>>> ds = sluice.range(6).map(lambda s: {"id": s["id"] * 10}).batch(4)
>>> [b["id"].tolist() for b in pickle.loads(pickle.dumps(ds))]
[[0, 10, 20, 30], [40, 50]]
"""

from __future__ import annotations

import copyreg
import functools
import importlib
import pickle
from typing import Any, Callable, NamedTuple, TypeVar

from . import _native

F = TypeVar("F", bound=Callable[..., Any])


class Step(NamedTuple):
    """One call of a recipe: ``parent.<call>(*args, **kwargs)``, or, for a source
    (``parent is None``), the module-level function ``call`` ("module:qualname")."""

    parent: "Step | None"
    call: str
    args: tuple
    kwargs: dict

    def chain(self) -> "list[Step]":
        """The steps from the source to this one."""
        steps, s = [], self
        while s is not None:
            steps.append(s)
            s = s.parent
        return steps[::-1]

    def describe(self) -> str:
        return " -> ".join(s.call.rsplit(":", 1)[-1] for s in self.chain())


class _Unrecorded(NamedTuple):
    """Marks a dataset whose maker did not record its recipe (so it cannot be pickled)."""

    what: str


def source(fn: F) -> F:
    """Decorates a module-level function returning a new ``Dataset`` from a source, so the
    dataset remembers it: by its spec when the engine can reopen it, else by the call."""
    where = f"{fn.__module__}:{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        out._recipe = Step(None, _OPEN, (_SpecOf(out._native, Step(None, where, args, kwargs)),), {})
        return out

    return wrapper  # type: ignore[return-value]


_OPEN = f"{__name__}:open_source"


class _SpecOf:
    """A source's spec JSON (``_native.Dataset.source_spec``), taken when the recipe is
    pickled, not when the source opens: the spec of ``read_images`` over ImageNet names 1.28
    M paths (0.7 s and 300 MB to make), and most datasets never travel. Pickles as the JSON,
    or — for a source the engine cannot reopen (data held in memory) — as the call."""

    __slots__ = ("native", "call")

    def __init__(self, native: Any, call: Step):
        self.native, self.call = native, call

    def __reduce__(self) -> tuple:
        spec = self.native.source_spec()
        return (str, (spec,)) if spec is not None else (_Call, (self.call,))


class _Call(NamedTuple):
    """A source recipe's call, for a source without a spec."""

    step: Step


def open_source(spec: "str | _SpecOf | _Call") -> Any:
    """The dataset of a source's spec JSON; in this process (a recipe replayed without
    pickling) the source already open; or the recorded call of a source without a spec."""
    from .dataset import Dataset

    if isinstance(spec, _Call):
        return build(spec.step)
    if isinstance(spec, _SpecOf):
        ds = Dataset(spec.native)
    else:
        ds = Dataset(_native.open_source(spec)[0])
    ds._recipe = Step(None, _OPEN, (spec,), {})
    return ds


def step(fn: F) -> F:
    """Decorates a ``Dataset`` method returning a new ``Dataset`` (or an ``Iterator``, for
    ``iter``), so the result remembers the call on top of its parent's recipe."""

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = fn(self, *args, **kwargs)
        parent = getattr(self, "_recipe", None) or _Unrecorded(type(self).__name__)
        try:
            out._recipe = Step(parent, fn.__name__, args, kwargs)
        except AttributeError:  # a result type that takes no attributes: nothing to record
            pass
        return out

    return wrapper  # type: ignore[return-value]


def _check(recipe: Any, what: str) -> Step:
    s = recipe
    while isinstance(s, Step):
        s = s.parent
    if s is not None or recipe is None:
        made_by = s.what if isinstance(s, _Unrecorded) else "an unknown source"
        raise TypeError(
            f"cannot pickle this {what}: it was made by {made_by}, which does not record how "
            "it was built (only datasets made by sluice's read_*/range/from_items functions "
            "and Dataset methods can be rebuilt elsewhere)"
        )
    return recipe


def _dumps(obj: Any) -> bytes:
    # cloudpickle pickles lambdas and closures by value; plain pickle suffices otherwise.
    try:
        import cloudpickle
    except ImportError:
        try:
            return pickle.dumps(obj)
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            raise TypeError(
                f"pickling this pipeline needs cloudpickle for its Python functions ({e}); "
                "pip install cloudpickle"
            ) from e
    return cloudpickle.dumps(obj)


def build(recipe: Step) -> Any:
    """Replays ``recipe`` through the public API and returns the object it describes."""
    obj: Any = None
    for s in recipe.chain():
        if s.parent is None:
            module, name = s.call.split(":")
            fn: Any = importlib.import_module(module)
            for part in name.split("."):
                fn = getattr(fn, part)
            obj = fn(*s.args, **s.kwargs)
        else:
            obj = getattr(obj, s.call)(*s.args, **s.kwargs)
    return obj


def _load_dataset(payload: bytes) -> Any:
    return build(pickle.loads(payload))


def reduce_dataset(ds: Any) -> tuple:
    """``Dataset.__reduce__``: the dataset as its recipe."""
    recipe = _check(getattr(ds, "_recipe", None), "Dataset")
    return (_load_dataset, (_dumps(recipe),))


def _load_iterator(payload: bytes, state: dict | None) -> Any:
    it = build(pickle.loads(payload))
    if state is not None:
        it.load_state_dict(state)
    return it


def reduce_iterator(it: Any) -> tuple:
    """``Iterator.__reduce__``: (dataset recipe + ``iter`` arguments, ``state_dict()``).

    The copy starts a pipeline of its own and continues after the last output the original
    delivered; outputs the original had prefetched but not delivered are recomputed."""
    recipe = _check(getattr(it, "_recipe", None), "Iterator")
    if recipe.call == "iter":
        # The epoch it runs, not "the next one" (the copy's dataset has started none).
        args, kwargs = list(recipe.args), dict(recipe.kwargs)
        if len(args) >= 2:
            args[1] = it.epoch
        else:
            kwargs["epoch"] = it.epoch
        recipe = recipe._replace(args=tuple(args), kwargs=kwargs)
    # An iterator that has delivered nothing needs no state (and pipelines whose state
    # cannot be captured, e.g. with shuffle_buffer, can still travel before they start).
    state = it.state_dict() if getattr(it, "_count", 0) else None
    return (_load_iterator, (_dumps(recipe), state))


def _reduce_op(op: _native.Op) -> tuple:
    return (_native.Op, (op.spec_json(),))


# Built-in ops travel as their serde JSON, the form plans and worker processes use too.
copyreg.pickle(_native.Op, _reduce_op)

