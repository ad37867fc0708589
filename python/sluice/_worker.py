"""A sluice worker process: ``python -m sluice._worker``.

The process pool (``ds.iter(processes=N)``) spawns one per worker. It reads the stage's init
JSON and then chunk frames on stdin and answers on stdout (length-prefixed frames, big
buffers in shared memory); the loop itself is Rust (``_native._serve_worker``). Also the
pickling helpers both sides use for Python UDFs and their exceptions.

Workers start in a fresh interpreter (spawned, never forked), importing only sluice and
what the pickled functions need.
"""

from __future__ import annotations

import base64
import os
import sys
from typing import Any, Callable


def dumps(fn: Callable[..., Any]) -> str:
    """The function pickled with cloudpickle (lambdas and closures included), as base64."""
    import cloudpickle

    return base64.b64encode(cloudpickle.dumps(fn)).decode("ascii")


def loads(text: str) -> Callable[..., Any]:
    """The function :func:`dumps` pickled."""
    import pickle

    return pickle.loads(base64.b64decode(text))


def dump_exception(exc: BaseException) -> bytes | None:
    """The exception pickled with the worker's traceback as a note (``None`` if it cannot be
    pickled: the main process then raises a ``SluiceError`` with its message)."""
    import traceback

    import cloudpickle

    try:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        if hasattr(exc, "add_note"):
            exc.add_note(f"[raised in sluice worker process {os.getpid()}]\n{tb.rstrip()}")
        return cloudpickle.dumps(exc)
    except Exception:
        return None


def load_exception(data: bytes) -> BaseException | None:
    """The exception :func:`dump_exception` pickled, or ``None`` if it cannot be rebuilt."""
    import pickle

    try:
        exc = pickle.loads(data)
    except Exception:
        return None
    return exc if isinstance(exc, BaseException) else None


def _die_with_parent() -> None:
    """Asks Linux to kill this process when its parent goes (``PR_SET_PDEATHSIG``), then
    checks the parent did not already go before the request."""
    parent = int(os.environ.get("SLUICE_PARENT_PID", "0") or 0)
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except Exception:
            pass  # End of input on stdin still ends the worker.
    if parent and os.getppid() != parent:
        os._exit(0)


def main() -> None:
    import signal

    _die_with_parent()
    # Workers run in their own process group, so a Ctrl-C in the terminal reaches only the
    # parent, which stops the pool. A SIGINT aimed at this process (a function calling
    # `signal.raise_signal(SIGINT)`, `kill -INT <pid>`) interrupts the running function as it
    # would on a thread, and the run stops with `KeyboardInterrupt` in the consumer. Set
    # explicitly: a parent started with SIGINT ignored (a background job) passes that on.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # The protocol owns the original stdin/stdout; user code that prints writes to stderr
    # and reads nothing.
    proto_in, proto_out = os.dup(0), os.dup(1)
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout = sys.stderr
    # Import modules the way the parent does (pytest's rootdir, a script's directory), so
    # functions pickled by reference load here too.
    extra = os.environ.get("SLUICE_SYS_PATH")
    if extra:
        for p in reversed(extra.split(os.pathsep)):
            if p not in sys.path:
                sys.path.insert(0, p)
    from sluice._native import _serve_worker

    _serve_worker(proto_in, proto_out)


if __name__ == "__main__":
    main()
