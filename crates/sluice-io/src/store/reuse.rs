//! Which cached objects a full node cache keeps: those used within a window of time that
//! covers an epoch.
//!
//! A training job reads its dataset once per epoch. When the cache's cap is below the
//! dataset, least-recently-used eviction is the worst policy for that loop: every object is
//! evicted before its next epoch asks for it (in the same order each epoch, all of them), so
//! each epoch fetches everything again *and* pays a write and an eviction per object. A
//! quarter-sized cache read 0.50-0.57x local where no cache read 0.77-0.84x (docs/BENCHMARKS.md,
//! issue 38). CoorDL's MinIO cache (Mohan et al., VLDB 2021) keeps what it holds once full,
//! so each epoch hits the cap's share of the dataset and writes nothing. Never evicting would
//! also keep yesterday's dataset forever; so a full cache keeps the objects last used within
//! a window — ten minutes, or four times the median time this process's hits took to come
//! back when that is longer (epochs longer than ten minutes) — reads the objects it cannot
//! store without storing them, and evicts the rest, least recently used first.
//!
//! The window does not wait for hits to start: under LRU a loop in a fixed order never hits,
//! so a first cut that kept objects only once this process had seen one come back stayed
//! plain LRU in that case, at 0 hits. Nor is it only four times the hits' idle time: LRU
//! holds only what was stored last, so epoch 2's first hits come back soon after they were
//! stored, and a window of four times those evicted most of what epoch 1 left before epoch
//! 2 reached it.
//!
//! What it costs: a node that moves on to other data keeps caching nothing new for up to ten
//! minutes, until the objects of the old data have been idle that long.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// Hits remembered: the window follows the workload's recent reuse.
const KEPT: usize = 64;
/// An object is kept while its idle time is under this many median reuse intervals: a loop
/// over the data reuses each object about once per epoch, and the intervals of a pass range
/// up to twice the median.
const WINDOWS: u32 = 4;
/// The shortest window: an epoch's objects stay while the next epoch comes round to them.
/// Epochs longer than this widen it through their hits' idle times once some come back (a
/// shuffled order); a fixed order with longer epochs churns again, as under LRU.
const FLOOR: Duration = Duration::from_secs(600);
/// When nothing can be evicted, the cache is taken as full (no scan) until the first kept
/// object would leave the window, or for at most this long: other processes free room too.
const FULL_AT_MOST: Duration = Duration::from_secs(5);

/// The recent reuse of one process's cached objects.
#[derive(Debug, Default)]
pub(super) struct Reuse {
    /// Idle time of each recent hit's object (since it was stored or last used).
    idle: Mutex<VecDeque<Duration>>,
    /// The cache holds nothing it may evict until then (no scan before).
    full_until: Mutex<Option<SystemTime>>,
}

impl Reuse {
    /// A hit on an object idle for `idle`. Hits on objects idle for under a tenth of a second
    /// (read again at once, or by another process right after it stored them) are not a
    /// loop's reuse and are not counted.
    pub(super) fn hit(&self, idle: Duration) {
        if idle < Duration::from_millis(100) {
            return;
        }
        let mut q = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() == KEPT {
            q.pop_front();
        }
        q.push_back(idle);
    }

    /// Objects used more recently than this are kept.
    pub(super) fn window(&self) -> Duration {
        let q = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let mut idle: Vec<Duration> = q.iter().copied().collect();
        drop(q);
        if idle.is_empty() {
            return FLOOR;
        }
        let mid = idle.len() / 2;
        let (_, median, _) = idle.select_nth_unstable(mid);
        (*median * WINDOWS).max(FLOOR)
    }

    /// Whether a scan would find nothing to evict at `now`.
    pub(super) fn full_at(&self, now: SystemTime) -> bool {
        let until = self.full_until.lock().unwrap_or_else(|p| p.into_inner());
        until.is_some_and(|t| now < t)
    }

    /// A scan at `now` found nothing more to evict; the first kept object leaves the window
    /// at `next` (if any is kept).
    pub(super) fn found_full(&self, now: SystemTime, next: Option<SystemTime>) {
        let cap = now + FULL_AT_MOST;
        let until = next.map_or(cap, |t| t.min(cap));
        *self.full_until.lock().unwrap_or_else(|p| p.into_inner()) = Some(until);
    }

    /// Looks at the directory again on the next miss.
    #[cfg(test)]
    pub(super) fn forget_full(&self) {
        *self.full_until.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_follows_the_median_reuse_above_a_floor() {
        let r = Reuse::default();
        assert_eq!(r.window(), FLOOR);
        r.hit(Duration::from_millis(20)); // read again at once: not a loop's reuse
        assert_eq!(r.window(), FLOOR);
        r.hit(Duration::from_secs(5));
        assert_eq!(r.window(), FLOOR);
        // Epochs of half an hour: four of them.
        for s in [1_800, 1_700, 1_900, 36_000] {
            r.hit(Duration::from_secs(s));
        }
        // One object back after ten hours does not stretch the window.
        assert_eq!(r.window(), Duration::from_secs(1_800) * WINDOWS);
        for _ in 0..KEPT {
            r.hit(Duration::from_secs(2));
        }
        assert_eq!(r.window(), FLOOR);
    }

    #[test]
    fn a_full_cache_is_not_scanned_again_until_something_may_leave() {
        let r = Reuse::default();
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        assert!(!r.full_at(now));
        r.found_full(now, Some(now + Duration::from_secs(2)));
        assert!(r.full_at(now + Duration::from_secs(1)));
        assert!(!r.full_at(now + Duration::from_secs(2)));
        // Nothing kept expires soon: looked at again after FULL_AT_MOST.
        r.found_full(now, Some(now + Duration::from_secs(3600)));
        assert!(r.full_at(now + FULL_AT_MOST - Duration::from_millis(1)));
        assert!(!r.full_at(now + FULL_AT_MOST));
    }
}
