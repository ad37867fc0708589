"""Child Python processes for tests: never waited on without a timeout.

The test session gives SIGINT its default handler (conftest.py), so a child started here can
be interrupted even when the suite itself was started with SIGINT ignored (a background job
of a non-interactive shell).
"""

from __future__ import annotations

import pathlib
import queue
import subprocess
import sys
import textwrap
import threading

ROOT_DIR = pathlib.Path(__file__).resolve().parents[2]


def run_py(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter; raises `subprocess.TimeoutExpired` past `timeout`."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout
    )


def run_cmd(
    args: list[str], timeout: float = 60, cwd: str | pathlib.Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Runs a command (not necessarily Python) with its output captured; raises
    `subprocess.TimeoutExpired` past `timeout`."""
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


class Child:
    """A running interpreter whose stdout is read line by line, each read with a timeout."""

    def __init__(self, code: str = "", args: list[str] | None = None, **popen):
        """Runs `code` in a fresh interpreter, or the command `args` when given (`popen`: more
        `subprocess.Popen` arguments, e.g. `cwd`, `env`)."""
        self.proc = subprocess.Popen(
            [str(a) for a in args] if args is not None else [sys.executable, "-c", textwrap.dedent(code)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **popen,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def readline(self, timeout: float = 30) -> str:
        """The next line of output, stripped; fails the test if none comes within `timeout`."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no output from the child within {timeout} s") from None
        if line is None:
            self.proc.wait(timeout=timeout)
            raise AssertionError(f"the child exited (rc {self.proc.returncode}): {self.proc.stderr.read()}")
        return line.strip()

    def send_signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def __enter__(self) -> "Child":
        return self

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()
        self.proc.stderr.close()
