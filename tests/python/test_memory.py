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


def test_close_returns_a_shuffle_buffers_memory():
    # shuffle_buffer(100_000) of 22 KB samples kept 2.2 GB after close(): the buffer was
    # freed, but the allocator kept the pages. Here a ~330 MB buffer, closed after a break
    # (explicit close) or dropped: RSS goes back near where it started.
    code = textwrap.dedent(
        """
        import gc, numpy as np, psutil, sluice
        proc = psutil.Process()
        MB = 1 << 20
        def big(s):
            return {"x": np.full(16 << 10, s["id"] % 251, dtype=np.uint8)}
        ds = sluice.range(100_000).map(big).shuffle_buffer(20_000)
        for threads in (0, 2):
            for how in ("close", "drop"):
                gc.collect()
                base = proc.memory_info().rss
                it = ds.iter(num_threads=threads)
                for i, s in enumerate(it):
                    if i == 5_000:
                        break
                del s
                peak = proc.memory_info().rss
                if how == "close":
                    it.close()
                del it
                gc.collect()
                print(threads, how, base // MB, peak // MB, proc.memory_info().rss // MB)
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    print(r.stdout)
    for line in r.stdout.splitlines():
        threads, how, base, peak, after = line.split()
        base, peak, after = int(base), int(peak), int(after)
        assert peak - base > 200, line  # the buffer was really held
        assert after - base < 100, line
