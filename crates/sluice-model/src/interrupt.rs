//! A process-wide request to stop work in progress (the user pressed Ctrl-C while a long call
//! such as a blocking sort ran with the GIL released). Executions check it while they wait and
//! end with [`Error::Cancelled`](crate::Error::Cancelled); the caller raises the interrupt.
//!
//! ```
//! use sluice_model::interrupt;
//! assert!(!interrupt::requested());
//! interrupt::request();
//! assert!(interrupt::requested());
//! interrupt::clear();
//! ```

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Asks every running execution to stop.
pub fn request() {
    REQUESTED.store(true, Relaxed);
}

/// Withdraws the request (once the interrupted call has returned).
pub fn clear() {
    REQUESTED.store(false, Relaxed);
}

/// Whether a stop was requested.
pub fn requested() -> bool {
    REQUESTED.load(Relaxed)
}
