"""sluice.image vs Pillow/numpy on real photos, determinism, and bad input."""

import io
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import sluice
import sluice.image as I


def decoded(paths, *ops, fuse_ops=True, **kw):
    ds = sluice.read_files([str(p) for p in paths]).map(I.decode(**kw))
    for op in ops:
        ds = ds.map(op)
    return [s["image"] for s in ds.iter(fuse_ops=fuse_ops)]


def photos(images_dir):
    return sorted(images_dir.glob("*/*.jpg"))


def test_decode_matches_pillow(images_dir):
    for path, img in zip(photos(images_dir), decoded(photos(images_dir))):
        ref = np.asarray(Image.open(path).convert("RGB"))
        assert img.shape == ref.shape and img.dtype == np.uint8
        assert np.abs(img.astype(int) - ref).mean() <= 1.0, path


def test_decode_l_matches_pillow(images_dir):
    for path, img in zip(photos(images_dir), decoded(photos(images_dir), mode="L")):
        ref = np.asarray(Image.open(path).convert("L"))
        assert img.shape == ref.shape + (1,)
        assert np.abs(img[..., 0].astype(int) - ref).mean() <= 1.0


def test_png_is_exact(tmp_path):
    rng = np.random.default_rng(0)
    arr = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    Image.fromarray(arr).save(tmp_path / "x.png")
    (out,) = decoded([tmp_path / "x.png"])
    np.testing.assert_array_equal(out, arr)


def test_flip_and_crop_are_exact(images_dir):
    p = photos(images_dir)[:3]
    base = decoded(p)
    for b, f in zip(base, decoded(p, I.horizontal_flip(p=1.0))):
        np.testing.assert_array_equal(f, b[:, ::-1])
    crop = I.center_crop((100, 120))
    for path, b, c, fused in zip(p, base, decoded(p, crop, fuse_ops=False), decoded(p, crop)):
        top, left = round((b.shape[0] - 100) / 2), round((b.shape[1] - 120) / 2)
        np.testing.assert_array_equal(c, b[top : top + 100, left : left + 120])
        # Fused with the decode (decode_center_crop), only the crop's window is decoded, by
        # the decoder the fused crops use: the same box, as close to Pillow's pixels as the
        # whole decode is (test_decode_matches_pillow).
        ref = np.asarray(Image.open(path).convert("RGB"))[top : top + 100, left : left + 120]
        assert fused.shape == c.shape and np.abs(fused.astype(int) - ref).mean() <= 1.0, path


def test_resize_matches_pillow_bilinear(images_dir):
    p = photos(images_dir)
    for b, r in zip(decoded(p), decoded(p, I.resize((100, 150)))):
        ref = np.asarray(Image.fromarray(b).resize((150, 100), Image.BILINEAR))
        assert r.shape == (100, 150, 3)
        assert np.abs(r.astype(int) - ref).mean() <= 1.5


def test_grayscale_matches_pillow_l(images_dir):
    p = photos(images_dir)
    for b, g in zip(decoded(p), decoded(p, I.grayscale())):
        ref = np.asarray(Image.fromarray(b).convert("L"))
        assert np.abs(g[..., 0].astype(int) - ref).max() <= 1


def test_normalize_matches_numpy(images_dir):
    p = photos(images_dir)[:2]
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    for b, n in zip(decoded(p), decoded(p, I.normalize(mean, std))):
        ref = (b.astype(np.float32) / 255 - np.array(mean, np.float32)) / np.array(std, np.float32)
        assert n.dtype == np.float32 and n.shape == (3,) + b.shape[:2]
        np.testing.assert_allclose(n, ref.transpose(2, 0, 1), atol=1e-5)


MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def stage_names(it):
    return [s["name"] for s in it.stats().stages]


@pytest.mark.parametrize("threads", [0, 2])
def test_normalize_before_a_batch_writes_into_it_with_the_same_bytes(images_dir, threads):
    """normalize (past the select after it) runs in the batch, writing each image straight
    into its slot: the batches equal the per-sample outputs stacked."""
    ds = (sluice.read_images(str(images_dir)).map(I.decode()).map(I.random_resized_crop(48))
          .map(I.normalize(MEAN, STD)).map(sluice.ops.select(["image", "label"])))
    rows = list(ds.iter(seed=3, epoch=0, num_threads=threads))
    it = ds.batch(4).iter(seed=3, epoch=0, num_threads=threads)
    batches = list(it)
    assert any(n.endswith("batch(4) writing normalize") for n in stage_names(it))
    assert [n for n in stage_names(it) if "normalize" in n and "writing" not in n] == []
    got = np.concatenate([b["image"] for b in batches])
    assert got.dtype == np.float32 and got.shape == (len(rows), 3, 48, 48)
    assert np.array_equal(got, np.stack([r["image"] for r in rows]))
    assert np.array_equal(np.concatenate([b["label"] for b in batches]), [r["label"] for r in rows])
    # A Python function reading the field after normalize keeps it in its chain.
    kept = ds.map(lambda s: s).batch(4).iter(seed=3, epoch=0, num_threads=threads)
    assert np.array_equal(np.concatenate([b["image"] for b in kept]), got)
    assert not any("writing" in n for n in stage_names(kept))


def test_images_of_different_sizes_are_normalized_one_by_one_then_listed(images_dir):
    paths = [str(p) for p in photos(images_dir)[:4]]
    ds = sluice.read_files(paths).map(I.decode()).map(I.to_tensor())
    rows = [s["image"] for s in ds]
    assert len({r.shape for r in rows}) > 1
    (batch,) = list(ds.batch(4))
    assert isinstance(batch["image"], list)
    for got, want in zip(batch["image"], rows):
        assert np.array_equal(got, want)


def test_a_bad_image_fails_in_the_batch_as_in_its_chain(images_dir):
    """A mean of the wrong length fails naming normalize and the sample, with or without
    the batch after it."""
    paths = [str(p) for p in photos(images_dir)[:3]]
    ds = sluice.read_files(paths).map(I.decode()).map(I.center_crop(16)).map(I.normalize((0.5,), (0.5,)))
    with pytest.raises(TypeError) as alone:
        list(ds)
    with pytest.raises(type(alone.value)) as batched:
        list(ds.batch(2))
    assert str(batched.value) == str(alone.value)
    assert "normalize" in str(alone.value) and "channel" in str(alone.value)


def test_normalize_stays_before_an_op_that_may_drop_its_sample(images_dir):
    """An op after normalize that skips its failures (here on another field) could drop a
    sample whose image normalize rejects: normalize stays in its chain, so it still fails."""
    paths = [str(p) for p in photos(images_dir)[:3]]
    ds = (sluice.read_files(paths).map(I.decode()).map(I.center_crop(16)).map(I.normalize((0.5,), (0.5,)))
          .map(I.decode(field="path", out="again"), on_error="skip"))
    for d in (ds, ds.batch(2)):
        with pytest.raises(TypeError, match="'normalize' failed on sample 0.*channel"):
            list(d)


def test_a_checkpoint_between_batches_written_in_place_resumes_exactly(images_dir):
    ds = (sluice.read_images(str(images_dir)).shuffle().map(I.decode()).map(I.random_resized_crop(32))
          .map(I.normalize(MEAN, STD)).batch(3))
    full = [b["image"] for b in ds.iter(seed=1, epoch=0, num_threads=2)]
    it = ds.iter(seed=1, epoch=0, num_threads=2)
    next(it)
    state = it.state_dict()
    resumed = ds.iter(seed=1, epoch=0, num_threads=1)
    resumed.load_state_dict(state)
    rest = [b["image"] for b in resumed]
    assert len(rest) == len(full) - 1
    assert all(np.array_equal(a, b) for a, b in zip(rest, full[1:]))


def cv_pipeline(images_dir):
    return (
        sluice.read_images(str(images_dir))
        .repeat(3)
        .map(I.decode())
        .map(I.random_resized_crop(64))
        .map(I.horizontal_flip(0.5))
        .map(I.color_jitter(0.4, 0.4, 0.4, 0.1, p=0.8))
        .map(I.grayscale(p=0.2, num_output_channels=3))
        .map(I.gaussian_blur(7, sigma=(0.1, 2.0), p=0.5))
        .map(I.normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)))
        .map(sluice.ops.select(["image", "label"]))
        .batch(8)
    )


def test_random_ops_deterministic_and_thread_independent(images_dir):
    ds = cv_pipeline(images_dir)
    runs = [np.concatenate([b["image"] for b in ds.iter(seed=7, epoch=0, num_threads=t)]) for t in (1, 2, 8)]
    assert runs[0].shape == (24, 3, 64, 64)
    for r in runs[1:]:
        np.testing.assert_array_equal(runs[0], r)
    other = np.concatenate([b["image"] for b in ds.iter(seed=8, epoch=0)])
    assert not np.array_equal(runs[0], other)


def test_every_simd_path_gives_the_same_batches(images_dir):
    """SLUICE_SIMD caps the image kernels (avx512, avx2, baseline): the CV chain gives the
    same bytes on each path this CPU has, and an unknown value is said and ignored. The
    second pipeline is decode + resize, which run fused as one DCT-scaled decode
    (`decode_resize`: 320-pixel photos to 64 are decoded at a quarter scale), so the
    reduced inverse DCTs are checked too, not only the full-size ones."""
    code = f"""
import hashlib, pathlib, sys
sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
import numpy as np
import sluice, sluice.image as I
from test_image import cv_pipeline
images = pathlib.Path({str(images_dir)!r})
scaled = sluice.read_images(str(images)).map(I.decode()).map(I.resize((64, 64))).batch(8)
assert "decode_resize" in scaled.explain()
h = hashlib.sha256()
for ds in (cv_pipeline(images), scaled):
    for b in ds.iter(seed=3, epoch=0):
        h.update(np.ascontiguousarray(b["image"]).tobytes())
print(h.hexdigest())
"""

    def run(level):
        env = {**os.environ, "SLUICE_SIMD": level}
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
        assert r.returncode == 0, r.stderr
        return r.stdout.strip().splitlines()[-1], r.stderr

    runs = {level: run(level) for level in ("avx512", "avx2", "baseline", "neon")}
    assert len({digest for digest, _ in runs.values()}) == 1, runs
    assert 'SLUICE_SIMD="neon" is not avx512, avx2 or baseline; ignored' in runs["neon"][1]
    assert "SLUICE_SIMD" not in runs["avx2"][1]


def test_flip_probability_is_respected(images_dir):
    p = photos(images_dir)[:1] * 400
    base = decoded(p[:1])[0]
    flips = sum(not np.array_equal(x, base) for x in decoded(p, I.horizontal_flip(0.3)))
    assert 80 <= flips <= 160  # 0.3 * 400 = 120, > 4 sigma margin


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_bad_images_name_path_and_op(tmp_path, images_dir):
    good = photos(images_dir)[0].read_bytes()
    bad = {
        "truncated.jpg": good[: len(good) // 3],
        "empty.jpg": b"",
        "noise.jpg": np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes(),
        "text.png": b"not a png at all",
    }
    for name, data in bad.items():
        path = write(tmp_path, name, data)
        with pytest.raises(sluice.PipelineError) as ei:
            list(sluice.read_files(str(path)).map(I.decode()))
        msg = str(ei.value)
        assert "decode" in msg and name in msg, msg
        # Fused with the crop (decode_random_resized_crop), the error still names both.
        with pytest.raises(sluice.PipelineError) as ei:
            list(sluice.read_files(str(path)).map(I.decode()).map(I.random_resized_crop(16)))
        msg = str(ei.value)
        assert "decode_random_resized_crop" in msg and name in msg, msg


def test_decompression_bomb_limit(images_dir):
    with pytest.raises(sluice.PipelineError, match="decode"):
        list(sluice.read_files(str(photos(images_dir)[0])).map(I.decode(max_pixels=1000)))


def test_skip_bad_images_counts(tmp_path, images_dir):
    good = photos(images_dir)[0].read_bytes()
    (tmp_path / "a.jpg").write_bytes(good)
    (tmp_path / "b.jpg").write_bytes(b"\xff\xd8garbage")
    (tmp_path / "c.jpg").write_bytes(good)
    ds = sluice.read_images(str(tmp_path), labels=None).map(I.decode(), on_error="skip")
    assert len(list(ds)) == 2
    assert sum(s["skipped"] for s in ds.stats().stages) == 1


def test_wrong_arguments():
    with pytest.raises(ValueError):
        I.horizontal_flip(p=1.5)
    with pytest.raises(ValueError):
        I.gaussian_blur(4)
    with pytest.raises(ValueError):
        I.decode(mode="CMYK")
    with pytest.raises(TypeError, match="image"):
        list(sluice.range(2).map(I.resize(8, field="id")))


# ---- decode + random_resized_crop fusion (DCT-scaled decode of the crop) ----------------


def rrc_pipeline(source, size=32, epochs=4, **decode_kw):
    return source.repeat(epochs).map(I.decode(**decode_kw)).map(I.random_resized_crop(size))


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def test_fused_decode_crop_picks_the_same_crops_within_35_db(images_dir):
    ds = rrc_pipeline(sluice.read_images(str(images_dir), labels="parent_dir"))
    assert "read+decode_random_resized_crop" in ds.explain()
    assert "read+decode+random_resized_crop" in ds.explain(fuse_ops=False)
    fused = list(ds.iter(seed=3, epoch=0))
    exact = list(ds.iter(seed=3, epoch=0, fuse_ops=False))
    assert len(fused) == len(exact) == 32
    assert [s["label"] for s in fused] == [s["label"] for s in exact]
    assert [s["path"] for s in fused] == [s["path"] for s in exact]
    scaled = 0
    for a, b in zip(fused, exact):
        assert a["image"].shape == b["image"].shape == (32, 32, 3)
        if not np.array_equal(a["image"], b["image"]):
            # Crops shrunk >= 3x take the scaled path (1/2 scale; 1/4 from 6x).
            scaled += 1
            assert psnr(a["image"], b["image"]) >= 35, a["path"]
            assert np.abs(a["image"].astype(int) - b["image"]).mean() < 2
    assert scaled >= 4, scaled


def test_fused_decode_crop_is_thread_independent(images_dir):
    ds = rrc_pipeline(sluice.read_images(str(images_dir), labels="parent_dir"), epochs=3)
    runs = [np.stack([s["image"] for s in ds.iter(seed=5, epoch=0, num_threads=t)]) for t in (1, 2, 4)]
    for r in runs[1:]:
        np.testing.assert_array_equal(runs[0], r)


def test_fuse_ops_off_runs_the_ops_apart(images_dir):
    # Ops with different error policies never fuse: that pipeline is the unfused path by
    # construction, and fuse_ops=False must give exactly its bytes.
    src = sluice.read_images(str(images_dir), labels="parent_dir").repeat(2)
    apart = src.map(I.decode(), on_error="skip").map(I.random_resized_crop(32))
    assert "decode+random_resized_crop" in apart.explain()
    off = list(rrc_pipeline(sluice.read_images(str(images_dir), labels="parent_dir"), epochs=2).iter(seed=1, fuse_ops=False))
    for a, b in zip(off, apart.iter(seed=1)):
        np.testing.assert_array_equal(a["image"], b["image"])


def test_fused_decode_crop_of_pngs_is_exact_and_of_jpegs_at_full_size_close(tmp_path, images_dir):
    for p in photos(images_dir)[:4]:
        Image.open(p).save(tmp_path / (p.stem + ".png"))
    # A PNG has no DCT to skip: the unfused ops, byte for byte.
    ds = rrc_pipeline(sluice.read_files(str(tmp_path / "*.png")), size=32, epochs=3)
    assert "decode_random_resized_crop" in ds.explain()
    for a, b in zip(ds.iter(seed=2, epoch=0), ds.iter(seed=2, epoch=0, fuse_ops=False)):
        np.testing.assert_array_equal(a["image"], b["image"])
    # Crops to 224 px never shrink these photos 3x: a full-size decode of only the MCUs each
    # crop touches, the same crop within the chroma upsampling's difference.
    ds = rrc_pipeline(sluice.read_files([str(p) for p in photos(images_dir)]), size=224, epochs=3)
    pairs = list(zip(ds.iter(seed=2, epoch=0), ds.iter(seed=2, epoch=0, fuse_ops=False)))
    assert len(pairs) == 3 * len(photos(images_dir))
    for a, b in pairs:
        assert a["image"].shape == b["image"].shape == (224, 224, 3)
        assert psnr(a["image"], b["image"]) >= 35, a["path"]
        assert np.abs(a["image"].astype(int) - b["image"]).mean() < 1
    # Mode "L" fuses too and keeps one channel.
    ds = rrc_pipeline(sluice.read_files([str(p) for p in photos(images_dir)]), mode="L", epochs=1)
    assert {s["image"].shape for s in ds} == {(32, 32, 1)}


# ---- parity with torchvision (reference implementations of its documented semantics) ------


def tv_center_crop(img, ch, cw):
    """torchvision.transforms.functional.center_crop on an HWC array: pad (left, top) by
    ``(crop - side) // 2`` and (right, bottom) by the rest, then crop at
    ``int(round((side - crop) / 2.0))``."""
    h, w = img.shape[:2]
    if ch > h or cw > w:
        pt, pl = ((ch - h) // 2 if ch > h else 0), ((cw - w) // 2 if cw > w else 0)
        pb, pr = ((ch - h + 1) // 2 if ch > h else 0), ((cw - w + 1) // 2 if cw > w else 0)
        img = np.pad(img, ((pt, pb), (pl, pr), (0, 0)))
        h, w = img.shape[:2]
    top, left = int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))
    return img[top : top + ch, left : left + cw]


def test_center_crop_matches_torchvision_padding_and_rounding():
    rng = np.random.default_rng(1)
    for h, w in [(7, 9), (8, 10), (5, 5), (1, 3)]:
        img = rng.integers(1, 256, (h, w, 3), dtype=np.uint8)
        for ch, cw in [(4, 4), (3, 6), (10, 13), (11, 4), (h, w + 3), (h + 1, w - 1 or 1), (6, 12)]:
            (out,) = [s["image"] for s in sluice.from_items([{"image": img}]).map(I.center_crop((ch, cw)))]
            np.testing.assert_array_equal(out, tv_center_crop(img, ch, cw), err_msg=f"{h}x{w} -> {ch}x{cw}")


def test_random_resized_crop_is_crop_then_resize():
    """torchvision on a PIL image crops, then resizes (bilinear): edge rows read only the
    crop. The crop's place is random, so every possible place is tried; one must match."""
    rng = np.random.default_rng(2)
    img = rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)  # noise: pixels beyond the crop differ
    pil = Image.fromarray(img)
    for size in (16, 48):  # down and up
        # area 0.5 * 2400 with ratio 1: a 35x35 crop (torchvision's rounding) at a random place.
        op = I.random_resized_crop(size, scale=(0.5, 0.5), ratio=(1.0, 1.0))
        outs = [s["image"] for s in sluice.from_items([{"image": img}] * 4).map(op).iter(seed=9)]
        for out in outs:
            best = min(
                (np.abs(out.astype(int) - np.asarray(pil.crop((l, t, l + 35, t + 35)).resize((size, size), Image.BILINEAR), dtype=int)).max(), t, l)
                for t in range(40 - 35 + 1)
                for l in range(60 - 35 + 1)
            )
            assert best[0] <= 1, (size, best)


def tv_gaussian_blur(img, kx, ky, sigma):
    """torchvision's gaussian_blur on uint8: a (ky, kx) kernel — kernel_size is (kx, ky) —
    of ``exp(-0.5 (x / sigma)^2)`` over ``linspace(-(k-1)/2, (k-1)/2, k)``, reflect padding,
    float32 arithmetic, rounded back to uint8."""
    def k1(k):
        x = np.linspace(-(k - 1) / 2, (k - 1) / 2, k)
        pdf = np.exp(-0.5 * (x / sigma) ** 2)
        return (pdf / pdf.sum()).astype(np.float32)

    f = np.pad(img.astype(np.float32), ((ky // 2, ky // 2), (kx // 2, kx // 2), (0, 0)), mode="reflect")
    h, w = img.shape[:2]
    gx, gy = k1(kx), k1(ky)
    rows = sum(gx[i] * f[:, i : i + w] for i in range(kx))
    out = sum(gy[j] * rows[j : j + h] for j in range(ky))
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


def test_gaussian_blur_kernel_size_is_kx_ky_as_torchvision():
    img = np.random.default_rng(3).integers(0, 256, (20, 24, 3), dtype=np.uint8)
    for kx, ky in [(3, 9), (9, 3), (1, 5), (7, 7)]:
        op = I.gaussian_blur((kx, ky), sigma=1.7)
        (out,) = [s["image"] for s in sluice.from_items([{"image": img}]).map(op)]
        ref = tv_gaussian_blur(img, kx, ky, 1.7)
        assert np.abs(out.astype(int) - ref).max() <= 1, (kx, ky)
    # (1, 5) blurs down the columns only: vertical stripes stay as they are.
    stripes = np.tile(np.array([10, 200], np.uint8).repeat(1)[None, :, None], (9, 6, 3))
    (out,) = [s["image"] for s in sluice.from_items([{"image": stripes}]).map(I.gaussian_blur((1, 5), 1.5))]
    np.testing.assert_array_equal(out, stripes)
