"""sluice on a real local Ray cluster: byte-identical output, split to trainers, UDF shipping,
fault tolerance (an actor killed mid-epoch), resume, hybrid placement (AutoPlacement), the
offload rule's choices, clear errors, clean shutdown.

One cluster shared by the module (Ray's startup takes seconds), started by the first test
that needs it and again by any test after one that shut it down, so tests pass in any
order. Actors take no CPU reservation so a test's leftover actors can never starve the next
test's. Ray's workers inherit ``PYTHONPATH`` with this checkout's ``python/`` first, so
actors import the same sluice as the test (checked by ``test_workers_import_this_sluice``).
"""

import os
import pathlib
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


SLUICE_ROOT = str(pathlib.Path(sluice.__file__).resolve().parents[1])
_CLUSTERS: list[str] = []  # temp dirs of the clusters this module started


def _start_cluster() -> str:
    # A short path: Ray's unix sockets live under it (108-byte limit).
    tmp = tempfile.mkdtemp(prefix="sr", dir="/tmp")
    # The raylet and every worker it spawns inherit this environment.
    path = os.environ.get("PYTHONPATH", "")
    if not path.startswith(SLUICE_ROOT):
        os.environ["PYTHONPATH"] = SLUICE_ROOT + (os.pathsep + path if path else "")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=100_000_000,
        _temp_dir=tmp,
        log_to_driver=False,
    )
    _CLUSTERS.append(tmp)
    return tmp


@pytest.fixture(scope="module", autouse=True)
def _module_cluster():
    yield
    if ray.is_initialized():
        ray.shutdown()
    for tmp in _CLUSTERS:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def cluster():
    """The module's running cluster (its temp dir), started if none runs."""
    if not ray.is_initialized():
        _start_cluster()
    return _CLUSTERS[-1]


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


def test_workers_import_this_sluice(cluster):
    @ray.remote(num_cpus=0)
    def where():
        import sluice as s

        return s.__file__

    assert ray.get(where.remote()) == sluice.__file__


def test_output_is_byte_identical_to_local(cluster, images_dir, tmp_path):
    ds = cv(images_dir, k=3)  # the lambda closes over k: shipped by cloudpickle
    local = list(ds.iter(seed=11, epoch=0, chunk_size=4))
    c = ctx()
    it = ds.iter(seed=11, epoch=0, chunk_size=4, context=c)
    remote = list(it)
    same(local, remote)
    stats = it.stats()
    (pool,) = stats["remote"]  # the three chains (Rust, Python, Rust) fuse on the actors
    assert pool["chunks"] > 0 and pool["retries"] == 0
    assert sum(s["chunks"] for s in pool["slots"] if not s["local"]) == pool["chunks"]
    assert "ray:" in str(stats)
    # Transfer volume: the actors got request frames and sent back the crops (24×24×3 bytes
    # per sample at least).
    assert pool["sent_bytes"] > 0 and pool["received_bytes"] >= pool["samples"] * 24 * 24 * 3 > 0
    assert pool["sent_bytes"] == sum(s["sent_bytes"] for s in pool["slots"])
    page = it.report(tmp_path / "ray.html")
    assert "Ray: " in open(page).read() and "sent to actors" in open(page).read()
    plan = c.explicit_plan(ds, seed=11)
    assert any("→ ray (2 workers)" in d for d in plan.decisions), plan.decisions
    # Replies as one byte frame (the path before zero-copy results) give the same bytes.
    same(local, list(ds.iter(seed=11, epoch=0, chunk_size=4, context=ctx(zero_copy=False))))
    # Tensors big enough to leave the frame come back through the object store intact.
    big = big_outputs()
    same(list(big.iter(seed=2, epoch=0, chunk_size=4)), list(big.iter(seed=2, epoch=0, chunk_size=4, context=ctx())))


class _Rows:
    """A user's map-style dataset (``from_source``): it stays in the driver; its items travel."""

    def __len__(self):
        return 30

    def __getitem__(self, i):
        return {"id": i, "x": np.arange(3, dtype=np.float32) * i}


def test_from_source_items_travel_to_actors(cluster):
    ds = sluice.from_source(_Rows()).shuffle(seed=1).map(lambda s, rng: {**s, "r": rng.random()}).batch(4)
    local = list(ds.iter(seed=3, epoch=0, chunk_size=4))
    it = ds.iter(seed=3, epoch=0, chunk_size=4, context=ctx())
    same(local, list(it))
    (pool,) = it.stats()["remote"]
    assert pool["chunks"] > 0


def big_outputs(n=24):
    # 160 KB per sample: above the split threshold, so it travels out of band.
    return sluice.range(n).map(lambda s, rng: {"id": s["id"], "x": np.full(40_000, rng.random(), np.float32)}).batch(4)


def test_split_replies_carry_tensors_out_of_band():
    """The reply protocol with a test double for the pool (no cluster): tensors leave the
    frame as uint8 arrays that pickle protocol 5 — Ray's serializer — carries out of band."""
    from sluice import _native

    seen = []

    class SplitPool:
        def __init__(self, init, workers, label):
            self.worker, self.parallelism = _native.ChainWorker(init), 1

        def run(self, frame, items):
            head, bufs = self.worker.run_split(frame)
            oob = []
            pickle.dumps((head, bufs), protocol=5, buffer_callback=oob.append)
            seen.append((items, len(bufs), len(oob), {b.dtype.name for b in bufs}, len(head)))
            return head, bufs

        def shutdown(self):
            pass

    ds = big_outputs()
    it = ds._native.iter(7, None, 4, ray_factory=SplitPool, actors=1)
    got = [dict(b) for b in it]
    same(list(ds.iter(seed=7, epoch=0, chunk_size=4)), got)
    assert seen and all(n == 4 and bufs == 4 == oob and kinds == {"uint8"} for n, bufs, oob, kinds, _ in seen), seen
    assert all(head < 2_000 for *_, head in seen), "the frame holds no tensor bytes"


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
    local = [b["id"].tolist() for b in ds.iter(seed=2, epoch=0, chunk_size=8)]
    c = ctx(num_actors=2, in_flight_per_actor=2)
    it = ds.iter(seed=2, epoch=0, chunk_size=8, context=c)
    got = [next(it)["id"].tolist() for _ in range(5)]
    pool = c.pools()[-1]
    victim = pool.actor_handles()[0]
    ray.kill(victim)
    got += [b["id"].tolist() for b in it]
    assert got == local  # same sequence: 0 lost, 0 duplicated, same order
    report = pool.report()
    assert report["retries"] >= 1, report
    assert any("lost" in e for e in report["events"]), report["events"]


@pytest.mark.parametrize("zero_copy", [True, False])
def test_an_actor_ended_by_ray_mid_chunk_is_a_lost_actor_not_a_bad_sample(cluster, tmp_path, zero_copy):
    """Ray ends the actors of a node being drained by raising SystemExit in them, wherever
    they are — here inside the stage's function. That chunk runs again on another actor; it
    used to be answered as the chunk's error, failing the run with ``SystemExit: 1`` (seen
    once in test_ray_cluster.py's drain test). Both reply forms: split (zero-copy) and one
    frame."""
    marker = tmp_path / "ended-once"

    def work(s):
        if s["id"] == 40 and not marker.exists():
            marker.write_text("x")
            raise SystemExit(1)
        return {"id": s["id"], "sq": s["id"] * s["id"]}

    ds = sluice.range(200).shuffle(seed=3).map(work).batch(10)
    marker.write_text("x")  # not in the local run
    local = [b["id"].tolist() for b in ds.iter(seed=2, epoch=0, chunk_size=8)]
    marker.unlink()
    c = ctx(num_actors=2, zero_copy=zero_copy)
    got = [b["id"].tolist() for b in ds.iter(seed=2, epoch=0, chunk_size=8, context=c)]
    assert marker.exists(), "the function never ended its actor"
    assert got == local  # 0 lost, 0 duplicated, same order
    assert c.pools()[-1].report()["retries"] >= 1


def test_resume_from_state_dict_on_ray(cluster, images_dir):
    ds = cv(images_dir)
    full = list(ds.iter(seed=4, epoch=0, chunk_size=3))
    it = ds.iter(seed=4, epoch=0, chunk_size=3, context=ctx())
    head = [next(it) for _ in range(3)]
    state = it.state_dict()
    it.close()
    again = ds.iter(seed=4, epoch=0, chunk_size=3, context=ctx(num_actors=1))
    again.load_state_dict(state)
    same(head + list(again), full)
    # The iterator itself pickles and resumes (on Ray too).
    it2 = ds.iter(seed=4, epoch=0, chunk_size=3, context=ctx(num_actors=1))
    first = next(it2)
    copy = pickle.loads(pickle.dumps(it2))
    it2.close()
    same([first] + list(copy), full)


def test_hybrid_local_and_remote_serve_one_stage(cluster):
    def slow(s, rng):
        time.sleep(0.001)  # long enough that chunks overlap and both kinds of slot serve
        return {"id": s["id"], "r": rng.random()}

    ds = sluice.range(400).map(slow).batch(16)
    local = list(ds.iter(seed=9, epoch=0, chunk_size=4))
    c = ctx(num_actors=1, local_workers=1)
    it = ds.iter(seed=9, epoch=0, chunk_size=4, context=c)
    same(local, list(it))
    slots = it.stats()["remote"][0]["slots"]
    assert {s["local"] for s in slots if s["chunks"]} == {True, False}, slots


def test_autoplacement_on_the_cluster_moves_workers_and_says_why(cluster):
    def make(delay):
        def slow(s, rng):
            if delay:
                time.sleep(delay)  # releases the GIL: every worker added adds throughput
            return {"id": s["id"], "r": rng.random()}

        return sluice.range(1600).map(slow).batch(16)

    expected = list(make(0).iter(seed=5, chunk_size=4))
    c = ctx(
        num_actors=1,
        autoscale=True,
        min_actors=1,
        max_actors=2,
        max_local_workers=1,
        autoscale_window_s=0.25,
    )
    it = make(0.002).iter(seed=5, chunk_size=4, context=c)
    same(expected, list(it))
    (pool,) = it.stats()["remote"]
    decisions = pool["decisions"]
    assert decisions, pool["events"]
    first = decisions[0]
    assert (first["state"], first["remote"], first["remote_actors"]) == ("scale_remote", 1, 2), first
    assert all(d["reason"] and d["rate"] > 0 and "cost_per_hour" in d for d in decisions)
    # The added actor served chunks; the pool's figures and the text report show the state.
    assert any(s["name"] == "actor-2" and s["chunks"] > 0 for s in pool["slots"]), pool["slots"]
    assert pool["placement"]["state"] == decisions[-1]["state"] or pool["placement"]["state"]
    assert pool["samples"] == 1600
    assert "[scale_remote]" in str(it.stats())


def test_enable_offload_moves_the_cpu_heavy_stage_and_not_the_cheap_one(cluster):
    def heavy(s):
        x = 0
        for i in range(30_000):  # ~2 ms of GIL-bound CPU
            x += i * i
        return {"id": s["id"], "x": x % 97 + s["id"]}

    def cheap(s):
        return {**s, "y": s["x"] + 1}

    ds = (
        sluice.range(240)
        .map(heavy, name="heavy")
        .map(sluice.ops.select(["id", "x"]))
        .map(cheap, name="cheap")
        .batch(10)
    )
    c = ctx(num_actors=None)
    # The offload rule's own plan (the fallback to the default plan has tests of its own).
    rule_only = sluice.OptimizerOptions(enable_offload=True, enable_fallback=False)
    plan = c.optimize(ds, ds.profile(samples=40), rule_only)
    ray_stages = [s for s in plan.stages if s.get("backend") == "ray"]
    assert [s["label"] for s in ray_stages] in (["heavy"], ["read+heavy"]), str(plan)
    assert ray_stages[0]["workers"] == 2, str(plan)  # both CPUs of this one-node cluster
    assert any("cheap stays local" in d for d in plan.decisions), plan.decisions
    assert plan.data["options"]["remote_cpus"] == 2 and plan.data["options"]["remote_shares_local_cores"]
    assert plan.predicted_throughput > 0 and plan.bottleneck
    it = ds.iter(seed=3, epoch=0, plan=plan, context=c)
    same(list(ds.iter(seed=3, epoch=0)), list(it))
    (pool,) = it.stats()["remote"]
    assert "heavy" in pool["stage"] and "cheap" not in pool["stage"]


def test_unreachable_cluster_fails_fast_and_clearly():
    for address in ("ray://127.0.0.1:1", "127.0.0.1:1"):
        t = time.monotonic()
        with pytest.raises(ConnectionError, match=r"cannot reach the Ray cluster at .*127\.0\.0\.1:1"):
            list(sluice.range(4).iter(context=sluice.Context(address, connect_timeout_s=2)))
        assert time.monotonic() - t < 5, address


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


def test_context_checks_its_options():
    for bad in (
        {"local_cpu_price": -1},
        {"slack": -0.1},
        {"autoscale_window_s": 0},
        {"min_actors": -1},
        {"max_local_workers": 1.5},
        {"remote_cpus": "8"},
    ):
        with pytest.raises(ValueError):
            sluice.Context("auto", **bad)
    ok = sluice.Context("auto", min_actors=0, local_workers=1, target_throughput=500.0)
    assert ok.remote and ok.zero_copy


def test_missing_ray_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install sluice\[ray\]"):
        sluice.Context("auto").connect()


def _processes_of(tmp: str) -> set[int]:
    """Processes whose command line names the cluster's temp dir (raylet, GCS, workers)."""
    found = set()
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if tmp in " ".join(p.info["cmdline"] or []):
                found.add(p.info["pid"])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_shutdown_leaves_no_cluster_processes(cluster):
    # Something must run for the check to mean anything: a pipeline's actors, mid-epoch.
    ds = sluice.range(10_000).map(lambda s: s).batch(4)
    c = ctx(num_actors=2)
    it = ds.iter(seed=0, chunk_size=4, context=c)
    next(it)
    actors = set(ray.get([h.pid.remote() for h in c.pools()[-1].actor_handles()]))
    before = _processes_of(cluster) | actors
    assert len(actors) == 2 and all(_alive(p) for p in actors)
    assert len(before - actors) >= 2, "the raylet and GCS should name the temp dir"
    ray.shutdown()
    deadline = time.monotonic() + 20
    while left := sorted(p for p in before if _alive(p)):
        assert time.monotonic() < deadline, f"Ray processes {left} outlive ray.shutdown()"
        time.sleep(0.3)
    # The iterator whose cluster vanished stops without hanging.
    t = time.monotonic()
    with pytest.raises(Exception):
        for _ in it:
            pass
    it.close()
    assert time.monotonic() - t < 15
    assert not ray.is_initialized(), "the pipeline must not start a new cluster"


def test_tokenizer_objects_travel_to_actors(cluster):
    tokenizers = pytest.importorskip("tokenizers")
    from sluice import text

    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel({"[UNK]": 0, "a": 1, "b": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    # The op carries the tokenizer's JSON: the actors rebuild it with no file to read.
    ds = sluice.from_items([{"text": f"a b {i} b"} for i in range(20)]).map(text.tokenize(tok)).batch(4)
    local = list(ds.iter(chunk_size=4))
    same(local, list(ds.iter(chunk_size=4, context=ctx())))
    assert local[0]["input_ids"][0].tolist() == tok.encode("a b 0 b").ids == [1, 2, 0, 2]


def test_a_function_before_sort_runs_on_the_actors(cluster):
    # Was: the input of sort() ran on threads of the training process under a Ray context.
    import os

    def pid_of(s):  # defined here: pickled by value, the actors cannot import this module
        import os

        return {"id": s["id"], "pid": os.getpid()}

    rows = list(sluice.range(60).map(pid_of).sort("id").iter(context=ctx(), chunk_size=4))
    assert [r["id"] for r in rows] == list(range(60))
    assert os.getpid() not in {r["pid"] for r in rows}


def test_write_shards_runs_the_conversion_on_actors(cluster, images_dir, tmp_path):
    driver = os.getpid()
    ds = sluice.read_images(images_dir).map(lambda s: {"jpg": s["bytes"], "pid": os.getpid()})
    files = ds.write_shards(str(tmp_path / "out"), shard_size=4096, context=ctx())
    assert files and all(f.endswith(".tar") for f in files)
    back = list(sluice.read_webdataset(str(tmp_path / "out"), index=True))
    want = [bytes(s["bytes"]) for s in sluice.read_images(images_dir)]
    assert [bytes(s["jpg"]) for s in back] == want
    assert {int(bytes(s["pid"])) for s in back}.isdisjoint({driver})
