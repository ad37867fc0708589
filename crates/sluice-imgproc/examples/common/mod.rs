//! What the examples share: Linux's CPU clocks (other processes on the cores do not count),
//! a fixed uniform generator, so two builds see the same parameters, and the JPEGs of a
//! benchmark folder.
// Each example uses the parts it needs.
#![allow(dead_code)]

/// The process's CPU time (helper threads included).
pub const PROCESS_CPU: i32 = 2;
/// The calling thread's CPU time.
pub const THREAD_CPU: i32 = 3;

/// `clock`'s time in ns ([`PROCESS_CPU`] or [`THREAD_CPU`]).
pub fn clock_ns(clock: i32) -> u64 {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
    }
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer, and the clock ids above are Linux's.
    unsafe { clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Uniform draws in [0, 1) from xorshift64 seeded with `seed`.
pub fn rng(seed: u64) -> impl FnMut() -> f64 {
    let mut s = seed | 1;
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        (s >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The `.jpg` files in `dir` and in its folders one level down (the benchmark's class
/// folders), sorted.
pub fn jpegs(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let list = |d: &std::path::Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(d)
            .map(|r| r.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    let mut files: Vec<_> = list(dir)
        .into_iter()
        .flat_map(|p| if p.is_dir() { list(&p) } else { vec![p] })
        .filter(|p| p.extension().is_some_and(|x| x == "jpg"))
        .collect();
    files.sort();
    files
}
