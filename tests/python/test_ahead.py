"""The thread a CUDA consumer sends its batches from (``sluice._ahead``): order, the bound,
errors, and a ``break`` that leaves nothing running."""

import threading
import time

import pytest

from sluice._ahead import ahead


def test_results_come_in_order():
    assert list(ahead(iter(range(50)), lambda x: x * 2, depth=3)) == [2 * x for x in range(50)]
    assert list(ahead(iter([]), lambda x: x, depth=1)) == []


def test_no_more_than_depth_results_wait_plus_the_one_in_hand():
    made = []
    gen = ahead(iter(range(100)), lambda x: made.append(x) or x, depth=2)
    assert next(gen) == 0
    deadline = time.monotonic() + 10
    while len(made) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # had it no bound, it would go on making results meanwhile
    # One taken, two waiting in the queue, one made and waiting for room.
    assert len(made) == 4
    gen.close()


def test_an_error_comes_after_the_results_before_it():
    def fn(x):
        if x == 3:
            raise ValueError("sample 3: bad")
        return x

    got = []
    with pytest.raises(ValueError, match="sample 3: bad"):
        for x in ahead(iter(range(10)), fn, depth=2):
            got.append(x)
    assert got == [0, 1, 2]

    def items():
        yield 1
        raise OSError("source failed")

    with pytest.raises(OSError, match="source failed"):
        list(ahead(items(), lambda x: x, depth=1))


def test_a_break_stops_the_thread_and_drops_what_was_made():
    dropped = []
    before = threading.active_count()
    for x in ahead(iter(range(1000)), lambda x: x, depth=4, drop=dropped.append):
        if x == 2:
            break
    # The generator is closed at the end of the loop: the thread is joined by then.
    assert threading.active_count() == before
    # What was made but never taken was handed to `drop`, in order, and nothing past it.
    assert dropped == list(range(3, 3 + len(dropped))) and 1 <= len(dropped) <= 5


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="depth must be at least 1"):
        next(ahead(iter([1]), lambda x: x, depth=0))


def test_closing_interrupts_a_source_that_would_never_answer():
    woken = threading.Event()

    def items():
        yield 0
        woken.wait(60)  # a sample that never comes, until the pipeline is closed
        if woken.is_set():
            return
        yield 1

    gen = ahead(items(), lambda x: x, depth=1, interrupt=woken.set)
    assert next(gen) == 0
    time.sleep(0.1)  # the thread is waiting in `items` now
    t0 = time.monotonic()
    gen.close()
    assert woken.is_set() and time.monotonic() - t0 < 30


def test_a_sluice_pipeline_closed_from_the_consumer_while_the_thread_waits_in_it():
    # What the CUDA hand-off does on a `break`: `it.close()` from the consumer's thread while
    # the sending thread is inside `next(it)` (waiting on a slow sample) must neither hang nor
    # raise, and the thread is gone once the loop is.
    import sluice

    def slow(s):
        if s["id"] >= 2:
            time.sleep(0.5)
        return s

    it = sluice.range(100).map(slow).iter(num_threads=1)
    before = threading.active_count()
    got = []
    for b in ahead(it, lambda s: s["id"], depth=1, interrupt=it.close):
        got.append(b)
        if len(got) == 3:
            break
    assert got == [0, 1, 2]
    assert threading.active_count() <= before
