"""The docs site builds in strict mode (a broken link, a missing anchor, a page left out of the
navigation or an API reference that does not resolve fails), with the guides and the API
reference generated from the docstrings."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_site_builds_strictly_with_guides_and_api_reference(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    site = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    for page in ("index.html", "guides/images/index.html", "guides/pytorch/index.html", "TEXT/index.html",
                 "reference/python/index.html", "reference/rust/index.html"):
        assert (site / page).exists(), page
    api = (site / "reference/python/index.html").read_text()
    # Generated from the docstrings: the sources, the Dataset's methods, the ops.
    for name in ("read_parquet", "iter_torch_batches", "random_resized_crop", "tokenize"):
        assert name in api, name
    # Doctests render as code, not as Markdown links.
    assert api.count('class="gp"') > 20   # pygments' prompt token: the >>> of a doctest
    # Every page of docs/ is on the site.
    pages = {p.relative_to(ROOT / "docs").with_suffix("") for p in (ROOT / "docs").rglob("*.md")}
    for p in pages:
        assert (site / p / "index.html").exists() or (site / f"{p}.html").exists() or p.name == "index", p


def test_the_site_renders_in_chromium(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    from test_report import BROWSER, browse

    if BROWSER is None:
        pytest.skip("no chromium (make test installs Debian's chromium as root)")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "-d", str(site)], cwd=ROOT, check=True,
                   capture_output=True, timeout=300)
    page = site / "guides" / "pytorch" / "index.html"
    dom = browse(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    # The theme's navigation and the guide's own content, as the browser built them.
    for text in ("Images", "Python API", "StatefulDataLoader", "iter_torch_batches"):
        assert text in dom.stdout, text
    shot = tmp_path / "pytorch.png"
    run_ = browse(page, tmp_path, f"--screenshot={shot}")
    assert run_.returncode == 0 and shot.exists(), run_.stderr[-2000:]
    import numpy as np
    from PIL import Image

    img = np.asarray(Image.open(shot).convert("L"), dtype=np.float32)
    assert img.std() > 10 and (img < 200).mean() > 0.005, "a drawn page, not a blank one"
