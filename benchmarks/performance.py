#!/usr/bin/env python3
"""docs/PERFORMANCE.md: one page of current figures — the peers and the limits side by side for
CV, NLP and ASR, memory, first batch, with the machine and the date — from one run.

    make performance                                             # venv, release build, run, page
    .venv-bench/bin/python benchmarks/performance.py             # the run and the page (~15 min on 2 cores)
    .venv-bench/bin/python benchmarks/performance.py --quick     # smoke test: small counts, one round
    .venv-bench/bin/python benchmarks/performance.py --render benchmarks/results/performance

The run is `run.py`'s protocol (fresh process per measurement, systems interleaved, medians),
every system given a window of about the same length (`--window`, sized from its warm-up
rate). The page and README's headline table (between its `<!-- performance ... -->` markers)
are written from the run's `<workload>.json` files; the lab notebook (docs/BENCHMARKS.md)
is left as it is.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import run as R  # noqa: E402
from peers import BASELINE, LIMIT  # noqa: E402
from peers import common as C  # noqa: E402

SYSTEMS = ["torch_dataloader", "tfdata", "grain", "ray_data", "sluice_native", "limit"]
SLUICE = "sluice_native"
WINDOW_S = 6.0
PAGE = REPO / "docs" / "PERFORMANCE.md"
README = REPO / "README.md"
OUT = HERE / "results" / "performance"
README_BEGIN, README_END = "<!-- performance headline begin -->", "<!-- performance headline end -->"
WORKLOAD_ROW = {
    "cv": "CV: JPEG → SimCLR augmentations → batch 64",
    "nlp": "NLP: GPT-2 BPE → truncate/pad → batch 128",
    "asr": "ASR: MP3 → 16 kHz → STFT → stretch/masks → log-mel",
}
LIMIT_NAME = {"cv": "Pillow decode-only", "nlp": "HF encode_batch", "asr": "MP3 decode-only"}


def run_all(args) -> int:
    cmd = [sys.executable, os.path.relpath(HERE / "run.py", REPO), "--workloads", "cv,nlp,asr",
           "--systems", ",".join(SYSTEMS), "--out", os.path.relpath(args.out.resolve(), REPO)]
    if args.quick:
        cmd += ["--quick"]
    else:
        cmd += ["--repeats", str(args.repeats), "--warmup", "1", "--window", f"{args.window:g}"]
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=REPO).returncode


def load(results: Path) -> dict[str, dict]:
    docs = {}
    for w in C.WORKLOADS:
        f = results / f"{w}.json"
        if f.exists():
            docs[w] = json.loads(f.read_text())
    return docs


def rate(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}×"


def best_peer(summary: dict) -> tuple[str | None, dict | None]:
    """The fastest system that is neither sluice nor the limit nor the DataLoader baseline."""
    peers = [(s, e) for s, e in summary.items()
             if s not in (LIMIT, BASELINE) and not s.startswith("sluice")
             and e.get("throughput_median")]
    return max(peers, key=lambda se: se[1]["throughput_median"], default=(None, None))


def headline(docs: dict[str, dict]) -> str:
    """The table README shows: per workload sluice, DataLoader, the best other peer, the limit."""
    L = ["| Workload | sluice | PyTorch DataLoader | best other peer | limit | sluice × best peer "
         "| sluice × limit |",
         "|---|---:|---:|---:|---:|---:|---:|"]
    for w, doc in docs.items():
        s = doc["summary"]
        me = s.get(SLUICE, {}).get("throughput_median")
        base = s.get(BASELINE, {}).get("throughput_median")
        lim = s.get(LIMIT, {}).get("throughput_median")
        _, peer = best_peer(s)
        top = max([x for x in (base, peer and peer["throughput_median"]) if x], default=None)
        peer_text = f"{peer['name']} {rate(peer['throughput_median'])}" if peer else "—"
        L.append(f"| {WORKLOAD_ROW[w]} ({R.UNIT[w]}) | **{rate(me)}** | {rate(base)} | {peer_text} "
                 f"| {LIMIT_NAME[w]} {rate(lim)} | {ratio(me / top if me and top else None)} "
                 f"| {ratio(me / lim if me and lim else None)} |")
    return "\n".join(L)


def grid(docs: dict[str, dict], cell) -> str:
    """A systems × workloads table; `cell(entry, workload)` formats one entry."""
    order = [s for s in SYSTEMS if any(s in d["summary"] for d in docs.values())]
    L = ["| System | " + " | ".join(w.upper() for w in docs) + " |",
         "|---|" + "---:|" * len(docs)]
    for s in order:
        name = next(d["summary"][s]["name"] for d in docs.values() if s in d["summary"])
        cells = []
        for w, d in docs.items():
            e = d["summary"].get(s)
            cells.append("" if e is None else (cell(e, w) if e.get("status") == "ok"
                                                else e.get("status", "failed")))
        L.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(L)


def window_range(docs: dict[str, dict]) -> str:
    ws = [e["window_median"] for d in docs.values() for e in d["summary"].values()
          if e.get("window_median")]
    return f"median windows {min(ws):.1f}–{max(ws):.1f} s" if ws else "no windows measured"


def machine_line(meta: dict) -> str:
    m = meta.get("machine_info", {})
    isa = m.get("isa") or "?"
    return (f"{m.get('cores', '?')} cores of an {m.get('cpu', '?')}, {isa} (lscpu), "
            f"{m.get('memory_gib', '?')} GiB, Python {m.get('python', '?')}")


def page(docs: dict[str, dict]) -> str:
    first = next(iter(docs.values()))["meta"]
    dates = [d["meta"]["date"] for d in docs.values()]
    build = first.get("sluice_build") or "?"
    L = ["# Performance",
         "",
         "The reference workloads through sluice and through the same pipelines in PyTorch "
         "DataLoader, tf.data, Grain and Ray Data, next to each workload's limit (its decode or "
         "tokenize step alone), measured in one run on one machine. This page is written by "
         "`benchmarks/performance.py` from that run; "
         "[BENCHMARKS.md](BENCHMARKS.md) is the lab notebook behind it (every experiment, "
         "ablation and profile, with its command).",
         "",
         f"**Machine**: {machine_line(first)}.  ",
         f"**When**: {dates[0]} – {dates[-1]}; sluice commit `{first.get('commit', '?')}`, "
         f"`{build}` build.  ",
         f"**Command**: `{first.get('page_command') or 'benchmarks/performance.py'}` "
         f"(runs `{first['command']}`).  ",
         f"**Protocol**: each system in a fresh process per measurement, 2 workers/threads, "
         f"BLAS/OpenMP threads {first.get('blas_threads') or 'from the environment'}; "
         f"{first['warmup']} warm-up + {first['repeats']} measured runs, interleaved; medians. "
         + (f"Each measured run lasts at least ~{first['window']:g} s after its first batch "
            "(its sample count sized from the system's warm-up rate, never below the warm-up's): "
            f"{window_range(docs)}." if first.get("window") else
            "Fixed sample counts (a quick run: short windows)."),
         "",
         "## Headline",
         "",
         headline(docs),
         "",
         "Best other peer: the fastest of tf.data, Grain and Ray Data (tf.data has no ASR "
         "pipeline: TensorFlow has no MP3 decoder without tensorflow-io).",
         "",
         "## Throughput (median; × PyTorch DataLoader)",
         "",
         grid(docs, lambda e, w: f"{rate(e['throughput_median'])} ({ratio(e.get('vs_dataloader'))})"),
         "",
         f"Units: {', '.join(f'{w.upper()} {R.UNIT[w]}' for w in docs)}. Throughput counts the "
         "samples after the first batch over the time after it.",
         "",
         "## Against the limit (× the decode- or tokenize-only rate)",
         "",
         grid(docs, lambda e, w: ratio(e.get("vs_limit"))),
         "",
         "## Time to first batch (s)",
         "",
         grid(docs, lambda e, w: f"{e['ttfb_median']:.2f}" if e.get("ttfb_median") is not None
              else "—"),
         "",
         "From the call that builds the iterator (Ray's start-up, worker processes and their "
         "imports included) to the first batch in hand.",
         "",
         "## Peak memory (MiB, PSS; RSS in brackets)",
         "",
         grid(docs, lambda e, w: f"{R.fmt(R.mib(e.get('peak_pss_median')), '.0f')} "
                                 f"({R.fmt(R.mib(e.get('peak_rss_median')), '.0f')})"),
         "",
         "Summed over the process tree, sampled every 0.1 s; PSS counts shared pages once, RSS "
         "in every process that maps them.",
         "",
         "## The workloads",
         ""]
    for w in docs:
        L += [f"- **{R.WORKLOAD_TITLES[w]}**: {R.WORKLOAD_DESC[w]}"]
    notes = []
    for w, d in docs.items():
        for s, e in d["summary"].items():
            if e.get("error"):
                first_line = (e["error"].strip().splitlines() or [""])[0][:200]
                notes.append(f"- {w.upper()}, {e['name']}: {e.get('status')} — `{first_line}`")
            elif e.get("short_window_runs"):
                notes.append(f"- {w.upper()}, {e['name']}: {e['short_window_runs']} of its runs "
                             f"had < {R.SHORT_WINDOW_S:g} s after the first batch")
    if notes:
        L += ["", "## Notes from this run", ""] + notes
    return "\n".join(L) + "\n"


def update_readme(readme: Path, docs: dict[str, dict]) -> None:
    text = readme.read_text(encoding="utf-8")
    a, b = text.find(README_BEGIN), text.find(README_END)
    if a < 0 or b < a:
        raise SystemExit(f"{readme} has no {README_BEGIN} … {README_END} markers")
    first = next(iter(docs.values()))["meta"]
    m = first.get("machine_info", {})
    block = (f"{README_BEGIN}\n{headline(docs)}\n\n"
             f"{m.get('cores', '?')} cores of an {m.get('cpu', '?')}, {m.get('isa') or '?'}, "
             f"{first['date'][:10]}, medians; the peers, memory and first batch: "
             f"[docs/PERFORMANCE.md](docs/PERFORMANCE.md).\n{README_END}")
    readme.write_text(text[:a] + block + text[b + len(README_END):], encoding="utf-8")


def render(results: Path, page_path: Path, readme: Path | None, command: str | None) -> int:
    docs = load(results)
    if not docs:
        print(f"no <workload>.json results in {results}", file=sys.stderr)
        return 2
    for d in docs.values():
        d["meta"]["page_command"] = command or d["meta"].get("page_command")
        R.add_ratios(d["summary"])  # results written before run.py stored them render too
    page_path.write_text(page(docs), encoding="utf-8")
    print(f"→ {page_path}", flush=True)
    if readme is not None:
        update_readme(readme, docs)
        print(f"→ {readme} (headline)", flush=True)
    return 0


def build_profile() -> str | None:
    """Which cargo profile the extension the sluice rows import was built with: the one whose
    build output is byte-for-byte the installed `_native` library."""
    so = sorted((REPO / "python" / "sluice").glob("_native*.so"))
    target = Path(os.environ.get("CARGO_TARGET_DIR", Path.home() / ".cache" / "sluice-target"))
    if not so:
        return None
    data = so[0].read_bytes()
    for profile in ("release", "dev-release", "debug"):
        built = target / profile / "lib_native.so"
        if built.exists() and built.stat().st_size == len(data) and built.read_bytes() == data:
            return profile
    return None


def stamp_build(results: Path, profile: str | None, command: str) -> None:
    for w in C.WORKLOADS:
        f = results / f"{w}.json"
        if f.exists():
            doc = json.loads(f.read_text())
            doc["meta"]["sluice_build"] = profile
            doc["meta"]["page_command"] = command
            f.write_text(json.dumps(doc, indent=2, default=str) + "\n")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small counts, one round (a smoke test)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--window", type=float, default=WINDOW_S,
                    help="seconds each measured run lasts after its first batch")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--page", type=Path, default=PAGE)
    ap.add_argument("--readme", type=Path, default=README,
                    help="README whose headline table to rewrite ('' to leave it)")
    ap.add_argument("--render", type=Path, default=None, metavar="RESULTS_DIR",
                    help="write the page from a finished run, running nothing")
    args = ap.parse_args(argv)
    readme = args.readme if str(args.readme) else None
    if args.render is not None:
        return render(args.render, args.page, readme, None)
    command = "benchmarks/performance.py" + ("".join(f" {a}" for a in argv) if argv else "")
    profile = build_profile()
    rc = run_all(args)
    if rc != 0:
        return rc
    stamp_build(args.out, profile, command)
    return render(args.out, args.page, readme, command)


if __name__ == "__main__":
    sys.exit(main())
