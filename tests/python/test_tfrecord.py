"""read_tfrecord against TFRecord files written by a small pure-Python writer (TensorFlow's
framing and tf.train.Example's protobuf encoding, by hand), read back equal."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

import sluice

# TFRecord framing ---------------------------------------------------------------------------
_CRC32C = []
for _n in range(256):
    _c = _n
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C.append(_c)


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC32C[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked(length)) + data + struct.pack("<I", masked(data))


# tf.train.Example, protobuf wire format -----------------------------------------------------
def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64 is two's complement on the wire
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:  # length-delimited
    return _varint(tag << 3 | 2) + _varint(len(payload)) + payload


def feature(value) -> bytes:
    if isinstance(value, (bytes, list)) and all(isinstance(v, bytes) for v in np.atleast_1d(value)):
        values = value if isinstance(value, list) else [value]
        return _field(1, b"".join(_field(1, v) for v in values))  # BytesList
    if isinstance(value, np.ndarray) and value.dtype == np.float32:
        return _field(2, _field(1, value.astype("<f4").tobytes()))  # FloatList, packed
    ints = [value] if isinstance(value, int) else list(value)
    return _field(3, _field(1, b"".join(_varint(int(i)) for i in ints)))  # Int64List, packed


def example(features: dict) -> bytes:
    entries = b"".join(_field(1, _field(1, k.encode()) + _field(2, feature(v))) for k, v in features.items())
    return _field(1, entries)


def record(i: int) -> dict:
    return {
        "id": i,
        "label": b"cat" if i % 2 else b"dog",
        "ids": np.array([i, -i, 2**40 + i]),
        "emb": np.array([i / 3, -0.5], dtype=np.float32),
        "tags": [b"a", b"b%d" % i],
    }


def write(path, records, compress=False) -> list[tuple[int, int]]:
    frames = [frame(example(r)) for r in records]
    data = b"".join(frames)
    path.write_bytes(gzip.compress(data) if compress else data)
    offsets, at = [], 0
    for f in frames:
        offsets.append((at, len(f)))
        at += len(f)
    return offsets


def check(sample: dict, want: dict) -> None:
    assert set(sample) == set(want)
    for k, v in want.items():
        if isinstance(v, np.ndarray):
            assert sample[k].dtype == v.dtype and sample[k].tolist() == v.tolist(), k
        else:
            assert sample[k] == v, k


def test_examples_read_back_equal(tmp_path):
    write(tmp_path / "a.tfrecord", [record(i) for i in range(5)])
    write(tmp_path / "b.tfrecord", [record(i) for i in range(5, 8)])
    ds = sluice.read_tfrecord(tmp_path)
    assert len(ds) == 8
    for i, s in enumerate(ds):
        check(s, record(i))
    only = sluice.read_tfrecord(tmp_path / "a.tfrecord", features=["id", "missing"]).take(2)
    assert only == [{"id": 0, "missing": None}, {"id": 1, "missing": None}]
    raw = sluice.read_tfrecord(tmp_path / "b.tfrecord", parse=False).take(1)
    assert raw == [{"record": example(record(5))}]


def test_shuffle_shard_and_resume_use_random_access(tmp_path):
    write(tmp_path / "x.tfrecord", [record(i) for i in range(40)])
    ds = sluice.read_tfrecord(tmp_path / "x.tfrecord", features=["id"])
    ids = lambda d: [s["id"] for s in d]  # noqa: E731
    shuffled = ids(ds.shuffle(seed=4))
    assert sorted(shuffled) == list(range(40)) and shuffled != list(range(40))
    # The same permutation as any random-access source of 40 samples.
    assert shuffled == [s["id"] for s in sluice.range(40).shuffle(seed=4)]
    assert ids(ds.shard(1, 4)) == ids(sluice.range(40).shard(1, 4))
    it = ds.shuffle(seed=1).batch(4).iter(seed=2)
    head = [next(it)["id"].tolist() for _ in range(3)]
    state = it.state_dict()
    rest = [b["id"].tolist() for b in it]
    again = ds.shuffle(seed=1).batch(4).iter(seed=2, num_threads=1)
    again.load_state_dict(state)
    assert [b["id"].tolist() for b in again] == rest
    assert sorted(sum(head + rest, [])) == list(range(40))


def test_index_files_and_gzip(tmp_path):
    offsets = write(tmp_path / "x.tfrecord", [record(i) for i in range(6)])
    (tmp_path / "x.index").write_text("".join(f"{o} {n}\n" for o, n in offsets))
    ds = sluice.read_tfrecord(tmp_path / "x.tfrecord", index=tmp_path / "x.index")
    assert [s["id"] for s in ds] == list(range(6))
    write(tmp_path / "z.tfrecord.gz", [record(i) for i in range(6)], compress=True)
    write(tmp_path / "z.data", [record(i) for i in range(6)], compress=True)
    for ds in [sluice.read_tfrecord(tmp_path / "z.tfrecord.gz"), sluice.read_tfrecord(tmp_path / "z.data", compression="gzip")]:
        shuffled = ds.shuffle(seed=0).take(6)
        assert sorted(s["id"] for s in shuffled) == list(range(6))
        for s in shuffled:
            check(s, record(s["id"]))
    with pytest.raises(ValueError, match="compression must be None or 'gzip'"):
        sluice.read_tfrecord(tmp_path / "x.tfrecord", compression="lz4")


def test_corrupt_crc_and_truncation_name_file_and_offset(tmp_path):
    offsets = write(tmp_path / "x.tfrecord", [record(i) for i in range(3)])
    data = bytearray((tmp_path / "x.tfrecord").read_bytes())
    start = offsets[1][0]
    data[start + 20] ^= 0xFF
    (tmp_path / "flip.tfrecord").write_bytes(bytes(data))
    ds = sluice.read_tfrecord(tmp_path / "flip.tfrecord")
    assert ds.take(1)[0]["id"] == 0
    with pytest.raises(sluice.PipelineError, match=rf"flip.tfrecord: record 1 at byte {start}: data CRC mismatch"):
        ds.take(2)
    whole = (tmp_path / "x.tfrecord").read_bytes()
    (tmp_path / "cut.tfrecord").write_bytes(whole[:-7])
    with pytest.raises(sluice.SluiceError, match=rf"cut.tfrecord: record at byte {offsets[2][0]} is cut short"):
        sluice.read_tfrecord(tmp_path / "cut.tfrecord")


def test_pickles_and_reopens_in_worker_processes(tmp_path):
    import pickle

    write(tmp_path / "x.tfrecord", [record(i) for i in range(10)])
    ds = sluice.read_tfrecord(tmp_path / "x.tfrecord", features=["id", "emb"])
    back = pickle.loads(pickle.dumps(ds))
    assert [s["id"] for s in back] == list(range(10))
    assert sorted(s["id"] for s in ds.iter(processes=2)) == list(range(10))
