"""The node-local object cache and hedged reads (issue 38), against a real S3-compatible server
on loopback (benchmarks/s3_server.py: real HTTP, ranges, listings with ETags, a request log,
injected stalls): epoch 2 reads from the cache, processes on one node share it and never
download one object twice at once, a killed download leaves nothing readable, the cap holds,
a changed object is fetched again, and a stalled request is answered by its hedge.

Assertions count requests in the server's log and compare bytes — never a clock."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sluice
from bucket_server import KEYS, asked, object_gets, requests, s3_server

TIMEOUT = 120  # a hang guard for child processes, never a speed assertion


@pytest.fixture(autouse=True)
def _keys(monkeypatch):
    for k, v in KEYS.items():
        monkeypatch.setenv(k, v)


def _files(root: pathlib.Path, n: int, size: int = 3000) -> dict[str, bytes]:
    """n objects of distinct bytes under root/data/c{0,1}/ (the server serves root as every bucket)."""
    got = {}
    for i in range(n):
        p = root / "data" / f"c{i % 2}" / f"f{i:03d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        data = bytes([i % 251]) * size + i.to_bytes(4, "little")
        p.write_bytes(data)
        got[f"data/c{i % 2}/f{i:03d}.bin"] = data
    return got


def _use(endpoint: str, bucket: str = "bkt") -> None:
    sluice.configure_storage(f"s3://{bucket}", endpoint=endpoint, allow_http=True)


def _dir_bytes(d: pathlib.Path) -> int:
    """Bytes the cache holds, measured holding its accounting lock (byte 0 of `lock`, an open
    file description lock as the cache takes: a POSIX record lock would be dropped whenever the
    process closes any descriptor of the file): a walk beside the readers could count an object
    before its eviction and the download replacing it after."""
    import fcntl
    import struct

    def lock(kind):
        return struct.pack("hhxxxxqqixxxx", kind, os.SEEK_SET, 0, 1, 0)

    with open(d / "lock", "a+b") as f:
        fcntl.fcntl(f, fcntl.F_OFD_SETLKW, lock(fcntl.F_WRLCK))
        try:
            return sum(f.stat().st_size for f in d.rglob("*") if f.is_file() and f.name not in ("lock", "usage"))
        finally:
            fcntl.fcntl(f, fcntl.F_OFD_SETLK, lock(fcntl.F_UNLCK))


def test_the_second_epoch_reads_every_object_from_the_cache(tmp_path):
    root, log, cache = tmp_path / "root", tmp_path / "log", tmp_path / "cache"
    files = _files(root, 24)
    with s3_server(root, "--log", log) as endpoint:
        _use(endpoint)
        ds = sluice.read_files("s3://bkt/data/", cache_dir=cache)
        first = {s["path"].split("bkt/")[1]: bytes(s["bytes"]) for s in ds}
        assert first == files
        # Every object fetched (a request slow on a busy machine may be hedged: sent twice).
        gets = object_gets(log)
        assert {g["key"] for g in gets} == set(files)
        second = {s["path"].split("bkt/")[1]: bytes(s["bytes"]) for s in ds}
        assert second == files
        assert len(object_gets(log)) == len(gets), "epoch 2 fetched objects again"
        # A new dataset (another job on the node) lists the bucket and reads from the cache.
        again = sluice.read_files("s3://bkt/data/", cache_dir=cache)
        assert sorted(bytes(s["bytes"]) for s in again) == sorted(files.values())
        assert len(object_gets(log)) == len(gets)
        # Without the cache every epoch fetches.
        off = sluice.read_files("s3://bkt/data/", cache_dir=False)
        assert len(list(off)) == 24
        assert {g["key"] for g in object_gets(log)[len(gets):]} == {g["key"] for g in gets}


def test_a_parquet_file_is_downloaded_once_and_read_locally_after(tmp_path):
    root, log, cache = tmp_path / "root", tmp_path / "log", tmp_path / "cache"
    root.mkdir(parents=True)
    table = pa.table({"x": np.arange(50_000), "s": [f"row {i}" for i in range(50_000)]})
    pq.write_table(table, root / "t.parquet", row_group_size=5_000)
    with s3_server(root, "--log", log) as endpoint:
        _use(endpoint)
        ds = sluice.read_parquet("s3://bkt/t.parquet", cache_dir=cache)
        assert [s["x"] for s in ds] == list(range(50_000))
        n = len(object_gets(log))
        assert n >= 1
        ds2 = sluice.read_parquet("s3://bkt/t.parquet", cache_dir=cache)
        assert [s["s"] for s in ds2.take(3)] == ["row 0", "row 1", "row 2"]
        assert len(ds2) == 50_000
        assert len(object_gets(log)) == n, "a second open read the bucket again"


def _parquet_files(root: pathlib.Path, n: int, rows: int = 1000) -> list[int]:
    """n Parquet files under root/pq/, rows numbered through them all; the numbers."""
    (root / "pq").mkdir(parents=True)
    for i in range(n):
        pq.write_table(pa.table({"x": np.arange(i * rows, (i + 1) * rows)}), root / "pq" / f"{i:02d}.parquet",
                       row_group_size=rows // 2)
    return list(range(n * rows))


def test_opening_parquet_in_a_bucket_reads_each_footer_in_one_request_and_none_once_cached(tmp_path):
    """Opening a file costs one request: a GET of its last 64 KiB (the footer's length and the
    footer together), whose answer also gives the object's size and version, so no HEAD; a
    file that small is read from those bytes; a dataset over copies the cache holds of the
    versions its listing gave asks nothing but the listing."""
    root, log, cache = tmp_path / "root", tmp_path / "log", tmp_path / "cache"
    want = _parquet_files(root, 6)
    with s3_server(root, "--log", log) as endpoint:
        _use(endpoint)
        ds = sluice.read_parquet("s3://bkt/pq/", cache_dir=False)
        opened = asked(object_gets(log))  # settled: the server logs a request once it answered it
        files = [f"pq/{i:02d}.parquet" for i in range(6)]
        assert sorted(opened) == [(f, "bytes=-65536") for f in files], opened
        assert [r for r in requests(log) if r["method"] == "HEAD"] == []
        assert [s["x"] for s in ds] == want
        # Each file is smaller than that tail: its row groups are read from it, no GET more.
        assert len(asked(object_gets(log))) == 6, object_gets(log)

        assert [s["x"] for s in sluice.read_parquet("s3://bkt/pq/", cache_dir=cache)] == want
        before = len(requests(log))
        again = sluice.read_parquet("s3://bkt/pq/", cache_dir=cache)
        assert [s["x"] for s in again] == want
        later = requests(log)[before:]
        assert [r for r in later if r["key"]] == [], "a cached copy of the listed version was asked for again"


def test_an_empty_or_foreign_object_in_a_parquet_dataset_is_named_in_the_error(tmp_path):
    """A suffix read of an empty object is not answered as a range (the store sends the empty
    body whole): the open asks a HEAD instead, and the error names the object, as for an
    object that is not Parquet."""
    root, log = tmp_path / "root", tmp_path / "log"
    (root / "pq").mkdir(parents=True)
    (root / "pq" / "empty.parquet").write_bytes(b"")
    (root / "pq" / "text.parquet").write_bytes(b"not parquet at all" * 10)
    with s3_server(root, "--log", log) as endpoint:
        _use(endpoint, "foreign")
        for name in ("empty", "text"):
            with pytest.raises(sluice.SluiceError, match=f"{name}\\.parquet: not a readable Parquet file"):
                sluice.read_parquet(f"s3://foreign/pq/{name}.parquet", cache_dir=False)
    sent = {(r["key"], r["method"]) for r in requests(log)}
    assert ("pq/empty.parquet", "HEAD") in sent, sent
    assert ("pq/text.parquet", "HEAD") not in sent, sent


def test_a_stalled_footer_read_is_hedged(tmp_path):
    """An open's footer read is hedged like any other read: one stalled request no longer
    holds the dataset's open for the whole stall. The server stalls its first object GET (the
    footer) and no other; the same bytes are asked again before the stalled GET answers."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
    from s3_server import Faults

    seed = next(s for s in range(10_000)
                if Faults(0.5, 5, 0, s).draw("stall", 0) < 0.5
                and all(Faults(0.5, 5, 0, s).draw("stall", n) >= 0.5 for n in range(1, 12)))
    root, log = tmp_path / "root", tmp_path / "log"
    want = _parquet_files(root, 1, rows=4000)
    # A bucket of its own: its latency record starts empty here.
    with s3_server(root, "--log", log, "--stall-fraction", 0.5, "--stall-s", 5, "--seed", seed) as endpoint:
        _use(endpoint, "footer")
        assert [s["x"] for s in sluice.read_parquet("s3://footer/pq/", cache_dir=False)] == want
        deadline = time.monotonic() + 30  # a hang guard: the stalled GET is logged once answered
        while not any(r.get("stalled") for r in requests(log)) and time.monotonic() < deadline:
            time.sleep(0.1)
    stalled = [r for r in requests(log) if r.get("stalled")]
    assert len(stalled) == 1, stalled
    same = [r for r in requests(log) if r["key"] == stalled[0]["key"] and r["range"] == stalled[0]["range"]
            and not r.get("stalled")]
    assert same and same[0]["t"] < stalled[0]["t"] + stalled[0]["ms"] / 1000, (stalled, same)


def test_a_stalled_listing_is_hedged(tmp_path):
    """Listing a prefix is hedged like a read: the server stalls the first LIST (the
    top-level one, with a delimiter) 2 s, and the same listing is asked again before it
    answers, so the dataset opens without waiting for the stall."""
    root, log = tmp_path / "root", tmp_path / "log"
    files = _files(root, 3)
    # A bucket of its own: its listings' latency record starts empty here.
    with s3_server(root, "--log", log, "--stall-lists", 1, "--stall-s", 2) as endpoint:
        _use(endpoint, "lists")
        got = sorted(bytes(s["bytes"]) for s in sluice.read_files("s3://lists/data/", cache_dir=False))
        assert got == sorted(files.values())
        deadline = time.monotonic() + 30  # a hang guard: the stalled LIST is logged once answered
        while not any(r.get("stalled") for r in requests(log)) and time.monotonic() < deadline:
            time.sleep(0.1)
    listings = [r for r in requests(log) if r["method"] == "GET" and not r["key"]]
    stalled = [r for r in listings if r["stalled"]]
    assert len(stalled) == 1, listings
    # The folder listings follow the top-level one's answer: a LIST sent before the stalled
    # one answered is its hedge.
    hedges = [r for r in listings if not r["stalled"] and r["t"] < stalled[0]["t"] + stalled[0]["ms"] / 1000]
    assert hedges, listings


def test_an_arrow_export_from_a_bucket_asks_for_the_next_row_groups_ahead(tmp_path):
    """`to_arrow` scans row groups on a few threads. In a bucket each row group waits a
    request's latency, so the scan asks for the bytes of the row groups after it ahead: with
    every response held 50 ms, more requests are in flight at once than the one thread and
    one ready row group of the scan (there were never more before). Twenty 1 MB row groups of
    random bytes: three requests of up to 8 MiB of consecutive row groups, all sent at once."""
    root, log = tmp_path / "root", tmp_path / "log"
    (root / "pq").mkdir(parents=True)
    rng = np.random.default_rng(0)
    values = [rng.bytes(1000) for _ in range(20_000)]
    pq.write_table(pa.table({"x": np.arange(20_000), "b": pa.array(values, pa.binary())}),
                   root / "pq" / "00.parquet", row_group_size=1_000, use_dictionary=False)
    with s3_server(root, "--log", log, "--delay-ms", 50) as endpoint:
        _use(endpoint, "arrowscan")
        table = sluice.read_parquet("s3://arrowscan/pq/", cache_dir=False).to_arrow(num_threads=1)
        assert table.column("x").to_pylist() == list(range(20_000))
        assert table.column("b").to_pylist() == values
        gets = object_gets(log)
    assert len(asked(gets)) == 4, gets  # the footer, then 8 + 8 + 4 row groups
    edges = sorted([(g["t"], 1) for g in gets] + [(g["t"] + g["ms"] / 1000, -1) for g in gets])
    in_flight, most = 0, 0
    for _, step in edges:
        in_flight += step
        most = max(most, in_flight)
    assert most > 2, f"at most {most} requests in flight"


def test_a_parquet_file_read_in_order_from_a_bucket_asks_for_its_row_groups_together(tmp_path):
    """A read going through a file asks for consecutive row groups in one request (up to
    8 MiB): a bucket charges per request, and each costs the client CPU. Ten row groups were
    ten GETs beside the footer's; now one, whether the pipeline's chunks or `to_arrow`'s scan
    name them. A shuffled read asks for what it needs, and every read returns the file's rows."""
    root, log = tmp_path / "root", tmp_path / "log"
    (root / "pq").mkdir(parents=True)
    pq.write_table(pa.table({"x": np.arange(20_000), "s": [f"row {i}" for i in range(20_000)]}),
                   root / "pq" / "00.parquet", row_group_size=2_000)
    assert (root / "pq" / "00.parquet").stat().st_size > 65536  # past the tail the open reads
    with s3_server(root, "--log", log) as endpoint:
        _use(endpoint, "grouped")
        ds = sluice.read_parquet("s3://grouped/pq/", cache_dir=False)
        assert [s["x"] for s in ds] == list(range(20_000))
        assert len(asked(object_gets(log))) == 2, object_gets(log)  # the footer's tail, the row groups
        before = len(object_gets(log))
        assert sluice.read_parquet("s3://grouped/pq/", cache_dir=False).to_arrow().column("x").to_pylist() == list(range(20_000))
        assert len(asked(object_gets(log)[before:])) == 2, object_gets(log)[before:]
        shuffled = [s["x"] for s in sluice.read_parquet("s3://grouped/pq/", cache_dir=False).shuffle(seed=1)]
        assert sorted(shuffled) == list(range(20_000)) and shuffled != list(range(20_000))


def _same_size_parquet(path: pathlib.Path, base: int) -> None:
    """20,000 int64 rows from `base`, laid out byte for byte like any other `base`'s: plain,
    uncompressed, no statistics, so a rewrite keeps every offset the footer names."""
    pq.write_table(pa.table({"x": np.arange(base, base + 20_000)}), path, row_group_size=2_000,
                   compression="none", use_dictionary=False, write_statistics=False)


def test_an_object_rewritten_after_its_open_is_an_error_not_other_data(tmp_path):
    """A ranged read names no version: a Parquet file rewritten in place after the dataset
    opened it (the same size and layout, other values) was read at the old footer's offsets
    and gave the new rows without a word. Every ranged read now carries `If-Match` with the
    ETag the open saw, so the read fails naming the file; a new dataset reads the new rows.
    (A cache's download is pinned the same way: `cache_tests.rs`.)"""
    root, log = tmp_path / "root", tmp_path / "log"
    target = root / "pq" / "00.parquet"
    target.parent.mkdir(parents=True)
    _same_size_parquet(target, 0)
    size = target.stat().st_size
    assert size > 65536  # the row groups lie past the tail the open reads
    with s3_server(root, "--log", log) as endpoint:
        _use(endpoint, "pinned")
        ds = sluice.read_parquet("s3://pinned/pq/", cache_dir=False)
        _same_size_parquet(target, 1_000_000)
        os.utime(target, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))  # a new ETag
        assert target.stat().st_size == size
        with pytest.raises(sluice.SluiceError, match=r"s3://pinned/pq/00\.parquet.*changed since it was opened"):
            list(ds)
        assert any(r["status"] == 412 for r in requests(log))
        again = sluice.read_parquet("s3://pinned/pq/", cache_dir=False)
        assert [s["x"] for s in again] == list(range(1_000_000, 1_020_000))


def test_a_changed_object_is_fetched_again(tmp_path):
    root, log, cache = tmp_path / "root", tmp_path / "log", tmp_path / "cache"
    files = _files(root, 4)
    with s3_server(root, "--log", log) as endpoint:
        _use(endpoint)
        assert sorted(bytes(s["bytes"]) for s in sluice.read_files("s3://bkt/data/", cache_dir=cache)) == sorted(files.values())
        target = root / "data" / "c0" / "f000.bin"
        target.write_bytes(b"new bytes")
        os.utime(target, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
        # The listing gives the new ETag and size: the stale copy is not used.
        before = len(object_gets(log))
        got = {s["path"].rsplit("/", 1)[1]: bytes(s["bytes"]) for s in sluice.read_files("s3://bkt/data/", cache_dir=cache)}
        assert got["f000.bin"] == b"new bytes"
        assert got["f002.bin"] == files["data/c0/f002.bin"]
        assert {g["key"] for g in object_gets(log)[before:]} == {"data/c0/f000.bin"}


def test_a_new_dataset_over_named_objects_reads_one_rewritten_since_this_process_read_it(tmp_path):
    """Objects named one by one are not listed: a new dataset checks its cached copies with a
    conditional GET (304 when unchanged) instead of trusting what this process saw for an
    earlier one; the unchanged ones are not fetched again."""
    root, log, cache = tmp_path / "root", tmp_path / "log", tmp_path / "cache"
    files = _files(root, 4, size=6000)
    urls = [f"s3://bkt/{k}" for k in sorted(files)]
    with s3_server(root, "--log", log) as endpoint:
        _use(endpoint)
        first = [bytes(s["bytes"]) for s in sluice.read_files(urls, cache_dir=cache)]
        assert first == [files[k] for k in sorted(files)]
        target = root / "data" / "c0" / "f000.bin"
        target.write_bytes(bytes([7]) * 6000)  # same size, new bytes and ETag
        before = len(object_gets(log))
        got = [bytes(s["bytes"]) for s in sluice.read_files(urls, cache_dir=cache)]
        assert got[0] == bytes([7]) * 6000
        assert got[1:] == first[1:]
        assert {g["key"] for g in object_gets(log)[before:]} == {"data/c0/f000.bin"}
        checks = [r for r in requests(log) if r["method"] == "GET" and r["status"] == 304]
        assert len(checks) >= 3, checks


def test_the_cap_holds_while_reading_four_times_its_size(tmp_path):
    root, cache = tmp_path / "root", tmp_path / "cache"
    files = _files(root, 40, size=10_000)
    total = sum(len(b) for b in files.values())
    cap = total // 4
    with s3_server(root) as endpoint:
        _use(endpoint)
        ds = sluice.read_files("s3://bkt/data/", cache_dir=cache, cache_limit=cap)
        for _ in range(2):
            seen = 0
            for s in ds.iter(num_threads=2):
                assert bytes(s["bytes"]) == files[s["path"].split("bkt/")[1]]
                seen += 1
                assert _dir_bytes(cache) <= cap
            assert seen == 40
        assert 0 < _dir_bytes(cache) <= cap
        assert not list((cache / "tmp").iterdir())


def test_a_cap_below_the_data_keeps_a_fixed_share_instead_of_churning(tmp_path):
    """Epochs in one order over four times the cap: least-recently-used eviction would drop
    every object before the next epoch reached it (no hits, and a write and an eviction per
    object). The cache keeps what it stored first, serves it every epoch and stores nothing
    more (store/reuse.rs)."""
    root, log, cache = tmp_path / "root", tmp_path / "log", tmp_path / "cache"
    files = _files(root, 40, size=10_000)
    cap = sum(len(b) for b in files.values()) // 4
    with s3_server(root, "--log", log) as endpoint:
        _use(endpoint)
        ds = sluice.read_files("s3://bkt/data/", cache_dir=cache, cache_limit=cap)
        fetched, held = [], []
        for _ in range(3):
            before = len(object_gets(log))
            got = sorted(bytes(s["bytes"]) for s in ds.iter(num_threads=2))
            assert got == sorted(files.values())
            fetched.append({g["key"] for g in object_gets(log)[before:]})
            held.append(sorted(p.name for p in (cache / "objects").rglob("*") if p.is_file()))
            assert _dir_bytes(cache) <= cap
        assert len(fetched[0]) == 40
        assert held[0] == held[1] == held[2] and len(held[0]) >= 6, held
        assert len(fetched[1]) == len(fetched[2]) == 40 - len(held[0]), fetched


_READER = """
import json, os, sys, sluice
sluice.configure_storage("s3://bkt", endpoint=sys.argv[1], allow_http=True)
kind = sys.argv[3]
ds = (sluice.read_files("s3://bkt/data/", cache_dir=sys.argv[2]) if kind == "files"
      else sluice.read_parquet("s3://bkt/pq/", cache_dir=sys.argv[2]))
n = sum(1 for _ in ds.iter(num_threads=2))
print(json.dumps(n), flush=True)
"""


def test_processes_on_a_node_share_the_cache_and_never_fetch_one_object_twice(tmp_path):
    root, log, cache = tmp_path / "root", tmp_path / "log", tmp_path / "cache"
    _files(root, 60)
    (root / "pq").mkdir(parents=True)
    for i in range(3):
        pq.write_table(pa.table({"x": np.arange(i * 1000, (i + 1) * 1000)}), root / "pq" / f"{i}.parquet")
    # Every response waits 20 ms, so the three readers overlap.
    with s3_server(root, "--log", log, "--delay-ms", 20) as endpoint:
        env = {**os.environ, **KEYS}
        for kind, want in (("files", 60), ("parquet", 3000)):
            procs = [subprocess.Popen([sys.executable, "-c", _READER, endpoint, str(cache), kind],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                     for _ in range(3)]
            for p in procs:
                out, err = p.communicate(timeout=TIMEOUT)
                assert p.returncode == 0, err
                assert json.loads(out) == want
        gets = object_gets(log)
        data = [g for g in gets if g["key"].startswith("data/")]
        assert len({g["key"] for g in data}) == 60
        # Once each, but for hedges (a request slow on a busy machine sent again, at most one
        # in ten): three processes fetching for themselves would make up to 180.
        assert 60 <= len(data) <= 66, f"{len(data)} GETs for 60 objects read by 3 processes"
        # Each Parquet file is downloaded into the cache once (one GET of its whole range); a
        # reader that opened a file while it was downloading may read a few ranges itself.
        for i in range(3):
            size = (root / "pq" / f"{i}.parquet").stat().st_size
            whole = [g for g in gets if g["key"] == f"pq/{i}.parquet" and g["range"] == f"bytes=0-{size - 1}"]
            assert len(whole) == 1, (i, [g["range"] for g in gets if g["key"] == f"pq/{i}.parquet"])


def test_a_download_killed_midway_leaves_nothing_readable(tmp_path):
    root, cache = tmp_path / "root", tmp_path / "cache"
    root.mkdir(parents=True)
    big = np.random.default_rng(0).integers(0, 255, 24 << 20, dtype=np.uint8).tobytes()
    (root / "big.txt").write_bytes(big.replace(b"\n", b"x")[: (24 << 20) - 1] + b"\n")
    (root / "small.bin").write_bytes(b"s" * 1000)
    # Every object GET stalls 30 s: the child is killed while its download is in flight.
    with s3_server(root, "--stall-fraction", 1.0, "--stall-s", 30) as endpoint:
        env = {**os.environ, **KEYS}
        code = textwrap.dedent("""
            import sys, sluice
            sluice.configure_storage("s3://bkt", endpoint=sys.argv[1], allow_http=True)
            ds = sluice.read_text("s3://bkt/big.txt", cache_dir=sys.argv[2], errors="replace")
        """)
        child = subprocess.Popen([sys.executable, "-c", code, endpoint, str(cache)], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + TIMEOUT
        while not list((cache / "tmp").glob("*")) if (cache / "tmp").exists() else True:
            assert time.monotonic() < deadline, "the download never started"
            assert child.poll() is None
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=TIMEOUT)
    assert list((cache / "tmp").iterdir()), "the partial download is where the kill left it"
    assert not [f for f in (cache / "objects").rglob("*") if f.is_file()], "a partial object became visible"
    with s3_server(root) as endpoint:
        _use(endpoint)
        ds = sluice.read_text("s3://bkt/big.txt", cache_dir=cache, errors="replace")
        assert len(ds) == 1
        # Storing another object under a cap the cached big file alone fills makes the cache
        # scan its directory: the dead download's file is swept (its lock is free). Not a cap
        # the two big files pass: the kill may land after the dead download made its file but
        # before it counted its bytes, and then nothing would need room.
        sluice.read_files("s3://bkt/small.bin", cache_dir=cache, cache_limit=24 << 20).take(1)
    # The store (and its sweep) runs on this process's cache writer thread: wait for it (10 s
    # at most: a hang guard, not a speed check).
    deadline = time.monotonic() + 10
    while list((cache / "tmp").iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not list((cache / "tmp").iterdir())


def test_stalled_requests_are_hedged(tmp_path):
    root, log, cache = tmp_path / "root", tmp_path / "log", tmp_path / "cache"
    files = _files(root, 200, size=500)
    # One GET in 20 stalls 3 s. A bucket of its own: its latency record starts empty here.
    with s3_server(root, "--log", log, "--stall-fraction", 0.05, "--stall-s", 3, "--seed", 3) as endpoint:
        _use(endpoint, "hedge")
        got = {s["path"].split("hedge/")[1]: bytes(s["bytes"]) for s in sluice.read_files("s3://hedge/data/", cache_dir=cache)}
        assert got == files
        # The server logs a request once answered (a stalled one after its stall, also when its
        # client gave up on it). Hedges begin once 16 requests were measured and stay within
        # one request in ten, so not every stall is hedged: some stalled object must have had
        # a second GET. The wait is a hang guard, not a speed check.
        deadline = time.monotonic() + 30
        while True:
            per_key: dict[str, int] = {}
            for g in object_gets(log):
                per_key[g["key"]] = per_key.get(g["key"], 0) + 1
            stalled = [r["key"] for r in requests(log) if r.get("stalled")]
            if any(per_key.get(k, 0) >= 2 for k in stalled) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    assert set(per_key) == set(files)
    assert any(per_key.get(k, 0) >= 2 for k in stalled), (stalled, per_key)


def test_bad_cache_arguments_name_the_argument(tmp_path):
    with pytest.raises(ValueError, match="cache_limit"):
        sluice.read_files(str(tmp_path), cache_limit="lots")
    with pytest.raises(ValueError, match="cache_limit"):
        sluice.read_files(str(tmp_path), cache_limit=-1)
    with pytest.raises(TypeError, match="cache_dir"):
        sluice.read_files(str(tmp_path), cache_dir=3)
    blocker = tmp_path / "not-a-dir"
    blocker.write_bytes(b"")
    with pytest.raises(OSError, match="not-a-dir"):
        sluice.read_files("s3://bkt/a.bin", cache_dir=blocker / "sub")


def test_the_cache_settings_travel_with_the_dataset(tmp_path):
    import pickle
    root, log, cache = tmp_path / "root", tmp_path / "log", tmp_path / "cache"
    files = _files(root, 4)
    with s3_server(root, "--log", log) as endpoint:
        _use(endpoint)
        ds = sluice.read_files("s3://bkt/data/", cache_dir=cache, cache_limit="1MB")
        spec = json.loads(ds._native.source_spec())
        assert spec["cache"] == {"dir": str(cache), "limit": 1_000_000}
        back = pickle.loads(pickle.dumps(ds))
        assert sorted(bytes(s["bytes"]) for s in back) == sorted(files.values())
        assert [f for f in cache.rglob("*") if f.is_file() and f.parent.parent.name == "objects"]
