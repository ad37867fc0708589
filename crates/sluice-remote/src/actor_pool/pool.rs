//! The pool's state and its scheduling decisions (one lock; the runtime's kills and log
//! lines run after it is released).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use sluice_core::exec::autoplacement::{AutoPlacement, PlacementOptions};
use sluice_core::{Error, Result};

use super::report::{round_to, DecisionReport, PlacementReport, PoolReport, SlotReport};
use super::{py_float, ActorPoolOptions, ActorRuntime, Level, Wait};

#[path = "schedule.rs"]
mod schedule;

/// The workers of one stage on actors (and local workers): see the [module](super).
pub struct ActorPool<R: ActorRuntime> {
    pub(super) shared: Arc<Shared<R>>,
}

impl<R: ActorRuntime> Clone for ActorPool<R> {
    fn clone(&self) -> Self {
        ActorPool {
            shared: self.shared.clone(),
        }
    }
}

pub(super) struct Shared<R: ActorRuntime> {
    pub(super) runtime: R,
    init: String,
    pub(super) label: String,
    pub(super) opts: ActorPoolOptions,
    parallelism: usize,
    closed: AtomicBool,
    state: Mutex<State<R>>,
    changed: Condvar,
}

/// One place chunks run: an actor or this process.
struct Slot<R: ActorRuntime> {
    name: String,
    capacity: usize,
    /// `None`: a local worker.
    actor: Option<R::Handle>,
    /// Takes chunks (or finishes those it has, when retiring); false once gone.
    serving: bool,
    retiring: bool,
    /// The actor's readiness call and when it started, until it answered.
    starting: Option<(R::Pending, Duration)>,
    in_flight: usize,
    done: u64,
    busy: Duration,
    sent: u64,
    received: u64,
    /// The rendezvous weight base of the actor's worker ([`ActorRuntime::affinity`]).
    affinity: Option<u64>,
}

impl<R: ActorRuntime> Slot<R> {
    fn is_local(&self) -> bool {
        self.actor.is_none()
    }
    fn takes_work(&self) -> bool {
        self.serving && self.starting.is_none() && !self.retiring && self.in_flight < self.capacity
    }
}

struct State<R: ActorRuntime> {
    /// Every slot ever, in the order they started (the report lists them all).
    slots: Vec<Slot<R>>,
    actor_serial: usize,
    local_serial: usize,
    /// Actors in a row that died while starting.
    start_failures: usize,
    /// Why the last replacement could not even be asked for (the runtime refused to start
    /// one, e.g. the service it leases from is gone): what a chunk left with no worker gets.
    start_error: Option<Error>,
    events: Vec<String>,
    retries: u64,
    retry_causes: BTreeMap<String, u64>,
    chunks: u64,
    samples: u64,
    placement: Option<AutoPlacement>,
    /// The measurement window: its start (from the first reply on) and its samples.
    window_t0: Option<Duration>,
    window_samples: u64,
    /// (local, actors) serving when the pool shut down.
    serving_at_close: (usize, usize),
    /// Done once the lock is released: actors to kill, lines to log.
    kills: Vec<R::Handle>,
    logs: Vec<(Level, String)>,
}

impl<R: ActorRuntime> State<R> {
    /// Workers serving and not retiring: (local, actors).
    fn counts(&self) -> (usize, usize) {
        let serving = self.slots.iter().filter(|s| s.serving && !s.retiring);
        serving.fold((0, 0), |(l, a), s| match s.is_local() {
            true => (l + 1, a),
            false => (l, a + 1),
        })
    }
    fn starting(&self) -> bool {
        self.slots.iter().any(|s| s.serving && s.starting.is_some())
    }
    /// The slot stops serving; an actor is killed.
    fn retire(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        slot.serving = false;
        slot.starting = None;
        if let Some(actor) = &slot.actor {
            self.kills.push(actor.clone());
        }
    }
}

/// A slot taken for one chunk.
pub(super) struct Lease<H> {
    index: usize,
    /// `None`: run it here.
    pub(super) actor: Option<H>,
}

impl<R: ActorRuntime> ActorPool<R> {
    /// Starts `workers` actors (at least one) and `opts.local_workers` local workers for the
    /// stage `init` (named `label`), and waits for the actors to be ready: an actor that
    /// cannot build the stage, or that the cluster cannot place within
    /// `opts.actor_start_timeout`, fails here, before any data moves.
    pub fn start(
        runtime: R,
        init: &str,
        label: &str,
        workers: usize,
        opts: ActorPoolOptions,
    ) -> Result<ActorPool<R>> {
        let n = workers.max(1);
        let per = opts.in_flight_per_actor.max(1);
        let (mut max_local, mut max_actors) = (opts.local_workers, n);
        let placement = opts.autoscale.as_ref().map(|a| {
            let cores = a
                .max_local_workers
                .unwrap_or_else(sluice_core::cores::cores);
            max_local = max_local.max(cores);
            max_actors = n.max(a.max_actors.unwrap_or(n));
            let options = PlacementOptions {
                min_local: 0,
                max_local: max_local as i64,
                min_remote: a.min_actors as i64,
                max_remote: max_actors as i64,
                local_cpu_price: a.local_cpu_price,
                remote_cpu_price: a.remote_cpu_price,
                actor_cpus: if opts.actor_cpus > 0.0 {
                    opts.actor_cpus
                } else {
                    1.0
                },
                target: a.target,
                slack: a.slack,
                ..PlacementOptions::DEFAULT
            };
            AutoPlacement::new(opts.local_workers as i64, n as i64, options)
        });
        let pool = ActorPool {
            shared: Arc::new(Shared {
                runtime,
                init: init.to_string(),
                label: label.to_string(),
                // The executor keeps this many chunks in flight: room for every worker the
                // placement may add (threads beyond the serving slots wait in `acquire`).
                parallelism: max_local + max_actors * per,
                opts,
                closed: AtomicBool::new(false),
                state: Mutex::new(State {
                    slots: Vec::new(),
                    actor_serial: 0,
                    local_serial: 0,
                    start_failures: 0,
                    start_error: None,
                    events: Vec::new(),
                    retries: 0,
                    retry_causes: BTreeMap::new(),
                    chunks: 0,
                    samples: 0,
                    placement,
                    window_t0: None,
                    window_samples: 0,
                    serving_at_close: (0, 0),
                    kills: Vec::new(),
                    logs: Vec::new(),
                }),
                changed: Condvar::new(),
            }),
        };
        let s = &pool.shared;
        let started = {
            let mut st = s.lock();
            let started = (0..n)
                .map(|_| s.new_actor(&mut st))
                .collect::<Result<Vec<_>>>();
            for _ in 0..s.opts.local_workers {
                s.new_local(&mut st);
            }
            s.unlock(st);
            started
        };
        if let Err(e) = started.and_then(|actors| s.await_ready(&actors)) {
            s.shutdown();
            return Err(e);
        }
        let local = s.opts.local_workers;
        s.log_now(
            Level::Info,
            &format!("start: {n} actors x {per} in flight, {local} local workers"),
        );
        Ok(pool)
    }

    /// The stage's name.
    pub fn label(&self) -> &str {
        &self.shared.label
    }
    /// Chunks the executor should keep in flight.
    pub fn parallelism(&self) -> usize {
        self.shared.parallelism.max(1)
    }
    /// The runtime the pool calls.
    pub fn runtime(&self) -> &R {
        &self.shared.runtime
    }
    /// The live actors (not those retiring): tests kill one to check fault tolerance.
    pub fn actor_handles(&self) -> Vec<R::Handle> {
        let st = self.shared.lock();
        let serving = st.slots.iter().filter(|s| s.serving && !s.retiring);
        serving.filter_map(|s| s.actor.clone()).collect()
    }
    /// Kills the actors and ends every wait (called when the stage ends; again is a no-op).
    pub fn shutdown(&self) {
        self.shared.shutdown()
    }
    /// Per-slot chunks, busy time and bytes, retries and their causes, the placement and
    /// its decisions, and the events.
    pub fn report(&self) -> PoolReport {
        let st = self.shared.lock();
        let slots: Vec<SlotReport> = st
            .slots
            .iter()
            .map(|s| SlotReport {
                name: s.name.clone(),
                local: s.is_local(),
                chunks: s.done,
                busy_s: round_to(s.busy.as_secs_f64(), 3),
                sent_bytes: s.sent,
                received_bytes: s.received,
            })
            .collect();
        // Workers serving now, or when the stage ended.
        let (local_workers, remote_actors) = match self.shared.closed.load(SeqCst) {
            true => st.serving_at_close,
            false => st.counts(),
        };
        let p = st.placement.as_ref();
        PoolReport {
            stage: self.shared.label.clone(),
            chunks: st.chunks,
            samples: st.samples,
            retries: st.retries,
            retry_causes: st.retry_causes.clone(),
            sent_bytes: slots.iter().map(|s| s.sent_bytes).sum(),
            received_bytes: slots.iter().map(|s| s.received_bytes).sum(),
            placement: PlacementReport {
                local_workers,
                remote_actors,
                state: p.map(|p| p.state().as_str().to_string()),
                cost_per_hour: p.map(|p| round_to(p.cost_per_hour(p.local(), p.remote()), 4)),
            },
            decisions: p.map_or_else(Vec::new, |p| {
                p.decisions().iter().map(DecisionReport::from).collect()
            }),
            slots,
            events: st.events.clone(),
        }
    }
}

impl<R: ActorRuntime> Shared<R> {
    fn lock(&self) -> MutexGuard<'_, State<R>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Releases the lock, then kills and logs what the state asked for.
    fn unlock(&self, mut st: MutexGuard<'_, State<R>>) {
        let kills = std::mem::take(&mut st.kills);
        let logs = std::mem::take(&mut st.logs);
        drop(st);
        for actor in &kills {
            self.runtime.kill(actor);
        }
        for (level, line) in logs {
            self.runtime.log(level, &line);
        }
    }

    pub(super) fn closed(&self) -> bool {
        self.closed.load(SeqCst)
    }

    fn record(&self, st: &mut State<R>, level: Level, msg: &str) {
        let stamp = self.opts.clock.stamp();
        st.events.push(format!("{stamp} {}: {msg}", self.label));
        st.logs
            .push((level, format!("ray stage {}: {msg}", self.label)));
    }

    fn log_now(&self, level: Level, msg: &str) {
        let mut st = self.lock();
        self.record(&mut st, level, msg);
        self.unlock(st);
    }

    pub(super) fn error(&self, what: &str) -> Error {
        Error::Resource(format!("stage {}: {what}", self.label))
    }
    pub(super) fn shut_down(&self) -> Error {
        self.error("the Ray pool is shut down")
    }
    pub(super) fn cluster_gone(&self) -> Error {
        self.error("the Ray cluster was shut down while the pipeline ran")
    }

    /// Starts an actor; it serves once ready.
    fn new_actor(&self, st: &mut State<R>) -> Result<usize> {
        // A pipeline outliving its cluster must fail instead of starting another.
        if !self.runtime.alive() {
            return Err(self.cluster_gone());
        }
        let (actor, ready) = self.runtime.start(&self.init)?;
        let affinity =
            (self.runtime.affinity(&actor)).map(|name| crate::service::key::name_hash(&name));
        st.actor_serial += 1;
        st.slots.push(Slot {
            name: format!("actor-{}", st.actor_serial),
            capacity: self.opts.in_flight_per_actor.max(1),
            actor: Some(actor),
            serving: true,
            retiring: false,
            starting: Some((ready, self.opts.clock.now())),
            in_flight: 0,
            done: 0,
            busy: Duration::ZERO,
            sent: 0,
            received: 0,
            affinity,
        });
        Ok(st.slots.len() - 1)
    }

    fn new_local(&self, st: &mut State<R>) -> usize {
        st.local_serial += 1;
        st.slots.push(Slot {
            name: format!("local-{}", st.local_serial),
            capacity: 1,
            actor: None,
            serving: true,
            retiring: false,
            starting: None,
            in_flight: 0,
            done: 0,
            busy: Duration::ZERO,
            sent: 0,
            received: 0,
            affinity: None,
        });
        st.slots.len() - 1
    }

    /// Waits for the first actors. An actor Ray cannot place (too few free CPUs) would leave
    /// its chunks waiting for ever: fail clearly instead. Building the stage in each actor also
    /// surfaces errors (a function that does not unpickle there) before any data moves.
    fn await_ready(&self, actors: &[usize]) -> Result<()> {
        let mut waiting: Vec<(usize, R::Pending)> = {
            let mut st = self.lock();
            let taken = actors.iter().filter_map(|&i| {
                let (pending, _) = st.slots[i].starting.take()?;
                Some((i, pending))
            });
            taken.collect()
        };
        let total = waiting.len();
        let timeout = self.opts.actor_start_timeout;
        let deadline = self.opts.clock.now() + timeout;
        while !waiting.is_empty() {
            let now = self.opts.clock.now();
            if now >= deadline {
                let free = match self.runtime.free_cpus() {
                    Some(free) => format!("; the cluster has {free} CPU free"),
                    None => String::new(),
                };
                return Err(self.error(&format!(
                    "only {} of {total} Ray actors started within {:.0} s (each asks for {} \
                     CPU{free}). Lower num_actors or actor_cpus.",
                    total - waiting.len(),
                    timeout.as_secs_f64(),
                    py_float(self.opts.actor_cpus),
                )));
            }
            let step = (deadline - now).min(self.opts.wait_step / 10);
            let mut still = Vec::with_capacity(waiting.len());
            for (i, mut pending) in waiting {
                match self.runtime.wait(&mut pending, step)? {
                    Wait::Ready(_) => {}
                    Wait::Pending => still.push((i, pending)),
                    Wait::Failed(f) if f.retryable => {
                        let why =
                            format!("the Ray actors could not build the stage: {}", f.message);
                        return Err(self.error(&why));
                    }
                    Wait::Failed(f) => return Err(f.error),
                }
            }
            waiting = still;
        }
        Ok(())
    }
}

impl<R: ActorRuntime> Drop for Shared<R> {
    fn drop(&mut self) {
        self.shutdown();
    }
}
