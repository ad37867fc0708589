//! A parallel stage's reorder window, grown with the measured tail of its chunk latencies
//! when a slow chunk at the head is what holds the stage up.
//!
//! Outputs leave a parallel stage in input order (that is what keeps a run a pure function
//! of seed, epoch and world), so a slow chunk at the head holds everything behind it. The
//! other workers keep going only while the window of chunks between the dispatcher and the
//! consumer has room: during the head's `t_tail`, each of the other `w − 1` workers finishes
//! about `t_tail / t_mean` chunks, and all of them must fit. A fixed window of 6 chunks per
//! worker covers a 6× tail; a 50× tail (a 50 MP image among thumbnails, a pathological
//! regex line) stalled 16 workers for most of each slow sample (0.36–0.74× of the work's
//! rate). So the window's limit follows the measurement — `1 + (w − 1) · t_tail / t_mean`
//! chunks with a quarter more for tails that overlap — once a stall shows it is needed: the
//! window full while the consumer waits for the head. A window full of finished chunks is
//! the next stage being slow (backpressure); growing it would only hold more memory, so it
//! does not. The limit is never below the planned depth and never above a byte budget
//! ([`WINDOW_BYTES`] of the stage's measured output), [`MAX_PER_WORKER`] chunks per worker,
//! or the planned depth while a memory cap is half used ([`MemoryCap::under_pressure`]: a
//! larger window lets more slow samples — often the big ones — run at once). It falls back
//! to the plan once no stall has been seen for [`RELAX_CHUNKS`] chunks.
//!
//! The order is untouched: only how far ahead the workers may run changes.
//! `SLUICE_TAIL_WINDOW=0` pins every window at its planned depth (what
//! `benchmarks/slow_samples.py --compare` measures against).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::MemoryCap;

/// The most bytes a grown window holds (the planned depth may hold more: it is never cut).
pub(crate) const WINDOW_BYTES: f64 = 64.0 * 1024.0 * 1024.0;
/// The most chunks per worker a window grows to.
pub(crate) const MAX_PER_WORKER: usize = 64;
/// Chunks over which the tail estimate decays to half: a tail seen once still counts for
/// the next few hundred chunks (a 5 % tail recurs every 20), then fades.
const TAIL_HALF_LIFE: f64 = 512.0;
/// Chunks after the last stall at which the window goes back to its planned depth.
pub(crate) const RELAX_CHUNKS: u64 = 4 * TAIL_HALF_LIFE as u64;
/// The mean's smoothing: about the last 64 chunks.
const MEAN_WEIGHT: f64 = 1.0 / 64.0;
const NEVER: u64 = u64::MAX;

#[derive(Debug, Default)]
struct Latency {
    chunks: u64,
    mean_ns: f64,
    tail_ns: f64,
}

/// The window of one parallel stage: the dispatcher [`acquire`](Self::acquire)s a place
/// before queueing a chunk's reply slot, the consumer side [`release`](Self::release)s it
/// when it takes the slot and says when it waits for the head
/// ([`head_waiting`](Self::head_waiting)), and the workers [`observe`](Self::observe) each
/// chunk's latency.
pub(crate) struct TailWindow {
    workers: usize,
    base: usize,
    cap: usize,
    memory: Option<Arc<MemoryCap>>,
    /// What the measured tail asks for.
    wanted: AtomicUsize,
    /// What the dispatcher may hold now.
    limit: AtomicUsize,
    latency: Mutex<Latency>,
    head_waiting: AtomicBool,
    /// The chunk count at the last stall ([`NEVER`] before one).
    stalled_at: AtomicU64,
    /// Slots queued and not yet taken; `None` once the consumer side is gone.
    queued: Mutex<Option<usize>>,
    room: Condvar,
}

impl TailWindow {
    /// A window of `base` chunks (the planned depth) for `workers` workers, growing only
    /// while `memory` (the run's cap, if any) has room.
    pub(crate) fn new(workers: usize, base: usize, memory: Option<Arc<MemoryCap>>) -> Self {
        let (workers, base) = (workers.max(1), base.max(1));
        let grows = std::env::var("SLUICE_TAIL_WINDOW").map_or(true, |v| v.trim() != "0");
        TailWindow {
            workers,
            base,
            cap: if grows {
                base.max(MAX_PER_WORKER * workers)
            } else {
                base
            },
            memory,
            wanted: AtomicUsize::new(base),
            limit: AtomicUsize::new(base),
            latency: Mutex::new(Latency::default()),
            head_waiting: AtomicBool::new(false),
            stalled_at: AtomicU64::new(NEVER),
            queued: Mutex::new(Some(0)),
            room: Condvar::new(),
        }
    }

    /// The most slots the window can ever hold (the slot queue's capacity).
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// The current limit.
    pub(crate) fn limit(&self) -> usize {
        self.limit.load(Relaxed)
    }

    /// Waits for a place in the window; false when the consumer side is gone.
    pub(crate) fn acquire(&self) -> bool {
        let mut q = self.queued.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match *q {
                None => return false,
                Some(n) if n < self.limit() => {
                    *q = Some(n + 1);
                    return true;
                }
                // Full while the consumer waits for the head: a stall the tail explains.
                Some(_) if self.head_waiting.load(Relaxed) && self.stalled() => {}
                // The limit can rise without a release (a stall, an observation): look again.
                Some(_) => {
                    q = self
                        .room
                        .wait_timeout(q, Duration::from_millis(20))
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
    }

    /// Records a stall; true when the limit rose.
    fn stalled(&self) -> bool {
        let chunks = self
            .latency
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .chunks;
        self.stalled_at.store(chunks, Relaxed);
        let want = self.wanted.load(Relaxed);
        self.limit.fetch_max(want, Relaxed) < want
    }

    /// The consumer side took a slot.
    pub(crate) fn release(&self) {
        let mut q = self.queued.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = q.as_mut() {
            *n = n.saturating_sub(1);
        }
        self.room.notify_one();
    }

    /// The consumer side waits for the head's reply (`true`), or no longer does.
    pub(crate) fn head_waiting(&self, waiting: bool) {
        self.head_waiting.store(waiting, Relaxed);
        if waiting {
            self.room.notify_all();
        }
    }

    /// The consumer side is gone: the dispatcher stops waiting.
    pub(crate) fn close(&self) {
        *self.queued.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.room.notify_all();
    }

    /// A chunk took `ns` on its worker; `chunk_bytes` is the mean size of the stage's output
    /// chunks so far. Returns the limit now.
    pub(crate) fn observe(&self, ns: u64, chunk_bytes: f64) -> usize {
        let mut l = self.latency.lock().unwrap_or_else(|p| p.into_inner());
        let ns = ns as f64;
        l.chunks += 1;
        l.mean_ns = if l.chunks == 1 {
            ns
        } else {
            l.mean_ns + (ns - l.mean_ns) * MEAN_WEIGHT.max(1.0 / l.chunks as f64)
        };
        l.tail_ns = ns.max(l.tail_ns * 0.5f64.powf(1.0 / TAIL_HALF_LIFE));
        let want = self.target(l.mean_ns, l.tail_ns, chunk_bytes);
        let chunks = l.chunks;
        drop(l);
        self.wanted.store(want, Relaxed);
        let since = chunks.wrapping_sub(self.stalled_at.load(Relaxed));
        let stalled = self.stalled_at.load(Relaxed) != NEVER && since < RELAX_CHUNKS;
        let limit = if stalled { want } else { self.base };
        if self.limit.swap(limit, Relaxed) < limit {
            self.room.notify_all();
        }
        limit
    }

    /// The limit these measurements ask for.
    fn target(&self, mean_ns: f64, tail_ns: f64, chunk_bytes: f64) -> usize {
        let pressed = self.memory.as_ref().is_some_and(|m| m.under_pressure());
        if mean_ns <= 0.0 || pressed {
            return self.base;
        }
        let ahead = (self.workers - 1) as f64 * tail_ns / mean_ns;
        let want = (1.25 * (1.0 + ahead)).ceil() as usize;
        let by_bytes = if chunk_bytes > 0.0 {
            (WINDOW_BYTES / chunk_bytes) as usize
        } else {
            usize::MAX
        };
        want.min(by_bytes).min(self.cap).max(self.base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A window of 6 chunks per worker that has seen 100 chunks of 1 ms.
    fn warmed(workers: usize) -> TailWindow {
        let w = TailWindow::new(workers, 6 * workers, None);
        for _ in 0..100 {
            w.observe(MS, 1.0);
        }
        w
    }

    /// Fills `w` and has the dispatcher find it full while the consumer waits for the head.
    fn stall(w: &TailWindow) {
        while w.queued.lock().unwrap().unwrap() < w.limit() {
            assert!(w.acquire());
        }
        w.head_waiting(true);
        assert!(w.acquire(), "a stall with a tail to explain it makes room");
        w.head_waiting(false);
    }

    #[test]
    fn even_latencies_keep_the_planned_depth_even_through_a_stall() {
        let w = warmed(16);
        for _ in 0..1000 {
            w.observe(MS, 1000.0);
        }
        assert_eq!(w.limit(), 96);
        w.queued.lock().unwrap().replace(96);
        w.head_waiting(true);
        assert!(!w.stalled(), "nothing to grow for");
        assert_eq!(w.limit(), 96);
    }

    #[test]
    fn a_tail_grows_the_window_once_it_stalls_by_what_the_other_workers_finish_meanwhile() {
        let w = TailWindow::new(16, 96, None);
        // 5 % of chunks 50× the rest.
        for i in 0..2000u64 {
            w.observe(if i % 20 == 7 { 50 * MS } else { MS }, 1000.0);
        }
        assert_eq!(w.limit(), 96, "no stall seen yet");
        let l = w.latency.lock().unwrap();
        let (mean, tail) = (l.mean_ns / MS as f64, l.tail_ns / MS as f64);
        drop(l);
        assert!((2.0..5.5).contains(&mean), "mean {mean} ms");
        assert!((45.0..=50.0).contains(&tail), "tail {tail} ms");
        stall(&w);
        // 1.25 × (1 + 15 × tail / mean), within the cap of 64 per worker.
        let want = (1.25 * (1.0 + 15.0 * tail / mean)).ceil() as usize;
        assert_eq!(w.limit(), want.clamp(96, 1024));
        assert!(w.limit() > 96 * 2, "{}", w.limit());
        // Later observations keep it while the stall is recent.
        assert!(w.observe(MS, 1000.0) > 96 * 2);
    }

    #[test]
    fn a_window_full_of_finished_chunks_does_not_grow() {
        let w = warmed(4);
        w.observe(1000 * MS, 1.0);
        while w.queued.lock().unwrap().unwrap() < w.limit() {
            assert!(w.acquire());
        }
        // The next stage is slow, not the head: the dispatcher waits, the window stays.
        let w = Arc::new(w);
        let w2 = w.clone();
        let t = std::thread::spawn(move || w2.acquire());
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(w.limit(), 24);
        w.close();
        assert!(!t.join().unwrap());
    }

    #[test]
    fn the_window_never_passes_its_byte_budget_or_cap_and_never_drops_below_the_plan() {
        // Huge chunks: the byte budget holds the window at the planned depth.
        let w = warmed(4);
        w.observe(1000 * MS, WINDOW_BYTES / 2.0);
        assert_eq!(w.wanted.load(Relaxed), 24);
        // Small chunks: the per-worker cap.
        let w = warmed(8);
        w.observe(10_000 * MS, 1.0);
        stall(&w);
        assert_eq!(w.limit(), 8 * MAX_PER_WORKER);
        assert_eq!(w.capacity(), 8 * MAX_PER_WORKER);
        // A byte budget between the two.
        let w = warmed(4);
        w.observe(10_000 * MS, WINDOW_BYTES / 100.0);
        stall(&w);
        assert_eq!(w.limit(), 100);
    }

    #[test]
    fn a_memory_cap_half_used_keeps_the_plan() {
        let cap = Arc::new(MemoryCap::new(1 << 20));
        cap.rss(); // This process holds more than half a MiB.
        let w = TailWindow::new(8, 48, Some(cap));
        for _ in 0..100 {
            w.observe(MS, 1.0);
        }
        w.observe(100 * MS, 1.0);
        assert_eq!(w.wanted.load(Relaxed), 48);
    }

    #[test]
    fn an_old_tail_fades_and_the_window_returns_to_the_plan() {
        let w = warmed(8);
        w.observe(100 * MS, 0.0);
        stall(&w);
        assert!(w.limit() > 48);
        for _ in 0..RELAX_CHUNKS {
            w.observe(MS, 0.0);
        }
        assert_eq!(w.limit(), 48);
    }

    #[test]
    fn acquire_waits_for_a_release_and_ends_on_close() {
        let w = Arc::new(TailWindow::new(1, 2, None));
        assert!(w.acquire() && w.acquire());
        let (tx, rx) = std::sync::mpsc::channel();
        let w2 = w.clone();
        let t = std::thread::spawn(move || tx.send(w2.acquire()).unwrap());
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "full");
        w.release();
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(true));
        t.join().unwrap();
        // Full again; closing ends the wait.
        let w2 = w.clone();
        let t = std::thread::spawn(move || w2.acquire());
        std::thread::sleep(Duration::from_millis(30));
        w.close();
        assert!(!t.join().unwrap());
        assert!(!w.acquire());
    }
}
