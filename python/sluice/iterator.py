"""A running pipeline (``Iterator``), its statistics (``Stats``) and merging checkpoints of
a sharded run (``elastic_state``)."""

from __future__ import annotations

import atexit
import json
import logging
import sys
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Sequence

from . import _native, _recipe
from .stats import Stats

if TYPE_CHECKING:
    from .context import Context
    from .dataset import Dataset
    from .optimizer import Plan

# Native iterators still running (a ``for`` loop may hold one after its wrapper is gone).
_LIVE: "weakref.WeakSet[_native.Iterator]" = weakref.WeakSet()

# Runs at once in one process past which each new one logs a warning (at 16, 32, 64, ...):
# every run holds its threads and prefetched outputs until it ends, is closed or dropped,
# and iterators kept by reference (a list, a notebook's output history) add up unseen.
_MANY_RUNNING = 16

log = logging.getLogger("sluice")


def _warn_if_many_running() -> None:
    running = sum(1 for it in list(_LIVE) if it.running)
    if running >= _MANY_RUNNING and running & (running - 1) == 0:
        log.warning(
            "%d sluice iterators are running at once in this process; each holds its threads and "
            "prefetched outputs until it is exhausted, closed (it.close(), `with ds.iter() as it:`) "
            "or no longer referenced", running)


@atexit.register
def _close_all() -> None:
    # Stop pipeline threads before the interpreter tears down (no hang at exit), and let the
    # workers of runs an error or Ctrl-C ended finish their call: one still in Python code
    # when the interpreter finalizes would abort the process.
    for it in list(_LIVE):
        it.close()
    _native.join_stopped()


class _Line:
    """The progress bar without tqdm: one line on stderr, rewritten at most 5 times a
    second, and a last one when the iteration ends."""

    def __init__(self, total: int | None):
        self._total = total
        self._n = 0
        self._t0 = self._shown = time.monotonic()

    def _write(self, end: str) -> None:
        of = "" if self._total is None else f"/{self._total}"
        rate = self._n / max(time.monotonic() - self._t0, 1e-9)
        sys.stderr.write(f"\rsluice: {self._n}{of} outputs, {rate:,.1f}/s{end}")
        sys.stderr.flush()

    def update(self, n: int) -> None:
        self._n += n
        now = time.monotonic()
        if now - self._shown > 0.2:
            self._shown = now
            self._write(" ")

    def close(self) -> None:
        self._write("\n")


def _progress_bar(total: int | None) -> Any:
    """A tqdm bar on stderr when tqdm is installed, else a ``_Line``."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _Line(total)
    return tqdm(total=total, desc="sluice", unit="it")


class Iterator:
    """A running pipeline. Closing it (or breaking out of a ``for`` loop and dropping it)
    stops its threads."""

    def __init__(self, native: _native.Iterator, progress: bool | None, total: int | None = None,
                 live: "dict | None" = None):
        self._native = native
        self._owner: Dataset | None = None
        self._plan: "Plan | None" = None
        # The first ``iter(optimize=True)`` run: makes the plan from its step times.
        self._planning: "Callable[[], str | None] | None" = None
        # Off unless asked for: a bar interleaves with the training script's own log lines.
        self._bar = _progress_bar(total) if progress else None
        # Read by the live metrics without the iterator's lock (a scrape never waits for a
        # batch); a checkpoint load replaces it.
        self._stats_handle = native.stats_handle()
        self._live = None
        if live:
            from .metrics import Live

            # The callback's thread holds the iterator weakly: one dropped without close()
            # stops its callback, endpoint and connections when collected, not at exit.
            ref = weakref.ref(self)

            def snapshot() -> Stats:
                it = ref()
                if it is None:
                    raise RuntimeError("the iteration is gone")
                return it.stats()

            try:
                self._live = Live(self._stats_handle, snapshot, **live)
            except BaseException:  # e.g. the port is taken: stop the pipeline just started
                native.close()
                raise
            weakref.finalize(self, self._live.close)
        _LIVE.add(native)
        _warn_if_many_running()

    @property
    def plan(self) -> "Plan | None":
        """The optimizer plan this iteration runs (``iter(plan=...)``, ``optimize=True``); None
        for the default plan. The first ``iter(optimize=True)`` of a dataset runs the default
        plan and times its ops as it goes: its ``plan`` is the one made from those timings,
        which later ``optimize=True`` iterations run — None until the run has timed 1% of an
        epoch (16–100 samples)."""
        if self._plan is None and self._planning is not None:
            made = self._planning()
            if made is not None:
                from .optimizer import Plan

                self._plan = Plan(made)
        return self._plan

    @plan.setter
    def plan(self, plan: "Plan | None") -> None:
        self._plan = plan

    @property
    def stats_address(self) -> "tuple[str, int] | None":
        """(host, port) of the Prometheus endpoint (``iter(stats_port=...)``), else None."""
        return None if self._live is None else self._live.address

    @property
    def _count(self) -> int:
        return self._native.count

    @property
    def epoch(self) -> int:
        """The epoch this iteration runs (``iter(epoch=...)``, the dataset's next one for a
        plain loop, or a loaded checkpoint's)."""
        return self._native.epoch

    def __iter__(self) -> "Iterator":
        # Without a progress bar a ``for`` loop drives the native iterator directly: no
        # Python frame per output (it closes itself at the end, on error and when dropped).
        return self if self._bar is not None or self._live is not None else self._native

    def __next__(self) -> dict:
        try:
            out = next(self._native)
        except BaseException:
            self._finish()
            raise
        if self._bar is not None:
            self._bar.update(1)
        return out

    def _finish(self) -> None:
        self.close()

    def close(self) -> None:
        """Stops the pipeline and waits for its threads (and ends the progress bar)."""
        bar, self._bar = self._bar, None
        if bar is not None:
            bar.close()
        live, self._live = self._live, None
        if live is not None:
            live.close()
        self._native.close()

    def state_dict(self) -> dict:
        """A small JSON-able checkpoint of the position after the last output delivered,
        with the iteration's ``epoch``. It does not depend on thread counts; prefetched
        outputs are recomputed on resume.

        >>> import sluice
        >>> ds = sluice.range(10).shuffle(seed=1).batch(3)
        >>> it = ds.iter(seed=0); first = next(it); state = it.state_dict()
        >>> it2 = ds.iter(seed=0, num_threads=1); it2.load_state_dict(state)
        >>> [b["id"].tolist() for b in it2] == [b["id"].tolist() for b in it]
        True
        """
        return json.loads(self._native.state_dict_json())

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        """Continues right after the checkpointed output, in the checkpoint's epoch (same
        pipeline and seed required; a checkpoint saved before checkpoints carried the epoch
        is epoch 0); the next plain loop over the dataset that started this iterator is the
        epoch after it.
        A checkpoint whose position lies outside the data, or whose Python functions' code
        (bytecode, constants, captured values) changed since, raises ``ValueError``;
        ``strict=False`` accepts changed functions on purpose."""
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict, got {type(state).__name__}")
        self._native.load_state_dict_json(json.dumps(state), bool(strict))
        self._stats_handle = self._native.stats_handle()
        if self._live is not None:
            self._live.follow(self._stats_handle)
        if self._owner is not None:
            self._owner._last_stats = self._stats_handle
            # The loop is in the checkpoint's epoch now: the next plain loop is the one after.
            self._owner._next_epoch = self.epoch + 1

    def stats(self) -> Stats:
        """Statistics so far (with a Ray context: ``stats["remote"]``, per actor and decisions)."""
        return Stats.of(self._stats_handle, getattr(self, "_context", None))

    def report(self, path: Any) -> str:
        """Writes one self-contained HTML page about this iteration so far to ``path`` and
        returns it (see ``sluice.report``); after an error it shows the failing op."""
        from . import report

        logical = self._owner._native.logical_plan() if self._owner is not None else ""
        plan = self.plan.data if self.plan is not None else None
        return report.write(path, self.stats().to_dict(), logical, plan)

    def __reduce__(self) -> tuple:
        # (dataset recipe, iter arguments, state_dict()): the copy resumes after the last output.
        return _recipe.reduce_iterator(self)

    def __enter__(self) -> "Iterator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def elastic_state(states: Sequence[dict]) -> dict:
    """Merges the ``state_dict()`` of every rank of a sharded run into one checkpoint that
    each rank of a *new* world size loads: the epoch in progress continues from where every
    old rank stood, and what none of them delivered yet (including the tail an equal split
    had left out) is split equally among the new ranks, in the same global order. Later
    epochs shard normally over the new world size.

    >>> import sluice
    >>> ds = lambda rank, world: sluice.range(10).shuffle(seed=0).shard(rank, world)
    >>> old = [ds(r, 2).iter() for r in (0, 1)]
    >>> seen = [next(it)["id"] for it in old for _ in (0, 1)]
    >>> merged = sluice.elastic_state([it.state_dict() for it in old])
    >>> rest = []
    >>> for r in (0, 1, 2):
    ...     it = ds(r, 3).iter(); it.load_state_dict(merged); rest += [s["id"] for s in it]
    >>> sorted(seen + rest)  # every sample once: 4 before, 6 on the new ranks
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """
    if isinstance(states, dict) or not all(isinstance(s, dict) for s in states):
        raise TypeError("elastic_state takes a list of state_dict() results, one per rank")
    return json.loads(_native.elastic_state_json([json.dumps(s) for s in states]))
