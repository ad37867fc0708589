"""What a shared service's job pays to pin the local files of a stage before it connects
(`sluice._native.pin_local_files`: one `stat` per file, the init message parsed and written
again): 100,000 empty files in 100 folders, made in a temporary folder (in the page cache),
pinned twice; prints the time and the init's size before and after.

    PYTHONPATH=$PWD/python .venv/bin/python benchmarks/pin_files_probe.py [--files 100000]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from sluice import _native


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=100_000)
    n = ap.parse_args().files
    with tempfile.TemporaryDirectory(prefix="sluice-pin-") as d:
        paths = []
        for i in range(n):
            folder = os.path.join(d, f"{i // 1000:03d}")
            if i % 1000 == 0:
                os.makedirs(folder)
            path = os.path.join(folder, f"{i:06d}.bin")
            open(path, "wb").close()
            paths.append(path)
        init = json.dumps({"version": 1, "ops": [], "seed": 0,
                           "source": {"source": "read_files", "paths": paths}})
        for _ in range(2):
            t = time.perf_counter()
            pinned = _native.pin_local_files(init)
            took = time.perf_counter() - t
            print(f"{n:,} files: {took * 1e3:.0f} ms ({took / n * 1e6:.2f} µs a file); "
                  f"init {len(init) / 1e6:.1f} MB -> {len(pinned) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
