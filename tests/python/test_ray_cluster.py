"""sluice on a multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``): a whole
node removed mid-epoch while a stage runs on its actors, every worker node lost, and
``split()`` consumers pinned to different nodes.

The cluster: a head node with no CPUs (the driver's; actors never land there) and two worker
nodes of 2 CPUs and 100 MB of object store each, with custom resources ``node0``..``node2``
to pin tasks. Health checks run every 0.3 s, so a node killed without notice is declared dead
in about a second (Ray's default takes tens of seconds). One cluster for the module (it takes
~10 s to start on 2 cores); tests that remove nodes add fresh ones back, so tests pass in any
order. Any single-node cluster another module left running is shut down first
(``test_ray.py`` starts its own again when it needs one).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import signal
import sys
import tempfile
import time

import numpy as np
import pytest

import sluice

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

SLUICE_ROOT = str(pathlib.Path(sluice.__file__).resolve().parents[1])
WORKERS = 2
FAST_HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 300,
    "health_check_timeout_ms": 300,
    "health_check_failure_threshold": 3,
}


_RESOURCE_OF: dict = {}  # worker node -> the index of its custom resource


def _add_worker(cluster, index: int):
    node = cluster.add_node(
        num_cpus=2, object_store_memory=100_000_000, resources={f"node{index}": 1}, wait=True
    )
    _RESOURCE_OF[node] = index
    return node


@pytest.fixture(scope="module")
def nodes():
    if ray.is_initialized():
        ray.shutdown()
    saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "RAY_AUTH_MODE", "PYTHONPATH")}
    # A short private directory: Ray's unix sockets live under it (108-byte limit), and the
    # cluster writes its address file there, not into a /tmp/ray other runs share.
    tmp = tempfile.mkdtemp(prefix="sc", dir="/tmp")
    os.makedirs(os.path.join(tmp, "ray"))
    os.environ["RAY_TMPDIR"] = tmp
    # No authentication between the cluster's processes — unless Ray already ran in this
    # process (test_ray.py): its first ray.init set RAY_AUTH_MODE=token and the driver keeps
    # that, so the cluster must use the same mode or it drops the driver as a failed worker.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    path = os.environ.get("PYTHONPATH", "")
    if not path.startswith(SLUICE_ROOT):  # workers import this checkout's sluice
        os.environ["PYTHONPATH"] = SLUICE_ROOT + (os.pathsep + path if path else "")
    cluster = cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "resources": {"node0": 1},
            "object_store_memory": 100_000_000,
            "include_dashboard": False,
            "_system_config": FAST_HEALTH_CHECKS,
        },
    )
    try:
        for i in range(1, WORKERS + 1):
            _add_worker(cluster, i)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(tmp, ignore_errors=True)


def _restore(cluster) -> None:
    """Adds worker nodes back up to WORKERS, with the custom resources of the missing ones."""
    have = {_RESOURCE_OF[n] for n in cluster.worker_nodes}
    for i in range(1, WORKERS + 1):
        if i not in have:
            _add_worker(cluster, i)
    cluster.wait_for_nodes()


def _digest(batch) -> str:
    h = hashlib.sha256()
    for key in sorted(batch):
        a = np.asarray(batch[key])
        h.update(key.encode() + str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
    return h.hexdigest()


def _work(delay: float):
    """The stage's UDF; made here (not at module level) so cloudpickle ships it by value."""

    def work(s, rng):
        time.sleep(delay)
        # 200 KB per sample: replies go through the object store of the actor's node.
        return {"id": s["id"], "x": np.full(50_000, s["id"], np.float32), "r": rng.random()}

    return work


def _pipeline(delay=0.003, n=480):
    return sluice.range(n).shuffle(seed=3).map(_work(delay), name="work").batch(8)


def _ctx(**kw):
    return sluice.Context("auto", num_actors=2, actor_cpus=1, in_flight_per_actor=2, **kw)


def _victim(cluster, pool):
    """A worker node hosting at least one of the pool's actors."""
    actor_nodes = ray.get([h.node_id.remote() for h in pool.actor_handles()], timeout=30)
    return next(n for n in cluster.worker_nodes if n.node_id in actor_nodes)


def _check_recovered(pool, got, expected):
    # Byte-identical and in order: nothing lost, nothing twice.
    assert len(got) == len(expected)
    assert got == expected
    report = pool.report()
    assert report["retries"] >= 1, report
    assert any("lost" in e for e in report["events"]), report["events"]
    return report


def test_node_drained_mid_epoch_loses_and_duplicates_nothing(nodes):
    ds = _pipeline()
    expected = [_digest(b) for b in ds.iter(seed=2, epoch=0, chunk_size=8)]
    ctx = _ctx(actor_start_timeout_s=30)
    it = ds.iter(seed=2, epoch=0, chunk_size=8, context=ctx)
    try:
        got = [_digest(next(it)) for _ in range(5)]
        pool = ctx.pools()[-1]
        nodes.remove_node(_victim(nodes, pool), allow_graceful=True)
        got += [_digest(b) for b in it]
    finally:
        it.close()
        _restore(nodes)
    _check_recovered(pool, got, expected)


def test_node_killed_with_replies_in_its_object_store_loses_and_duplicates_nothing(nodes):
    """The node dies after its actors finished chunks whose replies this process had not
    fetched yet: they are lost with its object store (``ObjectLostError``), not with an actor
    call. To make that certain rather than a race, this thread keeps the GIL (a long switch
    interval, a busy loop without system calls) while the actors finish their chunks, so the
    pool's threads cannot start fetching them, and kills the node's raylet meanwhile."""
    # A chunk of 8 takes 0.8 s: longer than the pool's 0.5 s wait steps.
    ds = _pipeline(delay=0.1, n=96)
    expected = [_digest(b) for b in ds.iter(seed=2, epoch=0, chunk_size=8, num_threads=8)]
    ctx = _ctx(actor_start_timeout_s=30)
    it = ds.iter(seed=2, epoch=0, chunk_size=8, context=ctx)
    switch = sys.getswitchinterval()
    try:
        got = [_digest(next(it))]
        pool = ctx.pools()[-1]
        victim = _victim(nodes, pool)
        raylets = [p.process.pid for p in victim.all_processes["raylet"]]
        # Each actor is running one chunk and has one queued (in_flight_per_actor=2): both
        # finish within 1.6 s; the fetches in progress give up within 0.5 s.
        sys.setswitchinterval(1000)
        t = time.monotonic()
        while time.monotonic() - t < 1.8:
            pass
        for pid in raylets:
            os.kill(pid, signal.SIGKILL)
        sys.setswitchinterval(switch)
        nodes.remove_node(victim, allow_graceful=False)
        got += [_digest(b) for b in it]
    finally:
        sys.setswitchinterval(switch)
        it.close()
        _restore(nodes)
    report = _check_recovered(pool, got, expected)
    lost = {"ObjectLostError", "ObjectReconstructionFailedError", "ObjectFetchTimedOutError"}
    assert lost & set(report["retry_causes"]), report["retry_causes"]


def test_losing_every_worker_node_fails_clearly_instead_of_hanging(nodes):
    ds = _pipeline()
    ctx = _ctx(actor_start_timeout_s=4)
    it = ds.iter(seed=2, chunk_size=8, context=ctx)
    t = time.monotonic()
    try:
        next(it)
        for n in list(nodes.worker_nodes):
            nodes.remove_node(n, allow_graceful=False)
        with pytest.raises(Exception, match="no worker left") as e:
            for _ in it:
                pass
    finally:
        it.close()
        _restore(nodes)
    assert time.monotonic() - t < 60, "gave up after the actor start timeout, not never"
    assert "stage read+work" in str(e.value), e.value


def test_split_consumers_on_different_nodes_get_disjoint_equal_complete_shards(nodes):
    ds = sluice.range(3 * 67).shuffle(seed=5).map(lambda s: {"id": s["id"], "sq": s["id"] ** 2}).batch(4)
    parts = ds.split(3)

    @ray.remote(num_cpus=0)
    def consume(part):
        ids = [i for b in part.iter(seed=1) for i in b["id"].tolist()]
        return ray.get_runtime_context().get_node_id(), ids

    refs = [consume.options(resources={f"node{r}": 0.1}).remote(p) for r, p in enumerate(parts)]
    got = ray.get(refs, timeout=120)
    where = [node for node, _ in got]
    assert len(set(where)) == 3, where  # one consumer per node
    assert set(where) == {n.node_id for n in [nodes.head_node, *nodes.worker_nodes]}
    shards = [ids for _, ids in got]
    assert [len(s) for s in shards] == [67, 67, 67]
    assert sorted(i for s in shards for i in s) == list(range(201))  # disjoint and complete
    # The same shards, in the same order, as consuming the parts here.
    assert shards == [[i for b in p.iter(seed=1) for i in b["id"].tolist()] for p in parts]
