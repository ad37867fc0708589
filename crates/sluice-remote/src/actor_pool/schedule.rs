//! The scheduling decisions: which slot takes a chunk, actors that start (or do not),
//! replacements, retiring, the placement's windows, waiting for replies, shutting down.

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use sluice_core::rng::combine;
use sluice_core::{Error, Result};

use super::{Lease, Shared, Slot, State};
use crate::actor_pool::{ActorRuntime, Failure, Level, Wait};

impl<R: ActorRuntime> Shared<R> {
    /// Marks started actors ready; drops those that fail or take too long to start.
    fn poll_starting(&self, st: &mut State<R>) -> Result<()> {
        let starting: Vec<usize> = (0..st.slots.len())
            .filter(|&i| st.slots[i].serving && st.slots[i].starting.is_some())
            .collect();
        if starting.is_empty() || !self.runtime.alive() {
            return Ok(());
        }
        let timeout = self.opts.actor_start_timeout;
        for i in starting {
            let Some((pending, since)) = st.slots[i].starting.as_mut() else {
                continue;
            };
            let since = *since;
            let (why, died) = match self.runtime.wait(pending, Duration::ZERO) {
                Ok(Wait::Ready(_)) => {
                    st.slots[i].starting = None;
                    st.start_failures = 0;
                    continue;
                }
                Ok(Wait::Failed(f)) => (format!("could not start ({})", f.cause), f.retryable),
                Err(e) => (format!("could not start ({e})"), false),
                Ok(Wait::Pending) if self.opts.clock.now().saturating_sub(since) > timeout => {
                    let secs = timeout.as_secs_f64();
                    (format!("did not start within {secs:.0} s"), false)
                }
                Ok(Wait::Pending) => continue,
            };
            st.retire(i);
            let name = st.slots[i].name.clone();
            // An actor that died while starting was most likely placed on a node that was
            // going down (Ray had not noticed yet): start another, a bounded number of times.
            // One that cannot be placed at all (timeout) is not retried.
            let bound = self.opts.max_retries.max(1);
            if died && !self.closed() && st.start_failures < bound {
                st.start_failures += 1;
                let fresh = self.new_actor(st)?;
                let fresh = st.slots[fresh].name.clone();
                self.record(
                    st,
                    Level::Warning,
                    &format!("{name} {why}; replaced by {fresh}"),
                );
            } else {
                self.record(st, Level::Warning, &format!("{name} {why}; dropped"));
            }
        }
        Ok(())
    }

    /// A slot for one chunk: the least loaded relative to its capacity, local first on ties
    /// (no transfer); waits while all are busy or starting. With `prefer` (the chunk's key)
    /// and actors that name their workers, the actor whose name ranks first for the key
    /// (rendezvous hashing) — waiting for it when it is busy, unless a local slot is free.
    pub(in crate::actor_pool) fn acquire(&self, prefer: Option<u64>) -> Result<Lease<R::Handle>> {
        let mut st = self.lock();
        loop {
            match self.try_acquire(&mut st, prefer) {
                Ok(None) => {}
                done => {
                    self.unlock(st);
                    return done.map(|lease| lease.expect("a lease"));
                }
            }
            if !st.kills.is_empty() || !st.logs.is_empty() {
                self.unlock(st);
                st = self.lock();
                continue;
            }
            let step = match st.starting() {
                true => self.opts.idle_step / 10,
                false => self.opts.idle_step,
            };
            st = match self.changed.wait_timeout(st, step) {
                Ok((st, _)) => st,
                Err(p) => p.into_inner().0,
            };
        }
    }

    fn try_acquire(
        &self,
        st: &mut State<R>,
        prefer: Option<u64>,
    ) -> Result<Option<Lease<R::Handle>>> {
        if self.closed() {
            return Err(self.shut_down());
        }
        self.poll_starting(st)?;
        if !st.slots.iter().any(|s| s.serving) {
            // Every actor died and none of their replacements could start: waiting would
            // never end. If the runtime said why it could not start one, that is the cause.
            if let Some(e) = &st.start_error {
                return Err(e.clone());
            }
            let last = st.events.last().cloned().unwrap_or_default();
            return Err(self.error(&format!(
                "no worker left to run chunks on (every actor was lost and none could be \
                 started again; last event: {last})"
            )));
        }
        let ranked = prefer.and_then(|key| {
            (st.slots.iter().enumerate())
                .filter(|(_, s)| s.serving && s.starting.is_none() && !s.retiring)
                .filter_map(|(i, s)| Some((i, combine(key, s.affinity?))))
                .max_by_key(|&(_, rank)| rank)
                .map(|(i, _)| i)
        });
        let local = || (st.slots.iter()).position(|s| s.is_local() && s.takes_work());
        let best = match ranked {
            Some(i) if st.slots[i].takes_work() => Some(i),
            Some(_) => local(),
            None => (st.slots.iter().enumerate())
                .filter(|(_, s)| s.takes_work())
                .min_by(|(_, a), (_, b)| {
                    let load_a = a.in_flight as u128 * b.capacity as u128;
                    let load_b = b.in_flight as u128 * a.capacity as u128;
                    load_a.cmp(&load_b).then(b.is_local().cmp(&a.is_local()))
                })
                .map(|(i, _)| i),
        };
        Ok(best.map(|index| {
            let slot = &mut st.slots[index];
            slot.in_flight += 1;
            Lease {
                index,
                actor: slot.actor.clone(),
            }
        }))
    }

    /// Gives the slot back; `ok`: its chunk came back after `busy`, with `items` samples
    /// and `moved` bytes (sent, received).
    pub(in crate::actor_pool) fn release(
        &self,
        lease: &Lease<R::Handle>,
        ok: Option<(Duration, usize, (usize, usize))>,
    ) {
        let mut st = self.lock();
        let slot = &mut st.slots[lease.index];
        slot.in_flight -= 1;
        if let Some((busy, items, (sent, received))) = ok {
            slot.done += 1;
            slot.busy += busy;
            slot.sent += sent as u64;
            slot.received += received as u64;
            st.chunks += 1;
            st.samples += items as u64;
            st.window_samples += items as u64;
        }
        let slot = &st.slots[lease.index];
        if slot.retiring && slot.in_flight == 0 && slot.serving {
            st.retire(lease.index);
        }
        self.changed.notify_all();
        self.unlock(st);
    }

    /// Counts a chunk that runs again because of `cause`.
    pub(in crate::actor_pool) fn count_retry(&self, cause: &str) {
        let mut st = self.lock();
        st.retries += 1;
        *st.retry_causes.entry(cause.to_string()).or_default() += 1;
    }

    /// The lease's actor was lost: a fresh one takes its place (once, whichever of its
    /// chunks noticed first).
    pub(in crate::actor_pool) fn replace(&self, lease: &Lease<R::Handle>, why: &str) -> Result<()> {
        let mut st = self.lock();
        let mut res = Ok(String::new());
        if st.slots[lease.index].serving {
            st.retire(lease.index);
            if !self.closed() && self.runtime.alive() {
                res = self.new_actor(&mut st).map(|fresh| {
                    let (old, fresh) = (&st.slots[lease.index].name, &st.slots[fresh].name);
                    format!("{old} lost ({why}); replaced by {fresh}")
                });
            }
        }
        if let Err(e) = &res {
            st.start_error = Some(e.clone());
        }
        let res = res.map(|line| {
            if !line.is_empty() {
                self.record(&mut st, Level::Warning, &line);
            }
        });
        self.changed.notify_all();
        self.unlock(st);
        res
    }

    /// At the end of a measurement window, asks the placement what to change, and does it.
    pub(in crate::actor_pool) fn window(&self) -> Result<()> {
        let Some(auto) = &self.opts.autoscale else {
            return Ok(());
        };
        let mut st = self.lock();
        let now = self.opts.clock.now();
        // A window counts only once every worker is serving: an actor's start-up would
        // read as a slowdown of the placement that added it.
        let Some(t0) = st.window_t0.filter(|_| !st.starting()) else {
            st.window_t0 = Some(now);
            st.window_samples = 0;
            return Ok(());
        };
        let elapsed = now.saturating_sub(t0);
        if elapsed < auto.window || elapsed.is_zero() {
            return Ok(());
        }
        let rate = st.window_samples as f64 / elapsed.as_secs_f64();
        st.window_t0 = Some(now);
        st.window_samples = 0;
        let Some(d) = st.placement.as_mut().and_then(|p| p.observe(rate).cloned()) else {
            return Ok(());
        };
        let res = self.apply(&mut st, d.local, d.remote);
        let line = format!(
            "[{}] {:+} local {:+} actors -> {} local + {} actors, ${:.3}/h: {}",
            d.state, d.local, d.remote, d.local_workers, d.remote_actors, d.cost_per_hour, d.reason
        );
        self.record(&mut st, Level::Info, &line);
        self.changed.notify_all();
        self.unlock(st);
        res
    }

    /// Applies a change by hand (what a decision does).
    #[cfg(test)]
    pub(in crate::actor_pool) fn change(&self, local: i64, remote: i64) -> Result<()> {
        let mut st = self.lock();
        let res = self.apply(&mut st, local, remote);
        self.changed.notify_all();
        self.unlock(st);
        res
    }

    fn apply(&self, st: &mut State<R>, local: i64, remote: i64) -> Result<()> {
        for _ in 0..remote.max(0) {
            self.new_actor(st)?;
        }
        for _ in 0..(-remote).max(0) {
            retire_one(st, |s| !s.is_local());
        }
        for _ in 0..local.max(0) {
            self.new_local(st);
        }
        for _ in 0..(-local).max(0) {
            retire_one(st, |s| s.is_local());
        }
        Ok(())
    }

    pub(in crate::actor_pool) fn shutdown(&self) {
        let mut st = self.lock();
        if self.closed.swap(true, SeqCst) {
            return;
        }
        st.serving_at_close = st.counts();
        for i in 0..st.slots.len() {
            if st.slots[i].serving {
                st.retire(i);
            }
        }
        self.record(&mut st, Level::Info, "shutdown");
        self.changed.notify_all();
        self.unlock(st);
    }

    /// Runs `frame` on `actor` and waits for its reply in short steps, checking between
    /// them that the pool and the cluster are still there. Never [`Wait::Pending`].
    pub(in crate::actor_pool) fn call(
        &self,
        actor: &R::Handle,
        frame: &[u8],
    ) -> Result<Wait<R::Reply>> {
        let mut pending = self.runtime.submit(actor, frame)?;
        loop {
            match self.runtime.wait(&mut pending, self.opts.wait_step)? {
                Wait::Pending => {}
                done => return Ok(done),
            }
            if !self.runtime.alive() {
                return Err(self.cluster_gone());
            }
            if self.closed() {
                self.runtime.cancel(pending);
                return Err(self.shut_down());
            }
        }
    }

    /// Whether a retry of a chunk lost with `failure` is still allowed after `attempts`.
    pub(in crate::actor_pool) fn retry_error(
        &self,
        attempts: usize,
        failure: &Failure,
    ) -> Option<Error> {
        if self.closed() {
            return Some(self.shut_down());
        }
        (attempts > self.opts.max_retries).then(|| {
            self.error(&format!(
                "a chunk failed on {attempts} actors in a row (last: {}: {})",
                failure.cause, failure.message
            ))
        })
    }

    pub(in crate::actor_pool) fn warn(&self, msg: &str) {
        self.runtime
            .log(Level::Warning, &format!("ray stage {}: {msg}", self.label));
    }
}

/// The least busy slot matching `which` stops taking work and goes once its chunks are back.
fn retire_one<R: ActorRuntime>(st: &mut State<R>, which: impl Fn(&Slot<R>) -> bool) {
    let victim = (0..st.slots.len())
        .filter(|&i| st.slots[i].serving && !st.slots[i].retiring && which(&st.slots[i]))
        .min_by_key(|&i| st.slots[i].in_flight);
    if let Some(i) = victim {
        st.slots[i].retiring = true;
        if st.slots[i].in_flight == 0 {
            st.retire(i);
        }
    }
}
