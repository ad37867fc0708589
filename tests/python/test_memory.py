"""Peak memory is set by queue depths, not dataset size."""

import subprocess
import sys
import textwrap


def test_10gb_stream_keeps_rss_bounded():
    code = textwrap.dedent(
        """
        import numpy as np, psutil, sluice
        proc = psutil.Process()
        MB = 1 << 20
        def big(s):
            return {"x": np.full(MB, s["id"] % 251, dtype=np.uint8)}
        # 10,240 samples of 1 MiB = 10 GiB streamed through the pipeline.
        ds = sluice.range(10_240).map(big).batch(8)
        peak, n = 0, 0
        for b in ds.iter(num_threads=2):
            n += b["x"].shape[0]
            peak = max(peak, proc.memory_info().rss)
        print(n, peak // MB)
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    n, peak_mb = map(int, r.stdout.split())
    assert n == 10_240
    # Queues hold at most a few dozen chunks of a few MiB; 10 GiB would never fit.
    assert peak_mb < 600, peak_mb
