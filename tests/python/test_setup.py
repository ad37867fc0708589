"""The README's two commands: `make demo` installs only what the demo needs, `make test` adds
the test dependencies, and both say what the first build does before it starts."""

import os
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]


def planned(target, tmp_path):
    """What `make -n TARGET` would run for a venv and a target dir that do not exist yet."""
    # Run by `make test` this is a sub-make: without the parent's MAKE* variables it plans
    # (and prints) as a make started by hand does.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", target, f"VENV={tmp_path / 'venv'}",
         f"CARGO_TARGET_DIR={tmp_path / 'target'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True, env=env,
    )
    return out.stdout


def installs(plan):
    """The requirements the plan's pip installs name (quoted, as the Makefile writes them)."""
    lines = (line.split("pip install", 1)[1] for line in plan.splitlines() if "pip install" in line)
    return " ".join(req for line in lines for req in re.findall(r'"([^"]+)"', line))


def test_make_demo_installs_only_what_the_demo_needs(tmp_path):
    plan = planned("demo", tmp_path)
    pip = installs(plan)
    for needed in ("numpy", "maturin", "cloudpickle"):
        assert needed in pip
    for heavy in ("torch", "jax", "ray", "moto", "pytest", "av>="):
        assert heavy not in pip, f"make demo installs {heavy}"
    # Before the long first build, a line says what it is and how long it takes.
    assert "building the Rust extension for the first time" in plan
    assert "about 10 minutes on 2 cores" in plan
    assert plan.strip().splitlines()[-1].endswith("examples/demo.py")


def test_make_test_adds_the_test_dependencies(tmp_path):
    pip = installs(planned("test", tmp_path))
    for dep in ("numpy", "maturin", "torch", "jax", "ray", "moto", "pytest"):
        assert dep in pip
