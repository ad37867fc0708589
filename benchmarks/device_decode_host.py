"""The host's share of decoding on the GPU (issue 40, item 3), measured without one: the CPU the
engine spends per image of the CV reference pipeline (read → decode → random_resized_crop(224)
→ flip → batch 256) when it decodes on the host, against when the consumer decodes on its device
(``Dataset.iter(device_decode=True)``: the host reads each file, its JPEG header, and draws the
crop and flip). The device's own work (nvJPEG, crop, resize) is what ``gpu_feed.py`` measures on
a GPU machine; this is the host CPU that path frees, and what it leaves the host to do.

Each case runs in a fresh process for a window of ``--seconds`` after a warm-up pass, over the
images ``gpu_feed.py`` makes (cut from the fixture photos, 300–600 px, quality 90).

    python benchmarks/device_decode_host.py [--seconds 8] [--threads 2] [--out docs/...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def pipeline(data: str, batch: int):
    import sluice
    import sluice.image as I

    return (sluice.read_images(data, labels="parent_dir").shuffle(seed=0).repeat()
            .map(I.decode()).map(I.random_resized_crop(224)).map(I.horizontal_flip(0.5))
            .map(sluice.ops.select(["image", "label"])).batch(batch, drop_last=True))


def child(a: argparse.Namespace) -> dict:
    it = pipeline(a.data, a.batch).iter(seed=0, epoch=0, num_threads=a.threads,
                                         device_decode=a.child == "device")
    cpu = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])  # noqa: E731 - user + system
    for _ in range(2):  # warm-up: the page cache and the pools
        next(it)
    n, t0, c0 = 0, time.perf_counter(), cpu()
    while time.perf_counter() - t0 < a.seconds:
        b = next(it)
        n += len(b["label"])
    wall, spent = time.perf_counter() - t0, cpu() - c0
    it.close()
    return {"images_per_s": n / wall, "cpu_us_per_image": spent / n * 1e6, "images": n}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--images", type=int, default=4000)
    ap.add_argument("--data", default=str(Path.home() / ".cache/sluice-bench/gpu-feed"))
    ap.add_argument("--child", choices=["host", "device"], help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a)))
        return 0
    from gpu_feed import make_images

    make_images(Path(a.data), a.images)
    rows = {}
    for case in ("host", "device"):
        cmd = [sys.executable, __file__, "--child", case, "--seconds", str(a.seconds),
               "--threads", str(a.threads), "--batch", str(a.batch), "--data", a.data]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=a.seconds * 4 + 300, check=True)
        rows[case] = json.loads(out.stdout.strip().splitlines()[-1])
        print(case, rows[case], flush=True)
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    h, d = rows["host"], rows["device"]
    print(f"\nhost: {cpu}, {os.cpu_count()} cores, {a.threads} threads, batch {a.batch}, ≥ {a.seconds:.0f} s per case\n")
    print("| the engine | images/s | host CPU µs/image |")
    print("|---|---:|---:|")
    print(f"| decodes and crops on the host | {h['images_per_s']:,.0f} | {h['cpu_us_per_image']:,.0f} |")
    print(f"| leaves them to the device (draws only) | {d['images_per_s']:,.0f} | {d['cpu_us_per_image']:,.0f} |")
    print(f"\nhost CPU per image: {d['cpu_us_per_image'] / h['cpu_us_per_image']:.3f}× the host path's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
