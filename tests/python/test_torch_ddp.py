"""Two DDP ranks (real torch.distributed, gloo on loopback), each reading through
``to_torch()`` with DataLoader workers: disjoint equal shards, a reshuffle per epoch, gradients
all-reduced over the same number of steps, and a StatefulDataLoader checkpoint taken mid-epoch
resuming exactly."""

import json
import socket

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchdata")

from procs import Child  # noqa: E402

RANK = """
import json, datetime, sys
import numpy as np, torch, torch.distributed as dist
from torchdata.stateful_dataloader import StatefulDataLoader
import sluice

rank = {rank}
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                        timeout=datetime.timedelta(seconds=60))

def noisy(sample, rng):
    return {{"id": sample["id"], "x": rng.normal(size=3).astype(np.float32)}}

ds = sluice.range(51).shuffle(seed=3).map(noisy).batch(4)
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)

def loader():
    return StatefulDataLoader(ds.to_torch(), batch_size=None, num_workers=2)

def step(batch):
    opt.zero_grad()
    model(batch["x"]).pow(2).mean().backward()  # the all-reduce: both ranks must step alike
    opt.step()
    return batch["id"].tolist()

full_loader = loader()
full = [[step(b) for b in full_loader] for _ in range(2)]

first = loader()
[b for b in first]  # epoch 0
it = iter(first)
head = [next(it)["id"].tolist() for _ in range(3)]
state = json.loads(json.dumps(first.state_dict()))  # a checkpoint survives JSON
del it
resumed = loader()
resumed.load_state_dict(state)
rest = [b["id"].tolist() for b in resumed]

weights = [p.detach().sum().item() for p in model.parameters()]
print(json.dumps({{"len": len(ds.to_torch()), "full": full, "head": head, "rest": rest, "weights": weights}}), flush=True)
dist.destroy_process_group()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_ddp_ranks_with_workers_shard_reshuffle_and_resume():
    port = free_port()
    children = [Child(RANK.format(rank=r, port=port)) for r in range(2)]
    try:
        out = [json.loads(c.readline(timeout=240)) for c in children]
    finally:
        for c in children:
            c.__exit__(None, None, None)
    flat = lambda batches: [i for b in batches for i in b]  # noqa: E731
    for r in out:
        assert r["len"] == len(r["full"][0]) == len(r["full"][1]) == 7  # ceil(25 / 4) per rank
        assert flat(r["head"] + r["rest"]) == flat(r["full"][1]), "resumed mid-epoch exactly"
        assert flat(r["full"][0]) != flat(r["full"][1]), "epoch 1 reshuffles"
    for epoch in (0, 1):
        a, b = (flat(r["full"][epoch]) for r in out)
        assert not set(a) & set(b) and len(a) == len(b) == 25
        assert len(set(a) | set(b)) == 50  # 51 // 2 * 2: the tail < world_size is dropped
    assert out[0]["weights"] == out[1]["weights"], "DDP kept the replicas equal"
