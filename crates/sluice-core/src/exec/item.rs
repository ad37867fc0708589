//! What flows between stages — items, chunks of them, what a stage made of a chunk — and the
//! interface every stage's work implements. A leaf: the stage modules, the executor and the
//! backends import it, it imports none of them.

use std::sync::Arc;

use crate::error::{Error, Result, SampleRef};
use crate::op::OpContext;
use crate::sample::Sample;
use crate::value::Value;

use super::resume::{Cursor, Outer};

/// A sample in flight, with the coordinates its randomness and error messages derive from.
#[derive(Debug, Clone, Default)]
pub struct Item {
    pub epoch: u64,
    /// Position in the epoch (before filtering).
    pub index: u64,
    /// Which output of an upstream flat_map (0 if none).
    pub sub: u64,
    /// Index into a random-access source.
    pub source_index: u64,
    /// Samples in this item (1, or the batch size for a batch).
    pub rows: u64,
    /// Where this item stands in its segment of the stream (for a batch: its last row), so
    /// the consumer's position travels with the data and resuming needs no worker state.
    pub cursor: Cursor,
    /// Restart records of the re-sequencing stages this item passed (outermost first).
    pub outer: Outer,
    /// The sample's `path` when it was read, kept to name the sample in errors.
    pub path: Option<Arc<str>>,
    pub sample: Sample,
    /// A batch of rows read together for a consumer that takes them one by one
    /// ([`crate::Delivery::rows`]): where each row stands. `None` for anything else.
    pub rows_at: Option<Box<RowsAt>>,
}

/// Where the rows of a batch read for a consumer that takes rows in bulk stand, in order:
/// the places they would have had as separate items, so checkpoints and error messages are
/// those of the rows.
#[derive(Debug, Clone, Default)]
pub struct RowsAt(pub Vec<RowAt>);

/// Where one row of a [`RowsAt`] stands.
#[derive(Debug, Clone, Copy)]
pub struct RowAt {
    /// Its cursor: the position after it.
    pub cursor: Cursor,
    /// Its epoch and position in the epoch, which errors name.
    pub epoch: u64,
    pub index: u64,
    /// Its index in the source, to read it alone when it fails.
    pub source_index: u64,
}

impl Item {
    /// An item at `cursor` in the source order, with no sample read yet.
    pub(crate) fn at(epoch: u64, index: u64, source_index: u64, cursor: Cursor) -> Item {
        Item {
            epoch,
            index,
            sub: 0,
            source_index,
            rows: 1,
            cursor,
            outer: None,
            path: None,
            sample: Sample::new(),
            rows_at: None,
        }
    }

    /// Sets the sample and remembers its path.
    pub(crate) fn with_sample(mut self, sample: Sample) -> Item {
        self.set_sample(sample);
        self
    }

    /// Sets the sample and remembers its path.
    pub(crate) fn set_sample(&mut self, sample: Sample) {
        self.path = match sample.get("path") {
            Some(Value::Str(p)) => Some(p.clone()),
            _ => None,
        };
        self.sample = sample;
    }

    pub(crate) fn sample_ref(&self) -> SampleRef {
        SampleRef {
            epoch: self.epoch,
            index: self.index,
            path: self.path.as_deref().map(str::to_string),
        }
    }

    /// Where this item stands in the source's order: its cursor, or after a re-sequencing
    /// stage (a numbered batch, `take`, a window) the input cursor the first of them recorded.
    /// The source admits chunks by their source cursors (the memory cap's accounting), so
    /// what the consumer reached must be told in the same space: a `take`'s count of outputs
    /// compared with source positions left everything counted as in flight forever.
    pub(crate) fn source_cursor(&self) -> Cursor {
        self.outer
            .as_deref()
            .and_then(|o| o.first())
            .map_or(self.cursor, |r| r.input)
    }

    /// `e`, raised by `op` on this item's sample, as the error naming both.
    pub(crate) fn failed_in(&self, op: &str, e: Error) -> Error {
        Error::InSample {
            op: op.to_string(),
            sample: self.sample_ref(),
            source: Box::new(e),
        }
    }

    /// Where op `op_id` runs on this item's sample, under the iteration seed `seed`.
    pub(crate) fn op_context(&self, seed: u64, op_id: u64) -> OpContext {
        OpContext {
            seed,
            epoch: self.epoch,
            index: self.index,
            sub: self.sub,
            op_id,
        }
    }
}

/// A run of consecutive items handed between stages together.
pub type Chunk = Vec<Item>;

/// One stage's processing.
pub(crate) trait Transform: Send + Sync {
    /// Processes `chunk` into `out`. On an error, `out` holds the outputs that precede the
    /// failing input, and nothing after it may be delivered.
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Chunk>) -> Result<()>;
    fn finish(&mut self, _out: &mut Vec<Chunk>) -> Result<()> {
        Ok(())
    }
    /// No more input is wanted (e.g. `take` reached its count).
    fn exhausted(&self) -> bool {
        false
    }
}

/// What a stage made of a chunk: the outputs of the items before the first failing one (all
/// of them without a failure), then that failure.
pub type Partial = (Chunk, Option<Error>);

/// Whether `e` stops the run at once (Ctrl-C, a cancelled execution): outputs before it are
/// not delivered and no error policy applies to it.
pub(crate) fn is_interrupt(e: &Error) -> bool {
    matches!(e.root(), Error::Interrupted { .. } | Error::Cancelled)
}

/// Output chunks of a stage may be empty after filtering; downstream skips them cheaply.
pub(crate) fn nonempty(chunks: &mut Vec<Chunk>) {
    chunks.retain(|c| !c.is_empty());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::resume::{push_outer, Restart};

    #[test]
    fn the_source_cursor_is_the_first_renumbering_stages_input() {
        let at = |pos| Cursor {
            epoch: 2,
            pos,
            ord: 0,
        };
        let mut it = Item::at(2, 40, 40, at(41));
        assert_eq!(it.source_cursor(), at(41), "not renumbered: its own cursor");
        // A numbered batch recorded source position 33; a take after it, batch 4.
        let batch = Restart {
            slot: 2,
            input: at(33),
            input_index: 0,
            counter: 4,
        };
        let take = Restart {
            slot: 3,
            input: at(4),
            input_index: 4,
            counter: 4,
        };
        it.outer = push_outer(&push_outer(&None, batch), take);
        it.cursor = at(4);
        assert_eq!(it.source_cursor(), at(33));
    }
}
