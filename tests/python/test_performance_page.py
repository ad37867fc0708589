"""docs/PERFORMANCE.md and README's headline are written from one run's results
(benchmarks/performance.py): rendered here from fixed, made-up results, so the page's shape and
arithmetic are checked without running a benchmark."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def perf():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        yield importlib.import_module("performance")
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


def entry(name, tp, ttfb=1.0, pss=100, rss=200, **extra):
    return {"name": name, "status": "ok", "runs": 3, "ok_runs": 3, "throughput_median": tp,
            "ttfb_median": ttfb, "peak_pss_median": pss * 2**20, "peak_rss_median": rss * 2**20,
            "window_median": 6.0 + (tp % 7) / 2, **extra}


def write_results(folder: Path) -> None:
    meta = {"command": "run.py --window 6", "date": "2026-11-29 01:00 UTC", "commit": "abc1234",
            "machine_info": {"cpu": "AMD EPYC (family 25, model 17)", "isa": "AVX-512", "cores": 2, "memory_gib": 23.5,
                             "python": "3.11.7"},
            "warmup": 1, "repeats": 3, "window": 6.0, "blas_threads": 1,
            "sluice_build": "release", "page_command": "benchmarks/performance.py"}
    cv = {"torch_dataloader": entry("PyTorch DataLoader", 200.0, 4.0, 1000, 1600),
          "tfdata": entry("tf.data", 400.0, 5.0),
          "grain": entry("Grain", 250.0),
          "ray_data": {"name": "Ray Data", "status": "failed", "runs": 3, "ok_runs": 0,
                       "error": "RuntimeError: no object store\nmore"},
          "sluice_native": entry("sluice (built-in ops)", 2000.0, 0.2, 300, 400),
          "limit": entry("limit", 2500.0)}
    asr = {"torch_dataloader": entry("PyTorch DataLoader", 100.0),
           "grain": entry("Grain", 150.0),
           "sluice_native": entry("sluice (built-in ops)", 1350.0, short_window_runs=1),
           "limit": entry("limit", 1500.0)}
    folder.mkdir(parents=True, exist_ok=True)
    for w, summary in (("cv", cv), ("asr", asr)):
        (folder / f"{w}.json").write_text(json.dumps({"meta": meta, "summary": summary, "runs": []}))


def test_page_and_headline_come_from_the_results(perf, tmp_path):
    write_results(tmp_path / "res")
    page = tmp_path / "PERFORMANCE.md"
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n{perf.README_BEGIN}\nstale table\n{perf.README_END}\nafter\n")
    assert perf.render(tmp_path / "res", page, readme, None) == 0

    text = page.read_text()
    assert "2 cores of an AMD EPYC (family 25, model 17), AVX-512 (lscpu)" in text
    assert "`release` build" in text and "median windows 6.5–9.0 s" in text
    assert "commit `abc1234`" in text and "~6 s after its first batch" in text
    # CV: best other peer is tf.data (Ray Data failed and is named as such), sluice is 5x it
    # and 0.80x the limit
    cv_row = next(ln for ln in text.splitlines() if ln.startswith("| CV:"))
    assert "**2,000**" in cv_row and "tf.data 400" in cv_row
    assert "| 5.00× |" in cv_row and "| 0.80× |" in cv_row
    # ASR has no tf.data: Grain is the best other peer; ratios against the faster of it and
    # the DataLoader
    asr_row = next(ln for ln in text.splitlines() if ln.startswith("| ASR:"))
    assert "Grain 150" in asr_row and "| 9.00× |" in asr_row and "| 0.90× |" in asr_row
    # the grids: a failed system says so; memory in MiB with RSS beside it; first batch
    assert "| Ray Data | failed |" in text
    assert "| sluice (built-in ops) | 300 (400) | 100 (200) |" in text
    assert "| sluice (built-in ops) | 0.20 | 1.00 |" in text
    assert "RuntimeError: no object store`" in text and "more" not in text.split("Notes")[1]
    assert "had < 2 s after the first batch" in text

    rd = readme.read_text()
    assert "stale table" not in rd and rd.startswith("# x\n\nbefore\n") and rd.endswith("after\n")
    assert "**2,000**" in rd and "docs/PERFORMANCE.md" in rd and "AVX-512" in rd


def test_render_without_results_or_markers_fails_clearly(perf, tmp_path):
    assert perf.render(tmp_path, tmp_path / "P.md", None, None) == 2
    write_results(tmp_path / "res")
    readme = tmp_path / "README.md"
    readme.write_text("no markers\n")
    with pytest.raises(SystemExit, match="markers"):
        perf.render(tmp_path / "res", tmp_path / "P.md", readme, None)


def test_window_sizes_each_system_from_its_warmup(perf):
    R = perf.R
    runs = [{"system": "fast", "warmup": True, "status": "ok", "throughput": 1000.0},
            {"system": "slow", "warmup": True, "status": "ok", "throughput": 10.0},
            {"system": "dead", "warmup": True, "status": "failed"},
            {"system": "fast", "warmup": False, "status": "ok", "throughput": 5.0}]
    sized = R.window_samples("cv", runs, floor=128, window=6.0)
    # 1000/s x 6 s x margin, whole batches of 64; the slow one keeps the floor
    assert sized["fast"] % 64 == 0 and sized["fast"] >= 6000 * R.WINDOW_MARGIN
    assert sized["fast"] < 6000 * R.WINDOW_MARGIN + 64
    assert sized["slow"] == 128 and "dead" not in sized


def test_the_committed_page_is_the_renderers_output(perf):
    """docs/PERFORMANCE.md is generated, not edited by hand: it has the renderer's sections
    and README carries the same headline."""
    text = (REPO / "docs" / "PERFORMANCE.md").read_text()
    for section in ("## Headline", "## Throughput", "## Against the limit",
                    "## Time to first batch", "## Peak memory", "**Machine**"):
        assert section in text
    readme = (REPO / "README.md").read_text()
    head = readme[readme.index(perf.README_BEGIN):readme.index(perf.README_END)]
    table = text[text.index("## Headline"):text.index("Best other peer")]
    rows = [ln for ln in table.splitlines() if ln.startswith("| ")]
    assert rows and all(r in head for r in rows)
