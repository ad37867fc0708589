"""Ray Data peer: a local Ray instance with `workers` CPUs, a streaming Dataset, per-row `map`
(cv, asr) or `map_batches` (nlp: the batched tokenizer call Ray users write), `iter_batches`
with numpy batches.

Ray is started inside `make_iter` (so its start-up counts in time to first batch) and shut down
when the iterator is closed. RAY_AUTH_MODE=disabled and a private temp dir keep it from writing
under the home directory or the system temp dir; the object store is capped at 512 MiB.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from . import common as C

NAME = "Ray Data"
WORKLOADS = ("cv", "nlp", "asr")


class _CVRow:
    def __init__(self):
        self.fn = C.CVSample()

    def __call__(self, row):
        return {"image": self.fn.image(row["path"]).numpy(), "label": row["label"]}


class _NLPBatch:
    def __init__(self, data_dir):
        self.fn = C.NLPSample(data_dir)

    def __call__(self, batch):
        return {"input_ids": self.fn.ids_batch(batch["text"])}


class _ASRRow:
    def __init__(self, seed):
        self.seed = seed

    def __call__(self, row):
        return {"features": C.asr_features(row["path"], C.asr_rng(self.seed, int(row["index"])))}


def make_iter(workload: str, data_dir: Path, *, samples: int | None = None, seed: int = 0,
              workers: int = 2, object_store_mb: int = 512, **_):
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import ray

    data_dir = Path(data_dir)
    tmp = tempfile.mkdtemp(prefix="ray-", dir=os.environ.get("SLUICE_BENCH_TMP"))
    ray.init(num_cpus=workers, include_dashboard=False, object_store_memory=object_store_mb << 20,
             _temp_dir=tmp, log_to_driver=False, configure_logging=False,
             ignore_reinit_error=True)
    try:
        import ray.data

        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        batch = C.BATCH[workload]
        if workload == "cv":
            items = [{"path": p, "label": l} for p, l in C.cv_items(data_dir, samples, seed)]
            ds = ray.data.from_items(items).map(_CVRow())
        elif workload == "nlp":
            ds = ray.data.read_text(str(C.text_file(data_dir)))
            if samples is not None:
                ds = ds.limit(samples)
            ds = ds.map_batches(_NLPBatch(data_dir), batch_size=batch, batch_format="numpy")
        elif workload == "asr":
            items = [{"path": p, "index": i} for i, p in enumerate(C.asr_items(data_dir, samples, seed))]
            ds = ray.data.from_items(items).map(_ASRRow(seed))
        else:
            raise ValueError(f"unknown workload {workload!r}")
        for b in ds.iter_batches(batch_size=batch, batch_format="numpy", prefetch_batches=2):
            f = b.get("features")
            if f is not None and f.dtype == object:
                # rows of different lengths come back as an object array of arrays
                import numpy as np

                b["features"] = np.stack(list(f))
            yield b
    finally:
        ray.shutdown()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
