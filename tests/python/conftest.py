import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURE_IMAGES = ROOT / "examples" / "fixtures" / "images"


@pytest.fixture
def images_dir() -> pathlib.Path:
    return FIXTURE_IMAGES
