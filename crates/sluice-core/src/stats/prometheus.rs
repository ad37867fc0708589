//! A [`StatsReport`] in the Prometheus text exposition format (version 0.0.4), for the live
//! endpoint ([`super::endpoint`]). The series, their types, HELP lines and labels are the
//! ones the Python formatter served before this moved to Rust, and numbers print the way
//! Python printed them (`repr` of a float, `str` of an int), so dashboards and recorded
//! scrapes see the same text.

use std::fmt::Write;

use super::{StageReport, StatsReport};

/// A sample's value: counts print as integers, measurements as floats (`1.0`, `1e-05`).
#[derive(Debug, Clone, Copy)]
enum Value {
    Int(u64),
    Float(f64),
}

/// The statistics in the Prometheus text format: counters end in `_total`, the batch delay
/// is a summary in seconds, the process's CPU time and memory come from the report's last
/// series point when the OS told them.
///
/// ```
/// use sluice_core::stats::{prometheus::prometheus_text, PipelineStats};
/// let text = prometheus_text(&PipelineStats::new(vec![]).report());
/// assert!(text.contains("# TYPE sluice_consumer_outputs_total counter\n"));
/// assert!(text.contains("\nsluice_consumer_outputs_total 0\n"));
/// ```
pub fn prometheus_text(report: &StatsReport) -> String {
    let mut out = String::new();
    let stages = &report.stages;
    let by_stage = |value: &dyn Fn(&StageReport) -> Value| -> Vec<(String, Value)> {
        let row = |s: &StageReport| (format!("{{stage=\"{}\"}}", label(&s.name)), value(s));
        stages.iter().map(row).collect()
    };
    let int = |v: u64| Value::Int(v);
    let float = |v: f64| Value::Float(v);
    let mut metric = |name: &str, kind: &str, doc: &str, rows: Vec<(String, Value)>| {
        let _ = writeln!(out, "# HELP {name} {doc}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in rows {
            let _ = writeln!(out, "{name}{labels} {}", number(value));
        }
    };
    metric(
        "sluice_stage_samples_in_total",
        "counter",
        "Samples a stage received.",
        by_stage(&|s| int(s.samples_in)),
    );
    metric(
        "sluice_stage_samples_out_total",
        "counter",
        "Samples (or batches) a stage produced.",
        by_stage(&|s| int(s.samples_out)),
    );
    metric(
        "sluice_stage_skipped_total",
        "counter",
        "Samples a stage skipped (on_error='skip').",
        by_stage(&|s| int(s.skipped)),
    );
    metric(
        "sluice_stage_busy_seconds_total",
        "counter",
        "Seconds a stage's threads spent working.",
        by_stage(&|s| float(s.busy_s)),
    );
    metric(
        "sluice_stage_utilisation",
        "gauge",
        "Busy time over elapsed time and threads.",
        by_stage(&|s| float(s.utilisation)),
    );
    metric(
        "sluice_stage_queue_occupancy",
        "gauge",
        "Mean chunks waiting in a stage's output queue.",
        by_stage(&|s| float(s.queue_occupancy)),
    );
    let c = &report.consumer;
    let one = |v: Value| vec![(String::new(), v)];
    metric(
        "sluice_consumer_outputs_total",
        "counter",
        "Outputs (batches) delivered.",
        one(int(c.outputs)),
    );
    metric(
        "sluice_consumer_samples_total",
        "counter",
        "Samples delivered.",
        one(int(c.samples)),
    );
    metric(
        "sluice_consumer_samples_per_second",
        "gauge",
        "Samples delivered per second so far.",
        one(float(c.throughput)),
    );
    // Milliseconds divided by 1e3 (not nanoseconds times 1e-9): the same floats as before.
    let quantile = |q: &str, ms: f64| (format!("{{quantile=\"{q}\"}}"), float(ms / 1e3));
    metric(
        "sluice_batch_delay_seconds",
        "summary",
        "How long the training loop waited for a batch.",
        vec![
            quantile("0.5", c.delay_p50_ms),
            quantile("0.95", c.delay_p95_ms),
            quantile("1", c.delay_max_ms),
        ],
    );
    let last = report.series.last();
    if let Some(cpu) = last.and_then(|p| p.cpu_s) {
        metric(
            "sluice_process_cpu_seconds_total",
            "counter",
            "CPU seconds of the process.",
            one(float(cpu)),
        );
    }
    if let Some(rss) = last.and_then(|p| p.rss_bytes) {
        metric(
            "sluice_process_resident_memory_bytes",
            "gauge",
            "Resident memory of the process.",
            one(int(rss)),
        );
    }
    out
}

/// A label value escaped as the format asks: backslash, double quote and newline.
///
/// ```
/// assert_eq!(sluice_core::stats::prometheus::label("a\"b"), "a\\\"b");
/// ```
pub fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn number(value: Value) -> String {
    match value {
        Value::Int(v) => v.to_string(),
        Value::Float(v) => python_repr(v),
    }
}

/// `repr(v)` of a Python float: the shortest digits that read back as `v`, positional
/// (with at least one decimal) for exponents -5 < e < 16, else `d.ddde±XX` — how the
/// Prometheus text and the HTML report print numbers, as the Python ones did.
///
/// ```
/// use sluice_core::stats::prometheus::python_repr;
/// assert_eq!((python_repr(3.0), python_repr(1e-5)), ("3.0".to_string(), "1e-05".to_string()));
/// ```
pub fn python_repr(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // `{:e}` gives Rust's shortest round-trip digits, the same ones Python's repr picks.
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if !(-5 < exp && exp < 16) {
        let sign_exp = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{mantissa}e{sign_exp}{:02}", exp.abs());
    }
    let point = exp + 1; // digits before the decimal point
    if point <= 0 {
        let zeros = "0".repeat((-point) as usize);
        format!("{sign}0.{zeros}{digits}")
    } else if point as usize >= digits.len() {
        let zeros = "0".repeat(point as usize - digits.len());
        format!("{sign}{digits}{zeros}.0")
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{sign}{int}.{frac}")
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::series::Point;
    use super::super::ConsumerReport;
    use super::*;

    fn stage(name: &str, n: u64) -> StageReport {
        StageReport {
            name: name.into(),
            variant: "threads=2".into(),
            samples_in: n,
            samples_out: n / 2,
            skipped: 1,
            busy_s: 0.25,
            wait_in_s: 0.0,
            wait_out_s: 0.0,
            throughput: 0.0,
            utilisation: 0.125,
            queue_capacity: 4,
            queue_occupancy: 0.0,
        }
    }

    pub(in crate::stats) fn report(cpu: Option<f64>, rss: Option<u64>) -> StatsReport {
        StatsReport {
            ops: vec![],
            elapsed_s: 2.0,
            stages: vec![stage("source: range", 10), stage("map \"f\"\\x\ny", 8)],
            controller: vec![],
            consumer: ConsumerReport {
                outputs: 3,
                samples: 30,
                delay_p50_ms: 0.0,
                delay_p95_ms: 1.5,
                delay_max_ms: 0.01,
                delay_histogram: vec![],
                first_output_s: None,
                throughput: 15.0,
            },
            source: None,
            memory: None,
            series: vec![Point {
                t_s: 1.0,
                stages: vec![],
                outputs: 3,
                samples: 30,
                wait_s: 0.0,
                cpu_s: cpu,
                rss_bytes: rss,
            }],
            error: None,
        }
    }

    /// The text today's Python formatter made for the same figures.
    const EXPECTED: &str = r#"# HELP sluice_stage_samples_in_total Samples a stage received.
# TYPE sluice_stage_samples_in_total counter
sluice_stage_samples_in_total{stage="source: range"} 10
sluice_stage_samples_in_total{stage="map \"f\"\\x\ny"} 8
# HELP sluice_stage_samples_out_total Samples (or batches) a stage produced.
# TYPE sluice_stage_samples_out_total counter
sluice_stage_samples_out_total{stage="source: range"} 5
sluice_stage_samples_out_total{stage="map \"f\"\\x\ny"} 4
# HELP sluice_stage_skipped_total Samples a stage skipped (on_error='skip').
# TYPE sluice_stage_skipped_total counter
sluice_stage_skipped_total{stage="source: range"} 1
sluice_stage_skipped_total{stage="map \"f\"\\x\ny"} 1
# HELP sluice_stage_busy_seconds_total Seconds a stage's threads spent working.
# TYPE sluice_stage_busy_seconds_total counter
sluice_stage_busy_seconds_total{stage="source: range"} 0.25
sluice_stage_busy_seconds_total{stage="map \"f\"\\x\ny"} 0.25
# HELP sluice_stage_utilisation Busy time over elapsed time and threads.
# TYPE sluice_stage_utilisation gauge
sluice_stage_utilisation{stage="source: range"} 0.125
sluice_stage_utilisation{stage="map \"f\"\\x\ny"} 0.125
# HELP sluice_stage_queue_occupancy Mean chunks waiting in a stage's output queue.
# TYPE sluice_stage_queue_occupancy gauge
sluice_stage_queue_occupancy{stage="source: range"} 0.0
sluice_stage_queue_occupancy{stage="map \"f\"\\x\ny"} 0.0
# HELP sluice_consumer_outputs_total Outputs (batches) delivered.
# TYPE sluice_consumer_outputs_total counter
sluice_consumer_outputs_total 3
# HELP sluice_consumer_samples_total Samples delivered.
# TYPE sluice_consumer_samples_total counter
sluice_consumer_samples_total 30
# HELP sluice_consumer_samples_per_second Samples delivered per second so far.
# TYPE sluice_consumer_samples_per_second gauge
sluice_consumer_samples_per_second 15.0
# HELP sluice_batch_delay_seconds How long the training loop waited for a batch.
# TYPE sluice_batch_delay_seconds summary
sluice_batch_delay_seconds{quantile="0.5"} 0.0
sluice_batch_delay_seconds{quantile="0.95"} 0.0015
sluice_batch_delay_seconds{quantile="1"} 1e-05
"#;

    #[test]
    fn a_fixed_report_reads_as_before() {
        assert_eq!(prometheus_text(&report(None, None)), EXPECTED);
    }

    #[test]
    fn the_process_series_appear_when_the_os_told() {
        let text = prometheus_text(&report(Some(1.5), Some(1 << 20)));
        let tail = "# HELP sluice_process_cpu_seconds_total CPU seconds of the process.\n\
                    # TYPE sluice_process_cpu_seconds_total counter\n\
                    sluice_process_cpu_seconds_total 1.5\n\
                    # HELP sluice_process_resident_memory_bytes Resident memory of the process.\n\
                    # TYPE sluice_process_resident_memory_bytes gauge\n\
                    sluice_process_resident_memory_bytes 1048576\n";
        assert_eq!(text, format!("{EXPECTED}{tail}"));
    }

    #[test]
    fn floats_print_like_python_repr() {
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (123456.789, "123456.789"),
            (1e15, "1000000000000000.0"),
            (9999999999999998.0, "9999999999999998.0"),
            (1e16, "1e+16"),
            (1.2345e100, "1.2345e+100"),
            (5e-324, "5e-324"),
            (0.30000000000000004, "0.30000000000000004"),
            (-0.0, "-0.0"),
            (f64::INFINITY, "inf"),
            (f64::NAN, "nan"),
        ];
        for (v, want) in cases {
            assert_eq!(python_repr(v), want, "{v:?}");
        }
    }
}
