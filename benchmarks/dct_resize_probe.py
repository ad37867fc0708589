"""What decoding less saves on a huge photo: the 50 MP JPEG of benchmarks/memory_cap.py
(7,071 x 7,071; run that first to make it) decoded and resized to 224, as the fused
`decode_resize` runs it (the whole image decoded at 1/8) and as the two ops run unfused
(`iter(fuse_ops=False)`: decoded whole, then resized); and its 256-pixel centre, as the fused
`decode_center_crop` runs it (only the MCUs of the crop decoded) and unfused. Process CPU per
image and the rise of the peak resident memory, one thread, each mode in its own process:

    PYTHONPATH=$PWD/python .venv/bin/python benchmarks/dct_resize_probe.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PHOTO = Path.home() / ".cache" / "sluice-bench" / "memcap-images" / "00000.jpg"

RUN = r"""
import sys, time
sys.path.insert(0, sys.argv[3])
import checkout; checkout.use()
import sluice, sluice.image as img
def hwm():
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
second = img.resize(224) if sys.argv[4] == "resize" else img.center_crop(256)
ds = sluice.read_images([sys.argv[1]] * 6).map(img.decode(max_pixels=60_000_000)).map(second)
fuse = "fused" in sys.argv[2]
base, t = hwm(), time.process_time()
shape = [s["image"].shape for s in ds.iter(num_threads=0, memory_limit=False, fuse_ops=fuse)][0]
print(f"{sys.argv[2]:40s} {shape}  CPU per image {(time.process_time() - t) / 6 * 1e3:.0f} ms  "
      f"peak +{(hwm() - base) / 1e6:.0f} MB")
"""


def main() -> None:
    if not PHOTO.exists():
        raise SystemExit(f"{PHOTO} is missing: run benchmarks/memory_cap.py once first")
    for _ in range(2):
        for second, mode in (
            ("resize", "decode, resize (fuse_ops=False)"),
            ("resize", "decode_resize (fused: 1/8)"),
            ("center_crop", "decode, center_crop 256 (fuse_ops=False)"),
            ("center_crop", "decode_center_crop 256 (fused: window)"),
        ):
            subprocess.run([sys.executable, "-c", RUN, str(PHOTO), mode, str(HERE), second], check=True, timeout=600)


if __name__ == "__main__":
    main()
