//! The allocator the bindings and the CLI ship with: mimalloc, entered by its plain calls
//! whenever the alignment asked for is one every mimalloc block has.
//!
//! Why not the `mimalloc` crate's `MiMalloc`: it sends every request to
//! `mi_malloc_aligned`, and mimalloc 3 takes that call's fast path only while the size
//! class's page has a free block at hand; otherwise a size that is not a power of two (a
//! 48-byte sample field list) goes to the over-allocating path, which never refills that
//! page, so every later request of the size pays ~140 instructions instead of ~20
//! (callgrind, `benchmarks/engine_overhead.py`'s Python UDF case: 2.2 M such calls per
//! 900 k samples). Samples are built and freed on different threads, which glibc malloc
//! handles slowly; mimalloc 2 is fast here but kept freed cross-thread batches (8 MiB each)
//! out of reuse — 1.1 GB peak RSS in `tests/python/test_memory.py` against < 0.6 GB.
//!
//! It is also the one place that sees every free, so it unlocks page-locked batch buffers
//! before their memory is reused (`sluice_core::recycle::pinned`).
//!
//! Its memory is not advised for transparent huge pages (`libmimalloc-sys`'s `no_thp`
//! feature). mimalloc 3 advises each arena it maps (`MADV_HUGEPAGE`), so on a kernel in the
//! common `madvise` mode every first touch of a 2 MiB range that mimalloc had purged zeroes
//! a whole huge page, after compacting memory to find one. A pipeline's buffers come and go
//! (a chunk's images, a Ray reply copied out), and on the shared service's workers — whose
//! chunks then ran on whichever of Ray's 64 threads took them, each with its own heap (they
//! run on the worker's own slot threads now: `sluice-py/src/service.rs`) — that zeroing was
//! 46% of the worker's CPU; the first epoch of a job cost its two workers
//! 9.3–10.0 CPU seconds against 3.5 without it (`benchmarks/service_epochs.py`;
//! docs/BENCHMARKS.md, "Huge pages"). In-process
//! pipelines reuse their memory warm and neither gain nor lose. Unlike mimalloc's
//! `allow_thp=0` option this leaves the rest of the process alone (it would turn huge pages
//! off for the whole process: numpy's and torch's arrays too).

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

extern "C" {
    // Part of mimalloc's C library (declared here: `libmimalloc-sys` declares it only
    // with its `extended` feature).
    fn mi_collect(force: bool);
}

/// Returns memory that was freed to mimalloc to the system. mimalloc keeps freed pages for
/// reuse and purges them only when the allocator is called again later, so an iteration's
/// big buffers (a `shuffle_buffer`'s samples, queued chunks) stayed resident after it
/// closed: 2.2 GB for `shuffle_buffer(100_000)`. Called when an iteration is closed, once
/// its threads are gone. Harmless, and cheap for a small heap, when mimalloc is not the
/// global allocator.
///
/// With `c_heap`, the C allocator's free pages go back too: objects a Python function made
/// (numpy arrays in a `shuffle_buffer` it fills) live on glibc's heap, which keeps freed
/// pages below its top for good. That walks glibc's whole heap (28 ms after a million
/// small objects came and went), so it is for an iteration closed before its end, whose
/// buffers may have held such objects; one that ran to its end holds nothing.
pub fn release_free_memory(c_heap: bool) {
    // SAFETY: no arguments beyond a flag; mimalloc walks its own heaps.
    unsafe { mi_collect(true) }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if c_heap {
        // SAFETY: malloc_trim only returns free pages of glibc's arenas to the system.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}

/// mimalloc as the global allocator.
///
/// ```
/// #[global_allocator]
/// static ALLOC: sluice::alloc::MiMalloc = sluice::alloc::MiMalloc;
///
/// fn main() {
///     let v: Vec<u64> = (0..1000).collect();
///     assert_eq!(v.as_ptr() as usize % 8, 0);
/// }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct MiMalloc;

/// Every mimalloc block is a multiple of 8 bytes laid out from a 16-byte aligned page
/// start, so alignments up to 8 need nothing more than a plain allocation.
const PLAIN_ALIGN: usize = 8;

/// A new block for `layout`: mimalloc's plain call when every block has the alignment, its
/// aligned call otherwise.
#[inline]
unsafe fn fresh(
    layout: Layout,
    plain: unsafe extern "C" fn(usize) -> *mut c_void,
    aligned: unsafe extern "C" fn(usize, usize) -> *mut c_void,
) -> *mut u8 {
    let p = if layout.align() <= PLAIN_ALIGN {
        plain(layout.size())
    } else {
        aligned(layout.size(), layout.align())
    };
    p.cast()
}

// SAFETY: mimalloc's calls meet the `GlobalAlloc` contract: plain calls for alignments every
// block has, its aligned calls for the rest; `mi_free` takes pointers from either.
unsafe impl GlobalAlloc for MiMalloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        fresh(layout, mi::mi_malloc, mi::mi_malloc_aligned)
    }
    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        fresh(layout, mi::mi_zalloc, mi::mi_zalloc_aligned)
    }
    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // A page-locked batch buffer is unlocked before its memory can be reused.
        sluice_core::recycle::pinned::on_free(ptr, layout.size());
        mi::mi_free(ptr.cast::<c_void>());
    }
    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // The block may move: unlocked first, as for a free.
        sluice_core::recycle::pinned::on_free(ptr, layout.size());
        let p = if layout.align() <= PLAIN_ALIGN {
            mi::mi_realloc(ptr.cast::<c_void>(), new_size)
        } else {
            mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align())
        };
        p.cast()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mapping holding a big mimalloc block is not advised for huge pages (the kernel's
    /// `hg` flag in `/proc/self/smaps`), whatever the kernel's own setting.
    #[cfg(target_os = "linux")]
    #[test]
    fn mimallocs_memory_is_not_advised_for_huge_pages() {
        let size = 8 << 20;
        // SAFETY: a plain allocation, freed below.
        let p = unsafe { mi::mi_malloc(size) } as usize;
        assert_ne!(p, 0);
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut flags = None;
        let mut inside = false;
        for line in smaps.lines() {
            let range = line
                .split_whitespace()
                .next()
                .and_then(|r| r.split_once('-'));
            if let Some((lo, hi)) = range.filter(|_| !line.starts_with("VmFlags")) {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = lo <= p && p < hi;
                }
            } else if inside && line.starts_with("VmFlags:") {
                flags = Some(line.to_string());
            }
        }
        // SAFETY: allocated above by mimalloc.
        unsafe { mi::mi_free(p as *mut c_void) };
        let flags = flags.expect("the block's mapping is in /proc/self/smaps");
        assert!(flags.contains(" rd"), "{flags}");
        assert!(!flags.split_whitespace().any(|f| f == "hg"), "{flags}");
    }

    #[test]
    fn every_size_and_alignment_is_honoured_through_realloc() {
        let a = MiMalloc;
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [1usize, 7, 8, 24, 48, 56, 100, 1000, 70_000, 3 << 20] {
                let layout = Layout::from_size_align(size, align).unwrap();
                unsafe {
                    let p = a.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    p.write_bytes(0xAB, size);
                    let z = a.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0);
                    assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                    a.dealloc(z, layout);
                    let q = a.realloc(p, layout, size * 3);
                    assert_eq!(q as usize % align, 0, "realloc size {size} align {align}");
                    assert!(std::slice::from_raw_parts(q, size)
                        .iter()
                        .all(|&b| b == 0xAB));
                    a.dealloc(q, Layout::from_size_align(size * 3, align).unwrap());
                }
            }
        }
    }
}
