"""decode + random_resized_crop fused (DCT-scaled decode of the crop) vs unfused.

Runs ``read_images → decode → random_resized_crop(SIZE) → batch`` with op fusion on (the
default) and off (``fuse_ops=False``), interleaved, and reports the median images/s of each
and their ratio; then compares the two runs' outputs crop by crop (same seed, so the same
crop boxes): how many crops took a DCT-scaled decode (they differ from the unfused bytes)
and their PSNR against the full decode + resize (min / mean / 1st percentile).

The fusion only pays when crops shrink a lot: a 1/d decode (d = 2, 4, 8) is used when the
crop is at least 1.5·d times the output, i.e. ≥ 3x. The CV benchmark's photos (short side
256–512) at 224 px practically never qualify (the fused run then equals the unfused one);
multi-megapixel photos do. ``--sizes`` runs several output sizes to show where it pays.

    PYTHONPATH=python .venv/bin/python benchmarks/dct_fusion.py [--data DIR] [--limit 200]
        [--sizes 224,112] [--repeats 5] [--threads 2] [--epochs 1] [--json out.json]

DIR defaults to ~/.cache/sluice-bench/images (``benchmarks/datasets/build.py``) if present,
else the committed fixture photos (examples/fixtures/images, 8 small photos: a smoke test).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import sluice
import sluice.image as I

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "examples" / "fixtures" / "images"


def default_data() -> Path:
    env = os.environ.get("SLUICE_BENCH_DATA")
    bench = (Path(env) if env else Path.home() / ".cache" / "sluice-bench") / "images"
    return bench if bench.is_dir() else FIXTURES


def jpegs(data: Path, limit: int | None) -> list[str]:
    files = sorted(str(p) for p in data.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg"))
    if not files:
        sys.exit(f"no JPEGs under {data}")
    return files[:limit] if limit else files


def pipeline(files: list[str], size: int, epochs: int, batch: int) -> sluice.Dataset:
    return (
        sluice.read_images(files, labels=None)
        .repeat(epochs)
        .map(I.decode())
        .map(I.random_resized_crop(size))
        .map(sluice.ops.select(["image"]))
        .batch(batch)
    )


def timed(ds: sluice.Dataset, fuse: bool, threads: int) -> float:
    """Images per second of one full pass."""
    n = 0
    t0 = time.perf_counter()
    for b in ds.iter(seed=0, num_threads=threads, progress=False, fuse_ops=fuse):
        n += len(b["image"])
    return n / (time.perf_counter() - t0)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse))


def quality(ds: sluice.Dataset, threads: int) -> dict:
    fused = ds.iter(seed=0, epoch=0, num_threads=threads, progress=False)
    plain = ds.iter(seed=0, epoch=0, num_threads=threads, progress=False, fuse_ops=False)
    values, total = [], 0
    for a, b in zip(fused, plain):
        for x, y in zip(a["image"], b["image"]):
            total += 1
            if not np.array_equal(x, y):
                values.append(psnr(x, y))
    out = {"crops": total, "scaled": len(values)}
    if values:
        out.update(psnr_min=min(values), psnr_mean=statistics.fmean(values),
                   psnr_p1=float(np.percentile(values, 1)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=None, help="folder of JPEGs (searched recursively)")
    ap.add_argument("--limit", type=int, default=None, help="use the first N files")
    ap.add_argument("--sizes", default="224", help="output sizes, comma-separated")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    data = args.data or default_data()
    files = jpegs(data, args.limit)
    print(f"{len(files)} JPEGs from {data}; {args.threads} threads; load average "
          f"{os.getloadavg()[0]:.2f}; sluice from {Path(sluice.__file__).parent}")
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        ds = pipeline(files, size, args.epochs, args.batch)
        stage = [line for line in ds.explain().splitlines() if "read+" in line]
        q = quality(ds, args.threads)
        timed(ds, True, args.threads)  # warm the page cache
        on, off = [], []
        for _ in range(args.repeats):
            on.append(timed(ds, True, args.threads))
            off.append(timed(ds, False, args.threads))
        r = {"size": size, "fused_img_s": statistics.median(on), "unfused_img_s": statistics.median(off),
             "stage": stage[0].strip() if stage else "", **q}
        r["ratio"] = r["fused_img_s"] / r["unfused_img_s"]
        results.append(r)
        p = (f"PSNR min {r['psnr_min']:.1f} / p1 {r['psnr_p1']:.1f} / mean {r['psnr_mean']:.1f} dB"
             if q["scaled"] else "no crop scaled")
        print(f"size {size}: fused {r['fused_img_s']:.0f} img/s, unfused {r['unfused_img_s']:.0f} img/s "
              f"(×{r['ratio']:.2f}); {q['scaled']}/{q['crops']} crops DCT-scaled; {p}")
    if args.json:
        args.json.write_text(json.dumps({"data": str(data), "files": len(files), "threads": args.threads,
                                         "load_average": os.getloadavg()[0], "results": results}, indent=2))


if __name__ == "__main__":
    main()
