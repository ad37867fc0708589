"""A digest of what a Python function computes, so a checkpoint is not resumed under a
function whose body changed while its name stayed the same.

The digest covers the function's bytecode, constants (nested functions and lambdas
included), the names it uses, default arguments, closure cell values and the plain-data
globals it reads (numbers, strings, bytes, tuples of them). Values are encoded canonically
— never by ``id()``, address or ``hash()`` — so the same source gives the same digest in
another process or run of the same Python version. Objects without a canonical form are
pickled (protocol 4) or, failing that, cloudpickled; an object that cannot be encoded
counts by its type's name.

>>> from sluice._fingerprint import digest
>>> digest(lambda s: s) == digest(lambda s: s)
True
>>> digest(lambda s: s) == digest(lambda s: {"id": s["id"] + 1})
False
"""

from __future__ import annotations

import functools
import hashlib
import pickle
import types
from typing import Any, Callable

# Nesting limit for containers and functions reached through closures and globals.
_MAX_DEPTH = 8


def digest(fn: Callable[..., Any]) -> str:
    """A 16-hex-digit digest of ``fn``'s code and captured values (stable across processes)."""
    h = hashlib.sha256()
    try:
        _Encoder(h).value(fn, 0)
    except Exception as e:  # noqa: BLE001 - a digest must never fail a pipeline's build
        h.update(b"!unencodable:" + type(e).__name__.encode())
    return h.hexdigest()[:16]


class _Encoder:
    def __init__(self, h: "hashlib._Hash"):
        self.h = h
        # Functions being encoded (cycle guard only; ids never reach the digest).
        self.active: set[int] = set()

    def tag(self, t: str, payload: bytes = b"") -> None:
        self.h.update(t.encode() + len(payload).to_bytes(8, "little") + payload)

    def value(self, v: Any, depth: int) -> None:
        if depth > _MAX_DEPTH:
            self.tag("deep", _qualname(type(v)).encode())
        elif v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
            self.tag(type(v).__name__, repr(v).encode())
        elif isinstance(v, (tuple, list)):
            self.tag(type(v).__name__, str(len(v)).encode())
            for x in v:
                self.value(x, depth + 1)
        elif isinstance(v, dict):
            self.tag("dict", str(len(v)).encode())
            for k, x in v.items():
                self.value(k, depth + 1)
                self.value(x, depth + 1)
        elif isinstance(v, (set, frozenset)):
            # Iteration order follows hash randomization: encode members apart, sorted.
            parts = sorted(_sub_digest(x, depth + 1) for x in v)
            self.tag(type(v).__name__, b"".join(parts))
        elif isinstance(v, types.CodeType):
            self.code(v, depth)
        elif isinstance(v, (types.FunctionType, types.MethodType, functools.partial)):
            self.function(v, depth)
        elif isinstance(v, types.ModuleType):
            self.tag("module", v.__name__.encode())
        elif isinstance(v, type):
            self.tag("type", _qualname(v).encode())
        elif _is_ndarray(v) and not v.dtype.hasobject:
            self.tag("ndarray", f"{v.dtype.str}{v.shape}".encode())
            # Without a copy when contiguous (a captured lookup table may be large).
            self.h.update(memoryview(v if v.flags.c_contiguous else v.copy()).cast("B"))
        elif callable(v) and isinstance(getattr(type(v), "__call__", None), types.FunctionType):
            # A callable object: its class's __call__ and its attributes.
            self.tag("callable", _qualname(type(v)).encode())
            self.function(type(v).__call__, depth)
            self.value(getattr(v, "__dict__", None), depth + 1)
        else:
            self.tag("object", _qualname(type(v)).encode() + _pickled(v))

    def function(self, fn: Any, depth: int) -> None:
        if id(fn) in self.active:
            self.tag("recursion", _qualname(fn).encode())
            return
        self.active.add(id(fn))
        try:
            if isinstance(fn, functools.partial):
                self.tag("partial")
                self.value(fn.func, depth + 1)
                self.value(fn.args, depth + 1)
                self.value(fn.keywords, depth + 1)
            elif isinstance(fn, types.MethodType):
                self.tag("method")
                self.value(fn.__func__, depth + 1)
                self.value(fn.__self__, depth + 1)
            else:
                self.tag("function", getattr(fn, "__qualname__", "").encode())
                self.code(fn.__code__, depth)
                self.value(fn.__defaults__, depth + 1)
                self.value(fn.__kwdefaults__, depth + 1)
                cells = fn.__closure__ or ()
                self.tag("closure", str(len(cells)).encode())
                for cell in cells:
                    try:
                        contents = cell.cell_contents
                    except ValueError:  # an empty cell
                        self.tag("empty")
                        continue
                    self.value(contents, depth + 1)
                self.globals_read(fn, depth)
        finally:
            self.active.discard(id(fn))

    def code(self, co: types.CodeType, depth: int) -> None:
        self.tag("code", co.co_code)
        self.tag("names", "\0".join(co.co_names).encode())
        self.tag("args", f"{co.co_argcount},{co.co_kwonlyargcount},{co.co_flags}".encode())
        self.tag("consts", str(len(co.co_consts)).encode())
        for c in co.co_consts:
            self.value(c, depth + 1)

    def globals_read(self, fn: types.FunctionType, depth: int) -> None:
        # Plain data the function reads from its module (a constant it scales by); modules,
        # functions and classes it calls count by name only, through co_names.
        g = fn.__globals__
        for name in sorted(set(_all_names(fn.__code__))):
            if name in g and _plain(g[name]):
                self.tag("global", name.encode())
                self.value(g[name], depth + 1)


def _all_names(co: types.CodeType) -> list[str]:
    names = list(co.co_names)
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            names += _all_names(c)
    return names


def _plain(v: Any, depth: int = 0) -> bool:
    if v is None or isinstance(v, (bool, int, float, complex, str, bytes)):
        return True
    if isinstance(v, (tuple, frozenset)) and depth < 3:
        return all(_plain(x, depth + 1) for x in v)
    return False


def _sub_digest(v: Any, depth: int) -> bytes:
    sub = hashlib.sha256()
    _Encoder(sub).value(v, depth)
    return sub.digest()


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', type(obj).__name__)}"


def _is_ndarray(v: Any) -> bool:
    t = type(v)
    return t.__module__ == "numpy" and t.__name__ == "ndarray"


def _pickled(v: Any) -> bytes:
    try:
        return pickle.dumps(v, protocol=4)
    except Exception:  # noqa: BLE001 - fall back to cloudpickle, then to the type name
        pass
    try:
        import cloudpickle

        return cloudpickle.dumps(v, protocol=4)
    except Exception:  # noqa: BLE001
        return b"?"
