"""PyTorch DataLoader peer: a map-style Dataset whose __getitem__ does the per-sample work,
`num_workers` worker processes (fork), default collate.

- cv:  torchvision.io.decode_jpeg (RGB) + torchvision.transforms.v2 on uint8 tensors
- nlp: HF tokenizers `encode` per line in the workers, fixed-length frames, batch 128
- asr: soundfile MP3 decode + librosa resample / STFT / phase vocoder / mel, batch 1
"""
from __future__ import annotations

from pathlib import Path

from . import common as C

NAME = "PyTorch DataLoader"
WORKLOADS = ("cv", "nlp", "asr")


class _CV:
    def __init__(self, items):
        self.items = items
        self.fn = C.CVSample()

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        path, label = self.items[i]
        return {"image": self.fn.image(path), "label": label}


class _NLP:
    def __init__(self, lines, data_dir):
        self.lines = lines
        self.fn = C.NLPSample(data_dir)

    def __len__(self):
        return len(self.lines)

    def __getitem__(self, i):
        import torch

        return {"input_ids": torch.from_numpy(self.fn.ids(self.lines[i]))}


class _ASR:
    def __init__(self, items, seed):
        self.items = items
        self.seed = seed

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        import torch

        return {"features": torch.from_numpy(C.asr_features(self.items[i], C.asr_rng(self.seed, i)))}


def make_iter(workload: str, data_dir: Path, *, samples: int | None = None, seed: int = 0,
              workers: int = 2, prefetch_factor: int = 2, **_):
    import os

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from torch.utils.data import DataLoader

    data_dir = Path(data_dir)
    if workload == "cv":
        ds = _CV(C.cv_items(data_dir, samples, seed))
    elif workload == "nlp":
        ds = _NLP(C.nlp_lines(data_dir, samples), data_dir)
    elif workload == "asr":
        ds = _ASR(C.asr_items(data_dir, samples, seed), seed)
    else:
        raise ValueError(f"unknown workload {workload!r}")
    gen = torch.Generator()
    gen.manual_seed(seed)
    loader = DataLoader(ds, batch_size=C.BATCH[workload], shuffle=False, num_workers=workers,
                        prefetch_factor=prefetch_factor if workers else None, generator=gen,
                        persistent_workers=False, pin_memory=False)
    it = iter(loader)
    try:
        yield from it
    finally:
        # shut the worker processes down now rather than at garbage collection
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
