"""JPEGs decoded on the device (issue 40, item 3): with ``iter_torch_batches(decode_on_device=)``
the planner leaves ``decode`` + ``random_resized_crop`` (+ ``horizontal_flip``) as their draws,
and the consumer decodes, crops, resizes and flips on the device — the same crops and flips
as the host (same (seed, epoch, index) draws), pixels within a stated tolerance of the
unfused host ops: mean absolute difference ≤ 1 level and PSNR ≥ 35 dB per image (measured on
the fixtures with libjpeg-turbo on the CPU: mean 0.1–0.3, max 2). On the CPU the device is
torchvision's CPU decoder; the CUDA case (nvJPEG) runs where torch sees a GPU
(benchmarks/gpu_check.sh)."""

import glob

import numpy as np
import pytest

import sluice
from gpu import needs_cuda
from sluice import image as I

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")

IMAGES = "examples/fixtures/images"
ORIENTED = sorted(glob.glob("crates/sluice-imgproc/tests/fixtures/orient_*.jpg"))
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def crops(source=None, size=48, after=()):
    ds = source or sluice.read_images(IMAGES, labels="parent_dir")
    ds = ds.map(I.decode()).map(I.random_resized_crop(size)).map(I.horizontal_flip(0.5))
    for op in after:
        ds = ds.map(op)
    return ds.map(sluice.ops.select(["image", "label"] if source is None else ["image"])).batch(3)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def assert_close(got: np.ndarray, want: np.ndarray):
    assert got.shape == want.shape and got.dtype == want.dtype == np.uint8
    for g, w in zip(got, want):
        diff = np.abs(g.astype(int) - w.astype(int))
        assert diff.mean() <= 1.0 and psnr(g, w) >= 35, (diff.mean(), diff.max(), psnr(g, w))


def both(ds_fn, field="image", **kw):
    # The planner did leave the field encoded for the device.
    first = next(iter(ds_fn().iter(seed=5, epoch=0, device_decode=True)))
    assert isinstance(first[field], list), type(first[field])
    dev = list(ds_fn().iter_torch_batches(seed=5, decode_on_device=True, **kw))
    host = list(ds_fn().iter_torch_batches(seed=5, decode_on_device=False, fuse_ops=False, **kw))
    assert len(dev) == len(host) > 0
    return dev, host


@pytest.mark.parametrize("epoch", [0, 1])
def test_the_device_makes_the_hosts_crops_and_flips(epoch):
    dev, host = both(crops, epoch=epoch)
    for d, h in zip(dev, host):
        assert torch.equal(d["label"], h["label"])
        # The crops and flips are the host's: a mirrored or shifted crop would be far off.
        assert_close(d["image"].numpy(), h["image"].numpy())


def test_the_batch_holds_the_encoded_images_and_their_draws():
    batch = next(iter(crops().iter(seed=5, epoch=0, device_decode=True)))
    from sluice._device_decode import MAGIC, split_encoded

    assert all(r[:len(MAGIC)] == MAGIC for r in batch["image"])
    encoded = split_encoded(batch)
    images, draws = encoded["image"]
    assert list(batch) == ["label"] and draws.shape == (3, 10)
    # Square 48 crops, bilinear, RGB, within each photo.
    assert (draws[:, 4:6] == 48).all() and (draws[:, 7] == 0).all() and (draws[:, 8] == 3).all()
    assert set(draws[:, 6]) <= {0, 1} and (draws[:, :4] >= 0).all()
    assert all(bytes(i[:3]) == b"\xff\xd8\xff" for i in images)


def test_normalize_after_the_device_decode_matches_the_hosts():
    dev, host = both(crops, epoch=0, normalize=(MEAN, STD))
    for d, h in zip(dev, host):
        assert d["image"].dtype == torch.float32 and d["image"].shape == h["image"].shape
        assert d["image"].shape[1:] == (3, 48, 48)
        # One uint8 level is 1/(255·std) ≈ 0.017 after normalize.
        assert (d["image"] - h["image"]).abs().mean() <= 0.02


def test_exif_orientation_is_applied_on_the_device():
    source = lambda: sluice.read_files(ORIENTED)  # noqa: E731 - one line per case
    assert len(ORIENTED) == 8
    dev, host = both(lambda: crops(source(), size=12))
    for d, h in zip(dev, host):
        assert_close(d["image"].numpy(), h["image"].numpy())


def test_images_that_are_not_jpegs_are_decoded_on_the_host_and_cropped_on_the_device(tmp_path):
    from PIL import Image

    for i, name in enumerate(["a.png", "b.jpg", "c.png"]):
        Image.fromarray(np.random.default_rng(i).integers(0, 255, (40, 56, 3), np.uint8)).save(tmp_path / name)
    dev, host = both(lambda: crops(sluice.read_files(str(tmp_path / "*")), size=16))
    for d, h in zip(dev, host):
        assert_close(d["image"].numpy(), h["image"].numpy())


def test_pixels_read_on_the_host_keep_decoding_there():
    # A colour jitter after the crop needs the pixels on the host: nothing moves, and the
    # batch is the host's, bytes for bytes.
    jitter = [I.color_jitter(brightness=0.3)]
    plain = next(iter(crops(after=jitter).iter(seed=5, epoch=0, device_decode=True)))
    assert isinstance(plain["image"], np.ndarray) and plain["image"].dtype == np.uint8
    dev = next(iter(crops(after=jitter).iter_torch_batches(seed=5, epoch=0, decode_on_device=True)))
    host = next(iter(crops(after=jitter).iter_torch_batches(seed=5, epoch=0, decode_on_device=False)))
    assert torch.equal(dev["image"], host["image"])


def test_a_renamed_field_goes_to_the_device_and_its_reads_are_seen():
    def ds(*after):
        d = (sluice.read_images(IMAGES).map(I.decode()).map(I.random_resized_crop(32))
             .map(sluice.ops.rename("image", "pixels")))
        for op in after:
            d = d.map(op)
        return d.batch(2)

    dev, host = both(ds, field="pixels")
    for d, h in zip(dev, host):
        assert_close(d["pixels"].numpy(), h["pixels"].numpy())
    # A host op on the new name keeps the decode on the host.
    jittered = ds(I.color_jitter(brightness=0.3, field="pixels"))
    batch = next(iter(jittered.iter(seed=5, epoch=0, device_decode=True)))
    assert isinstance(batch["pixels"], np.ndarray)


def test_auto_decodes_on_the_host_without_a_gpu_and_bad_values_are_refused():
    from sluice import pytorch

    assert pytorch.decodes_on_device("cpu", "auto") is False
    assert pytorch.decodes_on_device(None, "auto") is False
    assert pytorch.decodes_on_device("cpu", True) is True
    with pytest.raises(ValueError, match="decode_on_device must be True, False or 'auto'"):
        next(crops().iter_torch_batches(decode_on_device="yes"))


def test_auto_leaves_decoding_on_the_host_with_enough_host_threads(monkeypatch):
    from sluice import _native, pytorch

    assert pytorch.host_threads(8) == 8
    assert pytorch.host_threads(0) == 1  # the iterating thread alone
    cores = _native.cores()  # what the engine's default thread counts take
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # torchrun: 4 processes share the node
    assert pytorch.host_threads(None) == max(1, cores // 4)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "junk")
    assert pytorch.host_threads(None) == cores
    # Enough host threads: the host decodes, whatever the device (no GPU needed to say so).
    assert pytorch.decodes_on_device("cuda", "auto", threads=pytorch.HOST_THREADS_ENOUGH) is False
    assert pytorch.decodes_on_device("cuda", True, threads=64) is True
    # The run's own thread count is what the choice is made with.
    seen = []
    real = pytorch.decodes_on_device
    monkeypatch.setattr(pytorch, "decodes_on_device", lambda d, a, t=1: seen.append(t) or real(d, a, t))
    next(crops().iter_torch_batches(seed=5, epoch=0, num_threads=3))
    assert seen == [3]


def test_a_corrupt_jpeg_fails_naming_the_sample():
    ds = sluice.from_items([{"bytes": b"\xff\xd8\xff\xe0 not a jpeg", "label": 0}])
    with pytest.raises(Exception, match="op 'device_draws' failed on sample 0"):
        list(crops(ds).iter_torch_batches(decode_on_device=True))


@needs_cuda
def test_cuda_nvjpeg_makes_the_hosts_crops():  # pragma: no cover - GPU only
    from sluice import pytorch

    assert pytorch.decodes_on_device("cuda", "auto", threads=1)
    dev = list(crops().iter_torch_batches(seed=5, epoch=0, device="cuda", pin_memory=True, decode_on_device=True))
    host = list(crops().iter_torch_batches(seed=5, epoch=0, decode_on_device=False, fuse_ops=False))
    for d, h in zip(dev, host):
        assert d["image"].device.type == "cuda"
        assert_close(d["image"].cpu().numpy(), h["image"].numpy())
    from sluice import _device_decode

    try:
        from nvidia import nvimgcodec  # noqa: F401
    except ImportError:
        return
    # Installed: it decoded (a failure would have fallen back to torchvision, marked False).
    assert _device_decode._NVIMGCODEC and all(v is not False for v in _device_decode._NVIMGCODEC.values())


@pytest.mark.parametrize("bicubic", [False, True])
def test_batched_crops_match_one_interpolate_per_image(bicubic, monkeypatch):
    """The batched resize (two matrix products over crops padded to their group's largest) gives
    the pixels of torch's antialiased ``interpolate`` run on each crop, flipped or not: crops
    shrunk and enlarged, square and not, split into groups when they would pad too much."""
    import torch.nn.functional as F

    from sluice import _device_decode as D

    rng = np.random.default_rng(7)
    images, draws = [], []
    for i in range(12):
        h, w = int(rng.integers(20, 300)), int(rng.integers(20, 300))
        images.append(torch.as_tensor(rng.integers(0, 256, (3, h, w), dtype=np.uint8)))
        ch, cw = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        top, left = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        draws.append([top, left, ch, cw, 40, 56, i % 2, int(bicubic), 3, 1])
    draws = np.array(draws, dtype=np.int64)
    want = []
    for img, (top, left, h, w, oh, ow, flip, *_) in zip(images, draws.tolist()):
        x = img[None, :, top:top + h, left:left + w].float()
        x = F.interpolate(x, size=(oh, ow), mode="bicubic" if bicubic else "bilinear", antialias=True, align_corners=False)
        want.append((x.flip(-1) if flip else x).round().clamp(0, 255).to(torch.uint8)[0])
    want = torch.stack(want)
    for budget in (D.GROUP_ELEMENTS, 3 * 300 * 300):  # one group; then several
        monkeypatch.setattr(D, "GROUP_ELEMENTS", budget)
        got = D.resize_crops(images, draws)
        assert got.shape == want.shape == (12, 3, 40, 56) and got.dtype == torch.uint8
        diff = (got.int() - want.int()).abs()
        assert diff.max() <= 1 and (diff > 0).float().mean() < 0.01, (diff.max(), (diff > 0).float().mean())


def test_batched_crops_refuse_mixed_output_sizes():
    from sluice import _device_decode as D

    images = [torch.zeros(3, 10, 10, dtype=torch.uint8)] * 2
    draws = np.array([[0, 0, 10, 10, 8, 8, 0, 0, 3, 1], [0, 0, 10, 10, 8, 6, 0, 0, 3, 1]], dtype=np.int64)
    with pytest.raises(ValueError, match="different output sizes"):
        D.resize_crops(images, draws)
