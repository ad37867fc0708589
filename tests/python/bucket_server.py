"""A loopback S3 bucket for tests: benchmarks/s3_server.py (ranges, listings, ETags that follow a
file's content, injected stalls and 503s, a JSON-lines request log) serving a directory."""

from __future__ import annotations

import contextlib
import json
import pathlib
import socket
import subprocess
import sys
import time

from procs import ROOT_DIR

SERVER = ROOT_DIR / "benchmarks" / "s3_server.py"
KEYS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}


@contextlib.contextmanager
def s3_server(root, *flags):
    """The server on a free loopback port serving `root` (one folder per bucket); yields its
    endpoint URL. Killed on exit."""
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(SERVER), str(root), "--port", str(port), *map(str, flags)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert proc.poll() is None, "s3_server exited"
                assert time.monotonic() < deadline, "s3_server did not start"
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def requests(log: pathlib.Path) -> list[dict]:
    """The requests the server logged so far (it writes each line after answering)."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def object_gets(log: pathlib.Path) -> list[dict]:
    """Logged GETs of object bytes (not listings), once the log has settled: the server writes
    a request's line after answering it, so the last lines of a pass may land a moment after
    the client has its bytes. Waits until two reads 0.2 s apart agree (10 s at most: a hang
    guard, not a speed check)."""
    deadline = time.monotonic() + 10
    got = _gets(log)
    while time.monotonic() < deadline:
        time.sleep(0.2)
        again = _gets(log)
        if len(again) == len(got):
            break
        got = again
    return got


def asked(gets: list[dict]) -> list[tuple[str, str | None]]:
    """The (key, range) pairs `gets` asked for, in the order first asked, each once: a hedge
    repeats a slow request, and whether one is slow enough depends on how busy the machine
    is, so tests count what was asked for, not how often."""
    return list(dict.fromkeys((g["key"], g.get("range")) for g in gets))


def _gets(log: pathlib.Path) -> list[dict]:
    return [r for r in requests(log) if r["method"] == "GET" and r["key"] and r["status"] in (200, 206)]
