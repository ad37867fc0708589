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


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _bytes(name: str, value: Any) -> int:
    """A byte count: an int, or a string with a unit (``"55MB"``, ``"1.5 GiB"``)."""
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        num = text.rstrip("kmgtib")
        unit = text[len(num):]
        try:
            if unit not in _UNITS:
                raise ValueError
            return _int(name, int(float(num) * _UNITS[unit]), 0)
        except ValueError:
            raise ValueError(f"{name} must be bytes (an int) or a size such as '20GB' or '512MiB', got {value!r}") from None
    return _int(name, value, 0)


def _cache(cache_dir: Any, cache_limit: Any) -> "tuple[str | None, int | None] | None":
    """``cache_dir=`` / ``cache_limit=`` of a source, as ``_native`` takes them: ``None`` for
    the default cache, ``(dir, limit)`` otherwise (limit 0: no cache)."""
    if cache_dir is False:
        return (None, 0)
    if cache_dir is True:
        cache_dir = None
    if cache_dir is not None and not (isinstance(cache_dir, str) or hasattr(cache_dir, "__fspath__")):
        raise TypeError(f"cache_dir must be a directory path, None (the default cache) or False (no cache), got {cache_dir!r}")
    limit = None if cache_limit is None else _bytes("cache_limit", cache_limit)
    if cache_dir is None and limit is None:
        return None
    return (None if cache_dir is None else str(cache_dir), limit)
