"""One iterator shared by several threads: each output goes to exactly one of them."""

import threading
import time

import pytest

import sluice


def _drain_from_threads(it, n_threads):
    got = [[] for _ in range(n_threads)]
    errors = []

    def take(k):
        try:
            for b in it:
                got[k].extend(b["id"].tolist())
                time.sleep(0)  # let the other threads in
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=take, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a consumer thread hung"
    return got, errors


def test_threads_sharing_an_iterator_take_turns():
    # It used to raise "RuntimeError: Already borrowed" in whichever thread came second.
    def slow(s):
        time.sleep(0.0005)  # the consumer waits with the GIL released
        return s

    for num_threads in (0, 2):
        it = sluice.range(2000).map(slow).batch(4).iter(num_threads=num_threads)
        got, errors = _drain_from_threads(it, 4)
        assert errors == []
        # Every batch once; each thread's batches in stream order.
        assert sorted(i for g in got for i in g) == list(range(2000))
        for g in got:
            assert g == sorted(g)
        assert it.state_dict()["state"] is not None


def test_close_from_another_thread_ends_a_waiting_next():
    def stuck(s):
        time.sleep(0.05)
        return s

    it = sluice.range(10**6).map(stuck).batch(10**5).iter(num_threads=1)
    done = threading.Event()
    out = []

    def consume():
        out.extend(it)  # waits: the first batch needs ~80 min
        done.set()

    t = threading.Thread(target=consume)
    t.start()
    time.sleep(0.3)
    it.close()
    assert done.wait(30), "close() did not end the waiting __next__"
    t.join(30)
    assert out == []


def test_using_an_iterator_from_inside_its_own_pipeline_is_an_error_not_a_deadlock():
    holder = []

    def peek(s):
        holder[0].state_dict()  # runs inside holder[0].__next__ at num_threads=0
        return s

    it = sluice.range(10).map(peek).iter(num_threads=0)
    holder.append(it)
    with pytest.raises(sluice.PipelineError, match="already running a call in this thread"):
        next(it)
