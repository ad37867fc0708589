"""Data at rest: Parquet and JSONL sinks, Arrow and pandas export (``Dataset.write_parquet``,
``write_jsonl``, ``to_arrow``, ``to_pandas``). The matching sources (``read_parquet``,
``read_csv``, ``read_webdataset``, ``from_arrow``, ``from_pandas``) are in ``sources``.
Paths may be local paths, directories, globs, or ``s3://`` / ``gs://`` / ``http(s)://`` URLs.

>>> import sluice, tempfile
>>> out = tempfile.mkdtemp()
>>> len(sluice.range(5).write_parquet(out))
1
>>> [s["id"] for s in sluice.read_parquet(out).take(3)]
[0, 1, 2]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import _native
from ._args import _bytes

if TYPE_CHECKING:
    from .context import Context


class FormatsMixin:
    """``Dataset`` methods that write data out or hand it to Arrow/pandas. Each runs the
    pipeline once, from the start of epoch 0 (``seed``/``num_threads`` as in ``iter``; the
    dataset's epoch count for ``for`` loops does not advance)."""

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

    def write_shards(
        self,
        path: str,
        *,
        format: str = "webdataset",
        shard_size: "int | str" = "256MB",
        seed: int = 0,
        num_threads: int | None = None,
        context: "Context | None" = None,
    ) -> list[str]:
        """Converts the outputs once into shards made for fast reading, in directory ``path``
        (local or a bucket prefix): ``format="webdataset"`` writes tar shards
        ``part-00000.tar`` with their member indexes (``part-00000.tar.idx``), read back with
        random access by ``read_webdataset(path, index=True)``; ``format="parquet"`` writes
        ``part-00000.parquet`` files (``read_parquet``). Each shard holds about
        ``shard_size`` bytes (an int or ``"256MB"``); ``index.json`` says the folder is being
        written before the first shard and lists the shards and their sample counts last:
        ``read_webdataset(path)`` and ``read_parquet(path)`` read exactly the shards it lists,
        and refuse a folder whose conversion has not finished. Every file appears atomically,
        an earlier, longer run's extra shards are deleted, and a deterministic pipeline writes
        the same files byte for byte. Returns the shard files.

        The pipeline runs on ``num_threads`` threads, or with ``context=`` a Ray context its
        element-wise stages run on the cluster's actors (for big conversions); finished
        shards are synced or uploaded in the background while the next is written.

        In a tar shard each field is a member ``<key>.<field>``: ``__key__`` when the sample
        has one, else its position; bytes as they are, text as UTF-8, numbers as text,
        arrays as ``.npy``, lists as ``.json``. Arrays (decoded images, token ids) read back
        as arrays from Parquet, as ``.npy`` bytes from tar."""
        if format not in ("webdataset", "parquet"):
            raise ValueError(f"format must be 'webdataset' or 'parquet', got {format!r}")
        shard_bytes = _bytes("shard_size", shard_size)
        if shard_bytes <= 0:
            raise ValueError(f"shard_size must be > 0 bytes, got {shard_size!r}")
        if context is not None and context.remote:
            context.connect()
            return _native.write_shards(
                self._native, str(path), format, shard_bytes, seed, num_threads,
                ray_factory=context._pool, actors=context.actors(),
            )
        return _native.write_shards(self._native, str(path), format, shard_bytes, seed, num_threads)

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
