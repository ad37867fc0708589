//! A stage's deterministic prefix, computed once per item for every job and epoch that
//! needs it (`docs/design/SERVICE.md` §2.6).
//!
//! The prefix is the source read and the ops before the first one that draws randomness
//! (`OpMeta::random`; a Python function without an `rng` parameter counts as deterministic,
//! as `Dataset.cache()` assumes). Its output for an item depends on the item's place in the
//! source alone — not on the seed, the epoch or the job — so it is keyed by (prefix key,
//! source index): jobs with other seeds, later epochs and other tails reuse it. Only
//! one-to-one prefixes are cached (maps that raise on errors): a filter or a skipped sample
//! would make "the item's output" more than one value.
//!
//! [`PrefixRunner::run`] takes the cached records it was given, computes the rest, runs the
//! tail on every item in the chunk's order, and returns the records it computed for the
//! caller to store — when storing them pays: reading a record must cost less than computing
//! it again (Cachew's autocache comparison). Before anything is measured the bound is a model
//! ([`worth_caching`]); then the runner compares what reading a record back actually took on
//! this worker (fetch and decode) with what computing one took, and stops using the cache for
//! a prefix that is cheaper to recompute — trying it again every [`PROBE_EVERY`] chunks, as
//! either side may change.
//!
//! ```
//! use sluice_remote::service::prefix::worth_caching;
//! assert!(worth_caching(4e-3, 200_000)); // a 4 ms decode of a 200 KB image: cache it
//! assert!(!worth_caching(1e-6, 200_000)); // a 1 µs op on 200 KB: recompute it
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use sluice_core::codec::{decode_sample, encode_sample, In, Out};
use sluice_core::exec::{Chunk, Skip, StageWork};
use sluice_core::{ElemMode, Error, OnError, Result};

use super::key::content_key;
use crate::stage::{local_files, StagePackage, StageRunner};
use crate::wire::{self, SplitFrame};

/// Seconds per byte to read a cached record back (a call to its shard, the transfer and one
/// copy: ~1 GB/s on one machine), plus a fixed cost per item of the call.
const READ_S_PER_BYTE: f64 = 1e-9;
const READ_S_PER_ITEM: f64 = 20e-6;

/// Whether caching records of `bytes` that cost `compute_s` seconds each to make pays: reading
/// one back must be cheaper than computing it, by a margin.
pub fn worth_caching(compute_s: f64, bytes: usize) -> bool {
    compute_s > 1.2 * (READ_S_PER_ITEM + bytes as f64 * READ_S_PER_BYTE)
}

// Computing and reading are both timed by the clock on the wall: the fetch waits on other
// processes, so its CPU time here would say nothing, and on a busy machine both stretch alike.

/// What one chunk's prefix run made.
#[derive(Debug, Default)]
pub struct PrefixRun {
    pub reply: SplitFrame,
    /// Records computed here, by source index (empty when caching them does not pay).
    pub records: Vec<(u64, Vec<u8>)>,
    /// Seconds per computed item, and its record's bytes (0 when none was computed).
    pub compute_s: f64,
    pub record_bytes: usize,
}

/// Chunks between two tries of a cache that did not pay.
pub const PROBE_EVERY: u64 = 32;

/// Measured seconds per item: computing the prefix, reading a record back (from wherever it
/// was), and reading one through the cache shards alone.
#[derive(Debug, Default, Clone, Copy)]
struct Costs {
    compute_s: Option<f64>,
    read_s: Option<f64>,
    chunks: u64,
    shard_s: Option<f64>,
    shard_chunks: u64,
    /// The share of the records asked of the shards that they held (a moving average), and
    /// over how many chunks.
    shard_found: Option<f64>,
    shard_asks: u64,
}

/// Whether reading (`read` seconds per record) is measured no cheaper than computing
/// (`compute`) by the margin caching needs; `None` until both are known.
fn dearer(read: Option<f64>, compute: Option<f64>) -> Option<bool> {
    Some(1.2 * read? >= compute?)
}

fn ewma(old: Option<f64>, new: f64) -> Option<f64> {
    Some(old.map_or(new, |o| 0.8 * o + 0.2 * new))
}

/// What one worker measured of one prefix: shared by every stage there whose prefix has that
/// key (jobs with other seeds, epochs or tails run the same prefix), so a job that attaches
/// starts from what the others measured instead of learning the costs again — 32 chunks of
/// asking and filling cache shards that do not pay, per job.
#[derive(Debug, Default)]
pub struct PrefixCosts(std::sync::Mutex<Costs>);

/// The measurements of the prefixes a worker runs, by prefix key; an entry lives while a
/// stage uses it.
#[derive(Debug, Default)]
pub struct PrefixBook(std::sync::Mutex<HashMap<String, std::sync::Weak<PrefixCosts>>>);

impl PrefixBook {
    /// The measurements of prefix `key`: those of the stages already running it, else new.
    pub fn costs(&self, key: &str) -> Arc<PrefixCosts> {
        let mut book = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(costs) = book.get(key).and_then(std::sync::Weak::upgrade) {
            return costs;
        }
        book.retain(|_, c| c.strong_count() > 0);
        let costs = Arc::new(PrefixCosts::default());
        book.insert(key.to_string(), Arc::downgrade(&costs));
        costs
    }
}

/// A stage's cached prefix: its key, where the ops split, and what the worker measured of it.
#[derive(Debug)]
pub struct PrefixRunner {
    key: String,
    split: usize,
    costs: Arc<PrefixCosts>,
}

impl PrefixRunner {
    /// The prefix of the stage `init` describes, rebuilt as `runner`, sharing the
    /// measurements `book` holds for its key: `None` when there is nothing to cache (no
    /// source to read in the worker, or the first op is random or not a raising map).
    pub fn of(init: &str, runner: &StageRunner, book: &PrefixBook) -> Result<Option<PrefixRunner>> {
        let work = runner.work();
        if work.read.is_none() {
            return Ok(None);
        }
        let split = (work.ops.iter())
            .take_while(|c| {
                c.mode == ElemMode::Map && c.on_error == OnError::Raise && !c.op.meta().random
            })
            .count();
        if split == 0 {
            return Ok(None);
        }
        // The source as shipped and the prefix's ops (spec, mode, error policy; not their ids:
        // deterministic ops do not read them, and leaving them out lets pipelines with more
        // steps before the offloaded stage share). Not the seed, the skip or the label.
        let package = StagePackage::from_json(init)?;
        let ops: Vec<_> = (package.ops.iter().take(split))
            .map(|o| serde_json::json!([o.op, o.mode, o.on_error]))
            .collect();
        if package.unversioned > 0 {
            // Objects of no known version: a record could outlive a rewrite of its object.
            return Ok(None);
        }
        // The files as the job pinned them; as this worker sees them if it did not.
        let files = match (&package.source, package.files.is_empty()) {
            (Some(spec), true) => local_files(spec),
            _ => package.files.clone(),
        };
        let canonical = serde_json::to_vec(&serde_json::json!([
            package.source,
            ops,
            files,
            package.versions
        ]))
        .map_err(|e| Error::Internal(format!("prefix key: {e}")))?;
        let key = content_key(&canonical);
        Ok(Some(PrefixRunner {
            costs: book.costs(&key),
            key,
            split,
        }))
    }

    fn costs(&self) -> std::sync::MutexGuard<'_, Costs> {
        self.costs.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this chunk should go through the cache: yes until reading a record is known
    /// to cost more than computing it; then once every [`PROBE_EVERY`] chunks, to measure
    /// again.
    pub fn use_cache(&self) -> bool {
        let mut c = self.costs();
        c.chunks += 1;
        dearer(c.read_s, c.compute_s) != Some(true) || c.chunks.is_multiple_of(PROBE_EVERY)
    }

    /// Whether this chunk should ask the cache shards for the records the node tier does not
    /// hold (and store its own there), when a node tier serves this worker: a record read from
    /// the node's disk costs tens of µs, one through a shard a Ray call and a transfer between
    /// object stores, which can cost more than computing it again. Yes until a shard read is
    /// known to cost more than a computation, or the shards are seen to hold almost nothing
    /// asked of them; then once every [`PROBE_EVERY`] chunks, to measure again. Never when
    /// the worker is given no shards (every worker shares its tier: they would hold copies
    /// of it). Without a node tier the shards are the cache, and [`Self::use_cache`] decides
    /// alone.
    pub fn use_shards(&self, shards: usize) -> bool {
        if shards == 0 {
            return false;
        }
        let mut c = self.costs();
        c.shard_chunks += 1;
        !shards_cost_more(&c) || c.shard_chunks.is_multiple_of(PROBE_EVERY)
    }

    /// Whether records made here should be stored in the shards as well as on the node:
    /// [`Self::use_shards`]'s answer without counting a chunk.
    fn shards_pay(&self) -> bool {
        !shards_cost_more(&self.costs())
    }

    /// Whether a chunk's computed records go to the worker's `shards`: never when there are
    /// none, always without a node tier (they are the cache), else when the shards pay or
    /// this chunk asked them (a probe, which fills them for the next); otherwise the node's
    /// tier alone keeps them.
    pub fn store_in_shards(&self, shards: usize, node_tier: bool, asked_shards: usize) -> bool {
        shards > 0 && (!node_tier || asked_shards > 0 || self.shards_pay())
    }

    /// What asking the shards took: `seconds` on the wall for `asked` records, `found` of
    /// which they held. A chunk that found under half of what it asked (the shards still
    /// filling, or not filled while they did not pay) says little about a read, and is not
    /// counted.
    pub fn shard_fetched(&self, seconds: f64, asked: usize, found: usize) {
        if asked == 0 {
            return;
        }
        let mut c = self.costs();
        c.shard_found = ewma(c.shard_found, found as f64 / asked as f64);
        c.shard_asks += 1;
        if found > 0 && 2 * found >= asked {
            c.shard_s = ewma(c.shard_s, seconds / found as f64);
        }
    }

    /// (compute, read) seconds per item as measured so far.
    pub fn measured(&self) -> (Option<f64>, Option<f64>) {
        let c = self.costs();
        (c.compute_s, c.read_s)
    }

    /// The prefix's content key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The source indices of the items in a request frame, in order.
    pub fn items(frame: &[u8]) -> Result<Vec<u64>> {
        let chunk = wire::decode_chunk(frame)?;
        Ok(chunk.iter().map(|it| it.source_index).collect())
    }

    /// Runs one request frame: items with a record in `cached` start from it, the others run
    /// the prefix (their records returned when caching pays); then the tail on all of them.
    /// `fetch_s`: the seconds it took to fetch `cached` (counted with decoding them as the
    /// cost of reading).
    pub fn run(
        &self,
        runner: &StageRunner,
        frame: &[u8],
        cached: &HashMap<u64, &[u8]>,
        fetch_s: f64,
        threshold: usize,
    ) -> Result<PrefixRun> {
        let mut made = Vec::new();
        let mut spent = 0.0;
        // (records restored, CPU seconds decoding them, items in the chunk)
        let mut restored = (0usize, 0.0f64, 0usize);
        let reply = runner.run_split_with(frame, threshold, |work, mut chunk| {
            let mut missing = Vec::new();
            let t0 = Instant::now();
            for (i, item) in chunk.iter_mut().enumerate() {
                match cached.get(&item.source_index) {
                    Some(record) => {
                        restore(item, record)?;
                        restored.0 += 1;
                    }
                    None => missing.push(i),
                }
            }
            restored.1 = t0.elapsed().as_secs_f64();
            restored.2 = chunk.len();
            if !missing.is_empty() {
                let prefix = StageWork {
                    ops: work.ops[..self.split].to_vec(),
                    skip: Skip::default(),
                    ..work.clone()
                };
                let inputs: Chunk = missing.iter().map(|&i| chunk[i].clone()).collect();
                let t0 = Instant::now();
                let out = prefix.run_here(inputs)?;
                spent = t0.elapsed().as_secs_f64();
                if out.len() != missing.len() {
                    return Err(Error::Internal(format!(
                        "a one-to-one prefix made {} items of {}",
                        out.len(),
                        missing.len()
                    )));
                }
                for (&i, item) in missing.iter().zip(out) {
                    made.push((item.source_index, record(&item)));
                    let target = &mut chunk[i];
                    (target.rows, target.path, target.sample) = (item.rows, item.path, item.sample);
                }
            }
            let tail = StageWork {
                read: None,
                ops: work.ops[self.split..].to_vec(),
                ..work.clone()
            };
            tail.run_here(chunk)
        })?;
        let n = made.len().max(1);
        let compute_s = spent / n as f64;
        let record_bytes = made.iter().map(|(_, r)| r.len()).sum::<usize>() / n;
        let mut c = self.costs();
        if !made.is_empty() {
            c.compute_s = ewma(c.compute_s, compute_s);
        }
        // A record's read cost, as a warm cache would pay it: the fetch (one call per shard,
        // whatever it found) spread over the chunk's items, plus decoding one record. Chunks
        // that found less than half their records (the cache still filling) say little
        // about that and are not counted.
        let (hits, decode_s, asked) = restored;
        if hits > 0 && 2 * hits >= asked {
            c.read_s = ewma(c.read_s, fetch_s / asked as f64 + decode_s / hits as f64);
        }
        let pays = dearer(c.read_s, c.compute_s)
            .map_or_else(|| worth_caching(compute_s, record_bytes), |dear| !dear);
        drop(c);
        if !pays {
            made.clear();
        }
        Ok(PrefixRun {
            reply,
            records: made,
            compute_s,
            record_bytes,
        })
    }
}

/// Chunks that asked the shards before their hit rate is judged.
const SHARD_ASKS_JUDGED: u64 = 32;

/// Whether the shards do not pay: reading a record through them was measured dearer than
/// computing it, or — after [`SHARD_ASKS_JUDGED`] chunks asked them — they held under 5 % of
/// what they were asked (every node's tier already holds what its workers need, as when the
/// nodes share a disk): storing records there is then a transfer nobody reads.
fn shards_cost_more(c: &Costs) -> bool {
    let unread = c.shard_asks >= SHARD_ASKS_JUDGED && c.shard_found.is_some_and(|f| f < 0.05);
    dearer(c.shard_s, c.compute_s) == Some(true) || unread
}

/// An item's prefix output as stored: its rows, its path and its sample.
fn record(item: &sluice_core::Item) -> Vec<u8> {
    let mut out = Out::new(Vec::new());
    out.u64(item.rows);
    out.opt_str(item.path.as_deref());
    let mut rec = out.into_vec();
    encode_sample(&item.sample, &mut rec);
    rec
}

fn restore(item: &mut sluice_core::Item, record: &[u8]) -> Result<()> {
    let corrupt = |e: sluice_core::codec::CodecError| Error::from(e);
    let mut inp = In::new(record);
    let rows = inp.u64().map_err(corrupt)?;
    let path = inp.opt_str().map_err(corrupt)?.map(Arc::<str>::from);
    let used = record.len() - inp.left();
    item.sample = decode_sample(&record[used..]).map_err(corrupt)?;
    (item.rows, item.path) = (rows, path);
    Ok(())
}

#[cfg(test)]
#[path = "prefix_tests.rs"]
mod tests;
