//! Per-thread caches of words already merged, per tokenizer: most words of a corpus recur,
//! and a word's ids do not depend on its neighbours, so each is merged once per thread.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use rustc_hash::FxHashMap;

/// Words at least this long (in bytes) are merged every time rather than cached: they are
/// rare, and caching them would let a few long lines fill the cache.
const MAX_CACHED_WORD: usize = 256;
/// Words a thread caches per tokenizer before starting over.
const CACHE_CAPACITY: usize = 1 << 16;
/// Tokenizers a thread keeps caches for; more (pipelines rebuilt many times) start over.
const MAX_CACHES_PER_THREAD: usize = 8;

/// One thread's words of one tokenizer, with their ids.
#[derive(Default)]
pub(super) struct WordCache(FxHashMap<Box<[u8]>, Box<[u32]>>);

impl WordCache {
    /// Appends `word`'s ids to `out`: the cached ones, or those `merge` appends (kept).
    pub(super) fn ids(
        &mut self,
        word: &[u8],
        out: &mut Vec<u32>,
        merge: impl FnOnce(&mut Vec<u32>),
    ) {
        if let Some(ids) = self.0.get(word) {
            out.extend_from_slice(ids);
            return;
        }
        let start = out.len();
        merge(out);
        if word.len() < MAX_CACHED_WORD {
            if self.0.len() >= CACHE_CAPACITY {
                self.0.clear();
            }
            self.0.insert(word.into(), out[start..].into());
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Names one tokenizer's word caches in every thread, from its making to its drop (its
/// caches go with it).
pub(super) struct CacheKey(u64);

impl CacheKey {
    pub(super) fn new() -> Self {
        static NEXT_KEY: AtomicU64 = AtomicU64::new(0);
        let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
        lock_pool().insert(key, Vec::new());
        CacheKey(key)
    }

    /// Runs `f` with this thread's word cache for the tokenizer (an ended thread's, when
    /// this thread has none yet).
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut WordCache) -> R) -> R {
        let key = self.0;
        CACHES.with(|caches| {
            let caches = &mut caches.borrow_mut().0;
            if !caches.contains_key(&key) {
                if caches.len() >= MAX_CACHES_PER_THREAD {
                    caches.clear();
                }
                let warm = lock_pool().get_mut(&key).and_then(Vec::pop);
                caches.insert(key, warm.unwrap_or_default());
            }
            f(caches.get_mut(&key).expect("inserted above"))
        })
    }

    /// Caches waiting in the pool for the next thread.
    #[cfg(test)]
    pub(super) fn pooled(&self) -> usize {
        pooled(self.0)
    }

    #[cfg(test)]
    pub(super) fn id(&self) -> u64 {
        self.0
    }
}

impl Drop for CacheKey {
    fn drop(&mut self) {
        lock_pool().remove(&self.0);
    }
}

/// A thread's word caches, per tokenizer ([`CacheKey`]). When the thread ends
/// they go to [`POOL`], so the next thread to use the tokenizer starts warm: sluice starts
/// new worker threads for every iteration (each epoch) and profiles in a thread of its
/// own, and a cache dying with its thread made every epoch and every profile start cold
/// (profiles then measured `tokenize` 1.5× slower than runs did).
#[derive(Default)]
struct ThreadCaches(FxHashMap<u64, WordCache>);

impl Drop for ThreadCaches {
    fn drop(&mut self) {
        let mut pool = lock_pool();
        for (key, cache) in self.0.drain() {
            if cache.is_empty() || !pool.contains_key(&key) {
                continue; // nothing learnt, or the tokenizer is gone
            }
            let spare = pool.entry(key).or_default();
            if spare.len() < MAX_POOLED {
                spare.push(cache);
            }
        }
    }
}

/// Caches a tokenizer keeps from ended threads (one per thread that may start).
const MAX_POOLED: usize = 4;

/// Word caches of ended threads, per live tokenizer (registered by [`CacheKey::new`],
/// removed when it is dropped).
static POOL: std::sync::LazyLock<std::sync::Mutex<FxHashMap<u64, Vec<WordCache>>>> =
    std::sync::LazyLock::new(Default::default);

fn lock_pool() -> std::sync::MutexGuard<'static, FxHashMap<u64, Vec<WordCache>>> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

thread_local! {
    static CACHES: RefCell<ThreadCaches> = RefCell::default();
}

/// Caches waiting in the pool for the tokenizer `key`.
#[cfg(test)]
pub(super) fn pooled(key: u64) -> usize {
    lock_pool().get(&key).map_or(0, Vec::len)
}
