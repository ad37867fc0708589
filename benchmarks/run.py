#!/usr/bin/env python3
"""Run the reference workloads on every system, interleaved, and write the results.

    python benchmarks/run.py [--workloads cv,nlp,asr] [--systems torch_dataloader,ray_data,...]
                             [--repeats 3] [--warmup 1] [--samples N | cv=N,nlp=N,asr=N]
                             [--quick] [--data DIR] [--out DIR]

Protocol (BRIEF.md, "Performance protocol"):
- every measurement is a fresh subprocess (`run.py --_child ...`), so start-up and memory are
  the system's own; the parent samples the child's whole process tree with psutil every 0.1 s
  (peak RSS summed over the tree, and peak PSS, which counts shared pages once);
- time to first batch runs from the call that builds the iterator (after the module import;
  Ray's start-up, worker spawn and imports inside workers count) to the first batch in hand;
- throughput = samples in the batches after the first, over the time from the first batch to
  the last one, stopping at N samples or after the time budget;
- per workload: one warm-up round (discarded), then `repeats` rounds with the systems
  interleaved A B C … A B C …; medians are reported, as ratios to the PyTorch DataLoader and to
  the limit (the decode/tokenize-only throughput);
- a system that fails or produces wrongly-shaped batches is reported with its error and is not
  retried in later rounds; the run goes on.

Writes <out>/<workload>.{md,json,png} and keeps every child's stdout/stderr under <out>/logs/.
With ``--docs docs/BENCHMARKS.md`` it also puts each workload's section (table, machine, exact
command, plot in docs/img/) into that file between ``<!-- run.py WORKLOAD begin/end -->``
markers (appended when the markers are missing); ``--render DIR`` does the same from a
finished run's results without running anything.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from peers import BASELINE, LIMIT, SYSTEMS  # noqa: E402
from peers import common as C  # noqa: E402

DEFAULT_SAMPLES = {"cv": 2048, "nlp": 128 * 1500, "asr": 400}
SHORT_WINDOW_S = 2.0  # a steady-state window shorter than this mostly measures buffered batches
QUICK_SAMPLES = {"cv": 128, "nlp": 128 * 20, "asr": 20}
WORKLOAD_TITLES = {
    "cv": "CV — SimCLR-style augmentation of JPEGs",
    "nlp": "NLP — GPT-2-style BPE tokenization of text lines",
    "asr": "ASR — MP3 to log-mel features",
}
WORKLOAD_DESC = {
    "cv": "read JPEG → decode RGB → RandomResizedCrop(224, scale (0.08, 1), ratio (3/4, 4/3)) → "
          "HorizontalFlip(0.5) → ColorJitter(0.4, 0.4, 0.4, 0.1) p=0.8 → RandomGrayscale(0.2) → "
          "GaussianBlur(23, σ∈[0.1, 2]) p=0.5 → Normalize(ImageNet) → batch 64 "
          "(float32 [64,3,224,224] + int64 labels). Limit: Pillow decode only, 2 processes.",
    "nlp": "text lines → byte-level BPE (tokenizer.json from anthropic 0.38.0, HF tokenizers) → "
           "truncate 254 → <SOS>(4) … <EOT>(0) → pad to 256 with 0 → batch 128 (int64 [128,256]). "
           "Limit: `Tokenizer.encode_batch` alone on 2 threads.",
    "asr": "MP3 → decode → resample 16 kHz → STFT (n_fft 400, hop 160) → time_stretch(0.8) "
           "(phase vocoder) → power → time_mask(80) → freq_mask(27) → 80-bin mel → log; batch 1. "
           "Limit: MP3 decode only, 2 processes.",
}
UNIT = {"cv": "images/s", "nlp": "lines/s", "asr": "clips/s"}


# =========================================================================================
# child: one measurement
# =========================================================================================
def child_main(spec: dict) -> int:
    t_start = time.perf_counter()
    import psutil

    proc_age = time.time() - psutil.Process().create_time()
    result = {"system": spec["system"], "workload": spec["workload"], "status": "failed"}
    it = None
    try:
        from peers import load

        mod = load(spec["system"])
        t_import = time.perf_counter()
        workload = spec["workload"]
        batch_n = C.BATCH[workload]
        n_target = spec["samples"]
        total = batch_n + C.ceil_batches(n_target, batch_n)
        t0 = time.perf_counter()
        it = mod.make_iter(workload, Path(spec["data"]), samples=total, seed=spec["seed"],
                           workers=spec["workers"])
        first = next(it)
        t_first = time.perf_counter()
        unchecked = getattr(mod, "UNCHECKED", False)
        result["first_batch"] = C.describe(first)
        first_n = C.batch_len(first)
        problems = [] if unchecked else C.check_batch(workload, first)
        if not unchecked:
            result["first_batch_sha"] = C.checksum(first)
        del first
        n = 0
        batches = 0
        exhausted = False
        deadline = t_first + spec["budget"]
        t_last = t_first
        while n < n_target:
            try:
                b = next(it)
            except StopIteration:
                exhausted = True
                break
            t_last = time.perf_counter()
            n += C.batch_len(b)
            batches += 1
            if batches == 1 and not unchecked and not problems:
                problems = C.check_batch(workload, b, full=False)
            del b
            if t_last > deadline:
                break
        elapsed = t_last - t_first
        t_close0 = time.perf_counter()
        it.close()
        it = None
        t_closed = time.perf_counter()
        result.update({
            "status": "invalid" if problems else "ok",
            "problems": problems,
            "samples": n,
            "batches": batches,
            "seconds": elapsed,
            "throughput": n / elapsed if elapsed > 0 and n else None,
            "end_to_end_throughput": (n + first_n) / (t_last - t0),
            "ttfb": t_first - t0,
            "ttfb_from_process_start": proc_age + (t_first - t_start),
            "import_seconds": t_import - t_start,
            "close_seconds": t_closed - t_close0,
            "truncated_by_budget": (n < n_target and not exhausted),
            "exhausted": exhausted,
        })
    except NotImplementedError as e:
        result.update(status="not ready", error=f"NotImplementedError: {e}")
    except BaseException as e:  # noqa: BLE001 - report anything, never hang
        result.update(status="failed", error=f"{type(e).__name__}: {e}",
                      traceback=traceback.format_exc(limit=8)[-4000:])
        if it is not None:
            try:
                it.close()
            except BaseException:  # noqa: BLE001
                pass
    print("@@RESULT " + json.dumps(result, default=str), flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: some peers (Grain's shared memory, Ray) print noise or stall
    # in atexit handlers after they have been closed; the measurement is already out.
    os._exit(0)


# =========================================================================================
# parent: run children, watch memory
# =========================================================================================
class Tree:
    """Samples a process tree's memory; kills what is left of it at the end."""

    def __init__(self, pid: int):
        import psutil

        self.psutil = psutil
        self.root = psutil.Process(pid)
        self.seen: dict[int, float] = {}
        self.peak_rss = 0
        self.peak_pss = 0
        self.procs_max = 0
        self._last_pss = 0.0

    def sample(self) -> None:
        ps = self.psutil
        try:
            procs = [self.root] + self.root.children(recursive=True)
        except ps.Error:
            return
        rss = 0
        live = []
        for p in procs:
            try:
                rss += p.memory_info().rss
                self.seen.setdefault(p.pid, p.create_time())
                live.append(p)
            except ps.Error:
                pass
        self.peak_rss = max(self.peak_rss, rss)
        self.procs_max = max(self.procs_max, len(live))
        now = time.monotonic()
        if now - self._last_pss >= 0.25:
            self._last_pss = now
            pss = 0
            for p in live:
                try:
                    pss += p.memory_full_info().pss
                except (ps.Error, AttributeError):
                    pass
            self.peak_pss = max(self.peak_pss, pss)

    def kill_leftovers(self) -> int:
        ps = self.psutil
        killed = 0
        for pid, created in self.seen.items():
            try:
                p = ps.Process(pid)
                if p.create_time() != created:
                    continue  # pid reused by someone else
                p.kill()
                killed += 1
            except ps.Error:
                pass
        return killed


def measure(spec: dict, log_stem: Path, timeout: float) -> dict:
    log_stem.parent.mkdir(parents=True, exist_ok=True)
    out_path = log_stem.with_suffix(".out")
    err_path = log_stem.with_suffix(".err")
    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
    if spec.get("sluice_path"):
        env["PYTHONPATH"] = os.pathsep.join(
            [spec["sluice_path"]] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if spec.get("blas_threads"):
        # Parallelism comes from each system's workers; BLAS/OpenMP pools inside every worker
        # oversubscribe the cores (numpy's OpenBLAS in 2 DataLoader workers made the mel
        # matmul 15x slower here). Ray already does this for its workers.
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(spec["blas_threads"])
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_child", json.dumps(spec)]
    t0 = time.monotonic()
    with open(out_path, "wb") as fo, open(err_path, "wb") as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, env=env,
                             cwd=str(REPO), start_new_session=True)
        tree = Tree(p.pid)
        timed_out = False
        while p.poll() is None:
            tree.sample()
            if time.monotonic() - t0 > timeout:
                timed_out = True
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                break
            time.sleep(0.1)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    leftovers = tree.kill_leftovers()
    wall = time.monotonic() - t0
    result = None
    for line in out_path.read_text(errors="replace").splitlines():
        if line.startswith("@@RESULT "):
            result = json.loads(line[len("@@RESULT "):])
    if result is None:
        tail = err_path.read_text(errors="replace").strip().splitlines()[-15:]
        why = f"timed out after {timeout:.0f} s" if timed_out else f"exit code {p.returncode}"
        result = {"system": spec["system"], "workload": spec["workload"], "status": "failed",
                  "error": f"{why}; stderr tail:\n" + "\n".join(tail)}
    result.update({
        "peak_rss_bytes": tree.peak_rss,
        "peak_pss_bytes": tree.peak_pss,
        "max_processes": tree.procs_max,
        "wall_seconds": wall,
        "timed_out_at_exit": timed_out and result.get("status") == "ok",
        "leftover_processes_killed": leftovers,
        "log": str(log_stem.relative_to(REPO)) if log_stem.is_relative_to(REPO) else str(log_stem),
    })
    return result


WINDOW_MARGIN = 1.3  # warm-up rates run low (start-up, cold caches): aim past the window
WINDOW_BUDGET = 3.0  # the time budget, in windows, that cuts a run whose rate was overestimated


def window_samples(workload: str, runs: list[dict], floor: int, window: float) -> dict[str, int]:
    """Each system's sample count for its measured runs: its warm-up rate times `window`
    seconds (with a margin), whole batches, never fewer than `floor`. A fixed count makes the
    fast systems' windows a fraction of a second (mostly buffered batches) or the slow ones'
    minutes long; sized per system, every window lasts about the same time."""
    out = {}
    for r in runs:
        if r.get("warmup") and r.get("status") == "ok" and r.get("throughput"):
            n = int(r["throughput"] * window * WINDOW_MARGIN)
            out[r["system"]] = max(floor, C.ceil_batches(n, C.BATCH[workload]))
    return out


# =========================================================================================
# reporting
# =========================================================================================
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarise(workload: str, systems: list[str], runs: list[dict]) -> dict:
    from peers import load

    out = {}
    for s in systems:
        mine = [r for r in runs if r["system"] == s and not r.get("warmup")]
        ok = [r for r in mine if r["status"] == "ok"]
        bad = [r for r in mine + [r for r in runs if r["system"] == s and r.get("warmup")]
               if r["status"] != "ok"]
        entry = {"name": load(s).NAME, "runs": len(mine), "ok_runs": len(ok)}
        if ok:
            tps = [r["throughput"] for r in ok if r.get("throughput")]
            entry.update({
                "status": "ok",
                "throughput_median": med(tps),
                "throughput_min": min(tps) if tps else None,
                "throughput_max": max(tps) if tps else None,
                "ttfb_median": med([r["ttfb"] for r in ok]),
                "ttfb_from_process_start_median": med([r["ttfb_from_process_start"] for r in ok]),
                "peak_rss_median": med([r["peak_rss_bytes"] for r in ok]),
                "peak_pss_median": med([r["peak_pss_bytes"] for r in ok]),
                "samples_median": med([r["samples"] for r in ok]),
                "window_median": med([r["seconds"] for r in ok]),
                "end_to_end_median": med([r.get("end_to_end_throughput") for r in ok]),
                "truncated_runs": sum(1 for r in ok if r.get("truncated_by_budget")),
                "short_window_runs": sum(1 for r in ok if r["seconds"] < SHORT_WINDOW_S),
                "first_batch": ok[0].get("first_batch"),
                "first_batch_sha": ok[0].get("first_batch_sha"),
            })
        if bad:
            r = bad[-1]
            entry.setdefault("status", r["status"])
            entry["error"] = r.get("error") or "; ".join(r.get("problems") or [])
            entry["error_log"] = r.get("log")
        out[s] = entry
    add_ratios(out)
    return out


def add_ratios(summary: dict) -> None:
    """Each system's median throughput as a ratio to the DataLoader's and to the limit's."""
    base = summary.get(BASELINE, {}).get("throughput_median")
    lim = summary.get(LIMIT, {}).get("throughput_median")
    for e in summary.values():
        tp = e.get("throughput_median")
        e["vs_dataloader"] = tp / base if tp and base else None
        e["vs_limit"] = tp / lim if tp and lim else None


def fmt(x, spec=".1f", dash="—"):
    return dash if x is None else format(x, spec)


def mib(b):
    return None if not b else b / 2**20


def count_text(meta: dict, workload: str) -> str:
    if meta.get("window"):
        return (f"samples for ~{meta['window']:g} s per system (sized from its warm-up rate, "
                f"at least {meta['samples'][workload]})")
    return f"{meta['samples'][workload]} samples"


def write_markdown(path: Path, workload: str, summary: dict, meta: dict) -> None:
    L = []
    L.append(f"### {WORKLOAD_TITLES[workload]}")
    L.append("")
    L.append(WORKLOAD_DESC[workload])
    L.append("")
    L.append(f"Command: `{meta['command']}`  ")
    L.append(f"Machine: {meta['machine']}; {meta['date']}; sluice commit `{meta['commit']}`; "
             f"load average at start {meta['load_start']}, at end {meta['load_end']}.  ")
    L.append(f"Each system: {meta['warmup']} warm-up + {meta['repeats']} measured runs, "
             f"interleaved, fresh process each; {count_text(meta, workload)} after the first "
             f"batch (or {meta['budget']:.0f} s); {meta['workers']} workers/threads; "
             f"BLAS/OpenMP threads {meta['blas_threads'] or 'from the environment'}. Medians.")
    L.append("")
    L.append(f"| System | {UNIT[workload]} | min–max | × DataLoader | × limit | first batch (s) "
             f"| end-to-end {UNIT[workload]} | peak RSS (MiB) | peak PSS (MiB) | runs |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    failures = []
    for s, e in summary.items():
        if e.get("status") == "ok":
            rng = f"{fmt(e['throughput_min'])}–{fmt(e['throughput_max'])}"
            note = f" ({e['truncated_runs']} cut by time budget)" if e.get("truncated_runs") else ""
            if e.get("short_window_runs"):
                note += f" ({e['short_window_runs']} with < {SHORT_WINDOW_S:g} s after the first batch)"
            L.append(f"| {e['name']} | {fmt(e['throughput_median'])} | {rng} "
                     f"| {fmt(e['vs_dataloader'], '.2f')} | {fmt(e['vs_limit'], '.2f')} "
                     f"| {fmt(e['ttfb_median'], '.2f')} | {fmt(e['end_to_end_median'])} "
                     f"| {fmt(mib(e['peak_rss_median']), '.0f')} "
                     f"| {fmt(mib(e['peak_pss_median']), '.0f')} | {e['ok_runs']}/{e['runs']}{note} |")
        else:
            L.append(f"| {e['name']} | {e.get('status', 'failed')} | | | | | | | | 0/{e['runs']} |")
        if e.get("error"):
            failures.append((e["name"], e.get("status"), e["error"], e.get("error_log")))
    L.append("")
    L.append("Throughput counts the samples after the first batch over the time after it; "
             "end-to-end counts every sample from building the iterator (start-up included), "
             "which also exposes systems that do all the work before handing out the first "
             "batch. Time to first batch runs from building the iterator (Ray's start-up, worker "
             "processes, imports inside workers) to the first batch in hand. Peak RSS sums the "
             "process tree (shared pages counted in every process); PSS counts them once.")
    if failures:
        L.append("")
        L.append("Failures:")
        for name, status, err, log in failures:
            first = err.strip().splitlines()[0] if err.strip() else status
            L.append(f"- **{name}** ({status}): `{first[:300]}`" + (f" — log `{log}.err`" if log else ""))
    L.append("")
    L.append("![throughput](" + f"{workload}.png)")
    L.append("")
    path.write_text("\n".join(L))


def update_docs(docs: Path, workload: str, md: str, plot: Path | None) -> None:
    """Replaces (or appends) the workload's generated section in `docs`; the plot goes to
    docs/img/<workload>.png next to it."""
    import shutil

    if plot is not None and plot.exists():
        img = docs.parent / "img"
        img.mkdir(exist_ok=True)
        shutil.copyfile(plot, img / f"{workload}.png")
        md = md.replace(f"]({workload}.png)", f"](img/{workload}.png)")
    begin, end = f"<!-- run.py {workload} begin -->", f"<!-- run.py {workload} end -->"
    block = f"{begin}\n{md.strip()}\n{end}"
    text = docs.read_text(encoding="utf-8") if docs.exists() else ""
    a, b = text.find(begin), text.find(end)
    if a >= 0 and b > a:
        text = text[:a] + block + text[b + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    docs.write_text(text, encoding="utf-8")
    print(f"  → {docs} ({workload} section)", flush=True)


def render(results: Path, docs: Path) -> int:
    """Writes the sections of a finished run (`<results>/<workload>.json`) into `docs`."""
    found = 0
    for w in C.WORKLOADS:
        f = results / f"{w}.json"
        if not f.exists():
            continue
        doc = json.loads(f.read_text())
        md = results / f"{w}.md"
        write_markdown(md, w, doc["summary"], doc["meta"])
        update_docs(docs, w, md.read_text(), results / f"{w}.png")
        found += 1
    if not found:
        print(f"no <workload>.json results in {results}", file=sys.stderr)
        return 2
    return 0


def write_plot(path: Path, workload: str, summary: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(e["name"] + (" *" if e.get("short_window_runs") else ""), e["throughput_median"],
             e["throughput_min"], e["throughput_max"], s)
            for s, e in summary.items() if e.get("status") == "ok" and e.get("throughput_median")]
    fig, ax = plt.subplots(figsize=(7, 0.5 + 0.55 * max(1, len(rows))), dpi=120)
    if rows:
        names = [r[0] for r in rows]
        vals = [r[1] for r in rows]
        lo = [r[1] - r[2] for r in rows]
        hi = [r[3] - r[1] for r in rows]
        colors = ["#999999" if r[4] == LIMIT else ("#d9822b" if r[4].startswith("sluice")
                                                   else "#4c72b0") for r in rows]
        y = list(range(len(rows)))[::-1]
        ax.barh(y, vals, xerr=[lo, hi], color=colors, capsize=3)
        ax.set_yticks(y, names)
        for yi, v in zip(y, vals):
            ax.text(v, yi, f" {v:,.0f}" if v >= 100 else f" {v:.1f}", va="center", fontsize=8)
    label = f"{UNIT[workload]} (median, min–max)"
    if any(r[0].endswith(" *") for r in rows):
        label += f"   * < {SHORT_WINDOW_S:g} s after the first batch: mostly buffered batches"
    ax.set_xlabel(label, fontsize=8)
    ax.set_title(WORKLOAD_TITLES[workload], fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def machine_info() -> dict:
    import psutil

    cpu = C.cpu_model()
    return {"cpu": cpu, "isa": C.cpu_isa(), "cores": os.cpu_count(),
            "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version(), "platform": platform.platform(),
            "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE")}


def package_versions() -> dict:
    from importlib import metadata

    out = {}
    for p in ("numpy", "pillow", "torch", "torchvision", "tokenizers", "librosa", "soundfile",
              "grain", "tensorflow-cpu", "ray", "pyarrow", "sluice"):
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = None
    return out


def sluice_location() -> dict:
    """Where the children import sluice from: the venv if it is installed there, else the
    repository's python/ folder when a built extension sits in it (`maturin develop` or
    `make` leave python/sluice/_native*.so), else nowhere (the sluice rows then fail)."""
    import importlib.util

    spec = importlib.util.find_spec("sluice")
    if spec is not None and spec.origin:
        return {"source": "installed", "path": str(Path(spec.origin).parent)}
    tree = REPO / "python"
    if list((tree / "sluice").glob("_native*.so")):
        return {"source": "repository", "path": str(tree / "sluice"), "pythonpath": str(tree)}
    return {"source": None}


def git_commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


# =========================================================================================
# main
# =========================================================================================
def parse_samples(text: str | None, quick: bool) -> dict:
    base = dict(QUICK_SAMPLES if quick else DEFAULT_SAMPLES)
    if not text:
        return base
    if "=" not in text:
        return {w: int(text) for w in base}
    for part in text.split(","):
        k, v = part.split("=")
        base[k.strip()] = int(v)
    return base


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--_child"]:
        return child_main(json.loads(argv[1]))
    ap = argparse.ArgumentParser(description="sluice benchmark runner (see benchmarks/README.md)")
    ap.add_argument("--workloads", default="cv,nlp,asr")
    ap.add_argument("--systems", default=",".join(SYSTEMS),
                    help="comma-separated, from: " + ", ".join(SYSTEMS))
    ap.add_argument("--repeats", type=int, default=None, help="measured rounds (default 3, quick 1)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up rounds (default 1, quick 0)")
    ap.add_argument("--samples", default=None,
                    help="samples after the first batch: N, or cv=N,nlp=N,asr=N "
                         f"(default {DEFAULT_SAMPLES}, quick {QUICK_SAMPLES})")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds of steady state per measurement (default 60, quick 10)")
    ap.add_argument("--window", type=float, default=None,
                    help="size each system's measured runs from its warm-up rate so that they "
                         "last about this many seconds after the first batch (needs a warm-up "
                         "round; --samples then sizes the warm-up only)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="hard limit per measurement process (default budget + 120 s)")
    ap.add_argument("--workers", type=int, default=2, help="worker processes/threads per system")
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="OMP/OPENBLAS/MKL_NUM_THREADS for every measurement (0: leave the env)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="small counts, no warm-up, one round")
    ap.add_argument("--data", type=Path, default=C.default_data_dir())
    ap.add_argument("--out", type=Path, default=HERE / "results")
    ap.add_argument("--docs", type=Path, default=None,
                    help="also write each workload's section into this markdown file (e.g. docs/BENCHMARKS.md)")
    ap.add_argument("--render", type=Path, default=None, metavar="RESULTS_DIR",
                    help="write the sections of a finished run into --docs, without running anything")
    ap.add_argument("--list", action="store_true", help="list systems and their workloads")
    ap.add_argument("--asr-rate", type=int, default=None,
                    help="ASR: only the clips at this sample rate (22050: every clip is resampled)")
    args = ap.parse_args(argv)
    if args.asr_rate:
        os.environ["SLUICE_BENCH_ASR_RATE"] = str(args.asr_rate)  # read by peers.common

    from peers import load

    if args.render is not None:
        if args.docs is None:
            ap.error("--render needs --docs")
        return render(args.render.resolve(), args.docs)
    if args.list:
        for s in SYSTEMS:
            m = load(s)
            print(f"{s:18s} {m.NAME:24s} {','.join(m.WORKLOADS)}")
        return 0
    repeats = args.repeats if args.repeats is not None else (1 if args.quick else 3)
    warmup = args.warmup if args.warmup is not None else (0 if args.quick else 1)
    budget = args.budget if args.budget is not None else (10.0 if args.quick else 60.0)
    if args.window is not None:
        if warmup < 1:
            ap.error("--window needs a warm-up round (--warmup 1)")
        budget = max(budget, WINDOW_BUDGET * args.window)
    timeout = args.timeout if args.timeout is not None else budget + 120.0
    samples = parse_samples(args.samples, args.quick)
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    for w in workloads:
        if w not in C.WORKLOADS:
            ap.error(f"unknown workload {w!r}")
    for s in systems:
        if s not in SYSTEMS:
            ap.error(f"unknown system {s!r}")
    data = args.data.expanduser().resolve()
    if not (data / "manifest.json").exists():
        print(f"no datasets in {data}: run `python benchmarks/datasets/build.py --out {data}`",
              file=sys.stderr)
        return 2
    sluice_from = sluice_location()
    out_dir = args.out.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    exe = os.path.relpath(sys.executable) if sys.executable.startswith(str(REPO)) else sys.executable
    command = shlex.join([exe, os.path.relpath(Path(__file__).resolve())] + argv)
    print(f"command: {command}", flush=True)
    print(f"sluice: {sluice_from.get('path') or 'not found (sluice rows will fail)'}", flush=True)
    machine = machine_info()
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    meta_common = {
        "command": command,
        "machine": f"{machine['cores']} cores ({machine['cpu']}), {machine['memory_gib']} GiB, "
                   f"Python {machine['python']}",
        "machine_info": machine, "packages": package_versions(), "commit": git_commit(),
        "data": str(data), "data_manifest_seed": json.loads((data / "manifest.json").read_text()).get("seed"),
        "repeats": repeats, "warmup": warmup, "budget": budget, "timeout": timeout,
        "samples": samples, "workers": args.workers, "seed": args.seed,
        "blas_threads": args.blas_threads, "sluice": sluice_from, "window": args.window,
    }
    for w in workloads:
        todo = [s for s in systems if w in load(s).WORKLOADS]
        if not todo:
            continue
        print(f"\n== {w}: {', '.join(todo)}  ({warmup} warm-up + {repeats} rounds, "
              f"{samples[w]} samples, budget {budget:.0f} s)", flush=True)
        load_start = " ".join(f"{x:.2f}" for x in os.getloadavg())
        runs: list[dict] = []
        dead: set[str] = set()
        sized: dict[str, int] = {}  # --window: each system's measured sample count
        for rnd in range(warmup + repeats):
            is_warm = rnd < warmup
            if rnd == warmup and args.window is not None:
                sized = window_samples(w, runs, samples[w], args.window)
            for s in todo:
                if s in dead:
                    continue
                spec = {"system": s, "workload": w, "samples": sized.get(s, samples[w]), "data": str(data),
                        "seed": args.seed, "workers": args.workers, "budget": budget,
                        "blas_threads": args.blas_threads, "sluice": sluice_from, "sluice_path": sluice_from.get("pythonpath")}
                tag = f"warmup{rnd}" if is_warm else f"round{rnd - warmup}"
                r = measure(spec, out_dir / "logs" / f"{stamp}-{w}-{s}-{tag}", timeout)
                r["warmup"] = is_warm
                r["round"] = rnd
                runs.append(r)
                if r["status"] == "ok":
                    print(f"  [{tag:8s}] {s:18s} {r['throughput']:10.1f} {UNIT[w]:9s} "
                          f"(e2e {r['end_to_end_throughput']:8.1f})  "
                          f"first batch {r['ttfb']:6.2f} s  peak RSS {mib(r['peak_rss_bytes']):7.0f} MiB"
                          f"  PSS {mib(r['peak_pss_bytes']) or 0:7.0f} MiB  ({r['samples']} samples"
                          f"{', cut by budget' if r.get('truncated_by_budget') else ''})", flush=True)
                else:
                    err = (r.get("error") or "; ".join(r.get("problems") or [])).strip()
                    print(f"  [{tag:8s}] {s:18s} {r['status'].upper()}: "
                          f"{err.splitlines()[0][:200] if err else ''}", flush=True)
                    dead.add(s)
        summary = summarise(w, todo, runs)
        meta = dict(meta_common, date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                    load_start=load_start, load_end=" ".join(f"{x:.2f}" for x in os.getloadavg()),
                    workload=w)
        (out_dir / f"{w}.json").write_text(json.dumps(
            {"meta": meta, "summary": summary, "runs": runs}, indent=2, default=str) + "\n")
        write_markdown(out_dir / f"{w}.md", w, summary, meta)
        try:
            write_plot(out_dir / f"{w}.png", w, summary)
        except Exception as e:  # noqa: BLE001 - a missing plot must not lose the results
            print(f"  (plot failed: {e})", flush=True)
        print(f"  → {out_dir / (w + '.md')}", flush=True)
        if args.docs is not None:
            update_docs(args.docs, w, (out_dir / f"{w}.md").read_text(), out_dir / f"{w}.png")
        print("\n" + (out_dir / f"{w}.md").read_text(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
