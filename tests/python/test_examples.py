"""The gallery under examples/ runs, small, and does what it says: resumes exactly, learns,
shards, matches a local run."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(script, *args, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, str(ROOT / "examples" / script), *map(str, args)], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def steps(text):
    return {int(m.group(1)): m.group(0) for m in re.finditer(r"step (\d+) .*", text)}


def test_resnet_resumes_mid_run_with_the_batches_and_weights_it_would_have_had(tmp_path):
    pytest.importorskip("torchvision")
    ck = tmp_path / "ck.pt"
    first = run("train_resnet.py", "--max-steps", 3, "--save-every", 2, "--checkpoint", ck)
    assert ck.exists()
    again = run("train_resnet.py", "--max-steps", 3, "--checkpoint", ck)
    assert "resumed at epoch 0, step 2" in again
    # Step 3 after the resume: the same batch and the same loss as without the stop.
    assert steps(again)[3] == steps(first)[3]


def test_lm_pretraining_resumes_the_loader_exactly():
    pytest.importorskip("torchdata")
    straight = run("pretrain_lm.py", "--steps", 5)
    resumed = run("pretrain_lm.py", "--steps", 5, "--resume-at", 2)
    assert "resumed the loader after step 2" in resumed
    tokens = lambda text: {k: v.split("first tokens")[1] for k, v in steps(text).items()}  # noqa: E731
    assert tokens(resumed) == tokens(straight) and len(tokens(straight)) == 5


def test_speech_model_learns_from_log_mels():
    out = run("train_speech.py", "--epochs", 4)
    assert "features (8, 64, 101)" in out
    accuracy = float(re.findall(r"train accuracy ([\d.]+)", out)[-1])
    assert accuracy >= 0.5, out          # 3 classes: chance is 0.33


def test_jax_batches_are_sharded_over_the_devices():
    pytest.importorskip("jax")
    out = run("train_jax.py", "--steps", 4)
    assert "4 devices; image float32(8, 3, 32, 32) sharded as P('data',)" in out
    assert len(steps(out)) == 4


def test_ray_job_matches_the_local_run():
    pytest.importorskip("ray")
    out = run("ray_job.py", timeout=600)
    assert "identical" in out and "actor-" in out
