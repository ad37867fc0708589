"""Checkpoint and exact resume from Python."""

import numpy as np
import pytest

import sluice


def aug(s, rng):
    return {"id": s["id"], "r": float(rng.random())}


def pipeline():
    return (
        sluice.range(200)
        .shuffle()
        .shard(0, 2)
        .repeat(2)
        .map(aug)
        .filter(lambda s: s["id"] % 5 != 0)
        .flat_map(lambda s: [s] * (1 + s["id"] % 2))
        .batch(7)
    )


def flat(batches):
    return [(int(i), float(r)) for b in batches for i, r in zip(b["id"], b["r"])]


def test_resume_matches_uninterrupted_run_for_any_thread_count():
    ds = pipeline()
    full = list(ds.iter(seed=4, num_threads=2))
    for k in (0, 1, 5, len(full) // 2, len(full) - 1, len(full)):
        it = ds.iter(seed=4, num_threads=2)
        for _ in range(k):
            next(it)
        state = it.state_dict()
        assert len(str(state)) < 4096
        it.close()
        for threads in (1, 8):
            resumed = ds.iter(seed=4, num_threads=threads)
            resumed.load_state_dict(state)
            assert flat(resumed) == flat(full[k:]), (k, threads)


def test_state_after_exhaustion_resumes_to_nothing():
    ds = sluice.range(5).batch(2)
    it = ds.iter()
    assert len(list(it)) == 3
    st = it.state_dict()
    again = ds.iter()
    again.load_state_dict(st)
    assert list(again) == []


def test_wrong_checkpoints_are_refused():
    ds = pipeline()
    it = ds.iter(seed=1)
    next(it)
    st = it.state_dict()
    with pytest.raises(ValueError, match="seed"):
        ds.iter(seed=2).load_state_dict(st)
    with pytest.raises(ValueError, match="different pipeline"):
        sluice.range(3).batch(2).iter(seed=1).load_state_dict(st)
    with pytest.raises(ValueError, match="invalid state"):
        ds.iter(seed=1).load_state_dict({"nope": 1})
    with pytest.raises(ValueError, match="shuffle_buffer"):
        sluice.range(3).shuffle_buffer(2).iter().state_dict()
