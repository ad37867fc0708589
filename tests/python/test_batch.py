"""batch(): what stacks, what becomes a list, and what is an error."""

import numpy as np
import pytest

import sluice


def first_batch(rows, **kw):
    return next(iter(sluice.from_items(rows).batch(len(rows), **kw)))


@pytest.mark.parametrize(
    "a,b,says",
    [
        (np.zeros(3, np.float32), np.zeros(3, np.int64), "a float32 array of shape [3] and row 1 an int64 array"),
        (np.zeros(3, np.uint8), 7, "an int"),
        (5, "five", "a string"),
        (True, 1, "a bool"),
        ([1, 2], "ab", "a list"),
    ],
)
def test_mixed_kinds_or_dtypes_raise_naming_the_field(a, b, says):
    # float32 and int64 arrays used to come back as a list, silently.
    rows = [{"id": 0, "x": a}, {"id": 1, "x": b}]
    with pytest.raises(TypeError, match=r"field 'x'.*ragged=True.*samples 0..=1") as e:
        first_batch(rows)
    assert says in str(e.value)
    # Asked for explicitly: a list, as before.
    out = first_batch(rows, ragged=True)["x"]
    assert isinstance(out, list) and len(out) == 2
    assert np.array_equal(np.asarray(out[0]), np.asarray(a)) and np.array_equal(np.asarray(out[1]), np.asarray(b))


def test_ragged_by_design_fields_stay_lists():
    rows = [
        {"s": "a", "b": b"x", "l": [1], "img": np.zeros((2, 2), np.uint8), "opt": None, "f": 1},
        {"s": "bc", "b": b"yz", "l": [], "img": np.zeros((3, 2), np.uint8), "opt": 3, "f": 0.5},
    ]
    b = first_batch(rows)
    assert b["s"] == ["a", "bc"] and b["b"] == [b"x", b"yz"] and b["l"] == [[1], []]
    assert [x.shape for x in b["img"]] == [(2, 2), (3, 2)]  # same dtype, other shapes
    assert b["opt"] == [None, 3]  # missing values
    assert b["f"].dtype == np.float64 and b["f"].tolist() == [1.0, 0.5]


def test_the_error_stops_the_run_after_the_batches_before_it():
    rows = [{"x": np.zeros(2, np.float32)} for _ in range(9)] + [{"x": np.zeros(2, np.int64)}]
    for threads in (0, 2):
        it = sluice.from_items(rows).batch(4).iter(num_threads=threads)
        assert [b["x"].shape for b in (next(it), next(it))] == [(4, 2), (4, 2)]
        with pytest.raises(TypeError, match="field 'x'"):
            next(it)


def test_map_batches_still_gets_lists_for_mixed_fields():
    rows = [{"x": 1}, {"x": "one"}]
    seen = []

    def f(b):
        seen.append(b["x"])
        return b

    assert len(sluice.from_items(rows).map_batches(f, 2).take(5)) == 2
    assert seen == [[1, "one"]]


def test_ragged_is_part_of_the_pipeline():
    ds = sluice.range(4)
    assert "ragged=true" in repr(ds.batch(2, ragged=True))
    it = ds.batch(2).iter()
    next(it)
    with pytest.raises(ValueError, match="different pipeline"):
        ds.batch(2, ragged=True).iter().load_state_dict(it.state_dict())


def test_float32_batches_the_loop_frees_are_written_again_with_the_right_values():
    """A float32 batch of 1 MiB or more goes back to sluice when numpy frees it (its array's
    base hands it back), and later batches are written into such memory: every batch still
    holds its own values. (That the memory is reused is checked in Rust: collate's tests.)"""
    n, width = 64, 4096  # 64 x 4096 float32 = 1 MiB per batch
    ds = sluice.range(n * 12).map(lambda s: {"x": np.full(width, s["id"], np.float32)}).batch(n)
    for k, b in enumerate(ds.iter(num_threads=1)):
        x = b.pop("x")
        assert x.shape == (n, width) and x.flags.writeable and type(x.base).__name__ == "Recycled"
        assert np.array_equal(x, np.repeat(np.arange(k * n, (k + 1) * n, dtype=np.float32)[:, None], width, 1))
        del x, b
