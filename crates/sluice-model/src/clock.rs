//! The calling thread's CPU time: what an op costs, excluding time the thread was descheduled
//! or blocked (a noisy 2-core machine inflates wall time, not this).

use std::time::Duration;

/// CPU time consumed by the calling thread so far.
///
/// ```
/// let t0 = sluice_model::clock::thread_cpu();
/// let x: u64 = (0..1_000_000u64).map(std::hint::black_box).sum();
/// assert!(x > 0 && sluice_model::clock::thread_cpu() >= t0);
/// ```
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleeping_costs_no_cpu_but_work_does() {
        let t0 = thread_cpu();
        std::thread::sleep(Duration::from_millis(30));
        let slept = thread_cpu() - t0;
        assert!(slept < Duration::from_millis(10), "{slept:?}");
        let t1 = thread_cpu();
        let mut x = 0u64;
        while thread_cpu() - t1 < Duration::from_millis(5) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(thread_cpu() - t1 >= Duration::from_millis(5));
    }
}
