"""sluice with Python UDFs: the three workloads through sluice's public API (sources, `map`,
`batch`, `iter(seed=, num_threads=)`), with the per-sample work done by the same Python
functions the DataLoader peer calls (torchvision, HF tokenizers, soundfile + librosa). This
measures sluice's engine (I/O, scheduling, batching, threads) with user code it cannot see into.

`sluice` is imported inside `make_iter`, so the other peers work where it is not installed.
"""
from __future__ import annotations

import zlib
from pathlib import Path

from . import common as C

NAME = "sluice (Python UDFs)"
WORKLOADS = ("cv", "nlp", "asr")


class _CV:
    def __init__(self, classes):
        self.index = {c: i for i, c in enumerate(classes)}
        self.fn = C.CVSample()

    def __call__(self, s):
        import numpy as np

        label = s["label"]
        label = self.index[label] if isinstance(label, str) else int(label)
        return {"image": self.fn.image(s["bytes"]).numpy(), "label": np.int64(label)}


class _NLP:
    def __init__(self, data_dir):
        self.fn = C.NLPSample(data_dir)

    def __call__(self, s):
        return {"input_ids": self.fn.ids(s["text"])}


class _ASR:
    def __init__(self, seed):
        self.seed = seed

    def __call__(self, s, rng=None):
        # sluice passes a Generator seeded from (seed, epoch, index, op) to a UDF with `rng`
        if rng is None:
            rng = C.asr_rng(self.seed, zlib.crc32(str(s["path"]).encode()))
        return {"features": C.asr_features(bytes(s["bytes"]), rng)}


def _count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


def make_iter(workload: str, data_dir: Path, *, samples: int | None = None, seed: int = 0,
              workers: int = 2, **_):
    import sluice

    data_dir = Path(data_dir)
    batch = C.BATCH[workload]
    if workload == "cv":
        paths = [p for p, _ in C.cv_items(data_dir, samples, seed)]
        ds = sluice.read_images(paths, labels="parent_dir").map(_CV(C.class_names(data_dir)))
    elif workload == "nlp":
        text = C.text_file(data_dir)
        ds = sluice.read_text(str(text))
        if samples is not None and samples > _count_lines(text):
            ds = ds.repeat()
        ds = ds.map(_NLP(data_dir))
    elif workload == "asr":
        ds = sluice.read_files(C.asr_items(data_dir, samples, seed)).map(_ASR(seed))
    else:
        raise ValueError(f"unknown workload {workload!r}")
    it = ds.batch(batch).iter(seed=seed, num_threads=workers)
    try:
        yield from it
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
