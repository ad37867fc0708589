//! The `ray` backend's scheduling: a stage served by remote actors (and optionally by local
//! workers next to them), generic over the runtime that hosts the actors.
//!
//! [`ActorPool`] owns every decision: the slots (actors with `in_flight_per_actor` chunks
//! each, local workers with one), the least-loaded choice (relative to capacity; local first on
//! ties, since it moves no bytes), waiting for actors to start (a clear error naming the free
//! CPUs when they do not within `actor_start_timeout`), bounded re-runs of a chunk whose actor
//! or reply was lost (each on a fresh actor), actors that die while starting (replaced a
//! bounded number of times in a row), retiring workers once their chunks are back, the
//! measurement windows that feed Pecan's [`AutoPlacement`](sluice_core::exec::autoplacement),
//! and the report (`report()` of `it.stats()["remote"]`). [`ActorWorkers`] is the pool behind
//! the executor's [`Workers`](sluice_core::exec::Workers) trait, like the process pool.
//!
//! An [`ActorRuntime`] only makes the calls: start an actor from the stage's init message,
//! submit a request frame, wait a bounded time for a reply (ready, still pending, or failed —
//! retryable when the actor or its reply was lost), kill, and say whether the cluster is
//! still there. The Python bindings implement it over Ray (`sluice-py/src/ray_pool.rs` and
//! the shim in `python/sluice/ray_backend.py`); the tests here over threads. Local workers
//! run the stage in this process ([`StageWork::run_here`](sluice_core::exec::StageWork),
//! what a thread-pool worker does), so no runtime is involved.
//!
//! Time comes from a [`Clock`] (windows, busy time, start deadlines, event stamps), so tests
//! drive it; waits are short real-time steps, so a shut-down pool or a vanished cluster is
//! noticed within one step.

mod pool;
mod report;
#[cfg(test)]
mod tests;
mod workers;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluice_core::exec::autoplacement::PlacementOptions;
use sluice_core::exec::Chunk;
use sluice_core::{Error, Result};

use crate::stage::RemoteStage;

pub use pool::ActorPool;
pub use report::{DecisionReport, PlacementReport, PoolReport, SlotReport};
pub use workers::{ActorBackend, ActorWorkers};

/// What waiting on a pending call found.
#[derive(Debug)]
pub enum Wait<T> {
    /// The reply.
    Ready(T),
    /// Not yet (the timeout passed).
    Pending,
    /// The call failed.
    Failed(Failure),
}

/// A failed call: the actor died, its node went, its reply was lost, or something else.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The actor or its reply was lost: another actor can run the chunk again (Ray's
    /// `RayActorError`, `ObjectLostError`, `NodeDiedError` and their kinds).
    pub retryable: bool,
    /// What failed, briefly (the exception's type name): counted in `retry_causes`.
    pub cause: String,
    /// What it said.
    pub message: String,
    /// The error to raise when the chunk is not run again.
    pub error: Error,
}

/// How important a message is (the `sluice` logger's levels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warning,
}

/// The calls an [`ActorPool`] makes to whatever hosts its actors (Ray).
pub trait ActorRuntime: Send + Sync + 'static {
    /// An actor.
    type Handle: Clone + Send + Sync + 'static;
    /// A call in flight.
    type Pending: Send + 'static;
    /// A reply to a request frame.
    type Reply: Send + 'static;

    /// Starts an actor that builds the stage from `init` ([`RemoteStage::init`]); the pending
    /// call answers once it is ready to take chunks (or fails if it could not start).
    fn start(&self, init: &str) -> Result<(Self::Handle, Self::Pending)>;
    /// Sends one request frame to `actor`.
    fn submit(&self, actor: &Self::Handle, frame: &[u8]) -> Result<Self::Pending>;
    /// Waits up to `timeout` for `pending` (which stays usable while [`Wait::Pending`]). An
    /// `Err` is a failure of the runtime itself, raised as it is.
    fn wait(&self, pending: &mut Self::Pending, timeout: Duration) -> Result<Wait<Self::Reply>>;
    /// Gives up a call nobody waits for any more.
    fn cancel(&self, pending: Self::Pending) {
        drop(pending);
    }
    /// Stops `actor` (errors ignored: it may be gone already).
    fn kill(&self, actor: &Self::Handle);
    /// A name for the worker behind `actor` that other jobs' pools see too (a shared
    /// service's worker id), or `None`. When the pool's actors have one, every chunk waits
    /// for the actor its coordinates hash to (rendezvous over these names), so the jobs of a
    /// sweep send each chunk to the same worker, which computes it once for all of them.
    fn affinity(&self, actor: &Self::Handle) -> Option<String> {
        let _ = actor;
        None
    }
    /// Whether the cluster is still there (a pipeline outliving it must fail, not hang).
    fn alive(&self) -> bool {
        true
    }
    /// CPUs the cluster has free, for the message when actors do not start.
    fn free_cpus(&self) -> Option<f64> {
        None
    }
    /// Bytes a reply carries (for the report).
    fn reply_bytes(&self, reply: &Self::Reply) -> usize;
    /// The chunk (or the stage's error) in a reply.
    fn decode(&self, stage: &RemoteStage, reply: Self::Reply) -> Result<Chunk>;
    /// Passes a message on to the user's log.
    fn log(&self, level: Level, message: &str) {
        let _ = (level, message);
    }
}

/// Where the pool's time comes from.
pub trait Clock: Send + Sync {
    /// Monotonic time since some fixed point.
    fn now(&self) -> Duration;
    /// The wall-clock time of day for event lines (`HH:MM:SS`).
    fn stamp(&self) -> String;
}

/// The system's clocks: [`Instant`] and the local time of day.
#[derive(Debug)]
pub struct SystemClock(Instant);

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock(Instant::now())
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.0.elapsed()
    }
    fn stamp(&self) -> String {
        local_time_of_day()
    }
}

/// `HH:MM:SS` in the local time zone (UTC if the system cannot say).
fn local_time_of_day() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let t = secs as libc::time_t;
    // SAFETY: an all-zero `tm` is a valid value; `localtime_r` only writes into it.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call.
    if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
        let day = secs % 86_400;
        return format!("{:02}:{:02}:{:02}", day / 3600, day / 60 % 60, day % 60);
    }
    format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
}

/// AutoPlacement's bounds and prices, and its measurement window.
#[derive(Debug, Clone, PartialEq)]
pub struct Autoscale {
    /// One decision per window.
    pub window: Duration,
    pub min_actors: usize,
    /// Default: the starting actors.
    pub max_actors: Option<usize>,
    /// Default: this machine's cores.
    pub max_local_workers: Option<usize>,
    pub local_cpu_price: f64,
    pub remote_cpu_price: f64,
    /// Samples/s the trainer needs.
    pub target: Option<f64>,
    pub slack: f64,
}

impl Default for Autoscale {
    fn default() -> Self {
        let d = PlacementOptions::DEFAULT;
        Autoscale {
            window: Duration::from_secs(2),
            min_actors: 1,
            max_actors: None,
            max_local_workers: None,
            local_cpu_price: d.local_cpu_price,
            remote_cpu_price: d.remote_cpu_price,
            target: d.target,
            slack: d.slack,
        }
    }
}

/// How an [`ActorPool`] runs (a `sluice.Context`'s Ray options).
#[derive(Clone)]
pub struct ActorPoolOptions {
    /// Chunks queued per actor so transfers overlap compute.
    pub in_flight_per_actor: usize,
    /// Engines in this process serving the stage next to the actors.
    pub local_workers: usize,
    /// Re-runs of a chunk whose actor or reply was lost before the run fails; also
    /// replacements in a row of actors that die while starting.
    pub max_retries: usize,
    /// How long actors may take to start.
    pub actor_start_timeout: Duration,
    /// CPUs each actor reserves (billed by the placement, named in errors).
    pub actor_cpus: f64,
    /// AutoPlacement, if any.
    pub autoscale: Option<Autoscale>,
    /// How long one wait for a reply lasts before the pool checks it is still running.
    pub wait_step: Duration,
    /// How long a chunk waits for a free slot before looking again (while actors start:
    /// a tenth of it).
    pub idle_step: Duration,
    pub clock: Arc<dyn Clock>,
}

impl Default for ActorPoolOptions {
    fn default() -> Self {
        ActorPoolOptions {
            in_flight_per_actor: 2,
            local_workers: 0,
            max_retries: 3,
            actor_start_timeout: Duration::from_secs(60),
            actor_cpus: 1.0,
            autoscale: None,
            wait_step: Duration::from_millis(500),
            idle_step: Duration::from_millis(500),
            clock: Arc::new(SystemClock::default()),
        }
    }
}

impl fmt::Debug for ActorPoolOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActorPoolOptions")
            .field("in_flight_per_actor", &self.in_flight_per_actor)
            .field("local_workers", &self.local_workers)
            .field("max_retries", &self.max_retries)
            .field("actor_start_timeout", &self.actor_start_timeout)
            .field("actor_cpus", &self.actor_cpus)
            .field("autoscale", &self.autoscale)
            .finish()
    }
}

/// A float as Python's `str()` writes it (`1.0`, `0.5`): the errors read as they did.
fn py_float(x: f64) -> String {
    if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e16 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}
