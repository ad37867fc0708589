"""WebP, GIF, BMP and TIFF decode against Pillow: exact for lossless files, within rounding for
lossy WebP; the pixel guard and errors as for JPEG/PNG."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

import sluice
import sluice.image as I


def _decoded(paths, **kw):
    return [s["image"] for s in sluice.read_files([str(p) for p in paths]).map(I.decode(**kw))]


def _photo(h=37, w=53):
    """A smooth image with an edge, so lossy coding has something realistic to do."""
    y, x = np.mgrid[0:h, 0:w]
    arr = np.stack([x * 255 // w, y * 255 // h, (x + y) * 127 // (h + w)], axis=-1).astype(np.uint8)
    arr[h // 3 :, w // 2 :] = [200, 30, 90]
    return arr


def _noise(h=37, w=53, c=3, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, c) if c > 1 else (h, w), dtype=np.uint8)


LOSSLESS = {
    "rgb.webp": lambda: (Image.fromarray(_noise()), {"lossless": True}),
    "rgba.webp": lambda: (Image.fromarray(_noise(c=4)), {"lossless": True, "exact": True}),
    "rgb.bmp": lambda: (Image.fromarray(_noise()), {}),
    "gray.bmp": lambda: (Image.fromarray(_noise(c=1)), {}),
    "palette.bmp": lambda: (Image.fromarray(_noise()).quantize(64), {}),
    "rgb.tif": lambda: (Image.fromarray(_noise()), {}),
    "rgb-lzw.tif": lambda: (Image.fromarray(_noise()), {"compression": "tiff_lzw"}),
    "rgba-deflate.tif": lambda: (Image.fromarray(_noise(c=4)), {"compression": "tiff_adobe_deflate"}),
    "gray-packbits.tif": lambda: (Image.fromarray(_noise(c=1)), {"compression": "packbits"}),
    "palette.gif": lambda: (Image.fromarray(_noise()).quantize(200), {}),
    "gray.gif": lambda: (Image.fromarray(_noise(c=1)), {}),
    # Transparent pixels keep their palette colour (Pillow's convert does not composite).
    "transparent.gif": lambda: (Image.fromarray(_noise()).quantize(50), {"transparency": 3}),
    "gray-alpha.webp": lambda: (Image.fromarray(_noise(c=1)).convert("LA"), {"lossless": True}),
    "rgba.bmp": lambda: (Image.fromarray(_noise(c=4)), {}),
    "bilevel.bmp": lambda: (Image.fromarray(_noise(c=1)).convert("1"), {}),
    "bilevel.tif": lambda: (Image.fromarray(_noise(c=1)).convert("1"), {}),
    # Pillow opens 16-bit gray as I;16 and clips above 255 when converting.
    "gray16.tif": lambda: (Image.fromarray(_noise(c=1).astype(np.uint16) * 4), {}),
}


@pytest.mark.parametrize("name", sorted(LOSSLESS))
def test_lossless_formats_equal_pillow(tmp_path, name):
    img, kw = LOSSLESS[name]()
    path = tmp_path / name
    img.save(path, **kw)
    (rgb,) = _decoded([path])
    (gray,) = _decoded([path], mode="L")
    np.testing.assert_array_equal(rgb, np.asarray(Image.open(path).convert("RGB")))
    np.testing.assert_array_equal(gray[..., 0], np.asarray(Image.open(path).convert("L")))


def test_cmyk_tiff_within_one_level_and_palette_tiff_refused(tmp_path):
    Image.frombytes("CMYK", (53, 37), _noise(c=4).tobytes()).save(tmp_path / "cmyk.tif")
    (rgb,) = _decoded([tmp_path / "cmyk.tif"])
    ref = np.asarray(Image.open(tmp_path / "cmyk.tif").convert("RGB"))
    assert np.abs(rgb.astype(int) - ref).max() <= 1
    Image.fromarray(_noise()).quantize(40).save(tmp_path / "palette.tif")
    with pytest.raises(sluice.PipelineError, match=r"palette.tif.*unsupported image: TIFF"):
        _decoded([tmp_path / "palette.tif"])


def test_lossy_webp_matches_pillow_within_rounding(tmp_path):
    path = tmp_path / "photo.webp"
    Image.fromarray(_photo(64, 96)).save(path, quality=80)
    (rgb,) = _decoded([path])
    ref = np.asarray(Image.open(path).convert("RGB"))
    diff = np.abs(rgb.astype(int) - ref)
    assert rgb.shape == ref.shape and diff.mean() <= 1.0 and diff.max() <= 8, (diff.mean(), diff.max())


def test_gif_decodes_the_first_frame(tmp_path):
    frames = [Image.fromarray(_noise(seed=s)).quantize(32) for s in range(3)]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=50, loop=0)
    (rgb,) = _decoded([path])
    np.testing.assert_array_equal(rgb, np.asarray(Image.open(path).convert("RGB")))
    np.testing.assert_array_equal(rgb, np.asarray(frames[0].convert("RGB")))


@pytest.mark.parametrize("name, kw", [("rotated.tif", {}), ("rotated.webp", {"lossless": True})])
def test_orientation_is_applied_like_exif_transpose(tmp_path, name, kw):
    from PIL import ImageOps

    path = tmp_path / name
    img = Image.fromarray(_noise(20, 30))
    exif = img.getexif()
    exif[0x0112] = 6
    img.save(path, exif=exif, **kw)
    (rgb,) = _decoded([path])
    ref = np.asarray(ImageOps.exif_transpose(Image.open(path)).convert("RGB"))
    assert rgb.shape == (30, 20, 3)
    np.testing.assert_array_equal(rgb, ref)


def test_read_images_decodes_every_listed_format(tmp_path):
    for i, ext in enumerate(["png", "jpg", "webp", "gif", "bmp", "tif"]):
        (tmp_path / "cls").mkdir(exist_ok=True)
        Image.fromarray(_photo(16 + i, 24)).save(tmp_path / "cls" / f"{i}.{ext}")
    rows = list(sluice.read_images(tmp_path, labels="parent_dir").map(I.decode()))
    assert [r["image"].shape for r in rows] == [(16 + i, 24, 3) for i in range(6)]
    # decode + random_resized_crop (fused by the planner) reads every format too.
    cropped = sluice.read_images(tmp_path).map(I.decode()).map(I.random_resized_crop(8))
    assert [s["image"].shape for s in cropped.iter(seed=1)] == [(8, 8, 3)] * 6


def test_pixel_guard_and_errors_name_the_format(tmp_path):
    path = tmp_path / "big.bmp"
    Image.new("RGB", (300, 200)).save(path)
    with pytest.raises(sluice.PipelineError, match=r"200x300 pixels exceeds the limit of 1000"):
        _decoded([path], max_pixels=1000)
    for name, fmt, label in [("cut.webp", "WEBP", "WebP"), ("cut.gif", "GIF", "GIF"), ("cut.tif", "TIFF", "TIFF")]:
        buf = io.BytesIO()
        Image.fromarray(_noise(64, 64)).save(buf, format=fmt)
        (tmp_path / name).write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
        with pytest.raises(sluice.PipelineError, match=rf"{name}.*(truncated|corrupt) image data: {label}"):
            _decoded([tmp_path / name])
