//! `iter(memory_limit=...)`: a cap on the memory the run's process tree holds (resident set:
//! this process and the worker processes it started).
//!
//! Every byte a pipeline holds enters through its source, so the cap is kept at the source:
//! before it hands the next chunk on, it checks the tree's resident memory and, if the chunk
//! (its measured bytes as the stages make it, twice: its input and output may coexist) would
//! not fit under the cap, holds it until enough of what is in flight has been consumed. Queues,
//! prefetch and worker counts stay as planned; only the amount of data in them is bounded, by
//! what the process actually holds rather than by estimates of it. One exception keeps the run
//! going: when the consumer is waiting for output and no stage is working on anything, holding
//! back cannot free anything (what is in flight is all there is, and a batch may be waiting for
//! more of it), so once both have lasted longer than twice the longest gap between outputs so
//! far (and ≥ 100 ms) one chunk goes — counted as `forced`, the sign of a cap below what the
//! pipeline needs to make one output — and the next needs as long again. A consumer that
//! waits on busy workers (a slow machine, a slow op) is never a reason to let more in: on a
//! busy CI machine that rule, counting the wait alone and forcing every chunk after it, let a
//! capped run 107 MiB past its cap. The time held back is reported (`stats()`: `memory`), with a warning at the
//! end of an iteration it slowed.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::control::Control;
use crate::stats::series::rss_bytes_of;
use crate::stats::PipelineStats;

/// How often the list of child processes is refreshed (scanning `/proc` costs ~1 ms).
const CHILDREN_EVERY: Duration = Duration::from_secs(1);
/// How often a held chunk asks the allocator to give freed memory back.
const TRIM_EVERY: Duration = Duration::from_millis(20);
/// How long a held chunk sleeps between checks.
const POLL: Duration = Duration::from_millis(1);
/// The shortest wait of the consumer that counts as a stall.
const MIN_STALL_NS: u64 = 100_000_000;
/// Within a stall, how long the stages must have been quiet after working on the chunk let
/// through before the next goes (a hand-off between stages takes microseconds).
const QUIET_NS: u64 = 10_000_000;

/// Nanoseconds on a process-wide monotonic clock (never 0).
fn now_ns() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64 + 1
}

/// How the consumer waits for outputs: since when it has waited with nothing ready, and the
/// longest gap between two outputs so far.
#[derive(Debug, Default)]
pub(super) struct ConsumerWait {
    since: AtomicU64,
    last_output: AtomicU64,
    max_gap: AtomicU64,
    /// A memory cap held a chunk since the last output: that gap says nothing of how fast
    /// the pipeline makes outputs (counting it would make the cap ever more patient).
    held: std::sync::atomic::AtomicBool,
    /// The (epoch, position) of the last output handed over.
    reached: Mutex<Option<(u64, u64)>>,
    /// Chunks the stages work on now ([`Working`]), and when that last fell to none.
    working: AtomicU64,
    idle_since: AtomicU64,
    /// When a chunk was last let through for a stall (0: none since the last output).
    forced_at: AtomicU64,
}

/// A stage works on a chunk while this lives ([`ConsumerWait::working`]).
pub(super) struct Working<'a>(&'a ConsumerWait);

impl Drop for Working<'_> {
    fn drop(&mut self) {
        if self.0.working.fetch_sub(1, Relaxed) == 1 {
            self.0.idle_since.store(now_ns(), Relaxed);
        }
    }
}

impl ConsumerWait {
    /// The consumer waits with nothing ready (from now, if it was not waiting already).
    pub(super) fn waiting(&self) {
        let _ = self.since.compare_exchange(0, now_ns(), Relaxed, Relaxed);
    }
    /// An output was handed to the consumer.
    pub(super) fn delivered(&self) {
        let now = now_ns();
        let last = self.last_output.swap(now, Relaxed);
        if last != 0 && !self.held.swap(false, Relaxed) {
            self.max_gap.fetch_max(now - last, Relaxed);
        }
        self.since.store(0, Relaxed);
        self.forced_at.store(0, Relaxed);
    }
    /// A stage starts work on a chunk (until the guard is dropped).
    pub(super) fn working(&self) -> Working<'_> {
        self.working.fetch_add(1, Relaxed);
        Working(self)
    }
    /// Whether the consumer is waiting for output now.
    fn is_waiting(&self) -> bool {
        self.since.load(Relaxed) != 0
    }

    /// The output handed over was at `cursor`: the items before it are out of the pipeline.
    pub(super) fn reached(&self, cursor: &super::Cursor) {
        *self.reached.lock().unwrap_or_else(|p| p.into_inner()) = Some((cursor.epoch, cursor.pos));
    }

    fn reached_at(&self) -> Option<(u64, u64)> {
        *self.reached.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The consumer has waited, with no stage working, longer than any gap between outputs
    /// so far would explain — or, once a chunk was let through for that, the stages have
    /// worked on it and gone quiet again with still no output (one output needs more input
    /// than the cap admits: the chunks go one at a time, as fast as the stages take them).
    fn stalled(&self) -> bool {
        let since = self.since.load(Relaxed);
        if since == 0 || self.working.load(Relaxed) != 0 {
            return false;
        }
        let now = now_ns();
        let idle_since = self.idle_since.load(Relaxed);
        let quiet = now.saturating_sub(idle_since);
        let forced_at = self.forced_at.load(Relaxed);
        if forced_at != 0 && idle_since > forced_at {
            return quiet >= QUIET_NS;
        }
        let patience = MIN_STALL_NS.max(2 * self.max_gap.load(Relaxed));
        now.saturating_sub(since) >= patience && quiet >= patience
    }

    /// A chunk was let through for a stall: the next one waits until the stages have worked
    /// on it, or, if they never do, for a stall as long again.
    fn restart(&self) {
        let since = self.since.load(Relaxed);
        if since != 0 {
            let now = now_ns();
            let _ = self.since.compare_exchange(since, now, Relaxed, Relaxed);
            self.forced_at.store(now, Relaxed);
        }
    }
}

/// The cap and what it did.
#[derive(Debug)]
pub struct MemoryCap {
    limit: u64,
    held_ns: AtomicU64,
    held_chunks: AtomicU64,
    /// Nanoseconds the consumer waited for output while a chunk was held.
    starved_ns: AtomicU64,
    forced: AtomicU64,
    peak: AtomicU64,
    children: Mutex<(Option<Instant>, Vec<u32>)>,
    /// What the process held when the run started.
    base: u64,
    /// When the allocator was last asked to give memory back ([`now_ns`]): at most every
    /// [`TRIM_EVERY`], however many chunks wait (a trim walks the whole heap).
    trimmed: AtomicU64,
    /// Chunks let in and not yet past the consumer: their last item's (epoch, position) and
    /// their length (only the source thread admits).
    admitted: Mutex<std::collections::VecDeque<((u64, u64), u64)>>,
    /// How many stages, the source first, a run's first chunks reach as they go: the sizes
    /// are known once these have measured an item ([`MemoryCap::sized_by`]).
    sized_by: usize,
    /// Big buffers that waited for room ([`super::hold_transient`]), and for how long.
    transient_waits: AtomicU64,
    transient_wait_ns: AtomicU64,
}

/// What [`MemoryCap::predicted`] expects the pipeline to hold with a chunk let in.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Prediction {
    /// This many bytes, with `in_flight` items let in and not yet consumed.
    Bytes { bytes: u64, in_flight: u64 },
    /// Not known: no item's size is measured yet.
    Unknown,
}

/// What the source knows of a chunk it is about to let in.
#[derive(Debug, Clone, Copy)]
pub(super) struct ChunkNeed {
    /// Items in it.
    pub(super) items: u64,
    /// The (epoch, position) of its last item.
    pub(super) last: (u64, u64),
}

/// What [`MemoryCap`] did in a run (`stats()["memory"]`).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct MemoryReport {
    /// The cap, in bytes.
    pub limit: u64,
    /// The highest resident memory of the process tree the source saw, in bytes.
    pub peak_rss: u64,
    /// Seconds the source held chunks back for the cap.
    pub held_s: f64,
    /// Chunks it held back at least once.
    pub held_chunks: u64,
    /// Seconds the consumer waited for output while the source held a chunk: what the cap
    /// cost (holding while the consumer is busy costs nothing).
    pub starved_s: f64,
    /// Chunks let through over the cap because the consumer was waiting for output.
    pub forced: u64,
    /// Big buffers an op waited to make until the process had room for them beside those
    /// of other threads (a 50 MP decode), and the seconds they waited.
    #[serde(default)]
    pub transient_waits: u64,
    #[serde(default)]
    pub transient_wait_s: f64,
}

impl MemoryCap {
    /// A cap of `limit` bytes.
    ///
    /// ```
    /// let cap = sluice_core::exec::MemoryCap::new(1 << 40);
    /// assert!(cap.rss() > 0);
    /// assert_eq!(cap.report().limit, 1 << 40);
    /// ```
    pub fn new(limit: u64) -> Self {
        let mut cap = MemoryCap {
            limit,
            held_ns: AtomicU64::new(0),
            held_chunks: AtomicU64::new(0),
            starved_ns: AtomicU64::new(0),
            forced: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            children: Mutex::new((None, Vec::new())),
            base: 0,
            trimmed: AtomicU64::new(0),
            admitted: Mutex::new(Default::default()),
            sized_by: usize::MAX,
            transient_waits: AtomicU64::new(0),
            transient_wait_ns: AtomicU64::new(0),
        };
        cap.base = cap.rss();
        cap
    }

    /// Sizes count as known once the first `stages` stages (the source first) have measured
    /// an item: those before the first one that holds items back (a shuffle buffer, a batch,
    /// a pack) and that one. Until then the source lets in one chunk per stage thread. By
    /// default every stage on threads of its own.
    ///
    /// ```
    /// let cap = sluice_core::exec::MemoryCap::new(1 << 40).sized_by(2);
    /// assert_eq!(cap.report().limit, 1 << 40);
    /// ```
    pub fn sized_by(mut self, stages: usize) -> Self {
        self.sized_by = stages;
        self
    }

    /// What the pipeline will hold with `chunk` let in: what the process holds now plus the
    /// chunk at its biggest (twice: while it is converted) — or, if more, the process at the
    /// start plus every item in flight at its mean size (those let in may not have grown to
    /// their size yet), the chunk, and an item's copy per worker. [`Prediction::Unknown`]
    /// while no size is measured and the stages have work enough.
    fn predicted(&self, chunk: &ChunkNeed, stats: &PipelineStats, ctl: &Control) -> Prediction {
        let measured = stats.item_bytes(self.sized_by);
        let mut admitted = self.admitted.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(reached) = ctl.wait.reached_at() {
            while admitted.front().is_some_and(|(last, _)| *last <= reached) {
                admitted.pop_front();
            }
        }
        let in_flight: u64 = admitted.iter().map(|(_, n)| n).sum();
        let workers: usize = stats.stages.iter().map(|(info, _)| info.threads).sum();
        let (mean, max) = match measured {
            Some(m) => m,
            // No size is known yet: what is in flight shows the sizes first. Letting in all
            // the queues take instead (22-39 chunks before the first output, with the
            // workers slow to start on a busy machine) put a run with 10x skewed items 7-13
            // MiB past its cap: four 20 MiB items among them, counted at the 2 MiB of the
            // first one measured.
            None if admitted.len() >= workers.max(1) => return Prediction::Unknown,
            None => (0.0, 0.0),
        };
        let rss = self.rss();
        // The chunk at its biggest, and once more for the copies made while it is converted
        // (a Python function's array and the engine's); each worker may hold such a copy.
        let new = chunk.items as f64 * max;
        let now = rss as f64 + 2.0 * new;
        let planned = self.base as f64 + in_flight as f64 * mean + new + workers as f64 * max;
        Prediction::Bytes {
            bytes: now.max(planned) as u64,
            in_flight,
        }
    }

    /// Resident bytes of this process and its children now.
    pub fn rss(&self) -> u64 {
        let me = std::process::id();
        let kids = {
            let mut c = self.children.lock().unwrap_or_else(|p| p.into_inner());
            if c.0.is_none_or(|t| t.elapsed() >= CHILDREN_EVERY) {
                *c = (Some(Instant::now()), children_of(me));
            }
            c.1.clone()
        };
        let rss = |pid: u32| rss_bytes_of(&pid.to_string()).unwrap_or(0);
        let total = rss(me) + kids.into_iter().map(rss).sum::<u64>();
        self.peak.fetch_max(total, Relaxed);
        total
    }

    /// Returns once `chunk` fits under the cap, nothing is in flight or the consumer has
    /// stalled waiting for output (holding on would free nothing), or the run stops.
    pub(super) fn admit(&self, chunk: ChunkNeed, stats: &PipelineStats, ctl: &Control) {
        let mut held: Option<Instant> = None;
        loop {
            if ctl.cancelled() {
                break;
            }
            let in_flight = match self.predicted(&chunk, stats, ctl) {
                Prediction::Bytes { bytes, .. } if bytes <= self.limit => break,
                Prediction::Bytes { in_flight, .. } => in_flight,
                Prediction::Unknown => {
                    // The stages have work; the wait is for a measurement, not for room, so
                    // it is neither a hold nor a cost of the cap. A stall (the first chunks
                    // all filtered out, say) lets the next one go.
                    if ctl.wait.stalled() {
                        ctl.wait.restart();
                        break;
                    }
                    std::thread::sleep(POLL);
                    continue;
                }
            };
            // Memory freed by what was consumed may still count as resident: glibc keeps
            // freed heap memory (big arrays too, once its mmap threshold has grown). Give it
            // back and look again before holding on.
            let now = now_ns();
            let last = self.trimmed.load(Relaxed);
            if now.saturating_sub(last) >= TRIM_EVERY.as_nanos() as u64
                && self
                    .trimmed
                    .compare_exchange(last, now, Relaxed, Relaxed)
                    .is_ok()
            {
                release_freed();
                continue;
            }
            if in_flight == 0 || ctl.wait.stalled() {
                // Nothing downstream will free memory without more input.
                self.forced.fetch_add(1, Relaxed);
                ctl.wait.restart();
                break;
            }
            if held.is_none() {
                held = Some(Instant::now());
                self.held_chunks.fetch_add(1, Relaxed);
                ctl.wait.held.store(true, Relaxed);
            }
            let starved = ctl.wait.is_waiting();
            let t = Instant::now();
            std::thread::sleep(POLL);
            if starved {
                self.starved_ns
                    .fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
            }
        }
        if let Some(t) = held {
            self.held_ns
                .fetch_add(t.elapsed().as_nanos() as u64, Relaxed);
        }
        self.admitted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back((chunk.last, chunk.items));
    }

    /// Whether the tree has reached half the cap: past it, nothing should hold more than it
    /// must (a parallel stage's window stops growing: [`super::tail`]).
    pub(crate) fn under_pressure(&self) -> bool {
        self.peak.load(Relaxed) > self.limit / 2
    }

    /// What it did so far.
    pub fn report(&self) -> MemoryReport {
        MemoryReport {
            limit: self.limit,
            peak_rss: self.peak.load(Relaxed),
            held_s: self.held_ns.load(Relaxed) as f64 * 1e-9,
            held_chunks: self.held_chunks.load(Relaxed),
            starved_s: self.starved_ns.load(Relaxed) as f64 * 1e-9,
            forced: self.forced.load(Relaxed),
            transient_waits: self.transient_waits.load(Relaxed),
            transient_wait_s: self.transient_wait_ns.load(Relaxed) as f64 * 1e-9,
        }
    }

    /// The cap, in bytes.
    pub(super) fn limit(&self) -> u64 {
        self.limit
    }

    /// A big buffer waited `waited` for room ([`super::hold_transient`]).
    pub(super) fn count_transient_wait(&self, waited: Duration) {
        self.transient_waits.fetch_add(1, Relaxed);
        self.transient_wait_ns
            .fetch_add(waited.as_nanos() as u64, Relaxed);
    }
}

/// The cap a run gets unless it sets one: 80 % of the machine's memory, or of its cgroup's
/// limit when that is lower (a container); `None` where neither can be read.
///
/// ```
/// if let Some(limit) = sluice_core::exec::default_memory_limit() {
///     assert!(limit > 0);
/// }
/// ```
pub fn default_memory_limit() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
        line.split_whitespace()
            .nth(1)?
            .parse::<u64>()
            .ok()
            .map(|kb| kb * 1024)
    });
    let cgroup = [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|p| std::fs::read_to_string(p).ok()?.trim().parse::<u64>().ok());
    let machine = match (total, cgroup) {
        (Some(t), Some(c)) => t.min(c),
        (t, c) => t.or(c)?,
    };
    Some(machine / 5 * 4)
}

/// Returns the allocator's free memory to the system (glibc's `malloc_trim`).
fn release_freed() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions; it only releases free memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The descendants of `pid` (children, their children, ...), from `/proc/*/stat`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(u32, u32)> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            // The parent is the 2nd field after the parenthesised command name.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((p, ppid))
        })
        .collect();
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    tree.remove(0);
    tree
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cap_above_the_process_admits_at_once_and_one_below_waits_for_the_consumer() {
        let ctl = Control::default();
        let stats = PipelineStats::new(vec![]);
        let chunk = ChunkNeed {
            items: 4,
            last: (0, 3),
        };
        let roomy = MemoryCap::new(u64::MAX / 2);
        roomy.admit(chunk, &stats, &ctl);
        assert_eq!(roomy.report().held_chunks, 0);
        assert!(roomy.report().peak_rss > 0);
        // Below what the process already holds: only a stalled consumer lets it through.
        let tight = MemoryCap::new(1);
        tight.admit(chunk, &stats, &ctl); // nothing in flight: it goes
        assert_eq!(tight.report().forced, 1);
        ctl.wait.delivered();
        ctl.wait.waiting();
        tight.admit(
            ChunkNeed {
                items: 4,
                last: (0, 7),
            },
            &stats,
            &ctl,
        );
        let r = tight.report();
        assert_eq!((r.held_chunks, r.forced), (1, 2));
        assert!(r.held_s > 0.0, "{r:?}");
        // A stopped run is never held.
        ctl.wait.delivered();
        ctl.stop();
        tight.admit(
            ChunkNeed {
                items: 4,
                last: (0, 11),
            },
            &stats,
            &ctl,
        );
        assert_eq!(tight.report().forced, 2);
    }

    /// Admits `chunk` on another thread while a stage works for `ms`; asserts it was not let
    /// in before the work ended.
    fn admit_after_work(cap: &MemoryCap, chunk: ChunkNeed, ctl: &Control, ms: u64) {
        use std::sync::atomic::AtomicBool;
        let stats = PipelineStats::new(vec![]);
        let done_working = AtomicBool::new(false);
        std::thread::scope(|s| {
            let working = ctl.wait.working();
            let admitted = s.spawn(|| {
                cap.admit(chunk, &stats, ctl);
                done_working.load(Relaxed)
            });
            std::thread::sleep(Duration::from_millis(ms));
            done_working.store(true, Relaxed);
            drop(working);
            assert!(admitted.join().unwrap(), "let in while a stage worked");
        });
    }

    #[test]
    fn a_consumer_waiting_on_busy_stages_forces_nothing_and_a_stall_lets_one_chunk_go() {
        let ctl = Control::default();
        let stats = PipelineStats::new(vec![]);
        let tight = MemoryCap::new(1);
        let need = |pos| ChunkNeed {
            items: 1,
            last: (0, pos),
        };
        tight.admit(need(0), &stats, &ctl); // nothing in flight: it goes
        ctl.wait.waiting();
        // However long the consumer waits, a stage at work may still free memory.
        admit_after_work(&tight, need(1), &ctl, 300);
        assert_eq!(tight.report().forced, 2);
        // The consumer still waits: the next chunk needs a stall of its own, so it is held
        // first (counted, not timed: the hold starts a moment after the stall's clock does,
        // and a busy machine makes that moment long).
        let held = tight.report().held_chunks;
        tight.admit(need(2), &stats, &ctl);
        let r = tight.report();
        assert_eq!(r.forced, 3);
        assert_eq!(r.held_chunks, held + 1, "{r:?}");
        // Within the stall, once the stages have worked on what went and gone quiet, the next
        // chunk goes without a whole new stall; while they work, it waits.
        admit_after_work(&tight, need(3), &ctl, 200);
        assert_eq!(tight.report().forced, 4);
        // An output ends the stall.
        ctl.wait.delivered();
        assert!(!ctl.wait.stalled());
    }

    #[test]
    fn until_a_size_is_measured_only_what_the_stages_work_on_goes_in() {
        use crate::stats::StageInfo;
        let info = |threads| StageInfo {
            name: "map".into(),
            threads,
            inline: false,
            queue_capacity: 4,
            pool: None,
        };
        let stats = PipelineStats::new(vec![info(1), info(2)]);
        let ctl = Control::default();
        // Room for anything: only the unknown sizes hold chunks back.
        let cap = MemoryCap::new(u64::MAX / 2);
        let need = |pos| ChunkNeed {
            items: 1,
            last: (0, pos),
        };
        for pos in 0..3 {
            cap.admit(need(pos), &stats, &ctl);
        }
        // Three chunks for three threads; the fourth waits for a measurement.
        std::thread::scope(|s| {
            let fourth = s.spawn(|| cap.admit(need(3), &stats, &ctl));
            std::thread::sleep(Duration::from_millis(50));
            assert!(!fourth.is_finished(), "let in before any size was known");
            for i in 0..2 {
                let c = stats.counters(i);
                c.items_in.fetch_add(1, Relaxed);
                c.bytes_out.fetch_add(1 << 10, Relaxed);
            }
            fourth.join().unwrap();
        });
        let r = cap.report();
        // Waiting for a size is not the cap holding for room, nor letting anything over it.
        assert_eq!((r.held_chunks, r.forced), (0, 0), "{r:?}");
        // Sizes known, the same cap lets chunks in at once.
        cap.admit(need(4), &stats, &ctl);

        // No size measured and the consumer stalled (the first chunks filtered out, say):
        // one more goes, not counted as forced over the cap.
        let stats = PipelineStats::new(vec![info(1)]);
        let cap = MemoryCap::new(u64::MAX / 2);
        cap.admit(need(0), &stats, &ctl);
        ctl.wait.waiting();
        cap.admit(need(1), &stats, &ctl);
        assert_eq!(cap.report().forced, 0);
    }

    #[test]
    fn children_are_counted() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let kids = children_of(std::process::id());
        assert!(kids.contains(&child.id()), "{kids:?}");
        let _ = child.kill();
        let _ = child.wait();
    }
}
