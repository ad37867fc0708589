"""uint8 to the device, normalised there (issue 40, item 2): ``iter_torch_batches(normalize=)``
and ``iter_jax(normalize=)`` give the values the pipeline's own ``normalize`` gives on the host,
while a quarter of the bytes cross to the device. Run on the CPU device here; the CUDA case
runs where torch sees a GPU (benchmarks/gpu_check.sh)."""

import numpy as np
import pytest

import sluice
from gpu import needs_cuda
from sluice import image as I

IMAGES = "examples/fixtures/images"
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def crops(gray=False):
    ds = sluice.read_images(IMAGES, labels="parent_dir").map(I.decode())
    if gray:
        ds = ds.map(I.grayscale(p=1.0, num_output_channels=1))
    return ds.map(I.random_resized_crop(32)).map(sluice.ops.select(["image", "label"]))


def host_normalized(gray=False, mean=MEAN, std=STD):
    ds = crops(gray).map(I.normalize(mean, std)).batch(3)
    return list(ds.iter(seed=7, epoch=0))


def test_torch_normalizes_after_the_copy_with_the_hosts_values():
    torch = pytest.importorskip("torch")
    want = host_normalized()
    got = list(crops().batch(3).iter_torch_batches(seed=7, epoch=0, normalize=(MEAN, STD)))
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        x = g["image"]
        assert x.dtype == torch.float32 and tuple(x.shape) == w["image"].shape
        # Laid out for channels_last convolutions, as permuting the HWC batch leaves it.
        assert x.is_contiguous(memory_format=torch.channels_last)
        # The same float ops in the same order: equal here, within rounding on any device.
        np.testing.assert_allclose(x.numpy(), w["image"], rtol=0, atol=1e-6)
        assert g["label"].tolist() == w["label"].tolist()


def test_torch_casts_after_normalizing_and_takes_other_fields_and_one_channel():
    torch = pytest.importorskip("torch")
    want = host_normalized()
    got = list(crops().batch(3).iter_torch_batches(
        seed=7, epoch=0, normalize={"image": (MEAN, STD)}, dtypes={"image": torch.bfloat16}))
    assert got[0]["image"].dtype == torch.bfloat16
    np.testing.assert_allclose(got[0]["image"].float().numpy(), want[0]["image"], atol=0.02)
    gray_want = host_normalized(gray=True, mean=(0.5,), std=(0.25,))
    gray = list(crops(gray=True).batch(3).iter_torch_batches(seed=7, epoch=0, normalize=((0.5,), (0.25,))))
    assert tuple(gray[0]["image"].shape[1:]) == (1, 32, 32)
    np.testing.assert_allclose(gray[0]["image"].numpy(), gray_want[0]["image"], atol=1e-6)


def test_jax_normalizes_on_the_device_with_the_hosts_values():
    jax = pytest.importorskip("jax")
    want = host_normalized()
    got = list(crops().batch(3).iter_jax(seed=7, epoch=0, normalize=(MEAN, STD)))
    for g, w in zip(got, want):
        assert isinstance(g["image"], jax.Array) and g["image"].dtype == np.float32
        np.testing.assert_allclose(np.asarray(g["image"]), w["image"], rtol=0, atol=1e-6)
        np.testing.assert_array_equal(np.asarray(g["label"]), w["label"])


def test_bad_normalize_arguments_and_fields_say_what_is_wrong():
    torch = pytest.importorskip("torch")
    ds = crops().batch(3)
    with pytest.raises(TypeError, match=r"normalize must be \(mean, std\)"):
        next(ds.iter_torch_batches(normalize=MEAN))
    with pytest.raises(ValueError, match="1 or 3 values"):
        next(ds.iter_torch_batches(normalize=((0.5, 0.5), (0.5, 0.5))))
    with pytest.raises(ValueError, match="std non-zero"):
        next(ds.iter_torch_batches(normalize=(MEAN, (0.2, 0.0, 0.2))))
    with pytest.raises(KeyError, match="'pixels'"):
        next(ds.iter_torch_batches(normalize={"pixels": (MEAN, STD)}))
    # Already normalised in the pipeline: not uint8 images, named.
    done = crops().map(I.normalize(MEAN, STD)).batch(3)
    with pytest.raises(TypeError, match=r"field 'image' as a batch of uint8 images .* got float32\[3, 3, 32, 32\]"):
        next(done.iter_torch_batches(normalize=(MEAN, STD)))
    # Three values for a one-channel image.
    with pytest.raises(TypeError, match=r"\[batch, height, width, 3\]"):
        next(crops(gray=True).batch(3).iter_torch_batches(normalize=(MEAN, STD)))
    jax = pytest.importorskip("jax")
    with pytest.raises(TypeError, match="iter_jax: normalize= takes field 'image'"):
        next(done.iter_jax(normalize=(MEAN, STD)))
    del torch, jax


@needs_cuda
def test_cuda_normalizes_on_the_gpu_with_the_hosts_values():  # pragma: no cover - GPU only
    torch = pytest.importorskip("torch")
    want = host_normalized()
    # Decoded on the host as `want` was (nvJPEG's pixels differ by a level here and there:
    # test_device_decode.py holds them to their own bound); only the normalising moves.
    got = list(crops().batch(3).iter_torch_batches(seed=7, epoch=0, device="cuda", pin_memory=True,
                                                   normalize=(MEAN, STD), decode_on_device=False))
    for g, w in zip(got, want):
        assert g["image"].device.type == "cuda"
        np.testing.assert_allclose(g["image"].cpu().numpy(), w["image"], rtol=0, atol=1e-6)
    del torch


@needs_cuda
def test_jax_normalizes_on_the_gpu_where_jax_sees_one():  # pragma: no cover - GPU only
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("jax sees no GPU here (a CPU-only jaxlib beside a CUDA torch)")
    want = host_normalized()
    got = list(crops().batch(3).iter_jax(seed=7, epoch=0, normalize=(MEAN, STD)))
    for g, w in zip(got, want):
        assert {d.platform for d in g["image"].devices()} == {"gpu"}
        np.testing.assert_allclose(np.asarray(g["image"]), w["image"], rtol=0, atol=1e-6)
