"""The guides' and the README's examples run as written.

Every ```python block of a guide runs, in order, in one namespace per guide (a later block may
use what an earlier one made), in a scratch folder that sees the repository's `examples/`.
Blocks that need what a test machine does not have (a Ray cluster's address, a real bucket) are
listed in NOT_RUN with the reason; everything else must run.
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# README last: its JAX example imports jax, after which nothing should fork (see conftest).
GUIDES = [
    "docs/index.md",
    "docs/guides/images.md",
    "docs/guides/audio.md",
    "docs/guides/pytorch.md",
    "docs/guides/own-data.md",
    "docs/REPRODUCIBILITY.md",
    "docs/READING.md",
    "docs/INSPECTING.md",
    "docs/TEXT.md",
    "docs/OPTIMIZER.md",
    "docs/RAY.md",
    "docs/SERVICE.md",
    "docs/guides/jax.md",
    "README.md",
]

# (guide, a snippet of the block) -> why it does not run here
NOT_RUN = {
    ("docs/RAY.md", 'ray_address="auto"'): "needs a running Ray cluster and /data/imagenette",
    ("docs/RAY.md", "@ray.remote"): "a fragment: runs inside the cluster example above",
    ("docs/READING.md", "s3://my-bucket"): "reads a real bucket with real credentials",
}


def blocks(guide):
    text = (ROOT / guide).read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def skipped(guide, code):
    return next((why for (g, snippet), why in NOT_RUN.items() if g == guide and snippet in code), None)


@pytest.mark.parametrize("guide", GUIDES)
def test_guide_examples_run(guide, monkeypatch, tmp_path):
    found = blocks(guide)
    assert found, guide
    # Examples name `examples/fixtures/...` and may write files (a saved plan): run them in a
    # scratch folder that sees the repository's examples, never in the repository.
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    ran = 0
    for i, code in enumerate(found):
        if skipped(guide, code):
            continue
        try:
            exec(compile(code, f"{guide} example {i + 1}", "exec"), namespace)
        except Exception as e:  # pragma: no cover - the message is the point
            raise AssertionError(f"{guide} example {i + 1} failed: {e!r}\n{code}") from e
        ran += 1
    assert ran or guide == "docs/RAY.md", f"{guide}: no example ran"


def test_every_not_run_entry_still_matches_a_block():
    # An entry whose block was edited away would silently stop excluding anything.
    for (guide, snippet) in NOT_RUN:
        assert any(snippet in code for code in blocks(guide)), (guide, snippet)


def test_the_architecture_crate_map_is_the_workspace_s():
    """docs/ARCHITECTURE.md's crate map lists each crate's sluice dependencies as Cargo.toml
    says (`cargo metadata`, normal dependencies)."""
    import json
    import shutil
    import subprocess

    if shutil.which("cargo") is None:
        pytest.skip("cargo is not on PATH")
    text = (ROOT / "docs/ARCHITECTURE.md").read_text()
    block = re.search(r"```crate-deps\n(.*?)```", text, flags=re.S).group(1)
    documented = {}
    for line in block.strip().splitlines():
        name, _, deps = line.partition(":")
        documented[name.strip()] = sorted(d.strip() for d in deps.split(",") if d.strip())
    meta = json.loads(subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=120,
    ).stdout)
    ours = {p["name"] for p in meta["packages"]}
    actual = {
        p["name"]: sorted(d["name"] for d in p["dependencies"] if d["name"] in ours and d["kind"] is None)
        for p in meta["packages"]
    }
    assert documented == actual
