//! The pool behind the executor's [`Workers`] trait: one chunk per call, re-run on a fresh
//! actor when its actor or reply is lost; and a [`Backend`] that starts such pools.

use std::fmt;
use std::sync::{Arc, Mutex};

use sluice_core::exec::{Backend, Chunk, StageWork, Workers};
use sluice_core::rng::combine;
use sluice_core::Result;

use super::{ActorPool, ActorPoolOptions, ActorRuntime, Failure, Wait};
use crate::stage::RemoteStage;

/// An [`ActorPool`] serving one stage: chunks become request frames for the actors
/// ([`RemoteStage`]), and run as they are on local workers.
pub struct ActorWorkers<R: ActorRuntime> {
    pool: ActorPool<R>,
    stage: RemoteStage,
    work: StageWork,
}

impl<R: ActorRuntime> ActorWorkers<R> {
    /// `stage` and `work` must be the stage the pool's actors were started for.
    pub fn new(pool: ActorPool<R>, stage: RemoteStage, work: StageWork) -> Self {
        ActorWorkers { pool, stage, work }
    }
    pub fn pool(&self) -> &ActorPool<R> {
        &self.pool
    }
}

/// What one attempt at a chunk gave.
enum Attempt<T> {
    /// Ran here.
    Local(Result<Chunk>),
    /// An actor's reply.
    Reply(T),
    /// The actor failed.
    Failed(Failure),
}

impl<R: ActorRuntime> Workers for ActorWorkers<R> {
    fn parallelism(&self) -> usize {
        self.pool.parallelism()
    }

    /// Runs one chunk somewhere and returns its output; a chunk whose actor dies (or whose
    /// reply is lost) runs again on a fresh actor, up to `max_retries` times.
    fn run(&self, chunk: Chunk) -> Result<Chunk> {
        let s = &self.pool.shared;
        let clock = &s.opts.clock;
        let items = chunk.len();
        // The samples are copied only when a retry may need them again on a local slot; the
        // request frame is kept for retries on actors.
        let local_slots = s.opts.local_workers > 0 || s.opts.autoscale.is_some();
        let mut chunk = Some(chunk);
        let mut frame: Option<Vec<u8>> = None;
        let mut attempts = 0;
        // Every job of a sweep cuts the same chunks: their coordinates pick the worker.
        let prefer = chunk.as_ref().and_then(|c| c.first()).map(|it| {
            [it.sub, it.index, items as u64]
                .into_iter()
                .fold(it.epoch, combine)
        });
        loop {
            let lease = s.acquire(prefer)?;
            let t = clock.now();
            let attempt = match &lease.actor {
                _ if !s.runtime.alive() => Err(s.cluster_gone()),
                None => match chunk.take() {
                    Some(c) => Ok(Attempt::Local(self.work.run_here(c))),
                    None => Err(sluice_core::Error::Internal(
                        "a local slot came after the chunk was sent without a copy".into(),
                    )),
                },
                Some(actor) => {
                    let request = match frame.take() {
                        Some(f) => Ok(f),
                        None => {
                            let c = if local_slots {
                                chunk.clone()
                            } else {
                                chunk.take()
                            };
                            match c {
                                Some(c) => self.stage.request(c, None),
                                None => Err(sluice_core::Error::Internal(
                                    "the chunk was already handed on".into(),
                                )),
                            }
                        }
                    };
                    request.and_then(|f| {
                        let got = s.call(actor, &f);
                        frame = Some(f);
                        got.map(|w| match w {
                            Wait::Ready(reply) => Attempt::Reply(reply),
                            Wait::Failed(failure) => Attempt::Failed(failure),
                            Wait::Pending => unreachable!("call() waits until done"),
                        })
                    })
                }
            };
            let busy = clock.now().saturating_sub(t);
            match attempt {
                Err(e) => {
                    s.release(&lease, None);
                    return Err(e);
                }
                Ok(Attempt::Local(out)) => {
                    s.release(&lease, Some((busy, items, (0, 0))));
                    s.window()?;
                    return out;
                }
                Ok(Attempt::Reply(reply)) => {
                    let sent = frame.as_ref().map_or(0, Vec::len);
                    let received = s.runtime.reply_bytes(&reply);
                    s.release(&lease, Some((busy, items, (sent, received))));
                    s.window()?;
                    return s.runtime.decode(&self.stage, reply);
                }
                Ok(Attempt::Failed(failure)) if failure.retryable => {
                    // The actor is gone (killed, crashed, its node lost), or its reply went
                    // with its node's object store before it was fetched: either way the
                    // chunk runs again.
                    attempts += 1;
                    s.count_retry(&failure.cause);
                    s.release(&lease, None);
                    if let Some(e) = s.retry_error(attempts, &failure) {
                        return Err(e);
                    }
                    s.warn(&format!(
                        "a chunk's actor failed ({}); re-running it (attempt {} of {})",
                        failure.cause,
                        attempts + 1,
                        s.opts.max_retries + 1
                    ));
                    s.replace(&lease, &failure.cause)?;
                }
                Ok(Attempt::Failed(failure)) => {
                    s.release(&lease, None);
                    return Err(failure.error);
                }
            }
        }
    }

    fn shutdown(&self) {
        self.pool.shutdown()
    }
}

impl<R: ActorRuntime> Drop for ActorWorkers<R> {
    fn drop(&mut self) {
        self.pool.shutdown();
    }
}

/// Makes a runtime for each stage's pool.
pub type RuntimeFactory<R> = dyn Fn() -> Result<R> + Send + Sync;

/// A backend whose stages run on an [`ActorPool`] each; keeps the pools for their reports.
pub struct ActorBackend<R: ActorRuntime> {
    name: String,
    runtime: Arc<RuntimeFactory<R>>,
    options: ActorPoolOptions,
    pools: Mutex<Vec<ActorPool<R>>>,
}

impl<R: ActorRuntime> ActorBackend<R> {
    /// A backend called `name` (plans place stages on it by that name).
    pub fn new(name: &str, runtime: Arc<RuntimeFactory<R>>, options: ActorPoolOptions) -> Self {
        ActorBackend {
            name: name.to_string(),
            runtime,
            options,
            pools: Mutex::new(Vec::new()),
        }
    }
    /// The pools started so far, oldest first.
    pub fn pools(&self) -> Vec<ActorPool<R>> {
        self.pools.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl<R: ActorRuntime> fmt::Debug for ActorBackend<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActorBackend")
            .field("name", &self.name)
            .field("options", &self.options)
            .finish()
    }
}

impl<R: ActorRuntime> Backend for ActorBackend<R> {
    fn name(&self) -> &str {
        &self.name
    }
    fn start(&self, work: StageWork, workers: usize) -> Result<Box<dyn Workers>> {
        let stage = RemoteStage::new(&work, None)?;
        let runtime = (self.runtime)()?;
        let pool = ActorPool::start(
            runtime,
            stage.init(),
            stage.label(),
            workers,
            self.options.clone(),
        )?;
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        pools.push(pool.clone());
        Ok(Box::new(ActorWorkers::new(pool, stage, work)))
    }
}
