//! Whole objects fetched ahead of need. A bucket answers each GET after a first-byte latency
//! of tens of milliseconds; fetched one by one when a worker needs them, objects would keep
//! the workers waiting most of the time. The source thread names the samples it has just
//! queued ([`sluice_core::Source::will_need`]), their objects are requested at once, and the
//! worker that reads them later finds them fetched (or in flight).

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use sluice_core::Result;
type Fetch = super::Fetch<Bytes>;

/// A bounded set of whole-object fetches in flight or done, by sample index.
///
/// At most `capacity` objects are held; hints beyond that are dropped (those objects are
/// fetched when read, a chunk's worth at once), so memory stays bounded by the capacity
/// times the object size whatever the dataset's size. An entry not taken long after its hint
/// (an iteration stopped early) is evicted.
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

#[derive(Debug, Default)]
struct State {
    /// Fetches by sample index, with the hint's sequence number.
    fetches: HashMap<u64, (u64, Fetch)>,
    seq: u64,
}

impl ReadAhead {
    /// Holds at most `capacity` objects.
    pub fn new(capacity: usize) -> Self {
        ReadAhead {
            capacity: capacity.max(1),
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts fetching the objects of these `(index, url)` pairs (not already started).
    pub fn start(&self, wanted: &[(u64, String)]) {
        let mut st = self.lock();
        for (index, url) in wanted {
            st.seq += 1;
            if st.fetches.contains_key(index) {
                continue;
            }
            if st.fetches.len() >= self.capacity {
                // Entries hinted this long ago would have been taken by a running iteration.
                let stale = st.seq.saturating_sub(4 * self.capacity as u64);
                st.fetches.retain(|_, (s, f)| {
                    let keep = *s >= stale;
                    if !keep {
                        f.abort();
                    }
                    keep
                });
                if st.fetches.len() >= self.capacity {
                    continue;
                }
            }
            if let Ok(f) = super::spawn_fetch(url) {
                let seq = st.seq;
                st.fetches.insert(*index, (seq, f));
            }
        }
    }

    /// The objects of these `(index, url)` pairs, in order: each from its fetch if one was
    /// started, the others fetched now, all at once.
    pub fn take_many(&self, wanted: &[(u64, String)]) -> Vec<Result<Bytes>> {
        let started: Vec<Option<Fetch>> = {
            let mut st = self.lock();
            wanted
                .iter()
                .map(|(i, _)| st.fetches.remove(i).map(|(_, f)| f))
                .collect()
        };
        let fetches: Vec<Result<Fetch>> = started
            .into_iter()
            .zip(wanted)
            .map(|(f, (_, url))| match f {
                Some(f) => Ok(f),
                None => super::spawn_fetch(url),
            })
            .collect();
        fetches
            .into_iter()
            .zip(wanted)
            .map(|(f, _)| super::join(f?))
            .collect()
    }

    /// Objects held (fetched or in flight).
    pub fn held(&self) -> usize {
        self.lock().fetches.len()
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        for (_, (_, f)) in self.lock().fetches.drain() {
            f.abort();
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
        let got = ahead.take_many(&wanted);
        assert_eq!(ahead.held(), 0);
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
