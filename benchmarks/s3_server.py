"""A small S3-compatible server for benchmarks and tests: a local directory served as every
bucket (GET with ranges, HEAD, PUT, DELETE and DeleteObjects, ListObjectsV2 with prefix and delimiter; `If-None-Match`
answered 304 while the ETag holds and `If-Match` 412 once it does not, as S3 does), holding back the
first byte of every response by a fixed delay, as a distant bucket's first-byte latency does.
GCS's XML API is the same protocol with an OAuth bearer token: `--bearer TOKEN` checks it (the
tests use it as a fake GCS).

    python benchmarks/s3_server.py ROOT --port PORT [--delay-ms 30] [--bearer TOKEN]
        [--stall-fraction 0.01 --stall-s 2] [--error-fraction 0.01] [--stall-lists N] [--seed 0]
        [--log FILE]

Faults, for hedging and retry benchmarks: object GETs (not listings, not HEAD) are numbered in
arrival order, n = 0, 1, 2, ...; request n stalls (waits --stall-s before its headers, on top
of --delay-ms) when a hash of (seed, n) falls below --stall-fraction, and answers 503 SlowDown
when another hash of (seed, n) falls below --error-fraction. The same seed stalls the same
request numbers in every run. `--stall-lists N` stalls the first N listing requests
(ListObjectsV2) --stall-s each. `--log FILE` appends a JSON line per request: t (monotonic
start), method, key, range, status, stalled, ms.

Objects are re-stat'ed on every request: a file replaced on disk is served with its new bytes
and a new ETag (md5 of key, size and mtime). Listings walk the listed folder afresh, and a key
not seen before is looked up on disk, so files added after start are found. A PUT writes the
file (temp file + rename; no multipart).

moto (the tests' server) spends milliseconds of Python per request; on a 2-core machine that
is CPU taken from the pipeline being measured, which a real bucket would not take. This one
answers from file contents kept in memory in an asyncio loop, so what the benchmark sees is
the client's own cost plus the delay. It does not check signatures.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import email.utils
import hashlib
import html
import json
import os
import re
import stat as statmode
import tempfile
import time
import urllib.parse
from pathlib import Path
from xml.sax.saxutils import escape

SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?>'
             b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>")


class Bucket:
    def __init__(self, root: Path):
        self.root = root
        self.objects: dict[str, Path] = {}
        # key -> (size, mtime_ns, etag, Last-Modified), made once per version of the file
        self.stats: dict[str, tuple[int, int, str, str]] = {}
        self.cache: dict[str, bytes] = {}
        self.walk("")

    def walk(self, prefix: str) -> None:
        """(Re)indexes the folder holding `prefix`'s keys: new files appear, gone ones go."""
        folder = prefix.rpartition("/")[0]
        top = self.root / folder if folder else self.root
        for key in [k for k in self.objects if not folder or k.startswith(folder + "/")]:
            del self.objects[key]
        for dirpath, _, files in os.walk(top, followlinks=True):
            for f in files:
                p = Path(dirpath) / f
                self.objects[p.relative_to(self.root).as_posix()] = p

    def forget(self, key: str) -> None:
        self.objects.pop(key, None)
        self.stats.pop(key, None)
        self.cache.pop(key, None)

    def path(self, key: str) -> Path | None:
        """The file for `key` (None when there is none or the key leaves the root)."""
        p = self.objects.get(key)
        if p is None:
            norm = os.path.normpath(key)
            if not key or key.endswith("/") or norm.startswith("..") or os.path.isabs(norm):
                return None
            p = self.root / norm
        return p

    def stat(self, key: str) -> tuple[int, int, str, str] | None:
        """(size, mtime_ns, etag, Last-Modified) of `key` as it is on disk now; a change drops
        the kept bytes. One `stat` per request: this server shares the cores of the client it
        serves in the benchmarks, so its own cost per request is kept small."""
        p = self.path(key)
        try:
            st = os.stat(p) if p is not None else None
        except OSError:
            st = None
        if st is None or not statmode.S_ISREG(st.st_mode):
            self.forget(key)
            return None
        self.objects[key] = p
        old = self.stats.get(key)
        if old is None or old[:2] != (st.st_size, st.st_mtime_ns):
            self.cache.pop(key, None)
            etag = hashlib.md5(f"{key}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()
            modified = email.utils.formatdate(st.st_mtime_ns / 1e9, usegmt=True)
            old = self.stats[key] = (st.st_size, st.st_mtime_ns, etag, modified)
        return old

    def body(self, key: str) -> bytes:
        data = self.cache.get(key)
        if data is None:
            data = self.cache[key] = self.objects[key].read_bytes()
        return data

    def put(self, key: str, data: bytes) -> tuple[int, int, str, str] | None:
        p = self.path(key)
        if p is None:
            return None
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".put-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, p)
        return self.stat(key)

    def delete(self, key: str) -> None:
        """Removes `key`'s file; a key that is not there is no error (S3 answers 204 either way)."""
        p = self.path(key)
        if p is not None:
            p.unlink(missing_ok=True)
        self.forget(key)

    def listing(self, bucket: str, prefix: str, delimiter: str) -> bytes:
        self.walk(prefix)
        contents, prefixes = [], set()
        for key in sorted(self.objects):
            if not key.startswith(prefix):
                continue
            rest = key[len(prefix):]
            if delimiter and delimiter in rest:
                prefixes.add(prefix + rest.split(delimiter, 1)[0] + delimiter)
                continue
            if (st := self.stat(key)) is None:
                continue
            size, mtime_ns, etag, _ = st
            when = datetime.datetime.fromtimestamp(mtime_ns / 1e9, datetime.timezone.utc)
            contents.append(f"<Contents><Key>{escape(key)}</Key><LastModified>{when:%Y-%m-%dT%H:%M:%S.000Z}"
                            f"</LastModified><ETag>\"{etag}\"</ETag><Size>{size}</Size>"
                            "<StorageClass>STANDARD</StorageClass></Contents>")
        cps = "".join(f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>" for p in sorted(prefixes))
        return (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>{bucket}</Name>'
                f"<Prefix>{escape(prefix)}</Prefix><KeyCount>{len(contents) + len(prefixes)}</KeyCount>"
                f"<MaxKeys>100000</MaxKeys><IsTruncated>false</IsTruncated>{''.join(contents)}{cps}"
                "</ListBucketResult>").encode()


class Faults:
    """Which object GETs stall or fail: request n's fate is a hash of (salt, seed, n)."""

    def __init__(self, stall_fraction: float, stall_s: float, error_fraction: float, seed: int,
                 stall_lists: int = 0):
        self.stall_fraction, self.stall_s = stall_fraction, stall_s
        self.error_fraction, self.seed = error_fraction, seed
        self.n, self.lists_left = 0, stall_lists

    def draw(self, salt: str, n: int) -> float:
        h = hashlib.blake2b(f"{salt}:{self.seed}:{n}".encode(), digest_size=8).digest()
        return int.from_bytes(h, "big") / 2**64

    def next(self) -> tuple[bool, bool]:
        """(stall, error) of the next object GET."""
        n, self.n = self.n, self.n + 1
        return (self.draw("stall", n) < self.stall_fraction, self.draw("error", n) < self.error_fraction)

    def next_list(self) -> bool:
        """Whether the next listing request stalls."""
        self.lists_left -= 1
        return self.lists_left >= 0


async def handle(reader, writer, bucket: Bucket, delay: float, bearer: str | None = None,
                 faults: Faults = Faults(0, 0, 0, 0), log=None):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            t0 = time.monotonic()
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
            payload = b""
            if n := int(headers.get("content-length", 0)):
                if headers.get("expect", "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                payload = await reader.readexactly(n)
            url = urllib.parse.urlsplit(target)
            path = urllib.parse.unquote(url.path).lstrip("/")
            query = dict(urllib.parse.parse_qsl(url.query))
            name, _, key = path.partition("/")
            status, extra, body, length, stalled = "200 OK", {}, b"", None, False
            rng = headers.get("range")
            if bearer is not None and headers.get("authorization") != f"Bearer {bearer}":
                status, body = "401 Unauthorized", b"<Error><Code>AuthenticationRequired</Code></Error>"
            elif not key and method == "GET":
                stalled = faults.next_list()
                body = bucket.listing(name, query.get("prefix", ""), query.get("delimiter", ""))
                extra["Content-Type"] = "application/xml"
            elif method == "PUT":
                st = bucket.put(key, payload)
                if st is None:
                    status, body = "400 Bad Request", b"<Error><Code>InvalidObjectName</Code></Error>"
                else:
                    extra["ETag"] = f"\"{st[2]}\""
            elif method == "DELETE" and key:
                bucket.delete(key)
                status = "204 No Content"
            elif method == "POST" and not key and "delete" in url.query.split("&"):
                # DeleteObjects: the keys of a <Delete> document, each answered as deleted.
                keys = [html.unescape(k) for k in re.findall(r"<Key>(.*?)</Key>", payload.decode())]
                for k in keys:
                    bucket.delete(k)
                body = ("<DeleteResult>" + "".join(f"<Deleted><Key>{escape(k)}</Key></Deleted>" for k in keys)
                        + "</DeleteResult>").encode()
                extra["Content-Type"] = "application/xml"
            elif method not in ("GET", "HEAD"):
                status, body = "405 Method Not Allowed", b"<Error><Code>MethodNotAllowed</Code></Error>"
            elif (st := bucket.stat(key)) is None:
                status, body = "404 Not Found", b"<Error><Code>NoSuchKey</Code></Error>"
            elif (m := headers.get("if-match")) is not None and m not in (f"\"{st[2]}\"", "*"):
                # S3's answer to a read pinned to a version the object no longer has.
                status, body = "412 Precondition Failed", b"<Error><Code>PreconditionFailed</Code></Error>"
            elif headers.get("if-none-match") in (f"\"{st[2]}\"", "*"):
                # S3's answer to a conditional GET or HEAD of an unchanged object: no body.
                status, length = "304 Not Modified", 0
                extra.update({"ETag": f"\"{st[2]}\"", "Last-Modified": st[3]})
            else:
                data = bucket.body(key) if method == "GET" else b""
                size = len(data) if method == "GET" else st[0]
                start, end = 0, size - 1
                extra.update({"ETag": f"\"{st[2]}\"", "Accept-Ranges": "bytes",
                              "Last-Modified": st[3]})
                if rng and rng.startswith("bytes=") and size:  # (an empty object's range is ignored)
                    a, _, b = rng[6:].partition("-")
                    if a:
                        start, end = int(a), min(int(b or size - 1), size - 1)
                    else:  # the last b bytes
                        start, end = max(size - int(b), 0), size - 1
                    status = "206 Partial Content"
                    extra["Content-Range"] = f"bytes {start}-{end}/{size}"
                if start > end and size:
                    status, start, end, extra = "416 Range Not Satisfiable", 0, -1, {"Content-Range": f"bytes */{size}"}
                elif method == "GET":
                    stalled, error = faults.next()
                    if error:
                        status, data, extra = "503 Slow Down", SLOW_DOWN, {"Content-Type": "application/xml"}
                        start, end = 0, len(SLOW_DOWN) - 1
                body = memoryview(data)[start:end + 1] if method == "GET" else b""
                length = end - start + 1
            if stalled:
                await asyncio.sleep(faults.stall_s)
            if delay:
                await asyncio.sleep(delay)
            length = len(body) if length is None else length
            if method == "HEAD":
                body = b""
            hdrs = "".join(f"{k}: {v}\r\n" for k, v in extra.items())
            try:
                # One send for the head and the body: two would be two segments and two wakeups.
                writer.writelines((f"HTTP/1.1 {status}\r\nContent-Length: {length}\r\n{hdrs}\r\n".encode(), body))
                await writer.drain()
            finally:  # logged also when the client went away meanwhile (a hedged request's loser)
                if log is not None:
                    ms = round((time.monotonic() - t0) * 1000, 3)
                    log.write(json.dumps({"t": t0, "method": method, "key": key, "range": rng,
                                          "status": int(status[:3]), "stalled": stalled, "ms": ms}) + "\n")
                    log.flush()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def start_on_free_port(argv_for, what: str, **popen) -> "tuple[subprocess.Popen, str]":
    """A server process on a free loopback port (`argv_for(port)` is its command line); returns
    it and its endpoint URL once it accepts connections (for the benchmarks)."""
    import socket
    import subprocess
    import time
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    proc = subprocess.Popen(argv_for(port), **popen)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"{what} did not start")


def start(root: Path, *flags: str) -> "tuple[subprocess.Popen, str]":
    """This server serving `root` with `flags` (see start_on_free_port)."""
    import sys
    return start_on_free_port(lambda port: [sys.executable, __file__, str(root), "--port", str(port), *map(str, flags)],
                              "s3_server")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root", type=Path)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--bearer", help="answer only requests carrying this OAuth bearer token (GCS's XML API)")
    ap.add_argument("--stall-fraction", type=float, default=0.0, help="share of object GETs that stall")
    ap.add_argument("--stall-lists", type=int, default=0, help="how many listing requests, the first, stall")
    ap.add_argument("--stall-s", type=float, default=2.0, help="how long a stalled GET waits before its headers")
    ap.add_argument("--error-fraction", type=float, default=0.0, help="share of object GETs answered 503 SlowDown")
    ap.add_argument("--seed", type=int, default=0, help="which request numbers stall or fail")
    ap.add_argument("--log", type=Path, help="append a JSON line per request to this file")
    args = ap.parse_args()
    bucket = Bucket(args.root)
    faults = Faults(args.stall_fraction, args.stall_s, args.error_fraction, args.seed, args.stall_lists)
    log = open(args.log, "a") if args.log else None

    async def serve():
        server = await asyncio.start_server(
            lambda r, w: handle(r, w, bucket, args.delay_ms / 1000, args.bearer, faults, log), "127.0.0.1", args.port)
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
