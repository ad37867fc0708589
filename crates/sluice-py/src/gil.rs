//! The one way the bindings release the GIL around engine work: [`released`].
//!
//! Why a helper and not `py.detach`: Python runs its SIGINT handler (which raises
//! `KeyboardInterrupt`) only on the main thread, holding the GIL, when something checks for
//! signals. A thread parked in Rust with the GIL released checks nothing, so a Ctrl-C during
//! a call that runs a pipeline (a sink, `count`, `profile`, the start of an iteration whose
//! first step is a blocking sort) was seen only once the whole call had ended, minutes later.
//!
//! How: the work runs on a scoped helper thread while the calling thread waits for it in
//! 50 ms slices with the GIL released, checking signals between slices. On a signal it asks
//! the engine to stop ([`sluice::interrupt::request`]: every execution checks it while it
//! waits for output and ends with `Error::Cancelled`, and a blocking sort or groupby reading
//! its input stops there), waits for the work to return, withdraws the request and raises
//! the signal's exception — not the cancelled work's error. The helper thread is always
//! joined before `released` returns (it is scoped: nothing it borrows can outlive the call).
//! Work that never looks at the request (planning, reading a foreign Arrow stream) finishes
//! before the exception is raised. The pipeline threads of a stopped run are not waited for
//! (the exception is raised at once): they finish the Python call they are in and exit.
//! Those calls are counted ([`attach`]) and waited for at interpreter exit
//! ([`wait_for_calls`], from `join_stopped`): a thread still in Python code when the
//! interpreter finalizes is torn down under Rust frames, which aborts the process.
//!
//! The few plain `py.detach` calls left each say why at the call site: waits that already
//! come in short slices with a signal check between them (the iterator's `__next__`,
//! `join_stopped`), bounded cleanup that must run to its end (closing an iteration, with its
//! own timeout; a `Drop`, which cannot raise), and the worker-process entry points, which run
//! Python functions on the calling thread on purpose (a SIGINT aimed at the worker interrupts
//! the function itself).

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::errors::SluiceError;

/// How long the calling thread waits with the GIL released between two signal checks.
const POLL: Duration = Duration::from_millis(50);

/// Runs `f` with the GIL released and returns its result, raising `KeyboardInterrupt` (or
/// whatever a signal handler raises) if a signal comes while it runs: the engine is asked to
/// stop, `f` is waited for, and its result is dropped. See the module docs.
///
/// Costs a thread start (tens of µs) per call: meant for calls that may run long, not for
/// every output of an iteration.
pub fn released<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> PyResult<T> {
    // Taken by the helper thread, or by this one if no thread can be started.
    let work = Mutex::new(Some(f));
    let take = || work.lock().unwrap_or_else(|p| p.into_inner()).take();
    let take = &take;
    std::thread::scope(|scope| {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let spawned = std::thread::Builder::new()
            .name("sluice-call".into())
            .spawn_scoped(scope, move || {
                if let Some(f) = take() {
                    let _ = tx.send(f());
                }
            });
        let worker = match spawned {
            Ok(worker) => worker,
            // Out of threads (a process at its limit): run here, as a plain release would,
            // rather than fail the call.
            Err(_) => {
                let f = take().expect("the call has not run");
                return Ok(py.detach(f));
            }
        };
        loop {
            match py.detach(|| rx.recv_timeout(POLL)) {
                Ok(out) => return Ok(out),
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    // `f` panicked: surface it as a bug report, not a crash.
                    let why = match worker.join() {
                        Err(p) => p
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_default(),
                        Ok(()) => String::new(),
                    };
                    return Err(SluiceError::new_err(format!(
                        "internal error (a sluice bug, please report): a call panicked: {why}"
                    )));
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    if let Err(e) = py.check_signals() {
                        sluice::interrupt::request();
                        // The result is dropped with the GIL released (a run's threads may
                        // need it to finish), and the thread joined even if `f` panicked.
                        py.detach(|| {
                            drop(rx.recv());
                            let _ = worker.join();
                        });
                        sluice::interrupt::clear();
                        return Err(e);
                    }
                }
            }
        }
    })
}

/// Pipeline threads running Python code now (functions, user sources): see [`attach`].
static CALLS: AtomicUsize = AtomicUsize::new(0);

/// `Python::attach` for a pipeline thread about to run Python code (a function, a user
/// source's read), counted until the thread has let go of the interpreter again, so exit can
/// wait for it ([`wait_for_calls`]).
pub fn attach<R>(f: impl for<'py> FnOnce(Python<'py>) -> R) -> R {
    struct Counted;
    impl Drop for Counted {
        fn drop(&mut self) {
            CALLS.fetch_sub(1, SeqCst);
        }
    }
    CALLS.fetch_add(1, SeqCst);
    // Dropped after `Python::attach` returns, once this thread holds no interpreter state.
    let _counted = Counted;
    Python::attach(f)
}

/// Waits (with the GIL released, checking signals) until no pipeline thread runs Python code,
/// or until `deadline`; true if none does. For interpreter exit, once the runs still open
/// were closed: what is left are the calls that stopped runs' threads finish.
pub fn wait_for_calls(py: Python<'_>, deadline: Instant) -> PyResult<bool> {
    while CALLS.load(SeqCst) > 0 {
        if Instant::now() >= deadline {
            return Ok(false);
        }
        py.detach(|| std::thread::sleep(Duration::from_millis(5)));
        py.check_signals()?;
    }
    Ok(true)
}
