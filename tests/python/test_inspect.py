"""Inspection: len(ds) from the plan, count(), schema(), show(), columns, class_names."""

import io
import pickle
import shutil

import numpy as np
import pytest

import sluice
from sluice import agg


def counted(n=10):
    """range(n) through a Python map that records every call: shows whether anything ran."""
    calls = []

    def touch(s):
        calls.append(s["id"])
        return s

    return sluice.range(n).map(touch), calls


PIPELINES = {
    "range": lambda: sluice.range(10),
    "empty": lambda: sluice.range(0),
    "shuffle": lambda: sluice.range(10).shuffle(seed=1),
    "shard equal": lambda: sluice.range(10).shuffle(seed=1).shard(1, 3),
    "shard unequal rank 0": lambda: sluice.range(10).shard(0, 3, equal=False),
    "shard unequal rank 2": lambda: sluice.range(10).shard(2, 3, equal=False),
    "more ranks than samples": lambda: sluice.range(2).shard(2, 3),
    "repeat": lambda: sluice.range(10).repeat(3),
    "batch": lambda: sluice.range(10).batch(4),
    "batch drop_last": lambda: sluice.range(10).batch(4, drop_last=True),
    "batch per epoch": lambda: sluice.range(10).batch(4).repeat(2),
    "batch across epochs": lambda: sluice.range(10).repeat(2).batch(4),
    "repeat then unequal shard": lambda: sluice.range(5).repeat(2).shard(0, 2, equal=False),
    "take": lambda: sluice.range(10).limit(4),
    "take more than there is": lambda: sluice.range(10).limit(40),
    "take of forever": lambda: sluice.range(3).repeat().batch(2).limit(5),
    "udf map": lambda: sluice.range(7).map(lambda s: {"x": s["id"]}).batch(3),
    "prefetch and cache": lambda: sluice.range(9).map(lambda s: s).cache().prefetch(2).batch(2),
    "mix": lambda: sluice.mix([sluice.range(6), sluice.range(3)], stop="all_exhausted"),
    "sort": lambda: sluice.range(10).map(lambda s: {"id": -s["id"]}).sort("id").batch(3),
}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_len_equals_the_number_of_outputs(name):
    ds = PIPELINES[name]()
    outputs = list(ds.iter(num_threads=2))
    assert len(ds) == len(outputs), name
    assert ds.count() == len(outputs), name


def test_len_runs_nothing():
    ds, calls = counted(10)
    assert len(ds.shuffle(seed=0).shard(0, 2).repeat(2).batch(3)) == 4
    # A sort's input runs when it is iterated, not for its length.
    assert len(ds.sort("id")) == 10
    assert calls == []
    assert bool(sluice.range(0)) is True  # a pipeline, not a container


@pytest.mark.parametrize(
    "make, step",
    [
        (lambda: sluice.range(10).filter(lambda s: True).batch(2), "filter"),
        (lambda: sluice.range(10).flat_map(lambda s: [s]), "flat_map"),
        (lambda: sluice.range(10).map(lambda s: s, on_error="skip"), "on_error=skip"),
        (lambda: sluice.range(10).map_batches(lambda b: b, 4), "map_batches"),
        (lambda: sluice.from_items([{"input_ids": [1, 2]}]).pack(4), "pack"),
        (lambda: sluice.range(10).groupby("id").aggregate(agg.count()), "groupby"),
    ],
)
def test_unknown_length_is_a_type_error_naming_the_step_and_count(make, step):
    ds = make()
    with pytest.raises(TypeError, match=r"not known without running.*count\(\)") as e:
        len(ds)
    assert step in str(e.value)
    # list() asks for a length hint and carries on without one; count() runs.
    assert len(list(ds)) == ds.count() > 0


def test_forever_has_no_length_and_no_count():
    ds = sluice.range(3).repeat()
    with pytest.raises(TypeError, match="repeats forever"):
        len(ds)
    with pytest.raises(ValueError, match="never end"):
        ds.count()
    assert len(ds.limit(7)) == ds.limit(7).count() == 7


def test_count_counts_batches_and_runs_the_pipeline():
    ds, calls = counted(10)
    evens = ds.filter(lambda s: s["id"] % 2 == 0)
    assert evens.count(num_threads=0) == 5 and len(calls) == 10
    assert evens.batch(2).count(seed=3) == 3
    assert evens.batch(2, drop_last=True).count() == 2
    assert sluice.range(0).filter(lambda s: True).count() == 0


def test_count_reports_errors_and_bad_arguments():
    def boom(s):
        if s["id"] == 3:
            raise RuntimeError("bad sample")
        return True

    with pytest.raises(sluice.PipelineError, match=r"sample 3") as e:
        sluice.range(10).filter(boom).count()
    assert isinstance(e.value.__cause__, RuntimeError)
    with pytest.raises(ValueError, match="seed"):
        sluice.range(3).count(seed=-1)
    with pytest.raises(TypeError, match="num_threads"):
        sluice.range(3).count(num_threads="2")
    with pytest.raises(ValueError, match="processes"):
        sluice.range(3).filter(lambda s: True).count(processes=0)


def test_schema_from_the_plan_and_from_the_first_output():
    ds = sluice.range(5).map(sluice.ops.select(["id"]))
    plan = ds.schema(run=False)
    assert plan.names == ["id"] and plan.known_from == "plan" and plan["id"].type is None
    first = ds.schema()
    assert first.known_from == "first output" and first["id"].type == "int"
    batched = sluice.range(5).batch(2).schema()
    assert batched["id"].type == "ndarray" and batched["id"].dtype == np.int64 and batched["id"].shape == (2,)

    udf = sluice.range(3).map(lambda s: {"img": np.zeros((2, 3, 3), np.uint8), "name": "x", "raw": b"ab", "none": None})
    with pytest.raises(TypeError, match="not known without running"):
        udf.schema(run=False)
    s = udf.schema()
    assert s.names == ["img", "name", "raw", "none"]
    assert (s["img"].dtype, s["img"].shape) == (np.uint8, (2, 3, 3))
    assert [f.type for f in s] == ["ndarray", "str", "bytes", "None"]
    assert "img" in s and "nope" not in s and len(s) == 4
    with pytest.raises(KeyError, match="nope"):
        s["nope"]
    text = str(s)
    assert "from the first output" in text and "ndarray[uint8, (2, 3, 3)]" in text
    assert "img: ndarray[uint8, (2, 3, 3)]" in repr(s)


def test_schema_of_an_empty_dataset():
    empty = sluice.range(0)
    assert empty.schema().names == ["id"] and empty.schema().known_from == "plan"
    with pytest.raises(ValueError, match="no outputs"):
        sluice.range(0).map(lambda s: s).schema()


def test_columns_from_the_plan_or_the_first_output():
    ds, calls = counted(4)
    assert sluice.range(4).map(sluice.ops.rename("id", "x")).columns == ["x"]
    rows = sluice.from_items([{"a": 1, "b": 2, "c": 3}])
    for op in [sluice.ops.select(["c", "a"]), sluice.ops.drop(["b"]), sluice.ops.rename("a", "c")]:
        mapped = rows.map(op)
        assert mapped.columns == list(mapped.take(1)[0])  # the plan's names are the real ones
    assert sluice.read_files(__file__).columns == ["path", "bytes"]
    # After a Python function only an output tells; one is computed.
    assert ds.columns == ["id"] and 1 <= len(calls) <= 4


def test_show_prints_outputs_readably(capsys):
    rows = [
        {"img": np.zeros((224, 224, 3), np.uint8), "ids": np.arange(3), "text": "t" * 100, "raw": b"\x00" * 1000, "tags": ["a", "b"]},
    ]
    sluice.from_items(rows * 3).show(2)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    line = lines[0]
    assert "'img': ndarray(uint8, (224, 224, 3))" in line and "'ids': ndarray(int64, (3,)) [0, 1, 2]" in line
    assert "(100 chars)" in line and "<1000 bytes>" in line and "'tags': ['a', 'b']" in line
    assert len(line) < 300
    buf = io.StringIO()
    sluice.range(5).batch(2).show(file=buf)
    assert buf.getvalue().splitlines() == [
        "{'id': ndarray(int64, (2,)) [0, 1]}",
        "{'id': ndarray(int64, (2,)) [2, 3]}",
        "{'id': ndarray(int64, (1,)) [4]}",
    ]
    sluice.range(0).show()
    assert capsys.readouterr().out == "(no outputs)\n"
    with pytest.raises(ValueError, match="n must be"):
        sluice.range(3).show(-1)


def test_class_names_follow_the_dataset(images_dir, tmp_path):
    ds = sluice.read_images(str(images_dir))
    assert ds.class_names == ["everyday", "space", "texture"]
    for s in ds:
        assert ds.class_names[s["label"]] == s["path"].split("/")[-2]
    later = ds.map(lambda s: s).shuffle(seed=2).shard(0, 2).batch(2).repeat(2)
    assert later.class_names == ds.class_names
    assert pickle.loads(pickle.dumps(later)).class_names == ds.class_names
    assert sluice.read_images(str(images_dir), labels=None).class_names is None
    assert sluice.range(3).class_names is None
    # Names sort as strings; a directory without images is no class.
    for cls in ["b", "B", "a10", "a2"]:
        (tmp_path / cls).mkdir()
        shutil.copy(images_dir / "everyday" / "coffee.jpg", tmp_path / cls / "x.jpg")
    (tmp_path / "empty").mkdir()
    mine = sluice.read_images(str(tmp_path))
    assert mine.class_names == ["B", "a10", "a2", "b"]
    assert sorted(s["label"] for s in mine) == [0, 1, 2, 3]
