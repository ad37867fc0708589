"""A memory cap that holds (issue 39, item 4): peak resident memory and throughput of an image
pipeline over mixed sizes — 88 % small photos (0.01–0.3 MP), 10 % 5 MP, 2 % 50 MP (a 50 MP
image decodes to 150 MB) — read, decoded, resized to 224 and batched by 16, with no cap and under
`iter(memory_limit=...)` caps, each in a fresh process (its VmHWM is the peak).

    .venv/bin/python benchmarks/memory_cap.py [--n 400] [--caps 1.5GB,1GB,700MB] [--rounds 2] [--kind images|text|photos]

The table gives, per case, the peak resident memory of the process tree (the process's VmHWM;
no worker processes here), images per second, and what the cap did (seconds the source held
chunks, of which the consumer waited, and chunks let through over it). Writes
benchmarks/results/memory_cap_<kind>.{json,md} (--kind images, the default; text: lines of 10 B-10 MB;
photos: every third a 4,000 x 4,000 JPEG, on 4 threads, where big decodes overlap).
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from peers import common as C  # noqa: E402

RUN = r"""
import json, sys, time
THREADS = {"images": 2, "text": 2, "photos": 4}
sys.path.insert(0, sys.argv[3])
import checkout; checkout.use()
import sluice, sluice.image as img, sluice.text as T
def hwm():
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
cap = json.loads(sys.argv[2])
if sys.argv[4] == "text":
    ds = (sluice.read_text(sys.argv[1]).map(T.tokenize(sys.argv[6], add_special_tokens=False))
          .map(T.truncate(512)).map(T.pad(512)).batch(32))
    field = "input_ids"
elif sys.argv[4] == "photos":
    # A crop before the resize, so that no decode is DCT-scaled (decode_resize); with
    # --unfused every decode makes the whole image (fused, decode_center_crop decodes only
    # the crop's window).
    ds = (sluice.read_images(sys.argv[1], labels=None).map(img.decode())
          .map(img.center_crop(256)).map(img.resize(64)).batch(4))
    field = "image"
else:
    ds = (sluice.read_images(sys.argv[1], labels=None).map(img.decode(max_pixels=60_000_000))
          .map(img.resize(224)).map(img.center_crop(224)).batch(16))
    field = "image"
t0 = time.perf_counter()
it = ds.iter(num_threads=THREADS[sys.argv[4]], memory_limit=cap, fuse_ops=sys.argv[5] != "unfused")
n = sum(len(b[field]) for b in it)
dt = time.perf_counter() - t0
print(json.dumps({"n": n, "s": dt, "peak": hwm(), "memory": it.stats().to_dict().get("memory")}))
"""


def make_images(root: Path, n: int) -> Path:
    """n JPEGs of mixed sizes (made once)."""
    done = root / f".done-{n}"
    if done.exists():
        return root
    import numpy as np
    from PIL import Image

    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    cache: dict[tuple[int, int], bytes] = {}
    for i in range(n):
        r = i % 50
        side = (7071, 7071) if r == 0 else (2236, 2236) if r in (1, 2, 3, 4, 5) else (int(rng.integers(100, 548)),) * 2
        if side not in cache:
            y, x = np.mgrid[0:side[0], 0:side[1]]
            a = np.stack([(x // 7) % 256, (y // 5) % 256, ((x + y) // 9) % 256], -1).astype(np.uint8)
            buf = io.BytesIO()
            Image.fromarray(a).save(buf, format="JPEG", quality=80)
            cache[side] = buf.getvalue()
        (root / f"{i:05d}.jpg").write_bytes(cache[side])
    done.touch()
    return root


def make_photos(root: Path, n: int) -> Path:
    """n JPEGs, every third a 4,000 x 4,000 photo (48 MB decoded), the rest 300 x 300 (made
    once): big decodes that overlap on 4 threads."""
    done = root / f".done-{n}"
    if done.exists():
        return root
    import numpy as np
    from PIL import Image

    root.mkdir(parents=True, exist_ok=True)
    y, x = np.mgrid[0:4000, 0:4000]
    a = np.stack([(x // 7) % 256, (y // 5) % 256, ((x + y) // 9) % 256], -1).astype(np.uint8)
    big, small = io.BytesIO(), io.BytesIO()
    Image.fromarray(a).save(big, format="JPEG", quality=80)
    Image.fromarray(a[:300, :300]).save(small, format="JPEG", quality=80)
    for i in range(n):
        (root / f"{i:05d}.jpg").write_bytes((big if i % 3 == 0 else small).getvalue())
    done.touch()
    return root


def make_text(root: Path, n: int) -> Path:
    """n lines from 10 B to 10 MB (made once): 97 % 10 B–1 KB, 2.5 % 10 KB–1 MB, 0.5 % 10 MB,
    made of the NLP corpus's words."""
    path = root / f"lines-{n}.txt"
    if path.exists():
        return path
    import numpy as np

    words = (C.default_data_dir() / "text" / "lines.txt").read_text().split()[:200_000]
    text = " ".join(words)
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i in range(n):
            r = i % 200
            size = 10_000_000 if r == 0 else int(rng.integers(10_000, 1_000_000)) if r < 6 else int(rng.integers(10, 1000))
            start = int(rng.integers(0, len(text) - 1000))
            line = (text[start:] + " " + text) * (size // len(text) + 1) if size > len(text) - start else text[start:start + size]
            f.write(line[:size].replace("\n", " ") + "\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--caps", default="1.5GB,1GB,700MB")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kind", choices=("images", "text", "photos"), default="images",
                    help="images: 0.01-50 MP JPEGs; text: lines of 10 B-10 MB, tokenized and padded to 512; "
                         "photos: every third a 16 MP JPEG, 4 threads")
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--unfused", action="store_true",
                    help="iter(fuse_ops=False): every decode whole (what the memory gate is for)")
    args = ap.parse_args()
    if args.kind == "text":
        work = args.work or Path.home() / ".cache" / "sluice-bench" / "memcap-text"
        data, extra = make_text(work, args.n), [str(C.tokenizer_file(C.default_data_dir()))]
    elif args.kind == "photos":
        data, extra = make_photos(args.work or Path.home() / ".cache" / "sluice-bench" / "memcap-photos", args.n), [""]
    else:
        data, extra = make_images(args.work or Path.home() / ".cache" / "sluice-bench" / "memcap-images", args.n), [""]
    cases = [("no cap", False)] + [(c, c) for c in args.caps.split(",")]
    results: dict[str, list] = {}
    for _ in range(args.rounds):
        for name, cap in cases:
            r = subprocess.run([sys.executable, "-c", RUN, str(data), json.dumps(cap), str(HERE),
                                args.kind, "unfused" if args.unfused else "fused", *extra],
                               capture_output=True, text=True, timeout=1800)
            if r.returncode != 0:
                raise SystemExit(r.stderr)
            got = json.loads(r.stdout.strip().splitlines()[-1])
            results.setdefault(name, []).append(got)
            print(name, got, flush=True)
    rows = []
    for name, runs in results.items():
        peak = max(x["peak"] for x in runs)
        rate = statistics.median(x["n"] / x["s"] for x in runs)
        m = runs[-1]["memory"]
        cap_s = "—" if name == "no cap" else f"{m['limit'] / 1e6:,.0f} MB"
        did = "—" if name == "no cap" else (
            f"held {m['held_s']:.1f} s (consumer waited {m['starved_s']:.1f} s), {m['forced']} over"
            + (f"; {m['transient_waits']} decode(s) waited {m['transient_wait_s']:.1f} s for room"
               if m.get("transient_waits") else ""))
        rows.append(f"| {name} | {cap_s} | {peak / 1e6:,.0f} MB | {rate:,.1f} | {did} |")
    cmd = "python benchmarks/memory_cap.py " + shlex.join(sys.argv[1:])
    what = {
        "images": f"{args.n} JPEGs, 88 % 0.01–0.3 MP, 10 % 5 MP, 2 % 50 MP; decode → resize 224 → crop → batch 16, "
                  "2 threads",
        "photos": f"{args.n} JPEGs, every third 4,000 × 4,000 (48 MB decoded), the rest 300 × 300; decode → "
                  "center crop 256 → resize 64 → batch 4, 4 threads",
        "text": f"{args.n} text lines, 97 % 10 B–1 KB, 2.5 % 10 KB–1 MB, 0.5 % 10 MB; GPT-2-style BPE tokenize → "
                "truncate 512 → pad 512 → batch 32, 2 threads",
    }[args.kind]
    unit = "lines/s" if args.kind == "text" else "images/s"
    md = "\n".join([
        f"Memory cap ({datetime.date.today()}, {C.cpu_model()}, {os.cpu_count()} cores): {what}; "
        f"peak = max VmHWM over {args.rounds} rounds, rate = median.",
        "",
        f"| case | cap | peak RSS | {unit} | what the cap did (last round) |",
        "|---|---:|---:|---:|---|",
        *rows,
        "",
        f"Command: `{cmd}`",
    ])
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / f"memory_cap_{args.kind}.json").write_text(json.dumps(results, indent=1))
    (out / f"memory_cap_{args.kind}.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
