"""One job on the shared service, epoch by epoch: the CPU seconds and minor page faults of the
job's driver (this process) and of each service worker.

A local Ray with 3 CPUs, a service of 2 one-CPU workers (no prefix cache), and the CV job of
``service_harness.pipeline`` over 2,000 images (float32 replies, chunks of ``--chunk``, 16 by default). Each epoch's
CPU is read from ``getrusage`` (the driver) and ``/proc/PID/stat`` (the workers), so it
counts every thread of each process; the first epoch includes the workers' warm-up.

    PYTHONPATH=$PWD/python .venv/bin/python benchmarks/service_epochs.py [--epochs 5]

Run it with two builds' ``python/`` folders on ``PYTHONPATH`` to compare them (what
docs/BENCHMARKS.md's "Huge pages" section did).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def proc(pid: int) -> tuple[int, float]:
    """(minor faults, user+system CPU seconds) of a process."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(f[7]), (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def me() -> tuple[int, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_minflt, r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--kind", default="cv", choices=["cv", "cv-u8"])
    ap.add_argument("--chunk", type=int, default=16, help="images per chunk (one service call each)")
    args = ap.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    import service_harness as bench
    import sluice
    from sluice import service as svc

    ray.init(num_cpus=3, log_to_driver=False, include_dashboard=False, object_store_memory=500_000_000)
    svc.serve("epochs", min_workers=2, max_workers=2, worker_cpus=1.0, cache_bytes=0)
    ctx = sluice.Context(service="epochs", in_flight_per_actor=2)
    ds = bench.pipeline(args.kind, args.images)
    pids = [json.loads(ray.get(h.report.remote()))["pid"] for h in bench.worker_handles("epochs")]
    rows = []
    try:
        for epoch in range(args.epochs):
            d0, w0, t0, n = me(), [proc(p) for p in pids], time.time(), 0
            for b in ds.iter(seed=1, epoch=epoch, chunk_size=args.chunk, context=ctx):
                n += len(b["label"])
            d1, w1 = me(), [proc(p) for p in pids]
            row = {"epoch": epoch, "samples": n, "wall_s": round(time.time() - t0, 2),
                   "driver_cpu_s": round(d1[1] - d0[1], 2), "driver_faults": d1[0] - d0[0],
                   "workers_cpu_s": round(sum(b[1] - a[1] for a, b in zip(w0, w1)), 2),
                   "workers_faults": sum(b[0] - a[0] for a, b in zip(w0, w1))}
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        ctx.close()
        svc.stop("epochs")
        ray.shutdown()
    later = rows[1:]
    if later:
        print(f"{sluice.__file__}: epoch 0 driver {rows[0]['driver_cpu_s']} s, workers {rows[0]['workers_cpu_s']} s; "
              f"later epochs (mean) driver {sum(r['driver_cpu_s'] for r in later) / len(later):.2f} s, "
              f"workers {sum(r['workers_cpu_s'] for r in later) / len(later):.2f} s")


if __name__ == "__main__":
    main()
