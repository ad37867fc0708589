"""Data at rest: Parquet, CSV and WebDataset sources; Arrow and pandas interop; Parquet and
JSONL sinks. Paths may be local paths, directories, globs, or ``s3://`` / ``gs://`` /
``http(s)://`` URLs.

>>> import sluice, tempfile
>>> out = tempfile.mkdtemp()
>>> len(sluice.range(5).write_parquet(out))
1
>>> [s["id"] for s in sluice.read_parquet(out).take(3)]
[0, 1, 2]
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from . import _native, _recipe

if TYPE_CHECKING:  # pragma: no cover
    from .dataset import Dataset, PathLike


def _wrap(native: Any) -> "Dataset":
    from .dataset import Dataset

    return Dataset(native)


def _paths(p: "PathLike") -> list[str]:
    from .dataset import _paths as paths

    return paths(p)


@_recipe.source
def read_parquet(paths: "PathLike", columns: Sequence[str] | None = None) -> "Dataset":
    """One sample per row of Parquet files; ``columns`` reads only those (projection).

    Random access by row (index → file, row group, row) from the file footers alone, so
    ``shuffle()`` and ``shard()`` never scan the data. Lists of numbers arrive as numpy arrays.
    """
    if isinstance(columns, str):
        raise TypeError("columns must be a list of names, not a string")
    return _wrap(_native.read_parquet(_paths(paths), None if columns is None else list(columns)))


@_recipe.source
def read_csv(
    paths: "PathLike",
    schema: Mapping[str, str] | None = None,
    *,
    delimiter: str = ",",
    has_header: bool = True,
    on_error: str = "raise",
) -> "Dataset":
    """One sample per CSV record, with random access through a record-offset index.

    ``schema`` maps column names to ``"int"``, ``"float"``, ``"bool"`` or ``"str"``; other
    columns are inferred from the first 1000 records. Quoted fields may hold delimiters and
    newlines. A record that does not parse — a wrong number of fields, bytes that are not
    UTF-8, a value not of its column's type — raises naming file and line (a wrong field
    count when the files are opened, the others when the record is read). With
    ``on_error="skip"`` every record is checked when the files are opened and such records
    are left out: a warning and ``stats()`` count them.
    """
    _on_error(on_error)
    native, skipped = _native.read_csv(
        _paths(paths), dict(schema or {}), delimiter, bool(has_header), on_error
    )
    if skipped:
        warnings.warn(f"read_csv skipped {skipped} record(s) that did not parse", stacklevel=3)
    return _wrap(native)


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
) -> "Dataset":
    """Samples ``{__key__, __url__, <ext>: bytes}`` from WebDataset tar shards, streamed.

    Tar has no index, so use ``shuffle_buffer`` (not ``shuffle``). With ``rank`` and
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
    by a warning when the iteration ends. A damaged tar (bad header, cut short) always raises.
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
    return _wrap(
        _native.read_webdataset(_paths(shards), rank, world_size, shuffle, seed, on_error, max_member_size)
    )


def from_arrow(data: Any) -> "Dataset":
    """A dataset over an Arrow table (or anything exporting ``__arrow_c_stream__``: pyarrow
    tables and readers, polars DataFrames, ...). The batches are held in memory."""
    if not hasattr(data, "__arrow_c_stream__"):
        raise TypeError(f"from_arrow needs an Arrow table or stream, got {type(data).__name__}")
    return _wrap(_native.from_arrow_stream(data.__arrow_c_stream__()))


def from_pandas(df: Any) -> "Dataset":
    """A dataset over a pandas DataFrame's rows (its index is dropped)."""
    import pyarrow as pa

    return from_arrow(pa.Table.from_pandas(df, preserve_index=False))


class FormatsMixin:
    """``Dataset`` methods that write data out or hand it to Arrow/pandas. Each runs the
    pipeline once, from the start (``seed``/``num_threads`` as in ``iter``)."""

    _native: Any

    def write_parquet(
        self,
        path: str,
        *,
        rows_per_file: int = 1 << 20,
        rows_per_group: int = 1 << 14,
        seed: int = 0,
        num_threads: int | None = None,
    ) -> list[str]:
        """Writes the outputs into directory ``path`` as ``part-00000.parquet``, ... (zstd),
        each file appearing atomically; returns the file names. Stale part files of an
        earlier run are removed."""
        return _native.write_parquet(
            self._native, str(path), rows_per_file, rows_per_group, seed, num_threads
        )

    def write_jsonl(
        self,
        path: str,
        *,
        rows_per_file: int = 1 << 20,
        seed: int = 0,
        num_threads: int | None = None,
    ) -> list[str]:
        """Writes the outputs into directory ``path`` as ``part-00000.jsonl``, ...; arrays
        become (nested) lists; bytes fields are an error."""
        return _native.write_jsonl(self._native, str(path), rows_per_file, seed, num_threads)

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        """The Arrow PyCapsule stream protocol: ``pyarrow.table(ds)``, ``polars.DataFrame(ds)``
        and DuckDB read a dataset directly (each read runs the pipeline)."""
        return _native.to_arrow_stream(self._native, 1 << 16)

    def to_arrow(self, *, seed: int = 0, num_threads: int | None = None, batch_rows: int = 1 << 16) -> Any:
        """Runs the pipeline and returns its outputs as a ``pyarrow.Table``."""
        import pyarrow as pa

        capsule = _native.to_arrow_stream(self._native, batch_rows, seed, num_threads)
        return pa.RecordBatchReader._import_from_c_capsule(capsule).read_all()

    def to_pandas(self, *, seed: int = 0, num_threads: int | None = None) -> Any:
        """Runs the pipeline and returns its outputs as a ``pandas.DataFrame``."""
        return self.to_arrow(seed=seed, num_threads=num_threads).to_pandas()
