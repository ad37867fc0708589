"""Convert once (issue 38, item 4): --n small generated JPEGs in 1,000 class folders (an
ImageNet-shaped tree of files) converted into shards for fast reading, by

    sluice   sluice.read_images(root).map(...).write_shards(out, shard_size="256MB")
             (tar shards with member indexes; the pipeline on the machine's threads)
    litdata  litdata.optimize(fn=read the file, inputs=paths, chunk_bytes="256MB",
             num_workers=<cores>) — LitData's converter, where it installs

Both keep each JPEG's bytes as they are (no re-encode) with its int label. The files are
generated once under --work (~4.5 KB each: 96×96 gradients with noise, the sample number after
the JPEG's end so every file differs) and are in the page cache for both (written just before;
sluice runs first). Reported per system: wall seconds, files per second, files per second per
core (over the machine's cores) and per CPU-second used; then the output is read back whole
(sample count checked).

    .venv/bin/python benchmarks/convert.py [--n 1280000] [--peers litdata] [--smoke]

LitData is imported from --litdata-path when given (`pip install --no-deps --target DIR litdata
lightning-utilities`: it needs torch, which the project venv has). Writes
benchmarks/results/convert.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import resource
import shlex
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE))
import checkout  # noqa: E402

checkout.use()

import sluice  # noqa: E402
from peers import common as C  # noqa: E402

CLASSES = 1000


def _bases(k: int = 64) -> list[bytes]:
    """k distinct small JPEGs."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    out = []
    y, x = np.mgrid[0:96, 0:96]
    for i in range(k):
        img = np.stack([(x * (i + 1)) % 256, (y * (i + 3)) % 256, (x + y + 7 * i) % 256], -1).astype(np.float32)
        img += rng.normal(0, 8, img.shape)
        buf = io.BytesIO()
        Image.fromarray(img.clip(0, 255).astype(np.uint8)).save(buf, format="JPEG", quality=85)
        out.append(buf.getvalue())
    return out


def _write_range(args: tuple[str, int, int]) -> int:
    root, lo, hi = args
    bases = _bases()
    for i in range(lo, hi):
        d = Path(root) / f"c{i % CLASSES:04d}"
        with open(d / f"{i:08d}.jpg", "wb") as f:
            f.write(bases[i % len(bases)] + i.to_bytes(4, "little"))
    return hi - lo


def generate(root: Path, n: int) -> Path:
    """n files under root (made once per n)."""
    done = root / f".done-{n}"
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    for c in range(CLASSES):
        (root / f"c{c:04d}").mkdir(parents=True, exist_ok=True)
    step = 20_000
    with ProcessPoolExecutor(os.cpu_count()) as pool:
        list(pool.map(_write_range, [(str(root), lo, min(lo + step, n)) for lo in range(0, n, step)]))
    done.touch()
    return root


def _cpu() -> float:
    r, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + c.ru_utime + c.ru_stime


def run_sluice(root: Path, out: Path, n: int, fmt: str = "webdataset") -> dict:
    shutil.rmtree(out, ignore_errors=True)
    t0, c0 = time.perf_counter(), _cpu()
    ds = (sluice.read_images(str(root))
          .map(sluice.ops.rename("bytes", "jpg"))
          .map(sluice.ops.rename("label", "cls"))
          .map(sluice.ops.select(["jpg", "cls"])))
    files = ds.write_shards(str(out), format=fmt, shard_size="256MB")
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    back = sluice.read_webdataset(str(out), index=True) if fmt == "webdataset" else sluice.read_parquet(str(out))
    assert len(back) == n, (len(back), n)
    t1 = time.perf_counter()
    count = sum(len(b["jpg"]) for b in back.batch(1024))
    assert count == n
    return {"wall_s": wall, "cpu_s": cpu, "shards": len(files), "bytes": _size(out),
            "read_back_s": time.perf_counter() - t1}


def _litdata_fn(path: str):
    with open(path, "rb") as f:
        data = f.read()
    return {"jpg": data, "cls": int(Path(path).parent.name[1:])}


def run_litdata(root: Path, out: Path, n: int) -> dict:
    from litdata import StreamingDataset, optimize

    shutil.rmtree(out, ignore_errors=True)
    paths = sorted(str(p) for p in root.glob("c*/*.jpg"))
    t0, c0 = time.perf_counter(), _cpu()
    optimize(fn=_litdata_fn, inputs=paths, output_dir=str(out), chunk_bytes="256MB", num_workers=os.cpu_count())
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    t1 = time.perf_counter()
    ds = StreamingDataset(str(out))
    assert len(ds) == n, (len(ds), n)
    count = sum(1 for _ in ds)
    assert count == n
    return {"wall_s": wall, "cpu_s": cpu, "shards": len(list(out.glob("*.bin"))), "bytes": _size(out),
            "read_back_s": time.perf_counter() - t1, "version": __import__("litdata").__version__}


def _size(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_280_000)
    ap.add_argument("--peers", default="litdata")
    ap.add_argument("--formats", default="webdataset", help="sluice's formats: webdataset,parquet")
    ap.add_argument("--litdata-path", default=str(Path.home() / ".cache" / "litdata-pkgs"))
    ap.add_argument("--work", type=Path, default=Path.home() / ".cache" / "sluice-bench" / "convert-work")
    ap.add_argument("--keep", action="store_true", help="keep the generated files and outputs")
    ap.add_argument("--smoke", action="store_true", help="20,000 files")
    args = ap.parse_args()
    if args.smoke:
        args.n = 20_000
    if args.litdata_path and Path(args.litdata_path).exists():
        sys.path.append(args.litdata_path)
    t0 = time.perf_counter()
    made = not (args.work / "raw" / f".done-{args.n}").exists()
    root = generate(args.work / "raw", args.n)
    gen_s = time.perf_counter() - t0 if made else None
    results = {}
    for fmt in args.formats.split(","):
        name = "sluice" if fmt == "webdataset" else f"sluice ({fmt})"
        results[name] = run_sluice(root, args.work / "out-sluice", args.n, fmt)
        print(name, results[name], flush=True)
    if "litdata" in args.peers.split(","):
        try:
            results["litdata"] = run_litdata(root, args.work / "out-litdata", args.n)
        except ImportError as e:
            results["litdata"] = {"error": f"not installed: {e}"}
        print("litdata", results["litdata"], flush=True)
    if not args.keep:
        for d in ("out-sluice", "out-litdata"):
            shutil.rmtree(args.work / d, ignore_errors=True)
    write(args, results, gen_s)


def write(args, results: dict, gen_s: float | None) -> None:
    cores = os.cpu_count() or 1
    rows = []
    for name, r in results.items():
        if "error" in r:
            rows.append(f"| {name} | {r['error']} | | | | | |")
            continue
        rate = args.n / r["wall_s"]
        rows.append(f"| {name}{' ' + r['version'] if 'version' in r else ''} | {r['wall_s']:.1f} | {rate:,.0f} | "
                    f"{rate / cores:,.0f} | {args.n / r['cpu_s']:,.0f} | {r['shards']} | {r['bytes'] / 2**30:.2f} |")
    cmd = "python benchmarks/convert.py " + shlex.join(sys.argv[1:])
    md = "\n".join([
        f"Convert once ({datetime.date.today()}, {C.cpu_model()}, {cores} cores): {args.n:,} generated JPEGs "
        f"(~4.5 KB, 1,000 class folders; {f'generated in {gen_s:.0f} s' if gen_s is not None else 'generated earlier'}, "
        "in the page cache) into ~256 MB shards.",
        "",
        "| system | wall (s) | files/s | files/s per core | files per CPU-second | shards | output (GiB) |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        f"Command: `{cmd}`",
    ])
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    stem = "convert-smoke" if args.smoke else "convert"
    (out / f"{stem}.json").write_text(json.dumps({"n": args.n, "results": results, "cpu": C.cpu_model()}, indent=1))
    (out / f"{stem}.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
