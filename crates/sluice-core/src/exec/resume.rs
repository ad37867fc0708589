//! Where a stream stands, and how a run resumes from there.
//!
//! Every item carries its [`Cursor`] — where it stands in the stream — so the consumer's
//! position travels with the data. Stages that re-sequence the stream (take, the window
//! shuffle, pack, and a batch that more per-item work follows, as in map_batches) number
//! their outputs anew and append a [`Restart`] record to the item's `outer` list, saying
//! where their input must be replayed from to produce that output again. A checkpoint is the
//! last delivered item's cursor and records (a [`ResumePoint`]); resuming starts the source
//! where the outermost record says and tells each stage what to drop ([`StageResume`]).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::plan::physical::{PhysicalPlan, StageKind};

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

#[cfg(test)]
impl StageResume {
    /// How a re-sequencing stage that is the last to drop outputs resumes after the output at
    /// `cursor` whose last restart record (in `outer`) it wrote: what
    /// [`ResumePoint::stage_resumes`] gives it.
    pub(crate) fn after(cursor: Cursor, outer: &Outer) -> StageResume {
        let r = *outer
            .as_deref()
            .and_then(<[Restart]>::last)
            .expect("a restart record");
        StageResume {
            drop_before: Some(r.input),
            epoch: Some(r.input.epoch),
            input_index: r.input_index,
            counter: r.counter,
            drop: Skip {
                upto: Some(cursor),
                partial: vec![],
            },
        }
    }
}

/// A checkpoint's position: the last delivered output's cursor and the restart records of
/// the re-sequencing stages it passed (outermost first); with an elastic epoch, where the
/// ranks of another world size stood in it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResumePoint {
    pub cursor: Cursor,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outer: Vec<Restart>,
}

impl ResumePoint {
    /// Where the source starts reading again.
    pub fn source_start(&self) -> Cursor {
        self.outer.first().map_or(self.cursor, |r| r.input)
    }

    /// How each stage of `plan` resumes from here.
    pub(super) fn stage_resumes(&self, plan: &PhysicalPlan) -> Result<Vec<StageResume>> {
        let mut res = vec![StageResume::default(); plan.stages.len()];
        for r in &self.outer {
            let i = r.slot.checked_sub(1).filter(|&i| i < plan.stages.len());
            let Some(i) = i else {
                return Err(Error::invalid(format!(
                    "checkpoint names stage {} that this plan does not have",
                    r.slot
                )));
            };
            let at = |j: usize, res: &mut Vec<StageResume>| {
                res[j].drop_before = Some(r.input);
            };
            match &plan.stages[i].kind {
                StageKind::Take { .. }
                | StageKind::ShuffleBuffer { .. }
                | StageKind::Pack(_)
                | StageKind::Batch { .. } => at(i, &mut res),
                _ => {
                    return Err(Error::invalid(
                        "checkpoint does not match this plan's stages",
                    ))
                }
            }
            res[i].epoch = Some(r.input.epoch);
            res[i].input_index = r.input_index;
            res[i].counter = r.counter;
        }
        // Outputs already delivered are dropped where their cursors are final: after the last
        // chain (ordinals of flat_maps) or re-sequencing stage, before any batching.
        if let Some(last) = last_dropping_stage(plan) {
            res[last].drop.upto = Some(self.cursor);
        }
        Ok(res)
    }
}

/// Stages that do per-item work after which outputs already delivered can be dropped.
pub(super) fn drops(kind: &StageKind) -> bool {
    matches!(
        kind,
        StageKind::Chain { .. }
            | StageKind::Take { .. }
            | StageKind::ShuffleBuffer { .. }
            | StageKind::Pack(_)
            | StageKind::Unbatch
    )
}

/// Where outputs already delivered are dropped on resume: after the last chain (flat_map
/// ordinals are final there) or re-sequencing stage, before any final batching.
pub(super) fn last_dropping_stage(plan: &PhysicalPlan) -> Option<usize> {
    plan.stages.iter().rposition(|s| drops(&s.kind))
}
