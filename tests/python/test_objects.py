"""A Python function's results reach the loop unconverted when nothing after the function
reads them (issue 24, item 4): the dict the function returned, with its values as they were,
instead of a sample made from it and a new dict made from that."""

from __future__ import annotations

import numpy as np
import pytest

import sluice


class Opaque:
    """A value sluice cannot convert (no numpy form)."""


@pytest.mark.parametrize("threads", [0, 1, 2])
def test_the_loop_gets_the_dict_the_function_returned(threads):
    returned = {}

    def f(s):
        out = {"id": s["id"], "pair": (s["id"], "x"), "obj": Opaque(), "arr": np.arange(3)}
        returned[s["id"]] = out
        return out

    got = list(sluice.range(20).map(f).iter(num_threads=threads))
    assert [g["id"] for g in got] == list(range(20))
    for g in got:
        assert g is returned[g["id"]]
        assert isinstance(g["pair"], tuple) and isinstance(g["obj"], Opaque)


def test_functions_in_a_row_pass_the_object_along():
    def f(s):
        return {"id": s["id"], "mark": Opaque()}

    seen = []

    def g(s):
        seen.append(s)
        return s

    out = list(sluice.range(6).map(f).filter(lambda s: s["id"] % 2 == 0).map(g).iter(num_threads=0))
    assert [o["id"] for o in out] == [0, 2, 4]
    assert all(o is s for o, s in zip(out, seen))
    assert all(isinstance(o["mark"], Opaque) for o in out)


def test_objects_pass_take_shuffle_buffer_and_flat_map():
    def pipeline(value):
        def f(s):
            return {"id": s["id"], "obj": value()}

        return sluice.range(30).flat_map(lambda s: [f(s), f(s)]).shuffle_buffer(8, seed=1).limit(10)

    out = list(pipeline(Opaque).iter(num_threads=2))
    assert len(out) == 10 and all(isinstance(o["obj"], Opaque) for o in out)
    # The same order as a run whose batch converts every result: objects change nothing else.
    batch = next(iter(pipeline(int).batch(10).iter(num_threads=2)))
    assert batch["id"].tolist() == [o["id"] for o in out]


def test_an_op_or_a_batch_after_the_function_gets_converted_values():
    def f(s):
        return {"id": s["id"], "pair": (1, 2)}

    out = next(iter(sluice.range(3).map(f).map(sluice.ops.select(["id", "pair"])).iter()))
    assert out["pair"] == [1, 2]  # converted: a tuple became a list
    batch = next(iter(sluice.range(3).map(f).batch(3).iter()))
    assert batch["id"].tolist() == [0, 1, 2]

    def bad(s):
        return {"id": s["id"], "obj": Opaque()}

    with pytest.raises(TypeError, match=r"bad.*obj.*Opaque"):
        list(sluice.range(3).map(bad).batch(3).iter())


@pytest.mark.parametrize("tail", ["none", "batch"])
def test_a_result_that_is_not_a_dict_is_the_same_error_either_way(tail):
    ds = sluice.range(3).map(lambda s: [s["id"]], name="listy")
    if tail == "batch":
        ds = ds.batch(2)
    with pytest.raises(TypeError, match=r"listy.*must be a dict, got list"):
        list(ds.iter(num_threads=0))


def test_checkpoints_resume_with_objects():
    ds = sluice.range(40).shuffle(seed=3).map(lambda s: {"id": s["id"], "o": Opaque()})
    it = ds.iter(seed=5)
    first = [next(it)["id"] for _ in range(7)]
    state = it.state_dict()
    rest = [s["id"] for s in it]
    it2 = ds.iter(seed=5, num_threads=0)
    it2.load_state_dict(state)
    again = [s["id"] for s in it2]
    assert again == rest and sorted(first + rest) == list(range(40))


def test_worker_processes_convert_results():
    # Results of a function in worker processes travel back as samples, so they are converted.
    out = list(sluice.range(8).map(_pair, name="pair").iter(processes=2))
    assert sorted(o["id"] for o in out) == list(range(8))
    assert all(o["pair"] == [o["id"], 0] for o in out)


def _pair(s):
    return {"id": s["id"], "pair": (s["id"], 0)}


def test_a_batch_after_a_function_gets_the_conversions_errors_naming_the_function():
    # With a batch next, the function converts its results: no objects reach the batch.
    def missing(s):
        return {"id": s["id"]} if s["id"] else {"other": 1}

    with pytest.raises(sluice.SluiceError, match="field 'other' is missing"):
        list(sluice.range(4).map(missing).batch(4).iter(num_threads=0))

    def huge(s):
        return {"id": s["id"] + 2**70}

    with pytest.raises(TypeError, match=r"huge.*'id'.*64 bits"):
        list(sluice.range(4).map(huge).batch(2).iter())


@pytest.mark.parametrize("threads", [0, 1])
@pytest.mark.parametrize("shuffled", [False, True])
def test_a_checkpoint_after_any_output_resumes_exactly(threads, shuffled):
    # Each result that reaches the loop unconverted moves the position by one output,
    # whatever the stages before it re-sequence and whichever thread runs the function.
    ds = sluice.range(300)
    if shuffled:
        ds = ds.shuffle_buffer(50, seed=1)
    ds = ds.map(lambda s: {"id": s["id"], "o": Opaque()})
    whole = [s["id"] for s in ds.iter(seed=2, epoch=0, num_threads=threads)]
    for k in (1, 2, 63, 64, 65, 130, 299):
        it = ds.iter(seed=2, epoch=0, num_threads=threads)
        head = [next(it)["id"] for _ in range(k)]
        state = it.state_dict()
        it.close()
        again = ds.iter(seed=2, epoch=0, num_threads=threads)
        again.load_state_dict(state)
        assert head + [s["id"] for s in again] == whole, k
    stats = ds.iter(seed=2, epoch=0, num_threads=threads)
    assert sum(1 for _ in stats) == 300
    assert stats.stats().to_dict()["consumer"]["outputs"] == 300
