"""Latency hiding: the CV reference pipeline over 2,000 objects and a Parquet scan, read from
local disk, from an S3-compatible server on loopback (moto), and from the same server behind
a proxy that holds back the first byte of every response by --delay-ms (30 ms: a cloud
bucket's first-byte latency). Ratios are against local disk.

    /root/.cache/bench-venv/bin/python benchmarks/remote.py [--rounds 3] [--delay-ms 30]

Needs the bench venv (moto[server], pyarrow), the images and text corpus from
benchmarks/datasets/build.py (~/.cache/sluice-bench) and a sluice build (imported from
python/ when not installed). Cases run interleaved, round after round, each for at least
--min-seconds; the table gives medians over rounds. Writes benchmarks/results/remote.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(HERE))

import pyarrow.parquet as pq  # noqa: E402

import sluice  # noqa: E402
from formats import KEYS, start_moto  # noqa: E402
from peers import common as C  # noqa: E402

DATA = Path(os.environ.get("SLUICE_BENCH_DATA", Path.home() / ".cache" / "sluice-bench"))
BUCKET = "remote-bench"


class DelayProxy:
    """A TCP proxy on loopback that delays the first byte of each response by `delay` seconds
    after its request arrived, as a distant bucket's first-byte latency does. Requests on a
    connection are answered in order (HTTP/1.1), so one pending deadline per connection
    suffices."""

    def __init__(self, upstream_port: int, delay: float):
        self.upstream_port, self.delay = upstream_port, delay
        self.loop = asyncio.new_event_loop()
        started = threading.Event()
        self.port = 0

        async def serve():
            server = await asyncio.start_server(self._client, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            started.set()
            async with server:
                await server.serve_forever()

        threading.Thread(target=lambda: self.loop.run_until_complete(serve()), daemon=True).start()
        started.wait(10)

    async def _client(self, c_reader, c_writer):
        try:
            u_reader, u_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            c_writer.close()
            return
        deadlines: list[float] = []

        async def up():
            while data := await c_reader.read(1 << 16):
                deadlines.append(time.monotonic() + self.delay)
                u_writer.write(data)
                await u_writer.drain()
            u_writer.close()

        async def down():
            while data := await u_reader.read(1 << 16):
                if deadlines:
                    wait = deadlines[-1] - time.monotonic()
                    deadlines.clear()
                    if wait > 0:
                        await asyncio.sleep(wait)
                c_writer.write(data)
                await c_writer.drain()
            c_writer.close()

        await asyncio.gather(up(), down(), return_exceptions=True)


def upload(endpoint: str, images: list[Path], corpus: Path) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                      aws_access_key_id=KEYS["AWS_ACCESS_KEY_ID"], aws_secret_access_key=KEYS["AWS_SECRET_ACCESS_KEY"])
    s3.create_bucket(Bucket=BUCKET)
    from concurrent.futures import ThreadPoolExecutor

    def put(p: Path):
        s3.put_object(Bucket=BUCKET, Key=f"train/{p.parent.name}/{p.name}", Body=p.read_bytes())

    with ThreadPoolExecutor(8) as ex:
        list(ex.map(put, images))
    for f in sorted(corpus.glob("*.parquet")):
        s3.put_object(Bucket=BUCKET, Key=f"corpus/{f.name}", Body=f.read_bytes())


def corpus_dir() -> Path:
    """The text corpus as 4 Parquet files (row groups of 16k rows)."""
    out = DATA / "formats" / "corpus"
    if not (out / ".done").exists():
        out.mkdir(parents=True, exist_ok=True)
        table = pq.read_table(DATA / "text" / "lines.parquet")
        step = -(-table.num_rows // 4)
        for i in range(4):
            pq.write_table(table.slice(i * step, step), out / f"part-{i}.parquet", row_group_size=16384)
        (out / ".done").write_text("ok")
    return out


def cv_pass(root: str) -> int:
    """One epoch of the CV pipeline over the 2,000 images under `root`; images/s counted."""
    n = 0
    for b in cv_pipeline(sluice.read_images(root, labels="parent_dir").shuffle(seed=0)):
        n += len(b["label"])
    return n


def cv_pipeline(ds):
    """The CV reference pipeline's ops (benchmarks/peers/sluice_native.py) after `ds`."""
    import sluice.image as img

    return (ds.map(img.decode())
            .map(img.random_resized_crop(C.CV_SIZE, scale=C.CV_SCALE, ratio=C.CV_RATIO))
            .map(img.horizontal_flip(p=C.CV_FLIP_P))
            .map(img.color_jitter(*C.CV_JITTER, p=C.CV_JITTER_P))
            .map(img.grayscale(p=C.CV_GRAY_P, num_output_channels=3))
            .map(img.gaussian_blur(C.CV_BLUR_KERNEL, sigma=C.CV_BLUR_SIGMA, p=C.CV_BLUR_P))
            .map(img.normalize(C.MEAN, C.STD))
            .map(sluice.ops.select(["image", "label"]))
            .batch(C.CV_BATCH))


def parquet_pass(root: str) -> int:
    n = 0
    for b in sluice.read_parquet(root).batch(1024):
        n += len(b["text"])
    return n


def timed(fn, arg, min_seconds: float) -> float:
    """Units per second over repeated passes lasting at least `min_seconds`."""
    units, t0 = 0, time.perf_counter()
    while True:
        units += fn(arg)
        dt = time.perf_counter() - t0
        if dt >= min_seconds:
            return units / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--delay-ms", type=float, default=30.0)
    ap.add_argument("--min-seconds", type=float, default=6.0)
    args = ap.parse_args()

    images = sorted((DATA / "images").glob("*/*.jpg"))[:2000]
    corpus = corpus_dir()
    os.environ.update(KEYS)
    proc, endpoint = start_moto()
    try:
        upload(endpoint, images, corpus)
        upstream = int(endpoint.rsplit(":", 1)[1])
        proxy = DelayProxy(upstream, args.delay_ms / 1000)
        # Two names for the same bucket's server: direct, and through the delaying proxy.
        sluice.configure_storage(f"s3://{BUCKET}", endpoint=endpoint)
        delayed = f"http://127.0.0.1:{proxy.port}"
        cases = {
            ("cv", "local disk"): (cv_pass, str(DATA / "images")),
            ("cv", "loopback S3"): (cv_pass, f"s3://{BUCKET}/train/"),
            ("parquet", "local disk"): (parquet_pass, str(corpus)),
            ("parquet", "loopback S3"): (parquet_pass, f"s3://{BUCKET}/corpus/"),
        }

        def with_delay(fn):
            def run(url):
                sluice.configure_storage(f"s3://{BUCKET}", endpoint=delayed)
                try:
                    return fn(url)
                finally:
                    sluice.configure_storage(f"s3://{BUCKET}", endpoint=endpoint)
            return run

        cases[("cv", f"S3 + {args.delay_ms:g} ms first byte")] = (with_delay(cv_pass), f"s3://{BUCKET}/train/")
        cases[("parquet", f"S3 + {args.delay_ms:g} ms first byte")] = (with_delay(parquet_pass), f"s3://{BUCKET}/corpus/")
        for fn, arg in cases.values():
            fn(arg)  # warm: listing, page cache, server
        results: dict = {k: [] for k in cases}
        for r in range(args.rounds):
            for k, (fn, arg) in cases.items():
                results[k].append(timed(fn, arg, args.min_seconds))
                print(f"round {r}: {k[0]:8s} {k[1]:28s} {results[k][-1]:10.1f}/s", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    cpu = platform.processor() or "?"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    rows = []
    for (workload, where), vals in results.items():
        med = statistics.median(vals)
        local = statistics.median(results[(workload, "local disk")])
        unit = "img/s" if workload == "cv" else "rows/s"
        rows.append({"workload": workload, "where": where, "median": med, "unit": unit, "vs_local": med / local, "runs": vals})
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "remote.json").write_text(json.dumps({"cpu": cpu, "cores": os.cpu_count(), "rows": rows}, indent=1))
    lines = [f"| workload | read from | median | vs local disk |", "|---|---|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['workload']} | {row['where']} | {row['median']:,.0f} {row['unit']} | {row['vs_local']:.2f}× |")
    md = "\n".join(lines)
    (out / "remote.md").write_text(md + "\n")
    print(f"\n{cpu}, {os.cpu_count()} cores, {args.rounds} rounds\n\n{md}")


if __name__ == "__main__":
    main()
