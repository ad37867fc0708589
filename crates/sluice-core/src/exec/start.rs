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
    /// The consumer takes [`crate::Column`]s in batches (the Python bindings and Arrow export
    /// do): a final batch that reads a columnar source then hands over the source's arrays.
    pub columns: bool,
    /// The consumer takes [`crate::Object`]s (the Python bindings do): the ops at the end of
    /// the plan whose results nothing reads leave them as objects
    /// ([`crate::plan::objects::keep_objects`]).
    pub objects: bool,
    /// The consumer takes rows in bulk (the Python bindings do): a pipeline that only reads
    /// a columnar source hands over its rows as [`super::Next::Rows`], a batch of the source's
    /// columns at a time ([`crate::plan::rows::read_rows_in_batches`]), instead of a sample
    /// per row.
    pub row_batches: bool,
    /// Time each op and the source read as the run goes, for the optimizer to plan from
    /// ([`crate::stats::ops`]; `iter(optimize=True)` times its first run).
    pub time_ops: bool,
}

/// What starting a run makes: the consumer's input, the stages that run inline in the
/// consumer (with their slots), the threads' control block and the statistics.
pub(super) struct Started {
    pub(super) input: Input,
    pub(super) tail: Vec<(usize, Box<dyn Transform>)>,
    pub(super) ctl: Arc<Control>,
    pub(super) stats: Arc<PipelineStats>,
}

/// The plan a run of `plan` with `opts` executes, and whether it reads rows in bulk.
pub fn executed_plan(plan: &PhysicalPlan, opts: &ExecOptions) -> (PhysicalPlan, bool) {
    // The rewrites a run makes to the plan it is given, each where it applies.
    let mut plan = plan.clone();
    if opts.objects {
        crate::plan::objects::keep_objects(&mut plan);
    }
    // A timed run measures each op in its chain.
    if !opts.time_ops {
        crate::plan::slots::write_into_batches(&mut plan);
    }
    // An elastic resume drops the rows other ranks delivered in a stage that takes rows one
    // by one: the plain read.
    let in_rows = opts.row_batches
        && opts.elastic.is_none()
        && crate::plan::rows::read_rows_in_batches(&mut plan);
    plan.source.chunk_size = plan.first_chunk();
    (plan, in_rows)
}

/// Starts the threads of `plan`.
pub(super) fn start(plan: &PhysicalPlan, opts: &ExecOptions) -> Result<Started> {
    let (plan, in_rows) = executed_plan(plan, opts);
    let plan = &plan;
    let ctl = Arc::new(Control::default());
    // Inline stages run in the consumer; a stage is inline only if all after it are.
    let first_inline = plan
        .stages
        .iter()
        .rposition(|s| s.variant != Variant::Inline)
        .map_or(0, |i| i + 1);
    let inline_source = first_inline == 0 && plan.source.order.is_some();
    let mut infos = vec![StageInfo {
        name: format!("source: {}", plan.source.source.name()),
        threads: 1,
        inline: inline_source,
        queue_capacity: plan.source.queue_depth,
    }];
    for (i, st) in plan.stages.iter().enumerate() {
        let inline = i >= first_inline;
        infos.push(StageInfo {
            name: st.kind.label(),
            threads: if inline { 1 } else { st.variant.workers() },
            inline,
            queue_capacity: st.queue_depth,
        });
    }
    let stats = Arc::new(PipelineStats::new(infos));
    if opts.time_ops {
        stats.time_ops();
    }
    let source = &plan.source.source;
    stats.watch_source(source);
    stats.set_source_report(source.report());

    let mut resumes = match &opts.resume {
        Some(rp) => rp.stage_resumes(plan)?,
        None => vec![StageResume::default(); plan.stages.len()],
    };
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
        let t = make_transform(
            &st.kind,
            &plan.source.source,
            keys,
            stats.clone(),
            slot,
            resumes[i].clone(),
            Following {
                resequence: plan.stages[i + 1..].iter().any(|s| drops(&s.kind)),
                columns: in_rows
                    || opts.columns && crate::plan::objects::columns_pass(&plan.stages[i + 1..]),
                rows: in_rows,
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
                let backend = match v {
                    Variant::Pool { backend, .. } => opts.backends.get(backend)?,
                    _ => Arc::new(ThreadBackend),
                };
                let work = StageWork {
                    read: read.then(|| plan.source.source.clone()),
                    ops: ops.clone(),
                    seed: opts.seed,
                    skip,
                    slot,
                    stats: stats.clone(),
                };
                // Under the controller, threads up to its maximum exist but only `active`
                // of them take work; pools start the planned workers and grow on demand.
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
                spawn_parallel(workers, par, input, &ctl, &stats)?
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
