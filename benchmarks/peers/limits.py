"""The limit for each workload: its one unavoidable step alone, run as fast as plain Python
with `workers` cores does it. A pipeline's throughput divided by this is how close it gets to
the cost of decoding/tokenizing alone.

- cv:  Pillow JPEG decode to RGB (`Image.open(p).convert("RGB")`) in a pool of `workers`
       processes; only the shape travels back
- nlp: HF tokenizers `Tokenizer.encode_batch` on 128 lines at a time, `workers` Rust threads
- asr: MP3 decode only (soundfile / libsndfile), `workers` processes

Batches are ``{"items": [...]}`` with one entry per sample (they are not checked for shape).
"""
from __future__ import annotations

import os
from pathlib import Path

from . import common as C

NAME = "limit"
WORKLOADS = ("cv", "nlp", "asr")
UNCHECKED = True  # batches are counts, not the workload's tensors


def _decode_jpeg(path: str):
    from PIL import Image

    with Image.open(path) as im:
        return im.convert("RGB").size


def _decode_mp3(path: str):
    return C.asr_decode(path)[0].shape[0]


def _pool(workers: int):
    import multiprocessing as mp

    return mp.get_context("fork").Pool(workers)


def make_iter(workload: str, data_dir: Path, *, samples: int | None = None, seed: int = 0,
              workers: int = 2, **_):
    data_dir = Path(data_dir)
    batch = C.BATCH[workload]
    if workload == "nlp":
        os.environ["RAYON_NUM_THREADS"] = str(workers)  # read when the Rust pool starts
        tok = C.load_tokenizer(data_dir)
        lines = C.nlp_lines(data_dir, samples)
        for i in range(0, len(lines), batch):
            yield {"items": tok.encode_batch(lines[i:i + batch], add_special_tokens=False)}
        return
    if workload == "cv":
        fn, items = _decode_jpeg, [p for p, _ in C.cv_items(data_dir, samples, seed)]
    elif workload == "asr":
        fn, items = _decode_mp3, C.asr_items(data_dir, samples, seed)
    else:
        raise ValueError(f"unknown workload {workload!r}")
    pool = _pool(workers)
    try:
        chunk = max(1, min(16, batch // workers))
        out = []
        for r in pool.imap(fn, items, chunksize=chunk):
            out.append(r)
            if len(out) == batch:
                yield {"items": out}
                out = []
        if out:
            yield {"items": out}
    finally:
        pool.terminate()
        pool.join()
