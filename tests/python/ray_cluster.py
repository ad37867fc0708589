"""A multi-node Ray cluster on this machine for tests (``ray.cluster_utils.Cluster``).

A head node with no CPUs (the driver's; actors never land there) and ``workers`` worker
nodes of 2 CPUs and 100 MB of object store each, with custom resources ``node0``..``nodeN``
to pin tasks. Health checks run every 0.3 s, so a node killed without notice is declared dead
in about a second (Ray's default takes tens of seconds). Any Ray this process had is shut
down first. It takes ~10 s to start on 2 cores: one per test module.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pathlib
import shutil
import tempfile
import time
from typing import Iterator

import numpy as np

import sluice

SLUICE_ROOT = str(pathlib.Path(sluice.__file__).resolve().parents[1])
FAST_HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 300,
    "health_check_timeout_ms": 300,
    "health_check_failure_threshold": 3,
}

RESOURCE_OF: dict = {}  # worker node -> the index of its custom resource


def digest(batch) -> str:
    """A batch's bytes, names, dtypes and shapes, as one hash (byte-identity checks)."""
    h = hashlib.sha256()
    for key in sorted(batch):
        a = np.asarray(batch[key])
        h.update(key.encode() + str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
    return h.hexdigest()


def add_worker(cluster, index: int):
    node = cluster.add_node(
        num_cpus=2, object_store_memory=100_000_000, resources={f"node{index}": 1}, wait=True
    )
    RESOURCE_OF[node] = index
    return node


def restore(cluster, workers: int) -> None:
    """Adds worker nodes back up to ``workers``, with the custom resources of the missing ones."""
    have = {RESOURCE_OF[n] for n in cluster.worker_nodes}
    for i in range(1, workers + 1):
        if i not in have:
            add_worker(cluster, i)
    cluster.wait_for_nodes()


@contextlib.contextmanager
def cluster(workers: int = 2) -> Iterator:
    import ray
    from ray import cluster_utils

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
    c = cluster_utils.Cluster(
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
        for i in range(1, workers + 1):
            add_worker(c, i)
        c.wait_for_nodes()
        ray.init(address=c.address, log_to_driver=False)
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        # Ray's last processes may still write their session folder as they exit: remove it
        # again once they are gone.
        for _ in range(2):
            shutil.rmtree(tmp, ignore_errors=True)
            time.sleep(1.0)
        shutil.rmtree(tmp, ignore_errors=True)
