//! Float32 batch buffers handed back when the consumer is done with them, for the next
//! batch to be written into.
//!
//! A batch of 64 float32 224² images is 38.5 MB. Allocated fresh each time, every page of
//! it is zeroed by the kernel on first touch (the allocator returns blocks this size to the
//! system when they are freed): on the CV reference pipeline that zeroing was 4.6% of the
//! CPU (docs/BENCHMARKS.md). The bindings give a batch's buffer back here when numpy frees
//! the array ([`give_f32`]); a batch stacking float32 tensors takes one ([`take_f32`]),
//! whether it copies them ([`crate::collate`]) or writes its ops into its slots
//! ([`crate::plan::slots`]).
//!
//! Bounded: at most [`KEPT`] buffers, kept only while a run is going ([`Active`]); when the
//! last run ends they go back to the system.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

/// Buffers kept at most: the consumer frees about one batch for each one made.
pub const KEPT: usize = 2;

/// Buffers smaller than this are left to the allocator, which reuses them warm anyway.
pub const MIN_BYTES: usize = 1 << 20;

/// The buffers kept and the runs going; one per process ([`BIN`]).
#[derive(Debug)]
struct Bin {
    kept: Mutex<Vec<Vec<f32>>>,
    active: AtomicUsize,
}

static BIN: Bin = Bin::new();

impl Bin {
    const fn new() -> Self {
        Bin {
            kept: Mutex::new(Vec::new()),
            active: AtomicUsize::new(0),
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Vec<Vec<f32>>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self, len: usize) -> Vec<f32> {
        if worth_keeping(len) {
            let mut kept = self.kept();
            let fits = |v: &Vec<f32>| v.capacity() >= len && v.capacity() / 2 <= len;
            if let Some(i) = kept.iter().position(fits) {
                let mut v = kept.swap_remove(i);
                v.clear();
                return v;
            }
        }
        Vec::with_capacity(len)
    }

    fn give(&self, v: Vec<f32>) {
        if !worth_keeping(v.capacity()) {
            return;
        }
        let mut kept = self.kept();
        // Read under the lock: the last run's end empties the bin after its count reaches
        // zero, so a buffer kept here is either seen by that end or not kept at all.
        if kept.len() < KEPT && self.active.load(Relaxed) > 0 {
            kept.push(v);
        }
        // Otherwise `v` is freed on return, after the lock.
    }

    fn start(&self) {
        self.active.fetch_add(1, Relaxed);
    }

    fn end(&self) {
        if self.active.fetch_sub(1, Relaxed) == 1 {
            let freed = std::mem::take(&mut *self.kept());
            drop(freed);
        }
    }
}

/// Whether a buffer of `capacity` floats is worth handing back.
pub fn worth_keeping(capacity: usize) -> bool {
    capacity.saturating_mul(4) >= MIN_BYTES
}

/// An empty buffer with room for `len` floats: one handed back (no larger than twice
/// `len`) if there is one, else a new one.
///
/// ```
/// use sluice_core::recycle::{give_f32, take_f32, Active};
/// let _run = Active::new();
/// let v = take_f32(1 << 20);
/// let at = v.as_ptr();
/// give_f32(v);
/// assert_eq!(take_f32(1 << 20).as_ptr(), at);
/// ```
pub fn take_f32(len: usize) -> Vec<f32> {
    BIN.take(len)
}

/// Keeps `v` for a later [`take_f32`] while a run is going and fewer than [`KEPT`] are
/// kept; else frees it.
pub fn give_f32(v: Vec<f32>) {
    BIN.give(v)
}

/// A run going: buffers are kept while one is alive, and freed when the last is dropped.
#[derive(Debug)]
pub struct Active(());

impl Active {
    /// Marks a run as started.
    pub fn new() -> Self {
        BIN.start();
        Active(())
    }
}

impl Default for Active {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        BIN.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bin of its own, so the process's runs (other tests) do not count.
    #[test]
    fn buffers_come_back_while_a_run_goes_within_the_bounds() {
        let bin = Bin::new();
        let big = 1 << 20;
        // No run: nothing is kept.
        bin.give(Vec::with_capacity(big));
        assert!(bin.kept().is_empty());
        bin.start();
        // Small buffers are left to the allocator; at most KEPT are kept.
        bin.give(Vec::with_capacity(16));
        for _ in 0..KEPT + 1 {
            bin.give(vec![1.0; big]);
        }
        assert_eq!(bin.kept().len(), KEPT);
        // One that fits comes back empty; one far too large for the request does not.
        let v = bin.take(big - 5);
        assert!(v.is_empty() && v.capacity() >= big);
        assert_eq!(bin.take(big / 4).capacity(), big / 4);
        assert_eq!(bin.kept().len(), KEPT - 1);
        // The last run's end frees them.
        bin.end();
        assert!(bin.kept().is_empty());
    }
}
