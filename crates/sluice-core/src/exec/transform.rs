//! The work a stage does on chunks of items: a fused op chain (stateless) or a stateful step
//! (batch, unbatch, take, shuffle buffer). The same code runs in a thread or inline.
//!
//! Resuming: every item carries its [`Cursor`] — where it stands in the stream — so the
//! consumer's position travels with the data. Stages that re-sequence the stream (take, the
//! window shuffle, and a batch that more per-item work follows, as in map_batches) number
//! their outputs anew and append a [`Restart`] record to the item's `outer` list, saying
//! where their input must be replayed from to produce that output again. A checkpoint is the
//! last delivered item's cursor and records.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::collate::{collate, uncollate};
use crate::error::{Error, Result, SampleRef};
use crate::op::{Emit, OpContext};
use crate::plan::logical::OnError;
use crate::plan::physical::{ChainOp, StageKind};
use crate::rng::combine;
use crate::sample::Sample;
use crate::source::SourceRef;
use crate::stats::PipelineStats;
use crate::value::Value;

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
}

/// A point in the output stream: the position an output came from and its ordinal among
/// that position's outputs (a flat_map can make several). Positions are the source's order
/// until a re-sequencing stage, then that stage's output count. Ordered as (epoch, pos, ord).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct Cursor {
    pub epoch: u64,
    /// Position within the epoch on this rank.
    pub pos: u64,
    /// Ordinal among the outputs of that position.
    pub ord: u64,
}

/// How a re-sequencing stage restarts to produce a given output again: replay its input from
/// `input` (a cursor in its input's space), which was its `input_index`-th input, with its
/// output counter at `counter`. Outputs before the checkpoint are then dropped downstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Restart {
    /// The stage that wrote it (its slot in the plan: 1 + stage index).
    pub slot: usize,
    /// The first input to replay.
    pub input: Cursor,
    /// That input's index among the stage's inputs (this epoch, or overall for take).
    pub input_index: u64,
    /// The stage's output counter when that input arrives.
    pub counter: u64,
}

/// Restart records of enclosing segments, shared by the items they cover.
pub type Outer = Option<Arc<[Restart]>>;

/// `outer` with `r` appended.
pub(crate) fn push_outer(outer: &Outer, r: Restart) -> Outer {
    let mut v: Vec<Restart> = outer.as_deref().unwrap_or_default().to_vec();
    v.push(r);
    Some(v.into())
}

/// Outputs a resumed stage drops because they were delivered before the checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Skip {
    /// Everything at or before this cursor.
    pub upto: Option<Cursor>,
    /// At these positions, also the ordinals up to theirs (after an elastic resume: positions
    /// an old rank had begun).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub partial: Vec<Cursor>,
}

impl Skip {
    /// Whether an output at `c` is still to be delivered.
    pub fn keeps(&self, c: &Cursor) -> bool {
        self.upto.is_none_or(|u| *c > u)
            && !self
                .partial
                .iter()
                .any(|p| (p.epoch, p.pos) == (c.epoch, c.pos) && c.ord <= p.ord)
    }
    /// Whether nothing is dropped.
    pub fn is_empty(&self) -> bool {
        self.upto.is_none() && self.partial.is_empty()
    }
}

/// How a stage resumes (all `None`/0 for a fresh run).
#[derive(Debug, Clone, Default)]
pub(crate) struct StageResume {
    /// Drop inputs before this cursor (the replay starts a little early).
    pub drop_before: Option<Cursor>,
    /// The epoch the counters below belong to.
    pub epoch: Option<u64>,
    /// Input and output counters to continue from.
    pub input_index: u64,
    pub counter: u64,
    /// Drop outputs already delivered.
    pub drop: Skip,
}

impl StageResume {
    pub(crate) fn keep_input(&self, c: &Cursor) -> bool {
        self.drop_before.is_none_or(|d| *c >= d)
    }
    pub(crate) fn keep_output(&self, c: &Cursor) -> bool {
        self.drop.keeps(c)
    }
}

/// A run of consecutive items handed between stages together.
pub type Chunk = Vec<Item>;

/// One stage's processing.
pub(crate) trait Transform: Send + Sync {
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Chunk>) -> Result<()>;
    fn finish(&mut self, _out: &mut Vec<Chunk>) -> Result<()> {
        Ok(())
    }
    /// No more input is wanted (e.g. `take` reached its count).
    fn exhausted(&self) -> bool {
        false
    }
}

/// What follows a stage, as far as building its work is concerned.
pub(crate) struct Following {
    /// Per-item work follows (a batch then numbers its outputs and records restarts, see the
    /// module docs).
    pub resequence: bool,
    /// Nothing after it looks at values (only `take`s follow) and the consumer takes
    /// columns, so a batch may hand over a source's columns.
    pub columns: bool,
}

/// Builds stage `stage`'s work.
pub(crate) fn make_transform(
    kind: &StageKind,
    source: &SourceRef,
    seed: u64,
    stats: Arc<PipelineStats>,
    stage: usize,
    resume: StageResume,
    following: Following,
) -> Box<dyn Transform> {
    match kind {
        StageKind::Chain { read, ops } => Box::new(Chain::new(
            read.then(|| source.clone()),
            ops.clone(),
            seed,
            stats,
            stage,
            resume.drop.clone(),
        )),
        StageKind::Batch {
            size,
            drop_last,
            per_epoch,
            pad,
            read,
        } => Box::new(Batch {
            read: read.then(|| source.clone()),
            columns: following.columns,
            size: *size,
            drop_last: *drop_last,
            per_epoch: *per_epoch,
            pad: pad.clone(),
            // `size` is the user's (batch(10**15) over a small set is one batch): reserve
            // a typical batch up front, not the declared size.
            pending: Vec::with_capacity((*size).min(1 << 12)),
            numbering: following.resequence.then_some(BatchNumbers {
                slot: stage,
                epoch: resume.epoch.map(|e| if *per_epoch { e } else { 0 }),
                count: resume.counter,
            }),
            resume,
        }),
        StageKind::Unbatch => Box::new(Unbatch { resume }),
        StageKind::Take { n } => Box::new(Take {
            slot: stage,
            left: n.saturating_sub(resume.counter),
            taken: resume.counter,
            resume: resume.clone(),
        }),
        StageKind::ShuffleBuffer {
            size,
            seed: s,
            op_id,
        } => Box::new(super::window::WindowShuffle::new(
            *size,
            s.unwrap_or(seed),
            *op_id,
            stage,
            resume,
        )),
        StageKind::Pack(spec) => Box::new(super::pack::Pack::new(spec.clone(), stage, resume)),
    }
}

/// Reads each item's sample from a random-access source; a failure names the sample.
fn read_items(src: &SourceRef, mut items: Chunk) -> Result<Chunk> {
    let indices: Vec<u64> = items.iter().map(|it| it.source_index).collect();
    // In place: an item is moved only to hand it on.
    for (it, res) in items.iter_mut().zip(src.get_many(&indices)) {
        match res {
            Ok(sample) => it.set_sample(sample),
            Err(e) => {
                return Err(Error::InSample {
                    op: src.name().to_string(),
                    sample: it.sample_ref(),
                    source: Box::new(e),
                })
            }
        }
    }
    Ok(items)
}

/// Fused element-wise ops, applied op by op over the whole chunk (so ops that pay a
/// per-call cost, like taking the GIL, pay it once per chunk).
pub(crate) struct Chain {
    read: Option<SourceRef>,
    ops: Vec<ChainOp>,
    seed: u64,
    stats: Arc<PipelineStats>,
    stage: usize,
    /// When resuming: outputs already delivered.
    skip: Skip,
}

impl Chain {
    pub(crate) fn new(
        read: Option<SourceRef>,
        ops: Vec<ChainOp>,
        seed: u64,
        stats: Arc<PipelineStats>,
        stage: usize,
        skip: Skip,
    ) -> Self {
        Chain {
            read,
            ops,
            seed,
            stats,
            stage,
            skip,
        }
    }
}

impl Chain {
    pub(crate) fn run(&self, mut items: Chunk) -> Result<Chunk> {
        if let Some(src) = &self.read {
            items = read_items(src, items)?;
        }
        for cop in &self.ops {
            items = self.apply(cop, items)?;
        }
        // A position's outputs never span chunks, so ordinals can be counted per chunk.
        let mut prev: Option<(u64, u64)> = None;
        let mut ord = 0;
        for it in &mut items {
            let key = (it.cursor.epoch, it.cursor.pos);
            ord = if prev == Some(key) { ord + 1 } else { 0 };
            prev = Some(key);
            it.cursor.ord = ord;
        }
        if !self.skip.is_empty() {
            items.retain(|it| self.skip.keeps(&it.cursor));
        }
        let bytes: usize = items.iter().map(|it| it.sample.nbytes()).sum();
        self.stats
            .counters(self.stage)
            .bytes_out
            .fetch_add(bytes as u64, Relaxed);
        Ok(items)
    }

    fn apply(&self, cop: &ChainOp, mut items: Chunk) -> Result<Chunk> {
        let inputs = items
            .iter_mut()
            .map(|it| {
                let cx = OpContext {
                    seed: self.seed,
                    epoch: it.epoch,
                    index: it.index,
                    sub: it.sub,
                    op_id: cop.op_id,
                };
                (std::mem::take(&mut it.sample), cx)
            })
            .collect();
        let results = cop.op.apply_many(inputs);
        // One output per input (a map): the items stay where they are.
        if results.iter().all(|r| matches!(r, Ok(Emit::One(_)))) {
            for (it, res) in items.iter_mut().zip(results) {
                if let Ok(Emit::One(s)) = res {
                    it.sample = s;
                }
            }
            return Ok(items);
        }
        let mut out = Vec::with_capacity(items.len());
        for (mut it, res) in items.into_iter().zip(results) {
            match res {
                Ok(Emit::One(s)) => {
                    it.sample = s;
                    out.push(it);
                }
                Ok(Emit::Drop) => {}
                Ok(Emit::Many(samples)) => {
                    for (j, s) in samples.into_iter().enumerate() {
                        out.push(Item {
                            sub: combine(it.sub, j as u64 + 1),
                            sample: s,
                            ..it.clone()
                        });
                    }
                }
                Err(e @ Error::Interrupted { .. }) => return Err(e),
                Err(e) => match cop.on_error {
                    OnError::Skip => {
                        self.stats
                            .counters(self.stage)
                            .skipped
                            .fetch_add(1, Relaxed);
                    }
                    OnError::Raise => {
                        return Err(Error::InSample {
                            op: cop.op.name().to_string(),
                            sample: it.sample_ref(),
                            source: Box::new(e),
                        })
                    }
                },
            }
        }
        Ok(out)
    }
}

impl Transform for Chain {
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Chunk>) -> Result<()> {
        out.push(self.run(chunk)?);
        Ok(())
    }
}

struct Batch {
    /// The source this batch reads its rows from (column by column), if it reads.
    read: Option<SourceRef>,
    /// Its outputs go straight to the consumer: the source may hand over its own columns.
    columns: bool,
    resume: StageResume,
    size: usize,
    drop_last: bool,
    per_epoch: bool,
    pad: Vec<(String, f64)>,
    pending: Vec<Item>,
    /// When per-item work follows: batches are numbered (per epoch with `per_epoch`) and a
    /// resume rebuilds the batch it stopped in from its first row.
    numbering: Option<BatchNumbers>,
}

struct BatchNumbers {
    slot: usize,
    epoch: Option<u64>,
    count: u64,
}

impl Batch {
    fn flush(&mut self, out: &mut Vec<Chunk>, is_last: bool) -> Result<()> {
        if self.pending.is_empty() || (is_last && self.drop_last && self.pending.len() < self.size)
        {
            self.pending.clear();
            return Ok(());
        }
        let items = std::mem::take(&mut self.pending);
        let (first, last) = (&items[0], &items[items.len() - 1]);
        let mut batch = Item::at(first.epoch, first.index, first.source_index, last.cursor);
        batch.sub = first.sub;
        batch.outer = last.outer.clone();
        if let Some(n) = &mut self.numbering {
            // Numbered per epoch of the input's cursors, the epoch its restart record names
            // (after a batch numbered across epochs, not the rows' epoch), so a resume
            // continues the count it saved.
            let epoch = if self.per_epoch {
                first.cursor.epoch
            } else {
                0
            };
            if n.epoch != Some(epoch) {
                n.epoch = Some(epoch);
                n.count = 0;
            }
            batch.cursor = Cursor {
                epoch,
                pos: n.count,
                ord: 0,
            };
            batch.outer = push_outer(
                &first.outer,
                Restart {
                    slot: n.slot,
                    input: first.cursor,
                    input_index: 0,
                    counter: n.count,
                },
            );
            n.count += 1;
        }
        batch.rows = items.iter().map(|i| i.rows).sum();
        batch.sample = self.stack(items)?;
        out.push(vec![batch]);
        self.pending = Vec::with_capacity(self.size.min(1 << 12));
        Ok(())
    }
}

impl Batch {
    /// The batch of `items`: read by the source as a whole when this batch reads, else (or
    /// when that fails, so the error names the sample) row by row, padded and collated.
    fn stack(&self, items: Chunk) -> Result<Sample> {
        if let Some(src) = self.read.as_ref().filter(|_| self.pad.is_empty()) {
            let indices: Vec<u64> = items.iter().map(|it| it.source_index).collect();
            let whole = if self.columns {
                src.get_columns(&indices)
            } else {
                src.get_batch(&indices)
            };
            if let Ok(sample) = whole {
                return Ok(sample);
            }
        }
        let items = match &self.read {
            Some(src) => read_items(src, items)?,
            None => items,
        };
        let mut samples: Vec<Sample> = items.into_iter().map(|i| i.sample).collect();
        if !self.pad.is_empty() {
            crate::collate::pad_to_longest(&mut samples, &self.pad)?;
        }
        collate(&samples)
    }
}

impl Transform for Batch {
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Chunk>) -> Result<()> {
        for it in chunk {
            if !self.resume.keep_input(&it.cursor) {
                continue;
            }
            if self.per_epoch && self.pending.first().is_some_and(|p| p.epoch != it.epoch) {
                self.flush(out, true)?;
            }
            self.pending.push(it);
            if self.pending.len() == self.size {
                self.flush(out, false)?;
            }
        }
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<Chunk>) -> Result<()> {
        self.flush(out, true)
    }
}

/// Splits map_batches' output batches back into rows: a row keeps its batch's position
/// and takes its index in the batch as ordinal, so a resume inside a batch recomputes the
/// whole batch (its function saw all of it) and drops the rows already delivered.
struct Unbatch {
    resume: StageResume,
}

impl Transform for Unbatch {
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Chunk>) -> Result<()> {
        let mut rows_out = Vec::new();
        for it in chunk {
            let rows = uncollate(it.sample)?;
            for (r, sample) in rows.into_iter().enumerate() {
                let cursor = Cursor {
                    ord: r as u64,
                    ..it.cursor
                };
                if !self.resume.keep_output(&cursor) {
                    continue;
                }
                let mut row = Item::at(it.epoch, it.index + r as u64, it.source_index, cursor);
                row.sub = it.sub;
                row.outer = it.outer.clone();
                row.sample = sample;
                rows_out.push(row);
            }
        }
        out.push(rows_out);
        Ok(())
    }
}

/// The first `n` items. It re-sequences (outputs are numbered 0..n) so a resume knows how many
/// were taken; each output records its input cursor to replay from.
struct Take {
    slot: usize,
    resume: StageResume,
    left: u64,
    taken: u64,
}

impl Transform for Take {
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Chunk>) -> Result<()> {
        let mut kept = Vec::with_capacity(chunk.len().min(self.left as usize));
        for mut it in chunk {
            if self.left == 0 {
                break;
            }
            if !self.resume.keep_input(&it.cursor) {
                continue;
            }
            let t = self.taken;
            self.taken += 1;
            self.left -= 1;
            it.outer = push_outer(
                &it.outer,
                Restart {
                    slot: self.slot,
                    input: it.cursor,
                    input_index: t,
                    counter: t,
                },
            );
            it.cursor = Cursor {
                epoch: 0,
                pos: t,
                ord: 0,
            };
            if self.resume.keep_output(&it.cursor) {
                kept.push(it);
            }
        }
        out.push(kept);
        Ok(())
    }
    fn exhausted(&self) -> bool {
        self.left == 0
    }
}

/// Output chunks of a stage may be empty after filtering; downstream skips them cheaply.
pub(crate) fn nonempty(chunks: &mut Vec<Chunk>) {
    chunks.retain(|c| !c.is_empty());
}

/// Items in arrival order (for the consumer's ready queue).
pub(crate) type Ready = VecDeque<Item>;
