"""Latency hiding: the CV reference pipeline over 2,000 objects and a Parquet scan, read from
local disk, from an S3-compatible server on loopback, and from the same server holding back
the first byte of every response by --delay-ms (30 ms: a cloud bucket's first-byte latency).
Ratios are against local disk.

    /root/.cache/bench-venv/bin/python benchmarks/remote.py [--rounds 3] [--delay-ms 30]

The server is benchmarks/s3_server.py (moto costs milliseconds of Python per request, CPU a
real bucket would not take from a 2-core machine). Needs the bench venv (pyarrow), the images
and text corpus from benchmarks/datasets/build.py (~/.cache/sluice-bench) and a sluice build
(imported from python/ when not installed). Cases run interleaved, round after round, each
for at least --min-seconds; the table gives medians over rounds. Throughput counts each
pass after its first batch; the time to a pass's first batch (listing, Parquet footers, the
first objects: the latency a bucket adds once per pass) is its own column. Writes
benchmarks/results/remote.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import checkout  # noqa: E402

checkout.use()
sys.path.insert(0, str(HERE))


import s3_server  # noqa: E402
import sluice  # noqa: E402
from formats import parquet_corpus  # noqa: E402
from peers import common as C  # noqa: E402

DATA = Path(os.environ.get("SLUICE_BENCH_DATA", Path.home() / ".cache" / "sluice-bench"))
BUCKET = "remote-bench"
KEYS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}


def start_server(root: Path, delay_ms: float) -> tuple[subprocess.Popen, str]:
    return s3_server.start(root, "--delay-ms", str(delay_ms))


def bucket_root(images: Path, corpus: Path) -> Path:
    """The bucket's tree: train/ (the images' class folders) and corpus40/ (Parquet files)."""
    root = DATA / "remote-bucket"
    root.mkdir(exist_ok=True)
    for name, target in (("train", images), ("corpus40", corpus)):
        link = root / name
        if not link.exists():
            link.symlink_to(target)
    return root


def cv_pass(root: str) -> tuple[int, float, float]:
    """One epoch of the CV pipeline over the 2,000 images under `root`."""
    return steady(cv_pipeline(sluice.read_images(root, labels="parent_dir").shuffle(seed=0)), "label")


def cv_pipeline(ds, field: str = "bytes", keep: tuple = ("image", "label")):
    """The CV reference pipeline's ops (benchmarks/peers/sluice_native.py) after `ds`: the
    JPEG in `field`, the fields `keep` kept."""
    import sluice.image as img

    return (ds.map(img.decode(field=field))
            .map(img.random_resized_crop(C.CV_SIZE, scale=C.CV_SCALE, ratio=C.CV_RATIO))
            .map(img.horizontal_flip(p=C.CV_FLIP_P))
            .map(img.color_jitter(*C.CV_JITTER, p=C.CV_JITTER_P))
            .map(img.grayscale(p=C.CV_GRAY_P, num_output_channels=3))
            .map(img.gaussian_blur(C.CV_BLUR_KERNEL, sigma=C.CV_BLUR_SIGMA, p=C.CV_BLUR_P))
            .map(img.normalize(C.MEAN, C.STD))
            .map(sluice.ops.select(list(keep)))
            .batch(C.CV_BATCH))


def parquet_pass(root: str) -> tuple[int, float, float]:
    """One scan of the 40 files (3.5 M rows), from a source opened for the pass."""
    return steady(sluice.read_parquet(root).batch(1024), "text")


def steady(ds, field: str) -> tuple[int, float, float]:
    """(units after the first batch, seconds after it, seconds to it) of one pass: opening
    the data (listing, footers) is its first batch's time, reported on its own, as
    benchmarks/run.py separates start-up from throughput."""
    t0 = time.perf_counter()
    it = iter(ds)
    next(it)
    t1 = time.perf_counter()
    n = sum(len(b[field]) for b in it)
    return n, time.perf_counter() - t1, t1 - t0


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(fn, arg, min_seconds: float) -> tuple[float, float]:
    """Units per second after each pass's first batch, over passes lasting at least
    `min_seconds` in all; and the median seconds to a pass's first batch."""
    units, seconds, firsts, t0 = 0, 0.0, [], time.perf_counter()
    while True:
        n, dt, first = fn(arg)
        units, seconds = units + n, seconds + dt
        firsts.append(first)
        if time.perf_counter() - t0 >= min_seconds:
            return units / seconds, statistics.median(firsts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--delay-ms", type=float, default=30.0)
    ap.add_argument("--min-seconds", type=float, default=6.0)
    ap.add_argument("--workloads", default="cv,parquet")
    args = ap.parse_args()
    workloads = args.workloads.split(",")

    # 40 files, 3.5 M rows: more than a source keeps of what it fetched, so every row
    # group of a pass is fetched from the bucket.
    corpus = parquet_corpus(copies=10)
    root = bucket_root(DATA / "images", corpus)
    servers = [start_server(root, 0), start_server(root, args.delay_ms)]
    try:
        os.environ.update(KEYS)
        # One bucket name per server: the stores' options say which endpoint serves it.
        direct, delayed = f"s3://{BUCKET}", f"s3://{BUCKET}-delayed"
        sluice.configure_storage(direct, endpoint=servers[0][1])
        sluice.configure_storage(delayed, endpoint=servers[1][1])
        where = {"local disk": None, "loopback S3": direct, f"S3 + {args.delay_ms:g} ms first byte": delayed}
        cases = {}
        for label, bucket in where.items():
            if "cv" in workloads:
                cases[("cv", label)] = (cv_pass, str(DATA / "images") if bucket is None else f"{bucket}/train/")
        for label, bucket in where.items():
            if "parquet" in workloads:
                cases[("parquet", label)] = (parquet_pass, str(corpus) if bucket is None else f"{bucket}/corpus40/")
        for fn, arg in cases.values():
            fn(arg)  # warm: listing, page cache, server
        results: dict = {k: [] for k in cases}
        firsts: dict = {k: [] for k in cases}
        server_cpu: dict = {k: [] for k in cases}
        pids = {None: None, direct: servers[0][0].pid, delayed: servers[1][0].pid}
        for r in range(args.rounds):
            for k, (fn, arg) in cases.items():
                pid = pids[where[k[1]]]
                cpu0, t0 = (cpu_seconds(pid) if pid else 0.0), time.perf_counter()
                rate, first = timed(fn, arg, args.min_seconds)
                results[k].append(rate)
                firsts[k].append(first)
                server_cpu[k].append((cpu_seconds(pid) - cpu0) / (time.perf_counter() - t0) if pid else 0.0)
                print(f"round {r}: {k[0]:8s} {k[1]:28s} {results[k][-1]:10.1f}/s", flush=True)
    finally:
        for proc, _ in servers:
            proc.terminate()
            proc.wait(timeout=10)

    cpu = C.cpu_model()
    rows = []
    for (workload, where), vals in results.items():
        med = statistics.median(vals)
        local = statistics.median(results[(workload, "local disk")])
        unit = "img/s" if workload == "cv" else "rows/s"
        first = statistics.median(firsts[(workload, where)])
        server = statistics.median(server_cpu[(workload, where)])
        rows.append({"workload": workload, "where": where, "median": med, "unit": unit, "vs_local": med / local,
                     "first_batch_s": first, "server_cores": server, "runs": vals})
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "remote.json").write_text(json.dumps({"cpu": cpu, "cores": os.cpu_count(), "rows": rows}, indent=1))
    lines = ["| workload | read from | median | vs local disk | first batch | server's CPU |",
             "|---|---|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row['workload']} | {row['where']} | {row['median']:,.0f} {row['unit']} | {row['vs_local']:.2f}× "
                     f"| {row['first_batch_s'] * 1000:,.0f} ms | {row['server_cores']:.2f} cores |")
    md = "\n".join(lines)
    (out / "remote.md").write_text(md + "\n")
    print(f"\n{cpu}, {os.cpu_count()} cores, {args.rounds} rounds\n\n{md}")


if __name__ == "__main__":
    main()
