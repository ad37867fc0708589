"""Built-in audio ops (Rust, GIL-free): decode, resample, spectrograms, SpecAugment, mel, log.

Each function returns an op for ``Dataset.map``. Decoded audio is a float32 array ``[n]``
(mono) or ``[channels, n]``, with the sample rate in the int field ``sample_rate``.
Spectrograms are float32 **freq × time** (``[n_fft // 2 + 1, frames]``, librosa's layout; a
leading channel axis is kept for multi-channel audio). Defaults follow librosa (torchaudio for
the masks), and results match them (see ``tests/python/test_audio.py``).

The ASR reference pipeline (LibriSpeech-style features with SpecAugment):

>>> import sluice, sluice.audio as A
>>> ds = (
...     sluice.read_files("tests/python/fixtures/audio/speech.mp3")
...     .map(A.decode(sample_rate=16000))        # {path, bytes} -> audio [n], sample_rate
...     .map(A.spectrogram(n_fft=400, hop_length=160))   # spec [201, frames], power 2
...     .map(A.time_stretch(0.8))
...     .map(A.time_mask(80))
...     .map(A.freq_mask(27))
...     .map(A.mel(n_mels=80))                   # rate from the sample_rate field
...     .map(A.log())
... )
>>> ds.take(1)[0]["spec"].shape
(80, 309)

Masks draw from the iteration seed (and epoch, sample index, op), so results do not depend on
the number of threads.

Shapes: audio ops take ``[n]`` (mono) or ``[channels, n]``; spectrogram ops (``time_stretch``,
the masks, ``mel``) take ``[freq, time]`` or ``[channels, freq, time]``; ``log`` and the dB ops
are element-wise and take any shape. Another rank is a ``TypeError`` naming the sample, the op
and the field. Every op reads ``field`` and writes ``out`` (default: ``field``, except
``decode`` → ``"audio"`` and ``spectrogram`` → ``"spec"``).

Sizes: ops whose output size follows from their arguments (``decode`` with ``sample_rate``,
``resample``, ``spectrogram``, ``time_stretch``, ``mel``) check it against ``max_samples``,
the most float32 values they may make for one sample (default ``2**29``, 2 GiB; the
resampler's and mel filterbank's tables count too). Arguments that alone exceed it
(``resample(10**9)``: 10^9 samples per second) raise ``ValueError`` when the op is made; a
sample whose output would exceed it fails with a ``PipelineError`` naming the sample and the
op, before anything is allocated. ``n_fft`` is at most ``2**24``.

A bad argument raises ``ValueError`` (a bad value) or ``TypeError`` (a wrong type) naming the
op, the argument and the value, e.g. ``audio.resample: argument rate=-1 is invalid: ...``.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from . import _spec
from ._native import Op

__all__ = [
    "amplitude_to_db",
    "decode",
    "freq_mask",
    "log",
    "mel",
    "power_to_db",
    "resample",
    "spectrogram",
    "time_mask",
    "time_stretch",
]


def _op(name: str, **params: Any) -> Op:
    # norm=None and top_db=None mean "none", not "the default".
    return _spec.op(f"audio.{name}", params, keep_none=("norm", "top_db"))


def decode(
    sample_rate: Optional[int] = None,
    *,
    mono: bool = True,
    field: str = "bytes",
    out: str = "audio",
    max_samples: Optional[int] = None,
) -> Op:
    """Decodes WAV / FLAC / MP3 / Ogg Vorbis / AAC (MP4, M4A) bytes in ``field`` to float32
    samples in ``out`` (no Opus: see docs/READING.md, "Audio formats").

    Writes ``out`` (``[n]`` if ``mono``, else ``[channels, n]``; mono is the channel mean, as
    ``librosa.to_mono``) and ``sample_rate`` (int, Hz). With ``sample_rate`` the audio is
    resampled to that rate (as :func:`resample`); otherwise the file's own rate is kept.
    The sample's ``path`` field, when present, hints the format. Values match
    ``soundfile.read`` (MP3: gapless, same length as mpg123). A corrupt or truncated file
    fails the sample (or is skipped with ``map(..., on_error="skip")``). ``max_samples``
    bounds the resampled output (see the module's notes on sizes).
    """
    return _op("decode", field=field, out=out, sample_rate=sample_rate, mono=mono, max_samples=max_samples)


def resample(rate: int, *, field: str = "audio", out: Optional[str] = None, max_samples: Optional[int] = None) -> Op:
    """Resamples ``field`` from the rate in the ``sample_rate`` field to ``rate`` Hz and updates
    ``sample_rate``. Output length is ``ceil(n * rate / sr)``, aligned with the input
    (band-limited FFT resampler; a no-op when the rates are equal). ``out`` defaults to
    ``field``."""
    return _op("resample", rate=rate, field=field, out=out, max_samples=max_samples)


def spectrogram(
    n_fft: int = 400,
    hop_length: Optional[int] = None,
    power: float = 2.0,
    *,
    win_length: Optional[int] = None,
    window: str = "hann",
    center: bool = True,
    field: str = "audio",
    out: str = "spec",
    max_samples: Optional[int] = None,
) -> Op:
    """``|STFT(field)| ** power`` as float32 ``[n_fft // 2 + 1, frames]`` (freq × time), like
    ``np.abs(librosa.stft(y, n_fft=..., hop_length=...)) ** power``.

    ``hop_length`` defaults to ``win_length // 4``, ``win_length`` to ``n_fft``; ``window`` is
    one of ``"hann"``, ``"hamming"``, ``"blackman"``, ``"boxcar"`` (periodic, as scipy's
    ``get_window``). ``center=True`` pads ``n_fft // 2`` zeros on both sides, so
    ``frames = 1 + n // hop_length``. Multi-channel audio ``[c, n]`` gives ``[c, freq, time]``.
    """
    return _op("spectrogram", n_fft=n_fft, hop_length=hop_length, win_length=win_length, window=window,
               power=power, center=center, field=field, out=out, max_samples=max_samples)


def time_stretch(
    rate: float,
    *,
    power: float = 2.0,
    field: str = "spec",
    out: Optional[str] = None,
    max_samples: Optional[int] = None,
) -> Op:
    """Phase-vocoder time stretch of a ``|X| ** power`` spectrogram by ``rate`` (> 1 faster,
    < 1 slower): ``ceil(frames / rate)`` frames, equal to librosa's
    ``np.abs(librosa.phase_vocoder(X, rate=rate)) ** power`` (the output power depends only on
    the interpolated magnitudes, so no phase is needed). ``power`` must be the one the
    spectrogram was computed with."""
    return _op("time_stretch", rate=rate, power=power, field=field, out=out, max_samples=max_samples)


def time_mask(max_width: int, *, fill: float = 0.0, field: str = "spec", out: Optional[str] = None) -> Op:
    """SpecAugment time masking (``torchaudio.transforms.TimeMasking(max_width)``): sets
    ``floor(u1 * max_width)`` consecutive frames (at most the number of frames) starting at
    ``floor(u2 * (frames - width))`` to ``fill`` in every bin. Random per (seed, epoch,
    sample); apply before :func:`log` with ``fill=0``."""
    return _op("time_mask", max_width=max_width, fill=fill, field=field, out=out)


def freq_mask(max_width: int, *, fill: float = 0.0, field: str = "spec", out: Optional[str] = None) -> Op:
    """SpecAugment frequency masking (``torchaudio.transforms.FrequencyMasking(max_width)``):
    sets up to ``max_width`` consecutive frequency bins to ``fill`` (see :func:`time_mask`)."""
    return _op("freq_mask", max_width=max_width, fill=fill, field=field, out=out)


def mel(
    n_mels: int = 128,
    sample_rate: Optional[int] = None,
    *,
    n_fft: Optional[int] = None,
    fmin: float = 0.0,
    fmax: Optional[float] = None,
    htk: bool = False,
    norm: Optional[str] = "slaney",
    field: str = "spec",
    out: Optional[str] = None,
    max_samples: Optional[int] = None,
) -> Op:
    """Projects a power spectrogram ``[freq, time]`` onto ``n_mels`` mel bands:
    ``[n_mels, time]``, as ``librosa.feature.melspectrogram(S=spec, sr=..., n_mels=...)``
    (``librosa.filters.mel`` weights: Slaney scale and norm unless ``htk`` / ``norm=None``).

    ``sample_rate`` defaults to the sample's ``sample_rate`` field; ``n_fft`` to
    ``2 * (freq - 1)`` (pass it for odd FFT sizes); ``fmax`` to ``sample_rate / 2``.
    ``out`` defaults to ``field``.
    """
    return _op("mel", n_mels=n_mels, sample_rate=sample_rate, n_fft=n_fft, fmin=fmin, fmax=fmax, htk=htk,
               norm=norm, field=field, out=out, max_samples=max_samples)


def log(eps: float = 1e-6, *, field: str = "spec", out: Optional[str] = None) -> Op:
    """Natural log ``ln(x + eps)`` (no clipping), the usual ASR feature compression."""
    return _op("log", eps=eps, field=field, out=out)


def power_to_db(
    ref: Union[float, str] = 1.0,
    amin: float = 1e-10,
    top_db: Optional[float] = 80.0,
    *,
    field: str = "spec",
    out: Optional[str] = None,
) -> Op:
    """``librosa.power_to_db``: ``10 * log10(max(amin, x) / ref)``, floored at ``max - top_db``
    (``top_db=None``: no floor). ``ref="max"`` makes the loudest bin 0 dB."""
    return _op("power_to_db", ref=ref, amin=amin, top_db=top_db, field=field, out=out)


def amplitude_to_db(
    ref: Union[float, str] = 1.0,
    amin: float = 1e-5,
    top_db: Optional[float] = 80.0,
    *,
    field: str = "spec",
    out: Optional[str] = None,
) -> Op:
    """``librosa.amplitude_to_db``: ``20 * log10(max(amin, |x|) / ref)``, floored at
    ``max - top_db``; use on ``power=1`` spectrograms."""
    return _op("amplitude_to_db", ref=ref, amin=amin, top_db=top_db, field=field, out=out)
