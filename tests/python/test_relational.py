"""Last-mile relational ops: sort, groupby().aggregate(), repartition — compared with pandas,
with and without spilling to disk, across thread counts."""

from __future__ import annotations

import gc
import json
import math
import pickle

import numpy as np
import pytest

import sluice
from sluice import agg

pd = pytest.importorskip("pandas")

N = 3000
TINY = 16_000  # bytes: a few dozen rows per run / partition flush


def _rows(n: int = N) -> list[dict]:
    rng = np.random.default_rng(7)
    out = []
    for i in range(n):
        k = int(rng.integers(0, 40))
        out.append(
            {
                "i": i,
                "k": None if i % 97 == 0 else k,  # ints with ties and missing values
                "s": f"s{int(rng.integers(0, 5))}",
                "x": float("nan") if i % 31 == 0 else float(rng.normal()),
                "n": int(rng.integers(-1000, 1000)),
            }
        )
    return out


def _frame(rows: list[dict]) -> "pd.DataFrame":
    return pd.DataFrame(rows)


def _run(ds: sluice.Dataset, num_threads: int = 2) -> tuple[list[dict], dict | None]:
    with ds.iter(num_threads=num_threads, progress=False) as it:
        rows = list(it)
        return rows, it.stats().data.get("source")


def _same(a, b) -> bool:
    if a is None or (isinstance(a, float) and math.isnan(a)):
        return b is None or (isinstance(b, float) and math.isnan(b))
    if isinstance(a, float) or isinstance(b, float):
        return b is not None and not (isinstance(b, float) and math.isnan(b)) and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


@pytest.mark.parametrize(
    "by, descending",
    [("k", False), ("k", True), (["s", "k"], [False, True]), (["x"], True), (["s", "x"], False)],
)
def test_sort_matches_pandas_stable_sort_with_and_without_spill(by, descending):
    rows = _rows()
    keys = [by] if isinstance(by, str) else by
    flags = descending if isinstance(descending, list) else [descending] * len(keys)
    want = _frame(rows).sort_values(keys, ascending=[not d for d in flags], kind="stable", na_position="last")
    want_ids = want["i"].tolist()

    ds = sluice.from_items(rows)
    in_memory, report = _run(ds.sort(by, descending=descending))
    assert [r["i"] for r in in_memory] == want_ids
    assert report["op"] == "sort" and not report["spilled"] and report["rows_in"] == N

    for threads in (1, 2):
        spilled, report = _run(ds.sort(by, descending=descending, memory_budget=TINY), threads)
        assert report["spilled"] and report["spill_files"] > 5 and report["spill_bytes"] > 0, report
        assert [r["i"] for r in spilled] == want_ids


def test_sort_results_are_identical_across_threads_and_budgets():
    ds = sluice.from_items(_rows()).map(lambda s: {**s, "y": s["n"] * 2})
    outs = [_run(ds.sort(["s", "n"], memory_budget=b), t)[0] for b in (TINY, 1 << 30) for t in (1, 2)]
    ids = [[r["i"] for r in o] for o in outs]
    assert all(x == ids[0] for x in ids)


def _pandas_groupby(rows, keys):
    df = _frame(rows)
    g = df.groupby(keys, dropna=False, sort=True)
    out = pd.DataFrame(
        {
            "n": g.size(),
            "nx": g["x"].count(),
            "sx": g["x"].sum(min_count=1),
            "sn": g["n"].sum(),
            "mx": g["x"].mean(),
            "lo": g["x"].min(),
            "hi": g["n"].max(),
            "first_s": g["s"].min(),
        }
    ).reset_index()
    return out


@pytest.mark.parametrize("keys", [["k"], ["s", "k"]])
def test_groupby_aggregate_matches_pandas_with_and_without_spill(keys):
    rows = _rows()
    want = _pandas_groupby(rows, keys)
    ds = sluice.from_items(rows)

    def grouped(**kw):
        return ds.groupby(keys).aggregate(
            n=agg.count(),
            nx=agg.count("x"),
            sx=agg.sum("x"),
            sn=("n", "sum"),
            mx=agg.mean("x"),
            lo=agg.min("x"),
            hi=agg.max("n"),
            first_s=("s", "min"),
            **kw,
        )

    got, report = _run(grouped())
    assert not report["spilled"]
    assert len(got) == len(want)
    assert list(got[0]) == keys + ["n", "nx", "sx", "sn", "mx", "lo", "hi", "first_s"]
    for row, (_, ref) in zip(got, want.iterrows()):
        for col in want.columns:
            assert _same(row[col], None if pd.isna(ref[col]) else ref[col].item() if hasattr(ref[col], "item") else ref[col]), (col, row, ref)
        assert isinstance(row["sn"], int) and isinstance(row["n"], int)

    for threads in (1, 2):
        spilled, report = _run(grouped(memory_budget=4_000), threads)
        assert report["spilled"] and report["spill_files"] >= 16, report
        assert spilled == got  # bit-identical, floats included


def test_groupby_shapes_names_and_global_aggregate():
    ds = sluice.from_items([{"k": "b", "v": 1}, {"k": "a", "v": 2}, {"k": "b", "v": None}])
    out = ds.groupby("k").aggregate(agg.count(), agg.count("v"), agg.sum("v"), agg.mean("v"), top=agg.max("v")).take(9)
    assert out == [
        {"k": "a", "count()": 1, "count(v)": 1, "sum(v)": 2, "mean(v)": 2.0, "top": 2},
        {"k": "b", "count()": 2, "count(v)": 1, "sum(v)": 1, "mean(v)": 1.0, "top": 1},
    ]
    assert sluice.range(10).aggregate(agg.count(), total=agg.sum("id")).take(5) == [{"count()": 10, "total": 45}]
    assert sluice.from_items([{"k": 1, "v": None}]).groupby("k").aggregate(s=agg.sum("v")).take(1) == [{"k": 1, "s": None}]


def test_repartition_writes_one_file_per_partition(tmp_path):
    ds = sluice.range(10).repartition(3)
    files = ds.write_jsonl(tmp_path / "j")
    assert [f.rsplit("/", 1)[1] for f in files] == ["part-00000.jsonl", "part-00001.jsonl", "part-00002.jsonl"]
    lines = [[json.loads(l)["id"] for l in open(f)] for f in files]
    assert lines == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    # Element-wise steps keep partitions: a filter empties nothing here but shrinks files.
    odd = ds.filter(lambda s: s["id"] % 2 == 1).map(lambda s: {"id": s["id"] * 10})
    files = odd.write_parquet(tmp_path / "p")
    assert len(files) == 3
    assert [sluice.read_parquet(f).to_pandas()["id"].tolist() for f in files] == [[10, 30], [50], [70, 90]]
    with pytest.raises(ValueError, match="repartition.*shuffle"):
        ds.shuffle(seed=1).write_jsonl(tmp_path / "x")
    # Spilled to disk: same rows, in order.
    spilled = sluice.range(500).map(lambda s: {"id": s["id"], "pad": "x" * 50}).repartition(4, memory_budget=2_000)
    rows, report = _run(spilled)
    assert [r["id"] for r in rows] == list(range(500)) and report["spilled"]


def test_random_access_after_blocking_ops_shuffle_shard_and_resume():
    ds = sluice.from_items(_rows(200)).sort("n", memory_budget=TINY).shuffle(seed=4).shard(1, 2).batch(8)
    full = [b["i"].tolist() for b in ds.iter(seed=0)]
    assert sum(len(b) for b in full) == 100
    it = ds.iter(seed=0, epoch=0, num_threads=1)
    next(it), next(it)
    state = it.state_dict()
    it2 = ds.iter(seed=0, num_threads=2)
    it2.load_state_dict(state)
    assert [b["i"].tolist() for b in it2] == full[2:]
    # A pickled dataset rebuilds the sort elsewhere; split shards after it, not before.
    sorted_ds = sluice.from_items(_rows(50)).sort("n")
    copy = pickle.loads(pickle.dumps(sorted_ds))
    assert [s["i"] for s in copy] == [s["i"] for s in sorted_ds]
    parts = sorted_ds.split(2)
    whole = [s["n"] for s in sorted_ds]
    assert [s["n"] for s in parts[0]] == [s["n"] for s in sorted_ds.shard(0, 2)]
    assert sorted(s["n"] for p in parts for s in p) == sorted(whole)


def test_mix_of_blocking_datasets_and_process_pool_after_sort():
    a = sluice.from_items([{"v": i} for i in (3, 1, 2)]).sort("v")
    b = sluice.from_items([{"v": i} for i in (30, 10)]).sort("v", descending=True)
    assert [s["v"] for s in sluice.mix([a, b], stop="all_exhausted")] == [1, 30, 2, 10, 3]
    with pytest.raises(KeyError, match="'w'"):
        sluice.mix([sluice.range(3).map(lambda s: s).sort("w"), b])
    ds = sluice.range(20).sort("id", descending=True).map(lambda s: {"id": s["id"] * 2})
    assert [s["id"] for s in ds.iter(processes=2)] == [2 * i for i in range(19, -1, -1)]


def test_python_udfs_before_a_blocking_op_run_with_the_gil_released():
    ds = sluice.range(300).map(lambda s: {"k": s["id"] % 7, "id": s["id"]}).sort(["k", "id"], descending=[True, False])
    assert "sort" in ds.explain(num_threads=2)
    rows = [s["k"] for s in ds.iter(num_threads=2)]
    assert rows == sorted(rows, reverse=True)


def test_clear_errors():
    with pytest.raises(KeyError, match="'nope'.*sort"):
        sluice.range(5).sort("nope")
    with pytest.raises(KeyError, match="'nope'.*groupby"):
        sluice.range(5).groupby("nope").aggregate(agg.count())
    # Unknown schema (a UDF): the missing field is found when the input runs.
    with pytest.raises(KeyError, match="'nope'"):
        list(sluice.range(5).map(lambda s: s).sort("nope"))
    with pytest.raises(TypeError, match="'k' mixes int and str"):
        list(sluice.from_items([{"k": 1}, {"k": "a"}]).sort("k"))
    with pytest.raises(TypeError, match="tensor.*cannot be compared"):
        list(sluice.from_items([{"k": np.zeros(2)}]).sort("k"))
    with pytest.raises(TypeError, match="sum of field 'v' needs numbers"):
        list(sluice.from_items([{"k": 1, "v": "x"}]).groupby("k").aggregate(agg.sum("v")))
    with pytest.raises(ValueError, match="repeats forever"):
        sluice.range(3).repeat().sort("id")
    with pytest.raises(ValueError, match="unknown function"):
        sluice.range(3).aggregate(x=("id", "median"))
    with pytest.raises(TypeError):
        sluice.range(3).sort(3)


def test_empty_datasets():
    empty = sluice.from_items([])
    assert list(empty.sort("k")) == []
    assert list(empty.groupby("k").aggregate(agg.count())) == []
    assert empty.aggregate(agg.count(), s=agg.sum("x")).take(1) == [{"count()": 0, "s": None}]
    assert list(empty.repartition(3)) == []


def test_spill_files_live_with_the_dataset(tmp_path):
    ds = sluice.from_items(_rows(500)).sort("x", memory_budget=4_000, spill_dir=tmp_path)
    _, report = _run(ds)
    assert report["spilled"]
    dirs = list(tmp_path.iterdir())
    assert len(dirs) == 1 and dirs[0].name.startswith("sluice-spill-")
    assert sorted(p.name.split("-")[0] for p in dirs[0].iterdir()) == ["index", "rows"]  # runs merged away
    del ds
    gc.collect()
    assert list(tmp_path.iterdir()) == []


def _with_pid(s):
    import os

    return {"id": s["id"], "pid": os.getpid()}


@pytest.mark.parametrize(
    "blocking",
    [
        lambda ds: ds.sort("id", descending=True),
        lambda ds: ds.groupby("id").aggregate(agg.max("pid", name="pid")),
        lambda ds: ds.repartition(3),
    ],
    ids=["sort", "groupby", "repartition"],
)
def test_a_function_before_a_blocking_step_runs_where_the_run_puts_it(blocking):
    # Was: the input of sort()/groupby()/repartition() ran on threads of the training process
    # whatever the run asked, so processes=N (and a Ray context, test_ray.py) were ignored there.
    import os

    # A blocking step's result is kept by its dataset for later runs: one dataset per run.
    threaded = list(blocking(sluice.range(120).map(_with_pid)).iter(num_threads=2))
    assert {s["pid"] for s in threaded} == {os.getpid()}
    pooled = list(blocking(sluice.range(120).map(_with_pid)).iter(processes=2))
    pids = {s["pid"] for s in pooled}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2, pids
    strip = lambda rows: [{k: v for k, v in r.items() if k != "pid"} for r in rows]  # noqa: E731
    assert strip(pooled) == strip(threaded), "placement never changes the data"
