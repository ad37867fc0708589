"""Data at rest: Parquet, CSV, JSONL, WebDataset readers; sinks; Arrow/pandas interop; bad input.

Fixtures are real files written in the test's tmp dir with pyarrow and tarfile.
"""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest

import sluice
from compare import same

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture
def corpus(tmp_path):
    """Three Parquet files, 40 rows, row groups of 7 rows, several column types."""
    d = tmp_path / "corpus"
    d.mkdir()
    start = 0
    for i, n in enumerate([15, 10, 15]):
        ids = list(range(start, start + n))
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "text": [f"line {j}" for j in ids],
                "vec": pa.array([[float(j), float(j) / 2] for j in ids], pa.list_(pa.float32())),
                "tag": pa.array(["a" if j % 2 else "b" for j in ids]).dictionary_encode(),
                "score": pa.array([None if j % 5 == 0 else j * 0.5 for j in ids]),
            }
        )
        pq.write_table(table, d / f"part-{i}.parquet", row_group_size=7)
        start += n
    return d


def ids(ds):
    return [s["id"] for s in ds]


def test_parquet_rows_types_and_projection(corpus):
    ds = sluice.read_parquet(str(corpus))
    rows = ds.take(40)
    assert [r["id"] for r in rows] == list(range(40))
    r = rows[11]
    assert r["text"] == "line 11" and r["tag"] == "a" and r["score"] == 5.5
    assert r["vec"].dtype == np.float32 and r["vec"].tolist() == [11.0, 5.5]
    assert rows[10]["score"] is None
    only = sluice.read_parquet(str(corpus / "*.parquet"), columns=["text", "id"]).take(2)
    assert list(only[0]) == ["text", "id"]


def test_parquet_shuffle_and_shard_use_random_access(corpus):
    ds = sluice.read_parquet(corpus, columns=["id"])
    shuffled = ids(ds.shuffle(seed=3))
    assert sorted(shuffled) == list(range(40)) and shuffled != list(range(40))
    assert shuffled == ids(ds.shuffle(seed=3))
    shards = [ids(ds.shard(r, 3)) for r in range(3)]
    assert all(len(s) == 13 for s in shards)
    assert not set(shards[0]) & set(shards[1])


def test_parquet_batches_match_pyarrow(corpus):
    ds = sluice.read_parquet(corpus, columns=["id", "vec"]).batch(8)
    want = pq.read_table(corpus, columns=["id"]).column("id").to_pylist()
    got = np.concatenate([b["id"] for b in ds]).tolist()
    assert got == sorted(want)


def same_batches(a, b):
    same(list(a), list(b))


def test_parquet_batches_read_column_by_column_equal_the_row_path(corpus):
    ds = sluice.read_parquet(corpus, columns=["id", "text", "vec", "tag", "score"])
    # A batch straight after the source reads it column by column (shown in explain());
    # an identity map in between forces per-row samples. Both give the same batches, also
    # shuffled, sharded, over epochs, with a ragged last batch.
    assert "read+batch(6)" in ds.batch(6).explain()
    ident = ds.map(lambda s: s)
    assert "read+batch" not in ident.batch(6).explain()
    for f in [lambda d: d, lambda d: d.shuffle(seed=5), lambda d: d.shard(1, 3).repeat(2)]:
        same_batches(f(ds).batch(6), f(ident).batch(6))
    # The batch's arrays go to Python as they are when only take() follows; map_batches
    # after it sees ordinary values.
    same_batches(ds.batch(6).take(3), ident.batch(6).take(3))
    lens = lambda b: {"n": np.array([len(t) for t in b["text"]])}
    same_batches(ds.batch(6).map_batches(lens, batch_size=6), ident.batch(6).map_batches(lens, batch_size=6))
    # score has nulls: a list with None, like the row path.
    b = next(iter(ds.batch(6)))
    assert b["score"][0] is None and b["text"][:2] == ["line 0", "line 1"]
    assert b["vec"].shape == (6, 2) and b["id"].dtype == np.int64


def test_parquet_map_batches_and_batch_functions_get_the_columns(corpus, tmp_path):
    # A map_batches straight after the source reads its batches column by column, and a
    # Python function after a batch gets the columns as they are (issue 24, item 6): the
    # same values as the row path, in the same types.
    ds = sluice.read_parquet(corpus, columns=["id", "text", "vec", "tag", "score"])
    ident = ds.map(lambda s: s)
    assert "read+batch(5)" in ds.map_batches(lambda b: b, 5).explain()
    seen = []

    def lens(b):
        seen.append({k: type(v).__name__ for k, v in b.items()})
        return {"id": b["id"], "n": np.array([len(t) for t in b["text"]]), "v": b["vec"].sum(axis=1)}

    for f in [lambda d: d, lambda d: d.shuffle(seed=5), lambda d: d.shard(1, 3).repeat(2)]:
        cols = list(f(ds).map_batches(lens, 5).iter(seed=1))
        rows = list(f(ident).map_batches(lens, 5).iter(seed=1))
        assert [c["id"] for c in cols] == [r["id"] for r in rows]
        assert all(c["n"] == r["n"] and c["v"] == r["v"] for c, r in zip(cols, rows))
    assert seen[0] == {"id": "ndarray", "text": "list", "vec": "ndarray", "tag": "list", "score": "list"}
    same_batches(ds.batch(6).map(lens), ident.batch(6).map(lens))
    # A filter passes its input on: what follows it gets ordinary values.
    kept = ds.batch(6).filter(lambda b: b["id"][0] % 12 == 0).map(sluice.ops.select(["id"]))
    assert [b["id"].tolist()[0] for b in kept] == [0, 12, 24, 36]
    # A list column whose rows differ in length does not stack: map_batches falls back to
    # the row path and gets a list of arrays, as before.
    pq.write_table(pa.table({"ragged": pa.array([[1] * (i % 3) for i in range(9)], pa.list_(pa.int64()))}),
                   tmp_path / "ragged.parquet", row_group_size=4)
    out = sluice.read_parquet(tmp_path / "ragged.parquet").map_batches(
        lambda b: {"n": np.array([len(r) for r in b["ragged"]])}, 4)
    assert [s["n"] for s in out] == [i % 3 for i in range(9)]


def test_parquet_columnar_batches_resume_mid_epoch(corpus):
    ds = sluice.read_parquet(corpus, columns=["id"]).shuffle(seed=1).batch(4)
    it = ds.iter(seed=2)
    head = [next(it)["id"].tolist() for _ in range(3)]
    state = it.state_dict()
    rest = [b["id"].tolist() for b in it]
    again = ds.iter(seed=2, num_threads=1)
    again.load_state_dict(state)
    resumed = [b["id"].tolist() for b in again]
    assert resumed == rest and sorted(sum(head + rest, [])) == list(range(40))


def test_parquet_bad_input_names_the_file(tmp_path, corpus):
    whole = (corpus / "part-0.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(sluice.SluiceError, match="cut.parquet"):
        sluice.read_parquet(tmp_path / "cut.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all" * 10)
    with pytest.raises(sluice.SluiceError, match="junk.parquet.*Parquet"):
        sluice.read_parquet(tmp_path / "junk.parquet")
    with pytest.raises(ValueError, match="no column 'nope'"):
        sluice.read_parquet(corpus, columns=["nope"])
    with pytest.raises(FileNotFoundError):
        sluice.read_parquet(tmp_path / "missing" / "*.parquet")


def test_parquet_corrupt_row_group_fails_when_read(tmp_path):
    p = tmp_path / "x.parquet"
    pq.write_table(pa.table({"t": [f"value {i}" * 20 for i in range(200)]}), p, compression="snappy")
    raw = bytearray(p.read_bytes())
    for i in range(40, 400):  # inside the first column chunk's data pages
        raw[i] ^= 0xFF
    p.write_bytes(bytes(raw))
    ds = sluice.read_parquet(p)  # the footer is intact
    with pytest.raises(sluice.SluiceError, match="x.parquet"):
        ds.take(1)
    # Batches read column by column name the first sample that fails, like rows do.
    with pytest.raises(sluice.SluiceError, match=r"x\.parquet") as e:
        next(iter(ds.batch(16)))
    assert "read_parquet' failed on sample 0" in str(e.value)
    # The bare source's Arrow scan (row groups decoded on a pool) names the file too.
    for threads in (1, 2):
        with pytest.raises(sluice.SluiceError, match=r"x\.parquet.*row group 0"):
            ds.to_arrow(num_threads=threads)


CSV = 'id,name,score\n1,"Smith, J",0.5\n2,"two\nlines",\n3,plain,2\n'


def test_csv_quotes_types_and_random_access(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text(CSV)
    ds = sluice.read_csv(p)
    rows = ds.take(3)
    assert rows[0] == {"id": 1, "name": "Smith, J", "score": 0.5}
    assert rows[1]["name"] == "two\nlines" and rows[1]["score"] is None
    assert ids(ds.shuffle(seed=1)) != [] and sorted(ids(ds.shuffle(seed=1))) == [1, 2, 3]
    typed = sluice.read_csv(p, schema={"id": "str"}).take(1)[0]
    assert typed["id"] == "1"


def test_csv_malformed_rows_raise_or_skip(tmp_path, sluice_log):
    p = tmp_path / "bad.csv"
    p.write_text("a,b\n1,2\n3\n4,5\n")
    with pytest.raises(sluice.SluiceError, match=r"bad.csv:3:.*expected 2 fields"):
        sluice.read_csv(p)
    with sluice_log("skipped 1"):
        ds = sluice.read_csv(p, on_error="skip")
    assert [s["a"] for s in ds] == [1, 4]
    assert ds.stats().stages[0]["skipped"] == 1  # the source's skips
    p.write_text("a,b\n1,x\n")
    with pytest.raises(sluice.SluiceError, match=r"bad.csv:2: column 'b': cannot parse 'x' as int"):
        sluice.read_csv(p, schema={"b": "int"}).take(1)


def test_jsonl_invalid_line_names_file_and_line(tmp_path):
    p = tmp_path / "x.jsonl"
    p.write_text('{"a": 1}\n{"a": \n')
    ds = sluice.read_jsonl(p)
    with pytest.raises(sluice.PipelineError, match=r"x.jsonl:2: invalid JSON"):
        ds.take(2)


def _shard(path, members):
    with tarfile.open(path, "w") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


def test_webdataset_groups_by_key_and_streams(tmp_path):
    for s in range(2):
        _shard(
            tmp_path / f"shard-{s}.tar",
            [m for k in range(3) for m in [(f"s{s}/{k:03d}.jpg", b"J%d" % k), (f"s{s}/{k:03d}.cls", b"%d" % k)]],
        )
    ds = sluice.read_webdataset(str(tmp_path / "shard-*.tar"))
    rows = list(ds)
    assert [r["__key__"] for r in rows] == [f"s{s}/{k:03d}" for s in range(2) for k in range(3)]
    assert rows[4]["jpg"] == b"J1" and rows[4]["cls"] == b"1" and rows[4]["__url__"].endswith("shard-1.tar")
    assert len(list(ds.shuffle_buffer(4, seed=0))) == 6
    rank1 = sluice.read_webdataset(str(tmp_path), rank=1, world_size=2)
    assert {r["__key__"][:2] for r in rank1} == {"s1"}


def test_webdataset_rejects_path_traversal(tmp_path):
    _shard(tmp_path / "evil.tar", [("ok.txt", b"x"), ("../../escape.txt", b"y")])
    with pytest.raises(sluice.SluiceError, match=r"evil.tar.*'\.\.\/\.\.\/escape.txt'.*absolute or '\.\.'"):
        list(sluice.read_webdataset(tmp_path / "evil.tar"))
    _shard(tmp_path / "abs.tar", [("/etc/x.txt", b"y")])
    with pytest.raises(sluice.SluiceError, match="abs.tar"):
        list(sluice.read_webdataset(tmp_path / "abs.tar"))
    assert not (tmp_path.parent / "escape.txt").exists()


def test_write_parquet_and_jsonl_round_trip(tmp_path, corpus):
    ds = sluice.read_parquet(corpus, columns=["id", "text", "vec"]).map(lambda s: {**s, "n": len(s["text"])})
    files = ds.write_parquet(tmp_path / "out", rows_per_file=16, rows_per_group=5)
    assert [f.rsplit("/", 1)[1] for f in files] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    table = pq.read_table(tmp_path / "out")
    assert table.num_rows == 40 and table.column("id").to_pylist() == list(range(40))
    assert table.column("vec").type == pa.list_(pa.float32())
    again = ds.write_parquet(tmp_path / "out2", rows_per_file=16, rows_per_group=5)
    assert [open(a, "rb").read() == open(b, "rb").read() for a, b in zip(files, again)] == [True] * 3
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [f.rsplit("/", 1)[1] for f in files]

    jfiles = sluice.read_parquet(corpus, columns=["id", "vec"]).write_jsonl(tmp_path / "j", rows_per_file=25)
    lines = [json.loads(line) for f in jfiles for line in open(f)]
    assert len(jfiles) == 2 and lines[3] == {"id": 3, "vec": [3.0, 1.5]}
    with pytest.raises(TypeError, match="bytes"):
        sluice.from_items([{"b": b"x"}]).write_jsonl(tmp_path / "k")


def test_arrow_and_pandas_interop(corpus):
    ds = sluice.read_parquet(corpus, columns=["id", "text", "vec", "score"])
    table = ds.to_arrow()
    want = pq.read_table(corpus, columns=["id", "text", "score"])
    assert table.column("id").to_pylist() == want.column("id").to_pylist()
    assert table.column("score").to_pylist() == want.column("score").to_pylist()
    assert pa.table(ds).num_rows == 40  # the PyCapsule stream protocol
    back = sluice.from_arrow(table)
    assert back.take(1)[0]["text"] == "line 0" and len(back.take(100)) == 40
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"x": [1, 2, 3], "s": ["a", "b", "c"]})
    assert sluice.from_pandas(df).map(lambda r: {**r, "x": r["x"] * 10}).to_pandas()["x"].tolist() == [10, 20, 30]
    with pytest.raises(TypeError):
        sluice.from_arrow([1, 2])


def test_to_arrow_of_a_columnar_source_equals_the_row_path(corpus, tmp_path):
    # read_parquet(...).to_arrow() builds record batches from column-wise batches; an
    # identity map forces the row path. Same schema, same values, whatever the batch size.
    ds = sluice.read_parquet(corpus, columns=["id", "text", "vec", "tag", "score"])
    for f in [lambda d: d, lambda d: d.shuffle(seed=2).shard(0, 2)]:
        for rows in [7, 1 << 16]:
            fast = f(ds).to_arrow(batch_rows=rows)
            slow = f(ds.map(lambda s: s)).to_arrow(batch_rows=rows)
            assert fast.schema == slow.schema and fast.equals(slow)
    assert fast.column("vec").type == pa.list_(pa.float32())
    # The bare source is scanned row group by row group on a decode pool: the same table for
    # any thread count, batches never larger than batch_rows nor spanning row groups.
    want = ds.map(lambda s: s).to_arrow()
    for threads in (1, 3):
        for rows in (3, 1 << 16):
            got = ds.to_arrow(num_threads=threads, batch_rows=rows)
            assert got.equals(want)
            sizes = [b.num_rows for b in got.to_batches()]
            assert max(sizes) <= min(rows, 7) and sum(sizes) == 40
    # Narrow types widen as the row path's values do; an all-null column is null-typed.
    narrow = tmp_path / "narrow.parquet"
    pq.write_table(pa.table({"i": pa.array(range(50), pa.int32()), "f": pa.array([0.5] * 50, pa.float32()),
                             "none": pa.array([None] * 50, pa.string())}), narrow, row_group_size=20)
    fast = sluice.read_parquet(narrow).to_arrow()
    slow = sluice.read_parquet(narrow).map(lambda s: s).to_arrow()
    assert fast.schema == slow.schema and fast.equals(slow)
    assert fast.schema.field("i").type == pa.int64() and fast.schema.field("none").type == pa.null()
    assert sluice.read_parquet(corpus, columns=["id"]).take(0) == []


def test_to_arrow_runs_python_udfs_without_deadlock():
    ds = sluice.range(5000).map(lambda s: {"id": s["id"], "sq": s["id"] ** 2})
    t = ds.to_arrow(num_threads=2, batch_rows=512)
    assert t.num_rows == 5000 and t.column("sq").to_pylist()[-1] == 4999**2


def test_jsonl_schema_coerces_and_skip_counts_in_stats(tmp_path, sluice_log):
    p = tmp_path / "typed.jsonl"
    p.write_text(
        '{"id": "1", "score": 2, "ok": true, "tags": ["a"]}\n'
        "not json\n"
        '{"id": 2.0, "score": "0.5"}\n'
        '{"id": "two"}\n'
        "[1, 2]\n"
        '{"id": 3, "ok": "false"}\n'
    )
    schema = {"id": "int", "score": "float", "ok": "bool"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "two"}\n')
    with pytest.raises(sluice.PipelineError, match=r"bad.jsonl:1: field 'id': cannot convert \"two\" to int"):
        list(sluice.read_jsonl(bad, schema=schema))
    with sluice_log("read_jsonl skipped 3"):
        ds = sluice.read_jsonl(p, schema=schema, on_error="skip")
    rows = list(ds)
    assert rows == [
        {"id": 1, "score": 2.0, "ok": True, "tags": ["a"]},
        {"id": 2, "score": 0.5, "ok": None},
        {"id": 3, "score": None, "ok": False},
    ]
    assert ds.stats().stages[0]["skipped"] == 3
    # Random access over the kept lines only.
    assert sorted(s["id"] for s in ds.shuffle(seed=2)) == [1, 2, 3]
    with pytest.raises(ValueError, match="unknown column type 'date'"):
        sluice.read_jsonl(p, schema={"id": "date"})


def test_non_utf8_csv_and_jsonl_name_file_and_line(tmp_path, sluice_log):
    csv = tmp_path / "latin1.csv"
    csv.write_bytes("name,city\nJo,Zürich\n".encode("latin-1"))
    with pytest.raises(sluice.PipelineError, match=r"latin1.csv:2: invalid UTF-8"):
        sluice.read_csv(csv).take(1)
    jl = tmp_path / "latin1.jsonl"
    jl.write_bytes(b'{"a": "ok"}\n' + '{"a": "Zürich"}\n'.encode("latin-1"))
    with pytest.raises(sluice.PipelineError, match=r"latin1.jsonl:2: invalid UTF-8.*errors=\"replace\""):
        sluice.read_jsonl(jl).take(2)
    assert sluice.read_jsonl(jl, errors="replace").take(2)[1] == {"a": "Z\ufffdrich"}
    with sluice_log("skipped 1"):
        assert [s["a"] for s in sluice.read_jsonl(jl, on_error="skip")] == ["ok"]
    txt = tmp_path / "latin1.txt"
    txt.write_bytes("fine\nZürich\n".encode("latin-1"))
    with pytest.raises(sluice.PipelineError, match=r"latin1.txt:2: invalid UTF-8"):
        sluice.read_text(txt).take(2)
    assert sluice.read_text(txt, errors="replace").take(2)[1] == {"text": "Z\ufffdrich"}


def test_webdataset_shard_order_shuffles_per_epoch(tmp_path):
    for s in range(6):
        _shard(tmp_path / f"shard-{s}.tar", [(f"{s}-{k}.txt", b"x") for k in range(2)])
    shards = str(tmp_path / "shard-*.tar")

    def order(ds, seed=0):
        # First key of each shard, per epoch (2 samples per shard).
        keys = [r["__key__"] for r in ds.iter(seed=seed, epoch=0)]
        return [k.split("-")[0] for k in keys[::2]]

    plain = order(sluice.read_webdataset(shards).repeat(2))
    assert plain == [str(s) for s in range(6)] * 2
    seeded = sluice.read_webdataset(shards, shuffle_shards=7).repeat(3)
    a = order(seeded)
    assert a == order(seeded, seed=5), "an int seed does not depend on the iteration seed"
    epochs = [a[i * 6 : i * 6 + 6] for i in range(3)]
    assert all(sorted(e) == [str(s) for s in range(6)] for e in epochs)
    assert len({tuple(e) for e in epochs}) > 1, "order changes per epoch"
    by_iter = sluice.read_webdataset(shards, shuffle_shards=True)
    assert order(by_iter, seed=1) == order(by_iter, seed=1)
    assert any(order(by_iter, seed=s) != order(by_iter, seed=1) for s in range(2, 6))
    # Ranks split the permuted list: disjoint, covering.
    r0 = order(sluice.read_webdataset(shards, rank=0, world_size=2, shuffle_shards=3))
    r1 = order(sluice.read_webdataset(shards, rank=1, world_size=2, shuffle_shards=3))
    assert sorted(r0 + r1) == [str(s) for s in range(6)]
    # Resume mid-epoch replays the same order.
    ds = sluice.read_webdataset(shards, shuffle_shards=True).repeat(2)
    full = [r["__key__"] for r in ds.iter(seed=4, epoch=0)]
    it = ds.iter(seed=4, epoch=0)
    for _ in range(7):
        next(it)
    it2 = ds.iter(seed=4)
    it2.load_state_dict(it.state_dict())
    assert [r["__key__"] for r in it2] == full[7:]
    # Each plain loop is the next epoch: the shard order changes from pass to pass, and
    # pass k is epoch k (what a rerun of the program gives).
    fresh = sluice.read_webdataset(shards, shuffle_shards=True)
    keys = lambda it: [r["__key__"] for r in it]  # noqa: E731
    passes = [keys(fresh.iter(epoch=k)) for k in range(4)]
    assert len({tuple(p) for p in passes}) > 1
    assert [keys(fresh) for _ in range(4)] == passes


def test_parquet_rows_read_a_batch_at_a_time_equal_the_row_path(tmp_path):
    # A pipeline that only reads Parquet hands its rows to the loop a batch of columns at a
    # time (issue 24, item 6); `fuse_ops=False` reads row by row. Same dicts, value types,
    # order, checkpoints and errors.
    n = 3000
    big = 2**63
    table = pa.table(
        {
            "i8": pa.array([k % 100 - 50 for k in range(n)], pa.int8()),
            "u32": pa.array(range(n), pa.uint32()),
            "u64": pa.array([big if k == 2500 else k for k in range(n)], pa.uint64()),
            "f32": pa.array([k / 3 for k in range(n)], pa.float32()),
            "f64": pa.array([None if k % 7 == 0 else k / 3 for k in range(n)]),
            "ok": pa.array([k % 3 == 0 for k in range(n)]),
            "s": pa.array([None if k % 11 == 0 else f"row {k} é" for k in range(n)]),
            "ls": pa.array([f"{k}" for k in range(n)], pa.large_string()),
            "b": pa.array([bytes([k % 256]) * 3 for k in range(n)]),
            "tag": pa.array(["x" if k % 2 else "y" for k in range(n)]).dictionary_encode(),
            "v": pa.array([[k, k + 1] for k in range(n)], pa.list_(pa.int32())),
        }
    )
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=700)
    ds = sluice.read_parquet(tmp_path / "t.parquet")

    def rows(it, k=None):
        out = []
        for s in it:
            out.append(s)
            if k is not None and len(out) == k:
                break
        return out

    def stages(it):
        return [s["name"] for s in it.stats()["stages"]][1:]

    def same_rows(a, b):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert list(x) == list(y)
            for key in x:
                assert type(x[key]) is type(y[key]), key
                if isinstance(x[key], np.ndarray):
                    assert x[key].dtype == y[key].dtype and x[key].tolist() == y[key].tolist()
                else:
                    assert x[key] == y[key], key

    # The row at 2500 holds a uint64 beyond int64: both paths deliver the rows before it,
    # then fail naming it.
    for threads in (None, 0):
        errors = []
        got = {}
        for fuse in (True, False):
            it = ds.iter(num_threads=threads, fuse_ops=fuse)
            out = []
            with pytest.raises(sluice.SluiceError) as e:
                for s in it:
                    out.append(s)
            got[fuse] = out
            errors.append(str(e.value))
        same_rows(got[True], got[False])
        assert len(got[True]) == 2500 and errors[0] == errors[1], errors
        assert "sample 2500" in errors[0] and "u64" in errors[0]

    ok = sluice.read_parquet(tmp_path / "t.parquet", columns=[c for c in table.column_names if c != "u64"])
    for view in (ok, ok.shuffle(seed=4), ok.shard(1, 2)):
        same_rows(list(view.iter(seed=3, epoch=0)), list(view.iter(seed=3, epoch=0, fuse_ops=False)))
    it = ok.iter()
    assert sum(1 for _ in it) == n and it.stats()["consumer"]["outputs"] == n
    # The paths compared above are the two reads: a batch at a time, and row by row.
    assert stages(it) == ["read+batch(1024)"]
    plain = ok.iter(fuse_ops=False)
    next(plain)
    assert stages(plain) == ["read"]
    plain.close()

    # A checkpoint inside a batch of rows resumes at the next row, on either path.
    shuffled = ok.shuffle(seed=4)
    it = shuffled.iter(seed=1, epoch=0)
    head = rows(it, 1500)
    state = it.state_dict()
    assert it._count == 1500
    plain = shuffled.iter(seed=1, epoch=0, fuse_ops=False)
    same_rows(rows(plain, 1500), head)
    assert plain.state_dict() == state
    for fuse in (True, False):
        again = shuffled.iter(seed=1, fuse_ops=fuse)
        again.load_state_dict(state)
        rest = rows(again)
        same_rows(rest, list(shuffled.iter(seed=1, epoch=0, fuse_ops=not fuse))[1500:])
        assert sorted(r["u32"] for r in head + rest) == list(range(n))


def test_parquet_rows_shared_by_threads_go_out_once_each(tmp_path):
    # Rows read a batch at a time keep the iterator's contract: threads sharing it take
    # turns, each row goes to one of them, and each thread's rows come in stream order.
    import threading

    pq.write_table(pa.table({"id": range(5000)}), tmp_path / "t.parquet", row_group_size=600)
    it = sluice.read_parquet(tmp_path / "t.parquet").iter()
    got = [[] for _ in range(4)]

    def take(k):
        for s in it:
            got[k].append(s["id"])

    threads = [threading.Thread(target=take, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive()
    assert sorted(i for g in got for i in g) == list(range(5000))
    assert all(g == sorted(g) for g in got)
    assert [s["name"] for s in it.stats()["stages"]][1:] == ["read+batch(1024)"]
