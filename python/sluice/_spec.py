"""Built-in op specs: Python arguments to the JSON form the engine reads.

The engine checks every argument and names the op, the argument and the value when one is
bad (``image.resize: argument size=-5 is invalid: ...``). This module only converts values
JSON can carry (numpy scalars and arrays, tuples, paths) and refuses those it cannot carry
faithfully — non-finite floats and integers beyond 64 bits — with the same kind of message.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from typing import Any, Collection

from ._native import Op


def op(name: str, params: dict[str, Any], *, keep_none: Collection[str] = ()) -> Op:
    """The built-in op ``name`` (``"image.resize"``) with ``params``; ``None`` values are left
    out (the engine's default applies) except for the keys in ``keep_none``, where ``None``
    means something of its own (``mel(norm=None)``)."""
    spec = {"op": name}
    for key, value in params.items():
        if value is None and key not in keep_none:
            continue
        spec[key] = _plain(name, key, value)
    return Op(json.dumps(spec))


def _plain(op: str, key: str, value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        v = int(value)
        if not -(2**63) <= v < 2**64:
            raise ValueError(f"{op}: argument {key}={v} is invalid: out of the 64-bit integer range")
        return v
    if isinstance(value, numbers.Real):
        v = float(value)
        if not math.isfinite(v):
            raise ValueError(f"{op}: argument {key}={v} is invalid: must be finite")
        return v
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return [_plain(op, key, v) for v in value]
    if hasattr(value, "tolist"):  # numpy arrays and scalars (np.bool_ included)
        return _plain(op, key, value.tolist())
    raise TypeError(f"{op}: argument {key} has unsupported type {type(value).__name__}")
