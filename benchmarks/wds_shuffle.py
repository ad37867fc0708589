"""A global shuffle over WebDataset tar shards against the sequential read of the same shards
(issue 38, item 3). The 2,000 photos of the CV reference are converted once with
`ds.write_shards` into tar shards with member indexes (~--shard-mb each); then, interleaved
round after round:

    seq       read_webdataset(shards): the shards streamed in order, each one sequential read
    shuffle   read_webdataset(shards, index=True).shuffle(): a global permutation of the
              samples, each sample one ranged read of its members

for two pipelines — `raw` (the samples' bytes only: what the reads alone cost) and `cv` (the CV
reference ops after the read: decode, random-resized crop, flip, jitter, grayscale, blur,
normalize, batches of 64) — from local disk, and for `cv` also from a bucket
(benchmarks/s3_server.py on loopback, --delay-ms per request and --stall-fraction of GETs held
--stall-s more) with a cold object cache (epoch 1: a fresh cache_dir every pass) and a warm one
(epoch 2).

    /root/.cache/bench-venv/bin/python benchmarks/wds_shuffle.py [--rounds 3] [--min-seconds 5]
        [--shard-mb 4] [--delay-ms 50] [--stall-fraction 0.01] [--stall-s 2] [--smoke]

Throughput is samples per second after each pass's first batch over passes lasting at least
--min-seconds; the table gives medians over rounds and the ratio shuffle/seq. Writes
benchmarks/results/wds_shuffle.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from remote import DATA, KEYS, cv_pipeline  # noqa: E402  (this puts python/ on the path)
import s3_server  # noqa: E402
import sluice  # noqa: E402
from peers import common as C  # noqa: E402

BUCKET = "wds-bench"


def cv_ops(ds):
    """The CV reference ops on the shards' `jpg` field."""
    return cv_pipeline(ds, field="jpg", keep=("image",))


def raw_ops(ds):
    return ds.map(sluice.ops.select(["jpg"])).batch(C.CV_BATCH)


def shards(work: Path, images: Path, shard_mb: float) -> Path:
    """The photos as tar shards with indexes (made once per size)."""
    out = work / f"shards-{shard_mb:g}mb"
    if not (out / "index.json").exists():
        ds = sluice.read_images(str(images), labels=None).map(sluice.ops.rename("bytes", "jpg"))
        ds.map(sluice.ops.select(["jpg"])).write_shards(str(out), shard_size=int(shard_mb * 2**20))
    return out


def one_pass(ds) -> tuple[int, float, float]:
    """(samples after the first batch, seconds after it, seconds to it)."""
    t0 = time.perf_counter()
    it = iter(ds)
    first = next(it)
    t1 = time.perf_counter()
    n = sum(len(next(iter(b.values()))) for b in it)
    del first
    return n, time.perf_counter() - t1, t1 - t0


def timed(make, min_seconds: float) -> dict:
    units, seconds, firsts, passes, t0 = 0, 0.0, [], 0, time.perf_counter()
    while True:
        n, dt, first = one_pass(make())
        units, seconds, passes = units + n, seconds + dt, passes + 1
        firsts.append(first)
        if time.perf_counter() - t0 >= min_seconds:
            return {"rate": units / seconds if seconds else 0.0, "first_s": statistics.median(firsts), "passes": passes}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-seconds", type=float, default=5.0)
    ap.add_argument("--shard-mb", type=float, default=4.0)
    ap.add_argument("--delay-ms", type=float, default=50.0)
    ap.add_argument("--stall-fraction", type=float, default=0.01)
    ap.add_argument("--stall-s", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", type=Path, default=DATA / "wds-work")
    ap.add_argument("--smoke", action="store_true", help="one round, 1 s windows")
    args = ap.parse_args()
    if args.smoke:
        args.rounds, args.min_seconds = 1, 1.0
    args.work.mkdir(parents=True, exist_ok=True)
    images = DATA / "images"
    t0 = time.perf_counter()
    made = not (args.work / f"shards-{args.shard_mb:g}mb" / "index.json").exists()
    local = shards(args.work, images, args.shard_mb)
    convert_s = time.perf_counter() - t0 if made else None
    manifest = json.loads((local / "index.json").read_text())
    root = args.work / "bucket"
    root.mkdir(exist_ok=True)
    link = root / "shards"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(local)
    os.environ.update(KEYS)
    proc, endpoint = s3_server.start(root, "--delay-ms", str(args.delay_ms), "--stall-fraction",
                                     str(args.stall_fraction), "--stall-s", str(args.stall_s), "--seed", str(args.seed))
    try:
        sluice.configure_storage(f"s3://{BUCKET}", endpoint=endpoint, allow_http=True)
        url = f"s3://{BUCKET}/shards/"
        warm_dir = Path(tempfile.mkdtemp(prefix="wds-warm-", dir=args.work))

        colds = iter(range(10**9))

        def fresh() -> str:
            """An empty cache folder (one per pass: a previous pass's downloads may still run)."""
            return str(args.work / "cold" / str(next(colds)))

        epoch = iter(range(10**9))
        cases = {
            ("raw", "local", "seq"): lambda: raw_ops(sluice.read_webdataset(str(local))),
            ("raw", "local", "shuffle"): lambda: raw_ops(sluice.read_webdataset(str(local), index=True).shuffle()),
            ("cv", "local", "seq"): lambda: cv_ops(sluice.read_webdataset(str(local))),
            ("cv", "local", "shuffle"): lambda: cv_ops(sluice.read_webdataset(str(local), index=True).shuffle()),
            ("cv", "bucket cold", "seq"): lambda: cv_ops(sluice.read_webdataset(url, cache_dir=fresh())),
            ("cv", "bucket cold", "shuffle"): lambda: cv_ops(
                sluice.read_webdataset(url, index=True, cache_dir=fresh()).shuffle()),
            ("cv", "bucket warm", "seq"): lambda: cv_ops(sluice.read_webdataset(url, cache_dir=str(warm_dir))),
            ("cv", "bucket warm", "shuffle"): lambda: cv_ops(
                sluice.read_webdataset(url, index=True, cache_dir=str(warm_dir)).shuffle()),
        }
        # Fill the warm cache once.
        one_pass(cv_ops(sluice.read_webdataset(url, index=True, cache_dir=str(warm_dir))))
        results: dict = {}
        for r in range(args.rounds):
            for key, make in cases.items():
                got = timed(lambda: _epoch(make, next(epoch)), args.min_seconds)
                results.setdefault(" | ".join(key), []).append(got)
                print(f"round {r}: {key}: {got['rate']:.0f} samples/s", flush=True)
    finally:
        proc.kill()
        proc.wait(timeout=10)
        shutil.rmtree(args.work / "cold", ignore_errors=True)
        shutil.rmtree(warm_dir, ignore_errors=True)
    write(args, results, manifest, convert_s)


def _epoch(make, k: int):
    """The pipeline as `make` builds it, iterated as epoch k (a new permutation per pass)."""
    ds = make()
    return ds.iter(epoch=k)


def write(args, results: dict, manifest: dict, convert_s: float | None) -> None:
    cpu = C.cpu_model()
    med = {k: statistics.median(x["rate"] for x in v) for k, v in results.items()}
    rows = []
    for pipe, where in [("raw", "local"), ("cv", "local"), ("cv", "bucket cold"), ("cv", "bucket warm")]:
        seq, shuf = med.get(f"{pipe} | {where} | seq"), med.get(f"{pipe} | {where} | shuffle")
        if seq and shuf:
            rows.append(f"| {pipe} | {where} | {seq:,.0f} | {shuf:,.0f} | {shuf / seq:.2f}× |")
    cmd = "python benchmarks/wds_shuffle.py " + shlex.join(sys.argv[1:])
    md = "\n".join([
        f"Global shuffle over WebDataset shards ({datetime.date.today()}, {cpu}, {os.cpu_count()} cores): "
        f"{manifest['samples']} photos in {len(manifest['shards'])} tar shards of ~{args.shard_mb:g} MB "
        f"{f'(converted by write_shards in {convert_s:.1f} s)' if convert_s is not None else '(converted by write_shards earlier)'}; bucket: {args.delay_ms:g} ms per request, "
        f"{args.stall_fraction:.0%} of GETs stalled {args.stall_s:g} s; medians of {args.rounds} rounds of ≥ "
        f"{args.min_seconds:g} s windows.",
        "",
        "| pipeline | where | sequential (samples/s) | global shuffle (samples/s) | shuffle / sequential |",
        "|---|---|---:|---:|---:|",
        *rows,
        "",
        f"Command: `{cmd}`",
    ])
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    stem = "wds_shuffle-smoke" if args.smoke else "wds_shuffle"
    (out / f"{stem}.json").write_text(json.dumps({"args": vars(args) | {"work": str(args.work)}, "results": results,
                                                  "cpu": cpu}, indent=1, default=str))
    (out / f"{stem}.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
