//! Checkpoints: what `state_dict()` saves and `load_state_dict()` reads.
//!
//! A checkpoint is the position of the last output delivered — its cursor and the restart
//! records of the re-sequencing stages it passed (see `exec/resume.rs`) — written as a
//! tree of the pipeline's nodes, each `{"node", "own", "parent"}` (Grain's shape): `own` holds
//! what that node contributes. Sources and re-sequencing nodes (`take`, `shuffle_buffer`,
//! `map_batches`) own `at`, where the checkpoint stands in their output stream; re-sequencing
//! nodes also own their counters; `shard` owns its rank and world size. Nothing buffered is
//! saved: every stage either recomputes from a position or replays a bounded window.
//!
//! An *elastic* checkpoint merges the checkpoints of every rank of a sharded run so the epoch
//! in progress can finish on a different number of ranks ([`IterState::elastic`]).

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value as Json};

use crate::error::{Error, Result};
use crate::order::{ElasticEpoch, ShardSpec};
use crate::plan::logical::{ElemMode, LogicalPlan};
use crate::plan::physical::SourceStage;

use super::resume::{Cursor, Restart, ResumePoint};

/// A checkpoint of an iteration: small, JSON-serialisable, independent of thread counts.
/// In-flight prefetched outputs are not saved; they are recomputed on resume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IterState {
    pub version: u32,
    /// The fingerprint of the pipeline (`sluice::Dataset::fingerprint`) (without the shard's rank and world
    /// size, which the `shard` node's state carries, so an elastic resume can change them).
    pub pipeline: String,
    pub seed: u64,
    /// The iteration's epoch (`iter(epoch=k)`; see [`crate::ExecOptions::epoch`]): a reload
    /// continues in it. The cursors below count epochs within the iteration (`repeat(n)`'s
    /// 0…n-1). Checkpoints from before epochs were saved have none: epoch 0, as they ran.
    #[serde(default)]
    pub epoch: u64,
    /// The pipeline's last node and, through `parent`, every node up to the source (`None`:
    /// nothing delivered yet).
    pub state: Option<NodeState>,
    /// When resuming a sharded run on a different world size: the epoch in progress and where
    /// every old rank stood in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic: Option<Elastic>,
    /// The code of the pipeline's Python functions ([`crate::Op::code_digest`]): the
    /// fingerprint names them only, so a function whose body changed under the same name
    /// is caught here (a strict load refuses it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<FunctionCode>,
    /// What the source listed ([`crate::Source::data_digest`]): the fingerprint counts its
    /// samples only, so a file replaced by another under a new name is caught here (a strict
    /// load refuses it). `None` in checkpoints from before, or of sources that cannot tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

/// One Python function of a pipeline, as a checkpoint records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCode {
    /// The step's index, the source being 0.
    pub step: usize,
    /// The function's name.
    pub name: String,
    /// Its code digest.
    pub code: String,
}

/// The Python functions of `chain` (source first) with their code digests.
pub fn function_codes(chain: &[std::sync::Arc<LogicalPlan>]) -> Vec<FunctionCode> {
    chain
        .iter()
        .enumerate()
        .filter_map(|(step, n)| {
            let op = match &**n {
                LogicalPlan::Map(m) => &m.op,
                LogicalPlan::MapBatches(m) => &m.op,
                _ => return None,
            };
            Some(FunctionCode {
                step,
                name: op.name().to_string(),
                code: op.code_digest()?,
            })
        })
        .collect()
}

/// Refuses a checkpoint saved under other code for one of the pipeline's functions (its
/// `saved` list is empty when it predates code digests: nothing to compare).
pub fn check_functions(
    chain: &[std::sync::Arc<LogicalPlan>],
    saved: &[FunctionCode],
) -> Result<()> {
    if saved.is_empty() {
        return Ok(());
    }
    for now in function_codes(chain) {
        let before = saved.iter().find(|f| f.step == now.step);
        if before.is_none_or(|b| b.code != now.code) {
            return Err(Error::invalid(format!(
                "checkpoint was saved with different code for the function '{}' ({} at step \
                 {}): its bytecode, constants or captured values changed since. Resume with \
                 load_state_dict(state, strict=False) to accept the new code",
                now.name,
                node_name(&chain[now.step]),
                now.step
            )));
        }
    }
    Ok(())
}

/// Refuses a checkpoint saved over another listing of the data than `now` (the source's
/// [`crate::Source::data_digest`]): its positions would name other samples. Nothing to compare
/// when either side has none.
pub fn check_data(
    chain: &[std::sync::Arc<LogicalPlan>],
    saved: Option<&str>,
    now: Option<&str>,
) -> Result<()> {
    match (saved, now) {
        (Some(saved), Some(now)) if saved != now => Err(Error::invalid(format!(
            "checkpoint was saved over other data: step '{}' lists other files or objects, or \
             in another order, than when it was saved (a file added and another removed, or \
             renamed), so its positions would name other samples. Resume with \
             load_state_dict(state, strict=False) to accept the new listing",
            node_name(&chain[0])
        ))),
        _ => Ok(()),
    }
}

/// Refuses a checkpoint whose source position lies outside this pipeline's data: an epoch
/// past the last one (`repeat(n)`), or a position at or past the end of its epoch on this
/// rank. Such a checkpoint would silently skip the rest of the data. (A stream's length is
/// unknown until read: its source reports a position past the end when it gets there.)
pub fn check_position(
    chain: &[std::sync::Arc<LogicalPlan>],
    point: &ResumePoint,
    source: &SourceStage,
    elastic: Option<&ElasticEpoch>,
) -> Result<()> {
    let at = point.source_start();
    let name = node_name(&chain[0]);
    let epochs = match &source.order {
        Some(order) => order.epochs,
        None => source.stream_epochs,
    };
    if let Some(n) = epochs.filter(|&n| at.epoch >= n) {
        return Err(Error::invalid(format!(
            "checkpoint: step '{name}' is at epoch {}, but this pipeline has {n} epoch(s) \
             (epochs count from 0)",
            at.epoch
        )));
    }
    if let Some(order) = &source.order {
        let mut order = order.clone();
        order.elastic = elastic.cloned();
        let len = order.epoch_len_of(at.epoch);
        if at.pos >= len {
            return Err(Error::invalid(format!(
                "checkpoint: step '{name}' is at position {} of epoch {}, but that epoch has \
                 {len} sample(s) on this rank (positions count from 0)",
                at.pos, at.epoch
            )));
        }
    }
    Ok(())
}

/// One pipeline node's part of a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeState {
    /// The node's kind (`range`, `map`, `batch`, `shuffle_buffer`, ...).
    pub node: String,
    /// What this node holds (empty for most).
    pub own: Map<String, Json>,
    pub parent: Option<Box<NodeState>>,
}

/// The epoch that an elastic checkpoint finishes on a new world size: every old rank's
/// last delivered cursor in it (`None`: nothing yet).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Elastic {
    pub epoch: u64,
    pub world_size: u64,
    pub ranks: Vec<Option<Cursor>>,
}

impl IterState {
    /// The current format version.
    pub const VERSION: u32 = 2;
}

impl Elastic {
    /// The checkpoint form of an elastic epoch the engine is running.
    pub fn from_epoch(e: &ElasticEpoch) -> Self {
        Elastic {
            epoch: e.epoch,
            world_size: e.old_world,
            ranks: e
                .old
                .iter()
                .map(|c| {
                    c.map(|(pos, ord)| Cursor {
                        epoch: e.epoch,
                        pos,
                        ord,
                    })
                })
                .collect(),
        }
    }
}

/// Which nodes of `chain` (source first) re-sequence the stream (number their outputs anew
/// and write a restart record): take, shuffle_buffer, map_batches, and a batch that per-item
/// work follows.
fn resequencing(chain: &[std::sync::Arc<LogicalPlan>]) -> Vec<bool> {
    let per_item = |n: &LogicalPlan| {
        matches!(
            n,
            LogicalPlan::Map(_)
                | LogicalPlan::MapBatches(_)
                | LogicalPlan::Take(_)
                | LogicalPlan::ShuffleBuffer(_)
                | LogicalPlan::Pack(_)
        )
    };
    (0..chain.len())
        .map(|i| match &*chain[i] {
            LogicalPlan::Take(_)
            | LogicalPlan::ShuffleBuffer(_)
            | LogicalPlan::MapBatches(_)
            | LogicalPlan::Pack(_) => true,
            LogicalPlan::Batch(_) => chain[i + 1..].iter().any(|n| per_item(n)),
            _ => false,
        })
        .collect()
}

/// A pipeline step's name as checkpoints write it (`range`, `map`, `batch`, ...).
///
/// ```
/// use std::sync::Arc;
/// use sluice_core::*;
/// let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(3)))));
/// let batched = LogicalPlan::Batch(BatchNode::try_new(src, 2, false)?);
/// assert_eq!(sluice_core::exec::checkpoint::node_name(&batched), "batch");
/// # Ok::<(), sluice_core::Error>(())
/// ```
pub fn node_name(node: &LogicalPlan) -> String {
    match node {
        LogicalPlan::Source(n) => n.source.name().to_string(),
        LogicalPlan::Map(n) => match n.mode {
            ElemMode::Map => "map",
            ElemMode::Filter => "filter",
            ElemMode::FlatMap => "flat_map",
        }
        .into(),
        LogicalPlan::MapBatches(_) => "map_batches".into(),
        LogicalPlan::Batch(_) => "batch".into(),
        LogicalPlan::Shuffle(_) => "shuffle".into(),
        LogicalPlan::ShuffleBuffer(_) => "shuffle_buffer".into(),
        LogicalPlan::Shard(_) => "shard".into(),
        LogicalPlan::Repeat(_) => "repeat".into(),
        LogicalPlan::Prefetch(_) => "prefetch".into(),
        LogicalPlan::Take(_) => "take".into(),
        LogicalPlan::Cache(_) => "cache".into(),
        LogicalPlan::Pack(_) => "pack".into(),
    }
}

fn cursor_json(c: &Cursor) -> Json {
    json!({"epoch": c.epoch, "pos": c.pos, "ord": c.ord})
}

fn cursor_from(own: &Map<String, Json>, key: &str) -> Result<Cursor> {
    let Some(v) = own.get(key) else {
        return Err(Error::invalid(format!("checkpoint: missing '{key}'")));
    };
    serde_json::from_value(v.clone()).map_err(|e| {
        Error::invalid(format!(
            "checkpoint: bad '{key}' {v}: {e} (epoch, pos and ord are integers >= 0)"
        ))
    })
}

fn u64_from(own: &Map<String, Json>, key: &str) -> Result<u64> {
    match own.get(key) {
        None => Err(Error::invalid(format!("checkpoint: missing '{key}'"))),
        Some(v) => v.as_u64().ok_or_else(|| {
            Error::invalid(format!(
                "checkpoint: bad '{key}': {v} (an integer >= 0 expected)"
            ))
        }),
    }
}

/// The checkpoint tree of `chain` (source first) at `point`.
pub fn to_tree(chain: &[std::sync::Arc<LogicalPlan>], point: &ResumePoint) -> NodeState {
    // The k-th re-sequencing node wrote outer[k]; its output space holds outer[k+1].input
    // (or the final cursor), the source's holds outer[0].input.
    let mut at = point.outer.iter().map(|r| r.input).chain([point.cursor]);
    let mut records = point.outer.iter();
    let mut tree: Option<NodeState> = None;
    let reseq = resequencing(chain);
    for (node, &reseq) in chain.iter().zip(&reseq) {
        let mut own = Map::new();
        match &**node {
            LogicalPlan::Source(_) => {
                own.insert("at".into(), cursor_json(&at.next().unwrap_or_default()));
            }
            LogicalPlan::Shard(n) => {
                own.insert("rank".into(), n.shard.rank.into());
                own.insert("world_size".into(), n.shard.world_size.into());
            }
            _ if reseq => {
                if let Some(r) = records.next() {
                    own.insert("at".into(), cursor_json(&at.next().unwrap_or_default()));
                    own.insert("slot".into(), r.slot.into());
                    own.insert("input_index".into(), r.input_index.into());
                    own.insert("counter".into(), r.counter.into());
                }
            }
            _ => {}
        }
        tree = Some(NodeState {
            node: node_name(node),
            own,
            parent: tree.map(Box::new),
        });
    }
    tree.expect("a pipeline has a source")
}

/// The position a checkpoint tree holds, checked against `chain` (source first).
pub fn from_tree(
    chain: &[std::sync::Arc<LogicalPlan>],
    tree: &NodeState,
    elastic: bool,
) -> Result<ResumePoint> {
    let mut nodes = Vec::new();
    let mut cur = Some(tree);
    while let Some(n) = cur {
        nodes.push(n);
        cur = n.parent.as_deref();
    }
    nodes.reverse();
    if nodes.len() != chain.len() {
        return Err(Error::invalid(format!(
            "checkpoint has {} pipeline steps, this pipeline {}",
            nodes.len(),
            chain.len()
        )));
    }
    let mut ats: Vec<Cursor> = Vec::new();
    let mut records: Vec<Restart> = Vec::new();
    let reseq = resequencing(chain);
    for ((node, state), &reseq) in chain.iter().zip(&nodes).zip(&reseq) {
        let name = node_name(node);
        if state.node != name {
            return Err(Error::invalid(format!(
                "checkpoint step '{}' does not match pipeline step '{name}'",
                state.node
            )));
        }
        let own = &state.own;
        match &**node {
            LogicalPlan::Source(_) => ats.push(cursor_from(own, "at")?),
            LogicalPlan::Shard(n) => {
                let (rank, world) = (u64_from(own, "rank")?, u64_from(own, "world_size")?);
                if !elastic && (rank, world) != (n.shard.rank, n.shard.world_size) {
                    return Err(Error::invalid(format!(
                        "checkpoint is of rank {rank} of {world}, this pipeline is rank {} of \
                         {}; merge every rank's checkpoint with elastic_state() to change the \
                         world size",
                        n.shard.rank, n.shard.world_size
                    )));
                }
            }
            _ if reseq => {
                let at = cursor_from(own, "at")?;
                if let LogicalPlan::Take(t) = &**node {
                    if at.pos >= t.n {
                        return Err(Error::invalid(format!(
                            "checkpoint: step 'take' is at output {} of take({})",
                            at.pos, t.n
                        )));
                    }
                }
                ats.push(at);
                records.push(Restart {
                    slot: u64_from(own, "slot")? as usize,
                    input: Cursor::default(),
                    input_index: u64_from(own, "input_index")?,
                    counter: u64_from(own, "counter")?,
                });
            }
            _ => {}
        }
    }
    // Each record replays from where the previous segment's node stands.
    for (r, at) in records.iter_mut().zip(&ats) {
        r.input = *at;
    }
    Ok(ResumePoint {
        cursor: *ats.last().expect("a source"),
        outer: records,
    })
}

/// Merges the checkpoints of every rank of a sharded run (`states[r]` from rank `r`) into one
/// that any rank of a new world size can load: the epoch in progress continues from where
/// every old rank stood, and what no rank delivered yet is split equally among the new ranks.
pub fn elastic_state(states: &[IterState]) -> Result<IterState> {
    let first = states
        .first()
        .ok_or_else(|| Error::invalid("elastic_state needs every rank's checkpoint"))?;
    let world = states.len() as u64;
    let mut ranks = vec![None; states.len()];
    for st in states {
        if (&st.pipeline, st.seed, st.version) != (&first.pipeline, first.seed, first.version) {
            return Err(Error::invalid(
                "elastic_state: checkpoints come from different pipelines or seeds",
            ));
        }
        if st.epoch != first.epoch {
            return Err(Error::invalid(format!(
                "elastic_state: checkpoints come from iterations at different epochs ({} and \
                 {}); checkpoint every rank at the same step",
                first.epoch, st.epoch
            )));
        }
        if st.elastic.is_some() {
            return Err(Error::invalid(
                "elastic_state: a checkpoint taken during an elastic epoch cannot be merged \
                 again before that epoch ends",
            ));
        }
        let Some(tree) = &st.state else { continue };
        let shard = find(tree, "shard")
            .ok_or_else(|| Error::invalid("elastic_state: the pipeline has no shard() step"))?;
        let (rank, w) = (
            u64_from(&shard.own, "rank")?,
            u64_from(&shard.own, "world_size")?,
        );
        if w != world {
            return Err(Error::invalid(format!(
                "elastic_state: got {world} checkpoints for a world size of {w}; pass every \
                 rank's checkpoint, in any order"
            )));
        }
        if ["take", "shuffle_buffer", "map_batches", "pack"]
            .iter()
            .any(|n| find(tree, n).is_some())
        {
            return Err(Error::invalid(
                "elastic_state: pipelines with take, shuffle_buffer or map_batches cannot \
                 change world size mid-epoch",
            ));
        }
        // `rank` comes from the file: index only within the world, once per rank.
        let slot = ranks
            .get_mut(rank as usize)
            .filter(|_| rank < world)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "elastic_state: a checkpoint of rank {rank} in a world of {world}"
                ))
            })?;
        if slot.is_some() {
            return Err(Error::invalid(format!(
                "elastic_state: two checkpoints of rank {rank}; pass each rank's once"
            )));
        }
        *slot = Some(cursor_from(&last(tree).own, "at")?);
    }
    // Ranks in lockstep stop in one epoch; one that just finished the previous epoch has
    // not started this one (checked against the epoch's length when loaded).
    let epochs: Vec<u64> = ranks.iter().flatten().map(|c| c.epoch).collect();
    let epoch = epochs.iter().copied().max().unwrap_or(0);
    if epochs.iter().any(|&e| e + 1 < epoch) {
        return Err(Error::invalid(format!(
            "elastic_state: ranks stopped in different epochs ({epochs:?}); checkpoint every \
             rank at the same step"
        )));
    }
    Ok(IterState {
        version: IterState::VERSION,
        pipeline: first.pipeline.clone(),
        functions: first.functions.clone(),
        data: first.data.clone(),
        seed: first.seed,
        epoch: first.epoch,
        state: None,
        elastic: Some(Elastic {
            epoch,
            world_size: world,
            ranks,
        }),
    })
}

fn find<'a>(tree: &'a NodeState, node: &str) -> Option<&'a NodeState> {
    let mut cur = Some(tree);
    while let Some(n) = cur {
        if n.node == node {
            return Some(n);
        }
        cur = n.parent.as_deref();
    }
    None
}

fn last(tree: &NodeState) -> &NodeState {
    let mut cur = tree;
    while let Some(p) = cur.parent.as_deref() {
        cur = p;
    }
    cur
}

/// The elastic epoch as the source needs it, for this rank's shard.
pub fn elastic_epoch(
    e: &Elastic,
    shard: Option<ShardSpec>,
    len: u64,
    whole: bool,
) -> Result<ElasticEpoch> {
    let shard = shard.ok_or_else(|| {
        Error::invalid(
            "an elastic checkpoint needs a pipeline with shard() on a random-access source",
        )
    })?;
    let mut old = Vec::with_capacity(e.ranks.len());
    for (r, c) in e.ranks.iter().enumerate() {
        old.push(match c {
            Some(c) if c.epoch == e.epoch => Some((c.pos, c.ord)),
            None => None,
            Some(c) => {
                let old_len = ShardSpec::try_new(r as u64, e.world_size, shard.equal)?.len(len);
                if c.epoch + 1 != e.epoch || c.pos + 1 != old_len {
                    return Err(Error::invalid(format!(
                        "elastic checkpoint: rank {r} stopped at position {} of epoch {}, \
                         others in epoch {}; checkpoint every rank at the same step",
                        c.pos, c.epoch, e.epoch
                    )));
                }
                None
            }
        });
    }
    Ok(ElasticEpoch {
        epoch: e.epoch,
        old_world: e.world_size,
        old,
        rank: shard.rank,
        world: shard.world_size,
        equal: shard.equal,
        whole,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(json: &str) -> IterState {
        serde_json::from_str(json).unwrap()
    }

    fn sharded(rank: u64, world: u64) -> IterState {
        state(&format!(
            r#"{{"version":2,"pipeline":"p","seed":0,"state":{{"node":"shard",
                "own":{{"rank":{rank},"world_size":{world}}},"parent":{{"node":"range",
                "own":{{"at":{{"epoch":0,"ord":0,"pos":1}}}},"parent":null}}}}}}"#
        ))
    }

    #[test]
    fn elastic_state_refuses_a_rank_outside_the_world() {
        // Found by fuzzing (fuzz/ target `state`): rank 5 of a world of 1 indexed past the
        // ranks and panicked.
        let e = elastic_state(&[sharded(5, 1)]).unwrap_err().to_string();
        assert!(e.contains("rank 5 in a world of 1"), "{e}");
    }

    #[test]
    fn a_checkpoint_without_an_epoch_is_epoch_zero_and_elastic_keeps_the_epoch() {
        assert_eq!(
            sharded(0, 1).epoch,
            0,
            "written before checkpoints had epochs"
        );
        let at = |rank, epoch| IterState {
            epoch,
            ..sharded(rank, 2)
        };
        let merged = elastic_state(&[at(0, 3), at(1, 3)]).unwrap();
        assert_eq!(merged.epoch, 3);
        let back: IterState =
            serde_json::from_str(&serde_json::to_string(&merged).unwrap()).unwrap();
        assert_eq!(back.epoch, 3);
        let e = elastic_state(&[at(0, 3), at(1, 4)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("different epochs (3 and 4)"), "{e}");
    }

    #[test]
    fn elastic_state_refuses_a_rank_given_twice() {
        let e = elastic_state(&[sharded(0, 2), sharded(0, 2)])
            .unwrap_err()
            .to_string();
        assert!(e.contains("two checkpoints of rank 0"), "{e}");
        assert!(elastic_state(&[sharded(1, 2), sharded(0, 2)]).is_ok());
    }

    #[test]
    fn a_checkpoint_over_another_listing_is_refused_naming_the_source() {
        use std::sync::Arc;
        let src: crate::SourceRef = Arc::new(crate::RangeSource::new(4));
        let node = crate::plan::logical::SourceNode::new(src);
        let chain = vec![Arc::new(LogicalPlan::Source(node))];
        assert!(check_data(&chain, Some("a"), Some("a")).is_ok());
        // Nothing recorded (an old checkpoint) or nothing to tell now: no comparison.
        assert!(check_data(&chain, None, Some("a")).is_ok());
        assert!(check_data(&chain, Some("a"), None).is_ok());
        let e = check_data(&chain, Some("a"), Some("b"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "other data: step 'range' lists other files or objects, or in another order"
            ),
            "{e}"
        );
        assert!(!e.contains("  "), "{e}");
    }
}
