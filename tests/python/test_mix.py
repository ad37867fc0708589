"""sluice.mix: weighted, deterministic, balanced interleave with stop policies."""

import pickle

import pytest

import sluice


def tagged(name, n):
    return sluice.from_items([{"src": name, "i": i} for i in range(n)])


def test_proportions_are_tight_and_order_within_each_dataset_is_kept():
    ds = sluice.mix([tagged("a", 5000), tagged("b", 5000), tagged("c", 5000)], weights=[5, 3, 2], seed=1)
    out = list(ds)
    counts = {"a": 0, "b": 0, "c": 0}
    for n, s in enumerate(out, 1):
        counts[s["src"]] += 1
        for k, w in zip("abc", (0.5, 0.3, 0.2)):
            assert abs(counts[k] - n * w) <= 1.5, (n, counts)
    for k in "abc":
        assert [s["i"] for s in out if s["src"] == k] == list(range(counts[k]))


def test_stop_policies():
    a, b = tagged("a", 30), tagged("b", 10)
    first = list(sluice.mix([a, b]))
    assert sum(s["src"] == "b" for s in first) == 10 and len(first) <= 21
    allx = list(sluice.mix([a, b], stop="all_exhausted"))
    assert len(allx) == 40
    restart = list(sluice.mix([a, b], stop="restart"))
    assert sum(s["src"] == "a" for s in restart) == 30
    assert {s["i"] for s in restart if s["src"] == "b"} == set(range(10))
    with pytest.raises(ValueError, match="stop must be"):
        sluice.mix([a, b], stop="never")


def test_deterministic_shuffleable_and_resumable():
    mixed = sluice.mix([tagged("a", 40), tagged("b", 40)], weights=[1, 3], seed=4, stop="all_exhausted")
    ds = mixed.shuffle(seed=2).repeat(2).batch(7)
    full = [(b["src"], b["i"].tolist()) for b in ds.iter(seed=9)]
    assert full == [(b["src"], b["i"].tolist()) for b in ds.iter(seed=9, num_threads=1)]
    it = ds.iter(seed=9)
    head = [next(it) for _ in range(3)]
    state = it.state_dict()
    it2 = ds.iter(seed=9)
    it2.load_state_dict(state)
    assert [(b["src"], b["i"].tolist()) for b in it2] == full[3:]
    assert len(head) == 3
    back = pickle.loads(pickle.dumps(mixed))
    assert list(back) == list(mixed)


def test_bad_inputs():
    with pytest.raises(TypeError):
        sluice.mix(tagged("a", 3))
    with pytest.raises(ValueError, match="weights"):
        sluice.mix([tagged("a", 3), tagged("b", 3)], weights=[1])
    with pytest.raises(ValueError, match="positive"):
        sluice.mix([tagged("a", 3)], weights=[0])
    with pytest.raises(ValueError, match="shuffle|mix sources"):
        sluice.mix([tagged("a", 3).batch(2)])
    with pytest.raises(ValueError, match="a filter"):
        sluice.mix([sluice.range(3).filter(lambda s: True)])
