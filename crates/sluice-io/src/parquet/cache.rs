//! The decoded row groups shared by every Parquet source's reader threads (most recently
//! used last), and the read-ahead that decodes the next row group while a scan converts.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex, OnceLock};

use arrow_array::RecordBatch;
use sluice_core::Result;

use super::ParquetSource;

/// Decoded row groups kept (over all Parquet sources and threads). Unit tests run side by
/// side over this one cache, so there it holds more: no test evicts another's row groups.
pub const CACHED_ROW_GROUPS: usize = if cfg!(test) { 64 } else { 4 };

pub(super) type CacheKey = (u64, usize, usize);
/// A cached row group: being decoded, decoded, or neither (not yet, or its decode failed:
/// the next reader tries itself and meets its own error). Readers that find it being
/// decoded wait rather than decode it again.
#[derive(Default)]
pub(super) struct SlotData {
    state: Mutex<SlotState>,
    done: std::sync::Condvar,
}

#[derive(Default)]
enum SlotState {
    #[default]
    Empty,
    Pending,
    Ready(Arc<RecordBatch>),
}

pub(super) type Slot = Arc<SlotData>;
/// Recently used row groups, shared by all reader threads (most recent last). Shared rather
/// than per thread because the executor hands consecutive chunks of indices to different
/// threads (and may resize its pools): a per-thread cache would decode each row group once per
/// thread that touches it.
static CACHE: Mutex<Vec<(CacheKey, Slot)>> = Mutex::new(Vec::new());

/// Row groups decoded, for tests counting decodes.
#[cfg(test)]
pub(super) static DECODED_KEYS: Mutex<Vec<CacheKey>> = Mutex::new(Vec::new());

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ParquetSource {
    /// The cache slot of a row group (made if missing; most recently used last).
    pub(super) fn slot(&self, fi: usize, rg: usize) -> Slot {
        let key = (self.inner.id, fi, rg);
        let mut cache = lock(&CACHE);
        let entry = match cache.iter().position(|(k, _)| *k == key) {
            Some(i) => cache.remove(i),
            None => {
                if cache.len() >= CACHED_ROW_GROUPS {
                    // The least recently used that is not being decoded: evicting one being
                    // decoded (a read-ahead) would throw its work away.
                    let busy = |s: &Slot| {
                        s.state
                            .try_lock()
                            .map_or(true, |st| matches!(*st, SlotState::Pending))
                    };
                    let victim = cache.iter().position(|(_, s)| !busy(s)).unwrap_or(0);
                    cache.remove(victim);
                }
                (key, Slot::default())
            }
        };
        let slot = entry.1.clone();
        cache.push(entry);
        slot
    }

    /// The decoded row group, from the cache when it is there.
    pub(super) fn row_group(&self, fi: usize, rg: usize) -> Result<Arc<RecordBatch>> {
        let slot = self.slot(fi, rg);
        {
            let mut state = lock(&slot.state);
            loop {
                match &*state {
                    SlotState::Ready(batch) => return Ok(batch.clone()),
                    SlotState::Pending => {
                        state = slot.done.wait(state).unwrap_or_else(|p| p.into_inner())
                    }
                    SlotState::Empty => break,
                }
            }
            *state = SlotState::Pending;
        }
        self.fill(&slot, fi, rg)
    }

    /// Decodes a row group into its slot (marked pending by the caller) and wakes waiters.
    pub(super) fn fill(&self, slot: &SlotData, fi: usize, rg: usize) -> Result<Arc<RecordBatch>> {
        let res = self.inner.files[fi].decode(rg).map(Arc::new);
        #[cfg(test)]
        lock(&DECODED_KEYS).push((self.inner.id, fi, rg));
        *lock(&slot.state) = match &res {
            Ok(batch) => SlotState::Ready(batch.clone()),
            Err(_) => SlotState::Empty,
        };
        slot.done.notify_all();
        res
    }

    /// A reader starting a row group at its first row is scanning: the next row group is
    /// decoded meanwhile on a helper thread, so a scan's decoding overlaps its conversion
    /// (one row group ahead, so memory stays bounded by the cache). Readers that get there
    /// first wait for it instead of decoding it again; its errors are left for them to meet.
    pub(super) fn read_ahead(&self, fi: usize, rg: usize) {
        // The bytes first, further ahead: a bucket answers each request after a latency
        // that one row group's decoding does not cover.
        super::file::fetch_from(&self.inner.files, fi, rg + 1);
        let next = if rg + 2 < self.inner.files[fi].rg_starts.len() {
            (fi, rg + 1)
        } else if fi + 1 < self.inner.files.len() {
            (fi + 1, 0)
        } else {
            return;
        };
        if self.inner.ahead.swap(true, Ordering::AcqRel) {
            return;
        }
        // Marked pending here, before the helper starts, so a reader that gets there first
        // waits for it instead of decoding the same row group.
        let slot = self.slot(next.0, next.1);
        {
            let mut state = lock(&slot.state);
            if !matches!(*state, SlotState::Empty) {
                self.inner.ahead.store(false, Ordering::Release);
                return;
            }
            *state = SlotState::Pending;
        }
        let (me, waiting) = (self.clone(), slot.clone());
        let queued = decode_ahead(Box::new(move || {
            let _ = me.fill(&waiting, next.0, next.1);
            me.inner.ahead.store(false, Ordering::Release);
        }));
        if !queued {
            *lock(&slot.state) = SlotState::Empty;
            slot.done.notify_all();
            self.inner.ahead.store(false, Ordering::Release);
        }
    }
}

/// A decode to run ahead of a scan.
type Job = Box<dyn FnOnce() + Send>;

/// The thread that decodes row groups ahead of scans, and the process it belongs to.
static AHEAD: OnceLock<Option<(u32, SyncSender<Job>)>> = OnceLock::new();

/// Runs `job` on the read-ahead thread: one for the process, started on first use and
/// blocked on its queue when idle. One thread throughout, so its stack and allocator heap
/// are reused from row group to row group: a thread per row group decoded into fresh pages
/// the kernel had to zero, as much CPU as the decompression itself (`perf` on
/// `benchmarks/parquet_rows.py`). False when it cannot take the job (queue full, no thread,
/// or a process forked from the one that started it): the reader then decodes itself.
fn decode_ahead(job: Job) -> bool {
    let worker = AHEAD.get_or_init(|| {
        let (tx, rx) = sync_channel::<Job>(4);
        std::thread::Builder::new()
            .name("sluice-parquet-ahead".into())
            .spawn(move || {
                for job in rx {
                    // A panic (a bug) costs that row group's read-ahead, not the thread.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
            })
            .ok()
            .map(|_| (std::process::id(), tx))
    });
    match worker {
        Some((pid, tx)) if *pid == std::process::id() => tx.try_send(job).is_ok(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{decoded, eight_row_groups, ids, write_file};
    use super::*;
    use sluice_core::{Source, Value};

    #[test]
    fn threads_reading_one_row_group_decode_it_once() {
        let dir = tempfile::tempdir().unwrap();
        write_file(&dir.path().join("a.parquet"), 0..2000, 2000);
        let src = ParquetSource::open(&[dir.path().display().to_string()], None).unwrap();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let src = &src;
                s.spawn(move || {
                    let ids: Vec<u64> = (t * 500..(t + 1) * 500).collect();
                    assert!(src.get_many(&ids).iter().all(Result::is_ok));
                });
            }
        });
        assert_eq!(decoded(&src), [(src.inner.id, 0, 0)]);
    }

    #[test]
    fn the_cache_stays_within_its_size_and_evicts_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let groups = CACHED_ROW_GROUPS as i64 + 6;
        write_file(&dir.path().join("a.parquet"), 0..groups * 2, 2);
        let src = ParquetSource::open(&[dir.path().display().to_string()], None).unwrap();
        // Backwards, so no read-ahead runs: each row group is decoded by the reader.
        for i in (0..groups as u64 * 2).rev() {
            assert_eq!(src.get(i).unwrap().get("id"), Some(&Value::Int(i as i64)));
        }
        let mine =
            |c: &Vec<(CacheKey, Slot)>| c.iter().filter(|(k, _)| k.0 == src.inner.id).count();
        assert!(lock(&CACHE).len() <= CACHED_ROW_GROUPS);
        assert!(mine(&lock(&CACHE)) <= CACHED_ROW_GROUPS);
        // The last row group read (row group 0) is cached; reading it again decodes nothing.
        let n = decoded(&src).len();
        assert_eq!(n, groups as usize);
        src.get(1).unwrap();
        assert_eq!(decoded(&src).len(), n);
    }

    #[test]
    fn a_scan_reads_ahead_and_decodes_each_row_group_once() {
        let dir = tempfile::tempdir().unwrap();
        let src = eight_row_groups(&dir);
        for chunk in (0..4000u64).collect::<Vec<_>>().chunks(700) {
            let batch = src.get_columns(chunk).unwrap();
            let got = batch.get("id").unwrap().clone().materialized().unwrap();
            let (a, b) = (chunk[0] as i64, chunk[chunk.len() - 1] as i64 + 1);
            assert_eq!(got, ids(a..b));
        }
        // Let a last read-ahead finish, then count: 8 row groups, each decoded once.
        while src.inner.ahead.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
        let mut mine = decoded(&src);
        let n = mine.len();
        mine.sort();
        mine.dedup();
        assert_eq!((n, mine.len()), (8, 8));
    }
}
