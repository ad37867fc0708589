//! Page-locked batch buffers with the allocator the bindings ship with: locked once as
//! they go round the ring, unlocked before their memory is freed however it is freed.
//! `mlock` is the pinner (no device here): the kernel's own count (`VmLck`) says what is
//! locked.

use std::ffi::{c_int, c_uint, c_void};

use sluice::recycle::{give_f32, give_u8, pin_stats, take_f32, take_u8, Active, Pinner, Pinning};

#[global_allocator]
static ALLOC: sluice::alloc::MiMalloc = sluice::alloc::MiMalloc;

/// Kilobytes the kernel says this process has locked.
fn vm_lck_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmLck:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

unsafe extern "C" fn fake_register(_: *mut c_void, _: usize, _: c_uint) -> c_int {
    0
}

unsafe extern "C" fn fake_unregister(_: *mut c_void) -> c_int {
    0
}

/// One test: the lock table and the kernel's count are the process's.
#[test]
fn buffers_are_locked_once_and_unlocked_before_they_are_freed() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct it is given.
    unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) };
    let root = unsafe { libc::geteuid() } == 0;
    if !root && limit.rlim_cur < 64 << 20 {
        eprintln!("skipped: RLIMIT_MEMLOCK below 64 MiB");
        return;
    }
    let before = pin_stats();
    assert_eq!(vm_lck_kb(), 0);
    let _run = Active::new();
    let floats = 1 << 20; // 4 MiB
    {
        let _pin = Pinning::start(Pinner::Mlock).unwrap();
        // A second guard with the same pinner is fine; another pinner is refused.
        let again = Pinning::start(Pinner::Mlock).unwrap();
        drop(again);
        let cuda = Pinner::Cuda {
            register: fake_register,
            unregister: fake_unregister,
        };
        let err = Pinning::start(cuda).unwrap_err().to_string();
        assert!(err.contains("one pinner at a time"), "{err}");
        let a = take_f32(floats);
        let b = take_u8(4 << 20);
        let s = pin_stats();
        assert_eq!((s.locked, s.locks - before.locks), (2, 2));
        assert!(vm_lck_kb() >= 8 << 10, "{} kB locked", vm_lck_kb());
        // Round the ring: the same buffers come back, already locked.
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        give_f32(a);
        give_u8(b);
        for _ in 0..10 {
            let a = take_f32(floats);
            let b = take_u8(4 << 20);
            assert_eq!((a.as_ptr(), b.as_ptr()), (pa, pb));
            give_f32(a);
            give_u8(b);
        }
        assert_eq!(pin_stats().locks - before.locks, 2);
        // A buffer the engine drops (a run stopped with batches queued) is unlocked by the
        // allocator before it is freed.
        let dropped = take_f32(floats);
        assert_eq!(pin_stats().locked, 2);
        drop(dropped);
        let s = pin_stats();
        assert_eq!((s.locked, s.unlocks - before.unlocks), (1, 1));
        assert!(vm_lck_kb() < 8 << 10);
        // Small buffers are never locked.
        let small = take_f32(1000);
        assert_eq!(pin_stats().locked, 1);
        drop(small);
    }
    // The guard is gone: new buffers are not locked, the locked one stays so until freed.
    let fresh = take_f32(2 * floats);
    assert_eq!(pin_stats().locked, 1);
    drop(fresh);
    drop(_run);
    // The last run's end freed the kept buffer: nothing is locked.
    let s = pin_stats();
    assert_eq!((s.locked, s.failed), (0, before.failed));
    assert_eq!(s.locks - before.locks, s.unlocks - before.unlocks);
    assert_eq!(vm_lck_kb(), 0);
}
