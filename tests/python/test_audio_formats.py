"""AAC in MP4/M4A through sluice.audio.decode: the committed fixture always; against FFmpeg's
decoder (PyAV) on freshly encoded files when PyAV is installed."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import sluice
import sluice.audio as A

FIX = pathlib.Path(__file__).resolve().parents[2] / "crates/sluice-audioproc/tests/fixtures"


def _decode(paths, **kw):
    return [(s["audio"], s["sample_rate"]) for s in sluice.read_files([str(p) for p in paths]).map(A.decode(**kw))]


def test_committed_m4a_decodes_at_its_rate_and_length():
    ((audio, rate),) = _decode([FIX / "tone.m4a"])
    # 0.5 s at 16 kHz plus the encoder's 1024 priming samples, in whole 1024-sample frames.
    assert rate == 16000 and audio.dtype == np.float32 and audio.shape == (9216,)
    ((resampled, rate),) = _decode([FIX / "tone.m4a"], sample_rate=8000)
    assert rate == 8000 and resampled.shape == (4608,)


def _ffmpeg_decode(path):
    av = pytest.importorskip("av")
    with av.open(str(path)) as c:
        frames = [f.to_ndarray() for f in c.decode(c.streams.audio[0])]
    return np.concatenate(frames, axis=1)


@pytest.mark.parametrize("rate, layout", [(16000, "mono"), (44100, "stereo")])
def test_aac_matches_ffmpeg(tmp_path, rate, layout):
    pytest.importorskip("av")
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_aac", FIX / "make_aac.py")
    make_aac = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_aac)
    t = np.arange(rate // 2) / rate
    left = 0.4 * np.sin(2 * np.pi * 330 * t) * np.linspace(0, 1, t.size)
    samples = np.stack([left, 0.3 * np.sin(2 * np.pi * 660 * t)]) if layout == "stereo" else left[None]
    path = tmp_path / f"x-{layout}.m4a"
    make_aac.write(path, samples.astype(np.float32), rate=rate, layout=layout)
    ref = _ffmpeg_decode(path)
    ((got, got_rate),) = _decode([path], mono=False)
    assert got_rate == rate and got.shape == ref.shape, (got.shape, ref.shape)
    # Both decoders compute in float32: they agree to float rounding (measured 2.4e-7).
    assert np.abs(got - ref).max() < 1e-5, np.abs(got - ref).max()


def test_opus_is_refused_as_unsupported(tmp_path):
    av = pytest.importorskip("av")
    path = tmp_path / "x.opus"
    with av.open(str(path), "w", format="ogg") as out:
        stream = out.add_stream("libopus", rate=48000, layout="mono")
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 4800), np.float32), format="flt", layout="mono")
        frame.sample_rate = 48000
        for packet in list(stream.encode(frame)) + list(stream.encode(None)):
            out.mux(packet)
    with pytest.raises(sluice.PipelineError, match="(?i)unsupported"):
        _decode([path])
