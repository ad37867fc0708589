"""Per-sample overhead of running sluice's element-wise stages on Ray actors vs local threads,
hybrid (local + remote) throughput, and the cost model's predicted scaling for N remote nodes.

    .venv/bin/python benchmarks/ray_overhead.py [--images DIR] [--reps 3] [--out FILE]

Workloads (same worker count, 2, on both sides):
- ``noop``: ``range`` + a built-in ``select`` op — the pure per-chunk cost of a Ray round trip
  (task submission, object store put/get, frame encode/decode).
- ``cv``: SimCLR-style augmentations on the benchmark JPEGs (``~/.cache/sluice-bench/images``
  from ``make bench-setup``, else the fixture images): read, decode, random_resized_crop(224),
  flip, color_jitter, normalize, batch(32).

Runs are interleaved (local, ray, hybrid, local, ...) and medians reported, because this
machine is noisy. On 2 cores the actors compete with the consumer for the same CPUs, so the
Ray rate here is a lower bound; the model below extrapolates from the measured terms.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import tempfile
import time

import sluice
from sluice import image

ROOT = pathlib.Path(__file__).resolve().parents[1]


def cv(images: str):
    return (
        sluice.read_images(images)
        .shuffle()
        .map(image.decode())
        .map(image.random_resized_crop(224))
        .map(image.horizontal_flip(0.5))
        .map(image.color_jitter(0.4, 0.4, 0.4, 0.1, p=0.8))
        .map(image.normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]))
        .map(sluice.ops.select(["image", "label"]))
        .batch(32)
    )


def noop(n: int):
    return sluice.range(n).map(sluice.ops.select(["id"])).batch(256)


def run(ds, ctx, chunk: int) -> tuple[float, int, int, float]:
    """Steady-state seconds and samples (after the first batch, so actor start-up is not
    counted), output bytes, and the time to the first batch."""
    t = time.perf_counter()
    n = nbytes = 0
    t1 = None
    for b in ds.iter(seed=0, num_threads=2, chunk_size=chunk, context=ctx, progress=False):
        if t1 is None:
            t1 = time.perf_counter()
            continue
        n += len(next(iter(b.values())))
        nbytes += sum(getattr(v, "nbytes", 0) for v in b.values())
    return time.perf_counter() - t1, n, nbytes, t1 - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench = pathlib.Path.home() / ".cache/sluice-bench/images"
    ap.add_argument("--images", default=str(bench if bench.exists() else ROOT / "examples/fixtures/images"))
    ap.add_argument("--limit", type=int, default=600, help="images per pass (0: all)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import ray

    tmp = tempfile.mkdtemp(prefix="srb", dir="/tmp")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200_000_000, _temp_dir=tmp, log_to_driver=False)
    files = sorted(str(p) for p in pathlib.Path(args.images).rglob("*") if p.suffix.lower() in {".jpg", ".jpeg", ".png"})
    if args.limit:
        files = files[: args.limit]
    workloads = {"noop": (noop(200_000), 1024), "cv": (cv(files), 16)}
    placements = {
        "local": None,
        "ray(2 actors)": sluice.Context("auto", num_actors=2, actor_cpus=0),
        "hybrid(1 local+1 actor)": sluice.Context("auto", num_actors=1, local_workers=1, actor_cpus=0),
    }
    results: dict = {}
    for wname, (ds, chunk) in workloads.items():
        runs: dict[str, list] = {p: [] for p in placements}
        run(ds, placements["ray(2 actors)"], chunk)  # warm-up: actor start, page cache
        for _ in range(args.reps):
            for pname, ctx in placements.items():
                runs[pname].append(run(ds, ctx, chunk))
        res = {}
        for pname, rs in runs.items():
            secs = statistics.median(r[0] for r in rs)
            n, nbytes = rs[0][1], rs[0][2]
            first = statistics.median(r[3] for r in rs)
            res[pname] = {"seconds": secs, "samples": n, "rate": n / secs, "first_batch_s": first,
                          "out_bytes_per_sample": nbytes / max(n, 1)}
        local, remote = res["local"], res["ray(2 actors)"]
        chunks = local["samples"] / chunk
        res["overhead_us_per_sample"] = (remote["seconds"] - local["seconds"]) / local["samples"] * 1e6
        res["overhead_ms_per_chunk"] = (remote["seconds"] - local["seconds"]) / chunks * 1e3
        res["chunk_size"] = chunk
        results[wname] = res
        print(f"\n{wname} ({local['samples']} samples, chunk {chunk}, medians of {args.reps}):")
        for pname in placements:
            print(f"  {pname:26s} {res[pname]['rate']:10.1f} samples/s   first batch {res[pname]['first_batch_s']:.2f} s")
        print(f"  Ray overhead: {res['overhead_us_per_sample']:.1f} us/sample, {res['overhead_ms_per_chunk']:.2f} ms/chunk")

    # Cost model (docs/RAY.md): remote rate = N*R / (c + o/k), capped by the link.
    cvr = results["cv"]
    c = 2 / cvr["local"]["rate"]  # CPU seconds per sample (2 busy threads locally)
    o = max(results["noop"]["overhead_ms_per_chunk"], 0.0) / 1e3
    k = 64  # a cluster run's chunk size
    b_out = cvr["local"]["out_bytes_per_sample"]
    link = 10e9 / 8 / max(b_out, 1)
    print(f"\ncost model: c={c * 1e3:.2f} ms/sample, o={o * 1e3:.2f} ms/chunk, k={k}, b_out={b_out / 1e3:.0f} KB, 10 Gb/s link cap {link:.0f}/s")
    pred = {}
    for nodes in (1, 2, 4, 8, 16):
        compute = nodes * 32 / (c + o / k)
        rate = min(compute, link)
        pred[nodes] = {"compute": compute, "predicted": rate}
        print(f"  N={nodes:2d} x 32-core nodes: compute {compute:9.0f}/s, predicted {rate:9.0f} samples/s")
    results["model"] = {"c_s": c, "o_s": o, "k": k, "b_out": b_out, "link_cap": link, "predicted": pred}
    ray.shutdown()
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(results, indent=2))
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
