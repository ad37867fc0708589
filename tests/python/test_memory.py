"""Peak memory is set by queue depths, not dataset size."""

import json
import subprocess
import sys
import textwrap

import pytest


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
    # (explicit close) or dropped: RSS goes back near where the process started. Measured
    # against the process's start, not each case's: glibc's arenas keep a varying few tens of
    # MB after a 2-thread run (0-90 MB, with or without a grown reorder window), which a
    # per-case baseline carried into the next case's "was the buffer held" check.
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
    lines = r.stdout.splitlines()
    start = int(lines[0].split()[2])
    for line in lines:
        threads, how, base, peak, after = line.split()
        base, peak, after = int(base), int(peak), int(after)
        assert peak - start > 200, line  # the buffer was really held
        assert after - start < 160, line  # and given back: under half of it stays resident


_CAPPED = textwrap.dedent(
    """
    import json, sys, time, numpy as np, sluice
    MB = 1 << 20
    def hwm():  # the process's peak resident memory so far (VmHWM)
        return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
    def big(s):  # 10x skew: every tenth sample is 20 MiB, the rest 2 MiB
        n = (20 if s["id"] % 10 == 0 else 2) * MB
        return {"id": s["id"], "x": np.full(n, s["id"] % 251, dtype=np.uint8)}
    arg = json.loads(sys.argv[1])
    base = hwm()
    ds = sluice.range(200).map(big).prefetch(100)
    it = ds.iter(num_threads=2, memory_limit=arg if arg is False else base + arg)
    ids = []
    for s in it:
        ids.append(int(s["id"]))
        time.sleep(0.01)  # a slow consumer: the pipeline runs ahead as far as it may
    print(json.dumps({"base": base, "peak": hwm(), "ids": ids, "memory": it.stats().to_dict().get("memory")}))
    """
)


def _capped(arg):
    r = subprocess.run([sys.executable, "-c", _CAPPED, json.dumps(arg)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


def test_a_memory_limit_holds_with_skewed_samples():
    # Uncapped, 100 prefetched outputs of 2-20 MiB run the process ~350 MB above its start
    # (255 MB on a loaded machine, where the workers fill the prefetch more slowly): well
    # over the room the capped run is given.
    free, _ = _capped(False)
    assert free["memory"] is None
    room = 160 << 20
    assert free["peak"] - free["base"] > room + (32 << 20), free["peak"] - free["base"]
    capped, stderr = _capped(room)
    limit = capped["base"] + room
    assert capped["ids"] == free["ids"] == list(range(200))
    assert capped["peak"] <= limit, ((capped["peak"] - limit) >> 20, capped["memory"])
    m = capped["memory"]
    assert m["limit"] == limit and m["held_chunks"] > 0 and m["forced"] == 0
    assert 0 <= m["starved_s"] <= m["held_s"] and m["peak_rss"] <= limit


def test_a_consumer_waiting_on_slow_work_lets_nothing_over_the_cap():
    # Every tenth sample takes 0.2 s to make: the consumer waits on busy workers, which is no
    # reason to let more in (the rule that counted the wait alone forced 20-29 chunks over).
    code = textwrap.dedent(
        """
        import json, time, numpy as np, sluice
        MB = 1 << 20
        def hwm():
            return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
        def big(s):
            if s["id"] % 10 == 0:
                time.sleep(0.2)
            n = (20 if s["id"] % 10 == 0 else 2) * MB
            return {"id": s["id"], "x": np.full(n, 1, dtype=np.uint8)}
        base = hwm()
        it = sluice.range(100).map(big).prefetch(100).iter(num_threads=2, memory_limit=base + (160 << 20))
        ids = [int(s["id"]) for s in it]
        print(json.dumps({"over": hwm() - base - (160 << 20), "ids": ids, "memory": it.stats().to_dict()["memory"]}))
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ids"] == list(range(100))
    assert out["memory"]["forced"] == 0 and out["over"] <= 0, out
    assert "through over it" not in r.stderr


def test_memory_limit_arguments_and_default():
    import sluice

    with open("/proc/meminfo") as f:
        total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal"))
    it = sluice.range(10).iter(memory_limit="2GB")
    list(it)
    assert it.stats().to_dict()["memory"]["limit"] == 2_000_000_000
    it = sluice.range(10).iter()
    list(it)
    assert 0 < it.stats().to_dict()["memory"]["limit"] <= total * 0.8 + 1
    assert "memory: cap" in str(it.stats())
    for bad in (-1, 0, "lots"):
        with pytest.raises(ValueError, match="memory_limit"):
            sluice.range(3).iter(memory_limit=bad)


@pytest.mark.parametrize("tail", ["batch-limit", "limit-batch", "shuffle-batch"])
def test_the_cap_counts_what_the_consumer_took_after_a_stage_that_renumbers(tail):
    # The source admits chunks by their source positions and forgets them once the consumer
    # has passed them. After a `limit` (or a numbered batch, or a shuffle window) the
    # consumer's position is a count of that stage's outputs: compared with source positions,
    # it passed nothing, so every item ever read counted as in flight until the cap held the
    # source (the NLP reference pipeline with `.limit(n)` stalled after ~30 M lines under
    # the default cap; here 1.5 GB through a 600 MB cap crawled on forced chunks). A filter
    # keeps every other sample, so each renumbering stage's count falls behind the source
    # positions by half of them: every case held chunks before the fix.
    code = textwrap.dedent(
        """
        import json, sys, numpy as np, psutil, sluice
        MB = 1 << 20
        def big(s):
            return {"id": s["id"], "x": np.full(256 << 10, s["id"] % 251, dtype=np.uint8)}
        ds = sluice.range(12_000).filter(lambda s: s["id"] % 2 == 0).map(big)
        tail = sys.argv[1]
        if tail == "batch-limit":
            ds = ds.batch(8).limit(750)
        elif tail == "limit-batch":
            ds = ds.limit(6_000).batch(8)
        else:
            ds = ds.shuffle_buffer(64).batch(8)
        base = psutil.Process().memory_info().rss
        it = ds.iter(seed=1, num_threads=2, memory_limit=base + 600 * MB)
        ids = sorted(int(i) for b in it for i in b["id"])
        print(json.dumps({"ids_ok": ids == list(range(0, 12_000, 2)), "memory": it.stats().to_dict()["memory"]}))
        """
    )
    r = subprocess.run([sys.executable, "-c", code, tail], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ids_ok"]
    m = out["memory"]
    # A few dozen items of 256 KiB are ever in flight: nothing near the cap. Before the fix
    # the source was held for most of the run and read on forced chunks. Under load (a CI
    # run, 2026-11-30 15:00 UTC) the cap once held 4 chunks for 5 ms — not understood yet, and
    # not the crawl this test is about — so a brief hold is tolerated, none forced.
    assert m["forced"] == 0 and m["held_s"] < 1.0, m


def test_stages_behind_a_shuffle_buffer_do_not_hold_the_source_before_it_fills():
    # Until a run has measured its items' sizes the cap lets in one chunk per stage thread.
    # A map behind a shuffle buffer sees nothing until the buffer is full, so waiting for its
    # size held the source a chunk at a time: 0.7 s to the first output became 544 s with a
    # 100,000-item buffer. Under the default cap, as every run has one.
    code = textwrap.dedent(
        """
        import numpy as np, sluice
        def f(s):
            return {"x": np.full(16, s["id"], dtype=np.int64)}
        ds = sluice.range(120_000).shuffle_buffer(50_000).map(f).batch(1_000)
        it = ds.iter(seed=1, num_threads=2)
        ids = np.sort(np.concatenate([b["x"][:, 0] for b in it]))
        print(bool((ids == np.arange(120_000)).all()), it.stats().to_dict()["memory"]["forced"])
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "0"], r.stdout


_BIG = textwrap.dedent(
    """
    import json, sys, sluice, sluice.image as img
    def hwm():
        return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
    room = json.loads(sys.argv[2])
    base = hwm()
    # Unfused, so that every decode makes the whole image: fused, decode + center_crop
    # decodes only the crop's window (decode_center_crop), and no decode here would be big.
    ds = sluice.read_images(sys.argv[1]).map(img.decode()).map(img.center_crop(256)).map(img.resize(64)).batch(4)
    it = ds.iter(num_threads=4, memory_limit=False if room is False else base + room, fuse_ops=False)
    n = sum(len(b["image"]) for b in it)
    print(json.dumps({"n": n, "used": hwm() - base, "memory": it.stats().to_dict().get("memory")}))
    """
)


def test_big_decodes_wait_for_room_under_the_cap(tmp_path):
    # The cap at the source cannot see a buffer that lives only inside a chunk's ops: four
    # workers decoding 4000 x 4000 photos (48 MB each, about twice that while the decoder
    # works) at once ran 210-312 MiB above the start, however little the source let in. Under
    # a cap each such decode waits until the process has room for it beside the others:
    # 112-142 MiB here (runs two at a time, so as busy as a CI machine), against a room of
    # 176 MiB that two decodes at once would pass.
    import io

    import numpy as np
    from PIL import Image

    side = 4000
    y, x = np.mgrid[0:side, 0:side]
    a = np.stack([(x // 7) % 256, (y // 5) % 256, ((x + y) // 9) % 256], -1).astype(np.uint8)
    big, small = io.BytesIO(), io.BytesIO()
    Image.fromarray(a).save(big, format="JPEG", quality=80)
    Image.fromarray(a[:300, :300]).save(small, format="JPEG", quality=80)
    for i in range(24):
        (tmp_path / f"{i:03d}.jpg").write_bytes((big if i % 3 == 0 else small).getvalue())

    def run(room):
        r = subprocess.run([sys.executable, "-c", _BIG, str(tmp_path), json.dumps(room)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    room = 176 << 20
    free = run(False)
    assert free["n"] == 24 and free["memory"] is None
    assert free["used"] > room, free["used"] >> 20
    capped = run(room)
    m = capped["memory"]
    assert capped["n"] == 24
    assert capped["used"] <= room, (capped["used"] >> 20, m)
    assert m["transient_waits"] > 0 and m["forced"] == 0, m
