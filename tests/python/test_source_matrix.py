"""Every source kind × every backend: the same outputs, byte for byte.

Each reopenable source (small real files written here) is followed by a Python UDF — so a
stage runs on the backend: in this thread, on threads, in worker processes, on Ray actors —
and a built-in op. Worker processes and actors reopen a random-access source from its spec
(``sluice_io::SourceSpec``) and read samples themselves; items travel as indices. Each
backend's outputs must equal the inline run's, and a pickled copy of each source reads the
same samples.

Ray starts once for the module (as in ``test_ray.py``) and is shut down at its end.
"""

import csv
import io
import json
import os
import pathlib
import pickle
import shutil
import tarfile
import tempfile

import numpy as np
import pytest

import sluice
from sluice import ops

SLUICE_ROOT = str(pathlib.Path(sluice.__file__).resolve().parents[1])
N = 24  # samples per source: several chunks of CHUNK per backend
CHUNK = 4


def _png(value: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (4, 3), (value, 255 - value, 7)).save(out, format="PNG")
    return out.getvalue()


def _tar(path: pathlib.Path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w") as t:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))


def make_sources(root: pathlib.Path) -> dict:
    """One dataset per source kind, over files in ``root``."""
    files = root / "files"
    files.mkdir()
    for i in range(N):
        (files / f"f{i:02}.bin").write_bytes(bytes(range(i, i + 5)))
    images = root / "images"
    for i in range(N):
        d = images / ("cat" if i % 3 else "dog")
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:02}.png").write_bytes(_png(i * 10))
    text = root / "a.txt"
    text.write_text("".join(f"line {i} {'x' * i}\n" for i in range(N)))
    jsonl = root / "a.jsonl"
    jsonl.write_text("".join(json.dumps({"id": str(i), "v": [i, i + 1], "s": f"t{i}"}) + "\n" for i in range(N)))
    tsv = root / "a.tsv"
    with open(tsv, "w", newline="") as f:
        w = csv.writer(f, delimiter="\t")
        w.writerow(["id", "name", "score"])
        for i in range(N):
            w.writerow([i, f"n\t{i}", i / 4])
    sluice.range(N).map(lambda s: {"id": s["id"], "t": f"row {s['id']}", "x": float(s["id"]) / 3}).write_parquet(
        str(root / "pq"), rows_per_group=5
    )
    for k in range(3):
        _tar(root / f"s{k}.tar", [(f"k{k}{i}.{ext}", f"{ext}{k}{i}".encode()) for i in range(N // 3) for ext in ("txt", "cls")])
    return {
        "range": sluice.range(N),
        "read_files": sluice.read_files(str(files)),
        "read_images": sluice.read_images(str(images)),
        "read_text": sluice.read_text(str(text)),
        "read_jsonl": sluice.read_jsonl(str(jsonl), schema={"id": "int"}),
        "read_csv": sluice.read_csv(str(tsv), delimiter="\t", schema={"score": "float"}),
        "read_parquet": sluice.read_parquet(str(root / "pq"), columns=["x", "id"]),
        "read_webdataset": sluice.read_webdataset(str(root / "s*.tar"), shuffle_shards=True),
    }


def pipeline(ds):
    # Nested, so cloudpickle ships it by value (Ray's workers cannot import this module).
    def udf(s, rng):
        # Reads every field (so the samples the backend read are checked) and draws from
        # the sample's generator (so its seed and coordinates are checked too).
        width = sum(len(v) if isinstance(v, (bytes, str)) else np.asarray(v).size for v in s.values())
        return {**s, "width": width, "r": float(rng.random())}

    return ds.map(udf).map(ops.rename("r", "noise"))


def canonical(samples):
    """Samples as comparable values: arrays by dtype, shape and bytes."""
    out = []
    for s in samples:
        row = []
        for k, v in s.items():
            if isinstance(v, np.ndarray):
                v = (v.dtype.str, v.shape, v.tobytes())
            elif isinstance(v, float):
                v = ("f", v.hex())
            row.append((k, v))
        out.append(row)
    return out


@pytest.fixture(scope="module")
def sources():
    root = pathlib.Path(tempfile.mkdtemp(prefix="sluice-matrix-"))
    try:
        yield make_sources(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def inline(sources):
    return {name: canonical(pipeline(ds).iter(seed=7, num_threads=0, chunk_size=CHUNK)) for name, ds in sources.items()}


@pytest.fixture(scope="module")
def ray_context():
    """A local Ray cluster for the module (started once), as ``test_ray.py`` starts it."""
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    tmp = tempfile.mkdtemp(prefix="sm", dir="/tmp")  # short: Ray's sockets live under it
    if started:
        path = os.environ.get("PYTHONPATH", "")
        if not path.startswith(SLUICE_ROOT):
            os.environ["PYTHONPATH"] = SLUICE_ROOT + (os.pathsep + path if path else "")
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100_000_000, _temp_dir=tmp, log_to_driver=False)
    try:
        yield sluice.Context("auto", num_actors=2, actor_cpus=0)
    finally:
        if started:
            ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


KINDS = ["range", "read_files", "read_images", "read_text", "read_jsonl", "read_csv", "read_parquet", "read_webdataset"]


def test_every_source_kind_is_in_the_matrix(sources):
    assert sorted(sources) == sorted(KINDS)
    for name, ds in sources.items():
        assert ds._native.source_spec() is not None, f"{name} reopens from a spec"


@pytest.mark.parametrize("kind", KINDS)
def test_inline_run_reads_every_sample(inline, kind):
    assert len(inline[kind]) == N
    assert all(dict(row)["width"] > 0 for row in inline[kind])


@pytest.mark.parametrize("kind", KINDS)
def test_pickled_source_reads_the_same_samples(sources, inline, kind):
    copy = pickle.loads(pickle.dumps(pipeline(sources[kind])))
    assert canonical(copy.iter(seed=7, num_threads=0, chunk_size=CHUNK)) == inline[kind]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_local_backends_equal_inline(sources, inline, kind, backend):
    opts = {"threads": {"num_threads": 2}, "processes": {"processes": 2}}[backend]
    got = canonical(pipeline(sources[kind]).iter(seed=7, chunk_size=CHUNK, **opts))
    assert got == inline[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_ray_actors_equal_inline(sources, inline, ray_context, kind):
    it = pipeline(sources[kind]).iter(seed=7, chunk_size=CHUNK, context=ray_context)
    got = canonical(it)
    assert got == inline[kind]
    pool = it.stats()["remote"][-1]  # the context lists the pools of each of its runs
    assert pool["chunks"] > 0 and pool["retries"] == 0
    assert sum(s["chunks"] for s in pool["slots"] if not s["local"]) == pool["chunks"]
    # Random-access sources are read on the actors (reopened from their spec; items travel
    # as indices); a stream (tar shards) is read here and its samples travel.
    assert pool["stage"].startswith("read+") == (kind != "read_webdataset"), pool["stage"]
