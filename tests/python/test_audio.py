"""sluice.audio end to end: decode → resample → spectrogram → time_stretch → masks → mel → log.

Reference values come from librosa 0.11 / soundfile 0.14, generated once by
fixtures/audio/make_expected.py and committed, so this needs only numpy.
"""

import json
import pathlib

import numpy as np
import pytest

import sluice
import sluice.audio as A
from sluice._native import Op

FIX = pathlib.Path(__file__).resolve().parent / "fixtures" / "audio"
WAV = str(FIX / "chirp_16k_mono.wav")
FLAC = str(FIX / "chirp_16k_mono.flac")
MP3 = str(FIX / "speech.mp3")
STEREO = str(FIX / "stereo_24bit.wav")
META = json.loads((FIX / "expected.json").read_text())


def expected(name):
    return np.load(FIX / f"expected_{name}.npy")


def one(ds):
    (s,) = list(ds)
    return s


def rel_l1(got, want):
    return float(np.abs(got.astype(np.float64) - want).sum() / np.abs(want.astype(np.float64)).sum())


def asr(ds, stretch=0.8, masks=True):
    ds = ds.map(A.decode(sample_rate=16000)).map(A.spectrogram(n_fft=400, hop_length=160))
    ds = ds.map(A.time_stretch(stretch))
    if masks:
        ds = ds.map(A.time_mask(80)).map(A.freq_mask(27))
    return ds.map(A.mel(n_mels=80)).map(A.log())


# --- decode ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path, ref", [(WAV, "chirp_wav"), (FLAC, "chirp_flac")])
def test_decode_lossless_matches_soundfile(path, ref):
    s = one(sluice.read_files(path).map(A.decode()))
    want = expected(ref)
    assert s["audio"].dtype == np.float32 and s["audio"].shape == want.shape
    assert s["sample_rate"] == 16000
    assert np.abs(s["audio"] - want).max() <= 1e-6


def test_decode_stereo_channels_and_mono():
    want = expected("stereo")  # [channels, n]
    s = one(sluice.read_files(STEREO).map(A.decode(mono=False)))
    assert s["audio"].shape == tuple(META["stereo"]["shape"]) == (2, 2205)
    assert np.abs(s["audio"] - want).max() <= 1e-6
    m = one(sluice.read_files(STEREO).map(A.decode()))
    assert m["audio"].shape == (2205,)
    assert np.abs(m["audio"] - want.mean(axis=0)).max() <= 1e-6


def test_decode_mp3_matches_soundfile():
    s = one(sluice.read_files(MP3).map(A.decode()))
    y = s["audio"]
    assert s["sample_rate"] == META["speech"]["sample_rate"] == 22050
    assert len(y) == META["speech"]["frames"]  # gapless: same length as mpg123
    prefix = expected("speech_prefix")
    assert np.abs(y[: len(prefix)] - prefix).max() <= 1e-5
    rms = float(np.sqrt(np.mean(y.astype(np.float64) ** 2)))
    assert abs(rms - META["speech"]["rms"]) / META["speech"]["rms"] <= 1e-5


def test_decode_resamples_and_resample_op_agrees():
    a = one(sluice.read_files(MP3).map(A.decode(sample_rate=16000)))
    b = one(sluice.read_files(MP3).map(A.decode()).map(A.resample(16000)))
    assert a["sample_rate"] == b["sample_rate"] == 16000
    assert a["audio"].shape == (int(np.ceil(54324 * 16000 / 22050)),)
    np.testing.assert_array_equal(a["audio"], b["audio"])
    c = one(sluice.read_files(MP3).map(A.decode()).map(A.resample(8000, out="low")))
    assert c["low"].shape == (19710,) and c["audio"].shape == (54324,) and c["sample_rate"] == 8000


# --- spectrogram features vs librosa -----------------------------------------------------------


def test_mel_after_time_stretch_matches_librosa():
    # librosa: |phase_vocoder(stft(y, 400, 160), 0.8)|² → melspectrogram(S=…, n_mels=80) → log.
    ds = (
        sluice.read_files(WAV)
        .map(A.decode())
        .map(A.spectrogram(n_fft=400, hop_length=160))
        .map(A.time_stretch(0.8))
        .map(A.mel(n_mels=80, out="mel"))
        .map(A.log(field="mel", out="logmel"))
    )
    s = one(ds)
    want_log = expected("chirp_mel_stretch")
    assert s["spec"].shape == (201, 33)
    assert s["mel"].shape == s["logmel"].shape == want_log.shape == (80, 33)
    assert rel_l1(s["mel"], np.exp(want_log) - 1e-6) <= 1e-3
    assert np.abs(s["logmel"] - want_log).max() <= 1e-3
    np.testing.assert_allclose(s["logmel"], np.log(s["mel"] + np.float32(1e-6)), rtol=0, atol=1e-6)


def test_mel_of_mp3_matches_librosa():
    s = one(
        sluice.read_files(MP3)
        .map(A.decode())
        .map(A.spectrogram(n_fft=512, hop_length=128))
        .map(A.mel(n_mels=64))
    )
    assert s["spec"].shape == tuple(META["speech_mel"]["shape"])
    assert rel_l1(s["spec"][:, ::4], expected("speech_mel_every4")) <= 1e-3


def test_mel_after_resampling_matches_librosa_soxr():
    # Different resamplers (sluice: band-limited FFT; librosa: soxr_hq) agree to ~1.4e-4 here.
    s = one(
        sluice.read_files(MP3)
        .map(A.decode(sample_rate=16000))
        .map(A.spectrogram(400, 160))
        .map(A.mel(80))
    )
    assert s["spec"].shape == tuple(META["speech16k_mel"]["shape"])
    assert rel_l1(s["spec"][:, ::4], expected("speech16k_mel_every4")) <= 1e-3


def test_spectrogram_layout_and_power():
    s = one(sluice.read_files(WAV).map(A.decode()).map(A.spectrogram(n_fft=400, hop_length=160)))
    m = one(sluice.read_files(WAV).map(A.decode()).map(A.spectrogram(400, 160, power=1.0)))
    assert s["spec"].shape == m["spec"].shape == (201, 1 + 4000 // 160)  # freq × time
    np.testing.assert_allclose(s["spec"], m["spec"] ** 2, rtol=1e-5, atol=1e-9)
    st = one(sluice.read_files(STEREO).map(A.decode(mono=False)).map(A.spectrogram(512, 128)))
    assert st["spec"].shape == (2, 257, 1 + 2205 // 128)


def test_db_ops():
    s = one(
        sluice.read_files(WAV)
        .map(A.decode())
        .map(A.spectrogram(400, 160))
        .map(A.power_to_db(out="db"))
        .map(A.power_to_db(ref="max", top_db=None, out="db_max"))
    )
    spec = s["spec"].astype(np.float64)
    want = 10 * np.log10(np.maximum(spec, 1e-10))
    want = np.maximum(want, want.max() - 80)
    assert np.abs(s["db"] - want).max() <= 1e-3
    assert s["db_max"].max() == 0.0


# --- the ASR pipeline: shapes, masks, determinism ----------------------------------------------


def test_asr_pipeline_shapes():
    s = one(asr(sluice.read_files(MP3)))
    assert s["spec"].shape == (80, 309)  # ceil(247 / 0.8) frames
    assert s["spec"].dtype == np.float32 and np.isfinite(s["spec"]).all()


def _mask_runs(x, fill, axis):
    """Indices along `axis` (1: time, 0: freq) that are entirely `fill`."""
    full = (x == fill).all(axis=1 - axis)
    return np.flatnonzero(full)


@pytest.mark.parametrize("time", [True, False])
def test_mask_width_bounds_and_layout(time):
    max_width = 7
    op = A.time_mask(max_width, fill=-1.0) if time else A.freq_mask(max_width, fill=-1.0)
    ds = sluice.read_files(WAV).repeat(60).map(A.decode()).map(A.spectrogram(400, 160)).map(op)
    widths = set()
    for s in ds.iter(seed=3):
        x = s["spec"]
        assert x.shape == (201, 26)
        idx = _mask_runs(x, -1.0, 1 if time else 0)
        assert (x == -1.0).sum() == len(idx) * (x.shape[0] if time else x.shape[1])
        assert len(idx) < max_width  # floor(u * max_width), u < 1
        if len(idx):
            assert idx[-1] - idx[0] + 1 == len(idx)  # one contiguous run
        widths.add(len(idx))
    assert len(widths) >= 5, widths


def _collect(ds, **kw):
    # Runs compare threads and seeds within one epoch.
    return [s["spec"] for s in ds.iter(epoch=0, **kw)]


def test_asr_deterministic_across_threads_and_seeds():
    ds = asr(sluice.read_files([MP3, WAV, FLAC, STEREO]).repeat(4))
    a = _collect(ds, seed=7, num_threads=1)
    b = _collect(ds, seed=7, num_threads=2)
    assert len(a) == len(b) == 16
    for x, y in zip(a, b):
        assert x.tobytes() == y.tobytes()
    c = _collect(ds, seed=8, num_threads=2)
    assert any(x.tobytes() != z.tobytes() for x, z in zip(a, c))
    # Epochs draw different masks for the same clip.
    assert a[0].tobytes() != a[4].tobytes()
    # Without the random ops the seed does not matter.
    plain = asr(sluice.read_files([MP3, WAV]), masks=False)
    for x, y in zip(_collect(plain, seed=1), _collect(plain, seed=2, num_threads=2)):
        assert x.tobytes() == y.tobytes()


# --- bad input ---------------------------------------------------------------------------------


@pytest.fixture
def corrupt_dir(tmp_path):
    data = (FIX / "speech.mp3").read_bytes()
    (tmp_path / "a_good.mp3").write_bytes(data)
    (tmp_path / "b_corrupt.mp3").write_bytes(data[: len(data) // 2])
    (tmp_path / "c_good.wav").write_bytes((FIX / "chirp_16k_mono.wav").read_bytes())
    (tmp_path / "d_noise.mp3").write_bytes(np.random.default_rng(0).bytes(20_000))
    return tmp_path


def test_corrupt_mp3_names_path_and_op(corrupt_dir):
    ds = sluice.read_files(str(corrupt_dir / "*.mp3")).map(A.decode(sample_rate=16000))
    with pytest.raises(sluice.PipelineError) as ei:
        list(ds)
    msg = str(ei.value)
    assert "b_corrupt.mp3" in msg and "decode" in msg, msg


def test_corrupt_files_skipped_and_counted(corrupt_dir):
    ds = asr(sluice.read_files(str(corrupt_dir)).map(A.decode(), on_error="skip"))
    out = [s["path"] for s in ds.iter(num_threads=2)]
    assert [pathlib.Path(p).name for p in out] == ["a_good.mp3", "c_good.wav"]
    assert sum(st["skipped"] for st in ds.stats().stages) == 2


def test_missing_and_wrong_fields():
    with pytest.raises(KeyError, match="bytes"):
        list(sluice.from_items([{"x": 1}]).map(A.decode()))
    with pytest.raises(KeyError, match="sample_rate"):
        # Schema unknown after a UDF: detected per sample, still a KeyError naming the field.
        list(sluice.range(2).map(lambda s: {"spec": np.ones((201, 3), np.float32)}).map(A.mel()))
    with pytest.raises(KeyError, match="'audio'.*resample"):
        sluice.read_files(WAV).map(A.resample(8000))  # known schema: fails when built
    with pytest.raises(TypeError, match="spectrogram.*float32 tensor"):
        list(sluice.read_files(WAV).map(A.spectrogram(field="bytes")))


@pytest.mark.parametrize(
    "build, exc",
    [
        (lambda: A.decode(sample_rate=0), ValueError),
        (lambda: A.decode(sample_rate=16000.0), TypeError),
        (lambda: A.decode(mono="yes"), TypeError),
        (lambda: A.resample(-1), ValueError),
        (lambda: A.spectrogram(n_fft=0), ValueError),
        (lambda: A.spectrogram(400, win_length=500), ValueError),
        (lambda: A.spectrogram(window="kaiser"), ValueError),
        (lambda: A.spectrogram(power=0), ValueError),
        (lambda: A.spectrogram(field=3), TypeError),
        (lambda: A.time_stretch(0), ValueError),
        (lambda: A.time_stretch(float("nan")), ValueError),
        (lambda: A.time_mask(-1), ValueError),
        (lambda: A.freq_mask(2.5), TypeError),
        (lambda: A.mel(0), ValueError),
        (lambda: A.mel(80, norm="l2"), ValueError),
        (lambda: A.mel(80, fmin=8000, fmax=4000), ValueError),
        (lambda: A.log(eps=-1), ValueError),
        (lambda: A.power_to_db(ref="min"), ValueError),
        (lambda: A.amplitude_to_db(amin=0), ValueError),
    ],
)
def test_invalid_arguments(build, exc):
    with pytest.raises(exc):
        build()


def test_ops_have_api_names_and_specs():
    ops = {
        "decode": A.decode(16000),
        "resample": A.resample(16000),
        "spectrogram": A.spectrogram(400, 160),
        "time_stretch": A.time_stretch(0.8),
        "time_mask": A.time_mask(80),
        "freq_mask": A.freq_mask(27),
        "mel": A.mel(80),
        "log": A.log(),
        "power_to_db": A.power_to_db(),
        "amplitude_to_db": A.amplitude_to_db(),
    }
    for name, op in ops.items():
        assert op.name == name
        spec = json.loads(op.spec_json())
        assert spec["op"] == f"audio.{name}"
        assert Op(op.spec_json()).spec_json() == op.spec_json()
    assert json.loads(ops["spectrogram"].spec_json())["hop_length"] == 160
    assert json.loads(A.spectrogram().spec_json())["hop_length"] is None  # n_fft // 4 at run time
