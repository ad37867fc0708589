//! Caching a deterministic prefix: a source wrapper that reads a sample, runs the prefix ops on
//! it once, and keeps the result in memory (up to a byte budget) and then on local disk (up to
//! a second budget) for every later epoch and iteration. Because it is itself a random-access
//! source, shuffling, sharding and exact resume work unchanged on top of it.
//!
//! Caches are process-wide and keyed by content (the source's spec and the prefix ops'
//! specs), so re-iterating a dataset reuses its cache while a changed pipeline gets a fresh
//! one and never reads stale samples. The disk tier is one append-only file per cache in the
//! process's private directory ([`crate::scratch::dir`], mode 0700), created 0600 and unlinked
//! as soon as it is open: only the open descriptor keeps it, so it is gone when the cache is
//! dropped and also when the process exits without dropping it or is killed. It is not shared
//! between processes, so data changed on disk between runs is never read stale either.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};

use crate::codec;
use crate::error::{Error, Result};
use crate::plan::physical::ChainOp;
use crate::sample::Sample;
use crate::source::{Source, SourceRef};

/// Caches kept alive at once (the oldest is dropped beyond this).
const MAX_CACHES: usize = 8;

/// A cache's spill file: records appended under a lock, read back by offset without one.
struct DiskTier {
    path: PathBuf,
    file: File,
    index: RwLock<HashMap<u64, (u64, u32)>>,
    end: Mutex<u64>,
}

impl fmt::Debug for DiskTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DiskTier")
            .field("path", &self.path)
            .finish()
    }
}

/// The samples of one cache.
#[derive(Debug, Default)]
pub struct CacheStore {
    samples: RwLock<HashMap<u64, Sample>>,
    bytes: AtomicU64,
    disk: OnceLock<Option<DiskTier>>,
    /// Bytes written to the disk tier.
    pub disk_bytes: AtomicU64,
    /// Reads answered from the disk tier.
    pub disk_hits: AtomicU64,
    /// Indices some thread is computing now: a second reader waits for that result instead
    /// of computing it again (epochs overlap in a parallel read stage).
    computing: Mutex<HashSet<u64>>,
    computed: Condvar,
    /// Reads answered from memory, and reads that had to compute.
    pub hits: AtomicU64,
    pub misses: AtomicU64,
}

impl CacheStore {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Relaxed)
    }
    /// Samples held.
    pub fn len(&self) -> usize {
        self.samples.read().map_or(0, |m| m.len())
    }
    /// Whether nothing is held yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Samples held on disk.
    pub fn disk_len(&self) -> usize {
        match self.disk.get() {
            Some(Some(d)) => d.index.read().map_or(0, |m| m.len()),
            _ => 0,
        }
    }

    /// The disk tier, created on first use (`None` without a writable temp dir).
    fn disk(&self, key: &str) -> Option<&DiskTier> {
        self.disk
            .get_or_init(|| {
                let path = crate::scratch::dir().ok()?.join(format!(
                    "cache-{key}-{}.bin",
                    NEXT_FILE.fetch_add(1, Relaxed)
                ));
                let file = crate::scratch::create_new_file(&path, 0o600).ok()?;
                // The registry is never dropped at exit: with no name, nothing outlives the
                // descriptor, whatever ends the process.
                std::fs::remove_file(&path).ok()?;
                Some(DiskTier {
                    path,
                    file,
                    index: RwLock::new(HashMap::new()),
                    end: Mutex::new(0),
                })
            })
            .as_ref()
    }

    fn disk_get(&self, index: u64) -> Option<Result<Sample>> {
        let Some(Some(d)) = self.disk.get() else {
            return None;
        };
        let (off, len) = d.index.read().ok()?.get(&index).copied()?;
        let mut buf = vec![0u8; len as usize];
        Some(
            d.file
                .read_exact_at(&mut buf, off)
                .map_err(|e| Error::io(d.path.display(), e))
                .and_then(|_| {
                    codec::decode_sample(&buf).map_err(|e| {
                        Error::Internal(format!("cache file {}: {e}", d.path.display()))
                    })
                }),
        )
    }

    /// Writes `sample` to the disk tier if `budget` allows (best effort: a full disk or
    /// another failure only means the sample is recomputed next time).
    fn disk_put(&self, key: &str, index: u64, sample: &Sample, budget: u64) {
        let Some(d) = self.disk(key) else {
            return;
        };
        let mut rec = Vec::new();
        codec::encode_sample(sample, &mut rec);
        let size = rec.len() as u64;
        if self
            .disk_bytes
            .fetch_update(Relaxed, Relaxed, |b| {
                (b + size <= budget).then_some(b + size)
            })
            .is_err()
        {
            return;
        }
        let mut end = d.end.lock().unwrap_or_else(|p| p.into_inner());
        if d.file.write_all_at(&rec, *end).is_err() {
            self.disk_bytes.fetch_sub(size, Relaxed);
            return;
        }
        let off = *end;
        *end += size;
        drop(end);
        if let Ok(mut m) = d.index.write() {
            m.insert(index, (off, size as u32));
        }
    }
}

static NEXT_FILE: AtomicU64 = AtomicU64::new(0);

/// Live caches by key, oldest first, each with the source it is keyed by when that source is
/// known by its address (see [`cache_key`]): holding it keeps the address from being reused by
/// another source while the cache lives.
type Registry = Mutex<Vec<(String, Arc<CacheStore>, Option<SourceRef>)>>;

fn registry() -> &'static Registry {
    static CACHES: OnceLock<Registry> = OnceLock::new();
    CACHES.get_or_init(Default::default)
}

/// The process-wide store for `key` (created on first use), keeping `pin` alive with it.
fn store_for(key: &str, pin: Option<SourceRef>) -> Arc<CacheStore> {
    let mut caches = registry().lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, s, _)) = caches.iter().find(|(k, _, _)| k == key) {
        return s.clone();
    }
    if caches.len() >= MAX_CACHES {
        caches.remove(0);
    }
    let s = Arc::new(CacheStore::default());
    caches.push((key.to_string(), s.clone(), pin));
    s
}

/// The key of `source` followed by `ops`, and whether it names `source` by its address.
///
/// A source that can be reopened ([`Source::ship`]) is keyed by that full spec (its file list,
/// not the printed summary, which two directories with as many files share); any other
/// (`from_items`, Arrow, a mix, a Python object) by its address, since its printed spec does
/// not tell its data apart. Ops are keyed by their spec and, for Python functions, the digest
/// of their code and captured values — two lambdas of one name are different ops.
pub fn cache_key(source: &SourceRef, ops: &[ChainOp]) -> (String, bool) {
    let (src, by_address) = match source.ship() {
        Some(spec) => (spec, false),
        None => {
            let address = Arc::as_ptr(source) as *const () as usize;
            (
                serde_json::json!({"spec": source.spec(), "address": address}),
                true,
            )
        }
    };
    let specs: Vec<serde_json::Value> = ops
        .iter()
        .map(|o| serde_json::json!([o.op.spec(), o.op.code_digest()]))
        .collect();
    let text = serde_json::json!({"source": src, "ops": specs}).to_string();
    let h = text
        .bytes()
        .fold(0xcac4e_u64, |h, b| crate::rng::combine(h, b as u64));
    (format!("{h:016x}"), by_address)
}

/// A source whose samples are `ops` applied to `inner`'s, computed once and cached.
///
/// ```
/// use std::sync::Arc;
/// use sluice_core::*;
/// use sluice_core::cache::CachedSource;
/// let src = CachedSource::new(Arc::new(RangeSource::new(4)), vec![], 1 << 20, 0).unwrap();
/// assert_eq!(src.get(2)?.get("id").unwrap().as_int(), Some(2));
/// assert_eq!(src.get(2)?.get("id").unwrap().as_int(), Some(2));
/// assert_eq!(src.store().hits.load(std::sync::atomic::Ordering::Relaxed), 1);
/// # Ok::<(), sluice_core::Error>(())
/// ```
#[derive(Clone)]
pub struct CachedSource {
    inner: SourceRef,
    ops: Vec<ChainOp>,
    budget: u64,
    disk_budget: u64,
    key: String,
    store: Arc<CacheStore>,
}

impl fmt::Debug for CachedSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachedSource")
            .field("inner", &self.inner.name())
            .field(
                "ops",
                &self.ops.iter().map(|o| o.op.name()).collect::<Vec<_>>(),
            )
            .field("budget", &self.budget)
            .field("disk_budget", &self.disk_budget)
            .field("key", &self.key)
            .finish()
    }
}

impl CachedSource {
    /// Caches `ops` over `inner` within `budget` bytes of memory and then `disk_budget`
    /// bytes of local disk. The ops must be deterministic one-to-one maps and the source
    /// random-access (checked).
    pub fn new(inner: SourceRef, ops: Vec<ChainOp>, budget: u64, disk_budget: u64) -> Result<Self> {
        if !inner.random_access() {
            return Err(Error::invalid(
                "cache() needs a random-access source (a stream has no stable sample index)",
            ));
        }
        if let Some(o) = ops.iter().find(|o| {
            let m = o.op.meta();
            m.random || o.mode != crate::plan::logical::ElemMode::Map
        }) {
            return Err(Error::invalid(format!(
                "cache() can only follow deterministic maps, but '{}' is random or not a map; \
                 move cache() before it",
                o.op.name()
            )));
        }
        let (key, by_address) = cache_key(&inner, &ops);
        Ok(CachedSource {
            store: store_for(&key, by_address.then(|| inner.clone())),
            inner,
            ops,
            budget,
            disk_budget,
            key,
        })
    }
    /// The shared store (for stats and tests).
    pub fn store(&self) -> &Arc<CacheStore> {
        &self.store
    }
    /// The ops computed before caching.
    pub fn ops(&self) -> &[ChainOp] {
        &self.ops
    }

    fn compute(&self, index: u64) -> Result<Sample> {
        crate::mix::read_mapped(&self.inner, &self.ops, index)
    }
}

impl Source for CachedSource {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn input(&self) -> Option<Arc<crate::LogicalPlan>> {
        self.inner.input()
    }
    fn spec(&self) -> serde_json::Value {
        let ops: Vec<serde_json::Value> = self.ops.iter().map(|o| o.op.spec()).collect();
        serde_json::json!({"cache": {"source": self.inner.spec(), "ops": ops,
            "budget": self.budget, "disk_budget": self.disk_budget}})
    }
    fn len(&self) -> Option<u64> {
        self.inner.len()
    }
    fn prepare(&self, num_threads: usize) -> Result<()> {
        self.inner.prepare(num_threads)
    }
    fn prepare_with(&self, num_threads: usize, run: &crate::source::InputRunner<'_>) -> Result<()> {
        self.inner.prepare_with(num_threads, run)
    }
    fn will_need(&self, indices: &[u64]) {
        // Only what the cache does not hold yet is read from the source (the first epoch).
        let missing: Vec<u64> = match self.store.samples.read() {
            Ok(m) => indices
                .iter()
                .copied()
                .filter(|i| !m.contains_key(i))
                .collect(),
            Err(_) => return,
        };
        if !missing.is_empty() {
            self.inner.will_need(&missing);
        }
    }
    fn skipped(&self) -> u64 {
        self.inner.skipped()
    }
    fn report(&self) -> Option<serde_json::Value> {
        self.inner.report()
    }
    fn fields(&self) -> Option<Vec<String>> {
        None
    }
    fn get(&self, index: u64) -> Result<Sample> {
        let cached = || {
            self.store
                .samples
                .read()
                .ok()
                .and_then(|m| m.get(&index).cloned())
        };
        if let Some(s) = cached() {
            self.store.hits.fetch_add(1, Relaxed);
            return Ok(s);
        }
        {
            let mut busy = self
                .store
                .computing
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            while busy.contains(&index) {
                busy = self
                    .store
                    .computed
                    .wait(busy)
                    .unwrap_or_else(|p| p.into_inner());
            }
            if let Some(s) = cached() {
                self.store.hits.fetch_add(1, Relaxed);
                return Ok(s);
            }
            busy.insert(index);
        }
        // Whatever happens below (a disk hit, an error, a full budget), waiters are released.
        struct Done<'a>(&'a CacheStore, u64);
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                let mut busy = self.0.computing.lock().unwrap_or_else(|p| p.into_inner());
                busy.remove(&self.1);
                self.0.computed.notify_all();
            }
        }
        let _done = Done(&self.store, index);
        if let Some(s) = self.store.disk_get(index) {
            self.store.disk_hits.fetch_add(1, Relaxed);
            return s;
        }
        self.store.misses.fetch_add(1, Relaxed);
        let s = self.compute(index)?;
        let size = s.nbytes() as u64;
        // Reserve before inserting so concurrent readers never overshoot the budget.
        let reserved = self
            .store
            .bytes
            .fetch_update(Relaxed, Relaxed, |b| {
                (b + size <= self.budget).then_some(b + size)
            })
            .is_ok();
        if reserved {
            let mut m = self
                .store
                .samples
                .write()
                .unwrap_or_else(|p| p.into_inner());
            if m.insert(index, s.clone()).is_some() {
                self.store.bytes.fetch_sub(size, Relaxed);
            }
        } else if self.disk_budget > 0 {
            self.store.disk_put(&self.key, index, &s, self.disk_budget);
        }
        Ok(s)
    }
    fn get_many(&self, indices: &[u64]) -> Vec<Result<Sample>> {
        // Hits take one read lock and one counter update per chunk: per sample, the lock and
        // the counter bounce between the reader threads' cores, which at a million cached
        // samples a second costs more than the lookups.
        let found: Vec<Option<Sample>> = {
            let m = self.store.samples.read().unwrap_or_else(|p| p.into_inner());
            indices.iter().map(|i| m.get(i).cloned()).collect()
        };
        let hits = found.iter().filter(|s| s.is_some()).count() as u64;
        self.store.hits.fetch_add(hits, Relaxed);
        found
            .into_iter()
            .zip(indices)
            .map(|(s, &i)| s.map_or_else(|| self.get(i), Ok))
            .collect()
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{Emit, Op, OpContext, OpMeta};
    use crate::source::RangeSource;
    use crate::value::Value;
    use std::sync::atomic::AtomicUsize;

    #[derive(Debug, Default)]
    struct Square(AtomicUsize);
    impl Op for Square {
        fn name(&self) -> &str {
            "square"
        }
        fn spec(&self) -> serde_json::Value {
            serde_json::json!({"op": "square"})
        }
        fn meta(&self) -> OpMeta {
            OpMeta::opaque(false)
        }
        fn apply(&self, mut s: Sample, _cx: &OpContext) -> Result<Emit> {
            self.0.fetch_add(1, Relaxed);
            let v = s.require("id", "square")?.as_int().unwrap_or(0);
            s.set("id", Value::Int(v * v));
            Ok(Emit::One(s))
        }
    }

    fn cached(n: u64, budget: u64, disk_budget: u64) -> (CachedSource, Arc<Square>) {
        let op = Arc::new(Square::default());
        let chain = ChainOp {
            op: op.clone(),
            mode: crate::plan::logical::ElemMode::Map,
            on_error: Default::default(),
            op_id: 1,
        };
        // A range length no other test uses, so the process-wide store is this test's.
        (
            CachedSource::new(
                Arc::new(RangeSource::new(n)),
                vec![chain],
                budget,
                disk_budget,
            )
            .unwrap(),
            op,
        )
    }

    #[test]
    fn computes_each_sample_once_within_budget() {
        let (src, op) = cached(1001, 1 << 20, 0);
        for _ in 0..3 {
            for i in 0..1001 {
                assert_eq!(
                    src.get(i).unwrap().get("id").unwrap().as_int(),
                    Some((i * i) as i64)
                );
            }
        }
        assert_eq!(op.0.load(Relaxed), 1001);
        assert_eq!(src.store().len(), 1001);
    }

    #[test]
    fn get_many_serves_hits_and_computes_misses_in_order() {
        let (src, op) = cached(1009, 1 << 20, 0);
        let first: Vec<u64> = (0..50).collect();
        assert!(src.get_many(&first).iter().all(Result::is_ok));
        let mixed = [49u64, 7, 60, 7, 0, 61];
        let got: Vec<i64> = src
            .get_many(&mixed)
            .into_iter()
            .map(|s| s.unwrap().get("id").unwrap().as_int().unwrap())
            .collect();
        assert_eq!(got, mixed.map(|i| (i * i) as i64));
        assert_eq!(
            op.0.load(Relaxed),
            52,
            "60 and 61 computed once, the rest hits"
        );
        assert_eq!(src.store().hits.load(Relaxed), 4);
    }

    #[test]
    fn what_memory_cannot_hold_comes_back_from_disk() {
        // 10 samples fit in memory, 20 more on disk (a record of `{id: Int}` is 24 bytes),
        // the rest recomputed.
        let (src, op) = cached(1017, 80, 20 * 24);
        for _ in 0..3 {
            for i in 0..40 {
                assert_eq!(
                    src.get(i).unwrap().get("id").unwrap().as_int(),
                    Some((i * i) as i64)
                );
            }
        }
        let store = src.store().clone();
        assert_eq!((store.len(), store.disk_len()), (10, 20));
        assert_eq!(store.disk_bytes.load(Relaxed), 20 * 24);
        assert_eq!(
            store.disk_hits.load(Relaxed),
            40,
            "20 samples, 2 more passes"
        );
        assert_eq!(
            op.0.load(Relaxed),
            40 + 2 * 10,
            "only the 10 beyond both budgets again"
        );
    }

    #[test]
    fn the_disk_tier_has_no_name_so_nothing_outlives_the_process() {
        use std::os::unix::fs::MetadataExt;
        // The registry holds caches until the process ends (it is never dropped), so a named
        // file would stay behind at every exit: the file is unlinked once open.
        let (src, _) = cached(1019, 0, 1 << 20);
        for i in 0..30 {
            src.get(i).unwrap();
        }
        let store = src.store().clone();
        assert_eq!(store.disk_len(), 30);
        let d = match store.disk.get() {
            Some(Some(d)) => d,
            _ => panic!("no disk tier"),
        };
        assert!(!d.path.exists(), "{} still has a name", d.path.display());
        let meta = d.file.metadata().unwrap();
        assert_eq!(meta.nlink(), 0);
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert!(d.path.starts_with(crate::scratch::dir().unwrap()));
        for i in 0..30 {
            assert_eq!(
                src.get(i).unwrap().get("id").unwrap().as_int(),
                Some((i * i) as i64)
            );
        }
        assert_eq!(store.disk_hits.load(Relaxed), 30);
    }

    #[test]
    fn stops_caching_at_the_budget_but_stays_correct() {
        // Each sample is 8 bytes: 10 fit in 80.
        let (src, op) = cached(1002, 80, 0);
        for _ in 0..2 {
            for i in 0..20 {
                assert_eq!(
                    src.get(i).unwrap().get("id").unwrap().as_int(),
                    Some((i * i) as i64)
                );
            }
        }
        assert_eq!(src.store().len(), 10);
        assert!(src.store().bytes() <= 80);
        assert_eq!(op.0.load(Relaxed), 30);
    }

    #[test]
    fn refuses_random_ops_and_streams() {
        #[derive(Debug)]
        struct Rnd;
        impl Op for Rnd {
            fn name(&self) -> &str {
                "rnd"
            }
            fn spec(&self) -> serde_json::Value {
                serde_json::json!({"op": "rnd"})
            }
            fn meta(&self) -> OpMeta {
                OpMeta {
                    random: true,
                    ..OpMeta::opaque(false)
                }
            }
            fn apply(&self, s: Sample, _cx: &OpContext) -> Result<Emit> {
                Ok(Emit::One(s))
            }
        }
        let chain = ChainOp {
            op: Arc::new(Rnd),
            mode: crate::plan::logical::ElemMode::Map,
            on_error: Default::default(),
            op_id: 1,
        };
        let err =
            CachedSource::new(Arc::new(RangeSource::new(3)), vec![chain], 100, 0).unwrap_err();
        assert!(err.to_string().contains("rnd"), "{err}");
    }

    #[test]
    fn a_cache_node_computes_the_prefix_once_over_epochs_and_iterations() {
        use crate::exec::{ExecOptions, Execution};
        use crate::plan::logical::*;
        use crate::plan::lower::{lower, LowerOptions};
        let op = Arc::new(Square::default());
        let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(
            RangeSource::new(1003),
        ))));
        let mapped = Arc::new(LogicalPlan::Map(
            MapNode::try_new(src, op.clone(), ElemMode::Map, OnError::Raise, None).unwrap(),
        ));
        let cached = Arc::new(LogicalPlan::Cache(
            CacheNode::try_new(mapped, 1 << 20, 0).unwrap(),
        ));
        let shuffled = Arc::new(LogicalPlan::Shuffle(
            ShuffleNode::try_new(cached, Some(1)).unwrap(),
        ));
        let plan = Arc::new(LogicalPlan::Repeat(
            RepeatNode::try_new(shuffled, Some(3)).unwrap(),
        ));
        let phys = lower(&plan, &LowerOptions::default()).unwrap();
        for _ in 0..2 {
            let mut ids: Vec<i64> = Execution::start(&phys, ExecOptions::default())
                .unwrap()
                .map(|s| s.unwrap().get("id").unwrap().as_int().unwrap())
                .collect();
            assert_eq!(ids.len(), 3 * 1003);
            ids.sort();
            ids.dedup();
            assert_eq!(ids, (0..1003i64).map(|i| i * i).collect::<Vec<_>>());
        }
        assert_eq!(op.0.load(Relaxed), 1003);
        // Random ops and batches cannot be cached.
        let batched = Arc::new(LogicalPlan::Batch(
            BatchNode::try_new(plan, 2, false).unwrap(),
        ));
        assert!(CacheNode::try_new(batched, 10, 0).is_err());
    }

    #[test]
    fn key_changes_with_the_pipeline() {
        let src = |n| -> SourceRef { Arc::new(RangeSource::new(n)) };
        assert_ne!(cache_key(&src(3), &[]).0, cache_key(&src(4), &[]).0);
        // Reopenable sources are keyed by content: two equal ranges share a cache.
        assert_eq!(cache_key(&src(3), &[]), cache_key(&src(3), &[]));
    }

    #[test]
    fn sources_with_the_same_summary_do_not_share_a_cache() {
        // Two in-memory sources of one length print alike ({"source": "from_items", "len": 2})
        // but hold different data: each gets its own cache, and the same one its own again.
        let items = |v: i64| -> SourceRef {
            let mut s = Sample::new();
            s.set("id", crate::Value::Int(v));
            Arc::new(crate::source::ItemsSource::new(vec![s.clone(), s]))
        };
        let (a, b) = (items(1), items(2));
        assert_eq!(a.spec(), b.spec());
        let ca = CachedSource::new(a.clone(), vec![], 1 << 20, 0).unwrap();
        let cb = CachedSource::new(b, vec![], 1 << 20, 0).unwrap();
        assert_eq!(ca.get(0).unwrap().get("id").unwrap().as_int(), Some(1));
        assert_eq!(cb.get(0).unwrap().get("id").unwrap().as_int(), Some(2));
        let again = CachedSource::new(a, vec![], 1 << 20, 0).unwrap();
        assert!(Arc::ptr_eq(again.store(), ca.store()));
    }
}
