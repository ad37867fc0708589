"""The HTML report as a person sees it: rendered from the CV reference pipeline, opened in
headless Chromium (Debian's `chromium`, installed by `make test` when missing), screenshotted,
and checked: the page loaded without console messages, every plot drew something, the
screenshot is not blank; a failing run's report names the failing op."""

import json
import pathlib
import re
import shutil
import subprocess

import numpy as np
import pytest

import sluice
import sluice.image as I

IMAGES = "examples/fixtures/images"
BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no chromium (make test installs Debian's chromium as root)")


def cv_reference():
    # benchmarks/peers/sluice_native.py's CV pipeline on the fixture photos.
    return (
        sluice.read_images(IMAGES, labels="parent_dir").repeat(8).shuffle(seed=0)
        .map(I.decode()).map(I.random_resized_crop(224, scale=(0.08, 1.0)))
        .map(I.horizontal_flip(0.5)).map(I.color_jitter(0.4, 0.4, 0.4, 0.1, p=0.8))
        .map(I.grayscale(p=0.2, num_output_channels=3)).map(I.gaussian_blur(23, sigma=(0.1, 2.0), p=0.5))
        .map(I.normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)))
        .map(sluice.ops.select(["image", "label"])).batch(16)
    )


def browse(page: pathlib.Path, tmp: pathlib.Path, *args: str) -> subprocess.CompletedProcess:
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp / 'profile'}",
           "--enable-logging=stderr", "--v=0", "--window-size=1100,3200", *args, page.as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@needs_browser
def test_cv_report_loads_in_chromium_with_every_plot_drawn(tmp_path):
    ds = cv_reference()
    assert sum(1 for _ in ds.iter(num_threads=2)) == 4
    page = pathlib.Path(ds.report(tmp_path / "cv.html"))
    text = page.read_text()
    assert "http://" not in text and "https://" not in text, "the page must not need the network"
    dom = browse(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r'<body data-plots="(\d+)" data-drawn="(\d+)"', dom.stdout)
    assert body, "the page's check script did not run"
    plots, drawn = map(int, body.groups())
    assert plots >= 8 and drawn == plots
    assert "CONSOLE" not in dom.stderr, [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln]
    for stage in ("source: read_images", "batch(16)"):
        assert stage in dom.stdout
    shot = tmp_path / "cv.png"
    run = browse(page, tmp_path, f"--screenshot={shot}")
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    from PIL import Image

    img = np.asarray(Image.open(shot).convert("L"), dtype=np.float32)
    assert img.shape == (3200, 1100)
    assert img.std() > 10 and (img < 200).mean() > 0.005, "the screenshot shows a drawn page, not a blank one"


@needs_browser
def test_report_of_a_failing_run_shows_the_failing_op(tmp_path):
    def explode(sample):
        if sample["id"] == 37:
            raise ValueError("corrupt sample")
        return sample

    ds = sluice.range(100).map(explode).batch(5)
    with pytest.raises(sluice.PipelineError):
        for _ in ds:
            pass
    page = pathlib.Path(ds.report(tmp_path / "failed.html"))
    dom = browse(page, tmp_path, "--dump-dom")
    error = re.search(r'<div class="err" id="error">(.*?)</div>', dom.stdout, re.S)
    assert error and "explode" in error.group(1) and "37" in error.group(1) and "corrupt sample" in error.group(1)


def test_report_data_and_bad_use(tmp_path):
    ds = sluice.range(10).batch(5)
    with pytest.raises(ValueError, match="has not run yet"):
        ds.report(tmp_path / "r.html")
    path = ds.report(tmp_path / "r.html", batches=1)  # runs one batch, then reports
    html = pathlib.Path(path).read_text()
    raw = re.search(r"<pre>(.*?)</pre>", html, re.S).group(1)
    assert '&quot;outputs&quot;: 1' in raw
    it = sluice.range(30).batch(5).iter()
    next(it)
    assert pathlib.Path(it.report(tmp_path / "it.html")).read_text().count("<svg") >= 8
    it.close()
    assert json.loads(json.dumps(ds.stats().to_dict()))["consumer"]["outputs"] == 1


def cli(*args, cwd):
    import sys

    return subprocess.run([sys.executable, "-m", "sluice.cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd)


def test_sluice_report_command_runs_a_pipeline_file(tmp_path):
    root = pathlib.Path(__file__).resolve().parents[2]
    out = tmp_path / "pipeline.html"
    done = cli("report", "examples/pipeline.toml", "-o", str(out), "--batches", "3", cwd=root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out) and "select" in out.read_text()
    # A run that fails still writes its report, naming the op; the exit status says it failed.
    (tmp_path / "notes.txt").write_text("not an image")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"source": {"source": "read_files", "paths": [str(tmp_path / "notes.txt")]},
                               "steps": [{"step": "map", "op": "image.decode"}, {"step": "batch", "size": 1}]}))
    failed = cli("report", str(bad), "-o", str(tmp_path / "bad.html"), cwd=tmp_path)
    assert failed.returncode == 1 and "the run failed" in failed.stderr
    assert 'id="error"' in (tmp_path / "bad.html").read_text() and "decode" in (tmp_path / "bad.html").read_text()
    assert cli("report", "missing.toml", cwd=tmp_path).returncode == 1
    assert cli("report", "examples/pipeline.toml", "--batches", "0", cwd=root).returncode == 2


def test_the_plans_table_measures_each_stage_when_normalize_is_written_into_the_batch(tmp_path):
    """The run moves normalize into the batch when it starts, renaming two stages; the
    plan's table still gets each stage's measured rate."""
    ds = (sluice.read_images(IMAGES, labels="parent_dir").repeat(4)
          .map(I.decode()).map(I.random_resized_crop(32)).map(I.normalize((0.5,) * 3, (0.25,) * 3))
          .map(sluice.ops.select(["image", "label"])).batch(4))
    for _ in range(2):  # the first run makes the plan, the second runs it
        it = ds.iter(optimize=True)
        for _ in it:
            pass
    assert [s["name"] for s in it.stats().stages][-1] == "batch(4) writing normalize"
    text = pathlib.Path(it.report(tmp_path / "plan.html")).read_text()
    plan = text[text.index("The optimizer's plan"):]
    plan = plan[:plan.index("</table>")]
    rows = re.findall(r"<tr>(.*?)</tr>", plan)[1:]
    assert len(rows) == 3
    assert all(not r.endswith("<td>—</td>") for r in rows), rows
