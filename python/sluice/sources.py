"""Sources: where a pipeline's samples come from — a range, memory, files, images, text and
JSON lines, Parquet, CSV, TFRecord, WebDataset shards, Arrow and pandas, and a mix of datasets. Each is
recorded (``_recipe.source``) so the dataset pickles as its source spec or its call.

Every ``read_*`` takes ``cache_dir=`` / ``cache_limit=``: objects read from a bucket are kept
in a node-local cache shared by every process on the machine (default
``$SLUICE_CACHE_DIR`` or ``~/.cache/sluice/objects``, at most half the free disk;
``cache_limit`` in bytes or ``"20GB"``; ``cache_dir=False`` turns it off), so a second epoch
or another job reads them from disk. See docs/READING.md, "The object cache"."""

from __future__ import annotations

import logging
import os
from typing import Any, Iterable, Mapping, Sequence

from . import _native, _recipe
from ._args import PathLike, _cache, _int, _paths
from .dataset import Dataset

# Skips and retries are reported on the "sluice" logger, where users route their own logs.
logger = logging.getLogger("sluice")

# Sources -----------------------------------------------------------------------------------
@_recipe.source
def range(n: int) -> Dataset:  # noqa: A001 - the brief's name
    """Samples ``{"id": i}`` for i in 0..n."""
    return Dataset(_native.Dataset.range(_int("n", n, 0)))


@_recipe.source
def mix(
    datasets: Sequence[Dataset],
    weights: Sequence[float] | None = None,
    seed: int | None = None,
    stop: str = "first_exhausted",
) -> Dataset:
    """Interleaves ``datasets`` in proportion to ``weights`` (equal by default):
    deterministic, and tightly balanced — after any n samples each dataset has contributed
    within about one sample of ``n × weight`` (smooth weighted round-robin, not coin flips);
    ``seed`` picks the phase. ``stop``: ``"first_exhausted"`` ends when one dataset runs out,
    ``"all_exhausted"`` keeps going with the rest, ``"restart"`` starts exhausted ones over
    until every dataset was used up once. The mix has random access, so ``shuffle``,
    ``shard``, ``repeat`` and ``state_dict`` work on it.

    Each input is a random-access source with deterministic maps and, if you like, its own
    ``shuffle``, ``shard`` and ``repeat(n)``, which it keeps: the mix takes each input's
    samples in that input's own order (``mix([a.shuffle(seed=1), b.shuffle(seed=2)])``, as
    with Grain or tf.data), epoch after epoch; a restarted input reshuffles. An input's
    ``shuffle()`` without a seed draws one from ``seed`` and its place in the list. Random
    augmentations, filters and batching go after the mix.

    >>> import sluice
    >>> a = sluice.from_items([{"src": "a"}] * 6)
    >>> b = sluice.from_items([{"src": "b"}] * 3)
    >>> "".join(s["src"] for s in sluice.mix([a, b], weights=[2, 1], stop="all_exhausted"))
    'abaabaaba'
    """
    if isinstance(datasets, Dataset) or not all(isinstance(d, Dataset) for d in datasets):
        raise TypeError("mix needs a list of sluice Datasets")
    w = None if weights is None else [float(x) for x in weights]
    return Dataset(_native.mix([d._native for d in datasets], w, _int("seed", seed, 0, allow_none=True) or 0, str(stop)))


@_recipe.source
def from_items(items: Iterable[Any]) -> Dataset:
    """Samples from memory: dicts as they are, anything else as ``{"item": x}``."""
    rows = [x if isinstance(x, dict) else {"item": x} for x in items]
    return Dataset(_native.Dataset.from_items(rows))


@_recipe.source
def read_files(paths: PathLike, *, cache_dir: Any = None, cache_limit: Any = None) -> Dataset:
    """``{path, bytes}`` per file of paths, directories (recursive) or globs, in sorted order.
    Missing paths raise FileNotFoundError here, before iteration."""
    return Dataset(_native.read_files(_paths(paths), _cache(cache_dir, cache_limit)))


@_recipe.source
def read_images(
    paths: PathLike, labels: str | None = "parent_dir", *, cache_dir: Any = None, cache_limit: Any = None
) -> Dataset:
    """``{path, bytes, label}`` per image file; ``label`` (an int) indexes the sorted
    parent-directory names, which ``ds.class_names`` lists (ImageFolder's ``classes``) on
    this dataset and every one derived from it. ``labels=None``: ``{path, bytes}`` and
    ``class_names`` is None. Decoding is a separate op (``sluice.image.decode``)."""
    if labels not in ("parent_dir", None):
        raise ValueError(f"labels must be 'parent_dir' or None, got {labels!r}")
    return Dataset(_native.read_images(_paths(paths), labels == "parent_dir", _cache(cache_dir, cache_limit)))


@_recipe.source
def read_text(
    paths: PathLike,
    errors: str = "strict",
    *,
    on_error: str = "raise",
    cache_dir: Any = None,
    cache_limit: Any = None,
) -> Dataset:
    """``{text}`` per non-empty line of local files or ``s3://`` / ``gs://`` / ``http(s)://``
    objects. Invalid UTF-8 raises naming ``file:line``; ``errors="replace"`` substitutes it;
    ``on_error="skip"`` checks every line when the files are opened and leaves such lines out
    (a warning on the ``sluice`` logger and ``stats()`` count them). Compressed files
    (``.gz``, ``.zst``, ``.bz2``) are decompressed once when opened, into a temporary file."""
    if errors not in ("strict", "replace"):
        raise ValueError(f"errors must be 'strict' or 'replace', got {errors!r}")
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    native, skipped = _native.read_text(_paths(paths), on_error, errors, _cache(cache_dir, cache_limit))
    if skipped:
        logger.warning("read_text skipped %d line(s) that are not UTF-8", skipped)
    return Dataset(native)


@_recipe.source
def read_jsonl(
    paths: PathLike,
    schema: "dict[str, str] | None" = None,
    *,
    on_error: str = "raise",
    errors: str = "strict",
    cache_dir: Any = None,
    cache_limit: Any = None,
) -> Dataset:
    """One sample per JSON-object line (local files or bucket URLs); numeric arrays become
    numpy arrays.

    ``schema`` maps fields to ``"int"``, ``"float"``, ``"bool"`` or ``"str"``: values are
    converted (``"3"`` → 3, ``2.0`` → 2 for int; numbers → text for str) and a value that
    does not convert raises naming ``file:line`` and the field; a listed field missing from a
    line is None; other fields keep their JSON types. Lines are parsed when read, so a bad
    line raises then — unless ``on_error="skip"``: every line is then checked when the
    files are opened, and lines that are not JSON objects, do not fit the schema or are not
    UTF-8 are left out (a warning on the ``sluice`` logger and ``stats()`` count them).
    ``errors="replace"`` substitutes invalid UTF-8. Compressed files (``.gz``, ``.zst``,
    ``.bz2``) are decompressed once when opened, into a temporary file, and then read like
    plain ones (docs/READING.md, "Compressed files").

    >>> import sluice, tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "x.jsonl")
    >>> _ = open(p, "w").write('{"id": "1"}\\nnot json\\n{"id": 2}\\n')
    >>> sluice.read_jsonl(p, schema={"id": "int"}, on_error="skip").take(5)
    [{'id': 1}, {'id': 2}]
    """
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if schema is not None and not isinstance(schema, dict):
        raise TypeError("schema must be a dict {field: type}")
    native, skipped = _native.read_jsonl(
        _paths(paths), dict(schema or {}), on_error, errors, _cache(cache_dir, cache_limit)
    )
    if skipped:
        logger.warning("read_jsonl skipped %d invalid line(s)", skipped)
    return Dataset(native)


@_recipe.source
def read_parquet(
    paths: "PathLike",
    columns: Sequence[str] | None = None,
    *,
    cache_dir: Any = None,
    cache_limit: Any = None,
) -> "Dataset":
    """One sample per row of Parquet files; ``columns`` reads only those (projection).

    Random access by row (index → file, row group, row) from the file footers alone, so
    ``shuffle()`` and ``shard()`` never scan the data. Lists of numbers arrive as numpy arrays.
    """
    if isinstance(columns, str):
        raise TypeError("columns must be a list of names, not a string")
    return Dataset(
        _native.read_parquet(
            _paths(paths), None if columns is None else list(columns), _cache(cache_dir, cache_limit)
        )
    )


@_recipe.source
def read_csv(
    paths: "PathLike",
    schema: Mapping[str, str] | None = None,
    *,
    delimiter: str = ",",
    has_header: bool = True,
    on_error: str = "raise",
    cache_dir: Any = None,
    cache_limit: Any = None,
) -> "Dataset":
    """One sample per CSV record, with random access through a record-offset index.

    ``schema`` maps column names to ``"int"``, ``"float"``, ``"bool"`` or ``"str"``; other
    columns are inferred from the first 1000 records. Quoted fields may hold delimiters and
    newlines. A record that does not parse — a wrong number of fields, bytes that are not
    UTF-8, a value not of its column's type — raises naming file and line (a wrong field
    count when the files are opened, the others when the record is read). With
    ``on_error="skip"`` every record is checked when the files are opened and such records
    are left out: a warning on the ``sluice`` logger and ``stats()`` count them. Compressed
    files (``x.csv.gz``, ``.zst``, ``.bz2``; listed from directories too) are decompressed once
    when opened, into a temporary file, and then read like plain ones.
    """
    _on_error(on_error)
    native, skipped = _native.read_csv(
        _paths(paths), dict(schema or {}), delimiter, bool(has_header), on_error, _cache(cache_dir, cache_limit)
    )
    if skipped:
        logger.warning("read_csv skipped %d record(s) that did not parse", skipped)
    return Dataset(native)


def _on_error(on_error: str) -> None:
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")


@_recipe.source
def read_webdataset(
    shards: "PathLike",
    *,
    rank: int | None = None,
    world_size: int | None = None,
    shuffle_shards: "bool | int" = False,
    on_error: str = "raise",
    max_member_size: int = 1 << 30,
    cache_dir: Any = None,
    cache_limit: Any = None,
    index: "bool | str | os.PathLike[str] | None" = None,
) -> "Dataset":
    """Samples ``{__key__, __url__, <ext>: bytes}`` from WebDataset tar shards.

    With ``index=True`` (or a directory) the samples are random-access: each shard's member
    index says where every sample lies, so ``shuffle()`` is a true global permutation,
    ``shard()`` is exact, resuming is O(1) and a sample is one ranged read of its members.
    ``index=True`` reads ``<shard>.idx`` beside each shard (``write_shards`` writes them) and
    builds missing ones in memory by walking the shard's headers once; ``index="<dir>"``
    keeps them in that directory (local or a bucket prefix), building and writing the missing
    ones — for shards in a bucket you cannot write to. ``rank``/``world_size`` then split by
    sample, as ``shard(rank, world_size)`` does; ``shuffle_shards`` does not apply (use
    ``shuffle()``). Indexed shards must be uncompressed tar.

    Without an index the shards stream: use ``shuffle_buffer`` (not ``shuffle``). With ``rank`` and
    ``world_size`` each rank reads every ``world_size``-th shard (shard-level sharding).
    ``shuffle_shards=True`` permutes the shard order every epoch from the iteration's seed
    and epoch (``shuffle_shards=<int>``: from that seed); ranks split the permuted list, so
    they stay disjoint and get other shards each epoch. Combine it with ``shuffle_buffer``
    for sample-level mixing — the WebDataset recipe, deterministic and resumable here.

    Only regular files become fields (directory entries are passed over). A member that
    cannot be one — a symbolic or hard link, a FIFO or device, an absolute or ``..`` path, a
    second member for a field its sample has, or one declaring more than
    ``max_member_size`` bytes (default 1 GiB, checked before reading) — raises naming shard
    and member; with ``on_error="skip"`` it is left out, counted in ``stats()`` and reported
    by a warning on the ``sluice`` logger when the iteration ends. A damaged tar (bad
    header, cut short) always raises. Compressed shards (``.tar.gz``/``.tgz``, ``.tar.zst``,
    ``.tar.bz2``) are decompressed as they are read.
    """
    if isinstance(shuffle_shards, bool):
        shuffle, seed = shuffle_shards, None
    elif isinstance(shuffle_shards, int) and shuffle_shards >= 0:
        shuffle, seed = True, shuffle_shards
    else:
        raise TypeError(f"shuffle_shards must be a bool or a seed (int >= 0), got {shuffle_shards!r}")
    _on_error(on_error)
    if isinstance(max_member_size, bool) or not isinstance(max_member_size, int) or max_member_size <= 0:
        raise ValueError(f"max_member_size must be a positive int (bytes), got {max_member_size!r}")
    if index is None or index is False:
        return Dataset(
            _native.read_webdataset(
                _paths(shards), rank, world_size, shuffle, seed, on_error, max_member_size, _cache(cache_dir, cache_limit)
            )
        )
    if index is True:
        index_dir = None
    elif isinstance(index, (str, os.PathLike)):
        index_dir = os.fspath(index)
    else:
        raise TypeError(f"index must be True, False or a directory, got {index!r}")
    if shuffle:
        raise ValueError("shuffle_shards does not apply with index=: shuffle() is a global permutation of the samples")
    if (rank is None) != (world_size is None):
        raise ValueError("give both rank and world_size, or neither")
    ds = Dataset(
        _native.read_webdataset(
            _paths(shards), None, None, False, None, on_error, max_member_size, _cache(cache_dir, cache_limit),
            index=True, index_dir=index_dir,
        )
    )
    return ds if rank is None else ds.shard(rank, world_size)


@_recipe.source
def read_tfrecord(
    paths: "PathLike",
    *,
    compression: str | None = None,
    index: "PathLike | None" = None,
    features: Sequence[str] | None = None,
    parse: bool = True,
    cache_dir: Any = None,
    cache_limit: Any = None,
) -> "Dataset":
    """One sample per TFRecord record, with random access through a record-offset index.

    Opening finds where every record starts (one small read per record header, checking the
    length's CRC), or reads ``index``: index files in the ``tfrecord`` pip package's format
    (``offset length`` per line), one per data file in the order ``paths`` expand to. A read
    checks both CRCs; a mismatch or a file cut short raises naming the file, the record and
    its byte offset. ``compression="gzip"`` (or a ``.gz``/``.zst``/``.bz2`` extension): the
    files are decompressed once when opened, into temporary files the index points into.

    Records are parsed as ``tf.train.Example``: each feature becomes a field — ``bytes_list``
    → bytes (one value) or a list of bytes, ``int64_list`` → int (one value) or an int64
    array, ``float_list`` → a float32 array. ``features`` keeps only those named (one a record
    lacks is None). ``parse=False`` gives the raw ``{"record": bytes}``.
    """
    if isinstance(features, str):
        raise TypeError("features must be a list of names, not a string")
    if compression not in (None, "gzip"):
        raise ValueError(f"compression must be None or 'gzip', got {compression!r}")
    native = _native.read_tfrecord(
        _paths(paths),
        compression,
        None if index is None else _paths(index),
        None if features is None else list(features),
        bool(parse),
        _cache(cache_dir, cache_limit),
    )
    return Dataset(native)


def from_arrow(data: Any) -> "Dataset":
    """A dataset over an Arrow table (or anything exporting ``__arrow_c_stream__``: pyarrow
    tables and readers, polars DataFrames, ...). The batches are held in memory."""
    if not hasattr(data, "__arrow_c_stream__"):
        raise TypeError(f"from_arrow needs an Arrow table or stream, got {type(data).__name__}")
    return Dataset(_native.from_arrow_stream(data.__arrow_c_stream__()))


def from_pandas(df: Any) -> "Dataset":
    """A dataset over a pandas DataFrame's rows (its index is dropped)."""
    import pyarrow as pa

    return from_arrow(pa.Table.from_pandas(df, preserve_index=False))


# Your own data -----------------------------------------------------------------------------
def _field(fn: str, field: Any) -> str:
    if not isinstance(field, str) or not field:
        raise TypeError(f"{fn}: field must be a non-empty str, got {field!r}")
    return field


@_recipe.source
def from_source(obj: Any, field: str = "item") -> Dataset:
    """A random-access dataset over any object with ``__len__`` and ``__getitem__`` — a torch
    map-style ``Dataset``, a Hugging Face ``datasets.Dataset``, a Grain data source, a list.
    Sample ``i`` is ``obj[i]``: a dict as it is, anything else as ``{field: obj[i]}``.

    Nothing is copied: items are read when the pipeline needs them (on the engine's threads,
    holding the GIL while ``obj[i]`` runs), so ``shuffle``, ``shard``, ``repeat``,
    ``state_dict`` and elastic resume work in O(1) memory. The length is read once, here.
    An ``obj[i]`` that raises fails the pipeline with an error naming ``i``.

    A checkpoint identifies the object by its type name and length only: it loads into a
    dataset over a changed object of the same type and length (the positions are kept; what
    ``obj[i]`` returns is up to you). Pickling the dataset pickles ``obj`` (by cloudpickle);
    with ``processes=N`` or Ray the items are read here and travel with the work.

    >>> import sluice
    >>> class Squares:
    ...     def __len__(self): return 5
    ...     def __getitem__(self, i): return {"x": i * i}
    >>> sorted(s["x"] for s in sluice.from_source(Squares()).shuffle(seed=0))
    [0, 1, 4, 9, 16]
    >>> sluice.from_source(["a", "b"]).take(2)
    [{'item': 'a'}, {'item': 'b'}]
    """
    field = _field("from_source", field)
    missing = [a for a in ("__len__", "__getitem__") if not hasattr(type(obj), a)]
    if missing:
        raise TypeError(
            f"from_source needs an object with __len__ and __getitem__; "
            f"{type(obj).__name__} has no {' or '.join(missing)}"
        )
    n = type(obj).__len__(obj)
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"from_source: len() of {type(obj).__name__} must be an int, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"from_source: len() of {type(obj).__name__} must be >= 0, got {n}")
    return Dataset(_native.from_source(obj, n, field, type(obj).__qualname__))


@_recipe.source
def from_generator(fn: Any, field: str = "item") -> Dataset:
    """A streaming dataset over the items of ``fn()``, an iterator (a generator function,
    or any callable returning an iterable): dicts as they are, anything else as
    ``{field: item}``. ``fn`` is called anew for each epoch and iteration.

    A stream has no length and no random access: use ``shuffle_buffer(size)``, not
    ``shuffle()``. Resuming (``load_state_dict``) calls ``fn()`` again and skips the items
    already delivered in that epoch, so it resumes exactly only if ``fn`` yields the same
    items each time it is called. A checkpoint identifies ``fn`` by its name only.

    >>> import sluice
    >>> def gen():
    ...     yield from ["a", "b", "c"]
    >>> [s["item"] for s in sluice.from_generator(gen)]
    ['a', 'b', 'c']
    """
    field = _field("from_generator", field)
    if not callable(fn):
        raise TypeError(
            f"from_generator needs a function returning an iterator (called once per epoch), "
            f"got {type(fn).__name__}; pass a generator function, not a generator"
        )
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return Dataset(_native.from_generator(fn, field, name))


@_recipe.source
def from_huggingface(hf_dataset: Any, columns: Sequence[str] | None = None) -> Dataset:
    """A dataset over a local Hugging Face ``datasets.Dataset`` through its Arrow table
    (memory-mapped, no copy; ``from_arrow``). A dataset with an indices mapping (after
    ``select``, ``shuffle``, ``train_test_split``) is taken with the mapping applied.
    ``columns`` reads only those, in that order (leave out a column sluice cannot read).
    Struct columns arrive as their fields, as ``Dataset.flatten()`` names them: an
    ``Image()`` column ``image`` as ``image.bytes`` and ``image.path``
    (``sluice.image.decode(field="image.bytes")`` decodes it)."""
    table = getattr(getattr(hf_dataset, "data", None), "table", None)
    if table is None or not hasattr(hf_dataset, "with_format"):
        raise TypeError(
            f"from_huggingface needs a datasets.Dataset (not a DatasetDict or "
            f"IterableDataset), got {type(hf_dataset).__name__}"
        )
    if columns is not None:
        table = _select(table, columns, "from_huggingface")
    if getattr(hf_dataset, "_indices", None) is not None:
        sub = hf_dataset if columns is None else hf_dataset.select_columns(list(columns))
        table = sub.with_format("arrow")[:]
        if columns is not None:
            table = table.select(list(columns))
    return from_arrow(table)


def _select(table: Any, columns: Sequence[str], fn: str) -> Any:
    """``table``'s ``columns``, in that order; a missing or repeated name is a ValueError."""
    if isinstance(columns, str):
        raise TypeError(f"{fn}: columns must be a list of names, not a string")
    columns = list(columns)
    names = list(table.column_names)
    for i, c in enumerate(columns):
        if c not in names:
            raise ValueError(f"{fn}: no column {c!r} (columns: {', '.join(names)})")
        if c in columns[:i]:
            raise ValueError(f"{fn}: column {c!r} is named twice in columns=[...]")
    return table.select(columns)


def read_pipeline(path: Any) -> Dataset:
    """The dataset a pipeline file describes (TOML or JSON, the CLI's format: ``[source]`` and
    ``[[steps]]``, see README). The file's ``seed`` and ``num_threads`` are in
    ``ds.file_options`` (``ds.iter(**ds.file_options)`` runs it as ``sluice run`` does).

    >>> import sluice
    >>> ds = sluice.read_pipeline("examples/pipeline.toml")
    >>> ds.file_options, len(ds)
    ({'seed': 0, 'num_threads': 2}, 13)
    """
    native, seed, threads = _native.load_pipeline(os.fspath(path))
    ds = Dataset(native)
    ds.file_options = {"seed": seed, "num_threads": threads}  # type: ignore[attr-defined]
    # Pickles as the call: a copy reads the file again.
    ds._recipe = _recipe.Step(None, f"{__name__}:read_pipeline", (os.fspath(path),), {})  # type: ignore[attr-defined]
    return ds
