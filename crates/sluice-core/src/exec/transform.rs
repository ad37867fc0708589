//! The work a stage does on chunks of items: a fused op chain (stateless) or a stateful step
//! (batch, unbatch, take, shuffle buffer). The same code runs in a thread or inline.

use std::collections::VecDeque;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use crate::collate::{collate, uncollate};
use crate::error::{Error, Result, SampleRef};
use crate::op::{Emit, OpContext};
use crate::plan::logical::OnError;
use crate::plan::physical::{ChainOp, StageKind};
use crate::rng::{combine, SampleRng};
use crate::sample::Sample;
use crate::source::SourceRef;
use crate::stats::PipelineStats;
use crate::value::Value;

/// A sample in flight, with the coordinates its randomness and error messages derive from.
#[derive(Debug, Clone)]
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
    /// Where this item stands in the source order (for a batch: its last row), so the
    /// consumer's position travels with the data and resuming needs no worker state.
    pub cursor: Cursor,
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
            path: None,
            sample: Sample::new(),
        }
    }

    /// Sets the sample and remembers its path.
    pub(crate) fn with_sample(mut self, sample: Sample) -> Item {
        self.path = match sample.get("path") {
            Some(Value::Str(p)) => Some(p.clone()),
            _ => None,
        };
        self.sample = sample;
        self
    }

    fn sample_ref(&self) -> SampleRef {
        SampleRef {
            epoch: self.epoch,
            index: self.index,
            path: self.path.as_deref().map(str::to_string),
        }
    }
}

/// A point in the output stream: the source position an output came from and its ordinal
/// among that position's outputs (a flat_map can make several).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Cursor {
    pub epoch: u64,
    /// Position within the epoch on this rank.
    pub pos: u64,
    /// Ordinal among the outputs of that position.
    pub ord: u64,
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

pub(crate) fn make_transform(
    kind: &StageKind,
    source: &SourceRef,
    seed: u64,
    stats: Arc<PipelineStats>,
    stage: usize,
    skip: Option<Cursor>,
) -> Box<dyn Transform> {
    match kind {
        StageKind::Chain { read, ops } => Box::new(Chain::new(
            read.then(|| source.clone()),
            ops.clone(),
            seed,
            stats,
            stage,
            skip,
        )),
        StageKind::Batch {
            size,
            drop_last,
            per_epoch,
            pad,
        } => Box::new(Batch {
            size: *size,
            drop_last: *drop_last,
            per_epoch: *per_epoch,
            pad: pad.clone(),
            pending: Vec::with_capacity(*size),
        }),
        StageKind::Unbatch => Box::new(Unbatch),
        StageKind::Take { n } => Box::new(Take { left: *n }),
        StageKind::ShuffleBuffer {
            size,
            seed: s,
            op_id,
        } => Box::new(ShuffleBuffer {
            size: *size,
            seed: s.unwrap_or(seed),
            op_id: *op_id,
            epoch: None,
            rng: SampleRng::from_key(0),
            buf: Vec::with_capacity(*size),
        }),
    }
}

/// Fused element-wise ops, applied op by op over the whole chunk (so ops that pay a
/// per-call cost, like taking the GIL, pay it once per chunk).
pub(crate) struct Chain {
    read: Option<SourceRef>,
    ops: Vec<ChainOp>,
    seed: u64,
    stats: Arc<PipelineStats>,
    stage: usize,
    /// When resuming: outputs at or before this cursor were already delivered.
    skip: Option<Cursor>,
}

impl Chain {
    pub(crate) fn new(
        read: Option<SourceRef>,
        ops: Vec<ChainOp>,
        seed: u64,
        stats: Arc<PipelineStats>,
        stage: usize,
        skip: Option<Cursor>,
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
            items = items
                .into_iter()
                .map(|it| match src.get(it.source_index) {
                    Ok(sample) => Ok(it.with_sample(sample)),
                    Err(e) => Err(Error::InSample {
                        op: src.name().to_string(),
                        sample: it.sample_ref(),
                        source: Box::new(e),
                    }),
                })
                .collect::<Result<_>>()?;
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
        if let Some(skip) = self.skip {
            items.retain(|it| {
                let c = it.cursor;
                !(c.epoch == skip.epoch && c.pos == skip.pos && c.ord <= skip.ord)
            });
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
    size: usize,
    drop_last: bool,
    per_epoch: bool,
    pad: Vec<(String, f64)>,
    pending: Vec<Item>,
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
        batch.rows = items.iter().map(|i| i.rows).sum();
        let mut samples: Vec<Sample> = items.into_iter().map(|i| i.sample).collect();
        if !self.pad.is_empty() {
            crate::collate::pad_to_longest(&mut samples, &self.pad)?;
        }
        batch.sample = collate(&samples)?;
        out.push(vec![batch]);
        self.pending = Vec::with_capacity(self.size);
        Ok(())
    }
}

impl Transform for Batch {
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Chunk>) -> Result<()> {
        for it in chunk {
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

struct Unbatch;

impl Transform for Unbatch {
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Chunk>) -> Result<()> {
        let mut rows_out = Vec::new();
        for it in chunk {
            let rows = uncollate(it.sample)?;
            for (r, sample) in rows.into_iter().enumerate() {
                let mut row = Item::at(it.epoch, it.index + r as u64, it.source_index, it.cursor);
                row.sub = it.sub;
                row.sample = sample;
                rows_out.push(row);
            }
        }
        out.push(rows_out);
        Ok(())
    }
}

struct Take {
    left: u64,
}

impl Transform for Take {
    fn push(&mut self, mut chunk: Chunk, out: &mut Vec<Chunk>) -> Result<()> {
        if (chunk.len() as u64) > self.left {
            chunk.truncate(self.left as usize);
        }
        self.left -= chunk.len() as u64;
        out.push(chunk);
        Ok(())
    }
    fn exhausted(&self) -> bool {
        self.left == 0
    }
}

/// Seeded buffer shuffle: each epoch has its own generator, so order does not depend on
/// where the previous epoch's buffer ended.
struct ShuffleBuffer {
    size: usize,
    seed: u64,
    op_id: u64,
    epoch: Option<u64>,
    rng: SampleRng,
    buf: Vec<Item>,
}

impl ShuffleBuffer {
    fn drain(&mut self, out: &mut Vec<Item>) {
        while !self.buf.is_empty() {
            let j = self.rng.below(self.buf.len() as u64) as usize;
            out.push(self.buf.swap_remove(j));
        }
    }
}

impl Transform for ShuffleBuffer {
    fn push(&mut self, chunk: Chunk, out: &mut Vec<Chunk>) -> Result<()> {
        let mut emitted = Vec::with_capacity(chunk.len());
        for it in chunk {
            if self.epoch != Some(it.epoch) {
                self.drain(&mut emitted);
                self.epoch = Some(it.epoch);
                self.rng = SampleRng::new(self.seed, it.epoch, u64::MAX, self.op_id);
            }
            if self.buf.len() == self.size {
                let j = self.rng.below(self.size as u64) as usize;
                emitted.push(std::mem::replace(&mut self.buf[j], it));
            } else {
                self.buf.push(it);
            }
        }
        out.push(emitted);
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<Chunk>) -> Result<()> {
        let mut rest = Vec::with_capacity(self.buf.len());
        self.drain(&mut rest);
        out.push(rest);
        Ok(())
    }
}

/// Output chunks of a stage may be empty after filtering; downstream skips them cheaply.
pub(crate) fn nonempty(chunks: &mut Vec<Chunk>) {
    chunks.retain(|c| !c.is_empty());
}

/// Items in arrival order (for the consumer's ready queue).
pub(crate) type Ready = VecDeque<Item>;
