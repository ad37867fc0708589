"""Where an ASR clip's time goes on one thread: each op's CPU per clip (the profiler, ops
unfused), and the resampler alone (decoding to the clip's own rate against decoding to
16 kHz, best of 3 passes).

    SLUICE_BENCH_ASR_RATE=22050 /root/.cache/bench-venv/bin/python benchmarks/asr_steps.py

SLUICE_BENCH_ASR_RATE picks the clips at one sample rate (22050: every clip is resampled).

``--loop SECONDS`` only runs the ASR reference pipeline on one thread for that long and prints
its rate: the process to put under a profiler, e.g.
``perf record -o /tmp/asr.data python benchmarks/asr_steps.py --loop 10`` then
``perf report -i /tmp/asr.data --no-children --sort symbol`` (docs/BENCHMARKS.md, "ASR past
the decode-only limit").
Needs the benchmark clips (benchmarks/datasets/build.py) and a sluice build (imported from
python/).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import checkout  # noqa: E402

checkout.use()
sys.path.insert(0, str(HERE))

import sluice  # noqa: E402
import sluice.audio as au  # noqa: E402
from peers import common as C  # noqa: E402
from peers import sluice_native as N  # noqa: E402

DATA = C.default_data_dir()


def clips_per_second(ds) -> float:
    """Best of 3 passes on one thread."""
    best = 0.0
    for _ in range(3):
        t0, n = time.perf_counter(), 0
        for _ in ds.iter(num_threads=1):
            n += 1
        best = max(best, n / (time.perf_counter() - t0))
    return best


def loop(seconds: float) -> float:
    """The reference pipeline's clips/s on one thread, epoch after epoch for `seconds`."""
    ds = N._asr(sluice, DATA, None, 0)
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        for _ in ds.iter(seed=0, num_threads=1):
            n += 1
            if time.perf_counter() - t0 >= seconds:
                break
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loop", type=float, default=0.0,
                    help="only run the reference pipeline on one thread this many seconds")
    args = ap.parse_args()
    if args.loop > 0:
        print(f"ASR reference pipeline, one thread: {loop(args.loop):.0f} clips/s")
        return
    print(N._asr(sluice, DATA, None, 0).profile(samples=200, seconds=30))
    files = sluice.read_files(C.audio_files(DATA) * 4)
    native = clips_per_second(files.map(au.decode()))
    resampled = clips_per_second(files.map(au.decode(C.ASR_RATE)))
    print(f"\n{C.cpu_model()}, one thread: decode {1e3 / native:.3f} ms per clip, decode to "
          f"{C.ASR_RATE} Hz {1e3 / resampled:.3f} ms: the resampler {1e3 / resampled - 1e3 / native:.3f} ms")


if __name__ == "__main__":
    main()
