"""Scale: listing ImageNet-sized folders, and a 1 TB virtual dataset's state and memory.

    .venv/bin/python benchmarks/scale.py [--files 1281167] [--classes 1000] [--rounds 3]
        [--dir /tmp/sluice-scale] [--tb-samples 3000]

Listing: `--files` empty files in `--classes` class folders (ImageNet's train split has
1,281,167 images in 1,000 folders; made once and kept in `--dir`). Each case runs in a fresh
process (so its peak RSS is its own), interleaved over `--rounds`, medians:
- bare listing: `os.scandir` of every class folder, paths sorted — the floor;
- sluice: `read_images(dir, labels="parent_dir").shuffle(seed=0)` to its first sample;
- torchvision `ImageFolder(dir)` (when torchvision is installed) to its first sample.

1 TB: `range(2**20)` samples of 1 MiB of synthetic bytes each (a map makes them), shuffled
and sharded to rank 3 of 8; `--tb-samples` are iterated with the RSS sampled as they go, and
the state is saved deep into the epoch and resumed: its size in bytes, whether the resumed
run continues exactly, and RSS at the start and the end of the run.
Writes benchmarks/results/scale.{json,md}.
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

from peers import common as C  # noqa: E402

CASES = {
    "bare": """
import os
t0 = time.perf_counter()
paths = []
for d in sorted(os.scandir(ROOT), key=lambda e: e.name):
    if d.is_dir():
        paths.extend(e.path for e in os.scandir(d.path) if e.is_file())
paths.sort()
first = paths[0]
""",
    "sluice": """
import sluice
t0 = time.perf_counter()
ds = sluice.read_images(ROOT, labels="parent_dir").shuffle(seed=0)
first = next(iter(ds))["path"]
""",
    "torchvision": """
from torchvision.datasets import ImageFolder
t0 = time.perf_counter()
ds = ImageFolder(ROOT, loader=lambda p: open(p, "rb").read(), is_valid_file=lambda p: p.endswith(".JPEG"))
first = ds[0]
""",
}


def make_files(root: Path, files: int, classes: int) -> None:
    done = root / f".done-{files}-{classes}"
    if done.exists():
        return
    print(f"making {files:,} files in {classes} folders under {root} ...", flush=True)
    for c in range(classes):
        d = root / f"n{c:08d}"
        d.mkdir(parents=True, exist_ok=True)
        for i in range(c, files, classes):
            (d / f"n{c:08d}_{i}.JPEG").touch()
    done.touch()


def run_case(name: str, root: Path) -> dict:
    code = ("import sys, time, resource\nsys.path.insert(0, %r)\nimport checkout\ncheckout.use()\nROOT = %r\n"
            % (str(HERE), str(root))
            + CASES[name]
            + "\nt1 = time.perf_counter()\nimport json\n"
              "print(json.dumps({'seconds': t1 - t0, "
              "'rss_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def terabyte(samples: int) -> dict:
    import checkout
    checkout.use()
    import numpy as np

    import sluice

    size = 1 << 20
    n = 1 << 20  # 2**20 samples × 1 MiB = 1 TiB

    def synth(s):
        return {"id": s["id"], "bytes": np.full(size, s["id"] % 251, dtype=np.uint8)}

    ds = sluice.range(n).shuffle(seed=7).shard(3, 8).map(synth)
    it = ds.iter(seed=0)
    rss, ids = [], []
    t0 = time.perf_counter()
    for k, s in enumerate(it):
        ids.append(int(s["id"]))
        if k % max(1, samples // 20) == 0:
            rss.append(rss_mib())
        if k + 1 == samples // 2:
            state = it.state_dict()
        if k + 1 == samples:
            break
    seconds = time.perf_counter() - t0
    it.close()
    text = json.dumps(state)
    again = ds.iter(seed=0)
    again.load_state_dict(json.loads(text))
    resumed = [int(next(again)["id"]) for _ in range(samples - samples // 2)]
    again.close()
    return {"virtual_bytes": n * size, "samples": samples, "seconds": seconds,
            "state_bytes": len(text.encode()), "resumed_exactly": resumed == ids[samples // 2:],
            "rss_first_mib": rss[1] if len(rss) > 1 else rss[0], "rss_last_mib": rss[-1],
            "rss_max_mib": max(rss)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=1_281_167)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default="/tmp/sluice-scale")
    ap.add_argument("--tb-samples", type=int, default=3000)
    ap.add_argument("--cases", default="bare,sluice,torchvision")
    args = ap.parse_args()
    root = Path(args.dir)
    make_files(root, args.files, args.classes)
    cases = args.cases.split(",")
    results: dict = {c: [] for c in cases}
    for r in range(args.rounds):
        for c in cases:
            res = run_case(c, root)
            results[c].append(res)
            print(f"round {r}: {c:12s} {res}", flush=True)
    tb = terabyte(args.tb_samples)
    print(tb, flush=True)

    cpu = C.cpu_model()
    lines = [f"Listing {args.files:,} files in {args.classes:,} folders ({cpu}, {os.cpu_count()} cores; "
             f"medians of {args.rounds} fresh processes):", "",
             "| case | seconds to first sample | × bare listing | peak RSS (MiB) |", "|---|---:|---:|---:|"]
    ok = {c: [x for x in results[c] if "seconds" in x] for c in cases}
    bare = statistics.median(x["seconds"] for x in ok["bare"]) if ok.get("bare") else None
    for c in cases:
        if not ok[c]:
            lines.append(f"| {c} | failed: {results[c][-1].get('error')} | | |")
            continue
        sec = statistics.median(x["seconds"] for x in ok[c])
        rss = statistics.median(x["rss_mib"] for x in ok[c])
        ratio = f"{sec / bare:.2f}" if bare else ""
        lines.append(f"| {c} | {sec:.2f} ({min(x['seconds'] for x in ok[c]):.2f}–"
                     f"{max(x['seconds'] for x in ok[c]):.2f}) | {ratio} | {rss:.0f} |")
    lines += ["", f"1 TiB virtual dataset (2^20 × 1 MiB, shuffled, shard 3 of 8): {tb['samples']:,} samples in "
              f"{tb['seconds']:.1f} s; state {tb['state_bytes']} bytes; resumed exactly: {tb['resumed_exactly']}; "
              f"RSS {tb['rss_first_mib']:.0f} → {tb['rss_last_mib']:.0f} MiB (max {tb['rss_max_mib']:.0f})."]
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "scale.json").write_text(json.dumps({"cpu": cpu, "results": results, "terabyte": tb}, indent=1))
    (out / "scale.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
