"""Live metrics of a running iteration, for a training job's dashboard:
``ds.iter(stats_port=9101)`` serves the statistics in the Prometheus text format on
``http://127.0.0.1:9101/metrics`` (loopback only; port 0 picks a free one, see
``it.stats_address``), and ``ds.iter(on_stats=fn, stats_interval=10)`` calls ``fn(stats)``
every 10 seconds from a background thread. Both stop when the iteration ends or is closed.

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

import errno
import http.server
import logging
import socket
import threading
from typing import Any, Callable

from .stats import Stats

log = logging.getLogger("sluice")

# Seconds a connection may send nothing before it is dropped (tests lower it), and the
# connections served at once: a scraper needs one, a few dashboards a handful.
_IDLE_TIMEOUT = 5.0
_MAX_CONNECTIONS = 16


class _Server(http.server.ThreadingHTTPServer):
    """A threading HTTP server with a cap on live connections whose ``stop`` also ends
    the handler threads (``shutdown`` alone only stops accepting)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type, max_connections: int):
        self._lock = threading.Lock()
        self._conns: dict[socket.socket, threading.Thread | None] = {}
        self._max = max_connections
        super().__init__(address, handler)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        # Refused here, a connection is closed at once (``shutdown_request``).
        with self._lock:
            if len(self._conns) >= self._max:
                return False
            self._conns[request] = None
            return True

    def process_request(self, request: Any, client_address: Any) -> None:
        t = threading.Thread(target=self.process_request_thread, args=(request, client_address),
                             name="sluice-metrics-conn", daemon=True)
        with self._lock:
            self._conns[request] = t
        try:
            t.start()
        except BaseException:  # no thread: the slot is given back, the connection closed
            with self._lock:
                self._conns.pop(request, None)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._conns.pop(request, None)

    def connections(self) -> int:
        with self._lock:
            return len(self._conns)

    def stop(self, timeout: float = 5.0) -> None:
        self.shutdown()
        self.server_close()
        with self._lock:
            conns = list(self._conns.items())
        for sock, _ in conns:
            try:  # wakes a handler blocked reading: it sees the end and returns
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for _, t in conns:
            if t is not None and t is not threading.current_thread():
                t.join(timeout)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus_text(stats: Stats) -> str:
    """The statistics in the Prometheus text exposition format (counters end in
    ``_total``; the batch delay is a summary in seconds)."""
    lines: list[str] = []

    def metric(name: str, kind: str, doc: str, rows: list[tuple[str, float]]) -> None:
        lines.append(f"# HELP {name} {doc}")
        lines.append(f"# TYPE {name} {kind}")
        lines.extend(f"{name}{labels} {value!r}" if isinstance(value, float) else f"{name}{labels} {value}"
                     for labels, value in rows)

    stages = stats.stages
    by_stage = lambda key: [(f'{{stage="{_label(s["name"])}"}}', s[key]) for s in stages]  # noqa: E731
    metric("sluice_stage_samples_in_total", "counter", "Samples a stage received.", by_stage("samples_in"))
    metric("sluice_stage_samples_out_total", "counter", "Samples (or batches) a stage produced.", by_stage("samples_out"))
    metric("sluice_stage_skipped_total", "counter", "Samples a stage skipped (on_error='skip').", by_stage("skipped"))
    metric("sluice_stage_busy_seconds_total", "counter", "Seconds a stage's threads spent working.", by_stage("busy_s"))
    metric("sluice_stage_utilisation", "gauge", "Busy time over elapsed time and threads.", by_stage("utilisation"))
    metric("sluice_stage_queue_occupancy", "gauge", "Mean chunks waiting in a stage's output queue.",
           by_stage("queue_occupancy"))
    c = stats.consumer
    metric("sluice_consumer_outputs_total", "counter", "Outputs (batches) delivered.", [("", c["outputs"])])
    metric("sluice_consumer_samples_total", "counter", "Samples delivered.", [("", c["samples"])])
    metric("sluice_consumer_samples_per_second", "gauge", "Samples delivered per second so far.",
           [("", c["throughput"])])
    metric("sluice_batch_delay_seconds", "summary", "How long the training loop waited for a batch.",
           [('{quantile="0.5"}', c["delay_p50_ms"] / 1e3), ('{quantile="0.95"}', c["delay_p95_ms"] / 1e3),
            ('{quantile="1"}', c["delay_max_ms"] / 1e3)])
    points = stats.data.get("series") or []
    if points and points[-1].get("cpu_s") is not None:
        metric("sluice_process_cpu_seconds_total", "counter", "CPU seconds of the process.",
               [("", points[-1]["cpu_s"])])
    if points and points[-1].get("rss_bytes") is not None:
        metric("sluice_process_resident_memory_bytes", "gauge", "Resident memory of the process.",
               [("", points[-1]["rss_bytes"])])
    return "\n".join(lines) + "\n"


class Live:
    """The endpoint and the callback of one iteration (started by ``Iterator``)."""

    def __init__(self, snapshot: Callable[[], Stats], port: int | None, on_stats: Callable[[Stats], Any] | None,
                 interval: float):
        self._snapshot = snapshot
        self._stop = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.address: tuple[str, int] | None = None
        if port is not None:
            self._serve(port)
        if on_stats is not None:
            threading.Thread(target=self._report, args=(on_stats, interval), name="sluice-stats", daemon=True).start()

    def _serve(self, port: int) -> None:
        live = self

        class Handler(http.server.BaseHTTPRequestHandler):
            # The socket timeout: a connection idle this long is dropped.
            timeout = _IDLE_TIMEOUT

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?")[0] not in ("/", "/metrics"):
                    self.send_error(404)
                    return
                body = prometheus_text(live._snapshot()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:  # scrapes are not news
                pass

        # Loopback only: the figures are for this machine's exporter or dashboard.
        try:
            self._server = _Server(("127.0.0.1", port), Handler, _MAX_CONNECTIONS)
        except OSError as e:
            why = "is in use" if e.errno == errno.EADDRINUSE else f"cannot be served ({e.strerror or e})"
            raise OSError(e.errno, f"stats_port {port}: 127.0.0.1:{port} {why}; pass another port, "
                                   f"or stats_port=0 for a free one") from e
        self.address = self._server.server_address[:2]  # type: ignore[assignment]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="sluice-metrics", daemon=True)
        try:
            self._thread.start()
        except BaseException:  # no thread (a limit): ``stop`` would wait for a loop never run
            self._server.server_close()
            self._server = self._thread = None
            raise

    def _report(self, on_stats: Callable[[Stats], Any], interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                on_stats(self._snapshot())
            except Exception:  # a dashboard's bug must not stop training
                log.exception("sluice: on_stats callback failed")

    def connections(self) -> int:
        """Connections the endpoint holds open now (0 once closed)."""
        return 0 if self._server is None else self._server.connections()

    def close_soon(self) -> None:
        """``close`` on a thread of its own: safe from a garbage collection that runs on one
        of the endpoint's threads (``close`` waits for them)."""
        if self._server is None and self._stop.is_set():
            return
        threading.Thread(target=self.close, name="sluice-metrics-close", daemon=True).start()

    def close(self) -> None:
        """Stops the callback, the endpoint and every connection's thread."""
        self._stop.set()
        server, self._server = self._server, None
        if server is not None:
            server.stop()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)
