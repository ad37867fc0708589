"""Work done ahead on a thread of its own: what a CUDA consumer does to each batch before the
training step takes it (the host half of the nvJPEG decode, the copies' launches) runs beside
the step instead of inside it, as SPDL moves the host-to-device transfer off the training
thread. Bounded: at most ``depth`` results wait, plus the one being made.

    >>> list(ahead(iter(range(5)), lambda x: x * x, depth=2))
    [0, 1, 4, 9, 16]
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_DONE = object()


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


def ahead(items: Iterator[T], fn: Callable[[T], R], depth: int,
          drop: Callable[[R], object] | None = None,
          interrupt: Callable[[], object] | None = None) -> Iterator[R]:
    """``fn(item)`` for each of ``items``, in order, made on a daemon thread up to ``depth``
    results ahead of the consumer. An error of ``items`` or ``fn`` is raised to the consumer
    after the results before it. Closing the generator (a ``break``) stops the thread: it
    makes no result after the one in hand and is joined, so nothing runs on after the loop;
    ``drop`` is called on each result made but never taken (a CUDA batch waits there for
    the copies that still read its host buffers); ``interrupt`` (closing the pipeline), when
    the thread is still busy then, so that a thread waiting in ``items`` for a sample that
    may never come (a hung function, Ctrl-C) returns instead of holding the close up."""
    if depth < 1:
        raise ValueError(f"ahead: depth must be at least 1, got {depth}")
    out: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(x: object) -> bool:
        # Waits for room, but gives up once the consumer has gone.
        while not stop.is_set():
            try:
                out.put(x, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def dropped(r: object) -> None:
        if drop is not None and not isinstance(r, _Failed) and r is not _DONE:
            drop(r)  # type: ignore[arg-type]

    def run() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                r = fn(item)
                if not put(r):
                    dropped(r)
                    return
            put(_DONE)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            put(_Failed(e))

    thread = threading.Thread(target=run, name="sluice-ahead", daemon=True)
    thread.start()
    try:
        while True:
            got = out.get()
            if got is _DONE:
                return
            if isinstance(got, _Failed):
                raise got.error
            yield got
    finally:
        stop.set()
        if interrupt is not None and thread.is_alive():
            interrupt()
        # The thread may be blocked in `put` or inside `fn`/`items`: drain, then wait for it.
        while thread.is_alive():
            try:
                dropped(out.get(timeout=0.05))
            except queue.Empty:
                pass
        thread.join()
        while not out.empty():
            dropped(out.get_nowait())
