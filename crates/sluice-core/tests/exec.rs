//! Executor behaviour: order for any thread count, errors in order, early drop, bounded memory.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::*;

/// Adds a random number to `id` (so thread-count invariance covers randomness), sleeps a
/// little on some samples to scramble completion order, and fails on `fail_at`.
#[derive(Debug)]
struct Jitter {
    fail_at: Option<i64>,
}

impl Op for Jitter {
    fn name(&self) -> &str {
        "jitter"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"op": "jitter"})
    }
    fn meta(&self) -> OpMeta {
        OpMeta::opaque(false)
    }
    fn apply(&self, mut s: Sample, cx: &OpContext) -> Result<Emit> {
        let id = s.require("id", "jitter")?.as_int().unwrap();
        if Some(id) == self.fail_at {
            return Err(Error::data("boom"));
        }
        if id % 7 == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
        s.set("r", Value::Int(cx.rng().below(1000) as i64));
        Ok(if id % 5 == 4 {
            Emit::Drop
        } else {
            Emit::One(s)
        })
    }
}

fn source(n: u64) -> Arc<LogicalPlan> {
    Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(
        RangeSource::new(n),
    ))))
}

fn map(input: Arc<LogicalPlan>, op: OpRef, on_error: OnError) -> Arc<LogicalPlan> {
    Arc::new(LogicalPlan::Map(
        MapNode::try_new(input, op, ElemMode::Map, on_error, None).unwrap(),
    ))
}

fn run(plan: &Arc<LogicalPlan>, threads: usize, seed: u64) -> Vec<Result<Sample>> {
    // Fixed small chunks, so more than one chunk is in flight.
    let opts = LowerOptions {
        num_threads: threads,
        chunk_size: 3,
        max_chunk: 3,
        ..Default::default()
    };
    let phys = lower(plan, &opts).unwrap();
    Execution::start(
        &phys,
        ExecOptions {
            seed,
            ..Default::default()
        },
    )
    .unwrap()
    .collect()
}

fn ids(out: &[Result<Sample>], field: &str) -> Vec<i64> {
    out.iter()
        .map(|s| s.as_ref().unwrap().get(field).unwrap().as_int().unwrap())
        .collect()
}

#[test]
fn order_and_randomness_do_not_depend_on_threads() {
    let plan = map(
        source(500),
        Arc::new(Jitter { fail_at: None }),
        OnError::Raise,
    );
    let one = run(&plan, 1, 9);
    assert_eq!(one.len(), 400);
    for threads in [2, 8] {
        let many = run(&plan, threads, 9);
        assert_eq!(ids(&one, "id"), ids(&many, "id"));
        assert_eq!(ids(&one, "r"), ids(&many, "r"));
    }
    assert_ne!(
        ids(&one, "r"),
        ids(&run(&plan, 2, 10), "r"),
        "seed must matter"
    );
}

#[test]
fn error_arrives_in_order_and_names_sample_and_op() {
    let plan = map(
        source(100),
        Arc::new(Jitter { fail_at: Some(42) }),
        OnError::Raise,
    );
    let out = run(&plan, 4, 0);
    let ok: Vec<i64> = out
        .iter()
        .take_while(|r| r.is_ok())
        .map(|r| r.as_ref().unwrap().get("id").unwrap().as_int().unwrap())
        .collect();
    assert_eq!(*ok.last().unwrap(), 41);
    let err = out.iter().find_map(|r| r.as_ref().err()).unwrap();
    let msg = err.to_string();
    assert!(
        msg.contains("jitter") && msg.contains("sample 42") && msg.contains("boom"),
        "{msg}"
    );
    assert!(out.last().unwrap().is_err(), "nothing after the error");
}

#[test]
fn skip_policy_counts_failures() {
    let plan = map(
        source(100),
        Arc::new(Jitter { fail_at: Some(42) }),
        OnError::Skip,
    );
    let phys = lower(&plan, &LowerOptions::default()).unwrap();
    let mut ex = Execution::start(&phys, ExecOptions::default()).unwrap();
    let n = std::iter::from_fn(|| ex.next())
        .filter(|r| r.is_ok())
        .count();
    assert_eq!(n, 79);
    let skipped: u64 = ex.stats().stages.iter().map(|s| s.skipped).sum();
    assert_eq!(skipped, 1);
}

#[test]
fn batches_and_epochs() {
    let rep = Arc::new(LogicalPlan::Repeat(
        RepeatNode::try_new(source(10), Some(2)).unwrap(),
    ));
    let batched = Arc::new(LogicalPlan::Batch(
        BatchNode::try_new(rep, 4, false).unwrap(),
    ));
    let out = run(&batched, 2, 0);
    // Repeat below batch: batches may span epochs, 20 samples -> 5 batches.
    assert_eq!(out.len(), 5);
    let b = Arc::new(LogicalPlan::Batch(
        BatchNode::try_new(source(10), 4, true).unwrap(),
    ));
    let rep2 = Arc::new(LogicalPlan::Repeat(
        RepeatNode::try_new(b, Some(2)).unwrap(),
    ));
    // Repeat above batch with drop_last: 2 full batches per epoch.
    assert_eq!(run(&rep2, 2, 0).len(), 4);
}

#[test]
fn take_stops_an_endless_pipeline() {
    let rep = Arc::new(LogicalPlan::Repeat(
        RepeatNode::try_new(source(10), None).unwrap(),
    ));
    let take = Arc::new(LogicalPlan::Take(TakeNode { input: rep, n: 25 }));
    let out = run(&take, 2, 0);
    assert_eq!(out.len(), 25);
}

/// `in_consumer` (Python's `num_threads=0`): every stage inline, the same outputs as threads,
/// and a `take` that ends inline still lets the batch after it flush its partial batch.
#[test]
fn stages_in_the_consumer_give_the_same_outputs() {
    let rep = Arc::new(LogicalPlan::Repeat(
        RepeatNode::try_new(source(10), None).unwrap(),
    ));
    let jit = map(rep, Arc::new(Jitter { fail_at: None }), OnError::Raise);
    let take = Arc::new(LogicalPlan::Take(TakeNode { input: jit, n: 27 }));
    let plan = Arc::new(LogicalPlan::Batch(
        BatchNode::try_new(take, 4, false).unwrap(),
    ));
    let opts = LowerOptions {
        in_consumer: true,
        chunk_size: 3,
        max_chunk: 3,
        ..Default::default()
    };
    let phys = lower(&plan, &opts).unwrap();
    assert!(phys.stages.iter().all(|s| s.variant == Variant::Inline));
    let inline: Vec<_> = Execution::start(&phys, ExecOptions::default())
        .unwrap()
        .collect();
    let threaded = run(&plan, 2, 0);
    assert_eq!(inline.len(), 7, "27 rows in batches of 4: the last holds 3");
    let rows = |out: &[Result<Sample>]| -> Vec<String> {
        out.iter()
            .map(|b| format!("{:?}", b.as_ref().unwrap().get("r")))
            .collect()
    };
    assert_eq!(rows(&inline), rows(&threaded));
    match inline[6].as_ref().unwrap().get("id") {
        Some(Value::Tensor(t)) => assert_eq!(t.shape(), &[3]),
        other => panic!("the last batch's ids: {other:?}"),
    }
}

#[derive(Debug)]
struct Count(Arc<AtomicUsize>);
impl Op for Count {
    fn name(&self) -> &str {
        "count"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"op": "count"})
    }
    fn meta(&self) -> OpMeta {
        OpMeta::opaque(false)
    }
    fn apply(&self, s: Sample, _cx: &OpContext) -> Result<Emit> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(Emit::One(s))
    }
}

/// `source(n)` through an op that counts the samples it sees.
fn counted(n: u64) -> (Arc<LogicalPlan>, Arc<AtomicUsize>) {
    let counter = Arc::new(AtomicUsize::new(0));
    let plan = map(source(n), Arc::new(Count(counter.clone())), OnError::Raise);
    (plan, counter)
}

#[test]
fn backpressure_bounds_work_ahead_and_close_joins_threads() {
    let (plan, counter) = counted(1_000_000);
    let phys = lower(
        &plan,
        &LowerOptions {
            num_threads: 2,
            chunk_size: 10,
            max_chunk: 10,
            queue_depth: 4,
            ..Default::default()
        },
    )
    .unwrap();
    let mut ex = Execution::start(&phys, ExecOptions::default()).unwrap();
    ex.next().unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // Chunks of 10: the source's queue (4), the workers' hand-off and hands (2 + 2) and the
    // stage's ordered output window (6 per worker) — about 200 samples.
    let done = counter.load(Ordering::Relaxed);
    assert!(
        done < 500,
        "producers ran {done} samples ahead of a stalled consumer"
    );
    let t0 = Instant::now();
    assert!(ex.close(Duration::from_secs(5)), "threads did not exit");
    assert!(t0.elapsed() < Duration::from_secs(2));
}

/// With every stage in the consumer, a random-access source makes its items there too: no
/// thread, and nothing computed before the consumer asks for it.
#[test]
fn a_source_in_the_consumer_works_only_when_asked() {
    let (plan, counter) = counted(1_000_000);
    let opts = LowerOptions {
        in_consumer: true,
        chunk_size: 10,
        max_chunk: 10,
        ..Default::default()
    };
    let mut ex = Execution::start(&lower(&plan, &opts).unwrap(), ExecOptions::default()).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(counter.load(Ordering::Relaxed), 0);
    ex.next().unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        counter.load(Ordering::Relaxed),
        10,
        "one chunk, made on demand"
    );
    assert_eq!(ex.stats().stages[0].variant, "inline");
    assert!(ex.close(Duration::from_secs(1)));
}

#[test]
fn physical_plan_prints_and_serialises() {
    let plan = map(
        source(10),
        Arc::new(Jitter { fail_at: None }),
        OnError::Raise,
    );
    let b = Arc::new(LogicalPlan::Batch(
        BatchNode::try_new(plan, 2, false).unwrap(),
    ));
    let phys = lower(&b, &LowerOptions::default()).unwrap();
    let text = phys.to_string();
    assert!(
        text.contains("read+jitter") && text.contains("batch(2)"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&phys.to_json()).unwrap();
    assert_eq!(json["stages"][0]["kind"]["kind"], "chain");
}

#[test]
fn build_time_errors() {
    assert!(BatchNode::try_new(source(3), 0, false).is_err());
    assert!(ShardNode::try_new(source(3), 3, 2, true).is_err());
    let filtered = Arc::new(LogicalPlan::Map(
        MapNode::try_new(
            source(3),
            Arc::new(Jitter { fail_at: None }),
            ElemMode::Filter,
            OnError::Raise,
            None,
        )
        .unwrap(),
    ));
    let e = ShuffleNode::try_new(filtered, None).unwrap_err();
    assert!(e.to_string().contains("shuffle_buffer"));
}

/// Sleeps 1 ms per sample: a stage that needs more workers, whatever the machine's load.
#[derive(Debug)]
struct Slow;

impl Op for Slow {
    fn name(&self) -> &str {
        "slow"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"op": "slow"})
    }
    fn meta(&self) -> OpMeta {
        OpMeta::opaque(false)
    }
    fn apply(&self, s: Sample, _cx: &OpContext) -> Result<Emit> {
        std::thread::sleep(Duration::from_millis(1));
        Ok(Emit::One(s))
    }
}

#[test]
fn controller_adds_workers_to_a_starved_stage_without_changing_output() {
    let plan = map(source(1500), Arc::new(Slow), OnError::Raise);
    let opts = LowerOptions {
        num_threads: 1,
        chunk_size: 4,
        ..Default::default()
    };
    let phys = lower(&plan, &opts).unwrap();
    // A one-thread stage the controller may grow to four.
    assert_eq!(phys.stages[0].variant, Variant::Threads { threads: 1 });
    let ctl = exec::controller::ControllerOptions {
        interval: Duration::from_millis(50),
        max_workers: 4,
        patience: 1,
        cooldown: 1,
        target: None,
    };
    let mut ex = Execution::start(
        &phys,
        ExecOptions {
            controller: Some(ctl),
            ..Default::default()
        },
    )
    .unwrap();
    let ids: Vec<i64> = ex
        .by_ref()
        .map(|s| s.unwrap().get("id").unwrap().as_int().unwrap())
        .collect();
    assert_eq!(ids, (0..1500).collect::<Vec<_>>());
    let report = ex.stats();
    assert!(!report.controller.is_empty(), "no decision: {report}");
    let last = report.controller.last().unwrap();
    assert!(last.workers >= 3, "{:?}", report.controller);
    assert!(report.to_string().contains("controller at"));
    assert!(ex.close(Duration::from_secs(5)));
}

/// A stream (no random access) of `{id}` whose order depends on the epoch.
#[derive(Debug, Clone)]
struct EpochStream(u64);

impl Source for EpochStream {
    fn name(&self) -> &str {
        "epoch_stream"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"source": "epoch_stream", "n": self.0})
    }
    fn len(&self) -> Option<u64> {
        None
    }
    fn get(&self, _: u64) -> Result<Sample> {
        Err(Error::invalid("stream"))
    }
    fn stream_epoch(&self, seed: u64, epoch: u64) -> Result<SampleStream> {
        let (n, shift) = (self.0, seed + epoch);
        Ok(Box::new((0..n).map(move |i| {
            Ok(Sample::from_pairs([(
                "id",
                Value::Int(((i + shift) % n) as i64),
            )]))
        })))
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

#[test]
fn streams_resume_right_after_the_last_output_with_or_without_stages() {
    let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(EpochStream(
        5,
    )))));
    let repeated = Arc::new(LogicalPlan::Repeat(
        RepeatNode::try_new(src, Some(2)).unwrap(),
    ));
    let batched = Arc::new(LogicalPlan::Batch(
        BatchNode::try_new(repeated.clone(), 2, false).unwrap(),
    ));
    for plan in [repeated, batched] {
        let phys = lower(&plan, &LowerOptions::default()).unwrap();
        let start = |resume| {
            let opts = ExecOptions {
                seed: 1,
                resume,
                ..Default::default()
            };
            Execution::start(&phys, opts).unwrap()
        };
        let full: Vec<Sample> = start(None).map(|s| s.unwrap()).collect();
        // The epoch's order comes from stream_epoch(seed, epoch).
        if let Some(Value::Int(first)) = full[0].get("id") {
            assert_eq!((*first, full.len()), (1, 10));
        }
        for k in 0..full.len() {
            let mut run = start(None);
            for _ in 0..k {
                run.next().unwrap().unwrap();
            }
            let rest: Vec<Sample> = start(run.position()).map(|s| s.unwrap()).collect();
            assert_eq!(rest, full[k..], "resume after {k} outputs of {plan}");
        }
    }
}

/// Worker threads of a parallel stage run below the consumer's priority (Linux), so the
/// light threads that hand work on are not kept waiting behind them.
#[cfg(target_os = "linux")]
#[test]
fn parallel_workers_run_at_a_lower_priority_than_the_consumer() {
    fn nice(task: &std::path::Path) -> i64 {
        let stat = std::fs::read_to_string(task.join("stat")).unwrap_or_default();
        // Fields after the command name: state is field 3, nice field 19.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        rest.split_whitespace()
            .nth(16)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
    if std::env::var_os("SLUICE_WORKER_NICE").is_some() {
        return; // the environment chose a priority
    }
    let (plan, _) = counted(100_000);
    let phys = lower(&plan, &LowerOptions::default()).unwrap();
    let mut ex = Execution::start(&phys, ExecOptions::default()).unwrap();
    ex.next().unwrap().unwrap();
    let me = nice(std::path::Path::new("/proc/thread-self"));
    // Thread names are cut to 15 bytes: the chain's workers and dispatcher both read
    // "sluice-stage-1-"; the dispatcher hands work on and keeps the consumer's priority.
    let threads: Vec<(String, i64)> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter_map(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).ok()?;
            Some((comm.trim().to_string(), nice(&t.path())))
        })
        .collect();
    let lowered = |name: &str| threads.iter().filter(|(c, n)| c == name && *n > me).count();
    // (Other tests in this process run pipelines too.)
    assert!(lowered("sluice-stage-1-") >= 2, "{threads:?} vs {me}");
    assert_eq!(lowered("sluice-source"), 0, "{threads:?} vs {me}");
    assert!(ex.close(Duration::from_secs(5)));
}
