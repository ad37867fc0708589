"""Train a speech model's input the way ASR and keyword-spotting recipes do: audio clips stored
as bytes in Parquet (as Hugging Face datasets export them), decoded and resampled to 16 kHz,
turned into log-mel spectrograms with SpecAugment masking — all GIL-free on sluice's threads —
and fed to a small CNN in PyTorch.

    python examples/train_speech.py                      # 3 classes of generated 22.05 kHz clips
    python examples/train_speech.py --data clips.parquet --epochs 10   # columns: audio (bytes), label

The masks draw from (seed, epoch, sample): the same run gives the same features.
"""

from __future__ import annotations

import argparse
import io
import shutil
import tempfile
import wave
from pathlib import Path

import numpy as np
import torch

import sluice
from sluice import audio as A

RATE = 16_000


def generate(path: Path, per_class: int = 16) -> str:
    """One-second clips at 22.05 kHz: a tone of 300, 800 or 2,000 Hz (the label) in noise."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    audio, labels = [], []
    t = np.arange(22_050) / 22_050
    for i in range(3 * per_class):
        label = i % 3
        f = (300, 800, 2000)[label] * rng.uniform(0.9, 1.1)
        x = 0.5 * np.sin(2 * np.pi * f * t + rng.uniform(0, 6)) + 0.1 * rng.normal(size=t.size)
        buf = io.BytesIO()
        with wave.open(buf, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(22_050)
            w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
        audio.append(buf.getvalue())
        labels.append(label)
    pq.write_table(pa.table({"audio": audio, "label": labels}), path)
    return str(path)


def pipeline(data: str, batch: int) -> sluice.Dataset:
    return (
        sluice.read_parquet(data)
        .shuffle(seed=0)
        .map(A.decode(sample_rate=RATE, field="audio", out="audio"))   # any rate → 16 kHz
        .map(A.spectrogram(n_fft=400, hop_length=160))                 # 25 ms windows, 10 ms hop
        .map(A.mel(64))
        .map(A.freq_mask(8))                                           # SpecAugment
        .map(A.time_mask(20))
        .map(A.log())
        .map(sluice.ops.select(["spec", "label"]))
        .batch(batch, drop_last=True)
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=4)
    a = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sluice-speech-"))
    try:
        data = a.data or generate(work / "clips.parquet")
        ds = pipeline(data, a.batch)
        torch.manual_seed(0)
        # Mel bands as channels, convolved over time (a TC-ResNet-style keyword spotter).
        model = torch.nn.Sequential(
            torch.nn.BatchNorm1d(64),                      # log-mels span tens of units
            torch.nn.Conv1d(64, 64, 5, padding=2), torch.nn.ReLU(),
            torch.nn.Conv1d(64, 64, 5, padding=2), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(64, 3),
        )
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        for epoch in range(a.epochs):
            right = total = 0
            for b in ds.iter_torch_batches(epoch=epoch):
                logits = model(b["spec"])                  # [batch, mels, frames]
                loss = torch.nn.functional.cross_entropy(logits, b["label"])
                opt.zero_grad()
                loss.backward()
                opt.step()
                right += int((logits.argmax(1) == b["label"]).sum())
                total += len(b["label"])
            print(f"epoch {epoch}: features {tuple(b['spec'].shape)}, loss {loss.item():.3f}, "
                  f"train accuracy {right / total:.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
