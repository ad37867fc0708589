//! The page: its layout and sections, the tables and the pipeline diagram, drawn from the
//! statistics as JSON. Every key is read leniently — a missing figure shows as `—` — since
//! the statistics come from several places (the engine's report, plus `remote` for a Ray
//! run from Python) and older saved runs.

use std::fmt::Write;

use serde_json::Value;

use super::fmt::{commas, count, esc, json_dumps, num, prefix, py_str};
use super::svg::{histogram, line_chart, Lines, Points};

const CSS: &str = "
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px}td,th{padding:3px 8px;border-bottom:1px solid #eee;text-align:right}
td:first-child,th:first-child{text-align:left;max-width:380px;overflow-wrap:anywhere}.grid{display:flex;flex-wrap:wrap;gap:16px}
.err{background:#fde8e8;border:1px solid #e0a0a0;padding:8px 12px;white-space:pre-wrap}
.kpi{display:flex;gap:24px;flex-wrap:wrap}.kpi div{background:#f5f7fa;padding:6px 12px;border-radius:6px}
.kpi b{display:block;font-size:18px}svg text{font:11px system-ui,sans-serif;fill:#333}
pre{background:#f7f7f7;padding:8px;overflow:auto;font-size:12px}
";

// Checks the page once it loaded (the browser test reads the result): every plot drew something.
const CHECK: &str = "
document.addEventListener('DOMContentLoaded', function () {
  var plots = document.querySelectorAll('svg.plot'), drawn = 0;
  plots.forEach(function (p) { if (p.querySelector('.mark')) drawn++; });
  document.body.setAttribute('data-plots', plots.length);
  document.body.setAttribute('data-drawn', drawn);
});
";

/// Logical steps the lowering folds into the source's order of positions.
const INDEX_STEPS: [&str; 4] = ["shuffle", "shard", "repeat", "prefetch"];

fn f64_at(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64)
}

fn str_at<'v>(v: &'v Value, key: &str) -> &'v str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// A table cell's text for `v[key]`: what Python's `str()` printed, `—` when missing.
fn cell(v: &Value, key: &str) -> String {
    v.get(key).map_or_else(|| "—".into(), py_str)
}

fn list<'v>(v: &'v Value, key: &str) -> &'v [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `n` bytes in MiB with one decimal (`3.0 MiB`).
fn mib(n: Option<f64>) -> String {
    format!(
        "{} MiB",
        commas(&format!("{:.1}", n.unwrap_or(0.0) / (1u64 << 20) as f64))
    )
}

pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::from("<table><tr>");
    for h in header {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr>");
    for row in rows {
        out.push_str("<tr>");
        for c in row {
            let _ = write!(out, "<td>{}</td>", esc(c));
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    out
}

/// Per-interval figures from the cumulative points: each covers `(t[i-1], t[i]]`.
#[derive(Default)]
struct Rates {
    t_s: Vec<f64>,
    samples_per_s: Vec<Option<f64>>,
    cpu_cores: Vec<Option<f64>>,
    rss_bytes: Vec<Option<f64>>,
    /// Per interval, per stage: throughput, busy share, mean queue depth.
    stages: Vec<Vec<[Option<f64>; 3]>>,
}

fn rates(points: &[Value]) -> Rates {
    let mut out = Rates::default();
    let diff = |a: &Value, b: &Value, k: &str| Some(f64_at(b, k)? - f64_at(a, k)?);
    for pair in points.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let (Some(ta), Some(tb)) = (f64_at(a, "t_s"), f64_at(b, "t_s")) else {
            continue;
        };
        let dt = tb - ta;
        if dt <= 0.0 {
            continue;
        }
        out.t_s.push(tb);
        out.samples_per_s
            .push(diff(a, b, "samples").map(|d| d / dt));
        out.cpu_cores.push(diff(a, b, "cpu_s").map(|d| d / dt));
        out.rss_bytes.push(f64_at(b, "rss_bytes"));
        let rows = list(a, "stages")
            .iter()
            .zip(list(b, "stages"))
            .map(|(sa, sb)| {
                let threads = f64_at(sb, "threads").unwrap_or(0.0).max(1.0);
                let occ_n = diff(sa, sb, "occ_n").unwrap_or(0.0);
                [
                    diff(sa, sb, "out").map(|d| d / dt),
                    diff(sa, sb, "busy_s").map(|d| d / (dt * threads)),
                    diff(sa, sb, "occ_sum")
                        .filter(|_| occ_n > 0.0)
                        .map(|d| d / occ_n),
                ]
            })
            .collect();
        out.stages.push(rows);
    }
    out
}

/// The first (logical) line of a run's error: `str.splitlines()` of Python, whose line
/// breaks are more than `\n`.
fn lines(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        match rest.find(|c| {
            matches!(
                c,
                '\n' | '\r' | '\u{b}' | '\u{c}' | '\u{1c}'
                    ..='\u{1e}' | '\u{85}' | '\u{2028}' | '\u{2029}'
            )
        }) {
            Some(i) => {
                out.push(&rest[..i]);
                let skip = if rest[i..].starts_with("\r\n") {
                    2
                } else {
                    rest[i..].chars().next().map_or(1, char::len_utf8)
                };
                rest = &rest[i + skip..];
            }
            None => {
                out.push(rest);
                break;
            }
        }
    }
    out
}

/// The ops of the logical plan's text, one a line, without the `-> ` arrows.
fn logical_ops(plan: &str) -> Vec<&str> {
    lines(plan)
        .into_iter()
        .map(|ln| {
            ln.trim_matches(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
        })
        .filter(|ln| !ln.is_empty())
        .map(|ln| ln.strip_prefix("-> ").unwrap_or(ln))
        .collect()
}

/// Logical ops (left) → the physical stages running them (right), arrows between: index
/// steps fold into the source; each op goes to the first stage from the last one matched
/// whose name holds it (fused ops share a stage), else stays with the last one.
pub(crate) fn diagram(logical: &[&str], stages: &[Value]) -> String {
    let (bw, sw, bh, gap, x2) = (330, 420, 26, 10, 450);
    let rows = logical.len().max(stages.len());
    let mut out = format!(
        r##"<svg class="plot" role="img" aria-label="pipeline" width="{}" height="{}"><defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="7" refY="3" orient="auto"><path d="M0,0 L7,3 L0,6 z" fill="#999"/></marker></defs><text x="0" y="14" font-weight="600">logical plan</text><text x="{x2}" y="14" font-weight="600">physical stages [placement, output queue]</text>"##,
        x2 + sw + 4,
        rows * (bh + gap) + 30
    );
    let ys: Vec<usize> = (0..rows).map(|i| 24 + i * (bh + gap)).collect();
    for (i, op) in logical.iter().enumerate() {
        let cached = op.starts_with("cache");
        let _ = write!(
            out,
            r##"<rect class="mark" x="0" y="{}" width="{bw}" height="{bh}" rx="4" fill="{}" stroke="#7a9cc6"/><text x="8" y="{}">{}{}</text>"##,
            ys[i],
            if cached { "#fff3d6" } else { "#eef3fb" },
            ys[i] + 17,
            esc(prefix(op, 52)),
            if cached { " (cache point)" } else { "" }
        );
    }
    for (j, st) in stages.iter().enumerate() {
        let variant = str_at(st, "variant");
        let color = if variant.contains("threads") {
            "#e8f6ea"
        } else if variant == "inline" {
            "#f2f2f2"
        } else {
            "#f3e8f8"
        };
        let capacity = st.get("queue_capacity").map_or_else(|| "?".into(), py_str);
        let label = format!(
            "{}  [{variant}, {capacity}]",
            prefix(str_at(st, "name"), 44)
        );
        let _ = write!(
            out,
            r##"<rect class="mark" x="{x2}" y="{}" width="{sw}" height="{bh}" rx="4" fill="{color}" stroke="#6aa36f"/><text x="{}" y="{}">{}</text>"##,
            ys[j],
            x2 + 8,
            ys[j] + 17,
            esc(&label)
        );
    }
    let mut at = 0;
    for (i, op) in logical.iter().enumerate() {
        let head = op.find([' ', '(', '{']).map_or(*op, |k| &op[..k]);
        // `map(name)`: the op's own name, which a fused stage's name lists.
        let inner = op
            .strip_prefix("map(")
            .and_then(|rest| rest.find(')').map(|k| &rest[..k]));
        let key = inner.unwrap_or(head);
        let target = if i == 0 || INDEX_STEPS.contains(&head) {
            0
        } else {
            // An op the run moved into a later stage (normalize written into the batch)
            // leaves the ops after it in the earlier one: look back too.
            (at..stages.len())
                .chain(0..at.min(stages.len()))
                .find(|&j| !key.is_empty() && str_at(&stages[j], "name").contains(key))
                .unwrap_or_else(|| at.min(stages.len().saturating_sub(1)))
        };
        at = at.max(target);
        if !stages.is_empty() {
            let _ = write!(
                out,
                r##"<line x1="{bw}" y1="{}" x2="{}" y2="{}" stroke="#999" marker-end="url(#arrow)"/>"##,
                ys[i] + bh / 2,
                x2 - 2,
                ys[target] + bh / 2
            );
        }
    }
    out.push_str("</svg>");
    out
}

/// The whole page (see the module); `cores` is what the CPU chart marks as available.
pub(crate) fn render(
    data: &Value,
    logical_plan: &str,
    plan: Option<&Value>,
    title: &str,
    cores: usize,
) -> String {
    let stages = list(data, "stages");
    let null = Value::Null;
    let c = data.get("consumer").unwrap_or(&null);
    let raw = rates(list(data, "series"));
    let t = &raw.t_s;
    let per = |k: usize, scale: f64| {
        let mut lines = Lines::default();
        for (j, s) in stages.iter().enumerate() {
            let points: Points = raw
                .stages
                .iter()
                .enumerate()
                .map(|(i, row)| (t[i], row.get(j).and_then(|r| r[k]).map(|y| scale * y)))
                .collect();
            lines.set(str_at(s, "name"), points);
        }
        lines
    };
    let over_time =
        |ys: &[Option<f64>]| -> Points { t.iter().copied().zip(ys.iter().copied()).collect() };
    let title = esc(title);
    let mut out = format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>{title}</title><style>{CSS}</style><script>{CHECK}</script></head><body><h1>{title}</h1>"
    );
    let kpis = [
        ("run", format!("{} s", num(f64_at(data, "elapsed_s")))),
        ("outputs", count(c.get("outputs"))),
        ("samples", count(c.get("samples"))),
        ("samples/s", num(f64_at(c, "throughput"))),
        (
            "batch delay P50 / P95 / max",
            format!(
                "{} / {} / {} ms",
                num(f64_at(c, "delay_p50_ms")),
                num(f64_at(c, "delay_p95_ms")),
                num(f64_at(c, "delay_max_ms"))
            ),
        ),
        (
            "first batch after",
            format!("{} s", num(f64_at(c, "first_output_s"))),
        ),
        ("cores", cores.to_string()),
    ];
    out.push_str(r#"<div class="kpi">"#);
    for (k, v) in &kpis {
        let _ = write!(out, "<div>{}<b>{}</b></div>", esc(k), esc(v));
    }
    out.push_str("</div>");
    let error = data
        .get("error")
        .and_then(Value::as_str)
        .filter(|e| !e.is_empty());
    if let Some(e) = error {
        let _ = write!(
            out,
            r#"<h2>The run failed</h2><div class="err" id="error">{}</div>"#,
            esc(e)
        );
    }
    out.push_str("<h2>Pipeline</h2>");
    out.push_str(&diagram(&logical_ops(logical_plan), stages));
    let rows: Vec<Vec<String>> = stages
        .iter()
        .map(|s| {
            vec![
                cell(s, "name"),
                cell(s, "variant"),
                cell(s, "samples_in"),
                cell(s, "samples_out"),
                cell(s, "skipped"),
                num(f64_at(s, "busy_s")),
                f64_at(s, "utilisation")
                    .map_or_else(|| "—".into(), |u| format!("{:.0}%", 100.0 * u)),
                format!(
                    "{} / {}",
                    num(f64_at(s, "queue_occupancy")),
                    cell(s, "queue_capacity")
                ),
                num(f64_at(s, "throughput")),
            ]
        })
        .collect();
    out.push_str("<h2>Stages</h2>");
    out.push_str(&table(
        &[
            "stage",
            "placement",
            "in",
            "out",
            "skipped",
            "busy s",
            "busy share",
            "queue (mean / capacity)",
            "outputs/s",
        ],
        &rows,
    ));
    out.push_str(r#"<h2>Over time</h2><div class="grid">"#);
    out.push_str(&line_chart(
        "Throughput per stage",
        &per(0, 1.0),
        "outputs/s",
        None,
        None,
    ));
    out.push_str(&line_chart(
        "Busy share of each stage's threads",
        &per(1, 100.0),
        "busy %",
        None,
        Some(105.0),
    ));
    out.push_str(&line_chart(
        "Queue depth (mean chunks waiting)",
        &per(2, 1.0),
        "chunks",
        None,
        None,
    ));
    let available = format!("{cores} cores available");
    out.push_str(&line_chart(
        "CPU cores used by the process",
        &Lines::one("cores used", over_time(&raw.cpu_cores)),
        "cores",
        Some((&available, cores as f64)),
        None,
    ));
    let rss: Vec<Option<f64>> = raw
        .rss_bytes
        .iter()
        .map(|m| m.map(|m| m / (1u64 << 20) as f64))
        .collect();
    out.push_str(&line_chart(
        "Resident memory",
        &Lines::one("RSS", over_time(&rss)),
        "MiB",
        None,
        None,
    ));
    out.push_str(&line_chart(
        "Delivered to the training loop",
        &Lines::one("samples/s", over_time(&raw.samples_per_s)),
        "samples/s",
        None,
        None,
    ));
    out.push_str("</div><h2>Batch delay</h2>");
    let buckets: Vec<(f64, f64)> = list(c, "delay_histogram")
        .iter()
        .filter_map(|b| Some((b.get(0)?.as_f64()?, b.get(1)?.as_f64()?)))
        .collect();
    out.push_str(&histogram(
        &buckets,
        &[
            ("P50", f64_at(c, "delay_p50_ms")),
            ("P95", f64_at(c, "delay_p95_ms")),
            ("max", f64_at(c, "delay_max_ms")),
        ],
    ));
    let skipped: Vec<Vec<String>> = stages
        .iter()
        .filter(|s| f64_at(s, "skipped").is_some_and(|n| n != 0.0))
        .map(|s| vec![cell(s, "name"), cell(s, "skipped")])
        .collect();
    out.push_str("<h2>Skipped samples and errors by op</h2>");
    if skipped.is_empty() {
        out.push_str("<p>No sample was skipped.</p>");
    } else {
        out.push_str(&table(&["stage", "samples skipped"], &skipped));
    }
    if let Some(e) = error {
        let first = lines(e).first().copied().unwrap_or("");
        let _ = write!(
            out,
            "<p>The error that ended the run: <b>{}</b></p>",
            esc(first)
        );
    }
    if let Some(plan) = plan {
        out.push_str(&plan_section(plan, stages, c));
    }
    for r in list(data, "remote") {
        out.push_str(&remote_section(r));
    }
    let mut shown = data.clone();
    if let Some(m) = shown.as_object_mut() {
        m.remove("series");
    }
    let _ = write!(
        out,
        "<h2>Raw statistics</h2><details><summary>JSON</summary><pre>{}</pre></details></body></html>",
        esc(&json_dumps(&shown))
    );
    out
}

/// The optimizer's plan: predicted against measured throughput per stage, the bottleneck,
/// each rule's decision.
fn plan_section(plan: &Value, stages: &[Value], c: &Value) -> String {
    let null = Value::Null;
    let prediction = plan.get("prediction").unwrap_or(&null);
    // Keyed by label, a repeated label keeping its first place and its last figures.
    let mut pred: Vec<(&str, &Value)> = Vec::new();
    for p in list(prediction, "stages") {
        let label = str_at(p, "label");
        match pred.iter_mut().find(|(k, _)| *k == label) {
            Some(e) => e.1 = p,
            None => pred.push((label, p)),
        }
    }
    let measured = |k: &str, i: usize| -> Option<f64> {
        if stages.len() == pred.len() {
            // Stage by stage: a run may move an op into the next stage when it starts
            // (normalize written into the batch), which renames both but keeps the stages.
            f64_at(&stages[i], "throughput")
        } else {
            stages
                .iter()
                .rev()
                .find(|s| str_at(s, "name") == k)
                .and_then(|s| f64_at(s, "throughput"))
        }
    };
    let mut out = format!(
        "<h2>The optimizer's plan</h2><p>Predicted {} samples/s, bottleneck: <b>{}</b>; measured {} samples/s.</p>",
        num(f64_at(prediction, "throughput")),
        esc(&prediction.get("bottleneck").map_or_else(|| "—".into(), py_str)),
        num(f64_at(c, "throughput"))
    );
    let rows: Vec<Vec<String>> = pred
        .iter()
        .enumerate()
        .map(|(i, (k, p))| {
            vec![
                k.to_string(),
                cell(p, "variant"),
                num(f64_at(p, "cpu_per_sample")),
                num(f64_at(p, "capacity")),
                num(measured(k, i)),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "stage",
            "placement",
            "CPU s/sample",
            "predicted capacity, samples/s",
            "measured outputs/s",
        ],
        &rows,
    ));
    out.push_str("<h3>Why each rule decided what it did</h3><ul>");
    for d in list(plan, "decisions") {
        let _ = write!(out, "<li>{}</li>", esc(&py_str(d)));
    }
    out.push_str("</ul>");
    out
}

/// A Ray stage (only in statistics from Python, which adds `remote`): its chunks, retries,
/// bytes each way and each actor's share.
fn remote_section(r: &Value) -> String {
    let mut out = format!(
        "<h2>Ray: {}</h2><p>{} chunks ({} samples), {} retries, {} sent to actors, {} back.</p>",
        esc(&cell(r, "stage")),
        esc(&cell(r, "chunks")),
        count(r.get("samples")),
        esc(&cell(r, "retries")),
        mib(f64_at(r, "sent_bytes")),
        mib(f64_at(r, "received_bytes"))
    );
    let rows: Vec<Vec<String>> = list(r, "slots")
        .iter()
        .map(|s| {
            vec![
                cell(s, "name"),
                cell(s, "chunks"),
                num(f64_at(s, "busy_s")),
                mib(f64_at(s, "sent_bytes")),
                mib(f64_at(s, "received_bytes")),
            ]
        })
        .collect();
    out.push_str(&table(
        &["actor / slot", "chunks", "busy s", "sent", "received"],
        &rows,
    ));
    let events = list(r, "events");
    if !events.is_empty() {
        out.push_str("<ul>");
        for e in events {
            let _ = write!(out, "<li>{}</li>", esc(&py_str(e)));
        }
        out.push_str("</ul>");
    }
    out
}
