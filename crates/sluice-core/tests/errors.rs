//! A failing sample: every output before it is delivered, in order, then its error, then
//! nothing — for any thread count, chunk size, stage layout and op kind.

use std::sync::Arc;

use sluice_core::*;

/// Fails on `fail_at`; otherwise a map, a filter (drops odd ids) or a flat_map (two outputs
/// per id), as `mode` says.
#[derive(Debug)]
struct FailAt {
    fail_at: i64,
    mode: ElemMode,
}

impl Op for FailAt {
    fn name(&self) -> &str {
        "fail_at"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"op": "fail_at"})
    }
    fn meta(&self) -> OpMeta {
        OpMeta::opaque(false)
    }
    fn apply(&self, s: Sample, _cx: &OpContext) -> Result<Emit> {
        let id = s.require("id", "fail_at")?.as_int().unwrap();
        if id == self.fail_at {
            return Err(Error::data("boom"));
        }
        Ok(match self.mode {
            ElemMode::Map => Emit::One(s),
            ElemMode::Filter if id % 2 == 1 => Emit::Drop,
            ElemMode::Filter => Emit::One(s),
            ElemMode::FlatMap => Emit::Many(vec![s.clone(), s]),
        })
    }
}

fn pipeline(n: u64, fail_at: i64, mode: ElemMode) -> Arc<LogicalPlan> {
    let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(
        RangeSource::new(n),
    ))));
    let op = Arc::new(FailAt { fail_at, mode });
    Arc::new(LogicalPlan::Map(
        MapNode::try_new(src, op, mode, OnError::Raise, None).unwrap(),
    ))
}

fn batched(plan: Arc<LogicalPlan>, size: usize) -> Arc<LogicalPlan> {
    Arc::new(LogicalPlan::Batch(
        BatchNode::try_new(plan, size, false).unwrap(),
    ))
}

/// Runs `plan` with `threads` (0: every stage in the consumer) and the chunks it starts
/// with: the `id` columns of the outputs before the error, and the error.
fn run(plan: &Arc<LogicalPlan>, threads: usize, chunk: usize) -> (Vec<Vec<i64>>, Option<Error>) {
    let opts = LowerOptions {
        num_threads: threads.max(1),
        in_consumer: threads == 0,
        chunk_size: chunk,
        ..Default::default()
    };
    let phys = lower(plan, &opts).unwrap();
    let mut exec = Execution::start(&phys, ExecOptions::default()).unwrap();
    let mut outs = Vec::new();
    loop {
        match exec.next() {
            Some(Ok(s)) => outs.push(match s.get("id").unwrap() {
                Value::Int(i) => vec![*i],
                Value::Tensor(t) => match t.data() {
                    TensorData::I64(v) => v.clone(),
                    other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            }),
            Some(Err(e)) => {
                assert!(exec.next().is_none(), "nothing after the error");
                return (outs, Some(e));
            }
            None => return (outs, None),
        }
    }
}

fn expect_error_at(e: Option<Error>, id: i64) {
    let msg = e.expect("the run fails").to_string();
    assert!(
        msg.contains(&format!("sample {id}")) && msg.contains("boom"),
        "{msg}"
    );
}

#[test]
fn every_output_before_the_failing_sample_is_delivered() {
    for threads in [0, 1, 2, 4] {
        for chunk in [1, 3, 16] {
            for fail_at in [0, 1, 37, 99] {
                let (outs, err) = run(&pipeline(100, fail_at, ElemMode::Map), threads, chunk);
                let got: Vec<i64> = outs.concat();
                assert_eq!(
                    got,
                    (0..fail_at).collect::<Vec<_>>(),
                    "threads={threads} chunk={chunk} fail_at={fail_at}"
                );
                expect_error_at(err, fail_at);
            }
        }
    }
}

#[test]
fn filter_and_flat_map_keep_their_outputs_before_the_failure() {
    for threads in [0, 1, 2, 4] {
        let (outs, err) = run(&pipeline(1000, 37, ElemMode::Filter), threads, 16);
        let want: Vec<i64> = (0..37).filter(|i| i % 2 == 0).collect();
        assert_eq!(outs.concat(), want, "filter, threads={threads}");
        expect_error_at(err, 37);

        let (outs, err) = run(&pipeline(1000, 37, ElemMode::FlatMap), threads, 16);
        let want: Vec<i64> = (0..37).flat_map(|i| [i, i]).collect();
        assert_eq!(outs.concat(), want, "flat_map, threads={threads}");
        expect_error_at(err, 37);
    }
}

#[test]
fn batches_wholly_before_the_failing_sample_are_delivered_the_partial_one_is_not() {
    for threads in [0, 1, 2, 4] {
        for chunk in [1, 5, 16] {
            // 37 fails: batches [0..8), ..., [24..32) are whole before it; [32..40) holds it.
            let (outs, err) = run(
                &batched(pipeline(1000, 37, ElemMode::Map), 8),
                threads,
                chunk,
            );
            let want: Vec<Vec<i64>> = (0..4).map(|b| (b * 8..b * 8 + 8).collect()).collect();
            assert_eq!(outs, want, "threads={threads} chunk={chunk}");
            expect_error_at(err, 37);
            // The failing sample opens a batch: the batches before are all delivered.
            let (outs, err) = run(
                &batched(pipeline(1000, 32, ElemMode::Map), 8),
                threads,
                chunk,
            );
            assert_eq!(outs, want, "fail at a batch start, threads={threads}");
            expect_error_at(err, 32);
        }
    }
}

#[test]
fn a_later_op_failing_on_an_earlier_sample_wins() {
    // Op 1 fails on 10, op 2 on 5: sample 5 comes first in the stream, so only 0..5 are
    // delivered and its error is the one raised, whatever the chunking.
    let first = pipeline(100, 10, ElemMode::Map);
    let op = Arc::new(FailAt {
        fail_at: 5,
        mode: ElemMode::Map,
    });
    let plan = Arc::new(LogicalPlan::Map(
        MapNode::try_new(first, op, ElemMode::Map, OnError::Raise, None).unwrap(),
    ));
    for threads in [0, 1, 2] {
        for chunk in [1, 4, 16] {
            let (outs, err) = run(&plan, threads, chunk);
            assert_eq!(outs.concat(), (0..5).collect::<Vec<_>>());
            expect_error_at(err, 5);
        }
    }
}
