"""benchmarks/s3_server.py, the benchmarks' S3 server: ranges, injected stalls and 503s, ETags
that follow a file's content, PUT, and its request log. Plain HTTP on loopback, no client
library."""

import contextlib
import http.client
import json
import os
import time

import pytest

import bucket_server


@contextlib.contextmanager
def s3_server(root, *flags):
    """The server (bucket_server.s3_server) serving `root`; yields a function making one request
    (method, path, headers, body) -> (status, headers, body, seconds)."""
    with bucket_server.s3_server(root, *flags) as endpoint:
        host, port = endpoint.removeprefix("http://").split(":")

        def request(method, path, headers=None, body=None):
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            try:
                t0 = time.monotonic()
                conn.request(method, path, body=body, headers=headers or {})
                resp = conn.getresponse()
                data = resp.read()
                return resp.status, dict(resp.getheaders()), data, time.monotonic() - t0
            finally:
                conn.close()

        yield request


def log_lines(log, n):
    """The log's `n` records, once the server has written them (it writes each after answering)."""
    deadline = time.monotonic() + 5
    while len(lines := log.read_text().splitlines()) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    return [json.loads(ln) for ln in lines]


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "bucket"
    (root / "d").mkdir(parents=True)
    (root / "d" / "a.bin").write_bytes(bytes(range(256)) * 4)
    (root / "d" / "b.txt").write_bytes(b"hello")
    return root


def test_ranges_and_head(root):
    data = (root / "d" / "a.bin").read_bytes()
    with s3_server(root) as req:
        status, headers, body, _ = req("GET", "/bkt/d/a.bin", {"Range": "bytes=10-19"})
        assert (status, body, headers["Content-Range"]) == (206, data[10:20], "bytes 10-19/1024")
        assert req("GET", "/bkt/d/a.bin", {"Range": "bytes=1000-"})[2] == data[1000:]
        assert req("GET", "/bkt/d/a.bin", {"Range": "bytes=-5"})[2] == data[-5:]
        assert req("GET", "/bkt/d/a.bin", {"Range": "bytes=5000-"})[0] == 416
        assert req("GET", "/bkt/d/a.bin")[2] == data
        status, headers, body, _ = req("HEAD", "/bkt/d/a.bin")
        assert (status, headers["Content-Length"], body) == (200, "1024", b"")
        assert req("GET", "/bkt/d/nope")[0] == 404
        assert req("POST", "/bkt/d/a.bin")[0] == 405
        # If-Match: the object's ETag reads on, another one is refused (412), as S3 does.
        etag = headers["ETag"]
        assert req("GET", "/bkt/d/a.bin", {"If-Match": etag, "Range": "bytes=0-3"})[2] == data[:4]
        assert req("GET", "/bkt/d/a.bin", {"If-Match": '"other"'})[0] == 412
        # DELETE and DeleteObjects remove the files; a key that is not there is no error.
        assert req("DELETE", "/bkt/d/a.bin")[0] == 204 and not (root / "d" / "a.bin").exists()
        assert req("DELETE", "/bkt/d/a.bin")[0] == 204
        (root / "d" / "x.bin").write_bytes(b"x")
        doc = b"<Delete><Object><Key>d/x.bin</Key></Object><Object><Key>d/gone</Key></Object></Delete>"
        status, _, body, _ = req("POST", "/bkt?delete", body=doc)
        assert status == 200 and b"<Key>d/x.bin</Key>" in body and not (root / "d" / "x.bin").exists()


def test_stalls_delay_object_gets_only(root):
    with s3_server(root, "--stall-fraction", 1.0, "--stall-s", 0.5) as req:
        status, _, body, seconds = req("GET", "/bkt/d/b.txt")
        assert (status, body) == (200, b"hello") and seconds >= 0.5
        assert req("HEAD", "/bkt/d/b.txt")[3] < 0.4  # not an object GET: never stalled
    with s3_server(root, "--stall-fraction", 0.0, "--stall-s", 0.5) as req:
        assert req("GET", "/bkt/d/b.txt")[3] < 0.4


def test_errors_are_slow_down(root):
    with s3_server(root, "--error-fraction", 1.0) as req:
        status, headers, body, _ = req("GET", "/bkt/d/b.txt")
        assert status == 503 and b"<Code>SlowDown</Code>" in body and b"reduce your request rate" in body
        assert req("HEAD", "/bkt/d/b.txt")[0] == 200


def test_fault_choice_is_deterministic(root, tmp_path):
    """The same seed stalls the same request numbers; about the asked share of them."""
    runs = []
    for i in range(2):
        log = tmp_path / f"log{i}.jsonl"
        with s3_server(root, "--stall-fraction", 0.3, "--stall-s", 0.01, "--seed", 7, "--log", log) as req:
            for _ in range(40):
                req("GET", "/bkt/d/b.txt")
            runs.append([x["stalled"] for x in log_lines(log, 40)])
    assert runs[0] == runs[1] and len(runs[0]) == 40 and 4 <= sum(runs[0]) <= 24


def test_replaced_file_new_etag_and_body_listing_and_put(root):
    path = root / "d" / "b.txt"
    with s3_server(root) as req:
        _, h1, b1, _ = req("GET", "/bkt/d/b.txt")
        assert b1 == b"hello"
        listed = req("GET", "/bkt?list-type=2&prefix=d/")[2].decode()
        assert "<Key>d/b.txt</Key>" in listed and h1["ETag"] in listed
        tmp = root / "d" / "b.tmp"
        tmp.write_bytes(b"changed!")
        os.replace(tmp, path)
        os.utime(path, ns=(1, time.time_ns() + 10**9))  # a new mtime even on a coarse clock
        _, h2, b2, _ = req("GET", "/bkt/d/b.txt")
        assert b2 == b"changed!" and h2["ETag"] != h1["ETag"]
        listed = req("GET", "/bkt?list-type=2&prefix=d/")[2].decode()
        assert h2["ETag"] in listed and "<Size>8</Size>" in listed
        # A file added after start: found by a GET and by a listing.
        (root / "d" / "new.txt").write_bytes(b"new")
        assert req("GET", "/bkt/d/new.txt")[2] == b"new"
        (root / "e").mkdir()
        (root / "e" / "x").write_bytes(b"x")
        assert "<Key>e/x</Key>" in req("GET", "/bkt?list-type=2&prefix=e/")[2].decode()
        # PUT writes the file and answers its ETag, which a GET then gives.
        status, h3, _, _ = req("PUT", "/bkt/up/loaded.bin", body=b"uploaded")
        assert status == 200 and (root / "up" / "loaded.bin").read_bytes() == b"uploaded"
        _, h4, b4, _ = req("GET", "/bkt/up/loaded.bin")
        assert (b4, h4["ETag"]) == (b"uploaded", h3["ETag"])
        assert req("PUT", "/bkt/../outside", body=b"no")[0] == 400


def test_log_counts_requests(root, tmp_path):
    log = tmp_path / "requests.jsonl"
    with s3_server(root, "--log", log) as req:
        req("GET", "/bkt/d/a.bin", {"Range": "bytes=0-9"})
        req("HEAD", "/bkt/d/a.bin")
        req("GET", "/bkt?list-type=2&prefix=")
        req("GET", "/bkt/d/missing")
        lines = log_lines(log, 4)
    assert [(x["method"], x["key"], x["range"], x["status"]) for x in lines] == [
        ("GET", "d/a.bin", "bytes=0-9", 206), ("HEAD", "d/a.bin", None, 200), ("GET", "", None, 200),
        ("GET", "d/missing", None, 404)]
    assert all(not x["stalled"] and x["ms"] >= 0 and isinstance(x["t"], float) for x in lines)
