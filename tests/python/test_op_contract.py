"""The contract every built-in op keeps: absurd sizes are errors (never an abort), bad
arguments name the op, the argument and the value, inputs of the wrong shape name the field,
and every op takes ``field=``/``out=``."""

import json

import numpy as np
import pytest

import sluice
import sluice.audio as A
import sluice.image as I
import sluice.text as T
from procs import run_py
from sluice._native import Op

# --- hostile sizes -----------------------------------------------------------------------------

HOSTILE = r'''
import resource
# 3 GB of address space: each case below used to abort the interpreter (rc 134) or take
# 30 GB of virtual memory.
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
import numpy as np
import sluice, sluice.image as I, sluice.audio as A, sluice.text as T

def clip(seconds, rate=16000):
    return {"audio": np.zeros(int(seconds * rate), np.float32), "sample_rate": rate}

def image(h, w):
    return {"image": np.zeros((h, w, 3), np.uint8)}

cases = {
    # refused when the op is made
    "center_crop": lambda: I.center_crop(100000),
    "resize": lambda: I.resize(10**6),
    "random_resized_crop": lambda: I.random_resized_crop((10**5, 10**5)),
    "gaussian_blur": lambda: I.gaussian_blur(10**9 + 1),
    "resample": lambda: list(sluice.from_items([clip(1)]).map(A.resample(10**9))),
    "decode": lambda: A.decode(sample_rate=10**9),
    "n_fft": lambda: A.spectrogram(n_fft=10**9),
    "time_stretch": lambda: A.time_stretch(1e-12),
    "n_mels": lambda: A.mel(n_mels=10**9),
    "pad": lambda: T.pad(10**12),
    "pack": lambda: sluice.from_items([{"input_ids": [1, 2]}]).pack(10**12),
    # data-dependent: fail the sample
    "resize_strip": lambda: list(sluice.from_items([image(1, 100000)]).map(I.resize(5000))),
    "resample_2s": lambda: list(sluice.from_items([clip(2)]).map(A.resample(400_000_000))),
    "hop_1": lambda: list(sluice.from_items([clip(200)]).map(A.spectrogram(400, hop_length=1))),
    "stretch_slow": lambda: list(
        sluice.from_items([{"spec": np.ones((201, 2000), np.float32)}]).map(A.time_stretch(1e-4))
    ),
    "normalize_huge": lambda: list(
        sluice.from_items([image(3, 100)]).map(I.normalize([0.5] * 3, [0.2] * 3, max_pixels=100))
    ),
}
for name, case in cases.items():
    try:
        case()
        print(name, "NO ERROR")
    except Exception as e:  # noqa: BLE001
        print(name, type(e).__name__, str(e).replace("\n", " ")[:300])
'''


def test_hostile_sizes_raise_and_never_abort():
    r = run_py(HOSTILE, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in r.stdout.strip().splitlines())
    build_time = {
        "center_crop": "image.center_crop: size=100000",
        "resize": "image.resize: size=1000000",
        "random_resized_crop": "image.random_resized_crop: size=(100000, 100000)",
        "gaussian_blur": "image.gaussian_blur: kernel_size",
        "resample": "audio.resample: rate=1000000000",
        "decode": "audio.decode: sample_rate=1000000000",
        "n_fft": "audio.spectrogram: n_fft",
        "time_stretch": "audio.time_stretch: rate=",
        "n_mels": "audio.mel: n_mels=1000000000",
        "pad": "text.pad: length=1000000000000",
        "pack": "pack: length=1000000000000",
    }
    for name, want in build_time.items():
        assert lines[name].startswith("ValueError " + want), (name, lines[name])
    per_sample = {
        "resize_strip": ("resize", "size=5000 (the shorter side) on a 1x100000 image", "max_pixels"),
        "resample_2s": ("resample", "rate=400000000 on 32000 samples", "max_samples"),
        "hop_1": ("spectrogram", "n_fft=400, hop_length=1", "max_samples"),
        "stretch_slow": ("time_stretch", "rate=0.0001 on 2000 frames", "max_samples"),
        "normalize_huge": ("normalize", "a float32 copy of a 3x100 image", "max_pixels=100"),
    }
    for name, (op, arg, limit) in per_sample.items():
        line = lines[name]
        assert line.startswith(f"PipelineError op '{op}' failed on sample 0"), line
        assert arg in line and limit in line, line


def test_limits_are_arguments():
    strip = np.zeros((1, 400, 3), np.uint8)  # resize(100): 100 x 40000 pixels
    with pytest.raises(sluice.PipelineError, match="max_pixels=100000"):
        list(sluice.from_items([{"image": strip}]).map(I.resize(100, max_pixels=100_000)))
    (out,) = list(sluice.from_items([{"image": strip}]).map(I.resize(100, max_pixels=5_000_000)))
    assert out["image"].shape == (100, 40000, 3)
    op = A.resample(10**9, max_samples=2 * 10**9)
    assert json.loads(op.spec_json())["max_samples"] == 2 * 10**9
    assert "max_samples" not in json.loads(A.resample(8000).spec_json())
    with pytest.raises(ValueError, match="max_tokens=8"):
        T.pad(9, max_tokens=8)


# --- bad arguments -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build, exc, message",
    [
        (lambda: I.resize(-5), ValueError, "image.resize: argument size=-5 is invalid"),
        (lambda: I.resize((1, 2, 3)), ValueError, "image.resize: argument size=[1,2,3]"),
        (lambda: I.center_crop("big"), ValueError, 'image.center_crop: argument size="big"'),
        (lambda: I.horizontal_flip(p="x"), TypeError, 'image.horizontal_flip: argument p="x"'),
        (lambda: I.horizontal_flip(p=2), ValueError, "image.horizontal_flip: p must be in [0, 1], got 2"),
        (lambda: I.gaussian_blur(4), ValueError, "image.gaussian_blur: kernel_size must be odd"),
        (lambda: I.normalize([0.5], []), ValueError, "image.normalize: mean and std"),
        (lambda: I.decode(max_pixels=-1), ValueError, "image.decode: argument max_pixels=-1"),
        (lambda: I.resize(8, field=3), TypeError, "image.resize: argument field=3"),
        (lambda: T.truncate(-1), ValueError, "text.truncate: argument length=-1 is invalid"),
        (lambda: T.add_tokens(bos=2**70), ValueError, "text.add_tokens: argument bos=1180591620717411303424"),
        (lambda: T.add_tokens(eos="x"), TypeError, 'text.add_tokens: argument eos="x"'),
        (lambda: T.pad(0), ValueError, "text.pad: length must be > 0, got 0"),
        (lambda: T.pad(8, pad_id=1.5), TypeError, "text.pad: argument pad_id=1.5"),
        (lambda: A.resample(-1), ValueError, "audio.resample: argument rate=-1"),
        (lambda: A.spectrogram(window="kaiser"), ValueError, 'audio.spectrogram: argument window="kaiser"'),
        (lambda: A.time_mask(2.5), TypeError, "audio.time_mask: argument max_width=2.5"),
        (lambda: A.mel(0), ValueError, "audio.mel: n_mels must be > 0"),
        (lambda: A.time_stretch(float("nan")), ValueError, "audio.time_stretch: argument rate=nan"),
        (lambda: sluice.ops.select(3), TypeError, "select: argument fields=3"),
        (lambda: sluice.ops.rename("a", ""), ValueError, "rename"),
    ],
)
def test_bad_arguments_name_op_argument_and_value(build, exc, message):
    with pytest.raises(exc) as ei:
        build()
    assert str(ei.value).startswith(message), str(ei.value)
    assert "untagged enum" not in str(ei.value)


def test_unknown_ops_and_arguments_in_spec_json():
    with pytest.raises(ValueError, match="image.resize: unknown argument 'sise'"):
        Op(json.dumps({"op": "image.resize", "size": 4, "sise": 5}))
    with pytest.raises(ValueError, match="image.resize: missing required argument 'size'"):
        Op(json.dumps({"op": "image.resize"}))
    with pytest.raises(ValueError, match="unknown op 'image.rotate'"):
        Op(json.dumps({"op": "image.rotate"}))
    # numpy values are plain numbers to the engine.
    assert I.resize(np.int64(8)).spec_json() == I.resize(8).spec_json()
    assert json.loads(I.normalize(np.array([0.5, 0.5]), (0.2, 0.2)).spec_json())["mean"] == [0.5, 0.5]


# --- input shapes ------------------------------------------------------------------------------


def run_on(op, **fields):
    return list(sluice.from_items([fields]).map(op))


@pytest.mark.parametrize(
    "op, field, value",
    [
        (A.spectrogram(), "audio", np.ones((3, 4, 5), np.float32)),
        (A.resample(8000), "audio", np.ones((2, 2, 40), np.float32)),
        (A.time_stretch(2.0), "spec", np.ones(40, np.float32)),
        (A.time_mask(3), "spec", np.ones((1, 2, 3, 4), np.float32)),
        (A.mel(8), "spec", np.ones((2, 2, 201, 3), np.float32)),
        (I.resize(4), "image", np.ones(12, np.uint8)),
        (I.center_crop(2), "image", np.ones((4, 4, 2), np.uint8)),
        (I.horizontal_flip(p=1.0), "image", np.ones((4, 4, 3), np.float32)),
        (I.normalize([0.5] * 3, [0.2] * 3), "image", np.ones((4, 4), np.uint8)),
    ],
)
def test_inputs_of_the_wrong_shape_name_the_field(op, field, value):
    with pytest.raises(TypeError) as ei:
        run_on(op, **{field: value, "sample_rate": 16000})
    msg = str(ei.value)
    assert f"op '{op.name}' failed on sample 0" in msg and f"field '{field}'" in msg, msg
    assert str(list(value.shape)) in msg, msg


def test_spectrogram_of_channels_keeps_the_channel_axis():
    (s,) = run_on(A.spectrogram(64), audio=np.ones((2, 640), np.float32))
    assert s["spec"].shape == (2, 33, 41)


# --- out= --------------------------------------------------------------------------------------

IMAGE_OPS = [
    I.resize(8, out="aug"),
    I.center_crop(5, out="aug"),
    I.random_resized_crop(6, out="aug"),
    I.horizontal_flip(p=1.0, out="aug"),
    I.color_jitter(0.4, 0.4, 0.4, 0.1, out="aug"),
    I.grayscale(num_output_channels=3, out="aug"),
    I.gaussian_blur(3, out="aug"),
    I.normalize([0.5] * 3, [0.2] * 3, out="aug"),
    I.to_tensor(out="aug"),
]


@pytest.mark.parametrize("op", IMAGE_OPS, ids=lambda o: o.name)
def test_image_out_leaves_the_input_untouched(op):
    img = np.random.default_rng(0).integers(0, 256, (12, 10, 3), dtype=np.uint8)
    ds = sluice.from_items([{"image": img}]).map(op)
    (s,) = list(ds)
    np.testing.assert_array_equal(s["image"], img)
    # The same draws as the op in place.
    spec = json.loads(op.spec_json())
    del spec["out"]
    (t,) = list(sluice.from_items([{"image": img}]).map(Op(json.dumps(spec))))
    np.testing.assert_array_equal(s["aug"], t["image"])
    assert f"map({op.name})" in ds.explain()


@pytest.mark.parametrize(
    "op, field, value",
    [
        (A.time_mask(20, out="aug"), "spec", np.ones((65, 30), np.float32)),
        (A.freq_mask(20, out="aug"), "spec", np.ones((65, 30), np.float32)),
        (T.truncate(2, out="aug"), "input_ids", np.array([5, 6, 7])),
        (T.add_tokens(1, 2, out="aug"), "input_ids", np.array([5, 6, 7])),
        (T.pad(5, out="aug"), "input_ids", np.array([5, 6, 7])),
    ],
    ids=lambda v: getattr(v, "name", None) or "",
)
def test_audio_and_text_out_leave_the_input_untouched(op, field, value):
    ds = sluice.from_items([{field: value, "sample_rate": 16000}]).map(op)
    (s,) = list(ds)
    np.testing.assert_array_equal(s[field], value)
    assert "aug" in s
    assert f"map({op.name})" in ds.explain()
