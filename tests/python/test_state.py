"""Checkpoint and exact resume from Python: one round-trip check applied to every kind of
step (Python UDFs included), random pipelines by hypothesis, elastic resume on a new world
size, and the checkpoint's shape."""

import collections
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sluice


def aug(s, rng):
    return {"id": s["id"], "r": float(rng.random())}


def pipeline(rank=0):
    return (
        sluice.range(200)
        .shuffle()
        .shard(rank, 2)
        .repeat(2)
        .map(aug)
        .filter(lambda s: s["id"] % 5 != 0)
        .flat_map(lambda s: [s] * (1 + s["id"] % 2))
        .batch(7)
    )


def flat(batches):
    return [(int(i), float(r)) for b in batches for i, r in zip(b["id"], b["r"])]


def as_text(outputs):
    """Outputs in a comparable form (arrays by dtype, shape and contents)."""

    def value(v):
        if isinstance(v, np.ndarray):
            return (str(v.dtype), v.shape, v.tolist())
        if isinstance(v, list):
            return [value(x) for x in v]
        return v

    return [json.dumps({k: value(v) for k, v in sorted(o.items())}, default=str) for o in outputs]


def names(state):
    out, node = [], state["state"]
    while node is not None:
        assert set(node) == {"node", "own", "parent"}, node
        out.append(node["node"])
        node = node["parent"]
    return out


def round_trip(ds, every=1, seed=3):
    """Checkpoint after every `every`-th output, resume with other thread counts, compare."""
    full = as_text(ds.iter(seed=seed, epoch=0, num_threads=2, progress=False))
    for k in list(range(0, len(full) + 1, every)) + [len(full)]:
        it = ds.iter(seed=seed, epoch=0, num_threads=2, progress=False)
        for _ in range(k):
            next(it)
        state = it.state_dict()
        it.close()
        text = json.dumps(state)
        assert len(text) < 4096, text
        assert state["version"] == 2
        if k:
            assert names(state)[-1] == ds._native.logical_plan().split()[0], state
        state = json.loads(text)
        resumed = ds.iter(seed=seed, num_threads=k % 3, progress=False)  # 0: in the consumer
        resumed.load_state_dict(state)
        assert as_text(resumed) == full[k:], f"after {k} of {len(full)}"
    return full


def double(s):
    return [s, {"id": s["id"] + 1000}]


def noisy(s, rng):
    return {"id": s["id"], "x": rng.normal(size=3).astype(np.float32)}


def scale_batch(b):
    return {"id": b["id"] * 2}


@pytest.fixture
def text_file(tmp_path):
    p = tmp_path / "lines.txt"
    p.write_text("".join(f"line {i}\n" for i in range(45)))
    return str(p)


def cases(text_file):
    r = lambda: sluice.range(30)  # noqa: E731
    return {
        "source": r(),
        "map udf with rng": r().map(noisy),
        "filter": r().filter(lambda s: s["id"] % 3 != 0),
        "flat_map": r().flat_map(double),
        "batch": r().batch(4),
        "batch drop_last": r().batch(7, drop_last=True),
        "shuffle": r().shuffle(seed=1),
        "shard": r().shard(1, 3),
        "repeat": r().repeat(2),
        "prefetch": r().prefetch(2).batch(3),
        "limit": r().limit(11),
        "limit then batch": r().flat_map(double).limit(25).batch(4),
        "shuffle_buffer": sluice.read_text(text_file).shuffle_buffer(8),
        "map_batches": r().map_batches(scale_batch, batch_size=4),
        "map_batches then map and batch": r().map_batches(scale_batch, batch_size=4).map(noisy).batch(3),
        "cache": r().map(lambda s: {"id": s["id"] + 1}).cache().repeat(2),
        "mix": sluice.mix([r(), sluice.range(9)], [0.75, 0.25], seed=2).shuffle(),
        "pack": r().map(lambda s: {"input_ids": list(range(s["id"] % 5))}).pack(4, separator=-1),
        "batch padded": r()
        .map(lambda s: {"t": np.arange(s["id"] % 4, dtype=np.int64)})
        .batch(3, pad={"t": -1}),
        "everything": r()
        .shuffle()
        .shard(0, 2)
        .repeat(2)
        .filter(lambda s: s["id"] % 4 != 1)
        .flat_map(double)
        .shuffle_buffer(6)
        .map_batches(scale_batch, batch_size=3)
        .limit(40)
        .map(noisy)
        .batch(4),
    }


def test_every_step_kind_round_trips(text_file):
    for name, ds in cases(text_file).items():
        try:
            round_trip(ds)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None


def test_resume_matches_uninterrupted_run_for_any_thread_count():
    ds = pipeline()
    full = list(ds.iter(seed=4, epoch=0, num_threads=2))
    for k in (0, 1, 5, len(full) // 2, len(full) - 1, len(full)):
        it = ds.iter(seed=4, epoch=0, num_threads=2)
        for _ in range(k):
            next(it)
        state = it.state_dict()
        assert len(str(state)) < 4096
        it.close()
        for threads in (0, 1, 8):
            resumed = ds.iter(seed=4, num_threads=threads)
            resumed.load_state_dict(state)
            assert flat(resumed) == flat(full[k:]), (k, threads)


def test_full_outputs_do_not_depend_on_threads(text_file):
    for name, ds in cases(text_file).items():
        runs = [as_text(ds.iter(seed=5, epoch=0, num_threads=t, progress=False)) for t in (0, 1, 2, 8)]
        assert runs[0] == runs[1] == runs[2] == runs[3], name


def first_id(x):
    # The first id however deep the batching: a batch of batches of unequal sizes holds a
    # list of arrays, which numpy cannot turn into one array.
    v = x["id"]
    while isinstance(v, (list, tuple)) or (isinstance(v, np.ndarray) and v.ndim > 0):
        v = v[0]
    return int(v)


STEPS = st.lists(st.sampled_from(["map", "filter", "flat_map", "buffer", "limit", "map_batches", "batch"]), max_size=5)


@settings(max_examples=30, deadline=None)
@given(steps=STEPS, n=st.integers(1, 40), shuffled=st.booleans(), k=st.integers(0, 100), seed=st.integers(0, 9))
def test_random_pipelines_resume_exactly(steps, n, shuffled, k, seed):
    ds = sluice.range(n)
    if shuffled:
        ds = ds.shuffle()
    for s in steps:
        ds = {
            "map": lambda d: d.map(noisy),
            "filter": lambda d: d.filter(lambda x: first_id(x) % 3 != 2),
            "flat_map": lambda d: d.flat_map(lambda x: [x] * (1 + first_id(x) % 3)),
            "buffer": lambda d: d.shuffle_buffer(1 + n % 7),
            "limit": lambda d: d.limit(n // 2 + 2),
            "map_batches": lambda d: d.map_batches(lambda b: b, batch_size=1 + n % 4),
            "batch": lambda d: d.batch(1 + n % 5, drop_last=n % 2 == 0),
        }[s](ds)
    full = as_text(ds.iter(seed=seed, progress=False))
    k = k % (len(full) + 1)
    it = ds.iter(seed=seed, epoch=0, num_threads=2, progress=False)
    for _ in range(k):
        next(it)
    state = json.loads(json.dumps(it.state_dict()))
    resumed = ds.iter(seed=seed, num_threads=1, progress=False)
    resumed.load_state_dict(state)
    assert as_text(resumed) == full[k:]


def test_state_has_one_node_per_step_with_positions():
    ds = sluice.range(50).shuffle().shard(1, 2).map(noisy).limit(20).batch(4)
    it = ds.iter(seed=1)
    next(it), next(it)
    state = it.state_dict()
    assert names(state) == ["batch", "take", "map", "shard", "shuffle", "range"]
    node = state["state"]["parent"]
    assert node["own"]["at"]["pos"] == 7  # 8 samples taken
    shard = node["parent"]["parent"]
    assert shard["own"] == {"rank": 1, "world_size": 2}
    source = shard["parent"]["parent"]
    assert set(source["own"]["at"]) == {"epoch", "pos", "ord"}


def test_state_after_exhaustion_resumes_to_nothing():
    ds = sluice.range(5).batch(2)
    it = ds.iter()
    assert len(list(it)) == 3
    st_ = it.state_dict()
    again = ds.iter()
    again.load_state_dict(st_)
    assert list(again) == []


def test_wrong_checkpoints_are_refused():
    ds = pipeline()
    it = ds.iter(seed=1)
    next(it)
    st_ = it.state_dict()
    with pytest.raises(ValueError, match="seed"):
        ds.iter(seed=2).load_state_dict(st_)
    with pytest.raises(ValueError, match="different pipeline"):
        sluice.range(3).batch(2).iter(seed=1).load_state_dict(st_)
    with pytest.raises(ValueError, match="invalid state"):
        ds.iter(seed=1).load_state_dict({"nope": 1})
    with pytest.raises(TypeError):
        ds.iter(seed=1).load_state_dict("not a dict")
    with pytest.raises(ValueError, match="elastic_state"):
        pipeline(rank=1).iter(seed=1).load_state_dict(st_)


def key(s):
    return (s["id"], round(s["r"], 12))


def source_at(state):
    node = state["state"]
    while node["parent"] is not None:
        node = node["parent"]
    return node["own"]["at"]


@pytest.mark.parametrize("old_world,new_world,flat_map", [(2, 3, False), (4, 2, False), (3, 3, True)])
def test_elastic_resume_finishes_the_epoch_on_a_new_world_size(old_world, new_world, flat_map):
    n = 97

    def ds(rank, world):
        d = sluice.range(n).shuffle(seed=7).shard(rank, world).repeat(2).map(aug)
        return d.flat_map(lambda s: [s] * (1 + s["id"] % 2)) if flat_map else d

    # Epoch 1 of the whole dataset (one rank of one: same steps, so the same randomness).
    whole = list(ds(0, 1).iter(seed=1))
    per_epoch = sum(1 + (i % 2 if flat_map else 0) for i in range(n))
    expected = collections.Counter(key(s) for s in whole[per_epoch:])
    seen = collections.Counter()
    states = []
    for r in range(old_world):
        # Each old rank runs a different distance into epoch 1, then checkpoints.
        it = ds(r, old_world).iter(seed=1)
        while True:
            s = next(it)
            at = source_at(it.state_dict())
            if at["epoch"] == 1:
                seen[key(s)] += 1
                if at["pos"] >= 3 * r + 1:
                    break
        states.append(it.state_dict())
    merged = sluice.elastic_state(states[::-1])  # any order
    assert merged["elastic"]["world_size"] == old_world
    lens = []
    for r in range(new_world):
        # Rank 0 runs in the consumer (the source's elastic positions made there too).
        it = ds(r, new_world).iter(seed=1, num_threads=0 if r == 0 else 2)
        it.load_state_dict(merged)
        rest = list(it)
        lens.append(len(rest))
        seen.update(key(s) for s in rest)
    assert not (seen - expected), "delivered twice or never expected"
    missing = expected - seen
    assert len({k[0] for k in missing}) < new_world, missing
    if not flat_map:
        assert len(set(lens)) == 1, lens


def test_elastic_state_bad_inputs():
    with pytest.raises(TypeError):
        sluice.elastic_state({"version": 2})
    with pytest.raises(ValueError, match="every rank"):
        sluice.elastic_state([])
    a = sluice.range(10).shard(0, 2).iter()
    next(a)
    with pytest.raises(ValueError, match="world size of 2"):
        sluice.elastic_state([a.state_dict()])
    b = sluice.range(10).iter()
    next(b)
    with pytest.raises(ValueError, match="no shard"):
        sluice.elastic_state([b.state_dict()])
    c = [sluice.range(10).shard(r, 2).limit(3).iter() for r in (0, 1)]
    for it in c:
        next(it)
    with pytest.raises(ValueError, match="take"):
        sluice.elastic_state([it.state_dict() for it in c])


def test_streams_shard_by_file_and_resume(tmp_path):
    import io
    import tarfile

    for s in range(5):
        with tarfile.open(tmp_path / f"shard-{s}.tar", "w") as tar:
            for i in range(4 + s):
                data = f"{s}-{i}".encode()
                info = tarfile.TarInfo(f"{s:02d}{i:03d}.txt")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    ds = lambda rank, world: sluice.read_webdataset(str(tmp_path)).shard(rank, world, equal=False)  # noqa: E731
    parts = [[bytes(s["txt"]).decode() for s in ds(r, 2)] for r in (0, 1)]
    # Whole files per rank: 0, 2, 4 and 1, 3.
    assert {p.split("-")[0] for p in parts[0]} == {"0", "2", "4"}
    assert {p.split("-")[0] for p in parts[1]} == {"1", "3"}
    assert sorted(parts[0] + parts[1]) == sorted(f"{s}-{i}" for s in range(5) for i in range(4 + s))
    with pytest.raises(ValueError, match="equal=False"):
        sluice.read_webdataset(str(tmp_path)).shard(0, 2).iter()
    # A shuffled, sharded stream resumes exactly too.
    round_trip(ds(1, 2).shuffle_buffer(4).batch(3))
