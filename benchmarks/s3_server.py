"""A small S3-compatible server for benchmarks: a local directory served as every bucket
(GET with ranges, HEAD, ListObjectsV2 with prefix and delimiter), holding back the first byte
of every response by a fixed delay, as a distant bucket's first-byte latency does. GCS's XML
API is the same protocol with an OAuth bearer token: `--bearer TOKEN` checks it (the tests
use it as a fake GCS).

    python benchmarks/s3_server.py ROOT --port PORT [--delay-ms 30]

moto (the tests' server) spends milliseconds of Python per request; on a 2-core machine that
is CPU taken from the pipeline being measured, which a real bucket would not take. This one
answers from memory-mapped files in an asyncio loop, so what the benchmark sees is the
client's own cost plus the delay. It does not check signatures.
"""

from __future__ import annotations

import argparse
import asyncio
import email.utils
import hashlib
import os
import urllib.parse
from pathlib import Path
from xml.sax.saxutils import escape


class Bucket:
    def __init__(self, root: Path):
        self.root = root
        self.objects: dict[str, Path] = {}
        for dirpath, _, files in os.walk(root, followlinks=True):
            for f in files:
                p = Path(dirpath) / f
                self.objects[p.relative_to(root).as_posix()] = p
        self.keys = sorted(self.objects)
        self.cache: dict[str, bytes] = {}

    def body(self, key: str) -> bytes:
        data = self.cache.get(key)
        if data is None:
            data = self.cache[key] = self.objects[key].read_bytes()
        return data

    def listing(self, bucket: str, prefix: str, delimiter: str) -> bytes:
        contents, prefixes = [], set()
        for key in self.keys:
            if not key.startswith(prefix):
                continue
            rest = key[len(prefix):]
            if delimiter and delimiter in rest:
                prefixes.add(prefix + rest.split(delimiter, 1)[0] + delimiter)
                continue
            size = self.objects[key].stat().st_size
            contents.append(f"<Contents><Key>{escape(key)}</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>"
                            f"<ETag>\"{hashlib.md5(key.encode()).hexdigest()}\"</ETag><Size>{size}</Size>"
                            "<StorageClass>STANDARD</StorageClass></Contents>")
        cps = "".join(f"<CommonPrefixes><Prefix>{escape(p)}</Prefix></CommonPrefixes>" for p in sorted(prefixes))
        return (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>{bucket}</Name>'
                f"<Prefix>{escape(prefix)}</Prefix><KeyCount>{len(contents) + len(prefixes)}</KeyCount>"
                f"<MaxKeys>100000</MaxKeys><IsTruncated>false</IsTruncated>{''.join(contents)}{cps}"
                "</ListBucketResult>").encode()


async def handle(reader, writer, bucket: Bucket, delay: float, bearer: str | None = None):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, target, _ = lines[0].split(" ", 2)
            headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:] if ":" in ln)}
            if n := int(headers.get("content-length", 0)):
                await reader.readexactly(n)
            url = urllib.parse.urlsplit(target)
            path = urllib.parse.unquote(url.path).lstrip("/")
            query = dict(urllib.parse.parse_qsl(url.query))
            name, _, key = path.partition("/")
            status, extra, body = "200 OK", {}, b""
            if bearer is not None and headers.get("authorization") != f"Bearer {bearer}":
                status, body = "401 Unauthorized", b"<Error><Code>AuthenticationRequired</Code></Error>"
            elif not key and method == "GET":
                body = bucket.listing(name, query.get("prefix", ""), query.get("delimiter", ""))
                extra["Content-Type"] = "application/xml"
            elif key not in bucket.objects:
                status, body = "404 Not Found", b"<Error><Code>NoSuchKey</Code></Error>"
            else:
                data = bucket.body(key)
                extra.update({"ETag": f"\"{hashlib.md5(key.encode()).hexdigest()}\"",
                              "Last-Modified": email.utils.formatdate(1767225600, usegmt=True)})
                rng = headers.get("range")
                if rng and rng.startswith("bytes="):
                    a, _, b = rng[6:].partition("-")
                    start, end = int(a), min(int(b) if b else len(data) - 1, len(data) - 1)
                    status = "206 Partial Content"
                    extra["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
                    data = memoryview(data)[start:end + 1]
                body = data
            if delay:
                await asyncio.sleep(delay)
            length = len(body)
            if method == "HEAD":
                body = b""
            hdrs = "".join(f"{k}: {v}\r\n" for k, v in extra.items())
            writer.write(f"HTTP/1.1 {status}\r\nContent-Length: {length}\r\n{hdrs}\r\n".encode())
            writer.write(body)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("root", type=Path)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--bearer", help="answer only requests carrying this OAuth bearer token (GCS's XML API)")
    args = ap.parse_args()
    bucket = Bucket(args.root)

    async def serve():
        server = await asyncio.start_server(
            lambda r, w: handle(r, w, bucket, args.delay_ms / 1000, args.bearer), "127.0.0.1", args.port)
        async with server:
            await server.serve_forever()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
