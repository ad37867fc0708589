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
