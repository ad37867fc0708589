//! Observability: per-stage counters updated lock-free by workers, and the consumer's batch
//! delays (the ingest checker's P50/P95/max), turned into a report on demand.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;

mod display;
pub mod endpoint;
mod op_reports;
pub mod ops;
pub mod prometheus;
pub mod series;
mod warnings;

pub use op_reports::OpReport;
use series::{Point, Series, StagePoint};

/// Live counters of one stage.
#[derive(Debug, Default)]
pub struct StageCounters {
    pub items_in: AtomicU64,
    pub items_out: AtomicU64,
    pub skipped: AtomicU64,
    /// Bytes of the items a chain stage produced (sizes the source's chunks).
    pub bytes_out: AtomicU64,
    /// The biggest item a chain stage produced, in bytes (what a memory cap budgets for).
    pub max_item_bytes: AtomicU64,
    pub busy_ns: AtomicU64,
    pub wait_in_ns: AtomicU64,
    pub wait_out_ns: AtomicU64,
    pub occupancy_sum: AtomicU64,
    pub occupancy_samples: AtomicU64,
    /// Chunks a parallel stage's workers ran.
    pub chunks: AtomicU64,
    /// The largest its reorder window grew to, in chunks (its measured tail sets it).
    pub window_max: AtomicU64,
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
    /// The worker pool it runs on (`processes`, `ray`, `service`), if not threads of this
    /// process: reports name it as plans do (`processes=2`).
    pub pool: Option<String>,
}

/// Sub-buckets per power of two of [`DelayHistogram`]: percentiles within 1/16 (6%).
const SUB_BITS: u32 = 4;
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) << SUB_BITS;

/// The consumer's waits in a fixed-size log-linear histogram: memory and the cost of a
/// record do not grow with the number of outputs (a 10⁹-sample epoch keeps 8 KiB).
#[derive(Debug)]
pub struct DelayHistogram {
    counts: Box<[AtomicU64]>,
    n: AtomicU64,
    max_ns: AtomicU64,
}

impl Default for DelayHistogram {
    fn default() -> Self {
        DelayHistogram {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            n: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
        }
    }
}

impl DelayHistogram {
    fn bucket(ns: u64) -> usize {
        if ns < (1 << SUB_BITS) {
            return ns as usize;
        }
        let exp = 63 - ns.leading_zeros() - SUB_BITS;
        let sub = (ns >> exp) as usize & ((1 << SUB_BITS) - 1);
        (((exp + 1) as usize) << SUB_BITS) | sub
    }
    /// The smallest value of bucket `b` (its lower edge).
    fn value(b: usize) -> u64 {
        let (hi, sub) = (b >> SUB_BITS, (b & ((1 << SUB_BITS) - 1)) as u64);
        if hi == 0 {
            sub
        } else {
            ((1 << SUB_BITS) | sub) << (hi - 1)
        }
    }
    /// Records one wait.
    pub fn record(&self, ns: u64) {
        self.counts[Self::bucket(ns)].fetch_add(1, Relaxed);
        self.n.fetch_add(1, Relaxed);
        self.max_ns.fetch_max(ns, Relaxed);
    }
    /// Records a wait of zero (an output that was ready) from the histogram's only writer,
    /// the consumer: plain loads and stores instead of locked read-modify-writes, which
    /// cost more than the rest of a cheap output's hand-over.
    fn record_ready(&self, n: u64) {
        bump(&self.counts[0], n);
        bump(&self.n, n);
    }
    /// Waits recorded.
    pub fn len(&self) -> u64 {
        self.n.load(Relaxed)
    }
    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The longest wait.
    pub fn max(&self) -> u64 {
        self.max_ns.load(Relaxed)
    }
    /// The non-empty buckets as (lower edge in ns, count), shortest waits first.
    pub fn buckets(&self) -> Vec<(u64, u64)> {
        self.counts
            .iter()
            .enumerate()
            .filter_map(|(b, c)| match c.load(Relaxed) {
                0 => None,
                n => Some((Self::value(b), n)),
            })
            .collect()
    }
    /// The `p`-quantile (0..=1) in nanoseconds, to within one bucket (≤ 6%), never above the
    /// maximum.
    ///
    /// ```
    /// use sluice_core::stats::DelayHistogram;
    /// let h = DelayHistogram::default();
    /// for ns in 1..=1000 { h.record(ns * 1000); }
    /// let p50 = h.quantile(0.5) as f64;
    /// assert!((p50 - 500_000.0).abs() / 500_000.0 < 0.07);
    /// assert_eq!(h.max(), 1_000_000);
    /// ```
    pub fn quantile(&self, p: f64) -> u64 {
        let n = self.len();
        if n == 0 {
            return 0;
        }
        let rank = ((n - 1) as f64 * p.clamp(0.0, 1.0)).round() as u64;
        let mut seen = 0;
        for (b, c) in self.counts.iter().enumerate() {
            seen += c.load(Relaxed);
            if seen > rank {
                return Self::value(b).min(self.max());
            }
        }
        self.max()
    }
}

/// Adds `by` to a counter that only one thread at a time writes.
fn bump(c: &AtomicU64, by: u64) {
    c.store(c.load(Relaxed) + by, Relaxed);
}

/// All counters of one iteration.
#[derive(Debug)]
pub struct PipelineStats {
    started: Instant,
    pub(crate) stages: Vec<(StageInfo, StageCounters)>,
    delays: DelayHistogram,
    first_output: OnceLock<Duration>,
    /// Nanoseconds the consumer spent waiting for outputs (for the controller).
    pub(crate) consumer_wait_ns: AtomicU64,
    pub(crate) consumer_samples: AtomicU64,
    /// The runtime controller's decisions, in order.
    pub(crate) decisions: Mutex<Vec<crate::exec::controller::Decision>>,
    /// What the source did before serving samples ([`crate::Source::report`]).
    source: OnceLock<serde_json::Value>,
    /// The running source and its [`crate::Source::skipped_reading`] count when this run
    /// started: what it skips while streaming counts as the source stage's skips.
    reading: OnceLock<(crate::SourceRef, u64)>,
    /// The counters over time (sampled as outputs are delivered).
    series: Series,
    /// The error that ended the run, as the consumer received it.
    error: OnceLock<String>,
    /// Each step's cost, when the run times its ops ([`crate::Delivery::timed`]).
    op_times: OnceLock<ops::OpTimes>,
    /// The ops that report on their own work, with their figures when the run started.
    op_reports: OnceLock<op_reports::OpWatches>,
    /// The run's memory cap, when it has one (`iter(memory_limit=...)`).
    memory: OnceLock<Arc<crate::exec::MemoryCap>>,
}

impl PipelineStats {
    /// Puts the run under `cap` (once; later calls are ignored).
    pub fn set_memory(&self, cap: Arc<crate::exec::MemoryCap>) {
        let _ = self.memory.set(cap);
    }

    /// The run's memory cap, if it has one.
    pub fn memory(&self) -> Option<&Arc<crate::exec::MemoryCap>> {
        self.memory.get()
    }

    /// Bytes one source item becomes, on average and at its biggest, as the stages measured
    /// so far: the largest of the stages' bytes per input (a batch's too) and of the biggest
    /// items a stage made (what a memory cap budgets chunks at) — `None` until each of the
    /// first `sized_by` stages (the source is the first) that runs on threads of its own has
    /// made or taken something. Stages past those count once they have: those run by the
    /// consumer's thread (waiting for them would hold the first chunks until the consumer
    /// first asks) and those behind a stage that holds items back (a shuffle buffer, a
    /// batch: they see nothing until it is full).
    pub fn item_bytes(&self, sized_by: usize) -> Option<(f64, f64)> {
        let seen = |c: &StageCounters| c.items_in.load(Relaxed).max(c.items_out.load(Relaxed));
        if self
            .stages
            .iter()
            .take(sized_by)
            .any(|(info, c)| !info.inline && seen(c) == 0)
        {
            return None;
        }
        Some(self.stages.iter().filter(|(_, c)| seen(c) > 0).fold(
            (0.0f64, 0.0f64),
            |(mean, max), (_, c)| {
                let m = c.bytes_out.load(Relaxed) as f64 / seen(c) as f64;
                (
                    mean.max(m),
                    max.max(m).max(c.max_item_bytes.load(Relaxed) as f64),
                )
            },
        ))
    }

    /// Counters for `stages` (the executor makes one per run; a worker process running one
    /// stage away from its pipeline makes its own and reports the differences back).
    pub fn new(stages: Vec<StageInfo>) -> Self {
        let stats = PipelineStats {
            started: Instant::now(),
            stages: stages
                .into_iter()
                .map(|i| (i, StageCounters::default()))
                .collect(),
            delays: DelayHistogram::default(),
            first_output: OnceLock::new(),
            consumer_wait_ns: AtomicU64::new(0),
            consumer_samples: AtomicU64::new(0),
            decisions: Mutex::new(Vec::new()),
            source: OnceLock::new(),
            reading: OnceLock::new(),
            series: if series::enabled() {
                Series::default()
            } else {
                Series::off()
            },
            error: OnceLock::new(),
            op_times: OnceLock::new(),
            op_reports: OnceLock::new(),
            memory: OnceLock::new(),
        };
        // The series starts at the start: its first interval runs up to the first sample.
        if series::enabled() {
            stats.series.push(0, stats.point(Duration::ZERO));
        }
        stats
    }
    /// Counts `source`'s skips as the source stage's: those made when it was opened, and
    /// those it makes while this run reads it (once; later calls are ignored).
    pub fn watch_source(&self, source: &crate::SourceRef) {
        self.counters(0).skipped.store(source.skipped(), Relaxed);
        let _ = self.reading.set((source.clone(), source.skipped_reading()));
    }
    /// Records the source left out while this run read it (streaming sources).
    pub fn source_read_skips(&self) -> u64 {
        self.reading
            .get()
            .map_or(0, |(s, base)| s.skipped_reading().saturating_sub(*base))
    }
    /// Records the source's report (once; later calls are ignored).
    pub fn set_source_report(&self, report: Option<serde_json::Value>) {
        if let Some(r) = report {
            let _ = self.source.set(r);
        }
    }
    /// Watches the ops that report on their own work ([`crate::Op::counters`]; `(stage
    /// name, op)` pairs), from their figures now (once; later calls are ignored).
    pub fn watch_ops(&self, ops: impl IntoIterator<Item = (String, crate::OpRef)>) {
        let _ = self.op_reports.set(op_reports::OpWatches::new(ops));
    }
    /// The live counters of stage `i` (0 is the source).
    pub fn counters(&self, i: usize) -> &StageCounters {
        &self.stages[i].1
    }
    /// Records an output the consumer had to wait `delay` for.
    pub(crate) fn record_output(&self, delay: Duration, samples: u64) {
        let now = self.started.elapsed();
        self.first_output.get_or_init(|| now);
        let ns = delay.as_nanos() as u64;
        self.delays.record(ns);
        if ns > 0 {
            self.consumer_wait_ns.fetch_add(ns, Relaxed);
        }
        self.consumer_samples.fetch_add(samples, Relaxed);
        self.sample_series(now);
    }
    /// Records `outputs` outputs holding `samples` samples in all that were ready when the
    /// consumer asked (no wait): one output, or the rows of a batch of rows delivered one by
    /// one, counted together. Only the consumer records outputs, one call at a time (its
    /// iterator is behind a lock), so the counters need no locked updates; the clock is read
    /// for the time series every 64th such output only (an output that waited always reads
    /// it, so a slow pipeline still samples on time).
    pub(crate) fn record_ready_outputs(&self, outputs: u64, samples: u64) {
        let before = self.delays.len();
        self.delays.record_ready(outputs);
        bump(&self.consumer_samples, samples);
        if before / 64 != self.delays.len() / 64 {
            self.sample_series(self.started.elapsed());
        }
    }
    fn sample_series(&self, now: Duration) {
        let now_ns = now.as_nanos() as u64;
        if self.series.due(now_ns) {
            self.series.push(now_ns, self.point(now));
        }
    }
    /// Every counter now, for the time series.
    fn point(&self, now: Duration) -> Point {
        Point {
            t_s: now.as_secs_f64(),
            stages: self
                .stages
                .iter()
                .map(|(info, c)| StagePoint {
                    out: c.items_out.load(Relaxed),
                    busy_s: c.busy_ns.load(Relaxed) as f64 * 1e-9,
                    occ_sum: c.occupancy_sum.load(Relaxed),
                    occ_n: c.occupancy_samples.load(Relaxed),
                    threads: match c.active.load(Relaxed) as usize {
                        0 => info.threads.max(1),
                        n => n,
                    },
                })
                .collect(),
            outputs: self.delays.len(),
            samples: self.consumer_samples.load(Relaxed),
            wait_s: self.consumer_wait_ns.load(Relaxed) as f64 * 1e-9,
            cpu_s: series::process_cpu_s(),
            rss_bytes: series::process_rss_bytes(),
        }
    }
    /// Times each step from now on ([`crate::Delivery::timed`]).
    pub fn time_ops(&self) {
        let _ = self.op_times.set(ops::OpTimes::default());
    }
    /// Each step's cost so far, when the run times its ops.
    pub fn op_times(&self) -> Option<&ops::OpTimes> {
        self.op_times.get()
    }
    /// Records the error that ended the run (the first one; later calls are ignored).
    pub fn record_error(&self, error: &crate::Error) {
        let _ = self.error.set(error.to_string());
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
            .enumerate()
            .map(|(i, (info, c))| {
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
                    variant: match (&info.pool, info.inline) {
                        (_, true) => "inline".into(),
                        (Some(pool), false) => format!("{pool}={threads}"),
                        (None, false) => format!("threads={threads}"),
                    },
                    samples_in: c.items_in.load(Relaxed),
                    samples_out: out,
                    skipped: c.skipped.load(Relaxed)
                        + if i == 0 { self.source_read_skips() } else { 0 },
                    busy_s: busy,
                    wait_in_s: c.wait_in_ns.load(Relaxed) as f64 * 1e-9,
                    wait_out_s: c.wait_out_ns.load(Relaxed) as f64 * 1e-9,
                    throughput: out as f64 / elapsed,
                    utilisation: busy / (elapsed * threads as f64),
                    queue_capacity: info.queue_capacity.max(c.window_max.load(Relaxed) as usize),
                    queue_occupancy: if occ_n == 0 {
                        0.0
                    } else {
                        c.occupancy_sum.load(Relaxed) as f64 / occ_n as f64
                    },
                }
            })
            .collect();
        let d = &self.delays;
        let samples = self.consumer_samples.load(Relaxed);
        let mut series = self.series.rows();
        series.push(self.point(self.started.elapsed()));
        StatsReport {
            series,
            ops: self
                .op_reports
                .get()
                .map(|w| w.report())
                .unwrap_or_default(),
            error: self.error.get().cloned(),
            memory: self.memory.get().map(|m| m.report()),
            source: self.source.get().cloned(),
            elapsed_s: elapsed,
            controller: self.decisions.lock().map(|d| d.clone()).unwrap_or_default(),
            stages,
            consumer: ConsumerReport {
                outputs: d.len(),
                samples,
                delay_p50_ms: d.quantile(0.5) as f64 * 1e-6,
                delay_p95_ms: d.quantile(0.95) as f64 * 1e-6,
                delay_max_ms: d.max() as f64 * 1e-6,
                delay_histogram: d
                    .buckets()
                    .into_iter()
                    .map(|(ns, n)| (ns as f64 * 1e-6, n))
                    .collect(),
                first_output_s: self.first_output.get().map(|t| t.as_secs_f64()),
                throughput: samples as f64 / elapsed,
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
    /// The output queue's capacity in chunks; for a parallel stage, the largest its reorder
    /// window grew to (it grows with the stage's measured tail latency).
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
    /// The waits as (lower edge of a bucket in ms, outputs), non-empty buckets only; a bucket
    /// spans 1/16 of its power of two.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub delay_histogram: Vec<(f64, u64)>,
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
    /// What the source did before serving samples (a sort's runs and spilled bytes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<serde_json::Value>,
    /// What ops reported about their own work in this run, in this process (e.g.
    /// `text.tokenize`'s lines on its fast path and through `tokenizers`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ops: Vec<OpReport>,
    /// Cumulative counters over time, oldest first, the last one taken for this report
    /// ([`series::Series`]): per-interval rates are the differences of neighbours.
    pub series: Vec<Point>,
    /// The error that ended the run, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the memory cap did, when the run has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<crate::exec::MemoryReport>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_outputs_count_like_waited_ones_with_no_wait() {
        let stats = PipelineStats::new(vec![]);
        stats.record_output(Duration::from_millis(2), 4);
        for _ in 0..130 {
            stats.record_ready_outputs(1, 4);
        }
        let c = stats.report().consumer;
        assert_eq!((c.outputs, c.samples), (131, 524));
        assert_eq!(c.delay_max_ms, 2.0);
        assert_eq!(c.delay_p50_ms, 0.0);
        assert!(c.first_output_s.is_some());
    }

    #[test]
    fn a_stage_on_a_worker_pool_is_reported_by_its_pool() {
        let info = |inline, pool: Option<&str>| StageInfo {
            name: "stage".into(),
            threads: 3,
            inline,
            queue_capacity: 2,
            pool: pool.map(String::from),
        };
        let stats = PipelineStats::new(vec![
            info(false, None),
            info(false, Some("processes")),
            info(true, None),
        ]);
        let variants: Vec<_> = stats
            .report()
            .stages
            .into_iter()
            .map(|s| s.variant)
            .collect();
        assert_eq!(variants, ["threads=3", "processes=3", "inline"]);
    }

    #[test]
    fn item_bytes_wait_for_the_threaded_stages_not_the_consumers() {
        let info = |inline| StageInfo {
            name: "stage".into(),
            threads: 1,
            inline,
            queue_capacity: 2,
            pool: None,
        };
        let stats = PipelineStats::new(vec![info(false), info(false), info(true), info(false)]);
        // The map after a shuffle buffer (stage 3) is not waited for.
        let sized_by = 3;
        assert_eq!(stats.item_bytes(sized_by), None);
        let (source, map) = (stats.counters(0), stats.counters(1));
        source.items_out.fetch_add(4, Relaxed);
        assert_eq!(
            stats.item_bytes(sized_by),
            None,
            "the map has made nothing yet"
        );
        map.items_in.fetch_add(2, Relaxed);
        map.bytes_out.fetch_add(2_000, Relaxed);
        map.max_item_bytes.fetch_max(1_500, Relaxed);
        // The consumer's stage has taken nothing: it does not hold the figures back, nor
        // divide by its zero; nor does the stage after the buffer.
        assert_eq!(stats.item_bytes(sized_by), Some((1_000.0, 1_500.0)));
        assert_eq!(stats.item_bytes(4), None, "every threaded stage asked for");
        let batch = stats.counters(2);
        batch.items_in.fetch_add(2, Relaxed);
        batch.bytes_out.fetch_add(4_200, Relaxed);
        assert_eq!(stats.item_bytes(sized_by), Some((2_100.0, 2_100.0)));
    }

    #[test]
    fn histogram_buckets_are_ordered_and_tight() {
        let mut last = 0;
        for ns in (0..5000u64).chain([1 << 20, 123_456_789, u64::MAX / 3]) {
            let b = DelayHistogram::bucket(ns);
            assert!(b >= last || ns > 5000, "bucket order at {ns}");
            last = b;
            let lo = DelayHistogram::value(b);
            assert!(lo <= ns, "{ns}: lower edge {lo}");
            assert!(
                (ns - lo) as f64 <= ns as f64 / 16.0 + 1.0,
                "{ns}: edge {lo}"
            );
        }
        assert!(DelayHistogram::bucket(u64::MAX) < BUCKETS);
    }

    #[test]
    fn quantiles_of_a_skewed_distribution() {
        let h = DelayHistogram::default();
        assert_eq!(h.quantile(0.5), 0);
        for _ in 0..900 {
            h.record(1_000);
        }
        for _ in 0..100 {
            h.record(80_000_000);
        }
        assert_eq!(h.len(), 1000);
        assert!((940..=1000).contains(&h.quantile(0.5)));
        let p95 = h.quantile(0.95) as f64;
        assert!((p95 - 8e7).abs() / 8e7 < 0.07, "{p95}");
        assert_eq!(h.max(), 80_000_000);
    }
}
