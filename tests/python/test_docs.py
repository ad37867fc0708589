"""The guides' examples run as written."""

import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
GUIDES = ["REPRODUCIBILITY.md", "INSPECTING.md", "TEXT.md"]
# Guides whose examples need an optional package.
NEEDS = {"TEXT.md": "tokenizers"}


def blocks(name):
    text = (DOCS / name).read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("guide", GUIDES)
def test_guide_examples_run(guide):
    if guide in NEEDS:
        pytest.importorskip(NEEDS[guide])
    found = blocks(guide)
    assert found, guide
    for i, code in enumerate(found):
        try:
            exec(compile(code, f"{guide} example {i + 1}", "exec"), {})
        except Exception as e:  # pragma: no cover - the message is the point
            raise AssertionError(f"{guide} example {i + 1} failed: {e!r}\n{code}") from e
