//! Batch buffers (float32 and uint8) handed back when the consumer is done with them, for
//! the next batch to be written into; page-locked for a device's copy engine while a
//! [`Pinning`] lives ([`pinned`]).
//!
//! A batch of 64 float32 224² images is 38.5 MB. Allocated fresh each time, every page of
//! it is zeroed by the kernel on first touch (the allocator returns blocks this size to the
//! system when they are freed): on the CV reference pipeline that zeroing was 4.6% of the
//! CPU (docs/BENCHMARKS.md). The bindings give a batch's buffer back here when numpy frees
//! the array ([`give_f32`], [`give_u8`]); a batch stacking tensors takes one
//! ([`take_f32`], [`take_u8`]), whether it copies them ([`crate::collate`]) or writes its
//! ops into its slots ([`crate::plan::slots`]).
//!
//! Bounded: at most [`KEPT`] buffers of each type ([`KEPT_PINNED`] while pinning), kept
//! only while a run is going ([`Active`]); when the last run ends they go back to the system.

pub mod pinned;

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

pub use pinned::{pin_stats, PinStats, Pinner, Pinning};

/// Buffers kept at most: the consumer frees about one batch for each one made.
pub const KEPT: usize = 2;

/// Buffers kept at most while a [`Pinning`] lives. Page-locking a buffer is a system call
/// that touches every page of it, and a buffer freed is unlocked first, so a pinned run
/// keeps every buffer it has in flight (the engine's queue, the consumer's copies ahead, the
/// batch in the training step): each is locked once, not once per batch.
pub const KEPT_PINNED: usize = 8;

/// Buffers smaller than this are left to the allocator, which reuses them warm anyway.
pub const MIN_BYTES: usize = 1 << 20;

/// The buffers of one element type kept, and the runs going; one per type per process.
#[derive(Debug)]
struct Bin<T> {
    kept: Mutex<Vec<Vec<T>>>,
    active: AtomicUsize,
}

static F32: Bin<f32> = Bin::new();
static U8: Bin<u8> = Bin::new();

impl<T> Bin<T> {
    const fn new() -> Self {
        Bin {
            kept: Mutex::new(Vec::new()),
            active: AtomicUsize::new(0),
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Vec<Vec<T>>> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self, len: usize) -> Vec<T> {
        if !worth_keeping::<T>(len) {
            return Vec::with_capacity(len);
        }
        let found = {
            let mut kept = self.kept();
            let fits = |v: &Vec<T>| v.capacity() >= len && v.capacity() / 2 <= len;
            kept.iter().position(fits).map(|i| kept.swap_remove(i))
        };
        let mut v = match found {
            Some(mut v) => {
                v.clear();
                v
            }
            None => Vec::with_capacity(len),
        };
        // A no-op unless a Pinning lives and the buffer is not locked yet.
        pinned::pin(
            v.as_mut_ptr().cast(),
            v.capacity() * std::mem::size_of::<T>(),
        );
        v
    }

    fn give(&self, v: Vec<T>) {
        if !worth_keeping::<T>(v.capacity()) {
            return;
        }
        let most = if pinned::pinning() { KEPT_PINNED } else { KEPT };
        let mut kept = self.kept();
        // Read under the lock: the last run's end empties the bin after its count reaches
        // zero, so a buffer kept here is either seen by that end or not kept at all.
        if kept.len() < most && self.active.load(Relaxed) > 0 {
            kept.push(v);
        }
        // Otherwise `v` is freed on return, after the lock (and unlocked first if pinned:
        // `pinned::on_free`).
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

/// Whether a buffer of `capacity` elements of `T` is worth handing back.
///
/// ```
/// assert!(sluice_core::recycle::worth_keeping::<f32>(1 << 18));
/// assert!(!sluice_core::recycle::worth_keeping::<u8>(1 << 18));
/// ```
pub fn worth_keeping<T>(capacity: usize) -> bool {
    capacity.saturating_mul(std::mem::size_of::<T>()) >= MIN_BYTES
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
/// let back = take_f32(1 << 20);
/// assert_eq!(back.as_ptr(), at);
/// ```
pub fn take_f32(len: usize) -> Vec<f32> {
    F32.take(len)
}

/// Keeps `v` for a later [`take_f32`] while a run is going and fewer than [`KEPT`] are
/// kept; else frees it.
pub fn give_f32(v: Vec<f32>) {
    F32.give(v)
}

/// [`take_f32`] for uint8 batches (images on their way to a device that normalises them).
///
/// ```
/// use sluice_core::recycle::{give_u8, take_u8, Active};
/// let _run = Active::new();
/// let v = take_u8(4 << 20);
/// let at = v.as_ptr();
/// give_u8(v);
/// let back = take_u8(4 << 20);
/// assert_eq!(back.as_ptr(), at);
/// ```
pub fn take_u8(len: usize) -> Vec<u8> {
    U8.take(len)
}

/// [`give_f32`] for uint8 batches.
pub fn give_u8(v: Vec<u8>) {
    U8.give(v)
}

/// A run going: buffers are kept while one is alive, and freed when the last is dropped.
#[derive(Debug)]
pub struct Active(());

impl Active {
    /// Marks a run as started.
    pub fn new() -> Self {
        F32.start();
        U8.start();
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
        F32.end();
        U8.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bin of its own, so the process's runs (other tests) do not count.
    #[test]
    fn buffers_come_back_while_a_run_goes_within_the_bounds() {
        let bin = Bin::<f32>::new();
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

    #[test]
    fn uint8_buffers_are_sized_in_bytes() {
        let bin = Bin::<u8>::new();
        bin.start();
        // 1 MiB of bytes is worth keeping; a quarter of it (as floats would be) is not.
        bin.give(Vec::with_capacity(MIN_BYTES / 4));
        assert!(bin.kept().is_empty());
        let v: Vec<u8> = Vec::with_capacity(MIN_BYTES);
        let at = v.as_ptr();
        bin.give(v);
        let back = bin.take(MIN_BYTES);
        assert_eq!(back.as_ptr(), at);
        bin.end();
    }
}
