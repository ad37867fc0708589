import pathlib
import signal

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURE_IMAGES = ROOT / "examples" / "fixtures" / "images"


@pytest.fixture
def images_dir() -> pathlib.Path:
    return FIXTURE_IMAGES


def pytest_configure(config: pytest.Config) -> None:
    # Started as a background job of a non-interactive shell, the suite inherits SIGINT as
    # ignored, and so would every interpreter a test starts: Ctrl-C tests would then wait
    # forever. A handler here makes the kernel give children the default disposition on exec.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
