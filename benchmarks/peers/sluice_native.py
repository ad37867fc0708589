"""sluice with built-in (Rust, GIL-free) ops: the CV and ASR reference pipelines.

Batch layouts are checked by ``common.check_batch``: ``image`` float32 [64,3,224,224] +
``label`` int64; ``features`` float32 [1,80,T]. ``input_ids`` int64 [128,256].
"""
from __future__ import annotations

from pathlib import Path

from . import common as C

NAME = "sluice (built-in ops)"
WORKLOADS = ("cv", "nlp", "asr")
READY = True


def _cv(sluice, data_dir: Path, samples, seed, normalize: bool = True):
    """``normalize=False`` leaves uint8 HWC images (normalising on the accelerator quarters
    the bytes each sample moves; benchmarks/ray_overhead.py models that)."""
    import sluice.image as img

    paths = [p for p, _ in C.cv_items(data_dir, samples, seed)]
    ds = (sluice.read_images(paths, labels="parent_dir")
          .map(img.decode())
          .map(img.random_resized_crop(C.CV_SIZE, scale=C.CV_SCALE, ratio=C.CV_RATIO))
          .map(img.horizontal_flip(p=C.CV_FLIP_P))
          .map(img.color_jitter(*C.CV_JITTER, p=C.CV_JITTER_P))
          .map(img.grayscale(p=C.CV_GRAY_P, num_output_channels=3))
          .map(img.gaussian_blur(C.CV_BLUR_KERNEL, sigma=C.CV_BLUR_SIGMA, p=C.CV_BLUR_P)))
    if normalize:
        ds = ds.map(img.normalize(C.MEAN, C.STD))
    return ds.map(sluice.ops.select(["image", "label"])).batch(C.CV_BATCH)


def _nlp(sluice, data_dir: Path, samples, seed):
    return nlp_ops(sluice, sluice.read_text(str(C.text_file(data_dir))).repeat(), data_dir)


def nlp_ops(sluice, ds, data_dir: Path):
    """The NLP reference pipeline's steps after a source of ``{text}`` lines."""
    import sluice.text as txt

    return (ds
            .map(txt.tokenize(str(C.tokenizer_file(data_dir)), add_special_tokens=False))
            .map(txt.truncate(C.NLP_LEN - 2))
            .map(txt.add_tokens(bos=C.NLP_BOS, eos=C.NLP_EOS))
            .map(txt.pad(C.NLP_LEN, pad_id=C.NLP_PAD))
            .map(sluice.ops.select(["input_ids"]))
            .batch(C.NLP_BATCH))


def _asr(sluice, data_dir: Path, samples, seed):
    import sluice.audio as au

    return (sluice.read_files(C.asr_items(data_dir, samples, seed))
            .map(au.decode(C.ASR_RATE))  # decode + resample to 16 kHz
            .map(au.spectrogram(C.ASR_NFFT, C.ASR_HOP, power=2.0, out="features"))
            .map(au.time_stretch(C.ASR_STRETCH, field="features"))  # phase vocoder on the power spectrogram
            .map(au.time_mask(C.ASR_TIME_MASK, field="features"))
            .map(au.freq_mask(C.ASR_FREQ_MASK, field="features"))
            .map(au.mel(C.ASR_MELS, C.ASR_RATE, field="features"))
            .map(au.log(C.ASR_LOG_EPS, field="features"))
            .map(sluice.ops.select(["features"]))
            .batch(C.ASR_BATCH))


def make_iter(workload: str, data_dir: Path, *, samples: int | None = None, seed: int = 0,
              workers: int = 2, **_):
    if not READY:
        raise NotImplementedError("sluice_native is a placeholder until the built-in ops land "
                                  "(see benchmarks/peers/sluice_native.py)")
    import sluice

    build = {"cv": _cv, "nlp": _nlp, "asr": _asr}[workload]
    it = build(sluice, Path(data_dir), samples, seed).iter(seed=seed, num_threads=workers)
    try:
        yield from it
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
