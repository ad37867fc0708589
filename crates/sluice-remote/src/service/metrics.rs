//! The service's own metrics in the Prometheus text format, from the registry's status
//! ([`super::registry::Registry::status`]): what the dispatcher's loopback endpoint serves
//! (`sluice.serve(..., metrics_port=9102)`).
//!
//! ```
//! use sluice_remote::service::metrics::prometheus_text;
//! use sluice_remote::service::registry::{JobInfo, Registry, RegistryOptions};
//! let mut r = Registry::new(RegistryOptions::default())?;
//! r.register(0.0, JobInfo { label: "cv".into(), weight: 2.0, stage_keys: vec![] })?;
//! let text = prometheus_text(&r.status(1.0));
//! assert!(text.contains("sluice_service_job_weight{job=\"1\",label=\"cv\"} 2.0\n"));
//! # Ok::<(), sluice_core::Error>(())
//! ```

use std::fmt::Write;

use serde_json::Value;
use sluice_core::stats::prometheus::{label, python_repr};

fn num(v: &Value) -> String {
    match v {
        Value::Number(n) if n.is_u64() || n.is_i64() => n.to_string(),
        Value::Number(n) => python_repr(n.as_f64().unwrap_or(0.0)),
        Value::Bool(b) => u8::from(*b).to_string(),
        _ => "0".into(),
    }
}

/// The service's figures: totals, then one series per job and per worker.
pub fn prometheus_text(status: &Value) -> String {
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, doc: &str, rows: Vec<(String, String)>| {
        let _ = writeln!(out, "# HELP {name} {doc}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in rows {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    let totals = &status["totals"];
    for (key, name, doc) in [
        ("jobs", "sluice_service_jobs", "Jobs connected."),
        ("workers", "sluice_service_workers", "Workers in the pool."),
        (
            "utilization",
            "sluice_service_utilization",
            "Fraction of the workers' CPUs busy over the last window.",
        ),
        (
            "backlogged",
            "sluice_service_backlogged_jobs",
            "Jobs that wanted more workers over the last window.",
        ),
    ] {
        metric(name, "gauge", doc, vec![(String::new(), num(&totals[key]))]);
    }
    let empty = Vec::new();
    let jobs = status["jobs"].as_array().unwrap_or(&empty);
    let by_job = |key: &str| -> Vec<(String, String)> {
        let row = |j: &Value| {
            let id = num(&j["id"]);
            let name = label(j["label"].as_str().unwrap_or(""));
            (format!("{{job=\"{id}\",label=\"{name}\"}}"), num(&j[key]))
        };
        jobs.iter().map(row).collect()
    };
    for (key, name, kind, doc) in [
        (
            "weight",
            "sluice_service_job_weight",
            "gauge",
            "A job's weight.",
        ),
        (
            "rate",
            "sluice_service_job_samples_per_second",
            "gauge",
            "Samples a job received per second over the last window.",
        ),
        (
            "share",
            "sluice_service_job_share",
            "gauge",
            "A job's fraction of the workers' busy time over the last window.",
        ),
        (
            "chunks",
            "sluice_service_job_chunks_total",
            "counter",
            "Chunks the workers answered for a job.",
        ),
        (
            "stream_hits",
            "sluice_service_job_stream_hits_total",
            "counter",
            "Chunks a job read from a sweep's shared stream instead of computing them.",
        ),
        (
            "queue_wait_s",
            "sluice_service_job_queue_wait_seconds_total",
            "counter",
            "Seconds a job's chunks waited in the workers' fair queues.",
        ),
    ] {
        metric(name, kind, doc, by_job(key));
    }
    let workers = status["workers"].as_array().unwrap_or(&empty);
    let by_worker = |key: &str| -> Vec<(String, String)> {
        let row = |w: &Value| {
            let id = label(w["id"].as_str().unwrap_or(""));
            (format!("{{worker=\"{id}\"}}"), num(&w[key]))
        };
        workers.iter().map(row).collect()
    };
    metric(
        "sluice_service_worker_utilization",
        "gauge",
        "Fraction of a worker's CPUs busy over the last window.",
        by_worker("utilization"),
    );
    metric(
        "sluice_service_worker_queued",
        "gauge",
        "Chunks waiting in a worker's fair queue.",
        by_worker("queued"),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::registry::{JobInfo, Registry, RegistryOptions};

    #[test]
    fn jobs_and_workers_are_series_with_escaped_labels() {
        let mut r = Registry::new(RegistryOptions::default()).unwrap();
        let info = JobInfo {
            label: "a\"b".into(),
            weight: 1.5,
            stage_keys: vec![],
        };
        r.register(0.0, info).unwrap();
        r.add_worker(0.0, "w1", "node");
        let text = prometheus_text(&r.status(0.5));
        assert!(text.contains("# TYPE sluice_service_jobs gauge\nsluice_service_jobs 1\n"));
        assert!(text.contains("sluice_service_workers 1\n"), "{text}");
        assert!(text.contains("sluice_service_job_weight{job=\"1\",label=\"a\\\"b\"} 1.5\n"));
        assert!(text.contains("sluice_service_job_chunks_total{job=\"1\",label=\"a\\\"b\"} 0\n"));
        assert!(
            text.contains("sluice_service_worker_queued{worker=\"w1\"} 0\n"),
            "{text}"
        );
        // Every series line is `name{labels} value`.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (_, value) = line.rsplit_once(' ').unwrap();
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
