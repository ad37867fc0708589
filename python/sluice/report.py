"""One self-contained HTML file about a run: ``ds.report(path)``, ``it.report(path)``.

The page needs no network when viewed: the plots are inline SVG drawn here from the run's
statistics (``Stats.to_dict()``), with a few lines of inline script that only check the page.
It shows the pipeline as a diagram (logical ops → the physical stages that run them, with
their placement, fused ops and cache points), every stage's figures, per-stage throughput,
busy share and queue depth over time, CPU cores used against those available, memory over
time, the batch-delay histogram with P50/P95/max, skips and the error that ended the run by
op, the optimizer's plan (predicted against measured throughput per stage, the bottleneck and
each rule's decision), and, for Ray runs, each actor's work and the retries.

>>> import sluice, tempfile, os
>>> ds = sluice.range(500).map(lambda s: s).batch(10)
>>> _ = list(ds)
>>> path = os.path.join(tempfile.mkdtemp(), "report.html")
>>> ds.report(path) == path and "<svg" in open(path).read()
True
"""

from __future__ import annotations

import html
import json
import math
import os
import re
from typing import Any

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"]
W, H, PAD_L, PAD_B, PAD_T, PAD_R = 500, 220, 56, 28, 24, 12

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px}td,th{padding:3px 8px;border-bottom:1px solid #eee;text-align:right}
td:first-child,th:first-child{text-align:left;max-width:380px;overflow-wrap:anywhere}.grid{display:flex;flex-wrap:wrap;gap:16px}
.err{background:#fde8e8;border:1px solid #e0a0a0;padding:8px 12px;white-space:pre-wrap}
.kpi{display:flex;gap:24px;flex-wrap:wrap}.kpi div{background:#f5f7fa;padding:6px 12px;border-radius:6px}
.kpi b{display:block;font-size:18px}svg text{font:11px system-ui,sans-serif;fill:#333}
pre{background:#f7f7f7;padding:8px;overflow:auto;font-size:12px}
"""

# Checks the page once it loaded (the browser test reads the result): every plot drew something.
CHECK = """
document.addEventListener('DOMContentLoaded', function () {
  var plots = document.querySelectorAll('svg.plot'), drawn = 0;
  plots.forEach(function (p) { if (p.querySelector('.mark')) drawn++; });
  document.body.setAttribute('data-plots', plots.length);
  document.body.setAttribute('data-drawn', drawn);
});
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _num(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if x == 0:
        return "0"
    mag = abs(x)
    if mag >= 1e4:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def _ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    step = 10 ** math.floor(math.log10((hi - lo) / n))
    for m in (1, 2, 5, 10):
        if (hi - lo) / (step * m) <= n:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step) + 1)]


def line_chart(title: str, lines: dict[str, list[tuple[float, float]]], y_label: str,
               hline: tuple[str, float] | None = None, y_max: float | None = None) -> str:
    """An SVG line chart of ``{name: [(x, y), ...]}`` (x in seconds), with a legend."""
    pts = [(x, y) for v in lines.values() for x, y in v if y is not None and math.isfinite(y)]
    xs = [x for x, _ in pts] or [0.0, 1.0]
    ys = [y for _, y in pts] + ([hline[1]] if hline else []) or [0.0, 1.0]
    x0, x1 = 0.0, max(max(xs), 1e-9)
    y1 = y_max if y_max is not None else (max(ys) * 1.1 if max(ys) > 0 else 1.0)
    sx = lambda x: PAD_L + (x - x0) / (x1 - x0) * (W - PAD_L - PAD_R)  # noqa: E731
    sy = lambda y: H - PAD_B - y / y1 * (H - PAD_B - PAD_T)  # noqa: E731
    out = [f'<svg class="plot" role="img" aria-label="{_e(title)}" width="{W}" height="{H + 18 * ((len(lines) + 2) // 3)}">',
           f'<text x="{PAD_L}" y="14" font-weight="600">{_e(title)}</text>']
    for t in _ticks(0, y1):
        if t <= y1:
            out.append(f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#eee"/>'
                       f'<text x="{PAD_L - 4}" y="{sy(t) + 4:.1f}" text-anchor="end">{_num(t)}</text>')
    for t in _ticks(x0, x1, 6):
        out.append(f'<text x="{sx(t):.1f}" y="{H - PAD_B + 14}" text-anchor="middle">{_num(t)} s</text>')
    out.append(f'<text x="12" y="{(H - PAD_B + PAD_T) / 2:.0f}" transform="rotate(-90 12 {(H - PAD_B + PAD_T) / 2:.0f})"'
               f' text-anchor="middle">{_e(y_label)}</text>')
    out.append(f'<line x1="{PAD_L}" x2="{PAD_L}" y1="{PAD_T}" y2="{H - PAD_B}" stroke="#999"/>'
               f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{H - PAD_B}" y2="{H - PAD_B}" stroke="#999"/>')
    if hline is not None:
        out.append(f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{sy(hline[1]):.1f}" y2="{sy(hline[1]):.1f}" '
                   f'stroke="#555" stroke-dasharray="5,4"/><text x="{W - PAD_R}" y="{sy(hline[1]) - 4:.1f}" '
                   f'text-anchor="end">{_e(hline[0])}</text>')
    for i, (name, v) in enumerate(lines.items()):
        c = COLORS[i % len(COLORS)]
        good = [(sx(x), sy(min(y, y1))) for x, y in v if y is not None and math.isfinite(y)]
        if len(good) == 1:
            out.append(f'<circle class="mark" cx="{good[0][0]:.1f}" cy="{good[0][1]:.1f}" r="3" fill="{c}"/>')
        elif good:
            d = " ".join(f"{x:.1f},{y:.1f}" for x, y in good)
            out.append(f'<polyline class="mark" fill="none" stroke="{c}" stroke-width="1.6" points="{d}"/>')
        lx, ly = PAD_L + (i % 3) * 148, H + 4 + 18 * (i // 3)
        out.append(f'<rect x="{lx}" y="{ly}" width="10" height="10" fill="{c}"/>'
                   f'<text x="{lx + 14}" y="{ly + 9}">{_e(name[:20])}</text>')
    out.append("</svg>")
    return "".join(out)


def histogram(buckets: list[list[float]], marks: dict[str, float]) -> str:
    """The batch-delay histogram (ms buckets, log x axis) with vertical marks."""
    if not buckets:
        return '<svg class="plot" width="640" height="40"><text x="8" y="20">no batches delivered</text></svg>'
    lo = max(min(b[0] for b in buckets), 1e-4)
    hi = max(max(b[0] for b in buckets) * 1.0625, max(marks.values(), default=lo), lo * 10)
    top = max(b[1] for b in buckets)
    lx = lambda ms: PAD_L + (math.log10(max(ms, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * (W - PAD_L - PAD_R)  # noqa: E731
    sy = lambda n: H - PAD_B - n / top * (H - PAD_B - PAD_T)  # noqa: E731
    out = [f'<svg class="plot" role="img" aria-label="batch delay" width="{W}" height="{H}">',
           '<text x="56" y="14" font-weight="600">How long the loop waited for each batch (log scale)</text>',
           f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{H - PAD_B}" y2="{H - PAD_B}" stroke="#999"/>']
    for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1):
        x = lx(10 ** e)
        if PAD_L <= x <= W - PAD_R:
            out.append(f'<text x="{x:.1f}" y="{H - PAD_B + 14}" text-anchor="middle">{_num(10 ** e)} ms</text>')
    for ms, n in buckets:
        x0, x1 = lx(ms), lx(ms * 1.0625)
        out.append(f'<rect class="mark" x="{x0:.1f}" y="{sy(n):.1f}" width="{max(x1 - x0, 1.5):.1f}" '
                   f'height="{H - PAD_B - sy(n):.1f}" fill="#1f77b4"><title>{_num(ms)} ms: {int(n)}</title></rect>')
    for i, (name, ms) in enumerate(marks.items()):
        x = lx(ms)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{PAD_T}" y2="{H - PAD_B}" stroke="{COLORS[i + 1]}" '
                   f'stroke-dasharray="4,3"/><text x="{x + 3:.1f}" y="{PAD_T + 12 + 12 * i}">{_e(name)} {_num(ms)} ms</text>')
    out.append(f'<text x="{PAD_L - 4}" y="{PAD_T + 4}" text-anchor="end">{top}</text></svg>')
    return "".join(out)


# Logical steps the lowering folds into the source's order of positions.
INDEX_STEPS = ("shuffle", "shard", "repeat", "prefetch")


def diagram(logical: list[str], stages: list[dict]) -> str:
    """Logical ops (left) → the physical stages running them (right), arrows between: index
    steps fold into the source; each op goes to the first stage from the last one matched
    whose name holds it (fused ops share a stage), else stays with the last one."""
    bw, sw, bh, gap, x2 = 330, 420, 26, 10, 450
    height = max(len(logical), len(stages)) * (bh + gap) + 30
    out = [f'<svg class="plot" role="img" aria-label="pipeline" width="{x2 + sw + 4}" height="{height}">',
           '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="7" refY="3" orient="auto">'
           '<path d="M0,0 L7,3 L0,6 z" fill="#999"/></marker></defs>',
           '<text x="0" y="14" font-weight="600">logical plan</text>',
           f'<text x="{x2}" y="14" font-weight="600">physical stages [placement, output queue]</text>']
    ys = [24 + i * (bh + gap) for i in range(max(len(logical), len(stages)))]
    for i, op in enumerate(logical):
        cached = op.startswith("cache")
        out.append(f'<rect class="mark" x="0" y="{ys[i]}" width="{bw}" height="{bh}" rx="4" '
                   f'fill="{"#fff3d6" if cached else "#eef3fb"}" stroke="#7a9cc6"/>'
                   f'<text x="8" y="{ys[i] + 17}">{_e(op[:52])}{" (cache point)" if cached else ""}</text>')
    for j, st in enumerate(stages):
        variant = st.get("variant", "")
        color = "#e8f6ea" if "threads" in variant else "#f2f2f2" if variant == "inline" else "#f3e8f8"
        label = f'{st["name"][:44]}  [{variant}, {st.get("queue_capacity", "?")}]'
        out.append(f'<rect class="mark" x="{x2}" y="{ys[j]}" width="{sw}" height="{bh}" rx="4" fill="{color}" '
                   f'stroke="#6aa36f"/><text x="{x2 + 8}" y="{ys[j] + 17}">{_e(label)}</text>')
    at = 0
    for i, op in enumerate(logical):
        head = re.split(r"[ ({]", op, maxsplit=1)[0]
        inner = re.search(r"^map\(([^)]*)\)", op)
        key = inner.group(1) if inner else head
        if i == 0 or head in INDEX_STEPS:
            target = 0
        else:
            # An op the run moved into a later stage (normalize written into the batch)
            # leaves the ops after it in the earlier one: look back too.
            found = [j for j in [*range(at, len(stages)), *range(at)] if key and key in stages[j]["name"]]
            target = found[0] if found else min(at, len(stages) - 1)
        at = max(at, target)
        if stages:
            out.append(f'<line x1="{bw}" y1="{ys[i] + bh / 2:.0f}" x2="{x2 - 2}" y2="{ys[target] + bh / 2:.0f}" '
                       f'stroke="#999" marker-end="url(#arrow)"/>')
    out.append("</svg>")
    return "".join(out)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render(data: dict, logical_plan: str, plan: dict | None = None, title: str = "sluice pipeline report") -> str:
    """The report page of one run's statistics (``Stats.to_dict()``)."""
    from .stats import _rates

    stages, c = data["stages"], data["consumer"]
    names = [s["name"] for s in stages]
    raw = _rates(data.get("series", []))
    t = raw["t_s"]
    per = lambda k: {n: [(t[i], row[j][k]) for i, row in enumerate(raw["stages"])] for j, n in enumerate(names)}  # noqa: E731
    cores = os.cpu_count() or 1
    parts = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{_e(title)}</title>"
             f"<style>{CSS}</style><script>{CHECK}</script></head><body><h1>{_e(title)}</h1>"]
    kpis = [("run", f'{_num(data["elapsed_s"])} s'), ("outputs", f'{c["outputs"]:,}'), ("samples", f'{c["samples"]:,}'),
            ("samples/s", _num(c["throughput"])), ("batch delay P50 / P95 / max",
             f'{_num(c["delay_p50_ms"])} / {_num(c["delay_p95_ms"])} / {_num(c["delay_max_ms"])} ms'),
            ("first batch after", f'{_num(c.get("first_output_s"))} s'), ("cores", str(cores))]
    parts.append('<div class="kpi">' + "".join(f"<div>{_e(k)}<b>{_e(v)}</b></div>" for k, v in kpis) + "</div>")
    if data.get("error"):
        parts.append(f'<h2>The run failed</h2><div class="err" id="error">{_e(data["error"])}</div>')
    parts.append("<h2>Pipeline</h2>" + diagram([ln.strip().removeprefix("-> ") for ln in logical_plan.splitlines() if ln.strip()], stages))
    parts.append("<h2>Stages</h2>" + _table(
        ["stage", "placement", "in", "out", "skipped", "busy s", "busy share", "queue (mean / capacity)", "outputs/s"],
        [[s["name"], s["variant"], s["samples_in"], s["samples_out"], s["skipped"], _num(s["busy_s"]),
          f'{100 * s["utilisation"]:.0f}%', f'{_num(s["queue_occupancy"])} / {s["queue_capacity"]}', _num(s["throughput"])]
         for s in stages]))
    parts.append('<h2>Over time</h2><div class="grid">')
    parts.append(line_chart("Throughput per stage", per("throughput"), "outputs/s"))
    parts.append(line_chart("Busy share of each stage's threads", {k: [(x, 100 * y) for x, y in v] for k, v in per("busy").items()},
                            "busy %", y_max=105))
    parts.append(line_chart("Queue depth (mean chunks waiting)", per("queue"), "chunks"))
    parts.append(line_chart("CPU cores used by the process", {"cores used": list(zip(t, raw["cpu_cores"]))}, "cores",
                            hline=(f"{cores} cores available", float(cores))))
    parts.append(line_chart("Resident memory", {"RSS": [(x, None if m is None else m / 2**20) for x, m in zip(t, raw["rss_bytes"])]},
                            "MiB"))
    parts.append(line_chart("Delivered to the training loop", {"samples/s": list(zip(t, raw["samples_per_s"]))}, "samples/s"))
    parts.append("</div><h2>Batch delay</h2>")
    parts.append(histogram(c.get("delay_histogram", []), {"P50": c["delay_p50_ms"], "P95": c["delay_p95_ms"],
                                                          "max": c["delay_max_ms"]}))
    skipped = [[s["name"], s["skipped"]] for s in stages if s["skipped"]]
    parts.append("<h2>Skipped samples and errors by op</h2>" + (
        _table(["stage", "samples skipped"], skipped) if skipped else "<p>No sample was skipped.</p>"))
    if data.get("error"):
        parts.append(f'<p>The error that ended the run: <b>{_e(data["error"].splitlines()[0])}</b></p>')
    if plan is not None:
        pred = {p["label"]: p for p in plan.get("prediction", {}).get("stages", [])}
        measured = {s["name"]: s["throughput"] for s in stages}
        if len(stages) == len(pred):
            # Stage by stage: a run may move an op into the next stage when it starts
            # (normalize written into the batch), which renames both but keeps the stages.
            measured = {k: s["throughput"] for k, s in zip(pred, stages)}
        parts.append("<h2>The optimizer's plan</h2>" + f'<p>Predicted {_num(plan["prediction"]["throughput"])} samples/s, '
                     f'bottleneck: <b>{_e(plan["prediction"]["bottleneck"])}</b>; measured {_num(c["throughput"])} samples/s.</p>')
        parts.append(_table(["stage", "placement", "CPU s/sample", "predicted capacity, samples/s", "measured outputs/s"],
                            [[k, p["variant"], _num(p["cpu_per_sample"]), _num(p["capacity"]), _num(measured.get(k))]
                             for k, p in pred.items()]))
        parts.append("<h3>Why each rule decided what it did</h3><ul>" + "".join(
            f"<li>{_e(d)}</li>" for d in plan.get("decisions", [])) + "</ul>")
    for r in data.get("remote", []):
        mib = lambda b: f"{b / 2**20:,.1f} MiB"  # noqa: E731
        parts.append(f'<h2>Ray: {_e(r["stage"])}</h2><p>{r["chunks"]} chunks ({r["samples"]:,} samples), '
                     f'{r["retries"]} retries, {mib(r.get("sent_bytes", 0))} sent to actors, '
                     f'{mib(r.get("received_bytes", 0))} back.</p>'
                     + _table(["actor / slot", "chunks", "busy s", "sent", "received"],
                              [[s["name"], s["chunks"], _num(s["busy_s"]), mib(s.get("sent_bytes", 0)),
                                mib(s.get("received_bytes", 0))] for s in r["slots"]])
                     + ("<ul>" + "".join(f"<li>{_e(e)}</li>" for e in r["events"]) + "</ul>" if r["events"] else ""))
    parts.append("<h2>Raw statistics</h2><details><summary>JSON</summary><pre>"
                 + _e(json.dumps({k: v for k, v in data.items() if k != "series"}, indent=1)) + "</pre></details>")
    parts.append("</body></html>")
    return "".join(parts)


def write(path: Any, data: dict, logical_plan: str, plan: dict | None) -> str:
    """Writes the page to ``path`` (atomically) and returns the path."""
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(render(data, logical_plan, plan))
    os.replace(tmp, path)
    return path
