"""The wheel as a user gets it, checked from outside the source tree: built with maturin (the
quick `dev-release` profile; `make wheel` builds the same wheel with `release`), installed with
pip into a fresh venv in a temporary folder, then run from there — the README quickstart, the
`sluice` console script (run/plan/bench on the example pipeline), every module of the package —
so a file missing from the wheel, a broken entry point or a version mismatch fails `make test`.

Needs the network or a warm pip cache for the wheel's own dependencies (numpy, cloudpickle).
`SLUICE_TEST_WHEEL=dist/sluice_ml-….whl` checks that wheel instead of building one.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import sys
import time
import zipfile

import pytest

from procs import ROOT_DIR, Child, run_cmd

PACKAGE_DIR = ROOT_DIR / "python" / "sluice"
# Third-party packages that only extras install ([torch], [jax], [ray], [arrow]): a module may
# need one of them at import (the adapters); every other import must work with the bare wheel.
EXTRAS_IMPORTS = {"torch", "torchvision", "torchdata", "jax", "jaxlib", "ray", "pyarrow", "pandas"}


def _ok(proc, what: str) -> str:
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel path, venv folder, scratch folder, env): the wheel built and installed outside the
    tree, and a scratch folder holding a copy of examples/ to run things in."""
    base = tmp_path_factory.mktemp("wheel")
    assert not base.resolve().is_relative_to(ROOT_DIR), "the check must run outside the tree"
    build_env = dict(os.environ)
    build_env.setdefault("CARGO_TARGET_DIR", str(pathlib.Path.home() / ".cache" / "sluice-target"))
    maturin = pathlib.Path(sys.executable).parent / "maturin"
    dist = base / "dist"
    if os.environ.get("SLUICE_TEST_WHEEL"):
        # A wheel built elsewhere (the release wheel of `make wheel`, a manylinux_2_28 build).
        wheel = pathlib.Path(os.environ["SLUICE_TEST_WHEEL"]).resolve()
    else:
        # A cold build compiles every dependency; an incremental one takes seconds.
        _ok(
            run_cmd(
                # maturin audits the library (auditwheel's rules: only allowed system libraries,
                # no too-recent symbol versions) and tags the oldest manylinux it complies with.
                [maturin, "build", "--profile", "dev-release", "--auditwheel", "check",
                 "--interpreter", sys.executable, "--out", dist],
                timeout=1500, cwd=ROOT_DIR, env=build_env,
            ),
            "maturin build",
        )
        (wheel,) = dist.glob("*.whl")

    venv = base / "venv"
    _ok(run_cmd([sys.executable, "-m", "venv", venv], timeout=120), "python -m venv")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONNOUSERSITE"] = "1"
    _ok(
        run_cmd(
            [venv / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel],
            timeout=600, env=env,
        ),
        "pip install",
    )
    scratch = base / "scratch"
    shutil.copytree(ROOT_DIR / "examples", scratch / "examples", ignore=shutil.ignore_patterns("*.py"))
    return wheel, venv, scratch, env


def _py(installed, code: str, timeout: float = 120) -> str:
    _, venv, scratch, env = installed
    return _ok(run_cmd([venv / "bin" / "python", "-c", code], timeout=timeout, cwd=scratch, env=env), code)


def _sluice(installed, *args: str, timeout: float = 120):
    _, venv, scratch, env = installed
    return run_cmd([venv / "bin" / "sluice", *args], timeout=timeout, cwd=scratch, env=env)


def _wheel_version(wheel: pathlib.Path) -> str:
    return wheel.name.split("-")[1]


def test_wheel_is_one_abi3_manylinux_wheel_of_sluice_ml(installed):
    wheel = installed[0]
    name, version, py, abi, plat = wheel.stem.split("-")
    assert (name, abi) == ("sluice_ml", "abi3"), wheel.name
    assert py.startswith("cp3") and plat.startswith("manylinux_"), wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(f"sluice_ml-{version}.dist-info/METADATA").decode()
        entry_points = z.read(f"sluice_ml-{version}.dist-info/entry_points.txt").decode()
    for f in ("sluice/_native.pyi", "sluice/py.typed", "sluice/cli.py"):
        assert f in names, f"{f} is not in the wheel"
    assert any(re.fullmatch(r"sluice/_native\.abi3\.so", n) for n in names), sorted(names)
    assert any(n.endswith("LICENSE") for n in names), "no LICENSE in the wheel"
    assert re.search(r"^sluice ?= ?sluice\.cli:main$", entry_points, re.M), entry_points
    assert "Name: sluice-ml" in meta and f"Version: {version}" in meta
    for extra in ("torch", "jax", "ray", "arrow", "test"):
        assert f"Provides-Extra: {extra}" in meta, extra
    # The [ray] extra is Ray core: sluice uses actors, not Ray Data.
    assert not re.search(r"Requires-Dist: ray\[data\]", meta)


def test_installed_version_is_the_wheel_version(installed):
    out = _py(
        installed,
        "import importlib.metadata as m, sluice; print(sluice.__version__, m.version('sluice-ml'), sluice.__file__)",
    )
    ours, dist, where = out.split()
    assert ours == dist == _wheel_version(installed[0])
    # Imported from the venv, never from the checkout.
    assert pathlib.Path(where).resolve().is_relative_to(installed[1].resolve()), where


def test_every_module_of_the_package_imports_from_the_wheel(installed):
    modules = sorted(
        ".".join(("sluice", *p.relative_to(PACKAGE_DIR).with_suffix("").parts)).removesuffix(".__init__")
        for p in PACKAGE_DIR.rglob("*.py")
    )
    assert "sluice.image" in modules and "sluice.cli" in modules
    code = f"""
import importlib, json
failed = {{}}
for name in {modules!r}:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as e:
        failed[name] = e.name
    except Exception as e:
        failed[name] = repr(e)
print(json.dumps(failed))
"""
    failed = json.loads(_py(installed, code, timeout=300))
    # Only a missing optional dependency may stop a module (the bare wheel has no extras).
    bad = {m: why for m, why in failed.items() if str(why).split(".")[0] not in EXTRAS_IMPORTS}
    assert not bad, f"modules that do not import from the installed wheel: {bad}"


def test_readme_quickstart_runs_from_the_installed_wheel(installed):
    readme = (ROOT_DIR / "README.md").read_text()
    quickstart = re.search(r"## Ten lines\s+```python\n(.*?)```", readme, re.S).group(1)
    out = _py(installed, quickstart)
    assert "4 ['everyday', 'space', 'texture']" in out, out
    assert "(4, 16)" in out, out


def test_cli_console_script_runs_plans_and_benches_the_example_pipeline(installed):
    version = _wheel_version(installed[0])
    assert _ok(_sluice(installed, "--version"), "sluice --version").split() == ["sluice", version]
    out = _ok(_sluice(installed, "run", "examples/pipeline.toml", "--limit", "3"), "sluice run")
    assert "consumer: 3 outputs" in out, out
    out = _ok(_sluice(installed, "plan", "examples/pipeline.toml"), "sluice plan")
    assert "read_images" in out, out
    out = _ok(_sluice(installed, "bench", "examples/pipeline.toml", "--batches", "2", "--json"), "sluice bench")
    assert json.loads(out)["batches"] == 2, out


def test_cli_console_script_exit_statuses(installed):
    usage = _sluice(installed, "frobnicate")
    assert usage.returncode == 2 and "frobnicate" in usage.stderr, usage
    missing = _sluice(installed, "run", "no-such-pipeline.toml")
    assert missing.returncode == 1 and "no-such-pipeline.toml" in missing.stderr, missing
    assert "Traceback" not in missing.stderr, missing.stderr


def test_ctrl_c_stops_the_console_script_at_once(installed):
    _, venv, scratch, env = installed
    endless = scratch / "endless.toml"
    endless.write_text('seed = 0\n[source]\nsource = "range"\nn = 1000000000000\n[[steps]]\nstep = "batch"\nsize = 8\n')
    with Child(args=[venv / "bin" / "sluice", "run", endless], cwd=scratch, env=env) as child:
        time.sleep(2)  # inside the Rust run by now; an earlier signal ends it too
        assert child.proc.poll() is None, child.proc.stderr.read()
        child.send_signal(signal.SIGINT)
        # Python's own handler would only set a flag the Rust loop never reads: a hang.
        assert child.proc.wait(timeout=30) == -signal.SIGINT
