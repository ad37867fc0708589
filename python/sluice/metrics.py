"""Live metrics of a running iteration, for a training job's dashboard:
``ds.iter(stats_port=9101)`` serves the statistics in the Prometheus text format on
``http://127.0.0.1:9101/metrics`` (loopback only; port 0 picks a free one, see
``it.stats_address``), and ``ds.iter(on_stats=fn, stats_interval=10)`` calls ``fn(stats)``
every 10 seconds from a background thread. Both stop when the iteration ends or is closed.
The endpoint and the text are Rust's (``sluice::stats::endpoint`` and ``prometheus`` in
sluice-core); this module forwards to them and runs the callback, which is Python code.

Any local process can connect to the endpoint, so it is bounded: at most ``_MAX_CONNECTIONS``
connections are served at once (more are closed on accept) and one idle for
``_IDLE_TIMEOUT`` seconds is dropped, so idle connections cannot use up the training
process's file descriptors or threads; closing the iteration closes its connections too.

>>> import sluice, urllib.request
>>> it = sluice.range(100).batch(10).iter(stats_port=0)
>>> _ = next(it)
>>> host, port = it.stats_address
>>> text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10).read().decode()
>>> "sluice_consumer_outputs_total 1" in text
True
>>> it.close()
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from . import _native
from .stats import Stats

log = logging.getLogger("sluice")

# Seconds a connection may send nothing before it is dropped, and the connections served at
# once (read when an endpoint starts: tests lower them).
_IDLE_TIMEOUT = 5.0
_MAX_CONNECTIONS = 16


def prometheus_text(stats: Any) -> str:
    """The statistics of an iteration (a ``sluice.Iterator`` or its native stats handle) in
    the Prometheus text exposition format (counters end in ``_total``; the batch delay is a
    summary in seconds): what the endpoint serves."""
    return _native.prometheus_text(getattr(stats, "_stats_handle", stats))


class Live:
    """The endpoint and the callback of one iteration (started by ``Iterator``)."""

    def __init__(self, handle: "_native.Stats", snapshot: Callable[[], Stats], port: int | None,
                 on_stats: Callable[[Stats], Any] | None, interval: float):
        self._stop = threading.Event()
        self._server: _native.MetricsServer | None = None
        self.address: tuple[str, int] | None = None
        if port is not None:
            self._server = _native.MetricsServer(handle, port, _MAX_CONNECTIONS, _IDLE_TIMEOUT)
            self.address = self._server.address
        if on_stats is not None:
            try:
                threading.Thread(target=self._report, args=(snapshot, on_stats, interval), name="sluice-stats",
                                 daemon=True).start()
            except BaseException:  # no thread (a limit): the endpoint stops with the error
                self.close()
                raise

    def _report(self, snapshot: Callable[[], Stats], on_stats: Callable[[Stats], Any], interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                on_stats(snapshot())
            except Exception:  # a dashboard's bug must not stop training
                log.exception("sluice: on_stats callback failed")

    def follow(self, handle: "_native.Stats") -> None:
        """Serves these statistics from now on (a checkpoint load starts a new run)."""
        if self._server is not None:
            self._server.follow(handle)

    def connections(self) -> int:
        """Connections the endpoint holds open now (0 once closed)."""
        return 0 if self._server is None else self._server.connections()

    def close(self) -> None:
        """Stops the callback, the endpoint and every connection's thread. Safe from a
        garbage collection on any thread: the endpoint's threads never run Python."""
        self._stop.set()
        server, self._server = self._server, None
        if server is not None:
            server.close()
