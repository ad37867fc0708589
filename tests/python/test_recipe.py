"""Datasets and iterators pickle by their recipe; split gives equal, disjoint shards."""

import pickle

import numpy as np
import pytest

import sluice
from sluice import image


def flat(batches, field="id"):
    return [x for b in batches for x in np.asarray(b[field]).tolist()]


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for k in x:
            np.testing.assert_array_equal(np.asarray(x[k]), np.asarray(y[k]))


def augmented(images_dir):
    return (
        sluice.read_images(images_dir)
        .shuffle()
        .map(image.decode())
        .map(image.random_resized_crop(16))
        .map(lambda s, rng: {**s, "r": float(rng.random())})
        .map(sluice.ops.select(["image", "label", "r"]))
        .batch(3)
    )


def test_dataset_roundtrip_is_byte_identical(images_dir):
    ds = augmented(images_dir)
    copy = pickle.loads(pickle.dumps(ds))
    same(list(ds.iter(seed=7)), list(copy.iter(seed=7)))
    # Same recipe, same fingerprint: a checkpoint of one loads into the other.
    it = ds.iter(seed=7)
    next(it)
    it2 = copy.iter(seed=7)
    it2.load_state_dict(it.state_dict())
    same(list(it), list(it2))


def test_udf_closure_and_nested_steps_travel():
    k = 3
    ds = (
        sluice.from_items([{"x": i} for i in range(10)])
        .map(lambda s: {"x": s["x"] * k})
        .filter(lambda s: s["x"] % 2 == 0)
        .flat_map(lambda s: [s, s])
        .repeat(2)
        .batch(4, drop_last=True)
    )
    assert flat(pickle.loads(pickle.dumps(ds)), "x") == flat(ds, "x")


def test_op_pickles_as_its_spec():
    op = image.resize(8)
    back = pickle.loads(pickle.dumps(op))
    assert back.spec_json() == op.spec_json()


def test_iterator_resumes_after_last_delivered_output():
    ds = sluice.range(40).shuffle(seed=2).map(lambda s, rng: {**s, "r": rng.random()}).batch(3)
    full = list(ds.iter(seed=5))
    it = ds.iter(seed=5, epoch=0, num_threads=2)
    head = [next(it) for _ in range(4)]
    copy = pickle.loads(pickle.dumps(it))
    it.close()
    same(head + list(copy), full)
    # An iterator that has not started travels too, and starts from the beginning.
    same(list(pickle.loads(pickle.dumps(ds.iter(seed=5, epoch=0)))), full)


def test_unrecorded_dataset_refuses_clearly():
    ds = sluice.Dataset(sluice.range(3)._native)
    with pytest.raises(TypeError, match="cannot pickle"):
        pickle.dumps(ds.batch(2))


@pytest.mark.parametrize("n,length", [(3, 100), (4, 10), (1, 7)])
def test_split_equal_disjoint_deterministic(n, length):
    ds = sluice.range(length).shuffle(seed=1).map(lambda s: {"id": s["id"] + 1000}).batch(2)
    parts = ds.split(n)
    got = [flat(p.iter(seed=3)) for p in parts]
    assert len({len(g) for g in got}) == 1
    assert len(got[0]) == length // n
    union = [x for g in got for x in g]
    assert len(set(union)) == len(union)
    assert set(union) <= set(range(1000, 1000 + length))
    # Deterministic, and each part pickles (e.g. to a Ray Train worker).
    again = [flat(pickle.loads(pickle.dumps(p)).iter(seed=3)) for p in parts]
    assert again == got


def test_split_iterators_are_independent():
    parts = sluice.range(64).split(2)
    fast, slow = (p.iter(seed=0) for p in parts)
    next(slow)
    # The fast consumer drains its shard while the slow one holds a single batch.
    assert len(list(fast)) == 32
    assert len(list(slow)) == 31


def test_split_shards_before_filters_and_batches():
    ds = sluice.range(30).filter(lambda s: s["id"] % 3 != 0).batch(4)
    got = [flat(p) for p in ds.split(3)]
    union = sorted(x for g in got for x in g)
    assert union == [i for i in range(30) if i % 3 != 0]


def _plan_steps(ds):
    return [line.strip().removeprefix("-> ").split("(")[0] for line in ds._native.logical_plan().splitlines()]


def test_split_shards_before_a_map_that_may_skip():
    def odd_fails(s):
        if s["id"] % 2:
            raise ValueError("odd")
        return s

    ds = sluice.range(40).shuffle(seed=2).map(lambda s: s).map(odd_fails, on_error="skip").batch(3)
    parts = ds.split(2)
    # The shard goes after the 1:1 map, before the one that may drop samples.
    assert _plan_steps(parts[0])[1:] == ["shuffle", "map", "shard", "map", "batch"]
    got = [flat(p.iter(seed=1)) for p in parts]
    union = sorted(x for g in got for x in g)
    assert union == list(range(0, 40, 2))


def test_split_shards_after_the_last_sort():
    rows = [{"k": (7 * i) % 13, "i": i} for i in range(27)]  # 26 after the first filter: even
    ds = (
        sluice.from_items(rows)
        .filter(lambda s: s["i"] != 5)
        .sort("k")
        .shuffle(seed=1)
        .filter(lambda s: s["k"] != 3)
        .batch(4)
    )
    parts = ds.split(2)
    # After the sort (a new source: its input filter is not in the top chain), the shuffle.
    assert _plan_steps(parts[1])[1:] == ["shuffle", "shard", "filter", "batch"]
    got = [flat(p, "i") for p in parts]
    assert not set(got[0]) & set(got[1])
    assert sorted(got[0] + got[1]) == sorted(r["i"] for r in rows if r["i"] != 5 and r["k"] != 3)


def test_split_part_pickles_and_takes_the_original_checkpoint():
    ds = sluice.range(30).shuffle(seed=4).map(lambda s, rng: {**s, "r": float(rng.random())}).batch(4)
    part = ds.split(3)[1]
    copy = pickle.loads(pickle.dumps(part))
    assert copy._native.logical_plan() == part._native.logical_plan()
    it = part.iter(seed=2, epoch=0)
    head = [next(it), next(it)]
    state = it.state_dict()
    rest = list(it)
    it2 = copy.iter(seed=2, epoch=0)
    it2.load_state_dict(state)
    same(list(it2), rest)
    # Same draws and order as the original part from the start, too.
    same(list(copy.iter(seed=2, epoch=0)), head + rest)


def test_file_sources_pickle_as_their_spec(tmp_path):
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    ds = sluice.read_text(str(tmp_path)).map(lambda s: {"n": len(s["text"])})
    blob = pickle.dumps(ds)
    # The spec JSON travels (the form workers reopen sources from), not the Python call:
    # the copy reads the files the original expanded, even if the directory changes.
    assert b'"source":"read_text"' in blob
    (tmp_path / "b.txt").write_text("three\n")
    assert list(pickle.loads(blob)) == list(ds) == [{"n": 3}, {"n": 3}]
    # from_items holds its data here: it travels as the call (its items).
    items = sluice.from_items([{"x": 1}])
    assert items._native.source_spec() is None
    assert list(pickle.loads(pickle.dumps(items))) == [{"x": 1}]


def test_a_shard_before_a_sort_counts_as_the_pipeline_s_own():
    """to_torch shards by rank only when the pipeline has not: a shard() before a sort is
    one (sharding again after the sort would give each rank a quarter)."""
    ds = sluice.range(8).shard(0, 2).sort("id")
    with pytest.raises(ValueError, match="already has a shard"):
        list(ds.to_torch(rank=1, world_size=2))
    assert sorted(s["id"] for s in ds) == [0, 2, 4, 6]
