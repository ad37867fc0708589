//! Consecutive row groups of one file asked for in one request, and the reply split back
//! into each row group's column chunks.

use std::sync::{Mutex, OnceLock};

use bytes::Bytes;

use super::cache::lock;
use crate::store::{join, Fetch};

/// Compressed bytes of consecutive row groups asked for in one request by a read that goes
/// through a file in order. A bucket charges per request as well as per byte, in money and
/// in the client's CPU (signing, the HTTP exchange, the hedge's bookkeeping: ~100 µs a GET
/// on the benchmark machine, docs/BENCHMARKS.md "Where a GET's CPU goes"): the reference
/// corpus's 0.5 MB row groups took one GET each, six a file where one does. The size of the object cache's download parts, so a request costs about
/// what a part of a cold read does.
pub(super) const GROUP_BYTES: u64 = 8 << 20;

/// Row groups `first..` of one file asked for in one request: the reply is split by row
/// group by whichever reader needs one of them first.
#[derive(Debug)]
pub(super) struct Group {
    first: usize,
    fetch: Mutex<Option<Fetch<Vec<Bytes>>>>,
    /// Each row group's column chunks once the reply is in; `None` if the request failed
    /// (each row group then reads its own bytes, and meets the error itself).
    data: OnceLock<Option<Vec<Vec<Bytes>>>>,
    /// Column chunks per row group (at least one).
    leaves: usize,
}

impl Group {
    /// Row groups `first..` whose `leaves` column chunks each `fetch` brings, in order.
    pub(super) fn new(first: usize, leaves: usize, fetch: Fetch<Vec<Bytes>>) -> Group {
        Group {
            first,
            fetch: Mutex::new(Some(fetch)),
            data: OnceLock::new(),
            leaves,
        }
    }

    /// Row group `rg`'s column chunks, waiting for the request.
    pub(super) fn take(&self, rg: usize) -> Option<Vec<Bytes>> {
        let data = self.data.get_or_init(|| {
            let flat = join(lock(&self.fetch).take()?).ok()?;
            Some(flat.chunks(self.leaves).map(<[Bytes]>::to_vec).collect())
        });
        data.as_ref()?.get(rg - self.first).cloned()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        // Dropped unread (its row groups named too far ahead, then pushed out): nobody
        // needs the reply.
        let fetch = self.fetch.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = fetch.take() {
            f.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{Error, Result};
    use std::sync::atomic::AtomicBool;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    #[test]
    fn a_request_for_several_row_groups_is_split_by_row_group() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let parts = ["a0", "a1", "b0", "b1", "c0", "c1"].map(Bytes::from);
        let g = Group::new(3, 2, rt.spawn(async move { Ok(parts.to_vec()) }));
        assert_eq!(g.take(4).unwrap(), ["b0", "b1"].map(Bytes::from));
        assert_eq!(g.take(3).unwrap(), ["a0", "a1"].map(Bytes::from));
        assert_eq!(g.take(5).unwrap(), ["c0", "c1"].map(Bytes::from));
        assert_eq!(g.take(6), None, "not a row group of the request");
    }

    #[test]
    fn a_failed_request_leaves_each_row_group_to_read_its_own_bytes() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let g = Group::new(0, 1, rt.spawn(async { Err(Error::data("503 SlowDown")) }));
        assert_eq!(g.take(0), None);
        assert_eq!(g.take(1), None, "the failure is kept, not asked again");
    }

    #[test]
    fn a_request_nobody_reads_is_cancelled_when_its_row_groups_go() {
        struct Flag(Arc<AtomicBool>);
        impl Drop for Flag {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let rt = tokio::runtime::Runtime::new().unwrap();
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = Flag(dropped.clone());
        let g = Arc::new(Group::new(
            0,
            1,
            rt.spawn(async move {
                let _flag = flag;
                std::future::pending::<Result<Vec<Bytes>>>().await
            }),
        ));
        let other = g.clone();
        drop(g);
        assert!(
            !dropped.load(Ordering::SeqCst),
            "still held by another row group"
        );
        drop(other);
        // A hang guard, not a clock assertion: the abort is asynchronous.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !dropped.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(
            dropped.load(Ordering::SeqCst),
            "the request was not cancelled"
        );
    }
}
