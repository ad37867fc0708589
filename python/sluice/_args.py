"""Argument checks shared by the dataset's methods and the sources: Python values to what
``sluice._native`` takes, with errors naming the argument."""

from __future__ import annotations

from typing import Any, Sequence, Union

#: A path, directory, glob or URL, or a list of them.
PathLike = Union[str, Sequence[str]]


def _int(name: str, value: Any, minimum: int, allow_none: bool = False) -> Any:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _paths(p: PathLike) -> list[str]:
    if isinstance(p, (str, bytes)) or hasattr(p, "__fspath__"):
        return [str(p)]
    return [str(x) for x in p]
