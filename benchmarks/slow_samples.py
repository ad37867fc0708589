"""Slow samples stall nothing (issue 39, item 3): throughput of an ordered parallel stage when
a fraction of the samples is many times slower than the rest, against what the same work
allows with no ordering at all.

Two cases, each run in a fresh process (its VmHWM is the memory the window cost):

* ``python``: ``range(n).map(f)`` where ``f`` sleeps 1 ms, or ``slow`` ms for a fixed
  ``frac`` of the indices (a hash of the index picks them, so every run slows the same
  samples). ``f`` releases the GIL while it sleeps, so 16 threads run on 2 cores. The ideal
  is the sum of the sleeps ``f`` measured, divided by the threads: what 16 workers taking any
  sample in any order would need.
* ``builtin``: ``read_images → decode → resize(224) → center_crop`` over JPEGs where ``frac``
  of the images have ``slow``× the pixels of the rest, on as many threads as the machine has
  cores (``--builtin-threads``).
  The ideal is what the same images cost in runs with no tail: the seconds per image of a
  run over only small images and of a run over only big ones (same pipeline, same threads),
  times how many of each the mixed set holds — measured again in each round, next to the
  mixed run, and the median round kept (``ratios`` in the JSON lists them all).

Output order is input order in both (a test asserts it); only how far ahead the workers may
run changes. The table gives the ratio, the window the stage grew to (chunks) and the peak
resident memory.

    PYTHONPATH=$PWD/python .venv/bin/python benchmarks/slow_samples.py \
        [--threads 4,8,16] [--fracs 0.01,0.05,0.10] [--slow 5,10,50] [--seconds 5]

Writes benchmarks/results/slow_samples.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from peers import common as C  # noqa: E402

PYTHON_CASE = r"""
import json, sys, threading, time
import sluice
threads, frac, slow, n = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
work = [0.0]
lock = threading.Lock()
def is_slow(i):
    return ((i * 2654435761) % 2**32) / 2**32 < frac
def f(s):
    t = time.perf_counter()
    time.sleep(0.001 * (slow if is_slow(int(s["id"])) else 1.0))
    d = time.perf_counter() - t
    with lock:
        work[0] += d
    return s
it = sluice.range(n).map(f).batch(32).iter(num_threads=threads)
t0 = time.perf_counter()
ids = [int(x) for b in it for x in b["id"]]
wall = time.perf_counter() - t0
assert ids == list(range(n)), "order changed"
st = it.stats().to_dict()["stages"]
hwm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"wall": wall, "ideal": work[0] / threads, "window": st[2]["queue_capacity"],
                  "peak": hwm}))
"""

BUILTIN_CASE = r"""
import json, sys, time
import sluice, sluice.image as img
root, threads = sys.argv[1], int(sys.argv[2])
ds = (sluice.read_images(root, labels=None).map(img.decode()).map(img.resize(224))
      .map(img.center_crop(224)).batch(16))
it = ds.iter(num_threads=threads)
t0 = time.perf_counter()
n = sum(len(b["image"]) for b in it)
wall = time.perf_counter() - t0
rep = it.stats().to_dict()
stage = max(rep["stages"][1:], key=lambda s: s["busy_s"])
hwm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"wall": wall, "ideal": stage["busy_s"] / threads, "n": n,
                  "window": stage["queue_capacity"], "peak": hwm}))
"""


def is_slow(i: int, frac: float) -> bool:
    return ((i * 2654435761) % 2**32) / 2**32 < frac


def make_images(root: Path, n: int, frac: float, slow: float) -> Path:
    """n JPEGs, 256² or `slow`× the pixels for the chosen fraction (made once)."""
    d = root / f"n{n}-f{frac}-x{slow:g}"
    if (d / ".done").exists():
        return d
    import io

    import numpy as np
    from PIL import Image

    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    blobs = {}
    for side in (256, int(256 * slow**0.5)):
        # Smooth noise compresses and decodes like a photo, not like static.
        small = rng.integers(0, 255, (side // 8, side // 8, 3), dtype=np.uint8)
        im = Image.fromarray(small).resize((side, side), Image.BILINEAR)
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=90)
        blobs[side] = buf.getvalue()
    big = int(256 * slow**0.5)
    for i in range(n):
        (d / f"{i:06d}.jpg").write_bytes(blobs[big if is_slow(i, frac) else 256])
    (d / ".done").touch()
    return d


def run(code: str, *args: object, fixed: bool = False) -> dict:
    env = {**os.environ, "SLUICE_TAIL_WINDOW": "0"} if fixed else None
    out = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True,
                         text=True, timeout=600, check=False, env=env)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="python,builtin")
    ap.add_argument("--threads", default="4,8,16")
    ap.add_argument("--fracs", default="0.01,0.05,0.10")
    ap.add_argument("--slow", default="5,10,50")
    ap.add_argument("--builtin", default="0.05:10,0.01:50,0.10:10",
                    help="frac:slowness pairs for the built-in op case")
    ap.add_argument("--builtin-threads", type=int, default=os.cpu_count() or 2,
                    help="threads of the built-in op case (default: the machine's cores)")
    ap.add_argument("--seconds", type=float, default=5.0, help="ideal run length per case")
    ap.add_argument("--rounds", type=int, default=3,
                    help="built-in case: rounds (each with its own uniform runs); the median")
    ap.add_argument("--compare", action="store_true",
                    help="also run each case with the window fixed at its planned depth "
                    "(SLUICE_TAIL_WINDOW=0: how it ran before the window grew)")
    ap.add_argument("--data", default=str(Path.home() / ".cache/sluice-bench/slow-samples"))
    args = ap.parse_args()
    rows = []
    cases = args.cases.split(",")
    if "python" in cases:
        for t in map(int, args.threads.split(",")):
            for frac in map(float, args.fracs.split(",")):
                for slow in map(float, args.slow.split(",")):
                    mean_s = 0.001 * (1 - frac + frac * slow) * 1.08  # sleep overshoots ~8 %
                    n = int(args.seconds * t / mean_s)
                    for fixed in (False, True) if args.compare else (False,):
                        r = run(PYTHON_CASE, t, frac, slow, n, fixed=fixed)
                        rows.append({"case": "python", "threads": t, "frac": frac,
                                     "slow": slow, "n": n, "fixed": fixed, **r,
                                     "ratio": r["ideal"] / r["wall"]})
                        print(json.dumps(rows[-1]), flush=True)
    if "builtin" in cases:
        data, threads = Path(args.data), args.builtin_threads

        def per_image(slow: float, fixed: bool) -> float:
            """Seconds per image with no tail: a set of only small or only big images."""
            n = int(args.seconds * threads / (0.0005 * slow))
            r = run(BUILTIN_CASE, make_images(data, n, 1.0 if slow > 1 else 0.0, slow),
                    threads, fixed=fixed)
            return r["wall"] / r["n"]

        for pair in args.builtin.split(","):
            frac, slow = map(float, pair.split(":"))
            # ~0.5 ms per small image on one core; the slow ones cost `slow`× that.
            n = int(args.seconds * threads / (0.0005 * (1 - frac + frac * slow)))
            root = make_images(data, n, frac, slow)
            n_slow = sum(is_slow(i, frac) for i in range(n))
            # This machine's load drifts: each round measures the uniform sets next to the
            # mixed one, and the medians of the rounds are kept.
            for fixed in (False, True) if args.compare else (False,):
                got = []
                for _ in range(args.rounds):
                    small, big = per_image(1.0, fixed), per_image(slow, fixed)
                    r = run(BUILTIN_CASE, root, threads, fixed=fixed)
                    ideal = (n - n_slow) * small + n_slow * big
                    got.append({**r, "ideal": ideal, "ratio": ideal / r["wall"]})
                got.sort(key=lambda g: g["ratio"])
                mid = got[len(got) // 2]
                rows.append({"case": "builtin", "threads": threads, "frac": frac, "slow": slow,
                             "fixed": fixed, **mid, "ratios": [g["ratio"] for g in got]})
                print(json.dumps(rows[-1]), flush=True)
    lines = [
        f"CPU: {C.cpu_model()}; {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC",
        "",
        "| case | window | threads | slow share | slowness | samples | wall s | ideal s | ratio | window (chunks) | peak RSS MB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        how = "fixed" if r["fixed"] else "grows"
        lines.append(
            f"| {r['case']} | {how} | {r['threads']} | {r['frac']:.0%} | {r['slow']:g}× | {r['n']} "
            f"| {r['wall']:.2f} | {r['ideal']:.2f} | {r['ratio']:.3f} | {r['window']} "
            f"| {r['peak'] / 1e6:.0f} |")
    text = "\n".join(lines)
    print(text)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "slow_samples.md").write_text(text + "\n")
    (out / "slow_samples.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
