//! The shared stream's window (`docs/design/SERVICE.md` §2.5): the jobs of a sweep run the same
//! pipeline with the same seed, so each chunk's reply is the same bytes for all of them. The
//! worker that gets a chunk first computes it; the others read its reply from the window, each
//! at its own pace. An entry goes once every other job of the group has read it or left, or —
//! oldest first — when the window is over its byte budget. Readers are tracked by job, not
//! counted: a job that leaves (the leader finishing its epoch first, say) releases only what
//! it had still to read, never what the jobs behind it are still coming for. A job that comes
//! for an entry that was evicted computes it again: a slow job pays CPU but never skips a
//! chunk (tf.data's `CrossTrainerCache` moves a lagging trainer forward instead, so it misses
//! data). A job that asks while the entry is being computed waits for it rather than
//! computing it twice. A job alone on its stage reads through the window too (what the
//! others made for it before they left is there) but keeps nothing of its own.
//!
//! ```
//! use sluice_remote::service::window::StreamWindow;
//! let w = StreamWindow::new(1 << 20);
//! let first = w.get_or_compute(&7u64, 1, &[1, 2], || Ok((vec![1u8, 2], 2)))?;
//! let second = w.get_or_compute(&7u64, 2, &[1, 2], || unreachable!("read from the window"))?;
//! assert!(std::sync::Arc::ptr_eq(&first, &second));
//! assert_eq!(w.stats().computed, 1);
//! # Ok::<(), sluice_core::Error>(())
//! ```

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use serde::Serialize;
use sluice_core::Result;

use super::fair::JobId;

/// What the window did, for the service's status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WindowStats {
    /// Replies computed (first reads, and reads of evicted entries).
    pub computed: u64,
    /// Reads served from the window.
    pub hits: u64,
    /// Reads that waited for an entry being computed.
    pub waits: u64,
    /// Entries dropped over budget before every job had read them.
    pub evicted: u64,
}

impl std::ops::AddAssign for WindowStats {
    fn add_assign(&mut self, s: WindowStats) {
        self.computed += s.computed;
        self.hits += s.hits;
        self.waits += s.waits;
        self.evicted += s.evicted;
    }
}

#[derive(Debug)]
enum Slot<V> {
    Computing,
    Ready {
        value: Arc<V>,
        bytes: u64,
        /// Jobs of the group still to read it.
        pending: Vec<JobId>,
    },
}

#[derive(Debug)]
struct State<K, V> {
    slots: HashMap<K, Slot<V>>,
    /// Ready entries, oldest first (for eviction).
    order: VecDeque<K>,
    bytes: u64,
    stats: WindowStats,
}

/// Replies shared by the jobs of a stream group, bounded by bytes.
#[derive(Debug)]
pub struct StreamWindow<K, V> {
    budget: u64,
    state: Mutex<State<K, V>>,
    filled: Condvar,
}

impl<K: Hash + Eq + Clone, V> StreamWindow<K, V> {
    /// A window holding at most `budget` bytes of replies.
    pub fn new(budget: u64) -> Self {
        StreamWindow {
            budget,
            state: Mutex::new(State {
                slots: HashMap::new(),
                order: VecDeque::new(),
                bytes: 0,
                stats: WindowStats::default(),
            }),
            filled: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<K, V>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The reply for `key`, as `job` of `group` (the stream's jobs now) reads it: from the
    /// window, after waiting for another job computing it, or computed now by `compute`,
    /// which returns the reply and its size in bytes. What this job computes is kept for the
    /// rest of `group`. A failed computation is not kept: the error goes to this caller, and
    /// the next one computes again.
    pub fn get_or_compute(
        &self,
        key: &K,
        job: JobId,
        group: &[JobId],
        compute: impl FnOnce() -> Result<(V, u64)>,
    ) -> Result<Arc<V>> {
        let mut st = self.lock();
        loop {
            match st.slots.get_mut(key) {
                Some(Slot::Ready { value, pending, .. }) => {
                    let value = value.clone();
                    // A job that joined after the entry was made reads it too, but nobody
                    // waits on it.
                    pending.retain(|&j| j != job);
                    if pending.is_empty() {
                        st.remove(key);
                    }
                    st.stats.hits += 1;
                    return Ok(value);
                }
                Some(Slot::Computing) => {
                    st.stats.waits += 1;
                    st = self.filled.wait(st).unwrap_or_else(|p| p.into_inner());
                }
                None => break,
            }
        }
        st.slots.insert(key.clone(), Slot::Computing);
        st.stats.computed += 1;
        drop(st);
        // Should `compute` panic, the guard clears the mark, so waiters compute instead of
        // waiting for ever.
        let guard = Computing { window: self, key };
        let made = compute();
        std::mem::forget(guard);
        let mut st = self.lock();
        st.slots.remove(key);
        let out = made.map(|(value, bytes)| {
            let value = Arc::new(value);
            // This caller has read it; a reply bigger than the whole window is not kept.
            let pending: Vec<JobId> = group.iter().copied().filter(|&j| j != job).collect();
            if !pending.is_empty() && bytes <= self.budget {
                st.slots.insert(
                    key.clone(),
                    Slot::Ready {
                        value: value.clone(),
                        bytes,
                        pending,
                    },
                );
                st.order.push_back(key.clone());
                st.bytes += bytes;
                while st.bytes > self.budget {
                    let Some(oldest) = st.order.front().cloned() else {
                        break;
                    };
                    st.remove(&oldest);
                    st.stats.evicted += 1;
                }
            }
            value
        });
        drop(st);
        self.filled.notify_all();
        out
    }

    /// `job` left the group: no entry waits for it any more.
    pub fn reader_left(&self, job: JobId) {
        let mut st = self.lock();
        let done: Vec<K> = st
            .slots
            .iter_mut()
            .filter_map(|(k, s)| match s {
                Slot::Ready { pending, .. } => {
                    pending.retain(|&j| j != job);
                    pending.is_empty().then(|| k.clone())
                }
                Slot::Computing => None,
            })
            .collect();
        for k in done {
            st.remove(&k);
        }
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// Entries held now (ready or being computed).
    pub fn len(&self) -> usize {
        self.lock().slots.len()
    }

    /// Whether the window holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What the window did so far.
    pub fn stats(&self) -> WindowStats {
        self.lock().stats
    }
}

/// Clears a `Computing` mark whose computation unwound.
struct Computing<'a, K: Hash + Eq + Clone, V> {
    window: &'a StreamWindow<K, V>,
    key: &'a K,
}

impl<K: Hash + Eq + Clone, V> Drop for Computing<'_, K, V> {
    fn drop(&mut self) {
        self.window.lock().slots.remove(self.key);
        self.window.filled.notify_all();
    }
}

impl<K: Hash + Eq + Clone, V> State<K, V> {
    /// Drops a ready entry and its bytes.
    fn remove(&mut self, key: &K) {
        if let Some(Slot::Ready { bytes, .. }) = self.slots.remove(key) {
            self.bytes -= bytes;
            self.order.retain(|k| k != key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::mpsc;

    use super::*;
    use sluice_core::Error;

    fn reply(n: u8, bytes: u64) -> Result<(Vec<u8>, u64)> {
        Ok((vec![n], bytes))
    }

    fn twice() -> Result<(Vec<u8>, u64)> {
        panic!("computed twice")
    }

    #[test]
    fn a_chunk_is_computed_once_for_the_group_and_dropped_after_the_last_read() {
        let w = StreamWindow::new(100);
        let a = w
            .get_or_compute(&1, 1, &[1, 2, 3], || reply(1, 10))
            .unwrap();
        assert_eq!((w.len(), w.bytes()), (1, 10));
        let b = w.get_or_compute(&1, 3, &[1, 2, 3], twice).unwrap();
        assert_eq!(w.len(), 1, "one reader left");
        // A job reading again (a resent chunk) is not another reader.
        w.get_or_compute(&1, 3, &[1, 2, 3], twice).unwrap();
        assert_eq!(w.len(), 1, "job 2 has still to read it");
        let c = w.get_or_compute(&1, 2, &[1, 2, 3], twice).unwrap();
        assert!(Arc::ptr_eq(&a, &b) && Arc::ptr_eq(&b, &c));
        assert_eq!((w.len(), w.bytes()), (0, 0), "every job read it");
        let s = w.stats();
        assert_eq!((s.computed, s.hits, s.evicted), (1, 3, 0));
    }

    #[test]
    fn a_job_asking_while_another_computes_waits_for_that_reply() {
        let w = Arc::new(StreamWindow::new(100));
        let computed = Arc::new(AtomicUsize::new(0));
        let (started_tx, started) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let first = {
            let (w, computed) = (w.clone(), computed.clone());
            std::thread::spawn(move || {
                w.get_or_compute(&5, 1, &[1, 2], || {
                    computed.fetch_add(1, SeqCst);
                    started_tx.send(()).unwrap();
                    go_rx.recv().unwrap();
                    reply(5, 1)
                })
                .unwrap()
            })
        };
        started.recv().unwrap();
        let second = {
            let (w, computed) = (w.clone(), computed.clone());
            std::thread::spawn(move || {
                w.get_or_compute(&5, 2, &[1, 2], || {
                    computed.fetch_add(1, SeqCst);
                    reply(6, 1)
                })
                .unwrap()
            })
        };
        go.send(()).unwrap();
        let (a, b) = (first.join().unwrap(), second.join().unwrap());
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(computed.load(SeqCst), 1);
        assert!(w.is_empty());
    }

    #[test]
    fn over_budget_the_oldest_entries_go_and_a_late_job_computes_them_again() {
        let w = StreamWindow::new(10);
        for k in 0..4u8 {
            w.get_or_compute(&k, 1, &[1, 2], || reply(k, 4)).unwrap();
        }
        // 4 + 4 fit in 10: entries 0 and 1 were evicted as 2 and 3 came.
        assert_eq!((w.len(), w.bytes(), w.stats().evicted), (2, 8, 2));
        let again = w.get_or_compute(&0, 2, &[1, 2], || reply(0, 4)).unwrap();
        assert_eq!(*again, vec![0u8]);
        assert_eq!(
            w.stats().computed,
            5,
            "the lagging job paid for chunk 0, it did not skip it"
        );
        // A reply larger than the whole window is handed on, not kept (nothing else goes).
        let (held, evicted) = (w.len(), w.stats().evicted);
        w.get_or_compute(&9, 1, &[1, 2], || reply(9, 11)).unwrap();
        assert_eq!((w.len(), w.stats().evicted), (held, evicted));
        assert!(w.bytes() <= 10);
    }

    #[test]
    fn a_job_leaving_releases_what_only_it_had_left_to_read() {
        let w = StreamWindow::new(100);
        w.get_or_compute(&1, 1, &[1, 2], || reply(1, 5)).unwrap();
        w.get_or_compute(&2, 1, &[1, 2, 3], || reply(2, 5)).unwrap();
        w.reader_left(2);
        assert_eq!(
            (w.len(), w.bytes()),
            (1, 5),
            "entry 1 waited only for the job that left"
        );
        w.get_or_compute(&2, 3, &[1, 3], twice).unwrap();
        assert!(w.is_empty());
    }

    #[test]
    fn the_leader_leaving_keeps_what_the_jobs_behind_it_have_still_to_read() {
        // Job 1 runs ahead and finishes its epoch first; jobs 2 and 3 still come for its
        // chunks, each at its own pace.
        let w = StreamWindow::new(100);
        for k in 0..4u8 {
            w.get_or_compute(&k, 1, &[1, 2, 3], || reply(k, 5)).unwrap();
        }
        w.get_or_compute(&0, 2, &[1, 2, 3], twice).unwrap();
        w.reader_left(1);
        assert_eq!(w.len(), 4, "every entry still has a job behind to read it");
        for k in 0..4u8 {
            w.get_or_compute(&k, 3, &[2, 3], twice).unwrap();
        }
        assert_eq!(w.len(), 3, "chunks 1-3 wait for job 2 alone");
        w.reader_left(2);
        assert!(w.is_empty());
        assert_eq!(w.stats().computed, 4);
    }

    #[test]
    fn a_failed_computation_is_not_kept_and_the_next_read_computes_again() {
        let w: StreamWindow<u8, Vec<u8>> = StreamWindow::new(100);
        let e = w
            .get_or_compute(&1, 1, &[1, 2], || Err(Error::invalid("bad chunk")))
            .unwrap_err();
        assert!(e.to_string().contains("bad chunk"));
        assert!(w.is_empty());
        let v = w.get_or_compute(&1, 2, &[1, 2], || reply(1, 1)).unwrap();
        assert_eq!(*v, vec![1u8]);
        assert_eq!(w.stats().computed, 2);
    }

    #[test]
    fn a_computation_that_panics_leaves_no_mark_to_wait_on() {
        let w: StreamWindow<u8, Vec<u8>> = StreamWindow::new(100);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            w.get_or_compute(&1, 1, &[1, 2], || panic!("op bug"))
        }));
        assert!(unwound.is_err());
        assert!(w.is_empty());
        assert_eq!(
            *w.get_or_compute(&1, 2, &[1, 2], || reply(1, 1)).unwrap(),
            vec![1u8]
        );
    }

    #[test]
    fn a_single_reader_keeps_nothing() {
        let w = StreamWindow::new(100);
        w.get_or_compute(&1, 1, &[1], || reply(1, 5)).unwrap();
        assert!(w.is_empty());
    }
}
