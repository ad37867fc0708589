"""The ``sluice`` console script of the wheel: the Rust command line (crates/sluice-cli),
run in this process through the extension, so the wheel carries one implementation of the CLI
and no second binary. ``sluice --help`` lists the commands (run, plan, profile, bench,
report: ``sluice report pipeline.toml -o report.html`` runs a pipeline file and writes its
HTML report). ``sluice serve`` and ``sluice service status|stop|list`` manage a shared service on
a Ray cluster (``sluice.service``: they need Ray, so they run in Python)."""

from __future__ import annotations

import signal
import sys

from . import _native


def main(argv: list[str] | None = None) -> int:
    """Runs ``sluice`` with ``argv`` (program name first; default: this process's arguments)
    and returns the exit status. The CLI writes to the process's stdout/stderr file descriptors,
    not to ``sys.stdout``."""
    if argv is None:
        argv = sys.argv
        # The process is the CLI and nothing else, so Ctrl-C and a closed pipe (`sluice plan
        # ... | head`) end it at once, as they end the native binary; Python's handlers would
        # only set a flag the Rust loop never looks at.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if hasattr(signal, "SIGPIPE"):
            signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if len(argv) > 1 and argv[1] in ("serve", "service"):
        from .service import main as service_main

        return service_main([str(a) for a in argv[1:]])
    sys.stdout.flush()
    return _native.cli_main([str(a) for a in argv])


if __name__ == "__main__":
    sys.exit(main())
