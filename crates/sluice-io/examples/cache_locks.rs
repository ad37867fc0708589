//! The node-local object cache's locks, timed: with `held` downloads in flight (this
//! process's and, on a real node, every rank's), what storing one more small object costs —
//! `begin` (its download lock), `commit` (the accounting lock twice, the write, the rename).
//! The kernel walks every lock on a file to take or release one, so this grows with the
//! locks that share a file.
//!
//!     cargo run --release -p sluice-io --example cache_locks -- [held] [objects] [dir]
//!
//! `dir`: where the cache goes (a temporary folder in it; default the system's temp dir).

use std::sync::Arc;
use std::time::Instant;

use sluice_io::store::disk::{DiskCache, Version};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let held: usize = args.first().map_or(256, |a| a.parse().expect("held"));
    let n: usize = args.get(1).map_or(20_000, |a| a.parse().expect("objects"));
    let dir = match args.get(2) {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .expect("a temporary folder");
    let cache = Arc::new(DiskCache::open(dir.path(), 1 << 40).expect("cache"));
    let mut hold = Vec::with_capacity(held);
    for i in 0..held {
        let mut fill = cache.begin(&format!("s3://held/{i}")).unwrap().unwrap();
        assert!(fill.reserve(1).unwrap());
        hold.push(fill);
    }
    let data = vec![7u8; 1000];
    let v = Version {
        size: data.len() as u64,
        etag: Some("e".into()),
    };
    let t = Instant::now();
    for i in 0..n {
        let fill = cache.begin(&format!("s3://b/{i}")).unwrap().unwrap();
        fill.commit(&v, &data).unwrap();
    }
    let per = t.elapsed().as_secs_f64() / n as f64 * 1e6;
    println!("{held} downloads in flight: {per:.1} us per object stored ({n} objects)");
}
