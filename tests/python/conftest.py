import contextlib
import logging
import os
import pathlib
import re
import shutil
import signal
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURE_IMAGES = ROOT / "examples" / "fixtures" / "images"


@pytest.fixture
def images_dir() -> pathlib.Path:
    return FIXTURE_IMAGES


@pytest.fixture
def sluice_log(caplog):
    """``with sluice_log(pattern):`` asserts that the block logs a WARNING matching
    ``pattern`` on the ``sluice`` logger (where skips and retries go, not ``warnings``)."""

    @contextlib.contextmanager
    def expect(pattern):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="sluice"):
            yield
        got = [r.getMessage() for r in caplog.records if r.name == "sluice" and r.levelno == logging.WARNING]
        assert any(re.search(pattern, m) for m in got), f"no sluice warning matching {pattern!r} in {got}"

    return expect


def pytest_configure(config: pytest.Config) -> None:
    # Started as a background job of a non-interactive shell, the suite inherits SIGINT as
    # ignored, and so would every interpreter a test starts: Ctrl-C tests would then wait
    # forever. A handler here makes the kernel give children the default disposition on exec.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Objects the tests read from loopback buckets go to a cache of this session (and of
    # every process it starts), not the user's ~/.cache/sluice/objects.
    if "SLUICE_CACHE_DIR" not in os.environ:
        config._sluice_cache_dir = os.environ["SLUICE_CACHE_DIR"] = tempfile.mkdtemp(prefix="sluice-test-objects-")


def pytest_unconfigure(config: pytest.Config) -> None:
    made = getattr(config, "_sluice_cache_dir", None)
    if made:
        shutil.rmtree(made, ignore_errors=True)


JAX_IMPORTERS = {"test_jax.py", "test_docs.py", "frameworks.py"}


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    # Importing jax starts its thread pool, and JAX warns (rightly) that forking a
    # multithreaded process may deadlock; later tests start Ray and worker processes. So the
    # tests that import jax (its own, the README's JAX example, iter_jax's doctest) run last,
    # with nothing forking after them. The sort is stable: the rest keep their order.
    items.sort(key=lambda item: item.fspath.basename in JAX_IMPORTERS)
