"""Grain peer: `grain.MapDataset.source(items).map(...)` → `to_iter_dataset()` → `batch(n)` →
`mp_prefetch(MultiprocessingOptions(num_workers=workers))`: the per-sample work and batching run
in `workers` Grain worker processes; batches come back through shared memory.

- cv:  torchvision decode + transforms.v2 (as the DataLoader peer), numpy out
- nlp: HF tokenizers `encode` per line
- asr: soundfile + librosa, with `random_map`'s per-sample generator driving the masks
"""
from __future__ import annotations

from pathlib import Path

from . import common as C

NAME = "Grain"
WORKLOADS = ("cv", "nlp", "asr")


class _CV:
    def __init__(self):
        self.fn = C.CVSample()

    def __call__(self, item):
        path, label = item
        return {"image": self.fn.image(path).numpy(), "label": C_int64(label)}


class _NLP:
    def __init__(self, data_dir):
        self.fn = C.NLPSample(data_dir)

    def __call__(self, line):
        return {"input_ids": self.fn.ids(line)}


class _ASR:
    def __call__(self, path, rng):
        return {"features": C.asr_features(path, rng)}


def C_int64(x):
    import numpy as np

    return np.int64(x)


def make_iter(workload: str, data_dir: Path, *, samples: int | None = None, seed: int = 0,
              workers: int = 2, read_threads: int | None = None, **_):
    import os

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import grain

    data_dir = Path(data_dir)
    if workload == "cv":
        ds = grain.MapDataset.source(C.cv_items(data_dir, samples, seed)).map(_CV())
    elif workload == "nlp":
        ds = grain.MapDataset.source(C.nlp_lines(data_dir, samples)).map(_NLP(data_dir))
    elif workload == "asr":
        ds = grain.MapDataset.source(C.asr_items(data_dir, samples, seed)).seed(seed).random_map(_ASR())
    else:
        raise ValueError(f"unknown workload {workload!r}")
    # ReadOptions' default (16 threads per worker, each element a future) costs ~0.4 ms per
    # element: 5× a line's tokenization, so NLP reads in the worker's own thread
    # (read_threads=0, as fast as a plain loop). CV and ASR keep Grain's default, which measured
    # faster for them here (the threads overlap file reads and GIL-free decode/DSP).
    if read_threads is None:
        read_threads = 0 if workload == "nlp" else 16
    read = (grain.ReadOptions(num_threads=0, prefetch_buffer_size=0) if read_threads == 0
            else grain.ReadOptions(num_threads=read_threads))
    it_ds = ds.to_iter_dataset(read).batch(C.BATCH[workload])
    if workers:
        it_ds = it_ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    it = iter(it_ds)
    try:
        yield from it
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
