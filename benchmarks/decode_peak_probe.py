"""What decoding one big image costs in resident memory, per format: a 4,000 x 4,000 photo-like
image (noise upscaled) saved as JPEG, PNG, WebP, GIF, BMP and TIFF, each decoded and resized to
64 by sluice in a fresh process (one thread, no memory cap), three times; the rise of the peak
resident memory (VmHWM) over the process's before the run. The file's own bytes are part of
the rise (a BMP or TIFF file is the 48 MB of its pixels; the JPEG is decoded at 1/8 scale by
the fused `decode_resize`). What `decoded_bytes` (crates/sluice-ops/src/image/op.rs) asks the
memory gate for follows these figures.

    PYTHONPATH=$PWD/python .venv/bin/python benchmarks/decode_peak_probe.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np
from PIL import Image

RUN = r"""
import os, sys
import sluice, sluice.image as img
def hwm():
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
ds = sluice.read_images([sys.argv[1]] * 3).map(img.decode(max_pixels=60_000_000)).map(img.resize(64))
base = hwm()
for _ in ds.iter(num_threads=0, memory_limit=False):
    pass
rise = hwm() - base
size = os.path.getsize(sys.argv[1])
print(f"{sys.argv[2]:5s} file {size / 1e6:5.1f} MB  peak +{rise / 1e6:4.0f} MB  "
      f"less the file: {(rise - size) / 16e6:4.1f} bytes a pixel")
"""


def main() -> None:
    rng = np.random.default_rng(0)
    image = Image.fromarray((rng.random((500, 500, 3)) * 255).astype(np.uint8)).resize((4000, 4000))
    with tempfile.TemporaryDirectory(prefix="sluice-decode-peak-") as d:
        for fmt, kw in (("JPEG", {"quality": 90}), ("PNG", {}), ("WEBP", {"quality": 80}),
                        ("GIF", {}), ("BMP", {}), ("TIFF", {})):
            path = os.path.join(d, f"x.{fmt.lower()}")
            image.save(path, fmt, **kw)
            subprocess.run([sys.executable, "-c", RUN, path, fmt], check=True, timeout=300)


if __name__ == "__main__":
    main()
