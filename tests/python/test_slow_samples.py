"""Slow samples stall nothing, and change nothing (issue 39, item 3).

A parallel stage hands its outputs on in input order; a slow sample at the head holds the
rest, so the stage's reorder window grows with its measured tail latency. These tests check
what that must not change — the order, the outputs, a clean stop — and that the window did
grow where a tail was there to measure. Throughput lives in benchmarks/slow_samples.py.
"""

from __future__ import annotations

import time

import sluice

def slow_tail(s):
    # 5 % of the samples take 100 ms, the rest 0.2 ms: a tail a loaded machine does not hide
    # (with 20 ms, two busy loops beside the suite stretched the fast samples enough that the
    # other workers no longer filled the window while the head was slow).
    time.sleep(0.1 if int(s["id"]) % 20 == 7 else 0.0002)
    return s


def stage(it, name="slow_tail"):
    return next(s for s in it.stats().to_dict()["stages"] if s["name"] == name)


def test_a_slow_tail_grows_the_window_and_keeps_the_order():
    ds = sluice.range(1200).map(slow_tail).batch(10)
    it = ds.iter(num_threads=8)
    ids = [int(x) for b in it for x in b["id"]]
    assert ids == list(range(1200))
    # 8 workers plan 6 chunks each; the others fill them while a slow sample holds the head,
    # and the tail asks for far more.
    assert stage(it)["queue_capacity"] > 48
    # The same run shuffled: the same permutation whatever the window did.
    shuffled = sluice.range(600).shuffle(seed=3).map(slow_tail).batch(10)
    once = [int(x) for b in shuffled.iter(num_threads=8, epoch=0) for x in b["id"]]
    again = [int(x) for b in shuffled.iter(num_threads=2, epoch=0) for x in b["id"]]
    assert once == again and sorted(once) == list(range(600)) and once != list(range(600))


def same(s):
    return s


def test_a_window_stays_within_its_bounds():
    it = sluice.range(2000).map(same).batch(10).iter(num_threads=4)
    assert sum(len(b["id"]) for b in it) == 2000
    # Never below the plan (6 chunks per worker), never above 64 per worker. (Whether it grew
    # here depends on the scheduler: a worker preempted at the head is a stall too. The Rust
    # tests in exec/tail.rs pin what grows it and what does not.)
    assert 24 <= stage(it, "same")["queue_capacity"] <= 4 * 64


def test_stopping_while_the_dispatcher_waits_for_room_returns():
    ds = sluice.range(100_000).map(slow_tail).batch(10)
    it = ds.iter(num_threads=8)
    for _, b in zip(range(3), it):
        assert len(b["id"]) == 10
    # A dispatcher waiting for room in a full window must see the consumer go (a hang here
    # would run into the suite's per-test ceiling).
    it.close()
