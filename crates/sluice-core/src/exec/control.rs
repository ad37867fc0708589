//! The threads of an execution: spawning them, the cancel flag they check, and waiting for
//! them to exit (also after the execution is gone, through [`Threads`]).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::thread;
use std::time::Duration;

use super::backend::Workers;
use crate::error::{Error, Result};

thread_local! {
    /// The execution whose thread this is (set for threads it spawns).
    static CURRENT: std::cell::RefCell<Option<Arc<Control>>> = const { std::cell::RefCell::new(None) };
}

/// Whether the execution that spawned the calling thread has been stopped (closed, dropped,
/// failed or interrupted); false on threads it did not spawn. Ops that run long loops over a
/// chunk (Python UDFs) check it between samples, so a stopped run's workers finish the call
/// in progress and exit instead of working through their whole chunk.
pub fn cancelled() -> bool {
    CURRENT.with(|c| c.borrow().as_ref().is_some_and(|c| c.cancelled()))
}

/// Shared control block: the cancel flag, the pools to tell when it is set, and a count of
/// live threads (to wait for exit).
#[derive(Default)]
pub(super) struct Control {
    pub(super) cancel: AtomicBool,
    pools: Mutex<Vec<Weak<dyn Workers>>>,
    live: Mutex<usize>,
    exited: Condvar,
    /// How the consumer waits for outputs (what a memory cap watches for progress).
    pub(super) wait: super::memory::ConsumerWait,
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("cancel", &self.cancel)
            .field("live", &self.live)
            .finish()
    }
}

impl Control {
    pub(super) fn cancelled(&self) -> bool {
        self.cancel.load(Relaxed)
    }
    /// Sets the cancel flag and tells the pools ([`Workers::cancel`]); does not wait.
    pub(super) fn stop(&self) {
        self.cancel.store(true, Relaxed);
        let pools = std::mem::take(&mut *self.pools.lock().unwrap_or_else(|p| p.into_inner()));
        for pool in pools.iter().filter_map(Weak::upgrade) {
            pool.cancel();
        }
    }
    /// `pool` is told when the run stops (held weakly: the stage's threads own it).
    pub(super) fn watch(&self, pool: &Arc<dyn Workers>) {
        let mut pools = self.pools.lock().unwrap_or_else(|p| p.into_inner());
        pools.push(Arc::downgrade(pool));
        if self.cancelled() {
            // Stopped while the stage started: nobody else will tell it.
            drop(pools);
            pool.cancel();
        }
    }
    pub(super) fn spawn(
        self: &Arc<Self>,
        name: String,
        f: impl FnOnce() + Send + 'static,
    ) -> Result<()> {
        *self.live.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        let ctl = self.clone();
        let spawned = thread::Builder::new().name(name.clone()).spawn(move || {
            CURRENT.with(|c| *c.borrow_mut() = Some(ctl.clone()));
            struct Exit(Arc<Control>);
            impl Drop for Exit {
                fn drop(&mut self) {
                    let mut live = self.0.live.lock().unwrap_or_else(|p| p.into_inner());
                    *live -= 1;
                    self.0.exited.notify_all();
                }
            }
            let _exit = Exit(ctl);
            f();
        });
        spawned.map(|_| ()).map_err(|e| {
            *self.live.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
            Error::no_thread(format_args!("'{name}'"), e)
        })
    }
    /// Waits until every thread has exited; false on timeout.
    pub(super) fn wait(&self, timeout: Duration) -> bool {
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let (live, _) = self
            .exited
            .wait_timeout_while(live, timeout, |n| *n > 0)
            .unwrap_or_else(|p| p.into_inner());
        *live == 0
    }
}

/// The threads of an [`Execution`](super::Execution), to wait for after it is stopped.
#[derive(Clone, Debug)]
pub struct Threads(pub(super) Arc<Control>);

impl Threads {
    /// Waits up to `timeout` for every thread to exit; true if they all have. Call without
    /// holding locks that workers may need (the GIL).
    pub fn wait(&self, timeout: Duration) -> bool {
        self.0.wait(timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spawned_threads_see_their_executions_cancel_flag_and_can_be_waited_for() {
        let ctl = Arc::new(Control::default());
        let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(0);
        let (seen_tx, seen_rx) = crossbeam_channel::bounded::<(bool, bool)>(1);
        ctl.spawn("test".into(), move || {
            let before = cancelled();
            go_rx.recv().unwrap();
            seen_tx.send((before, cancelled())).unwrap();
        })
        .unwrap();
        let threads = Threads(ctl.clone());
        assert!(!threads.wait(Duration::from_millis(10)), "still running");
        ctl.cancel.store(true, Relaxed);
        go_tx.send(()).unwrap();
        assert_eq!(seen_rx.recv().unwrap(), (false, true));
        assert!(threads.wait(Duration::from_secs(30)));
        assert!(!cancelled(), "not a thread of that execution");
    }
}
