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

import os
import signal
import sys
import time

import numpy as np
import pytest

import ray_cluster
import sluice

ray = pytest.importorskip("ray")

WORKERS = 2


@pytest.fixture(scope="module")
def nodes():
    with ray_cluster.cluster(WORKERS) as c:
        yield c


def _restore(cluster) -> None:
    ray_cluster.restore(cluster, WORKERS)


_digest = ray_cluster.digest


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


def test_node_killed_mid_epoch_with_work_in_flight_loses_and_duplicates_nothing(nodes):
    """The node's raylet is killed without notice while its actors hold chunks: some running,
    some finished with replies this process has not taken yet (it keeps the GIL meanwhile, so
    the pool's threads cannot take them). Which of those calls fail, and how, is Ray's to
    decide and depends on timing: a running chunk dies with its actor (``ActorDiedError``); a
    finished one's reply is lost with the node's object store (``ObjectLostError``) unless
    Ray's own pull already copied it here. Whatever the mix, every failure must be one the
    pool reruns, and the epoch must come out whole and in order. That each kind is taken as
    a loss is checked without a cluster in ``test_ray_errors_that_lose_a_chunk_rerun_it``."""
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
        sys.setswitchinterval(1000)
        t = time.monotonic()
        while time.monotonic() - t < 1.8:  # no system call: the GIL stays here
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
    lost = {"ActorDiedError", "ObjectLostError", "ObjectReconstructionFailedError", "ObjectFetchTimedOutError"}
    assert set(report["retry_causes"]) <= lost, report["retry_causes"]


def test_ray_errors_that_lose_a_chunk_rerun_it():
    """How the shim reads a failed call, with Ray's own exception types: losing the actor, its
    node or the reply in its object store makes the chunk run again; the function failing
    does not (that is the user's error, raised with the sample named)."""
    import concurrent.futures

    from ray import exceptions as rx

    from sluice.ray_backend import RayShim

    class _Ctx:
        actor_cpus, runtime_env, zero_copy = 1, None, False

    shim = RayShim(_Ctx())

    def read(error):
        f = concurrent.futures.Future()
        f.set_exception(error)
        return shim.result(f)

    ref = ray.ObjectRef.from_random()
    rerun = {
        "ObjectLostError": rx.ObjectLostError(ref.hex(), "", ""),
        "ObjectReconstructionFailedError": rx.ObjectReconstructionFailedError(ref.hex(), "", ""),
        "ObjectFetchTimedOutError": rx.ObjectFetchTimedOutError(ref.hex(), "", ""),
        "ActorDiedError": rx.ActorDiedError(),
        "NodeDiedError": rx.NodeDiedError("node gone"),
    }
    for name, error in rerun.items():
        ok, (lost, cause, _message, raised) = read(error)
        assert (ok, lost, cause, raised) == (False, True, name, error), name
    ok, (lost, cause, _message, _raised) = read(rx.RayTaskError("work", "Traceback ...", ValueError("bad sample")))
    assert (ok, lost, cause) == (False, False, "RayTaskError")
    f = concurrent.futures.Future()
    f.set_result(b"reply")
    assert shim.result(f) == (True, b"reply")


def test_losing_every_worker_node_fails_clearly_instead_of_hanging(nodes):
    ds = _pipeline()
    # Long enough for the first actors to start on a loaded machine (a worker process imports
    # sluice and numpy), short enough that the lost ones' replacements give up well within
    # the bound below.
    start_timeout = 15
    ctx = _ctx(actor_start_timeout_s=start_timeout)
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
    assert time.monotonic() - t < 6 * start_timeout, "gave up after the actor start timeout, not never"
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
