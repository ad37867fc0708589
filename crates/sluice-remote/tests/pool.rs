//! The process pool end to end, with the pure-Rust worker binary.

use std::sync::Arc;

use sluice_core::exec::Backends;
use sluice_core::*;
use sluice_ops::OpSpec;
use sluice_remote::{ProcessBackend, PROCESSES};

fn backend(command: &str) -> Backends {
    Backends::default().with(Arc::new(ProcessBackend::new(
        vec![command.to_string()],
        vec![],
        None,
    )))
}

fn plan(n: u64, op: OpSpec) -> PhysicalPlan {
    let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(
        RangeSource::new(n),
    ))));
    let shuffled = Arc::new(LogicalPlan::Shuffle(
        ShuffleNode::try_new(src, Some(3)).unwrap(),
    ));
    let mapped = Arc::new(LogicalPlan::Map(
        MapNode::try_new(
            shuffled,
            op.build().unwrap(),
            ElemMode::Map,
            OnError::Raise,
            None,
        )
        .unwrap(),
    ));
    let batched = Arc::new(LogicalPlan::Batch(
        BatchNode::try_new(mapped, 8, false).unwrap(),
    ));
    let mut plan = lower(&batched, &LowerOptions::default()).unwrap();
    // No Python op here, so put the chain on the pool by hand.
    plan.stages[0].variant = Variant::Pool {
        backend: PROCESSES.into(),
        workers: 2,
    };
    plan
}

fn run(plan: &PhysicalPlan, backends: Backends) -> Result<Vec<Sample>> {
    let opts = ExecOptions {
        seed: 1,
        backends,
        ..Default::default()
    };
    Execution::start(plan, opts)?.collect()
}

#[test]
fn pool_output_equals_threads() {
    let worker = env!("CARGO_BIN_EXE_sluice-worker");
    let p = plan(
        100,
        OpSpec::Select {
            fields: vec!["id".into()],
        },
    );
    let pooled = run(&p, backend(worker)).unwrap();
    let mut threaded = p.clone();
    threaded.stages[0].variant = Variant::Threads { threads: 2 };
    assert_eq!(pooled, run(&threaded, Backends::default()).unwrap());
    assert_eq!(pooled.len(), 13);
}

#[test]
fn worker_errors_are_typed() {
    let worker = env!("CARGO_BIN_EXE_sluice-worker");
    let mut p = plan(20, OpSpec::Noop);
    // Past the build-time field check: the op fails on every sample in the worker.
    if let StageKind::Chain { ops, .. } = &mut p.stages[0].kind {
        ops[0].op = OpSpec::Select {
            fields: vec!["nope".into()],
        }
        .build()
        .unwrap();
    }
    let err = run(&p, backend(worker)).unwrap_err();
    assert!(matches!(err.root(), Error::MissingField { .. }), "{err}");
    assert!(err.to_string().contains("select"), "{err}");
}

#[test]
fn a_worker_that_cannot_start_is_an_error_not_a_hang() {
    let p = plan(20, OpSpec::Noop);
    let err = run(&p, backend("/nonexistent/sluice-worker")).unwrap_err();
    assert!(
        err.to_string().contains("cannot start worker process"),
        "{err}"
    );
    // A program that exits at once: the stage fails naming itself.
    let err = run(&p, backend("true")).unwrap_err();
    assert!(
        err.to_string().contains("of stage 'read+noop' died"),
        "{err}"
    );
}
