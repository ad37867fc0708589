//! The dispatcher's soft state and decisions (`docs/design/SERVICE.md` §2.7–2.9): the jobs
//! attached to the shared service and their leases on workers, the workers with what they
//! last measured, and how many workers the pool needs.
//!
//! The dispatcher is a Ray actor that only forwards calls here, so its decisions are tested
//! on a fake clock: no clock is read, methods that need the time take `now` (seconds of the
//! caller's monotonic clock). All of it is soft: after a restart the jobs register again.
//! Scaling is Pecan/Cachew's model-based jump, across all jobs ([`Registry::scale`]).
//!
//! ```
//! use sluice_remote::service::registry::*;
//! let mut reg = Registry::new(RegistryOptions::default())?;
//! let info = JobInfo { label: "train".into(), weight: 1.0, stage_keys: vec!["k".into()] };
//! let job = reg.register(0.0, info)?;
//! reg.add_worker(0.0, "w0", "node-a");
//! reg.worker_beat(0.0, "w0", WorkerBeat::default());
//! assert_eq!(reg.lease(job, &[])?.as_deref(), Some("w0"));
//! assert_eq!(reg.scale(0.0, 0), Scale::Hold); // the first window starts
//! reg.heartbeat(2.0, job, JobBeat { samples: 500, backlogged: true })?;
//! reg.worker_beat(2.0, "w0", WorkerBeat { busy_s: 2.0, ..Default::default() });
//! // Busy all window with a job wanting more: ceil(1.0 / 0.8) + 1 = 3 workers.
//! assert_eq!(reg.scale(2.0, 0), Scale::Start(2));
//! # Ok::<(), sluice_core::Error>(())
//! ```

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sluice_core::{Error, Result};

pub use super::fair::JobId;

/// Decisions kept for `sluice service status`.
const DECISIONS: usize = 50;

/// How the pool is bounded and how eagerly it scales.
#[derive(Debug, Clone, Serialize)]
pub struct RegistryOptions {
    /// Workers kept even with no job attached (a job connecting finds one ready).
    pub min_workers: usize,
    /// Workers at most, whatever the demand.
    pub max_workers: usize,
    /// CPUs each worker holds (its Ray `num_cpus`).
    pub worker_cpus: f64,
    /// A job missing heartbeats this long is expired and its leases dropped.
    pub lease_s: f64,
    /// How often the caller calls [`Registry::scale`]; only checked here.
    pub window_s: f64,
    /// The worker busy fraction the pool aims at: headroom for bursts and new jobs.
    pub target_util: f64,
    /// Windows of low demand in a row before a worker is retired: no flapping.
    pub idle_windows: u32,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions {
            min_workers: 1,
            max_workers: 8,
            worker_cpus: 1.0,
            lease_s: 5.0,
            window_s: 2.0,
            target_util: 0.8,
            idle_windows: 2,
        }
    }
}

/// Weights and durations must be positive, finite numbers: a NaN would make every
/// comparison false, so nothing would expire or scale.
fn positive(what: &str, x: f64) -> Result<f64> {
    if x.is_finite() && x > 0.0 {
        return Ok(x);
    }
    Err(Error::invalid(format!(
        "{what} must be a positive number, got {x}"
    )))
}

impl RegistryOptions {
    /// Checks the bounds and numbers, naming the first bad one.
    pub fn validate(&self) -> Result<()> {
        positive("worker_cpus", self.worker_cpus)?;
        positive("lease_s", self.lease_s)?;
        positive("window_s", self.window_s)?;
        let (min, max, t) = (self.min_workers, self.max_workers, self.target_util);
        let problem = if max == 0 || min > max {
            format!("need 1 <= max_workers >= min_workers, got max {max}, min {min}")
        } else if !(t > 0.0 && t <= 1.0) {
            format!("target_util must be in (0, 1], got {t}")
        } else if self.idle_windows == 0 {
            "idle_windows must be at least 1".to_string()
        } else {
            return Ok(());
        };
        Err(Error::invalid(problem))
    }
}

/// What a job says about itself when it registers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    pub label: String,
    /// Its share of the workers relative to other jobs' (SFQ weight).
    pub weight: f64,
    /// Content keys of its stages: jobs with equal keys form a shared stream group.
    pub stage_keys: Vec<String>,
}

/// A job's heartbeat.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct JobBeat {
    /// Cumulative samples the job received from the service.
    pub samples: u64,
    /// The job's pool had chunks waiting for a free worker slot: it wants more workers.
    pub backlogged: bool,
}

/// What one worker did for one job, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct JobLoad {
    pub chunks: u64,
    pub samples: u64,
    /// Compute seconds spent on the job's chunks.
    pub busy_s: f64,
    /// Seconds the job's chunks waited in the worker's fair queue.
    pub queue_wait_s: f64,
    /// Chunks read from a shared stream instead of computed.
    #[serde(default)]
    pub stream_hits: u64,
}

/// A worker's heartbeat.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerBeat {
    /// Cumulative compute seconds of the worker, all jobs.
    pub busy_s: f64,
    /// Chunks queued now.
    pub queued: usize,
    pub jobs: BTreeMap<JobId, JobLoad>,
    /// The prefix cache's tier on the worker's node: hits, misses, records stored
    /// ([`super::node_cache::NodeCache::report`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_cache: Option<Value>,
}

/// What [`Registry::scale`] decided; the caller carries it out.
#[derive(Debug, Clone, PartialEq)]
pub enum Scale {
    Hold,
    /// Start this many workers.
    Start(usize),
    /// Stop these workers (and [`Registry::remove_worker`] them right away).
    Retire(Vec<String>),
}

#[derive(Debug, Default)]
struct Job {
    info: JobInfo,
    registered: f64,
    last_beat: f64,
    beat: JobBeat,
    /// (time, samples) the current window's rate is counted from; set by the first beat.
    base: Option<(f64, u64)>,
    /// Figures of the last window.
    rate: f64,
    share: f64,
    /// Its chunks waiting in the workers' queues, on average over the last window.
    waiting: f64,
    /// Worker id → leases on it (a job may hold several slots on one worker).
    leases: BTreeMap<String, usize>,
}

#[derive(Debug, Default)]
struct Worker {
    id: String,
    node: String,
    added: f64,
    last_beat: Option<f64>,
    beat: WorkerBeat,
    /// Cumulative busy seconds, overall and per job, when the current window began (or at
    /// the worker's first beat): a new worker is measured from when it first reported.
    base: Option<Baseline>,
    /// CPU-seconds per second over the last window.
    busy_rate: f64,
}

/// The dispatcher's state: jobs, workers, leases, and the scaling policy's memory.
#[derive(Debug, Default)]
pub struct Registry {
    options: RegistryOptions,
    jobs: BTreeMap<JobId, Job>,
    /// The last id given: ids are never reused.
    last_job: JobId,
    /// In the order added.
    workers: Vec<Worker>,
    /// When the current window began (the last [`Registry::scale`]).
    window_start: Option<f64>,
    window_s: f64,
    util: f64,
    busy_rate: f64,
    /// Low-demand windows in a row.
    idle: u32,
    decisions: VecDeque<String>,
}

/// Chunks a job keeps waiting in worker queues, on average, from which it counts as wanting
/// more workers: it sends more than the workers can start, so the workers hold it back.
pub const BACKLOG_CHUNKS: f64 = 0.5;

impl Job {
    /// It said so, or its chunks kept waiting at the workers over the last window.
    fn backlogged(&self) -> bool {
        self.beat.backlogged || self.waiting >= BACKLOG_CHUNKS
    }
}

fn unknown(job: JobId) -> Error {
    Error::invalid(format!("unknown job {job} (expired or never registered)"))
}

impl Registry {
    /// An empty registry; the options are checked.
    pub fn new(options: RegistryOptions) -> Result<Registry> {
        options.validate()?;
        Ok(Registry {
            options,
            ..Default::default()
        })
    }

    /// Adds a job; its lease runs from `now`. Ids start at 1 and are never reused, so a late
    /// call naming an expired job cannot land on a new one.
    pub fn register(&mut self, now: f64, info: JobInfo) -> Result<JobId> {
        positive("a job's weight", info.weight)?;
        self.last_job += 1;
        let id = self.last_job;
        let (registered, last_beat) = (now, now);
        let job = Job {
            info,
            registered,
            last_beat,
            ..Default::default()
        };
        self.jobs.insert(id, job);
        Ok(id)
    }

    /// Renews `job`'s lease. An unknown job errs: the caller tells the job to register again.
    /// A job is expired only by [`Registry::expire`], so a late beat that comes before the
    /// sweep still renews it.
    pub fn heartbeat(&mut self, now: f64, job: JobId, beat: JobBeat) -> Result<()> {
        let j = self.jobs.get_mut(&job).ok_or_else(|| unknown(job))?;
        j.last_beat = now;
        j.beat = beat;
        j.base.get_or_insert((now, beat.samples));
        Ok(())
    }

    /// Drops `job` and its leases (a graceful exit); false if it was not there.
    pub fn unregister(&mut self, job: JobId) -> bool {
        self.jobs.remove(&job).is_some()
    }

    /// Removes the jobs whose last heartbeat (or registration) is more than `lease_s` old and
    /// returns them, so the caller can tell the workers to forget them.
    pub fn expire(&mut self, now: f64) -> Vec<JobId> {
        let lease_s = self.options.lease_s;
        let dead: Vec<JobId> = (self.jobs.iter())
            .filter(|(_, j)| now - j.last_beat > lease_s)
            .map(|(&id, _)| id)
            .collect();
        for id in &dead {
            self.jobs.remove(id);
        }
        dead
    }

    /// Adds a worker. An id already present is replaced (a new process under the old name):
    /// its leases and figures are dropped and it counts as added last.
    pub fn add_worker(&mut self, now: f64, id: &str, node: &str) {
        self.remove_worker(id);
        self.workers.push(Worker {
            id: id.to_string(),
            node: node.to_string(),
            added: now,
            ..Default::default()
        });
    }

    /// Removes a worker (it died or was retired) and every lease on it.
    pub fn remove_worker(&mut self, id: &str) -> bool {
        let Some(i) = self.workers.iter().position(|w| w.id == id) else {
            return false;
        };
        self.workers.remove(i);
        for job in self.jobs.values_mut() {
            job.leases.remove(id);
        }
        true
    }

    /// Records a worker's figures; a beat from a worker already removed is ignored.
    pub fn worker_beat(&mut self, now: f64, id: &str, beat: WorkerBeat) {
        let Some(w) = self.workers.iter_mut().find(|w| w.id == id) else {
            return;
        };
        if w.base.is_none() {
            w.base = Some(busy_of(&beat));
        }
        w.last_beat = Some(now);
        w.beat = beat;
    }

    /// Leases per worker id, over all jobs.
    fn lease_counts(&self) -> BTreeMap<&str, usize> {
        let mut counts = BTreeMap::new();
        for (id, n) in self.jobs.values().flat_map(|j| &j.leases) {
            *counts.entry(id.as_str()).or_default() += n;
        }
        counts
    }

    /// A worker for one of `job`'s pool slots: the one with the fewest leases (ties: the
    /// least busy over the last window, then the first added), so jobs spread over the pool.
    /// Workers in `avoid` (the job's pool found them failing) are skipped unless all are;
    /// then the least leased of all is better than none. None when there are no workers.
    pub fn lease(&mut self, job: JobId, avoid: &[String]) -> Result<Option<String>> {
        if !self.jobs.contains_key(&job) {
            return Err(unknown(job));
        }
        let counts = self.lease_counts();
        let pick = |skip_avoided: bool| {
            (self.workers.iter())
                .filter(|w| !(skip_avoided && avoid.contains(&w.id)))
                .min_by(|a, b| {
                    let n = |w: &Worker| counts.get(w.id.as_str()).copied().unwrap_or(0);
                    n(a).cmp(&n(b)).then(a.busy_rate.total_cmp(&b.busy_rate))
                })
                .map(|w| w.id.clone())
        };
        let chosen = pick(true).or_else(|| pick(false));
        if let (Some(id), Some(j)) = (&chosen, self.jobs.get_mut(&job)) {
            *j.leases.entry(id.clone()).or_default() += 1;
        }
        Ok(chosen)
    }

    /// Gives back one of `job`'s leases on `worker`; nothing if it holds none.
    pub fn release(&mut self, job: JobId, worker: &str) {
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        if let Some(n) = j.leases.get_mut(worker) {
            *n -= 1;
            if *n == 0 {
                j.leases.remove(worker);
            }
        }
    }

    /// Measures the window that ends at `now` and starts the next one; false for the first
    /// call (nothing to measure yet) or a window of no length.
    fn measure(&mut self, now: f64) -> bool {
        let Some(start) = self.window_start else {
            self.rebase(now);
            return false;
        };
        let dt = now - start;
        if dt.is_nan() || dt <= 0.0 {
            return false;
        }
        let (mut total, mut per_job) = (0.0, BTreeMap::<JobId, f64>::new());
        let mut waits = BTreeMap::<JobId, f64>::new();
        for w in &mut self.workers {
            let Some((busy0, jobs0)) = &w.base else {
                w.busy_rate = 0.0;
                continue;
            };
            let d = (w.beat.busy_s - busy0).max(0.0);
            for (job, load) in &w.beat.jobs {
                let (b0, w0) = jobs0.get(job).copied().unwrap_or((0.0, 0.0));
                *per_job.entry(*job).or_default() += (load.busy_s - b0).max(0.0);
                *waits.entry(*job).or_default() += (load.queue_wait_s - w0).max(0.0);
            }
            w.busy_rate = d / dt;
            total += d;
        }
        let cpus = self.workers.len() as f64 * self.options.worker_cpus;
        self.busy_rate = total / dt;
        self.util = if cpus > 0.0 { total / (dt * cpus) } else { 0.0 };
        self.window_s = dt;
        // Over what the workers measured, or over what the jobs did if their figures are
        // ahead (beats are not simultaneous): shares never sum past 1.
        let denom = total.max(per_job.values().sum());
        for (id, j) in &mut self.jobs {
            let busy = per_job.get(id).copied().unwrap_or(0.0);
            j.share = if denom > 0.0 { busy / denom } else { 0.0 };
            j.waiting = waits.get(id).copied().unwrap_or(0.0) / dt;
            let (t0, s0) = j.base.unwrap_or((now, 0));
            let samples = j.beat.samples.saturating_sub(s0) as f64;
            j.rate = if now > t0 { samples / (now - t0) } else { 0.0 };
        }
        self.rebase(now);
        true
    }

    /// Starts a window at `now`: figures so far become the baselines.
    fn rebase(&mut self, now: f64) {
        self.window_start = Some(now);
        for w in self.workers.iter_mut().filter(|w| w.base.is_some()) {
            w.base = Some(busy_of(&w.beat));
        }
        for j in self.jobs.values_mut().filter(|j| j.base.is_some()) {
            j.base = Some((now, j.beat.samples));
        }
    }

    fn decide(&mut self, now: f64, scale: Scale, why: String) -> Scale {
        let what = match &scale {
            Scale::Hold => "hold".to_string(),
            Scale::Start(n) => format!("start {n}"),
            Scale::Retire(ids) => format!("retire {}", ids.join(", ")),
        };
        let line = format!("t={now:.1} {what}: {why}");
        self.decisions.push_back(line);
        if self.decisions.len() > DECISIONS {
            self.decisions.pop_front();
        }
        self.idle = 0;
        scale
    }

    /// The `n` workers to retire first: the least busy over the last window (ties: the most
    /// recently added, whose stages are the least warmed up).
    fn least_busy(&self, n: usize) -> Vec<String> {
        let mut order: Vec<&Worker> = self.workers.iter().rev().collect();
        order.sort_by(|a, b| a.busy_rate.total_cmp(&b.busy_rate)); // stable: newest first
        order.into_iter().take(n).map(|w| w.id.clone()).collect()
    }

    /// Decides the pool's size (`starting`: workers asked for that have not joined yet);
    /// called once per window, after [`Registry::expire`]. It only
    /// decides: the caller starts workers and adds them, and removes retired ones at once
    /// ([`Registry::remove_worker`]) so the next window does not pick them again.
    ///
    /// - Fewer than `min_workers` (or jobs but no worker at all): start what is missing.
    /// - A job backlogged and workers near the target (`u ≥ target − 0.05`): start up to
    ///   `N* = ceil(B / (target · worker_cpus)) + 1` workers, `B` the busy CPU-seconds per
    ///   second — one more than the measured load needs at the target, at least one more
    ///   than now, at most `max_workers`.
    /// - No job backlogged and the load would fit on one worker fewer
    ///   (`u < target · (W−1)/W`), or no jobs, for `idle_windows` windows in a row: retire
    ///   the least busy worker; with no jobs every worker above `min_workers` at once.
    pub fn scale(&mut self, now: f64, starting: usize) -> Scale {
        let measured = self.measure(now);
        let (w, o) = (self.workers.len(), self.options.clone());
        if w + starting < o.min_workers {
            let why = format!(
                "{w} workers (+{starting} starting), min_workers {}",
                o.min_workers
            );
            return self.decide(now, Scale::Start(o.min_workers - w - starting), why);
        }
        // Workers still starting would be counted twice (asked for, not yet measured).
        if !measured || starting > 0 {
            return Scale::Hold;
        }
        if w == 0 {
            return match self.jobs.len() {
                0 => Scale::Hold,
                n => self.decide(now, Scale::Start(1), format!("{n} jobs, no worker")),
            };
        }
        let (u, t) = (self.util, o.target_util);
        let backlogged = self.jobs.values().filter(|j| j.backlogged()).count();
        if backlogged > 0 && u >= t - 0.05 {
            self.idle = 0;
            // Less a hair so that a load of exactly k workers at the target needs k, not k+1.
            let load = self.busy_rate / (t * o.worker_cpus) - 1e-9;
            let need = load.ceil().max(0.0) as usize + 1;
            let goal = o.max_workers.min(need.max(w + 1));
            if goal <= w {
                return Scale::Hold;
            }
            let s = if backlogged == 1 { "" } else { "s" };
            let why = format!("util {u:.2}, {backlogged} backlogged job{s}, need {need} workers");
            return self.decide(now, Scale::Start(goal - w), why);
        }
        let low = backlogged == 0 && (self.jobs.is_empty() || u < t * (w - 1) as f64 / w as f64);
        if !low {
            self.idle = 0;
            return Scale::Hold;
        }
        self.idle = self.idle.saturating_add(1);
        if self.idle < o.idle_windows || w <= o.min_workers {
            return Scale::Hold;
        }
        let windows = o.idle_windows;
        if self.jobs.is_empty() {
            let why = format!("no jobs for {windows} windows");
            return self.decide(now, Scale::Retire(self.least_busy(w - o.min_workers)), why);
        }
        let ids = self.least_busy(1);
        let why = format!(
            "util {u:.2} < {:.2} for {windows} windows, no job backlogged",
            t * (w - 1) as f64 / w as f64
        );
        self.decide(now, Scale::Retire(ids), why)
    }

    /// Everything `sluice service status` shows: jobs, workers, totals, recent decisions.
    /// Rates, utilisation and shares are over the last window measured by [`Registry::scale`].
    pub fn status(&self, now: f64) -> Value {
        let counts = self.lease_counts();
        let jobs: Vec<Value> = (self.jobs.iter())
            .map(|(id, j)| {
                let loads = self.workers.iter().filter_map(|w| w.beat.jobs.get(id));
                let (mut busy, mut wait, mut chunks, mut hits) = (0.0, 0.0, 0, 0);
                for l in loads {
                    (busy, wait) = (busy + l.busy_s, wait + l.queue_wait_s);
                    (chunks, hits) = (chunks + l.chunks, hits + l.stream_hits);
                }
                json!({
                    "id": id, "label": j.info.label, "weight": j.info.weight,
                    "stage_keys": j.info.stage_keys, "age_s": now - j.registered,
                    "last_beat_s": now - j.last_beat, "samples": j.beat.samples,
                    "rate": j.rate, "backlogged": j.backlogged(), "waiting": j.waiting,
                    "leases": j.leases.values().sum::<usize>(), "lease_workers": j.leases,
                    "chunks": chunks, "stream_hits": hits, "busy_s": busy, "queue_wait_s": wait,
                    "share": j.share,
                })
            })
            .collect();
        let cpus = self.options.worker_cpus;
        let workers: Vec<Value> = (self.workers.iter())
            .map(|w| {
                json!({
                    "id": w.id, "node": w.node, "age_s": now - w.added,
                    "last_beat_s": w.last_beat.map(|t| now - t),
                    "leases": counts.get(w.id.as_str()).copied().unwrap_or(0),
                    "busy_s": w.beat.busy_s, "busy_rate": w.busy_rate,
                    "utilization": w.busy_rate / cpus, "queued": w.beat.queued,
                    "node_cache": w.beat.node_cache,
                })
            })
            .collect();
        let totals = json!({
            "jobs": self.jobs.len(), "workers": self.workers.len(),
            "backlogged": self.jobs.values().filter(|j| j.backlogged()).count(),
            "leases": counts.values().sum::<usize>(),
            "rate": self.jobs.values().map(|j| j.rate).sum::<f64>(),
            "busy_rate": self.busy_rate, "utilization": self.util,
            "window_s": self.window_s, "low_windows": self.idle,
        });
        json!({
            "time": now, "options": self.options, "jobs": jobs, "workers": workers,
            "totals": totals, "decisions": self.decisions,
        })
    }
}

/// A worker's cumulative busy seconds, and per job (busy, queue wait) seconds, when a
/// window began.
type Baseline = (f64, BTreeMap<JobId, (f64, f64)>);

/// A beat's cumulative busy seconds, overall and per job: a window's baseline.
fn busy_of(beat: &WorkerBeat) -> Baseline {
    let jobs = (beat.jobs.iter())
        .map(|(&j, l)| (j, (l.busy_s, l.queue_wait_s)))
        .collect();
    (beat.busy_s, jobs)
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
