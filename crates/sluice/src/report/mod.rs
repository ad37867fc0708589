//! One self-contained HTML page about a run (`ds.report(path)` in Python, `sluice report` on
//! the command line).
//!
//! The page needs no network when viewed: the plots are inline SVG, with a few lines of
//! inline script that only check the page. It shows the pipeline as a diagram (logical ops
//! → the physical stages that run them, with their placement, fused ops and cache points),
//! every stage's figures, per-stage throughput, busy share and queue depth over time, CPU
//! cores used against those available, memory over time, the batch-delay histogram with
//! P50/P95/max, skips and the error that ended the run, the optimizer's plan (predicted
//! against measured throughput per stage, the bottleneck and each rule's decision), and,
//! for Ray runs, each actor's work and the retries.
//!
//! The statistics are read as JSON — a [`StatsReport`](crate::stats::StatsReport) as serde
//! writes it, which is also what Python's `Stats.to_dict()` holds, plus `remote` for Ray.
//!
//! ```
//! use sluice::{Dataset, IterOptions};
//! let ds = Dataset::range(100).batch(10, false)?;
//! let mut exec = ds.iter(&IterOptions::default())?;
//! while let Some(batch) = exec.next() {
//!     batch?;
//! }
//! let stats = serde_json::to_value(exec.stats()).unwrap();
//! let logical = ds.plan().to_string();
//! let html = sluice::report::render_report(&stats, &logical, None, sluice::report::DEFAULT_TITLE);
//! assert!(html.starts_with("<!doctype html>") && html.contains("batch(10"));
//! # Ok::<(), sluice::Error>(())
//! ```

mod fmt;
mod page;
mod svg;

use serde_json::Value;

/// The page's title when the caller has none of its own.
///
/// ```
/// assert_eq!(sluice::report::DEFAULT_TITLE, "sluice pipeline report");
/// ```
pub const DEFAULT_TITLE: &str = "sluice pipeline report";

/// The report page of one run: `stats` is its statistics as JSON (see the module; a missing
/// figure shows as `—`), `logical_plan` the logical plan's text (`Dataset::plan()`, one op
/// a line), `plan` the optimizer plan's JSON when the run had one.
///
/// ```
/// let stats = serde_json::json!({"elapsed_s": 1.5, "stages": [], "consumer": {"outputs": 12345}});
/// let html = sluice::report::render_report(&stats, "range {\"n\":3}", None, "<my run>");
/// assert!(html.contains("<h1>&lt;my run&gt;</h1>") && html.contains("<b>12,345</b>"));
/// ```
pub fn render_report(
    stats: &Value,
    logical_plan: &str,
    plan: Option<&Value>,
    title: &str,
) -> String {
    page::render(stats, logical_plan, plan, title, cpu_count())
}

/// Writes `html` to `path` (a local path or a bucket URL) atomically, through
/// [`sluice_io::store::write_atomic`]: a reader never sees half a page, a failed write
/// leaves the old one, and the temporary is created exclusively (a link planted beside the
/// page is not written through).
///
/// ```
/// let path = std::env::temp_dir().join(format!("sluice-doc-report-{}.html", std::process::id()));
/// let path = path.to_str().unwrap();
/// sluice::report::write_report(path, "<!doctype html>")?;
/// assert_eq!(std::fs::read_to_string(path).unwrap(), "<!doctype html>");
/// # std::fs::remove_file(path).unwrap();
/// # Ok::<(), sluice::Error>(())
/// ```
pub fn write_report(path: &str, html: &str) -> sluice_core::Result<()> {
    sluice_io::store::write_atomic(path, html.to_owned())
}

/// The machine's online CPUs, as Python's `os.cpu_count()` counts them (the Python report
/// showed that figure; `available_parallelism` would count this process's quota instead).
fn cpu_count() -> usize {
    #[cfg(unix)]
    {
        // SAFETY: sysconf reads a system figure; it has no memory effects.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
        if n > 0 {
            return n as usize;
        }
    }
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::page::render;
    use super::*;
    use serde_json::json;

    fn stats(name: &str) -> Value {
        let point = |t: f64, out: u64| {
            json!({"t_s": t, "stages": [{"out": out, "busy_s": t / 2.0, "occ_sum": out, "occ_n": out, "threads": 2}],
                   "outputs": out, "samples": out * 10, "wait_s": 0.0, "cpu_s": t, "rss_bytes": 100u64 << 20})
        };
        json!({
            "elapsed_s": 2.0,
            "stages": [{"name": name, "variant": "threads=2", "samples_in": 40, "samples_out": 40, "skipped": 2,
                        "busy_s": 1.0, "wait_in_s": 0.0, "wait_out_s": 0.0, "throughput": 20.0,
                        "utilisation": 0.25, "queue_capacity": 4, "queue_occupancy": 1.5}],
            "consumer": {"outputs": 40, "samples": 400, "delay_p50_ms": 0.5, "delay_p95_ms": 2.0,
                         "delay_max_ms": 3.0, "delay_histogram": [[0.5, 30], [2.0, 10]],
                         "first_output_s": 0.01, "throughput": 200.0},
            "series": [point(0.0, 0), point(1.0, 20), point(2.0, 40)],
        })
    }

    fn plan() -> Value {
        json!({"prediction": {"throughput": 250.0, "bottleneck": "cores",
                              "stages": [{"label": "x", "variant": "threads=2", "cpu_per_sample": 0.004, "capacity": 250.0}]},
               "decisions": ["fuse: <kept> apart"]})
    }

    #[test]
    fn a_hostile_stage_name_is_text_everywhere() {
        let html = render(
            &stats("map(<script>alert(1)</script>)"),
            "range\n  -> map(<script>)",
            None,
            "t",
            4,
        );
        assert!(!html.contains("<script>alert"));
        assert!(html.contains("map(&lt;script&gt;alert(1)&lt;/script&gt;)"));
        // The JSON dump escapes it too (its quotes included).
        assert!(html
            .contains("&quot;name&quot;: &quot;map(&lt;script&gt;alert(1)&lt;/script&gt;)&quot;"));
        // The page's own script is the only one.
        assert_eq!(html.matches("<script>").count(), 1);
    }

    #[test]
    fn the_page_has_every_section_and_draws_every_plot() {
        let html = render(
            &stats("map(f)"),
            "range {\"n\":40}\n  -> map(f)",
            None,
            "run",
            8,
        );
        let plots = html.matches(r#"<svg class="plot""#).count();
        assert_eq!(plots, 8);
        assert!(html.contains(r#"<div>cores<b>8</b></div>"#));
        assert!(html.contains("<td>map(f)</td><td>threads=2</td><td>40</td><td>40</td><td>2</td><td>1</td><td>25%</td><td>1.5 / 4</td><td>20</td>"));
        assert!(html.contains("<h2>Skipped samples and errors by op</h2><table>"));
        assert!(!html.contains("optimizer&#x27;s plan") && !html.contains("The optimizer's plan"));
        assert!(!html.contains("id=\"error\""));
        assert!(html.contains("&quot;outputs&quot;: 40") && !html.contains("&quot;series&quot;"));
    }

    #[test]
    fn a_plan_shows_predicted_against_measured() {
        let html = render(
            &stats("map(f)"),
            "range\n  -> map(f)",
            Some(&plan()),
            "run",
            2,
        );
        assert!(html.contains(
            "<p>Predicted 250 samples/s, bottleneck: <b>cores</b>; measured 200 samples/s.</p>"
        ));
        // One stage each side: measured stage by stage although the names differ.
        assert!(html.contains(
            "<tr><td>x</td><td>threads=2</td><td>0.004</td><td>250</td><td>20</td></tr>"
        ));
        assert!(html.contains("<li>fuse: &lt;kept&gt; apart</li>"));
    }

    #[test]
    fn a_failed_run_names_its_error() {
        let mut s = stats("map(f)");
        s["error"] = json!("map(explode) at sample 37: <corrupt>\nmore");
        let html = render(&s, "range", None, "run", 2);
        assert!(html
            .contains(r#"<div class="err" id="error">map(explode) at sample 37: &lt;corrupt&gt;"#));
        assert!(html.contains("<p>The error that ended the run: <b>map(explode) at sample 37: &lt;corrupt&gt;</b></p>"));
    }

    #[test]
    fn missing_figures_show_as_unknown() {
        let html = render(&json!({}), "", None, "empty", 1);
        assert!(html.contains("<div>run<b>— s</b></div>"));
        assert!(html.contains("no batches delivered"));
        assert!(html.contains("<p>No sample was skipped.</p>"));
        assert!(html.ends_with("<pre>{}</pre></details></body></html>"));
        let html = render(
            &json!({"stages": [{"name": "s"}]}),
            "a\nb",
            Some(&json!({})),
            "partial",
            1,
        );
        assert!(html.contains("<td>s</td><td>—</td>") && html.contains("Predicted — samples/s"));
    }

    #[test]
    fn ray_stages_get_their_own_section() {
        let mut s = stats("map(f)");
        s["remote"] = json!([{"stage": "map(<f>)", "chunks": 3, "samples": 12345, "retries": 1,
                              "sent_bytes": 3 << 20, "slots": [{"name": "a0", "chunks": 3, "busy_s": 0.5}],
                              "events": ["restarted"]}]);
        let html = render(&s, "range", None, "run", 2);
        assert!(html.contains("<h2>Ray: map(&lt;f&gt;)</h2><p>3 chunks (12,345 samples), 1 retries, 3.0 MiB sent to actors, 0.0 MiB back.</p>"));
        assert!(html.contains("<tr><td>a0</td><td>3</td><td>0.5</td><td>0.0 MiB</td><td>0.0 MiB</td></tr></table><ul><li>restarted</li></ul>"));
    }

    #[test]
    fn a_real_runs_statistics_have_every_key_the_page_reads() {
        use crate::{Dataset, IterOptions};
        let ds = Dataset::range(50).batch(5, false).unwrap();
        let mut exec = ds.iter(&IterOptions::default()).unwrap();
        for out in exec.by_ref() {
            out.unwrap();
        }
        let v = serde_json::to_value(exec.stats()).unwrap();
        for key in ["elapsed_s", "stages", "consumer", "series"] {
            assert!(v.get(key).is_some(), "{key}");
        }
        for key in [
            "outputs",
            "samples",
            "delay_p50_ms",
            "delay_p95_ms",
            "delay_max_ms",
            "delay_histogram",
            "throughput",
        ] {
            assert!(v["consumer"].get(key).is_some(), "consumer.{key}");
        }
        let stage = &v["stages"][0];
        for key in [
            "name",
            "variant",
            "samples_in",
            "samples_out",
            "skipped",
            "busy_s",
            "utilisation",
            "queue_capacity",
            "queue_occupancy",
            "throughput",
        ] {
            assert!(stage.get(key).is_some(), "stage.{key}");
        }
        let html = render_report(&v, &ds.plan().to_string(), None, DEFAULT_TITLE);
        assert!(html.contains("<b>10</b>") && html.contains("batch(5"));
    }
}
