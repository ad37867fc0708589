//! Observability: per-stage counters updated lock-free by workers, and the consumer's batch
//! delays (the ingest checker's P50/P95/max), turned into a report on demand.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

/// Live counters of one stage.
#[derive(Debug, Default)]
pub struct StageCounters {
    pub items_in: AtomicU64,
    pub items_out: AtomicU64,
    pub skipped: AtomicU64,
    pub busy_ns: AtomicU64,
    pub wait_in_ns: AtomicU64,
    pub wait_out_ns: AtomicU64,
    pub occupancy_sum: AtomicU64,
    pub occupancy_samples: AtomicU64,
    /// Workers allowed to run now when the controller tunes this stage (0: not tuned).
    pub active: AtomicU64,
}

impl StageCounters {
    pub(crate) fn add(counter: &AtomicU64, d: Duration) {
        counter.fetch_add(d.as_nanos() as u64, Relaxed);
    }
    pub(crate) fn record_occupancy(&self, len: usize) {
        self.occupancy_sum.fetch_add(len as u64, Relaxed);
        self.occupancy_samples.fetch_add(1, Relaxed);
    }
}

/// Static description of a stage, for reports.
#[derive(Debug, Clone)]
pub struct StageInfo {
    pub name: String,
    pub threads: usize,
    pub inline: bool,
    pub queue_capacity: usize,
}

#[derive(Debug, Default)]
struct ConsumerStats {
    delays_ns: Vec<u64>,
    first_output: Option<Duration>,
    samples: u64,
}

/// All counters of one iteration.
#[derive(Debug)]
pub struct PipelineStats {
    started: Instant,
    pub(crate) stages: Vec<(StageInfo, StageCounters)>,
    consumer: Mutex<ConsumerStats>,
    /// Nanoseconds the consumer spent waiting for outputs (for the controller).
    pub(crate) consumer_wait_ns: AtomicU64,
    pub(crate) consumer_samples: AtomicU64,
    /// The runtime controller's decisions, in order.
    pub(crate) decisions: Mutex<Vec<crate::exec::controller::Decision>>,
}

impl PipelineStats {
    /// Counters for `stages` (the executor makes one per run; a worker process running one
    /// stage away from its pipeline makes its own and reports the differences back).
    pub fn new(stages: Vec<StageInfo>) -> Self {
        PipelineStats {
            started: Instant::now(),
            stages: stages
                .into_iter()
                .map(|i| (i, StageCounters::default()))
                .collect(),
            consumer: Mutex::new(ConsumerStats::default()),
            consumer_wait_ns: AtomicU64::new(0),
            consumer_samples: AtomicU64::new(0),
            decisions: Mutex::new(Vec::new()),
        }
    }
    /// The live counters of stage `i` (0 is the source).
    pub fn counters(&self, i: usize) -> &StageCounters {
        &self.stages[i].1
    }
    pub(crate) fn record_output(&self, delay: Duration, samples: u64) {
        let mut c = self.consumer.lock().unwrap_or_else(|p| p.into_inner());
        if c.first_output.is_none() {
            c.first_output = Some(self.started.elapsed());
        }
        c.delays_ns.push(delay.as_nanos() as u64);
        c.samples += samples;
        self.consumer_wait_ns
            .fetch_add(delay.as_nanos() as u64, Relaxed);
        self.consumer_samples.fetch_add(samples, Relaxed);
    }
    /// Time since the iteration started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
    /// A snapshot report.
    pub fn report(&self) -> StatsReport {
        let elapsed = self.started.elapsed().as_secs_f64().max(1e-9);
        let stages = self
            .stages
            .iter()
            .map(|(info, c)| {
                let out = c.items_out.load(Relaxed);
                let busy = c.busy_ns.load(Relaxed) as f64 * 1e-9;
                let occ_n = c.occupancy_samples.load(Relaxed);
                let active = c.active.load(Relaxed) as usize;
                let threads = if active > 0 {
                    active
                } else {
                    info.threads.max(1)
                };
                StageReport {
                    name: info.name.clone(),
                    variant: if info.inline {
                        "inline".into()
                    } else {
                        format!("threads={threads}")
                    },
                    samples_in: c.items_in.load(Relaxed),
                    samples_out: out,
                    skipped: c.skipped.load(Relaxed),
                    busy_s: busy,
                    wait_in_s: c.wait_in_ns.load(Relaxed) as f64 * 1e-9,
                    wait_out_s: c.wait_out_ns.load(Relaxed) as f64 * 1e-9,
                    throughput: out as f64 / elapsed,
                    utilisation: busy / (elapsed * threads as f64),
                    queue_capacity: info.queue_capacity,
                    queue_occupancy: if occ_n == 0 {
                        0.0
                    } else {
                        c.occupancy_sum.load(Relaxed) as f64 / occ_n as f64
                    },
                }
            })
            .collect();
        let c = self.consumer.lock().unwrap_or_else(|p| p.into_inner());
        let mut d = c.delays_ns.clone();
        d.sort_unstable();
        let pct = |p: f64| -> f64 {
            if d.is_empty() {
                return 0.0;
            }
            let i = ((d.len() - 1) as f64 * p).round() as usize;
            d[i] as f64 * 1e-6
        };
        StatsReport {
            elapsed_s: elapsed,
            controller: self.decisions.lock().map(|d| d.clone()).unwrap_or_default(),
            stages,
            consumer: ConsumerReport {
                outputs: d.len() as u64,
                samples: c.samples,
                delay_p50_ms: pct(0.5),
                delay_p95_ms: pct(0.95),
                delay_max_ms: d.last().map_or(0.0, |&x| x as f64 * 1e-6),
                first_output_s: c.first_output.map(|t| t.as_secs_f64()),
                throughput: c.samples as f64 / elapsed,
            },
        }
    }
}

/// One stage in a [`StatsReport`].
#[derive(Debug, Clone, Serialize)]
pub struct StageReport {
    pub name: String,
    pub variant: String,
    pub samples_in: u64,
    pub samples_out: u64,
    pub skipped: u64,
    /// Summed over the stage's threads.
    pub busy_s: f64,
    pub wait_in_s: f64,
    pub wait_out_s: f64,
    /// Outputs per second over the iteration so far.
    pub throughput: f64,
    /// Busy time / (elapsed × threads).
    pub utilisation: f64,
    pub queue_capacity: usize,
    /// Mean number of chunks waiting in the output queue.
    pub queue_occupancy: f64,
}

/// What the consumer saw.
#[derive(Debug, Clone, Serialize)]
pub struct ConsumerReport {
    /// Outputs (batches, or samples when unbatched) delivered.
    pub outputs: u64,
    /// Samples delivered (counting every row of a batch).
    pub samples: u64,
    pub delay_p50_ms: f64,
    pub delay_p95_ms: f64,
    pub delay_max_ms: f64,
    /// Seconds from iterator start to the first output.
    pub first_output_s: Option<f64>,
    /// Samples per second delivered.
    pub throughput: f64,
}

/// Per-stage and consumer statistics of one iteration.
#[derive(Debug, Clone, Serialize)]
pub struct StatsReport {
    pub elapsed_s: f64,
    pub stages: Vec<StageReport>,
    /// Decisions of the runtime controller (empty when it is off).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub controller: Vec<crate::exec::controller::Decision>,
    pub consumer: ConsumerReport,
}

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
        for d in &self.controller {
            writeln!(
                f,
                "controller at {:.2} s: stage {} → {} workers ({})",
                d.at_s, d.slot, d.workers, d.why
            )?;
        }
        write!(
            f,
            "batch delay: P50 {:.3} ms, P95 {:.3} ms, max {:.3} ms",
            c.delay_p50_ms, c.delay_p95_ms, c.delay_max_ms
        )
    }
}
