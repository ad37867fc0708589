"""sluice: a fast, reproducible ML input pipeline engine with a Rust core.

>>> import sluice
>>> ds = sluice.range(10).map(lambda s: {"id": s["id"] * 2}).batch(4)
>>> [b["id"].tolist() for b in ds]
[[0, 2, 4, 6], [8, 10, 12, 14], [16, 18]]
"""

from ._native import PipelineError, SluiceError, __version__
from .dataset import Dataset, GroupedDataset
from .iterator import Iterator, Stats, elastic_state
from .sources import (
    from_arrow,
    from_generator,
    from_huggingface,
    from_items,
    from_source,
    from_pandas,
    mix,
    range,
    read_csv,
    read_files,
    read_images,
    read_jsonl,
    read_parquet,
    read_pipeline,
    read_text,
    read_tfrecord,
    read_webdataset,
)
from . import agg, audio, image, ops, text
from .ingest import check_ingest
from .context import Context
from .storage import configure_storage
from .optimizer import OptimizerOptions, Plan, Profile

__all__ = [
    "configure_storage",
    "Context",
    "Dataset",
    "GroupedDataset",
    "Iterator",
    "OptimizerOptions",
    "Plan",
    "Profile",
    "PipelineError",
    "SluiceError",
    "Stats",
    "__version__",
    "agg",
    "audio",
    "check_ingest",
    "elastic_state",
    "from_arrow",
    "from_generator",
    "from_huggingface",
    "from_items",
    "from_source",
    "mix",
    "from_pandas",
    "image",
    "ops",
    "range",
    "read_csv",
    "read_pipeline",
    "read_files",
    "read_images",
    "read_jsonl",
    "read_parquet",
    "read_text",
    "read_tfrecord",
    "read_webdataset",
    "text",
]
