//! Index order of a random-access source: which source index is read at each position of each
//! epoch, after global shuffle, sharding and repetition — computed, never materialised.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::rng::{combine, mix64};

/// A pseudo-random permutation of `0..n` in O(1) memory: a balanced Feistel network over the
/// next even power of two, with cycle-walking to stay inside `0..n`.
///
/// ```
/// use sluice_core::Permutation;
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

/// Rank `rank` of `world_size` after `shard`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardSpec {
    /// This rank (0-based).
    pub rank: u64,
    /// Number of ranks.
    pub world_size: u64,
    /// Equal length on every rank (drops up to world_size-1 samples).
    pub equal: bool,
}

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
        })
    }
    /// How many of `n` positions this rank gets.
    pub fn len(&self, n: u64) -> u64 {
        let base = n / self.world_size;
        if self.equal || self.rank >= n % self.world_size {
            base
        } else {
            base + 1
        }
    }
    /// Whether this rank gets nothing.
    pub fn is_empty(&self, n: u64) -> bool {
        self.len(n) == 0
    }
}

/// The order of a random-access source's samples across epochs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexOrder {
    /// Number of samples in the source.
    pub len: u64,
    /// Global shuffle seed (reseeded per epoch), if shuffled.
    pub shuffle: Option<u64>,
    /// Shard of this rank, if sharded.
    pub shard: Option<ShardSpec>,
    /// Number of epochs; `None` = forever.
    pub epochs: Option<u64>,
}

/// One position of the order: where a sample sits and which source sample it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// Epoch (0-based).
    pub epoch: u64,
    /// Global position within the epoch (same on every rank; randomness derives from it).
    pub index: u64,
    /// Index into the source.
    pub source_index: u64,
}

impl IndexOrder {
    /// Samples per epoch for this rank.
    pub fn epoch_len(&self) -> u64 {
        match self.shard {
            Some(s) => s.len(self.len),
            None => self.len,
        }
    }
    /// The `pos`-th position (< [`IndexOrder::epoch_len`]) of `epoch` on this rank.
    pub fn position(&self, epoch: u64, pos: u64) -> Position {
        let index = match self.shard {
            // Strided sharding keeps every rank's slice spread over the whole (shuffled) order.
            Some(s) => pos * s.world_size + s.rank,
            None => pos,
        };
        let source_index = match self.shuffle {
            Some(seed) => Permutation::new(self.len, combine(seed, epoch)).apply(index),
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
        fn shards_are_equal_disjoint_and_cover(n in 0u64..500, world in 1u64..9, seed in any::<u64>()) {
            let mut all = vec![];
            let mut lens = vec![];
            for rank in 0..world {
                let order = IndexOrder { len: n, shuffle: Some(seed),
                    shard: Some(ShardSpec::try_new(rank, world, true).unwrap()), epochs: Some(1) };
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

    #[test]
    fn unequal_shards_keep_the_remainder() {
        let total: u64 = (0..3)
            .map(|r| ShardSpec::try_new(r, 3, false).unwrap().len(10))
            .sum();
        assert_eq!(total, 10);
    }

    #[test]
    fn shuffle_changes_per_epoch() {
        let o = IndexOrder {
            len: 100,
            shuffle: Some(1),
            shard: None,
            epochs: None,
        };
        let e0: Vec<u64> = (0..100).map(|p| o.position(0, p).source_index).collect();
        let e1: Vec<u64> = (0..100).map(|p| o.position(1, p).source_index).collect();
        assert_ne!(e0, e1);
    }

    #[test]
    fn bad_shard_arguments() {
        assert!(ShardSpec::try_new(3, 2, true).is_err());
        assert!(ShardSpec::try_new(0, 0, true).is_err());
    }
}
