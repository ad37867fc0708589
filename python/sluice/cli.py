"""The ``sluice`` console script of the wheel: the Rust command line (crates/sluice-cli),
run in this process through the extension, so the wheel carries one implementation of the CLI
and no second binary. ``sluice --help`` lists the commands (run, plan, profile, bench);
``sluice report pipeline.toml -o report.html`` runs a pipeline file and writes its HTML report
(drawn in Rust, ``sluice.report``); it stays here, not in the Rust command, for its
``--optimize`` (``iter(optimize=True)``'s plan in the report)."""

from __future__ import annotations

import signal
import sys

from . import _native


def report(args: list[str]) -> int:
    """``sluice report PIPELINE [-o report.html] [--batches N] [--optimize]``."""
    import argparse

    from .sources import read_pipeline

    ap = argparse.ArgumentParser(prog="sluice report", description="Run a pipeline file and write its HTML report.")
    ap.add_argument("pipeline", help="pipeline file (TOML or JSON)")
    ap.add_argument("-o", "--out", default="report.html", help="where to write the page (default: report.html)")
    ap.add_argument("--batches", type=int, default=None, help="stop after N outputs (default: the whole run)")
    ap.add_argument("--optimize", action="store_true", help="profile and optimise first; the plan shows in the report")
    a = ap.parse_args(args)
    if a.batches is not None and a.batches < 1:
        ap.error("--batches must be >= 1")
    try:
        ds = read_pipeline(a.pipeline)
        it = ds.iter(**ds.file_options, optimize=a.optimize)  # type: ignore[attr-defined]
    except (OSError, ValueError, TypeError) as e:
        print(f"sluice report: {e}", file=sys.stderr)
        return 1
    failed = 0
    try:
        for n, _ in enumerate(it, 1):
            if a.batches is not None and n >= a.batches:
                break
    except Exception as e:  # the report shows the failing op; the exit status says it failed
        print(f"sluice report: the run failed: {e}", file=sys.stderr)
        failed = 1
    finally:
        it.close()
    print(it.report(a.out))
    return failed


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
    sys.stdout.flush()
    if len(argv) > 1 and argv[1] == "report":
        return report([str(a) for a in argv[2:]])
    return _native.cli_main([str(a) for a in argv])


if __name__ == "__main__":
    sys.exit(main())
