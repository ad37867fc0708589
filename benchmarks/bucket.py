"""Buckets at local-disk speed: the CV reference pipeline over the 2,000 photos and the Parquet
scan of benchmarks/remote.py, read from local disk and from a slow, stalling bucket
(benchmarks/s3_server.py on loopback: --delay-ms first-byte latency, and --stall-fraction of
the object GETs held back --stall-s more) through the node-local cache (`cache_dir=`,
`cache_limit=` of every `sluice.read_*`):

    local     local disk, the baseline
    cold      epoch 1: the bucket, a fresh empty cache_dir for every pass
    warm      epoch 2: the bucket, a cache_dir a previous pass filled
    capped    the bucket, cache_limit = a quarter of the dataset's bytes; a fresh cache_dir per
              round whose first pass is cold and the rest reuse it; a thread sums the sizes of
              the files under cache_dir every 0.2 s under the cache's lock (the max seen and
              whether it passed the cap; every 50 ms the walk took a tenth of a core)
    nocache   the bucket, cache_dir=False (epoch 1 without the cache, for reference)

    /root/.cache/bench-venv/bin/python benchmarks/bucket.py [--rounds 3] [--min-seconds 6]
        [--delay-ms 50] [--stall-fraction 0.01] [--stall-s 2] [--cases cv,parquet]
        [--kinds local,cold,warm,capped,nocache] [--smoke]

Cases run interleaved, round after round, each for passes lasting at least --min-seconds; the
table gives medians over rounds. Throughput counts each pass after its first batch (the time
to the first batch is its own column). The gaps between consecutive batches at the consumer
(within a pass) are pooled over rounds for their p50/p99, and the p99 is given again without
each pass's first START_GAPS gaps (the pass's start, while the read-ahead builds its lead). The server logs every request, so the
table also gives the object GETs per pass, how many of them stalled and how many of those no
other request hedged, the hedges (repeats of an object and range within a pass) of GETs that
were not stalled — a hedge the tail did not need — and how long an object whose first GET
stalled waited for a GET of it that did not stall to be sent (its hedge, or a third request
when the hedge stalled too; median, 95th percentile and largest over the passes); repeats of
every kind are in the JSON. Server CPU is per wall second
of the case's windows; client CPU is this process's (pipeline, I/O runtime, cache writer) per
image or row, the median over passes — less, in the capped case, the CPU of the thread that
sums the cache folder's sizes. `--cases raw` reads the photos as bytes without decoding
them: its client CPU is what reading an object costs the client by itself. `--smoke` checks
the script: one round, 1 s windows, one class folder (200 photos) and the 4-file corpus, written to results/bucket-smoke.*. Needs what remote.py
needs (the bench venv with pyarrow, ~/.cache/sluice-bench, a sluice build, imported from
python/ when not installed). Writes benchmarks/results/bucket.{json,md}; cache folders go
under --work (default ~/.cache/sluice-bench/bucket-work, on disk rather than tmpfs) and are
deleted only when the run ends.

On ext4 without a journal (this project's VMs), a file created within a few minutes of many
deletions costs the kernel a check of each recently freed inode (`recently_deleted` in
`find_inode_bit`: 15% of the machine's CPU in a cold pass that followed one); a new node's
first epoch does not pay that. So nothing is deleted while cases run — except by the capped
case's own evictions, which pay it as a user's capped cache would: run it on its own
(`--kinds local,capped`) to keep its deletions from the other cases' rounds, and start a run a
few minutes after the last one's folders were deleted.
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import json
import math
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from remote import DATA, KEYS, cpu_seconds, cv_pipeline  # noqa: E402  (this puts python/ on the path)
import s3_server  # noqa: E402
import sluice  # noqa: E402
from formats import parquet_corpus  # noqa: E402
from peers import common as C  # noqa: E402

BUCKET = "bucket-bench"
KINDS = ("local", "cold", "warm", "capped", "nocache")
# A pass starts with every object still to fetch: until the read-ahead is a first byte and a
# hedge ahead of the consumer (~120 ms at 50 ms: the first batch and the two gaps after it),
# a stalled object holds its batch however it is hedged. A pass here is 31 batches, so those
# two gaps are 6 % of all and set the p99; in an epoch of thousands of batches they are not.
# The table gives the p99 over every gap and over those after each pass's first START_GAPS.
START_GAPS = 2
LABELS = {"local": "local disk", "cold": "bucket, epoch 1 (cold cache)", "warm": "bucket, epoch 2 (warm cache)",
          "capped": "bucket, cache capped at 1/4", "nocache": "bucket, no cache"}


def has_cache_api() -> bool:
    try:
        return all("cache_dir" in inspect.signature(f).parameters for f in (sluice.read_images, sluice.read_parquet))
    except (TypeError, ValueError):
        return False


def start_server(root: Path, args, log: Path) -> tuple[subprocess.Popen, str]:
    return s3_server.start(root, "--delay-ms", str(args.delay_ms), "--stall-fraction", str(args.stall_fraction),
                           "--stall-s", str(args.stall_s), "--seed", str(args.seed), "--log", str(log))


def bucket_root(links: dict[str, Path]) -> Path:
    """The bucket's tree: a folder of links to the datasets."""
    root = DATA / "bucket-bench"
    root.mkdir(exist_ok=True)
    for name, target in links.items():
        link = root / name
        if not link.exists():
            link.symlink_to(target)
    return root


def dataset_bytes(folder: Path) -> int:
    """The sum of the sizes of the objects under `folder` (links followed; dot files left out)."""
    return sum(os.stat(Path(d) / f).st_size for d, _, files in os.walk(folder, followlinks=True)
               for f in files if not f.startswith("."))


def dir_bytes(path: str) -> int:
    """The sum of st_size of every file under `path` but the cache's `lock` and `usage`,
    walked holding the cache's accounting lock (an open-file-description lock on byte 0 of
    `lock`, as the cache takes it): a walk beside the readers could count an object before its
    eviction and the download replacing it after, a sum that never existed."""
    import fcntl
    import struct
    lock_path = os.path.join(path, "lock")
    if not os.path.exists(lock_path):
        return _walk_bytes(path)

    def lk(kind):
        return struct.pack("hhxxxxqqixxxx", kind, os.SEEK_SET, 0, 1, 0)

    with open(lock_path, "a+b") as f:
        fcntl.fcntl(f, fcntl.F_OFD_SETLKW, lk(fcntl.F_WRLCK))
        try:
            return _walk_bytes(path)
        finally:
            fcntl.fcntl(f, fcntl.F_OFD_SETLK, lk(fcntl.F_UNLCK))


def _walk_bytes(path: str) -> int:
    total, stack = 0, [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        elif e.name not in ("lock", "usage"):
                            total += e.stat(follow_symlinks=False).st_size
                    except FileNotFoundError:
                        pass
        except FileNotFoundError:
            pass
    return total


class Sampler(threading.Thread):
    """The largest size of `path` seen, sampled every `every` seconds until stop()."""

    def __init__(self, path: str, every: float = 0.2):
        super().__init__(daemon=True)
        self.path, self.every, self.max, self.samples, self.done = path, every, 0, 0, threading.Event()
        self.cpu = 0.0  # this thread's own CPU seconds: the client's figure leaves them out
        self.start()

    def run(self) -> None:
        t0 = time.thread_time()
        while True:
            self.max, self.samples = max(self.max, dir_bytes(self.path)), self.samples + 1
            self.cpu = time.thread_time() - t0
            if self.done.wait(self.every):
                return

    def stop(self) -> int:
        self.done.set()
        self.join()
        return max(self.max, dir_bytes(self.path))


def one_pass(workload: str, where: str, cache: dict) -> dict:
    """One epoch: units after the first batch, seconds after it, seconds to it, the gaps
    between consecutive batches after it, and its start and end on the monotonic clock (which
    the server's log shares)."""
    m0, c0 = time.monotonic(), process_cpu()
    if workload == "cv":
        ds, field = cv_pipeline(sluice.read_images(where, labels="parent_dir", **cache).shuffle(seed=0)), "label"
    elif workload == "raw":
        ds, field = sluice.read_images(where, labels="parent_dir", **cache).batch(64), "label"
    else:
        ds, field = sluice.read_parquet(where, **cache).batch(1024), "text"
    t0 = time.perf_counter()
    it = iter(ds)
    first_batch = next(it)
    t1 = last = time.perf_counter()
    n, gaps, first = 0, [], len(first_batch[field])
    for batch in it:
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
        n += len(batch[field])
    end = time.perf_counter()
    del it, ds
    return {"units": n, "seconds": end - t1, "first": t1 - t0, "gaps": gaps, "t": (m0, time.monotonic()),
            "cpu_per_unit": (process_cpu() - c0) / max(n + first, 1)}


def process_cpu() -> float:
    """This process's CPU seconds (every thread: the pipeline's and the I/O runtime's)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Case:
    def __init__(self, workload: str, kind: str, where: str, work: Path, size: int):
        self.workload, self.kind, self.where, self.size = workload, kind, where, size
        self.top = work / f"{workload}-{kind}"
        self.dir, self.fresh_count = self.top / "0000", 0
        self.limit = size // 4 if kind == "capped" else None
        self.rounds: list[dict] = []
        self.error: str | None = None

    def cache(self, cache_dir) -> dict:
        """The source's cache arguments; none for local disk (as users read it) or, without
        the cache API, for `nocache`."""
        if self.kind == "local" or (self.kind == "nocache" and not has_cache_api()):
            return {}
        if self.kind == "nocache":
            return {"cache_dir": False}
        kw = {"cache_dir": str(cache_dir)}
        if self.limit is not None:
            kw["cache_limit"] = self.limit
        return kw

    def fresh(self) -> Path:
        """A new empty cache_dir under a name not used before (as on a new node). The last
        one is removed only when the whole run ends: on ext4 without a journal (this project's
        VMs), creating files right after thousands were deleted makes the kernel check each
        candidate inode's deletion time (`recently_deleted`: 15% of the CPU of a cold pass
        here), a cost a new node's first epoch does not pay."""
        self.fresh_count += 1
        self.dir = self.top / f"{self.fresh_count:04d}"
        self.dir.mkdir(parents=True)
        return self.dir

    def warm_up(self) -> None:
        """One untimed pass: page cache, the server's memory, and the warm case's cache_dir."""
        cached = self.kind in ("cold", "warm", "capped")
        one_pass(self.workload, self.where, self.cache(self.fresh() if cached else None))

    def window(self, min_seconds: float, server_pid: int | None) -> dict:
        passes, cache_sizes, sampler = [], [], None
        if self.kind == "capped":
            sampler = Sampler(str(self.fresh()))
        cpu0, w0 = (cpu_seconds(server_pid) if server_pid else 0.0), time.perf_counter()
        while True:
            if self.kind == "cold":
                self.fresh()
            p = one_pass(self.workload, self.where, self.cache(self.dir))
            if self.kind in ("cold", "warm"):
                cache_sizes.append(dir_bytes(str(self.dir)))
            passes.append(p)
            if time.perf_counter() - w0 >= min_seconds:
                break
        wall = time.perf_counter() - w0
        out = {"rate": sum(p["units"] for p in passes) / sum(p["seconds"] for p in passes),
               "first_s": statistics.median(p["first"] for p in passes), "passes": passes,
               "server_cores": (cpu_seconds(server_pid) - cpu0) / wall if server_pid else 0.0}
        if sampler is not None:
            out["cache_max"], out["cache_samples"] = sampler.stop(), sampler.samples
            # The walk is the benchmark's, not the client's: its CPU comes off.
            out["sampler_cpu_s"] = sampler.cpu
            per_unit = sampler.cpu / max(sum(p["units"] for p in passes), 1)
            for p in passes:
                p["cpu_per_unit"] = max(p["cpu_per_unit"] - per_unit, 0.0)
            out["rate_first_pass"] = passes[0]["units"] / passes[0]["seconds"]
            if len(passes) > 1:
                out["rate_later_passes"] = sum(p["units"] for p in passes[1:]) / sum(p["seconds"] for p in passes[1:])
        if cache_sizes:
            out["cache_max"] = max(cache_sizes)
        return out


def pct(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile (NaN when empty)."""
    if not values:
        return math.nan
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def requests_in(log: list[dict], t: tuple[float, float]) -> dict:
    """The server's object GETs that started within a pass (the log's "t" is a request's
    start): how many, stalled, 503s, repeats of an object and range already asked for in the
    pass (hedges, retries), stalled GETs no other GET of the same object and range was sent
    beside while they were held (nothing hedged them), the repeats of objects whose first GET
    was not stalled (hedges the tail did not need), and how long each object whose first GET
    stalled waited until a GET of it that did not stall went out (its hedge, or a third
    request when the hedge stalled too)."""
    gets = sorted((r for r in log if r["method"] == "GET" and r["key"] and t[0] <= r["t"] <= t[1]),
                  key=lambda r: r["t"])
    tries: dict = {}  # an object and range's GETs in the pass, in order
    for r in gets:
        tries.setdefault((r["key"], r["range"]), []).append(r)

    def hedged(r: dict) -> bool:
        end = r["t"] + r["ms"] / 1000
        return any(o is not r and o["t"] < end for o in tries[(r["key"], r["range"])])

    stalled = [r for r in gets if r["stalled"]]
    return {"gets": len(gets), "stalled": len(stalled),
            "errors": sum(r["status"] >= 500 for r in gets),
            "repeats": len(gets) - len(tries),
            "unhedged": sum(not hedged(r) for r in stalled),
            "unstalled_hedged": sum(len(rs) - 1 for rs in tries.values() if not rs[0]["stalled"]),
            "lags_s": [answered[0]["t"] - rs[0]["t"] for rs in tries.values()
                       if rs[0]["stalled"] and (answered := [r for r in rs[1:] if not r["stalled"]])]}


def cpu_line() -> tuple[str, int]:
    """lscpu's model name and CPU count (/proc/cpuinfo's and os.cpu_count() without lscpu)."""
    try:
        info = dict(ln.split(":", 1) for ln in subprocess.run(["lscpu"], capture_output=True, text=True,
                                                               timeout=10).stdout.splitlines() if ":" in ln)
        return info["Model name"].strip(), int(info["CPU(s)"])
    except (OSError, KeyError, ValueError, subprocess.SubprocessError):
        return C.cpu_model(), os.cpu_count() or 0


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-seconds", type=float, default=6.0)
    ap.add_argument("--delay-ms", type=float, default=50.0)
    ap.add_argument("--stall-fraction", type=float, default=0.01)
    ap.add_argument("--stall-s", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=0, help="the server's choice of stalled requests")
    ap.add_argument("--cases", default="cv,parquet",
                    help="workloads: cv, parquet, raw (the photos read as bytes, not decoded: the client's own cost)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="which of " + ", ".join(KINDS))
    ap.add_argument("--work", type=Path, default=DATA / "bucket-work", help="cache folders and the server's log")
    ap.add_argument("--smoke", action="store_true", help="1 round, 1 s windows, a small subset: checks the script")
    args = ap.parse_args()
    if args.smoke:
        args.rounds, args.min_seconds = 1, 1.0
    workloads, kinds = args.cases.split(","), args.kinds.split(",")
    cache_api = has_cache_api()
    if not cache_api:
        dropped = [k for k in kinds if k in ("cold", "warm", "capped")]
        kinds = [k for k in kinds if k not in dropped]
        print(f"this sluice has no cache_dir= on its sources: {', '.join(dropped) or 'nothing'} left out, "
              "nocache reads without the argument", flush=True)

    if args.smoke:  # one class folder, the 4-file corpus
        local = {"cv": DATA / "images" / "class_00", "parquet": parquet_corpus(copies=1)}
        root = bucket_root({"train": DATA / "images", "corpus4": local["parquet"]})
        remote = {"cv": "train/class_00/", "parquet": "corpus4/"}
    else:  # the 2,000 photos; 40 files, 3.5 M rows
        local = {"cv": DATA / "images", "parquet": parquet_corpus(copies=10)}
        root = bucket_root({"train": local["cv"], "corpus40": local["parquet"]})
        remote = {"cv": "train/", "parquet": "corpus40/"}
    local["raw"], remote["raw"] = local["cv"], remote["cv"]  # the same photos, not decoded
    args.work.mkdir(parents=True, exist_ok=True)
    log_path = args.work / "server.jsonl"
    log_path.unlink(missing_ok=True)
    sizes = {w: dataset_bytes(local[w]) for w in workloads}
    cases = [Case(w, k, str(local[w]) if k == "local" else f"s3://{BUCKET}/{remote[w]}", args.work, sizes[w])
             for w in workloads for k in KINDS if k in kinds]

    proc, endpoint = start_server(root, args, log_path)
    try:
        os.environ.update(KEYS)
        sluice.configure_storage(f"s3://{BUCKET}", endpoint=endpoint)
        for case in cases:
            try:
                case.warm_up()
            except Exception as e:  # noqa: BLE001 - reported, the other cases go on
                case.error = f"{type(e).__name__}: {e}"
                print(f"warm-up {case.workload} {case.kind}: {case.error}", flush=True)
        for r in range(args.rounds):
            for case in cases:
                if case.error:
                    continue
                try:
                    res = case.window(args.min_seconds, None if case.kind == "local" else proc.pid)
                except Exception as e:  # noqa: BLE001
                    case.error = f"{type(e).__name__}: {e}"
                    print(f"round {r}: {case.workload} {case.kind}: {case.error}", flush=True)
                    continue
                case.rounds.append(res)
                print(f"round {r}: {case.workload:8s} {case.kind:8s} {res['rate']:10.1f}/s  "
                      f"{len(res['passes'])} passes, first batch {res['first_s'] * 1000:.0f} ms", flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for case in cases:
            shutil.rmtree(case.top, ignore_errors=True)
    log = [json.loads(ln) for ln in log_path.read_text().splitlines()] if log_path.exists() else []

    rows = []
    for case in cases:
        row = {"workload": case.workload, "kind": case.kind, "case": LABELS[case.kind], "where": case.where,
               "unit": "rows/s" if case.workload == "parquet" else "img/s", "dataset_bytes": case.size,
               "cache_limit": case.limit, "error": case.error}
        if case.rounds:
            gaps = [g for res in case.rounds for p in res["passes"] for g in p["gaps"]]
            later = [g for res in case.rounds for p in res["passes"] for g in p["gaps"][START_GAPS:]]
            reqs = [requests_in(log, p["t"]) for res in case.rounds for p in res["passes"]]
            row.update({
                "median": statistics.median(res["rate"] for res in case.rounds),
                "runs": [res["rate"] for res in case.rounds],
                "first_batch_s": statistics.median(res["first_s"] for res in case.rounds),
                "gap_p50_s": pct(gaps, 0.5), "gap_p99_s": pct(gaps, 0.99), "gaps": len(gaps),
                "gap_p99_later_s": pct(later, 0.99),
                "passes": sum(len(res["passes"]) for res in case.rounds),
                "server_cores": statistics.median(res["server_cores"] for res in case.rounds),
                "client_cpu_us": 1e6 * statistics.median(p["cpu_per_unit"] for res in case.rounds
                                                         for p in res["passes"]),
                "requests_per_pass": {k: statistics.mean(q[k] for q in reqs) for k in reqs[0] if k != "lags_s"},
                "stall_hedge_lag_s": sorted(x for q in reqs for x in q["lags_s"]),
                "per_round": [{k: v for k, v in res.items() if k != "passes"} |
                              {"passes": [{k: v for k, v in p.items() if k != "gaps"} for p in res["passes"]]}
                              for res in case.rounds],
            })
            if "cache_max" in case.rounds[0]:
                row["cache_max"] = max(res["cache_max"] for res in case.rounds)
            if case.limit is not None:
                row["over_cap"] = row["cache_max"] > case.limit
                later = [res["rate_later_passes"] for res in case.rounds if "rate_later_passes" in res]
                row["later_passes_median"] = statistics.median(later) if later else None
        rows.append(row)
    base = {r["workload"]: r for r in rows if r["kind"] == "local" and "median" in r}
    for row in rows:
        if "median" in row and row["workload"] in base:
            row["vs_local"] = row["median"] / base[row["workload"]]["median"]
            row["p99_vs_local"] = row["gap_p99_s"] / base[row["workload"]]["gap_p99_s"]
            row["p99_later_vs_local"] = row["gap_p99_later_s"] / base[row["workload"]]["gap_p99_later_s"]

    cpu, ncpu = cpu_line()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(shlex.quote(a) for a in [Path(sys.executable).name, "benchmarks/bucket.py", *sys.argv[1:]])
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    name = "bucket-smoke" if args.smoke else "bucket"
    (out / f"{name}.json").write_text(json.dumps(
        {"time": stamp, "cpu": cpu, "cpus": ncpu, "command": command, "cache_api": cache_api,
         "args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))
    rounds = f"{args.rounds} round{'s' * (args.rounds != 1)}"
    lines = [f"{stamp}, {cpu}, {ncpu} CPUs; `{command}`: {rounds} of ≥ {args.min_seconds:g} s, "
             f"server first byte {args.delay_ms:g} ms, {args.stall_fraction:g} of object GETs stalled "
             f"{args.stall_s:g} s.", "",
             "| workload | read from | throughput | vs local | first batch | batch gap p50 | p99 "
             f"| p99 vs local: every gap; past each pass's first {START_GAPS} "
             "| object GETs / pass (stalled, of them unhedged) | hedges of unstalled GETs / pass; a stalled object's wait for a GET that answered, p50 / p95 / max "
             "| cache max | server's CPU | client CPU per unit |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        if "median" not in row:
            lines.append(f"| {row['workload']} | {row['case']} | failed: {row['error']} |||||||||||")
            continue
        q = row["requests_per_pass"]
        gets = "—" if row["kind"] == "local" else f"{q['gets']:,.0f} ({q['stalled']:.1f}, {q.get('unhedged', 0):.1f})"
        lags = row["stall_hedge_lag_s"]
        hedges = "—" if row["kind"] == "local" else (
            f"{q['unstalled_hedged']:.1f}; "
            + (f"{pct(lags, 0.5) * 1000:,.0f} / {pct(lags, 0.95) * 1000:,.0f} / {lags[-1] * 1000:,.0f} ms" if lags else "—"))
        cache = "—"
        if "cache_max" in row:
            cache = mb(row["cache_max"])
            if row["cache_limit"] is not None:
                cache += f" / {mb(row['cache_limit'])} cap{' (over)' if row['over_cap'] else ''}"
        lines.append(f"| {row['workload']} | {row['case']} | {row['median']:,.0f} {row['unit']} "
                     f"| {row.get('vs_local', math.nan):.2f}× | {row['first_batch_s'] * 1000:,.0f} ms "
                     f"| {row['gap_p50_s'] * 1000:,.1f} ms | {row['gap_p99_s'] * 1000:,.1f} ms "
                     f"| {row.get('p99_vs_local', math.nan):.2f}×; {row.get('p99_later_vs_local', math.nan):.2f}× "
                     f"| {gets} | {hedges} | {cache} "
                     f"| {row['server_cores']:.2f} cores | {row['client_cpu_us']:,.{1 if row['client_cpu_us'] >= 10 else 3}f} µs |")
    if not cache_api:
        lines += ["", "This sluice build has no `cache_dir=`: the cached cases were not run."]
    md = "\n".join(lines)
    (out / f"{name}.md").write_text(md + "\n")
    print(f"\n{md}")


if __name__ == "__main__":
    main()
