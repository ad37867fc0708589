//! One shard of the service's prefix cache (`docs/design/SERVICE.md` §2.6): records of
//! deterministic prefixes ([`super::prefix`]) by (prefix key, source index), within a byte
//! budget, kept by their value.
//!
//! A prefix's value per byte is what its records save per second — (compute − read) seconds
//! per item × reads per second — over their size (Cachew's autocache comparison, ranked).
//! Over budget, the prefix worth least per byte gives up its oldest records; a prefix worth
//! less than every resident one is not admitted (no thrashing: it keeps the part it has).
//! Reads decay with a 30 s half-life, so a prefix nobody reads any more — its jobs ended —
//! is the first to go.
//!
//! ```
//! use sluice_remote::service::cache::PrefixCache;
//! let mut c = PrefixCache::new(1 << 20);
//! c.put_many(0.0, "p", 2e-3, vec![(7, vec![1u8; 100])]);
//! let got = c.get_many(1.0, "p", &[7, 8]);
//! assert_eq!((got[0].as_deref(), got[1].is_none()), (Some(&[1u8; 100][..]), true));
//! ```

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;

use super::prefix::worth_caching;

/// Seconds for reads to lose half their weight.
const HALF_LIFE_S: f64 = 30.0;

#[derive(Debug, Default)]
struct Prefix {
    records: HashMap<u64, Arc<[u8]>>,
    order: VecDeque<u64>,
    bytes: u64,
    /// CPU seconds a record costs to compute (as the last put said).
    compute_s: f64,
    /// Reads, decayed to `seen`.
    reads: f64,
    seen: f64,
    report: PrefixReport,
}

/// One prefix's figures in a shard.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PrefixReport {
    pub records: usize,
    pub bytes: u64,
    pub hits: u64,
    pub misses: u64,
    pub puts: u64,
    /// Records not stored: over budget and worth less than what is resident.
    pub refused: u64,
    pub evicted: u64,
    /// CPU seconds saved per byte per second (the eviction order).
    pub value: f64,
}

/// A shard's figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CacheReport {
    pub budget: u64,
    pub bytes: u64,
    pub prefixes: HashMap<String, PrefixReport>,
}

/// Records of many prefixes within a byte budget.
#[derive(Debug, Default)]
pub struct PrefixCache {
    budget: u64,
    bytes: u64,
    prefixes: HashMap<String, Prefix>,
}

impl Prefix {
    fn decay(&mut self, now: f64) {
        let dt = (now - self.seen).max(0.0);
        self.reads *= 0.5f64.powf(dt / HALF_LIFE_S);
        self.seen = self.seen.max(now);
    }

    /// Seconds saved per byte per second by keeping its records.
    fn value(&self, now: f64) -> f64 {
        let n = self.records.len().max(1) as f64;
        let bytes = (self.bytes as f64 / n).max(1.0);
        let read_s = 20e-6 + bytes * 1e-9;
        let rate = self.reads * 0.5f64.powf((now - self.seen).max(0.0) / HALF_LIFE_S);
        (self.compute_s - read_s).max(0.0) * (rate + 1e-3) / bytes
    }

    fn pop_oldest(&mut self) -> u64 {
        let Some(index) = self.order.pop_front() else {
            return 0;
        };
        let freed = self.records.remove(&index).map_or(0, |r| r.len() as u64);
        self.bytes -= freed;
        self.report.evicted += 1;
        freed
    }
}

impl PrefixCache {
    /// An empty shard holding at most `budget` bytes of records.
    pub fn new(budget: u64) -> Self {
        PrefixCache {
            budget,
            ..Default::default()
        }
    }

    /// The records of `prefix` for these source indices (`None`: not cached here).
    pub fn get_many(&mut self, now: f64, prefix: &str, indices: &[u64]) -> Vec<Option<Arc<[u8]>>> {
        let p = self.prefixes.entry(prefix.to_string()).or_default();
        p.decay(now);
        p.reads += indices.len() as f64;
        let out: Vec<_> = indices.iter().map(|i| p.records.get(i).cloned()).collect();
        let hits = out.iter().filter(|r| r.is_some()).count() as u64;
        p.report.hits += hits;
        p.report.misses += out.len() as u64 - hits;
        out
    }

    /// Stores records of `prefix` that cost `compute_s` CPU seconds each to make; returns
    /// how many were stored (records already here count as stored).
    pub fn put_many(
        &mut self,
        now: f64,
        prefix: &str,
        compute_s: f64,
        records: Vec<(u64, Vec<u8>)>,
    ) -> usize {
        let mut stored = 0;
        {
            let p = self.prefixes.entry(prefix.to_string()).or_default();
            p.decay(now);
            p.compute_s = compute_s;
        }
        for (index, record) in records {
            let size = record.len() as u64;
            let p = &self.prefixes[prefix];
            if p.records.contains_key(&index) {
                stored += 1;
                continue;
            }
            if size > self.budget
                || !worth_caching(compute_s, record.len())
                || !self.room(now, prefix, size)
            {
                if let Some(p) = self.prefixes.get_mut(prefix) {
                    p.report.refused += 1;
                }
                continue;
            }
            let p = self.prefixes.get_mut(prefix).expect("made above");
            p.records.insert(index, record.into());
            p.order.push_back(index);
            p.bytes += size;
            p.report.puts += 1;
            self.bytes += size;
            stored += 1;
        }
        stored
    }

    /// Frees `size` bytes for `prefix` from prefixes worth less per byte; false when the
    /// least valuable resident prefix is worth at least as much (then nothing is freed).
    fn room(&mut self, now: f64, prefix: &str, size: u64) -> bool {
        let mine = self.prefixes[prefix].value(now);
        while self.bytes + size > self.budget {
            let victim = (self.prefixes.iter())
                .filter(|(k, p)| p.bytes > 0 && k.as_str() != prefix)
                .min_by(|a, b| a.1.value(now).total_cmp(&b.1.value(now)))
                .map(|(k, p)| (k.clone(), p.value(now)));
            match victim {
                Some((k, value)) if value < mine => {
                    let p = self.prefixes.get_mut(&k).expect("listed above");
                    self.bytes -= p.pop_oldest();
                }
                _ => return false,
            }
        }
        true
    }

    /// Bytes held now.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The shard's figures, per prefix.
    pub fn report(&self, now: f64) -> CacheReport {
        let prefixes = (self.prefixes.iter())
            .map(|(k, p)| {
                let report = PrefixReport {
                    records: p.records.len(),
                    bytes: p.bytes,
                    value: p.value(now),
                    ..p.report.clone()
                };
                (k.clone(), report)
            })
            .collect();
        CacheReport {
            budget: self.budget,
            bytes: self.bytes,
            prefixes,
        }
    }
}

/// The shard (of `shards`) that holds `prefix`'s record of source item `index`: the same in
/// every worker.
pub fn shard_of(prefix: &str, index: u64, shards: usize) -> usize {
    let rank = sluice_core::rng::combine(super::key::name_hash(prefix), index);
    (rank % shards.max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recs(range: std::ops::Range<u64>, size: usize) -> Vec<(u64, Vec<u8>)> {
        range.map(|i| (i, vec![i as u8; size])).collect()
    }

    #[test]
    fn records_come_back_and_count_hits_and_misses() {
        let mut c = PrefixCache::new(10_000);
        assert_eq!(c.put_many(0.0, "p", 1e-3, recs(0..5, 100)), 5);
        assert_eq!(
            c.put_many(0.0, "p", 1e-3, recs(3..6, 100)),
            3,
            "two already held"
        );
        let got = c.get_many(1.0, "p", &[0, 5, 9]);
        assert_eq!(got[1].as_deref(), Some(&[5u8; 100][..]));
        assert!(got[2].is_none());
        let r = &c.report(1.0).prefixes["p"];
        assert_eq!(
            (r.records, r.bytes, r.hits, r.misses, r.puts),
            (6, 600, 2, 1, 6)
        );
        assert_eq!(c.bytes(), 600);
    }

    #[test]
    fn cheap_records_are_not_stored() {
        let mut c = PrefixCache::new(1 << 20);
        assert_eq!(c.put_many(0.0, "cheap", 1e-6, recs(0..3, 1000)), 0);
        assert_eq!(c.report(0.0).prefixes["cheap"].refused, 3);
    }

    /// A read prefix keeps its records; a new one worth less is refused rather than thrash;
    /// one worth more takes the room, oldest records of the least valuable first.
    #[test]
    fn over_budget_the_prefix_worth_least_per_byte_gives_way() {
        let mut c = PrefixCache::new(1_000);
        c.put_many(0.0, "read", 1e-3, recs(0..10, 100));
        for _ in 0..10 {
            c.get_many(1.0, "read", &[0, 1, 2, 3]);
        }
        // Same cost, never read: worth less than "read", refused.
        assert_eq!(c.put_many(1.0, "unread", 1e-3, recs(0..2, 100)), 0);
        assert_eq!(c.report(1.0).prefixes["read"].records, 10);
        // Far costlier and read: "read" gives up its two oldest records.
        c.get_many(1.0, "costly", &[0; 50]);
        assert_eq!(c.put_many(1.0, "costly", 1.0, recs(0..2, 100)), 2);
        let r = c.report(1.0);
        assert_eq!(
            (r.prefixes["read"].records, r.prefixes["read"].evicted),
            (8, 2)
        );
        assert!(c.get_many(2.0, "read", &[0, 1, 2])[..2]
            .iter()
            .all(Option::is_none));
        assert!(c.bytes() <= 1_000);
        // A record bigger than the whole budget is never stored.
        assert_eq!(c.put_many(2.0, "costly", 1.0, recs(5..6, 2_000)), 0);
    }

    #[test]
    fn reads_fade_so_a_finished_jobs_prefix_goes_first() {
        let mut c = PrefixCache::new(1_000);
        c.put_many(0.0, "old", 1e-3, recs(0..10, 100));
        c.get_many(0.0, "old", &[0; 100]);
        // Ten minutes later nobody has read "old"; "new" is read now.
        c.get_many(600.0, "new", &[0; 10]);
        assert_eq!(c.put_many(600.0, "new", 1e-3, recs(0..3, 100)), 3);
        assert_eq!(c.report(600.0).prefixes["old"].records, 7);
    }

    #[test]
    fn shards_spread_items_and_agree_everywhere() {
        let counts = (0..1000).fold([0usize; 3], |mut n, i| {
            n[shard_of("p", i, 3)] += 1;
            n
        });
        assert!(counts.iter().all(|&n| n > 250), "{counts:?}");
        assert_eq!(shard_of("p", 42, 3), shard_of("p", 42, 3));
        assert_eq!(shard_of("p", 42, 0), 0);
    }
}
