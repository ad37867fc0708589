"""``Dataset.iter_jax``: batches as jax.Arrays feeding a jitted training step (real jax, CPU)."""

import numpy as np
import pytest

import sluice

jax = pytest.importorskip("jax")
jnp = jax.numpy

W_TRUE = np.array([1.5, -2.0, 0.5, 3.0], np.float32)


def regression(n=256):
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(n, 4)).astype(np.float32)
    return sluice.from_items([{"id": i, "x": x, "y": np.float32(x @ W_TRUE)} for i, x in enumerate(xs)])


@jax.jit
def step(w, x, y):
    loss, grad = jax.value_and_grad(lambda w: jnp.mean((x @ w - y) ** 2))(w)
    return w - 0.1 * grad, loss


def test_a_jitted_step_learns_and_every_sample_is_seen_once_per_epoch():
    ds = regression().shuffle(seed=3).batch(32)
    w = jnp.zeros(4, jnp.float32)
    losses, orders = [], []
    for _ in range(4):  # plain epoch loop: each call is the next epoch
        seen, epoch_loss = [], []
        for b in ds.iter_jax():
            assert isinstance(b["x"], jax.Array) and b["x"].shape[1:] == (4,)
            w, loss = step(w, b["x"], b["y"])
            epoch_loss.append(float(loss))
            seen += np.asarray(b["id"]).tolist()
        assert sorted(seen) == list(range(256))
        orders.append(seen)
        losses.append(np.mean(epoch_loss))
    assert losses[-1] < losses[0] / 20, losses
    assert orders[0] != orders[1], "epochs reshuffle"
    np.testing.assert_allclose(np.asarray(w), W_TRUE, atol=0.1)


def test_explicit_epochs_and_seeds_repeat_exactly():
    ds = regression(64).shuffle().batch(16)
    a = [np.asarray(b["id"]) for b in ds.iter_jax(seed=1, epoch=2)]
    b = [np.asarray(b["id"]) for b in ds.iter_jax(seed=1, epoch=2)]
    c = [np.asarray(b["id"]) for b in ds.iter_jax(seed=1, epoch=3)]
    assert all((x == y).all() for x, y in zip(a, b))
    assert not all((x == y).all() for x, y in zip(a, c))


def test_dtypes_device_and_non_array_fields():
    ds = sluice.from_items([{"x": np.ones(3, np.float32), "name": f"s{i}"} for i in range(4)]).batch(2)
    dev = jax.devices("cpu")[0]
    b = next(ds.iter_jax(epoch=0, dtypes={"x": jnp.bfloat16}, device=dev))
    assert b["x"].dtype == jnp.bfloat16 and b["x"].devices() == {dev}
    assert b["name"] == ["s0", "s1"]  # strings stay Python lists
    sharding = jax.sharding.SingleDeviceSharding(dev)
    assert next(ds.iter_jax(epoch=0, sharding=sharding))["x"].sharding == sharding


def test_bad_uses_say_what_is_wrong():
    ds = sluice.from_items([{"x": np.ones(3, np.float32), "name": "a"}] * 2).batch(2)
    with pytest.raises(KeyError, match="nope"):
        next(ds.iter_jax(epoch=0, dtypes={"nope": jnp.float16}))
    with pytest.raises(TypeError, match="'name' is not an array"):
        next(ds.iter_jax(epoch=0, dtypes={"name": jnp.float16}))
    with pytest.raises(TypeError, match="dtypes must be a dict"):
        next(ds.iter_jax(epoch=0, dtypes=[jnp.float16]))
    with pytest.raises(ValueError, match="device or sharding"):
        next(ds.iter_jax(epoch=0, device=jax.devices()[0], sharding=object()))
    with pytest.raises(ValueError, match="epoch"):
        next(ds.iter_jax(epoch=-1))


def test_closing_the_generator_closes_the_pipeline(monkeypatch):
    ds = sluice.range(10_000).batch(10)
    made = []
    real_iter = sluice.Dataset.iter

    def spy(self, *a, **k):
        made.append(real_iter(self, *a, **k))
        return made[-1]

    monkeypatch.setattr(sluice.Dataset, "iter", spy)
    gen = ds.iter_jax(epoch=0, num_threads=2)
    next(gen)
    closed, real_close = [], made[0].close
    monkeypatch.setattr(made[0], "close", lambda: (closed.append(True), real_close()))
    gen.close()  # breaking out of a loop and dropping it does the same
    assert closed == [True]
