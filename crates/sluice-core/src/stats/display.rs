//! The stats table `print(stats)` shows.

use std::fmt;

use super::StatsReport;

impl fmt::Display for StatsReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<40} {:>10} {:>10} {:>10} {:>7} {:>8} {:>8} {:>9}",
            "stage", "variant", "in", "out", "skip", "busy s", "util", "queue"
        )?;
        for s in &self.stages {
            let name: String = s.name.chars().take(40).collect();
            writeln!(
                f,
                "{:<40} {:>10} {:>10} {:>10} {:>7} {:>8.2} {:>7.0}% {:>5.1}/{:<3}",
                name,
                s.variant,
                s.samples_in,
                s.samples_out,
                s.skipped,
                s.busy_s,
                s.utilisation * 100.0,
                s.queue_occupancy,
                s.queue_capacity
            )?;
        }
        let c = &self.consumer;
        writeln!(
            f,
            "consumer: {} outputs, {} samples in {:.2} s ({:.0} samples/s); first output {}",
            c.outputs,
            c.samples,
            self.elapsed_s,
            c.throughput,
            c.first_output_s
                .map_or("-".to_string(), |t| format!("{:.3} s", t))
        )?;
        if let Some(src) = &self.source {
            writeln!(f, "source: {src}")?;
        }
        for op in &self.ops {
            let counts: Vec<String> = op.counts.iter().map(|(k, v)| format!("{k} {v}")).collect();
            writeln!(f, "op {} in '{}': {}", op.op, op.stage, counts.join(", "))?;
        }
        for d in &self.controller {
            writeln!(
                f,
                "controller at {:.2} s: stage {} → {} workers ({})",
                d.at_s, d.slot, d.workers, d.why
            )?;
        }
        if let Some(m) = &self.memory {
            let mb = |b: u64| b as f64 / 1e6;
            writeln!(
                f,
                "memory: cap {:.0} MB, peak {:.0} MB; source held {} chunk(s) {:.2} s, the \
                 consumer waiting {:.2} s of it ({:.0}% of the run){}{}",
                mb(m.limit),
                mb(m.peak_rss),
                m.held_chunks,
                m.held_s,
                m.starved_s,
                100.0 * m.starved_s / self.elapsed_s.max(1e-9),
                if m.forced > 0 {
                    format!(
                        "; {} let through over the cap to keep the run going",
                        m.forced
                    )
                } else {
                    String::new()
                },
                if m.transient_waits > 0 {
                    format!(
                        "; {} big buffer(s) waited {:.2} s for room",
                        m.transient_waits, m.transient_wait_s
                    )
                } else {
                    String::new()
                }
            )?;
        }
        write!(
            f,
            "batch delay: P50 {:.3} ms, P95 {:.3} ms, max {:.3} ms",
            c.delay_p50_ms, c.delay_p95_ms, c.delay_max_ms
        )
    }
}
