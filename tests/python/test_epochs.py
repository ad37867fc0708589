"""Epochs across iterations: each plain loop over a dataset is its next epoch (a new
permutation and new augmentation draws from (seed, epoch)), a rerun of the program repeats the
sequence, ``iter(epoch=k)`` runs epoch k explicitly, ``shuffle(seed=s)`` reshuffles per epoch
unless told not to, and a checkpoint carries its epoch."""

import json
import pickle

import numpy as np
import pytest

import sluice
from procs import run_py


def jitter(s, rng):
    return {"id": s["id"], "r": float(rng.random())}


def images(n=24):
    """Small distinct images: a flip shows in the first column."""
    row = np.tile(np.arange(6, dtype=np.uint8).reshape(1, 6, 1), (2, 1, 3))
    return [{"id": i, "image": row + np.uint8(i)} for i in range(n)]


def flipped(ds_or_it):
    """(id, was it flipped) per sample."""
    return [(int(s["id"]), bool(s["image"][0, 0, 0] != s["id"])) for s in ds_or_it]


def pairs(batches):
    return [(int(i), float(r)) for b in batches for i, r in zip(b["id"], b["r"])]


def pipeline():
    return sluice.range(64).shuffle(seed=3).map(jitter).batch(8)


def test_plain_loops_reshuffle_and_draw_anew_every_epoch():
    ds = pipeline()
    epochs = [pairs(ds) for _ in range(4)]
    orders = [tuple(i for i, _ in e) for e in epochs]
    assert len(set(orders)) == 4, "a new permutation every epoch"
    assert all(sorted(o) == list(range(64)) for o in orders)
    draws = [dict(e) for e in epochs]
    assert all(draws[a] != draws[b] for a in range(4) for b in range(a + 1, 4)), "new draws"
    # A built-in random op draws anew too.
    flips = sluice.from_items(images()).map(sluice.image.horizontal_flip(0.5))
    runs = [dict(flipped(flips)) for _ in range(3)]
    assert runs[0] != runs[1] != runs[2]
    assert 0 < sum(runs[0].values()) < 24


def test_iter_without_epoch_is_the_next_epoch_and_explicit_epochs_do_not_advance():
    ds = pipeline()
    first = ds.iter()
    assert first.epoch == 0
    e0 = pairs(first)
    explicit = {k: pairs(ds.iter(epoch=k)) for k in (3, 1, 0)}
    assert explicit[0] == e0
    second = ds.iter(num_threads=1)
    assert second.epoch == 1, "explicit epochs left the count alone"
    assert pairs(second) == explicit[1]
    assert pairs(ds) == pairs(ds.iter(epoch=2)), "the third plain loop is epoch 2"
    assert ds.iter().epoch == 3
    # take() looks at epoch 0 and does not advance the count.
    fresh = pipeline()
    assert [int(i) for i in fresh.take(1)[0]["id"]] == [i for i, _ in e0[:8]]
    assert fresh.iter().epoch == 0


def test_iter_epoch_k_equals_the_kth_plain_loop_for_any_thread_count():
    ds = pipeline()
    plain = [pairs(ds) for _ in range(3)]
    for k in range(3):
        assert pairs(pipeline().iter(epoch=k, num_threads=1)) == plain[k]
        assert pairs(pipeline().iter(epoch=k, num_threads=4, chunk_size=3)) == plain[k]
        assert pairs(pipeline().iter(epoch=k, num_threads=0)) == plain[k]
        assert pairs(pipeline().iter(epoch=k, processes=2)) == plain[k]


def test_a_rerun_of_the_program_repeats_the_sequence():
    code = """
        import json, sluice
        def jitter(s, rng):
            return {"id": s["id"], "r": float(rng.random())}
        ds = sluice.range(40).shuffle().map(jitter).batch(5)
        print(json.dumps([[(int(i), float(r)) for b in ds for i, r in zip(b["id"], b["r"])]
                          for _ in range(3)]))
    """
    a, b = run_py(code, timeout=120), run_py(code, timeout=120)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    seq = json.loads(a.stdout)
    assert seq == json.loads(b.stdout)
    assert len({tuple(map(tuple, e)) for e in seq}) == 3
    # And it is what iter(epoch=k) gives here.
    ds = sluice.range(40).shuffle().map(jitter).batch(5)
    assert [[list(p) for p in pairs(ds.iter(epoch=k))] for k in range(3)] == seq


def test_shuffle_seed_fixes_the_family_and_the_opt_out_fixes_the_permutation():
    ids = lambda ds: [s["id"] for s in ds]
    ds = sluice.range(50).shuffle(seed=9)
    e = [ids(ds) for _ in range(3)]
    assert e[0] != e[1] != e[2]
    assert e == [ids(sluice.range(50).shuffle(seed=9).iter(epoch=k)) for k in range(3)]
    # The same seed under another iteration seed: the same permutations (the step's seed wins).
    assert ids(sluice.range(50).shuffle(seed=9).iter(seed=5, epoch=1)) == e[1]
    fixed = sluice.range(50).shuffle(seed=9, reshuffle_each_epoch=False).map(jitter)
    runs = [list(fixed) for _ in range(3)]
    assert [s["id"] for s in runs[0]] == [s["id"] for s in runs[1]] == [s["id"] for s in runs[2]] == e[0]
    assert [s["r"] for s in runs[0]] != [s["r"] for s in runs[1]], "augmentations still change"
    # Within one iteration too: repeat(2) gives the same permutation twice.
    twice = ids(sluice.range(50).shuffle(seed=9, reshuffle_each_epoch=False).repeat(2))
    assert twice[:50] == twice[50:] == e[0]
    assert "reshuffle_each_epoch=false" in repr(fixed)
    with pytest.raises(TypeError, match="reshuffle_each_epoch"):
        sluice.range(5).shuffle(reshuffle_each_epoch="no")


def test_repeat_n_iterations_run_the_next_n_epochs():
    two = sluice.range(20).shuffle().map(jitter).repeat(2)
    four = sluice.range(20).shuffle().map(jitter).repeat(4)
    all4 = [(s["id"], s["r"]) for s in four]
    loops = [[(s["id"], s["r"]) for s in two] for _ in range(2)]
    assert loops[0] + loops[1] == all4


def test_a_checkpoint_mid_epoch_2_resumes_in_epoch_2_exactly():
    ds = pipeline()
    for epoch in range(3):
        it = iter(ds)
        for step, _ in enumerate(it):
            if (epoch, step) == (2, 3):
                state = json.loads(json.dumps(it.state_dict()))
                break
    assert it.epoch == 2 and state["epoch"] == 2
    want = pairs(pipeline().iter(epoch=2))[4 * 8 :]
    fresh = pipeline()
    resumed = fresh.iter(num_threads=1)
    resumed.load_state_dict(state)
    assert resumed.epoch == 2
    assert pairs(resumed) == want
    # The next plain loop of the resumed program is epoch 3.
    assert pairs(fresh) == pairs(pipeline().iter(epoch=3))
    # A pickled iterator keeps its epoch, before and after its first output.
    it = pipeline().iter(epoch=5)
    assert pickle.loads(pickle.dumps(it)).epoch == 5
    assert pairs(pickle.loads(pickle.dumps(it))) == pairs(pipeline().iter(epoch=5))
    next(it)
    copy = pickle.loads(pickle.dumps(it))
    assert copy.epoch == 5 and pairs(copy) == pairs(pipeline().iter(epoch=5))[8:]


def test_a_checkpoint_without_an_epoch_loads_as_epoch_0():
    it = pipeline().iter()
    next(it)
    state = it.state_dict()
    del state["epoch"]
    resumed = pipeline().iter(epoch=4)
    resumed.load_state_dict(state)
    assert resumed.epoch == 0
    assert pairs(resumed) == pairs(pipeline().iter(epoch=0))[8:]


@pytest.mark.parametrize("bad, error", [(-1, ValueError), ("x", TypeError), (1.5, TypeError), (True, TypeError), (2**64, ValueError)])
def test_bad_epochs_name_the_argument(bad, error):
    ds = pipeline()
    with pytest.raises(error, match="epoch"):
        ds.iter(epoch=bad)
    assert ds.iter().epoch == 0, "a refused call does not advance the count"


def test_an_epoch_too_large_for_an_endless_repeat_is_refused():
    with pytest.raises(ValueError, match="epoch"):
        sluice.range(3).repeat().iter(epoch=2**40)


@pytest.mark.parametrize("equal", [True, False])
def test_shards_stay_disjoint_and_complete_in_every_epoch(equal):
    world = 3
    ranks = [sluice.range(31).shuffle().map(jitter).shard(r, world, equal=equal) for r in range(world)]
    for epoch in range(3):
        per_rank = [[s["id"] for s in ds] for ds in ranks]   # every rank's plain loop
        seen = [i for ids in per_rank for i in ids]
        assert len(seen) == len(set(seen)), f"epoch {epoch}: disjoint"
        assert len(seen) == (30 if equal else 31), f"epoch {epoch}: complete"
        if equal:
            assert len({len(ids) for ids in per_rank}) == 1
    # And the split of a shuffled pipeline reshuffles its parts together.
    parts = sluice.range(20).shuffle(seed=1).batch(2).split(2)
    e0 = [[int(i) for b in p for i in b["id"]] for p in parts]
    e1 = [[int(i) for b in p for i in b["id"]] for p in parts]
    assert e0 != e1
    for e in (e0, e1):
        assert sorted(e[0] + e[1]) == list(range(20))


def test_shuffle_buffer_streams_reshuffle_per_epoch():
    ds = sluice.range(200).shuffle_buffer(40).map(jitter)
    a, b = [s["id"] for s in ds], [s["id"] for s in ds]
    assert a != b and sorted(a) == sorted(b) == list(range(200))
    assert [s["id"] for s in ds.iter(epoch=1)] == b
