//! The work a stage does on chunks of items, one module per kind: a fused op chain
//! (stateless) or a stateful step (batch and unbatch, take, the window shuffle, pack). The
//! same code runs in a thread or inline. How stages re-sequence the stream so a run can
//! resume is in [`super::resume`].

mod batch;
pub(crate) mod chain;
mod pack;
mod take;
mod window;

use std::sync::Arc;

use crate::plan::physical::StageKind;
use crate::source::SourceRef;
use crate::stats::PipelineStats;

use super::item::Transform;
use super::resume::StageResume;
use batch::{Batch, BatchNumbers, Unbatch};
use chain::Chain;
use pack::Pack;
use take::Take;
use window::WindowShuffle;

/// What follows a stage, as far as building its work is concerned.
pub(crate) struct Following {
    /// Per-item work follows (a batch then numbers its outputs and records restarts, see
    /// [`super::resume`]).
    pub resequence: bool,
    /// Nothing after it looks at values (only `take`s follow) and the consumer takes
    /// columns, so a batch may hand over a source's columns.
    pub columns: bool,
    /// The consumer takes this stage's rows in bulk: a batch that reads keeps each row's
    /// place ([`crate::exec::RowsAt`]) and the consumer takes its rows one by one.
    pub rows: bool,
}

/// What a run's randomness derives from besides positions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RunKeys {
    /// The iteration's seed.
    pub seed: u64,
    /// The data epoch of the run's epoch 0 ([`crate::order::first_epoch`]): stages keyed by
    /// their input's cursor epochs (the window shuffle) add it.
    pub first_epoch: u64,
}

/// Builds stage `stage`'s work.
pub(crate) fn make_transform(
    kind: &StageKind,
    source: &SourceRef,
    keys: RunKeys,
    stats: Arc<PipelineStats>,
    stage: usize,
    resume: StageResume,
    following: Following,
) -> Box<dyn Transform> {
    match kind {
        StageKind::Chain { read, ops } => Box::new(Chain::new(
            read.then(|| source.clone()),
            ops.clone(),
            keys.seed,
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
            ragged,
            slots,
        } => Box::new(Batch {
            slots: slots.clone(),
            seed: keys.seed,
            read: read.then(|| source.clone()),
            ragged: *ragged,
            columns: following.columns,
            rows: following.rows,
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
        StageKind::ShuffleBuffer { size, seed, op_id } => Box::new(
            WindowShuffle::new(*size, *seed, *op_id, stage, resume)
                .with_first_epoch(keys.first_epoch),
        ),
        StageKind::Pack(spec) => Box::new(Pack::new(spec.clone(), stage, resume)),
    }
}
