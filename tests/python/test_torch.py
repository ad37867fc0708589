"""The PyTorch adapters against real torch: ``to_torch()`` under DataLoader workers, epochs,
DDP ranks and torchdata's StatefulDataLoader; ``iter_torch_batches``; a ResNet-18 learning
from a sluice pipeline. The 2-process DDP run (gloo) with resume is in test_torch_ddp.py."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

import sluice  # noqa: E402
from compare import same  # noqa: E402
from sluice import image as I  # noqa: E402

IMAGES = "examples/fixtures/images"


def noisy(sample, rng):
    # A random augmentation: its draws must follow (seed, epoch, sample) whatever the workers.
    return {"id": sample["id"], "x": rng.normal(size=3).astype(np.float32)}


def pipeline(n=23):
    return sluice.range(n).shuffle(seed=5).map(noisy).batch(4)


def as_numpy(batches):
    return [{k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in b.items()} for b in batches]


def ids(batches):
    return [i for b in batches for i in np.asarray(b["id"]).tolist()]


@pytest.mark.parametrize("workers", [0, 1, 2, 3])
def test_dataloader_workers_deliver_the_single_process_batches(workers):
    tds = pipeline().to_torch()
    got = as_numpy(DataLoader(tds, batch_size=None, num_workers=workers))
    same(got, list(pipeline().iter(epoch=0)))
    assert len(tds) == len(got) == 6


def test_each_loader_pass_is_the_next_epoch_with_workers_and_a_rerun_repeats_them():
    def run(persistent):
        tds = pipeline().to_torch()
        loader = DataLoader(tds, batch_size=None, num_workers=2, persistent_workers=persistent)
        return [as_numpy(loader) for _ in range(3)]

    for persistent in (False, True):
        epochs = run(persistent)
        assert len({tuple(ids(e)) for e in epochs}) == 3, "every pass reshuffles"
        for k, e in enumerate(epochs):
            same(e, list(pipeline().iter(epoch=k)))
        for a, b in zip(epochs, run(persistent)):
            same(a, b)


def test_set_epoch_names_the_epoch():
    tds = pipeline().to_torch()
    loader = DataLoader(tds, batch_size=None, num_workers=2)
    tds.set_epoch(7)
    same(as_numpy(loader), list(pipeline().iter(epoch=7)))
    same(as_numpy(loader), list(pipeline().iter(epoch=7)))
    with pytest.raises(ValueError, match="epoch"):
        tds.set_epoch(-1)


@pytest.mark.parametrize("workers", [0, 2])
def test_ranks_get_disjoint_equal_shards(workers):
    world, seen, lens = 3, [], set()
    for rank in range(world):
        tds = pipeline(n=25).to_torch(rank=rank, world_size=world)
        got = as_numpy(DataLoader(tds, batch_size=None, num_workers=workers))
        assert len(tds) == len(got)
        lens.add(len(got))
        seen += ids(got)
        # A rank's batches are those of its shard (placed where ds.split places it, after
        # the 1:1 maps), for any number of workers.
        rank_ds = sluice.range(25).shuffle(seed=5).map(noisy).shard(rank, world).batch(4)
        same(got, list(rank_ds.iter(epoch=0)))
    assert len(lens) == 1, "every rank runs the same number of steps"
    assert len(seen) == len(set(seen)) == 24  # 25 // 3 * 3: the tail < world_size is dropped


def test_unbatched_pipeline_lets_dataloader_collate_and_loses_nothing():
    ds = sluice.range(22).shuffle(seed=1)
    tds = ds.to_torch()
    got = list(DataLoader(tds, batch_size=4, num_workers=3))
    assert sorted(ids(got)) == list(range(22))
    assert len(tds) == 22


def test_a_filter_before_the_batch_keeps_parts_disjoint_but_has_no_length():
    ds = sluice.range(40).shuffle(seed=2).filter(lambda s: s["id"] % 3 != 0).batch(5)
    tds = ds.to_torch()
    got = ids(DataLoader(tds, batch_size=None, num_workers=2))
    assert sorted(got) == [i for i in range(40) if i % 3]
    with pytest.raises(TypeError, match="filter"):
        len(tds)


@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_dataloader_resumes_exactly_and_the_epochs_after_follow(workers):
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader():
        return StatefulDataLoader(pipeline(n=41).to_torch(), batch_size=None, num_workers=workers)

    full = loader()
    expected = [as_numpy(full) for _ in range(3)]
    first = loader()
    as_numpy(first)  # epoch 0
    it = iter(first)
    head = as_numpy([next(it) for _ in range(4)])  # epoch 1, four batches in
    state = first.state_dict()
    del it

    resumed = loader()
    resumed.load_state_dict(state)
    rest = as_numpy(resumed)
    same(head + rest, expected[1])
    same(as_numpy(resumed), expected[2])


def test_bare_dataset_in_a_dataloader_names_to_torch():
    with pytest.raises(TypeError, match=r"to_torch\(\)"):
        list(DataLoader(sluice.range(4)))
    with pytest.raises(TypeError, match=r"to_torch\(\)"):
        list(DataLoader(sluice.range(4).filter(lambda s: True)))


def test_bad_arguments():
    ds = pipeline()
    with pytest.raises(ValueError, match="both rank and world_size"):
        ds.to_torch(rank=0)
    with pytest.raises(ValueError, match="rank must be < world_size"):
        ds.to_torch(rank=2, world_size=2)
    with pytest.raises(ValueError, match="already has a shard"):
        list(sluice.range(8).shard(0, 2).batch(2).to_torch(rank=1, world_size=2))
    # A checkpoint of another worker layout is refused, not misapplied.
    taken = iter(pipeline().to_torch())
    next(taken)
    bad = {**taken.state_dict(), "num_workers": 2}
    epoch = iter(pipeline().to_torch())
    with pytest.raises(ValueError, match="same num_workers"):
        epoch.load_state_dict(bad)
    with pytest.raises(ValueError, match="not a checkpoint"):
        epoch.load_state_dict({"x": 1})


def test_user_sharded_pipeline_splits_over_workers_within_its_shard():
    ds = sluice.range(30).shuffle(seed=3).shard(1, 2).batch(4)
    got = as_numpy(DataLoader(ds.to_torch(), batch_size=None, num_workers=2))
    same(got, list(ds.iter(epoch=0)))


def test_iter_torch_batches_on_the_cpu():
    ds = sluice.from_items([{"x": np.full(3, i, np.uint8), "name": f"n{i}"} for i in range(5)]).batch(2)
    out = list(ds.iter_torch_batches(dtypes={"x": torch.float16}))
    assert [b["x"].dtype for b in out] == [torch.float16] * 3
    assert out[0]["x"].tolist() == [[0, 0, 0], [1, 1, 1]] and out[2]["name"] == ["n4"]
    # Without a cast the tensor is the batch's memory (torch.from_numpy), not a copy.
    from sluice.pytorch import to_tensors

    batch = next(iter(ds))
    t = to_tensors(batch, {})["x"]
    batch["x"][0, 0] = 99
    assert t[0, 0].item() == 99
    # Each call is the next epoch, like a loop over the dataset.
    shuffled = sluice.range(12).shuffle(seed=0).batch(12)
    a, b = (next(iter(shuffled.iter_torch_batches()))["id"].tolist() for _ in range(2))
    assert a != b and sorted(a) == sorted(b)


def test_iter_torch_batches_bad_input():
    ds = sluice.from_items([{"x": np.zeros(2), "s": "a"}]).batch(1)
    with pytest.raises(KeyError, match="nope"):
        list(ds.iter_torch_batches(dtypes={"nope": torch.float32}))
    with pytest.raises(TypeError, match="'s' is not an array"):
        list(ds.iter_torch_batches(dtypes={"s": torch.float32}))
    with pytest.raises(TypeError, match="dtypes must be a dict"):
        list(ds.iter_torch_batches(dtypes=[torch.float32]))
    with pytest.raises(ValueError, match="prefetch"):
        list(ds.iter_torch_batches(prefetch=-1))
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA device"):
            list(ds.iter_torch_batches(device="cuda"))
        with pytest.warns(UserWarning, match="pin_memory"):
            assert len(list(ds.iter_torch_batches(pin_memory=True))) == 1


def test_resnet18_learns_from_a_sluice_pipeline_through_dataloader_workers():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    train = (
        sluice.read_images(IMAGES, labels="parent_dir")
        .repeat(6)
        .shuffle(seed=0)
        .map(I.decode())
        .map(I.random_resized_crop(64, scale=(0.6, 1.0)))
        .map(I.horizontal_flip(0.5))
        .map(I.normalize(mean, std))
        .batch(8, drop_last=True)
    )
    evaluation = (
        sluice.read_images(IMAGES, labels="parent_dir").map(I.decode()).map(I.resize(72)).map(I.center_crop(64))
        .map(I.normalize(mean, std)).batch(8)
    )
    classes = len(train.class_names)
    model = torchvision.models.resnet18(num_classes=classes)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def eval_loss():
        # Batch statistics (train mode): a dozen steps do not settle BatchNorm's running ones.
        with torch.no_grad():
            b = next(evaluation.iter_torch_batches(epoch=0))
            return loss_fn(model(b["image"]), b["label"]).item()

    before = eval_loss()
    tds = train.to_torch()
    loader = DataLoader(tds, batch_size=None, num_workers=2)
    steps = 0
    model.train()
    for _ in range(2):
        for b in loader:
            assert b["image"].shape == (8, 3, 64, 64) and b["image"].dtype == torch.float32
            opt.zero_grad()
            loss_fn(model(b["image"]), b["label"]).backward()
            opt.step()
            steps += 1
    assert steps == 2 * len(tds) == 12
    assert eval_loss() < before / 2  # measured: 1.2 -> 0.02


class Squares(torch.utils.data.Dataset):
    """A torch map-style dataset returning tensors, as torch users write them."""

    def __len__(self):
        return 30

    def __getitem__(self, i):
        return {"x": torch.full((2,), float(i * i)), "label": torch.tensor(i % 3), "i": i}


def test_from_source_over_a_torch_map_style_dataset_shuffles_shards_and_resumes():
    ds = sluice.from_source(Squares()).shuffle(seed=4).shard(1, 2).batch(4)
    first = list(ds.iter(epoch=0))
    assert first[0]["x"].dtype == np.float32 and first[0]["x"].shape == (4, 2)
    got = [i for b in first for i in b["i"].tolist()]
    assert len(got) == 15 and len(set(got)) == 15
    assert all(b["x"][:, 0].tolist() == [float(i * i) for i in b["i"].tolist()] for b in first)
    assert [i for b in ds.iter(epoch=1) for i in b["i"].tolist()] != got  # reshuffled
    it = ds.iter(epoch=0)
    next(it)
    state = it.state_dict()
    again = ds.iter(epoch=0)
    again.load_state_dict(state)
    same(list(again), first[1:])


def test_resnet18_trains_from_iter_torch_batches_seeing_each_sample_once_per_epoch():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    ds = (
        sluice.read_images(IMAGES, labels="parent_dir")
        .shuffle(seed=1)
        .map(I.decode())
        .map(I.random_resized_crop(32, scale=(0.5, 1.0)))
        .map(I.to_tensor())
        .batch(4)
    )
    model = torchvision.models.resnet18(num_classes=3)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    orders, losses = [], []
    for _ in range(3):
        paths = []
        for b in ds.iter_torch_batches(dtypes={"image": torch.float32}):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(b["image"]), b["label"])
            loss.backward()
            opt.step()
            losses.append(loss.item())
            paths += b["path"]
        assert sorted(paths) == sorted(set(paths)) and len(paths) == 8  # each image once
        orders.append(paths)
    assert orders[0] != orders[1] != orders[2]  # every epoch reshuffles
    assert np.isfinite(losses).all()


def test_an_epoch_iterator_resumes_from_its_own_state_without_torchdata():
    expected = as_numpy(iter(pipeline().to_torch()))
    taken = iter(pipeline().to_torch())
    head = as_numpy([next(taken), next(taken)])
    state = taken.state_dict()
    taken.close()
    assert taken.state_dict() == state, "a closed epoch keeps where it stood"
    again = iter(pipeline().to_torch())
    again.load_state_dict(state)
    same(head + as_numpy(again), expected)
