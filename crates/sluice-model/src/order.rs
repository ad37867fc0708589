//! Index order of a random-access source: which source index is read at each position of each
//! epoch, after global shuffle, sharding and repetition — computed, never materialised.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::rng::{combine, mix64};

/// A pseudo-random permutation of `0..n` in O(1) memory: a balanced Feistel network over the
/// next even power of two, with cycle-walking to stay inside `0..n`.
///
/// ```
/// use sluice_model::Permutation;
/// let p = Permutation::new(10, 7);
/// let mut seen: Vec<u64> = (0..10).map(|i| p.apply(i)).collect();
/// seen.sort();
/// assert_eq!(seen, (0..10).collect::<Vec<_>>());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permutation {
    n: u64,
    half_bits: u32,
    key: u64,
}

const ROUNDS: u64 = 6;

impl Permutation {
    /// The permutation of `0..n` chosen by `key`.
    pub fn new(n: u64, key: u64) -> Self {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        Permutation { n, half_bits, key }
    }
    /// Where `i` (< n) goes.
    pub fn apply(&self, i: u64) -> u64 {
        debug_assert!(i < self.n);
        let mut x = i;
        // Cycle-walking: the domain is < 4n, so this loops a few times at most on average.
        loop {
            x = self.feistel(x);
            if x < self.n {
                return x;
            }
        }
    }
    fn feistel(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut l, mut r) = (x >> self.half_bits, x & mask);
        for round in 0..ROUNDS {
            let f = mix64(combine(self.key, round) ^ r) & mask;
            (l, r) = (r, l ^ f);
        }
        (l << self.half_bits) | r
    }
}

/// Rank `rank` of `world_size` after `shard`: positions are dealt round-robin in runs of
/// `block` consecutive positions (1: strided, every `world_size`-th position). Runs of a
/// batch's size hand whole batches to DataLoader workers, so the batches a pool of workers
/// delivers in turn are the ones a single process makes.
///
/// ```
/// use sluice_model::order::ShardSpec;
/// let s = ShardSpec::try_new(1, 2, false).unwrap().with_block(3).unwrap();
/// // blocks [0,1,2] [3,4,5] [6,7,8] [9]: rank 1 gets the second and the fourth
/// assert_eq!(s.len(10), 4);
/// assert_eq!((0..4).map(|p| s.index(p)).collect::<Vec<_>>(), [3, 4, 5, 9]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardSpec {
    /// This rank (0-based).
    pub rank: u64,
    /// Number of ranks.
    pub world_size: u64,
    /// Equal length on every rank (drops the last `block * world_size - 1` positions at most).
    pub equal: bool,
    /// Consecutive positions dealt to a rank at a time.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub block: u64,
}

fn one() -> u64 {
    1
}

fn is_one(n: &u64) -> bool {
    *n == 1
}

/// Runs longer than this are a mistake (a batch is far smaller), and keep the index arithmetic
/// far from overflow.
pub const MAX_SHARD_BLOCK: u64 = 1 << 32;

impl ShardSpec {
    /// Checks `rank < world_size`, `world_size > 0`.
    pub fn try_new(rank: u64, world_size: u64, equal: bool) -> Result<Self> {
        if world_size == 0 {
            return Err(Error::invalid("shard: world_size must be > 0"));
        }
        if rank >= world_size {
            return Err(Error::invalid(format!(
                "shard: rank must be in [0, world_size), got rank={rank}, world_size={world_size}"
            )));
        }
        Ok(ShardSpec {
            rank,
            world_size,
            equal,
            block: 1,
        })
    }
    /// The same shard dealt in runs of `block` positions (1 ..= [`MAX_SHARD_BLOCK`]).
    pub fn with_block(self, block: u64) -> Result<Self> {
        if block == 0 || block > MAX_SHARD_BLOCK {
            return Err(Error::invalid(format!(
                "shard: block must be in [1, {MAX_SHARD_BLOCK}], got {block}"
            )));
        }
        Ok(ShardSpec { block, ..self })
    }
    /// How many of `n` positions this rank gets.
    pub fn len(&self, n: u64) -> u64 {
        let (b, w, r) = (self.block, self.world_size, self.rank);
        if self.equal {
            return n / (b * w) * b;
        }
        let (full, rem) = (n / b, n % b);
        let blocks = full + u64::from(rem > 0);
        let mine = blocks / w + u64::from(r < blocks % w);
        // The short last block (number `full`) is dealt like any other.
        if rem > 0 && full % w == r {
            mine * b - (b - rem)
        } else {
            mine * b
        }
    }
    /// Whether this rank gets nothing.
    pub fn is_empty(&self, n: u64) -> bool {
        self.len(n) == 0
    }
    /// The position (in the sharded sequence) of this rank's `pos`-th position.
    pub fn index(&self, pos: u64) -> u64 {
        let (b, w) = (self.block, self.world_size);
        ((pos / b) * w + self.rank) * b + pos % b
    }
}

/// The order of a random-access source's samples across epochs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexOrder {
    /// Number of samples in the source.
    pub len: u64,
    /// Global shuffle seed (reseeded per epoch), if shuffled.
    pub shuffle: Option<u64>,
    /// The same permutation every epoch (`shuffle(reshuffle_each_epoch=False)`): the one of
    /// data epoch 0.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fixed_shuffle: bool,
    /// Shard of this rank, if sharded.
    pub shard: Option<ShardSpec>,
    /// A second `shard()` splitting this rank's positions further (DataLoader workers within
    /// a rank): its positions are those of `shard`'s sequence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<ShardSpec>,
    /// Number of epochs; `None` = forever.
    pub epochs: Option<u64>,
    /// The data epoch of this order's epoch 0 (see [`first_epoch`]): epochs here count
    /// within one iteration (cursors and checkpoints use them), randomness uses
    /// `first_epoch + epoch`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub first_epoch: u64,
    /// One epoch finished on this world size after another began it (elastic resume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic: Option<ElasticEpoch>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Data epochs one iteration of a pipeline that repeats forever owns (see [`first_epoch`]).
pub const ENDLESS_PASS_EPOCHS: u64 = 1 << 32;

/// The data epoch an iteration at epoch `epoch` (`iter(epoch=k)`, the k-th `for` loop over a
/// dataset) starts with, when each iteration runs `epochs` epochs of the source (`repeat(n)`;
/// 1 without repeat; `None`: forever). Iterations own disjoint blocks of data epochs — `k*n`
/// … `k*n + n-1`, and `k * 2^32` on for an endless repeat — so no two iterations share a
/// permutation or augmentation draws, and iteration 0 is the data epochs a pipeline always had.
///
/// ```
/// use sluice_model::order::first_epoch;
/// assert_eq!(first_epoch(3, Some(1)).unwrap(), 3);
/// assert_eq!(first_epoch(3, Some(2)).unwrap(), 6);
/// assert!(first_epoch(u64::MAX, Some(2)).is_err());
/// ```
pub fn first_epoch(epoch: u64, epochs: Option<u64>) -> Result<u64> {
    let per = epochs.unwrap_or(ENDLESS_PASS_EPOCHS).max(1);
    // The last data epoch of the iteration must fit too.
    epoch
        .checked_add(1)
        .and_then(|e| e.checked_mul(per))
        .map(|_| epoch * per)
        .ok_or_else(|| {
            Error::invalid(format!(
                "epoch {epoch} is too large: an iteration of this pipeline runs {per} epochs \
                 of its source, so epoch * {per} must stay below 2**64"
            ))
        })
}

/// One position of the order: where a sample sits and which source sample it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Data epoch (`first_epoch` + the order's epoch): what randomness derives from.
    pub epoch: u64,
    /// Global position within the epoch (same on every rank; randomness derives from it).
    pub index: u64,
    /// Index into the source.
    pub source_index: u64,
}

impl IndexOrder {
    /// Samples per epoch for this rank.
    pub fn epoch_len(&self) -> u64 {
        let n = self.shard.map_or(self.len, |s| s.len(self.len));
        self.part.map_or(n, |p| p.len(n))
    }
    /// Samples of `epoch` for this rank (differs from [`IndexOrder::epoch_len`] only in an
    /// elastic epoch).
    pub fn epoch_len_of(&self, epoch: u64) -> u64 {
        match &self.elastic {
            Some(e) if e.epoch == epoch => e.len(self.len),
            _ => self.epoch_len(),
        }
    }
    /// The `pos`-th position (< [`IndexOrder::epoch_len`]) of `epoch` on this rank (outside
    /// an elastic epoch, whose positions come from [`ElasticEpoch::positions`]).
    pub fn position(&self, epoch: u64, pos: u64) -> Position {
        // Strided sharding keeps every rank's slice spread over the whole (shuffled) order.
        let pos = self.part.map_or(pos, |p| p.index(pos));
        let index = self.shard.map_or(pos, |s| s.index(pos));
        self.at_global(epoch, index)
    }
    /// The position at global index `index` of `epoch`.
    pub fn at_global(&self, epoch: u64, index: u64) -> Position {
        let epoch = self.first_epoch.wrapping_add(epoch);
        let source_index = match self.shuffle {
            Some(seed) => {
                let key = if self.fixed_shuffle { 0 } else { epoch };
                Permutation::new(self.len, combine(seed, key)).apply(index)
            }
            None => index,
        };
        Position {
            epoch,
            index,
            source_index,
        }
    }
    /// Whether `epoch` is past the last one.
    pub fn is_done(&self, epoch: u64) -> bool {
        self.epochs.is_some_and(|e| epoch >= e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn permutation_is_a_bijection(n in 1u64..3000, key in any::<u64>()) {
            let p = Permutation::new(n, key);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let j = p.apply(i);
                prop_assert!(j < n);
                prop_assert!(!seen[j as usize], "{} hit twice", j);
                seen[j as usize] = true;
            }
        }

        #[test]
        fn shards_are_equal_disjoint_and_cover(n in 0u64..500, world in 1u64..9, seed in any::<u64>(),
                                               first_epoch in 0u64..5) {
            let mut all = vec![];
            let mut lens = vec![];
            for rank in 0..world {
                let order = IndexOrder { len: n, shuffle: Some(seed), fixed_shuffle: false,
                    shard: Some(ShardSpec::try_new(rank, world, true).unwrap()), part: None, epochs: Some(1),
                    first_epoch, elastic: None };
                lens.push(order.epoch_len());
                all.extend((0..order.epoch_len()).map(|p| order.position(0, p).source_index));
            }
            prop_assert!(lens.iter().all(|&l| l == lens[0]));
            let total = all.len() as u64;
            all.sort();
            all.dedup();
            prop_assert_eq!(all.len() as u64, total);
            prop_assert!(n - total < world);
        }
    }

    proptest! {
        #[test]
        fn blocks_deal_every_position_once_in_runs(n in 0u64..400, world in 1u64..6,
                                                   block in 1u64..9, equal in any::<bool>()) {
            let mut all = vec![];
            let mut lens = vec![];
            for rank in 0..world {
                let s = ShardSpec::try_new(rank, world, equal).unwrap().with_block(block).unwrap();
                let mine: Vec<u64> = (0..s.len(n)).map(|p| s.index(p)).collect();
                // Runs of `block` consecutive positions, each run starting on a block boundary.
                for run in mine.chunks(block as usize) {
                    prop_assert_eq!(run[0] % block, 0);
                    prop_assert!(run.windows(2).all(|w| w[1] == w[0] + 1));
                    prop_assert_eq!(run[0] / block % world, rank);
                }
                lens.push(mine.len() as u64);
                all.extend(mine);
            }
            let total = all.len() as u64;
            all.sort();
            all.dedup();
            prop_assert_eq!(all.len() as u64, total);
            prop_assert!(all.iter().all(|&i| i < n));
            if equal {
                prop_assert!(lens.iter().all(|&l| l == lens[0]));
                prop_assert!(n - total < block * world);
            } else {
                prop_assert_eq!(total, n);
            }
        }

        #[test]
        fn parts_split_a_rank_without_loss(n in 0u64..400, world in 1u64..4, workers in 1u64..5,
                                           block in 1u64..6, seed in any::<u64>()) {
            for rank in 0..world {
                let shard = ShardSpec::try_new(rank, world, true).unwrap();
                let rank_only = IndexOrder { len: n, shuffle: Some(seed), fixed_shuffle: false,
                    shard: Some(shard), part: None, epochs: Some(1), first_epoch: 0, elastic: None };
                let whole: Vec<u64> = (0..rank_only.epoch_len())
                    .map(|p| rank_only.position(0, p).source_index).collect();
                // Worker parts dealt in blocks, read back round-robin a block at a time (as
                // DataLoader reads its workers), give the rank's own sequence.
                let parts: Vec<Vec<u64>> = (0..workers).map(|w| {
                    let part = ShardSpec::try_new(w, workers, false).unwrap().with_block(block).unwrap();
                    let o = IndexOrder { part: Some(part), ..rank_only.clone() };
                    (0..o.epoch_len()).map(|p| o.position(0, p).source_index).collect()
                }).collect();
                let mut merged = vec![];
                let mut runs: Vec<_> = parts.iter().map(|p| p.chunks(block as usize)).collect();
                'outer: loop {
                    for r in runs.iter_mut() {
                        match r.next() { Some(run) => merged.extend_from_slice(run), None => break 'outer }
                    }
                }
                for r in runs.iter_mut() { for run in r { merged.extend_from_slice(run) } }
                prop_assert_eq!(merged, whole);
            }
        }
    }

    #[test]
    fn bad_blocks() {
        let s = ShardSpec::try_new(0, 2, true).unwrap();
        assert!(s.with_block(0).is_err());
        assert!(s.with_block(MAX_SHARD_BLOCK + 1).is_err());
        assert_eq!(s.with_block(4).unwrap().block, 4);
    }

    #[test]
    fn unequal_shards_keep_the_remainder() {
        let total: u64 = (0..3)
            .map(|r| ShardSpec::try_new(r, 3, false).unwrap().len(10))
            .sum();
        assert_eq!(total, 10);
    }

    fn order(first_epoch: u64, fixed_shuffle: bool) -> IndexOrder {
        IndexOrder {
            len: 100,
            shuffle: Some(1),
            fixed_shuffle,
            shard: None,
            part: None,
            epochs: None,
            first_epoch,
            elastic: None,
        }
    }

    fn perm(o: &IndexOrder, epoch: u64) -> Vec<u64> {
        (0..o.len)
            .map(|p| o.position(epoch, p).source_index)
            .collect()
    }

    #[test]
    fn shuffle_changes_per_epoch() {
        let o = order(0, false);
        assert_ne!(perm(&o, 0), perm(&o, 1));
    }

    #[test]
    fn first_epoch_shifts_the_data_epoch_and_a_fixed_shuffle_keeps_one_permutation() {
        // Epoch 0 of an iteration that starts at data epoch 3 is data epoch 3.
        let (o, later) = (order(0, false), order(3, false));
        assert_eq!(perm(&later, 0), perm(&o, 3));
        assert_eq!(later.position(1, 5).epoch, 4);
        assert_eq!(later.position(1, 5), o.position(4, 5));
        // Fixed: every epoch has data epoch 0's permutation, but positions keep their
        // data epochs (augmentations still differ).
        let fixed = order(3, true);
        assert_eq!(perm(&fixed, 0), perm(&o, 0));
        assert_eq!(perm(&fixed, 7), perm(&o, 0));
        assert_eq!(fixed.position(0, 0).epoch, 3);
    }

    #[test]
    fn iterations_own_disjoint_blocks_of_data_epochs() {
        assert_eq!(first_epoch(0, Some(1)).unwrap(), 0);
        assert_eq!(first_epoch(5, Some(1)).unwrap(), 5);
        assert_eq!(first_epoch(2, Some(3)).unwrap(), 6);
        assert_eq!(first_epoch(2, None).unwrap(), 2 * ENDLESS_PASS_EPOCHS);
        assert_eq!(
            first_epoch(4, Some(0)).unwrap(),
            4,
            "repeat(0) counts as one"
        );
        assert_eq!(first_epoch(u64::MAX - 1, Some(1)).unwrap(), u64::MAX - 1);
        let e = first_epoch(u64::MAX / 2, Some(2)).unwrap_err().to_string();
        assert!(e.contains("epoch") && e.contains("too large"), "{e}");
        assert!(first_epoch(1 << 32, None).is_err());
    }

    #[test]
    fn bad_shard_arguments() {
        assert!(ShardSpec::try_new(3, 2, true).is_err());
        assert!(ShardSpec::try_new(0, 0, true).is_err());
    }
}

/// The rest of one epoch of a sharded run, re-split over a new world size (elastic resume).
///
/// The old run had `old_world` ranks; old rank `r` read global positions `r, r + W, r + 2W, …`
/// and had delivered up to `old[r]` = (local position, ordinal among that position's
/// outputs). Global positions no old rank finished — including the tail an equal split had
/// dropped — are split, in order, over the new ranks: the `k`-th remaining position goes to
/// rank `k mod world`. Without flat_maps (`whole`), a position's one output is all of it;
/// with them, the position an old rank stopped in may have more outputs to come: it goes to
/// a new rank that drops the outputs already delivered (so new ranks may deliver a few
/// outputs fewer than others, but nothing twice and nothing lost).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ElasticEpoch {
    pub epoch: u64,
    pub old_world: u64,
    /// Each old rank's last delivered (position, ordinal) in `epoch`, if any.
    pub old: Vec<Option<(u64, u64)>>,
    pub rank: u64,
    pub world: u64,
    pub equal: bool,
    /// Every position has at most one output (no flat_map): the last delivered position
    /// is finished.
    #[serde(default)]
    pub whole: bool,
}

impl ElasticEpoch {
    /// Local positions old rank `r` finished.
    fn done(&self, r: u64) -> u64 {
        self.old
            .get(r as usize)
            .copied()
            .flatten()
            .map_or(0, |(pos, _)| pos + u64::from(self.whole))
    }
    /// Whether global position `g` still has outputs to deliver.
    pub fn remains(&self, g: u64) -> bool {
        let w = self.old_world.max(1);
        g / w >= self.done(g % w)
    }
    /// The ordinals already delivered at global position `g` (it was in progress).
    pub fn delivered_ord(&self, g: u64) -> Option<u64> {
        if self.whole {
            return None;
        }
        let w = self.old_world.max(1);
        match self.old.get((g % w) as usize).copied().flatten() {
            Some((pos, ord)) if pos == g / w => Some(ord),
            _ => None,
        }
    }
    /// Remaining positions below `n`.
    fn remaining_below(&self, n: u64) -> u64 {
        let w = self.old_world.max(1);
        (0..w)
            .map(|r| {
                let total = if n > r { (n - r).div_ceil(w) } else { 0 };
                total.saturating_sub(self.done(r))
            })
            .sum()
    }
    /// This rank's positions in the epoch, of a source of `n` samples.
    pub fn len(&self, n: u64) -> u64 {
        let rest = self.remaining_below(n);
        let base = rest / self.world;
        if self.equal || self.rank >= rest % self.world {
            base
        } else {
            base + 1
        }
    }
    /// Whether this rank has nothing left in the epoch.
    pub fn is_empty(&self, n: u64) -> bool {
        self.len(n) == 0
    }
    /// This rank's global positions from local position `start` on (O(n) to reach `start`,
    /// then O(world / density) per position; nothing is materialised).
    pub fn positions(&self, n: u64, start: u64) -> Positions {
        Positions {
            len: self.len(n),
            epoch: self.clone(),
            n,
            start,
            k: 0,
            g: 0,
            local: 0,
        }
    }
    /// Local positions of this rank holding an old rank's in-progress position, with the
    /// ordinal delivered there: the outputs to drop again.
    pub fn partial_positions(&self, n: u64) -> Vec<(u64, u64)> {
        if self.whole {
            return Vec::new();
        }
        let w = self.old_world.max(1);
        let len = self.len(n);
        let mut out = Vec::new();
        for (r, c) in self.old.iter().enumerate() {
            let Some((pos, ord)) = *c else { continue };
            let g = pos * w + r as u64;
            if g >= n || !self.remains(g) {
                continue;
            }
            let k = self.remaining_below(g);
            if k % self.world == self.rank && k / self.world < len {
                out.push((k / self.world, ord));
            }
        }
        out.sort_unstable();
        out
    }
}

/// An elastic epoch's positions for one rank (see [`ElasticEpoch::positions`]); owns its
/// epoch so a producer can keep it between chunks.
#[derive(Debug, Clone)]
pub struct Positions {
    epoch: ElasticEpoch,
    n: u64,
    len: u64,
    start: u64,
    /// Remaining positions seen so far.
    k: u64,
    g: u64,
    local: u64,
}

impl Iterator for Positions {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        let e = &self.epoch;
        while self.local < self.len && self.g < self.n {
            let here = self.g;
            self.g += 1;
            if !e.remains(here) {
                continue;
            }
            let mine = self.k % e.world == e.rank;
            self.k += 1;
            if mine {
                self.local += 1;
                if self.local > self.start {
                    return Some(here);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod elastic_tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Old ranks stop anywhere; the new world's ranks cover what is left exactly once
        /// (all of it with equal=False; all but < world with equal=True), in equal parts.
        #[test]
        fn remainder_is_split_exactly_once(n in 0u64..400, old_world in 1u64..6, world in 1u64..6,
                                           stops in proptest::collection::vec(0u64..100, 6),
                                           equal in any::<bool>()) {
            let old: Vec<Option<(u64, u64)>> = (0..old_world)
                .map(|r| {
                    let len = ShardSpec::try_new(r, old_world, true).unwrap().len(n);
                    (len > 0).then(|| (stops[r as usize] % len, 0))
                })
                .collect();
            let e = |rank| ElasticEpoch { epoch: 0, old_world, old: old.clone(), rank, world, equal,
                                          whole: stops[5] % 2 == 0 };
            let remaining: Vec<u64> = (0..n).filter(|&g| e(0).remains(g)).collect();
            let mut got: Vec<u64> = vec![];
            let mut lens = vec![];
            for rank in 0..world {
                let ee = e(rank);
                let mine: Vec<u64> = ee.positions(n, 0).collect();
                prop_assert_eq!(mine.len() as u64, ee.len(n));
                // Resuming the new rank mid-way gives the same suffix.
                let half = mine.len() as u64 / 2;
                prop_assert_eq!(ee.positions(n, half).collect::<Vec<_>>(), mine[half as usize..].to_vec());
                lens.push(mine.len());
                got.extend(mine);
            }
            if equal {
                prop_assert!(lens.iter().all(|&l| l == lens[0]));
                prop_assert!(remaining.len() - got.len() < world as usize);
            } else {
                prop_assert_eq!(got.len(), remaining.len());
            }
            got.sort_unstable();
            got.dedup();
            prop_assert_eq!(got.len(), lens.iter().sum::<usize>());
            prop_assert!(got.iter().all(|g| remaining.contains(g)));
        }
    }

    #[test]
    fn in_progress_positions_are_found_where_they_land() {
        // 2 old ranks over 10 samples: rank 0 read 0,2,4,6,8 and stopped in position 2 (g=4);
        // rank 1 read 1,3,5,7,9 and finished position 0 (g=1) only.
        let e = |rank| ElasticEpoch {
            epoch: 0,
            old_world: 2,
            old: vec![Some((2, 1)), Some((1, 0))],
            rank,
            world: 3,
            equal: false,
            whole: false,
        };
        let rem: Vec<u64> = (0..10).filter(|&g| e(0).remains(g)).collect();
        assert_eq!(rem, [3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(e(0).delivered_ord(4), Some(1));
        // g=4 is the 2nd remaining (k=1) → rank 1, local 0; g=3 (rank 1's position 1) was
        // in progress too → k=0 → rank 0, local 0.
        assert_eq!(e(1).partial_positions(10), [(0, 1)]);
        assert_eq!(e(0).partial_positions(10), [(0, 0)]);
        assert_eq!(e(2).partial_positions(10), []);
    }
}
