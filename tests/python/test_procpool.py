"""The process pool: ``ds.iter(processes=N)`` runs Python-UDF stages in N spawned workers.

Outputs must equal the in-process run byte for byte; errors must name the op and sample;
no worker process may outlive its iterator (closed, broken out of, failed or collected).
"""

import gc
import os
import time

import numpy as np
import psutil
import pytest

import sluice
from sluice import _native
from procs import Child
from compare import same


def workers():
    """Live sluice worker processes of this process (zombies count: they leaked too)."""
    out = []
    for c in psutil.Process().children(recursive=True):
        try:
            if "sluice._worker" in " ".join(c.cmdline()) or c.status() == psutil.STATUS_ZOMBIE:
                out.append(c)
        except psutil.NoSuchProcess:
            pass
    return out


def assert_no_workers(timeout=5.0):
    deadline = time.time() + timeout
    while workers() and time.time() < deadline:
        time.sleep(0.05)
    assert workers() == []


def shm_segments():
    return {f for f in os.listdir("/dev/shm") if f.startswith(f"sluice-{os.getpid()}-")} if os.path.isdir(
        "/dev/shm"
    ) else set()


def run(ds, **kw):
    # Every run is epoch 0: the runs compare placements, not epochs.
    return list(ds.iter(seed=7, epoch=0, **kw))


def augment(s, rng):
    img = np.full((8, 8, 3), s["id"] % 251, dtype=np.uint8)
    noise = rng.integers(0, 5, size=img.shape, dtype=np.uint8)
    return {"id": s["id"], "img": img + noise, "label": f"class-{s['id'] % 3}", "w": rng.random()}


def test_map_filter_flat_map_rng_equal_inline_and_threads():
    offset = 3  # a closure: cloudpickle ships it by value
    ds = (
        sluice.range(200)
        .shuffle()
        .map(augment)
        .filter(lambda s: s["id"] % 5 != 0)
        .flat_map(lambda s: [s, {**s, "id": s["id"] + 1000 + offset}])
        .batch(16)
    )
    inline = run(ds)
    threads = run(ds, num_threads=2)
    pooled = run(ds, processes=2)
    same(inline, threads)
    same(inline, pooled)
    assert_no_workers()


def test_large_tensors_cross_in_shared_memory():
    big = lambda s: {"id": s["id"], "x": np.arange(300_000, dtype=np.float32) * s["id"]}  # 1.2 MB
    ds = sluice.range(12).map(big)
    inline = run(ds)
    pooled = run(ds, processes=2)
    same(inline, pooled)
    assert pooled[5]["x"][2] == 10.0
    assert shm_segments() == set(), "segments are unlinked once read"
    assert_no_workers()


def test_from_items_sources_are_read_in_the_main_process():
    items = [{"text": f"line {i}", "v": np.ones(3, dtype=np.int16) * i} for i in range(30)]
    ds = sluice.from_items(items).map(lambda s: {"text": s["text"].upper(), "v": s["v"] * 2})
    same(run(ds), run(ds, processes=2))


def test_read_text_is_reopened_by_workers(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("".join(f"row {i}\n" for i in range(50)))
    ds = sluice.read_text(str(p)).map(lambda s: {"n": len(s["text"]), "t": s["text"][::-1]})
    same(run(ds), run(ds, processes=2))


def test_udf_exception_names_op_and_sample():
    def fragile(s):
        if s["id"] == 37:
            raise ValueError("bad sample")
        return s

    ds = sluice.range(100).map(fragile)
    with pytest.raises(sluice.PipelineError) as local:
        run(ds)
    with pytest.raises(sluice.PipelineError) as remote:
        run(ds, processes=2)
    assert str(remote.value) == str(local.value)
    assert "fragile" in str(remote.value) and "sample 37" in str(remote.value)
    assert isinstance(remote.value.__cause__, ValueError)
    assert_no_workers()


def test_on_error_skip_counts_in_stats():
    def fragile(s):
        if s["id"] % 10 == 0:
            raise ValueError("skip me")
        return s

    ds = sluice.range(100).map(fragile, on_error="skip")
    it = ds.iter(processes=2)
    out = list(it)
    assert len(out) == 90
    skipped = sum(st.get("skipped", 0) for st in it.stats().stages)
    assert skipped == 10
    # The stats name the pool the stage ran on, as the plan does (they said "threads=2").
    variants = {st["name"]: st["variant"] for st in it.stats().stages}
    assert variants["test_on_error_skip_counts_in_stats.<locals>.fragile"] == "processes=2", variants


def test_early_break_and_gc_leave_no_processes():
    ds = sluice.range(10_000).map(lambda s: {"id": s["id"] * 2})
    it = iter(ds.iter(processes=2))
    assert next(it)["id"] == 0
    assert len(workers()) == 2
    del it
    gc.collect()
    assert_no_workers()
    for b in ds.iter(processes=2):
        break
    gc.collect()
    assert_no_workers()
    with ds.iter(processes=2) as it:
        next(it)
    assert_no_workers()


def test_worker_crash_is_a_clear_error():
    def die(s):
        if s["id"] == 20:
            os._exit(3)
        return s

    with pytest.raises(sluice.SluiceError, match=r"worker process .* of stage '.*die' died: it exited with exit status: 3"):
        run(sluice.range(100).map(die), processes=2)
    assert_no_workers()


def test_unpicklable_function_is_a_clear_error():
    import threading

    lock = threading.Lock()
    ds = sluice.range(4).map(lambda s: (lock, s)[1])
    with pytest.raises(ValueError, match="cannot be sent to worker processes"):
        run(ds, processes=2)
    assert_no_workers()


def test_chain_worker_runs_frames():
    # What a Ray actor hosts: ChainWorker(init).run(frame) -> frame.
    assert callable(_native.ChainWorker)
    with pytest.raises(Exception):
        _native.ChainWorker("{not json")


def test_plan_shows_the_pool():
    ds = sluice.range(10).map(lambda s: s).batch(2)
    assert "processes=3" in ds.explain(processes=3)


def test_workers_die_with_a_killed_parent():
    import signal

    code = (
        "import os, sys, time, sluice\n"
        "it = iter(sluice.range(10**6).map(lambda s: s).iter(processes=2))\n"
        "next(it)\n"
        "import psutil\n"
        "print(' '.join(str(c.pid) for c in psutil.Process().children()), flush=True)\n"
        "time.sleep(60)\n"
    )
    with Child(code) as parent:
        pids = [int(p) for p in parent.readline().split()]
        assert len(pids) == 2
        parent.send_signal(signal.SIGKILL)
        parent.proc.wait(timeout=30)

    def alive(pid):
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.time() + 5
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)


def test_keyboard_interrupt_stops_the_workers():
    import signal

    code = (
        "import gc, time, psutil, sluice\n"
        "slow = lambda s: (time.sleep(0.01), s)[1]\n"
        "try:\n"
        "    for i, s in enumerate(sluice.range(10**6).map(slow).iter(processes=2)):\n"
        "        if i == 0: print('started', flush=True)\n"
        "except KeyboardInterrupt:\n"
        "    gc.collect()\n"
        "    deadline = time.time() + 5\n"
        "    while psutil.Process().children() and time.time() < deadline: time.sleep(0.05)\n"
        "    print('left', len(psutil.Process().children()), flush=True)\n"
    )
    with Child(code) as parent:
        assert parent.readline() == "started"
        parent.send_signal(signal.SIGINT)
        assert parent.readline() == "left 0"
