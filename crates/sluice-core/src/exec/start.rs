//! Starting a run: its options, and wiring the plan into threads — the source (or its items
//! made inline), a thread or a worker pool per stage, the stages that run inline in the
//! consumer, and the runtime controller.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::plan::physical::{PhysicalPlan, StageKind, Variant};
use crate::stats::{PipelineStats, StageInfo};

use super::backend::{Backends, StageWork, ThreadBackend, Workers};
use super::control::Control;
use super::controller;
use super::item::Transform;
use super::ordering::Input;
use super::resume::{drops, last_dropping_stage, Cursor, ResumePoint, StageResume};
use super::source::{spawn_source, OrderedItems};
use super::stage::{make_transform, Following, RunKeys};
use super::threads::{spawn_controller, spawn_parallel, spawn_sequential, Parallel};

/// Options of one run.
#[derive(Debug, Clone, Default)]
pub struct ExecOptions {
    /// The seed every random decision derives from.
    pub seed: u64,
    /// The iteration's epoch (`iter(epoch=k)`): the run's epochs are data epochs
    /// [`crate::order::first_epoch`]`(epoch, …)` on, so each iteration has its own
    /// permutations and augmentation draws. Cursors (and checkpoints) count epochs within
    /// the run from 0.
    pub epoch: u64,
    /// Resume after this output (from a saved [`Execution::position`](super::Execution::position)).
    pub resume: Option<ResumePoint>,
    /// Finish this epoch of a sharded run that ranks of another world size began.
    pub elastic: Option<crate::order::ElasticEpoch>,
    /// Worker pools beyond threads that stages with [`Variant::Pool`](crate::Variant::Pool) run on.
    pub backends: Backends,
    /// Tune the workers of parallel stages at run time.
    pub controller: Option<controller::ControllerOptions>,
    /// Cap the resident memory of the process tree at this many bytes
    /// ([`super::MemoryCap`]: the source holds chunks back).
    pub memory_limit: Option<u64>,
}

/// What starting a run makes: the consumer's input, the stages that run inline in the
/// consumer (with their slots), the threads' control block and the statistics.
pub(super) struct Started {
    pub(super) input: Input,
    pub(super) tail: Vec<(usize, Box<dyn Transform>)>,
    pub(super) ctl: Arc<Control>,
    pub(super) stats: Arc<PipelineStats>,
}

/// Starts the threads of `plan`. It runs exactly `plan`: every rewrite a consumer or a
/// timed run calls for was the planner's (`sluice_optimizer::planner`), and what it decided
/// for the consumer is the plan's [`crate::Delivery`].
pub(super) fn start(plan: &PhysicalPlan, opts: &ExecOptions) -> Result<Started> {
    let delivery = plan.delivery;
    if delivery.rows && opts.elastic.is_some() {
        return Err(Error::Internal(
            "a plan reading rows in bulk cannot finish an elastic epoch (the planner plans \
             the plain read for it)"
                .into(),
        ));
    }
    let ctl = Arc::new(Control::default());
    // Inline stages run in the consumer; a stage is inline only if all after it are.
    let first_inline = plan
        .stages
        .iter()
        .rposition(|s| s.variant != Variant::Inline)
        .map_or(0, |i| i + 1);
    let inline_source = first_inline == 0 && plan.source.order.is_some();
    let stats = new_stats(plan, first_inline, inline_source);
    if let Some(limit) = opts.memory_limit {
        let cap = Arc::new(super::MemoryCap::new(limit).sized_by(sized_by(plan)));
        super::transient::register(&cap);
        stats.set_memory(cap);
    }
    let mut resumes = match &opts.resume {
        Some(rp) => rp.stage_resumes(plan)?,
        None => vec![StageResume::default(); plan.stages.len()],
    };
    let (mut source_stage, start, keys) = source_start(plan, opts, &mut resumes)?;
    source_stage.queue_depth = source_depth(plan);
    let mut input = match OrderedItems::new(&source_stage, start).filter(|_| inline_source) {
        Some(items) => Input::Inline {
            items: Box::new(items),
            stats: stats.clone(),
        },
        None => Input::Direct(spawn_source(
            &source_stage,
            start,
            opts.seed,
            keys.first_epoch,
            &ctl,
            &stats,
        )?),
    };
    let mut tail = Vec::new();
    let mut tuned: Vec<(usize, Arc<AtomicUsize>)> = Vec::new();
    for (i, st) in plan.stages.iter().enumerate() {
        let slot = i + 1;
        let skip = resumes[i].drop.clone();
        let following = &plan.stages[i + 1..];
        let t = make_transform(
            &st.kind,
            &plan.source.source,
            keys,
            stats.clone(),
            slot,
            resumes[i].clone(),
            Following {
                resequence: following.iter().any(|s| drops(&s.kind)),
                columns: delivery.rows
                    || delivery.columns && crate::plan::objects::columns_pass(following),
                rows: delivery.rows,
            },
        );
        if i >= first_inline {
            tail.push((slot, t));
            continue;
        }
        // Under the controller, a one-thread chain stage runs on the parallel path too, so
        // it can be given more workers.
        let tunable = opts.controller.is_some() && matches!(st.variant, Variant::Threads { .. });
        input = match (&st.kind, &st.variant) {
            (StageKind::Chain { read, ops }, v) if v.workers() > 1 || v.is_pool() || tunable => {
                let work = StageWork {
                    read: read.then(|| plan.source.source.clone()),
                    ops: ops.clone(),
                    seed: opts.seed,
                    skip,
                    slot,
                    stats: stats.clone(),
                };
                let par = start_workers(st, work, opts, &mut tuned)?;
                spawn_parallel(par.0, par.1, input, &ctl, &stats)?
            }
            _ => spawn_sequential(t, st.queue_depth, input, &ctl, &stats, slot)?,
        };
    }
    if let (Some(c), false) = (&opts.controller, tuned.is_empty()) {
        spawn_controller(c.clone(), tuned, &ctl, &stats)?;
    }
    Ok(Started {
        input,
        tail,
        ctl,
        stats,
    })
}

/// The source's queue, in chunks: at least two for each worker of the stage it feeds.
/// Costly items travel one to a chunk, so 16 workers drain a queue of 4 in a quarter of an
/// item's time, and any wait of the source thread for a core (every core busy decoding) left
/// them idle: on a 16-vCPU host that queue was 1.7 full on average while 16 decode threads
/// were idle 24 % of the time (docs/BENCHMARKS.md, "The many-core curve").
fn source_depth(plan: &PhysicalPlan) -> usize {
    let feeds = plan.stages.first().map_or(1, |s| s.variant.workers());
    plan.source.queue_depth.max(2 * feeds)
}

/// How many of the run's statistics entries (the source's first) a first chunk reaches
/// as it goes: up to the first stage that holds items back, that one included. The stages
/// after it see nothing until it is full (a 100,000-item shuffle buffer), so a memory cap
/// waiting for their sizes held the source a chunk at a time (0.7 s to the first output
/// became 544 s).
fn sized_by(plan: &PhysicalPlan) -> usize {
    let holds = |k: &StageKind| {
        matches!(
            k,
            StageKind::Batch { .. } | StageKind::ShuffleBuffer { .. } | StageKind::Pack(_)
        )
    };
    1 + plan
        .stages
        .iter()
        .position(|s| holds(&s.kind))
        .map_or(plan.stages.len(), |i| i + 1)
}

/// The run's statistics, one entry for the source and one per stage.
fn new_stats(plan: &PhysicalPlan, first_inline: usize, inline_source: bool) -> Arc<PipelineStats> {
    let mut infos = vec![StageInfo {
        name: format!("source: {}", plan.source.source.name()),
        threads: 1,
        inline: inline_source,
        queue_capacity: source_depth(plan),
        pool: None,
    }];
    for (i, st) in plan.stages.iter().enumerate() {
        let inline = i >= first_inline;
        infos.push(StageInfo {
            name: st.kind.label(),
            threads: if inline { 1 } else { st.variant.workers() },
            inline,
            queue_capacity: st.queue_depth,
            pool: match &st.variant {
                Variant::Pool { backend, .. } => Some(backend.clone()),
                _ => None,
            },
        });
    }
    let stats = Arc::new(PipelineStats::new(infos));
    if plan.delivery.timed {
        stats.time_ops();
    }
    let source = &plan.source.source;
    stats.watch_source(source);
    stats.set_source_report(source.report());
    stats.watch_ops(plan.stages.iter().flat_map(|st| {
        let ops = match &st.kind {
            StageKind::Chain { ops, .. } => ops.as_slice(),
            StageKind::Batch { slots, .. } => slots.as_slice(),
            _ => &[],
        };
        let label = st.kind.label();
        ops.iter().map(move |c| (label.clone(), c.op.clone()))
    }));
    stats
}

/// Where the source starts: its stage with this run's first epoch (and elastic split), the
/// cursor it resumes after, and the run's keys. An elastic resume also tells the last stage
/// that drops delivered outputs which positions other ranks delivered.
fn source_start(
    plan: &PhysicalPlan,
    opts: &ExecOptions,
    resumes: &mut [StageResume],
) -> Result<(crate::plan::physical::SourceStage, Option<Cursor>, RunKeys)> {
    let mut source_stage = plan.source.clone();
    let epochs = match &source_stage.order {
        Some(order) => order.epochs,
        None => source_stage.stream_epochs,
    };
    let keys = RunKeys {
        seed: opts.seed,
        first_epoch: crate::order::first_epoch(opts.epoch, epochs)?,
    };
    if let Some(order) = source_stage.order.as_mut() {
        order.first_epoch = keys.first_epoch;
    }
    if let Some(el) = &opts.elastic {
        let order = source_stage
            .order
            .as_mut()
            .ok_or_else(|| Error::invalid("an elastic resume needs a random-access source"))?;
        if !opts.resume.as_ref().is_none_or(|r| r.outer.is_empty()) {
            return Err(Error::invalid(
                "an elastic resume cannot pass take, shuffle_buffer or map_batches",
            ));
        }
        order.elastic = Some(el.clone());
        let partial: Vec<Cursor> = el
            .partial_positions(order.len)
            .into_iter()
            .map(|(pos, ord)| Cursor {
                epoch: el.epoch,
                pos,
                ord,
            })
            .collect();
        if let Some(last) = last_dropping_stage(plan) {
            resumes[last].drop.partial = partial;
        }
    }
    let mut start = opts.resume.as_ref().map(ResumePoint::source_start);
    if let (None, Some(el)) = (&opts.resume, &opts.elastic) {
        // A new rank that has delivered nothing yet starts at the elastic epoch.
        start = Some(Cursor {
            epoch: el.epoch,
            pos: 0,
            ord: 0,
        });
    }
    if let (Some(rp), None) = (&opts.resume, last_dropping_stage(plan)) {
        // No stage between the source and the consumer can drop what was delivered (a
        // stream straight into batch): the source skips it itself.
        start = Some(Cursor {
            pos: rp.cursor.pos + 1,
            ord: 0,
            ..rp.cursor
        });
    }
    Ok((source_stage, start, keys))
}

/// The workers of a parallel chain stage, on its backend. Under the controller, threads up
/// to its maximum exist but only `active` of them take work (registered in `tuned`); pools
/// start the planned workers and grow on demand.
fn start_workers(
    st: &crate::plan::physical::Stage,
    work: StageWork,
    opts: &ExecOptions,
    tuned: &mut Vec<(usize, Arc<AtomicUsize>)>,
) -> Result<(Arc<dyn Workers>, Parallel)> {
    let v = &st.variant;
    let slot = work.slot;
    let backend = match v {
        Variant::Pool { backend, .. } => opts.backends.get(backend)?,
        _ => Arc::new(ThreadBackend),
    };
    let stats = work.stats.clone();
    let (workers, threads, active): (Arc<dyn Workers>, _, _) = match &opts.controller {
        Some(c) => {
            let planned = v.workers();
            let max = planned.max(c.max_workers);
            let w = backend.start_scalable(work, planned, max)?;
            let active = Arc::new(AtomicUsize::new(planned));
            stats.counters(slot).active.store(planned as u64, Relaxed);
            tuned.push((slot, active.clone()));
            (w.into(), max, Some(active))
        }
        None => {
            let w: Arc<dyn Workers> = backend.start(work, v.workers())?.into();
            let n = w.parallelism().max(1);
            (w, n, None)
        }
    };
    let par = Parallel {
        threads,
        active,
        depth: st.queue_depth,
        slot,
    };
    Ok((workers, par))
}
