"""Data from real clients arrives right: what pyarrow, pandas, Pillow, torchvision and Hugging
Face `datasets` hand sluice reads back as the same values under the same names.

Each case writes or builds its input with the client itself, then reads it on every path a
reader has (rows, `take`, `fuse_ops=False`, shuffle, batch, `to_arrow`).
"""

from __future__ import annotations

import datetime as dt
import io

import numpy as np
import pytest

import sluice

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


# read_parquet(columns=...) in another order than the file -----------------------------------
@pytest.fixture
def abc(tmp_path):
    """40 rows over two files, row groups of 7: a int, b str, c float list."""
    d = tmp_path / "abc"
    d.mkdir()
    for i, (lo, hi) in enumerate([(0, 25), (25, 40)]):
        ids = list(range(lo, hi))
        pq.write_table(
            pa.table({"a": ids, "b": [f"s{j}" for j in ids], "c": [[float(j), j / 2] for j in ids]}),
            d / f"part-{i}.parquet",
            row_group_size=7,
        )
    return d


def _want(i, cols):
    full = {"a": i, "b": f"s{i}", "c": [float(i), i / 2]}
    return {k: full[k] for k in cols}


def _plain(row):
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in row.items()}


@pytest.mark.parametrize("cols", [["b", "a"], ["c", "a", "b"], ["b", "c"], ["a", "b", "c"]])
def test_parquet_columns_in_another_order_keep_their_names_on_every_path(abc, cols):
    ds = sluice.read_parquet(abc, columns=cols)
    assert list(ds.take(1)[0]) == cols
    assert [_plain(r) for r in ds.take(3)] == [_want(i, cols) for i in range(3)]
    # Rows: the columnar row path and the plain one.
    assert [_plain(r) for r in ds] == [_want(i, cols) for i in range(40)]
    assert [_plain(r) for r in ds.iter(fuse_ops=False)] == [_want(i, cols) for i in range(40)]
    shuffled = [_plain(r) for r in ds.shuffle(seed=3)]
    for r in shuffled:
        i = r["a"] if "a" in r else int(r["b"][1:])
        assert r == _want(i, cols)
    # Batches: straight from the decoded row group, through take (Arrow columns), and per row.
    for batches in (list(ds.batch(8)), ds.batch(8).take(5), list(ds.batch(8).iter(fuse_ops=False))):
        first = batches[0]
        assert list(first) == cols
        if "a" in cols:
            assert np.asarray(first["a"]).tolist() == list(range(8))
        if "b" in cols:
            assert list(first["b"]) == [f"s{j}" for j in range(8)]
        if "c" in cols:
            assert np.asarray(first["c"]).tolist() == [[float(j), j / 2] for j in range(8)]
    # map_batches reads the same columns.
    if "b" in cols:
        got = ds.map_batches(lambda b: {"b": list(b["b"])}, 16).take(2)
        assert got == [{"b": "s0"}, {"b": "s1"}]
    # to_arrow: the bare scan, the row path, and pyarrow's own read agree name by name.
    want = pq.read_table(abc, columns=cols)
    for table in (ds.to_arrow(), ds.to_arrow(num_threads=3, batch_rows=5), ds.map(lambda s: s).to_arrow()):
        assert table.column_names == cols
        for c in cols:
            assert table.column(c).to_pylist() == want.column(c).to_pylist()


def test_parquet_columns_named_twice_are_refused(abc):
    with pytest.raises(ValueError, match="'a' is named twice"):
        sluice.read_parquet(abc, columns=["a", "b", "a"])


def test_other_readers_keep_names_whatever_the_order(tmp_path):
    # CSV with a schema listing columns in another order than the header.
    p = tmp_path / "x.csv"
    p.write_text("a,b,c\n1,x,0.5\n2,y,1.5\n")
    rows = sluice.read_csv(p, schema={"c": "float", "a": "int"}).take(2)
    assert rows == [{"a": 1, "b": "x", "c": 0.5}, {"a": 2, "b": "y", "c": 1.5}]
    # JSON lines whose key order varies from line to line, with a schema in a third order.
    j = tmp_path / "x.jsonl"
    j.write_text('{"a": 1, "b": "x"}\n{"b": "y", "a": 2}\n')
    got = sluice.read_jsonl(j, schema={"b": "str", "a": "int"}).take(2)
    assert [(r["a"], r["b"]) for r in got] == [(1, "x"), (2, "y")]
    # Arrow and pandas: the table's column order is the sample's.
    t = pa.table({"b": ["x", "y"], "a": [1, 2]})
    assert sluice.from_arrow(t).take(2) == [{"b": "x", "a": 1}, {"b": "y", "a": 2}]
    assert sluice.from_arrow(t.select(["a", "b"])).take(1) == [{"a": 1, "b": "x"}]
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})[["b", "a"]]
    assert sluice.from_pandas(df).take(2) == [{"b": "x", "a": 1}, {"b": "y", "a": 2}]


# Time-zone-aware timestamps ---------------------------------------------------------------
def test_timestamps_arrive_as_iso_text_naive_and_aware(tmp_path):
    instant = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    table = pa.table(
        {
            "naive": pa.array([dt.datetime(2024, 1, 1, 12, 30)], pa.timestamp("us")),
            "utc": pa.array([instant], pa.timestamp("us", tz="UTC")),
            "paris": pa.array([instant], pa.timestamp("ms", tz="Europe/Paris")),
            "offset": pa.array([instant], pa.timestamp("us", tz="+05:30")),
        }
    )
    want = {
        "naive": "2024-01-01T12:30:00",
        "utc": "2024-01-01T00:00:00+00:00",
        "paris": "2024-01-01T01:00:00+01:00",
        "offset": "2024-01-01T05:30:00+05:30",
    }
    p = tmp_path / "ts.parquet"
    pq.write_table(table, p)
    for ds in (sluice.read_parquet(p), sluice.from_arrow(table)):
        assert ds.take(1) == [want]
        assert ds.batch(1).take(1)[0]["paris"] == ["2024-01-01T01:00:00+01:00"]
    # The text is what Python's isoformat gives, so it parses back to the same instant.
    for k in ("utc", "paris", "offset"):
        assert dt.datetime.fromisoformat(want[k]) == instant


def test_pandas_tz_aware_timestamps_read(tmp_path):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(
        {
            "t": pd.to_datetime(["2024-03-31 00:30", "2024-03-31 03:30"]).tz_localize("Europe/Berlin"),
            "u": pd.to_datetime(["2024-01-01", "2024-06-01"], utc=True),
        }
    )
    rows = sluice.from_pandas(df).take(2)
    assert [r["t"] for r in rows] == [ts.isoformat() for ts in df["t"]]
    assert [r["u"] for r in rows] == [ts.isoformat() for ts in df["u"]]
    df.to_parquet(tmp_path / "p.parquet")
    assert sluice.read_parquet(tmp_path / "p.parquet").take(2) == rows


# PIL images -------------------------------------------------------------------------------
def test_pil_images_arrive_as_hwc_uint8_arrays():
    Image = pytest.importorskip("PIL.Image")
    rgb = Image.new("RGB", (4, 3), (10, 20, 30))
    gray = Image.new("L", (5, 2), 7)
    [s] = sluice.from_items([{"img": rgb, "gray": gray}]).take(1)
    assert s["img"].dtype == np.uint8 and s["img"].shape == (3, 4, 3)
    assert s["img"][0, 0].tolist() == [10, 20, 30]
    assert s["gray"].shape == (2, 5) and int(s["gray"][1, 4]) == 7
    # Returned by a function and batched (a function's result nothing reads reaches the loop
    # as it was returned), and as a source's items.
    out = sluice.range(2).map(lambda r: {"img": Image.new("RGB", (2, 2), (r["id"], 0, 0))}).batch(2)
    assert out.take(1)[0]["img"][:, 0, 0, 0].tolist() == [0, 1]
    batch = sluice.from_source([{"img": rgb}, {"img": rgb}]).batch(2).take(1)[0]
    assert batch["img"].shape == (2, 3, 4, 3)


def test_torchvision_image_folder_without_transform(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    datasets = pytest.importorskip("torchvision.datasets")
    for cls in ("cat", "dog"):
        (tmp_path / cls).mkdir()
        for k in range(2):
            Image.new("RGB", (6, 4), (k, 0, 0)).save(tmp_path / cls / f"{k}.png")
    folder = datasets.ImageFolder(str(tmp_path))
    items = sluice.from_source(folder).take(4)
    img, label = items[1]["item"]
    assert img.shape == (4, 6, 3) and img.dtype == np.uint8 and int(img[0, 0, 0]) == 1
    assert [s["item"][1] for s in items] == [0, 0, 1, 1]


# Struct columns (Hugging Face Image() among them) -----------------------------------------
def _png(color):
    Image = pytest.importorskip("PIL.Image")
    buf = io.BytesIO()
    Image.new("RGB", (3, 2), color).save(buf, format="PNG")
    return buf.getvalue()


def _image_table():
    """What `datasets` stores for an Image() feature: struct<bytes: binary, path: string>."""
    image = pa.array(
        [{"bytes": _png((255, 0, 0)), "path": "red.png"}, None, {"bytes": _png((0, 0, 255)), "path": None}],
        pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
    )
    return pa.table({"image": image, "label": [0, 1, 2]})


def test_struct_columns_arrive_as_their_fields(tmp_path):
    import sluice.image as img

    table = _image_table()
    p = tmp_path / "img.parquet"
    pq.write_table(table, p)
    for ds in (sluice.from_arrow(table), sluice.read_parquet(p), sluice.read_parquet(p, columns=["label", "image"])):
        rows = ds.take(3)
        assert set(rows[0]) == {"image.bytes", "image.path", "label"}
        assert rows[0]["image.path"] == "red.png" and rows[0]["image.bytes"] == _png((255, 0, 0))
        # A null struct: each of its fields is None.
        assert rows[1]["image.bytes"] is None and rows[1]["image.path"] is None
        assert rows[2]["image.path"] is None
        assert list(ds) == rows and list(ds.iter(fuse_ops=False)) == rows
        assert sorted(ds.shuffle(seed=1), key=lambda r: r["label"]) == rows
        decoded = ds.filter(lambda s: s["image.bytes"] is not None).map(img.decode(field="image.bytes"))
        pix = [s["image"][0, 0].tolist() for s in decoded]
        assert pix == [[255, 0, 0], [0, 0, 255]]
    # The flattened names are pyarrow's own (Table.flatten()).
    assert sluice.from_arrow(table).to_arrow().column_names == table.flatten().column_names
    assert sluice.read_parquet(p).batch(3).take(1)[0]["label"].tolist() == [0, 1, 2]


def test_nested_structs_flatten_and_lists_of_structs_are_refused(tmp_path):
    inner = pa.array([{"x": {"y": 1, "z": "a"}}, {"x": None}], pa.struct([("x", pa.struct([("y", pa.int64()), ("z", pa.string())]))]))
    t = pa.table({"s": inner})
    assert sluice.from_arrow(t).take(2) == [{"s.x.y": 1, "s.x.z": "a"}, {"s.x.y": None, "s.x.z": None}]
    lst = pa.table({"l": pa.array([[{"q": 1}]], pa.list_(pa.struct([("q", pa.int64())]))), "k": [1]})
    with pytest.raises(TypeError, match="'l'"):
        sluice.from_arrow(lst)
    p = tmp_path / "l.parquet"
    pq.write_table(lst, p)
    with pytest.raises(TypeError, match="columns="):
        sluice.read_parquet(p)
    assert sluice.read_parquet(p, columns=["k"]).take(1) == [{"k": 1}]
    clash = pa.table({"a": pa.array([{"b": 1}]), "a.b": [2]})
    with pytest.raises(ValueError, match="'a.b'"):
        sluice.from_arrow(clash)


class _FakeHF:
    """The parts of a `datasets.Dataset` from_huggingface reads (so columns= is tested without
    `datasets` installed)."""

    def __init__(self, table):
        self.data = type("T", (), {"table": table})()
        self._indices = None

    def with_format(self, _):
        return self


def test_from_huggingface_columns_pick_and_order():
    t = pa.table({"a": [1, 2], "b": ["x", "y"], "m": pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64()))})
    with pytest.raises(TypeError, match="columns="):
        sluice.from_huggingface(_FakeHF(t))
    assert sluice.from_huggingface(_FakeHF(t), columns=["b", "a"]).take(1) == [{"b": "x", "a": 1}]
    with pytest.raises(ValueError, match="no column 'nope'"):
        sluice.from_huggingface(_FakeHF(t), columns=["a", "nope"])
    with pytest.raises(ValueError, match="named twice"):
        sluice.from_huggingface(_FakeHF(t), columns=["a", "a"])
    with pytest.raises(TypeError, match="list of names"):
        sluice.from_huggingface(_FakeHF(t), columns="a")


def test_huggingface_image_dataset():
    datasets = pytest.importorskip("datasets")
    if not hasattr(datasets, "Dataset"):  # benchmarks/datasets/, a namespace package, not HF's
        pytest.skip("Hugging Face datasets is not installed")
    Image = pytest.importorskip("PIL.Image")
    import sluice.image as img

    pics = [Image.new("RGB", (3, 2), (k * 50, 0, 0)) for k in range(4)]
    hf = datasets.Dataset.from_dict({"image": pics, "label": [0, 1, 0, 1]}).cast_column("image", datasets.Image())
    ds = sluice.from_huggingface(hf)
    assert set(ds.take(1)[0]) == {"image.bytes", "image.path", "label"}
    decoded = ds.map(img.decode(field="image.bytes")).take(4)
    assert [int(s["image"][0, 0, 0]) for s in decoded] == [0, 50, 100, 150]
    # Through from_source, HF decodes the column itself: PIL images, read as arrays.
    item = sluice.from_source(hf).take(2)[1]
    assert item["image"].shape == (2, 3, 3) and int(item["image"][0, 0, 0]) == 50
    labels = sluice.from_huggingface(hf.select([3, 0]), columns=["label"]).take(2)
    assert labels == [{"label": 1}, {"label": 0}]
