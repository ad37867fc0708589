"""Built-in text ops (Rust, GIL-free): tokenization with any Hugging Face tokenizer — a
``tokenizer.json`` path, a ``tokenizers.Tokenizer`` or a ``transformers`` fast tokenizer (BPE,
WordPiece, Unigram; fully offline) — and id-sequence ops. Ids equal the ``tokenizers``
package's encodings. Every op reads ``field`` and writes ``out`` (default: ``field``); a bad
argument raises ``ValueError`` or ``TypeError`` naming the op, the argument and the value.

>>> import sluice, sluice.text as T
>>> ds = sluice.from_items([{"input_ids": [5, 6, 7]}])
>>> ds = ds.map(T.truncate(2)).map(T.add_tokens(bos=1, eos=2)).map(T.pad(6))
>>> ds.take(1)[0]["input_ids"].tolist()
[1, 5, 6, 2, 0, 0]
"""

from __future__ import annotations

import os
from typing import Any

from . import _spec
from ._native import Op


def _op(name: str, **params: Any) -> Op:
    return _spec.op(f"text.{name}", params)


def _tokenizer_source(tokenizer: Any) -> dict[str, str]:
    """The spec's ``tokenizer`` (a path) or ``tokenizer_json`` (an object's JSON)."""
    if isinstance(tokenizer, (str, os.PathLike)):
        return {"tokenizer": os.fspath(tokenizer)}
    # A transformers fast tokenizer wraps a tokenizers.Tokenizer: that one does the encoding.
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        tokenizer = backend
    to_str = getattr(tokenizer, "to_str", None)
    if callable(to_str):
        json = to_str()
        if isinstance(json, str):
            return {"tokenizer_json": json}
    if getattr(tokenizer, "is_fast", None) is False:
        raise TypeError(
            f"text.tokenize: {type(tokenizer).__name__} is a slow (Python) transformers "
            "tokenizer; load it with use_fast=True (AutoTokenizer does by default) or pass "
            "its tokenizer.json path"
        )
    raise TypeError(
        "text.tokenize: tokenizer must be a tokenizer.json path, a tokenizers.Tokenizer or a "
        f"transformers fast tokenizer, got {type(tokenizer).__name__}"
    )


def tokenize(
    tokenizer: Any,
    max_length: int | None = None,
    add_special_tokens: bool = True,
    *,
    field: str = "text",
    out: str = "input_ids",
    dtype: str = "int64",
    attention_mask: str | None = None,
    errors: str = "strict",
) -> Op:
    """Encodes ``field`` (str, or UTF-8 bytes such as a WebDataset ``txt`` member) into ids
    (``dtype`` int64 or int32), keeping at most ``max_length``; ``attention_mask`` names a
    field to receive a mask of ones. Invalid UTF-8 is an error naming the sample, or becomes
    U+FFFD with ``errors="replace"``.

    ``tokenizer`` is a ``tokenizer.json`` path, a ``tokenizers.Tokenizer``, or a
    ``transformers`` fast tokenizer (its ``backend_tokenizer`` encodes). An object is
    captured as its JSON (``Tokenizer.to_str()``) in the op's spec when ``tokenize`` is
    called — later changes to it do not reach the op — so the op pickles, runs in worker
    processes and on Ray without a file, and checkpoints and plans know the tokenizer by its
    content. The ids are those of ``tok.encode(text, add_special_tokens=...).ids``, including
    any truncation or padding configured on the tokenizer. A missing or invalid tokenizer
    fails when the op is created.

    >>> import sluice, sluice.text as T
    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> tok = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1, "world": 2}, unk_token="[UNK]"))
    >>> tok.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> ds = sluice.from_items([{"text": "hello big world"}]).map(T.tokenize(tok))
    >>> ds.take(1)[0]["input_ids"].tolist(), tok.encode("hello big world").ids
    ([1, 0, 2], [1, 0, 2])
    """
    return _op("tokenize", **_tokenizer_source(tokenizer), max_length=max_length,
               add_special_tokens=add_special_tokens, field=field, out=out, dtype=dtype,
               attention_mask=attention_mask, errors=None if errors == "strict" else errors)


def truncate(length: int, *, field: str = "input_ids", out: str | None = None) -> Op:
    """Keeps the first ``length`` ids."""
    return _op("truncate", length=length, field=field, out=out)


def add_tokens(bos: int | None = None, eos: int | None = None, *, field: str = "input_ids",
               out: str | None = None) -> Op:
    """Prepends ``bos`` and/or appends ``eos`` (ids that do not fit the field's dtype, e.g.
    int32, fail the sample)."""
    return _op("add_tokens", bos=bos, eos=eos, field=field, out=out)


class PackStep:
    """``ds.map(sluice.text.pack(...))``: the same as ``ds.pack(...)`` (a stateful step, not an
    element-wise op — it joins samples)."""

    def __init__(self, **kwargs: Any):
        self.kwargs = kwargs

    def __repr__(self) -> str:
        return f"pack({', '.join(f'{k}={v!r}' for k, v in self.kwargs.items())})"


def pack(
    length: int,
    *,
    field: str = "input_ids",
    separator: int | None = None,
    drop_remainder: bool = False,
    pad_id: int = 0,
) -> PackStep:
    """GPT-style packing into blocks of ``length`` tokens (at most 2**24); see ``Dataset.pack``.
    Each sample that adds tokens is one segment; an empty sample without a ``separator`` adds
    none and takes no segment id.

    >>> import sluice, sluice.text as T
    >>> ds = sluice.from_items([{"input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}])
    >>> [b["segment_ids"].tolist() for b in ds.map(T.pack(4, separator=0))]
    [[1, 1, 1, 1], [1, 1, 1, 0]]
    """
    return PackStep(length=length, field=field, separator=separator, drop_remainder=drop_remainder, pad_id=pad_id)


def pad(length: int, pad_id: int = 0, *, field: str = "input_ids", mask: str | None = None,
        out: str | None = None, max_tokens: int | None = None) -> Op:
    """Right-pads with ``pad_id`` to ``length`` (longer sequences are an error: truncate
    first); ``mask`` names a field to receive 1 for tokens and 0 for padding. ``length`` above
    ``max_tokens`` (default 2**24) is refused when the op is made."""
    return _op("pad", length=length, pad_id=pad_id, field=field, mask=mask, out=out, max_tokens=max_tokens)
