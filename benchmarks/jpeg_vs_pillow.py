"""How far sluice's JPEG decode lands from Pillow's (libjpeg-turbo), per pixel level.

Every photo given (default: the committed example photos) is decoded as it is (JPEGs) and
re-encoded by Pillow at each quality and chroma subsampling below, baseline and
progressive, then decoded by both; the
table gives, per kind of file, the mean and largest |difference| in 8-bit levels and the
share of samples (pixel channels) more than 1 and more than 3 levels apart. This is what
`crates/sluice-imgproc/README.md` quotes.

    PYTHONPATH=python .venv/bin/python benchmarks/jpeg_vs_pillow.py [--photos DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import io
import json
import pathlib
import platform
import sys

import numpy as np
from PIL import Image

import sluice
from sluice import image

QUALITIES = (50, 75, 90, 95)
SUBSAMPLING = {"4:4:4": 0, "4:2:2": 1, "4:2:0": 2}


def cpu_model() -> str:
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def encodings(photo: pathlib.Path):
    if photo.suffix.lower() in {".jpg", ".jpeg"}:
        yield "as given", 0, photo.read_bytes()
    rgb = Image.open(photo).convert("RGB")
    for q in QUALITIES:
        for name, sub in SUBSAMPLING.items():
            for progressive in (False, True):
                buf = io.BytesIO()
                rgb.save(buf, "JPEG", quality=q, subsampling=sub, progressive=progressive)
                kind = f"{name} {'progressive' if progressive else 'baseline'}"
                yield kind, q, buf.getvalue()
        buf = io.BytesIO()
        rgb.convert("L").save(buf, "JPEG", quality=q)
        yield "gray", q, buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--photos", default="examples/fixtures/images", help="a folder of photos (searched recursively)")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    photos = sorted(p for p in pathlib.Path(args.photos).rglob("*") if p.suffix.lower() in {".jpg", ".jpeg", ".png"})
    if not photos:
        sys.exit(f"no photos under {args.photos}")
    files = [(kind, q, data) for p in photos for kind, q, data in encodings(p)]
    items = [{"bytes": d, "gray": kind == "gray"} for kind, _, d in files]
    rgb = sluice.from_items([i for i in items if not i["gray"]]).map(image.decode()).take(len(items))
    gray = sluice.from_items([i for i in items if i["gray"]]).map(image.decode("L")).take(len(items))
    rgb_it, gray_it = iter(rgb), iter(gray)
    decoded = [next(gray_it) if i["gray"] else next(rgb_it) for i in items]
    rows: dict[str, dict[str, float]] = {}
    total = {"n": 0, "sum": 0.0, "max": 0, "gt1": 0, "gt3": 0, "files": 0}
    for (kind, _q, data), ours in zip(files, decoded):
        ref = np.asarray(Image.open(io.BytesIO(data)).convert("RGB" if kind != "gray" else "L"))
        got = ours["image"]
        if got.ndim == 3 and ref.ndim == 2:
            got = got[..., 0]
        d = np.abs(got.astype(np.int16) - ref.astype(np.int16))
        for acc in (rows.setdefault(kind, {"n": 0, "sum": 0.0, "max": 0, "gt1": 0, "gt3": 0, "files": 0}), total):
            acc["n"] += d.size
            acc["sum"] += float(d.sum())
            acc["max"] = max(acc["max"], int(d.max()))
            acc["gt1"] += int((d > 1).sum())
            acc["gt3"] += int((d > 3).sum())
            acc["files"] += 1

    def line(kind: str, a: dict) -> str:
        return (f"| {kind} | {a['files']} | {a['sum'] / a['n']:.3f} | {a['max']} | "
                f"{100 * a['gt1'] / a['n']:.3f}% | {100 * a['gt3'] / a['n']:.4f}% |")

    print(f"{len(photos)} photos, qualities {QUALITIES}; Pillow {Image.__version__}; CPU: {cpu_model()}")
    print("| file kind | files | mean \\|Δ\\| | max \\|Δ\\| | > 1 level | > 3 levels |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind in sorted(rows):
        print(line(kind, rows[kind]))
    print(line("all", total))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"rows": rows, "all": total, "cpu": cpu_model()}, indent=1))


if __name__ == "__main__":
    main()
