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
    full = [(b["src"], b["i"].tolist()) for b in ds.iter(seed=9, epoch=0)]
    assert full == [(b["src"], b["i"].tolist()) for b in ds.iter(seed=9, epoch=0, num_threads=1)]
    it = ds.iter(seed=9, epoch=0)
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
    with pytest.raises(ValueError, match="dataset 0 has batch"):
        sluice.mix([tagged("a", 3).batch(2)])
    with pytest.raises(ValueError, match="repeats forever"):
        sluice.mix([tagged("a", 3).repeat(), tagged("b", 3)], stop="all_exhausted")
    with pytest.raises(ValueError, match="never end"):
        sluice.mix([tagged("a", 3).repeat()])
    with pytest.raises(ValueError, match="a filter"):
        sluice.mix([sluice.range(3).filter(lambda s: True)])


# Inputs with their own order (Grain / tf.data style) -----------------------------------------


def own_order():
    a = tagged("a", 60).shuffle(seed=1)
    b = tagged("b", 45).map(lambda s: {**s, "i": s["i"] + 1000}).shuffle(seed=2).repeat(2)
    c = tagged("c", 90).shard(1, 3).shuffle(seed=3)
    return a, b, c


def test_shuffled_inputs_keep_their_own_order():
    a, b, c = own_order()
    out = list(sluice.mix([a, b, c], weights=[2, 1, 1], seed=7, stop="all_exhausted"))
    for name, alone in zip("abc", (a, b, c)):
        assert [s["i"] for s in out if s["src"] == name] == [s["i"] for s in alone], name
    assert len(out) == 60 + 90 + 30
    # Each input's epochs of b are two different permutations of its 45 samples.
    bs = [s["i"] for s in out if s["src"] == "b"]
    assert bs[:45] != bs[45:] and sorted(bs[:45]) == sorted(bs[45:]) == list(range(1000, 1045))


def test_unseeded_input_shuffles_follow_the_mix_seed():
    def run(mix_seed, iter_seed):
        ds = sluice.mix([tagged("a", 30).shuffle(), tagged("b", 30)], seed=mix_seed, stop="all_exhausted")
        return [s["i"] for s in ds.iter(seed=iter_seed) if s["src"] == "a"]

    assert run(1, 0) == run(1, 5)  # a pure function of the mix, not of the iteration seed
    assert run(1, 0) != run(2, 0)
    assert sorted(run(1, 0)) == list(range(30))


def test_restarted_input_reshuffles():
    ds = sluice.mix([tagged("a", 10).shuffle(seed=4), tagged("b", 35)], stop="restart")
    a = [s["i"] for s in ds if s["src"] == "a"]
    assert len(a) >= 30 and a[:10] != a[10:20]
    assert sorted(a[:10]) == sorted(a[10:20]) == list(range(10))


@pytest.mark.parametrize("threads", [0, 1, 3])
def test_mix_of_shuffled_inputs_resumes_exactly_at_any_point(threads):
    a, b, c = own_order()
    ds = sluice.mix([a, b, c], weights=[2, 1, 1], seed=7, stop="all_exhausted").map(lambda s: {**s, "k": 1}).batch(4)
    key = lambda batch: list(zip(batch["src"], batch["i"].tolist()))  # noqa: E731
    full = [key(x) for x in ds.iter(seed=3, num_threads=2)]
    assert full == [key(x) for x in ds.iter(seed=3, num_threads=threads)]
    for stop_at in (1, 9, 23, len(full) - 1):
        it = ds.iter(seed=3, num_threads=threads)
        head = [key(next(it)) for _ in range(stop_at)]
        state = it.state_dict()
        it.close()
        again = ds.iter(seed=3, num_threads=2 if threads != 2 else 1)
        again.load_state_dict(state)
        assert head + [key(x) for x in again] == full, stop_at
    # The mix travels by pickle with its inputs' orders.
    mixed = sluice.mix([a, b, c], weights=[2, 1, 1], seed=7)
    assert list(pickle.loads(pickle.dumps(mixed))) == list(mixed)
