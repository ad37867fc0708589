//! The statistics over time: a fixed-size ring of snapshots of every stage's counters, the
//! consumer's, and the process's CPU time and resident memory. Samples are taken by the
//! consumer as it receives outputs — no thread of its own — at most once per interval; when
//! the ring is full, every other row is dropped and the interval doubles, so a run of any
//! length is covered evenly in bounded memory.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use serde::Serialize;

/// Rows a series keeps at most (then it halves its resolution).
pub const MAX_ROWS: usize = 512;
/// The first sampling interval.
pub const FIRST_INTERVAL_NS: u64 = 100_000_000;

/// The cumulative counters of one stage at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StagePoint {
    /// Outputs produced so far.
    pub out: u64,
    /// Busy seconds so far, summed over the stage's threads.
    pub busy_s: f64,
    /// Output-queue occupancy sum and how many times it was read (their ratio over an
    /// interval is the mean depth then).
    pub occ_sum: u64,
    pub occ_n: u64,
    /// Threads the stage may run (what the controller allows now).
    pub threads: usize,
}

/// Everything sampled at one instant; counters are cumulative since the run started.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// Seconds since the run started.
    pub t_s: f64,
    pub stages: Vec<StagePoint>,
    /// Outputs and samples the consumer received.
    pub outputs: u64,
    pub samples: u64,
    /// Seconds the consumer waited for outputs.
    pub wait_s: f64,
    /// CPU seconds of the whole process (all threads), when the OS tells.
    pub cpu_s: Option<f64>,
    /// Resident memory of the process in bytes, when the OS tells.
    pub rss_bytes: Option<u64>,
}

#[derive(Debug)]
struct Ring {
    interval_ns: u64,
    rows: Vec<Point>,
}

/// A bounded time series of [`Point`]s (see the module).
#[derive(Debug)]
pub struct Series {
    ring: Mutex<Ring>,
    /// Run time (ns) at which the next sample is due: one atomic read decides per output.
    due_ns: AtomicU64,
}

impl Default for Series {
    fn default() -> Self {
        Series {
            ring: Mutex::new(Ring {
                interval_ns: FIRST_INTERVAL_NS,
                rows: Vec::with_capacity(MAX_ROWS),
            }),
            due_ns: AtomicU64::new(0),
        }
    }
}

/// Whether runs record a series: `SLUICE_STATS_SERIES=0` turns it off (read once), so its cost
/// can be measured against nothing (`benchmarks/stats_overhead.py`).
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("SLUICE_STATS_SERIES").map_or(true, |v| v.trim() != "0"))
}

impl Series {
    /// A series that never samples (see [`enabled`]).
    pub fn off() -> Self {
        let s = Series::default();
        s.due_ns.store(u64::MAX, Relaxed);
        s
    }
    /// Whether a sample is due at run time `now_ns`.
    pub fn due(&self, now_ns: u64) -> bool {
        now_ns >= self.due_ns.load(Relaxed)
    }
    /// Appends `point` taken at `now_ns` (halving the resolution when the ring is full).
    ///
    /// ```
    /// use sluice_core::stats::series::{Series, MAX_ROWS, FIRST_INTERVAL_NS};
    /// # use sluice_core::stats::series::Point;
    /// let s = Series::default();
    /// let at = |i: u64| Point { t_s: i as f64, stages: vec![], outputs: i, samples: i,
    ///                           wait_s: 0.0, cpu_s: None, rss_bytes: None };
    /// for i in 0..10 * MAX_ROWS as u64 {
    ///     let now = i * FIRST_INTERVAL_NS;
    ///     if s.due(now) { s.push(now, at(i)); }
    /// }
    /// let rows = s.rows();
    /// assert!(rows.len() <= MAX_ROWS && rows.len() > MAX_ROWS / 4);
    /// assert_eq!(rows[0].outputs, 0);                      // the start is kept
    /// assert!(rows.last().unwrap().outputs > 9 * MAX_ROWS as u64); // and the end is recent
    /// ```
    pub fn push(&self, now_ns: u64, point: Point) {
        let Ok(mut ring) = self.ring.lock() else {
            return;
        };
        if ring.rows.len() == MAX_ROWS {
            // Keep rows 0, 2, 4, …: the same span at half the resolution.
            let mut i = 0;
            ring.rows.retain(|_| {
                i += 1;
                i % 2 == 1
            });
            ring.interval_ns *= 2;
        }
        ring.rows.push(point);
        self.due_ns.store(now_ns + ring.interval_ns, Relaxed);
    }
    /// The rows so far, oldest first.
    pub fn rows(&self) -> Vec<Point> {
        self.ring.lock().map(|r| r.rows.clone()).unwrap_or_default()
    }
}

/// CPU seconds of this process (every thread), from `getrusage`.
pub fn process_cpu_s() -> Option<f64> {
    #[cfg(unix)]
    {
        // SAFETY: getrusage writes the struct it is given and nothing else.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
            return None;
        }
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        Some(tv(ru.ru_utime) + tv(ru.ru_stime))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// Resident memory of this process in bytes (Linux: `/proc/self/statm`).
pub fn process_rss_bytes() -> Option<u64> {
    rss_bytes_of("self")
}

/// Resident memory of process `pid` (a number, or `self`) in bytes; `None` when it is gone.
pub fn rss_bytes_of(pid: &str) -> Option<u64> {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    #[cfg(unix)]
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    #[cfg(not(unix))]
    let page = 4096;
    Some(pages * page)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(i: u64) -> Point {
        Point {
            t_s: i as f64,
            stages: vec![],
            outputs: i,
            samples: i,
            wait_s: 0.0,
            cpu_s: None,
            rss_bytes: None,
        }
    }

    #[test]
    fn samples_at_most_once_per_interval() {
        let s = Series::default();
        assert!(s.due(0));
        s.push(0, point(0));
        assert!(!s.due(FIRST_INTERVAL_NS - 1));
        assert!(s.due(FIRST_INTERVAL_NS));
    }

    #[test]
    fn a_full_ring_halves_its_resolution_and_doubles_the_interval() {
        let s = Series::default();
        for i in 0..MAX_ROWS as u64 {
            s.push(i * FIRST_INTERVAL_NS, point(i));
        }
        assert_eq!(s.rows().len(), MAX_ROWS);
        s.push(MAX_ROWS as u64 * FIRST_INTERVAL_NS, point(MAX_ROWS as u64));
        let rows = s.rows();
        assert_eq!(rows.len(), MAX_ROWS / 2 + 1);
        assert_eq!(rows[1].outputs, 2);
        let last = MAX_ROWS as u64 * FIRST_INTERVAL_NS;
        assert!(!s.due(last + FIRST_INTERVAL_NS));
        assert!(s.due(last + 2 * FIRST_INTERVAL_NS));
    }

    #[test]
    fn the_process_reports_cpu_and_memory_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(process_cpu_s().unwrap() >= 0.0);
            assert!(process_rss_bytes().unwrap() > 1 << 20);
        }
    }
}
