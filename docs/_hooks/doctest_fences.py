"""A griffe extension for the API reference: fences the docstrings' doctests (``>>>`` lines,
their continuations and expected output) as ``pycon`` code, so Markdown shows them as code
instead of reading ``[[0, 2], [1, 3]]`` as a link."""

from __future__ import annotations

from typing import Any

import griffe


def fence(text: str) -> str:
    out: list[str] = []
    in_example = False
    for line in text.splitlines():
        starts = line.lstrip().startswith(">>>")
        if starts and not in_example:
            out.append("```pycon")
            in_example = True
        elif in_example and not line.strip():
            out.append("```")
            in_example = False
        out.append(line)
    if in_example:
        out.append("```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    def on_instance(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = fence(obj.docstring.value)
