//! Whole objects fetched ahead of need. A bucket answers each GET after a first-byte latency
//! of tens of milliseconds; fetched one by one when a worker needs them, objects would keep
//! the workers waiting most of the time. The source thread names the samples it will need
//! ([`sluice_core::Source::will_need`], well ahead: [`NAMED_AHEAD`]), their objects are
//! requested in that order, and the worker that reads them later finds them fetched (or in
//! flight).
//!
//! How many are in flight follows Little's law — objects taken per second × the store's recent
//! p95 latency, with room for the rate to grow ([`super::hedge::Latency::in_flight_for`]) —
//! within `32..=capacity`, so a fast local store holds few objects and a slow bucket many, and no one
//! sets a concurrency.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use sluice_core::Result;

use super::hedge::Latency;
type Fetch = super::Fetch<Bytes>;

/// Samples a source over remote objects names ahead of those queued
/// ([`sluice_core::Source::will_need_ahead`]): enough for the window at ~5,000 objects/s and
/// 50 ms, whatever the pipeline's queue depths.
pub const NAMED_AHEAD: u64 = 512;
/// The fewest objects kept in flight once hints are waiting.
const MIN_WINDOW: usize = 32;

/// A bounded set of whole-object fetches in flight or done, by sample index, and the hints
/// waiting for room.
///
/// At most `capacity` objects are held (its memory bound: that many objects); hints beyond the
/// current window wait in order (at most 4 × capacity of them, older ones dropped: those
/// objects are fetched when read). An entry not taken long after its hint (an iteration
/// stopped early) is evicted.
///
/// ```no_run
/// let ahead = sluice_io::store::ReadAhead::new(64);
/// ahead.start(&[(0, "s3://bucket/a.jpg".to_string())]);
/// let bytes = ahead.take_many(&[(0, "s3://bucket/a.jpg".to_string())]);
/// ```
#[derive(Debug)]
pub struct ReadAhead {
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Fetches by sample index, with their hints' sequence numbers, oldest first: a run of
    /// several epochs names an index again (the next epoch's hint) while this epoch's fetch
    /// of it may still be held. Keyed by index alone, that hint was skipped and taking the
    /// index dropped it, so each epoch's first objects were fetched one by one as needed
    /// (230–530 ms gaps at epoch starts from a bucket: docs/BENCHMARKS.md).
    fetches: HashMap<u64, VecDeque<(u64, Fetch)>>,
    /// Fetches held (in flight or done), what the window counts.
    held: usize,
    /// Hints not started yet, in order, with their sequence numbers.
    waiting: VecDeque<(u64, u64, String)>,
    seq: u64,
    /// The store's latencies (of the first object hinted).
    lat: Option<Arc<Latency>>,
    /// Objects taken with no fetch started whose cached copy was read (`read`) or was not
    /// current after all (`missed`: stale, or evicted since the hint).
    cached_read: u64,
    cached_missed: u64,
    /// Objects taken, and since when (a rate over the last second or so).
    taken: u64,
    since: Instant,
    rate: f64,
}

impl ReadAhead {
    /// Holds at most `capacity` objects.
    pub fn new(capacity: usize) -> Self {
        ReadAhead {
            capacity: capacity.max(1),
            state: Mutex::new(State {
                fetches: HashMap::new(),
                held: 0,
                waiting: VecDeque::new(),
                seq: 0,
                lat: None,
                cached_read: 0,
                cached_missed: 0,
                taken: 0,
                since: Instant::now(),
                rate: 0.0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Objects to keep in flight now.
    fn window(&self, st: &State) -> usize {
        match &st.lat {
            // Until the first rate is known, the whole capacity: the first pass must not
            // start slower than the store allows.
            Some(lat) if st.rate > 0.0 => lat.in_flight_for(st.rate, MIN_WINDOW, self.capacity),
            _ => self.capacity,
        }
    }

    /// Starts waiting hints while the window has room.
    fn pump(&self, st: &mut State) {
        let window = self.window(st);
        while st.held < window {
            let Some((index, seq, url)) = st.waiting.pop_front() else {
                break;
            };
            // A warm cache's copy is read by the worker that takes it, as a local file is —
            // unless such copies keep turning out stale (a dataset rewritten in place since it
            // was cached): then each would be fetched when taken, without the lead a fetch
            // ahead gives it, so hints are fetched ahead again.
            if st.trusts_cache() && super::cache::likely_current(&url) {
                continue;
            }
            if let Ok(f) = super::spawn_fetch(&url) {
                st.fetches.entry(index).or_default().push_back((seq, f));
                st.held += 1;
            }
        }
    }

    /// Names the objects of these `(index, url)` pairs as needed soon, in order.
    pub fn start(&self, wanted: &[(u64, String)]) {
        let mut st = self.lock();
        if st.lat.is_none() {
            st.lat = wanted
                .first()
                .filter(|(_, url)| super::is_url(url))
                .and_then(|(_, url)| super::split_url(url).ok())
                .map(|(base, _)| super::hedge::latency_of(&base));
        }
        // Entries hinted this long ago would have been taken by a running iteration.
        let stale = st.seq.saturating_sub(8 * self.capacity as u64);
        let mut dropped = 0;
        st.fetches.retain(|_, queue| {
            queue.retain(|(s, f)| {
                let keep = *s >= stale;
                if !keep {
                    f.abort();
                    dropped += 1;
                }
                keep
            });
            !queue.is_empty()
        });
        st.held -= dropped;
        for (index, url) in wanted {
            st.seq += 1;
            let seq = st.seq;
            st.waiting.push_back((*index, seq, url.clone()));
        }
        while st.waiting.len() > 4 * self.capacity {
            st.waiting.pop_front();
        }
        self.pump(&mut st);
    }

    /// The objects of these `(index, url)` pairs, in order: each from its fetch if one was
    /// started, the others read from the cache here when it holds them current, else fetched
    /// now, all at once.
    pub fn take_many(&self, wanted: &[(u64, String)]) -> Vec<Result<Bytes>> {
        let started: Vec<Option<Fetch>> = {
            let mut st = self.lock();
            let got: Vec<Option<Fetch>> = wanted.iter().map(|(i, _)| st.take(*i)).collect();
            // Those not started are fetched below, now: not again from their hints — each
            // one's oldest, a later epoch's hints for the index staying.
            for ((i, _), f) in wanted.iter().zip(&got) {
                if f.is_none() {
                    if let Some(at) = st.waiting.iter().position(|(w, _, _)| w == i) {
                        st.waiting.remove(at);
                    }
                }
            }
            st.taken += wanted.len() as u64;
            let secs = st.since.elapsed().as_secs_f64();
            if secs >= 0.5 {
                let now = st.taken as f64 / secs;
                st.rate = if st.rate == 0.0 {
                    now
                } else {
                    0.5 * st.rate + 0.5 * now
                };
                (st.taken, st.since) = (0, Instant::now());
            }
            self.pump(&mut st);
            got
        };
        let (mut read, mut missed) = (0, 0);
        let fetches: Vec<Result<Taken>> = started
            .into_iter()
            .zip(wanted)
            .map(|(f, (_, url))| match f {
                Some(f) => Ok(Taken::Fetch(f)),
                None => match super::cache::read_current(url) {
                    Some(got) => {
                        read += 1;
                        got.map(Taken::Read)
                    }
                    None => {
                        missed += 1;
                        super::spawn_fetch(url).map(Taken::Fetch)
                    }
                },
            })
            .collect();
        if read + missed > 0 {
            let mut st = self.lock();
            st.cached_read += read;
            st.cached_missed += missed;
        }
        fetches
            .into_iter()
            .map(|f| match f? {
                Taken::Read(bytes) => Ok(bytes),
                Taken::Fetch(f) => super::join(f),
            })
            .collect()
    }

    /// Objects held (fetched or in flight).
    pub fn held(&self) -> usize {
        self.lock().held
    }
}

/// An object taken: read from the cache here, or fetched on the I/O runtime.
enum Taken {
    Read(Bytes),
    Fetch(Fetch),
}

impl State {
    /// Whether hints for objects the cache seems to hold are left to the taker: until more
    /// than a few such objects, and more than 1 in 16, were not current when taken.
    fn trusts_cache(&self) -> bool {
        self.cached_missed < 8 || self.cached_missed * 16 < self.cached_read
    }

    /// The oldest fetch held for `index`, if any.
    fn take(&mut self, index: u64) -> Option<Fetch> {
        let queue = self.fetches.get_mut(&index)?;
        let (_, f) = queue.pop_front()?;
        if queue.is_empty() {
            self.fetches.remove(&index);
        }
        self.held -= 1;
        Some(f)
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        for (_, queue) in self.lock().fetches.drain() {
            for (_, f) in queue {
                f.abort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_objects_come_back_in_order_and_the_set_stays_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let wanted: Vec<(u64, String)> = (0..10u64)
            .map(|i| {
                let p = dir.path().join(format!("{i}.bin"));
                std::fs::write(&p, vec![i as u8; i as usize]).unwrap();
                (i, p.display().to_string())
            })
            .collect();
        let ahead = ReadAhead::new(4);
        ahead.start(&wanted);
        assert_eq!(ahead.held(), 4);
        // Taking the first four makes room: the next hints start.
        let first = ahead.take_many(&wanted[..4]);
        assert_eq!(ahead.held(), 4);
        let rest = ahead.take_many(&wanted[4..]);
        assert_eq!(ahead.held(), 0);
        let got: Vec<_> = first.into_iter().chain(rest).collect();
        for (i, b) in got.into_iter().enumerate() {
            assert_eq!(b.unwrap(), vec![i as u8; i]);
        }
        let missing = ahead.take_many(&[(0, dir.path().join("nope").display().to_string())]);
        assert!(missing[0]
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("nope"));
    }

    /// `n` local files `0.bin`… holding their own number, as `(index, path)` pairs.
    fn files(dir: &std::path::Path, n: u64) -> Vec<(u64, String)> {
        (0..n)
            .map(|i| {
                let p = dir.join(format!("{i}.bin"));
                std::fs::write(&p, [i as u8]).unwrap();
                (i, p.display().to_string())
            })
            .collect()
    }

    #[test]
    fn the_next_epochs_hints_for_indices_still_held_are_fetched_too() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path(), 2);
        let ahead = ReadAhead::new(8);
        // Epoch 0 names 0, 1; epoch 1 names 1, 0 before epoch 0 has taken either.
        ahead.start(&f);
        ahead.start(&[f[1].clone(), f[0].clone()]);
        assert_eq!(ahead.held(), 4);
        for epoch in [f.clone(), vec![f[1].clone(), f[0].clone()]] {
            let got = ahead.take_many(&epoch);
            for ((i, _), b) in epoch.iter().zip(got) {
                assert_eq!(b.unwrap(), vec![*i as u8]);
            }
        }
        assert_eq!(ahead.held(), 0);
    }

    #[test]
    fn taking_an_index_keeps_the_next_epochs_waiting_hint_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path(), 2);
        let ahead = ReadAhead::new(2);
        ahead.start(&f);
        // The window is full: epoch 1's hints wait.
        ahead.start(&f);
        assert_eq!(ahead.held(), 2);
        ahead.take_many(&f);
        // Taking epoch 0's made room for epoch 1's, which were not dropped with them.
        assert_eq!(ahead.held(), 2);
        assert_eq!(ahead.take_many(&f[..1])[0].as_ref().unwrap(), &vec![0u8]);
        assert_eq!(ahead.held(), 1);
    }

    /// `n` objects `s3://{bucket}/{i}.jpg` with a cached copy each: ETag `"{etag}{i}"`, bytes
    /// `[byte(i); 2]`. The directory lives as long as the handle returned.
    fn cached_copies(
        bucket: &str,
        n: u64,
        etag: &str,
        byte: impl Fn(u64) -> u8,
    ) -> (tempfile::TempDir, Vec<(u64, String)>) {
        use super::super::cache::{cache_for, register, CacheSpec};
        let dir = tempfile::tempdir().unwrap();
        let spec = CacheSpec {
            dir: Some(dir.path().display().to_string()),
            limit: Some(1 << 20),
        };
        let wanted: Vec<(u64, String)> = (0..n)
            .map(|i| (i, format!("s3://{bucket}/{i}.jpg")))
            .collect();
        let urls: Vec<String> = wanted.iter().map(|(_, u)| u.clone()).collect();
        register(&urls, Some(&spec)).unwrap();
        let cache = cache_for(&urls[0]).unwrap();
        for (i, url) in &wanted {
            let v = super::super::disk::Version {
                size: 2,
                etag: Some(format!("\"{etag}{i}\"")),
            };
            let fill = cache.begin(url).unwrap().unwrap();
            fill.commit(&v, &[byte(*i); 2]).unwrap();
        }
        (dir, wanted)
    }

    #[test]
    fn a_warm_caches_objects_are_read_by_the_taker_not_fetched_ahead() {
        let (_dir, wanted) = cached_copies("ahead-warm", 3, "e", |i| i as u8);
        for (i, url) in &wanted {
            super::super::cache::saw(url, 2, Some(&format!("\"e{i}\"")));
        }
        let ahead = ReadAhead::new(8);
        ahead.start(&wanted);
        // No task on the I/O runtime: the copies are current, and no store is reachable here.
        assert_eq!(ahead.held(), 0);
        for ((i, _), got) in wanted.iter().zip(ahead.take_many(&wanted)) {
            assert_eq!(got.unwrap(), vec![*i as u8; 2]);
        }
    }

    #[test]
    fn copies_that_keep_turning_out_stale_are_fetched_ahead_again() {
        use object_store::{memory::InMemory, path::Path as ObjPath, ObjectStoreExt, PutPayload};
        // Cached as one version; the store (and its listing) now hold another.
        let (_dir, wanted) = cached_copies("ahead-stale", 40, "old", |_| 0);
        let store = Arc::new(InMemory::new());
        super::super::use_store("s3://ahead-stale", store.clone());
        for (i, url) in &wanted {
            let key = ObjPath::from(format!("{i}.jpg"));
            let put = super::super::block_on(store.put(&key, PutPayload::from(vec![*i as u8; 2])))
                .unwrap()
                .unwrap();
            super::super::cache::saw(url, 2, put.e_tag.as_deref());
        }
        let ahead = ReadAhead::new(64);
        ahead.start(&wanted[..10]);
        assert_eq!(ahead.held(), 0, "the copies look current until read");
        for ((i, _), got) in wanted[..10].iter().zip(ahead.take_many(&wanted[..10])) {
            assert_eq!(
                got.unwrap(),
                vec![*i as u8; 2],
                "the store's version, not the copy"
            );
        }
        // Ten stale copies taken: the next hints are fetched ahead.
        ahead.start(&wanted[10..]);
        assert_eq!(ahead.held(), 30);
        for ((i, _), got) in wanted[10..].iter().zip(ahead.take_many(&wanted[10..])) {
            assert_eq!(got.unwrap(), vec![*i as u8; 2]);
        }
    }

    #[test]
    fn stale_hints_make_room() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.bin");
        std::fs::write(&p, b"x").unwrap();
        let url = p.display().to_string();
        let ahead = ReadAhead::new(2);
        ahead.start(&[(0, url.clone()), (1, url.clone())]);
        // Many hints later the two untaken entries are stale: new ones get their room.
        let later: Vec<(u64, String)> = (100..120).map(|i| (i, url.clone())).collect();
        ahead.start(&later);
        assert_eq!(ahead.held(), 2);
        assert_eq!(
            ahead.take_many(&later[18..])[0].as_ref().unwrap(),
            &b"x"[..]
        );
    }
}
