"""Train an image classifier the ImageNet way: a folder of JPEGs per class, decoded and
augmented by sluice, a torchvision ResNet, DataLoader-compatible and DDP-ready, with
checkpoints that resume mid-epoch exactly.

    python examples/train_resnet.py                       # the committed fixture photos
    python examples/train_resnet.py --data /data/imagenet/train --size 224 --batch 256 --epochs 90
    torchrun --nproc-per-node 8 examples/train_resnet.py --data ...   # DDP: one shard per rank

Stop it at any point (Ctrl-C, preemption) and run it again with the same --checkpoint: it
continues from the last saved step, with the batches it would have had.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torchvision
from torchdata.stateful_dataloader import StatefulDataLoader

import sluice
from sluice import image as I

HERE = Path(__file__).resolve().parent
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def pipeline(root: str, size: int, batch: int) -> sluice.Dataset:
    # Shuffled by (seed, epoch); every random draw of the augmentations by (seed, epoch, sample).
    return (
        sluice.read_images(root, labels="parent_dir")
        .shuffle(seed=0)
        .map(I.decode())
        .map(I.random_resized_crop(size))
        .map(I.horizontal_flip(0.5))
        .map(I.normalize(MEAN, STD))
        .map(sluice.ops.select(["image", "label"]))
        .batch(batch, drop_last=True)
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(HERE / "fixtures" / "images"))
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (all epochs)")
    ap.add_argument("--checkpoint", default="/tmp/sluice-resnet.pt")
    ap.add_argument("--save-every", type=int, default=2)
    a = ap.parse_args(argv)

    if "RANK" in os.environ and not dist.is_initialized():   # under torchrun
        dist.init_process_group("gloo")
    ds = pipeline(a.data, a.size, a.batch)
    torch.manual_seed(0)
    # to_torch() takes this rank's shard (from torch.distributed) and works under DataLoader
    # workers; sluice is parallel already, so num_workers=0 is the fast default.
    tds = ds.to_torch()
    loader = StatefulDataLoader(tds, batch_size=None, num_workers=0)
    model = torchvision.models.resnet18(num_classes=len(ds.class_names))
    if dist.is_initialized():
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step, epoch = 0, 0
    if Path(a.checkpoint).exists():
        ck = torch.load(a.checkpoint, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step, epoch = ck["step"], ck["epoch"]
        tds.set_epoch(epoch)
        loader.load_state_dict(ck["loader"])
        print(f"resumed at epoch {epoch}, step {step}")
    loss_fn = torch.nn.CrossEntropyLoss()
    while epoch < a.epochs:
        tds.set_epoch(epoch)
        for b in loader:
            loss = loss_fn(model(b["image"]), b["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            print(f"epoch {epoch} step {step} loss {loss.item():.3f} labels {b['label'].tolist()}")
            if step % a.save_every == 0 and (not dist.is_initialized() or dist.get_rank() == 0):
                torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                            "epoch": epoch, "loader": loader.state_dict()}, a.checkpoint)
            if a.max_steps is not None and step >= a.max_steps:
                return 0
        epoch += 1
    print(f"done: {step} steps")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
