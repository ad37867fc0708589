"""sluice on a real local Ray cluster: byte-identical output, split to trainers, UDF shipping,
fault tolerance (an actor killed mid-epoch), resume, hybrid placement, clean shutdown.

One cluster for the module (Ray's startup takes seconds); actors take no CPU reservation so
a test's leftover actors can never starve the next test's.
"""

import os
import pickle
import shutil
import sys
import tempfile
import time

import numpy as np
import psutil
import pytest

import sluice
from sluice import image

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def cluster():
    # A short path: Ray's unix sockets live under it (108-byte limit).
    tmp = tempfile.mkdtemp(prefix="sr", dir="/tmp")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=100_000_000,
        _temp_dir=tmp,
        log_to_driver=False,
    )
    try:
        yield tmp
    finally:
        ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


def ctx(**kw):
    kw.setdefault("num_actors", 2)
    kw.setdefault("actor_cpus", 0)
    return sluice.Context("auto", **kw)


def cv(images_dir, k=1):
    return (
        sluice.read_images(images_dir)
        .repeat(2)
        .shuffle()
        .map(image.decode())
        .map(image.random_resized_crop(24))
        .map(image.horizontal_flip(0.5))
        .map(lambda s, rng: {**s, "noise": float(rng.random()) * k})
        .map(sluice.ops.select(["image", "label", "noise"]))
        .batch(4)
    )


def same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        for key in x:
            xa, ya = np.asarray(x[key]), np.asarray(y[key])
            assert xa.dtype == ya.dtype and xa.shape == ya.shape
            assert xa.tobytes() == ya.tobytes(), key


def test_output_is_byte_identical_to_local(cluster, images_dir):
    ds = cv(images_dir, k=3)  # the lambda closes over k: shipped by cloudpickle
    local = list(ds.iter(seed=11, chunk_size=4))
    c = ctx()
    it = ds.iter(seed=11, chunk_size=4, context=c)
    remote = list(it)
    same(local, remote)
    stats = it.stats()
    (pool,) = stats["remote"]  # the three chains (Rust, Python, Rust) fuse on the actors
    assert pool["chunks"] > 0 and pool["retries"] == 0
    assert sum(s["chunks"] for s in pool["slots"] if not s["local"]) == pool["chunks"]
    assert "ray:" in str(stats)
    plan = c.offload_plan(ds, seed=11)
    assert any("ray" in d for d in plan["decisions"])


def test_udf_errors_name_the_op_and_sample(cluster):
    def boom(s):
        if s["id"] == 7:
            raise ValueError("bad sample")
        return s

    ds = sluice.range(20).map(boom, name="boom").batch(5)
    with pytest.raises(Exception) as local:
        list(ds.iter(seed=0))
    with pytest.raises(Exception) as remote:
        list(ds.iter(seed=0, context=ctx()))
    assert type(remote.value) is type(local.value)
    assert "boom" in str(remote.value) and "7" in str(remote.value)


def test_split_shards_travel_to_ray_tasks(cluster):
    ds = sluice.range(101).shuffle(seed=5).map(lambda s: {"id": s["id"] * 2}).batch(8)
    parts = ds.split(3)

    @ray.remote(num_cpus=0)
    def trainer(part):
        return [i for b in part.iter(seed=1) for i in b["id"].tolist()]

    got = ray.get([trainer.remote(p) for p in parts])
    assert [len(g) for g in got] == [33, 33, 33]
    union = [i for g in got for i in g]
    assert len(set(union)) == 99 and all(i % 2 == 0 for i in union)
    # Deterministic: the same shards as consumed here.
    assert got == [[i for b in p.iter(seed=1) for i in b["id"].tolist()] for p in parts]


def test_killed_actor_loses_and_duplicates_nothing(cluster):
    def slow(s):
        time.sleep(0.002)
        return {"id": s["id"], "sq": s["id"] * s["id"]}

    ds = sluice.range(1200).shuffle(seed=3).map(slow).batch(10)
    local = [b["id"].tolist() for b in ds.iter(seed=2, chunk_size=8)]
    c = ctx(num_actors=2, in_flight_per_actor=2)
    it = ds.iter(seed=2, chunk_size=8, context=c)
    got = [next(it)["id"].tolist() for _ in range(5)]
    pool = c.pools()[-1]
    victim = pool.actor_handles()[0]
    ray.kill(victim)
    got += [b["id"].tolist() for b in it]
    assert got == local  # same sequence: 0 lost, 0 duplicated, same order
    report = pool.report()
    assert report["retries"] >= 1, report
    assert any("lost" in e for e in report["events"]), report["events"]


def test_resume_from_state_dict_on_ray(cluster, images_dir):
    ds = cv(images_dir)
    full = list(ds.iter(seed=4, chunk_size=3))
    it = ds.iter(seed=4, chunk_size=3, context=ctx())
    head = [next(it) for _ in range(3)]
    state = it.state_dict()
    it.close()
    again = ds.iter(seed=4, chunk_size=3, context=ctx(num_actors=1))
    again.load_state_dict(state)
    same(head + list(again), full)
    # The iterator itself pickles and resumes (on Ray too).
    it2 = ds.iter(seed=4, chunk_size=3, context=ctx(num_actors=1))
    first = next(it2)
    copy = pickle.loads(pickle.dumps(it2))
    it2.close()
    same([first] + list(copy), full)


def test_hybrid_local_and_remote_serve_one_stage(cluster):
    def slow(s, rng):
        time.sleep(0.001)  # long enough that chunks overlap and both kinds of slot serve
        return {"id": s["id"], "r": rng.random()}

    ds = sluice.range(400).map(slow).batch(16)
    local = list(ds.iter(seed=9, chunk_size=4))
    c = ctx(num_actors=1, local_workers=1)
    it = ds.iter(seed=9, chunk_size=4, context=c)
    same(local, list(it))
    slots = it.stats()["remote"][0]["slots"]
    assert {s["local"] for s in slots if s["chunks"]} == {True, False}, slots


def test_autoscale_controller_with_hysteresis():
    from sluice.ray_backend import _Controller

    c = _Controller(min_actors=1, max_actors=3, window_s=1.0, t0=0.0)

    def window(rate, actors, t):
        out = None
        for i in range(rate):
            out = c.observe(actors, now=t + i / rate) or out
        return c.observe(actors, now=t + 1.0)

    assert window(10, 1, 0.0)[0] == +1  # first window: try one more actor
    assert window(20, 2, 1.0)[0] == +1  # +100%: keep adding
    step, why = window(10, 3, 2.0)  # -50%: undo
    assert step == -1 and "undo" in why


def test_break_and_close_leave_no_actor_processes(cluster):
    ds = sluice.range(10_000).map(lambda s: s).batch(4)
    c = ctx(num_actors=2)
    it = ds.iter(seed=0, chunk_size=4, context=c)
    next(it)
    pids = ray.get([h.pid.remote() for h in c.pools()[-1].actor_handles()])
    it.close()
    deadline = time.monotonic() + 15
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids):
        assert time.monotonic() < deadline, f"actor processes {pids} still alive after close()"
        time.sleep(0.2)


def test_missing_ray_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install sluice\[ray\]"):
        sluice.Context("auto").connect()


def test_shutdown_leaves_no_cluster_processes(cluster):
    ray.shutdown()
    deadline = time.monotonic() + 20
    while True:
        left = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                if cluster in " ".join(p.info["cmdline"] or []):
                    left.append(p.info["pid"])
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        if not left:
            break
        assert time.monotonic() < deadline, f"Ray processes {left} outlive ray.shutdown()"
        time.sleep(0.3)
