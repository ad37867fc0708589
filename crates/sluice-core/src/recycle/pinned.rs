//! Page-locked ("pinned") batch buffers, so a device copies a batch straight from the
//! memory the batch stage wrote it into.
//!
//! A GPU's copy engine reads only page-locked host memory. From pageable memory the driver
//! first copies the batch into a staging buffer of its own, on the calling thread, so a
//! `non_blocking` copy is neither free nor asynchronous; `Tensor.pin_memory()` is the same
//! extra copy made by hand. While a [`Pinning`] lives, every batch buffer
//! [`super::take_f32`] / [`super::take_u8`] hands the engine is page-locked once with the
//! [`Pinner`] given (`cudaHostRegister` from the CUDA runtime the consumer loaded); buffers
//! come back from the consumer and go out again ([`super::KEPT_PINNED`] of them), so a run
//! locks its few ring buffers and nothing more.
//!
//! A locked buffer must be unlocked before its memory is freed: a later allocation at the
//! same address would still be registered with the device, whose copies would then read
//! the old pages. The engine frees buffers wherever a run stops (a `break` drops the
//! batches queued), so the one place that sees every free, the global allocator
//! (`sluice::alloc::MiMalloc`), calls [`on_free`]. [`Pinning::start`] checks that it does
//! before it locks anything.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Mutex, MutexGuard};

use crate::{Error, Result};

/// `cudaHostRegister`'s C signature: lock `size` bytes at `ptr` with `flags`; 0 on success.
pub type RegisterFn = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> c_int;
/// `cudaHostUnregister`'s C signature: unlock the range registered at `ptr`.
pub type UnregisterFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// `cudaHostRegisterPortable`: locked for every CUDA context of the process, not only the
/// one current on the worker thread that locks it.
const CUDA_PORTABLE: c_uint = 1;

/// How buffers are page-locked.
#[derive(Debug, Clone, Copy)]
pub enum Pinner {
    /// `mlock(2)` / `munlock(2)`: locked in RAM, no device involved (what the CPU tests
    /// check the ring's bookkeeping with; `VmLck` in `/proc/self/status` shows it).
    Mlock,
    /// A CUDA runtime's `cudaHostRegister` / `cudaHostUnregister`.
    Cuda {
        register: RegisterFn,
        unregister: UnregisterFn,
    },
}

/// How errors name it: what locks the memory, not the function addresses.
impl std::fmt::Display for Pinner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pinner::Mlock => f.write_str("mlock"),
            Pinner::Cuda { .. } => f.write_str("a CUDA runtime's cudaHostRegister"),
        }
    }
}

impl Pinner {
    fn same(self, other: Pinner) -> bool {
        match (self, other) {
            (Pinner::Mlock, Pinner::Mlock) => true,
            (Pinner::Cuda { register: a, .. }, Pinner::Cuda { register: b, .. }) => {
                a as usize == b as usize
            }
            _ => false,
        }
    }

    /// Locks `len` bytes at `ptr`; the error code on failure.
    fn lock(self, ptr: *mut u8, len: usize) -> std::result::Result<(), i64> {
        // SAFETY: `ptr..ptr+len` is a live allocation owned by the caller; the CUDA
        // function pointer is the runtime's (`Pinning::start`'s caller vouched for it).
        let rc = unsafe {
            match self {
                Pinner::Mlock => libc::mlock(ptr.cast(), len),
                Pinner::Cuda { register, .. } => register(ptr.cast(), len, CUDA_PORTABLE),
            }
        };
        match rc {
            0 => Ok(()),
            _ if matches!(self, Pinner::Mlock) => {
                Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1) as i64)
            }
            rc => Err(rc as i64),
        }
    }

    fn unlock(self, ptr: usize, len: usize) {
        // SAFETY: `ptr..ptr+len` was locked by `lock` and is still mapped (called before
        // the allocator frees it).
        unsafe {
            match self {
                Pinner::Mlock => {
                    libc::munlock(ptr as *const c_void, len);
                }
                Pinner::Cuda { unregister, .. } => {
                    unregister(ptr as *mut c_void);
                }
            }
        }
    }
}

/// A locked buffer: where, how long, how, and by which process (a forked child inherits
/// the table but not the locks).
#[derive(Debug, Clone, Copy)]
struct Locked {
    ptr: usize,
    len: usize,
    /// `None`: the allocator probe of [`Pinning::start`], never locked.
    pinner: Option<Pinner>,
    pid: u32,
}

/// Buffers locked at most: a few rings' worth. One past it is not locked.
const SLOTS: usize = 64;

/// The pinner of the live [`Pinning`]s and the buffers locked. A fixed table: [`on_free`]
/// runs inside the allocator, which must not allocate under this lock.
struct Table {
    pinner: Option<Pinner>,
    guards: usize,
    locked: [Option<Locked>; SLOTS],
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    pinner: None,
    guards: 0,
    locked: [None; SLOTS],
});
/// Entries in the table: [`on_free`]'s lock-free way out when nothing is locked.
static ENTRIES: AtomicUsize = AtomicUsize::new(0);
/// Whether the global allocator calls [`on_free`] (seen once by [`Pinning::start`]).
static HOOKED: AtomicBool = AtomicBool::new(false);
static LOCKS: AtomicU64 = AtomicU64::new(0);
static UNLOCKS: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);
/// The error code of the last lock that failed (0: the table was full).
static LAST_ERROR: AtomicI64 = AtomicI64::new(0);

fn table() -> MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

impl Table {
    fn find(&self, ptr: usize) -> Option<usize> {
        self.locked
            .iter()
            .position(|e| e.is_some_and(|e| e.ptr == ptr))
    }

    fn insert(&mut self, entry: Locked) -> bool {
        match self.locked.iter_mut().find(|e| e.is_none()) {
            Some(slot) => {
                *slot = Some(entry);
                ENTRIES.fetch_add(1, Release);
                true
            }
            None => false,
        }
    }

    fn remove(&mut self, i: usize) -> Option<Locked> {
        let e = self.locked[i].take();
        if e.is_some() {
            ENTRIES.fetch_sub(1, Release);
        }
        e
    }
}

/// Buffers are locked while one lives: started by a consumer that copies batches to a
/// device (`iter_torch_batches(device="cuda", pin_memory=True)`), ended when it is dropped.
/// Buffers locked stay locked until their memory is freed.
///
/// ```no_run
/// use sluice_core::recycle::{take_f32, Pinner, Pinning};
/// // Fails unless the process's global allocator is sluice's (`sluice::alloc::MiMalloc`).
/// let _pin = Pinning::start(Pinner::Mlock).unwrap();
/// let batch = take_f32(1 << 20); // locked
/// ```
#[derive(Debug)]
pub struct Pinning(());

impl Pinning {
    /// Starts locking batch buffers with `pinner`. Errors when another pinner is live, or
    /// when the global allocator would free a locked buffer without unlocking it.
    pub fn start(pinner: Pinner) -> Result<Pinning> {
        if !allocator_unlocks() {
            return Err(Error::InvalidArgument(
                "pinned batch buffers need sluice's global allocator (sluice::alloc::MiMalloc), \
                 which unlocks a buffer before freeing it"
                    .into(),
            ));
        }
        let mut t = table();
        match t.pinner {
            Some(live) if !live.same(pinner) => {
                return Err(Error::InvalidArgument(format!(
                    "batch buffers are already pinned with {live} by another iteration; \
                     one pinner at a time per process (asked for {pinner})"
                )))
            }
            _ => t.pinner = Some(pinner),
        }
        t.guards += 1;
        Ok(Pinning(()))
    }
}

impl Drop for Pinning {
    fn drop(&mut self) {
        let mut t = table();
        t.guards -= 1;
        if t.guards == 0 {
            t.pinner = None;
        }
    }
}

/// Whether a [`Pinning`] lives.
pub(super) fn pinning() -> bool {
    table().pinner.is_some()
}

/// Locks the buffer at `ptr` (`len` bytes) if a [`Pinning`] lives and it is not locked
/// yet. A failure is counted ([`PinStats::failed`]) and leaves it pageable: the consumer
/// then copies it into pinned memory itself.
pub(super) fn pin(ptr: *mut u8, len: usize) {
    let pinner = {
        let t = table();
        match t.pinner {
            Some(p) if t.find(ptr as usize).is_none() => p,
            _ => return,
        }
    };
    // Locking touches every page of the buffer: not under the table's lock. The buffer is
    // this thread's, so nothing else locks or frees it meanwhile.
    if let Err(code) = pinner.lock(ptr, len) {
        failed(code);
        return;
    }
    let entry = Locked {
        ptr: ptr as usize,
        len,
        pinner: Some(pinner),
        pid: std::process::id(),
    };
    if table().insert(entry) {
        LOCKS.fetch_add(1, Relaxed);
    } else {
        pinner.unlock(ptr as usize, len);
        failed(0);
    }
}

/// Counts a buffer left pageable; the consumer says so (it sees [`PinStats::failed`] grow).
fn failed(code: i64) {
    FAILED.fetch_add(1, Relaxed);
    LAST_ERROR.store(code, Relaxed);
}

/// Unlocks the buffer at `ptr` (`size` bytes) if it is locked: the global allocator calls
/// this before it frees or moves a block. A test of two loads when nothing is locked.
#[inline]
pub fn on_free(ptr: *mut u8, size: usize) {
    if size >= super::MIN_BYTES && ENTRIES.load(Acquire) > 0 {
        unlock_freed(ptr as usize);
    }
}

#[cold]
fn unlock_freed(ptr: usize) {
    let mut t = table();
    let Some(e) = t.find(ptr).and_then(|i| t.remove(i)) else {
        return;
    };
    match e.pinner {
        None => HOOKED.store(true, Relaxed),
        // A forked child's copy of the table: the lock was the parent's.
        Some(_) if e.pid != std::process::id() => {}
        Some(p) => {
            p.unlock(e.ptr, e.len);
            UNLOCKS.fetch_add(1, Relaxed);
        }
    }
}

/// Whether freeing a block reaches [`on_free`]: a probe entry, freed once per process.
fn allocator_unlocks() -> bool {
    if HOOKED.load(Relaxed) {
        return true;
    }
    let probe: Vec<u8> = Vec::with_capacity(super::MIN_BYTES);
    let ptr = probe.as_ptr() as usize;
    let entry = Locked {
        ptr,
        len: 0,
        pinner: None,
        pid: std::process::id(),
    };
    if !table().insert(entry) {
        return false;
    }
    drop(probe);
    // Not hooked: the entry is still there (and the address may be reused): take it out.
    let mut t = table();
    if let Some(i) = t
        .find(ptr)
        .filter(|&i| t.locked[i].is_some_and(|e| e.pinner.is_none()))
    {
        t.remove(i);
    }
    HOOKED.load(Relaxed)
}

/// The process's pinned buffers, for tests and the stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PinStats {
    /// Buffers locked now.
    pub locked: u64,
    /// Their bytes.
    pub locked_bytes: u64,
    /// Buffers locked since the process started.
    pub locks: u64,
    /// Buffers unlocked (before being freed) since the process started.
    pub unlocks: u64,
    /// Buffers that could not be locked (left pageable).
    pub failed: u64,
    /// The last failure's error code (`errno` for mlock, a `cudaError_t`; 0: more than
    /// 64 buffers locked at once).
    pub last_error: i64,
}

/// The process's pinned-buffer counts.
///
/// ```
/// let s = sluice_core::recycle::pin_stats();
/// assert!(s.locks >= s.unlocks);
/// ```
pub fn pin_stats() -> PinStats {
    let t = table();
    let live = t.locked.iter().flatten().filter(|e| e.pinner.is_some());
    let (locked, locked_bytes) = live.fold((0, 0), |(n, b), e| (n + 1, b + e.len as u64));
    PinStats {
        locked,
        locked_bytes,
        locks: LOCKS.load(Relaxed),
        unlocks: UNLOCKS.load(Relaxed),
        failed: FAILED.load(Relaxed),
        last_error: LAST_ERROR.load(Relaxed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This crate's tests run on the system allocator, which does not call `on_free`:
    /// pinning is refused, and the probe leaves nothing behind. The locking itself is
    /// checked with sluice's allocator (`crates/sluice/tests/pinned.rs`).
    #[test]
    fn pinning_is_refused_where_the_allocator_would_not_unlock() {
        let err = Pinning::start(Pinner::Mlock).unwrap_err();
        assert!(err.to_string().contains("MiMalloc"), "{err}");
        assert_eq!(ENTRIES.load(Relaxed), 0);
        assert!(!pinning());
        // Nothing locked: a free is two loads and no lock.
        on_free(std::ptr::null_mut(), 1 << 30);
        assert_eq!(pin_stats().locked, 0);
    }
}
