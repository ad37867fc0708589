"""Data-at-rest benchmarks: Parquet scans of the text corpus against pyarrow.dataset, WebDataset
reads against the `webdataset` package, and S3 (a moto server on loopback) against local disk.

    .venv-bench/bin/python benchmarks/formats.py [--rounds 5] [--threads 2]

Needs the bench venv (benchmarks/setup.sh; it installs pyarrow, webdataset and moto[server]),
the text corpus and images from benchmarks/datasets/build.py (~/.cache/sluice-bench), and a
sluice build (`make build`; the script imports it from python/ when it is not installed).
Cases run interleaved, round after round, each repeating its pass for at least --min-seconds
(the time is per pass); the table gives medians over rounds. Writes
benchmarks/results/formats.{json,md}.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import checkout  # noqa: E402

checkout.use()

import pyarrow as pa  # noqa: E402
import pyarrow.dataset as pads  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import sluice  # noqa: E402

DATA = Path(os.environ.get("SLUICE_BENCH_DATA", Path.home() / ".cache" / "sluice-bench"))
WORK = DATA / "formats"
KEYS = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}


def parquet_corpus(copies: int = 1) -> Path:
    """The text corpus as 4 Parquet files with 16k-row row groups (made once): 346,802
    rows. With `copies` > 1, a folder where each file is linked that many times (10: 40
    files, 3.5 M rows, 110 MB)."""
    corpus = WORK / "corpus"
    if not (corpus / ".done").exists():
        corpus.mkdir(parents=True, exist_ok=True)
        table = pq.read_table(DATA / "text" / "lines.parquet")
        step = -(-table.num_rows // 4)
        for i in range(4):
            pq.write_table(table.slice(i * step, step), corpus / f"part-{i}.parquet", row_group_size=16384)
        (corpus / ".done").write_text("ok")
    if copies == 1:
        return corpus
    wide = WORK / f"corpus{4 * copies}"
    if not (wide / ".done").exists():
        wide.mkdir(parents=True, exist_ok=True)
        for copy in range(copies):
            for i in range(4):
                link = wide / f"part-{copy:02d}-{i}.parquet"
                if not link.exists():
                    link.symlink_to(corpus / f"part-{i}.parquet")
        (wide / ".done").write_text("ok")
    return wide


def build_inputs(shard_samples: int, shards: int) -> tuple[Path, Path]:
    """The corpus as 4 Parquet files (row groups of 16k rows) and WebDataset shards of the
    benchmark photos (jpg + cls per sample, photos reused to reach the sample count)."""
    corpus, wds = parquet_corpus(), WORK / "wds"
    if not (wds / ".done").exists():
        wds.mkdir(parents=True, exist_ok=True)
        photos = sorted((DATA / "images").glob("*/*.jpg"))
        k = 0
        for s in range(shards):
            with tarfile.open(wds / f"shard-{s:05d}.tar", "w") as tf:
                for _ in range(shard_samples):
                    photo = photos[k % len(photos)]
                    for ext, data in [("jpg", photo.read_bytes()), ("cls", photo.parent.name.encode())]:
                        info = tarfile.TarInfo(f"{k:08d}.{ext}")
                        info.size = len(data)
                        tf.addfile(info, io.BytesIO(data))
                    k += 1
        (wds / ".done").write_text("ok")
    return corpus, wds


def start_moto() -> tuple[subprocess.Popen, str]:
    from s3_server import start_on_free_port
    return start_on_free_port(lambda port: [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              "moto server", env={**os.environ, **KEYS},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def upload(endpoint: str, corpus: Path, wds: Path) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="bench",
                      aws_secret_access_key="bench", region_name="us-east-1")
    s3.create_bucket(Bucket="bench")
    for d, prefix in [(corpus, "corpus"), (wds, "wds")]:
        for f in sorted(d.iterdir()):
            if not f.name.startswith("."):
                s3.upload_file(str(f), "bench", f"{prefix}/{f.name}")


def cases(corpus: Path, wds: Path, threads: int) -> dict:
    """name -> (group, fn returning (samples, payload bytes))."""
    import webdataset

    shard_glob = str(wds / "shard-*.tar")
    shard_list = sorted(str(p) for p in wds.glob("shard-*.tar"))

    def pa_columnar():
        n = b = 0
        for batch in pads.dataset(corpus, format="parquet").to_batches(columns=["text"]):
            n += batch.num_rows
            b += batch.column(0).nbytes
        return n, b

    def pa_rows():
        n = b = 0
        for batch in pads.dataset(corpus, format="parquet").to_batches(columns=["text"]):
            for row in batch.to_pylist():
                n += 1
                b += len(row["text"])
        return n, b

    def pa_values():
        n = b = 0
        for batch in pads.dataset(corpus, format="parquet").to_batches(columns=["text"]):
            column = batch.column(0).to_pylist()
            n += len(column)
            b += sum(map(len, column))
        return n, b

    def sl_rows(path=str(corpus)):
        n = b = 0
        for s in sluice.read_parquet(path, columns=["text"]).iter(num_threads=threads, progress=False):
            n += 1
            b += len(s["text"])
        return n, b

    def sl_batches():
        n = b = 0
        for batch in sluice.read_parquet(str(corpus), columns=["text"]).batch(1024).iter(num_threads=threads, progress=False):
            n += len(batch["text"])
            b += sum(map(len, batch["text"]))
        return n, b

    def sl_to_arrow():
        t = sluice.read_parquet(str(corpus), columns=["text"]).to_arrow(num_threads=threads)
        return t.num_rows, t.column(0).nbytes

    def ray_batches():
        import ray

        n = b = 0
        ds = ray.data.read_parquet(str(corpus), columns=["text"])
        for batch in ds.iter_batches(batch_size=1024, batch_format="numpy"):
            n += len(batch["text"])
            b += sum(map(len, batch["text"]))
        return n, b

    def wds_pkg():
        n = b = 0
        for s in webdataset.WebDataset(shard_list, shardshuffle=False, empty_check=False):
            n += 1
            b += len(s["jpg"])
        return n, b

    def sl_wds(path=shard_glob):
        n = b = 0
        for s in sluice.read_webdataset(path).iter(num_threads=threads, progress=False):
            n += 1
            b += len(s["jpg"])
        return n, b

    return {
        "parquet: pyarrow.dataset, arrow batches": ("parquet", pa_columnar),
        "parquet: pyarrow.dataset, Python rows (dicts)": ("parquet", pa_rows),
        "parquet: pyarrow.dataset, Python columns (a str list per batch)": ("parquet", pa_values),
        "parquet: sluice read_parquet, samples": ("parquet", sl_rows),
        "parquet: sluice read_parquet, batch(1024)": ("parquet", sl_batches),
        "parquet: sluice read_parquet().to_arrow()": ("parquet", sl_to_arrow),
        "parquet: Ray Data read_parquet, iter_batches(1024)": ("parquet", ray_batches),
        "webdataset: webdataset package": ("webdataset", wds_pkg),
        "webdataset: sluice read_webdataset": ("webdataset", sl_wds),
        "s3 parquet: sluice read_parquet, samples": ("s3", lambda: sl_rows("s3://bench/corpus/*.parquet")),
        "s3 webdataset: sluice read_webdataset": ("s3", lambda: sl_wds("s3://bench/wds/*.tar")),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--shard-samples", type=int, default=500)
    ap.add_argument("--min-seconds", type=float, default=0.5,
                    help="each case repeats its pass until this long (a 0.05 s pass alone is noise)")
    args = ap.parse_args()

    corpus, wds = build_inputs(args.shard_samples, args.shards)
    import ray

    # Ray's start-up is not part of a scan: the cluster is up before the rounds.
    ray.init(num_cpus=args.threads, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    proc, endpoint = start_moto()
    try:
        os.environ.update(KEYS, AWS_ENDPOINT_URL=endpoint, AWS_ALLOW_HTTP="true")
        upload(endpoint, corpus, wds)
        table = cases(corpus, wds, args.threads)
        times: dict[str, list[float]] = {k: [] for k in table}
        counts: dict[str, tuple[int, int]] = {}
        names = list(table)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[: r % len(names)]  # rotate: no fixed position
            for name in order:
                t0, passes = time.perf_counter(), 0
                while passes == 0 or time.perf_counter() - t0 < args.min_seconds:
                    counts[name] = table[name][1]()
                    passes += 1
                times[name].append((time.perf_counter() - t0) / passes)
                print(f"round {r}: {name}: {times[name][-1]:.3f} s", file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(timeout=10)

    rows = []
    for name in names:
        med = statistics.median(times[name])
        n, b = counts[name]
        rows.append({"case": name, "group": table[name][0], "median_s": med, "samples": n,
                     "samples_per_s": n / med, "mib_per_s": b / med / 2**20})
    # Each case against what it does the same work as: rows as dicts against rows as dicts,
    # batches of str lists against pyarrow's str lists per batch, Arrow against Arrow.
    pa_cols = "parquet: pyarrow.dataset, Python columns (a str list per batch)"
    like = {"parquet: sluice read_parquet, samples": "parquet: pyarrow.dataset, Python rows (dicts)",
            "parquet: sluice read_parquet, batch(1024)": pa_cols,
            "parquet: sluice read_parquet().to_arrow()": "parquet: pyarrow.dataset, arrow batches",
            "parquet: Ray Data read_parquet, iter_batches(1024)": pa_cols,
            "parquet: pyarrow.dataset, Python rows (dicts)": pa_cols,
            "parquet: pyarrow.dataset, arrow batches": pa_cols,
            "webdataset: sluice read_webdataset": "webdataset: webdataset package",
            "s3 parquet: sluice read_parquet, samples": "parquet: sluice read_parquet, samples",
            "s3 webdataset: sluice read_webdataset": "webdataset: sluice read_webdataset"}
    by = {r["case"]: r for r in rows}
    for r in rows:
        ref = like.get(r["case"])
        r["ratio"] = r["samples_per_s"] / by[ref]["samples_per_s"] if ref else None
        r["vs"] = ref
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    meta = {"rounds": args.rounds, "threads": args.threads, "min_seconds": args.min_seconds,
            "cpu_count": os.cpu_count(),
            "load_avg_at_end": os.getloadavg(),
            "pyarrow": pa.__version__, "command": " ".join([Path(sys.executable).name] + sys.argv)}
    (out / "formats.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = ["| case | samples | median s | samples/s | MiB/s | ratio | vs |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] else ""
        lines.append(f"| {r['case']} | {r['samples']} | {r['median_s']:.3f} | {r['samples_per_s']:,.0f} | "
                     f"{r['mib_per_s']:.1f} | {ratio} | {r['vs'] or ''} |")
    (out / "formats.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
