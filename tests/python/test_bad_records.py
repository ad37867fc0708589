"""Readers never silently give wrong data and never hang (issue 35, round two): integers
beyond int64 in JSON lines, CSV quoting and headers, files edited after they were indexed,
pipeline files with typos or that are not files at all, damaged plan files.

Each case was silent before: a rounded integer, a swallowed rest of a file, a dropped column,
a sample spanning lines, a typo taken for a default, a read that never ends.
"""

from __future__ import annotations

import json
import os
import threading

import pytest

import sluice

BIG = 2**64 - 1
BIGGER = 2**80 + 1


def _ids(ds):
    return [s.get("id") for s in ds]


# 8: JSON integers outside int64 --------------------------------------------------------------


def _big_jsonl(tmp_path):
    p = tmp_path / "big.jsonl"
    p.write_text(
        '{"id": 1, "f": 1e20, "g": 2.5}\n'  # 1: floats stay floats
        f'{{"id": {BIG}}}\n'  # 2: was 1.8446744073709552e+19
        f'{{"id": 3, "v": [1, {BIGGER}]}}\n'  # 3: was rounded inside a float64 array
        f'{{"id": {-(2**63)}}}\n'  # 4: int64's own minimum, exact
    )
    return p


def test_jsonl_integers_beyond_int64_raise_naming_file_line_and_value(tmp_path):
    first = sluice.read_jsonl(_big_jsonl(tmp_path)).take(1)[0]
    assert first["f"] == 1e20 and isinstance(first["f"], float) and first["g"] == 2.5
    for field, value in [("id", str(BIG)), ("v", f"[1, {BIGGER}]")]:
        p = tmp_path / f"{field}.jsonl"
        p.write_text(f'{{"id": 1}}\n{{"{field}": {value}}}\n')
        literal = str(BIG) if field == "id" else str(BIGGER)
        want = rf"{field}\.jsonl:2: field '{field}': integer {literal} is outside the int64 range"
        with pytest.raises(sluice.SluiceError, match=want):
            list(sluice.read_jsonl(p))


def test_jsonl_integers_beyond_int64_are_counted_under_skip_or_typed_by_schema(tmp_path):
    p = _big_jsonl(tmp_path)
    ds = sluice.read_jsonl(p, on_error="skip")
    assert _ids(ds) == [1, -(2**63)]
    assert ds.stats().stages[0]["skipped"] == 2
    # A schema says what to make of them: "str" keeps the digits, "float" rounds on request.
    typed = list(sluice.read_jsonl(p, schema={"id": "str"}).take(2))
    assert typed[1]["id"] == str(BIG)
    rounded = list(sluice.read_jsonl(p, schema={"id": "float"}).take(2))
    assert rounded[1]["id"] == float(BIG)


def test_csv_integers_beyond_int64_are_text_not_rounded(tmp_path):
    p = tmp_path / "big.csv"
    p.write_text(f"id,n\n{BIG},1\n{BIGGER},2\n")
    assert [r["id"] for r in sluice.read_csv(p)] == [str(BIG), str(BIGGER)]


# 9, 10: CSV quoting and headers ----------------------------------------------------------------


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_csv_unterminated_quote_raises_naming_the_line_it_opened_on(tmp_path, on_error):
    p = tmp_path / "q.csv"
    # Lines 4-6 used to become part of record 3's text, with no error or warning.
    p.write_text('id,text\n1,ok\n2,"never closed\n3,c\n4,d\n5,e\n')
    with pytest.raises(sluice.SluiceError, match=r"q\.csv:3: unterminated quoted field"):
        sluice.read_csv(p, on_error=on_error)


def test_csv_closed_and_literal_quotes_still_read(tmp_path):
    p = tmp_path / "ok.csv"
    p.write_text('a,b\n5" screen,x\n"say ""hi""",y\n"two\nlines","end"')
    assert [r["a"] for r in sluice.read_csv(p)] == ['5" screen', 'say "hi"', "two\nlines"]


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_csv_header_repeating_a_name_raises_naming_file_and_column(tmp_path, on_error):
    p = tmp_path / "dup.csv"
    p.write_text("id,id\n1,2\n")  # was [{"id": 2}]: a column silently dropped
    want = r"dup\.csv:1: the header names column 'id' twice \(columns 1 and 2\)"
    with pytest.raises(ValueError, match=want):
        sluice.read_csv(p, on_error=on_error)


# 12: files edited after they were indexed ------------------------------------------------------


@pytest.mark.parametrize(
    "reader, before, after",
    [
        (sluice.read_text, "one\ntwo\nthree\n", "on\ntwoo\nthree\n"),
        (sluice.read_jsonl, '{"a": 1}\n{"a": 22}\n{"a": 3}\n', '{"a": 11}\n{"a": 2}\n{"a": 3}\n'),
        (sluice.read_csv, "a\n1\n22\n3\n", "a\n11\n2\n3\n"),
    ],
)
def test_a_file_edited_in_place_after_indexing_raises_when_read(tmp_path, reader, before, after):
    p = tmp_path / "f.txt"
    p.write_text(before)
    ds = reader(p)
    p.write_text(after)  # same size, line breaks moved: the old ranges span lines
    with pytest.raises(sluice.SluiceError, match=r"f\.txt:\d+: the file changed since it was indexed"):
        list(ds)



@pytest.mark.parametrize(
    "reader, before, after",
    [
        (sluice.read_text, "one\ntwo\n", "one\ntwx\n"),
        (sluice.read_jsonl, '{"a": 1}\n{"a": 2}\n', '{"a": 1}\n{"a": 7}\n'),
        (sluice.read_csv, "a\n1\n2\n", "a\n1\n7\n"),
        (sluice.read_parquet, None, None),
    ],
)
def test_an_edit_that_keeps_every_record_boundary_is_seen_too(tmp_path, reader, before, after):
    # Every record still starts and ends where the index put it, so only the file's size or
    # modification time tell (checked every 50 ms while it is read; was: the new values read
    # silently).
    import os
    import time

    p = tmp_path / "f.txt"
    if before is None:
        # A Parquet file is opened again when a run starts (its footer with it): edited
        # while a run reads it, row groups read after the edit would be the new file's.
        import pyarrow as pa
        import pyarrow.parquet as pq

        p = tmp_path / "f.parquet"
        pq.write_table(pa.table({"a": list(range(100_000))}), p, row_group_size=100)
        it = reader(p).iter(num_threads=0)
        next(it)
        pq.write_table(pa.table({"a": list(range(99_999)) + [7]}), p, row_group_size=100)
    else:
        p.write_text(before)
        it = reader(p)
        p.write_text(after)
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # the mtime clock may be coarse
    time.sleep(0.1)  # past the 50 ms between checks
    with pytest.raises(sluice.SluiceError, match=r"f\.(txt|parquet)(:\d+)?: the file changed since it was"):
        list(it)

# 11: pipeline files with typos -----------------------------------------------------------------

_HEAD = '[source]\nsource = "range"\nn = 4\n'


@pytest.mark.parametrize(
    "steps, want",
    [
        (
            '[[steps]]\nstep = "batch"\nsize = 2\ndrop_lst = true\n',
            r"steps\[0\] \(step = \"batch\"\): unknown key 'drop_lst' \(allowed: size, drop_last\); "
            r"did you mean 'drop_last'\?",
        ),
        ('[[steps]]\nstep = "shuffle"\nsed = 5\n', r"unknown key 'sed' .*did you mean 'seed'\?"),
        (
            '[[steps]]\nstep = "map"\nop = "select"\nfeilds = ["id"]\n',
            r"select: unknown key 'feilds'.*did you mean 'fields'\?",
        ),
    ],
)
def test_read_pipeline_refuses_unknown_keys_in_steps(tmp_path, steps, want):
    p = tmp_path / "p.toml"
    p.write_text(_HEAD + steps)
    with pytest.raises(ValueError, match=want):
        sluice.read_pipeline(p)


def test_read_pipeline_refuses_unknown_keys_in_the_source_and_top_level(tmp_path):
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"source": {"source": "range", "m": 3}}))
    with pytest.raises(ValueError, match=r"p\.json.*\[source\]: .*unknown key 'm' \(allowed: n\)"):
        sluice.read_pipeline(p)
    p.write_text(json.dumps({"sed": 1, "source": {"source": "range", "n": 3}}))
    with pytest.raises(ValueError, match=r"top level: unknown key 'sed'.*did you mean 'seed'"):
        sluice.read_pipeline(p)


# 14: pipeline files that are not files ---------------------------------------------------------


def _returns_within(fn, seconds=30):
    """fn's exception, or a failure if it does not return in time (a FIFO read blocked)."""
    out = {}

    def run():
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["e"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), "blocked"
    return out.get("e")


def test_read_pipeline_refuses_devices_and_fifos_without_reading_them(tmp_path):
    e = _returns_within(lambda: sluice.read_pipeline("/dev/zero"))
    assert isinstance(e, OSError) and "/dev/zero: not a regular file (a character device)" in str(e), e
    fifo = tmp_path / "p.toml"
    os.mkfifo(fifo)
    e = _returns_within(lambda: sluice.read_pipeline(fifo))
    assert isinstance(e, OSError) and "not a regular file (a FIFO)" in str(e), e


def test_read_pipeline_refuses_a_file_over_16_mib(tmp_path):
    p = tmp_path / "p.toml"
    with open(p, "wb") as f:
        f.truncate((16 << 20) + 1)
    with pytest.raises(ValueError, match=r"p\.toml: \d+ bytes, over the 16 MiB"):
        sluice.read_pipeline(p)


# 16: damaged plan files --------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b'{"stages": [', b"\xff\xfe garbage", b"{}", b"[1, 2]"])
def test_plan_load_of_a_damaged_file_names_the_path(tmp_path, content):
    p = tmp_path / "plan.json"
    p.write_bytes(content)
    with pytest.raises(ValueError, match=rf"{p}: "):
        sluice.Plan.load(p)


def test_plan_load_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)
    e = _returns_within(lambda: sluice.Plan.load(fifo))
    assert isinstance(e, OSError) and "not a regular file (a FIFO)" in str(e), e
