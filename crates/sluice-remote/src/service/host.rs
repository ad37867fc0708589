//! What one service worker runs: the stages of every job attached to it, keyed by content
//! ([`super::key::stage_key`]), and their chunks started in weighted fair order.
//!
//! A worker has `slots` compute slots (its CPUs). Every call to [`ServiceHost::run`] — one
//! per chunk, on the caller's thread (Ray gives each call of a threaded actor its own) — is
//! queued in a [`FairQueue`] charged by the chunk's expected slot time (its items × the
//! job's measured seconds per item), and runs when the queue hands it a free slot. So jobs
//! that keep chunks queued share the slots in the ratio of their weights, a job that pauses
//! gets no credit for it, and no job starves (see [`super::fair`]).
//!
//! Jobs attached with the same stage key share one engine and, when more than one is
//! attached, a [`StreamWindow`]: the first of them to send a chunk computes it, the others
//! read its reply (a sweep's jobs with the same pipeline and seed send the same frames).
//!
//! ```
//! use sluice_remote::service::host::{HostOptions, ServiceHost};
//! let host: ServiceHost<u32, Vec<u8>> = ServiceHost::new(HostOptions::default())?;
//! host.attach(1, 1.0, "k", || Ok(7))?;
//! host.attach(2, 1.0, "k", || unreachable!("the stage is already built"))?;
//! let compute = |stage: &u32, frame: &[u8], _group| Ok((vec![*stage as u8, frame[0]], 2));
//! let a = host.run(1, "k", 1, b"x", compute)?;
//! let b = host.run(2, "k", 1, b"x", |_: &u32, _: &[u8], _| unreachable!("read from the window"))?;
//! assert_eq!((a.as_slice(), b.as_slice()), (&[7, b'x'][..], &[7, b'x'][..]));
//! # Ok::<(), sluice_core::Error>(())
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use serde::Serialize;
use sluice_core::{Error, Result};

use super::fair::{FairQueue, JobId};
use super::key::frame_digest;
use super::window::{StreamWindow, WindowStats};

/// How a worker shares itself.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// Chunks computed at once (the worker's CPUs).
    pub slots: usize,
    /// Bytes of replies each shared stream may hold for its slower jobs.
    pub window_bytes: u64,
    /// The least a chunk is charged per item, in seconds: before a job's first chunk is
    /// measured, and for stages so cheap that timer noise would set their order.
    pub min_item_cost_s: f64,
}

impl Default for HostOptions {
    fn default() -> Self {
        HostOptions {
            slots: 1,
            window_bytes: 256 << 20,
            min_item_cost_s: 1e-4,
        }
    }
}

/// What one job got from this worker (cumulative).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JobReport {
    pub weight: f64,
    /// Chunks answered (computed, or read from a shared stream).
    pub chunks: u64,
    pub samples: u64,
    /// Slot seconds spent on this job's chunks.
    pub busy_s: f64,
    /// Seconds its chunks waited for a slot.
    pub queue_wait_s: f64,
    /// Chunks read from a shared stream instead of computed.
    pub stream_hits: u64,
    /// Chunks queued now.
    pub queued: usize,
}

/// The worker's state, for the dispatcher and `sluice service status`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct HostReport {
    pub slots: usize,
    /// Slot seconds spent computing, all jobs.
    pub busy_s: f64,
    pub running: usize,
    pub queued: usize,
    /// Stages held (one per distinct stage key).
    pub stages: usize,
    pub jobs: BTreeMap<JobId, JobReport>,
    pub stream: WindowStats,
}

struct Stage<R, V> {
    runner: Arc<R>,
    jobs: BTreeSet<JobId>,
    window: Arc<StreamWindow<u128, V>>,
}

#[derive(Default)]
struct Job {
    /// Measured slot seconds per item (moving average); `None` before the first chunk.
    per_item_s: Option<f64>,
    report: JobReport,
}

enum Turn {
    Queued,
    Granted,
    Dropped,
}

struct State<R, V> {
    stages: HashMap<String, Stage<R, V>>,
    jobs: HashMap<JobId, Job>,
    queue: FairQueue<u64>,
    turns: HashMap<u64, Turn>,
    next_ticket: u64,
    running: usize,
    busy_s: f64,
    /// Stream statistics of stages already dropped.
    stream_gone: WindowStats,
}

/// The stages of many jobs on one worker. `R` is a stage's engine, `V` a chunk's reply.
pub struct ServiceHost<R, V> {
    options: HostOptions,
    state: Mutex<State<R, V>>,
    turn: Condvar,
}

impl<R, V> ServiceHost<R, V> {
    /// A host with no stages.
    pub fn new(options: HostOptions) -> Result<Self> {
        if options.slots == 0 {
            return Err(Error::invalid("a service worker needs at least one slot"));
        }
        if !(options.min_item_cost_s.is_finite() && options.min_item_cost_s > 0.0) {
            return Err(Error::invalid(format!(
                "min_item_cost_s must be a positive number, got {}",
                options.min_item_cost_s
            )));
        }
        Ok(ServiceHost {
            options,
            state: Mutex::new(State {
                stages: HashMap::new(),
                jobs: HashMap::new(),
                queue: FairQueue::new(),
                turns: HashMap::new(),
                next_ticket: 0,
                running: 0,
                busy_s: 0.0,
                stream_gone: WindowStats::default(),
            }),
            turn: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State<R, V>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Attaches `job` (at `weight`) to the stage `key`, building it with `build` unless
    /// another job already did. Building runs outside the lock: unpickling a job's functions
    /// does not hold up the others' chunks.
    pub fn attach(
        &self,
        job: JobId,
        weight: f64,
        key: &str,
        build: impl FnOnce() -> Result<R>,
    ) -> Result<()> {
        let mut st = self.lock();
        st.queue.set_weight(job, weight)?;
        st.jobs.entry(job).or_default().report.weight = weight;
        if let Some(stage) = st.stages.get_mut(key) {
            stage.jobs.insert(job);
            return Ok(());
        }
        drop(st);
        let runner = Arc::new(build()?);
        let mut st = self.lock();
        let budget = self.options.window_bytes;
        st.stages
            .entry(key.to_string())
            .or_insert_with(|| Stage {
                runner,
                jobs: BTreeSet::new(),
                window: Arc::new(StreamWindow::new(budget)),
            })
            .jobs
            .insert(job);
        Ok(())
    }

    /// Detaches `job` from `key`; the stage goes with its last job. Whether it was attached.
    pub fn detach(&self, job: JobId, key: &str) -> bool {
        let mut st = self.lock();
        let Some(stage) = st.stages.get_mut(key) else {
            return false;
        };
        let was = stage.jobs.remove(&job);
        if was {
            stage.window.reader_left(job);
        }
        if stage.jobs.is_empty() {
            let gone = st.stages.remove(key).map(|s| s.window.stats());
            if let Some(s) = gone {
                st.stream_gone += s;
            }
        }
        was
    }

    /// Drops `job` (it left or its lease expired): detached from every stage, its queued
    /// chunks answered with an error. How many were queued.
    pub fn forget(&self, job: JobId) -> usize {
        let keys: Vec<String> = {
            let st = self.lock();
            st.stages
                .iter()
                .filter(|(_, s)| s.jobs.contains(&job))
                .map(|(k, _)| k.clone())
                .collect()
        };
        for key in keys {
            self.detach(job, &key);
        }
        let mut st = self.lock();
        let dropped = st.queue.forget(job);
        for ticket in &dropped {
            st.turns.insert(*ticket, Turn::Dropped);
        }
        st.jobs.remove(&job);
        drop(st);
        self.turn.notify_all();
        dropped.len()
    }

    /// The engine of `job`'s stage `key` ([`Error::Resource`] when it is not attached).
    pub fn stage(&self, job: JobId, key: &str) -> Result<Arc<R>> {
        let st = self.lock();
        match st.stages.get(key).filter(|s| s.jobs.contains(&job)) {
            Some(stage) => Ok(stage.runner.clone()),
            None => Err(detached(job, key)),
        }
    }

    /// Runs one chunk of `items` items for `job` on its stage `key`: read from the stage's
    /// shared stream when another job of the group computed it, else computed by `compute`
    /// (the reply and its size in bytes; told the group's size, so a reply several jobs will
    /// read can be made shareable) when the fair queue gives it a slot.
    ///
    /// [`Error::Resource`] when the job is not attached to `key` (any more): the caller
    /// attaches again, or elsewhere, and resends — nothing was computed.
    pub fn run(
        &self,
        job: JobId,
        key: &str,
        items: usize,
        frame: &[u8],
        compute: impl FnOnce(&R, &[u8], usize) -> Result<(V, u64)>,
    ) -> Result<Arc<V>> {
        let (runner, window, group) = {
            let st = self.lock();
            let stage = st.stages.get(key).filter(|s| s.jobs.contains(&job));
            let Some(stage) = stage else {
                return Err(detached(job, key));
            };
            let group: Vec<JobId> = stage.jobs.iter().copied().collect();
            (stage.runner.clone(), stage.window.clone(), group)
        };
        let mut computed = false;
        let fair = || {
            computed = true;
            self.fair_run(job, items, || compute(&runner, frame, group.len()))
        };
        // Through the window even when this job is alone now: what the others computed
        // before they left is still there for it.
        let out = window.get_or_compute(&frame_digest(frame), job, &group, fair)?;
        let mut st = self.lock();
        if let Some(j) = st.jobs.get_mut(&job) {
            j.report.chunks += 1;
            j.report.samples += items as u64;
            j.report.stream_hits += u64::from(!computed);
        }
        Ok(out)
    }

    /// What the fair queue counts for a chunk of `items` at `per_item` seconds each, never
    /// less than the options' floor per item: the charge when it is queued, from the job's
    /// estimate, and the settlement when it has run, from the time it took.
    fn charge(&self, items: usize, per_item: f64) -> f64 {
        items.max(1) as f64 * per_item.max(self.options.min_item_cost_s)
    }

    /// Waits for a slot in fair order, then computes.
    fn fair_run<T>(&self, job: JobId, items: usize, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let queued_at = Instant::now();
        let mut st = self.lock();
        let per_item = st.jobs.get(&job).and_then(|j| j.per_item_s).unwrap_or(0.0);
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        let charged = self.charge(items, per_item);
        st.queue.push(job, charged, ticket)?;
        st.turns.insert(ticket, Turn::Queued);
        loop {
            while st.running < self.options.slots {
                let Some((_, next)) = st.queue.pop() else {
                    break;
                };
                st.turns.insert(next, Turn::Granted);
                st.running += 1;
                self.turn.notify_all();
            }
            match st.turns.get(&ticket) {
                Some(Turn::Granted) => break,
                Some(Turn::Dropped) | None => {
                    st.turns.remove(&ticket);
                    return Err(Error::Resource(format!(
                        "job {job} left the service while its chunk was queued"
                    )));
                }
                Some(Turn::Queued) => {
                    st = self.turn.wait(st).unwrap_or_else(|p| p.into_inner());
                }
            }
        }
        st.turns.remove(&ticket);
        if let Some(j) = st.jobs.get_mut(&job) {
            j.report.queue_wait_s += queued_at.elapsed().as_secs_f64();
        }
        drop(st);
        let slot = Slot {
            host: self,
            job,
            items,
            charged,
            started: Instant::now(),
        };
        let out = f();
        drop(slot);
        out
    }

    /// Where the worker stands.
    pub fn report(&self) -> HostReport {
        let st = self.lock();
        let mut stream = st.stream_gone;
        for s in st.stages.values() {
            stream += s.window.stats();
        }
        let jobs = st
            .jobs
            .iter()
            .map(|(&id, j)| {
                let report = JobReport {
                    queued: st.queue.queued(id),
                    ..j.report.clone()
                };
                (id, report)
            })
            .collect();
        HostReport {
            slots: self.options.slots,
            busy_s: st.busy_s,
            running: st.running,
            queued: st.queue.len(),
            stages: st.stages.len(),
            jobs,
            stream,
        }
    }
}

/// A slot in use: given back (and its time charged to the job) however the chunk ends.
struct Slot<'a, R, V> {
    host: &'a ServiceHost<R, V>,
    job: JobId,
    items: usize,
    /// What the fair queue charged the chunk when it was queued.
    charged: f64,
    started: Instant,
}

impl<R, V> Drop for Slot<'_, R, V> {
    fn drop(&mut self) {
        let spent = self.started.elapsed().as_secs_f64();
        let mut st = self.host.lock();
        st.running -= 1;
        st.busy_s += spent;
        let per_item = spent / self.items.max(1) as f64;
        if let Some(j) = st.jobs.get_mut(&self.job) {
            j.report.busy_s += spent;
            j.per_item_s = Some(match j.per_item_s {
                Some(old) => 0.7 * old + 0.3 * per_item,
                None => per_item,
            });
        }
        // The estimate is a moving average of a noisy clock: settle what this chunk really
        // took, so the shares hold in measured time.
        let took = self.host.charge(self.items, per_item);
        st.queue.settle(self.job, took - self.charged);
        drop(st);
        self.host.turn.notify_all();
    }
}

fn detached(job: JobId, key: &str) -> Error {
    Error::Resource(format!(
        "job {job} has no stage {key} on this worker (detached, or the job's lease expired): \
         attach it again"
    ))
}

#[cfg(test)]
#[path = "host_tests.rs"]
mod tests;
