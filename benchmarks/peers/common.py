"""What every peer shares: the three reference workloads' parameters, sample lists and the
per-sample functions written with the peers' usual libraries (torchvision, HF tokenizers,
soundfile + librosa).

Every peer's `make_iter(workload, data_dir, *, samples=None, seed=0, workers=2, **cfg)` yields
batches as ``dict[str, array]`` (numpy arrays or torch tensors):

- ``cv``:  ``image`` float32 [64, 3, 224, 224] (ImageNet-normalised CHW), ``label`` int64 [64]
- ``nlp``: ``input_ids`` int64 [128, 256] (``<SOS>`` + ≤254 BPE ids + ``<EOT>``, padded with 0)
- ``asr``: ``features`` float32 [1, 80, T] (log-mel of the stretched, masked power STFT)

``samples`` is how many samples the caller will consume; peers make their source at least that
long (by repeating seeded permutations of the data), so no epoch boundary falls inside a
measurement. Heavy imports stay inside functions so that importing this module is cheap.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

WORKLOADS = ("cv", "nlp", "asr")

# ---- CV: SimCLR-style augmentation -------------------------------------------------------
CV_BATCH = 64
CV_SIZE = 224
CV_SCALE = (0.08, 1.0)
CV_RATIO = (3 / 4, 4 / 3)
CV_FLIP_P = 0.5
CV_JITTER = (0.4, 0.4, 0.4, 0.1)  # brightness, contrast, saturation, hue
CV_JITTER_P = 0.8
CV_GRAY_P = 0.2
CV_BLUR_KERNEL = 23
CV_BLUR_SIGMA = (0.1, 2.0)
CV_BLUR_P = 0.5
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

# ---- NLP: GPT-2-style BPE ----------------------------------------------------------------
NLP_BATCH = 128
NLP_LEN = 256
NLP_BOS = 4  # <SOS>
NLP_EOS = 0  # <EOT>
NLP_PAD = 0

# ---- ASR: spectrogram pipeline -----------------------------------------------------------
ASR_BATCH = 1
ASR_RATE = 16000
ASR_NFFT = 400
ASR_HOP = 160
ASR_STRETCH = 0.8
ASR_TIME_MASK = 80
ASR_FREQ_MASK = 27
ASR_MELS = 80
ASR_LOG_EPS = 1e-6

BATCH = {"cv": CV_BATCH, "nlp": NLP_BATCH, "asr": ASR_BATCH}


# ---- data locations ----------------------------------------------------------------------
def default_data_dir() -> Path:
    env = os.environ.get("SLUICE_BENCH_DATA")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "sluice-bench"


def image_files(data_dir: Path) -> list[tuple[str, int]]:
    """(path, label) for every JPEG, sorted; label = index of the class folder."""
    root = Path(data_dir) / "images"
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not classes:
        raise FileNotFoundError(f"no images under {root}: run benchmarks/datasets/build.py")
    return [(str(f), ci) for ci, c in enumerate(classes) for f in sorted((root / c).glob("*.jpg"))]


def class_names(data_dir: Path) -> list[str]:
    return sorted(p.name for p in (Path(data_dir) / "images").iterdir() if p.is_dir())


def cpu_model() -> str:
    """This machine's CPU as /proc/cpuinfo names it, with its family and model where the name
    alone does not tell the generation (a VM's "AMD EPYC"); "?" where it does not say."""
    try:
        with open("/proc/cpuinfo") as f:
            fields = dict(ln.split(":", 1) for ln in f.read().split("\n\n")[0].splitlines() if ":" in ln)
    except OSError:
        return "?"
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    name = fields.get("model name", "?")
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return name


def cpu_isa() -> str:
    """The widest x86 vector extension the kernels can dispatch to here: "AVX-512" (x86-64-v4),
    "AVX2" (v3) or "?" — the two kinds a figure must hold on."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        return "?"
    if "avx512f" in flags and "avx512bw" in flags:
        return "AVX-512"
    return "AVX2" if "avx2" in flags else "?"


def audio_files(data_dir: Path) -> list[str]:
    """The ASR clips; only those at one sample rate when SLUICE_BENCH_ASR_RATE says which
    (run.py --asr-rate 22050: every clip then needs resampling to 16 kHz, as CommonVoice's
    48 kHz clips do; the default mixes 16 and 22.05 kHz half and half)."""
    files = sorted(str(p) for p in (Path(data_dir) / "audio").glob("*.mp3"))
    if not files:
        raise FileNotFoundError(f"no MP3s under {data_dir}/audio: run benchmarks/datasets/build.py")
    rate = os.environ.get("SLUICE_BENCH_ASR_RATE")
    if rate:
        import soundfile

        files = [f for f in files if soundfile.info(f).samplerate == int(rate)]
        if not files:
            raise FileNotFoundError(f"no {rate} Hz MP3s under {data_dir}/audio")
    return files


def text_file(data_dir: Path) -> Path:
    return Path(data_dir) / "text" / "lines.txt"


def tokenizer_file(data_dir: Path) -> Path:
    return Path(data_dir) / "tokenizer" / "gpt2ish.json"


def epochs_of(items: list, samples: int | None, seed: int, shuffle: bool = True) -> list:
    """`items` in seeded per-epoch permutations, concatenated until at least `samples` long
    (one epoch when `samples` is None)."""
    import numpy as np

    n = len(items)
    need = n if samples is None else max(1, samples)
    out: list = []
    epoch = 0
    while len(out) < need:
        if shuffle:
            order = np.random.default_rng([seed, epoch]).permutation(n)
            out.extend(items[i] for i in order)
        else:
            out.extend(items)
        epoch += 1
    return out[:need] if samples is not None else out


def cv_items(data_dir: Path, samples: int | None, seed: int) -> list[tuple[str, int]]:
    return epochs_of(image_files(data_dir), samples, seed)


def asr_items(data_dir: Path, samples: int | None, seed: int) -> list[str]:
    return epochs_of(audio_files(data_dir), samples, seed)


def nlp_lines(data_dir: Path, samples: int | None) -> list[str]:
    """Lines of the corpus in file order (repeated if more are asked for than it has)."""
    with open(text_file(data_dir), encoding="utf-8") as f:
        lines = f.read().splitlines()
    return epochs_of(lines, samples, 0, shuffle=False)


# ---- CV with torchvision (DataLoader, Ray Data, Grain and the sluice UDF peer use it) -----
def cv_torch_transform():
    import torch
    from torchvision.transforms import v2

    return v2.Compose([
        v2.RandomResizedCrop(CV_SIZE, scale=CV_SCALE, ratio=CV_RATIO, antialias=True),
        v2.RandomHorizontalFlip(CV_FLIP_P),
        v2.RandomApply([v2.ColorJitter(*CV_JITTER)], p=CV_JITTER_P),
        v2.RandomGrayscale(CV_GRAY_P),
        v2.RandomApply([v2.GaussianBlur(CV_BLUR_KERNEL, sigma=CV_BLUR_SIGMA)], p=CV_BLUR_P),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ])


def cv_decode_torch(path_or_bytes):
    """JPEG → uint8 CHW RGB tensor (torchvision.io, libjpeg-turbo)."""
    import torch
    from torchvision.io import ImageReadMode, decode_jpeg, read_file

    if isinstance(path_or_bytes, (str, Path)):
        data = read_file(str(path_or_bytes))
    else:
        data = torch.frombuffer(bytearray(path_or_bytes), dtype=torch.uint8)
    return decode_jpeg(data, mode=ImageReadMode.RGB)


class CVSample:
    """Picklable per-sample function: path (or bytes) → augmented float32 CHW array."""

    def __init__(self):
        self._tf = None

    def image(self, path_or_bytes):
        if self._tf is None:
            import torch

            torch.set_num_threads(1)
            self._tf = cv_torch_transform()
        return self._tf(cv_decode_torch(path_or_bytes))

    def __getstate__(self):
        return {}

    def __setstate__(self, state):
        self._tf = None


# ---- NLP with HF tokenizers --------------------------------------------------------------
def load_tokenizer(data_dir: Path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_file(data_dir)))
    tok.no_truncation()
    tok.no_padding()
    return tok


def nlp_frame(ids) -> "np.ndarray":  # noqa: F821
    """BOS + ids[:254] + EOS, padded with PAD to 256, as int64."""
    import numpy as np

    out = np.full(NLP_LEN, NLP_PAD, dtype=np.int64)
    body = ids[: NLP_LEN - 2]
    out[0] = NLP_BOS
    out[1:1 + len(body)] = body
    out[1 + len(body)] = NLP_EOS
    return out


def nlp_encode(tok, text: str):
    return nlp_frame(tok.encode(text, add_special_tokens=False).ids)


def nlp_encode_batch(tok, texts) -> "np.ndarray":  # noqa: F821
    import numpy as np

    encs = tok.encode_batch(list(texts), add_special_tokens=False)
    return np.stack([nlp_frame(e.ids) for e in encs]) if encs else np.zeros((0, NLP_LEN), np.int64)


class NLPSample:
    """Picklable per-sample tokenizer function (loads the tokenizer lazily in each worker)."""

    def __init__(self, data_dir: Path):
        self.data_dir = Path(data_dir)
        self._tok = None

    @property
    def tok(self):
        if self._tok is None:
            self._tok = load_tokenizer(self.data_dir)
        return self._tok

    def ids(self, text: str):
        return nlp_encode(self.tok, text)

    def ids_batch(self, texts):
        return nlp_encode_batch(self.tok, texts)

    def __getstate__(self):
        return {"data_dir": self.data_dir}

    def __setstate__(self, state):
        self.data_dir = state["data_dir"]
        self._tok = None


# ---- ASR with soundfile + librosa ---------------------------------------------------------
_MEL = None


def mel_filterbank():
    global _MEL
    if _MEL is None:
        import librosa
        import numpy as np

        _MEL = librosa.filters.mel(sr=ASR_RATE, n_fft=ASR_NFFT, n_mels=ASR_MELS).astype(np.float32)
    return _MEL


def asr_decode(path_or_bytes):
    """MP3 → float32 mono waveform and its sample rate (libsndfile via soundfile)."""
    import io

    import soundfile as sf

    src = path_or_bytes if isinstance(path_or_bytes, (str, Path)) else io.BytesIO(path_or_bytes)
    y, sr = sf.read(src, dtype="float32", always_2d=True)
    return y.mean(axis=1) if y.shape[1] > 1 else y[:, 0], sr


def asr_features(path_or_bytes, rng) -> "np.ndarray":  # noqa: F821
    """decode → resample 16 kHz → STFT → time_stretch(0.8) → power → time_mask(80) →
    freq_mask(27) → 80-bin mel → log; float32 [80, T]. `rng` is a numpy Generator."""
    import librosa
    import numpy as np

    y, sr = asr_decode(path_or_bytes)
    if sr != ASR_RATE:
        y = librosa.resample(y, orig_sr=sr, target_sr=ASR_RATE)
    spec = librosa.stft(y, n_fft=ASR_NFFT, hop_length=ASR_HOP)
    spec = librosa.phase_vocoder(spec, rate=ASR_STRETCH, hop_length=ASR_HOP)
    power = (spec.real ** 2 + spec.imag ** 2).astype(np.float32)
    n_freq, n_time = power.shape
    w = int(rng.integers(0, ASR_TIME_MASK + 1))
    t0 = int(rng.integers(0, max(1, n_time - w + 1)))
    power[:, t0:t0 + w] = 0.0
    w = int(rng.integers(0, ASR_FREQ_MASK + 1))
    f0 = int(rng.integers(0, max(1, n_freq - w + 1)))
    power[f0:f0 + w, :] = 0.0
    mel = mel_filterbank() @ power
    return np.log(mel + ASR_LOG_EPS).astype(np.float32)


def asr_rng(seed: int, index: int):
    import numpy as np

    return np.random.default_rng([seed, index, 0xA5])


# ---- checking what a peer produced --------------------------------------------------------
def batch_len(batch) -> int:
    """Samples in a batch: the length of its first field."""
    if isinstance(batch, dict):
        first = next(iter(batch.values()))
        return int(first.shape[0]) if hasattr(first, "shape") else len(first)
    if hasattr(batch, "shape"):
        return int(batch.shape[0])
    return len(batch)


def describe(batch) -> dict:
    """{field: [shape, dtype]} of a batch, whatever array library it uses."""
    out = {}
    if not isinstance(batch, dict):
        return {"<batch>": [type(batch).__name__, len(batch) if hasattr(batch, "__len__") else None]}
    for k, v in batch.items():
        if hasattr(v, "shape") and hasattr(v, "dtype"):
            out[k] = [list(v.shape), str(v.dtype).replace("torch.", "")]
        else:
            out[k] = [type(v).__name__, len(v) if hasattr(v, "__len__") else None]
    return out


def _np(x):
    import numpy as np

    if hasattr(x, "numpy"):
        x = x.numpy()
    return np.asarray(x)


def check_batch(workload: str, batch, full: bool = True) -> list[str]:
    """Problems with a batch's shapes, dtypes and values (empty list when it is right)."""
    import numpy as np

    problems = []
    n = BATCH[workload]

    def expect(field, shape, dtype):
        if field not in batch:
            problems.append(f"missing field {field!r} (have {sorted(batch)})")
            return None
        a = _np(batch[field])
        want = list(shape)
        got = list(a.shape)
        if not full and got and want:
            want[0] = got[0]
        if len(got) != len(want) or any(w is not None and g != w for g, w in zip(got, want)):
            problems.append(f"{field}: shape {got}, want {want}")
        if a.dtype != np.dtype(dtype):
            problems.append(f"{field}: dtype {a.dtype}, want {dtype}")
        return a

    if not isinstance(batch, dict):
        return [f"batch is {type(batch).__name__}, want dict"]
    if workload == "cv":
        img = expect("image", (n, 3, CV_SIZE, CV_SIZE), "float32")
        lab = expect("label", (n,), "int64")
        if img is not None and not (-3.0 < float(img.mean()) < 3.0 and img.min() >= -2.2 - 1e-3
                                    and img.max() <= 2.7 + 1e-3):
            problems.append(f"image values look unnormalised: min {img.min()} max {img.max()}")
        if lab is not None and (lab.min() < 0 or lab.max() > 9):
            problems.append(f"labels outside 0..9: {lab.min()}..{lab.max()}")
    elif workload == "nlp":
        ids = expect("input_ids", (n, NLP_LEN), "int64")
        if ids is not None and ids.size and not (ids[:, 0] == NLP_BOS).all():
            problems.append("input_ids[:, 0] is not <SOS>")
    elif workload == "asr":
        f = expect("features", (n, ASR_MELS, None), "float32")
        if f is not None and f.dtype.kind == "f" and not np.isfinite(f).all():
            problems.append("features are not finite")
    return problems


def checksum(batch) -> str:
    """Order-sensitive digest of a batch's arrays (to compare peers' outputs exactly)."""
    import hashlib

    import numpy as np

    h = hashlib.sha256()
    for k in sorted(batch):
        a = np.ascontiguousarray(_np(batch[k]))
        h.update(k.encode())
        h.update(str(a.dtype).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def ceil_batches(samples: int, batch: int) -> int:
    return int(math.ceil(samples / batch)) * batch


def tree_cpu_seconds() -> float:
    """User + system CPU seconds of this process and all its descendants so far (psutil)."""
    import psutil

    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for c in me.children(recursive=True):
        try:
            total += sum(c.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return total
