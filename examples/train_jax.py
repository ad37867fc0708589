"""Train in JAX with the batch sharded over devices: each batch goes to the devices by a
`NamedSharding` over a data-parallel mesh, as uint8 images normalised on the devices
(`iter_jax(normalize=...)`), into a jitted SGD step.

    python examples/train_jax.py            # 4 CPU devices (XLA's host platform), fixture photos
    python examples/train_jax.py --data /data/imagenet/train --size 224 --batch 1024   # on TPUs/GPUs

Multi-host: give each process its shard, `ds.shard(jax.process_index(), jax.process_count())`,
and assemble the global batch with `jax.make_array_from_process_local_data(sharding, x)`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

# Before jax is imported: pretend the host has 4 devices when it has no accelerator.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import sluice  # noqa: E402
from sluice import image as I  # noqa: E402

HERE = Path(__file__).resolve().parent
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def pipeline(root: str, size: int, batch: int) -> sluice.Dataset:
    return (
        sluice.read_images(root, labels="parent_dir")
        .shuffle(seed=0)
        .repeat()                                   # epochs run into each other; steps count
        .map(I.decode())
        .map(I.random_resized_crop(size))
        .map(I.horizontal_flip(0.5))
        .map(sluice.ops.select(["image", "label"]))  # uint8: normalised on the devices
        .batch(batch, drop_last=True)
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=str(HERE / "fixtures" / "images"))
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args(argv)
    ds = pipeline(a.data, a.size, a.batch)
    classes = len(ds.class_names)
    mesh = Mesh(jax.devices(), ("data",))
    on_mesh = NamedSharding(mesh, P("data"))        # batch axis split over the devices
    replicated = NamedSharding(mesh, P())
    dim = 3 * a.size * a.size
    params = jax.device_put({"w": jnp.zeros((dim, classes)), "b": jnp.zeros(classes)}, replicated)

    @jax.jit
    def step(params, x, y):
        def loss(p):
            logits = x.reshape(x.shape[0], -1) @ p["w"] + p["b"]
            return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], 1))

        value, grads = jax.value_and_grad(loss)(params)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), value

    batches = ds.iter_jax(seed=0, sharding=on_mesh, normalize=(MEAN, STD))
    for i, b in zip(range(a.steps), batches):
        params, loss = step(params, b["image"], b["label"])
        if i == 0:
            print(f"{len(jax.devices())} devices; image {b['image'].dtype}{tuple(b['image'].shape)} "
                  f"sharded as {b['image'].sharding.spec}")
        print(f"step {i + 1} loss {float(loss):.3f}")
    batches.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
